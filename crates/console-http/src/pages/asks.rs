//! The asks pages: the inbox as the console's home (agents' questions by whose turn, and the
//! credential requests the home showed before), one ask answered with its options in one
//! click, and the assets they share (`/assets/asks.js`, `/assets/asks.css`).

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use countersign_console_core::console::asks::waiting;
use countersign_console_core::console::asks::{AnswerKind, AnswerRow, Inbox, InboxRow};
use countersign_console_core::doc::SafeHtml;
use countersign_console_core::ids::{ArtifactId, AskId};
use countersign_console_core::work::Actor;
use countersign_console_core::work::asks::{AskOption, AskView, InboxAsk, Turn};
use countersign_console_core::{Caller, Login, Time};
use std::collections::HashSet;

use super::{PageResult, St, chrome, error_text, human, page};
use crate::html::{self, Chrome, InboxRows, Notice, When, actor_text, notice};

const SCRIPT: &str = include_str!("../../assets/asks.js");
const STYLE: &str = include_str!("../../assets/asks.css");
const MENTIONS: &str = include_str!("../../assets/mentions.js");

/// Selected options' labels and the text, as one line.
fn answer_text(options: &[String], text: Option<&str>, all: &[AskOption]) -> String {
    let mut parts: Vec<String> = options
        .iter()
        .map(|o| {
            all.iter()
                .find(|x| &x.id == o)
                .map(|x| x.label.clone())
                .unwrap_or_else(|| o.clone())
        })
        .collect();
    if let Some(t) = text {
        parts.push(t.to_owned());
    }
    parts.join("; ")
}

/// An answer, for people.
#[derive(Debug)]
pub struct AnswerLine {
    pub by: String,
    pub what: String,
}

/// One ask, as a row or a page shows it.
#[derive(Debug)]
pub struct AskRow {
    pub id: String,
    pub kind: &'static str,
    pub state: &'static str,
    /// The question's first line (the title).
    pub question_line: String,
    pub where_text: String,
    pub where_href: Option<String>,
    pub author: String,
    pub since: When,
    pub snoozed_until: Option<When>,
    pub answer: Option<AnswerLine>,
    /// `(id, label)`.
    pub options: Vec<(String, String)>,
    /// Open or answered: a person may answer (again).
    pub answerable: bool,
    /// Whose turn it is and why it is in this inbox, in words (an inbox row's; empty
    /// elsewhere).
    pub why: String,
}

/// The row's view of a whole ask.
fn summary(a: &AskView) -> InboxAsk {
    InboxAsk {
        head: a.head.clone(),
        author: a.author.clone(),
        turn: a.turn,
        turn_since: a.updated_at,
        created_at: a.created_at,
    }
}

impl AskRow {
    fn of(a: &InboxAsk, since: &Time, snoozed_until: Option<&Time>) -> Self {
        let (where_text, where_href) = match (&a.head.issue, &a.head.artifact) {
            (_, Some(doc)) => (
                match &a.head.issue {
                    Some(k) => format!("{k}, a document"),
                    None => format!("{}, a document", a.head.project),
                },
                Some(format!("/artifacts/{doc}/discussion")),
            ),
            (Some(k), None) => (k.to_string(), Some(format!("/issues/{k}"))),
            (None, None) => (a.head.project.to_string(), None),
        };
        Self {
            id: a.head.id.to_string(),
            kind: a.head.kind.as_str(),
            state: a.head.state.as_str(),
            question_line: a.head.question.lines().next().unwrap_or("").to_owned(),
            where_text,
            where_href,
            author: actor_text(&a.author),
            since: html::when(since),
            snoozed_until: snoozed_until.map(html::when),
            answer: a.head.answer.as_ref().map(|x| AnswerLine {
                by: actor_text(&x.by),
                what: answer_text(&x.options, x.text.as_deref(), &a.head.options),
            }),
            options: a
                .head
                .options
                .iter()
                .map(|o| (o.id.clone(), o.label.clone()))
                .collect(),
            answerable: matches!(a.head.state.as_str(), "open" | "answered"),
            why: String::new(),
        }
    }

    /// An inbox row, saying whose turn it is and why it is in `me`'s inbox: `assigned`, its
    /// issue is assigned to `me` (else it is unassigned, or a document with no issue: in every
    /// person's inbox).
    fn of_row(r: &InboxRow, me: &Login, assigned: bool) -> Self {
        let mut row = Self::of(&r.ask, &r.turn_since, r.snoozed_until.as_ref());
        row.author = asker_text(&r.ask.author, me);
        let assignee = assigned.then_some(me);
        row.why = waits_text(r.turn, assignee, r.issue.is_some(), &row.author, me);
        row
    }
}

/// Who asked, for `me`: an agent's session with its owner ("session s-1 of ada@example.com",
/// "of you" for `me`'s own agents), a person by their e-mail.
fn asker_text(a: &Actor, me: &Login) -> String {
    match a {
        Actor::Agent {
            owner: Some(o),
            session: Some(_),
            ..
        }
        | Actor::Agent {
            owner: Some(o),
            service: Some(_),
            ..
        } => {
            let whose = if o == me {
                "you".to_owned()
            } else {
                o.to_string()
            };
            format!("{} of {whose}", actor_text(a))
        }
        Actor::Agent { owner: Some(o), .. } if o == me => "an agent of yours".to_owned(),
        _ => actor_text(a),
    }
}

/// Whose turn an ask is and the inbox it waits in, in words for `me` (the rule:
/// [`countersign_console_core::console::asks::waiting`]). `on_issue`: it is on an issue (else
/// on a document with no issue); `asker`: who asked, in words. Empty when it waits on nobody.
fn waits_text(
    turn: Option<Turn>,
    assignee: Option<&Login>,
    on_issue: bool,
    asker: &str,
    me: &Login,
) -> String {
    let Some(w) = waiting(turn, assignee) else {
        return String::new();
    };
    let whose = match w.turn {
        Turn::Human => "A person's turn to answer".to_owned(),
        Turn::Agent => format!("{asker}'s turn: a person asked back and it has not replied"),
    };
    let why = match (&w.inbox, on_issue) {
        (Some(l), _) if l == me => "in your inbox because the issue is assigned to you".to_owned(),
        (Some(l), _) => format!("in {l}'s inbox, the issue's assignee"),
        (None, true) => "in every person's inbox because the issue has no assignee".to_owned(),
        (None, false) => {
            "in every person's inbox because it is on a document with no issue".to_owned()
        }
    };
    let whose = match (w.turn, &w.inbox) {
        (Turn::Human, Some(l)) if l == me => "Your turn to answer".to_owned(),
        _ => whose,
    };
    format!("{whose}; {why}.")
}

/// The inbox's asks, by whose turn (the home page and its live refresh render the same).
#[derive(Debug, Template)]
#[template(path = "asks_rows.html")]
pub struct AskRows {
    pub error: Option<Notice>,
    pub human: Vec<AskRow>,
    pub agent: Vec<AskRow>,
    pub snoozed: Vec<AskRow>,
}

impl askama::filters::HtmlSafe for AskRows {}

impl AskRows {
    /// `inbox`, `me`'s, with the asks on issues assigned to `me` among them (`mine`).
    fn of(inbox: &Inbox, me: &Login, mine: &HashSet<AskId>) -> Self {
        let rows = |list: &[InboxRow]| -> Vec<AskRow> {
            list.iter()
                .map(|r| AskRow::of_row(r, me, mine.contains(&r.id)))
                .collect()
        };
        Self {
            error: None,
            human: rows(&inbox.human_turn),
            agent: rows(&inbox.agent_turn),
            snoozed: rows(&inbox.snoozed),
        }
    }

    fn failed(n: Notice) -> Self {
        Self {
            error: Some(n),
            human: Vec::new(),
            agent: Vec::new(),
            snoozed: Vec::new(),
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "asks_home.html")]
pub struct HomePage<'a> {
    pub chrome: Chrome<'a>,
    pub asks: AskRows,
    pub rows: InboxRows,
}

/// `GET /`: the inbox, the console's home.
pub async fn home(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let now = st.console.now();
    // The inbox, and which of its asks are on issues assigned to the person (why each row is
    // here): two kept answers of the inbox cache.
    let asks = match st.console.asks().inbox_asks(h, None, None).await {
        Ok(inbox) => match st.console.asks().inbox_asks(h, None, Some("me")).await {
            Ok(mine) => {
                let m = mine.inbox();
                let mine: HashSet<AskId> = m
                    .human_turn
                    .iter()
                    .chain(&m.agent_turn)
                    .chain(&m.snoozed)
                    .map(|r| r.id)
                    .collect();
                AskRows::of(inbox.inbox(), &h.login, &mine)
            }
            Err(e) => AskRows::failed(notice("error", error_text(&e))),
        },
        Err(e) => AskRows::failed(notice("error", error_text(&e))),
    };
    let rows = match st.console.inbox(h).await {
        Ok(list) => InboxRows::of(list.as_deref(), &h.login, &now),
        Err(e) => InboxRows::failed(notice("error", error_text(&e))),
    };
    Ok(page(
        StatusCode::OK,
        &HomePage {
            chrome: chrome("Inbox", h, "/"),
            asks,
            rows,
        },
    ))
}

/// An entry of an ask's answers or edit history, for people.
#[derive(Debug)]
pub struct HistoryLine {
    pub at: When,
    pub by: String,
    pub what: String,
    pub current: bool,
}

/// A reply, for people.
#[derive(Debug)]
pub struct ReplyLine {
    pub id: String,
    pub by: String,
    pub at: When,
    pub body: String,
}

#[derive(Debug, Template)]
#[template(path = "asks_ask.html")]
pub struct AskPage<'a> {
    pub chrome: Chrome<'a>,
    pub a: AskRow,
    pub question_rest: String,
    pub turn: &'static str,
    pub followers: String,
    pub answers: Vec<HistoryLine>,
    pub history: Vec<HistoryLine>,
    pub replies: Vec<ReplyLine>,
    /// Where a reply is posted.
    pub comments_url: String,
}

/// `GET /asks/{id}`: one ask, answered with its options in one click.
pub async fn ask_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let a = match AskId::named(&id) {
        Ok(id) => st.console.asks().ask(id).await,
        Err(e) => Err(e),
    };
    let a = match a {
        Ok(a) => a,
        Err(e) => {
            return Ok(super::PageError::from(e)
                .back("/", "Back to your inbox")
                .into_response());
        }
    };
    let question_rest = a
        .head
        .question
        .split_once('\n')
        .map(|(_, r)| r.trim().to_owned())
        .unwrap_or_default();
    let followers = if a.followers.is_empty() {
        "none".to_owned()
    } else {
        a.followers.join(", ")
    };
    // Where it waits: its issue's assignee's inbox, or every person's (none read: unassigned).
    let assignee = match &a.head.issue {
        Some(k) => st
            .console
            .issues()
            .issue(k.as_str())
            .await
            .ok()
            .and_then(|i| i.assignee),
        None => None,
    };
    let mut row = AskRow::of(&summary(&a), &a.updated_at, None);
    row.author = asker_text(&a.author, &h.login);
    row.why = waits_text(
        a.turn,
        assignee.as_ref(),
        a.head.issue.is_some(),
        &row.author,
        &h.login,
    );
    Ok(page(
        StatusCode::OK,
        &AskPage {
            chrome: chrome("Ask", h, "/"),
            a: row,
            question_rest,
            turn: turn_text(a.turn),
            followers,
            answers: answer_lines(&a),
            history: wording_lines(&a),
            replies: reply_lines(&a),
            comments_url: comments_url(&a),
        },
    ))
}

/// An ask's answers, oldest first, the current one marked.
fn answer_lines(a: &AskView) -> Vec<HistoryLine> {
    a.answers
        .iter()
        .flatten()
        .map(|x| HistoryLine {
            at: html::when(&x.at),
            by: actor_text(&x.by),
            what: answer_text(&x.options, x.text.as_deref(), &a.head.options),
            current: x.current,
        })
        .collect()
}

/// An ask's edit history: each wording of its question.
fn wording_lines(a: &AskView) -> Vec<HistoryLine> {
    a.history
        .iter()
        .flatten()
        .map(|w| HistoryLine {
            at: html::when(&w.at),
            by: actor_text(&w.by),
            what: w.question.clone(),
            current: false,
        })
        .collect()
}

/// The replies to an ask.
fn reply_lines(a: &AskView) -> Vec<ReplyLine> {
    a.replies
        .iter()
        .flatten()
        .map(|v| &v.comment)
        .map(|c| ReplyLine {
            id: c.id.to_string(),
            by: actor_text(&c.author),
            at: html::when(&c.created_at),
            body: c.body.clone(),
        })
        .collect()
}

/// Where a reply to an ask is posted: its document's comments, else its issue's.
fn comments_url(a: &AskView) -> String {
    match (&a.head.artifact, &a.head.issue) {
        (Some(doc), _) => format!("/api/v1/artifacts/{doc}/comments"),
        (None, Some(k)) => format!("/api/v1/issues/{k}/comments"),
        (None, None) => String::new(),
    }
}

/// Whose turn an ask is, in words.
fn turn_text(turn: Option<Turn>) -> &'static str {
    match turn {
        Some(Turn::Human) => "a person's",
        Some(Turn::Agent) => "its agent's",
        None => "nobody's",
    }
}

/// A suggestion, as a diff.
#[derive(Debug)]
pub struct SuggestionLine {
    pub old: String,
    pub new: String,
    pub state: &'static str,
}

/// A thread beside a document: its root, suggestion and replies.
#[derive(Debug)]
pub struct ThreadView {
    pub id: String,
    pub quote: Option<String>,
    pub by: String,
    pub at: When,
    pub body: String,
    pub state: &'static str,
    pub suggestion: Option<SuggestionLine>,
    pub replies: Vec<ReplyLine>,
}

#[derive(Debug, Template)]
#[template(path = "asks_discussion.html")]
pub struct DiscussionPage<'a> {
    pub chrome: Chrome<'a>,
    pub id: String,
    pub filename: String,
    /// The engine's sanitized HTML.
    pub html: SafeHtml,
    pub threads: Vec<ThreadView>,
    pub asks: Vec<AskRow>,
    /// The comment form's fields as a link from the document page fills them (`?quote=`,
    /// `?block=`, `?suggest=1`: the replacement starts as the quote).
    pub quote: String,
    pub block: String,
    pub replacement: String,
    pub body: String,
}

/// `GET /artifacts/{id}/discussion`: a document with its comment threads beside it, each
/// suggestion a diff to accept or reject, and its asks.
pub async fn discussion_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> PageResult {
    use countersign_console_core::work::asks::{SuggestionState, ThreadState};
    let h = human(&caller)?;
    let rendered = st
        .console
        .documents()
        .rendered(ArtifactId::named(&id)?)
        .await?;
    let comments = st
        .console
        .asks()
        .document_comments(rendered.artifact.id)
        .await?;
    let asks = st
        .console
        .asks()
        .document_asks(rendered.artifact.id, Vec::new())
        .await?;
    let mut threads: Vec<ThreadView> = Vec::new();
    for c in comments.iter().map(|v| &v.comment) {
        if c.thread_id == c.id {
            threads.push(ThreadView {
                id: c.id.to_string(),
                quote: c.quote.as_ref().map(|q| q.exact.clone()),
                by: actor_text(&c.author),
                at: html::when(&c.created_at),
                body: c.body.clone(),
                state: match c.thread_state {
                    Some(ThreadState::Resolved) => "resolved",
                    _ => "open",
                },
                suggestion: c.suggestion.as_ref().map(|s| SuggestionLine {
                    old: c
                        .quote
                        .as_ref()
                        .map(|q| q.exact.clone())
                        .unwrap_or_default(),
                    new: s.replacement.clone(),
                    state: match s.state {
                        SuggestionState::Pending => "pending",
                        SuggestionState::Accepted => "accepted",
                        SuggestionState::Rejected => "rejected",
                    },
                }),
                replies: Vec::new(),
            });
        } else if let Some(t) = threads.iter_mut().find(|t| t.id == c.thread_id) {
            t.replies.push(ReplyLine {
                id: c.id.to_string(),
                by: actor_text(&c.author),
                at: html::when(&c.created_at),
                body: c.body.clone(),
            });
        }
    }
    Ok(page(
        StatusCode::OK,
        &DiscussionPage {
            chrome: chrome("Discussion", h, "/projects"),
            id: rendered.artifact.id.to_string(),
            filename: rendered.artifact.filename.clone(),
            html: rendered.html,
            threads,
            asks: asks
                .iter()
                .map(|a| AskRow::of(&summary(a), &a.updated_at, None))
                .collect(),
            quote: q.get("quote").cloned().unwrap_or_default(),
            block: q.get("block").cloned().unwrap_or_default(),
            replacement: if q.get("suggest").is_some_and(|s| s == "1") {
                q.get("quote").cloned().unwrap_or_default()
            } else {
                String::new()
            },
            body: String::new(),
        },
    ))
}

pub async fn script() -> Response {
    super::script_asset(SCRIPT)
}

pub async fn style() -> Response {
    super::style_asset(STYLE)
}

/// `GET /assets/mentions.js`: "@" in a comment or message box offers sessions and people.
pub async fn mentions_script() -> Response {
    super::script_asset(MENTIONS)
}

/// One of the person's answers or replies, for people.
#[derive(Debug)]
pub struct MineRow {
    pub ask: String,
    pub question: String,
    pub state: &'static str,
    pub owner: String,
    pub at: When,
    /// `answered` or `replied`.
    pub kind: &'static str,
    pub what: String,
    pub current: bool,
}

/// A credential decision, for people (issue 48): what was decided (the secrets, or the
/// machine logging in), for whom, the decision and when, linked to the request's page by the
/// name the agent was given.
#[derive(Debug)]
pub struct DecisionLine {
    /// The request's name: its request id (a machine login, or a record the broker no longer
    /// has: its record id).
    pub id: String,
    pub event: String,
    pub at: When,
    /// The secrets (or the machine login); the record id when the broker no longer has it.
    pub what: String,
    /// Who asked, in words with the raw ids on hover; none for a machine login.
    pub requester: Option<html::Requester>,
}

#[derive(Debug, Template)]
#[template(path = "asks_answers.html")]
pub struct AnswersPage<'a> {
    pub chrome: Chrome<'a>,
    pub rows: Vec<MineRow>,
    pub total: i64,
    pub offset: u32,
    pub next: Option<u32>,
    pub previous: Option<u32>,
    pub decisions: Vec<DecisionLine>,
    pub error: Option<String>,
}

/// How many answers a page of `/answers` shows.
const ANSWERS_SHOWN: u32 = 50;

/// `GET /answers`: what the person answered and replied on asks, newest first, and the
/// credential requests they decided.
pub async fn answers_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> PageResult {
    let h = human(&caller)?;
    let offset = q
        .get("offset")
        .and_then(|o| o.parse::<u32>().ok())
        .unwrap_or(0);
    let mut view = AnswersPage {
        chrome: chrome("Your answers", h, "/answers"),
        rows: Vec::new(),
        total: 0,
        offset,
        next: None,
        previous: (offset > 0).then(|| offset.saturating_sub(ANSWERS_SHOWN)),
        decisions: Vec::new(),
        error: None,
    };
    match st.console.asks().my_answers(h, ANSWERS_SHOWN, offset).await {
        Ok(p) => {
            view.total = p.total;
            if i64::from(offset) + (p.rows.len() as i64) < p.total {
                view.next = Some(offset + ANSWERS_SHOWN);
            }
            let labels = option_labels(&st, &p.rows).await;
            view.rows = p.rows.iter().map(|r| mine_row(r, &labels)).collect();
        }
        Err(e) => view.error = Some(error_text(&e)),
    }
    if offset == 0
        && let Ok(d) = st.console.decisions(h, 20).await
    {
        // Each record's facts as the broker has them now (one read each, as the history
        // page reads them).
        let mut records = Vec::with_capacity(d.len());
        for one in &d {
            records.push(st.console.record(h, &one.record_id).await);
        }
        view.decisions = d
            .into_iter()
            .zip(records)
            .map(|(d, rec)| match rec {
                Ok(rec) => DecisionLine {
                    id: rec.name().to_owned(),
                    event: d.event,
                    at: html::when(&d.at),
                    what: html::title_of(&rec),
                    requester: (!rec.is_machine_login()).then(|| html::session_text(&rec)),
                },
                Err(_) => DecisionLine {
                    what: d.record_id.clone(),
                    id: d.record_id,
                    event: d.event,
                    at: html::when(&d.at),
                    requester: None,
                },
            })
            .collect();
    }
    Ok(page(StatusCode::OK, &view))
}

/// The options of each ask on a page of answers that picked options (each ask read once; one
/// that cannot be read shows its options' ids).
async fn option_labels(
    st: &crate::AppState,
    rows: &[AnswerRow],
) -> std::collections::HashMap<AskId, Vec<AskOption>> {
    let mut labels: std::collections::HashMap<AskId, Vec<AskOption>> =
        std::collections::HashMap::new();
    for r in rows {
        if r.answer.as_ref().is_some_and(|a| !a.options.is_empty())
            && !labels.contains_key(&r.ask.id)
            && let Ok(a) = st.console.asks().ask(r.ask.id).await
        {
            labels.insert(r.ask.id, a.head.options);
        }
    }
    labels
}

/// One of the person's answers or replies, for people.
fn mine_row(r: &AnswerRow, labels: &std::collections::HashMap<AskId, Vec<AskOption>>) -> MineRow {
    let (kind, what, current) = match (r.kind, &r.answer, &r.reply) {
        (AnswerKind::Answer, Some(a), _) => (
            "answered",
            answer_text(
                &a.options,
                a.text.as_deref(),
                labels.get(&r.ask.id).map(Vec::as_slice).unwrap_or(&[]),
            ),
            a.current,
        ),
        (_, _, Some(rep)) => ("replied", rep.body.clone(), false),
        _ => ("answered", String::new(), false),
    };
    MineRow {
        ask: r.ask.id.to_string(),
        question: r.ask.question.lines().next().unwrap_or("").to_owned(),
        state: r.ask.state.as_str(),
        owner: actor_text(&r.ask.owner),
        at: html::when(&r.at),
        kind,
        what,
        current,
    }
}
