//! `kiln run JOB.toml`: resolve the job file into a plan and run it, recording the ledger.

use std::path::PathBuf;

use anyhow::Context;
use kiln_jobs::{ledger::Ledger, runner, spec::JobSpec};
use kiln_pipeline::stages::eval::EvalSummary;
use kiln_pipeline::stages::summary::StageSummary;

use super::DbArgs;

/// Arguments of `kiln run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job file (TOML); see datasets/jobs/*.toml.
    pub job: PathBuf,
    /// Override the job file's output URL or path.
    #[arg(long, value_name = "URL")]
    pub output: Option<String>,
    /// Root of the work directories kept between stages and runs (resume, cache)
    /// [default: $KILN_HOME/work or <data dir>/kiln/work].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Override the number of training steps (capture jobs).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Georeference the output tileset: "lon,lat,height[,heading]" in degrees, degrees, metres
    /// above the WGS84 ellipsoid and degrees clockwise from north (overrides the job's `georef`).
    #[arg(long, value_name = "LON,LAT,H[,HEADING]", allow_hyphen_values = true)]
    pub georef: Option<kiln_pipeline::stages::tile::georef::Georef>,
    /// Rasterizer device for training: auto (cuda:0 when usable, else CPU), cpu, cuda or cuda:N.
    /// An explicit cuda that cannot be used fails the job before any stage runs.
    #[arg(long, default_value = "auto", env = "KILN_DEVICE")]
    pub device: kiln_kernels::device::DeviceRequest,
    #[command(flatten)]
    pub db: DbArgs,
}

/// Run the job and print its id, outputs and headline figures.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.job)
        .with_context(|| format!("cannot read job file {}", args.job.display()))?;
    let mut spec = JobSpec::from_toml(&text, &args.job)?;
    if let Some(o) = args.output {
        spec.output = o;
    }
    if let Some(s) = args.steps {
        spec.train.steps = s;
    }
    if let Some(g) = args.georef {
        spec.georef = Some(g);
    }
    // The ledger must say where the outputs are from anywhere (kiln serve, kiln report --html),
    // not relative to the directory this command ran in.
    if !spec.output.contains("://") {
        spec.output = std::path::absolute(&spec.output)
            .with_context(|| format!("output path {}", spec.output))?
            .to_string_lossy()
            .into_owned();
    }
    let job_id = runner::new_job_id(&spec.name);
    let work_root = args
        .work_dir
        .unwrap_or_else(kiln_jobs::spec::default_work_root);
    let resolve = |loc: &str| kiln_datasets::resolve_location(loc).map_err(|e| e.to_string());
    let mut plan = spec.plan(&job_id, &work_root, &args.job, &resolve)?;
    plan.device = args.device;
    // An explicit device is checked before anything runs (no half-run job on a machine without
    // CUDA); `auto` falls back to the CPU when the train stage opens it.
    // Only capture jobs train; mesh and splats jobs ignore the device.
    if let kiln_kernels::device::DeviceRequest::Exact(d) = args.device
        && spec.kind == kiln_pipeline::dag::JobKind::Capture
    {
        kiln_kernels::device::Device::resolve(args.device)
            .with_context(|| format!("--device {d}: cannot start (nothing was run)"))?;
    }
    let ledger = Ledger::connect(&args.db.target()).await?;
    tracing::info!(job = %job_id, input = %plan.input, output = %plan.output, work = %plan.work_dir.display(), "job started");
    let outcome = runner::run_job(&plan, &text, &ledger).await?;
    println!(
        "job {} succeeded; outputs in {}",
        outcome.job_id, plan.output
    );
    print_stages(&outcome.stages);
    print_warnings(&outcome.stages);
    // The job page beside the outputs (what `kiln serve` shows next to the viewer); local
    // outputs only — for remote ones `kiln report --html` writes it wherever asked.
    let out_dir = std::path::Path::new(&plan.output);
    if out_dir.is_dir() {
        let page = kiln_jobs::report::job_report(&ledger, &outcome.job_id)
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| {
                kiln_jobs::job_page::write_job_page(&r, out_dir, &out_dir.join("report"))
                    .map_err(anyhow::Error::from)
            });
        match page {
            Ok(p) => println!("report: {}", p.index.display()),
            Err(e) => tracing::warn!("job report page not written: {e:#}"),
        }
    }
    println!(
        "ledger: kiln report {} --db {}",
        outcome.job_id,
        ledger.path()
    );
    Ok(())
}

/// One line per stage (state, wall time, summary), then the held-out quality of the trained
/// splats and what the delivered tiles keep of it.
fn print_stages(stages: &[kiln_pipeline::run::StageOutcome]) {
    let typed: Vec<Option<StageSummary>> = stages.iter().map(StageSummary::of).collect();
    for (s, summary) in stages.iter().zip(&typed) {
        let state = if s.cache_hit { "cached" } else { "ran" };
        let line = match summary {
            Some(StageSummary::Eval(e)) => eval_line(e),
            _ => s.summary.to_string(),
        };
        println!(
            "  {:<9} {:<6} {:>8.2} s  {}",
            s.kind.name(),
            state,
            s.usage.wall_s,
            line
        );
    }
    if let Some(t) = typed.iter().flatten().find_map(StageSummary::train) {
        println!(
            "held-out PSNR {:.2} dB, SSIM {:.4}, splats {}",
            t.psnr_db, t.ssim, t.splats
        );
    }
    if let Some(e) = typed.iter().flatten().find_map(StageSummary::eval)
        && let Some(loss) = e.publish_loss_db
    {
        let tau16 = e.tau(16);
        let (db, field) = match tau16.and_then(|c| c.psnr_db) {
            Some(v) => (v, "against the photos"),
            None => (
                tau16.and_then(|c| c.psnr_vs_full_db).unwrap_or(f64::NAN),
                "against the full splats",
            ),
        };
        println!(
            "delivered tiles: publish loss {loss:.2} dB; at τ = 16 px {db:.2} dB {field}, {:.2} MB fetched",
            tau16.map_or(0.0, |c| c.bytes) / 1e6
        );
    }
}

/// Every warning the stages recorded (also in `kiln report`, the job page, the API and
/// `manifest.json`), so a job that succeeded with a missing texture says so where it ends.
fn print_warnings(stages: &[kiln_pipeline::run::StageOutcome]) {
    let warnings =
        kiln_pipeline::warnings::of_job(stages.iter().map(|s| (s.kind.name(), &s.summary)));
    if warnings.is_empty() {
        return;
    }
    println!(
        "warnings ({}; a job file's `strict = true` makes them errors):",
        warnings.len()
    );
    for w in &warnings {
        println!("  {:<9} {}", w.stage, w.message);
    }
}

/// The eval stage's summary in one line: publish loss, then per baselined τ the mean PSNR
/// (against the photos, else against the full splats) and the bytes fetched.
fn eval_line(summary: &EvalSummary) -> String {
    let mut parts = Vec::new();
    if let Some(l) = summary.publish_loss_db {
        parts.push(format!("publish loss {l:.2} dB"));
    }
    for tau in [0, 16, 64, 120] {
        let Some(c) = summary.tau(tau) else {
            continue;
        };
        let Some(db) = c.psnr_db.or(c.psnr_vs_full_db) else {
            continue;
        };
        parts.push(format!("τ={tau}: {db:.2} dB {:.2} MB", c.bytes / 1e6));
    }
    format!(
        "{} ({} {} views; fidelity/fidelity.json)",
        parts.join(", "),
        summary.views,
        summary.view_kind.as_deref().unwrap_or("")
    )
}
