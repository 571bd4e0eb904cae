//! `kiln eval INPUT`: render a splat tileset (every screen-space-error and splat-budget cut a
//! client would show) or a splat file from a capture's held-out cameras, or from an orbit, and
//! score it against the photos and the full trained splats. The work is
//! `kiln_pipeline::stages::eval`; this file parses, resolves the inputs and prints.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kiln_formats::splats::convert::SplatFormat;
use kiln_formats::splats::placed::PlacedSplats;
use kiln_formats::splats::transform::{UpAxis, up_axis_rotation};
use kiln_kernels::{RenderOptions, Renderer};
use kiln_pipeline::stages::eval::{
    self, Delivered, EvalParams, EvalReport, EvalView, LoadedTileset,
};
use kiln_pipeline::stages::ingest::{self, IngestParams};
use kiln_pipeline::stages::train::{self, TrainParams};

/// Arguments of `kiln eval`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    kiln eval out/fox --job datasets/jobs/fox.toml      (the job's capture, masks, background)\n  \
    kiln eval out/fox --capture dataset://capture-fox-instantngp --max-side 270\n  \
    kiln eval out/plushdog --job datasets/jobs/plushdog.toml   (orbit; the job's input, upright)\n  \
    kiln eval tileset.json --orbit                      (against the tileset's own leaves)\n\
    Cuts: τ = the maximum screen-space error in pixels a CesiumJS client refines to (16 is its \
    default; 0 shows every leaf); budgets = the most splats a Spark-style client shows.")]
pub struct EvalArgs {
    /// A tileset (`tileset.json`, or a folder holding one, e.g. a job's output) or one splat
    /// file (.ply, .spz, .splat, .glb, .compressed.ply, .sog, or an unbundled SOG's meta.json or
    /// folder).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// The job file INPUT came from: its capture (held-out photos, masks, background, hold-out
    /// split, antialiasing) for capture jobs, or its input splats made upright as the job did
    /// (the orbit's reference) for splats jobs. Flags given as well override it.
    #[arg(long, value_name = "JOB.toml")]
    pub job: Option<PathBuf>,
    /// The capture whose held-out photos to render from: a capture folder or
    /// `dataset://NAME` (ingested with --max-side), or a job's `ingest` work folder.
    #[arg(long, value_name = "CAPTURE", conflicts_with = "orbit")]
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
    /// from their median), comma-separated [default: the job's `[eval] orbit_radii`, else 1,2,4].
    #[arg(long, value_name = "X,…", value_delimiter = ',')]
    pub orbit_radii: Option<Vec<f64>>,
    /// The scene's up axis for the orbit (y, neg-y, z, …); default: the tileset's recorded frame,
    /// else y.
    #[arg(long, value_name = "AXIS", allow_hyphen_values = true)]
    pub up_axis: Option<UpAxis>,
    /// Screen-space errors (pixels) of the cuts, comma-separated, each ≥ 0 [default: the job's
    /// `[eval] taus_px`, else 0,1,4,16,32,64,120].
    #[arg(
        long,
        value_name = "PX,…",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub tau: Option<Vec<f64>>,
    /// Splat budgets of the budget cuts, comma-separated, each ≥ 1 [default: the job's `[eval]
    /// budgets`, else 500000,1000000,2500000]. Orbit views per distance and their size come from
    /// the job's `[eval]` too, as in the job's own `eval` stage.
    #[arg(long, value_name = "N,…", value_delimiter = ',')]
    pub budget: Option<Vec<usize>>,
    /// Render with the Mip-Splatting 2D filter (splats trained with `train.antialiased`).
    #[arg(long)]
    pub antialiased: bool,
    /// Where to write fidelity.json, strips/ and psnr_bytes.svg (default: `fidelity/` beside
    /// INPUT, or `./kiln-eval/<folder>` when INPUT is a published job output, whose files its
    /// manifest.json lists and which kiln eval must not change).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print fidelity.json on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// What a job file says about how its delivery is evaluated.
struct JobSettings {
    ingest: IngestParams,
    train: TrainParams,
    antialiased: bool,
    /// Capture jobs: the capture; splats jobs: the input splats (made upright below).
    input: String,
    /// The job's `[eval]`: cuts, budgets and orbit, the defaults of the flags.
    eval: EvalParams,
    kind: kiln_pipeline::dag::JobKind,
}

fn job_settings(path: &Path) -> anyhow::Result<JobSettings> {
    let spec = kiln_jobs::spec::JobSpec::from_file(path)?;
    Ok(JobSettings {
        antialiased: spec.tile.antialiased || spec.train.antialiased,
        ingest: spec.ingest,
        train: spec.train,
        input: spec.input,
        kind: spec.kind,
        eval: spec.eval,
    })
}

/// The evaluation settings: each flag given, else the job's `[eval]`, else the defaults.
fn eval_params(args: &EvalArgs, job: Option<&JobSettings>) -> EvalParams {
    let base = job.map(|j| j.eval.clone()).unwrap_or_default();
    EvalParams {
        taus_px: args.tau.clone().unwrap_or(base.taus_px),
        budgets: args.budget.clone().unwrap_or(base.budgets),
        orbit_radii: args.orbit_radii.clone().unwrap_or(base.orbit_radii),
        ..base
    }
}

/// Check the flags (named as typed) before any work.
fn check_args(args: &EvalArgs) -> anyhow::Result<()> {
    let (tau, budget, orbit_radii) = (
        args.tau.as_deref().unwrap_or_default(),
        args.budget.as_deref().unwrap_or_default(),
        args.orbit_radii.as_deref().unwrap_or_default(),
    );
    if let Some(t) = tau.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
        bail!(
            "--tau {t}: each screen-space error must be a finite number of pixels ≥ 0 (e.g. --tau 0,16,64)"
        );
    }
    if budget.contains(&0) {
        bail!("--budget 0: each splat budget must be ≥ 1 (e.g. --budget 500000,1000000)");
    }
    if let Some(r) = orbit_radii.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        bail!(
            "--orbit-radii {r}: each distance must be a multiple > 0 of the scene radius (e.g. --orbit-radii 1,2,4)"
        );
    }
    Ok(())
}

/// Resolve the inputs, evaluate, print.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let job = args.job.as_deref().map(job_settings).transpose()?;
    let params = eval_params(&args, job.as_ref());
    let (delivered, input_dir) = open_input(&args.input)?;
    let reference = resolve_reference(&args, &input_dir, job.as_ref(), &delivered)?;
    let tmp = tempfile::tempdir().context("create a temporary folder")?;
    let is_capture_job = job
        .as_ref()
        .is_some_and(|j| j.kind == kiln_pipeline::dag::JobKind::Capture);
    let capture = args.capture.clone().or_else(|| {
        job.as_ref()
            .filter(|_| is_capture_job && !args.orbit)
            .map(|j| j.input.clone())
    });
    let train = job.as_ref().map(|j| j.train.clone()).unwrap_or_default();
    let views = match capture {
        Some(capture) => {
            let ingest = match &job {
                Some(j) => IngestParams {
                    max_side: args.max_side.or(j.ingest.max_side),
                    ..j.ingest.clone()
                },
                None => IngestParams {
                    max_side: args.max_side,
                    ..IngestParams::default()
                },
            };
            if ingest.max_side.is_none() {
                eprintln!(
                    "note: ingesting {capture} at full resolution (give --max-side, or --job, to \
                     evaluate at the size the job trained at)"
                );
            }
            let eval_every = if args.job.is_some() {
                train.eval_every
            } else {
                args.eval_every
            };
            held_out_views(&capture, &ingest, &train, eval_every, tmp.path())?
        }
        None => orbit(&args, &params, &delivered, reference.as_ref().map(|r| &r.1))?,
    };
    let options = RenderOptions {
        background: train.background,
        antialiased: args.antialiased || job.as_ref().is_some_and(|j| j.antialiased),
        absgrad: false,
    };
    let out = args.out.clone().unwrap_or_else(|| default_out(&input_dir));
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
        print_table(&report, reference.as_ref().map(|r| r.0.as_str()), &out);
    }
    Ok(())
}

/// `fidelity/` beside the input, unless the input is a published output (a `manifest.json`
/// lists its files): then `./kiln-eval/<folder name>`.
fn default_out(input_dir: &Path) -> PathBuf {
    if input_dir.join("manifest.json").is_file() {
        let name = input_dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "output".into());
        PathBuf::from("kiln-eval").join(name)
    } else {
        input_dir.join("fidelity")
    }
}

/// The tileset or splat file named by INPUT, and the folder it is in.
fn open_input(input: &Path) -> anyhow::Result<(Delivered, PathBuf)> {
    // A folder is a tileset's, or an unbundled SOG's (meta.json beside its images).
    let path = match input.is_dir() {
        true if !input.join("tileset.json").exists() && input.join("meta.json").is_file() => {
            input.join("meta.json")
        }
        true => input.join("tileset.json"),
        false => input.to_path_buf(),
    };
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    if !path.exists() {
        bail!(
            "{}: no such file (give a tileset.json, a folder holding one, a splat file, or an \
             unbundled SOG's meta.json or folder)",
            path.display()
        );
    }
    if path.file_name().is_some_and(|n| n == "lod-meta.json") {
        bail!(
            "{}: a streamed SOG index, which kiln eval does not render as a whole; give one \
             level's SOG (e.g. {}) or the job's tileset.json",
            path.display(),
            dir.join("0_0").join("meta.json").display()
        );
    }
    let is_sog_meta = SplatFormat::from_path(&path).is_ok_and(|f| f == SplatFormat::Sog)
        && path.extension().is_some_and(|e| e == "json");
    if path.extension().is_some_and(|e| e == "json") && !is_sog_meta {
        let ts = LoadedTileset::open(&path)?;
        return Ok((Delivered::Tileset(ts), dir));
    }
    let (splats, _) = kiln_formats::splats::convert::read(&path)
        .with_context(|| format!("read splats from {}", path.display()))?
        .into_absolute_f32();
    let bytes = if is_sog_meta {
        sog_folder_bytes(&path)?
    } else {
        std::fs::metadata(&path)?.len()
    };
    Ok((
        Delivered::Splats {
            label: path.display().to_string(),
            splats,
            bytes,
        },
        dir,
    ))
}

/// Bytes of an unbundled SOG: its meta file and the WebP images beside it.
fn sog_folder_bytes(meta: &Path) -> anyhow::Result<u64> {
    let dir = meta.parent().unwrap_or(Path::new("."));
    let mut total = std::fs::metadata(meta)?.len();
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "webp") {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// The full splats to compare with, labelled: `--reference`; else a splats job's input made
/// upright as its ingest did (`--job`); else `splats.ply` beside the input tileset; else the
/// tileset's own leaves (the full-detail delivery), so a cut is always scored against something.
fn resolve_reference(
    args: &EvalArgs,
    input_dir: &Path,
    job: Option<&JobSettings>,
    delivered: &Delivered,
) -> anyhow::Result<Option<(String, kiln_formats::splats::GaussianSplats)>> {
    // A splats job on survey-sized coordinates records its f64 origin as the frame's
    // translation; its tileset's capture frame is relative to that origin, so a reference read
    // around its own origin is moved there in f64. Without one the reference gets absolute f32
    // means (`into_absolute_f32`: the splats as read at origin 0).
    let origin_m = match delivered {
        Delivered::Tileset(ts) => {
            kiln_formats::tiles::transform::translation_part(&ts.frame.content_from_capture)
        }
        Delivered::Splats { .. } => [0.0; 3],
    };
    let read_placed = |p: &Path| -> anyhow::Result<PlacedSplats> {
        kiln_formats::splats::convert::read(p)
            .with_context(|| format!("read the reference splats {}", p.display()))
    };
    let in_frame = |mut placed: PlacedSplats| {
        if origin_m == [0.0; 3] {
            return placed.into_absolute_f32().0;
        }
        for (j, m) in placed.splats.means.iter_mut().enumerate() {
            *m = (placed.origin_m[j % 3] - origin_m[j % 3] + f64::from(*m)) as f32;
        }
        placed.splats
    };
    let read = |p: &Path| read_placed(p).map(in_frame);
    if let Some(p) = &args.reference {
        return Ok(Some((p.display().to_string(), read(p)?)));
    }
    if let Some(j) = job.filter(|j| j.kind == kiln_pipeline::dag::JobKind::Splats) {
        let local = kiln_datasets::resolve_location(&j.input)
            .with_context(|| format!("resolve the job's input {}", j.input))?;
        let path = PathBuf::from(local.strip_prefix("file://").unwrap_or(&local));
        let mut placed = read_placed(&path)?;
        if let Some(axis) = j.ingest.up_axis()? {
            placed.rotate(up_axis_rotation(axis, UpAxis::Y))?;
        }
        return Ok(Some((
            format!("{} (the job's input, upright)", path.display()),
            in_frame(placed),
        )));
    }
    let beside = input_dir.join("splats.ply");
    if beside.is_file() && args.input.extension().is_none_or(|e| e == "json") {
        return Ok(Some((beside.display().to_string(), read(&beside)?)));
    }
    if let Delivered::Tileset(ts) = delivered {
        return Ok(Some((
            "the tileset's leaves (full detail)".to_string(),
            ts.leaves()?,
        )));
    }
    Ok(None)
}

/// The held-out photos of `capture` (every `eval_every`-th by name), ingested into `tmp` unless
/// it already is an ingested folder.
fn held_out_views(
    capture: &str,
    ingest: &IngestParams,
    train: &TrainParams,
    eval_every: usize,
    tmp: &Path,
) -> anyhow::Result<Vec<EvalView>> {
    let local = kiln_datasets::resolve_location(capture)
        .with_context(|| format!("resolve --capture {capture}"))?;
    let local = PathBuf::from(local.strip_prefix("file://").unwrap_or(&local));
    let ingest_dir = if local.join(ingest::CAPTURE_JSON).is_file() {
        local
    } else {
        ingest::ingest_capture(&local, ingest, tmp)
            .with_context(|| format!("read the capture {capture}"))?;
        tmp.to_path_buf()
    };
    let cap = ingest::load_ingested(&ingest_dir)?;
    let views = kiln_pipeline::stages::train::train_views(&ingest_dir, &cap, train);
    Ok(train::held_out_views(views, eval_every)
        .into_iter()
        .map(EvalView::photo)
        .collect())
}

/// Orbit cameras around the reference splats (else the full-detail content).
fn orbit(
    args: &EvalArgs,
    p: &EvalParams,
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
    Ok(eval::orbit_views(
        &eval::scene_sphere(scene),
        up,
        &p.orbit_radii,
        p.orbit_views,
        p.orbit_size_px,
    ))
}

fn print_table(report: &EvalReport, reference: Option<&str>, out: &Path) {
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
    match (reference, report.reference_psnr_db, report.reference_ssim) {
        (Some(r), Some(p), Some(s)) => {
            println!("full splats {r}: {p:.2} dB, SSIM {s:.3} against the photos")
        }
        (Some(r), _, _) => println!("\"vs full\" columns: against {r}"),
        _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        eval: EvalArgs,
    }

    fn args(flags: &[&str]) -> EvalArgs {
        let argv = ["kiln-eval", "out"].iter().chain(flags);
        Cli::try_parse_from(argv).expect("flags parse").eval
    }

    fn splats_job(eval: EvalParams) -> JobSettings {
        JobSettings {
            ingest: IngestParams::default(),
            train: TrainParams::default(),
            antialiased: false,
            input: "in.ply".into(),
            kind: kiln_pipeline::dag::JobKind::Splats,
            eval,
        }
    }

    #[test]
    fn the_job_s_eval_settings_are_the_defaults_and_flags_override_them() {
        let job = splats_job(EvalParams {
            taus_px: vec![0.0, 16.0],
            budgets: vec![20_000],
            orbit_radii: vec![3.0],
            orbit_views: 4,
            orbit_size_px: 256,
        });
        // No flags: everything from the job, as its own eval stage scored it.
        let p = eval_params(&args(&[]), Some(&job));
        assert_eq!(p, job.eval);
        // Flags win where given; the orbit's view count and size stay the job's.
        let p = eval_params(&args(&["--tau", "5", "--orbit-radii", "2"]), Some(&job));
        assert_eq!(p.taus_px, vec![5.0]);
        assert_eq!(p.orbit_radii, vec![2.0]);
        assert_eq!(p.budgets, vec![20_000]);
        assert_eq!((p.orbit_views, p.orbit_size_px), (4, 256));
        // No job: the built-in defaults.
        assert_eq!(eval_params(&args(&[]), None), EvalParams::default());
    }
}
