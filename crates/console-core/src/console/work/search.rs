//! The console's full-text search (protocol §6.5) over every area's index: issues,
//! documents, asks, comments and messages. It reads no more of one area than another, so it
//! is the console's, not the work area's.

use super::*;
use crate::work::{SearchPage, search};

impl Console {
    /// A person's search (the header's box, and `GET /api/v1/search` called by a person):
    /// a credential request named by its id (what its agent printed) is found by it, from the
    /// broker ([`Console::request_named`], issue 48); anything else is [`Console::search`].
    /// Agents search with [`Console::search`] alone: a request row is for the people who
    /// decide it.
    pub async fn search_as_person(
        &self,
        q: &str,
        project: Option<&str>,
        limit: u32,
        offset: u32,
    ) -> Result<SearchPage, Error> {
        if project.is_none()
            && let Some(row) = self.request_named(q).await
        {
            return Ok(Console::request_search_page(row, limit, offset));
        }
        self.search(q, project, limit, offset).await
    }

    /// Full-text search (protocol §6.5): each kind's index ranks its best 100, the kinds are
    /// fused, and the page is cut from the fused list, each row with its matched words marked.
    /// A kind is counted up to one past its 100 (`more`: some kind has more). CAP_EXCEEDED
    /// over 1,000 characters, INVALID_PROJECT for a project that is not a project key.
    pub async fn search(
        &self,
        q: &str,
        project: Option<&str>,
        limit: u32,
        offset: u32,
    ) -> Result<SearchPage, Error> {
        let q = q.trim();
        if rules::chars(q) > 1000 {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "q is at most 1000 characters",
            ));
        }
        if q.is_empty() {
            return Err(Error::with_message(
                ErrorCode::INVALID_QUERY,
                "`q` names what to search for",
            ));
        }
        let project = project
            .map(|p| {
                ProjectKey::parse(p).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_PROJECT, "`project` is a project key")
                })
            })
            .transpose()?;
        let words = search::words(q);
        let mut kinds: Vec<(SearchKind, Vec<crate::work::Hit>)> = Vec::new();
        let mut total = 0;
        if !words.is_empty() {
            // Every kind at once (one statement on PostgreSQL, issue 48), with no
            // transaction's own round trips: the kinds need not agree on one snapshot.
            let mut tx = self.parts.storage.read_loose().await?;
            for (kind, hits, n) in tx
                .search_kinds(&words, project.as_ref(), search::PER_KIND)
                .await?
            {
                total += n;
                kinds.push((kind, hits));
            }
        }
        let reachable = kinds.iter().map(|(_, h)| h.len() as i64).sum();
        let more = total > reachable;
        let rows = search::fuse(kinds, console_ref)
            .into_iter()
            .skip(offset as usize)
            .take(limit as usize)
            .map(|mut r| {
                r.title_marks = search::marks(&r.title, &words);
                r.snippet_marks = search::marks(&r.snippet, &words);
                r
            })
            .collect();
        Ok(SearchPage {
            rows,
            total,
            more,
            reachable,
            limit,
            offset,
        })
    }
}
