//! The issue page as the conversation: its fields edited in place, claim and release, its
//! description with task progress, and one timeline of comments (with replies), asks (with
//! their answers), messages, reviews and its history in words.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use countersign_console_core::Caller;
use countersign_console_core::doc::SafeHtml;
use countersign_console_core::ids::ArtifactId;
use countersign_console_core::work::asks::{AskState, AskView, CommentView, ThreadState};
use countersign_console_core::work::{Actor, Event, EventPage, IssueView};
use serde_json::Value;

use super::{HISTORY_READ, people, status_words, statuses};
use crate::html::{Chrome, When, actor_text, when};
use crate::pages::{PageError, PageResult, St, chrome, human, page};

/// The issue's fields as the page shows and edits them.
#[derive(Debug)]
pub struct IssueFacts {
    pub key: String,
    pub project: String,
    pub title: String,
    pub status: &'static str,
    pub status_text: String,
    pub priority: Option<u8>,
    pub labels: Vec<String>,
    pub labels_text: String,
    pub assignee: String,
    pub route: String,
    pub claim: Option<(String, When)>,
    pub claimed_by_me: bool,
    pub parent: Option<String>,
    pub children: Vec<String>,
    pub tasks: Option<(i64, i64)>,
    pub children_done: Option<(i64, i64)>,
    pub sequence: i64,
    pub created: When,
    pub updated: When,
}

/// One entry of the timeline.
#[derive(Debug)]
pub enum Entry {
    Comment(CommentEntry),
    Ask(Box<AskEntry>),
    Message {
        id: String,
        by: String,
        to: String,
        body: String,
        at: When,
        /// Its deliveries' states, each the latest attempt's (delivery attempts are not
        /// entries of their own).
        deliveries: Vec<Delivered>,
    },
    /// A history line in words ("ada changed status from todo to in progress").
    Change {
        by: String,
        what: String,
        at: When,
    },
}

/// A delivery's state, as a message or a mention shows it: the session it went to (its human
/// name when live) and its latest attempt's state in words.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub to: String,
    /// `delivered`, `waiting` or `failed`.
    pub state: &'static str,
    /// Why it failed, when it did.
    pub error: String,
}

impl Delivered {
    fn of(to: String, state: &str, error: Option<&str>) -> Self {
        Delivered {
            to,
            state: match state {
                "sent" => "delivered",
                "failed" => "failed",
                _ => "waiting",
            },
            error: error.unwrap_or("").replace('_', " "),
        }
    }
}

#[derive(Debug)]
pub struct CommentEntry {
    pub id: String,
    pub by: String,
    pub at: When,
    /// The body as sanitized HTML (the document engine's markdown).
    pub html: SafeHtml,
    pub on: Option<(String, String)>,
    pub quote: String,
    /// The sessions it mentions, each with its delivery's state.
    pub mentions: Vec<Delivered>,
    pub resolved: bool,
    pub edited: bool,
    pub replies: Vec<CommentEntry>,
}

#[derive(Debug)]
pub struct AskEntry {
    pub id: String,
    pub by: String,
    pub at: When,
    pub question: String,
    pub options: Vec<String>,
    pub state: &'static str,
    pub open: bool,
    pub answer: Option<String>,
    pub answered_by: String,
    pub closed: Option<String>,
    /// Where an open ask waits (whose turn, whose inbox), in words.
    pub waits: String,
    pub replies: Vec<CommentEntry>,
}

#[derive(Debug, Template)]
#[template(path = "issue.html")]
pub struct IssuePage<'a> {
    pub chrome: Chrome<'a>,
    pub i: IssueFacts,
    pub statuses: Vec<(&'static str, String)>,
    /// The description: `(document page, sanitized HTML)`.
    pub description: Option<(String, SafeHtml)>,
    pub documents: Vec<(String, String)>,
    pub timeline: Vec<Entry>,
    pub people: Vec<String>,
    pub sessions: Vec<(String, String)>,
    /// The session holding the issue (its claim): `(session id, human name)`; the page's
    /// message box sends to it.
    pub holder: Option<(String, String)>,
}

/// Markdown as the document engine renders it: sanitized, no raw HTML.
fn markdown_html(md: &str) -> SafeHtml {
    let mut n = 0u32;
    countersign_console_core::doc::Document::parse(md, &mut || {
        n += 1;
        format!("c{n}")
    })
    .to_html()
}

fn ask_state(s: AskState) -> &'static str {
    match s {
        AskState::Open => "open",
        AskState::Answered => "answered",
        AskState::Retracted => "retracted",
        AskState::Resolved => "resolved",
    }
}

/// What the page knows to name things: documents' filenames and live sessions' human names,
/// each by its id.
pub(crate) struct Names {
    pub docs: HashMap<String, String>,
    pub sessions: HashMap<String, String>,
}

impl Names {
    /// A session by its human name when it is live, else by its id.
    fn session(&self, id: &str) -> String {
        self.sessions
            .get(id)
            .cloned()
            .unwrap_or_else(|| format!("session {id}"))
    }
}

fn comment_entry(view: &CommentView, names: &Names) -> CommentEntry {
    let docs = &names.docs;
    let c = &view.comment;
    CommentEntry {
        id: c.id.to_string(),
        by: actor_text(&c.author),
        at: when(&c.created_at),
        html: markdown_html(&c.body),
        on: c.artifact.as_ref().map(|a| {
            (
                format!("/artifacts/{a}/discussion"),
                docs.get(&a.to_string())
                    .cloned()
                    .unwrap_or_else(|| "a document".into()),
            )
        }),
        quote: c
            .quote
            .as_ref()
            .map(|q| q.exact.clone())
            .unwrap_or_default(),
        mentions: view
            .mentions
            .iter()
            .map(|m| {
                let to = names.session(m.session_id.as_str());
                match m.deliveries.iter().max_by_key(|a| a.attempt) {
                    Some(a) => Delivered::of(to, a.state.as_str(), a.error.as_deref()),
                    None => Delivered::of(to, "pending", None),
                }
            })
            .collect(),
        resolved: c.thread_state == Some(ThreadState::Resolved),
        edited: c.edited_at.is_some(),
        replies: Vec::new(),
    }
}

/// A value of a change, in words.
fn value_words(field: &str, v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::String(s) if field == "status" => status_words(s),
        Value::String(s) => s.clone(),
        Value::Number(n) if field == "priority" => format!("P{n}"),
        Value::Array(a) if a.is_empty() => "none".into(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// An event of the issue's log in words, or none when the timeline shows it as its own entry
/// (comments, asks, messages).
pub fn event_words(e: &Event) -> Option<String> {
    let d = &e.facts.data;
    let s = |k: &str| d[k].as_str().unwrap_or("").to_owned();
    Some(match e.kind.as_str() {
        "issue.created" => "created the issue".into(),
        "issue.updated" => {
            let changes = d["changes"].as_object()?;
            let mut parts = Vec::new();
            for (field, pair) in changes {
                let (was, now) = (&pair[0], &pair[1]);
                let name = match field.as_str() {
                    "assignee" => "the assignee",
                    "labels" => "the labels",
                    "parent" => "the parent",
                    "priority" => "the priority",
                    "rank" => {
                        parts.push("moved it in the order".to_owned());
                        continue;
                    }
                    "components" => {
                        parts.push("changed its components".to_owned());
                        continue;
                    }
                    other => other,
                };
                parts.push(format!(
                    "changed {name} from {} to {}",
                    value_words(field, was),
                    value_words(field, now)
                ));
            }
            if parts.is_empty() {
                return None;
            }
            parts.join(", ")
        }
        "issue.claimed" => "claimed the issue".into(),
        "issue.released" => "released the claim".into(),
        "document.created" => format!("added the document {}", s("filename")),
        "document.versioned" => "named a version of a document".into(),
        "approval.requested" => "asked for approval of a document".into(),
        "approval.approved" => "approved a document".into(),
        "approval.changes_requested" => "asked for changes to a document".into(),
        "comment.resolved" => "resolved a thread".into(),
        "comment.reopened" => "reopened a thread".into(),
        "suggestion.accepted" => "accepted a suggestion".into(),
        "suggestion.rejected" => "rejected a suggestion".into(),
        "ask.answered" | "ask.retracted" | "ask.resolved" | "ask.reworded" => return None,
        "comment.created" | "comment.edited" | "ask.opened" | "ask.followed" | "ask.unfollowed" => {
            return None;
        }
        "message.sent" | "message.replied" | "message.accepted" => return None,
        // A delivery's attempts show as the state of the message or mention they deliver.
        "delivery.attempt" => return None,
        "document.edited" => "edited a document".into(),
        other => other.replace(['.', '_'], " "),
    })
}

pub async fn issue_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let issue = match st.console.issues().issue(&key).await {
        Ok(i) => i,
        Err(e) if e.status() == 404 => {
            return Err(PageError::not_found(format!("There is no issue {key}."))
                .back("/issues", "See your issues"));
        }
        Err(e) => return Err(e.into()),
    };
    let me = Actor::User {
        login: h.login.clone(),
    };
    let documents = issue_documents(&st, &key, &issue).await;
    let sessions = st
        .console
        .messages()
        .live_sessions()
        .await
        .map(|l| {
            l.into_iter()
                .map(|s| (s.session_id.into_string(), s.title))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let names = Names {
        docs: documents.filenames,
        sessions: sessions.iter().cloned().collect(),
    };
    let whose = Whose {
        assignee: issue.assignee.as_ref(),
        me: &h.login,
    };
    let timeline = issue_timeline(&st, &key, &names, &whose).await?;
    let holder = issue
        .claim
        .as_ref()
        .and_then(|c| c.holder.session())
        .map(|s| (s.to_string(), names.session(s.as_str())));
    let facts = issue_facts(&issue, &me, &names);
    let title = format!("{} {}", facts.key, facts.title);
    Ok(page(
        StatusCode::OK,
        &IssuePage {
            chrome: chrome(&title, h, ""),
            i: facts,
            statuses: statuses(),
            description: documents.description,
            documents: documents.links,
            timeline,
            people: people(&st).await,
            sessions,
            holder,
        },
    ))
}

/// An issue's documents as its page shows them.
struct IssueDocuments {
    /// Each document's filename by its id (what a comment on one names).
    filenames: HashMap<String, String>,
    /// The primary document's page and rendered HTML, shown as the description.
    description: Option<(String, SafeHtml)>,
    /// `(document page, filename)` of each.
    links: Vec<(String, String)>,
}

/// The issue's documents and its description (none when they cannot be read: the page shows
/// the rest).
async fn issue_documents(st: &crate::AppState, key: &str, issue: &IssueView) -> IssueDocuments {
    let artifacts = st
        .console
        .documents()
        .artifacts_of(countersign_console_core::console::documents::At::Issue(key))
        .await
        .unwrap_or_default();
    let filenames: HashMap<String, String> = artifacts
        .iter()
        .map(|a| (a.id.to_string(), a.filename.clone()))
        .collect();
    let primary = issue
        .primary_document
        .as_ref()
        .and_then(|d| d["id"].as_str().map(str::to_owned));
    let description = match &primary {
        Some(id) => match ArtifactId::parse(id) {
            Some(a) => st
                .console
                .documents()
                .rendered(a)
                .await
                .ok()
                .map(|r| (format!("/artifacts/{id}"), r.html)),
            None => None,
        },
        None => None,
    };
    let links = artifacts
        .iter()
        .map(|a| (format!("/artifacts/{}", a.id), a.filename.clone()))
        .collect();
    IssueDocuments {
        filenames,
        description,
        links,
    }
}

/// The timeline: comments (replies under their root), asks (with their replies), messages
/// and the history, in order.
async fn issue_timeline(
    st: &crate::AppState,
    key: &str,
    names: &Names,
    whose: &Whose<'_>,
) -> Result<Vec<Entry>, PageError> {
    let comments = st.console.asks().issue_comments(key, None).await?;
    let asks = st
        .console
        .asks()
        .issue_asks(key, AskState::ALL.to_vec())
        .await?;
    let history = st
        .console
        .issues()
        .issue_events(
            key,
            &EventPage {
                after: None,
                before: None,
                ids: vec![],
                descending: true,
                limit: HISTORY_READ,
            },
        )
        .await?;
    let mut timeline = thread_entries(&comments, &asks, names, whose);
    let mut deliveries = message_deliveries(&history, names);
    timeline.extend(
        history.iter().filter_map(|e| {
            history_entry(e, names, &mut deliveries).map(|entry| (e.facts.at, entry))
        }),
    );
    // A failed delivery of a message the history read no longer holds stays visible.
    for (_, ds) in deliveries {
        for (at, d) in ds.into_iter().filter(|(_, d)| d.state == "failed") {
            timeline.push((
                at,
                Entry::Change {
                    by: "console".into(),
                    what: format!("could not deliver a message to {}", d.to),
                    at: when(&at),
                },
            ));
        }
    }
    timeline.sort_by_key(|(at, _)| *at);
    Ok(timeline.into_iter().map(|(_, e)| e).collect())
}

/// Each message's deliveries from the history's `delivery.attempt` events (read newest
/// first): per session, its latest attempt's state, at that attempt's time.
fn message_deliveries(
    history: &[Event],
    names: &Names,
) -> HashMap<String, Vec<(countersign_console_core::Time, Delivered)>> {
    let mut latest: HashMap<(String, String), (i64, i64, countersign_console_core::Time, String)> =
        HashMap::new();
    for e in history.iter().filter(|e| e.kind == "delivery.attempt") {
        let d = &e.facts.data;
        if d["kind"] != "message" {
            continue;
        }
        let (Some(id), Some(session), Some(state)) = (
            d["id"].as_str(),
            d["session_id"].as_str(),
            d["state"].as_str(),
        ) else {
            continue;
        };
        let n = d["attempt"].as_i64().unwrap_or(0);
        let key = (id.to_owned(), session.to_owned());
        let newer = latest
            .get(&key)
            .is_none_or(|(m, ev, _, _)| (n, e.id) > (*m, *ev));
        if newer {
            latest.insert(key, (n, e.id, e.facts.at, state.to_owned()));
        }
    }
    let mut out: HashMap<String, Vec<_>> = HashMap::new();
    for ((id, session), (_, _, at, state)) in latest {
        out.entry(id)
            .or_default()
            .push((at, Delivered::of(names.session(&session), &state, None)));
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| a.1.to.cmp(&b.1.to));
    }
    out
}

/// Who the page's reader is, and the issue's assignee: where an ask waits is said from them.
pub(crate) struct Whose<'a> {
    pub assignee: Option<&'a countersign_console_core::Login>,
    pub me: &'a countersign_console_core::Login,
}

/// Where an open ask waits, in words for the person reading (empty when it waits on nobody).
fn waits_text(a: &AskView, whose: &Whose<'_>) -> String {
    use countersign_console_core::console::asks::waiting;
    use countersign_console_core::work::asks::Turn;
    let Some(w) = waiting(a.turn, whose.assignee) else {
        return String::new();
    };
    let inbox = match &w.inbox {
        Some(l) if l == whose.me => "your inbox (the issue is assigned to you)".to_owned(),
        Some(l) => format!("{l}'s inbox (the issue's assignee)"),
        None => "every person's inbox (the issue has no assignee)".to_owned(),
    };
    match w.turn {
        Turn::Human => format!("Waits for an answer in {inbox}."),
        Turn::Agent => format!(
            "A person asked back: waits on {} to reply; shown under \"Waiting on agents\" in \
             {inbox}.",
            actor_text(&a.author)
        ),
    }
}

/// The comment threads and the asks, each at its time: a root comment with its replies (and
/// theirs) under it, an ask with the replies to it and theirs.
fn thread_entries(
    comments: &[CommentView],
    asks: &[AskView],
    names: &Names,
    whose: &Whose<'_>,
) -> Vec<(countersign_console_core::Time, Entry)> {
    let mut timeline: Vec<(countersign_console_core::Time, Entry)> = Vec::new();
    let mut roots: Vec<CommentEntry> = Vec::new();
    let mut replies: HashMap<String, Vec<CommentEntry>> = HashMap::new();
    let mut ask_replies: HashMap<String, Vec<CommentEntry>> = HashMap::new();
    let mut root_at = Vec::new();
    for view in comments {
        let entry = comment_entry(view, names);
        let c = &view.comment;
        if let Some(p) = &c.parent {
            replies.entry(p.to_string()).or_default().push(entry);
        } else if let Some(a) = &c.ask {
            ask_replies.entry(a.to_string()).or_default().push(entry);
        } else {
            root_at.push(c.created_at);
            roots.push(entry);
        }
    }
    for (mut e, at) in roots.into_iter().zip(root_at) {
        attach(&mut e, &mut replies);
        timeline.push((at, Entry::Comment(e)));
    }
    for a in asks {
        let mut rs = Vec::new();
        for mut r in ask_replies
            .remove(&a.head.id.to_string())
            .unwrap_or_default()
        {
            attach(&mut r, &mut replies);
            let more = std::mem::take(&mut r.replies);
            rs.push(r);
            rs.extend(more);
        }
        timeline.push((a.created_at, Entry::Ask(Box::new(ask_entry(a, rs, whose)))));
    }
    timeline
}

/// A root's replies, and theirs, in thread order (shown as one list under the root).
fn attach(e: &mut CommentEntry, replies: &mut HashMap<String, Vec<CommentEntry>>) {
    fn under(
        id: &str,
        replies: &mut HashMap<String, Vec<CommentEntry>>,
        out: &mut Vec<CommentEntry>,
    ) {
        for r in replies.remove(id).unwrap_or_default() {
            let rid = r.id.clone();
            out.push(r);
            under(&rid, replies, out);
        }
    }
    let mut out = Vec::new();
    under(&e.id, replies, &mut out);
    e.replies = out;
}

/// A history event as a timeline entry: a message as its own entry (with its deliveries,
/// taken from `deliveries`), another event in words (none when [`event_words`] has none for
/// it).
fn history_entry(
    e: &Event,
    names: &Names,
    deliveries: &mut HashMap<String, Vec<(countersign_console_core::Time, Delivered)>>,
) -> Option<Entry> {
    match e.kind.as_str() {
        "message.sent" | "message.replied" => {
            let d = &e.facts.data;
            let to = match (
                d["target"]["session"].as_str(),
                d["target"]["role"].as_str(),
            ) {
                (Some(s), _) => names.session(s),
                (None, Some(r)) => format!("the role {r}"),
                (None, None) => d["target"].as_str().unwrap_or("").to_owned(),
            };
            let id = d["id"].as_str().unwrap_or("").to_owned();
            let deliveries = deliveries
                .remove(&id)
                .unwrap_or_default()
                .into_iter()
                .map(|(_, d)| d)
                .collect();
            Some(Entry::Message {
                id,
                by: actor_text(&e.facts.actor),
                to,
                body: d["body"].as_str().unwrap_or("").to_owned(),
                at: when(&e.facts.at),
                deliveries,
            })
        }
        _ => event_words(e).map(|what| Entry::Change {
            by: actor_text(&e.facts.actor),
            what,
            at: when(&e.facts.at),
        }),
    }
}

/// The issue's fields as the page shows them; `me` is the person reading. A live session
/// holding the claim is named by its title, its id beside it.
fn issue_facts(issue: &IssueView, me: &Actor, names: &Names) -> IssueFacts {
    let claim = issue.claim.as_ref().map(|c| {
        let holder = match c.holder.session() {
            Some(s) if names.sessions.contains_key(s.as_str()) => {
                format!("{} ({})", names.session(s.as_str()), actor_text(&c.holder))
            }
            _ => actor_text(&c.holder),
        };
        (holder, when(&c.at))
    });
    IssueFacts {
        key: issue.key.to_string(),
        project: issue.project.to_string(),
        title: issue.title.clone(),
        status: issue.status.as_str(),
        status_text: status_words(issue.status.as_str()),
        priority: issue.priority,
        labels: issue.labels.clone(),
        labels_text: issue.labels.join(", "),
        assignee: issue
            .assignee
            .as_ref()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        route: issue.route.clone().unwrap_or_default(),
        claimed_by_me: issue.claim.as_ref().is_some_and(|c| &c.holder == me),
        claim,
        parent: issue.parent.as_ref().map(|p| p.to_string()),
        children: issue.children.iter().map(|c| c.to_string()).collect(),
        tasks: issue.progress.tasks.map(|p| (p.done, p.total)),
        children_done: issue.progress.children.map(|p| (p.done, p.total)),
        sequence: issue.sequence,
        created: when(&issue.created_at),
        updated: when(&issue.updated_at),
    }
}

fn ask_entry(a: &AskView, replies: Vec<CommentEntry>, whose: &Whose<'_>) -> AskEntry {
    let label = |id: &str| {
        a.head
            .options
            .iter()
            .find(|o| o.id == id)
            .map(|o| o.label.clone())
            .unwrap_or_else(|| id.to_owned())
    };
    AskEntry {
        id: a.head.id.to_string(),
        by: actor_text(&a.author),
        at: when(&a.created_at),
        question: a.head.question.clone(),
        options: a.head.options.iter().map(|o| o.label.clone()).collect(),
        state: ask_state(a.head.state),
        open: a.head.state == AskState::Open,
        answer: a.head.answer.as_ref().map(|ans| {
            let mut parts: Vec<String> = ans.options.iter().map(|o| label(o)).collect();
            if let Some(t) = ans.text.as_deref().filter(|t| !t.is_empty()) {
                parts.push(t.to_owned());
            }
            parts.join(" — ")
        }),
        answered_by: a
            .head
            .answer
            .as_ref()
            .map(|ans| {
                format!(
                    "{} at {}",
                    actor_text(&ans.by),
                    ans.at.format(crate::html::TIME_FORMAT)
                )
            })
            .unwrap_or_default(),
        closed: a.closed.as_ref().map(|c| {
            format!(
                "{} by {}{}",
                ask_state(a.head.state),
                actor_text(&c.by),
                c.note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            )
        }),
        waits: waits_text(a, whose),
        replies,
    }
}
