//! The CPU (rayon) twin of the rasterizer: the correctness reference and the CPU training path.
//!
//! One file per stage, run in this order by [`forward`] / [`backward`]:
//! [`project`] → [`bin`] → [`sort`] → [`rasterize_forward`]; then [`rasterize_backward`] →
//! [`project_backward`]; [`loss`] is the fused training loss and [`adam`] the fused optimizer step.
//! [`sh`] holds the SH basis both projection passes use; `simd` holds the AVX2 / SSE2
//! (`f32`, x86-64) versions of the two per-tile raster loops, over the vectors of `lanes`;
//! `raster_tile` the per-tile data the raster passes and `simd` share.
//!
//! Everything is generic over [`Scalar`] (`f32` for the public API, `f64` for the finite-difference
//! tests). Inputs are checked once, in [`check_render_inputs`]; the stages then assume valid shapes.
//! Outputs are bit-identical whatever the rayon thread count: every parallel loop writes disjoint
//! outputs and the only reduction (per-splat gradient sums) runs in a fixed order.

pub mod adam;
pub mod bin;
mod lanes;
pub mod linalg;
pub mod loss;
pub mod project;
pub mod project_backward;
mod raster_tile;
pub mod rasterize_backward;
pub mod rasterize_forward;
pub mod scalar;
pub mod sh;
pub mod sh_constants;
mod simd;
pub mod sort;

use crate::types::{KernelTimings, RenderOptions, SplatsRef};
use crate::{Camera, Error};
use project::{CameraModel, ProjectedSplat, RasterizeMode, SplatParams};
use project_backward::ParamGrads;
pub use scalar::Scalar;

/// What the backward pass needs from the forward pass of one render: the projected splats, the
/// sorted intersection list with its per-tile ranges, and per pixel the final transmittance and the
/// number of tile-list entries walked up to the last contributor.
///
/// Opaque to callers (fields are crate-private); `T` is `f32` for the public API.
#[derive(Debug, Clone)]
pub struct SavedForward<T = f32> {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) sh_k: usize,
    /// The opacity rule of the forward pass; the backward pass differentiates the same one.
    pub(crate) mode: RasterizeMode,
    /// `[N]`.
    pub(crate) projected: Vec<ProjectedSplat<T>>,
    /// `[I]` splat index per intersection, sorted by (tile, depth).
    pub(crate) sorted_ids: Vec<u32>,
    /// `[T]` `[start, end)` into `sorted_ids` per tile.
    pub(crate) tile_ranges: Vec<[u32; 2]>,
    /// `[H, W]` final transmittance.
    pub(crate) final_t: Vec<T>,
    /// `[H, W]` tile-list entries walked per pixel.
    pub(crate) n_contrib: Vec<u32>,
}

impl<T> SavedForward<T> {
    /// I, the number of tile–splat intersections rasterised (a cost measure: forward and backward work
    /// are roughly proportional to it).
    pub fn intersection_count(&self) -> usize {
        self.sorted_ids.len()
    }

    /// N, the number of splats of the render this state belongs to.
    pub fn splat_count(&self) -> usize {
        self.projected.len()
    }

    /// The opacity rule the forward pass used.
    pub fn rasterize_mode(&self) -> RasterizeMode {
        self.mode
    }
}

/// Checks that a backward pass is asked for with the `antialiased` option its forward pass used
/// (`forward_mode`). Shared by the CPU and GPU backward passes.
///
/// # Errors
/// [`Error::Invalid`] (field `options.antialiased`) when they differ.
pub(crate) fn check_backward_mode(
    options: &RenderOptions,
    forward_mode: RasterizeMode,
) -> Result<(), Error> {
    if RasterizeMode::from_antialiased(options.antialiased) == forward_mode {
        return Ok(());
    }
    Err(Error::Invalid {
        field: "options.antialiased",
        reason: format!(
            "is {} but the forward pass ran with antialiased = {}; pass the same RenderOptions \
             to the forward and the backward pass",
            options.antialiased,
            forward_mode == RasterizeMode::Antialiased
        ),
    })
}

/// Checks a render's inputs and returns K (SH coefficients per channel).
///
/// Rules: N = `logit_opacities.len()`; `means`, `log_scales` are `[N, 3]`; `rotations` `[N, 4]`;
/// `sh_coeffs` `[N, K, 3]` with K ∈ {1, 4, 9, 16} (K = `(sh_degree + 1)²` when N = 0);
/// `sh_degree ≤ 3` and `(sh_degree + 1)² ≤ K`; camera width and height > 0, `fx`, `fy` finite and
/// > 0, `cx`, `cy` and `world_to_camera` finite.
///
/// # Errors
/// [`Error::Shape`] for a length mismatch, [`Error::Invalid`] for a bad SH degree or camera.
pub fn check_render_inputs(splats: &SplatsRef<'_>, camera: &Camera) -> Result<usize, Error> {
    let n = splats.logit_opacities.len();
    if n > u32::MAX as usize {
        return Err(Error::Invalid {
            field: "logit_opacities",
            reason: format!(
                "{n} splats exceed the 2^32 splat ids of the intersection list; render in batches"
            ),
        });
    }
    let shape = |what: &'static str, expected: usize, found: usize| {
        if expected == found {
            Ok(())
        } else {
            Err(Error::Shape {
                what,
                expected,
                found,
            })
        }
    };
    shape("means [N, 3]", 3 * n, splats.means.len())?;
    shape("log_scales [N, 3]", 3 * n, splats.log_scales.len())?;
    shape("rotations [N, 4]", 4 * n, splats.rotations.len())?;
    if splats.sh_degree > 3 {
        return Err(Error::Invalid {
            field: "sh_degree",
            reason: format!("{} is above the supported maximum 3", splats.sh_degree),
        });
    }
    let needed = sh::sh_coeff_count(splats.sh_degree);
    let k = if n == 0 {
        shape("sh_coeffs [N, K, 3]", 0, splats.sh_coeffs.len())?;
        needed
    } else {
        let k = splats.sh_coeffs.len() / (3 * n);
        if ![1, 4, 9, 16].contains(&k) || k * 3 * n != splats.sh_coeffs.len() {
            let expected = 3
                * n
                * [1, 4, 9, 16]
                    .into_iter()
                    .find(|&c| c * 3 * n >= splats.sh_coeffs.len())
                    .unwrap_or(16);
            return Err(Error::Shape {
                what: "sh_coeffs [N, K, 3] with K in {1, 4, 9, 16}",
                expected,
                found: splats.sh_coeffs.len(),
            });
        }
        k
    };
    if needed > k {
        return Err(Error::Invalid {
            field: "sh_degree",
            reason: format!(
                "degree {} needs {needed} SH coefficients per channel but sh_coeffs has K = {k}",
                splats.sh_degree
            ),
        });
    }
    let invalid = |field: &'static str, reason: String| Err(Error::Invalid { field, reason });
    if camera.width == 0 || camera.height == 0 {
        return invalid(
            "camera.width/height",
            format!(
                "image size {}×{} must be non-zero",
                camera.width, camera.height
            ),
        );
    }
    for (field, v) in [("camera.fx", camera.fx), ("camera.fy", camera.fy)] {
        if !(v.is_finite() && v > 0.0) {
            return invalid(
                field,
                format!("focal length {v} must be finite and > 0 pixels"),
            );
        }
    }
    for (field, v) in [("camera.cx", camera.cx), ("camera.cy", camera.cy)] {
        if !v.is_finite() {
            return invalid(field, format!("principal point {v} must be finite"));
        }
    }
    if camera
        .world_to_camera
        .iter()
        .flatten()
        .any(|v| !v.is_finite())
    {
        return invalid(
            "camera.world_to_camera",
            "pose has a non-finite entry".into(),
        );
    }
    Ok(k)
}

/// Forward result in the working float type (the public [`crate::ForwardOutput`] is its `f32`
/// form, built from it by [`crate::render_forward`]).
#[derive(Debug, Clone)]
pub struct Forward<T> {
    /// `[H, W, 3]`.
    pub image: Vec<T>,
    /// `[H, W]` 1 − final transmittance.
    pub alpha: Vec<T>,
    /// `[N]` radius in pixels, 0 when culled.
    pub radii: Vec<T>,
    /// State for [`backward`].
    pub saved: SavedForward<T>,
    /// Stage times (forward fields).
    pub timings: KernelTimings,
}

/// Forward pass on checked inputs (see [`check_render_inputs`]); `background` `[3]` linear RGB,
/// `mode` the opacity rule ([`RasterizeMode::Classic`] or Mip-Splatting's
/// [`RasterizeMode::Antialiased`]), remembered in the saved state for [`backward`].
///
/// # Errors
/// [`Error::Invalid`] when the intersection count does not fit the 32-bit tile ranges.
pub fn forward<T: Scalar>(
    params: &SplatParams<'_, T>,
    camera: &Camera,
    background: [T; 3],
    mode: RasterizeMode,
) -> Result<Forward<T>, Error> {
    let cam = CameraModel::<T>::new(camera);
    let clock = std::time::Instant::now();
    let projected = project::project(params, &cam, mode);
    let project_ms = ms_since(clock);
    let clock = std::time::Instant::now();
    let total: usize = projected.iter().map(bin::tile_count).sum();
    if total > u32::MAX as usize {
        return Err(Error::Invalid {
            field: "splats",
            reason: format!(
                "{total} tile intersections exceed 2^32; render fewer splats or a smaller image"
            ),
        });
    }
    let n_tiles = (cam.tiles_x() * cam.tiles_y()) as usize;
    let (keys, ids) = bin::bin(&projected, cam.tiles_x());
    let (sorted_ids, tile_ranges) = sort::sort(keys, ids, n_tiles);
    let sort_ms = ms_since(clock);
    let clock = std::time::Instant::now();
    let raster = rasterize_forward::rasterize_forward(
        &projected,
        &sorted_ids,
        &tile_ranges,
        cam.width,
        cam.height,
        background,
    );
    let rasterize_forward_ms = ms_since(clock);
    let alpha = raster.final_t.iter().map(|&t| T::ONE - t).collect();
    let radii = projected.iter().map(|p| p.radius).collect();
    Ok(Forward {
        image: raster.image,
        alpha,
        radii,
        saved: SavedForward {
            width: cam.width,
            height: cam.height,
            sh_k: params.sh_k,
            mode,
            projected,
            sorted_ids,
            tile_ranges,
            final_t: raster.final_t,
            n_contrib: raster.n_contrib,
        },
        timings: KernelTimings {
            project_ms,
            sort_ms,
            rasterize_forward_ms,
            ..Default::default()
        },
    })
}

/// Milliseconds since `clock`.
pub(crate) fn ms_since(clock: std::time::Instant) -> f64 {
    clock.elapsed().as_secs_f64() * 1e3
}

/// What a saved forward pass was rendered with: N, K and the image size `(width, height)`.
pub(crate) struct RenderShape {
    pub n: usize,
    pub sh_k: usize,
    pub size: (u32, u32),
}

/// Checks that a saved forward pass (`saved`) and `grad_image` belong to a render of N splats with
/// K SH coefficients through `camera`. Shared by the CPU and GPU backward passes.
pub(crate) fn check_backward_shapes(
    n: usize,
    sh_k: usize,
    camera: &Camera,
    saved: RenderShape,
    grad_image_len: usize,
) -> Result<(), Error> {
    let (w, h) = (camera.width as usize, camera.height as usize);
    let (sw, sh) = (saved.size.0 as usize, saved.size.1 as usize);
    for (what, expected, found) in [
        ("grad_image [H, W, 3]", w * h * 3, grad_image_len),
        (
            "forward.saved splat count (N of the forward render)",
            n,
            saved.n,
        ),
        (
            "forward.saved SH coefficients per channel (K of the forward render)",
            sh_k,
            saved.sh_k,
        ),
        (
            "forward.saved image size (H·W of the forward render)",
            w * h,
            sw * sh,
        ),
        ("forward.saved image width", w, sw),
    ] {
        if expected != found {
            return Err(Error::Shape {
                what,
                expected,
                found,
            });
        }
    }
    Ok(())
}

/// Backward pass on checked inputs; `grad_image` is `[H, W, 3]`. Differentiates the opacity rule
/// saved by the forward pass. Returns the gradients and the backward stage times.
/// `absgrad` selects the densification statistic in `means2d_grad_norm`
/// ([`RenderOptions::absgrad`]); the other gradients do not depend on it.
///
/// # Errors
/// [`Error::Shape`] when `saved` or `grad_image` do not match `params` and `camera`.
pub fn backward<T: Scalar>(
    params: &SplatParams<'_, T>,
    camera: &Camera,
    background: [T; 3],
    saved: &SavedForward<T>,
    grad_image: &[T],
    absgrad: bool,
) -> Result<(ParamGrads<T>, KernelTimings), Error> {
    let shape = RenderShape {
        n: saved.projected.len(),
        sh_k: saved.sh_k,
        size: (saved.width, saved.height),
    };
    check_backward_shapes(params.len(), params.sh_k, camera, shape, grad_image.len())?;
    let cam = CameraModel::<T>::new(camera);
    let clock = std::time::Instant::now();
    let (screen, mean2d_abs) = rasterize_backward::rasterize_backward_with(
        &saved.projected,
        &saved.sorted_ids,
        &saved.tile_ranges,
        &saved.final_t,
        &saved.n_contrib,
        cam.width,
        cam.height,
        background,
        grad_image,
        absgrad,
    );
    let rasterize_backward_ms = ms_since(clock);
    let clock = std::time::Instant::now();
    let grads = project_backward::project_backward(
        params,
        &cam,
        &saved.projected,
        &screen,
        absgrad.then_some(mean2d_abs.as_slice()),
        saved.mode,
    );
    let timings = KernelTimings {
        rasterize_backward_ms,
        project_backward_ms: ms_since(clock),
        ..Default::default()
    };
    Ok((grads, timings))
}

/// The public splats as the CPU twin's `f32` parameters with K = `sh_k`.
pub(crate) fn params_of<'a>(splats: &SplatsRef<'a>, sh_k: usize) -> SplatParams<'a, f32> {
    SplatParams {
        means: splats.means,
        log_scales: splats.log_scales,
        rotations: splats.rotations,
        logit_opacities: splats.logit_opacities,
        sh_coeffs: splats.sh_coeffs,
        sh_degree: splats.sh_degree,
        sh_k,
    }
}

#[cfg(test)]
// Per-channel checks index the render, the colour and the background together.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::render::{
        ForwardOutput, render_backward as public_backward, render_forward as public_forward,
    };

    const ID: [[f32; 4]; 4] = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];

    /// 33×33 camera whose principal point is the centre of pixel (16, 16).
    fn centred_camera() -> Camera {
        Camera {
            width: 33,
            height: 33,
            fx: 32.0,
            fy: 32.0,
            cx: 16.5,
            cy: 16.5,
            world_to_camera: ID,
        }
    }

    /// Owned splat arrays for tests.
    #[derive(Clone, Default)]
    struct Scene {
        means: Vec<f32>,
        log_scales: Vec<f32>,
        rotations: Vec<f32>,
        logits: Vec<f32>,
        sh: Vec<f32>,
    }

    impl Scene {
        fn push(
            &mut self,
            mean: [f32; 3],
            log_scale: [f32; 3],
            quat: [f32; 4],
            logit: f32,
            dc: [f32; 3],
        ) {
            self.means.extend(mean);
            self.log_scales.extend(log_scale);
            self.rotations.extend(quat);
            self.logits.push(logit);
            self.sh.extend(dc);
        }

        fn as_ref(&self) -> SplatsRef<'_> {
            SplatsRef {
                means: &self.means,
                log_scales: &self.log_scales,
                rotations: &self.rotations,
                logit_opacities: &self.logits,
                sh_coeffs: &self.sh,
                sh_degree: 0,
            }
        }
    }

    const Q_ID: [f32; 4] = [1.0, 0.0, 0.0, 0.0];

    /// One splat, by hand, in both modes. Classic: alpha = sigmoid(0)·exp(−σ) on the dilated
    /// footprint. Mip-Splatting: Σ2d_raw = 4·I px², so the compensation is c = 4 / (4 + EPS2D) =
    /// 4 / 4.3 and every alpha is scaled by it; radius and falloff are the same dilated ones.
    #[test]
    fn single_splat_at_image_centre_matches_hand_calculation() {
        let mut s = Scene::default();
        // Isotropic σ = 0.25 m at z = 4 m, fx = 32 px: σ_px² = (32·0.25/4)² + EPS2D = 4.3 px².
        s.push(
            [0.0, 0.0, 4.0],
            [0.25f32.ln(); 3],
            Q_ID,
            0.0,
            [1.0, 0.0, -1.0],
        );
        let var = 4.0 + crate::consts::EPS2D;
        for (antialiased, comp) in [(false, 1.0), (true, 4.0 / var)] {
            let opts = RenderOptions {
                background: [0.1, 0.2, 0.3],
                antialiased,
                ..RenderOptions::default()
            };
            let out = public_forward(&s.as_ref(), &centred_camera(), &opts).unwrap();
            let c0 = sh::SH_C0 as f32;
            let colour = [c0 + 0.5, 0.5, 0.5 - c0];
            assert_eq!(out.radii, vec![(3.0 * var.sqrt()).ceil()]);
            let px = |x: usize, y: usize, ch: usize| out.image[(y * 33 + x) * 3 + ch];
            for ch in 0..3 {
                // Centre pixel: σ = 0, α = sigmoid(0)·c = 0.5·c.
                let a = 0.5 * comp;
                let want = a * colour[ch] + (1.0 - a) * opts.background[ch];
                assert!(
                    (px(16, 16, ch) - want).abs() < 1e-6,
                    "{antialiased} centre ch {ch}: {} vs {want}",
                    px(16, 16, ch)
                );
                // One pixel to the right: σ = ½·1²/σ_px².
                let a = 0.5 * comp * (-0.5 / var).exp();
                let want = a * colour[ch] + (1.0 - a) * opts.background[ch];
                assert!(
                    (px(17, 16, ch) - want).abs() < 1e-6,
                    "{antialiased} right ch {ch}: {} vs {want}",
                    px(17, 16, ch)
                );
            }
            assert!((out.alpha[16 * 33 + 16] - 0.5 * comp).abs() < 1e-6);
            // A corner pixel is ~22 px = 10σ away: α < 1/255, skipped, pure background.
            assert_eq!(px(0, 0, 1), 0.2);
            assert_eq!(out.alpha[0], 0.0);
        }
    }

    #[test]
    fn backward_rejects_options_that_disagree_with_the_forward_pass() {
        let cam = centred_camera();
        let s = base_scene();
        let aa = RenderOptions {
            antialiased: true,
            ..RenderOptions::default()
        };
        let out = public_forward(&s.as_ref(), &cam, &aa).unwrap();
        let grad = vec![0.5; out.image.len()];
        let err =
            public_backward(&s.as_ref(), &cam, &RenderOptions::default(), &out, &grad).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    field: "options.antialiased",
                    ..
                }
            ),
            "{err}"
        );
        assert!(public_backward(&s.as_ref(), &cam, &aa, &out, &grad).is_ok());
    }

    fn base_scene() -> Scene {
        let mut s = Scene::default();
        s.push(
            [0.1, -0.05, 4.0],
            [-1.2, -1.5, -1.4],
            [0.9, 0.1, 0.3, -0.2],
            0.5,
            [0.3, -0.2, 0.1],
        );
        s.push(
            [-0.2, 0.1, 5.0],
            [-1.0, -1.3, -1.1],
            [0.5, -0.4, 0.2, 0.7],
            -0.3,
            [-0.4, 0.6, 0.2],
        );
        s
    }

    #[test]
    fn hidden_splats_do_not_change_render() {
        let cam = centred_camera();
        let opts = RenderOptions {
            background: [0.2, 0.1, 0.4],
            ..RenderOptions::default()
        };
        let base = base_scene();
        let mut hidden = base.clone();
        let ls = [-1.0; 3];
        hidden.push([0.0, 0.0, -3.0], ls, Q_ID, 2.0, [1.0; 3]); // behind the camera
        hidden.push([0.0, 0.0, 0.005], ls, Q_ID, 2.0, [1.0; 3]); // in front of the near plane
        hidden.push([40.0, 0.0, 4.0], ls, Q_ID, 2.0, [1.0; 3]); // off screen
        hidden.push([f32::NAN, 0.0, 4.0], ls, Q_ID, 2.0, [1.0; 3]); // NaN mean
        hidden.push([0.0, 0.0, 4.0], [f32::NAN; 3], Q_ID, 2.0, [1.0; 3]); // NaN scale
        hidden.push([0.0, 0.0, 4.0], [f32::INFINITY; 3], Q_ID, 2.0, [1.0; 3]); // infinite scale
        hidden.push([0.0, 0.0, 4.0], ls, [0.0; 4], 2.0, [1.0; 3]); // zero quaternion
        hidden.push([0.0, 0.0, 4.0], ls, Q_ID, f32::NAN, [1.0; 3]); // NaN opacity
        hidden.push([0.0, 0.0, 4.0], ls, Q_ID, 2.0, [f32::NAN; 3]); // NaN colour
        let a = public_forward(&base.as_ref(), &cam, &opts).unwrap();
        let b = public_forward(&hidden.as_ref(), &cam, &opts).unwrap();
        assert_eq!(a.image, b.image);
        assert_eq!(a.alpha, b.alpha);
        assert_eq!(&b.radii[..2], &a.radii[..]);
        assert!(b.radii[2..].iter().all(|&r| r == 0.0), "{:?}", b.radii);

        let grad: Vec<f32> = (0..a.image.len())
            .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let ga = public_backward(&base.as_ref(), &cam, &opts, &a, &grad).unwrap();
        let gb = public_backward(&hidden.as_ref(), &cam, &opts, &b, &grad).unwrap();
        assert_eq!(&gb.means[..6], &ga.means[..]);
        assert_eq!(&gb.sh_coeffs[..6], &ga.sh_coeffs[..]);
        assert!(
            gb.means[6..]
                .iter()
                .chain(&gb.log_scales[6..])
                .chain(&gb.rotations[8..])
                .all(|&g| g == 0.0)
        );
        assert!(
            gb.logit_opacities[2..]
                .iter()
                .chain(&gb.sh_coeffs[6..])
                .chain(&gb.means2d_grad_norm[2..])
                .all(|&g| g == 0.0)
        );
    }

    #[test]
    fn extreme_inputs_render_finite_without_panic() {
        extreme_inputs_render_finite(false);
    }

    #[test]
    fn extreme_inputs_render_finite_without_panic_when_antialiased() {
        extreme_inputs_render_finite(true);
    }

    fn extreme_inputs_render_finite(antialiased: bool) {
        let cam = centred_camera();
        let opts = RenderOptions {
            background: [0.5; 3],
            antialiased,
            absgrad: false,
        };
        let mut s = base_scene();
        s.push([1e30, 0.0, 4.0], [-1.0; 3], Q_ID, 0.0, [0.1; 3]); // far off screen
        s.push([0.0, 0.0, 1e30], [-1.0; 3], Q_ID, 0.0, [0.1; 3]); // absurdly far
        s.push([0.0, 0.0, 0.02], [3.0; 3], Q_ID, 1e30, [0.1; 3]); // huge, at the near plane
        s.push([0.0, 0.0, 4.0], [80.0; 3], Q_ID, -1e30, [0.1; 3]); // exp overflows
        s.push(
            [0.0, 0.0, 4.0],
            [-80.0; 3],
            [1e-30, 0.0, 0.0, 0.0],
            0.0,
            [0.1; 3],
        ); // tiny quat
        s.push(
            [0.0, 0.0, 4.0],
            [-30.0; 3],
            [1e30, 1e30, 0.0, 0.0],
            50.0,
            [1e30; 3],
        ); // huge values
        if antialiased {
            // Needles and a sub-pixel speck: det(Σ2d) before the dilation is ~0 or rounds to ≤ 0,
            // so the compensation is ~0 and its gradient's 1/c factor must stay finite.
            s.push([0.0, 0.0, 4.0], [-1.0, -30.0, -30.0], Q_ID, 0.0, [0.1; 3]);
            s.push(
                [0.1, 0.0, 4.0],
                [-1.0, -1.0, -30.0],
                [0.6, 0.2, -0.7, 0.3],
                2.0,
                [0.1; 3],
            );
            s.push([0.0, 0.1, 4.0], [-12.0; 3], Q_ID, 3.0, [0.1; 3]);
        }
        let out = public_forward(&s.as_ref(), &cam, &opts).unwrap();
        assert!(
            out.image
                .iter()
                .chain(&out.alpha)
                .chain(&out.radii)
                .all(|v| v.is_finite())
        );
        let grad = vec![1.0; out.image.len()];
        let g = public_backward(&s.as_ref(), &cam, &opts, &out, &grad).unwrap();
        for v in [
            &g.means,
            &g.log_scales,
            &g.rotations,
            &g.logit_opacities,
            &g.sh_coeffs,
            &g.means2d_grad_norm,
        ] {
            assert!(v.iter().all(|x| x.is_finite()), "{v:?}");
        }
    }

    #[test]
    fn empty_scene_renders_background_only() {
        let s = Scene::default();
        let opts = RenderOptions {
            background: [0.25, 0.5, 0.75],
            ..RenderOptions::default()
        };
        let out = public_forward(&s.as_ref(), &centred_camera(), &opts).unwrap();
        assert!(out.image.chunks(3).all(|p| p == [0.25, 0.5, 0.75]));
        assert!(out.alpha.iter().all(|&a| a == 0.0));
        let g = public_backward(
            &s.as_ref(),
            &centred_camera(),
            &opts,
            &out,
            &vec![1.0; 33 * 33 * 3],
        )
        .unwrap();
        assert!(g.means.is_empty() && g.means2d_grad_norm.is_empty());
    }

    #[test]
    fn bad_shapes_give_shape_error() {
        let cam = centred_camera();
        let opts = RenderOptions::default();
        let s = base_scene();
        let mut r = s.as_ref();
        r.means = &s.means[..5];
        assert!(matches!(
            public_forward(&r, &cam, &opts),
            Err(Error::Shape {
                expected: 6,
                found: 5,
                ..
            })
        ));
        let mut r = s.as_ref();
        r.rotations = &s.rotations[..7];
        assert!(matches!(
            public_forward(&r, &cam, &opts),
            Err(Error::Shape { .. })
        ));
        let sh2 = vec![0.0; 2 * 2 * 3]; // K = 2 is not a valid SH size
        let mut r = s.as_ref();
        r.sh_coeffs = &sh2;
        assert!(matches!(
            public_forward(&r, &cam, &opts),
            Err(Error::Shape { .. })
        ));

        let out = public_forward(&s.as_ref(), &cam, &opts).unwrap();
        let short = vec![0.0; 33 * 33 * 3 - 1];
        assert!(matches!(
            public_backward(&s.as_ref(), &cam, &opts, &out, &short),
            Err(Error::Shape { .. })
        ));
        let mut one = Scene::default();
        one.push([0.0, 0.0, 4.0], [-1.0; 3], Q_ID, 0.0, [0.0; 3]);
        let grad = vec![0.0; 33 * 33 * 3];
        assert!(matches!(
            public_backward(&one.as_ref(), &cam, &opts, &out, &grad),
            Err(Error::Shape { .. })
        ));
    }

    #[test]
    fn bad_camera_or_sh_degree_gives_invalid() {
        let s = base_scene();
        let opts = RenderOptions::default();
        let mut r = s.as_ref();
        r.sh_degree = 1; // K = 1 only holds degree 0
        assert!(matches!(
            public_forward(&r, &centred_camera(), &opts),
            Err(Error::Invalid {
                field: "sh_degree",
                ..
            })
        ));
        r.sh_degree = 4;
        assert!(matches!(
            public_forward(&r, &centred_camera(), &opts),
            Err(Error::Invalid {
                field: "sh_degree",
                ..
            })
        ));
        let cams = [
            Camera {
                width: 0,
                ..centred_camera()
            },
            Camera {
                fx: f32::NAN,
                ..centred_camera()
            },
            Camera {
                fy: 0.0,
                ..centred_camera()
            },
            Camera {
                cx: f32::INFINITY,
                ..centred_camera()
            },
            Camera {
                world_to_camera: [[f32::NAN; 4]; 4],
                ..centred_camera()
            },
        ];
        for cam in cams {
            assert!(
                matches!(
                    public_forward(&s.as_ref(), &cam, &opts),
                    Err(Error::Invalid { .. })
                ),
                "{cam:?}"
            );
        }
    }

    /// A seeded random scene of `n` splats in front of a `w × h` camera (SH degree 3).
    fn random_scene(n: usize, seed: u64) -> (Scene, Camera) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut s = Scene::default();
        for _ in 0..n {
            let z = rng.random_range(2.0..8.0f32);
            s.means.extend([
                rng.random_range(-0.7..0.7) * z,
                rng.random_range(-0.5..0.5) * z,
                z,
            ]);
            s.log_scales
                .extend([0; 3].map(|_| rng.random_range(-4.0..-1.5f32)));
            s.rotations
                .extend([0; 4].map(|_| rng.random_range(-1.0..1.0f32)));
            s.logits.push(rng.random_range(-2.0..3.0));
            s.sh.extend([0; 48].map(|_| rng.random_range(-0.4..0.4f32)));
        }
        let cam = Camera {
            width: 130,
            height: 100,
            fx: 110.0,
            fy: 110.0,
            cx: 65.0,
            cy: 50.0,
            world_to_camera: ID,
        };
        (s, cam)
    }

    /// The `f32` SIMD tile loops (`simd.rs`: AVX2 when this CPU has it, and SSE2) against the scalar
    /// loops they replace: image, alpha and every gradient bit for bit, on a dense random scene with
    /// SH degree 3 and a background.
    #[test]
    fn simd_tile_loops_match_scalar_loops_bit_for_bit() {
        use std::sync::atomic::Ordering;
        let (s, cam) = random_scene(4000, 11);
        let mut r = s.as_ref();
        r.sh_degree = 3;
        let opts = RenderOptions {
            background: [0.3, 0.1, 0.6],
            ..RenderOptions::default()
        };
        let grad: Vec<f32> = (0..130 * 100 * 3)
            .map(|i| ((i * 29) % 13) as f32 / 13.0 - 0.45)
            .collect();
        let abs_opts = RenderOptions {
            absgrad: true,
            ..opts
        };
        let run = || {
            let f = public_forward(&r, &cam, &opts).unwrap();
            let g = public_backward(&r, &cam, &opts, &f, &grad).unwrap();
            let ga = public_backward(&r, &cam, &abs_opts, &f, &grad).unwrap();
            (f, g, ga)
        };
        let (f1, g1, ga1) = run();
        // Other tests running meanwhile may take these paths too; results are the same by design.
        simd::FORCE_SCALAR.store(true, Ordering::Relaxed);
        let (f2, g2, ga2) = run();
        simd::FORCE_SCALAR.store(false, Ordering::Relaxed);
        simd::FORCE_SSE.store(true, Ordering::Relaxed);
        let (f3, g3, ga3) = run();
        simd::FORCE_SSE.store(false, Ordering::Relaxed);
        #[cfg(target_arch = "x86_64")]
        println!(
            "default SIMD path: {}",
            if std::arch::is_x86_feature_detected!("avx2") {
                "AVX2"
            } else {
                "SSE2"
            }
        );
        assert!(f1.saved.intersection_count() > 4000);
        let contrib = |f: &ForwardOutput| match &f.saved {
            crate::render::Saved::Cpu(s) => s.n_contrib.clone(),
            crate::render::Saved::Gpu(_) => unreachable!("CPU render"),
        };
        assert!(contrib(&f1).iter().any(|&n| n > 0));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&f1.image), bits(&f2.image));
        assert_eq!(bits(&f1.alpha), bits(&f2.alpha));
        assert_eq!(contrib(&f1), contrib(&f2));
        assert_eq!(bits(&f3.image), bits(&f2.image));
        assert_eq!(contrib(&f3), contrib(&f2));
        for (a, b) in [
            (&g3.means, &g2.means),
            (&g3.log_scales, &g2.log_scales),
            (&g3.rotations, &g2.rotations),
            (&g3.logit_opacities, &g2.logit_opacities),
            (&g3.sh_coeffs, &g2.sh_coeffs),
            (&g3.means2d_grad_norm, &g2.means2d_grad_norm),
        ] {
            assert_eq!(bits(a), bits(b));
        }
        for (a, b) in [
            (&g1.means, &g2.means),
            (&g1.log_scales, &g2.log_scales),
            (&g1.rotations, &g2.rotations),
            (&g1.logit_opacities, &g2.logit_opacities),
            (&g1.sh_coeffs, &g2.sh_coeffs),
            (&g1.means2d_grad_norm, &g2.means2d_grad_norm),
        ] {
            assert_eq!(bits(a), bits(b));
        }
        // AbsGS statistic: the same bits on the AVX2 / SSE2 / scalar paths; every other gradient
        // is the classic one bit for bit; and ‖Σ|v|‖ ≥ ‖Σv‖ (strictly for some splat).
        assert_eq!(bits(&ga1.means2d_grad_norm), bits(&ga2.means2d_grad_norm));
        assert_eq!(bits(&ga3.means2d_grad_norm), bits(&ga2.means2d_grad_norm));
        for (ga, g) in [(&ga1, &g1), (&ga2, &g2), (&ga3, &g3)] {
            for (a, b) in [
                (&ga.means, &g.means),
                (&ga.log_scales, &g.log_scales),
                (&ga.rotations, &g.rotations),
                (&ga.logit_opacities, &g.logit_opacities),
                (&ga.sh_coeffs, &g.sh_coeffs),
            ] {
                assert_eq!(bits(a), bits(b));
            }
        }
        let (abs_n, classic_n) = (&ga2.means2d_grad_norm, &g2.means2d_grad_norm);
        assert!(
            abs_n
                .iter()
                .zip(classic_n)
                .all(|(&a, &c)| a >= c * (1.0 - 1e-5))
        );
        assert!(
            abs_n
                .iter()
                .zip(classic_n)
                .any(|(&a, &c)| a > 1.5 * c && a > 0.0)
        );
    }

    /// AbsGS on a hand-made cancellation: one isotropic splat centred on pixel (16, 16), ∂L/∂pixel
    /// = 1 (every channel) at the pixels left and right of it, (15, 16) and (17, 16), and 0
    /// elsewhere, black background. By symmetry the two pixels' ∂L_p/∂mean2d_x are equal and
    /// opposite and their y parts vanish (dy = 0), so the classic norm is 0 while the AbsGS norm
    /// is twice one pixel's magnitude. Hand value: at dx = ±1 px, σ = ½/var (var = 4 + EPS2D
    /// px²), α = o·e^(−σ) with o = ½, T = 1, v_alpha = Σ_c colour_c = 1.5 for DC (1, 0, −1), so
    /// |∂L_p/∂x| = (1/var)·|dx|·o·e^(−σ)·1.5 px⁻¹, times W/2 = 16.5 for NDC units. Also checked
    /// against the classic statistic of each pixel alone (a one-pixel backward cannot cancel).
    #[test]
    fn absgrad_sums_magnitudes_that_cancel_in_the_classic_norm() {
        let mut s = Scene::default();
        s.push(
            [0.0, 0.0, 4.0],
            [0.25f32.ln(); 3],
            Q_ID,
            0.0,
            [1.0, 0.0, -1.0],
        );
        let cam = centred_camera();
        let classic = RenderOptions::default();
        let abs = RenderOptions {
            absgrad: true,
            ..classic
        };
        let out = public_forward(&s.as_ref(), &cam, &classic).unwrap();
        let grad_at = |pixels: &[usize]| {
            let mut g = vec![0.0f32; 33 * 33 * 3];
            for &p in pixels {
                g[p * 3..p * 3 + 3].fill(1.0);
            }
            g
        };
        let (left, right) = (16 * 33 + 15, 16 * 33 + 17);
        let both = grad_at(&[left, right]);
        let norm = |opts: &RenderOptions, g: &[f32]| {
            public_backward(&s.as_ref(), &cam, opts, &out, g)
                .unwrap()
                .means2d_grad_norm[0]
        };
        let var = 4.0 + f64::from(crate::consts::EPS2D);
        let one_pixel = (1.0 / var) * 0.5 * (-0.5 / var).exp() * 1.5 * 16.5;
        let (n_classic, n_abs) = (norm(&classic, &both), norm(&abs, &both));
        let (n_left, n_right) = (
            norm(&classic, &grad_at(&[left])),
            norm(&classic, &grad_at(&[right])),
        );
        assert!(n_classic.abs() < 1e-6 * one_pixel as f32, "{n_classic}");
        for n in [n_left, n_right] {
            assert!(
                (f64::from(n) - one_pixel).abs() < 1e-5 * one_pixel,
                "{n} vs {one_pixel}"
            );
        }
        assert!(
            (f64::from(n_abs) - 2.0 * one_pixel).abs() < 1e-5 * one_pixel,
            "{n_abs} vs {}",
            2.0 * one_pixel
        );
        assert!((n_abs - (n_left + n_right)).abs() < 1e-6 * n_abs);
    }

    /// AbsGS sums on a random scene against an independent reference: the classic backward run
    /// once per pixel with ∂L/∂image non-zero at that pixel only (so each run returns exactly that
    /// pixel's ∂L_p/∂mean2d per splat), |·| per component summed over the pixels in `f64`. Signed
    /// per-pixel gradients make the classic sums cancel; the scene is `f32`, so the check also
    /// covers the SIMD loop of this CPU.
    #[test]
    fn absgrad_sums_equal_per_pixel_absolute_contributions() {
        use rand::{Rng, SeedableRng};
        let (s, mut cam) = random_scene(60, 23);
        (cam.width, cam.height, cam.cx, cam.cy) = (40, 36, 20.0, 18.0);
        let r = s.as_ref();
        let sh_k = check_render_inputs(&r, &cam).unwrap();
        let params = params_of(&r, sh_k);
        let bg = [0.2f32, 0.4, 0.1];
        let f = forward(&params, &cam, bg, RasterizeMode::Classic).unwrap();
        let sv = &f.saved;
        let pixels = 40 * 36;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let grad: Vec<f32> = (0..pixels * 3)
            .map(|_| rng.random_range(-1.0..1.0f32))
            .collect();
        let raster = |g: &[f32], absgrad: bool| {
            rasterize_backward::rasterize_backward_with(
                &sv.projected,
                &sv.sorted_ids,
                &sv.tile_ranges,
                &sv.final_t,
                &sv.n_contrib,
                40,
                36,
                bg,
                g,
                absgrad,
            )
        };
        let (screen, abs) = raster(&grad, true);
        let (screen_classic, none) = raster(&grad, false);
        assert!(none.is_empty());
        let n = s.logits.len();
        assert_eq!(abs.len(), n);
        let mut want = vec![[0.0f64; 2]; n];
        let mut one = vec![0.0f32; pixels * 3];
        for p in 0..pixels {
            one[p * 3..p * 3 + 3].copy_from_slice(&grad[p * 3..p * 3 + 3]);
            let per_pixel = rasterize_backward::rasterize_backward(
                &sv.projected,
                &sv.sorted_ids,
                &sv.tile_ranges,
                &sv.final_t,
                &sv.n_contrib,
                40,
                36,
                bg,
                &one,
            );
            one[p * 3..p * 3 + 3].fill(0.0);
            for (w, g) in want.iter_mut().zip(&per_pixel) {
                w[0] += f64::from(g.mean2d[0]).abs();
                w[1] += f64::from(g.mean2d[1]).abs();
            }
        }
        let scale = want.iter().flatten().fold(0.0f64, |m, &v| m.max(v));
        assert!(scale > 0.0);
        let mut cancelled = 0;
        for i in 0..n {
            for c in 0..2 {
                let (got, w) = (f64::from(abs[i][c]), want[i][c]);
                assert!(
                    (got - w).abs() <= 1e-5 * w + 1e-7 * scale,
                    "splat {i} component {c}: {got} vs {w}"
                );
                let signed = f64::from(screen[i].mean2d[c]).abs();
                assert!(signed <= w * (1.0 + 1e-5) + 1e-7 * scale);
                if w > 1e-3 * scale && signed < 0.5 * w {
                    cancelled += 1;
                }
            }
            // The signed sums are the classic ones, bit for bit.
            assert_eq!(screen[i].mean2d, screen_classic[i].mean2d);
            assert_eq!(screen[i].opacity, screen_classic[i].opacity);
        }
        assert!(
            cancelled > 0,
            "no component with real cancellation: the test has no teeth"
        );
    }

    #[test]
    fn render_is_bit_identical_across_thread_counts() {
        let (s, cam) = random_scene(3000, 7);
        let mut r = s.as_ref();
        r.sh_degree = 3;
        let opts = RenderOptions {
            background: [0.1, 0.3, 0.2],
            ..RenderOptions::default()
        };
        let grad: Vec<f32> = (0..130 * 100 * 3)
            .map(|i| ((i * 31) % 17) as f32 / 17.0 - 0.4)
            .collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let f = public_forward(&r, &cam, &opts).unwrap();
                let g = public_backward(&r, &cam, &opts, &f, &grad).unwrap();
                (f, g)
            })
        };
        let (f1, g1) = run(1);
        let (f3, g3) = run(3);
        assert!(f1.saved.intersection_count() > 3000);
        assert_eq!(f1.image, f3.image);
        assert_eq!(f1.alpha, f3.alpha);
        assert_eq!(f1.radii, f3.radii);
        for (a, b) in [
            (&g1.means, &g3.means),
            (&g1.log_scales, &g3.log_scales),
            (&g1.rotations, &g3.rotations),
            (&g1.logit_opacities, &g3.logit_opacities),
            (&g1.sh_coeffs, &g3.sh_coeffs),
            (&g1.means2d_grad_norm, &g3.means2d_grad_norm),
        ] {
            assert_eq!(a, b);
        }
        assert!(g1.means.iter().all(|v| v.is_finite()) && g1.means.iter().any(|&v| v != 0.0));
    }
}
