//! Run a job plan stage by stage through the pipeline DAG, recording each attempt in the ledger.
//!
//! A failed stage marks the job failed and stops; stages that finished keep their outputs in the
//! work directory, so running the same job file again resumes (cache hits) from the failed stage.

use std::collections::HashMap;

use kiln_pipeline::dag::StageKind;
use kiln_pipeline::dag::job_dag;
use kiln_pipeline::meter::StageUsage;
use kiln_pipeline::plan::JobPlan;
use kiln_pipeline::run::{StageOutcome, run_stage};

use crate::ledger::Ledger;
use crate::{Error, Result};

/// Outcome of a whole job.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub job_id: String,
    pub stages: Vec<StageOutcome>,
}

/// A fresh job id: `<name>-<UTC yyyymmddThhmmss>-<4 hex>` (sortable, unique per run).
pub fn new_job_id(name: &str) -> String {
    let now = chrono::Utc::now();
    let nanos = now.timestamp_subsec_nanos() ^ std::process::id().rotate_left(16);
    format!(
        "{name}-{}-{:04x}",
        now.format("%Y%m%dT%H%M%S"),
        nanos & 0xffff
    )
}

/// Run `plan` (already resolved), recording the job and every stage attempt in `ledger`.
///
/// # Errors
/// [`Error::Plan`] when the input does not fit the job (nothing ran); [`Error::Stage`] naming the
/// failed stage (the ledger records it as failed);
/// [`Error::Ledger`] when the ledger cannot be written.
pub async fn run_job(plan: &JobPlan, spec_toml: &str, ledger: &Ledger) -> Result<JobOutcome> {
    let kind = serde_json::to_value(plan.kind)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    ledger
        .start_job(
            &plan.job_id,
            &plan.name,
            &kind,
            &plan.input,
            &plan.output,
            spec_toml,
        )
        .await?;
    let dag_err = |source: kiln_pipeline::Error| Error::Plan {
        job_id: plan.job_id.clone(),
        source: Box::new(source),
    };
    let dag = match job_dag(plan).await {
        Ok((dag, reason)) => {
            if let Some(reason) = reason {
                tracing::info!(job = %plan.job_id, "reconstruct stage added: {reason}");
            }
            dag
        }
        Err(source) => {
            ledger
                .finish_job(&plan.job_id, Some(&format!("plan: {source}")))
                .await?;
            return Err(dag_err(source));
        }
    };
    let order = dag.topo_order().map_err(dag_err)?;
    let names: Vec<String> = order.iter().map(|n| n.kind.name().to_string()).collect();
    let shape = crate::estimate::job_shape(
        &kind,
        names,
        std::path::Path::new(&plan.input),
        plan.train.steps,
        plan.ingest.max_side,
    );
    let catalog = crate::prices::PriceCatalog::default_catalog();
    record_estimate(ledger, &plan.job_id, &shape, &catalog).await;
    let mut done: HashMap<StageKind, StageOutcome> = HashMap::new();
    let mut stages = Vec::new();
    for node in order {
        tracing::info!(job = %plan.job_id, stage = %node.kind, "stage started");
        let attempt = ledger
            .start_stage(&plan.job_id, node.kind.name(), "cpu")
            .await?;
        let started = std::time::Instant::now();
        match run_stage(plan, node, &done).await {
            Ok(outcome) => {
                let state = if outcome.cache_hit {
                    "cached"
                } else {
                    "succeeded"
                };
                ledger
                    .finish_stage(
                        attempt,
                        state,
                        Some(&outcome.key),
                        &outcome.usage,
                        Some(&outcome.summary),
                        None,
                    )
                    .await?;
                if let Some(recipe) = &outcome.recipe {
                    ledger.set_key_recipe(attempt, recipe).await?;
                }
                tracing::info!(
                    job = %plan.job_id, stage = %node.kind, cached = outcome.cache_hit,
                    wall_s = format_args!("{:.2}", outcome.usage.wall_s), "stage finished"
                );
                done.insert(node.kind, outcome.clone());
                stages.push(outcome);
            }
            Err(source) => {
                let message = source.to_string();
                let usage = StageUsage {
                    device: "cpu".into(),
                    wall_s: started.elapsed().as_secs_f64(),
                    ..Default::default()
                };
                ledger
                    .finish_stage(attempt, "failed", None, &usage, None, Some(&message))
                    .await?;
                ledger
                    .finish_job(&plan.job_id, Some(&format!("{}: {message}", node.kind)))
                    .await?;
                return Err(Error::Stage {
                    job_id: plan.job_id.clone(),
                    stage: node.kind.name().into(),
                    hint: resume_hint(&source),
                    source: Box::new(source),
                });
            }
        }
    }
    ledger.finish_job(&plan.job_id, None).await?;
    Ok(JobOutcome {
        job_id: plan.job_id.clone(),
        stages,
    })
}

/// What a user can do after a stage failed with `e`: the job's own input or parameters at fault
/// (rerunning unchanged fails the same way) or anything else (a rerun resumes).
fn resume_hint(e: &kiln_pipeline::Error) -> &'static str {
    if crate::worker::exec::retryable(e) {
        "finished stages are kept: run the job again to resume"
    } else {
        "the input or the job file is at fault: fix it, then run the job again; finished stages \
         are kept"
    }
}

/// Keep with job `job_id` the estimate `kiln plan` would print for `shape`, for `kiln report
/// --estimate-error` (reference seconds per stage, from the ledger's history or the model, with
/// `catalog`'s speeds). Called before the job's first stage runs (by `kiln run`, and by the worker
/// that claims a queued job's first stage), so the history holds only other jobs. Best effort: a
/// failure is logged and the job runs anyway.
pub(crate) async fn record_estimate(
    ledger: &Ledger,
    job_id: &str,
    shape: &crate::estimate::JobShape,
    catalog: &crate::prices::PriceCatalog,
) {
    use crate::estimate;
    let history = match estimate::ledger_history(ledger).await {
        Ok(h) => h,
        Err(e) => return tracing::warn!(job = %job_id, "estimate not recorded: {e}"),
    };
    let recorded = match estimate::stage_estimates(shape, &history, catalog) {
        Ok(st) => estimate::RecordedEstimate::of(&catalog.version, &st),
        Err(e) => return tracing::warn!(job = %job_id, "estimate not recorded: {e}"),
    };
    let json = serde_json::to_value(&recorded).expect("estimate serialises");
    if let Err(e) = ledger.record_estimate(job_id, &json).await {
        tracing::warn!(job = %job_id, "estimate not recorded: {e}");
    }
}

#[cfg(test)]
mod resume_hint_tests {
    use super::resume_hint;

    #[test]
    fn a_failure_of_the_input_says_to_fix_it_and_others_to_resume() {
        let bad_param = kiln_pipeline::Error::Param {
            stage: "tile",
            field: "spz_version".into(),
            expected: "2 or 3".into(),
            found: "4".into(),
        };
        assert!(resume_hint(&bad_param).contains("fix it"));
        let io = kiln_pipeline::Error::io(
            std::path::Path::new("/x"),
            std::io::Error::other("disk full"),
        );
        assert!(resume_hint(&io).contains("run the job again to resume"));
    }
}
