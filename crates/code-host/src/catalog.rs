//! Backstage descriptors in `catalog-info.yaml` (multi-document YAML; protocol §9): each
//! `Component` is a node with id `metadata.name` and parent `spec.subcomponentOf`, else
//! `spec.system`. A `System` that a component names becomes a node too, so the tree has its
//! roots. Entity references (`component:default/checkout`) are read as their name.

use serde::Deserialize;

/// A node of the component tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    pub id: String,
    /// `metadata.title`, else the id.
    pub name: String,
    pub parent: Option<String>,
    /// `Component` or `System`.
    pub kind: String,
}

#[derive(Debug, Deserialize)]
struct Doc {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    spec: Option<Spec>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    subcomponent_of: Option<String>,
    #[serde(default)]
    system: Option<String>,
}

/// The name an entity reference names: `[kind:][namespace/]name`.
fn ref_name(r: &str) -> String {
    let r = r.trim();
    let r = r.split_once(':').map(|(_, n)| n).unwrap_or(r);
    let r = r.rsplit_once('/').map(|(_, n)| n).unwrap_or(r);
    r.to_owned()
}

/// The tree's nodes, in the file's order; an error names what does not parse.
pub fn parse(text: &str) -> Result<Vec<Entity>, String> {
    let docs: Vec<Doc> = serde_saphyr::from_multiple(text)
        .map_err(|e| format!("catalog-info.yaml does not parse: {e}"))?;
    let mut components = Vec::new();
    let mut systems = Vec::new();
    for (i, d) in docs.into_iter().enumerate() {
        let kind = d.kind.unwrap_or_default();
        if kind != "Component" && kind != "System" {
            continue;
        }
        let meta = d
            .metadata
            .ok_or_else(|| format!("document {} ({kind}) has no metadata", i + 1))?;
        let id = meta
            .name
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| format!("document {} ({kind}) has no metadata.name", i + 1))?;
        let name = meta.title.unwrap_or_else(|| id.clone());
        let parent = d.spec.and_then(|s| {
            s.subcomponent_of
                .or(s.system)
                .map(|p| ref_name(&p))
                .filter(|p| !p.is_empty())
        });
        let e = Entity {
            id,
            name,
            parent: if kind == "System" { None } else { parent },
            kind: kind.clone(),
        };
        if kind == "System" {
            systems.push(e);
        } else {
            components.push(e);
        }
    }
    let mut out: Vec<Entity> = Vec::new();
    // Systems a component names, first (roots), then the components.
    for s in systems {
        let named = components
            .iter()
            .any(|c| c.parent.as_deref() == Some(s.id.as_str()));
        if named && !out.iter().any(|o| o.id == s.id) {
            out.push(s);
        }
    }
    for c in components {
        if out.iter().any(|o| o.id == c.id) {
            return Err(format!("two catalog entities are named {}", c.id));
        }
        out.push(c);
    }
    // A parent that names no node is dropped: the node is a root.
    let ids: Vec<String> = out.iter().map(|e| e.id.clone()).collect();
    for e in &mut out {
        if e.parent
            .as_ref()
            .is_some_and(|p| !ids.contains(p) || *p == e.id)
        {
            e.parent = None;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_with_parents_and_systems() {
        let text = "\
apiVersion: backstage.io/v1alpha1
kind: System
metadata:
  name: shop
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: checkout
  title: Checkout
spec:
  type: service
  system: system:default/shop
---
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: payments
spec:
  subcomponentOf: component:checkout
  system: shop
---
apiVersion: backstage.io/v1alpha1
kind: API
metadata:
  name: checkout-api
";
        let e = parse(text).expect("parses");
        let got: Vec<(&str, &str, Option<&str>)> = e
            .iter()
            .map(|e| (e.id.as_str(), e.name.as_str(), e.parent.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("shop", "shop", None),
                ("checkout", "Checkout", Some("shop")),
                ("payments", "payments", Some("checkout")),
            ]
        );
        assert!(parse("kind: Component\nmetadata: [unclosed").is_err());
        assert!(parse("kind: Component\nspec: {}\n").is_err());
    }
}
