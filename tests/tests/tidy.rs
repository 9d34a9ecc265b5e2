//! `docs/ARCHITECTURE.md` stays true: every file or folder its code map names (a backticked
//! path such as `console/work.rs` or `crates/common`) exists in the repository, and every type
//! or trait it names (a backticked `CamelCase` word) is declared in the workspace's sources.
//! A rename or a removal that leaves the map behind fails here.
//!
//! And the sources keep their sizes (issue 31): no source file over [`FILE_LINES`] lines, no
//! function over [`FUNCTION_LINES`] without a `// Long: …` line above it that says why.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[path = "tidy/imports.rs"]
mod imports;
#[path = "tidy/rules.rs"]
mod rules;

/// Backticked words the map names that are not the workspace's own (crates it uses, or
/// prose), each with why.
const NOT_OURS: &[&str] = &[
    // axum's and sqlx's types the map refers to.
    "Router",
    "Any",
    // Tokio's and the standard library's.
    "Semaphore",
    "Arc",
    "Mutex",
    // governor's clock trait, which the broker's limits implement.
    "GovernorClock",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every file and folder under the repository's tracked parts (not `target/` or dot folders),
/// as paths relative to the root with `/`.
fn files(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
        if path.is_dir() {
            files(&path, root, out);
        }
    }
}

/// The backticked spans of `text`.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn looks_like_path(s: &str) -> bool {
    let file = [
        ".rs", ".md", ".toml", ".py", ".sh", ".html", ".js", ".css", ".sql",
    ]
    .iter()
    .any(|ext| s.ends_with(ext));
    let folder = s.starts_with("crates/") || s.starts_with("tests/") || s.starts_with("docs/");
    (file || folder)
        && !s.contains(' ')
        && !s.contains('<')
        && !s.contains('*')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
}

/// A path of the map exists when some file or folder is it or ends with it (the map often
/// names a file relative to the crate it describes).
fn exists(path: &str, all: &[String]) -> bool {
    let path = path.trim_end_matches('/');
    all.iter()
        .any(|f| f == path || f.ends_with(&format!("/{path}")))
}

/// A `CamelCase` word alone: a type, trait or enum name (not a path, a call or a macro).
fn type_name(s: &str) -> Option<&str> {
    let first = s.chars().next()?;
    (first.is_ascii_uppercase()
        && s.len() > 2
        && s.chars().all(|c| c.is_ascii_alphanumeric())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().skip(1).any(|c| c.is_ascii_uppercase()))
    .then_some(s)
}

fn declared(name: &str, sources: &str) -> bool {
    ["struct", "enum", "trait", "type", "union"]
        .iter()
        .any(|kw| {
            [" ", "<", "(", ";", ":", "\n", " {"]
                .iter()
                .any(|after| sources.contains(&format!("{kw} {name}{after}")))
        })
}

#[test]
fn the_code_map_names_only_what_exists() {
    let root = root();
    let map = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md"))
        .unwrap_or_else(|e| panic!("docs/ARCHITECTURE.md: {e}"));
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    assert!(
        all.iter().any(|f| f == "crates/broker-core/src/lib.rs"),
        "the repository walk found no sources under {}",
        root.display()
    );
    let sources: String = all
        .iter()
        .filter(|f| f.ends_with(".rs"))
        .filter_map(|f| std::fs::read_to_string(root.join(f)).ok())
        .collect::<Vec<_>>()
        .join("\n");

    let mut missing_paths = BTreeSet::new();
    let mut missing_types = BTreeSet::new();
    for span in spans(&map) {
        if looks_like_path(span) {
            if !exists(span, &all) {
                missing_paths.insert(span);
            }
        } else if let Some(name) = type_name(span)
            && !NOT_OURS.contains(&name)
            && !declared(name, &sources)
        {
            missing_types.insert(name);
        }
    }
    assert!(
        missing_paths.is_empty() && missing_types.is_empty(),
        "docs/ARCHITECTURE.md names what the repository no longer has:\n  paths: {missing_paths:?}\n  types: {missing_types:?}"
    );
}

#[test]
fn the_checks_catch_what_they_are_for() {
    // The checks themselves: a path or a type that is not there is found.
    let all: Vec<String> = ["crates/a", "crates/a/src", "crates/a/src/console/work.rs"]
        .map(String::from)
        .into();
    assert!(exists("console/work.rs", &all));
    assert!(exists("crates/a", &all));
    assert!(!exists("console/gone.rs", &all));
    assert!(!exists("work.rs.old", &all));
    assert!(looks_like_path("console/work.rs"));
    assert!(!looks_like_path("GET /api/v1"));
    assert_eq!(type_name("WorkTx"), Some("WorkTx"));
    assert_eq!(type_name("Error"), None, "a single capital word is prose");
    assert_eq!(type_name("ISSUE_CHANGED"), None);
    assert!(declared("WorkTx", "pub trait WorkTx: Send {"));
    assert!(!declared("GoneTx", "pub trait WorkTx: Send {"));
}

/// A source file (outside tests) longer than this is split by theme.
const FILE_LINES: usize = 1_000;

/// A function longer than this (the style's "about 80") says why on a `// Long:` line among
/// the six lines above it.
const FUNCTION_LINES: usize = 90;

/// The name a line declares a function by (`pub(crate) async fn name(`), if it does.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The functions of a source file (up to its `#[cfg(test)]` module) longer than `limit` lines
/// with no `// Long:` reason above them: each one's name, first line and length. A body ends
/// at the first `}` line at its `fn`'s indentation (rustfmt's layout); a body that opens and
/// closes on one line is that line.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let Some(name) = fn_name(line) else { continue };
        let Some(open) = (i..lines.len())
            .find(|&j| lines[j].contains('{') || lines[j].trim_end().ends_with(';'))
        else {
            continue;
        };
        if !lines[open].contains('{') {
            continue; // a declaration without a body
        }
        let one_line = lines[open].matches('{').count() == lines[open].matches('}').count();
        let close = if one_line {
            open
        } else {
            (open + 1..lines.len())
                .find(|&k| {
                    indent(lines[k]) == indent(line) && lines[k].trim_start().starts_with('}')
                })
                .unwrap_or(lines.len() - 1)
        };
        let length = close - i + 1;
        let reason = lines[i.saturating_sub(6)..i]
            .iter()
            .any(|l| l.trim_start().starts_with("// Long:"));
        if length > limit && !reason {
            out.push((name.to_owned(), i + 1, length));
        }
    }
    out
}

/// The crates' sources: `crates/*/src/**/*.rs`, not a test module kept in its own file
/// (`tests.rs`, `proptests.rs`): the test suites, and this e2e crate's harness in `tests/src`,
/// are read by test name and are not held to it.
fn library_sources(all: &[String]) -> Vec<&String> {
    all.iter()
        .filter(|f| {
            f.ends_with(".rs") && !f.ends_with("/tests.rs") && !f.ends_with("/proptests.rs")
        })
        .filter(|f| f.starts_with("crates/") && f.contains("/src/"))
        .collect()
}

#[test]
fn sources_keep_their_sizes() {
    let root = root();
    let mut all = Vec::new();
    files(&root.join("crates"), &root, &mut all);
    let sources = library_sources(&all);
    assert!(
        sources.len() > 100,
        "the walk found only {} source files under {}",
        sources.len(),
        root.display()
    );
    let mut long_files = Vec::new();
    let mut long_fns = Vec::new();
    for f in sources {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        let lines = text.lines().count();
        if lines > FILE_LINES {
            long_files.push(format!("{f} ({lines} lines)"));
        }
        for (name, at, length) in long_functions(&text, FUNCTION_LINES) {
            long_fns.push(format!("{f}:{at} {name} ({length} lines)"));
        }
    }
    assert!(
        long_files.is_empty() && long_fns.is_empty(),
        "split these by theme or into named steps, or say why on a `// Long:` line above the function:\n  files over {FILE_LINES} lines: {long_files:#?}\n  functions over {FUNCTION_LINES} lines: {long_fns:#?}"
    );
}

#[test]
fn the_size_checks_catch_what_they_are_for() {
    let body = "    let x = 1;\n".repeat(FUNCTION_LINES);
    let long = format!("impl A {{\n    pub(crate) async fn grown(&self) {{\n{body}    }}\n}}\n");
    assert_eq!(
        long_functions(&long, FUNCTION_LINES),
        vec![("grown".to_owned(), 2, FUNCTION_LINES + 2)]
    );
    let said = format!("// Long: a script, top to bottom.\nfn grown() {{\n{body}}}\n");
    assert!(long_functions(&said, FUNCTION_LINES).is_empty());
    let short = format!("fn a() -> u8 {{ 1 }}\nfn b() {{\n{body}}}\n");
    assert_eq!(
        long_functions(&short, FUNCTION_LINES),
        vec![("b".to_owned(), 2, FUNCTION_LINES + 2)],
        "a one-line body ends on its line"
    );
    let tested = format!("#[cfg(test)]\nmod tests {{\n    fn grown() {{\n{body}    }}\n}}\n");
    assert!(long_functions(&tested, FUNCTION_LINES).is_empty());
    assert_eq!(fn_name("    pub async fn run("), Some("run"));
    assert_eq!(fn_name("    let f = |x| x;"), None);
    assert_eq!(fn_name("    // fn not_one()"), None);
}

/// The console's unit of work (issue 51): the one file that publishes what a transaction did
/// once it committed. No other code publishes events or documents by hand.
const UNIT_OF_WORK: &str = "crates/console-core/src/console/unit.rs";

/// The calls that publish after a commit, which only the unit of work makes.
const PUBLISHING: &[&str] = &["event_committed(", "document_committed("];

/// The lines of `text` that call a publishing function (comments aside), each with its number.
fn publishing_calls(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| PUBLISHING.iter().any(|p| l.contains(p)))
        .map(|(i, l)| (i + 1, l.trim().to_owned()))
        .collect()
}

#[test]
fn only_the_unit_of_work_publishes_commits() {
    let root = root();
    let mut all = Vec::new();
    files(&root.join("crates"), &root, &mut all);
    files(&root.join("tests"), &root, &mut all);
    let sources: Vec<&String> = all.iter().filter(|f| f.ends_with(".rs")).collect();
    assert!(
        sources.iter().any(|f| f.as_str() == UNIT_OF_WORK),
        "the unit of work is not at {UNIT_OF_WORK}"
    );
    let mut outside = Vec::new();
    for f in sources {
        if f.as_str() == UNIT_OF_WORK || f.as_str() == "tests/tests/tidy.rs" {
            continue;
        }
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        for (at, line) in publishing_calls(&text) {
            outside.push(format!("{f}:{at} {line}"));
        }
    }
    assert!(
        outside.is_empty(),
        "publishing after a commit is the unit of work's ({UNIT_OF_WORK}: `transact!` commits, \
         then publishes every event the transaction appended; a body keeps documents with \
         `after.keep_document`), never a caller's:\n{outside:#?}"
    );
}

#[test]
fn the_publishing_check_catches_what_it_is_for() {
    let by_hand = "        })?;\n        self.console.event_committed(event.id);\n";
    assert_eq!(
        publishing_calls(by_hand),
        vec![(2, "self.console.event_committed(event.id);".to_owned())]
    );
    let docs = "    self.console.documents().document_committed(&events, kept);\n";
    assert_eq!(publishing_calls(docs).len(), 1);
    assert!(publishing_calls("    /// `event_committed(id)` wakes the streams.\n").is_empty());
}

/// Whether a broker-http source builds the broker's answers, and so may not use `json!`: its
/// routes (`routes.rs`, `routes/…`), its wire shapes (`wire.rs`, `wire/…`) and its refusals
/// (`error.rs`). Every answer is a type of `countersign_common::wire` (issue 51), the one its
/// readers read with, and its schema is the OpenAPI document's.
fn builds_answers(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("crates/broker-http/src/") else {
        return false;
    };
    ["routes", "wire"]
        .iter()
        .any(|m| rest == format!("{m}.rs") || rest.starts_with(&format!("{m}/")))
        || rest == "error.rs"
}

/// The lines (from 1) where `text` uses `json!` outside comments and its test module.
fn json_answers(text: &str) -> Vec<usize> {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//") && l.contains("json!"))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn the_brokers_answers_are_types_not_json_macros() {
    let root = root();
    let mut all = Vec::new();
    files(&root.join("crates/broker-http"), &root, &mut all);
    let answering: Vec<&String> = all
        .iter()
        .filter(|f| f.ends_with(".rs") && builds_answers(f))
        .collect();
    assert!(
        answering.len() >= 3,
        "found only {answering:?} under crates/broker-http/src"
    );
    let found: Vec<String> = answering
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
            json_answers(&text)
                .into_iter()
                .map(move |line| format!("{f}:{line}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "answer with a type of countersign_common::wire (the one its readers read with), not json!: {found:#?}"
    );
}

#[test]
fn the_json_answer_check_catches_what_it_is_for() {
    assert!(builds_answers("crates/broker-http/src/routes.rs"));
    assert!(builds_answers("crates/broker-http/src/routes/console.rs"));
    assert!(builds_answers("crates/broker-http/src/wire.rs"));
    assert!(builds_answers("crates/broker-http/src/error.rs"));
    assert!(!builds_answers("crates/broker-http/src/openapi.rs"));
    assert!(!builds_answers("crates/console-http/src/routes.rs"));
    let planted = "fn ok() -> Response {\n    ok(serde_json::json!({ \"state\": s }))\n}\n";
    assert_eq!(json_answers(planted), vec![2]);
    let said =
        "// not json!({}) but a type\nfn ok() {}\n#[cfg(test)]\nmod tests {\n    json!({});\n}\n";
    assert!(json_answers(said).is_empty(), "comments and tests may");
}

#[test]
fn each_id_rule_and_the_clock_are_defined_once() {
    let root = root();
    let mut all = Vec::new();
    files(&root.join("crates"), &root, &mut all);
    let sources: Vec<&String> = all
        .iter()
        .filter(|f| f.ends_with(".rs") && f.contains("/src/"))
        .collect();
    let (mut clocks, mut macros, mut copies) = (Vec::new(), Vec::new(), Vec::new());
    for f in sources {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
        let (clock, uuid_id) = rules::declarations(&text);
        clocks.extend(std::iter::repeat_n(f.clone(), clock));
        macros.extend(std::iter::repeat_n(f.clone(), uuid_id));
        if f.as_str() != rules::IDS {
            for (line, name) in rules::own_rules(&text) {
                copies.push(format!("{f}:{line} {name}"));
            }
        }
    }
    assert_eq!(
        clocks,
        [rules::CLOCK],
        "`trait Clock` is declared once, in common"
    );
    assert_eq!(
        macros,
        [rules::IDS],
        "`uuid_id!` is defined once, in common"
    );
    assert!(
        copies.is_empty(),
        "an id rule with a body of its own (call countersign_common::ids instead): {copies:#?}"
    );
}
