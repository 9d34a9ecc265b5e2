//! The delivery settings: which repository deploys, its workflows and jobs, whose pull
//! requests count; checked, and proven against the code host before they are kept.

use serde_json::json;

use super::*;
use crate::work::delivery::DeliverySettings;

/// `owner/repo` with GitHub's characters.
pub fn is_repo(s: &str) -> bool {
    let Some((o, n)) = s.split_once('/') else {
        return false;
    };
    (1..=39).contains(&o.len())
        && o.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        && !o.starts_with('-')
        && !o.ends_with('-')
        && (1..=100).contains(&n.len())
        && n.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        && n != "."
        && n != ".."
}

fn is_login(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=39).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-[]".contains(c))
}

fn is_name(s: &str) -> bool {
    !s.trim().is_empty() && s.chars().count() <= 200 && !s.chars().any(char::is_control)
}

fn check_settings(s: &DeliverySettings) -> Result<(), Error> {
    if !is_repo(&s.deploy_repository) {
        return Err(bad("`deploy_repository` is owner/repo"));
    }
    if s.workflow_paths.is_empty()
        || s.workflow_paths.iter().any(|p| {
            let f = p.strip_prefix(".github/workflows/").unwrap_or("");
            f.is_empty()
                || !(f.ends_with(".yml") || f.ends_with(".yaml"))
                || !f
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        })
    {
        return Err(bad(
            "`workflow_paths` names one or more .github/workflows/<file>.yml",
        ));
    }
    if s.production_jobs.is_empty() || !s.production_jobs.iter().all(|j| is_name(j)) {
        return Err(bad("`production_jobs` names one or more jobs"));
    }
    if s.population_authors.iter().any(|a| !is_login(a)) {
        return Err(bad("`population_authors` are GitHub logins"));
    }
    if s.excluded_repositories.iter().any(|r| !is_repo(r)) {
        return Err(bad("`excluded_repositories` are owner/repo"));
    }
    for n in [
        &s.production_apply_step,
        &s.staging_e2e_job,
        &s.staging_deploy_job,
        &s.pr_checks_rollup_job,
    ]
    .into_iter()
    .flatten()
    {
        if !is_name(n) {
            return Err(bad("a job or step name is 1 to 200 characters"));
        }
    }
    Ok(())
}

impl Delivery<'_> {
    /// The delivery settings, if set.
    pub async fn settings(&self) -> Result<Option<DeliverySettings>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx.delivery().delivery_settings().await?)
    }

    /// Sets the delivery configuration after proving the code host reads the deploy
    /// repository, its default branch and every workflow (DELIVERY_SETTINGS_ACCESS,
    /// CODE_HOST_UNAVAILABLE). The caller starts a sync without waiting for it.
    pub async fn put_settings(
        &self,
        actor: &Actor,
        s: DeliverySettings,
    ) -> Result<DeliverySettings, Error> {
        check_settings(&s)?;
        let access = ErrorCode::DELIVERY_SETTINGS_ACCESS;
        let session = self.console.host_session(access).await?;
        let branch = session
            .default_branch(&s.deploy_repository)
            .await
            .map_err(|e| host_error(e, access))?;
        session
            .branch(&s.deploy_repository, &branch)
            .await
            .map_err(|e| host_error(e, access))?;
        for p in &s.workflow_paths {
            session
                .workflow(&s.deploy_repository, p)
                .await
                .map_err(|e| host_error(e, access))?;
        }
        transact!(self.console, |tx| {
            let old = tx.delivery().delivery_settings().await?;
            if old
                .as_ref()
                .is_some_and(|o| o.deploy_repository != s.deploy_repository)
            {
                tx.delivery().clear_synced().await?;
            }
            tx.delivery().put_delivery_settings(&s).await?;
            self.append(tx, "delivery.settings_changed", actor, None, json!(s))
                .await
        })?;
        Ok(s)
    }
}
