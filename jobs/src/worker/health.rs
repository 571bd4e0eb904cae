//! The worker's health endpoints for orchestrators (deploy/kubernetes/worker.yaml probes):
//! `GET /healthz` answers 200 while the process serves; `GET /readyz` answers 200 when the queue
//! database answers a query and 503 (with the error) when it does not.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::queue::Queue;

/// Serve the endpoints on `addr` until the process ends.
///
/// # Errors
/// The bind error, naming the address.
pub async fn serve(addr: &str, queue: Queue) -> crate::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| crate::Error::Io {
            path: format!("--health {addr}").into(),
            source,
        })?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(queue);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("health endpoint stopped: {e}");
        }
    });
    Ok(())
}

async fn ready(State(queue): State<Queue>) -> (StatusCode, String) {
    match queue.depth().await {
        Ok(d) => (
            StatusCode::OK,
            format!(
                "ready: {} stages queued, {} running\n",
                d.queued_stages, d.running_stages
            ),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("queue unreachable: {e}\n"),
        ),
    }
}
