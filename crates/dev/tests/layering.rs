//! The servers do not depend on each other: dev mode, which runs both in one process, is this
//! crate's, above both (issue 51). The console's server may not name the broker's (nor its core)
//! in any of its dependency tables, tests' included; the broker's server may not name the
//! console's crates, nor this one, among what it is built from (its tests still read the
//! console's configuration and witness, which is no cycle now that the console's server stands
//! alone).

use std::path::Path;

/// Every dependency the manifest of `crate_dir` names, with the table it is in
/// (`dependencies`, `dev-dependencies`, `build-dependencies`, also under `[target.*]`).
fn dependencies(crate_dir: &str) -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let manifest: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
    let mut tables = vec![manifest.clone()];
    if let Some(toml::Value::Table(targets)) = manifest.get("target") {
        tables.extend(targets.values().filter_map(|t| t.as_table().cloned()));
    }
    let mut out = Vec::new();
    for t in &tables {
        for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
            if let Some(toml::Value::Table(deps)) = t.get(kind) {
                out.extend(deps.keys().map(|name| (kind.to_owned(), name.clone())));
            }
        }
    }
    out
}

#[test]
fn the_consoles_server_does_not_depend_on_the_brokers() {
    let deps = dependencies("console-http");
    assert!(
        deps.iter()
            .any(|(_, name)| name == "countersign-console-core"),
        "the walk found none of console-http's dependencies: {deps:?}"
    );
    let upward: Vec<_> = deps
        .iter()
        .filter(|(_, name)| {
            [
                "countersign-broker-http",
                "countersign-broker-core",
                "countersign-dev",
            ]
            .contains(&name.as_str())
        })
        .collect();
    assert!(
        upward.is_empty(),
        "console-http depends on {upward:?}: dev mode and whatever needs both servers belong in countersign-dev"
    );
}

#[test]
fn the_brokers_server_is_built_without_the_console() {
    let deps = dependencies("broker-http");
    assert!(
        deps.iter()
            .any(|(_, name)| name == "countersign-broker-core"),
        "the walk found none of broker-http's dependencies: {deps:?}"
    );
    let upward: Vec<_> = deps
        .iter()
        .filter(|(kind, name)| {
            kind != "dev-dependencies"
                && (name.starts_with("countersign-console") || name == "countersign-dev")
        })
        .collect();
    assert!(upward.is_empty(), "broker-http depends on {upward:?}");
}
