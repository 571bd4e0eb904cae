//! `kiln bench train`: the training step's speed on one device, on a real capture at a fixed
//! resolution and splat count: steps/s, mean milliseconds per step for each part (project, sort,
//! rasterize forward, loss, rasterize backward, project backward, the rest of the backward pass,
//! optimizer), and peak device memory.
//!
//! The run is the real trainer ([`crate::stages::train::train_on`]) with densification switched
//! off, so the splat count stays fixed and steps are comparable between devices and runs; the
//! splats start at `splats` random points in the training cameras' frustums (the INRIA recipe's
//! random initialisation), SH degree 3 from the first step. Criterion benchmarks of the CPU kernels
//! at fixed sizes live in `kernels/benches/raster_stages.rs` (project, sort, forward, backward)
//! and `kernels/benches/rasterize.rs`; this command measures what a user pays for
//! per step, on any device, including a GPU.

use std::path::Path;

use kiln_kernels::Renderer;
use serde::Serialize;

use crate::Result;
use crate::stages::ingest::{self, IngestParams};
use crate::stages::train::{self, Init, StepTimings, TrainParams};

/// What to benchmark.
#[derive(Debug, Clone)]
pub struct BenchTrainConfig {
    /// Capture folder (COLMAP / transforms.json / LLFF), as `kiln run` accepts.
    pub capture: std::path::PathBuf,
    /// Longest image side in pixels after ingest (`None`: the capture's own size).
    pub max_side: Option<u32>,
    /// Training steps timed (after `warmup` untimed ones).
    pub steps: usize,
    /// Untimed steps first (device warm-up, JIT, caches).
    pub warmup: usize,
    /// Splats (fixed: no densification).
    pub splats: usize,
    /// Seed of the initialisation and view order.
    pub seed: u64,
}

/// The figures `kiln bench train` prints.
#[derive(Debug, Clone, Serialize)]
pub struct BenchTrainReport {
    /// `cpu`, `cuda:N` or `emulator`.
    pub device: String,
    /// Device name.
    pub device_name: String,
    /// Worker threads of the CPU twin (rayon).
    pub cpu_threads: usize,
    /// Image size trained on, `[width, height]` pixels (of the first view).
    pub image_size: [u32; 2],
    /// Views of the capture.
    pub views: usize,
    /// Views trained on (the rest are held out for evaluation).
    pub train_views: usize,
    /// Splats.
    pub splats: usize,
    /// Timed steps.
    pub steps: usize,
    /// Timed steps per second (from the mean step time; held-out evaluation excluded).
    pub steps_per_s: f64,
    /// Mean milliseconds per timed step, by part.
    pub step_ms: StepTimings,
    /// Peak device memory of the rasterizer, bytes (`None` on the CPU).
    pub peak_device_bytes: Option<usize>,
    /// Peak resident memory of the process, bytes (Linux `VmHWM`).
    pub peak_rss_bytes: Option<u64>,
}

fn bench_params(cfg: &BenchTrainConfig, steps: usize) -> TrainParams {
    TrainParams {
        steps,
        seed: cfg.seed,
        sh_degree: 3,
        sh_increase_every: 0,
        // No densification and no opacity reset (both run only before `densify_until`): the
        // splat count stays `splats` for every step.
        densify_from: steps,
        densify_until: 0,
        opacity_reset_every: steps,
        init: Init::Random,
        init_random_points: cfg.splats,
        // Logged at the last step only.
        log_every: steps,
        psnr_curve_evaluations: 0,
        ..TrainParams::default()
    }
}

/// Ingests the capture into `work_dir` and times `steps` training steps on `renderer`.
///
/// # Errors
/// Ingest errors (naming the capture file), trainer errors, device errors.
pub fn bench_train(
    renderer: &Renderer,
    cfg: &BenchTrainConfig,
    work_dir: &Path,
) -> Result<BenchTrainReport> {
    let ingest_dir = work_dir.join("ingest");
    let ingest_params = IngestParams {
        max_side: cfg.max_side,
        ..IngestParams::default()
    };
    let cap = ingest::ingest_capture(&cfg.capture, &ingest_params, &ingest_dir)?;
    let views = crate::stages::train::train_views(&ingest_dir, &cap, &TrainParams::default());
    let image_size = views
        .first()
        .map(|v| [v.camera.width, v.camera.height])
        .unwrap_or_default();
    let n_views = views.len();
    let quiet = |_: usize, _: usize, _: f64| {};
    if cfg.warmup > 0 {
        train::train_on(
            renderer,
            views.clone(),
            None,
            &bench_params(cfg, cfg.warmup),
            &work_dir.join("warmup"),
            &quiet,
        )?;
    }
    let (_, report) = train::train_on(
        renderer,
        views,
        None,
        &bench_params(cfg, cfg.steps),
        &work_dir.join("timed"),
        &quiet,
    )?;
    Ok(BenchTrainReport {
        device: report.device,
        device_name: report.device_name,
        cpu_threads: rayon::current_num_threads(),
        image_size,
        views: n_views,
        train_views: report.train_views,
        splats: cfg.splats,
        steps: report.steps,
        steps_per_s: 1e3 / report.step_ms.total.max(1e-9),
        step_ms: report.step_ms,
        peak_device_bytes: report.peak_device_bytes,
        peak_rss_bytes: crate::meter::peak_rss_bytes(),
    })
}
