//! Mip-Splatting's 3D smoothing filter, baked into scale and opacity (issue 44, rule 6).
//!
//! Source: Yu et al. 2024, "Mip-Splatting: Alias-free 3D Gaussian Splatting" (CVPR), §5.1; the
//! authors' code, autonomousvision/mip-splatting `scene/gaussian_model.py`,
//! `get_scaling_with_3D_filter` and `get_opacity_with_3D_filter`, which their renderer uses
//! and their `save_fused_ply` writes out. A Mip-Splatting PLY stores the unfiltered
//! `scale_*`/`opacity` plus a per-splat `filter_3D` (a standard deviation in metres); the
//! splat it means is the Gaussian convolved with an isotropic Gaussian of that deviation:
//!
//! - scale′ᵢ = √(sᵢ² + f²) per axis (Σ′ = Σ + f²·I, in the splat's own axes);
//! - opacity′ = opacity · √(det Σ / det Σ′) = opacity · √(Πᵢ sᵢ² / Πᵢ (sᵢ² + f²)), so the
//!   integral of the widened Gaussian stays that of the original.
//!
//! A reader that ignored `filter_3D` would draw splats several times too small and far too
//! opaque (issue 44).

use super::domain::opacity_to_logit;
use super::sigmoid;

/// Whether `filter_m` is a `filter_3D` value [`bake`] accepts: a finite standard deviation
/// ≥ 0 (−0 included). A negative one has no meaning (squared, it would pass for its absolute
/// value and silently widen the splat).
#[must_use]
pub(crate) fn is_valid(filter_m: f32) -> bool {
    filter_m.is_finite() && filter_m >= 0.0
}

/// Bake `filter_m` (`filter_3D`, metres) into one splat: `log_scales` (`[3]`, natural log of
/// metres) and `logit_opacity` become those of the filtered Gaussian (formulas in the module
/// docs), computed in f64. Returns `false`, changing nothing, when `filter_m` is not
/// [`is_valid`]: the reader then refuses the file naming `filter_3D`. A NaN scale or opacity
/// stays NaN, which the reader's finiteness check names as that property.
pub(crate) fn bake(log_scales: &mut [f32], logit_opacity: &mut f32, filter_m: f32) -> bool {
    if !is_valid(filter_m) {
        return false;
    }
    let f2 = f64::from(filter_m).powi(2);
    let mut ratio = 1.0;
    for l in log_scales.iter_mut() {
        let s2 = (2.0 * f64::from(*l)).exp();
        let widened = s2 + f2;
        ratio *= s2 / widened;
        *l = (0.5 * widened.ln()) as f32;
    }
    let alpha = sigmoid(*logit_opacity) * ratio.sqrt();
    *logit_opacity = if alpha.is_nan() {
        f32::NAN
    } else {
        opacity_to_logit(alpha)
    };
    true
}

/// The refusal of a `filter_3D` value that is not [`is_valid`], at vertex `vertex` of `path`.
pub(crate) fn invalid(path: &std::path::Path, vertex: usize, filter_m: f32) -> crate::Error {
    crate::Error::Invalid {
        path: path.to_path_buf(),
        field: format!("vertex[{vertex}].filter_3D"),
        expected: "a finite standard deviation ≥ 0 in metres (Mip-Splatting's 3D filter; \
                   re-export the splat)"
            .into(),
        found: filter_m.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: s = (0.1, 0.2, 0.3), f = 0.1, opacity 0.8 → s′ = (√0.02, √0.05, √0.1),
    /// opacity′ = 0.8·√(0.01·0.04·0.09 / (0.02·0.05·0.1)) = 0.8·√0.36 = 0.48.
    #[test]
    fn bake_widens_scales_and_keeps_the_integral_by_hand() {
        let mut l = [0.1f32.ln(), 0.2f32.ln(), 0.3f32.ln()];
        let mut logit = (0.8f64 / 0.2).ln() as f32;
        assert!(bake(&mut l, &mut logit, 0.1));
        let s: Vec<f64> = l.iter().map(|v| f64::from(*v).exp()).collect();
        for (got, want) in s
            .iter()
            .zip([0.02f64.sqrt(), 0.05f64.sqrt(), 0.1f64.sqrt()])
        {
            assert!((got - want).abs() < 1e-6, "{s:?}");
        }
        assert!((sigmoid(logit) - 0.48).abs() < 1e-6, "{}", sigmoid(logit));
    }

    #[test]
    fn a_zero_filter_changes_nothing() {
        let mut l = [-3.0f32, -2.0, -1.0];
        let mut logit = 1.5f32;
        bake(&mut l, &mut logit, 0.0);
        assert_eq!(l, [-3.0, -2.0, -1.0]);
        assert!((logit - 1.5).abs() < 1e-6);
    }
}
