//! One definition of each id rule and of `Clock` (issue 51): the session-id and UUID rules live
//! in `crates/common/src/ids.rs` (with the `uuid_id!` macro every typed UUID id is made by),
//! and `Clock` in `crates/common/src/clock.rs`. Elsewhere a function named for one of the
//! rules may exist (a crate's own name for it, a typed wrapper), but its body only calls the
//! shared rule: at most [`WRAPPER_LINES`] lines, naming `ids::`, `common_` (an import's alias),
//! `is_valid(` or `uuid_text(`. A copy of a rule with a body of its own fails here.

/// Where the rules are defined.
pub const IDS: &str = "crates/common/src/ids.rs";
pub const CLOCK: &str = "crates/common/src/clock.rs";

/// Names of functions that decide an id rule.
const RULE_NAMES: &[&str] = &[
    "is_session_id",
    "valid_session_id",
    "is_uuid",
    "parse_uuid",
    "uuid_text",
    "uuid_id",
];

/// The longest body a wrapper of a rule may have.
const WRAPPER_LINES: usize = 3;

/// What a wrapper's body calls: the shared rule.
const SHARED: &[&str] = &["ids::", "common_", "is_valid(", "uuid_text("];

/// The rule functions `text` defines with a body of their own: `(line, name)`.
pub fn own_rules(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        let Some(name) = RULE_NAMES.iter().find(|n| t.contains(&format!("fn {n}("))) else {
            continue;
        };
        // The body: from the signature's line to the line that closes it, at its indent.
        let indent = line.len() - t.len();
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.len() > indent && l.trim() == "}" && l.len() - 1 == indent)
            .map_or(lines.len(), |p| i + 1 + p);
        let body = &lines[i + 1..end.min(lines.len())];
        let delegates = body.len() <= WRAPPER_LINES
            && body.iter().any(|l| SHARED.iter().any(|s| l.contains(s)));
        if !delegates {
            found.push((i + 1, (*name).to_owned()));
        }
    }
    found
}

/// How many times `text` declares `Clock` or the `uuid_id!` macro.
pub fn declarations(text: &str) -> (usize, usize) {
    let live = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>();
    (
        live.iter().filter(|l| l.contains("trait Clock")).count(),
        live.iter()
            .filter(|l| l.contains("macro_rules! uuid_id"))
            .count(),
    )
}

#[test]
fn the_rule_check_catches_what_it_is_for() {
    let wrapper = "pub fn is_session_id(s: &str) -> bool {\n    countersign_common::ids::is_session_id(s)\n}\n";
    assert!(own_rules(wrapper).is_empty(), "a wrapper");
    let copy = "fn is_uuid(s: &str) -> bool {\n    s.len() == 36\n        && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')\n}\n";
    assert_eq!(own_rules(copy), vec![(1, "is_uuid".to_owned())], "a copy");
    let long = "    fn parse_uuid(s: &str) -> Option<Uuid> {\n        let t = s.trim();\n        let u = t.to_lowercase();\n        let v = u.replace('-', \"\");\n        ids::parse_uuid(&v)\n    }\n";
    assert_eq!(
        own_rules(long).len(),
        1,
        "a body of its own, even calling the rule"
    );
    assert_eq!(
        declarations("pub trait Clock: Send {}\nmacro_rules! uuid_id {}\n// trait Clock\n"),
        (1, 1)
    );
}
