//! `kiln plan JOB.toml`: the job's DAG without running it — which stages, in which order, why a
//! `reconstruct` stage is there, and which stages have a finished output in the work directory.

use std::path::PathBuf;

use anyhow::Context;
use kiln_jobs::spec::JobSpec;
use kiln_pipeline::run::job_dag;

/// Arguments of `kiln plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The job file (TOML).
    pub job: PathBuf,
    /// Root of the work directories [default: $KILN_HOME/work or <data dir>/kiln/work].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Print the plan of a job file.
pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    let spec = JobSpec::from_file(&args.job)?;
    let work_root = args
        .work_dir
        .unwrap_or_else(kiln_jobs::spec::default_work_root);
    let resolve = |loc: &str| kiln_datasets::resolve_location(loc).map_err(|e| e.to_string());
    let plan = spec.plan("plan", &work_root, &args.job, &resolve)?;
    let (dag, reason) = job_dag(&plan)
        .await
        .with_context(|| format!("planning {}", args.job.display()))?;
    let order = dag.topo_order()?;
    let stages: Vec<serde_json::Value> = order
        .iter()
        .map(|n| {
            let dir = plan.work_dir.join(n.kind.name());
            let finished = dir.join(".kiln-stage.json").is_file();
            serde_json::json!({
                "stage": n.kind.name(),
                "deps": n.deps.iter().map(|d| d.name()).collect::<Vec<_>>(),
                "finished_earlier": finished,
            })
        })
        .collect();
    if args.json {
        let doc = serde_json::json!({
            "job": spec.name,
            "kind": spec.kind.name(),
            "input": plan.input,
            "work_dir": plan.work_dir,
            "reconstruct_reason": reason,
            "stages": stages,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "job {} ({}), input {}",
        spec.name,
        spec.kind.name(),
        plan.input
    );
    if let Some(reason) = &reason {
        println!("reconstruct: {reason}");
    }
    println!("work directory {}", plan.work_dir.display());
    for (i, s) in stages.iter().enumerate() {
        let deps: Vec<&str> = s["deps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_str())
            .collect();
        let state = if s["finished_earlier"] == true {
            "finished earlier: reused if its inputs and parameters are unchanged"
        } else {
            "to run"
        };
        let deps = if deps.is_empty() {
            "input".to_string()
        } else {
            deps.join(", ")
        };
        println!(
            "  {}. {:<12} {state} (after {deps})",
            i + 1,
            s["stage"].as_str().unwrap_or("")
        );
    }
    Ok(())
}
