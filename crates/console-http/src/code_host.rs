//! The work core's [`CodeHost`] over GitHub's REST API (`countersign-code-host`, protocol §9):
//! each call opens a session, which reads the token file again, so a rotated token needs no
//! restart.

use async_trait::async_trait;
use countersign_code_host::{Error as GhError, GitHub};
use countersign_console_core::work::{CodeHost, CodeHostError, CodeRef, HostedIssue};

/// GitHub as the console's code host.
#[derive(Debug)]
pub struct GitHubHost(pub GitHub);

fn error(e: GhError) -> CodeHostError {
    match e {
        GhError::NoAccess(m) => CodeHostError::NoAccess(m),
        GhError::NotFound => CodeHostError::NotFound,
        other => CodeHostError::Unavailable(other.to_string()),
    }
}

#[async_trait]
impl CodeHost for GitHubHost {
    async fn issue(&self, r: &CodeRef) -> Result<HostedIssue, CodeHostError> {
        let repo = countersign_code_host::RepoName::parse(r.repo.as_str())
            .ok_or(CodeHostError::NotFound)?;
        let number = i64::try_from(r.number).map_err(|_| CodeHostError::NotFound)?;
        let issue = self
            .0
            .session()
            .map_err(error)?
            .issue(&repo, number)
            .await
            .map_err(error)?;
        Ok(HostedIssue {
            title: issue.title,
            closed: issue.state == "closed",
        })
    }
}
