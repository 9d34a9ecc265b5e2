//! An issue's fields edited: a conditional patch, each change recorded in its event.

use super::*;
use crate::work::{Issue, IssueView};

/// What a patch changed: each field as `[was, now]`.
type Changes = serde_json::Map<String, Value>;

impl Issues<'_> {
    /// Updates an issue: conditional on `expected_sequence` (ISSUE_CHANGED), a closed issue
    /// changes only status and components (ISSUE_CLOSED), `labels_add` adds to the labels held
    /// when the write commits. A patch that changes nothing appends no event.
    pub async fn update_issue(
        &self,
        actor: &Actor,
        key: &str,
        patch: IssuePatch,
    ) -> Result<IssueView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let c = self.checked_patch(patch).await?;
        transact!(self.console, |tx| {
            let old = tx
                .issues()
                .issue(&key)
                .await?
                .ok_or_else(|| not_found("issue"))?;
            if let Some(seq) = c.expected_sequence
                && seq != old.sequence
            {
                return Err(
                    Error::new(ErrorCode::ISSUE_CHANGED).with_detail("sequence", old.sequence)
                );
            }
            let (mut new, changes) = self.patched(tx, &old, &c).await?;
            if changes.is_empty() {
                let view = self.view(tx, old).await?;
                return Ok(view);
            }
            if !old.status.is_open() && changes.keys().any(|k| k != "status" && k != "components") {
                return Err(ErrorCode::ISSUE_CLOSED.into());
            }
            let now = self.console.now();
            match (old.status.is_open(), new.status.is_open()) {
                (true, false) => new.closed_at = Some(now),
                (false, true) => new.closed_at = None,
                _ => {}
            }
            new.sequence = old.sequence + 1;
            new.updated_at = now;
            tx.issues().update_issue(&new).await?;
            let view = self.view(tx, new).await?;
            let mut data = json!(view);
            data["changes"] = Value::Object(changes);
            self.console
                .append(
                    tx,
                    "issue.updated",
                    actor,
                    Some(&view.project),
                    Some((&view.key, view.sequence)),
                    data,
                )
                .await?;
            Ok(view)
        })
    }

    /// A patch's fields checked, before its transaction (an assignee named must have signed
    /// in).
    async fn checked_patch(&self, patch: IssuePatch) -> Result<CheckedPatch, Error> {
        if patch.labels.is_some() && patch.labels_add.is_some() {
            return Err(invalid("`labels` and `labels_add` do not go together"));
        }
        Ok(CheckedPatch {
            title: patch.title.as_deref().map(check_title).transpose()?,
            labels: patch.labels.as_deref().map(check_labels).transpose()?,
            labels_add: patch.labels_add.as_deref().map(check_labels).transpose()?,
            priority: patch.priority.map(check_priority).transpose()?,
            route: patch.route.clone().map(check_route).transpose()?,
            components: patch.components.clone().map(check_components).transpose()?,
            parent: match &patch.parent {
                None => None,
                Some(None) => Some(None),
                Some(Some(p)) => Some(Some(
                    IssueKey::parse(p).ok_or_else(|| invalid("`parent` is an issue key"))?,
                )),
            },
            assignee: match &patch.assignee {
                None => None,
                Some(None) => Some(None),
                Some(Some(a)) => Some(Some(self.console.assignee(a).await?)),
            },
            status: patch.status,
            rank: patch.rank,
            expected_sequence: patch.expected_sequence,
        })
    }

    /// The issue with the patch applied, in its transaction (a parent must exist, a rank is
    /// placed among the issues as they are), and what it changed.
    async fn patched(
        &self,
        tx: &mut dyn WorkTx,
        old: &Issue,
        c: &CheckedPatch,
    ) -> Result<(Issue, Changes), Error> {
        let mut new = old.clone();
        let mut changes = serde_json::Map::new();
        let mut change = |field: &str, was: Value, now: Value| {
            if was != now {
                changes.insert(field.to_owned(), json!([was, now]));
            }
        };
        if let Some(t) = &c.title {
            change("title", json!(old.title), json!(t));
            new.title = t.clone();
        }
        if let Some(s) = c.status {
            change("status", json!(old.status), json!(s));
            new.status = s;
        }
        if let Some(p) = c.priority {
            change("priority", json!(old.priority), json!(p));
            new.priority = p;
        }
        if let Some(l) = &c.labels {
            change("labels", json!(old.labels), json!(l));
            new.labels = l.clone();
        }
        if let Some(add) = &c.labels_add {
            let mut l = old.labels.clone();
            l.extend(add.iter().filter(|a| !old.labels.contains(a)).cloned());
            let l = check_labels(&l)?;
            change("labels", json!(old.labels), json!(l));
            new.labels = l;
        }
        if let Some(r) = &c.route {
            change("route", json!(old.route), json!(r));
            new.route = r.clone();
        }
        if let Some(p) = &c.parent {
            if p.as_ref() == Some(&old.key) {
                return Err(invalid("an issue is not its own parent"));
            }
            if let Some(pk) = p
                && tx.issues().issue(pk).await?.is_none()
            {
                return Err(invalid("no issue has the `parent` key"));
            }
            change("parent", json!(old.parent), json!(p));
            new.parent = p.clone();
        }
        if let Some(at) = &c.rank {
            let r = self.rank_at(tx, at).await?;
            change("rank", json!(old.rank), json!(r));
            new.rank = r;
        }
        if let Some(a) = &c.assignee {
            change("assignee", json!(old.assignee), json!(a));
            new.assignee = a.clone();
        }
        if let Some(comps) = &c.components {
            change("components", json!(old.components), json!(comps));
            new.components = comps.clone();
        }
        Ok((new, changes))
    }
}

/// An issue patch with its fields checked.
struct CheckedPatch {
    title: Option<String>,
    status: Option<Status>,
    priority: Option<Option<u8>>,
    labels: Option<Vec<String>>,
    labels_add: Option<Vec<String>>,
    route: Option<Option<String>>,
    parent: Option<Option<IssueKey>>,
    rank: Option<RankAt>,
    assignee: Option<Option<Login>>,
    components: Option<Components>,
    expected_sequence: Option<i64>,
}
