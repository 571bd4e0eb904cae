//! The `train` stage: optimise 3D Gaussian splats against posed images ([`train`]).
//!
//! Source: Kerbl, Kopanas, Leimkühler, Drettakis, "3D Gaussian Splatting for Real-Time Radiance
//! Field Rendering", SIGGRAPH 2023 (recipe and adaptive density control), following the upstream
//! INRIA implementation's numbers (see [`params`]). Files:
//! - [`params`]: [`TrainParams`] and the INRIA schedule scaled to `steps`;
//! - [`init`]: initial splats from SfM points or random frustum points, scene extent;
//! - [`op`]: the rasterizer as one custom burn autodiff op;
//! - [`loss`]: (1 − λ)·L1 + λ·(1 − SSIM) in burn tensor ops;
//! - [`adam`]: Adam moments per group, stepped by the renderer's fused kernel;
//! - [`strategy`]: how the splat set changes ([`strategy::DensityStrategy`]), by the preset's
//!   strategy: [`density`] (INRIA clone / split / prune / opacity reset) or [`mcmc`] (relocation,
//!   growth to a hard cap, position noise);
//! - [`gaussians`]: the parameter tensors and their optimizer state;
//! - [`store`]: where they live during training (burn tensors on the CPU, or resident on a GPU);
//! - [`trainer`]: the training loop, one step after another, and its live state
//!   ([`loop_state::LoopState`]);
//! - [`sampler`]: which view each step draws (also used by the splat tiler's refinement);
//! - [`checkpoint`]: the run's whole state in one file, for resuming after a crash or a signal,
//!   and the [`checkpoint::Checkpointer`] that writes and resumes it;
//! - [`rng`]: the seeded RNG with a draw count, so a checkpoint can restore its position;
//! - [`eval`]: PSNR/SSIM on held-out views, PNGs, `metrics.json` (with loss, held-out PSNR and
//!   splat-count curves), `loss.svg`.
//!
//! # Numerics
//! Splats whose parameters become non-finite are pruned before the next render. A non-finite loss
//! stops training with [`crate::Error::Numeric`]; nothing panics on NaN.
//!
//! # Determinism
//! Every random choice (init, view order, split samples) comes from one stream seeded with
//! [`TrainParams::seed`] ([`rng::TrainRng`]); a checkpoint records its position, so a resumed run
//! draws what an uninterrupted one would. The CPU rasterizer is deterministic, so the same inputs
//! and seed give the same splats and metrics, resumed or not.

pub mod adam;
pub mod checkpoint;
pub mod density;
pub mod eval;
pub mod frame;
pub mod gaussians;
pub mod init;
pub mod loop_state;
pub mod loss;
pub mod mcmc;
pub mod op;
pub mod params;
pub mod rng;
pub mod sampler;
mod stage;
pub mod store;
pub mod strategy;
pub mod trainer;
pub mod views;

use std::path::Path;
use std::time::Instant;

use kiln_formats::capture::Split;
use kiln_formats::splats::GaussianSplats;
use kiln_kernels::{Camera, RenderOptions, Renderer};

pub use frame::{FRAME_JSON, FrameInfo, frame_info, read_frame_info};
pub use init::InitPoints;
pub use params::{Init, MaskMode, Preset, TrainParams};
pub use stage::{Train, train_views};
pub use views::{CacheStats, PixelLoader, Pixels, TrainView, ViewPixels};

use checkpoint::Checkpointer;
use gaussians::Gaussians;
use store::ParamStore;
use strategy::{DensityStrategy, SceneScale};
use trainer::{Curves, LoopState, Trainer, Views};

const STAGE: &str = "train";

/// Summary of a training run (also written, with more detail, to `metrics.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrainReport {
    /// Final number of splats.
    pub splats: usize,
    /// Optimizer steps run.
    pub steps: usize,
    /// Mean PSNR (dB) over the evaluation views, on 8-bit images.
    pub psnr_db: f64,
    /// Mean SSIM over the evaluation views, on 8-bit images.
    pub ssim: f64,
    /// Views trained on.
    pub train_views: usize,
    /// Views evaluated (held out unless there were fewer than 2 views or `eval_every` = 0, in
    /// which case all views are trained on and evaluated; see `metrics.json`
    /// `eval_on_train_views`).
    pub test_views: usize,
    /// Wall-clock seconds of the whole stage (init, training, eval, writing outputs).
    pub wall_s: f64,
    /// Training steps per second (training loop only).
    pub steps_per_s: f64,
    /// Photometric loss of the last step (without the `mcmc` regularisers; see
    /// [`eval::Metrics::final_loss`]).
    pub final_loss: f64,
    /// The rasterizer's device: `cpu`, `cuda:N` (or `emulator`).
    #[serde(default)]
    pub device: String,
    /// The device's name, e.g. `NVIDIA H200` (`cpu` on the CPU).
    #[serde(default)]
    pub device_name: String,
    /// Peak device memory allocated by the rasterizer, bytes (`None` on the CPU).
    #[serde(default)]
    pub peak_device_bytes: Option<usize>,
    /// Mean milliseconds per training step, by stage.
    #[serde(default)]
    pub step_ms: StepTimings,
    /// Where the initial splats came from (SfM points, random points, a restart).
    #[serde(default)]
    pub init: InitSummary,
}

/// Mean wall milliseconds per training step of each part of the step (`kiln bench train`).
/// `total` covers the optimisation step only; [`TrainReport::steps_per_s`] divides the steps by the
/// whole training loop's time, which also includes the held-out PSNR evaluations along the way.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepTimings {
    /// Projection (EWA, SH).
    pub project: f64,
    /// Binning, sort, tile ranges.
    pub sort: f64,
    /// Forward rasterization.
    pub rasterize_forward: f64,
    /// Photometric loss forward (L1 + SSIM, burn on the CPU).
    pub loss: f64,
    /// Backward rasterization.
    pub rasterize_backward: f64,
    /// Projection backward.
    pub project_backward: f64,
    /// The rest of `loss.backward()` (loss and SSIM gradients, tensor glue).
    pub backward_other: f64,
    /// Adam step and adaptive density control.
    pub optimizer: f64,
    /// Whole step, including parameter upload/download and bookkeeping.
    pub total: f64,
}

impl StepTimings {
    fn add(&mut self, o: &StepTimings) {
        self.project += o.project;
        self.sort += o.sort;
        self.rasterize_forward += o.rasterize_forward;
        self.loss += o.loss;
        self.rasterize_backward += o.rasterize_backward;
        self.project_backward += o.project_backward;
        self.backward_other += o.backward_other;
        self.optimizer += o.optimizer;
        self.total += o.total;
    }

    fn scaled(self, k: f64) -> Self {
        Self {
            project: self.project * k,
            sort: self.sort * k,
            rasterize_forward: self.rasterize_forward * k,
            loss: self.loss * k,
            rasterize_backward: self.rasterize_backward * k,
            project_backward: self.project_backward * k,
            backward_other: self.backward_other * k,
            optimizer: self.optimizer * k,
            total: self.total * k,
        }
    }
}

/// Split views (sorted by name) into (train, test, evaluated on training views).
///
/// A capture that declares splits ([`TrainView::split`]) is split as declared: train on its
/// `Train` views (its undeclared views when none is `Train`), hold out its `Test` views, else its
/// `Val` views; with neither, every `eval_every`-th training view is held out as below. Otherwise
/// index % `eval_every` == 0 is held out; with fewer than 2 views, or `eval_every` = 0, every view
/// is in both sets.
fn split_views(
    mut views: Vec<TrainView>,
    eval_every: usize,
) -> (Vec<TrainView>, Vec<TrainView>, bool) {
    views.sort_by(|a, b| a.name.cmp(&b.name));
    if views.iter().any(|v| v.split.is_some()) {
        views = match declared_split(views) {
            Ok(split) => return split,
            Err(train) => train,
        };
    }
    if views.len() < 2 || eval_every == 0 {
        return (views.clone(), views, true);
    }
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for (i, v) in views.into_iter().enumerate() {
        if i % eval_every == 0 {
            test.push(v)
        } else {
            train.push(v)
        }
    }
    (train, test, false)
}

/// The capture's declared split of `views` (sorted): `Ok((train, held out, false))`, or
/// `Err(train views)` when it declares no held-out views (the caller holds out every n-th).
fn declared_split(
    views: Vec<TrainView>,
) -> Result<(Vec<TrainView>, Vec<TrainView>, bool), Vec<TrainView>> {
    let has = |s: Split| views.iter().any(|v| v.split == Some(s));
    let train_split = has(Split::Train).then_some(Split::Train);
    let held_out = [Split::Test, Split::Val].into_iter().find(|&s| has(s));
    let total = views.len();
    let (train, rest): (Vec<TrainView>, Vec<TrainView>) =
        views.into_iter().partition(|v| v.split == train_split);
    let test: Vec<TrainView> = rest
        .into_iter()
        .filter(|v| held_out.is_some() && v.split == held_out)
        .collect();
    let unused = total - train.len() - test.len();
    tracing::info!(
        train = train.len(),
        held_out = test.len(),
        held_out_split = held_out.map_or("every eval_every-th train view", Split::name),
        unused,
        "train: using the capture's declared train/val/test split"
    );
    if held_out.is_none() || train.is_empty() {
        return Err(train);
    }
    Ok((train, test, false))
}

/// The held-out views of `views` as [`train`] splits them: the capture's declared test (else
/// val) views; else, sorted by name, every view whose index is a multiple of `eval_every`; all
/// views when there are fewer than 2 or `eval_every` = 0.
#[must_use]
pub fn held_out_views(views: Vec<TrainView>, eval_every: usize) -> Vec<TrainView> {
    split_views(views, eval_every).1
}

/// The training views of `views` as [`train`] splits them (the complement of
/// [`held_out_views`]).
#[must_use]
pub fn training_views(views: Vec<TrainView>, eval_every: usize) -> Vec<TrainView> {
    split_views(views, eval_every).0
}

fn check_views(views: &[TrainView]) -> crate::Result<()> {
    if views.is_empty() {
        return Err(crate::Error::Param {
            stage: STAGE,
            field: "views".into(),
            expected: "at least one posed image".into(),
            found: "none".into(),
        });
    }
    Ok(())
}

/// At most `cap` of `points`, a uniform random subset in their original order when there are
/// more (so the initial splats already respect the hard cap `max_splats`).
fn cap_points(points: &InitPoints, cap: usize, rng: &mut impl rand::Rng) -> InitPoints {
    let n = points.positions.len().min(points.colors.len());
    if n <= cap {
        return points.clone();
    }
    let mut keep = rand::seq::index::sample(rng, n, cap).into_vec();
    keep.sort_unstable();
    tracing::warn!(
        points = n,
        max_splats = cap,
        "train: more initial points than max_splats; keeping a random subset"
    );
    InitPoints {
        positions: keep.iter().map(|&i| points.positions[i]).collect(),
        colors: keep.iter().map(|&i| points.colors[i]).collect(),
    }
}

/// Trains 3D Gaussian splats on posed images on the CPU and evaluates them on held-out views.
///
/// Guarantees: deterministic, bit for bit: the same views, points and `params` (seed included)
/// give the same splats, report and files on any machine and thread count. When every splat
/// vanishes (all pruned), the run restarts once from a denser start (`init_random_points` more
/// random points; `metrics.json` `init.restarted`). Nothing is resumed or checkpointed (see
/// [`train_checkpointed`]).
///
/// - `views`: posed images, any order (sorted by name here), at least one; each an OpenCV pinhole
///   camera with `world_to_camera` and pixels `[H, W, 3]` linear RGB in [0, 1] (optional
///   `[H, W]` transparency and loss weights, [`ViewPixels`]). Held out for evaluation: the
///   capture's declared test (else val) views; else every `params.eval_every`-th view by name
///   (index % `eval_every` == 0); with fewer than 2 views, or `eval_every` = 0, every view is
///   trained on and evaluated (logged, and `eval_on_train_views` in `metrics.json`).
/// - `init`: SfM points (world metres, RGB in [0, 1]), or `None`. With `params.init` =
///   [`Init::Auto`] they are used (points on a camera centre dropped, at most `max_splats`) and
///   topped up with `init_random_points` random points in the training cameras' frustums when
///   there are fewer than `init_min_points`; without points, or with [`Init::Random`],
///   `init_random_points` random points.
/// - `params`: the recipe ([`TrainParams`]: INRIA or MCMC scaled to `steps`), checked first.
/// - `out_dir`: the stage directory, created if missing; receives `splats.ply` (INRIA PLY),
///   `frame.json`, `metrics.json`, `loss.svg` and `eval/<name>.png` (ground truth left, render
///   right).
/// - `progress`: called after every step with `(step, total, loss)`, step in 1..=total (from 1
///   again after a restart).
///
/// Returns the trained splats (quaternions normalised, splats with opacity below
/// [`density::MIN_OPACITY`] dropped, K = (`params.sh_degree` + 1)²) and the [`TrainReport`].
///
/// # Errors
/// - [`crate::Error::Param`]: a parameter out of range, or no views;
/// - [`crate::Error::Input`]: an image whose length is not H·W·3 or holds non-finite values;
/// - [`crate::Error::Kernel`]: the rasterizer rejected a camera or inputs;
/// - [`crate::Error::Numeric`]: the loss became non-finite, or every splat vanished again after
///   the restart;
/// - [`crate::Error::Io`] / [`crate::Error::Format`]: an output file could not be written.
pub fn train(
    views: Vec<TrainView>,
    init: Option<InitPoints>,
    params: &TrainParams,
    out_dir: &Path,
    progress: &dyn Fn(usize, usize, f64),
) -> crate::Result<(GaussianSplats, TrainReport)> {
    train_checkpointed(&Renderer::Cpu, views, init, params, out_dir, progress, None)
}

/// Trains 3D Gaussian splats on posed images with the rasterizer on `renderer` and evaluates
/// them on held-out views.
///
/// Guarantees: on [`Renderer::Cpu`], the results of [`train`] (bit for bit). On a GPU renderer
/// (or the host emulator) the parameters, their moments and the targets stay resident on the
/// device and the results match the CPU's to float rounding (`kiln selftest`), not bit for bit;
/// the report names the device and its peak memory. The one restart after every splat vanished
/// is as in [`train`]; nothing is resumed or checkpointed.
///
/// - `renderer`: the rasterizer's device: the CPU twin, a CUDA GPU, or the emulator.
/// - `views`: posed images, at least one (OpenCV pinhole cameras with `world_to_camera`, pixels
///   `[H, W, 3]` linear RGB in [0, 1]), held out as for [`train`] (declared split, else every
///   `params.eval_every`-th by name).
/// - `init`: SfM points (world metres, RGB in [0, 1]) or `None`, used as [`TrainParams::init`]
///   says.
/// - `params`: the recipe ([`TrainParams`]), checked first.
/// - `out_dir`: the stage directory (created if missing): `splats.ply`, `frame.json`,
///   `metrics.json`, `loss.svg`, `eval/<name>.png`.
/// - `progress`: called after every step with `(step, total, loss)`, step in 1..=total.
///
/// Returns the trained splats (quaternions normalised, K = (`params.sh_degree` + 1)²) and the
/// [`TrainReport`].
///
/// # Errors
/// [`crate::Error::Param`] (a parameter out of range, no views), [`crate::Error::Input`] (a bad
/// image), [`crate::Error::Kernel`] (the rasterizer rejected its inputs, or the device failed or
/// ran out of memory), [`crate::Error::Numeric`] (non-finite loss, or every splat vanished again
/// after the restart), [`crate::Error::Io`] / [`crate::Error::Format`] (an output file).
pub fn train_on(
    renderer: &Renderer,
    views: Vec<TrainView>,
    init: Option<InitPoints>,
    params: &TrainParams,
    out_dir: &Path,
    progress: &dyn Fn(usize, usize, f64),
) -> crate::Result<(GaussianSplats, TrainReport)> {
    train_checkpointed(renderer, views, init, params, out_dir, progress, None)
}

/// Trains 3D Gaussian splats on posed images with the rasterizer on `renderer`, evaluates them
/// on held-out views, and, with a `checkpointer`, survives interruptions: the stage's entry
/// point.
///
/// Guarantees, with a `checkpointer`:
/// - a checkpoint with the same key that fits the run (same views, SH size, strategy; not past
///   the last step) is resumed from, and the result equals the uninterrupted run's (bit for bit
///   on the CPU); a checkpoint of another key or that does not fit is ignored and overwritten;
/// - one is written every [`Checkpointer::every`] steps, and when [`Checkpointer::stop`] says so
///   (SIGINT/SIGTERM in the CLI, through [`crate::interrupt`]) one is written and the run stops
///   with [`crate::Error::Interrupted`]; a stop during the last step lets the run finish;
/// - when every splat vanished and the run restarts from a denser start, the checkpoint is
///   deleted first. The caller removes it once the stage's output is committed.
///
/// Without one, this is [`train_on`]. Determinism, device and the restart: as [`train_on`]
/// states them.
///
/// - `renderer`: the rasterizer's device (CPU twin, CUDA GPU or emulator).
/// - `views`: posed images, at least one (OpenCV pinhole cameras with `world_to_camera`, pixels
///   `[H, W, 3]` linear RGB in [0, 1]), held out as for [`train`].
/// - `init`: SfM points (world metres, RGB in [0, 1]) or `None`, used as [`TrainParams::init`]
///   says.
/// - `params`: the recipe ([`TrainParams`]), checked first; part of the checkpoint's key.
/// - `out_dir`: the stage directory (created if missing; rebuilt per attempt by the caller):
///   `splats.ply`, `frame.json`, `metrics.json`, `loss.svg`, `eval/<name>.png`.
/// - `progress`: called after every step with `(step, total, loss)`; a resumed run starts at the
///   step after its checkpoint.
/// - `checkpointer`: where checkpoints go and when ([`Checkpointer`]), or `None`.
///
/// Returns the trained splats (quaternions normalised, K = (`params.sh_degree` + 1)²) and the
/// [`TrainReport`].
///
/// # Errors
/// As listed for [`train_on`], plus [`crate::Error::Interrupted`] when stopped (the checkpoint
/// was written); a checkpoint that cannot be written is an [`crate::Error::Io`] (an unreadable one
/// is discarded with a warning and the run starts afresh).
pub fn train_checkpointed(
    renderer: &Renderer,
    views: Vec<TrainView>,
    init: Option<InitPoints>,
    params: &TrainParams,
    out_dir: &Path,
    progress: &dyn Fn(usize, usize, f64),
    checkpointer: Option<&Checkpointer>,
) -> crate::Result<(GaussianSplats, TrainReport)> {
    let run = Run {
        renderer,
        params,
        out_dir,
        progress,
        checkpointer,
    };
    match train_attempt(run, views.clone(), init.clone(), Start::Initial) {
        Err(e) if splats_vanished(&e) => {
            tracing::warn!(
                error = %e,
                "train: every splat vanished; restarting once from a denser start \
                 (init_random_points more random points)"
            );
            if let Some(c) = checkpointer {
                // It holds the failed attempt's state: the restart must not resume it.
                c.discard();
            }
            train_attempt(run, views, init, Start::Denser).map_err(|e| match e {
                crate::Error::Numeric {
                    stage,
                    step,
                    problem,
                } => crate::Error::Numeric {
                    stage,
                    step,
                    problem: format!(
                        "{problem}, again after one restart from a denser start; the photos \
                         probably do not constrain the scene (check the poses, or give more \
                         SfM points)"
                    ),
                },
                other => other,
            })
        }
        other => other,
    }
}

/// The prefix of the [`crate::Error::Numeric`] problem when no splat is left: the one failure a
/// denser start can cure.
const VANISHED: &str = "every splat vanished";

/// Whether `e` says that every splat vanished during training.
fn splats_vanished(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Numeric { problem, .. } if problem.starts_with(VANISHED))
}

/// Which start a training attempt begins from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The capture's SfM points, topped up with random points as `params` says.
    Initial,
    /// The one restart after every splat vanished: `init_random_points` more random points.
    Denser,
}

/// What every attempt of one run shares: the device, the recipe, where outputs go, who hears
/// about progress, and the checkpoints.
#[derive(Clone, Copy)]
struct Run<'a> {
    renderer: &'a Renderer,
    params: &'a TrainParams,
    out_dir: &'a Path,
    progress: &'a dyn Fn(usize, usize, f64),
    checkpointer: Option<&'a Checkpointer>,
}

/// One training attempt of `run` from `start`: prepare the views, initialise the splats, resume
/// from a checkpoint when one fits, train, clean up, evaluate and write the outputs.
fn train_attempt(
    run: Run<'_>,
    views: Vec<TrainView>,
    init: Option<InitPoints>,
    start: Start,
) -> crate::Result<(GaussianSplats, TrainReport)> {
    let started = Instant::now();
    let params = run.params;
    params.validate()?;
    let mut scene = Scene::load(views, params)?;
    let mut rng = rng::TrainRng::new(params.seed);
    let (host_init, init_summary) =
        initial_splats(init, params, &scene.init_cameras(), start, &mut rng)?;
    scene.log_start(host_init.len(), params.steps);
    let k = host_init.sh_coeffs_per_channel();
    let mut store = ParamStore::new(run.renderer, Gaussians::from_host(&host_init))?;
    drop(host_init);
    let mut strategy = strategy::for_params(params, scene.scale, store.len());
    let mut state = LoopState::new(rng, scene.train_views.len());
    // While a checkpointed run is going, SIGINT/SIGTERM ask it to stop instead of killing it.
    let armed = run.checkpointer.map(Checkpointer::arm);
    if let Some(c) = resume_point(run, &scene, k)? {
        store = ParamStore::from_state(run.renderer, c.params)?;
        strategy.restore(c.density);
        state = c.state;
    }
    trainer(run, &mut scene).run(&mut store, strategy.as_mut(), &mut state)?;
    let splats = final_splats(&mut store, strategy.as_mut(), &mut state.rng, params)?;
    let per_view = evaluate_held_out(
        run.renderer,
        &splats,
        params,
        &scene.test_views,
        &render_options(params),
        run.out_dir,
    )?;
    let n_eval = per_view.len().max(1) as f64;
    let psnr_db = per_view.iter().map(|m| m.psnr_db).sum::<f64>() / n_eval;
    let ssim = per_view.iter().map(|m| m.ssim).sum::<f64>() / n_eval;
    state.curves.psnr.push((params.steps, psnr_db));
    write_run_files(run.out_dir, &splats, &scene.all_cameras, &state.curves.loss)?;
    let steps_per_s = params.steps as f64 / state.train_s.max(1e-9);
    let report = TrainReport {
        splats: splats.len(),
        steps: params.steps,
        psnr_db,
        ssim,
        train_views: scene.train_views.len(),
        test_views: scene.test_views.len(),
        wall_s: started.elapsed().as_secs_f64(),
        steps_per_s,
        final_loss: state.curves.last_loss.unwrap_or(f64::NAN),
        device: run.renderer.device_label(),
        device_name: run.renderer.device_name(),
        peak_device_bytes: run.renderer.peak_device_bytes(),
        step_ms: state.timing_sum.scaled(1.0 / params.steps.max(1) as f64),
        init: init_summary,
    };
    write_metrics(run.out_dir, &report, per_view, &scene, state.curves)?;
    tracing::info!(
        splats = report.splats,
        psnr_db,
        ssim,
        steps_per_s,
        wall_s = report.wall_s,
        "train: done"
    );
    // Held to here: a signal during the final evaluation lets the stage finish and be kept.
    drop(armed);
    Ok((splats, report))
}

/// The views one attempt trains and evaluates on, the cache their pixels go through, and the
/// scene's scale.
struct Scene {
    /// Training views, sorted by name.
    train_views: Vec<TrainView>,
    /// Held-out views (the training views when nothing is held out).
    test_views: Vec<TrainView>,
    /// True when the held-out views are the training views.
    eval_on_train: bool,
    /// The bounded cache of the training views' pixels.
    cache: views::ViewCache,
    /// The training cameras' extent and image size.
    scale: SceneScale,
    /// The training views' cameras.
    train_cameras: Vec<Camera>,
    /// Every view's camera, training views first.
    all_cameras: Vec<Camera>,
}

impl Scene {
    /// Splits `views` ([`split_views`]) and decodes and checks every view once before training,
    /// so a bad photo fails the run now rather than at the step that first draws it (the cache
    /// keeps the last ones it can hold).
    ///
    /// # Errors
    /// [`crate::Error::Param`] without views; view loading errors.
    fn load(views: Vec<TrainView>, params: &TrainParams) -> crate::Result<Self> {
        check_views(&views)?;
        let (train_views, test_views, eval_on_train) = split_views(views, params.eval_every);
        if eval_on_train {
            tracing::warn!(
                views = train_views.len(),
                "train: fewer than 2 views or eval_every = 0; training and evaluating on all views"
            );
        }
        let mut cache = views::ViewCache::new(params.image_cache_mb.saturating_mul(1 << 20));
        cache.warm(&train_views)?;
        if !eval_on_train {
            for v in &test_views {
                v.load()?;
            }
        }
        // INRIA `getNerfppNorm` uses the training cameras only.
        let train_cameras: Vec<Camera> = train_views.iter().map(|v| v.camera).collect();
        let scale = SceneScale {
            extent: init::scene_extent(&train_cameras),
            image_max_side: train_cameras
                .iter()
                .map(|c| c.width.max(c.height))
                .max()
                .unwrap_or(1),
        };
        let all_cameras = train_views
            .iter()
            .chain(test_views.iter())
            .map(|v| v.camera)
            .collect();
        Ok(Self {
            train_views,
            test_views,
            eval_on_train,
            cache,
            scale,
            train_cameras,
            all_cameras,
        })
    }

    /// The cameras initialisation works from.
    fn init_cameras(&self) -> InitCameras<'_> {
        InitCameras {
            train: &self.train_cameras,
            all: &self.all_cameras,
            extent: self.scale.extent,
        }
    }

    /// Logs the start of training from `splats` initial splats for `steps` steps.
    fn log_start(&self, splats: usize, steps: usize) {
        tracing::info!(
            splats,
            train_views = self.train_views.len(),
            test_views = self.test_views.len(),
            scene_extent = self.scale.extent,
            steps,
            "train: start"
        );
    }
}

/// The training loop of `run` over `scene`'s views, at the run's render options.
fn trainer<'a>(run: Run<'a>, scene: &'a mut Scene) -> Trainer<'a> {
    Trainer {
        renderer: run.renderer,
        params: run.params,
        views: Views {
            train: &scene.train_views,
            test: &scene.test_views,
            cache: &mut scene.cache,
        },
        extent: scene.scale.extent,
        options: render_options(run.params),
        progress: run.progress,
        checkpointer: run.checkpointer,
        step_target: Vec::new(),
    }
}

/// The run's render options: `params`' background, opacity rule and densification statistic.
fn render_options(params: &TrainParams) -> RenderOptions {
    RenderOptions {
        background: params.background,
        antialiased: params.antialiased,
        absgrad: params.absgrad,
    }
}

/// The checkpoint `run` continues from, if it has one of its key that fits this attempt: not
/// past the last step, the same SH size `k`, the same number of training views, seed and
/// density strategy.
///
/// # Errors
/// As [`Checkpointer::resume`].
fn resume_point(
    run: Run<'_>,
    scene: &Scene,
    k: usize,
) -> crate::Result<Option<checkpoint::Checkpoint>> {
    let Some(checkpointer) = run.checkpointer else {
        return Ok(None);
    };
    let params = run.params;
    checkpointer.resume(|c| {
        c.state.step < params.steps
            && c.params.k == k
            && c.state.sampler.views() == scene.train_views.len()
            && c.state.rng.seed() == params.seed
            && c.density.preset() == params.preset
    })
}

/// The trained splats as the run returns them: non-finite splats dropped (the strategy told),
/// then [`finalize`]d, at `params.sh_degree`.
///
/// # Errors
/// [`crate::Error::Numeric`] when none is left; device failures.
fn final_splats(
    store: &mut ParamStore,
    strategy: &mut dyn DensityStrategy,
    rng: &mut rng::TrainRng,
    params: &TrainParams,
) -> crate::Result<GaussianSplats> {
    let host = store.with_host(|g, adam| {
        strategy::prune_non_finite(g, adam, strategy, rng).unwrap_or_else(|| g.to_host())
    })?;
    let mut splats = finalize(host);
    if splats.is_empty() {
        return Err(crate::Error::Numeric {
            stage: STAGE,
            step: params.steps,
            problem: format!("{VANISHED}: none was left after training"),
        });
    }
    splats.sh_degree = params.sh_degree;
    Ok(splats)
}

/// `metrics.json` into `out_dir`: the `report`'s figures with the per-view metrics, the image
/// cache's statistics and the `curves`.
///
/// # Errors
/// [`crate::Error::Io`] when the file cannot be written.
fn write_metrics(
    out_dir: &Path,
    report: &TrainReport,
    per_view: Vec<eval::ViewMetrics>,
    scene: &Scene,
    curves: Curves,
) -> crate::Result<()> {
    let metrics = eval::Metrics {
        device: report.device.clone(),
        device_name: report.device_name.clone(),
        peak_device_bytes: report.peak_device_bytes,
        step_ms: report.step_ms,
        psnr_db: report.psnr_db,
        ssim: report.ssim,
        downscale: kiln_formats::capture::DOWNSCALE_FILTER,
        views: per_view,
        splats: report.splats,
        steps: report.steps,
        wall_s: report.wall_s,
        steps_per_s: report.steps_per_s,
        peak_rss_bytes: crate::meter::peak_rss_bytes(),
        image_cache: scene.cache.stats(),
        train_views: report.train_views,
        test_views: report.test_views,
        eval_on_train_views: scene.eval_on_train,
        final_loss: report.final_loss,
        loss_curve: curves.loss,
        psnr_curve: curves.psnr,
        splat_count_curve: curves.splat_count,
        init: report.init,
    };
    let json = serde_json::to_vec_pretty(&metrics)
        .map_err(|e| crate::Error::io(out_dir.join("metrics.json"), std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic(&out_dir.join("metrics.json"), &json)?;
    Ok(())
}

/// The splats training starts from: the SfM points (minus those on a camera centre, capped at
/// `max_splats`) when there are some and `params.init` allows them, joined by
/// `init_random_points` random points in the training cameras' frustums when there are fewer
/// than `init_min_points`; else `init_random_points` random points; a [`Start::Denser`] start
/// (the one restart after every splat vanished) adds `init_random_points` more.
/// Opacity and scale as `params` sets them.
///
/// # Errors
/// [`crate::Error::Param`] when no initial splat is left.
fn initial_splats(
    init: Option<InitPoints>,
    params: &TrainParams,
    cameras: &InitCameras<'_>,
    start: Start,
    rng: &mut rng::TrainRng,
) -> crate::Result<(GaussianSplats, InitSummary)> {
    let sfm = usable_sfm_points(init, params, cameras, rng);
    let random = random_point_count(sfm.positions.len(), params, start);
    warn_about_random_points(sfm.positions.len(), random, params, start);
    let extra = init::random_points_in_frustums(cameras.train, random, cameras.extent, rng);
    let summary = InitSummary {
        sfm_points: sfm.positions.len(),
        random_points: extra.positions.len(),
        restarted: start == Start::Denser,
    };
    let points = InitPoints {
        positions: sfm.positions.into_iter().chain(extra.positions).collect(),
        colors: sfm.colors.into_iter().chain(extra.colors).collect(),
    };
    let mut host_init = init::splats_from_points(&points, params.sh_degree);
    if params.init_opacity != init::INIT_OPACITY || params.init_scale != 1.0 {
        mcmc::set_initial_opacity_and_scale(&mut host_init, params.init_opacity, params.init_scale);
    }
    if host_init.is_empty() {
        return Err(crate::Error::Param {
            stage: STAGE,
            field: "init_random_points".into(),
            expected: "≥ 1 (or non-empty SfM points)".into(),
            found: "0 initial splats".into(),
        });
    }
    Ok((host_init, summary))
}

/// The cameras initialisation works from: the training ones (random points), all of them (SfM
/// points on a camera centre are dropped) and the scene extent.
struct InitCameras<'a> {
    train: &'a [Camera],
    all: &'a [Camera],
    extent: f32,
}

/// The SfM points training may start from: none unless `params.init` is `auto`; those on a camera
/// centre or not finite dropped (with a warning); at most `max_splats`.
fn usable_sfm_points(
    init: Option<InitPoints>,
    params: &TrainParams,
    cameras: &InitCameras<'_>,
    rng: &mut rng::TrainRng,
) -> InitPoints {
    let Some(points) = init.filter(|_| params.init == Init::Auto) else {
        return InitPoints::default();
    };
    let min_dist = init::NEAR_CAMERA_FRACTION * cameras.extent;
    let (kept, dropped) = init::drop_points_near_cameras(&points, cameras.all, min_dist);
    if dropped > 0 {
        tracing::warn!(
            dropped,
            min_dist,
            "train: dropped SfM points that are not finite or lie on a camera centre"
        );
    }
    cap_points(&kept, params.max_splats, rng)
}

/// How many random points join `sfm` SfM points: `init_random_points` when there are fewer SfM
/// points than `init_min_points` (none at all included: a sparse set never starts from fewer
/// splats than no set), else none; plus `init_random_points` for a [`Start::Denser`] restart;
/// never past `max_splats` in all.
fn random_point_count(sfm: usize, params: &TrainParams, start: Start) -> usize {
    let base = if sfm == 0 || sfm < params.init_min_points {
        params.init_random_points
    } else {
        0
    };
    let wanted = match start {
        Start::Initial => base,
        Start::Denser => base + params.init_random_points,
    };
    wanted.min(params.max_splats.saturating_sub(sfm))
}

/// Say when random points stand in for missing or too few SfM points: both usually cost quality.
fn warn_about_random_points(sfm: usize, random: usize, params: &TrainParams, start: Start) {
    if random == 0 || params.init == Init::Random {
        return;
    }
    if start == Start::Denser {
        tracing::warn!(
            sfm_points = sfm,
            random_points = random,
            "train: restarting from a denser start: {sfm} SfM points and {random} random points \
             inside the camera frustums"
        );
    } else if sfm == 0 {
        // Advice, not a fault: instant-ngp and Blender captures never carry points, so as a
        // warning it would fail every such job under `strict = true`.
        tracing::info!(
            random_points = random,
            "train: the capture has no SfM points (no points3D, no ply_file_path, or all \
             dropped); starting from {random} random points inside the camera frustums. Give the \
             capture's point cloud (COLMAP points3D), or re-pose it with `[reconstruct] mode = \
             \"always\"`, for a better start"
        );
    } else {
        tracing::warn!(
            sfm_points = sfm,
            random_points = random,
            init_min_points = params.init_min_points,
            "train: the capture has only {sfm} SfM points (fewer than [train] init_min_points = \
             {}); adding {random} random points inside the camera frustums, as a capture \
             without points would start from. A sparse reconstruction usually means too little \
             texture or overlap in the photos",
            params.init_min_points
        );
    }
}

/// Where the initial splats came from (`metrics.json` `init`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct InitSummary {
    /// SfM points used (after dropping those on camera centres and capping at `max_splats`).
    pub sfm_points: usize,
    /// Random points inside the training cameras' frustums: `init_random_points` without SfM
    /// points or with fewer than `init_min_points`, plus `init_random_points` after a restart.
    pub random_points: usize,
    /// True when every splat vanished once and the run restarted from a denser start.
    pub restarted: bool,
}

/// Render and score every held-out view (`eval/<name>.png` under `out_dir`).
///
/// # Errors
/// View loading, rasterizer and file errors.
fn evaluate_held_out(
    renderer: &Renderer,
    splats: &GaussianSplats,
    params: &TrainParams,
    test_views: &[TrainView],
    options: &RenderOptions,
    out_dir: &Path,
) -> crate::Result<Vec<eval::ViewMetrics>> {
    let eval_dir = out_dir.join("eval");
    let render = eval::EvalRender {
        renderer,
        splats,
        sh_degree: params.sh_degree,
        options,
    };
    let mut per_view = Vec::with_capacity(test_views.len());
    for v in test_views {
        let pixels = v.load()?;
        per_view.push(eval::evaluate_view(&render, v, &pixels, &eval_dir)?);
    }
    Ok(per_view)
}

/// `splats.ply`, `frame.json` (up axis from `cameras`) and `loss.svg` into `out_dir`.
///
/// # Errors
/// [`crate::Error::Io`] / [`crate::Error::Format`] when a file cannot be written.
fn write_run_files(
    out_dir: &Path,
    splats: &GaussianSplats,
    all_cameras: &[Camera],
    loss_curve: &[(usize, f64)],
) -> crate::Result<()> {
    kiln_formats::splats::ply::write(&out_dir.join("splats.ply"), splats)?;
    let frame = frame::frame_info(all_cameras);
    let frame_json = serde_json::to_vec_pretty(&frame)
        .map_err(|e| crate::Error::io(out_dir.join(frame::FRAME_JSON), std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic(&out_dir.join(frame::FRAME_JSON), &frame_json)?;
    kiln_formats::atomic_write::write_atomic(
        &out_dir.join("loss.svg"),
        eval::loss_svg(loss_curve).as_bytes(),
    )?;
    Ok(())
}

/// Normalise quaternions (identity for degenerate ones) and drop splats with opacity below
/// [`density::MIN_OPACITY`], which contribute nothing visible.
fn finalize(host: GaussianSplats) -> GaussianSplats {
    let k3 = host.sh_coeffs_per_channel() * 3;
    let mut out = GaussianSplats {
        sh_degree: host.sh_degree,
        ..Default::default()
    };
    for i in 0..host.len() {
        let opacity = 1.0 / (1.0 + (-host.logit_opacities[i]).exp());
        if opacity < density::MIN_OPACITY {
            continue;
        }
        let q = &host.rotations[4 * i..4 * i + 4];
        let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 1e-12 && norm.is_finite() {
            out.rotations.extend(q.iter().map(|v| v / norm));
        } else {
            out.rotations.extend_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        }
        out.means.extend_from_slice(&host.means[3 * i..3 * i + 3]);
        out.log_scales
            .extend_from_slice(&host.log_scales[3 * i..3 * i + 3]);
        out.logit_opacities.push(host.logit_opacities[i]);
        out.sh_coeffs
            .extend_from_slice(&host.sh_coeffs[k3 * i..k3 * (i + 1)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn view(name: &str) -> TrainView {
        TrainView {
            name: name.into(),
            camera: Camera {
                width: 2,
                height: 2,
                fx: 2.0,
                fy: 2.0,
                cx: 1.0,
                cy: 1.0,
                world_to_camera: [
                    [1.0, 0.0, 0.0, 0.0],
                    [0.0, 1.0, 0.0, 0.0],
                    [0.0, 0.0, 1.0, 0.0],
                    [0.0, 0.0, 0.0, 1.0],
                ],
            },
            pixels: Pixels::Resident(std::sync::Arc::new(ViewPixels::opaque(vec![0.5; 12]))),
            split: None,
        }
    }

    /// A view's 8-bit ground-truth colour at (x, y), as the eval PNG stores it.
    fn views_pixel(v: &TrainView, x: usize, y: usize) -> [u8; 3] {
        let px = v.load().unwrap();
        let i = 3 * (y * v.camera.width as usize + x);
        let q = eval::quantise_u8(&px.image[i..i + 3]);
        [q[0], q[1], q[2]]
    }

    /// The pixels of a test view (all resident), to edit.
    fn pixels_mut(v: &mut TrainView) -> &mut ViewPixels {
        match &mut v.pixels {
            Pixels::Resident(p) => std::sync::Arc::make_mut(p),
            Pixels::Load(_) => unreachable!("test views hold their pixels"),
        }
    }

    /// Three 40×24 views of a striped target, for short training runs.
    fn small_views() -> Vec<TrainView> {
        (0..3)
            .map(|k| {
                let mut v = view(&format!("v{k}"));
                v.camera = Camera {
                    width: 40,
                    height: 24,
                    fx: 30.0,
                    fy: 30.0,
                    cx: 20.0,
                    cy: 12.0,
                    world_to_camera: [
                        [1.0, 0.0, 0.0, 0.1 * k as f32],
                        [0.0, 1.0, 0.0, 0.0],
                        [0.0, 0.0, 1.0, 2.0],
                        [0.0, 0.0, 0.0, 1.0],
                    ],
                };
                pixels_mut(&mut v).image = (0..40 * 24 * 3)
                    .map(|i| ((i / 3 + 7 * k) % 11) as f32 / 11.0)
                    .collect();
                v
            })
            .collect()
    }

    /// A sparse SfM set (17 points, the count; fewer than `init_min_points`) is joined by
    /// `init_random_points` random points, as many as a capture without points starts from; a
    /// dense one is used alone; `init_min_points = 0` keeps the 17 alone; a denser restart adds
    /// `init_random_points` more; `max_splats` bounds the total.
    #[test]
    fn sparse_sfm_points_are_topped_up_with_random_points_and_reported() {
        let views = small_views();
        let cams: Vec<Camera> = views.iter().map(|v| v.camera).collect();
        let cameras = InitCameras {
            train: &cams,
            all: &cams,
            extent: init::scene_extent(&cams),
        };
        let points = |n: usize| InitPoints {
            positions: (0..n).map(|i| [0.01 * i as f32, 0.0, 0.0]).collect(),
            colors: vec![[0.5; 3]; n],
        };
        let p = TrainParams {
            init_random_points: 300,
            init_min_points: 100,
            ..TrainParams::inria(10)
        };
        let run = |n: usize, p: &TrainParams, start: Start| {
            let mut rng = rng::TrainRng::new(p.seed);
            let (splats, summary) =
                initial_splats(Some(points(n)), p, &cameras, start, &mut rng).unwrap();
            assert_eq!(splats.len(), summary.sfm_points + summary.random_points);
            summary
        };
        let s = run(17, &p, Start::Initial);
        assert_eq!(
            (s.sfm_points, s.random_points, s.restarted),
            (17, 300, false)
        );
        assert_eq!(
            (
                run(150, &p, Start::Initial).sfm_points,
                run(150, &p, Start::Initial).random_points
            ),
            (150, 0)
        );
        let off = TrainParams {
            init_min_points: 0,
            ..p.clone()
        };
        assert_eq!(run(17, &off, Start::Initial).random_points, 0);
        let s = run(17, &p, Start::Denser);
        assert_eq!((s.random_points, s.restarted), (300 + 300, true));
        let capped = TrainParams {
            max_splats: 50,
            ..p.clone()
        };
        assert_eq!(run(17, &capped, Start::Initial).random_points, 33);
        assert_eq!(run(99, &p, Start::Initial).random_points, 300);
        assert_eq!(run(0, &p, Start::Initial).random_points, 300);
    }

    /// Views that show nothing (black over a black background) make every splat fade and be
    /// pruned: the run restarts once from a denser start, and when that fails too the error says
    /// so (two attempts, not one).
    #[test]
    fn a_run_whose_splats_all_vanish_restarts_once_from_a_denser_start() {
        let mut views = small_views();
        for v in &mut views {
            pixels_mut(v).image.iter_mut().for_each(|x| *x = 0.0);
        }
        let p = TrainParams {
            init_random_points: 50,
            densify_from: 60,
            densify_every: 20,
            densify_until: 150,
            ..TrainParams::inria(150)
        };
        let dir = tempfile::tempdir().unwrap();
        let attempts = std::cell::Cell::new(0);
        let err = train(views, None, &p, dir.path(), &|step, _, _| {
            if step == 1 {
                attempts.set(attempts.get() + 1);
            }
        })
        .unwrap_err();
        let msg = err.to_string();
        assert!(splats_vanished(&err), "{msg}");
        assert!(
            msg.contains("again after one restart from a denser start"),
            "{msg}"
        );
        assert_eq!(attempts.get(), 2);
    }

    /// [`train_checkpointed`] on the CPU with [`small_views`] and random init.
    fn train_small_checkpointed(
        p: &TrainParams,
        checkpointer: &Checkpointer,
        out_dir: &Path,
        progress: &dyn Fn(usize, usize, f64),
    ) -> crate::Result<(GaussianSplats, TrainReport)> {
        train_checkpointed(
            &Renderer::Cpu,
            small_views(),
            None,
            p,
            out_dir,
            progress,
            Some(checkpointer),
        )
    }

    static STOP_RESUME_TEST: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    fn resume_test_stop() -> bool {
        STOP_RESUME_TEST.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn never() -> bool {
        false
    }

    /// Stopped after step 13 of 30 (two training views, so mid-epoch; densifying every 5 steps,
    /// checkpoints every 7), then run again:
    /// the result is bit for bit the uninterrupted run's, as the "same step count and PSNR"
    /// asks; a checkpoint of another configuration is ignored.
    #[test]
    fn a_stopped_run_resumes_from_its_checkpoint_to_the_uninterrupted_result() {
        use std::sync::atomic::Ordering::SeqCst;
        let p = TrainParams {
            steps: 30,
            sh_degree: 1,
            densify_from: 4,
            densify_every: 5,
            init_random_points: 300,
            checkpoint_every: 7,
            ..TrainParams::inria(30)
        };
        let dir = tempfile::tempdir().unwrap();
        let policy = |name: &str, stop: fn() -> bool| Checkpointer {
            path: dir.path().join(name).join(checkpoint::FILE_NAME),
            key: "key-1".into(),
            every: p.checkpoint_every,
            stop,
        };
        let quiet = |_: usize, _: usize, _: f64| {};
        let run = |pol: &Checkpointer, out: &str, progress: &dyn Fn(usize, usize, f64)| {
            train_small_checkpointed(&p, pol, &dir.path().join(out), progress)
        };
        let straight = policy("a", never);
        let (splats_a, report_a) = run(&straight, "out-a", &quiet).unwrap();
        // Periodic checkpoints were written (the last at step 28).
        let c = checkpoint::read(&straight.path).unwrap();
        assert_eq!(c.state.step, 28);

        let stopped = policy("b", resume_test_stop);
        let stop_at_13 = |step: usize, _: usize, _: f64| {
            if step == 13 {
                STOP_RESUME_TEST.store(true, SeqCst);
            }
        };
        let err = run(&stopped, "out-b", &stop_at_13).unwrap_err();
        STOP_RESUME_TEST.store(false, SeqCst);
        assert!(
            matches!(&err, crate::Error::Interrupted { at, .. } if at == "after step 13"),
            "{err}"
        );
        assert!(err.to_string().contains("resume"), "{err}");
        assert_eq!(checkpoint::read(&stopped.path).unwrap().state.step, 13);
        let (splats_b, report_b) = run(&stopped, "out-b", &quiet).unwrap();
        assert_eq!(splats_a, splats_b, "resumed splats differ");
        assert_eq!(report_a.psnr_db, report_b.psnr_db);
        assert_eq!(report_a.steps, report_b.steps);
        assert_eq!(report_a.final_loss, report_b.final_loss);

        // A stop requested during the last step lets the run finish (nothing would be gained by
        // a checkpoint of a finished run).
        let stop_at_end = |step: usize, _: usize, _: f64| {
            if step == 30 {
                STOP_RESUME_TEST.store(true, SeqCst);
            }
        };
        let finished = run(&policy("d", resume_test_stop), "out-d", &stop_at_end);
        STOP_RESUME_TEST.store(false, SeqCst);
        assert_eq!(finished.unwrap().0, splats_a);

        // A checkpoint with another key is ignored: the run starts from step 1 and gets the same
        // result again.
        let mut other = policy("b", never);
        other.key = "key-2".into();
        let stopped_again = |step: usize, _: usize, _: f64| {
            if step == 12 {
                STOP_RESUME_TEST.store(true, SeqCst);
            }
        };
        let _ = run(&stopped, "out-c", &stopped_again);
        STOP_RESUME_TEST.store(false, SeqCst);
        let steps_seen = std::cell::Cell::new(0usize);
        let count = |_: usize, _: usize, _: f64| steps_seen.set(steps_seen.get() + 1);
        let (splats_c, _) = run(&other, "out-c", &count).unwrap();
        assert_eq!(
            steps_seen.get(),
            30,
            "a foreign checkpoint must not be resumed"
        );
        assert_eq!(splats_a, splats_c);
    }

    static STOP_TAMPER_TEST: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    fn tamper_test_stop() -> bool {
        STOP_TAMPER_TEST.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Issue 41: a checkpoint travelling through the shared stage cache, changed there between a
    /// kill and the resume — its colours repainted (well-formed, so training would accept it) or
    /// replaced by garbage — is discarded with a warning by the ledger check: training on the
    /// next worker starts over and ends bit for bit where an uninterrupted run does. The
    /// untouched checkpoint is resumed.
    #[tokio::test]
    async fn a_checkpoint_changed_in_the_stage_cache_is_discarded_and_training_starts_over() {
        use crate::cache_ledger::{CacheLedger, MemoryLedger};
        use crate::stage_cache::{CheckpointUploader, StageCache, restore_checkpoint};
        use std::sync::atomic::Ordering::SeqCst;
        let p = TrainParams {
            steps: 30,
            sh_degree: 1,
            densify_from: 4,
            densify_every: 5,
            init_random_points: 300,
            checkpoint_every: 7,
            ..TrainParams::inria(30)
        };
        let dir = tempfile::tempdir().unwrap();
        let policy = |worker: &str, stop: fn() -> bool| Checkpointer {
            path: dir.path().join(worker).join(checkpoint::FILE_NAME),
            key: "key-1".into(),
            every: p.checkpoint_every,
            stop,
        };
        let steps_seen = std::cell::Cell::new(0usize);
        let count = |_: usize, _: usize, _: f64| steps_seen.set(steps_seen.get() + 1);
        let (straight, _) =
            train_small_checkpointed(&p, &policy("a", never), &dir.path().join("out-a"), &count)
                .unwrap();

        // Worker B stops after step 13; its checkpoint reaches the cache and the ledger.
        let ledger: std::sync::Arc<dyn CacheLedger> = std::sync::Arc::new(MemoryLedger::default());
        let cache = StageCache::new(dir.path().join("cache").to_str().unwrap(), None, ledger);
        let cache = cache.unwrap();
        let b = policy("b", tamper_test_stop);
        let stop_at_13 = |step: usize, _: usize, _: f64| {
            if step == 13 {
                STOP_TAMPER_TEST.store(true, SeqCst);
            }
        };
        let stopped = train_small_checkpointed(&p, &b, &dir.path().join("out-b"), &stop_at_13);
        STOP_TAMPER_TEST.store(false, SeqCst);
        assert!(stopped.is_err());
        let every = std::time::Duration::from_secs(60);
        let up = CheckpointUploader::spawn(&cache, "train", "key-1", b.path.clone(), every);
        up.unwrap().finish(false).await;
        let stored = dir
            .path()
            .join("cache/checkpoints/train/key-1")
            .join(checkpoint::FILE_NAME);
        let good = std::fs::read(&stored).unwrap();

        let mut repainted = checkpoint::read(&b.path).unwrap();
        repainted.params.groups[4].iter_mut().for_each(|c| *c = 3.0);
        let magenta = dir.path().join("magenta.ckpt");
        checkpoint::write(&magenta, &repainted).unwrap();
        let magenta = std::fs::read(&magenta).unwrap();
        for (bytes, what) in [(magenta, "repainted"), (b"garbage".to_vec(), "garbage")] {
            std::fs::write(&stored, &bytes).unwrap();
            let c = policy(what, never);
            let fetched = restore_checkpoint(&cache, "train", "key-1", &c.path).await;
            assert!(!fetched.unwrap(), "a {what} checkpoint was taken");
            steps_seen.set(0);
            let out = dir.path().join(format!("out-{what}"));
            let (splats, _) = train_small_checkpointed(&p, &c, &out, &count).unwrap();
            assert_eq!(steps_seen.get(), 30, "{what}: training did not start over");
            assert_eq!(splats, straight, "{what}: the result differs");
        }

        // The checkpoint as worker B recorded it is resumed: 17 steps remain.
        std::fs::write(&stored, &good).unwrap();
        let d = policy("d", never);
        let fetched = restore_checkpoint(&cache, "train", "key-1", &d.path).await;
        assert!(fetched.unwrap());
        steps_seen.set(0);
        let (splats, _) =
            train_small_checkpointed(&p, &d, &dir.path().join("out-d"), &count).unwrap();
        assert_eq!(steps_seen.get(), 17);
        assert_eq!(splats, straight);
    }

    static STOP_MCMC_TEST: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    fn mcmc_test_stop() -> bool {
        STOP_MCMC_TEST.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The MCMC preset grows to its cap and never past it (every sample of the splat-count curve,
    /// and the result), relocates instead of pruning, and a run stopped and resumed ends bit for
    /// bit where the uninterrupted one does (the per-step noise is re-derived, not replayed).
    #[test]
    fn mcmc_stays_under_its_cap_and_resumes_exactly() {
        use std::sync::atomic::Ordering::SeqCst;
        let p = TrainParams {
            steps: 40,
            sh_degree: 1,
            densify_from: 2,
            densify_every: 4,
            init_random_points: 300,
            max_splats: 420,
            mcmc_growth: 0.1,
            checkpoint_every: 0,
            ..TrainParams::mcmc(40)
        };
        let dir = tempfile::tempdir().unwrap();
        let policy = |name: &str, stop: fn() -> bool| Checkpointer {
            path: dir.path().join(name).join(checkpoint::FILE_NAME),
            key: "key".into(),
            every: p.checkpoint_every,
            stop,
        };
        let run = |pol: &Checkpointer, out: &str, progress: &dyn Fn(usize, usize, f64)| {
            train_small_checkpointed(&p, pol, &dir.path().join(out), progress)
        };
        let quiet = |_: usize, _: usize, _: f64| {};
        let (splats_a, report_a) = run(&policy("a", never), "out-a", &quiet).unwrap();
        let metrics: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("out-a").join("metrics.json")).unwrap(),
        )
        .unwrap();
        let counts: Vec<u64> = metrics["splat_count_curve"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| pair[1].as_u64().unwrap())
            .collect();
        assert!(counts.iter().all(|&c| c <= 420), "over the cap: {counts:?}");
        // 300 · 1.1 · 1.1 = 363, then 399, then the cap: the curve reaches 420.
        assert_eq!(counts.iter().max(), Some(&420), "{counts:?}");
        assert!(splats_a.len() <= 420 && report_a.psnr_db.is_finite());

        let stop_at_13 = |step: usize, _: usize, _: f64| {
            if step == 13 {
                STOP_MCMC_TEST.store(true, SeqCst);
            }
        };
        let stopped = policy("b", mcmc_test_stop);
        assert!(run(&stopped, "out-b", &stop_at_13).is_err());
        STOP_MCMC_TEST.store(false, SeqCst);
        let (splats_b, report_b) = run(&stopped, "out-b", &quiet).unwrap();
        assert_eq!(splats_a, splats_b, "resumed MCMC splats differ");
        assert_eq!(report_a.psnr_db, report_b.psnr_db);
    }

    /// Random background on views with transparency: trains, resumes bit for bit (the colours
    /// come from the counted stream), and differs from the fixed-background run.
    #[test]
    fn random_background_trains_and_is_deterministic() {
        let mut views = small_views();
        for v in &mut views {
            pixels_mut(v).transparency = Some((0..40 * 24).map(|i| (i % 3) as f32 / 2.0).collect());
        }
        let p = TrainParams {
            steps: 12,
            sh_degree: 1,
            init_random_points: 200,
            random_background: true,
            ..TrainParams::inria(12)
        };
        let dir = tempfile::tempdir().unwrap();
        let go = |p: &TrainParams, out: &str| {
            train(views.clone(), None, p, &dir.path().join(out), &|_, _, _| {})
                .unwrap()
                .0
        };
        let a = go(&p, "a");
        assert_eq!(a, go(&p, "b"));
        let fixed = TrainParams {
            random_background: false,
            ..p.clone()
        };
        assert_ne!(a, go(&fixed, "c"));
        // A transparency of the wrong size is refused, naming the view.
        let mut bad = views.clone();
        pixels_mut(&mut bad[1]).transparency = Some(vec![0.0; 7]);
        let err = train(bad, None, &p, &dir.path().join("d"), &|_, _, _| {}).unwrap_err();
        assert!(
            err.to_string().contains("v1") && err.to_string().contains("transparency"),
            "{err}"
        );
    }

    /// `antialiased = true` trains with Mip-Splatting's compensated opacities and evaluates in
    /// the same mode: the held-out render in `eval/v0.png` is the antialiased render of the
    /// trained splats (not the classic one), and the run differs from a classic one.
    #[test]
    fn antialiased_runs_train_and_evaluate_in_that_mode() {
        let views = small_views();
        let p = TrainParams {
            steps: 12,
            sh_degree: 1,
            init_random_points: 200,
            antialiased: true,
            ..TrainParams::inria(12)
        };
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("aa");
        let (splats, _) = train(views.clone(), None, &p, &out, &|_, _, _| {}).unwrap();
        let classic = TrainParams {
            antialiased: false,
            ..p.clone()
        };
        let (classic_splats, _) = train(
            views.clone(),
            None,
            &classic,
            &dir.path().join("c"),
            &|_, _, _| {},
        )
        .unwrap();
        assert_ne!(splats, classic_splats);
        // View 0 is the held-out one (every eighth by name); the PNG's right half is the render.
        let png = image::open(out.join("eval/v0.png")).unwrap().to_rgb8();
        let rendered: Vec<u8> = (0..24)
            .flat_map(|y| (40..80).flat_map(move |x| (0..3).map(move |c| (x, y, c))))
            .map(|(x, y, c)| png.get_pixel(x, y)[c])
            .collect();
        let render = |antialiased: bool| {
            let options = RenderOptions {
                background: p.background,
                antialiased,
                absgrad: false,
            };
            let camera = &views[0].camera;
            eval::quantise_u8(
                &eval::render_host(&Renderer::Cpu, &splats, 1, camera, &options).unwrap(),
            )
        };
        assert_eq!(rendered, render(true));
        let changed = rendered
            .iter()
            .zip(render(false))
            .filter(|(a, b)| **a != *b)
            .count();
        assert!(changed > 0, "the classic render is the same image");
    }

    /// `absgrad` changes only the densification statistic: gradients and parameters follow the
    /// same path until the first densification, where, at the same threshold, the absolute
    /// statistic (≥ the signed one per splat) selects more splats to clone or split.
    #[test]
    fn absgrad_densifies_more_at_the_same_threshold() {
        let run = |absgrad: bool, t: f32| {
            let p = TrainParams {
                densify_grad_threshold: t,
                steps: 6,
                sh_degree: 0,
                init_random_points: 300,
                densify_from: 4,
                densify_every: 5,
                densify_until: 6,
                opacity_reset_every: 1000,
                absgrad,
                ..TrainParams::inria(6)
            };
            let dir = tempfile::tempdir().unwrap();
            train(small_views(), None, &p, dir.path(), &|_, _, _| {})
                .unwrap()
                .0
                .len()
        };
        // 300 initial splats; at 1e-4 the signed statistic selects some of them, so the
        // threshold is in range for both.
        let (classic, absolute) = (run(false, 1e-4), run(true, 1e-4));
        assert!(classic > 300, "{classic} splats: nothing densified");
        assert!(absolute > classic, "{absolute} vs {classic} splats");
    }

    /// Pixels a mask excludes are ignored: changing them (further than the SSIM window's 5 px
    /// from any kept pixel) changes neither the trained splats nor the held-out metrics, while
    /// the same change without weights does.
    #[test]
    fn pixels_outside_the_mask_are_ignored_in_training_and_evaluation() {
        let weights: Vec<f32> = (0..40 * 24)
            .map(|p| if p % 40 < 20 { 0.0 } else { 1.0 })
            .collect();
        let masked = |scribble: bool, with_weights: bool| {
            let mut views = small_views();
            for v in &mut views {
                let px_mut = pixels_mut(v);
                px_mut.loss_weights = with_weights.then(|| weights.clone());
                if scribble {
                    for (p, px) in px_mut.image.chunks_exact_mut(3).enumerate() {
                        if p % 40 < 14 {
                            px.copy_from_slice(&[1.0, 0.0, 1.0]);
                        }
                    }
                }
            }
            views
        };
        let p = TrainParams {
            steps: 10,
            sh_degree: 1,
            init_random_points: 200,
            eval_every: 2,
            ..TrainParams::inria(10)
        };
        let dir = tempfile::tempdir().unwrap();
        let go = |views: Vec<TrainView>, out: &str| {
            train(views, None, &p, &dir.path().join(out), &|_, _, _| {}).unwrap()
        };
        let (a, ra) = go(masked(false, true), "a");
        let (b, rb) = go(masked(true, true), "b");
        assert_eq!(a, b, "ignored pixels changed the training");
        assert_eq!((ra.psnr_db, ra.ssim), (rb.psnr_db, rb.ssim));
        // The eval PNG washes out the ignored pixels (x < 20) on both sides, as 96 + v/4: the
        // scribble (magenta, x < 14) shows as (159, 96, 159) in the ground truth half.
        let png = image::open(dir.path().join("b/eval/v0.png"))
            .unwrap()
            .to_rgb8();
        assert_eq!(png.get_pixel(3, 5).0, [96 + 255 / 4, 96, 96 + 255 / 4]);
        let kept = views_pixel(&masked(true, true)[0], 30, 5);
        assert_eq!(png.get_pixel(30, 5).0, kept);
        let (c, _) = go(masked(false, false), "c");
        let (d, _) = go(masked(true, false), "d");
        assert_ne!(c, d, "without weights the scribble must matter");
    }

    #[test]
    fn every_eighth_view_by_name_is_held_out() {
        let views: Vec<TrainView> = (0..17).rev().map(|i| view(&format!("img{i:02}"))).collect();
        let (train, test, all) = split_views(views, 8);
        assert!(!all);
        let names: Vec<&str> = test.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["img00", "img08", "img16"]);
        assert_eq!(train.len(), 14);
    }

    #[test]
    fn a_declared_split_trains_on_train_and_holds_out_test_else_val() {
        let tagged = |name: &str, split: Option<Split>| view(name).with_split(split);
        let names = |vs: &[TrainView]| vs.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        let views = vec![
            tagged("test/r_0", Some(Split::Test)),
            tagged("train/r_1", Some(Split::Train)),
            tagged("train/r_0", Some(Split::Train)),
            tagged("val/r_0", Some(Split::Val)),
            tagged("loose", None),
        ];
        let (train, test, all) = split_views(views.clone(), 8);
        assert!(!all);
        assert_eq!(names(&train), ["train/r_0", "train/r_1"]);
        assert_eq!(names(&test), ["test/r_0"]);
        // Without a test split the val views are held out.
        let no_test: Vec<TrainView> = views[1..].to_vec();
        let (train, test, _) = split_views(no_test, 8);
        assert_eq!(names(&train), ["train/r_0", "train/r_1"]);
        assert_eq!(names(&test), ["val/r_0"]);
        // Only train declared: every eval_every-th train view is held out, undeclared ones unused.
        let train_only = vec![
            tagged("a", Some(Split::Train)),
            tagged("b", Some(Split::Train)),
            tagged("c", Some(Split::Train)),
            tagged("z", None),
        ];
        let (train, test, all) = split_views(train_only, 2);
        assert!(!all);
        assert_eq!(
            (names(&train), names(&test)),
            (vec!["b".into()], vec!["a".into(), "c".into()])
        );
    }

    #[test]
    fn a_single_view_is_trained_and_evaluated() {
        let (train, test, all) = split_views(vec![view("a")], 8);
        assert!(all);
        assert_eq!((train.len(), test.len()), (1, 1));
    }

    #[test]
    fn images_of_the_wrong_size_are_rejected() {
        let mut v = view("bad");
        pixels_mut(&mut v).image.pop();
        let dir = tempfile::tempdir().unwrap();
        let p = TrainParams::inria(2);
        let err = train(vec![v], None, &p, dir.path(), &|_, _, _| {}).unwrap_err();
        assert!(matches!(err, crate::Error::Input { .. }), "{err}");
        assert!(err.to_string().contains("bad"), "{err}");
        assert!(matches!(check_views(&[]), Err(crate::Error::Param { .. })));
    }

    /// One view, SfM init, a few steps: trains and evaluates on the same view, writes every
    /// output file, and never panics.
    #[test]
    fn a_single_view_with_sfm_points_trains_and_writes_outputs() {
        let mut v = view("only");
        v.camera = Camera {
            width: 16,
            height: 12,
            fx: 16.0,
            fy: 16.0,
            cx: 8.0,
            cy: 6.0,
            world_to_camera: [
                [1.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 0.0, 0.0],
                [0.0, 0.0, 1.0, 2.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        };
        pixels_mut(&mut v).image = (0..16 * 12 * 3).map(|i| (i % 5) as f32 / 5.0).collect();
        let init = InitPoints {
            positions: (0..50)
                .map(|i| [(i % 7) as f32 * 0.1 - 0.3, (i % 5) as f32 * 0.1 - 0.2, 0.0])
                .collect(),
            colors: vec![[0.5, 0.2, 0.9]; 50],
        };
        let dir = tempfile::tempdir().unwrap();
        let p = TrainParams {
            steps: 20,
            sh_degree: 1,
            ..TrainParams::inria(20)
        };
        let calls = std::cell::Cell::new(0usize);
        let (splats, report) = train(vec![v], Some(init), &p, dir.path(), &|_, _, _| {
            calls.set(calls.get() + 1)
        })
        .unwrap();
        assert_eq!(calls.get(), 20);
        assert_eq!((report.train_views, report.test_views), (1, 1));
        assert_eq!(splats.len(), report.splats);
        assert!(report.final_loss.is_finite() && report.psnr_db > 0.0);
        for f in [
            "splats.ply",
            "frame.json",
            "metrics.json",
            "loss.svg",
            "eval/only.png",
        ] {
            assert!(dir.path().join(f).is_file(), "missing {f}");
        }
        // Report curves: a splat count per loss sample; held-out PSNR every ⌈20/9⌉ = 3 steps
        // before the end (3, 6, …, 18) plus the final value at step 20.
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("metrics.json")).unwrap())
                .unwrap();
        let counts = m["splat_count_curve"].as_array().unwrap();
        assert_eq!(counts.len(), m["loss_curve"].as_array().unwrap().len());
        let psnr_steps: Vec<u64> = m["psnr_curve"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[0].as_u64().unwrap())
            .collect();
        assert_eq!(psnr_steps, vec![3, 6, 9, 12, 15, 18, 20]);
        assert_eq!(m["psnr_curve"][6][1], m["psnr_db"]);
    }

    /// The trainer on the CUDA kernels (run by the host emulator, as CI has no GPU) follows the
    /// CPU run: same loss at every step to float rounding, same splat count after densification,
    /// and the report names the device.
    #[test]
    fn training_on_the_emulated_cuda_path_follows_the_cpu_run() {
        let renderer = match Renderer::emulator() {
            Ok(r) => r,
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e}"),
            Err(e) => return eprintln!("skipped: {e}"),
        };
        let views = small_views();
        let p = TrainParams {
            steps: 12,
            sh_degree: 1,
            densify_from: 4,
            densify_every: 5,
            init_random_points: 300,
            ..TrainParams::inria(12)
        };
        let losses = |r: &Renderer| {
            let dir = tempfile::tempdir().unwrap();
            let curve = std::cell::RefCell::new(Vec::new());
            let (splats, report) = train_on(r, views.clone(), None, &p, dir.path(), &|_, _, l| {
                curve.borrow_mut().push(l)
            })
            .unwrap();
            (curve.into_inner(), splats.len(), report)
        };
        let (cpu, cpu_n, cpu_report) = losses(&Renderer::Cpu);
        let (gpu, gpu_n, gpu_report) = losses(&renderer);
        assert_eq!(
            (cpu_report.device.as_str(), gpu_report.device.as_str()),
            ("cpu", "emulator")
        );
        assert!(gpu_report.peak_device_bytes.is_some_and(|b| b > 0));
        assert_eq!(cpu_n, gpu_n, "densification diverged");
        for (step, (a, b)) in cpu.iter().zip(&gpu).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs(),
                "step {}: cpu {a} vs emulated cuda {b}",
                step + 1
            );
        }
    }

    #[test]
    fn non_finite_splats_are_pruned_with_their_moments_and_stats() {
        let mut host = init::splats_from_points(
            &InitPoints {
                positions: vec![[0.0; 3], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
                colors: vec![[0.5; 3]; 3],
            },
            0,
        );
        host.log_scales[4] = f32::INFINITY;
        let mut g = Gaussians::from_host(&host);
        let mut adam = gaussians::GaussiansAdam::new(&g);
        let params = TrainParams::inria(10);
        let scale = SceneScale {
            extent: 1.0,
            image_max_side: 8,
        };
        let mut adc = strategy::Adc::new(&params, scale, 3);
        let mut rng = SmallRng::seed_from_u64(0);
        assert!(!g.all_finite());
        let after = strategy::prune_non_finite(&mut g, &mut adam, &mut adc, &mut rng).unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(adam.log_scales.m.len(), 2 * 3);
        let strategy::DensityState::Adc { stats, .. } = strategy::DensityStrategy::save(&adc)
        else {
            panic!("ADC saves ADC state");
        };
        assert_eq!(stats.grad_accum.len(), 2);
        assert!(g.all_finite());
        assert!(strategy::prune_non_finite(&mut g, &mut adam, &mut adc, &mut rng).is_none());
    }

    #[test]
    fn finalize_normalises_quaternions_and_drops_transparent_splats() {
        let s = GaussianSplats {
            means: vec![0.0; 6],
            log_scales: vec![0.0; 6],
            rotations: vec![2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
            logit_opacities: vec![0.0, -20.0],
            sh_coeffs: vec![0.0; 6],
            sh_degree: 0,
        };
        let f = finalize(s);
        assert_eq!(f.len(), 1);
        assert_eq!(f.rotations, vec![1.0, 0.0, 0.0, 0.0]);
    }
}
