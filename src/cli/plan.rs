//! `kiln plan JOB.toml`: the job's DAG without running it — which stages, in which order, why a
//! `reconstruct` stage is there, and which stages have a finished output in the work directory —
//! and a rough estimate of its GPU-hours and USD per GPU SKU (`kiln_jobs::estimate`), priced from
//! the built-in catalog or `--prices FILE`, scaled from the ledger's past runs where there are any.

use std::path::{Path, PathBuf};

use anyhow::Context;
use kiln_jobs::estimate::{self, Estimate, HistoryJob, JobShape};
use kiln_jobs::prices::PriceCatalog;
use kiln_jobs::spec::JobSpec;
use kiln_pipeline::run::job_dag;
use kiln_pipeline::stages::ingest;

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
    /// Price catalog (TOML) for the estimate [default: the built-in one, jobs/src/prices/default.toml].
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Estimate only these SKUs (catalog names such as `H100`, or `cpu`; repeat or comma-separate)
    /// [default: every catalog SKU, then cpu].
    #[arg(long, value_name = "SKU", value_delimiter = ',')]
    pub sku: Vec<String>,
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

    let catalog = match &args.prices {
        Some(p) => PriceCatalog::from_file(p)?,
        None => PriceCatalog::default_catalog(),
    };
    let stage_names: Vec<String> = order.iter().map(|n| n.kind.name().to_string()).collect();
    let shape = JobShape {
        kind: spec.kind.name().to_string(),
        input_bytes: estimate::local_bytes(Path::new(&plan.input)),
        train: stage_names
            .iter()
            .any(|s| s == "train")
            .then(|| {
                estimate::capture_train_shape(
                    Path::new(&plan.input),
                    plan.train.steps,
                    plan.ingest.max_side,
                )
            })
            .flatten(),
        stages: stage_names,
    };
    let sources = capture_sources(&spec, &plan.input, reason.is_some());
    let history = ledger_history().await;
    let est = estimate::estimate(&shape, &history, &catalog, &args.sku)?;

    if args.json {
        let doc = serde_json::json!({
            "job": spec.name,
            "kind": spec.kind.name(),
            "input": plan.input,
            "work_dir": plan.work_dir,
            "reconstruct_reason": reason,
            "capture_sources": match &sources {
                Some(Ok(s)) => serde_json::to_value(s)?,
                Some(Err(e)) => serde_json::json!({ "error": e.to_string() }),
                None => serde_json::Value::Null,
            },
            "stages": stages,
            "estimate": {
                "shape": shape,
                "prices": args.prices.as_ref().map_or(catalog.file.clone(), |p| p.display().to_string()),
                "billing_minimum_s": catalog.billing_minimum_s,
                "history_jobs": history.len(),
                "result": est,
            },
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return unreadable_capture(&sources);
    }
    println!(
        "job {} ({}), input {}",
        spec.name,
        spec.kind.name(),
        plan.input
    );
    if let Some(reason) = &reason {
        println!("reconstruct: {reason}");
        println!("poses: estimated by COLMAP in the reconstruct stage (its images.bin)");
        println!("points: the reconstruct stage's points3D.bin");
    }
    match &sources {
        Some(Ok(s)) => println!("{}\n{}", s.poses_line(), s.points_line()),
        Some(Err(e)) => println!("capture: cannot be read: {e}"),
        None => {}
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
    print_estimate(&est, &shape, &catalog, history.len());
    unreadable_capture(&sources)
}

/// The plan is printed either way; a capture that cannot be read fails the command (exit 1), so
/// a script that plans before it runs learns of it.
fn unreadable_capture(
    sources: &Option<Result<ingest::CaptureSources, kiln_pipeline::Error>>,
) -> anyhow::Result<()> {
    match sources {
        Some(Err(e)) => anyhow::bail!("the capture cannot be read: {e}"),
        _ => Ok(()),
    }
}

/// Where a posed capture job's poses and points come from; `None` for other jobs, captures the
/// reconstruct stage poses, and inputs that are not local (read at ingest).
fn capture_sources(
    spec: &JobSpec,
    input: &str,
    reconstructs: bool,
) -> Option<Result<ingest::CaptureSources, kiln_pipeline::Error>> {
    let local = Path::new(input);
    let is_capture = spec.kind.name() == "capture";
    (is_capture && !reconstructs && local.exists()).then(|| ingest::capture_sources(local))
}

/// The estimate as text: seconds per stage with their basis, then one row per SKU.
fn print_estimate(est: &Estimate, shape: &JobShape, catalog: &PriceCatalog, history_jobs: usize) {
    println!(
        "estimate (rough; prices {} version {}, reference GPU {}; {} earlier jobs in the ledger):",
        if catalog.file.starts_with('<') {
            "built-in"
        } else {
            catalog.file.as_str()
        },
        est.catalog_version,
        est.reference_sku,
        history_jobs
    );
    let train = shape
        .train
        .map(|t| format!(", train {} steps × {} px", t.steps, t.pixels_per_view))
        .unwrap_or_default();
    println!("  input {} bytes{train}", shape.input_bytes);
    for s in &est.stages {
        if let (Some(g), Some(b)) = (s.reference_gpu_s, &s.gpu_basis) {
            println!(
                "  {:<12} {:>12.1} GPU-s on {}   {b}",
                s.stage, g, est.reference_sku
            );
            println!(
                "  {:<12} {:>12.2} vCPU-s on CPUs only   {}",
                "", s.vcpu_s, s.vcpu_basis
            );
        } else {
            println!(
                "  {:<12} {:>12.2} vCPU-s   {}",
                s.stage, s.vcpu_s, s.vcpu_basis
            );
        }
    }
    println!(
        "  {:<10} {:>6} {:>9} {:>10} {:>10} {:>14} {:>10}",
        "SKU", "speed", "GPU-s", "GPU-h", "vCPU-h", "USD on-demand", "USD spot"
    );
    for k in &est.skus {
        println!(
            "  {:<10} {:>6} {:>9.1} {:>10.4} {:>10.4} {:>14} {:>10}",
            k.sku,
            k.relative_speed
                .map_or("-".to_string(), |v| format!("{v:.2}")),
            k.gpu_s,
            k.gpu_hours,
            k.vcpu_hours,
            usd(k.usd_on_demand),
            k.usd_spot.map_or("-".to_string(), usd)
        );
    }
    println!(
        "  GPU-s = estimated GPU time, GPU-h = billed (at least {} s per job); CPU stages at ${}/vCPU-h; spot '-' where the \
         catalog has no spot price; model and sources: jobs/src/estimate.rs",
        catalog.billing_minimum_s, catalog.cpu.vcpu_hour_usd_on_demand
    );
}

/// Dollars to four decimals; "<$0.0001" for a smaller non-zero amount.
fn usd(v: f64) -> String {
    if v > 0.0 && v < 0.0001 {
        "<$0.0001".to_string()
    } else {
        format!("${v:.4}")
    }
}

/// Every job in the default ledger with its stage attempts, read-only; empty when there is no
/// ledger yet or it cannot be read (the estimate then uses its model; a warning is logged).
async fn ledger_history() -> Vec<HistoryJob> {
    let path = kiln_jobs::ledger::default_path();
    if !path.is_file() {
        return Vec::new();
    }
    let read = async {
        let ledger = kiln_jobs::ledger::Ledger::open(&path).await?;
        let mut out = Vec::new();
        for job in ledger.jobs().await? {
            out.push(HistoryJob {
                stages: ledger.stages(&job.id).await?,
                kind: job.kind,
            });
        }
        Ok::<_, kiln_jobs::Error>(out)
    };
    match read.await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!("estimate without history: {e}");
            Vec::new()
        }
    }
}
