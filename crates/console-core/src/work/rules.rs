//! Input rules the spec writes out in full.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// Characters, as Unicode scalar values.
pub fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069).
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Noncharacters: U+FDD0–U+FDEF and the last two code points of every plane.
fn is_noncharacter(c: char) -> bool {
    let u = c as u32;
    (0xFDD0..=0xFDEF).contains(&u) || (u & 0xFFFE) == 0xFFFE
}

/// Reserved (unassigned) default-ignorable code points (Unicode's DerivedCoreProperties).
fn is_reserved_default_ignorable(c: char) -> bool {
    let u = c as u32;
    matches!(u, 0x2065 | 0xFFF0..=0xFFF8 | 0xE0000 | 0xE0002..=0xE001F | 0xE0080..=0xE00FF | 0xE01F0..=0xE0FFF)
}

/// The spec's visible character: a letter, number, punctuation or symbol other than the
/// fillers U+115F, U+1160, U+3164, U+FFA0 and U+2800, or an unassigned code point other than
/// noncharacters and reserved default-ignorables. Combining marks, format characters,
/// private-use characters and whitespace are not visible.
pub fn is_visible(c: char) -> bool {
    if matches!(
        c,
        '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{2800}'
    ) {
        return false;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Letter
        | GeneralCategoryGroup::Number
        | GeneralCategoryGroup::Punctuation
        | GeneralCategoryGroup::Symbol => true,
        GeneralCategoryGroup::Other => {
            c.general_category() == unicode_properties::GeneralCategory::Unassigned
                && !is_noncharacter(c)
                && !is_reserved_default_ignorable(c)
        }
        GeneralCategoryGroup::Mark | GeneralCategoryGroup::Separator => false,
    }
}

/// Why a project name is refused, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    Control,
    Invisible,
    TooLong,
}

/// The project-name rule: not empty, no control character or bidi control, a visible
/// character at least, at most 80 characters.
pub fn check_project_name(name: &str) -> Result<(), NameProblem> {
    if name.is_empty() {
        return Err(NameProblem::Empty);
    }
    if name.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(NameProblem::Control);
    }
    if !name.chars().any(is_visible) {
        return Err(NameProblem::Invisible);
    }
    if chars(name) > 80 {
        return Err(NameProblem::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_characters_as_the_spec_writes_them() {
        for c in ['a', 'Ж', '7', '!', '€', '漢', '\u{0378}'] {
            assert!(is_visible(c), "{c:?}");
        }
        for c in [
            ' ',
            '\u{00A0}',
            '\u{0301}',
            '\u{200B}',
            '\u{E000}',
            '\u{115F}',
            '\u{1160}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{2800}',
            '\u{FDD0}',
            '\u{FFFF}',
            '\u{2065}',
            '\u{E0002}',
        ] {
            assert!(!is_visible(c), "{c:?}");
        }
    }

    #[test]
    fn project_names() {
        assert_eq!(check_project_name("Payments"), Ok(()));
        assert_eq!(check_project_name(""), Err(NameProblem::Empty));
        assert_eq!(check_project_name("a\u{0007}"), Err(NameProblem::Control));
        assert_eq!(check_project_name("a\u{202E}b"), Err(NameProblem::Control));
        assert_eq!(check_project_name("a\u{2068}b"), Err(NameProblem::Control));
        assert_eq!(
            check_project_name(" \u{3164}\u{200B}"),
            Err(NameProblem::Invisible)
        );
        assert_eq!(
            check_project_name(&"x".repeat(81)),
            Err(NameProblem::TooLong)
        );
        assert_eq!(check_project_name(&"é".repeat(80)), Ok(()));
    }
}
