//! The training loop as parts (Brush's `SplatTrainer`, `crates/brush-train/src/train.rs`):
//! [`LoopState`], everything the loop carries from one step to the next, mutated in place and
//! saved and restored whole by a checkpoint; and `Trainer`, the loop itself, which per step
//! draws a view ([`ViewSampler`]), makes the step's target (random background), runs the
//! optimisation step on the [`ParamStore`], hands the result to the [`DensityStrategy`] and
//! records the curves.
//!
//! # Determinism
//! The run's one counted random stream lives in the [`LoopState`] ([`LoopState::rng`]): view
//! order, random backgrounds and densification draw from it in that order every step, so a state
//! restored from a checkpoint continues exactly where the uninterrupted run would be.

use std::time::Instant;

use kiln_kernels::{RenderOptions, Renderer};
use rand::Rng;

use super::checkpoint::Checkpointer;
pub use super::loop_state::{Curves, LoopState};
use super::rng::TrainRng;
use super::store::{ParamStore, StepInput, Target};
use super::strategy::DensityStrategy;
use super::views::{ViewCache, ViewPixels};
use super::{STAGE, TrainParams, TrainView, VANISHED, eval};

/// The views an attempt trains on, with the cache their pixels go through, and the held-out
/// views the PSNR curve is measured on.
pub(super) struct Views<'a> {
    /// Training views, sorted by name (indices are [`ViewSampler`]'s).
    pub train: &'a [TrainView],
    /// Held-out views (the training views when nothing is held out).
    pub test: &'a [TrainView],
    /// The bounded cache of the training views' pixels.
    pub cache: &'a mut ViewCache,
}

/// The training loop of one attempt: the run's constants and scratch space (see the module
/// docs). [`Trainer::run`] steps a [`LoopState`] to the end of the run.
pub(super) struct Trainer<'a> {
    /// The rasterizer's device (the parameters live on it, see [`ParamStore`]).
    pub renderer: &'a Renderer,
    /// The recipe.
    pub params: &'a TrainParams,
    /// What the steps draw from.
    pub views: Views<'a>,
    /// Scene extent, metres (scales the means' learning rate).
    pub extent: f32,
    /// The run's render options (the background changes per step with `random_background`).
    pub options: RenderOptions,
    /// Called after every step with `(step, total, loss)`.
    pub progress: &'a dyn Fn(usize, usize, f64),
    /// Checkpoints, when the run keeps them.
    pub checkpointer: Option<&'a Checkpointer>,
    /// Reused across steps: the target composited over a random background.
    pub step_target: Vec<f32>,
}

/// What one step leaves for its bookkeeping.
struct StepRecord {
    /// Photometric loss of the step's render.
    loss: f64,
    /// The SH degree it rendered with.
    sh_degree: u32,
    /// The options it rendered with (this step's background).
    options: RenderOptions,
}

impl Trainer<'_> {
    /// Runs steps `state.step + 1 ..= params.steps` on `store` with `strategy`: after each, the
    /// curves, progress, log and (when due or asked to stop) a checkpoint.
    ///
    /// # Errors
    /// [`crate::Error::Numeric`] when the loss becomes non-finite or every splat vanished;
    /// [`crate::Error::Interrupted`] when stopped (a checkpoint was written); view loading,
    /// rasterizer, device and checkpoint-writing errors.
    pub fn run(
        &mut self,
        store: &mut ParamStore,
        strategy: &mut dyn DensityStrategy,
        state: &mut LoopState,
    ) -> crate::Result<()> {
        let total = self.params.steps;
        let mut log = StepLog::new(state.step);
        // The loop's seconds: those before this call (a resumed run's first part) and this one's.
        let (before_s, started) = (state.train_s, Instant::now());
        while state.step < total {
            let record = self.step(store, strategy, state)?;
            self.record(store, state, &record)?;
            (self.progress)(state.step, total, record.loss);
            log.after_step(
                state.step,
                total,
                &record,
                store.len(),
                self.params.log_every,
            );
            state.train_s = before_s + started.elapsed().as_secs_f64();
            if let Some(checkpointer) = self.checkpointer {
                checkpointer.after_step(state, total, store, strategy)?;
            }
        }
        state.train_s = before_s + started.elapsed().as_secs_f64();
        Ok(())
    }

    /// Step `state.step + 1`: draw a view, drop non-finite splats, render, loss, backward and
    /// Adam on `store`, then `strategy`'s observation and refinement.
    fn step(
        &mut self,
        store: &mut ParamStore,
        strategy: &mut dyn DensityStrategy,
        state: &mut LoopState,
    ) -> crate::Result<StepRecord> {
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let clock = Instant::now();
        let (params, step) = (self.params, state.step + 1);
        let sh_degree = sh_degree_at(params, step);
        let vi = state.sampler.next(&mut state.rng);
        let view = &self.views.train[vi];
        let pixels = self.views.cache.get(vi, view)?;
        keep_finite(store, strategy, &mut state.rng, step)?;
        let (options, target_kind) = step_background(
            params,
            self.options,
            &pixels,
            &mut self.step_target,
            &mut state.rng,
        );
        let target = match target_kind {
            Target::ThisStep => &self.step_target,
            Target::ViewImage => &pixels.image,
        };
        let input = StepInput {
            camera: &view.camera,
            view_index: vi,
            target,
            target_kind,
            weights: pixels.loss_weights.as_deref(),
            sh_degree,
            options: &options,
            lr_means: params.lr_means(step, self.extent as f64),
            step,
        };
        let out = store.step(self.renderer, params, &input)?;
        if !out.loss.is_finite() {
            return Err(crate::Error::Numeric {
                stage: STAGE,
                step,
                problem: format!("loss is {} on view `{}`", out.loss, view.name),
            });
        }
        state.timing_sum.add(&out.timings);
        strategy.observe(step, &out);
        let optimizer_clock = Instant::now();
        strategy.refine(store, &mut state.rng, step)?;
        state.timing_sum.optimizer += ms(optimizer_clock);
        state.timing_sum.total += ms(clock);
        state.step = step;
        Ok(StepRecord {
            loss: out.loss,
            sh_degree,
            options,
        })
    }

    /// The curves after step `state.step`: its loss (a sample every `steps / 200` steps and at
    /// the end, with the splat count), and the held-out PSNR at the evaluation steps, rendered
    /// with the step's SH degree and options (with `random_background`, this step's colour).
    /// Read-only for training: the PSNR renders a host copy and draws nothing from the stream.
    fn record(
        &self,
        store: &ParamStore,
        state: &mut LoopState,
        record: &StepRecord,
    ) -> crate::Result<()> {
        let (params, step) = (self.params, state.step);
        state.curves.add_loss(record.loss);
        if step.is_multiple_of((params.steps / 200).max(1)) || step == params.steps {
            state.curves.sample(step, store.len());
        }
        let psnr_every = params
            .steps
            .div_ceil(params.psnr_curve_evaluations + 1)
            .max(1);
        if params.psnr_curve_evaluations > 0
            && step.is_multiple_of(psnr_every)
            && step < params.steps
        {
            let db = eval::held_out_psnr(
                self.renderer,
                &store.to_host()?,
                record.sh_degree,
                self.views.test,
                &record.options,
            )?;
            state.curves.psnr.push((step, db));
        }
        Ok(())
    }
}

/// The active SH degree at `step`: one band more every `sh_increase_every` steps, up to
/// `sh_degree` (all bands from the start when `sh_increase_every` = 0).
fn sh_degree_at(params: &TrainParams, step: usize) -> u32 {
    match params.sh_increase_every {
        0 => params.sh_degree,
        every => params.sh_degree.min((step / every) as u32),
    }
}

/// Drops splats with non-finite parameters before step `step` renders them.
///
/// # Errors
/// [`crate::Error::Numeric`] when no splat is left; device failures.
fn keep_finite(
    store: &mut ParamStore,
    strategy: &mut dyn DensityStrategy,
    rng: &mut TrainRng,
    step: usize,
) -> crate::Result<()> {
    if !store.all_finite()? {
        store.with_host(|g, adam| super::strategy::prune_non_finite(g, adam, strategy, rng))?;
    }
    if store.is_empty() {
        return Err(crate::Error::Numeric {
            stage: STAGE,
            step,
            problem: format!("{VANISHED}: all were pruned (parameters non-finite or transparent)"),
        });
    }
    Ok(())
}

/// The step's render options and target: with `random_background` (gsplat `random_bkgd`), a
/// fresh background colour from `rng` each step, and a view with transparency gets its target
/// composited over it into `step_target`; else `options` and the view's image.
fn step_background(
    params: &TrainParams,
    options: RenderOptions,
    pixels: &ViewPixels,
    step_target: &mut Vec<f32>,
    rng: &mut TrainRng,
) -> (RenderOptions, Target) {
    if !params.random_background {
        return (options, Target::ViewImage);
    }
    let bg: [f32; 3] = std::array::from_fn(|_| rng.random::<f32>());
    let target_kind = match &pixels.transparency {
        Some(t) => {
            composite_target(step_target, &pixels.image, t, bg, params.background);
            Target::ThisStep
        }
        None => Target::ViewImage,
    };
    let options = RenderOptions {
        background: bg,
        ..options
    };
    (options, target_kind)
}

/// The loop's progress log: every `log_every` steps and at the last, with the steps per second
/// since the previous line.
struct StepLog {
    mark: Instant,
    mark_step: usize,
}

impl StepLog {
    fn new(step: usize) -> Self {
        Self {
            mark: Instant::now(),
            mark_step: step,
        }
    }

    fn after_step(
        &mut self,
        step: usize,
        total: usize,
        record: &StepRecord,
        splats: usize,
        log_every: usize,
    ) {
        if !(step.is_multiple_of(log_every.max(1)) || step == total) {
            return;
        }
        let dt = self.mark.elapsed().as_secs_f64().max(1e-9);
        tracing::info!(
            step,
            total,
            loss = record.loss,
            splats,
            sh_degree = record.sh_degree,
            steps_per_s = (step - self.mark_step) as f64 / dt,
            "train"
        );
        (self.mark, self.mark_step) = (Instant::now(), step);
    }
}

/// `out = image + transparency·(bg − image_bg)` per pixel and channel: `image` (`[H, W, 3]`,
/// composited over `image_bg`) re-composited over `bg`; `transparency` is `[H, W]`.
fn composite_target(
    out: &mut Vec<f32>,
    image: &[f32],
    transparency: &[f32],
    bg: [f32; 3],
    image_bg: [f32; 3],
) {
    let shift: [f32; 3] = std::array::from_fn(|c| bg[c] - image_bg[c]);
    out.clear();
    out.extend(
        image
            .chunks_exact(3)
            .zip(transparency)
            .flat_map(|(px, &t)| std::array::from_fn::<f32, 3, _>(|c| px[c] + t * shift[c])),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_recomposited_over_the_random_background() {
        // Pixel 0 opaque, pixel 1 half transparent, pixel 2 fully: image over black.
        let image = [0.2, 0.4, 0.6, 0.1, 0.1, 0.1, 0.0, 0.0, 0.0];
        let mut out = Vec::new();
        composite_target(
            &mut out,
            &image,
            &[0.0, 0.5, 1.0],
            [1.0, 0.5, 0.0],
            [0.0; 3],
        );
        let want = [0.2, 0.4, 0.6, 0.6, 0.35, 0.1, 1.0, 0.5, 0.0];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
    }
}
