//! PostgreSQL's write transactions, which are turns at the group commit (`group.rs`), read
//! what the core reads in a row in one round trip (issue 50):
//!
//! - the audit log's lock and head come with the physical transaction's opening (`BEGIN`, the
//!   lock, the head: several statements sent as one text in the simple query protocol, each
//!   with its own snapshot under READ COMMITTED, so the head is read after the lock is held),
//!   and a member reads the head from memory;
//! - an enrollment (locked) with its pending requests: in the batch's first member, appended
//!   to the opening's text (the simple protocol binds no parameters, so the id is written into
//!   the text: a UUID's hex digits and hyphens, checked again here); in the others, one
//!   prepared statement;
//! - a decision's rows (the session's enrollment and request, then the record), locked in
//!   that order, as one text (with the opening when it has not been sent), remembered for the
//!   core's reads of them (`locked.rs`).
//!
//! All are read after the audit log's lock, which every physical write transaction takes
//! first, so no other writer changes them meanwhile.

use super::*;

/// An enrollment `FOR UPDATE` with its pending requests `FOR UPDATE`, in order, as one
/// statement (the locking clauses inside CTEs: PostgreSQL refuses them on a `UNION`).
const ENROLLMENT_WITH_PENDING: &str = "WITH e AS (SELECT doc FROM enrollments WHERE id = $1      FOR UPDATE), r AS (SELECT doc, created_at_ms, id FROM requests      WHERE enrollment_id = $1 AND state = $2 FOR UPDATE)      SELECT 'e' AS k, doc, 0::bigint AS c, ''::text AS i FROM e      UNION ALL SELECT 'r', doc, created_at_ms, id FROM r ORDER BY k, c, i";

impl SqlTx {
    /// The audit log's head, under its lock: the physical transaction's, after the appends of
    /// the members before this one and this one's (`group.rs`).
    pub(super) async fn locked_audit_head(
        &mut self,
    ) -> Result<Option<(i64, String)>, StorageError> {
        self.open().await?;
        match self.inner.as_ref() {
            Some(Inner::Group(turn)) => Ok(turn.head()),
            _ => Err(StorageError::Other(
                "the audit head of a write outside the group commit".into(),
            )),
        }
    }

    /// The enrollment `id` `FOR UPDATE`, then its pending requests `FOR UPDATE`, in one round
    /// trip, with the physical transaction's opening when it has not opened.
    pub(super) async fn locked_enrollment_with_pending(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Request>), StorageError> {
        self.flush().await?;
        let rows = match self.opening() {
            Some(opening) => self.opening_with_enrollment(opening, id).await?,
            None => {
                let args = args![id.to_string(), RequestState::Pending.as_str()];
                self.fetch_rows(ENROLLMENT_WITH_PENDING, args, Rows::All)
                    .await?
            }
        };
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

    /// The opening, then the enrollment and its pending requests, as one text: the rows after
    /// the opening's.
    async fn opening_with_enrollment(
        &mut self,
        opening: String,
        id: EnrollmentId,
    ) -> Result<Vec<AnyRow>, StorageError> {
        let id = inlined(id.to_string())?;
        let text = format!(
            "{opening}SELECT 'e' AS k, doc FROM enrollments WHERE id = '{id}' FOR UPDATE; \
             SELECT 'r' AS k, doc FROM requests WHERE enrollment_id = '{id}' AND state = '{}' \
             ORDER BY created_at_ms, id FOR UPDATE",
            RequestState::Pending.as_str()
        );
        self.text_in_turn(&text, true).await
    }

    /// A decision's rows, locked in its order, in one round trip (with the opening when the
    /// physical transaction has not opened), remembered for the calls that read them.
    pub(super) async fn locked_decision_rows(
        &mut self,
        owners: Option<(EnrollmentId, RequestId)>,
        record: &RecordId,
    ) -> Result<(), StorageError> {
        self.flush().await?;
        let opening = self.opening();
        let mut text = opening.clone().unwrap_or_default();
        if let Some((e, r)) = owners {
            let (e, r) = (inlined(e.to_string())?, inlined(r.to_string())?);
            text.push_str(&format!(
                "SELECT 'e' AS k, doc FROM enrollments WHERE id = '{e}' FOR UPDATE; \
                 SELECT 'q' AS k, doc FROM requests WHERE id = '{r}' FOR UPDATE; "
            ));
        }
        let id = inlined(record.to_string())?;
        text.push_str(&format!(
            "SELECT 'c' AS k, {RECORD_COLUMNS} FROM records WHERE id = '{id}' FOR UPDATE"
        ));
        for row in self.text_in_turn(&text, opening.is_some()).await? {
            let k: String = row.try_get("k").map_err(db_err)?;
            match k.as_str() {
                "e" => {
                    let e = from_doc::<Enrollment>("enrollment", &row)?;
                    self.remember(e.id.to_string(), &e);
                }
                "q" => {
                    let r = from_doc::<Request>("request", &row)?;
                    self.remember(r.id.to_string(), &r);
                }
                _ => {
                    let r = record_from_row(&row)?;
                    self.remember(r.id.to_string(), &r);
                }
            }
        }
        Ok(())
    }

    /// Sends `text` (a few statements, no parameters) in this turn; `opens`: it begins with
    /// the physical transaction's opening, whose rows are taken off the answer.
    pub(super) async fn text_in_turn(
        &mut self,
        text: &str,
        opens: bool,
    ) -> Result<Vec<AnyRow>, StorageError> {
        let conn = self.conn_bare().await?;
        let r = raw_rows(conn, text).await;
        if !opens {
            return self.checked(r);
        }
        let Some(Inner::Group(turn)) = self.inner.as_mut() else {
            return Err(finished());
        };
        let rows = match r {
            Ok(rows) => turn.opened(rows)?,
            Err(e) => return Err(turn.opening_failed(e)),
        };
        self.unsettled = false;
        Ok(rows)
    }
}

/// A key written into a statement's text (the simple protocol binds no parameters): only a
/// UUID's or a record id's characters (hex digits and hyphens), checked again here.
fn inlined(key: String) -> Result<String, StorageError> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(StorageError::Other(format!(
            "a key that cannot be written into a statement: {key:?}"
        )));
    }
    Ok(key)
}

/// The rows of every statement of `text`, sent in the simple query protocol (no parameters).
/// Boxed: the future sqlx's `raw_sql` answers is not provably `Send` inside an `async_trait`
/// method (a higher-ranked lifetime bound the compiler cannot see through).
pub(super) fn raw_rows<'c>(
    conn: &'c mut AnyConnection,
    text: &'c str,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<AnyRow>, sqlx::Error>> + Send + 'c>,
> {
    Box::pin(sqlx::Executor::fetch_all(conn, sqlx::raw_sql(text)))
}
