//! How the splat set changes during training: the [`DensityStrategy`] trait, its two
//! implementations [`Adc`] (INRIA adaptive density control over [`super::density`]'s operations)
//! and [`Mcmc`] (3DGS as Markov chain Monte Carlo over [`super::mcmc`]'s), and [`for_params`],
//! which picks one from [`TrainParams::preset`]. The operations know no strategy; the
//! strategies are their schedules.
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
use super::mcmc;
use super::params::{Preset, TrainParams};
use super::rng::TrainRng;
use super::store::{ParamStore, StepOutput};

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

/// INRIA adaptive density control as a [`DensityStrategy`] (Kerbl et al. 2023 §5.2; see the
/// module docs): statistics from every step before `densify_until`; every `densify_every` steps
/// in `(densify_from, densify_until)`, clone / split / prune ([`density::plan_densify`], at most
/// `max_splats`) and fresh statistics; every `opacity_reset_every` steps before `densify_until`,
/// an opacity reset ([`density::reset_opacities`]), after which large splats are pruned too. Every step
/// first adds MCMC's position noise when `noise_lr` > 0 (0 in the INRIA recipe; see
/// [`mcmc::perturb_positions`]).
#[derive(Debug)]
pub struct Adc<'a> {
    params: &'a TrainParams,
    scale: SceneScale,
    stats: DensityStats,
    opacity_reset_done: bool,
}

impl<'a> Adc<'a> {
    /// The strategy of `params` for `n` initial splats in a scene of `scale`: no statistics yet,
    /// no opacity reset yet.
    pub fn new(params: &'a TrainParams, scale: SceneScale, n: usize) -> Self {
        Self {
            params,
            scale,
            stats: DensityStats::new(n),
            opacity_reset_done: false,
        }
    }

    /// One densification at step `step`: non-finite splats dropped, then clone / split / prune
    /// by [`density::plan_densify`], then statistics from zero (as INRIA's `densification_postfix`).
    fn densify(
        &mut self,
        store: &mut ParamStore,
        rng: &mut TrainRng,
        step: usize,
    ) -> crate::Result<()> {
        let cfg = density::DensifyConfig {
            grad_threshold: self.params.densify_grad_threshold,
            scene_extent: self.scale.extent,
            prune_large: self.opacity_reset_done,
            image_max_side: self.scale.image_max_side,
            max_splats: self.params.max_splats,
            grow: true,
        };
        store.with_host(|g, adam| {
            let host = prune_non_finite(g, adam, self, rng).unwrap_or_else(|| g.to_host());
            let plan = density::plan_densify(&host, &self.stats, &cfg);
            tracing::debug!(
                step,
                before = host.len(),
                cloned = plan.clone.len(),
                split = plan.split.len(),
                pruned = plan.pruned(host.len()),
                "train: densify"
            );
            density::apply_plan(&plan, &host, g, adam, rng);
            self.stats = DensityStats::new(plan.new_len());
        })
    }
}

impl DensityStrategy for Adc<'_> {
    fn observe(&mut self, step: usize, out: &StepOutput) {
        if step < self.params.densify_until
            && let Some(g2d) = &out.means2d_grad_norm
        {
            self.stats.accumulate(g2d, &out.radii);
        }
    }

    fn refine(
        &mut self,
        store: &mut ParamStore,
        rng: &mut TrainRng,
        step: usize,
    ) -> crate::Result<()> {
        mcmc::perturb_positions(store, self.params, self.scale.extent, step)?;
        let p = self.params;
        if step >= p.densify_until {
            return Ok(());
        }
        if step > p.densify_from && step.is_multiple_of(p.densify_every) {
            self.densify(store, rng, step)?;
        }
        if step.is_multiple_of(p.opacity_reset_every) {
            store.with_host(density::reset_opacities)?;
            self.opacity_reset_done = true;
        }
        Ok(())
    }

    fn keep_rows(&mut self, kept: &[usize]) {
        self.stats.remap(kept, 0);
    }

    fn save(&self) -> DensityState {
        DensityState::Adc {
            stats: self.stats.clone(),
            opacity_reset_done: self.opacity_reset_done,
        }
    }

    fn restore(&mut self, saved: DensityState) {
        if let DensityState::Adc {
            stats,
            opacity_reset_done,
        } = saved
        {
            self.stats = stats;
            self.opacity_reset_done = opacity_reset_done;
        }
    }
}

/// 3DGS as MCMC as a [`DensityStrategy`] (see the module docs): position noise every step
/// ([`mcmc::perturb_positions`]); every `densify_every` steps in `(densify_from, densify_until)`,
/// non-finite splats dropped, dead splats relocated and the count grown by `mcmc_growth` up to the
/// hard cap `max_splats` ([`mcmc::relocate_and_grow`]). No gradient statistics, no opacity reset: it
/// carries no state from step to step.
#[derive(Debug)]
pub struct Mcmc<'a> {
    params: &'a TrainParams,
    scale: SceneScale,
}

impl<'a> Mcmc<'a> {
    /// The strategy of `params` in a scene of `scale`.
    pub fn new(params: &'a TrainParams, scale: SceneScale) -> Self {
        Self { params, scale }
    }
}

impl DensityStrategy for Mcmc<'_> {
    fn observe(&mut self, _step: usize, _out: &StepOutput) {}

    fn refine(
        &mut self,
        store: &mut ParamStore,
        rng: &mut TrainRng,
        step: usize,
    ) -> crate::Result<()> {
        mcmc::perturb_positions(store, self.params, self.scale.extent, step)?;
        let p = self.params;
        if !(step < p.densify_until
            && step > p.densify_from
            && step.is_multiple_of(p.densify_every))
        {
            return Ok(());
        }
        let done = store.with_host(|g, adam| {
            prune_non_finite(g, adam, self, rng);
            mcmc::relocate_and_grow(g, adam, p.max_splats, p.mcmc_growth, rng)
        })?;
        tracing::debug!(
            step,
            relocated = done.relocated,
            added = done.added,
            splats = store.len(),
            "train: mcmc refine"
        );
        Ok(())
    }

    fn keep_rows(&mut self, _kept: &[usize]) {}

    fn save(&self) -> DensityState {
        DensityState::Mcmc
    }

    fn restore(&mut self, _saved: DensityState) {}
}
