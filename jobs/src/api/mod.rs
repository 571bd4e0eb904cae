//! The HTTP API of the job queue (JSON over axum), served by `kiln serve` beside the viewer pages.
//!
//! Routes ([`router`]); everything under `/api/v1` needs `Authorization: Bearer <token>` (a team
//! token from `kiln token create`, see [`token`]) and only ever shows that team's jobs — another
//! team's job id answers 404 exactly like a missing one:
//! - `POST /api/v1/jobs` — submit a job file (TOML body, or JSON `{"job": "<toml>", …}`) → 201;
//!   its input and output must be object-store URLs (`s3://…`) or, for the input, `dataset://NAME`:
//!   local paths are refused with 400 unless the server runs with `--allow-local-paths`
//!   ([`locations`]);
//! - `GET /api/v1/jobs?state=&limit=` — the team's jobs, newest first;
//! - `GET /api/v1/jobs/{id}` — one job with its stages and attempts;
//! - `POST /api/v1/jobs/{id}/cancel` — cancel it (a running stage stops at its next heartbeat);
//! - `GET /api/v1/jobs/{id}/events` — its events as server-sent events, until it finishes;
//! - `GET /api/v1/jobs/{id}/outputs` — where its output is, and the files of its `manifest.json`;
//! - `GET /api/v1/jobs/{id}/report` — its ledger report (per-stage usage and totals);
//! - `GET /api/v1/openapi.json` — the OpenAPI 3.1 document of these routes ([`openapi`]);
//! - `GET /metrics` — Prometheus metrics ([`metrics`]), and `GET /healthz`; no token needed.
//!
//! Every error is JSON `{"error": "…"}` with a status that says whose fault it is ([`ApiError`]).
//! Handlers never panic on input; the database is the only shared state, so any number of
//! `kiln serve` processes can sit behind a load balancer.

pub mod auth;
pub mod body;
pub mod error;
pub mod events;
pub mod jobs;
pub mod locations;
pub mod metrics;
pub mod openapi;
pub mod tenants;
pub mod token;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use error::ApiError;
pub use locations::LocalPaths;
pub use tenants::Tenants;

use crate::ledger::Ledger;
use crate::queue::Queue;

/// Default request body limit: 1 MiB, far above any job file (they are a few hundred bytes).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// What the API needs. The queue and the ledger normally share one [`crate::db::Db`].
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The job queue (submissions, job state, events, tokens, workers).
    pub queue: Queue,
    /// The ledger (reports, GPU/CPU-seconds for `/metrics`).
    pub ledger: Ledger,
    /// Largest accepted request body, bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Base for relative local paths in submitted job files (the server's working directory) and
    /// for relative outputs in `GET …/outputs`.
    pub relative_base: PathBuf,
    /// Whether submitted job files may name local paths on the server's machine
    /// ([`LocalPaths::Refuse`] unless `kiln serve --allow-local-paths`).
    pub local_paths: LocalPaths,
    /// Each team's allowed input and output prefixes (`kiln serve --tenants FILE`); `None`: any
    /// location the other checks accept.
    pub tenants: Option<Tenants>,
}

/// Shared state of the handlers.
pub(crate) type AppState = Arc<ApiConfig>;

/// The API router: `/api/v1/…` (authenticated), `/metrics` and `/healthz`. It has no fallback of
/// its own outside `/api/v1`, so it can be merged into the viewer's router
/// (`serve::router(…).merge(api::router(…))`); unknown paths under `/api/v1` get a JSON 404.
pub fn router(config: ApiConfig) -> Router {
    let state: AppState = Arc::new(config);
    let v1 = Router::new()
        .route("/jobs", post(jobs::submit).get(jobs::list))
        .route("/jobs/{id}", get(jobs::get))
        .route("/jobs/{id}/cancel", post(jobs::cancel))
        .route("/jobs/{id}/events", get(events::stream))
        .route("/jobs/{id}/outputs", get(jobs::outputs))
        .route("/jobs/{id}/report", get(jobs::report))
        .route("/openapi.json", get(openapi::document))
        .fallback(error::no_route)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .with_state(state.clone());
    Router::new()
        .nest("/api/v1", v1)
        .route("/metrics", get(metrics::scrape))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(state)
}

/// Bind `addr` and serve `app` until Ctrl-C or SIGTERM. `on_listening` is called once with the
/// bound address (the real port when `addr` has port 0) before the first request is accepted.
///
/// # Errors
/// [`crate::serve::Error::Bind`] when the address cannot be bound; [`crate::serve::Error::Serve`]
/// when serving fails.
pub async fn serve(
    addr: SocketAddr,
    app: Router,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), crate::serve::Error> {
    use crate::serve::Error;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    on_listening(bound);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|source| Error::Serve {
            addr: bound,
            source,
        })
}

/// Ctrl-C or SIGTERM (Kubernetes stops pods with SIGTERM); pending forever when neither handler
/// can be installed, so the server then runs until killed.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests;
