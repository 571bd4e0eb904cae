//! [`LoopState`]: everything the training loop carries from one step to the next, mutated in
//! place by the loop (`trainer.rs`) and saved and restored whole by a checkpoint
//! (`checkpoint.rs`); with the report's [`Curves`].

use serde::{Deserialize, Serialize};

use super::StepTimings;
use super::rng::TrainRng;
use super::sampler::ViewSampler;

/// Everything the training loop carries from one step to the next (the parameters, their
/// moments and the density strategy's state aside). The loop mutates one value in place; a
/// checkpoint saves it whole and a resumed run continues from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// Steps completed; the next step is `step + 1`.
    pub step: usize,
    /// The run's random stream (initialisation, view order, backgrounds, densification), saved
    /// as its seed and the draws taken.
    pub rng: TrainRng,
    /// Which view the next step draws.
    pub sampler: ViewSampler,
    /// The report's curves so far.
    pub curves: Curves,
    /// Summed stage times of the steps so far, ms.
    pub timing_sum: StepTimings,
    /// Seconds spent in the training loop so far, over every resume (for steps/s), up to the
    /// end of step `step`.
    pub train_s: f64,
}

impl LoopState {
    /// The state before the first step: `rng` as initialisation left it, `views` training
    /// views to draw from.
    pub fn new(rng: TrainRng, views: usize) -> Self {
        Self {
            step: 0,
            rng,
            sampler: ViewSampler::new(views),
            curves: Curves::default(),
            timing_sum: StepTimings::default(),
            train_s: 0.0,
        }
    }
}

/// The report's curves (`metrics.json`, `loss.svg`), as recorded so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Curves {
    /// `(step, mean photometric loss)` over each sampling window.
    pub loss: Vec<(usize, f64)>,
    /// `(step, splats)` at every `loss` sample.
    pub splat_count: Vec<(usize, usize)>,
    /// `(step, held-out PSNR dB)` at the evaluation steps.
    pub psnr: Vec<(usize, f64)>,
    /// Loss sum and step count of the sampling window in progress.
    pub window: (f64, usize),
    /// Loss of the last step (`None` before the first).
    pub last_loss: Option<f64>,
}

impl Curves {
    /// Adds a step's photometric `loss` to the window in progress.
    pub(super) fn add_loss(&mut self, loss: f64) {
        self.last_loss = Some(loss);
        self.window.0 += loss;
        self.window.1 += 1;
    }

    /// Closes the window (of at least one step) at `step`: records its mean loss and the
    /// `splats` count.
    pub(super) fn sample(&mut self, step: usize, splats: usize) {
        self.loss.push((step, self.window.0 / self.window.1 as f64));
        self.splat_count.push((step, splats));
        self.window = (0.0, 0);
    }
}
