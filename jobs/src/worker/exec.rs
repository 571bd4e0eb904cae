//! One stage of a queued job, run in a child process of the worker (`kiln stage-exec`): the
//! process boundary gives each stage its own signal handling (SIGTERM checkpoints training), its
//! own device, and dies with the worker (`PR_SET_PDEATHSIG`).
//!
//! Inputs are files the worker writes in the job's work directory: the job file, and the keys and
//! summaries of the stages already done (`done.json`). Earlier stages' outputs come from the work
//! directory when this machine ran them, else from the shared stage cache by key. The result is
//! written atomically to an outcome file the worker reads after the child exits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kiln_pipeline::dag::StageKind;
use kiln_pipeline::dag::job_dag;
use kiln_pipeline::plan::JobPlan;
use kiln_pipeline::run::{StageOutcome, run_stage};
use kiln_pipeline::stage::Keep;
use serde::{Deserialize, Serialize};

/// An earlier stage of the job: its content key and summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoneStage {
    pub stage: String,
    pub key: String,
    pub summary: serde_json::Value,
}

/// What the child reports: the stage outcome, or an error and whether retrying may help.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecOutcome {
    Succeeded(Box<StageOutcome>),
    Failed {
        /// The error with its causes, one per line.
        message: String,
        /// False when the job itself is at fault (bad input or parameters): retrying cannot help.
        retryable: bool,
        /// True when the object store did not answer or the attempt lost its lease: retried on
        /// the infrastructure budget, not the job's attempts.
        #[serde(default)]
        infrastructure: bool,
    },
    /// Stopped by a signal (worker shutdown or cancel); a training checkpoint may be kept.
    Interrupted {
        message: String,
    },
}

/// Whether a pipeline error may go away on retry (infrastructure) or is the job's own (input,
/// parameters, numerics of its data, an object-store request the store refuses, such as a key
/// too long for S3).
pub fn retryable(e: &kiln_pipeline::Error) -> bool {
    use kiln_pipeline::Error as E;
    !matches!(
        e,
        E::Input { .. } | E::Param { .. } | E::Format(_) | E::Numeric { .. }
    ) && !kiln_pipeline::storage::is_refused_request(e)
}

/// Whether a pipeline error is the infrastructure's: the object store did not answer, or the
/// attempt lost its lease (a fenced publish).
pub fn infrastructure(e: &kiln_pipeline::Error) -> bool {
    matches!(e, kiln_pipeline::Error::Fenced { .. }) || kiln_pipeline::storage::is_unreachable(e)
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(&format!("\n  caused by: {s}"));
        src = s.source();
    }
    out
}

/// Run stage `stage` of `plan` (its work directory and device already set), after the stages in
/// `done`, and return what to report.
pub async fn exec_stage(plan: &JobPlan, stage: &str, done: &[DoneStage]) -> ExecOutcome {
    let fail = |e: &kiln_pipeline::Error| match e {
        kiln_pipeline::Error::Interrupted { .. } => ExecOutcome::Interrupted { message: chain(e) },
        _ => ExecOutcome::Failed {
            message: chain(e),
            retryable: retryable(e),
            infrastructure: infrastructure(e),
        },
    };
    let dag = match job_dag(plan).await {
        Ok((dag, _)) => dag,
        Err(e) => return fail(&e),
    };
    let order = match dag.topo_order() {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let Some(node) = order.iter().find(|n| n.kind.name() == stage) else {
        return ExecOutcome::Failed {
            message: format!(
                "stage `{stage}` is not in this job's DAG ({}); the queue and the job file disagree",
                order
                    .iter()
                    .map(|n| n.kind.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            retryable: false,
            infrastructure: false,
        };
    };
    let mut outcomes: HashMap<StageKind, StageOutcome> = HashMap::new();
    // In the DAG's order, so a stage rebuilt here finds its own inputs in place.
    for n in &order {
        let Some(d) = done.iter().find(|d| d.stage == n.kind.name()) else {
            continue;
        };
        match earlier_stage(plan, n, d, &outcomes).await {
            Ok(o) => outcomes.insert(n.kind, o),
            Err(e) => return fail(&e),
        };
    }
    match run_stage(plan, node, &outcomes).await {
        Ok(mut o) => {
            charge_rebuilt(&mut o, outcomes.values().filter(|o| !o.cache_hit));
            ExecOutcome::Succeeded(Box::new(o))
        }
        Err(e) => fail(&e),
    }
}

/// An earlier stage's outcome for this attempt: its output from this machine's work folder or
/// the stage cache, or — when the cache holds no entry the queue database vouches for (missing,
/// another `--cache`, or rewritten and so rejected) — rebuilt here, so a lost or poisoned entry
/// costs one rerun of that stage instead of failing every retry of this one.
async fn earlier_stage(
    plan: &JobPlan,
    n: &kiln_pipeline::dag::StageNode,
    d: &DoneStage,
    outcomes: &HashMap<StageKind, StageOutcome>,
) -> kiln_pipeline::Result<StageOutcome> {
    let recorded = StageOutcome {
        kind: n.kind,
        key: d.key.clone(),
        cache_hit: true,
        usage: Default::default(),
        summary: d.summary.clone(),
        recipe: None,
    };
    let dir = plan.work_dir.join(n.kind.name());
    if n.stage.keep() != Keep::WorkDir
        || kiln_pipeline::run::marker_key(&dir).as_deref() == Some(d.key.as_str())
    {
        return Ok(recorded);
    }
    if let Some(cache) = &plan.stage_cache
        && kiln_pipeline::stage_cache::restore(cache, n.kind.name(), &d.key, &dir)
            .await?
            .is_some()
    {
        return Ok(recorded);
    }
    let short = &d.key[..d.key.len().min(12)];
    tracing::warn!(
        stage = %d.stage,
        key = short,
        cache = %plan.stage_cache.as_ref().map_or_else(|| "(none)".into(), |c| c.url()),
        "the output of an earlier stage is neither in this worker's work directory nor in the \
         stage cache as the queue recorded it: rebuilding it in this attempt"
    );
    let rebuilt = run_stage(plan, n, outcomes).await?;
    if rebuilt.key != d.key {
        tracing::warn!(
            stage = %d.stage,
            "rebuilt with key {}, the queue recorded {short}: do the workers run one Kiln version?",
            &rebuilt.key[..rebuilt.key.len().min(12)]
        );
    }
    Ok(rebuilt)
}

/// Add what rebuilding earlier stages cost to this attempt's usage: the attempt paid for it.
fn charge_rebuilt<'a>(o: &mut StageOutcome, rebuilt: impl Iterator<Item = &'a StageOutcome>) {
    for r in rebuilt {
        o.usage.wall_s += r.usage.wall_s;
        o.usage.cpu_s += r.usage.cpu_s;
        o.usage.gpu_s += r.usage.gpu_s;
        o.usage.bytes_read += r.usage.bytes_read;
        o.usage.bytes_written += r.usage.bytes_written;
    }
}

/// Write `outcome` to `path` atomically (temporary file, then rename).
///
/// # Errors
/// The I/O error naming the file.
pub fn write_outcome(path: &Path, outcome: &ExecOutcome) -> crate::Result<()> {
    let json = serde_json::to_vec_pretty(outcome).expect("outcome serialises");
    kiln_formats::atomic_write::write_atomic(path, &json).map_err(|e| crate::Error::Io {
        path: PathBuf::from(path),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Read the outcome a child wrote; `None` when it wrote none (it crashed or was killed).
pub fn read_outcome(path: &Path) -> Option<ExecOutcome> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An S3 answer as object_store reports it: a generic error whose message carries the status.
    fn s3_answer(status_line: &str) -> kiln_pipeline::Error {
        kiln_pipeline::Error::Storage {
            url: "s3://bucket/out".into(),
            source: object_store::Error::Generic {
                store: "S3",
                source: Box::new(std::io::Error::other(format!(
                    "Error performing PUT http://127.0.0.1:9617/bucket/k in 3ms - Server returned \
                     non-2xx status code: {status_line}: <Error><Code>Code</Code></Error>"
                ))),
            },
        }
    }

    #[test]
    fn s3_client_errors_fail_the_job_and_are_not_infrastructure_faults() {
        for status in [
            "400 Bad Request",
            "413 Payload Too Large",
            "414 URI Too Long",
        ] {
            let e = s3_answer(status);
            assert!(!infrastructure(&e), "{status}");
            assert!(!retryable(&e), "{status}");
        }
    }

    #[test]
    fn s3_timeouts_throttling_and_server_errors_stay_infrastructure_faults() {
        for status in [
            "408 Request Timeout",
            "429 Too Many Requests",
            "500 Internal Server Error",
            "503 Service Unavailable",
        ] {
            let e = s3_answer(status);
            assert!(infrastructure(&e), "{status}");
            assert!(retryable(&e), "{status}");
        }
    }
}
