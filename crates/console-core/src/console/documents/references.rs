//! The reference graph: a document's and an issue's references, one node's edges, and the
//! edges kept in step with what a document, a comment or a message refers to.

use std::collections::HashSet;

use super::*;
use crate::work::documents::{Edge, EdgeKind, EdgeQuery, EdgeView, References};

impl Documents<'_> {
    /// Cross-references to and from a document.
    pub async fn artifact_references(&self, id: ArtifactId) -> Result<References, Error> {
        let a = self.current(id).await?;
        let node = artifact_ref(&a);
        let mut tx = self.read().await?;
        let incoming = tx
            .documents()
            .edges(&EdgeQuery {
                to: Some(node.clone()),
                from: None,
                kind: None,
                since: None,
            })
            .await?;
        let outgoing = tx
            .documents()
            .edges(&EdgeQuery {
                to: None,
                from: Some(node),
                kind: None,
                since: None,
            })
            .await?;
        Ok(References {
            incoming: incoming.iter().map(EdgeView::of).collect(),
            outgoing: outgoing.iter().map(EdgeView::of).collect(),
        })
    }

    /// Cross-references to and from an issue (and from its documents).
    pub async fn issue_references(&self, key: &str) -> Result<References, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.read().await?;
        tx.issues()
            .issue(&key)
            .await?
            .ok_or_else(|| not_found("issue"))?;
        let (incoming, outgoing) = tx.documents().issue_edges(&key).await?;
        Ok(References {
            incoming: incoming.iter().map(EdgeView::of).collect(),
            outgoing: outgoing.iter().map(EdgeView::of).collect(),
        })
    }

    /// The edges of one node of the reference graph (`GET /references`): `to` (backlinks) or
    /// `from` (links), exactly one, a console ref (a fragment naming a block is dropped: a
    /// node is a whole document); `since` (an event id) pages mentions only (it implies
    /// `kind=mention`; another kind with it is refused). INVALID_QUERY otherwise.
    pub async fn references(
        &self,
        to: Option<&str>,
        from: Option<&str>,
        kind: Option<&str>,
        since: Option<i64>,
    ) -> Result<Vec<EdgeView>, Error> {
        let bad = |m: &str| Error::with_message(ErrorCode::INVALID_QUERY, m);
        // A console ref, written as the engine writes one (UUIDs lower-cased).
        let node = |r: &str| -> Result<String, Error> {
            let r = r.split('#').next().unwrap_or("");
            doc::parse_ref(r)
                .map(|t| t.to_url())
                .ok_or_else(|| bad("`to` and `from` are console refs (countersign://…)"))
        };
        let (to, from) = match (to, from) {
            (Some(t), None) => (Some(node(t)?), None),
            (None, Some(f)) => (None, Some(node(f)?)),
            _ => return Err(bad("name one node: `to` or `from`")),
        };
        let mut kind = kind
            .map(|k| EdgeKind::parse(k).ok_or_else(|| bad("`kind` is link, mention or embed")))
            .transpose()?;
        if since.is_some() {
            match kind {
                None => kind = Some(EdgeKind::Mention),
                Some(EdgeKind::Mention) => {}
                Some(_) => return Err(bad("`since` pages mentions only")),
            }
        }
        let mut tx = self.read().await?;
        Ok(tx
            .documents()
            .edges(&EdgeQuery {
                to,
                from,
                kind,
                since,
            })
            .await?
            .iter()
            .map(EdgeView::of)
            .collect())
    }

    /// Keeps the `mention` edges from a comment or a message (`from`, its console ref) in step
    /// with the console refs its text names ([`mentioned_refs`]): an edge that stays keeps its
    /// time and event; a new one is `event`'s. The edges count for `from_issue`'s outgoing
    /// references. `edited`: the text replaces an earlier one (a new text has no edges yet).
    pub(crate) async fn keep_mentions(
        &self,
        tx: &mut dyn WorkTx,
        from: &str,
        from_issue: Option<&IssueKey>,
        (text, edited): (&str, bool),
        event: &Event,
    ) -> Result<(), Error> {
        let old = match (edited, has_console_ref(text)) {
            (true, _) => tx.documents().edges_from(from, None).await?,
            (false, true) => Vec::new(),
            (false, false) => return Ok(()),
        };
        let new: Vec<Edge> = mentioned_refs(text)
            .into_iter()
            .map(|(to, to_block)| Edge {
                from: from.to_owned(),
                from_block: String::new(),
                from_issue: from_issue.cloned(),
                to,
                to_block,
                kind: EdgeKind::Mention,
                at: event.facts.at,
                event_id: event.id,
            })
            .collect();
        replace_edges(tx, &old, &new).await
    }

    /// Keeps the reference graph's edges from a document in step with its references: those
    /// in `blocks` (every block when `None`) are replaced by `refs`' (an edge that stays keeps
    /// its time and event; a new one is `event`'s).
    pub(super) async fn keep_references(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
        refs: &[(String, String, EdgeKind)],
        blocks: Option<&[String]>,
        event: &Event,
    ) -> Result<(), Error> {
        let from = artifact_ref(a);
        let old = tx.documents().edges_from(&from, blocks).await?;
        let within: Option<HashSet<&str>> = blocks.map(|b| b.iter().map(String::as_str).collect());
        let new: Vec<Edge> = refs
            .iter()
            .filter(|(b, _, _)| within.as_ref().is_none_or(|w| w.contains(b.as_str())))
            .map(|(block, to, kind)| {
                let (to, to_block) = to.split_once('#').unwrap_or((to.as_str(), ""));
                Edge {
                    from: from.clone(),
                    from_block: block.clone(),
                    from_issue: a.scope.issue().cloned(),
                    to: to.to_owned(),
                    to_block: to_block.to_owned(),
                    kind: *kind,
                    at: event.facts.at,
                    event_id: event.id,
                }
            })
            .collect();
        replace_edges(tx, &old, &new).await
    }
}

/// Replaces edges `old` by `new`: an edge in both stays (with its time and event), those
/// only in `old` are deleted, those only in `new` inserted.
async fn replace_edges(tx: &mut dyn WorkTx, old: &[Edge], new: &[Edge]) -> Result<(), Error> {
    for o in old {
        if !new.iter().any(|n| n.same(o)) {
            tx.documents().delete_edge(o).await?;
        }
    }
    for n in new {
        if !old.iter().any(|o| o.same(n)) {
            tx.documents().insert_edge(n).await?;
        }
    }
    Ok(())
}

/// The console refs a plain text (a comment's or a message's body) names, each once, in the
/// order they first appear: every `countersign://…` up to a space, a bracket or a quote, with
/// trailing punctuation dropped, read as the engine reads a link (`#<block>` kept apart).
/// Anything that does not parse as a console ref is not a mention.
pub(crate) fn mentioned_refs(text: &str) -> Vec<(String, String)> {
    const SCHEME: &str = "countersign://";
    let mut out: Vec<(String, String)> = Vec::new();
    let mut at = 0;
    while let Some(i) = text.get(at..).and_then(|rest| {
        rest.as_bytes()
            .windows(SCHEME.len())
            .position(|w| w.eq_ignore_ascii_case(SCHEME.as_bytes()))
    }) {
        let start = at + i;
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || "<>()[]{}\"'`|".contains(c))
            .map_or(text.len(), |e| start + e);
        at = end;
        let r = text[start..end].trim_end_matches(|c: char| ".,;:!?*_~".contains(c));
        let (node, block) = r.split_once('#').unwrap_or((r, ""));
        if let Some(t) = doc::parse_ref(node) {
            let pair = (t.to_url(), block.to_owned());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::mentioned_refs;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
    }

    #[test]
    fn mentions_are_the_console_refs_a_text_names() {
        let id = "6f1c0a4e-0000-4000-8000-00000000000a";
        let text = format!(
            "See countersign://issue/PAY-1. Also [the plan](countersign://artifact/{id}#b-2), \
             <COUNTERSIGN://issue/PAY-1>, \"countersign://project/PAY\"; again \
             countersign://issue/PAY-1, countersign://issue/pay-1 countersign:// \
             countersign://agent/s-1/artifact/notes-2!"
        );
        assert_eq!(
            mentioned_refs(&text),
            pairs(&[
                ("countersign://issue/PAY-1", ""),
                (&format!("countersign://artifact/{id}"), "b-2"),
                ("countersign://project/PAY", ""),
                ("countersign://agent/s-1/artifact/notes-2", ""),
            ])
        );
        assert!(mentioned_refs("no refs here, just countersign: words").is_empty());
        // Multi-byte text around a ref, and a ref at the very end.
        assert_eq!(
            mentioned_refs("é→countersign://issue/AB-12"),
            pairs(&[("countersign://issue/AB-12", "")])
        );
    }
}
