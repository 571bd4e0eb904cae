//! Which view each optimisation step draws: [`ViewSampler`], used by the training loop and by the
//! splat tiler's level refinement (`tile::splat::refine`), so view sampling exists once.
//!
//! Epochs without replacement: every view is drawn once per epoch, in a fresh random order per
//! epoch (INRIA `train.py` pops a random index from the list of views left; gsplat's data loader
//! and Brush shuffle each epoch). Source of the pattern: Brush's `SceneLoader`
//! (`crates/brush-dataset/src/scene_loader.rs`, `run_loader`: shuffle `0..V` when the list is
//! empty, pop from the back).
//!
//! # Determinism
//! The only randomness is one `SliceRandom::shuffle` of `0..V` per epoch, drawn from the caller's
//! stream when the epoch starts; draws within an epoch take nothing from it. The sampler is
//! serialisable, so a checkpoint restores the epoch in progress exactly (with the stream's
//! position, [`super::rng::TrainRng`]).

use rand::Rng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

/// Draws view indices `0..views` in epochs of random order (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewSampler {
    /// Number of views V drawn from.
    views: usize,
    /// Views not yet drawn in the current epoch; the next one is the last element.
    remaining: Vec<usize>,
}

impl ViewSampler {
    /// A sampler over `views` views (V ≥ 1 for [`ViewSampler::next`] to mean anything), at the
    /// start of its first epoch: the first draw shuffles.
    pub fn new(views: usize) -> Self {
        Self {
            views,
            remaining: Vec::new(),
        }
    }

    /// Number of views V drawn from.
    pub fn views(&self) -> usize {
        self.views
    }

    /// The next view index, in `0..V`: the next of this epoch's order, after shuffling `0..V`
    /// with `rng` when a new epoch starts. With V = 0 it returns 0 and draws nothing.
    pub fn next(&mut self, rng: &mut impl Rng) -> usize {
        if self.remaining.is_empty() {
            self.remaining = (0..self.views).collect();
            self.remaining.shuffle(rng);
        }
        self.remaining.pop().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn every_view_is_drawn_once_per_epoch() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut sampler = ViewSampler::new(5);
        for _ in 0..4 {
            let mut epoch: Vec<usize> = (0..5).map(|_| sampler.next(&mut rng)).collect();
            epoch.sort_unstable();
            assert_eq!(epoch, vec![0, 1, 2, 3, 4]);
        }
    }

    /// The draws are those of the loop the sampler replaced: shuffle `0..V` when the list of
    /// views left is empty, then pop from the back, from the same stream.
    #[test]
    fn draws_follow_a_shuffled_epoch_popped_from_the_back() {
        let (mut a, mut b) = (SmallRng::seed_from_u64(9), SmallRng::seed_from_u64(9));
        let mut sampler = ViewSampler::new(7);
        let mut order: Vec<usize> = Vec::new();
        for _ in 0..30 {
            if order.is_empty() {
                order = (0..7).collect();
                order.shuffle(&mut b);
            }
            assert_eq!(sampler.next(&mut a), order.pop().unwrap());
        }
        assert_eq!(a.random::<u64>(), b.random::<u64>());
    }

    /// Mid-epoch, a sampler read back from JSON continues the same epoch.
    #[test]
    fn a_saved_sampler_continues_its_epoch() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut sampler = ViewSampler::new(4);
        sampler.next(&mut rng);
        let saved: ViewSampler =
            serde_json::from_slice(&serde_json::to_vec(&sampler).unwrap()).unwrap();
        assert_eq!(saved, sampler);
        let mut rng2 = rng.clone();
        let (mut s1, mut s2) = (sampler, saved);
        for _ in 0..9 {
            assert_eq!(s1.next(&mut rng), s2.next(&mut rng2));
        }
    }

    #[test]
    fn no_views_draw_index_zero_and_nothing_from_the_stream() {
        let mut rng = SmallRng::seed_from_u64(5);
        let before = rng.clone().random::<u64>();
        assert_eq!(ViewSampler::new(0).next(&mut rng), 0);
        assert_eq!(rng.random::<u64>(), before);
    }
}
