//! The issue answer (protocol §6.1): an issue with what other areas hold on it (its open
//! asks), so it sits above [`model`](super::model) and [`asks`](super::asks), which it joins.

use serde::Serialize;
use serde_json::Value;

use crate::clock::Time;
use crate::ids::Login;
use crate::work::asks::AskView;
use crate::work::model::{
    Claim, Components, IssueKey, IssueProgress, ProjectKey, RouteStatus, Status, rfc3339,
    rfc3339_opt,
};

/// The issue answer (protocol §6.1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IssueView {
    pub key: IssueKey,
    pub project: ProjectKey,
    pub title: String,
    pub status: Status,
    pub priority: Option<u8>,
    pub labels: Vec<String>,
    pub route: Option<String>,
    pub route_status: Option<RouteStatus>,
    pub parent: Option<IssueKey>,
    pub rank: String,
    pub assignee: Option<Login>,
    pub components: Components,
    pub progress: IssueProgress,
    /// Open asks on the issue and its documents, oldest first (the list shape).
    pub open_asks: Vec<AskView>,
    /// The earliest markdown document (documents arrive with their issue: null until then).
    pub primary_document: Option<Value>,
    pub children: Vec<IssueKey>,
    pub claim: Option<Claim>,
    pub repo: Option<String>,
    pub sequence: i64,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    #[serde(with = "rfc3339")]
    pub updated_at: Time,
    #[serde(with = "rfc3339_opt")]
    pub closed_at: Option<Time>,
}
