//! `GET /metrics`: queue and ledger gauges in the Prometheus / OpenMetrics text format, read from
//! the database at each scrape (so every `kiln serve` replica reports the same fleet-wide numbers,
//! and nothing is lost when one restarts). No authentication: the numbers name no team or job.
//!
//! Metrics:
//! - `kiln_queue_depth{kind="stages"|"jobs", state="queued"|"running"}` — from `Queue::depth`
//!   (queued stages counts only those claimable now, not those in retry backoff);
//! - `kiln_jobs{state=…}` — jobs in the queue by state, every state listed (0 when none);
//! - `kiln_gpu_seconds_total`, `kiln_cpu_seconds_total` — GPU- and CPU-seconds of every stage
//!   attempt in the ledger (GPU-seconds = slot held × GPUs);
//! - `kiln_workers_alive` — workers with a heartbeat in the last [`WORKER_ALIVE_S`] seconds.

use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sqlx::Row;

use super::jobs::JOB_STATES;
use super::{ApiError, AppState};
use crate::queue::now_ms;

/// A worker counts as alive when its last heartbeat is at most this old, seconds. Workers beat
/// every few seconds; two minutes rides out a slow database without counting dead workers long.
pub const WORKER_ALIVE_S: i64 = 120;

/// The OpenMetrics text content type (what `prometheus-client` writes; Prometheus reads it).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    kind: &'static str,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// The numbers behind one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Queue depth.
    pub depth: crate::queue::Depth,
    /// `(state, jobs)` for every state present in the queue.
    pub jobs_by_state: Vec<(String, i64)>,
    /// Sum of `stage_attempts.gpu_s`, GPU-seconds.
    pub gpu_s: f64,
    /// Sum of `stage_attempts.cpu_s`, CPU-seconds.
    pub cpu_s: f64,
    /// Workers with a recent heartbeat.
    pub workers_alive: i64,
}

/// Read a [`Snapshot`] from the database.
///
/// # Errors
/// [`crate::Error::Ledger`].
pub async fn snapshot(state: &super::ApiConfig) -> crate::Result<Snapshot> {
    let db = state.queue.db();
    let depth = state.queue.depth().await?;
    let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM queue_jobs GROUP BY state")
        .fetch_all(&db.pool)
        .await
        .map_err(db.err())?;
    let jobs_by_state = rows
        .iter()
        .map(|r| (r.get::<String, _>("state"), r.get::<i64, _>("n")))
        .collect();
    // CAST: PostgreSQL sums DOUBLE PRECISION as such, SQLite REAL as REAL; both decode as f64.
    let usage = sqlx::query(
        "SELECT CAST(COALESCE(SUM(gpu_s), 0) AS DOUBLE PRECISION) AS gpu, \
                CAST(COALESCE(SUM(cpu_s), 0) AS DOUBLE PRECISION) AS cpu FROM stage_attempts",
    )
    .fetch_one(&db.pool)
    .await
    .map_err(db.err())?;
    let workers_alive: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM queue_workers WHERE stopped_at IS NULL AND heartbeat_at >= $1",
    )
    .bind(now_ms() - WORKER_ALIVE_S * 1000)
    .fetch_one(&db.pool)
    .await
    .map_err(db.err())?;
    Ok(Snapshot {
        depth,
        jobs_by_state,
        gpu_s: usage.get("gpu"),
        cpu_s: usage.get("cpu"),
        workers_alive,
    })
}

/// Encode `s` in the OpenMetrics text format.
pub fn render(s: &Snapshot) -> String {
    let mut registry = Registry::default();
    let depth = Family::<DepthLabels, Gauge>::default();
    for (kind, state, n) in [
        ("stages", "queued", s.depth.queued_stages),
        ("stages", "running", s.depth.running_stages),
        ("jobs", "queued", s.depth.queued_jobs),
        ("jobs", "running", s.depth.running_jobs),
    ] {
        depth.get_or_create(&DepthLabels { kind, state }).set(n);
    }
    registry.register(
        "kiln_queue_depth",
        "Queued (claimable now) and running stages and jobs",
        depth,
    );
    let jobs = Family::<StateLabels, Gauge>::default();
    for state in JOB_STATES {
        let n = s
            .jobs_by_state
            .iter()
            .find(|(st, _)| st == state)
            .map_or(0, |(_, n)| *n);
        jobs.get_or_create(&StateLabels {
            state: state.to_string(),
        })
        .set(n);
    }
    registry.register("kiln_jobs", "Jobs in the queue by state", jobs);
    let gpu = Counter::<f64, AtomicU64>::default();
    gpu.inc_by(s.gpu_s.max(0.0));
    registry.register(
        "kiln_gpu_seconds",
        "GPU-seconds of all stage attempts in the ledger (slot held x GPUs)",
        gpu,
    );
    let cpu = Counter::<f64, AtomicU64>::default();
    cpu.inc_by(s.cpu_s.max(0.0));
    registry.register(
        "kiln_cpu_seconds",
        "CPU-seconds of all stage attempts in the ledger",
        cpu,
    );
    let workers = Gauge::<i64>::default();
    workers.set(s.workers_alive);
    registry.register(
        "kiln_workers_alive",
        "Workers with a heartbeat in the last 2 minutes",
        workers,
    );
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &registry);
    out
}

/// Scrape: read the numbers and encode them.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "OpenMetrics text.", content_type = "application/openmetrics-text", body = String),
        (status = 500, description = "The database failed.", body = super::jobs::ErrorBody),
    ),
)]
pub async fn scrape(State(state): State<AppState>) -> Result<Response, ApiError> {
    let s = snapshot(&state).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], render(&s)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_in_the_text_with_its_value() {
        let s = Snapshot {
            depth: crate::queue::Depth {
                queued_stages: 2,
                running_stages: 1,
                queued_jobs: 3,
                running_jobs: 1,
            },
            jobs_by_state: vec![("succeeded".into(), 7)],
            gpu_s: 3600.5,
            cpu_s: 12.0,
            workers_alive: 4,
        };
        let t = render(&s);
        assert!(
            t.contains(r#"kiln_queue_depth{kind="stages",state="queued"} 2"#),
            "{t}"
        );
        assert!(t.contains(r#"kiln_jobs{state="succeeded"} 7"#), "{t}");
        assert!(t.contains(r#"kiln_jobs{state="dead"} 0"#), "{t}");
        assert!(t.contains("kiln_gpu_seconds_total 3600.5"), "{t}");
        assert!(t.contains("kiln_cpu_seconds_total 12.0"), "{t}");
        assert!(t.contains("kiln_workers_alive 4"), "{t}");
        assert!(t.trim_end().ends_with("# EOF"), "{t}");
    }
}
