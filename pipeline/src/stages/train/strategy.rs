//! How the splat set changes during training: the [`DensityStrategy`] trait, its two
//! implementations [`Adc`] (INRIA adaptive density control, [`super::density`]) and [`Mcmc`]
//! (3DGS as Markov chain Monte Carlo, [`super::mcmc`]), and [`for_params`], which picks one from
//! [`TrainParams::preset`].
//!
//! The training loop knows no strategy by name: after every step's update it hands the step's
//! render statistics to [`DensityStrategy::observe`], then lets [`DensityStrategy::refine`] change
//! the splats on the strategy's own schedule. Each strategy owns its state (ADC its gradient
//! statistics and whether an opacity reset has happened; MCMC none), saved in checkpoints as a
//! [`DensityState`].
//!
//! Source of the split: gsplat's `Strategy` (`gsplat/strategy/base.py`, `default.py`, `mcmc.py`:
//! `step_post_backward` after each step) and Brush's `SplatTrainer::refine_if_needed`
//! (`crates/brush-train/src/train.rs`).

use kiln_formats::splats::GaussianSplats;
use serde::{Deserialize, Serialize};

use super::density::{self, DensityStats};
use super::gaussians::{Gaussians, GaussiansAdam};
use super::params::{Preset, TrainParams};
use super::rng::TrainRng;
use super::store::{ParamStore, StepOutput};

pub use super::density::Adc;
pub use super::mcmc::Mcmc;

/// The scene's size as densification sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SceneScale {
    /// Scene extent, metres: the radius of the training cameras' centres around their mean,
    /// × 1.1 (INRIA `getNerfppNorm`, `cameras_extent`).
    pub extent: f32,
    /// Longest side of the training images, pixels.
    pub image_max_side: u32,
}

/// A densification strategy: decides when and how splats are added, moved and removed (see the
/// module docs). Implementations keep their per-splat state row-aligned with the splats.
pub trait DensityStrategy {
    /// Records step `step`'s render statistics: `out.radii` `[N]` (pixels) and
    /// `out.means2d_grad_norm` `[N]` (NDC units; `None` when the backward pass did not run).
    /// Called after the step's optimizer update, before [`DensityStrategy::refine`].
    fn observe(&mut self, step: usize, out: &StepOutput);

    /// Changes the splat set after step `step`'s update, on the strategy's schedule; random
    /// choices come from `rng`, the run's counted stream (so a checkpoint restores them).
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] for device failures while the state is copied to the host and
    /// back.
    fn refine(
        &mut self,
        store: &mut ParamStore,
        rng: &mut TrainRng,
        step: usize,
    ) -> crate::Result<()>;

    /// Rows `kept` (ascending indices into the splats before) survived a pruning made outside
    /// the strategy ([`prune_non_finite`]); per-splat state follows them.
    fn keep_rows(&mut self, kept: &[usize]);

    /// The strategy's state, to save in a checkpoint.
    fn save(&self) -> DensityState;

    /// Continues from `saved` (from [`DensityStrategy::save`] of the same preset: callers check
    /// [`DensityState::preset`] first; a state of another strategy is ignored).
    fn restore(&mut self, saved: DensityState);
}

/// What a [`DensityStrategy`] carries from one step to the next (a checkpoint's `density`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DensityState {
    /// [`Adc`]'s state.
    Adc {
        /// Gradient statistics since the last densification, `[N]` each. Stored as arrays after
        /// the parameters in a checkpoint file, not in its JSON header.
        #[serde(skip)]
        stats: DensityStats,
        /// Whether an opacity reset has happened (enables pruning by size).
        opacity_reset_done: bool,
    },
    /// [`Mcmc`] carries nothing: its position noise is derived from the seed and the step.
    Mcmc,
}

impl DensityState {
    /// The preset whose strategy this state belongs to.
    pub fn preset(&self) -> Preset {
        match self {
            Self::Adc { .. } => Preset::Inria,
            Self::Mcmc => Preset::Mcmc,
        }
    }
}

/// The strategy of `params.preset` for `n` initial splats in a scene of `scale`.
pub fn for_params(
    params: &TrainParams,
    scale: SceneScale,
    n: usize,
) -> Box<dyn DensityStrategy + '_> {
    match params.preset {
        Preset::Inria => Box::new(Adc::new(params, scale, n)),
        Preset::Mcmc => Box::new(Mcmc::new(params, scale)),
    }
}

/// Prunes splats with non-finite parameters from `g` and their moments from `adam`, and tells
/// `strategy` which rows were kept. Returns the host copy after pruning when a host readback was
/// needed, `None` when every parameter was finite (nothing read back). Draws nothing from `rng`
/// (a prune-only plan has no split samples).
pub fn prune_non_finite(
    g: &mut Gaussians,
    adam: &mut GaussiansAdam,
    strategy: &mut dyn DensityStrategy,
    rng: &mut impl rand::Rng,
) -> Option<GaussianSplats> {
    if g.all_finite() {
        return None;
    }
    let host = g.to_host();
    let plan = density::plan_prune_non_finite(&host);
    if plan.is_identity(host.len()) {
        return Some(host);
    }
    tracing::warn!(
        pruned = host.len() - plan.keep.len(),
        "train: pruned splats with non-finite parameters"
    );
    density::apply_plan(&plan, &host, g, adam, rng);
    strategy.keep_rows(&plan.keep);
    Some(g.to_host())
}
