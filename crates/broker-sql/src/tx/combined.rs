//! PostgreSQL's write transactions read two things in one round trip where the core reads them
//! in a row (issue 50): the audit log's lock and head, and an enrollment (locked) with its
//! pending requests.
//!
//! Each pair is two statements sent as one text in the simple query protocol: PostgreSQL runs
//! them one after the other, and under READ COMMITTED each takes its own snapshot when it
//! starts, so the second sees what a transaction that held the first's lock committed while
//! the first waited for it, exactly as two round trips did. One statement would not do: its
//! snapshot is taken before it waits for the lock, so the head it read could be one a
//! committed appender has since moved on (the insert then fails on the position's key, and
//! every such race costs a retry), and a pending request inserted by the enrollment's last
//! holder would be missed (two asks for the same names would not coalesce). The simple
//! protocol binds no parameters, so the values are written into the text: the lock's key is
//! a constant, and an enrollment id is a UUID's 36 hex digits and hyphens, checked again here.

use super::*;

impl SqlTx {
    /// Takes the audit log's advisory lock (held to commit) and reads its head after it.
    /// Writes held back go first when audit entries are among them; else they stay held (no
    /// upsert writes the audit log).
    pub(super) async fn locked_audit_head(
        &mut self,
    ) -> Result<Option<(i64, String)>, StorageError> {
        let text = format!(
            "SELECT pg_advisory_xact_lock({PG_AUDIT_LOCK})::text AS locked; \
             SELECT position, hash FROM audit_log ORDER BY position DESC LIMIT 1"
        );
        let conn = if self.held.has_audit() {
            self.conn().await?
        } else {
            self.conn_now().await?
        };
        let r = raw_rows(conn, &text).await;
        let rows = self.checked(r)?;
        // The lock's row, then the head's when the log has one.
        rows.iter()
            .find(|r| r.try_get_raw("position").is_ok())
            .map(head_of)
            .transpose()
    }

    /// The enrollment `id` `FOR UPDATE`, then its pending requests `FOR UPDATE`, in one round
    /// trip (each statement its own snapshot, as above).
    pub(super) async fn locked_enrollment_with_pending(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Request>), StorageError> {
        let id = id.to_string();
        if id.len() != 36 || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err(StorageError::Other(
                "an enrollment id that is not a UUID".into(),
            ));
        }
        let text = format!(
            "SELECT 'e' AS k, doc FROM enrollments WHERE id = '{id}' FOR UPDATE; \
             SELECT 'r' AS k, doc FROM requests WHERE enrollment_id = '{id}' AND state = '{}' \
             ORDER BY created_at_ms, id FOR UPDATE",
            RequestState::Pending.as_str()
        );
        let conn = self.conn().await?;
        let r = raw_rows(conn, &text).await;
        let rows = self.checked(r)?;
        let mut enrollment = None;
        let mut pending = Vec::new();
        for row in &rows {
            let k: String = row.try_get("k").map_err(db_err)?;
            match k.as_str() {
                "e" => enrollment = Some(from_doc::<Enrollment>("enrollment", row)?),
                _ => pending.push(from_doc::<Request>("request", row)?),
            }
        }
        match enrollment {
            Some(e) => {
                self.remember(e.id.to_string(), &e);
                for r in &pending {
                    self.remember(r.id.to_string(), r);
                }
                Ok((Some(e), pending))
            }
            None => Ok((None, Vec::new())),
        }
    }
}

/// The rows of every statement of `text`, sent in the simple query protocol (no parameters).
/// Boxed: the future sqlx's `raw_sql` answers is not provably `Send` inside an `async_trait`
/// method (a higher-ranked lifetime bound the compiler cannot see through).
fn raw_rows<'c>(
    conn: &'c mut AnyConnection,
    text: &'c str,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<AnyRow>, sqlx::Error>> + Send + 'c>,
> {
    Box::pin(sqlx::Executor::fetch_all(conn, sqlx::raw_sql(text)))
}

/// An audit head's row: its position and hash (as hex).
pub(super) fn head_of(row: &AnyRow) -> Result<(i64, String), StorageError> {
    Ok((
        row.try_get("position").map_err(db_err)?,
        hex::encode(row.try_get::<Vec<u8>, _>("hash").map_err(db_err)?),
    ))
}
