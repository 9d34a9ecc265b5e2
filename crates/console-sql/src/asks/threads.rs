//! The threads a person wrote in and has not read since someone else wrote: comment threads
//! (a document's or an issue's discussion) and asks (a reply or an answer by someone else).

use countersign_common::sql::db_err;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::asks::{Answer, Ask, AskWrite, Comment, UnreadThreads};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::{ask_of, columns_as, comment_at};
use super::{ASK_COLUMNS, COMMENT_COLUMNS};
use crate::time;
use crate::work::{Args, AskStore, json_of};

impl AskStore<'_> {
    /// [`AskTx::unread_comment_threads`](countersign_console_core::work::AskTx::unread_comment_threads):
    /// the comment threads the person wrote in with a newer comment by someone else, unread.
    pub(super) async fn unread_comments(
        &mut self,
        w: &UnreadThreads<'_>,
    ) -> Result<(Vec<(Comment, Comment)>, i64), StorageError> {
        let mut a = Args::default();
        let me = a.push(w.login.as_str().to_owned());
        let mut filter = String::new();
        if let Some(k) = w.issue {
            filter = format!(" AND root.issue = {}", a.push(k.as_str().to_owned()));
        }
        if let Some(x) = w.artifact {
            filter.push_str(&format!(" AND root.artifact = {}", a.push(x.to_owned())));
        }
        // From the person's own comments (by author): each thread's last one (`seq` orders
        // within a millisecond), then the thread's newest comment by someone else, later than
        // that and than the read mark.
        let from = format!(
            "FROM (SELECT thread_id, MAX(seq) AS last_seq FROM console_comments \
                   WHERE author_login = {me} AND ask IS NULL GROUP BY thread_id) w \
             JOIN console_comments root ON root.id = w.thread_id \
             JOIN console_comments nr ON nr.id = (SELECT r.id FROM console_comments r \
                 WHERE r.thread_id = w.thread_id AND (r.author_login IS NULL OR r.author_login <> {me}) \
                 ORDER BY r.created_at DESC, r.seq DESC LIMIT 1) \
             LEFT JOIN console_thread_reads tr ON tr.login = {me} AND tr.thread_id = w.thread_id \
             WHERE nr.seq > w.last_seq{filter} \
             AND (tr.read_through IS NULL OR nr.created_at > tr.read_through)"
        );
        let total: i64 = sqlx::query_with(&format!("SELECT COUNT(*) AS n {from}"), a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let l = a.push(i64::from(w.limit));
        let o = a.push(i64::from(w.offset));
        let sql = format!(
            "SELECT {}, {} {from} ORDER BY nr.created_at DESC, root.id LIMIT {l} OFFSET {o}",
            columns_as(COMMENT_COLUMNS, "root", "t_"),
            columns_as(COMMENT_COLUMNS, "nr", "n_"),
        );
        let threads = self
            .rows(&sql, &a)
            .await?
            .iter()
            .map(|r| Ok((comment_at(r, "t_")?, comment_at(r, "n_")?)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((threads, total))
    }

    /// [`AskTx::unread_ask_threads`](countersign_console_core::work::AskTx::unread_ask_threads):
    /// the asks the person wrote in (asked, replied or answered) with a newer reply or answer
    /// by someone else, unread, less those their inbox lists.
    pub(super) async fn unread_asks(
        &mut self,
        w: &UnreadThreads<'_>,
    ) -> Result<(Vec<(Ask, AskWrite)>, i64), StorageError> {
        let mut a = Args::default();
        let me = a.push(w.login.as_str().to_owned());
        // Less the open asks the person's inbox lists (`inbox` with no filter: someone's turn,
        // on an issue assigned to them or to nobody, or on a document with no issue).
        let mut filter = format!(
            "NOT (a.state = 'open' AND a.turn IS NOT NULL \
             AND (i.assignee IS NULL OR i.assignee = {me}))"
        );
        if let Some(k) = w.issue {
            filter.push_str(&format!(" AND a.issue = {}", a.push(k.as_str().to_owned())));
        }
        if let Some(x) = w.artifact {
            filter.push_str(&format!(" AND a.artifact = {}", a.push(x.to_owned())));
        }
        let from = unread_asks_from(&me, &filter);
        let total: i64 = sqlx::query_with(&format!("SELECT COUNT(*) AS n {from}"), a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let l = a.push(i64::from(w.limit));
        let o = a.push(i64::from(w.offset));
        let sql = format!(
            "SELECT {}, {}, n.options AS a_options, n.text AS a_text, n.by_actor AS a_by_actor, \
             n.at AS a_at, v.nr_kind AS nr_kind {from} \
             ORDER BY v.nr_at DESC, v.ask LIMIT {l} OFFSET {o}",
            columns_as(ASK_COLUMNS, "a", ""),
            columns_as(COMMENT_COLUMNS, "c", "c_"),
        );
        let threads = self
            .rows(&sql, &a)
            .await?
            .iter()
            .map(ask_thread_of)
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((threads, total))
    }
}

/// The `FROM` of the unread ask threads of the person bound at `me`, the asks narrowed by
/// `filter`.
///
/// `w`: the asks the person wrote in, with the `seq` of their last reply or answer (one
/// count over both; 0 when they only asked). `u`: with each ask's newest reply and
/// newest answer by someone else. `v`: the newer of the two.
fn unread_asks_from(me: &str, filter: &str) -> String {
    let newer = "(n.ask IS NULL OR (c.id IS NOT NULL AND (c.created_at > n.at \
         OR (c.created_at = n.at AND c.seq > n.seq))))";
    format!(
        "FROM (SELECT u.ask AS ask, u.last_seq AS last_seq, u.c_id AS c_id, u.a_n AS a_n, \
             CASE WHEN {newer} THEN c.created_at ELSE n.at END AS nr_at, \
             CASE WHEN {newer} THEN c.seq ELSE n.seq END AS nr_seq, \
             CASE WHEN {newer} THEN 'reply' ELSE 'answer' END AS nr_kind \
           FROM (SELECT w.ask AS ask, w.last_seq AS last_seq, \
               (SELECT r.id FROM console_comments r WHERE r.ask = w.ask \
                  AND (r.author_login IS NULL OR r.author_login <> {me}) \
                  ORDER BY r.created_at DESC, r.seq DESC LIMIT 1) AS c_id, \
               (SELECT x.n FROM console_ask_answers x WHERE x.ask = w.ask \
                  AND (x.by_login IS NULL OR x.by_login <> {me}) \
                  ORDER BY x.at DESC, x.seq DESC LIMIT 1) AS a_n \
             FROM (SELECT mine.ask AS ask, MAX(mine.seq) AS last_seq FROM ( \
                 SELECT id AS ask, CAST(0 AS BIGINT) AS seq FROM console_asks \
                   WHERE author_login = {me} \
                 UNION ALL SELECT ask, seq FROM console_comments \
                   WHERE author_login = {me} AND ask IS NOT NULL \
                 UNION ALL SELECT ask, seq FROM console_ask_answers WHERE by_login = {me} \
               ) mine GROUP BY mine.ask) w \
             JOIN console_asks a ON a.id = w.ask \
             LEFT JOIN console_issues i ON i.key = a.issue \
             WHERE {filter}) u \
           LEFT JOIN console_comments c ON c.id = u.c_id \
           LEFT JOIN console_ask_answers n ON n.ask = u.ask AND n.n = u.a_n) v \
         JOIN console_asks a ON a.id = v.ask \
         LEFT JOIN console_comments c ON c.id = v.c_id \
         LEFT JOIN console_ask_answers n ON n.ask = v.ask AND n.n = v.a_n \
         LEFT JOIN console_thread_reads tr ON tr.login = {me} AND tr.thread_id = v.ask \
         WHERE v.nr_seq > v.last_seq \
         AND (tr.read_through IS NULL OR v.nr_at > tr.read_through)"
    )
}

/// An unread ask thread's row: the ask and the newest write by someone else in it.
fn ask_thread_of(r: &AnyRow) -> Result<(Ask, AskWrite), StorageError> {
    let kind: String = r.try_get("nr_kind").map_err(db_err)?;
    let write = if kind == "reply" {
        AskWrite::Reply(Box::new(comment_at(r, "c_")?))
    } else {
        AskWrite::Answer(Answer {
            options: json_of(
                &r.try_get::<String, _>("a_options").map_err(db_err)?,
                "answer options",
            )?,
            text: r.try_get("a_text").map_err(db_err)?,
            by: json_of(
                &r.try_get::<String, _>("a_by_actor").map_err(db_err)?,
                "actor",
            )?,
            at: time(r.try_get("a_at").map_err(db_err)?)?,
        })
    };
    Ok((ask_of(r)?, write))
}
