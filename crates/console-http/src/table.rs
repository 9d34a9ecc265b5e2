//! The route table: one row per route, naming its method, path, caller class, the query
//! parameters it takes, its purpose and its handler (a row's type: `route.rs`). The router is
//! built from the rows (the server's `router`) and `GET /api/v1` answers them ([`describe`]), so
//! the two cannot drift and nothing joins a row to its handler by matching strings.
//!
//! A row is written with [`route!`]: the method names both the row's method and the axum
//! method filter its handler is mounted under, so they cannot disagree.

use serde::Serialize;

pub use crate::route::{Auth, Kind, RouteSpec};
use crate::{api, pages};

/// `route!(GET "/path", Class, Kind, [query…], "purpose", handler)`.
macro_rules! route {
    ($m:ident $path:literal, $auth:ident, $kind:ident, [$($q:literal),*], $purpose:literal, $h:path) => {
        RouteSpec {
            method: stringify!($m),
            path: $path,
            auth: Auth::$auth,
            kind: Kind::$kind,
            query: &[$($q),*],
            purpose: $purpose,
            handler: || axum::routing::on(axum::routing::MethodFilter::$m, $h),
        }
    };
}

/// Every route of the console.
pub static ROUTES: &[RouteSpec] = &[
    // The API's routes in the order of the spec's table (console-protocol.md §1.3), which
    // `GET /api/v1` lists them in.
    route!(GET "/api/v1", Anyone, Api, [], "the route table: method, path, caller class and purpose of every route", api::meta::index),
    route!(GET "/api/v1/me", HumanOrAgent, Api, [], "who the server takes the caller for (caller identity)", api::meta::me),
    route!(GET "/api/v1/people", HumanOnly, Api, [], "everyone who has signed in, by lowercase e-mail (assignee picker)", api::meta::people),
    route!(GET "/api/v1/agent-tokens", HumanOnly, Api, [], "list the caller's personal agent tokens", api::tokens::list),
    route!(POST "/api/v1/agent-tokens", HumanOnly, Api, [], "mint a personal agent token, shown once", api::tokens::mint),
    route!(DELETE "/api/v1/agent-tokens/{id}", HumanOnly, Api, [], "revoke one of the caller's personal agent tokens", api::tokens::revoke),
    route!(GET "/api/v1/block-schema", Anyone, Api, [], "the typed document block schema as JSON", api::documents::block_schema),
    route!(GET "/api/v1/search", HumanOrAgent, Api, ["q", "project", "limit", "offset"], "full-text search across issues, documents, asks, comments and messages", api::meta::search),
    route!(GET "/api/v1/references", HumanOrAgent, Api, ["to", "from", "kind", "since", "session"], "edges of one node in the reference graph (?to= or ?from=)", api::documents::graph),
    route!(GET "/api/v1/events", HumanOrAgent, Api, ["since"], "server-sent event stream, resumable by Last-Event-ID or ?since=", api::events::stream),
    route!(GET "/api/v1/projects", HumanOrAgent, Api, [], "list projects", api::projects::list),
    route!(POST "/api/v1/projects", HumanOrAgent, Api, [], "create a project {key, name}", api::projects::create),
    route!(GET "/api/v1/projects/{key}/components", HumanOrAgent, Api, ["session"], "the project's component tree with attached work", api::delivery::components),
    route!(GET "/api/v1/projects/{key}/artifacts", HumanOrAgent, Api, ["session"], "list a project's documents and files", api::documents::scoped::list::<api::documents::OnProject>),
    route!(POST "/api/v1/projects/{key}/artifacts", HumanOrAgent, Api, ["session"], "upload a project document or file (JSON or multipart)", api::documents::scoped::upload::<api::documents::OnProject>),
    route!(GET "/api/v1/projects/{key}/artifacts/{slug}", HumanOrAgent, Api, ["session"], "read a project document by slug or unambiguous filename", api::documents::scoped::read::<api::documents::OnProject>),
    route!(GET "/api/v1/projects/{key}/artifacts/{slug}/blocks", HumanOrAgent, Api, ["session"], "blocks and tokens of a project document", api::documents::scoped::blocks::<api::documents::OnProject>),
    route!(POST "/api/v1/projects/{key}/artifacts/{slug}/edits", HumanOrAgent, Api, [], "apply edit ops to a project document", api::documents::scoped::edit::<api::documents::OnProject>),
    route!(GET "/api/v1/projects/{key}/artifacts/{slug}/text", HumanOrAgent, Api, ["session"], "canonical markdown and token of a project document", api::documents::scoped::text::<api::documents::OnProject>),
    route!(POST "/api/v1/projects/{key}/artifacts/{slug}/versions", HumanOrAgent, Api, [], "name the current version of a project document", api::documents::scoped::name_version::<api::documents::OnProject>),
    route!(GET "/api/v1/projects/{key}/artifacts/{slug}/versions/{number}", HumanOrAgent, Api, ["session"], "one version of a project document", api::documents::scoped::version::<api::documents::OnProject>),
    route!(GET "/api/v1/projects/{key}/architecture-source", HumanOrAgent, Api, ["session"], "the project's architecture source, or null", api::delivery::get_source),
    route!(PUT "/api/v1/projects/{key}/architecture-source", HumanOrAgent, Api, [], "set the architecture source {repo, branch} once readable", api::delivery::put_source),
    route!(DELETE "/api/v1/projects/{key}/architecture-source", HumanOrAgent, Api, ["session"], "remove the project's architecture source", api::delivery::delete_source),
    route!(POST "/api/v1/projects/{key}/architecture-source/sync", HumanOrAgent, Api, [], "import the architecture source now", api::delivery::sync_source),
    route!(GET "/api/v1/architecture-sources", HumanOrAgent, Api, [], "every project's architecture source", api::delivery::list_sources),
    route!(GET "/api/v1/settings/repo-projects", HumanOrAgent, Api, [], "repository-to-project mappings, each with its default mark", api::projects::mappings),
    route!(PUT "/api/v1/settings/repo-projects/{owner}/{repo}", HumanOrAgent, Api, [], "map a repository to a project {project, default?}", api::projects::put_mapping),
    route!(DELETE "/api/v1/settings/repo-projects/{owner}/{repo}", HumanOrAgent, Api, ["session"], "remove a mapping no issue names as its repo", api::projects::delete_mapping),
    route!(GET "/api/v1/issues", HumanOrAgent, Api,
        ["project", "status", "parent", "label", "priority", "open", "updated_since", "route_status", "pinned", "limit", "offset", "cursor", "session"],
        "list issues by filters; paged by limit and offset", api::issues::list),
    route!(POST "/api/v1/issues", HumanOrAgent, Api, [], "create an issue, native or from owner/repo#n", api::issues::create),
    route!(GET "/api/v1/issues/resolve", HumanOrAgent, Api, ["ref"], "resolve ?ref=<KEY or owner/repo#n> to an issue key", api::issues::resolve),
    route!(GET "/api/v1/issues/{key}", HumanOrAgent, Api, ["session"], "read an issue with open asks, primary document, children and progress", api::issues::read),
    route!(PATCH "/api/v1/issues/{key}", HumanOrAgent, Api, [], "update an issue; expected_sequence makes it conditional", api::issues::update),
    route!(GET "/api/v1/issues/{key}/artifacts", HumanOrAgent, Api, ["session"], "list an issue's documents and files", api::documents::scoped::list::<api::documents::OnIssue>),
    route!(POST "/api/v1/issues/{key}/artifacts", HumanOrAgent, Api, ["session"], "upload an issue document or file (JSON or multipart)", api::documents::scoped::upload::<api::documents::OnIssue>),
    route!(GET "/api/v1/issues/{key}/artifacts/{slug}", HumanOrAgent, Api, ["session"], "read an issue document by slug or unambiguous filename", api::documents::scoped::read::<api::documents::OnIssue>),
    route!(GET "/api/v1/issues/{key}/artifacts/{slug}/blocks", HumanOrAgent, Api, ["session"], "blocks and tokens of an issue document", api::documents::scoped::blocks::<api::documents::OnIssue>),
    route!(POST "/api/v1/issues/{key}/artifacts/{slug}/edits", HumanOrAgent, Api, [], "apply edit ops to an issue document", api::documents::scoped::edit::<api::documents::OnIssue>),
    route!(GET "/api/v1/issues/{key}/artifacts/{slug}/text", HumanOrAgent, Api, ["session"], "canonical markdown and token of an issue document", api::documents::scoped::text::<api::documents::OnIssue>),
    route!(POST "/api/v1/issues/{key}/artifacts/{slug}/versions", HumanOrAgent, Api, [], "name the current version of an issue document", api::documents::scoped::name_version::<api::documents::OnIssue>),
    route!(GET "/api/v1/issues/{key}/artifacts/{slug}/versions/{number}", HumanOrAgent, Api, ["session"], "one version of an issue document", api::documents::scoped::version::<api::documents::OnIssue>),
    route!(GET "/api/v1/issues/{key}/asks", HumanOrAgent, Api, ["state", "session"], "list an issue's asks (?state=)", api::asks::issue_list),
    route!(POST "/api/v1/issues/{key}/asks", HumanOrAgent, Api, [], "open a question ask on an issue", api::asks::issue_open),
    route!(POST "/api/v1/issues/{key}/claim", HumanOrAgent, Api, [], "claim the issue for the calling session or person", api::issues::claim),
    route!(DELETE "/api/v1/issues/{key}/claim", HumanOrAgent, Api, ["session"], "release the issue's claim", api::issues::release),
    route!(GET "/api/v1/issues/{key}/comments", HumanOrAgent, Api, ["artifact", "session"], "list an issue's comments (?artifact= scopes to a document)", api::comments::issue_list),
    route!(POST "/api/v1/issues/{key}/comments", HumanOrAgent, Api, [], "comment on an issue, a document quote or an ask", api::comments::issue_create),
    route!(GET "/api/v1/issues/{key}/events", HumanOrAgent, Api, ["after", "before", "ids", "order", "limit", "session"], "page the issue's event log", api::issues::events),
    route!(POST "/api/v1/issues/{key}/messages", HumanOrAgent, Api, [], "post an issue message to a session or role", api::messages::post_issue_message),
    route!(GET "/api/v1/issues/{key}/messages/{id}", HumanOrAgent, Api, ["session"], "one issue message with deliveries and replies", api::messages::get_issue_message),
    route!(GET "/api/v1/issues/{key}/references", HumanOrAgent, Api, ["session"], "cross-references to and from the issue", api::documents::issue_references),
    route!(GET "/api/v1/issues/{key}/subscribers", HumanOnly, Api, [], "sessions subscribed to the issue's topics", api::issues::subscribers),
    route!(DELETE "/api/v1/issues/{key}/subscribers/{session_id}", HumanOnly, Api, [], "unsubscribe a session from an issue", api::issues::unsubscribe),
    route!(GET "/api/v1/artifacts/{id}", HumanOrAgent, Api, ["session"], "document metadata and current version", api::documents::read),
    route!(GET "/api/v1/artifacts/{id}/asks", HumanOrAgent, Api, ["state", "session"], "list a document's asks", api::asks::document_list),
    route!(POST "/api/v1/artifacts/{id}/asks", HumanOrAgent, Api, [], "open an ask on a document", api::asks::document_open),
    route!(POST "/api/v1/artifacts/{id}/approval-requests", HumanOrAgent, Api, [], "open an approval ask for the latest version", api::asks::request_approval),
    route!(GET "/api/v1/artifacts/{id}/blocks", HumanOrAgent, Api, ["session"], "blocks with markdown ranges, tokens and reference counts", api::documents::blocks),
    route!(GET "/api/v1/artifacts/{id}/blocks/{block_id}", HumanOrAgent, Api, ["session"], "position of one block", api::documents::block),
    route!(GET "/api/v1/artifacts/{id}/comments", HumanOrAgent, Api, ["session"], "list a document's comments", api::comments::document_list),
    route!(POST "/api/v1/artifacts/{id}/comments", HumanOrAgent, Api, [], "comment on a document or one of its quotes", api::comments::document_create),
    route!(POST "/api/v1/artifacts/{id}/edits", HumanOrAgent, Api, [], "apply quote-anchored edit ops", api::documents::edit),
    route!(GET "/api/v1/artifacts/{id}/events", HumanOrAgent, Api, ["after", "before", "ids", "order", "limit", "session"], "page the document's event log", api::documents::events),
    route!(POST "/api/v1/artifacts/{id}/rebuild", HumanOnly, Api, [], "rebuild an unloadable history from the latest saved markdown", api::documents::rebuild),
    route!(GET "/api/v1/artifacts/{id}/references", HumanOrAgent, Api, ["session"], "cross-references to and from the document", api::documents::references),
    route!(GET "/api/v1/artifacts/{id}/reviews", HumanOrAgent, Api, ["session"], "list approval reviews", api::asks::reviews),
    route!(POST "/api/v1/artifacts/{id}/reviews", HumanOnly, Api, [], "approve or request changes on the latest settled version", api::asks::review),
    route!(GET "/api/v1/artifacts/{id}/subscribers", HumanOnly, Api, [], "sessions subscribed to the document's topics", api::documents::subscribers),
    route!(DELETE "/api/v1/artifacts/{id}/subscribers/{session_id}", HumanOnly, Api, [], "unsubscribe a session from a document", api::documents::unsubscribe),
    route!(GET "/api/v1/artifacts/{id}/text", HumanOrAgent, Api, ["session"], "canonical markdown and whole-document token", api::documents::text),
    route!(POST "/api/v1/artifacts/{id}/versions", HumanOrAgent, Api, [], "name the current version", api::documents::name_version),
    route!(GET "/api/v1/artifacts/{id}/versions/{number}", HumanOrAgent, Api, ["session"], "one named or settled version", api::documents::version),
    route!(POST "/api/v1/agents/{session_id}/artifacts", HumanOrAgent, Api, ["session"], "upload a file or image to an agent's conversation", api::documents::agent_upload),
    route!(GET "/api/v1/agents/{session_id}/artifacts/{slug}", HumanOrAgent, Api, ["session"], "an agent conversation file or image with its versions", api::documents::agent_read),
    route!(GET "/api/v1/agents/{session_id}/artifacts/{slug}/versions/{number}", HumanOrAgent, Api, ["session"], "download one version of an agent conversation file", api::documents::agent_version),
    route!(GET "/api/v1/asks", HumanOrAgent, Api, ["author_session", "project", "session"], "open asks in one scope with counts (?author_session= or ?project=)", api::asks::scope),
    route!(GET "/api/v1/asks/{id}", HumanOrAgent, Api, ["session"], "one ask with replies and edit history", api::asks::read),
    route!(PATCH "/api/v1/asks/{id}", HumanOrAgent, Api, [], "reword an open ask", api::asks::reword),
    route!(POST "/api/v1/asks/{id}/answer", HumanOnly, Api, [], "answer with selected options and/or text", api::asks::answer),
    route!(POST "/api/v1/asks/{id}/close", HumanOrAgent, Api, [], "retract or resolve an ask without answering", api::asks::close),
    route!(GET "/api/v1/asks/{id}/recipients", HumanOrAgent, Api, ["session"], "sessions reached by the ask's answer and replies", api::asks::recipients),
    route!(PUT "/api/v1/asks/{id}/followers/{session_id}", HumanOrAgent, Api, ["session"], "follow an ask", api::asks::follow),
    route!(DELETE "/api/v1/asks/{id}/followers/{session_id}", HumanOrAgent, Api, ["session"], "unfollow an ask", api::asks::unfollow),
    route!(GET "/api/v1/comments/{id}", HumanOrAgent, Api, ["session"], "one comment with its thread", api::comments::read),
    route!(PATCH "/api/v1/comments/{id}", HumanOnly, Api, [], "edit a comment's body", api::comments::edit),
    route!(POST "/api/v1/comments/{id}/suggestion/accept", HumanOnly, Api, [], "accept a suggestion: apply its replacement", api::comments::accept),
    route!(POST "/api/v1/comments/{id}/suggestion/reject", HumanOnly, Api, [], "reject a suggestion", api::comments::reject),
    route!(POST "/api/v1/comments/{id}/deliveries", HumanOrAgent, Api, [], "retry a mention delivery", api::comments::retry),
    route!(POST "/api/v1/comments/{id}/reopen", HumanOnly, Api, [], "reopen a resolved thread", api::comments::reopen),
    route!(POST "/api/v1/comments/{id}/resolve", HumanOrAgent, Api, [], "resolve a thread", api::comments::resolve),
    route!(POST "/api/v1/comments/{id}/replies", AgentOnly, Api, [], "the mentioned session's reply to a delivery", api::comments::reply),
    route!(GET "/api/v1/broadcasts", HumanOnly, Api, ["limit", "offset"], "recent broadcasts with recipient and reply counts", api::messages::list_broadcasts),
    route!(POST "/api/v1/broadcasts", HumanOnly, Api, [], "send one message to many sessions under an idempotency_key", api::messages::send_broadcast),
    route!(GET "/api/v1/broadcasts/{id}", HumanOnly, Api, [], "one broadcast with every recipient's attempts and replies", api::messages::get_broadcast),
    route!(GET "/api/v1/sessions", HumanOrAgent, Api, [], "live sessions with roles, capabilities, open asks and last activity", crate::link::list),
    route!(GET "/api/v1/sessions/{session_id}/messages", HumanOnly, Api, ["limit", "offset"], "a session's targeted messages, newest first", api::messages::session_messages),
    route!(POST "/api/v1/sessions/{session_id}/messages", HumanOnly, Api, [], "send an issue-less targeted message to a session", api::messages::post_session_message),
    route!(GET "/api/v1/sessions/{session_id}/relay", HumanOnly, Api, [], "server-sent relay of a live session's conversation", crate::link::relay),
    route!(GET "/api/v1/messages/{id}/thread", HumanOrAgent, Api, ["session"], "the conversation a message belongs to, oldest first", api::messages::thread),
    route!(POST "/api/v1/messages/{id}/deliveries", HumanOrAgent, Api, [], "retry delivering a targeted message", api::messages::retry),
    route!(POST "/api/v1/messages/{id}/deliveries/{attempt}/accept", AgentOnly, Api, [], "the targeted session accepts a delivery attempt", api::messages::accept),
    route!(POST "/api/v1/messages/{id}/replies", AgentOnly, Api, ["follow_up"], "the targeted session's reply to a delivery", api::messages::reply),
    route!(GET "/api/v1/inbox", HumanOnly, Api, ["project", "assignee"], "open asks waiting on the caller, grouped by whose turn it is", api::asks::inbox),
    route!(GET "/api/v1/inbox/answers", HumanOnly, Api, ["limit", "offset"], "the caller's own answers and replies on asks, newest first", api::asks::answers),
    route!(PUT "/api/v1/inbox/asks/{id}/snooze", HumanOnly, Api, [], "snooze an inbox row until snoozed_until", api::asks::snooze),
    route!(DELETE "/api/v1/inbox/asks/{id}/snooze", HumanOnly, Api, [], "un-snooze an inbox row", api::asks::unsnooze),
    route!(GET "/api/v1/inbox/issues", HumanOnly, Api, [], "the caller's per-issue read state", api::issues::read_states),
    route!(PATCH "/api/v1/inbox/issues/{key}", HumanOnly, Api, [], "update the caller's read state for an issue", api::issues::update_read_state),
    route!(GET "/api/v1/inbox/threads", HumanOnly, Api, ["issue", "artifact", "limit", "offset"], "threads with replies the caller has not read", api::messages::inbox_threads),
    route!(POST "/api/v1/inbox/threads/{id}/read", HumanOnly, Api, [], "move the caller's read mark on a thread forward", api::messages::mark_thread_read),
    route!(GET "/api/v1/inbox/agents", HumanOnly, Api, [], "the caller's per-agent conversation state", api::messages::agent_states),
    route!(PATCH "/api/v1/inbox/agents/{session_id}", HumanOnly, Api, [], "clear or mark read an agent's conversation for the caller", api::messages::update_agent_state),
    route!(GET "/api/v1/delivery/timeline", HumanOrAgent, Api,
        ["from", "to", "q", "repo", "parent_agent", "session", "issue", "priority", "component", "author", "rework", "deployed"],
        "delivery timeline for [from, to) with search and facets", api::delivery::timeline),
    route!(GET "/api/v1/delivery/measures", HumanOrAgent, Api,
        ["from", "to", "q", "repo", "parent_agent", "session", "issue", "priority", "component", "author", "rework", "deployed"],
        "delivery measures for [from, to)", api::delivery::measures),
    route!(GET "/api/v1/delivery/pipeline", HumanOrAgent, Api, ["at"], "pipeline page over seven UTC days", api::delivery::pipeline),
    route!(GET "/api/v1/delivery/runs/{id}", HumanOrAgent, Api, [], "one deploy-repository run with every job", api::delivery::run),
    route!(POST "/api/v1/delivery/session-groups", HumanOrAgent, Api, [], "create a session group {name, sessions}", api::delivery::create_group),
    route!(PATCH "/api/v1/delivery/session-groups/{id}", HumanOrAgent, Api, [], "rename a session group, add or remove sessions", api::delivery::update_group),
    route!(DELETE "/api/v1/delivery/session-groups/{id}", HumanOrAgent, Api, ["session"], "delete a session group", api::delivery::delete_group),
    route!(GET "/api/v1/delivery/settings", HumanOrAgent, Api, ["session"], "the delivery configuration, or null", api::delivery::get_settings),
    route!(PUT "/api/v1/delivery/settings", HumanOrAgent, Api, [], "set the delivery configuration once readable", api::delivery::put_settings),
    route!(GET "/api/v1/credential-requests", HumanOnly, Api, ["approver"], "credential requests the caller may decide (?approver=me)", api::front::list_requests),
    route!(POST "/api/v1/credential-requests/machine-lookup", HumanOnly, Api, [], "find a pending machine login by its typed code", api::front::machine_lookup),
    route!(GET "/api/v1/credential-requests/{id}", HumanOnly, Api, [], "one credential request's facts, from the broker", api::front::get_request),
    route!(POST "/api/v1/credential-requests/{id}/approve", HumanOnly, Api, [], "approve as the caller (a machine login takes its code)", api::front::approve),
    route!(POST "/api/v1/credential-requests/{id}/deny", HumanOnly, Api, [], "deny as the caller", api::front::deny),
    route!(POST "/api/v1/credential-requests/{id}/statement", HumanOnly, Api, [], "the statement the caller's passkey countersigns to approve, with a fresh nonce (docs/passkeys.md)", api::front::statement),
    route!(GET "/api/v1/notification-preferences", HumanOnly, Api, [], "how the caller hears that something waits for them (e-mail, Slack, a signed webhook, a digest)", api::front::get_notification_preferences),
    route!(PUT "/api/v1/notification-preferences", HumanOnly, Api, [], "set how the caller hears that something waits for them", api::front::put_notification_preferences),
    route!(GET "/api/v1/passkeys", HumanOnly, Api, [], "the caller's passkeys", api::front::list_passkeys),
    route!(POST "/api/v1/passkeys/challenge", HumanOnly, Api, [], "a registration challenge for the caller's new passkey", api::front::passkey_challenge),
    route!(POST "/api/v1/passkeys", HumanOnly, Api, [], "register a passkey: with an operator's enrollment code, or endorsed by one already registered", api::front::register_passkey),
    route!(PATCH "/api/v1/passkeys/{id}", HumanOnly, Api, [], "rename one of the caller's passkeys", api::front::rename_passkey),
    route!(POST "/api/v1/passkeys/{id}/remove", HumanOnly, Api, [], "remove one of the caller's passkeys", api::front::remove_passkey),
    route!(GET "/api/v1/credential-grants", HumanOnly, Api, ["approver"], "credential grants the caller may revoke (?approver=me)", api::front::list_grants),
    route!(POST "/api/v1/credential-grants/{id}/revoke", HumanOnly, Api, [], "revoke a broker grant as the caller", api::front::revoke_grant),
    route!(GET "/api/v1/machine-logins", HumanOnly, Api, [], "machine logins the caller may revoke", api::front::list_machines),
    route!(POST "/api/v1/machine-logins/{id}/revoke", HumanOnly, Api, [], "revoke a machine login, ending every session it enrolled", api::front::revoke_machine),
    // ----- pages -----
    route!(GET "/", HumanOnly, Page, [], "the inbox: agents' asks by whose turn, and credential requests waiting for the signed-in person", pages::asks::home),
    route!(GET "/inbox/rows", HumanOnly, Page, [], "the inbox's rows, for the page's live refresh", pages::inbox_rows),
    route!(GET "/requests/{id}", HumanOnly, Page, [], "one credential request, to approve or deny", pages::request_page),
    route!(GET "/machines/approve", HumanOnly, Page, [], "approve a machine login by its typed confirmation code", pages::machine_approve_page),
    route!(GET "/machines", HumanOnly, Page, [], "machine logins the person may revoke", pages::machines_page),
    route!(GET "/grants", HumanOnly, Page, [], "credential grants the person may revoke", pages::grants_page),
    route!(GET "/tokens", HumanOnly, Page, [], "the person's personal agent tokens", pages::tokens_page),
    route!(GET "/history", HumanOnly, Page, [], "what the person decided through this console, newest first", pages::history_page),
    route!(GET "/notifications", HumanOnly, Page, [], "how the person hears that something waits for them", pages::notifications_page),
    route!(GET "/passkeys", HumanOnly, Page, [], "the person's passkeys: register one, name it, remove it (docs/passkeys.md)", pages::passkeys_page),
    route!(POST "/passkeys/enroll-code", HumanOnly, Page, [], "dev mode only: a fresh enrollment code for the person's first passkey, shown on the Passkeys page", pages::passkeys_enroll_code),
    route!(GET "/notifications/mailbox", HumanOnly, Page, [], "dev mode's mailbox: every notice the person would be sent, as e-mail and webhooks carry it, with its links", pages::mailbox::mailbox_page),
    route!(GET "/projects", HumanOnly, Page, [], "the projects, each with its issue list; create one", pages::work::projects_page),
    route!(GET "/projects/{key}/issues", HumanOnly, Page, [], "a project's issues: paged, filtered by status, assignee, priority and label, sorted, or a board by status; create one", pages::work::issues_page),
    route!(GET "/issues", HumanOnly, Page, [], "the person's issues across projects (?assignee= another's), paged and filtered, or a board", pages::work::my_issues_page),
    route!(GET "/search", HumanOnly, Page, [], "search from the header: issues, documents, asks, comments and messages by their words, each linked to its page", pages::search::search_page),
    route!(GET "/issues/{key}", HumanOnly, Page, [], "one issue as the conversation: its fields edited in place, claim, description, comments, asks, messages and history in one live timeline", pages::work::issue_page),
    // ----- pages: documents (issue 12) -----
    route!(GET "/artifacts/{id}", HumanOnly, Page, [], "one document: its rendered blocks, versions and a diff between two, updated live", pages::documents::document_page),
    route!(GET "/artifacts/{id}/part", HumanOnly, Page, [], "the next part of a long document's rendered blocks (`?from=` a block index, `?token=` the text the page showed), as an HTML fragment", pages::documents::part),
    route!(GET "/artifacts/{id}/versions/{number}", HumanOnly, Page, [], "one version of a document, rendered (a file's or image's to download)", pages::documents::version_page),
    route!(GET "/artifacts/{id}/edit", HumanOnly, Page, [], "the markdown editor with a preview; a stale save shows what changed and keeps the person's text", pages::documents::edit_page),
    route!(POST "/documents/preview", HumanOnly, Page, [], "markdown rendered as the document page renders it, for the editor's preview", pages::documents::preview),
    route!(GET "/projects/{key}/documents", HumanOnly, Page, [], "a project's documents and files, with the forms that write and upload one", pages::documents::list_page),
    route!(GET "/assets/documents.js", Anyone, Page, [], "the document page's script", pages::documents::script),
    route!(GET "/assets/documents.css", Anyone, Page, [], "the document page's style sheet", pages::documents::style),
    // ----- pages: asks and the inbox (issue 13) -----
    route!(GET "/artifacts/{id}/discussion", HumanOnly, Page, [], "a document with its comment threads beside it: suggestions as diffs to accept or reject, its asks", pages::asks::discussion_page),
    route!(GET "/asks/{id}", HumanOnly, Page, [], "one ask: answer it with its options in one click, its replies and history", pages::asks::ask_page),
    route!(GET "/answers", HumanOnly, Page, [], "the person's own answers and replies on asks, and the credential requests they decided", pages::asks::answers_page),
    route!(GET "/assets/asks.js", Anyone, Page, [], "the asks pages' script", pages::asks::script),
    route!(GET "/assets/asks.css", Anyone, Page, [], "the asks pages' style sheet", pages::asks::style),
    route!(GET "/assets/mentions.js", Anyone, Page, [], "\"@\" in a comment or message box: live sessions and people offered by name", pages::asks::mentions_script),
    // ----- pages: conversations, relay, broadcasts (issue 14) -----
    route!(GET "/sessions", HumanOnly, Page, [], "the live sessions, each with its conversation and relay", pages::messages::sessions_page),
    route!(GET "/sessions/{session_id}", HumanOnly, Page, [], "a conversation with a session: its messages and replies, unread marks, a send box with the mode", pages::messages::conversation_page),
    route!(GET "/sessions/{session_id}/relay", HumanOnly, Page, [], "a live session's conversation as it works, relayed from the session", pages::messages::relay_page),
    route!(GET "/broadcasts", HumanOnly, Page, [], "send a broadcast and see each recipient's result; the recent broadcasts", pages::messages::broadcasts_page),
    route!(GET "/broadcasts/{id}", HumanOnly, Page, [], "one broadcast: every recipient's attempts and replies", pages::messages::broadcast_page),
    route!(GET "/messages/{id}", HumanOnly, Page, [], "a message, read where it was written: its conversation or its issue", pages::messages::message_page),
    route!(GET "/assets/messages.js", Anyone, Page, [], "the conversation pages' script", pages::messages::script),
    route!(GET "/assets/messages.css", Anyone, Page, [], "the conversation pages' style sheet", pages::messages::style),
    // ----- pages: delivery and architecture (issue 15) -----
    route!(GET "/delivery", HumanOnly, Page, [], "the delivery timeline with facets, the daily chart and the measures against targets", pages::delivery::timeline_page),
    route!(GET "/delivery/pipeline", HumanOnly, Page, [], "the pipeline page over seven UTC days", pages::delivery::pipeline_page),
    route!(GET "/settings", HumanOnly, Page, [], "the delivery settings, each project's architecture source and the repository mappings, as forms", pages::delivery::settings_page),
    route!(GET "/projects/{key}/components", HumanOnly, Page, [], "a project's component tree with its issues", pages::delivery::components_page),
    route!(GET "/assets/delivery.css", Anyone, Page, [], "the delivery pages' style sheet", pages::delivery::style),
    route!(POST "/sign-out", HumanOnly, Page, [], "sign out (ends the browser session)", pages::sign_out),
    route!(GET "/sign-in", Anyone, Page, [], "sign-in page", pages::sign_in_page),
    route!(GET "/auth/oidc", Anyone, Page, [], "start signing in with the OpenID provider", pages::oidc_start),
    route!(GET "/auth/callback", Anyone, Page, [], "the OpenID provider's redirect back", pages::oidc_callback),
    route!(POST "/auth/local", Anyone, Page, [], "dev mode: sign in by naming an e-mail", pages::local_sign_in),
    route!(GET "/assets/console.js", Anyone, Page, [], "the pages' script", pages::script),
    route!(GET "/assets/console.css", Anyone, Page, [], "the pages' style sheet", pages::style),
    route!(GET "/favicon.svg", Anyone, Page, [], "the pages' icon", pages::favicon),
    route!(GET "/favicon.ico", Anyone, Page, [], "the pages' icon, where browsers look for it by themselves", pages::favicon),
    route!(GET "/inbox/count", HumanOnly, Page, [], "how many asks and requests wait on the person: the navigation's count", pages::inbox_count),
    route!(GET "/link/v1/sessions/{session_id}", AgentOnly, Api, [], "the session link: one WebSocket per live session (subprotocol countersign.link.v1)", crate::link::link),
    route!(POST "/hooks/broker", Anyone, Api, [], "the broker's expiry webhook (Standard Webhooks; protocol §8)", crate::hooks::broker),
    route!(GET "/healthz", Anyone, Api, [], "health: the console's database answers", api::meta::health),
    route!(GET "/readyz", Anyone, Api, [], "readiness: the database answers and the broker is ready", api::meta::readyz),
    route!(GET "/metrics", Anyone, Api, [], "Prometheus metrics (docs/metrics.md)", api::meta::metrics_page),
];

/// One row of the `GET /api/v1` answer.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub method: &'static str,
    pub path: &'static str,
    pub auth: &'static str,
    pub purpose: &'static str,
}

/// The `GET /api/v1` answer (protocol §1.2).
#[derive(Debug, Serialize)]
pub struct Described {
    pub routes: Vec<Listed>,
    pub count: usize,
    pub other_routes: Vec<Listed>,
}

/// Routes the server answers outside the table: the session link (protocol §4.2).
const OUTSIDE: &[Listed] = &[];

/// The `GET /api/v1` answer.
pub fn describe() -> Described {
    let listed = |r: &RouteSpec| Listed {
        method: r.method,
        path: r.path,
        auth: r.auth.as_str(),
        purpose: r.purpose,
    };
    let routes: Vec<Listed> = ROUTES.iter().filter(|r| r.is_api()).map(listed).collect();
    let mut other_routes: Vec<Listed> = ROUTES.iter().filter(|r| !r.is_api()).map(listed).collect();
    other_routes.extend(OUTSIDE.iter().map(|l| Listed { ..*l }));
    Described {
        count: routes.len(),
        routes,
        other_routes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_route_is_listed_twice() {
        let mut seen = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.method, r.path)), "{r:?} twice");
        }
    }

    #[test]
    fn every_api_row_is_under_api_v1_and_lists_its_purpose() {
        for r in ROUTES {
            assert!(!r.purpose.is_empty(), "{r:?}");
            if r.is_api() {
                assert_eq!(r.kind, Kind::Api, "{r:?}");
            }
        }
    }
}
