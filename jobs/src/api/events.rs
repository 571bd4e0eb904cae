//! `GET /api/v1/jobs/{id}/events`: a job's events (submitted, claimed, retried, succeeded, …) as
//! server-sent events, by polling the queue's events table.
//!
//! Each SSE event has `id` = the event's row id, `event` = its kind and `data` = the event as JSON.
//! A client that reconnects with `Last-Event-ID` gets only later events. The stream ends once the
//! job is in a final state (succeeded, failed, cancelled, dead) and every event up to then is sent:
//! the state is read *before* the events of each poll, and a job's final event is written in the
//! same transaction as its final state, so nothing is cut off.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, Path as UrlPath, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;

use super::auth::Team;
use super::jobs::FINAL_STATES;
use super::{ApiError, AppState};
use crate::queue::{Event, Queue};

/// How often the events table is polled, seconds. Events are coarse (a few per stage), so a
/// second is prompt enough and costs one small indexed query per open stream per second.
pub const POLL_INTERVAL_S: f64 = 1.0;

/// The event id to resume after: `Last-Event-ID` when it is an integer, else 0 (all events).
pub fn resume_after(headers: &HeaderMap) -> i64 {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .unwrap_or(0)
}

/// One queue event as an SSE event.
pub fn sse_event(e: &Event) -> SseEvent {
    let data = serde_json::to_string(e).unwrap_or_else(|_| "{}".into());
    SseEvent::default()
        .id(e.id.to_string())
        .event(sanitize_name(&e.kind))
        .data(data)
}

/// SSE event names may not hold newlines (axum panics on them); kinds are code-defined words, but
/// the stream must never panic on what the database holds.
fn sanitize_name(kind: &str) -> String {
    kind.chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect()
}

struct Poll {
    queue: Queue,
    job_id: String,
    after: i64,
    pending: VecDeque<Event>,
    first: bool,
    finished: bool,
}

/// Stream job `id`'s events (see the module doc).
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/events",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job id."),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id."),
    ),
    responses(
        (status = 200, description = "text/event-stream of the job's events; ends when the job is final.", content_type = "text/event-stream", body = String),
        (status = 401, description = "Missing or invalid token.", body = super::jobs::ErrorBody),
        (status = 404, description = "No such job for this team.", body = super::jobs::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn stream(
    State(state): State<AppState>,
    Extension(Team(team)): Extension<Team>,
    id: Result<UrlPath<String>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let id = super::jobs::job_id(id)?;
    state.queue.job(&id, Some(&team)).await?;
    let poll = Poll {
        queue: state.queue.clone(),
        job_id: id,
        after: resume_after(&headers),
        pending: VecDeque::new(),
        first: true,
        finished: false,
    };
    let events = futures::stream::unfold(poll, next_event);
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

async fn next_event(mut p: Poll) -> Option<(Result<SseEvent, Infallible>, Poll)> {
    loop {
        if let Some(e) = p.pending.pop_front() {
            p.after = e.id;
            return Some((Ok(sse_event(&e)), p));
        }
        if p.finished {
            return None;
        }
        if !p.first {
            tokio::time::sleep(Duration::from_secs_f64(POLL_INTERVAL_S)).await;
        }
        p.first = false;
        // State first, then events: see the module doc.
        let state = match p.queue.job(&p.job_id, None).await {
            Ok(j) => j.state,
            Err(e) => return Some((Ok(error_event(&e)), end(p))),
        };
        match p.queue.events(&p.job_id, p.after).await {
            Ok(list) => p.pending.extend(list),
            Err(e) => return Some((Ok(error_event(&e)), end(p))),
        }
        p.finished = FINAL_STATES.contains(&state.as_str());
    }
}

fn end(mut p: Poll) -> Poll {
    p.pending.clear();
    p.finished = true;
    p
}

/// A database failure mid-stream: one `error` event, then the stream ends (the client may
/// reconnect with `Last-Event-ID`).
fn error_event(e: &crate::Error) -> SseEvent {
    tracing::error!(error = %e, "event stream failed");
    SseEvent::default()
        .event("error")
        .data(serde_json::json!({ "error": super::error::chain(e) }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_id_resumes_after_that_event() {
        let mut h = HeaderMap::new();
        assert_eq!(resume_after(&h), 0);
        h.insert("last-event-id", "17".parse().unwrap());
        assert_eq!(resume_after(&h), 17);
        h.insert("last-event-id", "x".parse().unwrap());
        assert_eq!(resume_after(&h), 0);
        h.insert("last-event-id", "-3".parse().unwrap());
        assert_eq!(resume_after(&h), 0);
    }

    #[test]
    fn event_kinds_with_newlines_do_not_panic() {
        let e = Event {
            id: 1,
            job_id: "j".into(),
            at: 0,
            kind: "bad\nkind".into(),
            message: "m\nn".into(),
        };
        let _ = sse_event(&e);
    }
}
