//! Projects: listed and created.

use super::*;
use crate::work::Project;
use crate::work::rules::NameProblem;

impl Issues<'_> {
    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx.projects().projects().await?)
    }

    /// Creates a project: INVALID_PROJECT for a bad key or name, CAP_EXCEEDED for a name over
    /// 80 characters, PROJECT_EXISTS for a key taken.
    pub async fn create_project(
        &self,
        actor: &Actor,
        key: &str,
        name: &str,
    ) -> Result<Project, Error> {
        let key = ProjectKey::parse(key).ok_or_else(|| {
            Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "a project key is 2 to 10 capital letters and digits, starting with a letter",
            )
        })?;
        rules::check_project_name(name).map_err(|p| match p {
            NameProblem::TooLong => Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a project name is at most 80 characters",
            ),
            NameProblem::Empty => Error::with_message(ErrorCode::INVALID_PROJECT, "a project name is not empty"),
            NameProblem::Control => Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "a project name holds no control character and no bidi embedding, override or isolate",
            ),
            NameProblem::Invisible => Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "a project name has a visible character",
            ),
        })?;
        let project = Project {
            key,
            name: name.to_owned(),
            created_at: self.console.now(),
        };
        transact!(self.console, |tx| {
            if !tx.projects().insert_project(&project).await? {
                return Err(ErrorCode::PROJECT_EXISTS.into());
            }
            self.console
                .append(
                    tx,
                    "project.created",
                    actor,
                    Some(&project.key),
                    None,
                    json!(project),
                )
                .await
        })?;
        Ok(project)
    }
}
