//! `kiln eval INPUT`: render a splat tileset (every screen-space-error and splat-budget cut a
//! client would show) or a splat file from a capture's held-out cameras, or from an orbit, and
//! score it against the photos and the full trained splats. The work is
//! `kiln_pipeline::stages::eval`; this file parses, resolves the inputs and prints.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kiln_formats::splats::convert::{UpAxis, up_axis_rotation};
use kiln_kernels::{RenderOptions, Renderer};
use kiln_pipeline::stages::eval::{
    self, Delivered, EvalParams, EvalReport, EvalView, LoadedTileset,
};
use kiln_pipeline::stages::ingest::{self, IngestParams};
use kiln_pipeline::stages::train::{self, TrainParams};

/// Arguments of `kiln eval`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    kiln eval out/fox --capture dataset://capture-fox-instantngp --max-side 270\n  \
    kiln eval out/plushdog/tileset.json --reference plushdog.ply --orbit\n\
    Cuts: τ = the maximum screen-space error in pixels a CesiumJS client refines to (16 is its \
    default; 0 shows every leaf); budgets = the most splats a Spark-style client shows.")]
pub struct EvalArgs {
    /// A tileset (`tileset.json`, or a folder holding one, e.g. a job's output) or one splat
    /// file (.ply, .spz, .splat, .glb, .compressed.ply).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// The capture whose held-out photos to render from: a capture folder or
    /// `dataset://NAME` (ingested with --max-side), or a job's `ingest` work folder.
    #[arg(long, value_name = "CAPTURE")]
    pub capture: Option<String>,
    /// Longest image side when ingesting --capture (as the job's `[ingest] max_side`).
    #[arg(long, value_name = "PX")]
    pub max_side: Option<u32>,
    /// Every Nth photo by name is held out (as the job's `[train] eval_every`).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub eval_every: usize,
    /// The full trained splats to compare with (default: `splats.ply` beside the tileset, when
    /// there is one).
    #[arg(long, value_name = "SPLATS")]
    pub reference: Option<PathBuf>,
    /// Render from an orbit around the scene (1×, 2×, 4× its radius) instead of photos; the
    /// default without --capture.
    #[arg(long)]
    pub orbit: bool,
    /// Orbit distances as multiples of the scene radius (90th percentile of the splats' distances
    /// from their median), comma-separated.
    #[arg(long, value_name = "X,…", value_delimiter = ',', default_values_t = EvalParams::default().orbit_radii)]
    pub orbit_radii: Vec<f64>,
    /// The scene's up axis for the orbit (y, neg-y, z, …); default: the tileset's recorded frame,
    /// else y.
    #[arg(long, value_name = "AXIS", allow_hyphen_values = true)]
    pub up_axis: Option<UpAxis>,
    /// Screen-space errors (pixels) of the cuts, comma-separated.
    #[arg(long, value_name = "PX,…", value_delimiter = ',', default_values_t = EvalParams::default().taus_px)]
    pub tau: Vec<f64>,
    /// Splat budgets of the budget cuts, comma-separated.
    #[arg(long, value_name = "N,…", value_delimiter = ',', default_values_t = EvalParams::default().budgets)]
    pub budget: Vec<usize>,
    /// Render with the Mip-Splatting 2D filter (splats trained with `train.antialiased`).
    #[arg(long)]
    pub antialiased: bool,
    /// Where to write fidelity.json, strips/ and psnr_bytes.svg (default: `fidelity/` beside
    /// INPUT).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print fidelity.json on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Resolve the inputs, evaluate, print.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let (delivered, input_dir) = open_input(&args.input)?;
    let reference = resolve_reference(&args, &input_dir)?;
    let tmp = tempfile::tempdir().context("create a temporary folder")?;
    let views = match (&args.capture, args.orbit) {
        (Some(capture), false) => {
            held_out_views(capture, args.max_side, args.eval_every, tmp.path())?
        }
        _ => orbit(&args, &delivered, reference.as_ref().map(|r| &r.1))?,
    };
    let params = EvalParams {
        taus_px: args.tau.clone(),
        budgets: args.budget.clone(),
        orbit_radii: args.orbit_radii.clone(),
        ..EvalParams::default()
    };
    let options = RenderOptions {
        antialiased: args.antialiased,
        ..RenderOptions::default()
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| input_dir.join("fidelity"));
    let report = eval::evaluate(
        &Renderer::Cpu,
        &delivered,
        reference.as_ref().map(|r| &r.1),
        &views,
        &params,
        &options,
        &out,
    )
    .with_context(|| format!("evaluate {}", args.input.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, reference.as_ref().map(|r| r.0.as_path()), &out);
    }
    Ok(())
}

/// The tileset or splat file named by INPUT, and the folder it is in.
fn open_input(input: &Path) -> anyhow::Result<(Delivered, PathBuf)> {
    let path = if input.is_dir() {
        input.join("tileset.json")
    } else {
        input.to_path_buf()
    };
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    if !path.exists() {
        bail!(
            "{}: no such file (give a tileset.json, a folder holding one, or a splat file)",
            path.display()
        );
    }
    if path.extension().is_some_and(|e| e == "json") {
        let ts = LoadedTileset::open(&path)?;
        return Ok((Delivered::Tileset(ts), dir));
    }
    let splats = kiln_formats::splats::convert::read_splats(&path)
        .with_context(|| format!("read splats from {}", path.display()))?;
    let bytes = std::fs::metadata(&path)?.len();
    Ok((
        Delivered::Splats {
            label: path.display().to_string(),
            splats,
            bytes,
        },
        dir,
    ))
}

/// `--reference`, else `splats.ply` beside the input tileset.
fn resolve_reference(
    args: &EvalArgs,
    input_dir: &Path,
) -> anyhow::Result<Option<(PathBuf, kiln_formats::splats::GaussianSplats)>> {
    let path = match &args.reference {
        Some(p) => p.clone(),
        None => {
            let beside = input_dir.join("splats.ply");
            if !beside.is_file() || args.input.extension().is_some_and(|e| e != "json") {
                return Ok(None);
            }
            beside
        }
    };
    let splats = kiln_formats::splats::convert::read_splats(&path)
        .with_context(|| format!("read the reference splats {}", path.display()))?;
    Ok(Some((path, splats)))
}

/// The held-out photos of `capture` (every `eval_every`-th by name), ingested into `tmp` unless
/// it already is an ingested folder.
fn held_out_views(
    capture: &str,
    max_side: Option<u32>,
    eval_every: usize,
    tmp: &Path,
) -> anyhow::Result<Vec<EvalView>> {
    let local = kiln_datasets::resolve_location(capture)
        .with_context(|| format!("resolve --capture {capture}"))?;
    let local = PathBuf::from(local.strip_prefix("file://").unwrap_or(&local));
    let ingest_dir = if local.join(ingest::CAPTURE_JSON).is_file() {
        local
    } else {
        let params = IngestParams {
            max_side,
            ..IngestParams::default()
        };
        ingest::ingest_capture(&local, &params, tmp)
            .with_context(|| format!("read the capture {capture}"))?;
        tmp.to_path_buf()
    };
    let cap = ingest::load_ingested(&ingest_dir)?;
    let views = kiln_pipeline::run::train_views(&ingest_dir, &cap, &TrainParams::default());
    Ok(train::held_out_views(views, eval_every)
        .into_iter()
        .map(EvalView::photo)
        .collect())
}

/// Orbit cameras around the reference splats (else the full-detail content).
fn orbit(
    args: &EvalArgs,
    delivered: &Delivered,
    reference: Option<&kiln_formats::splats::GaussianSplats>,
) -> anyhow::Result<Vec<EvalView>> {
    let leaves;
    let scene = match (reference, delivered) {
        (Some(r), _) => r,
        (None, Delivered::Splats { splats, .. }) => splats,
        (None, Delivered::Tileset(ts)) => {
            leaves = ts.leaves()?;
            &leaves
        }
    };
    let up = match (args.up_axis, delivered) {
        (Some(axis), _) => {
            let r = up_axis_rotation(UpAxis::Y, axis);
            [r[0][1], r[1][1], r[2][1]]
        }
        (None, Delivered::Tileset(ts)) => {
            // glTF +Y (the content's up) in the capture frame: the rotation's second row.
            let r = ts.frame.rotation();
            [r[1][0], r[1][1], r[1][2]]
        }
        (None, _) => [0.0, 1.0, 0.0],
    };
    let p = EvalParams::default();
    Ok(eval::orbit_views(
        &eval::scene_sphere(scene),
        up,
        &args.orbit_radii,
        p.orbit_views,
        p.orbit_size_px,
    ))
}

fn print_table(report: &EvalReport, reference: Option<&Path>, out: &Path) {
    let kinds: Vec<&str> = report.views.iter().map(|v| v.kind.as_str()).collect();
    let first = report.views.first();
    println!(
        "{}: {} bytes{}; {} {} views ({}×{})",
        report.source,
        report.total_bytes,
        if report.levels.is_empty() {
            String::new()
        } else {
            format!(
                ", levels (splats): {}",
                report
                    .levels
                    .iter()
                    .map(|l| l.splats.to_string())
                    .collect::<Vec<_>>()
                    .join(" / ")
            )
        },
        report.views.len(),
        kinds.first().copied().unwrap_or("no"),
        first.map_or(0, |v| v.width),
        first.map_or(0, |v| v.height),
    );
    if let (Some(r), Some(p), Some(s)) =
        (reference, report.reference_psnr_db, report.reference_ssim)
    {
        println!(
            "full splats {}: {p:.2} dB, SSIM {s:.3} against the photos",
            r.display()
        );
    }
    let opt = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
    println!(
        "{:<16} {:>10} {:>12} {:>9} {:>7} {:>12} {:>12}",
        "cut", "splats", "bytes", "PSNR dB", "SSIM", "vs full dB", "vs full SSIM"
    );
    for c in &report.cuts {
        println!(
            "{:<16} {:>10.0} {:>12.0} {:>9} {:>7} {:>12} {:>12}",
            c.label,
            c.mean.splats,
            c.mean.bytes,
            opt(c.mean.psnr_db, 2),
            opt(c.mean.ssim, 3),
            opt(c.mean.psnr_vs_full_db, 2),
            opt(c.mean.ssim_vs_full, 3),
        );
    }
    if let Some(l) = report.publish_loss_db {
        println!("publish loss (full splats − full-detail delivery): {l:.2} dB");
    }
    println!("report: {}", out.join(eval::FIDELITY_JSON).display());
}
