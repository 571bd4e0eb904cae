//! Training parameters ([`TrainParams`]): the INRIA 3DGS recipe and how it is scaled to a run of
//! `steps` iterations.
//!
//! Source: Kerbl et al., "3D Gaussian Splatting for Real-Time Radiance Field Rendering",
//! SIGGRAPH 2023, and the upstream `arguments/__init__.py` of graphdeco-inria/gaussian-splatting
//! (30 000 iterations; densify every 100 steps in 500..15 000 with gradient threshold 2e-4;
//! opacity reset every 3 000; SH degree +1 every 1 000; λ_D-SSIM = 0.2).
//!
//! # Scaling to `steps`
//! The INRIA schedule is written for 30 000 steps. [`TrainParams::inria`] keeps those numbers when
//! `steps ≥ 30 000` and otherwise shrinks the schedule with the run, so that a short CPU run still
//! densifies, resets opacities and raises the SH degree:
//!
//! | field | rule | at 30 000 | at 3 000 (default) |
//! |---|---|---|---|
//! | `densify_from` | min(500, steps/20) | 500 | 150 |
//! | `densify_until` | min(15 000, steps/2) | 15 000 | 1 500 |
//! | `densify_every` | clamp(steps/30, 10, 100) | 100 | 100 |
//! | `opacity_reset_every` | min(3 000, steps/3), ≥ 1 | 3 000 | 1 000 |
//! | `sh_increase_every` | min(1 000, steps/30), ≥ 1 | 1 000 | 100 |
//!
//! Opacity resets are rarer than INRIA's 10 % of the run in short runs: recovering from a reset
//! takes a few hundred steps, and the first reset also enables the large-splat prune, which on a
//! 600-step fox run with resets every 60 steps pruned all but 212 splats (5.3 dB). A third of the
//! run reproduces INRIA exactly at 30 000 steps (3 000).
//!
//! The means learning rate decays exponentially over the whole run (`steps`), as INRIA's
//! `position_lr_max_steps` does over 30 000.
//!
//! # Job TOML
//! [`TrainParams`] deserializes from a table in which every field is optional. Missing schedule
//! fields are filled from [`TrainParams::inria`] (or [`TrainParams::mcmc`] with
//! `preset = "mcmc"`) *for the given `steps`*, so `steps = 30000` alone gives the full INRIA
//! schedule, not the 3 000-step one.

use kiln_kernels::cpu::adam::ActivationL1;
use serde::Deserialize;

use crate::bounds::{Bound, Bounded};

/// Densification threshold on the absolute screen gradient (`absgrad = true`), NDC units: 4× the
/// signed one, as gsplat's `DefaultStrategy` docs advise (`grow_grad2d` 0.0008 with `absgrad`).
pub const ABSGRAD_GRAD_THRESHOLD: f32 = 8e-4;

/// Densification strategy and the recipe that goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Preset {
    /// INRIA 3DGS adaptive density control (clone / split / prune, opacity reset).
    /// Source: Kerbl et al. 2023 §5.2.
    #[default]
    Inria,
    /// 3DGS as Markov Chain Monte Carlo: a hard cap (`max_splats`), dead splats (opacity ≤ 0.005)
    /// relocated onto live ones, `mcmc_growth` more splats per refinement until the cap, position
    /// noise on transparent splats, L1 opacity and scale regularisation; no opacity reset, no
    /// gradient statistics. Source: Kheradmand et al., NeurIPS 2024; gsplat `MCMCStrategy` and
    /// its `examples/benchmarks/mcmc.sh` settings (see [`TrainParams::mcmc`]).
    Mcmc,
}

/// Where the initial splats come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// The capture's SfM points (COLMAP `points3D`) when it has any, else random points.
    #[default]
    Auto,
    /// `init_random_points` random points inside the training cameras' frustums, ignoring any SfM
    /// points (e.g. to compare two sets of poses without the points' head start).
    Random,
}

/// What the pixels outside a capture's mask (`ingest.masks = true`) mean to training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MaskMode {
    /// Ignored: loss weight 0 in training and left out of the held-out PSNR / SSIM (nerfstudio's
    /// masks; what the splat anchors' tracker failures ask for).
    #[default]
    Ignore,
    /// Replaced by [`TrainParams::background`], so the splats learn them as empty (turntable
    /// captures whose background changes between views; Brush's masks-as-alpha).
    Background,
}

impl MaskMode {
    fn is_ignore(&self) -> bool {
        *self == MaskMode::Ignore
    }
}

impl Init {
    fn is_auto(&self) -> bool {
        *self == Init::Auto
    }
}

/// How many held-out evaluations are spread over a run for
/// [`Metrics::psnr_curve`](super::eval::Metrics::psnr_curve) (plus the
/// final one). Eight keeps the curve readable while costing 8 renders per held-out view, a few
/// percent of a run on the sample captures.
pub const PSNR_CURVE_EVALUATIONS: usize = 8;

/// Everything that steers one training run. `Default` is [`TrainParams::inria`]`(3000)`.
///
/// Units: steps are optimizer iterations (one training view each); `background` is linear RGB in
/// [0, 1]; the gradient threshold is in NDC units (the kernels' `means2d_grad_norm`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrainParams {
    /// Number of optimizer steps (one view per step). Default 3 000.
    pub steps: usize,
    /// Seed of every random choice (init, view order, split samples). Same seed → same output.
    pub seed: u64,
    /// Maximum SH degree (0..=3); K = (sh_degree + 1)² coefficients per channel. Default 3.
    pub sh_degree: u32,
    /// Densification strategy. Default [`Preset::Inria`].
    pub preset: Preset,
    /// First step (inclusive) at which densification may run.
    pub densify_from: usize,
    /// Last step (exclusive) at which densification or opacity reset may run.
    pub densify_until: usize,
    /// Densify every this many steps inside `[densify_from, densify_until)`.
    pub densify_every: usize,
    /// Mean screen-space gradient (NDC units) above which a splat is cloned or split. Default 2e-4.
    pub densify_grad_threshold: f32,
    /// Reset opacities to min(opacity, 0.01) every this many steps (while densifying).
    pub opacity_reset_every: usize,
    /// Raise the active SH degree by one every this many steps (INRIA: 1000); 0 = the full
    /// `sh_degree` from the first step (benchmarks).
    pub sh_increase_every: usize,
    /// Hard cap on the number of splats; densification stops adding splats at the cap.
    pub max_splats: usize,
    /// Initial splats: SfM points when present (`auto`), or `random`. Default `auto`.
    #[serde(skip_serializing_if = "Init::is_auto")]
    pub init: Init,
    /// Number of random points inside the camera frustums when no SfM points are used.
    pub init_random_points: usize,
    /// Fewest SfM points trusted alone: a capture with fewer (after dropping those on camera
    /// centres) also gets `init_random_points` random points inside the training cameras'
    /// frustums, and the run says so. A sparse model (25 points for 20 photos) otherwise starts
    /// from a handful of splats that densification cannot grow into a scene. 0 turns the top-up
    /// off. Default 1000.
    pub init_min_points: usize,
    /// Weight λ of the D-SSIM term: loss = (1 − λ)·L1 + λ·(1 − SSIM). Default 0.2.
    pub lambda_dssim: f32,
    /// Background colour `[3]`, linear RGB in [0, 1], behind the splats in training and eval.
    pub background: [f32; 3],
    /// Train each step over a uniformly random background colour instead of `background`
    /// (transparent and masked-out pixels of the targets are composited over the same colour);
    /// evaluation keeps `background`. Discourages splats that paint the background colour into
    /// transparent regions (gsplat `random_bkgd`; nerfstudio's random background). Default off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub random_background: bool,
    /// Pixels outside a capture's mask: ignored (default) or the background ([`MaskMode`]).
    #[serde(skip_serializing_if = "MaskMode::is_ignore")]
    pub mask_mode: MaskMode,
    /// Hold out every `eval_every`-th view (index % eval_every == 0, views sorted by name) for
    /// evaluation. 0 disables the hold-out (train and evaluate on all views). Default 8.
    pub eval_every: usize,
    /// Opacity of the initial splats (INRIA 0.1; MCMC 0.5).
    pub init_opacity: f32,
    /// Multiplier of the initial splats' scales, √(mean squared 3-NN distance) (default 1).
    pub init_scale: f32,
    /// Weight of the L1 penalty on opacities, `opacity_reg · mean(σ(logit_opacities))` added to
    /// the loss (MCMC 0.01; INRIA 0). Kheradmand et al. 2024 §4.3.
    pub opacity_reg: f32,
    /// Weight of the L1 penalty on scales, `scale_reg · mean(exp(log_scales))` over `[N, 3]`
    /// (MCMC 0.01; INRIA 0).
    pub scale_reg: f32,
    /// MCMC position noise: each step, means move by Σ·(ε ⊙ s(1 − opacity))·`noise_lr`·lr_means with
    /// ε ~ N(0, I) and s(x) = 1/(1 + e^(−100(x − 0.995))), Σ = R·S²·Rᵀ (gsplat
    /// `inject_noise_to_position`; MCMC 5e5; INRIA 0 = none).
    pub noise_lr: f64,
    /// MCMC growth per refinement: N ← min(max_splats, ⌊(1 + growth)·N⌋) (gsplat 0.05 at 30 000
    /// steps; see [`TrainParams::mcmc`] for shorter runs).
    pub mcmc_growth: f32,
    /// Initial means learning rate as a fraction of the scene extent (INRIA 1.6e-4).
    pub lr_means_init: f64,
    /// Final means learning rate as a fraction of the scene extent (INRIA 1.6e-6).
    pub lr_means_final: f64,
    /// Learning rate of `log_scales` (INRIA 5e-3).
    pub lr_log_scales: f64,
    /// Learning rate of `rotations` (INRIA 1e-3).
    pub lr_rotations: f64,
    /// Learning rate of `logit_opacities` (INRIA 5e-2).
    pub lr_logit_opacities: f64,
    /// Learning rate of the SH DC coefficient (INRIA 2.5e-3); higher bands use it / 20.
    pub lr_sh_dc: f64,
    /// Mip-Splatting's anti-aliased rasterization (2D filter with opacity compensation; see
    /// [`kiln_kernels::RenderOptions::antialiased`]), in training and evaluation alike. Default
    /// `false`; left out of the stage's cache key when off, so keys of jobs written before the
    /// option existed do not change.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub antialiased: bool,
    /// Densify on AbsGS's absolute screen gradient (per pixel |∂L/∂mean2d|, summed per
    /// component; gsplat `absgrad`; see [`kiln_kernels::RenderOptions::absgrad`]) instead of the
    /// signed sum, so splats whose pixels pull in opposite directions still split. Default
    /// `false`; when set in a job file without `densify_grad_threshold`, the threshold becomes
    /// [`ABSGRAD_GRAD_THRESHOLD`]. Left out of the cache key when off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub absgrad: bool,
    /// Budget of the training-image cache, MiB (default 2048): decoded views beyond it are
    /// dropped, least recently used first, and decoded again when drawn, so memory does not grow
    /// with the number of photos. Not part of the stage's cache key: it does not change the
    /// result.
    #[serde(skip_serializing)]
    pub image_cache_mb: u64,
    /// Log progress with `tracing::info!` every this many steps. Default 100. Logging only, so not
    /// part of the stage's cache key.
    #[serde(skip_serializing)]
    pub log_every: usize,
    /// Write a checkpoint (parameters, Adam moments, statistics) every this many steps when the
    /// run has a checkpoint file (job runs do); 0 = only when stopped by a signal. Default 500.
    /// Not part of the stage's cache key: checkpoints do not change the result.
    #[serde(skip_serializing)]
    pub checkpoint_every: usize,
    /// Held-out PSNR evaluations spread over the run for `metrics.json`'s curve (default
    /// [`PSNR_CURVE_EVALUATIONS`]; 0 = none, as `kiln bench train` does). Reporting
    /// only, so not part of the stage's cache key.
    #[serde(skip_serializing)]
    pub psnr_curve_evaluations: usize,
}

impl Default for TrainParams {
    fn default() -> Self {
        Self::inria(3000)
    }
}

impl TrainParams {
    /// The INRIA recipe scaled to `steps` (see the module docs for the table).
    pub fn inria(steps: usize) -> Self {
        Self {
            steps,
            seed: 0,
            sh_degree: 3,
            preset: Preset::Inria,
            densify_from: (steps / 20).min(500),
            densify_until: (steps / 2).min(15_000),
            densify_every: (steps / 30).clamp(10, 100),
            densify_grad_threshold: 2e-4,
            opacity_reset_every: (steps / 3).clamp(1, 3000),
            sh_increase_every: (steps / 30).clamp(1, 1000),
            max_splats: 1_000_000,
            init: Init::Auto,
            init_random_points: 10_000,
            init_min_points: 1_000,
            lambda_dssim: 0.2,
            background: [0.0; 3],
            random_background: false,
            mask_mode: MaskMode::Ignore,
            eval_every: 8,
            init_opacity: super::init::INIT_OPACITY,
            init_scale: 1.0,
            opacity_reg: 0.0,
            scale_reg: 0.0,
            noise_lr: 0.0,
            mcmc_growth: 0.0,
            lr_means_init: 1.6e-4,
            lr_means_final: 1.6e-6,
            lr_log_scales: 5e-3,
            lr_rotations: 1e-3,
            lr_logit_opacities: 5e-2,
            lr_sh_dc: 2.5e-3,
            antialiased: false,
            absgrad: false,
            image_cache_mb: 2048,
            log_every: 100,
            checkpoint_every: 500,
            psnr_curve_evaluations: PSNR_CURVE_EVALUATIONS,
        }
    }

    /// The MCMC recipe scaled to `steps`: [`TrainParams::inria`]'s learning rates, SH schedule and
    /// loss, with gsplat's `MCMCStrategy` refinement (every 100 steps from step 500 to 25 000 of
    /// 30 000, scaled as INRIA's densification is: `densify_from` = min(500, steps/20),
    /// `densify_until` = min(25 000, 5·steps/6), `densify_every` = clamp(steps/30, 10, 100)) and
    /// its benchmark settings (`examples/benchmarks/mcmc.sh`: opacity_reg = scale_reg = 0.01,
    /// init_opa 0.5, noise_lr 5e5). `max_splats` is the cap (default 1 000 000, as gsplat's
    /// `cap_max`: set it to the splat budget you want).
    ///
    /// Growth: gsplat grows 5 % per refinement over 245 refinements, so at 30 000 steps the count
    /// always reaches the cap. A shorter run has fewer refinements, so each grows by the same
    /// total factor per 30 000 steps: `mcmc_growth` = clamp(1.05^(30 000/steps) − 1, 0.05, 1)
    /// (63 % per refinement at 3 000 steps). At 5 % a 3 000-step fox run stopped at 27 000 splats
    /// from 10 000 (28.06 dB).
    ///
    /// The initial scales stay INRIA's 3-NN ones (gsplat's default `init_scale` 1): the benchmark's
    /// 0.1 is tuned for dense SfM points, and from fox's 10 000 random points it cost 2.9 dB
    /// (600 steps at 160 px: 20.6 dB with 0.1, 23.5 dB with 1).
    pub fn mcmc(steps: usize) -> Self {
        Self {
            preset: Preset::Mcmc,
            densify_until: (steps * 5 / 6).min(25_000),
            init_opacity: 0.5,
            init_scale: 1.0,
            opacity_reg: 0.01,
            scale_reg: 0.01,
            noise_lr: 5e5,
            mcmc_growth: (1.05f64.powf(30_000.0 / steps.max(1) as f64) - 1.0).clamp(0.05, 1.0)
                as f32,
            ..Self::inria(steps)
        }
    }

    /// The recipe of `preset` scaled to `steps`.
    pub fn for_preset(preset: Preset, steps: usize) -> Self {
        match preset {
            Preset::Inria => Self::inria(steps),
            Preset::Mcmc => Self::mcmc(steps),
        }
    }

    /// The per-group gradient penalties of this recipe for `n` splats, in the optimizer's group
    /// order (means, log_scales, rotations, logit_opacities, sh_coeffs): the gradients of
    /// `opacity_reg · mean(σ(x))` and `scale_reg · mean(exp(x))`.
    pub fn regularisers(&self, n: usize) -> [ActivationL1; 5] {
        let n = n.max(1) as f32;
        let mut r = [ActivationL1::None; 5];
        if self.scale_reg > 0.0 {
            r[1] = ActivationL1::Exp(self.scale_reg / (3.0 * n));
        }
        if self.opacity_reg > 0.0 {
            r[3] = ActivationL1::Sigmoid(self.opacity_reg / n);
        }
        r
    }

    /// Check the fields before training: the bounds ([`Bounded::BOUNDS`]), then the rules a
    /// range cannot express: `init_opacity` strictly inside (0, 1) (its logit must be finite),
    /// `init_scale` > 0, `mcmc_growth` > 0 with `preset = "mcmc"`, and `lr_means_final` > 0 when
    /// `lr_means_init` > 0.
    ///
    /// # Errors
    /// [`crate::Error::Param`] naming the first field out of range.
    pub fn validate(&self) -> crate::Result<()> {
        self.check_bounds()?;
        let bad = |field: &str, expected: &str, found: String| crate::Error::Param {
            stage: Self::TABLE,
            field: field.to_string(),
            expected: expected.to_string(),
            found,
        };
        if self.init_opacity == 0.0 || self.init_opacity == 1.0 {
            return Err(bad(
                "init_opacity",
                "an opacity strictly between 0 and 1 (its logit is trained)",
                self.init_opacity.to_string(),
            ));
        }
        if self.init_scale == 0.0 {
            return Err(bad(
                "init_scale",
                "> 0 (a multiple of the neighbour distance)",
                self.init_scale.to_string(),
            ));
        }
        if self.preset == Preset::Mcmc && self.mcmc_growth == 0.0 {
            return Err(bad(
                "mcmc_growth",
                "> 0 with preset = \"mcmc\" (the splat count never grows otherwise)",
                self.mcmc_growth.to_string(),
            ));
        }
        if self.lr_means_init > 0.0 && self.lr_means_final == 0.0 {
            return Err(bad(
                "lr_means_final",
                "> 0 when lr_means_init > 0 (exponential decay)",
                self.lr_means_final.to_string(),
            ));
        }
        Ok(())
    }

    /// Means learning rate at `step` for a scene of extent `scene_extent` (metres): exponential
    /// interpolation from `lr_means_init` to `lr_means_final` over `steps`, times the extent.
    /// Source: INRIA `get_expon_lr_func` (without the delay multiplier).
    pub fn lr_means(&self, step: usize, scene_extent: f64) -> f64 {
        if self.lr_means_init <= 0.0 {
            return 0.0;
        }
        let t = (step as f64 / self.steps.max(1) as f64).clamp(0.0, 1.0);
        let log_lr = self.lr_means_init.ln() * (1.0 - t) + self.lr_means_final.ln() * t;
        log_lr.exp() * scene_extent
    }
}

/// Bound of every step count and step interval: 33× the 30 k steps of the 3DGS paper.
const STEPS: f64 = 1_000_000.0;
const STEPS_WHY: &str = "33× the 30 k steps of the 3DGS paper";

impl Bounded for TrainParams {
    const TABLE: &'static str = "train";
    const BOUNDS: &'static [Bound] = &[
        Bound::scalar("steps", 1.0, STEPS, STEPS_WHY),
        Bound::scalar("seed", 0.0, u64::MAX as f64, "any 64-bit seed"),
        Bound::scalar(
            "sh_degree",
            0.0,
            3.0,
            "3DGS uses spherical harmonics up to degree 3",
        ),
        Bound::scalar("densify_from", 0.0, STEPS, STEPS_WHY),
        Bound::scalar("densify_until", 0.0, STEPS, STEPS_WHY),
        Bound::scalar("densify_every", 1.0, STEPS, STEPS_WHY),
        Bound::scalar(
            "densify_grad_threshold",
            0.0,
            1.0,
            "the paper's 2e-4, 5000× over",
        ),
        Bound::scalar("opacity_reset_every", 1.0, STEPS, STEPS_WHY),
        Bound::scalar("sh_increase_every", 0.0, STEPS, STEPS_WHY),
        Bound::scalar(
            "max_splats",
            1.0,
            50_000_000.0,
            "about 12 GB of parameters and Adam state",
        ),
        Bound::scalar(
            "init_random_points",
            1.0,
            10_000_000.0,
            "random initial splats",
        ),
        Bound::scalar(
            "init_min_points",
            0.0,
            10_000_000.0,
            "random points topping up a sparse point set",
        ),
        Bound::scalar("lambda_dssim", 0.0, 1.0, "a weight between L1 and D-SSIM"),
        Bound::list("background", 0.0, 1.0, 3, "linear RGB in 0..1"),
        Bound::scalar(
            "eval_every",
            0.0,
            10_000.0,
            "every Nth photo held out (0 = none)",
        ),
        Bound::scalar("init_opacity", 0.0, 1.0, "an opacity"),
        Bound::scalar(
            "init_scale",
            0.0,
            1000.0,
            "a multiple of the neighbour distance",
        ),
        Bound::scalar("opacity_reg", 0.0, 1.0, "MCMC uses 0.01"),
        Bound::scalar("scale_reg", 0.0, 1.0, "MCMC uses 0.01"),
        Bound::scalar("noise_lr", 0.0, 1e8, "MCMC uses 5e5"),
        Bound::scalar("mcmc_growth", 0.0, 10.0, "MCMC grows 5 % per refinement"),
        Bound::scalar("lr_means_init", 0.0, 1.0, "3DGS uses 1.6e-4"),
        Bound::scalar("lr_means_final", 0.0, 1.0, "3DGS uses 1.6e-6"),
        Bound::scalar("lr_log_scales", 0.0, 1.0, "3DGS uses 5e-3"),
        Bound::scalar("lr_rotations", 0.0, 1.0, "3DGS uses 1e-3"),
        Bound::scalar("lr_logit_opacities", 0.0, 1.0, "3DGS uses 5e-2"),
        Bound::scalar("lr_sh_dc", 0.0, 1.0, "3DGS uses 2.5e-3"),
        Bound::scalar("image_cache_mb", 0.0, 1_048_576.0, "MiB (1 TiB)"),
        Bound::scalar("log_every", 1.0, STEPS, STEPS_WHY),
        Bound::scalar("checkpoint_every", 0.0, STEPS, STEPS_WHY),
    ];

    /// The serialised fields plus the settings a job file can set that are kept out of the
    /// stage's cache key (`image_cache_mb`, `log_every`, `checkpoint_every`), so they are bounded
    /// too. (`psnr_curve_evaluations` is not a job-file setting.)
    fn bounded_values(&self) -> serde_json::Value {
        let mut fields = serde_json::to_value(self).unwrap_or_default();
        if let Some(fields) = fields.as_object_mut() {
            fields.insert("image_cache_mb".into(), self.image_cache_mb.into());
            fields.insert("log_every".into(), self.log_every.into());
            fields.insert("checkpoint_every".into(), self.checkpoint_every.into());
        }
        fields
    }
}

/// The TOML/JSON form: every field optional; missing ones come from `TrainParams::inria(steps)`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct TrainParamsToml {
    steps: Option<usize>,
    seed: Option<u64>,
    sh_degree: Option<u32>,
    preset: Option<Preset>,
    densify_from: Option<usize>,
    densify_until: Option<usize>,
    densify_every: Option<usize>,
    densify_grad_threshold: Option<f32>,
    opacity_reset_every: Option<usize>,
    sh_increase_every: Option<usize>,
    max_splats: Option<usize>,
    init: Option<Init>,
    init_random_points: Option<usize>,
    init_min_points: Option<usize>,
    lambda_dssim: Option<f32>,
    /// A list (not `[f32; 3]`): a fixed-size array silently drops values past the third.
    background: Option<Vec<f32>>,
    random_background: Option<bool>,
    mask_mode: Option<MaskMode>,
    eval_every: Option<usize>,
    init_opacity: Option<f32>,
    init_scale: Option<f32>,
    opacity_reg: Option<f32>,
    scale_reg: Option<f32>,
    noise_lr: Option<f64>,
    mcmc_growth: Option<f32>,
    lr_means_init: Option<f64>,
    lr_means_final: Option<f64>,
    lr_log_scales: Option<f64>,
    lr_rotations: Option<f64>,
    lr_logit_opacities: Option<f64>,
    lr_sh_dc: Option<f64>,
    antialiased: Option<bool>,
    absgrad: Option<bool>,
    image_cache_mb: Option<u64>,
    log_every: Option<usize>,
    checkpoint_every: Option<usize>,
}

impl<'de> Deserialize<'de> for TrainParams {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut t = TrainParamsToml::deserialize(deserializer)?;
        let background = match t.background.take() {
            Some(v) => Some(<[f32; 3]>::try_from(v.as_slice()).map_err(|_| {
                serde::de::Error::custom(format!(
                    "background: expected 3 values (linear RGB), found {}",
                    v.len()
                ))
            })?),
            None => None,
        };
        let mut p = TrainParams::for_preset(t.preset.unwrap_or_default(), t.steps.unwrap_or(3000));
        if t.absgrad == Some(true) {
            p.densify_grad_threshold = ABSGRAD_GRAD_THRESHOLD;
        }
        macro_rules! take {
            ($($f:ident),*) => { $( if let Some(v) = t.$f { p.$f = v; } )* };
        }
        take!(
            seed,
            sh_degree,
            preset,
            densify_from,
            densify_until,
            densify_every,
            densify_grad_threshold,
            opacity_reset_every,
            sh_increase_every,
            max_splats,
            init,
            init_random_points,
            init_min_points,
            lambda_dssim,
            random_background,
            mask_mode,
            eval_every,
            init_opacity,
            init_scale,
            opacity_reg,
            scale_reg,
            noise_lr,
            mcmc_growth,
            lr_means_init,
            lr_means_final,
            lr_log_scales,
            lr_rotations,
            lr_logit_opacities,
            lr_sh_dc,
            antialiased,
            absgrad,
            image_cache_mb,
            log_every,
            checkpoint_every
        );
        if let Some(b) = background {
            p.background = b;
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_inria_scaled_to_3000_steps() {
        let p = TrainParams::default();
        assert_eq!(p.steps, 3000);
        assert_eq!(
            (p.densify_from, p.densify_until, p.densify_every),
            (150, 1500, 100)
        );
        assert_eq!((p.opacity_reset_every, p.sh_increase_every), (1000, 100));
        assert_eq!(p.densify_grad_threshold, 2e-4);
    }

    #[test]
    fn full_length_run_uses_the_inria_schedule() {
        let p = TrainParams::inria(30_000);
        assert_eq!(
            (p.densify_from, p.densify_until, p.densify_every),
            (500, 15_000, 100)
        );
        assert_eq!((p.opacity_reset_every, p.sh_increase_every), (3000, 1000));
    }

    #[test]
    fn absgrad_in_a_job_file_raises_the_default_threshold_only() {
        let p: TrainParams = toml::from_str("absgrad = true").unwrap();
        assert!(p.absgrad);
        assert_eq!(p.densify_grad_threshold, 8e-4);
        let p: TrainParams =
            toml::from_str("absgrad = true\ndensify_grad_threshold = 5e-4").unwrap();
        assert_eq!(p.densify_grad_threshold, 5e-4);
        let p: TrainParams = toml::from_str("absgrad = false").unwrap();
        assert_eq!(p.densify_grad_threshold, 2e-4);
    }

    #[test]
    fn toml_fills_missing_fields_from_the_schedule_for_its_steps() {
        let p: TrainParams = toml::from_str("steps = 30000\nseed = 7").unwrap();
        assert_eq!(p.densify_until, 15_000);
        assert_eq!(p.seed, 7);
        let p: TrainParams = toml::from_str("densify_until = 10").unwrap();
        assert_eq!((p.steps, p.densify_until), (3000, 10));
        assert!(toml::from_str::<TrainParams>("no_such_field = 1").is_err());
    }

    #[test]
    fn means_lr_decays_by_100x_over_the_run() {
        let p = TrainParams::inria(1000);
        assert!((p.lr_means(0, 2.0) - 3.2e-4).abs() < 1e-12);
        assert!((p.lr_means(1000, 2.0) - 3.2e-6).abs() < 1e-12);
    }

    #[test]
    fn mcmc_preset_in_toml_takes_the_mcmc_recipe_and_its_overrides() {
        let p: TrainParams = toml::from_str("preset = \"mcmc\"\nmax_splats = 5000").unwrap();
        assert_eq!(p.preset, Preset::Mcmc);
        assert_eq!(
            (p.opacity_reg, p.scale_reg, p.init_opacity),
            (0.01, 0.01, 0.5)
        );
        assert_eq!((p.noise_lr, p.max_splats), (5e5, 5000));
        // 3 000 steps: 1.05^10 − 1 = 0.6289 per refinement.
        assert!(
            (p.mcmc_growth - 0.628_895).abs() < 1e-5,
            "{}",
            p.mcmc_growth
        );
        // gsplat refines by 5 % in 500..25 000 of 30 000 steps.
        let full = TrainParams::mcmc(30_000);
        assert_eq!((full.densify_from, full.densify_until), (500, 25_000));
        assert_eq!(full.mcmc_growth, 0.05);
        // INRIA has none of it.
        let inria = TrainParams::default();
        assert_eq!(inria.regularisers(10), [ActivationL1::None; 5]);
        // 0.01 · mean over 10 splats.
        assert!(
            matches!(p.regularisers(10)[3], ActivationL1::Sigmoid(w) if (w - 1e-3).abs() < 1e-9)
        );
        let bad = TrainParams {
            mcmc_growth: 0.0,
            ..TrainParams::mcmc(100)
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn every_numeric_field_a_job_file_can_set_has_a_bound() {
        let p = TrainParams::default();
        p.validate().unwrap();
        TrainParams::mcmc(3000).validate().unwrap();
        // Including the settings kept out of the cache key (not serialised).
        assert_eq!(crate::bounds::unbounded_and_stale(&p), (vec![], vec![]));
        for (bad, field) in [
            (
                TrainParams {
                    log_every: 0,
                    ..TrainParams::default()
                },
                "`log_every`: expected 1 ..= 1000000",
            ),
            (
                TrainParams {
                    image_cache_mb: 1 << 30,
                    ..TrainParams::default()
                },
                "`image_cache_mb`",
            ),
            (
                TrainParams {
                    lr_sh_dc: f64::NAN,
                    ..TrainParams::default()
                },
                "`lr_sh_dc`: expected a finite number",
            ),
            (
                TrainParams {
                    background: [0.0, 0.5, 2.0],
                    ..TrainParams::default()
                },
                "`background[2]`",
            ),
            // Open ends the bounds (0 ..= 1, 0 ..= 1000) cannot express.
            (
                TrainParams {
                    init_opacity: 1.0,
                    ..TrainParams::default()
                },
                "`init_opacity`",
            ),
            (
                TrainParams {
                    init_scale: 0.0,
                    ..TrainParams::default()
                },
                "`init_scale`",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }
}
