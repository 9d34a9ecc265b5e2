//! The `:::ask` block's markdown form:
//!
//! ```text
//! :::ask id=<ask id> state=<state>
//! <the question, markdown, one or more blocks>
//!
//! - (<option id>) <label>
//! - (<option id>) <label>
//! :::
//! ```
//!
//! The directive line carries the ask's id and state as `key=value` attributes (values
//! `[A-Za-z0-9_-]`); the options, when there are any, are the last block: a bullet list whose
//! every item is `(<option id>) <label>` on one line. The fence is three colons, or one more
//! than the longest run of colons opening a line of the question.

use std::collections::BTreeMap;

/// One option of an ask block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskOption {
    pub id: String,
    pub label: String,
}

/// What an `:::ask` block says. `attributes` holds any other `key=value` of the directive
/// line (kept when the block is written back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskBlock {
    pub id: String,
    pub state: String,
    pub question: String,
    pub options: Vec<AskOption>,
    pub attributes: BTreeMap<String, String>,
}

/// Why an ask cannot be written as a block.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AskFormatError {
    #[error("an ask id or state is 1 to 64 of A-Z a-z 0-9 _ -")]
    Attribute,
    #[error("an option id is 1 to 32 of A-Z a-z 0-9 _ -")]
    OptionId,
}

fn attribute_value(s: &str, max: usize) -> bool {
    (1..=max).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn attribute_key(s: &str) -> bool {
    attribute_value(s, 32) && s != "ask"
}

/// The ask block's markdown (no final LF).
pub fn write_ask(ask: &AskBlock) -> Result<String, AskFormatError> {
    if !attribute_value(&ask.id, 64) || !attribute_value(&ask.state, 64) {
        return Err(AskFormatError::Attribute);
    }
    if ask.options.iter().any(|o| !attribute_value(&o.id, 32)) {
        return Err(AskFormatError::OptionId);
    }
    let mut attrs = format!("id={} state={}", ask.id, ask.state);
    for (k, v) in &ask.attributes {
        if k != "id" && k != "state" {
            if !attribute_key(k) || !attribute_value(v, 64) {
                return Err(AskFormatError::Attribute);
            }
            attrs.push_str(&format!(" {k}={v}"));
        }
    }
    let question = crate::doc::parse::normalize_newlines(ask.question.trim()).into_owned();
    let longest = question
        .lines()
        .map(|l| l.trim_start().bytes().take_while(|&b| b == b':').count())
        .max()
        .unwrap_or(0);
    let fence = ":".repeat(3.max(longest + 1));
    let mut out = format!("{fence}ask {attrs}\n");
    if !question.is_empty() {
        out.push_str(&question);
        out.push('\n');
    }
    if !ask.options.is_empty() {
        if !question.is_empty() {
            out.push('\n');
        }
        for o in &ask.options {
            let label = o.label.split_whitespace().collect::<Vec<_>>().join(" ");
            out.push_str(&format!("- ({}) {label}\n", o.id));
        }
    }
    out.push_str(&fence);
    Ok(out)
}

/// Reads an `:::ask` block's markdown (as [`write_ask`] writes it; the lines of a nested block
/// may carry indentation, which is dropped). None when it is not an ask block.
pub fn read_ask(markdown: &str) -> Option<AskBlock> {
    let markdown = crate::doc::parse::normalize_newlines(markdown);
    let mut lines = markdown.trim_end().lines();
    let first = lines.next()?.trim();
    let colons = first.bytes().take_while(|&b| b == b':').count();
    if colons < 3 {
        return None;
    }
    let info = first.get(colons..)?.trim();
    let mut words = info.split_whitespace();
    if words.next()? != "ask" {
        return None;
    }
    let mut attributes = BTreeMap::new();
    for w in words {
        if let Some((k, v)) = w.split_once('=') {
            attributes.insert(k.to_owned(), v.to_owned());
        }
    }
    let mut body: Vec<&str> = lines.collect();
    if body
        .last()
        .is_some_and(|l| l.trim().bytes().all(|b| b == b':') && l.trim().len() >= colons)
    {
        body.pop();
    }
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let body: Vec<&str> = body
        .iter()
        .map(|l| {
            l.get(indent.min(l.len() - l.trim_start().len())..)
                .unwrap_or("")
        })
        .collect();
    // Options: the trailing run of `- (id) label` lines.
    let mut end = body.len();
    while end > 0 && body[end - 1].trim().is_empty() {
        end -= 1;
    }
    let mut options = Vec::new();
    let mut start = end;
    while start > 0 {
        match option_line(body[start - 1]) {
            Some(o) => {
                options.push(o);
                start -= 1;
            }
            None => break,
        }
    }
    options.reverse();
    let question = body[..start].join("\n").trim().to_owned();
    let id = attributes.remove("id").unwrap_or_default();
    let state = attributes.remove("state").unwrap_or_default();
    Some(AskBlock {
        id,
        state,
        question,
        options,
        attributes,
    })
}

fn option_line(line: &str) -> Option<AskOption> {
    let rest = line.trim().strip_prefix("- (")?;
    let (id, label) = rest.split_once(')')?;
    if !attribute_value(id, 32) {
        return None;
    }
    Some(AskOption {
        id: id.to_owned(),
        label: label.trim().to_owned(),
    })
}
