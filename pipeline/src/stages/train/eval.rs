//! Evaluation of a trained scene on held-out views, and the run's report files.
//!
//! Each held-out view is rendered, clamped to [0, 1] and quantised to 8 bits, like the ground
//! truth; PSNR and SSIM (same window as the loss, [`super::loss::ssim`]) are computed on those
//! 8-bit images scaled back to [0, 1], as INRIA's `metrics.py` does on saved PNGs. Outputs under
//! the stage directory:
//! - `eval/<name>.png`: ground truth LEFT, render RIGHT;
//! - `metrics.json`: [`Metrics`], including the held-out PSNR and splat-count curves recorded
//!   during training ([`held_out_psnr`]);
//! - `loss.svg`: the loss curve as a polyline.
//!
//! Sources: PSNR = 10·log10(1/MSE) for signals in [0, 1]; SSIM: Wang et al. 2004.

use std::path::Path;

use burn::tensor::{Tensor, TensorData};
use kiln_formats::splats::GaussianSplats;
use kiln_kernels::{Camera, RenderOptions, SplatsRef};
use serde::Serialize;

use super::loss::ssim;
use super::op::InnerBackend;

/// Quantise linear RGB to 8 bits: clamp to [0, 1], round(255·v). NaN becomes 0.
pub fn quantise_u8(image: &[f32]) -> Vec<u8> {
    image
        .iter()
        .map(|&v| {
            if v.is_nan() {
                0
            } else {
                (v.clamp(0.0, 1.0) * 255.0).round() as u8
            }
        })
        .collect()
}

/// Peak signal-to-noise ratio in dB of two same-length images with values in [0, 1]:
/// 10·log10(1 / MSE). Identical images give +∞ (reported as such; callers may cap it).
pub fn psnr(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len()).max(1);
    let mse: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| ((x - y) as f64).powi(2))
        .sum::<f64>()
        / n as f64;
    -10.0 * mse.log10()
}

/// [`psnr`] over the pixels of nonzero weight, weighted: MSE = Σ w·(a − b)² / (3·Σw) with
/// `weights` `[H, W]` (masked PSNR, as nerfstudio evaluates masked captures). `None` is [`psnr`].
pub fn psnr_weighted(a: &[f32], b: &[f32], weights: Option<&[f32]>) -> f64 {
    let Some(w) = weights else {
        return psnr(a, b);
    };
    let (mut se, mut count) = (0.0f64, 0.0f64);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let wi = f64::from(w[i / 3]);
        se += wi * f64::from(x - y).powi(2);
        count += wi;
    }
    -10.0 * (se / count.max(f64::MIN_POSITIVE)).log10()
}

/// Mean SSIM over the pixels of nonzero weight (Σ w·S / (3·Σw) over the SSIM map, the masked
/// loss's SSIM term); `None` is [`ssim_host`].
pub fn ssim_weighted(
    a: &[f32],
    b: &[f32],
    weights: Option<&[f32]>,
    height: usize,
    width: usize,
) -> f64 {
    match weights {
        None => ssim_host(a, b, height, width),
        Some(w) => {
            kiln_kernels::cpu::loss::photometric_loss_weighted(a, b, Some(w), height, width, 1.0)
                .ssim
        }
    }
}

/// Mean SSIM of two `[H, W, 3]` images in [0, 1] (11×11 Gaussian window, σ = 1.5).
pub fn ssim_host(a: &[f32], b: &[f32], height: usize, width: usize) -> f64 {
    let dev = Default::default();
    let ta =
        Tensor::<InnerBackend, 3>::from_data(TensorData::new(a.to_vec(), [height, width, 3]), &dev);
    let tb =
        Tensor::<InnerBackend, 3>::from_data(TensorData::new(b.to_vec(), [height, width, 3]), &dev);
    ssim(ta, tb).into_scalar() as f64
}

/// Metrics of one held-out view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ViewMetrics {
    /// View name (as given in [`super::TrainView::name`]).
    pub name: String,
    /// PSNR in dB on 8-bit images.
    pub psnr_db: f64,
    /// Mean SSIM on 8-bit images.
    pub ssim: f64,
}

/// Contents of `metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// The rasterizer's device (`cpu`, `cuda:N`) and its name.
    pub device: String,
    /// The device's name, e.g. `NVIDIA H200`.
    pub device_name: String,
    /// Peak device memory of the rasterizer, bytes (`None` on the CPU).
    pub peak_device_bytes: Option<usize>,
    /// Mean milliseconds per training step, by part.
    pub step_ms: super::StepTimings,
    /// Mean PSNR over the evaluated views, dB.
    pub psnr_db: f64,
    /// Mean SSIM over the evaluated views.
    pub ssim: f64,
    /// How the photos the metrics are measured against were downscaled:
    /// [`kiln_formats::capture::DOWNSCALE_FILTER`] (`"area"`: area averaging, as OpenCV
    /// `INTER_AREA` and PIL `BOX` at integer factors, or the capture's own `images_<n>` copies),
    /// the convention other 3DGS trainers score under. Older `metrics.json` files lack it (their
    /// photos were downscaled with a softer triangle filter, reading 2–3 dB higher).
    pub downscale: &'static str,
    /// Per-view metrics.
    pub views: Vec<ViewMetrics>,
    /// Final number of splats.
    pub splats: usize,
    /// Optimizer steps run.
    pub steps: usize,
    /// Wall-clock seconds of the whole stage.
    pub wall_s: f64,
    /// Training steps per second (training loop only).
    pub steps_per_s: f64,
    /// Peak resident memory of the process when the report was written, bytes (Linux `VmHWM`;
    /// `None` elsewhere). Covers the whole process, so in a job it includes earlier stages.
    pub peak_rss_bytes: Option<u64>,
    /// The training-image cache: budget, peak bytes held, loads and hits (absent, so zero, in
    /// reports written before the cache existed).
    #[serde(default)]
    pub image_cache: super::CacheStats,
    /// Views trained on.
    pub train_views: usize,
    /// Views evaluated.
    pub test_views: usize,
    /// True when the evaluation views were also trained on (fewer than 2 views, or
    /// `eval_every = 0`).
    pub eval_on_train_views: bool,
    /// Photometric loss `(1 − λ)·L1 + λ·(1 − SSIM)` of the last step (the `mcmc` preset's opacity
    /// and scale L1 terms act on the gradients only and are not included).
    pub final_loss: f64,
    /// `(step, loss)` samples of the photometric loss curve (mean over each sampling window).
    pub loss_curve: Vec<(usize, f64)>,
    /// `(step, dB)`: mean held-out PSNR ([`held_out_psnr`]) at about
    /// [`PSNR_CURVE_EVALUATIONS`] steps spread over the run, then the final `psnr_db` at the
    /// last step. Older `metrics.json` files lack it.
    pub psnr_curve: Vec<(usize, f64)>,
    /// `(step, splats)`: number of splats at every [`Metrics::loss_curve`] sample. Older
    /// `metrics.json` files lack it.
    pub splat_count_curve: Vec<(usize, usize)>,
    /// Where the initial splats came from.
    pub init: super::InitSummary,
}
pub use super::params::PSNR_CURVE_EVALUATIONS;

/// Mean PSNR in dB over `views`, computed like [`evaluate_view`] (render and ground truth both
/// quantised to 8 bits) but writing nothing. Used during training for [`Metrics::psnr_curve`].
///
/// - `splats`: the current splats (host copy; quaternions need not be normalised);
/// - `sh_degree`: SH degree to render with (the active degree at that step);
/// - `views`: held-out views (image `[H, W, 3]` linear RGB in [0, 1]); empty gives NaN.
///
/// # Errors
/// [`crate::Error::Kernel`] from the render.
pub fn held_out_psnr(
    renderer: &kiln_kernels::Renderer,
    splats: &GaussianSplats,
    sh_degree: u32,
    views: &[super::TrainView],
    options: &RenderOptions,
) -> crate::Result<f64> {
    if views.is_empty() {
        return Ok(f64::NAN);
    }
    let to_f = |v: &[u8]| v.iter().map(|&b| b as f32 / 255.0).collect::<Vec<f32>>();
    let mut sum = 0.0;
    for v in views {
        let render = to_f(&quantise_u8(&render_host(
            renderer, splats, sh_degree, &v.camera, options,
        )?));
        let pixels = v.load()?;
        sum += psnr_weighted(
            &render,
            &to_f(&quantise_u8(&pixels.image)),
            pixels.loss_weights.as_deref(),
        );
    }
    Ok(sum / views.len() as f64)
}

/// Render `splats` from `camera` on `renderer` and return `[H, W, 3]` linear RGB (unclamped).
///
/// # Errors
/// [`crate::Error::Kernel`] when the rasterizer rejects the inputs or the device fails.
pub fn render_host(
    renderer: &kiln_kernels::Renderer,
    splats: &GaussianSplats,
    sh_degree: u32,
    camera: &Camera,
    options: &RenderOptions,
) -> crate::Result<Vec<f32>> {
    let out = renderer.forward(
        &SplatsRef {
            means: &splats.means,
            log_scales: &splats.log_scales,
            rotations: &splats.rotations,
            logit_opacities: &splats.logit_opacities,
            sh_coeffs: &splats.sh_coeffs,
            sh_degree,
        },
        camera,
        options,
    )?;
    Ok(out.image)
}

/// What [`evaluate_view`] renders: the splats on a device with the run's settings.
#[derive(Debug, Clone, Copy)]
pub struct EvalRender<'a> {
    /// The rasterizer: the CPU twin or the CUDA kernels.
    pub renderer: &'a kiln_kernels::Renderer,
    /// The trained splats (host copy; quaternions need not be normalised).
    pub splats: &'a GaussianSplats,
    /// SH degree to render with (≤ the degree the splats hold).
    pub sh_degree: u32,
    /// Background (linear RGB) and opacity rule, as in training.
    pub options: &'a RenderOptions,
}

/// Evaluate one view: metrics on 8-bit images (over the pixels of nonzero
/// `pixels.loss_weights` `[H, W]` when given: a masked capture's held-out views), and the
/// side-by-side PNG written to `eval_dir/<stem>.png` ([`file_stem`] of `view.name`; ground truth
/// left, render right; pixels of weight 0, which the metrics skip, washed out towards grey as
/// `96 + v/4` on both sides).
///
/// - `render`: the splats and how to render them;
/// - `view`: its name and camera (W × H); `pixels`: its loaded pixels (`image` `[H, W, 3]`
///   linear RGB in [0, 1], checked against the camera by [`super::TrainView::load`]).
///
/// # Errors
/// [`crate::Error::Kernel`] from the render; [`crate::Error::Io`] when the PNG cannot be written.
pub fn evaluate_view(
    render: &EvalRender<'_>,
    view: &super::TrainView,
    pixels: &super::ViewPixels,
    eval_dir: &Path,
) -> crate::Result<ViewMetrics> {
    let (name, camera) = (&view.name, &view.camera);
    let weights = pixels.loss_weights.as_deref();
    let (w, h) = (camera.width as usize, camera.height as usize);
    let render = quantise_u8(&render_host(
        render.renderer,
        render.splats,
        render.sh_degree,
        camera,
        render.options,
    )?);
    let gt = quantise_u8(&pixels.image);
    let to_f = |v: &[u8]| v.iter().map(|&b| b as f32 / 255.0).collect::<Vec<f32>>();
    let (rf, gf) = (to_f(&render), to_f(&gt));
    let metrics = ViewMetrics {
        name: name.to_string(),
        psnr_db: psnr_weighted(&rf, &gf, weights),
        ssim: ssim_weighted(&rf, &gf, weights, h, w),
    };
    let mut side = image::RgbImage::new(2 * w as u32, h as u32);
    for y in 0..h {
        for x in 0..w {
            let p = y * w + x;
            let i = 3 * p;
            // Pixels the metrics skip are shown washed out towards grey, on both sides.
            let shown = |v: u8| match weights {
                Some(wt) if wt[p] == 0.0 => 96 + v / 4,
                _ => v,
            };
            side.put_pixel(
                x as u32,
                y as u32,
                image::Rgb([shown(gt[i]), shown(gt[i + 1]), shown(gt[i + 2])]),
            );
            side.put_pixel(
                (x + w) as u32,
                y as u32,
                image::Rgb([shown(render[i]), shown(render[i + 1]), shown(render[i + 2])]),
            );
        }
    }
    let path = eval_dir.join(format!("{}.png", file_stem(name)));
    std::fs::create_dir_all(eval_dir).map_err(|e| crate::Error::io(eval_dir, e))?;
    side.save(&path)
        .map_err(|e| crate::Error::io(&path, std::io::Error::other(e)))?;
    Ok(metrics)
}

/// The file stem of a view's `eval/<stem>.png` from its name: path separators and other unsafe
/// characters become `_`, a `.png`/`.jpg` suffix is dropped, and an empty name becomes `view`.
/// Report readers use it to pair `metrics.json` views with their PNGs.
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s
        .trim_end_matches(".png")
        .trim_end_matches(".jpg")
        .to_string();
    if s.is_empty() { "view".to_string() } else { s }
}

/// The loss curve as a standalone SVG (800 × 300, log-scaled loss axis, step on x).
pub fn loss_svg(curve: &[(usize, f64)]) -> String {
    let (w, h, pad) = (800.0f64, 300.0f64, 40.0f64);
    let pts: Vec<(f64, f64)> = curve
        .iter()
        .filter(|(_, l)| l.is_finite() && *l > 0.0)
        .map(|&(s, l)| (s as f64, l.log10()))
        .collect();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
        let (x0, x1) = (first.0, last.0.max(first.0 + 1.0));
        let lo = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = pts
            .iter()
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max)
            .max(lo + 1e-6);
        let px = |x: f64| pad + (x - x0) / (x1 - x0) * (w - 2.0 * pad);
        let py = |y: f64| h - pad - (y - lo) / (hi - lo) * (h - 2.0 * pad);
        let poly: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            poly.join(" ")
        ));
        svg.push_str(&format!(
            "<text x=\"{pad}\" y=\"20\" font-family=\"sans-serif\" font-size=\"12\">loss (log scale) {:.4} → {:.4}, steps {} → {}</text>\n",
            10f64.powf(pts[0].1),
            10f64.powf(last.1),
            first.0,
            last.0
        ));
        svg.push_str(&format!(
            "<line x1=\"{pad}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/>\n\
             <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{0}\" stroke=\"black\"/>\n",
            h - pad,
            w - pad
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psnr_of_mse_0_01_is_20_db() {
        // Every element differs by 0.1 → MSE 0.01 → 10·log10(100) = 20 dB.
        let a = vec![0.5f32; 300];
        let b = vec![0.6f32; 300];
        assert!((psnr(&a, &b) - 20.0).abs() < 1e-4);
    }

    #[test]
    fn quantisation_clamps_and_rounds() {
        assert_eq!(
            quantise_u8(&[-1.0, 0.0, 0.5, 1.0, 2.0, f32::NAN]),
            vec![0, 0, 128, 255, 255, 0]
        );
    }

    #[test]
    fn identical_views_have_ssim_one() {
        let v: Vec<f32> = (0..16 * 16 * 3).map(|i| (i % 7) as f32 / 7.0).collect();
        assert!((ssim_host(&v, &v, 16, 16) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn svg_is_well_formed_for_a_short_curve() {
        let s = loss_svg(&[(1, 0.5), (100, 0.1), (200, 0.05)]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("<polyline"));
        assert!(loss_svg(&[]).contains("</svg>"));
    }

    #[test]
    fn view_names_become_safe_file_names() {
        assert_eq!(file_stem("images/a b.png"), "images_a_b");
        assert_eq!(file_stem(""), "view");
    }
}
