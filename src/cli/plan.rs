//! `kiln plan JOB.toml`: the job's DAG without running it — which stages, in which order, why a
//! `reconstruct` stage is there, and which stages have a finished output in the work directory —
//! and a rough estimate of its GPU-hours and USD per GPU SKU (`kiln_jobs::estimate`), priced from
//! the built-in catalog or `--prices FILE`, scaled from the ledger's past runs where there are any.

use std::path::{Path, PathBuf};

use anyhow::Context;
use kiln_jobs::estimate::{self, Estimate, HistoryJob, JobShape};
use kiln_jobs::prices::{PriceCatalog, Tier};
use kiln_jobs::spec::JobSpec;
use kiln_pipeline::dag::job_dag;
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
    /// [default: every catalog SKU, then cpu]. Part of a GPU: `SKU:PROFILE` for a MIG profile of
    /// the catalog (`H100:1g.10gb`) or `SKU:FRACTION` for a vGPU share (`H100:0.5`).
    #[arg(long, value_name = "SKU", value_delimiter = ',')]
    pub sku: Vec<String>,
    /// Say where each figure comes from: the ledger rows it was learnt from (count, median rate,
    /// range, units scaled by; per SKU when the SKU has its own history) or the model constant and
    /// its published source, and the catalog entry of each price.
    #[arg(long)]
    pub explain: bool,
    /// Price model of the `GPU-h` and `USD` columns: `on-demand`, `spot` ('-' where the catalog
    /// has no spot price) or `committed` (also spelt `reserved`: reserved capacity, amortised,
    /// billed exactly; on-demand where none is listed). GPU time is billed by the SKU's provider
    /// rule (`[billing.*]` in the catalog). Other than on-demand, an on-demand USD column is
    /// shown beside it. Compute only: storage and egress are not estimated.
    #[arg(long, value_name = "MODE", default_value = "on-demand", value_parser = |t: &str| t.parse::<Tier>())]
    pub pricing: Tier,
    /// Same as `--pricing spot` (as on `kiln report`).
    #[arg(long, conflicts_with = "pricing")]
    pub spot: bool,
}

/// Print the plan of a job file.
pub async fn run(mut args: PlanArgs) -> anyhow::Result<()> {
    if args.spot {
        args.pricing = Tier::Spot;
    }
    let spec = JobSpec::from_file(&args.job)?;
    let work_root = args
        .work_dir
        .clone()
        .unwrap_or_else(kiln_jobs::spec::default_work_root);
    let resolve = |loc: &str| kiln_datasets::resolve_location(loc).map_err(|e| e.to_string());
    let plan = spec.plan("plan", &work_root, &args.job, &resolve)?;
    let (dag, reason) = job_dag(&plan)
        .await
        .with_context(|| format!("planning {}", args.job.display()))?;
    let stages = planned_stages(&plan, &dag)?;
    let catalog = match &args.prices {
        Some(p) => PriceCatalog::from_file(p)?,
        None => PriceCatalog::default_catalog(),
    };
    let shape = job_shape(&spec, &plan, &stages);
    let sources = capture_sources(&spec, &plan.input, reason.is_some());
    let history = ledger_history().await;
    let est = estimate::estimate(&shape, &history, &catalog, &args.sku)?;
    let explained = if args.explain {
        estimate::explain(&shape, &history, &catalog, &est)?
    } else {
        Vec::new()
    };
    let planned = Planned {
        spec: &spec,
        plan: &plan,
        reason: reason.as_deref(),
        sources: &sources,
        stages: &stages,
        shape: &shape,
        catalog: &catalog,
        history_jobs: history.len(),
        est: &est,
        explained: &explained,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&planned.json(&args)?)?);
    } else {
        planned.print(&args)?;
    }
    unreadable_capture(&sources)
}

/// One stage of the plan as `kiln plan` shows it.
#[derive(Debug, serde::Serialize)]
struct PlannedStage {
    stage: String,
    /// The stages it runs after (empty: it reads the job's input).
    deps: Vec<String>,
    /// Its work folder holds a finished output (reused when its key is unchanged).
    finished_earlier: bool,
}

/// The stages of `dag` in run order, with what the work folder holds of each.
fn planned_stages(
    plan: &kiln_pipeline::plan::JobPlan,
    dag: &kiln_pipeline::dag::Dag,
) -> anyhow::Result<Vec<PlannedStage>> {
    Ok(dag
        .topo_order()?
        .iter()
        .map(|n| PlannedStage {
            stage: n.kind.name().to_string(),
            deps: n.deps.iter().map(|d| d.name().to_string()).collect(),
            finished_earlier: kiln_pipeline::run::marker_key(&plan.work_dir.join(n.kind.name()))
                .is_some(),
        })
        .collect())
}

/// What the estimator needs to know of the job: its kind, input size, stages and, with a
/// `train` stage, the capture's training shape.
fn job_shape(
    spec: &JobSpec,
    plan: &kiln_pipeline::plan::JobPlan,
    stages: &[PlannedStage],
) -> JobShape {
    let stage_names: Vec<String> = stages.iter().map(|s| s.stage.clone()).collect();
    JobShape {
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
    }
}

/// Everything `kiln plan` prints.
struct Planned<'a> {
    spec: &'a JobSpec,
    plan: &'a kiln_pipeline::plan::JobPlan,
    reason: Option<&'a str>,
    sources: &'a Option<Result<ingest::CaptureSources, kiln_pipeline::Error>>,
    stages: &'a [PlannedStage],
    shape: &'a JobShape,
    catalog: &'a PriceCatalog,
    history_jobs: usize,
    est: &'a Estimate,
    explained: &'a [estimate::Explanation],
}

impl Planned<'_> {
    /// `kiln plan --json`.
    fn json(&self, args: &PlanArgs) -> anyhow::Result<serde_json::Value> {
        let catalog = self.catalog;
        Ok(serde_json::json!({
            "job": self.spec.name,
            "kind": self.spec.kind.name(),
            "input": self.plan.input,
            "work_dir": self.plan.work_dir,
            "reconstruct_reason": self.reason,
            "capture_sources": match self.sources {
                Some(Ok(s)) => serde_json::to_value(s)?,
                Some(Err(e)) => serde_json::json!({ "error": e.to_string() }),
                None => serde_json::Value::Null,
            },
            "stages": self.stages,
            "estimate": {
                "shape": self.shape,
                "prices": args.prices.as_ref().map_or(catalog.file.clone(), |p| p.display().to_string()),
                "billing_minimum_s": catalog.billing_minimum_s,
                "history_jobs": self.history_jobs,
                "pricing": args.pricing.name(),
                "usd_priced": priced_usd(self.est, catalog, args.pricing)?
                    .into_iter()
                    .map(|(sku, p)| serde_json::json!({
                        "sku": sku,
                        "gpu_hours_billed": p.gpu_hours_billed,
                        "usd": p.usd,
                    }))
                    .collect::<Vec<_>>(),
                "result": self.est,
                "explain": args.explain.then_some(self.explained),
            },
        }))
    }

    /// `kiln plan` as text: the input, how its poses are found, the stages and the estimate.
    fn print(&self, args: &PlanArgs) -> anyhow::Result<()> {
        let (spec, plan) = (self.spec, self.plan);
        println!(
            "job {} ({}), input {}",
            spec.name,
            spec.kind.name(),
            plan.input
        );
        if let Some(reason) = self.reason {
            println!("reconstruct: {reason}");
            println!("poses: estimated by COLMAP in the reconstruct stage (its images.bin)");
            println!("points: the reconstruct stage's points3D.bin");
        }
        match self.sources {
            Some(Ok(s)) => println!("{}\n{}", s.poses_line(), s.points_line()),
            Some(Err(e)) => println!("capture: cannot be read: {e}"),
            None => {}
        }
        println!("work directory {}", plan.work_dir.display());
        for (i, s) in self.stages.iter().enumerate() {
            let state = if s.finished_earlier {
                "finished earlier: reused if its inputs and parameters are unchanged"
            } else {
                "to run"
            };
            let deps = if s.deps.is_empty() {
                "input".to_string()
            } else {
                s.deps.join(", ")
            };
            println!("  {}. {:<12} {state} (after {deps})", i + 1, s.stage);
        }
        print_estimate(
            self.est,
            self.shape,
            self.catalog,
            self.history_jobs,
            args.pricing,
        )?;
        let finished = self.stages.iter().filter(|s| s.finished_earlier).count();
        if finished > 0 {
            println!(
                "  note: the estimate includes the {finished} stage(s) finished earlier; a stage reused \
                 from its finished output costs nothing"
            );
        }
        if args.explain {
            println!("where the figures come from:");
            for e in self.explained {
                println!(
                    "  {:<14} {}\n  {:<14}   from {}",
                    e.item, e.figure, "", e.source
                );
            }
        }
        Ok(())
    }
}

/// Each SKU row priced at `tier` ([`estimate::price_at`]: billed GPU-hours and USD; `None`: no
/// spot price).
fn priced_usd(
    est: &Estimate,
    catalog: &PriceCatalog,
    tier: Tier,
) -> anyhow::Result<Vec<(String, estimate::PricedRow)>> {
    est.skus
        .iter()
        .map(|k| Ok((k.sku.clone(), estimate::price_at(k, catalog, tier)?)))
        .collect()
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
    // A plain path or file:// URL: read it as the run will (issue 44, rule 1: any file of a
    // capture names the capture; ingest::capture_sources applies that rule).
    let local = match kiln_pipeline::location::Location::parse(input) {
        Ok(kiln_pipeline::location::Location::Local(path)) => path,
        _ => return None,
    };
    let is_capture = spec.kind.name() == "capture";
    (is_capture && !reconstructs && local.exists()).then(|| ingest::capture_sources(&local))
}

/// The estimate as text: seconds per stage with their basis, then one row per SKU.
fn print_estimate(
    est: &Estimate,
    shape: &JobShape,
    catalog: &PriceCatalog,
    history_jobs: usize,
    tier: Tier,
) -> anyhow::Result<()> {
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
    for line in estimate_table(est, catalog, tier)? {
        println!("{line}");
    }
    Ok(())
}

/// The per-SKU rows of the estimate: GPU-h and USD both at `tier` (one billing rule for both),
/// plus an on-demand USD column for comparison when `tier` is not on-demand, then the footnote.
fn estimate_table(
    est: &Estimate,
    catalog: &PriceCatalog,
    tier: Tier,
) -> anyhow::Result<Vec<String>> {
    let priced = priced_usd(est, catalog, tier)?;
    let on_demand = (tier != Tier::OnDemand)
        .then(|| priced_usd(est, catalog, Tier::OnDemand))
        .transpose()?;
    let cell = |v: Option<f64>| v.map_or("-".to_string(), usd);
    let mut out = vec![format!(
        "  {:<14} {:>6} {:>9} {:>10} {:>10} {:>14}{}",
        "SKU",
        "speed",
        "GPU-s",
        "GPU-h",
        "vCPU-h",
        format!("USD {tier}"),
        if on_demand.is_some() {
            format!(" {:>14}", "USD on-demand")
        } else {
            String::new()
        }
    )];
    for (i, (k, (_, p))) in est.skus.iter().zip(&priced).enumerate() {
        out.push(format!(
            "  {:<14} {:>6} {:>9.1} {:>10.4} {:>10.4} {:>14}{}",
            k.sku,
            k.relative_speed
                .map_or("-".to_string(), |v| format!("{v:.2}")),
            k.gpu_s,
            p.gpu_hours_billed,
            k.vcpu_hours,
            cell(p.usd),
            on_demand
                .as_ref()
                .map_or(String::new(), |o| format!(" {:>14}", cell(o[i].1.usd)))
        ));
    }
    out.push(format!(
        "  GPU-s = estimated GPU time (on a partial-GPU slot: slot seconds); GPU-h = GPU-equivalent \
         hours billed at {tier} (--pricing): by the SKU's provider [billing] rule (at least {} s per \
         lease by default), exactly for committed (amortised), × the slot's share of the GPU; CPU \
         stages at the {tier} $/vCPU-h (on demand ${}); '-' where the catalog has no spot price.\n  \
         Compute only: storage and egress are not estimated (see `kiln report`); model and \
         sources: jobs/src/estimate.rs",
        catalog.billing_minimum_s, catalog.cpu.vcpu_hour_usd_on_demand
    ));
    Ok(out)
}

/// Dollars as every `kiln plan` figure ([`estimate::usd4`]).
fn usd(v: f64) -> String {
    estimate::usd4(v)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan_args(extra: &[&str]) -> PlanArgs {
        let all = ["kiln", "plan", "job.toml"].iter().chain(extra).copied();
        match super::super::Cli::try_parse_from(all).unwrap().command {
            super::super::Command::Plan(a) => a,
            other => panic!("not plan: {other:?}"),
        }
    }

    #[test]
    fn spot_flag_is_an_alias_of_pricing_spot_and_conflicts_with_pricing() {
        assert!(plan_args(&["--spot"]).spot);
        assert_eq!(plan_args(&[]).pricing, Tier::OnDemand);
        let both = ["kiln", "plan", "j.toml", "--spot", "--pricing", "committed"];
        assert!(super::super::Cli::try_parse_from(both).is_err());
    }

    fn mig_estimate() -> Estimate {
        Estimate {
            catalog_version: "v".into(),
            reference_sku: "A100-40GB".into(),
            stages: Vec::new(),
            skus: vec![estimate::SkuEstimate {
                sku: "H100:1g.10gb".into(),
                relative_speed: Some(0.3),
                gpu_s: 60.0,
                gpu_hours: 0.0,
                vcpu_hours: 0.0,
                usd_on_demand: 0.0,
                usd_spot: None,
                gpu_basis: None,
                slot_fraction: Some(1.0 / 7.0),
            }],
        }
    }

    #[test]
    fn plan_table_headers_are_distinct_and_a_mig_row_is_priced_at_its_share() {
        let cat = PriceCatalog::default_catalog();
        let od = estimate_table(&mig_estimate(), &cat, Tier::OnDemand).unwrap();
        assert_eq!(od[0].matches("USD").count(), 1, "{}", od[0]);
        // 60 s on a 1/7 slice of an AWS H100: 60/7/3600 GPU-h × $6.88 = $0.0164 on demand.
        assert!(od[1].contains("$0.0164"), "{}", od[1]);
        assert!(od[1].contains("0.0024"), "{}", od[1]);
        let spot = estimate_table(&mig_estimate(), &cat, Tier::Spot).unwrap();
        assert!(spot[0].contains("USD spot") && spot[0].contains("USD on-demand"));
        // × $2.34 spot = $0.0056, left of the on-demand $0.0164.
        let (s, o) = (
            spot[1].find("$0.0056").unwrap(),
            spot[1].find("$0.0164").unwrap(),
        );
        assert!(s < o, "{}", spot[1]);
        assert!(spot.last().unwrap().contains("Compute only"));
    }
}
