//! The MCMC densification strategy: dead splats are relocated onto live ones, the count grows by a
//! fixed fraction per refinement up to a hard cap, and transparent splats' means get position
//! noise every step.
//!
//! Source: Kheradmand et al., "3D Gaussian Splatting as Markov Chain Monte Carlo", NeurIPS 2024
//! (§4.2 relocation, Eq. 9; §4.3 noise and regularisation), and gsplat's `MCMCStrategy`
//! (`strategy/mcmc.py`, `strategy/ops.py`: `relocate`, `sample_add`, `inject_noise_to_position`):
//! - *relocate*: splats with opacity ≤ [`MIN_OPACITY`] are dead; for each, a live splat is drawn
//!   with probability ∝ opacity (with replacement). A source drawn `c` times ends up as `c + 1`
//!   identical splats whose opacity and scale follow Eq. 9 ([`relocated`]), so that together they
//!   render about as the original did;
//! - *add*: `⌊(1 + growth)·N⌋ − N` more splats (never past the cap), sources drawn from all splats
//!   ∝ opacity, the same Eq. 9 update, copies appended;
//! - *noise*: `means += Σ·(ε ⊙ s(1 − opacity))·noise_lr·lr_means`, ε ~ N(0, I),
//!   s(x) = 1/(1 + e^(−100(x − 0.995))), Σ = R·diag(scale²)·Rᵀ.
//!
//! Moments: sources and their copies restart from zero after a relocation (gsplat zeroes the
//! sources only and leaves the dead rows' stale moments on the copies; a relocated splat is a new
//! splat, so Kiln zeroes both); appended rows start from zero, sources of an *add* keep theirs
//! (as gsplat).
//!
//! Randomness: relocation and add draw from the trainer's counted stream; the per-step noise
//! draws from a stream derived from (seed, step, block) so a resumed run need not replay it and
//! the result does not depend on the thread count.
//!
//! [`Mcmc`] is the schedule around these operations, the training loop's [`DensityStrategy`] for
//! the `mcmc` preset.

use burn::tensor::{Tensor, TensorData};
use kiln_formats::splats::GaussianSplats;
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use rayon::prelude::*;

use super::adam::AdamState;
use super::gaussians::{Gaussians, GaussiansAdam};
use super::op::tensor_to_vec;
use super::params::TrainParams;
use super::store::ParamStore;

/// Splats at or below this opacity are dead and get relocated (gsplat `min_opacity` 0.005).
pub const MIN_OPACITY: f32 = 0.005;
/// Most copies Eq. 9 is evaluated for (gsplat's binomial table holds n < 51); a source drawn more
/// often is treated as 51 copies, which only matters for its opacity and scale, not the count.
pub const MAX_RATIO: usize = 51;
/// Relocated opacities stay below 1 − this (gsplat `eps` = machine ε of f32 before the logit).
const OPACITY_CEILING_EPS: f32 = 1e-6;
/// Splats per noise block: each block has its own derived random stream.
const NOISE_BLOCK: usize = 4096;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

/// Eq. 9 of Kheradmand et al. 2024: `ratio` (≥ 1) copies of a splat with `opacity` o get
/// opacity o' = 1 − (1 − o)^(1/ratio) and scales multiplied by
/// o / Σ_{i=1}^{ratio} Σ_{k=0}^{i−1} C(i−1, k)·(−1)^k·o'^(k+1)/√(k+1).
///
/// Returns `(o', scale factor)`; `ratio` is clamped to `1..=`[`MAX_RATIO`]. Evaluated in f64: the
/// alternating binomial sum cancels badly in f32 for large ratios.
pub fn relocated(opacity: f32, ratio: usize) -> (f32, f32) {
    let n = ratio.clamp(1, MAX_RATIO);
    let o = f64::from(opacity.clamp(0.0, 1.0));
    let o_new = 1.0 - (1.0 - o).powf(1.0 / n as f64);
    let mut denom = 0.0f64;
    for i in 1..=n {
        let mut binom = 1.0f64; // C(i − 1, 0)
        for k in 0..i {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            denom += binom * sign * o_new.powi(k as i32 + 1) / ((k + 1) as f64).sqrt();
            binom = binom * (i - 1 - k) as f64 / (k + 1) as f64;
        }
    }
    let factor = if denom > 0.0 { o / denom } else { 1.0 };
    (o_new as f32, factor as f32)
}

/// What one refinement did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refinement {
    /// Dead splats moved onto live ones.
    pub relocated: usize,
    /// Splats appended.
    pub added: usize,
}

/// Draw `count` rows from `candidates` with probability ∝ opacity (with replacement). `None` when
/// no candidate has a positive, finite opacity.
fn draw_by_opacity(
    opacities: &[f32],
    candidates: &[usize],
    count: usize,
    rng: &mut impl Rng,
) -> Option<Vec<usize>> {
    let weights = candidates.iter().map(|&i| f64::from(opacities[i]).max(0.0));
    let dist = WeightedIndex::new(weights).ok()?;
    Some((0..count).map(|_| candidates[dist.sample(rng)]).collect())
}

/// Apply Eq. 9 to every distinct source in `draws` (each ends up as `1 + times drawn` copies):
/// updates its logit opacity and log scales in `host`.
fn split_sources(host: &mut GaussianSplats, opacities: &[f32], draws: &[usize]) -> Vec<usize> {
    let mut counts = std::collections::BTreeMap::<usize, usize>::new();
    for &s in draws {
        *counts.entry(s).or_default() += 1;
    }
    for (&s, &c) in &counts {
        let (o_new, factor) = relocated(opacities[s], c + 1);
        let o_new = o_new.clamp(MIN_OPACITY, 1.0 - OPACITY_CEILING_EPS);
        host.logit_opacities[s] = logit(o_new);
        let ln_f = factor.ln();
        for a in 0..3 {
            host.log_scales[3 * s + a] += ln_f;
        }
    }
    counts.into_keys().collect()
}

/// Copy row `src` of every parameter onto row `dst` (same splats).
fn copy_row(h: &mut GaussianSplats, src: usize, dst: usize) {
    let k3 = h.sh_coeffs_per_channel() * 3;
    h.means.copy_within(3 * src..3 * src + 3, 3 * dst);
    h.log_scales.copy_within(3 * src..3 * src + 3, 3 * dst);
    h.rotations.copy_within(4 * src..4 * src + 4, 4 * dst);
    h.logit_opacities[dst] = h.logit_opacities[src];
    h.sh_coeffs.copy_within(k3 * src..k3 * (src + 1), k3 * dst);
}

/// Append a copy of row `src` of every parameter.
fn push_row(h: &mut GaussianSplats, src: usize) {
    let k3 = h.sh_coeffs_per_channel() * 3;
    h.means.extend_from_within(3 * src..3 * src + 3);
    h.log_scales.extend_from_within(3 * src..3 * src + 3);
    h.rotations.extend_from_within(4 * src..4 * src + 4);
    h.logit_opacities.push(h.logit_opacities[src]);
    h.sh_coeffs.extend_from_within(k3 * src..k3 * (src + 1));
}

fn zero_moment_rows(a: &mut AdamState, rows: &[usize]) {
    let r = a.row;
    for &i in rows {
        a.m[i * r..(i + 1) * r].fill(0.0);
        a.v[i * r..(i + 1) * r].fill(0.0);
    }
}

fn adam_groups(adam: &mut GaussiansAdam) -> [&mut AdamState; 5] {
    [
        &mut adam.means,
        &mut adam.log_scales,
        &mut adam.rotations,
        &mut adam.logit_opacities,
        &mut adam.sh_coeffs,
    ]
}

/// One MCMC refinement on the host form: relocate the dead, then grow by `growth` (a fraction)
/// up to `cap` splats. `g` and `adam` keep matching row counts.
pub fn relocate_and_grow(
    g: &mut Gaussians,
    adam: &mut GaussiansAdam,
    cap: usize,
    growth: f32,
    rng: &mut impl Rng,
) -> Refinement {
    let mut host = g.to_host();
    let n = host.len();
    let mut done = Refinement::default();
    let opacities: Vec<f32> = host.logit_opacities.iter().map(|&l| sigmoid(l)).collect();
    let (dead, alive): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| {
        // NaN opacities count as dead: relocation overwrites the whole row.
        opacities[i].is_nan() || opacities[i] <= MIN_OPACITY
    });
    if !dead.is_empty()
        && let Some(draws) = draw_by_opacity(&opacities, &alive, dead.len(), rng)
    {
        let sources = split_sources(&mut host, &opacities, &draws);
        for (&d, &s) in dead.iter().zip(&draws) {
            copy_row(&mut host, s, d);
        }
        for a in adam_groups(adam) {
            zero_moment_rows(a, &sources);
            zero_moment_rows(a, &dead);
        }
        done.relocated = dead.len();
    }

    let target = ((n as f64 * (1.0 + f64::from(growth))).floor() as usize).min(cap);
    let to_add = target.saturating_sub(n);
    if to_add > 0 {
        let opacities: Vec<f32> = host.logit_opacities.iter().map(|&l| sigmoid(l)).collect();
        let all: Vec<usize> = (0..n).collect();
        if let Some(draws) = draw_by_opacity(&opacities, &all, to_add, rng) {
            split_sources(&mut host, &opacities, &draws);
            for &s in &draws {
                push_row(&mut host, s);
            }
            for a in adam_groups(adam) {
                let len = host.len() * a.row;
                a.m.resize(len, 0.0);
                a.v.resize(len, 0.0);
            }
            done.added = to_add;
        }
    }
    if done != Refinement::default() {
        *g = Gaussians::from_host(&host);
    }
    done
}

/// A 64-bit mix of the seed, step and block (SplitMix64's finaliser), seeding one noise stream.
fn noise_seed(seed: u64, step: usize, block: usize) -> u64 {
    let mut z = seed
        ^ (step as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (block as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The MCMC noise displacement of one splat, metres: Σ·(ε·s(1 − o))·`scaler`, with Σ built from
/// the wxyz quaternion `q` (normalised; identity when degenerate) and `log_scales`.
fn noise_offset(
    q: &[f32],
    log_scales: &[f32],
    logit_opacity: f32,
    eps: [f32; 3],
    scaler: f32,
) -> [f32; 3] {
    let o = sigmoid(logit_opacity);
    let gate = 1.0 / (1.0 + (-100.0 * ((1.0 - o) - 0.995)).exp());
    let r = super::density::rotation_matrix(q);
    let s2: [f32; 3] = std::array::from_fn(|a| (2.0 * log_scales[a]).exp());
    let v: [f32; 3] = std::array::from_fn(|a| eps[a] * gate * scaler);
    // Σ·v = R·diag(s²)·Rᵀ·v.
    let rt_v: [f32; 3] = std::array::from_fn(|a| (0..3).map(|b| r[b][a] * v[b]).sum::<f32>());
    std::array::from_fn(|row| (0..3).map(|a| r[row][a] * s2[a] * rt_v[a]).sum())
}

/// Add the MCMC position noise of `step` to `g.means` (see the module docs); `scaler` is
/// `noise_lr · lr_means`. Deterministic for a given (seed, step) whatever the thread count.
pub fn inject_noise(g: &mut Gaussians, scaler: f64, seed: u64, step: usize) {
    if scaler <= 0.0 || g.is_empty() {
        return;
    }
    let n = g.len();
    let device = g.means.device();
    let mut means = tensor_to_vec(std::mem::replace(
        &mut g.means,
        Tensor::from_data(TensorData::new(Vec::<f32>::new(), [0, 3]), &device),
    ));
    let log_scales = tensor_to_vec(g.log_scales.clone());
    let rotations = tensor_to_vec(g.rotations.clone());
    let logits = tensor_to_vec(g.logit_opacities.clone());
    let scaler = scaler as f32;
    means
        .par_chunks_mut(3 * NOISE_BLOCK)
        .enumerate()
        .for_each(|(block, chunk)| {
            let mut rng = SmallRng::seed_from_u64(noise_seed(seed, step, block));
            for (j, m) in chunk.chunks_exact_mut(3).enumerate() {
                let i = block * NOISE_BLOCK + j;
                let eps: [f32; 3] = std::array::from_fn(|_| rng.sample(StandardNormal));
                let d = noise_offset(
                    &rotations[4 * i..4 * i + 4],
                    &log_scales[3 * i..3 * i + 3],
                    logits[i],
                    eps,
                    scaler,
                );
                for a in 0..3 {
                    m[a] += d[a];
                }
            }
        });
    g.means = Tensor::from_data(TensorData::new(means, [n, 3]), &device);
}

/// MCMC's position noise of step `step` on `store` ([`inject_noise`] with scaler
/// `noise_lr · lr_means(step)`, the means' learning rate for a scene of `extent` metres);
/// nothing when `params.noise_lr` is 0.
///
/// # Errors
/// [`crate::Error::Kernel`] for device failures while the state is copied to the host and back.
pub fn perturb_positions(
    store: &mut ParamStore,
    params: &TrainParams,
    extent: f32,
    step: usize,
) -> crate::Result<()> {
    if params.noise_lr > 0.0 {
        let scaler = params.noise_lr * params.lr_means(step, extent as f64);
        store.with_host(|g, _| inject_noise(g, scaler, params.seed, step))?;
    }
    Ok(())
}

/// Set the initial splats' opacity to `opacity` and multiply their scales by `scale` (the MCMC
/// recipe starts from opacity 0.5).
pub fn set_initial_opacity_and_scale(s: &mut GaussianSplats, opacity: f32, scale: f32) {
    let l = logit(opacity);
    s.logit_opacities.iter_mut().for_each(|v| *v = l);
    let ln_s = scale.ln();
    s.log_scales.iter_mut().for_each(|v| *v += ln_s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn one_copy_is_unchanged() {
        let (o, f) = relocated(0.3, 1);
        assert!((o - 0.3).abs() < 1e-6 && (f - 1.0).abs() < 1e-6);
    }

    #[test]
    fn two_copies_follow_equation_nine_by_hand() {
        // o = 0.75: o' = 1 − √0.25 = 0.5; denom = o' + (o' − o'²/√2) = 1 − 0.25/√2 = 0.823223;
        // factor = 0.75 / 0.823223 = 0.911051.
        let (o, f) = relocated(0.75, 2);
        assert!((o - 0.5).abs() < 1e-6, "{o}");
        assert!((f - 0.911_051).abs() < 1e-5, "{f}");
        // The copies' combined alpha is the original's: 1 − (1 − o')^n = o.
        for n in [2usize, 5, 20, 51] {
            let (o_new, f) = relocated(0.6, n);
            let combined = 1.0 - (1.0 - f64::from(o_new)).powi(n as i32);
            assert!((combined - 0.6).abs() < 1e-5, "n = {n}: {combined}");
            assert!(f.is_finite() && f > 0.0, "n = {n}: factor {f}");
        }
    }

    fn scene(opacities: &[f32]) -> GaussianSplats {
        let n = opacities.len();
        GaussianSplats {
            means: (0..3 * n).map(|v| v as f32).collect(),
            log_scales: vec![0.1f32.ln(); 3 * n],
            rotations: [1.0, 0.0, 0.0, 0.0].repeat(n),
            logit_opacities: opacities.iter().map(|&o| logit(o)).collect(),
            sh_coeffs: (0..3 * n).map(|v| v as f32 * 10.0).collect(),
            sh_degree: 0,
        }
    }

    #[test]
    fn dead_splats_move_onto_live_ones_and_growth_stops_at_the_cap() {
        let s = scene(&[0.9, 0.001, 0.5, 0.002]);
        let mut g = Gaussians::from_host(&s);
        let mut adam = GaussiansAdam::new(&g);
        adam.means.m.fill(1.0);
        let mut rng = SmallRng::seed_from_u64(3);
        let r = relocate_and_grow(&mut g, &mut adam, 5, 0.5, &mut rng);
        // Rows 1 and 3 were dead; 4 · 1.5 = 6 capped at 5 → one added.
        assert_eq!(
            r,
            Refinement {
                relocated: 2,
                added: 1
            }
        );
        let h = g.to_host();
        assert_eq!(h.len(), 5);
        assert_eq!(adam.means.m.len(), 15);
        for i in 0..5 {
            let o = sigmoid(h.logit_opacities[i]);
            assert!(o > MIN_OPACITY, "row {i} still dead: {o}");
            // Every row is a copy of a live source (0 or 2): SH and means came along.
            let src = h.sh_coeffs[3 * i] / 10.0 / 3.0;
            assert!(src == 0.0 || src == 2.0, "row {i} copied from {src}");
            assert_eq!(h.means[3 * i], 3.0 * src);
        }
        // Relocated rows and their sources restart their moments; the appended row too.
        assert!(adam.means.m[3..6].iter().all(|&m| m == 0.0));
        assert!(adam.means.m[12..15].iter().all(|&m| m == 0.0));
    }

    #[test]
    fn copies_of_one_source_share_its_alpha() {
        // One live splat, three dead: the live one becomes 4 copies with 1 − (1 − o')⁴ = 0.8.
        let s = scene(&[0.8, 0.001, 0.001, 0.001]);
        let mut g = Gaussians::from_host(&s);
        let mut adam = GaussiansAdam::new(&g);
        relocate_and_grow(&mut g, &mut adam, 4, 0.05, &mut SmallRng::seed_from_u64(0));
        let h = g.to_host();
        let o = sigmoid(h.logit_opacities[0]);
        assert!((1.0 - (1.0 - o).powi(4) - 0.8).abs() < 1e-4, "{o}");
        assert!(h.logit_opacities.iter().all(|&l| l == h.logit_opacities[0]));
        assert!(h.log_scales[0] < 0.1f32.ln(), "scales shrink with copies");
    }

    #[test]
    fn noise_moves_transparent_splats_and_spares_opaque_ones() {
        let s = scene(&[0.99, 0.01]);
        let mut g = Gaussians::from_host(&s);
        inject_noise(&mut g, 1.0, 7, 1);
        let h = g.to_host();
        // Opaque: gate s(0.01) = 1/(1 + e^98.5) ≈ 0. Transparent: s(0.99) = 1/(1 + e^0.5) ≈ 0.38,
        // displacement ~ 0.38 · σ² = 0.0038 per unit ε.
        assert_eq!(&h.means[0..3], &s.means[0..3]);
        let moved: f32 = (3..6).map(|a| (h.means[a] - s.means[a]).abs()).sum();
        assert!(moved > 1e-5 && moved < 0.1, "{moved}");
        // Same seed and step → same noise; another step → other noise.
        let mut g2 = Gaussians::from_host(&s);
        inject_noise(&mut g2, 1.0, 7, 1);
        assert_eq!(g2.to_host().means, h.means);
        let mut g3 = Gaussians::from_host(&s);
        inject_noise(&mut g3, 1.0, 7, 2);
        assert_ne!(g3.to_host().means, h.means);
    }

    #[test]
    fn noise_follows_the_covariance_by_hand() {
        // Identity rotation, scales (1, 2, 3) → Σ = diag(1, 4, 9); ε = (1, 1, 1), gate g:
        // offset = (g, 4g, 9g)·scaler.
        let d = noise_offset(
            &[1.0, 0.0, 0.0, 0.0],
            &[0.0, 2f32.ln(), 3f32.ln()],
            logit(0.5),
            [1.0; 3],
            2.0,
        );
        let gate = 1.0 / (1.0 + (-100.0f32 * (0.5 - 0.995)).exp());
        for (a, s2) in [1.0f32, 4.0, 9.0].iter().enumerate() {
            assert!(
                (d[a] - s2 * gate * 2.0).abs() <= 1e-6 * s2.max(1.0),
                "{d:?}"
            );
        }
        // A 90° turn about z swaps the x and y variances.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let d = noise_offset(
            &[h, 0.0, 0.0, h],
            &[0.0, 2f32.ln(), 0.0],
            logit(0.001),
            [1.0, 0.0, 0.0],
            1.0,
        );
        let gate = 1.0 / (1.0 + (-100.0f32 * (0.999 - 0.995)).exp());
        assert!(
            (d[0] - 4.0 * gate).abs() < 1e-4 && d[1].abs() < 1e-4,
            "{d:?}"
        );
    }
}
