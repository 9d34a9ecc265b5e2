//! [`MemoryStorage`]: the console's storage in memory, for tests and embedding.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::clock::Time;
use crate::ids::{Login, TokenId};
use crate::storage::{BrowserSession, PersonalToken, SignInAttempt, Storage, StorageError};

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, BrowserSession>,
    attempts: HashMap<String, SignInAttempt>,
    tokens: Vec<PersonalToken>,
    people: BTreeMap<Login, Time>,
}

/// In-memory storage; one process only.
#[derive(Debug, Default)]
pub struct MemoryStorage(Mutex<Inner>);

impl MemoryStorage {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> Result<T, StorageError> {
        Ok(f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn put_session(&self, s: &BrowserSession) -> Result<(), StorageError> {
        self.with(|i| {
            i.sessions.insert(s.key.clone(), s.clone());
        })
    }

    async fn get_session(&self, key: &str) -> Result<Option<BrowserSession>, StorageError> {
        self.with(|i| i.sessions.get(key).cloned())
    }

    async fn delete_session(&self, key: &str) -> Result<(), StorageError> {
        self.with(|i| {
            i.sessions.remove(key);
        })
    }

    async fn put_attempt(&self, a: &SignInAttempt) -> Result<(), StorageError> {
        self.with(|i| {
            i.attempts.insert(a.key.clone(), a.clone());
        })
    }

    async fn take_attempt(&self, key: &str) -> Result<Option<SignInAttempt>, StorageError> {
        self.with(|i| i.attempts.remove(key))
    }

    async fn put_token(&self, t: &PersonalToken) -> Result<(), StorageError> {
        self.with(|i| {
            i.tokens.retain(|x| x.id != t.id);
            i.tokens.push(t.clone());
        })
    }

    async fn live_tokens(&self, owner: &Login) -> Result<Vec<PersonalToken>, StorageError> {
        self.with(|i| {
            i.tokens
                .iter()
                .filter(|t| &t.owner == owner && t.revoked_at.is_none())
                .cloned()
                .collect()
        })
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<PersonalToken>, StorageError> {
        self.with(|i| i.tokens.iter().find(|t| t.hash == hash).cloned())
    }

    async fn revoke_token(
        &self,
        owner: &Login,
        id: TokenId,
        at: Time,
    ) -> Result<bool, StorageError> {
        self.with(|i| {
            match i
                .tokens
                .iter_mut()
                .find(|t| t.id == id && &t.owner == owner && t.revoked_at.is_none())
            {
                Some(t) => {
                    t.revoked_at = Some(at);
                    true
                }
                None => false,
            }
        })
    }

    async fn saw_person(&self, login: &Login, at: Time) -> Result<(), StorageError> {
        self.with(|i| {
            i.people.insert(login.clone(), at);
        })
    }

    async fn people(&self) -> Result<Vec<Login>, StorageError> {
        self.with(|i| i.people.keys().cloned().collect())
    }

    async fn purge_expired(&self, now: Time) -> Result<u64, StorageError> {
        self.with(|i| {
            let before = i.sessions.len() + i.attempts.len();
            i.sessions.retain(|_, s| s.expires_at > now);
            i.attempts.retain(|_, a| a.expires_at > now);
            (before - i.sessions.len() - i.attempts.len()) as u64
        })
    }

    async fn ping(&self) -> Result<(), StorageError> {
        Ok(())
    }
}
