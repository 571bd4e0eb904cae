//! `kiln bench train`: steps/s and milliseconds per step part on one device, on a real capture
//! at a fixed resolution and splat count (kiln_pipeline::bench); `kiln bench scale`: whole jobs
//! at growing generated input sizes ([`super::bench_scale`]).

use std::path::PathBuf;

use anyhow::Context;
use kiln_kernels::device::DeviceRequest;

/// `kiln bench …`
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchCommand,
}

/// What to benchmark.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Time training steps (densification off, fixed splat count).
    Train(BenchTrainArgs),
    /// Run whole jobs on generated inputs at 1×, 4×, 16× … sizes: time, peak memory, growth.
    Scale(super::bench_scale::BenchScaleArgs),
}

/// Arguments of `kiln bench train`.
#[derive(Debug, clap::Args)]
pub struct BenchTrainArgs {
    /// auto | cpu | cuda | cuda:N | emulator.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Capture to train on (path or dataset://NAME).
    #[arg(long, default_value = "dataset://capture-fox-instantngp")]
    pub capture: String,
    /// Longest image side after ingest, pixels: 0 (full size) or ≥ 16 (fox's photos are
    /// 1080×1920).
    #[arg(long, default_value_t = 270)]
    pub max_side: u32,
    /// Timed steps (≥ 1).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Untimed warm-up steps first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Splats (fixed for the whole run, ≥ 1).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub splats: u64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Working folder for the ingested images [default: a temporary folder].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Run a benchmark.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.what {
        BenchCommand::Train(a) => run_train(&a),
        BenchCommand::Scale(a) => super::bench_scale::run(&a),
    }
}

/// `dir` when given, else a fresh temporary folder (removed when the returned guard drops).
///
/// # Errors
/// When the temporary folder cannot be made.
pub(super) fn work_dir_or_temporary(
    dir: Option<&std::path::Path>,
) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    match dir {
        Some(d) => Ok((d.to_path_buf(), None)),
        None => {
            let tmp = tempfile::tempdir().context("creating a temporary folder")?;
            Ok((tmp.path().to_path_buf(), Some(tmp)))
        }
    }
}

/// `kiln bench train`.
fn run_train(a: &BenchTrainArgs) -> anyhow::Result<()> {
    if (1..16).contains(&a.max_side) {
        anyhow::bail!(
            "--max-side {}: use 0 (full size) or at least 16 pixels",
            a.max_side
        );
    }
    let renderer = if a.device.trim().eq_ignore_ascii_case("emulator") {
        kiln_kernels::Renderer::emulator()?
    } else {
        let request: DeviceRequest = a.device.parse().map_err(|_| {
            anyhow::anyhow!(
                "--device {:?}: use auto, cpu, cuda, cuda:N or emulator",
                a.device
            )
        })?;
        kiln_kernels::device::renderer_for(request)?
    };
    let capture = kiln_datasets::resolve_location(&a.capture)
        .with_context(|| format!("cannot resolve capture {}", a.capture))?;
    let (work_dir, _tmp) = work_dir_or_temporary(a.work_dir.as_deref())?;
    let cfg = kiln_pipeline::bench::BenchTrainConfig {
        capture: PathBuf::from(capture),
        max_side: (a.max_side > 0).then_some(a.max_side),
        steps: a.steps as usize,
        warmup: a.warmup,
        splats: a.splats as usize,
        seed: a.seed,
    };
    let r = kiln_pipeline::bench::bench_train(&renderer, &cfg, &work_dir)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "device {} ({}), {} CPU threads; {}×{} px, {} views ({} trained on, the rest held out), {} splats, {} steps",
        r.device,
        r.device_name,
        r.cpu_threads,
        r.image_size[0],
        r.image_size[1],
        r.views,
        r.train_views,
        r.splats,
        r.steps
    );
    println!("{:.3} steps/s", r.steps_per_s);
    let t = &r.step_ms;
    for (name, ms) in [
        ("project", t.project),
        ("sort", t.sort),
        ("rasterize_forward", t.rasterize_forward),
        ("loss", t.loss),
        ("rasterize_backward", t.rasterize_backward),
        ("project_backward", t.project_backward),
        ("backward_other", t.backward_other),
        ("optimizer", t.optimizer),
        ("total", t.total),
    ] {
        println!("  {name:<20} {ms:>10.2} ms/step");
    }
    if let Some(b) = r.peak_device_bytes {
        println!("peak device memory {:.1} MiB", b as f64 / (1 << 20) as f64);
    }
    if let Some(b) = r.peak_rss_bytes {
        println!("peak RSS {:.1} MiB", b as f64 / (1 << 20) as f64);
    }
    Ok(())
}
