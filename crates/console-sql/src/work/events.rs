//! The event log ([`EventTx`]): appends numbered `MAX(id) + 1` under PostgreSQL's advisory
//! lock (SQLite: its one writer), so ids are in commit order with no gap; reads after an id and
//! an issue's own log.

use async_trait::async_trait;
use countersign_common::sql::{Backend, db_err};
use countersign_console_core::ids::SessionId;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{Event, EventPage, EventTx, IssueKey, NewEvent};
use sqlx::Row;

use super::{Args, EVENT_COLUMNS, EventStore, event_of, text};

/// The advisory lock PostgreSQL event appends take (distinct from the migration lock).
const PG_EVENTS_LOCK: i64 = 7_243_102;

#[async_trait]
impl EventTx for EventStore<'_> {
    async fn append_event(
        &mut self,
        e: &NewEvent,
        sequence: Option<i64>,
    ) -> Result<Event, StorageError> {
        if !self.write {
            return Err(StorageError::Other(
                "an append in a read transaction".into(),
            ));
        }
        if self.backend == Backend::Postgres && !self.events_locked {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_EVENTS_LOCK)
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
            self.events_locked = true;
        }
        let row = sqlx::query(
            "INSERT INTO console_events (id, kind, at, actor, project, issue, artifact, session, data, sequence) \
             SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM console_events \
             RETURNING id",
        )
        .bind(e.kind)
        .bind(ms(&e.facts.at))
        .bind(text(&e.facts.actor))
        .bind(e.facts.project.as_ref().map(|p| p.as_str().to_owned()))
        .bind(e.facts.issue.as_ref().map(|p| p.as_str().to_owned()))
        .bind(e.facts.artifact.map(|a| a.to_string()))
        .bind(e.facts.session.as_ref().map(SessionId::to_string))
        .bind(text(&e.facts.data))
        .bind(sequence)
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let id: i64 = row.try_get("id").map_err(db_err)?;
        self.last_event = Some(id);
        Ok(Event {
            id,
            kind: e.kind.to_owned(),
            facts: e.facts.clone(),
            sequence,
        })
    }

    async fn events_after(&mut self, after: i64, limit: u32) -> Result<Vec<Event>, StorageError> {
        sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM console_events WHERE id > $1 ORDER BY id LIMIT $2"
        ))
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let mut e = event_of(r)?;
            e.sequence = None;
            Ok(e)
        })
        .collect()
    }

    async fn issue_events(
        &mut self,
        key: &IssueKey,
        page: &EventPage,
    ) -> Result<Vec<Event>, StorageError> {
        let mut a = Args::default();
        // A document's events name its issue too, with the document's own sequence: the
        // issue's log is the events about the issue itself.
        let mut conds = vec![
            format!("issue = {}", a.push(key.as_str().to_owned())),
            "artifact IS NULL".to_owned(),
        ];
        if let Some(x) = page.after {
            conds.push(format!("sequence > {}", a.push(x)));
        }
        if let Some(x) = page.before {
            conds.push(format!("sequence < {}", a.push(x)));
        }
        if !page.ids.is_empty() {
            conds.push(format!("id IN {}", a.int_list(self.backend, &page.ids)));
        }
        let order = if page.descending { "DESC" } else { "ASC" };
        let limit = a.push(i64::from(page.limit));
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM console_events WHERE {} ORDER BY sequence {order} LIMIT {limit}",
            conds.join(" AND ")
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(event_of)
            .collect()
    }

    async fn last_event_id(&mut self) -> Result<i64, StorageError> {
        sqlx::query("SELECT COALESCE(MAX(id), 0) AS n FROM console_events")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)
    }
}
