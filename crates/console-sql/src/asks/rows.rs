//! Asks, comments and answers from their rows, and the values their rows keep.

use countersign_common::sql::db_err;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::asks::{
    Ask, AskHead, AskKind, AskState, Comment, PastAnswer, ThreadState, Turn,
};
use countersign_console_core::work::{Actor, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use countersign_console_core::ids::{ArtifactId, AskId, CommentId};

use crate::work::{corrupt, id_in, json_of, opt_id_in};

pub(super) fn project_of(s: &str) -> Result<ProjectKey, StorageError> {
    ProjectKey::parse(s).ok_or_else(|| corrupt("project key"))
}

pub(super) fn issue_key(s: Option<String>) -> Result<Option<IssueKey>, StorageError> {
    s.map(|k| IssueKey::parse(&k).ok_or_else(|| corrupt("issue key")))
        .transpose()
}

pub(super) fn ask_of(r: &AnyRow) -> Result<Ask, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    let gi = |c: &str| -> Result<i64, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(Ask {
        head: AskHead {
            id: id_in(r, "id", AskId::parse)?,
            kind: AskKind::parse(&g("kind")?).ok_or_else(|| corrupt("ask kind"))?,
            project: project_of(&g("project")?)?,
            issue: issue_key(go("issue")?)?,
            artifact: opt_id_in(r, "artifact", ArtifactId::parse)?,
            block: go("block")?,
            question: g("question")?,
            options: json_of(&g("options")?, "ask options")?,
            state: AskState::parse(&g("state")?).ok_or_else(|| corrupt("ask state"))?,
            answer: go("answer")?.map(|a| json_of(&a, "answer")).transpose()?,
        },
        closed: go("closed")?.map(|a| json_of(&a, "close")).transpose()?,
        approval: go("approval")?
            .map(|a| json_of(&a, "approval"))
            .transpose()?,
        followers: json_of(&g("followers")?, "followers")?,
        author: json_of(&g("author")?, "actor")?,
        worded_by: json_of(&g("worded_by")?, "actor")?,
        worded_at: time(gi("worded_at")?)?,
        turn: go("turn")?
            .map(|t| Turn::parse(&t).ok_or_else(|| corrupt("turn")))
            .transpose()?,
        turn_since: time(gi("turn_since")?)?,
        created_at: time(gi("created_at")?)?,
        updated_at: time(gi("updated_at")?)?,
    })
}

pub(super) fn comment_of(r: &AnyRow) -> Result<Comment, StorageError> {
    comment_at(r, "")
}

/// The columns of `list` (comma-separated) of table alias `alias`, each named
/// `<prefix><column>`.
pub(super) fn columns_as(list: &str, alias: &str, prefix: &str) -> String {
    list.split(',')
        .map(str::trim)
        .map(|c| format!("{alias}.{c} AS {prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A comment from columns named `<prefix><column>`.
pub(super) fn comment_at(r: &AnyRow, prefix: &str) -> Result<Comment, StorageError> {
    let col = |c: &str| format!("{prefix}{c}");
    let g =
        |c: &str| -> Result<String, StorageError> { r.try_get(col(c).as_str()).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> {
        r.try_get(col(c).as_str()).map_err(db_err)
    };
    Ok(Comment {
        id: id_in(r, &col("id"), CommentId::parse)?,
        thread_id: id_in(r, &col("thread_id"), CommentId::parse)?,
        parent: opt_id_in(r, &col("parent"), CommentId::parse)?,
        project: project_of(&g("project")?)?,
        issue: issue_key(go("issue")?)?,
        artifact: opt_id_in(r, &col("artifact"), ArtifactId::parse)?,
        ask: opt_id_in(r, &col("ask"), AskId::parse)?,
        quote: go("quote")?.map(|q| json_of(&q, "quote")).transpose()?,
        block: go("block")?,
        body: g("body")?,
        author: json_of(&g("author")?, "actor")?,
        suggestion: go("suggestion")?
            .map(|s| json_of(&s, "suggestion"))
            .transpose()?,
        mentions: json_of(&g("mentions")?, "mentions")?,
        thread_state: go("thread_state")?
            .map(|s| match s.as_str() {
                "open" => Ok(ThreadState::Open),
                "resolved" => Ok(ThreadState::Resolved),
                _ => Err(corrupt("thread state")),
            })
            .transpose()?,
        created_at: time(r.try_get(col("created_at").as_str()).map_err(db_err)?)?,
        edited_at: r
            .try_get::<Option<i64>, _>(col("edited_at").as_str())
            .map_err(db_err)?
            .map(time)
            .transpose()?,
    })
}

pub(super) fn login_of(a: &Actor) -> Option<String> {
    match a {
        Actor::User { login } => Some(login.as_str().to_owned()),
        _ => None,
    }
}

pub(super) fn thread_state_text(s: Option<ThreadState>) -> Option<String> {
    s.map(|s| {
        match s {
            ThreadState::Open => "open",
            ThreadState::Resolved => "resolved",
        }
        .to_owned()
    })
}

pub(super) fn past_answer_of(r: &AnyRow) -> Result<PastAnswer, StorageError> {
    Ok(PastAnswer {
        options: json_of(
            &r.try_get::<String, _>("options").map_err(db_err)?,
            "answer options",
        )?,
        text: r.try_get("text").map_err(db_err)?,
        by: json_of(
            &r.try_get::<String, _>("by_actor").map_err(db_err)?,
            "actor",
        )?,
        at: time(r.try_get("at").map_err(db_err)?)?,
        current: r.try_get::<i64, _>("current").map_err(db_err)? != 0,
    })
}
