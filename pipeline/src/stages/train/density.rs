//! Adaptive density control: clone, split, prune and opacity reset.
//!
//! Source: Kerbl et al., "3D Gaussian Splatting for Real-Time Radiance Field Rendering",
//! SIGGRAPH 2023, §5.2, and INRIA `scene/gaussian_model.py` (`densify_and_clone`,
//! `densify_and_split`, `prune_points`, `reset_opacity`):
//! - statistics: for every render in which a splat is visible (radius > 0) add
//!   ‖∂L/∂means2d‖ (NDC units) to its accumulator and 1 to its count; keep its max radius;
//! - a splat whose mean gradient ≥ `densify_grad_threshold` is *cloned* (an exact copy appended)
//!   when its largest scale ≤ [`PERCENT_DENSE`]·extent, else *split*: replaced by 2 samples drawn
//!   from its own Gaussian, with scales divided by [`SPLIT_SCALE_DIVISOR`];
//! - *pruned*: opacity < [`MIN_OPACITY`], non-finite parameters, and, once the first opacity reset
//!   has happened, largest scale > [`MAX_WORLD_SIZE`]·extent or max radius >
//!   [`MAX_SCREEN_RADIUS_FRACTION`]·(longest image side);
//! - new rows (clones' copies, split children) start with zero Adam moments, kept rows keep theirs,
//!   statistics restart from zero after each densification (as INRIA's `densification_postfix`).
//!
//! Differences from INRIA, on purpose: candidates for clone/split are taken from splats that
//! survive pruning (INRIA clones and then prunes both copies, same result); when `max_splats`
//! would be exceeded, the candidates with the largest mean gradient win.
//!
//! The decisions ([`plan_densify`]) are made on host copies, where the statistics live anyway; the
//! row surgery ([`apply_plan`]) is burn `select` / `cat` on the parameter and moment tensors.
//! [`Adc`] is the schedule around them, the training loop's [`DensityStrategy`] for the `inria`
//! preset.

use burn::tensor::{Int, Tensor, TensorData};
use kiln_formats::splats::GaussianSplats;
use rand_distr::StandardNormal;

use super::gaussians::{Gaussians, GaussiansAdam};
use super::op::InnerBackend;

type B = InnerBackend;

/// Splats with opacity below this are pruned (INRIA `min_opacity` 0.005).
pub const MIN_OPACITY: f32 = 0.005;
/// Clone (not split) when the largest scale ≤ this fraction of the scene extent (INRIA
/// `percent_dense` 0.01).
pub const PERCENT_DENSE: f32 = 0.01;
/// Split children get scales / this (INRIA `0.8 · N` with N = 2 children).
pub const SPLIT_SCALE_DIVISOR: f32 = 1.6;
/// Children per split (INRIA N = 2).
pub const SPLIT_CHILDREN: usize = 2;
/// After the first opacity reset, prune splats larger than this fraction of the extent in world
/// space (INRIA `0.1 * extent`).
pub const MAX_WORLD_SIZE: f32 = 0.1;
/// After the first opacity reset, prune splats whose max screen radius exceeded this fraction of
/// the longest image side (gsplat `DefaultStrategy.prune_scale2d = 0.15`). INRIA's fixed
/// `size_threshold = 20` pixels is tuned for ~1 MP images: on the small images CPU training uses
/// (e.g. 270 px, narrow lenses), a smooth surface's splats legitimately exceed 20 px and the
/// fixed threshold pruned nearly all of them after the first reset (Mary Rose, 10,010 → 201).
pub const MAX_SCREEN_RADIUS_FRACTION: f32 = 0.15;
/// Opacity reset target: opacity = min(opacity, 0.01) (INRIA `reset_opacity`).
pub const RESET_OPACITY: f32 = 0.01;

/// Per-splat densification statistics, `[N]` each.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DensityStats {
    /// Σ ‖∂L/∂means2d‖ (NDC units) over renders where the splat was visible.
    pub grad_accum: Vec<f32>,
    /// Number of renders where the splat was visible (radius > 0).
    pub visible_count: Vec<u32>,
    /// Largest screen radius seen, pixels.
    pub max_radius_px: Vec<f32>,
}

impl DensityStats {
    /// Zeroed statistics for `n` splats.
    pub fn new(n: usize) -> Self {
        Self {
            grad_accum: vec![0.0; n],
            visible_count: vec![0; n],
            max_radius_px: vec![0.0; n],
        }
    }

    /// Add one render's statistics. `means2d_grad_norm`, `radii_px`: `[N]`; non-finite gradient
    /// norms count as 0. Slices of the wrong length are ignored (stats are then stale, not wrong).
    pub fn accumulate(&mut self, means2d_grad_norm: &[f32], radii_px: &[f32]) {
        let n = self.grad_accum.len();
        if means2d_grad_norm.len() != n || radii_px.len() != n {
            return;
        }
        for i in 0..n {
            if radii_px[i] > 0.0 {
                let g = means2d_grad_norm[i];
                self.grad_accum[i] += if g.is_finite() { g } else { 0.0 };
                self.visible_count[i] += 1;
                self.max_radius_px[i] = self.max_radius_px[i].max(radii_px[i]);
            }
        }
    }

    /// Mean gradient of splat `i` over the renders where it was visible (0 if never visible).
    pub fn mean_grad(&self, i: usize) -> f32 {
        match self.visible_count[i] {
            0 => 0.0,
            c => self.grad_accum[i] / c as f32,
        }
    }

    /// Keep rows `keep` (in order) and append `appended` zeroed rows.
    pub fn remap(&mut self, keep: &[usize], appended: usize) {
        let pick = |v: &Vec<f32>| {
            keep.iter()
                .map(|&i| v[i])
                .chain(std::iter::repeat_n(0.0, appended))
                .collect()
        };
        self.grad_accum = pick(&self.grad_accum);
        self.max_radius_px = pick(&self.max_radius_px);
        self.visible_count = keep
            .iter()
            .map(|&i| self.visible_count[i])
            .chain(std::iter::repeat_n(0, appended))
            .collect();
    }
}

/// Inputs of [`plan_densify`] besides the splats and statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DensifyConfig {
    /// Mean ‖∂L/∂means2d‖ (NDC units) at or above which a splat is cloned or split.
    pub grad_threshold: f32,
    /// Scene extent, metres (INRIA `cameras_extent`).
    pub scene_extent: f32,
    /// Also prune by world size and screen radius (true after the first opacity reset).
    pub prune_large: bool,
    /// Longest side of the training images, pixels (screen-radius pruning is relative to it).
    pub image_max_side: u32,
    /// Hard cap on N after densification.
    pub max_splats: usize,
    /// Clone/split at all (false: prune only).
    pub grow: bool,
}

/// Which rows survive, which are cloned and which are split; indices into the current splats.
///
/// The new layout is `[keep…, copies of clone…, children of split (first child of each, then the
/// second)]`; split originals are not in `keep`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DensifyPlan {
    /// Rows kept unchanged (ascending; includes the originals of clones).
    pub keep: Vec<usize>,
    /// Rows appended again as exact copies (zero moments).
    pub clone: Vec<usize>,
    /// Rows replaced by [`SPLIT_CHILDREN`] samples each.
    pub split: Vec<usize>,
}

impl DensifyPlan {
    /// N after applying the plan.
    pub fn new_len(&self) -> usize {
        self.keep.len() + self.clone.len() + SPLIT_CHILDREN * self.split.len()
    }

    /// Rows removed outright (not counting split originals).
    pub fn pruned(&self, old_len: usize) -> usize {
        old_len - self.keep.len() - self.split.len()
    }

    /// True when the plan changes nothing.
    pub fn is_identity(&self, old_len: usize) -> bool {
        self.clone.is_empty() && self.split.is_empty() && self.keep.len() == old_len
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// True when every parameter of splat `i` is finite.
pub fn row_is_finite(s: &GaussianSplats, i: usize) -> bool {
    let k3 = s.sh_coeffs_per_channel() * 3;
    s.means[3 * i..3 * i + 3].iter().all(|v| v.is_finite())
        && s.log_scales[3 * i..3 * i + 3].iter().all(|v| v.is_finite())
        && s.rotations[4 * i..4 * i + 4].iter().all(|v| v.is_finite())
        && s.logit_opacities[i].is_finite()
        && s.sh_coeffs[k3 * i..k3 * (i + 1)]
            .iter()
            .all(|v| v.is_finite())
}

/// A plan that only removes splats with non-finite parameters.
pub fn plan_prune_non_finite(s: &GaussianSplats) -> DensifyPlan {
    DensifyPlan {
        keep: (0..s.len()).filter(|&i| row_is_finite(s, i)).collect(),
        ..Default::default()
    }
}

/// Decide clone / split / prune for every splat (Kerbl et al. 2023 §5.2; see the module docs).
///
/// - `s`: current splats (host copy); `stats`: their statistics (same N).
///
/// # Panics
/// When `stats` does not have `s.len()` rows.
// splat i indexes its parameters, statistics and keep flag together.
#[allow(clippy::needless_range_loop)]
pub fn plan_densify(s: &GaussianSplats, stats: &DensityStats, cfg: &DensifyConfig) -> DensifyPlan {
    let n = s.len();
    assert_eq!(
        stats.grad_accum.len(),
        n,
        "density stats out of step with the splats"
    );
    let mut keep_flags = vec![true; n];
    let mut candidates: Vec<(usize, f32, bool)> = Vec::new(); // (row, mean grad, is_split)
    for i in 0..n {
        let max_log_scale = s.log_scales[3 * i..3 * i + 3]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let max_scale = max_log_scale.exp();
        let opacity = sigmoid(s.logit_opacities[i]);
        let prune = !row_is_finite(s, i)
            || opacity < MIN_OPACITY
            || (cfg.prune_large
                && (max_scale > MAX_WORLD_SIZE * cfg.scene_extent
                    || stats.max_radius_px[i]
                        > MAX_SCREEN_RADIUS_FRACTION * cfg.image_max_side as f32));
        if prune {
            keep_flags[i] = false;
            continue;
        }
        let g = stats.mean_grad(i);
        if cfg.grow && g >= cfg.grad_threshold {
            candidates.push((i, g, max_scale > PERCENT_DENSE * cfg.scene_extent));
        }
    }
    let survivors = keep_flags.iter().filter(|&&k| k).count();
    // Every candidate adds one row net (a copy, or two children replacing one original).
    let budget = cfg.max_splats.saturating_sub(survivors);
    if candidates.len() > budget {
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        candidates.truncate(budget);
        candidates.sort_by_key(|c| c.0);
    }
    let mut plan = DensifyPlan::default();
    for &(i, _, is_split) in &candidates {
        if is_split {
            keep_flags[i] = false;
            plan.split.push(i);
        } else {
            plan.clone.push(i);
        }
    }
    plan.keep = (0..n).filter(|&i| keep_flags[i]).collect();
    plan
}

/// Rotation matrix (row-major) of a wxyz quaternion, normalised first; identity if degenerate.
pub(super) fn rotation_matrix(q: &[f32]) -> [[f32; 3]; 3] {
    let norm = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    if !(norm > 0.0 && norm.is_finite()) {
        return [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    }
    let (w, x, y, z) = (q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm);
    [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - w * z),
            2.0 * (x * z + w * y),
        ],
        [
            2.0 * (x * y + w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - w * x),
        ],
        [
            2.0 * (x * z - w * y),
            2.0 * (y * z + w * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ]
}

fn index_tensor(idx: impl IntoIterator<Item = usize>) -> Tensor<B, 1, Int> {
    let v: Vec<i64> = idx.into_iter().map(|i| i as i64).collect();
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), &Default::default())
}

/// Apply `plan` to the parameter tensors and their Adam moments.
///
/// - `host`: host copy of `g` (used for split sampling); `rng`: draws the split children (three
///   standard normal samples per child, nothing for a plan without splits).
///
/// Returns nothing; afterwards `g` and `adam` have `plan.new_len()` rows. The caller keeps
/// per-splat statistics in step ([`DensityStats::remap`], or fresh ones after a densification).
pub fn apply_plan(
    plan: &DensifyPlan,
    host: &GaussianSplats,
    g: &mut Gaussians,
    adam: &mut GaussiansAdam,
    rng: &mut impl rand::Rng,
) {
    let old_n = g.len();
    if plan.is_identity(old_n) {
        return;
    }
    let kept_and_cloned: Vec<usize> = plan.keep.iter().chain(&plan.clone).copied().collect();
    let split_rows: Vec<usize> = (0..SPLIT_CHILDREN)
        .flat_map(|_| plan.split.iter().copied())
        .collect();
    let idx_base = index_tensor(kept_and_cloned.iter().copied());
    let idx_all = index_tensor(kept_and_cloned.iter().chain(&split_rows).copied());
    let appended = plan.clone.len() + split_rows.len();

    // Split children: μ + R·(σ ⊙ n), n ~ N(0, I); scales σ / 1.6 (INRIA densify_and_split).
    let mut child_means = Vec::with_capacity(3 * split_rows.len());
    let mut child_log_scales = Vec::with_capacity(3 * split_rows.len());
    let ln_div = SPLIT_SCALE_DIVISOR.ln();
    for &i in &split_rows {
        let r = rotation_matrix(&host.rotations[4 * i..4 * i + 4]);
        let sigma: [f32; 3] = std::array::from_fn(|a| host.log_scales[3 * i + a].exp());
        let noise: [f32; 3] = std::array::from_fn(|_| rng.sample::<f32, _>(StandardNormal));
        for (row, r_row) in r.iter().enumerate() {
            let offset: f32 = (0..3).map(|a| r_row[a] * sigma[a] * noise[a]).sum();
            child_means.push(host.means[3 * i + row] + offset);
        }
        for a in 0..3 {
            child_log_scales.push(host.log_scales[3 * i + a] - ln_div);
        }
    }
    let dev = Default::default();
    let s = split_rows.len();
    let with_children = |base: Tensor<B, 2>, children: Vec<f32>| {
        if s == 0 {
            base
        } else {
            Tensor::cat(
                vec![
                    base,
                    Tensor::from_data(TensorData::new(children, [s, 3]), &dev),
                ],
                0,
            )
        }
    };
    g.means = with_children(g.means.clone().select(0, idx_base.clone()), child_means);
    g.log_scales = with_children(g.log_scales.clone().select(0, idx_base), child_log_scales);
    g.rotations = g.rotations.clone().select(0, idx_all.clone());
    g.logit_opacities = g.logit_opacities.clone().select(0, idx_all.clone());
    g.sh_coeffs = g.sh_coeffs.clone().select(0, idx_all);

    adam.means.remap(&plan.keep, appended);
    adam.log_scales.remap(&plan.keep, appended);
    adam.rotations.remap(&plan.keep, appended);
    adam.logit_opacities.remap(&plan.keep, appended);
    adam.sh_coeffs.remap(&plan.keep, appended);
}

/// INRIA opacity reset: logit_opacities ← min(logit_opacities, logit(0.01)); the opacity moments
/// restart from zero.
pub fn reset_opacities(g: &mut Gaussians, adam: &mut GaussiansAdam) {
    let cap = (RESET_OPACITY / (1.0 - RESET_OPACITY)).ln();
    g.logit_opacities = g.logit_opacities.clone().clamp_max(cap);
    adam.logit_opacities.reset();
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    /// Four splats: 0 small & high grad (clone), 1 big & high grad (split), 2 transparent (prune),
    /// 3 low grad (keep).
    fn scene() -> (GaussianSplats, DensityStats) {
        let logit = |o: f32| (o / (1.0 - o)).ln();
        let s = GaussianSplats {
            means: vec![0.0; 12],
            log_scales: vec![
                0.001f32.ln(),
                0.001f32.ln(),
                0.001f32.ln(),
                0.5f32.ln(),
                0.05f32.ln(),
                0.05f32.ln(),
                0.001f32.ln(),
                0.001f32.ln(),
                0.001f32.ln(),
                0.001f32.ln(),
                0.001f32.ln(),
                0.001f32.ln(),
            ],
            rotations: [1.0, 0.0, 0.0, 0.0].repeat(4),
            logit_opacities: vec![logit(0.5), logit(0.5), logit(0.001), logit(0.5)],
            sh_coeffs: (0..12).map(|v| v as f32).collect(),
            sh_degree: 0,
        };
        let mut st = DensityStats::new(4);
        st.accumulate(&[1e-3, 1e-3, 1e-3, 1e-5], &[2.0, 2.0, 2.0, 2.0]);
        (s, st)
    }

    fn cfg() -> DensifyConfig {
        DensifyConfig {
            grad_threshold: 2e-4,
            scene_extent: 1.0,
            prune_large: false,
            image_max_side: 100,
            max_splats: 100,
            grow: true,
        }
    }

    #[test]
    fn small_high_gradient_splats_clone_big_ones_split_transparent_ones_go() {
        let (s, st) = scene();
        let plan = plan_densify(&s, &st, &cfg());
        assert_eq!(plan.keep, vec![0, 3]);
        assert_eq!(plan.clone, vec![0]);
        assert_eq!(plan.split, vec![1]);
        assert_eq!(plan.pruned(4), 1);
        assert_eq!(plan.new_len(), 2 + 1 + 2);
    }

    #[test]
    fn large_splats_are_pruned_only_after_the_first_reset() {
        let (s, st) = scene();
        let plan = plan_densify(
            &s,
            &st,
            &DensifyConfig {
                prune_large: true,
                ..cfg()
            },
        );
        // splat 1 has a 0.5 m axis > 0.1 · extent: pruned instead of split.
        assert_eq!(plan.keep, vec![0, 3]);
        assert!(plan.split.is_empty());
    }

    #[test]
    fn screen_radius_pruning_is_relative_to_the_image_size() {
        let (s, mut st) = scene();
        // Splat 3 reached a 30 px radius: over 0.15 · 100 px, under 0.15 · 400 px.
        st.max_radius_px[3] = 30.0;
        let after_reset = |image_max_side| DensifyConfig {
            prune_large: true,
            image_max_side,
            ..cfg()
        };
        assert_eq!(plan_densify(&s, &st, &after_reset(100)).keep, vec![0]);
        assert_eq!(plan_densify(&s, &st, &after_reset(400)).keep, vec![0, 3]);
    }

    #[test]
    fn max_splats_caps_growth_by_largest_gradient() {
        let (s, mut st) = scene();
        st.grad_accum[1] = 5e-3;
        let plan = plan_densify(
            &s,
            &st,
            &DensifyConfig {
                max_splats: 4,
                ..cfg()
            },
        );
        // 3 survivors, budget 1: the split (larger gradient) wins.
        assert_eq!(plan.new_len(), 4);
        assert_eq!(plan.split, vec![1]);
        assert!(plan.clone.is_empty());
    }

    #[test]
    fn apply_plan_resizes_params_and_moments() {
        let (s, st) = scene();
        let plan = plan_densify(&s, &st, &cfg());
        let mut g = Gaussians::from_host(&s);
        let mut adam = GaussiansAdam::new(&g);
        adam.logit_opacities.m = vec![1.0; g.len()];
        let mut rng = SmallRng::seed_from_u64(1);
        apply_plan(&plan, &s, &mut g, &mut adam, &mut rng);
        assert_eq!(g.len(), 5);
        assert_eq!(g.means.dims(), [5, 3]);
        assert_eq!(g.sh_coeffs.dims(), [5, 1, 3]);
        let host = g.to_host();
        // rows: keep 0, keep 3, copy of 0, child of 1, child of 1
        assert_eq!(host.sh_coeffs[3..6], [9.0, 10.0, 11.0]);
        assert_eq!(host.sh_coeffs[6..9], [0.0, 1.0, 2.0]);
        assert_eq!(host.sh_coeffs[9..12], [3.0, 4.0, 5.0]);
        assert!((host.log_scales[9] - (0.5f32 / 1.6).ln()).abs() < 1e-5);
        assert_eq!(adam.logit_opacities.m, vec![1.0, 1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn non_finite_rows_are_pruned() {
        let (mut s, _) = scene();
        s.means[4] = f32::NAN;
        s.sh_coeffs[11] = f32::INFINITY;
        assert_eq!(plan_prune_non_finite(&s).keep, vec![0, 2]);
    }

    #[test]
    fn opacity_reset_caps_at_one_percent() {
        let (s, _) = scene();
        let mut g = Gaussians::from_host(&s);
        let mut adam = GaussiansAdam::new(&g);
        reset_opacities(&mut g, &mut adam);
        let o: Vec<f32> = g
            .to_host()
            .logit_opacities
            .iter()
            .map(|&l| sigmoid(l))
            .collect();
        assert!((o[0] - 0.01).abs() < 1e-6 && (o[2] - 0.001).abs() < 1e-6);
    }
}
