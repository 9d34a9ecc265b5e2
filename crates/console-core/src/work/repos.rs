//! Repositories and their mapping to projects (protocol §5 "Code-hosting ref", §6.5
//! "repository mapping"): which project an issue imported from `owner/repo#n` lands in, and
//! each project's one default repository.

use std::fmt;

use serde::Serialize;

use crate::work::model::ProjectKey;

/// A GitHub repository, `owner/repo`, kept lowercase (GitHub's names are case-insensitive, so
/// `Acme/API` and `acme/api` are one repository and one mapping).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RepoName(String);

/// A GitHub owner (user or organization): 1 to 39 ASCII letters, digits and single hyphens,
/// not starting or ending with a hyphen.
fn is_owner(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=39).contains(&b.len())
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--")
}

/// A GitHub repository name: 1 to 100 ASCII letters, digits, `.`, `-` and `_`, not `.` or `..`.
fn is_repo(s: &str) -> bool {
    (1..=100).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b".-_".contains(&c))
        && s != "."
        && s != ".."
}

impl RepoName {
    /// `owner/repo`.
    pub fn parse(s: &str) -> Option<Self> {
        let (owner, repo) = s.split_once('/')?;
        Self::of(owner, repo)
    }

    /// From its two path segments.
    pub fn of(owner: &str, repo: &str) -> Option<Self> {
        (is_owner(owner) && is_repo(repo))
            .then(|| Self(format!("{owner}/{repo}").to_ascii_lowercase()))
    }

    pub fn owner(&self) -> &str {
        self.0.split_once('/').map(|(o, _)| o).unwrap_or_default()
    }

    pub fn repo(&self) -> &str {
        self.0.split_once('/').map(|(_, r)| r).unwrap_or_default()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A code-hosting ref, `owner/repo#n` with `n` ≥ 1 and no leading zero.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodeRef {
    pub repo: RepoName,
    pub number: u64,
}

impl CodeRef {
    pub fn parse(s: &str) -> Option<Self> {
        let (repo, n) = s.split_once('#')?;
        let number = (!n.starts_with('0') && !n.is_empty() && n.len() <= 18)
            .then(|| n.parse::<u64>().ok())
            .flatten()
            .filter(|n| *n >= 1)?;
        Some(Self {
            repo: RepoName::parse(repo)?,
            number,
        })
    }
}

impl fmt::Display for CodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

/// A repository's project (`GET /settings/repo-projects` lists them, each marked whether it
/// is its project's default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepoMapping {
    pub repo: RepoName,
    pub project: ProjectKey,
    pub default: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_and_refs() {
        let r = RepoName::parse("Acme-Corp/api.v2_x").expect("repo");
        assert_eq!((r.owner(), r.repo()), ("acme-corp", "api.v2_x"));
        for bad in [
            "acme",
            "/api",
            "acme/",
            "-acme/api",
            "acme-/api",
            "ac--me/api",
            "acme/..",
            "acme/.",
            "acme/a b",
            "acme/api/x",
            "ac_me/api",
            "acme/ápi",
        ] {
            assert!(RepoName::parse(bad).is_none(), "{bad}");
        }
        assert!(RepoName::parse(&format!("{}/a", "o".repeat(40))).is_none());
        let c = CodeRef::parse("acme/api#42").expect("ref");
        assert_eq!((c.repo.as_str(), c.number), ("acme/api", 42));
        assert_eq!(c.to_string(), "acme/api#42");
        for bad in [
            "acme/api#0",
            "acme/api#01",
            "acme/api#",
            "acme/api",
            "acme#1",
            "acme/api#-1",
        ] {
            assert!(CodeRef::parse(bad).is_none(), "{bad}");
        }
    }
}
