//! `docs/ARCHITECTURE.md` stays true: every file or folder its code map names (a backticked
//! path such as `console/work.rs` or `crates/common`) exists in the repository, and every type
//! or trait it names (a backticked `CamelCase` word) is declared in the workspace's sources.
//! A rename or a removal that leaves the map behind fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
