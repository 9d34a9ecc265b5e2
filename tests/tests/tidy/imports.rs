//! No import cycle between the files of a crate (issue 51). Each `.rs` file under
//! `crates/*/src` is a module (`a/b.rs` is `a::b`, `a/mod.rs` is `a`, `lib.rs` and `main.rs`
//! the root; test modules apart: a `#[cfg(test)] mod tests { … }` body and `tests.rs` files),
//! and each `crate::…` or `super::…` path a file writes is an arrow to the module it names (the
//! longest prefix of the path that is a file). Arrows between a module and its ancestors or
//! descendants do not count (a parent and its children are one structure). A set of files that
//! reach each other by arrows (a strongly connected component of more than one file) is an
//! import cycle, and fails here unless [`LEFT`] lists it (or a set holding it).

use std::collections::{BTreeMap, BTreeSet};

/// A module's path from its crate's root (empty for the root).
type Module = Vec<String>;

/// The cycles left for now: a crate, the files of the cycle (relative to its `src`), and why.
/// A cycle of these files, or of some of them, passes; a new cycle, or a file joining one of
/// these, fails. None is left (issue 51 broke the last six).
const LEFT: &[(&str, &[&str], &str)] = &[];

/// The module a file is (`path` relative to `src`), or none for a test module's file.
fn module_of(path: &str) -> Option<Module> {
    let mut parts: Module = path
        .strip_suffix(".rs")?
        .split('/')
        .map(String::from)
        .collect();
    if parts
        .last()
        .is_some_and(|p| ["mod", "lib", "main"].contains(&p.as_str()))
    {
        parts.pop();
    }
    (parts.last().map(String::as_str) != Some("tests")).then_some(parts)
}

/// `text` up to its `#[cfg(test)] mod tests {` (the test module is the file's last item).
fn without_tests(text: &str) -> &str {
    for (at, _) in text.match_indices("#[cfg(test)]") {
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if rest
            .strip_prefix("mod tests")
            .is_some_and(|r| r.trim_start().starts_with('{'))
        {
            return &text[..at];
        }
    }
    text
}

fn word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every `crate::a::b` and `super::a::b` path in `text`: whether it starts at `super`, and its
/// words after the first (`use crate::a::{B, C}` is `a`; comments count too, so a doc link
/// is an arrow).
fn paths(text: &str) -> Vec<(bool, Vec<&str>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let kind = ["crate", "super"].into_iter().find(|k| rest.starts_with(k));
        let starts = text[..at].chars().next_back().is_none_or(|c| !word(c));
        let (Some(kind), true) = (kind, starts) else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut end = at + kind.len();
        let mut parts = Vec::new();
        while let Some(next) = text[end..].strip_prefix("::") {
            let len = next.find(|c: char| !word(c)).unwrap_or(next.len());
            if len == 0 {
                break;
            }
            parts.push(&next[..len]);
            end += 2 + len;
        }
        if parts.is_empty() {
            at += kind.len();
        } else {
            out.push((kind == "super", parts));
            at = end;
        }
    }
    out
}

/// The modules `module`'s file (`text`) has arrows to, among `modules`.
fn arrows(module: &Module, text: &str, modules: &BTreeMap<Module, String>) -> BTreeSet<Module> {
    let mut out = BTreeSet::new();
    for (is_super, parts) in paths(without_tests(text)) {
        let mut path: Module = Vec::new();
        let mut parts = parts.as_slice();
        if is_super {
            path = module[..module.len().saturating_sub(1)].to_vec();
            while let Some((&"super", more)) = parts.split_first() {
                path.pop();
                parts = more;
            }
        }
        path.extend(parts.iter().map(|p| p.to_string()));
        let Some(to) = (0..=path.len())
            .rev()
            .map(|n| &path[..n])
            .find(|p| modules.contains_key(*p))
        else {
            continue;
        };
        // Itself, an ancestor or a descendant: one structure.
        if to.starts_with(module) || module.starts_with(to) {
            continue;
        }
        out.insert(to.to_vec());
    }
    out
}

/// Tarjan's strongly connected components over `edges`, those of more than one node.
struct Components<'a> {
    edges: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    stack: Vec<usize>,
    on_stack: Vec<bool>,
    next: usize,
    found: Vec<Vec<usize>>,
}

impl Components<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in self.edges[v].iter() {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                self.found.push(component);
            }
        }
    }
}

/// The import cycles among a crate's files (`(path relative to src, text)`), each as its
/// files' paths.
fn cycles(files: &[(String, String)]) -> Vec<BTreeSet<String>> {
    let mut modules = BTreeMap::new();
    for (path, _) in files {
        if let Some(m) = module_of(path) {
            modules.entry(m).or_insert_with(|| path.clone());
        }
    }
    let texts: BTreeMap<&String, &String> = files.iter().map(|(p, t)| (p, t)).collect();
    let nodes: Vec<&Module> = modules.keys().collect();
    let edges: Vec<Vec<usize>> = nodes
        .iter()
        .map(|m| {
            let text = texts.get(&modules[*m]).map_or("", |t| t.as_str());
            arrows(m, text, &modules)
                .iter()
                .filter_map(|to| nodes.iter().position(|n| *n == to))
                .collect()
        })
        .collect();
    let mut c = Components {
        edges: &edges,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        stack: Vec::new(),
        on_stack: vec![false; nodes.len()],
        next: 0,
        found: Vec::new(),
    };
    for v in 0..nodes.len() {
        if c.index[v].is_none() {
            c.visit(v);
        }
    }
    c.found
        .iter()
        .map(|comp| comp.iter().map(|&v| modules[nodes[v]].clone()).collect())
        .collect()
}

/// The cycles of `krate` that `left` does not list (each within one listed set).
fn unlisted(
    krate: &str,
    found: Vec<BTreeSet<String>>,
    left: &[(&str, &[&str], &str)],
) -> Vec<String> {
    found
        .into_iter()
        .filter(|cycle| {
            !left.iter().any(|(k, files, _)| {
                *k == krate && cycle.iter().all(|f| files.contains(&f.as_str()))
            })
        })
        .map(|cycle| format!("crates/{krate}/src: {cycle:?}"))
        .collect()
}

#[test]
fn no_import_cycle_between_the_files_of_a_crate() {
    let root = super::root();
    let crates = std::fs::read_dir(root.join("crates")).map_or_else(
        |_| Vec::new(),
        |d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        },
    );
    let mut walked = 0;
    let mut found = Vec::new();
    for krate in crates {
        let src = root.join("crates").join(&krate).join("src");
        let mut all = Vec::new();
        super::files(&src, &src, &mut all);
        let files: Vec<(String, String)> = all
            .into_iter()
            .filter(|f| f.ends_with(".rs"))
            .map(|f| {
                let text = std::fs::read_to_string(src.join(&f)).unwrap_or_default();
                (f, text)
            })
            .collect();
        walked += files.len();
        found.extend(unlisted(&krate, cycles(&files), LEFT));
    }
    assert!(
        walked > 100,
        "the walk found only {walked} files under {}",
        root.display()
    );
    assert!(
        found.is_empty(),
        "import cycles between files (move the item that makes the arrow back to where it \
         belongs, or to a small module both use):\n{found:#?}"
    );
}

#[test]
fn the_import_cycle_check_catches_what_it_is_for() {
    let crate_of = |files: &[(&str, &str)]| -> Vec<(String, String)> {
        files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    };
    let planted = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::x::{X, Y};\n"),
        ("b/mod.rs", "mod x;\npub struct B;\n"),
        ("b/x.rs", "/// See [`super::super::a::A`].\npub struct X;\n"),
        ("c.rs", "use crate::a::A;\n"),
    ]);
    let set = |files: &[&str]| files.iter().map(|f| f.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(cycles(&planted), vec![set(&["a.rs", "b/x.rs"])]);

    let apart = crate_of(&[
        ("lib.rs", "use crate::a::A;\n"),
        ("a/mod.rs", "use crate::a::inner::I;\nuse super::b;\n"),
        ("a/inner.rs", "use super::A;\nuse crate::A;\n"),
        (
            "b.rs",
            "// mycrate::c::C, crates::c, pub(crate)\n#[cfg(test)]\nmod tests {\n    use crate::c::C;\n}\n",
        ),
        ("c.rs", "use crate::a::A;\n"),
    ]);
    assert_eq!(
        cycles(&apart),
        Vec::<BTreeSet<String>>::new(),
        "parents and children, test modules and lookalike words are not cycles"
    );
    let mut joined = apart.clone();
    joined[3].1 = "use crate::c::C;\n".into();
    assert_eq!(cycles(&joined), vec![set(&["a/mod.rs", "b.rs", "c.rs"])]);
    assert_eq!(module_of("a/tests.rs"), None);
    assert_eq!(module_of("a/mod.rs"), Some(vec!["a".to_owned()]));
    assert_eq!(module_of("main.rs"), Some(vec![]));

    let left: &[(&str, &[&str], &str)] = &[("k", &["a.rs", "b.rs", "c.rs"], "why")];
    assert!(unlisted("k", vec![set(&["a.rs", "b.rs"])], left).is_empty());
    assert_eq!(unlisted("k", vec![set(&["a.rs", "d.rs"])], left).len(), 1);
    assert_eq!(unlisted("j", vec![set(&["a.rs", "b.rs"])], left).len(), 1);
}
