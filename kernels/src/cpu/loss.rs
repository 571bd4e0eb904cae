//! The training loss `(1 − λ)·L1 + λ·(1 − SSIM)` of a render against its ground truth, and its
//! gradient with respect to the render, in one pass (the CPU twin of `cuda/loss.cu`).
//!
//! Sources: Kerbl et al. 2023 eq. 7 (λ = 0.2); Wang, Bovik, Sheikh, Simoncelli, "Image Quality
//! Assessment: From Error Visibility to Structural Similarity", IEEE TIP 2004 (11×11 Gaussian
//! window, σ = 1.5, C1 = 0.01², C2 = 0.03²); INRIA `utils/loss_utils.py` `ssim` (zero padding of 5,
//! mean of the SSIM map over pixels and channels). The same numbers as the burn version the trainer
//! used before (`pipeline/.../train/loss.rs`, which the tests compare against).
//!
//! SSIM gradient: with the blurred moments μx = G∗x, mxx = G∗x², mxy = G∗xy (σx² = mxx − μx²,
//! σxy = mxy − μx·μy) and S = A·B / (C·D), A = 2μxμy + C1, B = 2σxy + C2, C = μx² + μy² + C1,
//! D = σx² + σy² + C2, the chain rule through the moments gives per pixel
//! `∂S̄/∂x = G ⋆ (∂S/∂μx − 2μx·∂S/∂σx² − μy·∂S/∂σxy) + 2x·G ⋆ (∂S/∂σx²) + y·G ⋆ (∂S/∂σxy)`
//! (all divided by the element count); the Gaussian window is symmetric and the padding zero, so
//! the adjoint of the blur is the blur itself. The same derivation as fused-ssim (Mallick et al.,
//! "Taming 3DGS", 2024).

use rayon::prelude::*;

/// Side of the SSIM window, pixels (Wang et al. 2004).
pub const SSIM_WINDOW: usize = 11;
/// Standard deviation of the SSIM window, pixels.
pub const SSIM_SIGMA: f32 = 1.5;
/// SSIM stabiliser C1 = (0.01·L)², L = 1.
pub const SSIM_C1: f32 = 0.01 * 0.01;
/// SSIM stabiliser C2 = (0.03·L)², L = 1.
pub const SSIM_C2: f32 = 0.03 * 0.03;

/// The normalised 1D Gaussian window `[SSIM_WINDOW]`, computed in `f32` exactly as the burn loss
/// does (the GPU receives these very floats).
pub fn ssim_window() -> [f32; SSIM_WINDOW] {
    let half = (SSIM_WINDOW / 2) as f32;
    let mut w = [0.0f32; SSIM_WINDOW];
    for (i, v) in w.iter_mut().enumerate() {
        let x = i as f32 - half;
        *v = (-(x * x) / (2.0 * SSIM_SIGMA * SSIM_SIGMA)).exp();
    }
    let sum: f32 = w.iter().sum();
    w.map(|v| v / sum)
}

/// Loss value and its gradient.
#[derive(Debug, Clone)]
pub struct LossOutput {
    /// `(1 − λ)·L1 + λ·(1 − SSIM)`.
    pub loss: f64,
    /// Mean absolute error.
    pub l1: f64,
    /// Mean SSIM over pixels and channels.
    pub ssim: f64,
    /// `[H, W, 3]` ∂loss/∂image.
    pub grad_image: Vec<f32>,
}

/// Separable zero-padded blur of `maps` stacked `[H, W, 3]` images (`[maps, H, W, 3]`), rows
/// then columns. Each pass adds the taps in window order into a zeroed row (`dst += g[k]·src`
/// over contiguous slices, which vectorises), so every element sums its taps in the same order as
/// `loss.cu`'s per-element loop and the two agree bit for bit.
fn blur(data: &[f32], maps: usize, h: usize, w: usize, g: &[f32; SSIM_WINDOW]) -> Vec<f32> {
    let half = SSIM_WINDOW / 2;
    let plane = h * w * 3;
    let row_len = w * 3;
    let mut tmp = vec![0.0f32; maps * plane];
    tmp.par_chunks_mut(row_len)
        .zip(data.par_chunks(row_len))
        .for_each(|(out, src)| {
            for (k, &gk) in g.iter().enumerate() {
                // Output pixel x reads input pixel x + k − half.
                let (x0, x1) = (half.saturating_sub(k), (w + half).saturating_sub(k).min(w));
                if x0 >= x1 {
                    continue;
                }
                let (s0, len) = ((x0 + k - half) * 3, (x1 - x0) * 3);
                let dst = &mut out[x0 * 3..x1 * 3];
                for (d, &v) in dst.iter_mut().zip(&src[s0..s0 + len]) {
                    *d += gk * v;
                }
            }
        });
    let mut out = vec![0.0f32; maps * plane];
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(row, dst)| {
            let (m, y) = (row / h, row % h);
            for (k, &gk) in g.iter().enumerate() {
                let yy = y as isize + k as isize - half as isize;
                if yy < 0 || yy as usize >= h {
                    continue;
                }
                let s0 = m * plane + yy as usize * row_len;
                for (d, &v) in dst.iter_mut().zip(&tmp[s0..s0 + row_len]) {
                    *d += gk * v;
                }
            }
        });
    out
}

/// Σ of per-pixel loss weights as [`photometric_loss_weighted`] takes it (f64, fixed chunks), for
/// the device path's count.
pub fn weight_sum(weights: &[f32]) -> f64 {
    sum_f64(weights)
}

/// Sum in `f64`, in fixed chunks added in order: the same value for any thread count.
fn sum_f64(values: &[f32]) -> f64 {
    values
        .par_chunks(1 << 14)
        .map(|c| c.iter().map(|&v| f64::from(v)).sum::<f64>())
        .collect::<Vec<f64>>()
        .iter()
        .sum()
}

/// Per element of the SSIM map: `(S, ∂S/∂μx total, ∂S/∂mxx, ∂S/∂mxy)` from the five blurred
/// moments (the formulas of the module doc). Shared by the CPU loss and mirrored in `loss.cu`.
#[inline]
pub fn ssim_terms(mu_x: f32, mu_y: f32, m_xx: f32, m_yy: f32, m_xy: f32) -> [f32; 4] {
    let sigma_xx = m_xx - mu_x * mu_x;
    let sigma_yy = m_yy - mu_y * mu_y;
    let sigma_xy = m_xy - mu_x * mu_y;
    let a = 2.0 * mu_x * mu_y + SSIM_C1;
    let b = 2.0 * sigma_xy + SSIM_C2;
    let c = mu_x * mu_x + mu_y * mu_y + SSIM_C1;
    let d = sigma_xx + sigma_yy + SSIM_C2;
    let s = (a * b) / (c * d);
    let ds_dmu = (2.0 * mu_y * b) / (c * d) - s * (2.0 * mu_x) / c;
    let ds_dsxx = -s / d;
    let ds_dsxy = 2.0 * a / (c * d);
    let dmu_total = ds_dmu - 2.0 * mu_x * ds_dsxx - mu_y * ds_dsxy;
    [s, dmu_total, ds_dsxx, ds_dsxy]
}

/// `(1 − λ)·L1 + λ·(1 − SSIM)` of `image` against `target` (both `[H, W, 3]`) and its gradient.
///
/// The L1 gradient at `image == target` is 0 (as `torch.abs`). Sums are taken in `f64`, in fixed
/// chunks, so the value does not depend on the thread count.
pub fn photometric_loss(
    image: &[f32],
    target: &[f32],
    height: usize,
    width: usize,
    lambda: f32,
) -> LossOutput {
    photometric_loss_weighted(image, target, None, height, width, lambda)
}

/// [`photometric_loss`] with per-pixel weights `[H, W]` in [0, 1]: 0 ignores a pixel (outside a
/// capture's mask, or outside an undistorted image's valid region). Both terms become weighted
/// means, `L1 = Σ w·|x − y| / (3·Σw)` and `SSIM = Σ w·S / (3·Σw)` over the SSIM map S (windows
/// still read ignored pixels, as nerfstudio's masked SSIM does), so the gradient is the unweighted
/// one with the per-pixel partials multiplied by w before the adjoint blur and divided by 3·Σw
/// instead of 3·H·W. All weights 0 gives loss 0 and a zero gradient. `None` = all weights 1, bit
/// for bit [`photometric_loss`].
pub fn photometric_loss_weighted(
    image: &[f32],
    target: &[f32],
    weights: Option<&[f32]>,
    height: usize,
    width: usize,
    lambda: f32,
) -> LossOutput {
    let n = height * width * 3;
    let weight = |i: usize| weights.map_or(1.0, |w| w[i / 3]);
    let count = weights.map_or(n as f64, |w| 3.0 * sum_f64(w));
    if count <= 0.0 {
        return LossOutput {
            loss: 0.0,
            l1: 0.0,
            ssim: 1.0,
            grad_image: vec![0.0; n],
        };
    }
    let g = ssim_window();
    let mut stats = vec![0.0f32; 5 * n];
    {
        let (x, rest) = stats.split_at_mut(n);
        let (y, rest) = rest.split_at_mut(n);
        let (xx, rest) = rest.split_at_mut(n);
        let (yy, xy) = rest.split_at_mut(n);
        x.copy_from_slice(image);
        y.copy_from_slice(target);
        xx.par_iter_mut()
            .zip(yy.par_iter_mut())
            .zip(xy.par_iter_mut())
            .enumerate()
            .for_each(|(i, ((xx, yy), xy))| {
                let (a, b) = (image[i], target[i]);
                *xx = a * a;
                *yy = b * b;
                *xy = a * b;
            });
    }
    let m = blur(&stats, 5, height, width, &g);
    drop(stats);
    let mut ssim_map = vec![0.0f32; n];
    let mut partials = vec![0.0f32; 3 * n];
    {
        let (p_mu, rest) = partials.split_at_mut(n);
        let (p_xx, p_xy) = rest.split_at_mut(n);
        ssim_map
            .par_iter_mut()
            .zip(p_mu.par_iter_mut())
            .zip(p_xx.par_iter_mut())
            .zip(p_xy.par_iter_mut())
            .enumerate()
            .for_each(|(i, (((s, d_mu), d_xx), d_xy))| {
                let t = ssim_terms(m[i], m[n + i], m[2 * n + i], m[3 * n + i], m[4 * n + i]);
                match weights {
                    None => (*s, *d_mu, *d_xx, *d_xy) = (t[0], t[1], t[2], t[3]),
                    Some(_) => {
                        let wi = weight(i);
                        (*s, *d_mu, *d_xx, *d_xy) = (wi * t[0], wi * t[1], wi * t[2], wi * t[3]);
                    }
                }
            });
    }
    drop(m);
    let b = blur(&partials, 3, height, width, &g);
    let inv_n = match weights {
        None => 1.0 / n as f32,
        Some(_) => (1.0 / count) as f32,
    };
    let mut abs_diff = vec![0.0f32; n];
    let mut grad_image = vec![0.0f32; n];
    grad_image
        .par_iter_mut()
        .zip(abs_diff.par_iter_mut())
        .enumerate()
        .for_each(|(i, (grad, ad))| {
            let diff = image[i] - target[i];
            *ad = diff.abs();
            let mut sign = if diff > 0.0 {
                1.0
            } else if diff < 0.0 {
                -1.0
            } else {
                0.0
            };
            if weights.is_some() {
                let wi = weight(i);
                *ad *= wi;
                sign *= wi;
            }
            let d_ssim = b[i] + 2.0 * image[i] * b[n + i] + target[i] * b[2 * n + i];
            *grad = (1.0 - lambda) * sign * inv_n - lambda * d_ssim * inv_n;
        });
    let l1 = sum_f64(&abs_diff) / count;
    let ssim = sum_f64(&ssim_map) / count;
    LossOutput {
        loss: f64::from(1.0 - lambda) * l1 + f64::from(lambda) * (1.0 - ssim),
        l1,
        ssim,
        grad_image,
    }
}

/// The shape check of the loss entry points: `image` and `target` must both hold
/// `height × width × 3` values.
///
/// # Errors
/// [`crate::Error::Shape`] naming the first slice of another length.
pub(crate) fn check_loss_shapes(
    height: usize,
    width: usize,
    image_len: usize,
    target_len: usize,
) -> Result<(), crate::Error> {
    let n = height * width * 3;
    for (what, len) in [
        ("loss image [H, W, 3]", image_len),
        ("loss target [H, W, 3]", target_len),
    ] {
        if len != n {
            return Err(crate::Error::Shape {
                what,
                expected: n,
                found: len,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(h: usize, w: usize, seed: u32) -> Vec<f32> {
        (0..h * w * 3)
            .map(|i| {
                (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32
                    / 1000.0
            })
            .collect()
    }

    #[test]
    fn identical_images_have_ssim_one_and_zero_loss() {
        let a = image(9, 13, 1);
        let out = photometric_loss(&a, &a, 9, 13, 0.2);
        assert!((out.ssim - 1.0).abs() < 1e-6 && out.l1 == 0.0, "{out:?}");
        assert!(out.loss.abs() < 1e-6);
    }

    /// Central differences in f64 of the loss (recomputed) match the analytic gradient.
    #[test]
    fn gradient_matches_finite_differences() {
        let (h, w) = (12, 14);
        let x = image(h, w, 7);
        let y = image(h, w, 99);
        let out = photometric_loss(&x, &y, h, w, 0.2);
        let eps = 1e-3f32;
        for &i in &[0usize, 5, 77, 200, 3 * (6 * w + 7) + 1, h * w * 3 - 1] {
            let (mut p, mut m) = (x.clone(), x.clone());
            p[i] += eps;
            m[i] -= eps;
            let fd = (photometric_loss(&p, &y, h, w, 0.2).loss
                - photometric_loss(&m, &y, h, w, 0.2).loss)
                / (2.0 * f64::from(eps));
            let an = f64::from(out.grad_image[i]);
            assert!(
                (fd - an).abs() < 2e-6 + 2e-2 * an.abs(),
                "i={i}: fd {fd} vs analytic {an}"
            );
        }
    }

    /// Weighted loss: all-ones weights are the plain loss; a zero-weight pixel's own error does
    /// not count; finite differences of the weighted loss match its gradient.
    #[test]
    fn weighted_loss_ignores_zero_weight_pixels_and_has_the_right_gradient() {
        let (h, w) = (12, 14);
        let x = image(h, w, 3);
        let y = image(h, w, 41);
        let ones = vec![1.0f32; h * w];
        let plain = photometric_loss(&x, &y, h, w, 0.2);
        let weighted = photometric_loss_weighted(&x, &y, Some(&ones), h, w, 0.2);
        assert!((plain.loss - weighted.loss).abs() < 1e-9);
        // Half the pixels ignored (left half of every row).
        let half: Vec<f32> = (0..h * w)
            .map(|p| if p % w < w / 2 { 0.0 } else { 1.0 })
            .collect();
        let out = photometric_loss_weighted(&x, &y, Some(&half), h, w, 0.2);
        // L1 by hand over the kept pixels.
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for i in 0..h * w * 3 {
            if half[i / 3] > 0.0 {
                s += f64::from((x[i] - y[i]).abs());
                c += 1.0;
            }
        }
        assert!((out.l1 - s / c).abs() < 1e-9, "{} vs {}", out.l1, s / c);
        // Changing an ignored pixel far (> 5 px) from any kept one changes nothing.
        let mut x2 = x.clone();
        x2[3 * 6 * w] += 0.3; // pixel (x 0, y 6): 7 px from the nearest kept one
        let out2 = photometric_loss_weighted(&x2, &y, Some(&half), h, w, 0.2);
        assert_eq!(out.loss, out2.loss);
        let eps = 1e-3f32;
        for &i in &[3 * (6 * w + 9), 3 * (2 * w + 5) + 2, 3 * (11 * w + 13) + 1] {
            let (mut p, mut m) = (x.clone(), x.clone());
            p[i] += eps;
            m[i] -= eps;
            let fd = (photometric_loss_weighted(&p, &y, Some(&half), h, w, 0.2).loss
                - photometric_loss_weighted(&m, &y, Some(&half), h, w, 0.2).loss)
                / (2.0 * f64::from(eps));
            let an = f64::from(out.grad_image[i]);
            assert!(
                (fd - an).abs() < 2e-6 + 2e-2 * an.abs(),
                "i={i}: fd {fd} vs {an}"
            );
        }
        let none = photometric_loss_weighted(&x, &y, Some(&vec![0.0; h * w]), h, w, 0.2);
        assert!(none.loss == 0.0 && none.grad_image.iter().all(|&g| g == 0.0));
    }
}
