//! Session groups: named sets of agent sessions the timeline and the sessions page show as
//! one (protocol §6.5).

use serde::Deserialize;
use serde_json::json;

use super::*;
use crate::ids::{SessionGroupId, SessionId};
use crate::work::delivery::SessionGroup;

/// Session group names at most this many characters (protocol §2).
const GROUP_NAME_MAX: usize = 80;

/// A session group create body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSessionGroup {
    pub name: String,
    pub sessions: Vec<String>,
    pub actor: Option<String>,
}

/// A session group edit.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionGroupPatch {
    pub name: Option<String>,
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
    pub actor: Option<String>,
}

impl Delivery<'_> {
    /// The delivery session groups (the sessions page lists and edits them).
    pub async fn session_groups(&self) -> Result<Vec<SessionGroup>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx.delivery().session_groups().await?)
    }

    fn group_name(name: &str) -> Result<String, Error> {
        let n = name.trim();
        if n.is_empty() || n.chars().any(char::is_control) {
            return Err(Error::with_message(
                ErrorCode::SESSION_GROUP_INPUT,
                "a session group has a name",
            ));
        }
        if n.chars().count() > GROUP_NAME_MAX {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a session group name is at most 80 characters",
            ));
        }
        Ok(n.to_owned())
    }

    /// The refusals shared by create and edit: the group holds one session at least, no
    /// session another group holds, a name no other group has and no live session outside
    /// the group is titled.
    async fn check_group(
        &self,
        tx: &mut dyn WorkTx,
        g: &SessionGroup,
        live_titles: &[(String, String)],
    ) -> Result<(), Error> {
        if g.sessions.is_empty() {
            return Err(Error::with_message(
                ErrorCode::SESSION_GROUP_INPUT,
                "a session group holds one session at least",
            ));
        }
        for other in tx.delivery().session_groups().await? {
            if other.id == g.id {
                continue;
            }
            if other.name.to_lowercase() == g.name.to_lowercase() {
                return Err(ErrorCode::SESSION_GROUP_NAME_TAKEN.into());
            }
            if let Some(s) = g.sessions.iter().find(|s| other.sessions.contains(s)) {
                return Err(Error::with_message(
                    ErrorCode::SESSION_IN_GROUP,
                    format!("session {s} is in the group {}", other.name),
                ));
            }
        }
        if live_titles
            .iter()
            .any(|(id, title)| *title == g.name && !g.sessions.iter().any(|s| s.as_str() == id))
        {
            return Err(ErrorCode::SESSION_GROUP_NAME_IS_SESSION_TITLE.into());
        }
        Ok(())
    }

    fn group_sessions(list: &[String]) -> Result<Vec<SessionId>, Error> {
        let mut out: Vec<SessionId> = Vec::new();
        for s in list {
            let s = SessionId::parse(s).ok_or_else(|| {
                Error::with_message(ErrorCode::SESSION_GROUP_INPUT, "sessions are session ids")
            })?;
            if !out.contains(&s) {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Creates a session group; `live_titles` are the live sessions' `(id, title)`.
    pub async fn create_session_group(
        &self,
        actor: &Actor,
        name: &str,
        sessions: &[String],
        live_titles: &[(String, String)],
    ) -> Result<SessionGroup, Error> {
        let g = SessionGroup {
            id: self.console.new_id(SessionGroupId::from_random),
            name: Self::group_name(name)?,
            sessions: Self::group_sessions(sessions)?,
        };
        transact!(self.console, |tx| {
            self.check_group(tx, &g, live_titles).await?;
            tx.delivery().put_session_group(&g).await?;
            self.append(tx, "session_group.changed", actor, None, json!(g))
                .await
        })?;
        Ok(g)
    }

    /// Renames a group, adds or removes sessions (an edit that empties it: SESSION_GROUP_INPUT).
    pub async fn update_session_group(
        &self,
        actor: &Actor,
        id: SessionGroupId,
        patch: &SessionGroupPatch,
        live_titles: &[(String, String)],
    ) -> Result<SessionGroup, Error> {
        let name = patch.name.as_deref().map(Self::group_name).transpose()?;
        let add = Self::group_sessions(&patch.add)?;
        let remove = Self::group_sessions(&patch.remove)?;
        transact!(self.console, |tx| {
            let mut g = tx.delivery().session_group(id).await?.ok_or_else(|| {
                Error::with_message(ErrorCode::NOT_FOUND, "no such session group")
            })?;
            if let Some(n) = &name {
                g.name = n.clone();
            }
            g.sessions.retain(|s| !remove.contains(s));
            for s in &add {
                if !g.sessions.contains(s) {
                    g.sessions.push(s.clone());
                }
            }
            self.check_group(tx, &g, live_titles).await?;
            tx.delivery().put_session_group(&g).await?;
            self.append(tx, "session_group.changed", actor, None, json!(g))
                .await?;
            Ok(g)
        })
    }

    /// Deletes a group: its sessions show as themselves again.
    pub async fn delete_session_group(
        &self,
        actor: &Actor,
        id: SessionGroupId,
    ) -> Result<(), Error> {
        transact!(self.console, |tx| {
            if !tx.delivery().delete_session_group(id).await? {
                return Err(Error::with_message(
                    ErrorCode::NOT_FOUND,
                    "no such session group",
                ));
            }
            self.append(tx, "session_group.changed", actor, None, json!(null))
                .await
        })?;
        Ok(())
    }
}
