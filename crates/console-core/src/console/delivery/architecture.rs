//! Architecture sources: a project's `catalog-info.yaml` in a repository, imported into its
//! component tree, and the tree with the project's issues on it (protocol §6.5).

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::json;

use super::*;
use crate::work::ProjectKey;
use crate::work::delivery::compute;
use crate::work::delivery::{ArchitectureSource, Component};
use crate::work::{ComponentsMode, Issue, IssueKey, Status};

/// An issue row on the component tree.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentIssue {
    pub key: IssueKey,
    pub title: String,
    pub status: Status,
    pub priority: Option<u8>,
}

/// Per-component counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ComponentCounts {
    pub open: usize,
    pub total: usize,
    /// With every descendant's issues.
    pub open_with_children: usize,
}

/// A node with its work.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentNode {
    pub id: String,
    pub name: String,
    pub parent: Option<String>,
    pub counts: ComponentCounts,
    pub issues: Vec<ComponentIssue>,
}

/// An issue naming components the tree no longer has.
#[derive(Debug, Clone, Serialize)]
pub struct RetiredLink {
    #[serde(flatten)]
    pub issue: ComponentIssue,
    pub ids: Vec<String>,
}

/// The component tree answer (protocol §6.5).
#[derive(Debug, Clone, Serialize)]
pub struct ComponentTree {
    pub project: ProjectKey,
    pub source: ArchitectureSource,
    pub components: Vec<ComponentNode>,
    pub unassigned: Vec<ComponentIssue>,
    pub not_architectural: Vec<ComponentIssue>,
    pub retired_links: Vec<RetiredLink>,
}

fn component_issue(i: &Issue) -> ComponentIssue {
    ComponentIssue {
        key: i.key.clone(),
        title: i.title.clone(),
        status: i.status,
        priority: i.priority,
    }
}

impl Delivery<'_> {
    fn project_key(key: &str) -> Result<ProjectKey, Error> {
        ProjectKey::parse(key)
            .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such project"))
    }

    async fn known_project(&self, key: &str) -> Result<ProjectKey, Error> {
        let k = Self::project_key(key)?;
        let mut tx = self.console.parts.storage.read().await?;
        tx.projects()
            .project(&k)
            .await?
            .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such project"))?;
        Ok(k)
    }

    pub async fn architecture_source(
        &self,
        key: &str,
    ) -> Result<Option<ArchitectureSource>, Error> {
        let k = self.known_project(key).await?;
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx.delivery().architecture_source(&k).await?)
    }

    pub async fn architecture_sources(&self) -> Result<Vec<ArchitectureSource>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx.delivery().architecture_sources().await?)
    }

    /// Sets a project's source after proving the code host reads the repository and branch
    /// (SOURCE_ACCESS, CODE_HOST_UNAVAILABLE). The caller starts an import without waiting.
    pub async fn put_architecture_source(
        &self,
        actor: &Actor,
        key: &str,
        repo: &str,
        branch: &str,
    ) -> Result<ArchitectureSource, Error> {
        let k = self.known_project(key).await?;
        if !is_repo(repo) {
            return Err(bad("`repo` is owner/repo"));
        }
        if branch.trim().is_empty() || branch.chars().any(|c| c.is_control() || c == ' ') {
            return Err(bad("`branch` is a branch name"));
        }
        let access = ErrorCode::SOURCE_ACCESS;
        let session = self.console.host_session(access).await?;
        session
            .default_branch(repo)
            .await
            .map_err(|e| host_error(e, access))?;
        session
            .branch(repo, branch)
            .await
            .map_err(|e| host_error(e, access))?;
        let src = ArchitectureSource {
            project: k.clone(),
            repo: repo.to_owned(),
            branch: branch.to_owned(),
            commit: None,
            synced_at: None,
            last_error: None,
        };
        transact!(self.console, |tx| {
            tx.delivery().put_architecture_source(&src).await?;
            self.append(tx, "architecture.synced", actor, Some(&k), json!(src))
                .await
        })?;
        Ok(src)
    }

    /// Removes a project's source and its imported tree (SOURCE_NOT_FOUND).
    pub async fn delete_architecture_source(&self, actor: &Actor, key: &str) -> Result<(), Error> {
        let k = self.known_project(key).await?;
        transact!(self.console, |tx| {
            if !tx.delivery().delete_architecture_source(&k).await? {
                return Err(ErrorCode::SOURCE_NOT_FOUND.into());
            }
            tx.delivery().put_components(&k, &[]).await?;
            self.append(tx, "architecture.synced", actor, Some(&k), json!(null))
                .await
        })?;
        Ok(())
    }

    /// Imports a project's catalog now: 200 with `last_error` set when the code host is down
    /// or the catalog is missing or malformed; SOURCE_ACCESS for a credential or branch
    /// problem (recorded as `last_error` too); SOURCE_NOT_FOUND without a source.
    pub async fn sync_architecture(
        &self,
        actor: Option<&Actor>,
        key: &str,
    ) -> Result<ArchitectureSource, Error> {
        let _guard = self.console.delivery.architecture.lock().await;
        let k = self.known_project(key).await?;
        let mut src = {
            let mut tx = self.console.parts.storage.read().await?;
            tx.delivery()
                .architecture_source(&k)
                .await?
                .ok_or_else(|| Error::new(ErrorCode::SOURCE_NOT_FOUND))?
        };
        let actor = actor.cloned().unwrap_or_else(system);
        let refusal = match self.catalog(&src).await {
            Ok((commit, components)) => {
                src.commit = Some(commit);
                src.synced_at = Some(self.console.now());
                src.last_error = None;
                self.keep_import(&actor, &src, Some(&components)).await?;
                return Ok(src);
            }
            Err(e) => e,
        };
        src.last_error = Some(if refusal.is(ErrorCode::CODE_HOST_UNAVAILABLE) {
            "the code-hosting service could not be reached".to_owned()
        } else {
            refusal.message.clone()
        });
        self.keep_import(&actor, &src, None).await?;
        if refusal.is(ErrorCode::SOURCE_ACCESS) {
            return Err(refusal);
        }
        Ok(src)
    }

    /// The source's branch head and the components its catalog lists: SOURCE_ACCESS for a
    /// credential or branch problem, NOT_FOUND for a catalog missing or malformed.
    async fn catalog(&self, src: &ArchitectureSource) -> Result<(String, Vec<Component>), Error> {
        let access = ErrorCode::SOURCE_ACCESS;
        let session = self.console.host_session(access).await?;
        let commit = session
            .branch(&src.repo, &src.branch)
            .await
            .map_err(|e| host_error(e, access))?;
        match session
            .catalog(&src.repo, &src.branch)
            .await
            .map_err(|e| host_error(e, access))?
        {
            None => Err(Error::with_message(
                ErrorCode::NOT_FOUND,
                format!("{} has no catalog-info.yaml on {}", src.repo, src.branch),
            )),
            Some(Err(m)) => Err(Error::with_message(ErrorCode::NOT_FOUND, m)),
            Some(Ok(c)) => Ok((commit, c)),
        }
    }

    /// Stores an import's outcome: the source (its commit, or its `last_error`), the imported
    /// components when there are, and the `architecture.synced` event.
    async fn keep_import(
        &self,
        actor: &Actor,
        src: &ArchitectureSource,
        components: Option<&[Component]>,
    ) -> Result<(), Error> {
        let k = &src.project;
        transact!(self.console, |tx| {
            if let Some(c) = components {
                tx.delivery().put_components(k, c).await?;
            }
            tx.delivery().put_architecture_source(src).await?;
            self.append(tx, "architecture.synced", actor, Some(k), json!(src))
                .await
        })?;
        Ok(())
    }

    /// Imports every project's source (the hourly task); failures land in `last_error`.
    pub async fn sync_architecture_all(&self) -> Result<(), Error> {
        for s in self.architecture_sources().await? {
            if let Err(e) = self.sync_architecture(None, s.project.as_str()).await {
                tracing::warn!(project = %s.project, code = e.code_str(), "architecture sync failed");
            }
        }
        Ok(())
    }

    /// A project's component tree with its issues (SOURCE_NOT_FOUND without a source).
    pub async fn component_tree(&self, key: &str) -> Result<ComponentTree, Error> {
        let k = self.known_project(key).await?;
        let mut tx = self.console.parts.storage.read().await?;
        let source = tx
            .delivery()
            .architecture_source(&k)
            .await?
            .ok_or_else(|| Error::new(ErrorCode::SOURCE_NOT_FOUND))?;
        let comps = tx.delivery().components(&k).await?;
        let issues = tx.delivery().project_issues(&k).await?;
        let placed = Placed::of(&comps, &issues);
        Ok(ComponentTree {
            project: k,
            source,
            components: placed.nodes(&comps),
            unassigned: placed.unassigned,
            not_architectural: placed.not_architectural,
            retired_links: placed.retired_links,
        })
    }
}

/// Where a project's issues sit on its tree: each component's issues, and the issues on none.
struct Placed<'a> {
    attached: HashMap<&'a str, Vec<&'a Issue>>,
    unassigned: Vec<ComponentIssue>,
    not_architectural: Vec<ComponentIssue>,
    retired_links: Vec<RetiredLink>,
}

impl<'a> Placed<'a> {
    /// Places each issue by its effective components (its own, or its parents'): on every
    /// component the tree has, among the retired links for those it no longer has, else
    /// unassigned or not architectural.
    fn of(comps: &'a [Component], issues: &'a [Issue]) -> Self {
        let by_key: HashMap<String, Issue> = issues
            .iter()
            .map(|i| (i.key.as_str().to_owned(), i.clone()))
            .collect();
        let ids: HashSet<&str> = comps.iter().map(|c| c.id.as_str()).collect();
        let mut p = Placed {
            attached: HashMap::new(),
            unassigned: vec![],
            not_architectural: vec![],
            retired_links: vec![],
        };
        for i in issues {
            if i.components.mode == ComponentsMode::None {
                p.not_architectural.push(component_issue(i));
                continue;
            }
            let eff = compute::effective_components(i, &by_key);
            if eff.is_empty() {
                p.unassigned.push(component_issue(i));
                continue;
            }
            let gone: Vec<String> = eff
                .iter()
                .filter(|c| !ids.contains(c.as_str()))
                .cloned()
                .collect();
            if !gone.is_empty() {
                p.retired_links.push(RetiredLink {
                    issue: component_issue(i),
                    ids: gone,
                });
            }
            for c in eff.iter().filter(|c| ids.contains(c.as_str())) {
                if let Some(id) = ids.get(c.as_str()) {
                    p.attached.entry(id).or_default().push(i);
                }
            }
        }
        p
    }

    /// Each component with its issues and counts (open ones with every descendant's).
    fn nodes(&self, comps: &[Component]) -> Vec<ComponentNode> {
        let children: HashMap<&str, Vec<&str>> = comps.iter().fold(HashMap::new(), |mut m, c| {
            if let Some(p) = &c.parent {
                m.entry(p.as_str()).or_default().push(c.id.as_str());
            }
            m
        });
        let open_of = |id: &str| {
            self.attached
                .get(id)
                .map(|v| v.iter().filter(|i| i.status.is_open()).count())
                .unwrap_or(0)
        };
        comps
            .iter()
            .map(|c| {
                let mine = self
                    .attached
                    .get(c.id.as_str())
                    .cloned()
                    .unwrap_or_default();
                let mut with_children = 0;
                let mut stack = vec![c.id.as_str()];
                let mut seen = HashSet::new();
                while let Some(x) = stack.pop() {
                    if !seen.insert(x) {
                        continue;
                    }
                    with_children += open_of(x);
                    stack.extend(children.get(x).into_iter().flatten());
                }
                ComponentNode {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    parent: c.parent.clone(),
                    counts: ComponentCounts {
                        open: mine.iter().filter(|i| i.status.is_open()).count(),
                        total: mine.len(),
                        open_with_children: with_children,
                    },
                    issues: mine.into_iter().map(component_issue).collect(),
                }
            })
            .collect()
    }
}
