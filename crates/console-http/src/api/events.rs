//! `GET /api/v1/events`: the event log as server-sent events (protocol §7).
//!
//! A stream subscribes to the console's "committed" watch first, then replays the log above
//! its cursor, then, each time the watch moves, reads the log above its cursor again. Every
//! event is read from the log by id, and ids are in commit order, so a stream sends each event
//! once, in order, with no gap between replay and live. Other replicas' events move the watch
//! through the storage's notifications (PostgreSQL `LISTEN`), carrying ids only.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};

use super::{Query, St, query_err};
use crate::error::ApiResult;

/// Events read from the log per query.
const BATCH: u32 = 500;

/// The cursor: `Last-Event-ID` wins over `?since=`; neither is live only.
fn cursor(headers: &HeaderMap, q: &Query) -> ApiResult<Option<i64>> {
    if let Some(v) = headers.get("last-event-id") {
        let v = v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|v| *v >= 0)
            .ok_or_else(|| query_err("Last-Event-ID is an event id"))?;
        return Ok(Some(v));
    }
    match q.parsed::<i64>("since")? {
        Some(v) if v < 0 => Err(query_err("`since` is an event id, 0 or more")),
        v => Ok(v),
    }
}

pub async fn stream(State(st): St, headers: HeaderMap, q: Query) -> ApiResult<Response> {
    let mut watch = st.console.events_watch();
    watch.mark_changed();
    let start = match cursor(&headers, &q)? {
        Some(c) => c,
        None => st.console.last_event_id().await?,
    };
    let console = st.clone();
    let open = OpenStream::new();
    let events = stream::unfold(
        (start, watch, Vec::new().into_iter()),
        move |(mut at, mut watch, mut pending)| {
            let _open = &open;
            let st = console.clone();
            async move {
                loop {
                    if let Some(e) = pending.next() {
                        return Some((Ok::<_, Infallible>(frame(&e)), (at, watch, pending)));
                    }
                    // Read what is above the cursor; wait for the watch only when nothing is.
                    match st.console.events_after(at, BATCH).await {
                        Ok(batch) if !batch.is_empty() => {
                            at = batch.last().map(|e| e.id).unwrap_or(at);
                            pending = batch.into_iter();
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(code = e.code_str(), "event stream read failed");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                    if watch.changed().await.is_err() {
                        return None;
                    }
                }
            }
        },
    );
    let opening = stream::once(async { Ok(SseEvent::default().retry(Duration::from_secs(3))) });
    let body = Sse::new(opening.chain(events).boxed()).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(15))
            .text("keep-alive"),
    );
    Ok(body.into_response())
}

fn frame(e: &countersign_console_core::work::Event) -> SseEvent {
    let data = serde_json::to_string(e).unwrap_or_default();
    SseEvent::default()
        .id(e.id.to_string())
        .event(e.kind.clone())
        .data(data)
}

/// Counts an open event stream while it lives (`countersign_console_streams`).
#[derive(Debug)]
pub(crate) struct OpenStream(());

impl OpenStream {
    pub(crate) fn new() -> Self {
        metrics::gauge!("countersign_console_streams").increment(1.0);
        Self(())
    }
}

impl Default for OpenStream {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!("countersign_console_streams").decrement(1.0);
    }
}
