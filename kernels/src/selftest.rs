//! Parity check of a device renderer against the CPU twin: seeded random scenes rendered on both,
//! the images, every gradient, the fused loss and one fused Adam step compared tensor by tensor, then
//! a few optimisation steps on both
//! (`kiln selftest`). The CPU twin is the reference: it is itself checked against finite
//! differences (`tests/finite_diff.rs`). Every scene runs twice, with the classic opacity and with
//! Mip-Splatting's compensated opacity ([`RenderOptions::antialiased`]), so both rules of the
//! projection kernels, forward and backward, are compared.
//!
//! Tolerances (issue 4): images within [`IMAGE_TOLERANCE`] absolute (up to [`FLIP_SHARE`] of the
//! values may differ by one rounding flip at the α cutoff, see [`flip_bound`]), gradients within
//! [`GRADIENT_TOLERANCE`] relative to the tensor's largest CPU magnitude (per-element relative error
//! is meaningless for the many near-zero gradients, and float sums in a different order legitimately
//! differ by a few ulps of the largest term).

use serde::Serialize;

use crate::device::{Device, DeviceRequest};
use crate::render::{RenderOptions, Renderer, SplatsRef};
use crate::{Camera, Error};

/// Largest allowed absolute difference of an image or alpha value (linear RGB in [0, 1]).
pub const IMAGE_TOLERANCE: f64 = 1e-4;
/// Largest allowed `max |cpu − device| / max |cpu|` of a gradient tensor.
pub const GRADIENT_TOLERANCE: f64 = 1e-3;
/// Largest share of a rendered tensor's values allowed beyond [`IMAGE_TOLERANCE`], for rounding
/// flips (see [`flip_bound`]): one value in 10,000.
pub const FLIP_SHARE: f64 = 1e-4;

/// A seeded random scene: N splats in front of one camera, every SH degree's coefficients filled.
#[derive(Debug, Clone)]
pub struct Scene {
    /// `[N, 3]` metres.
    pub means: Vec<f32>,
    /// `[N, 3]` log metres.
    pub log_scales: Vec<f32>,
    /// `[N, 4]` wxyz.
    pub rotations: Vec<f32>,
    /// `[N]` logits.
    pub logit_opacities: Vec<f32>,
    /// `[N, K, 3]`, K = (sh_degree + 1)².
    pub sh_coeffs: Vec<f32>,
    /// Active SH degree.
    pub sh_degree: u32,
    /// The camera (identity pose, principal point off-centre).
    pub camera: Camera,
}

impl Scene {
    /// The device-resident training state at the scene's parameters, with zero Adam moments.
    pub fn train_state(&self) -> crate::cuda::train::HostTrainState {
        let n = self.logit_opacities.len();
        let k = self.sh_coeffs.len() / (3 * n.max(1));
        let groups = [
            self.means.clone(),
            self.log_scales.clone(),
            self.rotations.clone(),
            self.logit_opacities.clone(),
            self.sh_coeffs.clone(),
        ];
        let zeros = groups.clone().map(|g| vec![0.0f32; g.len()]);
        crate::cuda::train::HostTrainState {
            groups,
            m: zeros.clone(),
            v: zeros,
            t: [0; 5],
            k: k.max(1),
        }
    }

    /// Borrowed view for the renderers.
    pub fn splats(&self) -> SplatsRef<'_> {
        SplatsRef {
            means: &self.means,
            log_scales: &self.log_scales,
            rotations: &self.rotations,
            logit_opacities: &self.logit_opacities,
            sh_coeffs: &self.sh_coeffs,
            sh_degree: self.sh_degree,
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny seeded generator, so the scenes are identical on
/// every machine without a `rand` dependency in the library.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
}

/// `n` splats spread through the frustum of a `width × height` camera 2–8 m deep, sizes from
/// sub-pixel to a few tiles, random rotations, opacities and SH (degree `sh_degree`).
pub fn random_scene(seed: u64, n: usize, width: u32, height: u32, sh_degree: u32) -> Scene {
    let mut rng = SplitMix(seed);
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    let f = 0.9 * width.max(height) as f32;
    let camera = Camera {
        width,
        height,
        fx: f,
        fy: f * 1.02,
        cx: 0.52 * width as f32,
        cy: 0.47 * height as f32,
        world_to_camera: [
            [1.0, 0.0, 0.0, 0.05],
            [0.0, 1.0, 0.0, -0.02],
            [0.0, 0.0, 1.0, 0.1],
            [0.0, 0.0, 0.0, 1.0],
        ],
    };
    let mut s = Scene {
        means: Vec::with_capacity(3 * n),
        log_scales: Vec::with_capacity(3 * n),
        rotations: Vec::with_capacity(4 * n),
        logit_opacities: Vec::with_capacity(n),
        sh_coeffs: Vec::with_capacity(3 * k * n),
        sh_degree,
        camera,
    };
    let (hx, hy) = (0.6 * width as f32 / f, 0.6 * height as f32 / f);
    for _ in 0..n {
        let z = rng.range(2.0, 8.0);
        s.means
            .extend([rng.range(-hx, hx) * z, rng.range(-hy, hy) * z, z]);
        let base = rng.range(-4.5, -1.8);
        s.log_scales.extend([
            base + rng.range(-0.5, 0.5),
            base + rng.range(-0.5, 0.5),
            base + rng.range(-0.5, 0.5),
        ]);
        s.rotations.extend([
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
        ]);
        s.logit_opacities.push(rng.range(-2.0, 3.0));
        for c in 0..k {
            let amp = if c == 0 { 1.5 } else { 0.3 };
            for _ in 0..3 {
                s.sh_coeffs.push(rng.range(-amp, amp));
            }
        }
    }
    s
}

/// One tensor's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct TensorDiff {
    /// Tensor name, e.g. `"grad.means [N, 3]"`.
    pub tensor: String,
    /// Number of elements.
    pub elements: usize,
    /// `max |cpu − device|`.
    pub max_abs: f64,
    /// `max |cpu − device| / max |cpu|` (0 when both are all zero).
    pub max_rel: f64,
    /// Which of the two is tested and its bound: `"abs ≤ 1e-4"` or `"rel ≤ 1e-3"`.
    pub bound: String,
    /// Elements beyond the bound (absolute, or relative to `max |cpu|`).
    pub over_bound: usize,
    /// Index of the largest difference.
    pub worst_index: usize,
    /// For a rendered tensor: the largest difference one rounding flip can make (see
    /// [`flip_bound`]); up to [`FLIP_SHARE`] of its values may differ by that much.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flip_bound: Option<f64>,
    /// Whether the tensor is within its bound (and has no NaN on either side).
    pub pass: bool,
}

fn diff(tensor: &str, cpu: &[f32], dev: &[f32], relative: bool) -> TensorDiff {
    let mut max_abs = 0.0f64;
    let mut max_ref = 0.0f64;
    let mut worst_index = 0;
    let mut nan = cpu.len() != dev.len();
    for (i, (&a, &b)) in cpu.iter().zip(dev).enumerate() {
        if a.is_nan() != b.is_nan() {
            nan = true;
        }
        let d = (f64::from(a) - f64::from(b)).abs();
        if d > max_abs {
            (max_abs, worst_index) = (d, i);
        }
        max_ref = max_ref.max(f64::from(a).abs());
    }
    let max_rel = if max_ref > 0.0 {
        max_abs / max_ref
    } else if max_abs > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let limit = if relative {
        GRADIENT_TOLERANCE * max_ref
    } else {
        IMAGE_TOLERANCE
    };
    let over_bound = cpu
        .iter()
        .zip(dev)
        .filter(|&(&a, &b)| (f64::from(a) - f64::from(b)).abs() > limit)
        .count();
    let (pass, bound) = if relative {
        (
            max_rel <= GRADIENT_TOLERANCE,
            format!("rel ≤ {GRADIENT_TOLERANCE:e}"),
        )
    } else {
        (
            max_abs <= IMAGE_TOLERANCE,
            format!("abs ≤ {IMAGE_TOLERANCE:e}"),
        )
    };
    TensorDiff {
        tensor: tensor.into(),
        elements: cpu.len(),
        max_abs,
        max_rel,
        bound,
        over_bound,
        worst_index,
        flip_bound: None,
        pass: pass && !nan && max_abs.is_finite(),
    }
}

/// The largest difference one rounding flip can make to a rendered value whose colours (and
/// background) are at most `largest`.
///
/// The two renderers round differently (the device contracts multiply-adds and has its own
/// `exp`), so where a splat's α = opacity·e^(−σ) lies within a few ulps of ALPHA_THRESHOLD
/// (1/255), one of them skips it and the other composites it. Compositing is
/// `V = Σ cᵢ·αᵢ·Tᵢ + T·bg`; dropping splat j changes V by `αⱼ·Tⱼ·(cⱼ − V_behind)`, at most
/// `ALPHA_THRESHOLD · largest` since every term is non-negative. A flip at the transmittance stop
/// changes V by less than TRANSMITTANCE_THRESHOLD · largest. Such values are rare (the CPU twin in
/// `f32` against itself in `f64` shows 9 of 691,200 image values over 1e-4, at most 1.2e-3, on the
/// 20k-splat scene), so a rendered tensor passes with up to [`FLIP_SHARE`] of its values beyond
/// [`IMAGE_TOLERANCE`] and none beyond this bound. A wrong kernel changes far more values.
pub fn flip_bound(largest: f64) -> f64 {
    let per_flip =
        f64::from(crate::consts::ALPHA_THRESHOLD + crate::consts::TRANSMITTANCE_THRESHOLD);
    per_flip * largest + IMAGE_TOLERANCE
}

/// `d` with rounding flips allowed (see [`flip_bound`]): passes when the values over the
/// tolerance are few and each within one flip.
fn allow_flips(mut d: TensorDiff, largest: f64) -> TensorDiff {
    let bound = flip_bound(largest);
    let few = d.over_bound as f64 <= (FLIP_SHARE * d.elements as f64).max(1.0);
    if !d.pass && few && d.max_abs <= bound && d.max_abs.is_finite() {
        d.pass = true;
    }
    d.bound = format!(
        "abs ≤ {IMAGE_TOLERANCE:e}, or ≤ {bound:.2e} (one rounding flip) on at most {FLIP_SHARE:e} of the values"
    );
    d.flip_bound = Some(bound);
    d
}

/// The largest colour channel the CPU twin composited in `forward` and the background: the scale
/// of [`flip_bound`].
fn largest_value(forward: &crate::render::ForwardOutput, options: &RenderOptions) -> f64 {
    let background = options.background.iter().fold(0.0f32, |m, &v| m.max(v));
    let colours = match &forward.saved {
        crate::render::Saved::Cpu(s) => s
            .projected
            .iter()
            .flat_map(|p| p.color)
            .fold(0.0f32, f32::max),
        crate::render::Saved::Gpu(_) => 1.0,
    };
    f64::from(colours.max(background))
}

/// One scene's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct SceneReport {
    /// Seed of [`random_scene`].
    pub seed: u64,
    /// Splats.
    pub splats: usize,
    /// Image width × height, pixels.
    pub size: [u32; 2],
    /// SH degree.
    pub sh_degree: u32,
    /// [`RenderOptions::antialiased`] of every render of this comparison.
    pub antialiased: bool,
    /// Tile intersections on the CPU and on the device (equal unless a splat's tile box differs).
    pub intersections: [usize; 2],
    /// Image, alpha, radii, then the six gradient tensors.
    pub tensors: Vec<TensorDiff>,
    /// Per step: loss on the CPU and on the device (mean squared error against a target render).
    pub training_loss: Vec<[f64; 2]>,
    /// Per step: the training loss `(1 − λ)·L1 + λ·(1 − SSIM)` of the device-resident training
    /// state (forward, fused loss, backward, fused Adam all on the device) and of the same
    /// sequence run with the CPU twin's functions. Empty for a CPU "device".
    pub resident_training_loss: Vec<[f64; 2]>,
    /// Whether every tensor and the training losses are within bounds.
    pub pass: bool,
}

/// The whole selftest result (printed as JSON by `kiln selftest`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The device as requested (`cuda:0`, `emulator`).
    pub device: String,
    /// The device's name.
    pub device_name: String,
    /// Peak device memory during the test, bytes.
    pub peak_device_bytes: Option<usize>,
    /// Per-scene results.
    pub scenes: Vec<SceneReport>,
    /// Whether every scene passed.
    pub pass: bool,
}

/// The scenes `kiln selftest` runs: `(seed, splats, width, height, sh_degree)`. Small enough for the
/// emulator; they cover every SH degree, several tiles, a partial edge tile, and splats straddling
/// tiles. `large` adds a 20k-splat 640×360 scene (GPU only: minutes on the emulator).
pub fn default_scenes(large: bool) -> Vec<(u64, usize, u32, u32, u32)> {
    let mut v = vec![
        (1, 200, 40, 28, 0),
        (2, 400, 72, 40, 3),
        (3, 600, 50, 50, 1),
    ];
    if large {
        v.push((4, 20_000, 640, 360, 3));
    }
    v
}

/// The render options of a selftest comparison: background (0.1, 0.2, 0.3), and the classic or
/// the Mip-Splatting (`antialiased`) opacity.
pub fn selftest_options(antialiased: bool) -> RenderOptions {
    RenderOptions {
        background: [0.1, 0.2, 0.3],
        antialiased,
        absgrad: false,
    }
}

/// Compares `device` against the CPU twin on one scene with `options` (see
/// [`selftest_options`]): forward, backward (with a fixed pseudo-random ∂L/∂image), then `steps`
/// plain-gradient-descent steps on MSE to a target made by perturbing the scene, run
/// independently on both renderers, and the same number of device-resident training steps.
///
/// # Errors
/// Any renderer error (the device failing is an error, a mismatch is a failing report).
pub fn compare_scene(
    device: &Renderer,
    scene: &Scene,
    seed: u64,
    steps: usize,
    options: &RenderOptions,
) -> Result<SceneReport, Error> {
    let cpu = Renderer::Cpu;
    let options = *options;
    let splats = scene.splats();
    let fc = cpu.forward(&splats, &scene.camera, &options)?;
    let fd = device.forward(&splats, &scene.camera, &options)?;
    let mut rng = SplitMix(seed ^ 0x5eed);
    let grad_image: Vec<f32> = (0..fc.image.len()).map(|_| rng.range(-1.0, 1.0)).collect();
    let gc = cpu.backward(&splats, &scene.camera, &options, &fc, &grad_image)?;
    let gd = device.backward(&splats, &scene.camera, &options, &fd, &grad_image)?;
    let mut tensors = vec![
        allow_flips(
            diff("image [H, W, 3]", &fc.image, &fd.image, false),
            largest_value(&fc, &options),
        ),
        allow_flips(diff("alpha [H, W]", &fc.alpha, &fd.alpha, false), 1.0),
        diff("radii [N]", &fc.radii, &fd.radii, false),
        diff("grad.means [N, 3]", &gc.means, &gd.means, true),
        diff(
            "grad.log_scales [N, 3]",
            &gc.log_scales,
            &gd.log_scales,
            true,
        ),
        diff("grad.rotations [N, 4]", &gc.rotations, &gd.rotations, true),
        diff(
            "grad.logit_opacities [N]",
            &gc.logit_opacities,
            &gd.logit_opacities,
            true,
        ),
        diff(
            "grad.sh_coeffs [N, K, 3]",
            &gc.sh_coeffs,
            &gd.sh_coeffs,
            true,
        ),
        diff(
            "means2d_grad_norm [N]",
            &gc.means2d_grad_norm,
            &gd.means2d_grad_norm,
            true,
        ),
    ];
    // The AbsGS statistic (`absgrad`): one more backward pass of the same forward on each device;
    // only `means2d_grad_norm` depends on the option.
    let abs_options = RenderOptions {
        absgrad: true,
        ..options
    };
    let gc_abs = cpu.backward(&splats, &scene.camera, &abs_options, &fc, &grad_image)?;
    let gd_abs = device.backward(&splats, &scene.camera, &abs_options, &fd, &grad_image)?;
    tensors.push(diff(
        "means2d_grad_norm absgrad [N]",
        &gc_abs.means2d_grad_norm,
        &gd_abs.means2d_grad_norm,
        true,
    ));
    // The fused training loss on both devices, against a random target.
    let (h, w) = (scene.camera.height as usize, scene.camera.width as usize);
    let target: Vec<f32> = (0..fc.image.len()).map(|_| rng.range(0.0, 1.0)).collect();
    let lc = cpu.photometric_loss(&fc.image, &target, None, h, w, 0.2)?;
    let ld = device.photometric_loss(&fd.image, &target, None, h, w, 0.2)?;
    tensors.push(diff("loss [1]", &[lc.loss as f32], &[ld.loss as f32], true));
    tensors.push(diff(
        "loss.grad_image [H, W, 3]",
        &lc.grad_image,
        &ld.grad_image,
        true,
    ));
    // Weighted (masked) loss: a random third of the pixels ignored, the rest at random weights.
    let weights: Vec<f32> = (0..h * w)
        .map(|_| {
            let r = rng.range(0.0, 1.0);
            if r < 1.0 / 3.0 { 0.0 } else { r }
        })
        .collect();
    let lc = cpu.photometric_loss(&fc.image, &target, Some(&weights), h, w, 0.2)?;
    let ld = device.photometric_loss(&fd.image, &target, Some(&weights), h, w, 0.2)?;
    tensors.push(diff(
        "masked loss [1]",
        &[lc.loss as f32],
        &[ld.loss as f32],
        true,
    ));
    tensors.push(diff(
        "masked loss.grad_image [H, W, 3]",
        &lc.grad_image,
        &ld.grad_image,
        true,
    ));
    tensors.extend(compare_adam(device, scene, &gc.sh_coeffs, &mut rng)?);
    let training_loss = train_both(device, scene, &options, steps)?;
    let (resident_training_loss, resident_moments) =
        train_resident(device, scene, &options, steps)?;
    tensors.extend(resident_moments);
    let loss_ok = training_loss
        .iter()
        .chain(&resident_training_loss)
        .all(|[a, b]| a.is_finite() && (a - b).abs() <= GRADIENT_TOLERANCE * a.abs().max(1e-6));
    let pass = tensors.iter().all(|t| t.pass) && loss_ok;
    tensors.shrink_to_fit();
    Ok(SceneReport {
        seed,
        splats: scene.logit_opacities.len(),
        size: [scene.camera.width, scene.camera.height],
        sh_degree: scene.sh_degree,
        antialiased: options.antialiased,
        intersections: [fc.saved.intersection_count(), fd.saved.intersection_count()],
        tensors,
        training_loss,
        resident_training_loss,
        pass,
    })
}

/// One fused Adam step (step 3, SH learning-rate factors 1 and 1/20 per coefficient) on the
/// scene's SH coefficients with the CPU's gradient `grad` and random moments, on both devices;
/// compares the parameters and both moments.
fn compare_adam(
    device: &Renderer,
    scene: &Scene,
    grad: &[f32],
    rng: &mut SplitMix,
) -> Result<Vec<TensorDiff>, Error> {
    let k = scene.sh_coeffs.len() / scene.logit_opacities.len().max(1) / 3;
    let factors: Vec<f32> = (0..k.max(1))
        .map(|i| if i == 0 { 1.0 } else { 0.05 })
        .collect();
    let scale = crate::cpu::adam::LrScale {
        values: &factors,
        stride: 3,
    };
    let hyper = crate::cpu::adam::AdamStep::new(2.5e-3, 3, 0.9, 0.999, 1e-15)?;
    let m0: Vec<f32> = grad.iter().map(|_| rng.range(-1e-3, 1e-3)).collect();
    let v0: Vec<f32> = grad.iter().map(|_| rng.range(0.0, 1e-6)).collect();
    let mut out = Vec::new();
    let mut results = Vec::new();
    for r in [&Renderer::Cpu, device] {
        let (mut p, mut m, mut v) = (scene.sh_coeffs.clone(), m0.clone(), v0.clone());
        r.adam_step(&mut p, grad, &mut m, &mut v, Some(scale), &hyper)?;
        results.push((p, m, v));
    }
    let (c, d) = (&results[0], &results[1]);
    out.push(diff("adam.sh_coeffs [N, K, 3]", &c.0, &d.0, false));
    out.push(diff("adam.m [N, K, 3]", &c.1, &d.1, true));
    out.push(diff("adam.v [N, K, 3]", &c.2, &d.2, true));
    Ok(out)
}

/// What both sides of the resident-training comparison follow: the target render (the scene with
/// shifted colours), the per-group learning rates, Adam's (β₁, β₂, ε), the regularisers and the SH
/// rate scale.
struct ResidentRecipe {
    target: Vec<f32>,
    lrs: [f64; 5],
    adam: [f64; 3],
    regularisers: [crate::cpu::adam::ActivationL1; 5],
    sh_lr_scale: Vec<f32>,
}

fn resident_recipe(scene: &Scene, options: &RenderOptions) -> Result<ResidentRecipe, Error> {
    use crate::cpu::adam::ActivationL1;
    // The scene with shifted colours, then every value offset: the L1 term's gradient is
    // sign(image − target), so wherever the render and the target were equal (a channel the
    // shift leaves alone, pixels whose splats clamp that channel to 0, the background) its sign
    // would come from rounding on the device while the CPU twin's residual is exactly 0.
    let mut target_scene = scene.clone();
    for (i, v) in target_scene.sh_coeffs.iter_mut().enumerate() {
        if i % 3 == 1 {
            *v -= 0.25;
        }
    }
    let mut target = Renderer::Cpu
        .forward(&target_scene.splats(), &scene.camera, options)?
        .image;
    for (i, v) in target.iter_mut().enumerate() {
        *v += [0.03, -0.05, 0.04][i % 3];
    }
    let n = scene.logit_opacities.len();
    let k = scene.sh_coeffs.len() / (3 * n.max(1));
    // MCMC's opacity and scale L1 penalties (weight 0.01 over the mean), so the regularised path
    // of the Adam kernel is compared too.
    let mut regularisers = [ActivationL1::None; 5];
    regularisers[1] = ActivationL1::Exp(0.01 / (3 * n.max(1)) as f32);
    regularisers[3] = ActivationL1::Sigmoid(0.01 / n.max(1) as f32);
    Ok(ResidentRecipe {
        target,
        // A tenth of the INRIA rates: at those, the first Adam step (≈ lr·sign(g) per
        // parameter) overshoots on these small scenes (the loss rises).
        lrs: [1e-4, 5e-4, 1e-4, 5e-3, 2.5e-4],
        adam: [0.9, 0.999, 1e-15],
        regularisers,
        sh_lr_scale: (0..k).map(|i| if i == 0 { 1.0 } else { 0.05 }).collect(),
    })
}

/// One training step of the CPU twin, function by function (forward, fused loss, backward, fused
/// Adam per group at step `t`); returns the loss before the update.
fn cpu_resident_step(
    host: &mut crate::cuda::train::HostTrainState,
    scene: &Scene,
    options: &RenderOptions,
    recipe: &ResidentRecipe,
    t: u32,
) -> Result<f64, Error> {
    use crate::cpu::adam::{AdamStep, LrScale, adam_step};
    let cam = &scene.camera;
    let (h, w) = (cam.height as usize, cam.width as usize);
    let [means, log_scales, rotations, logits, sh] = &host.groups;
    let splats = SplatsRef {
        means,
        log_scales,
        rotations,
        logit_opacities: logits,
        sh_coeffs: sh,
        sh_degree: scene.sh_degree,
    };
    let f = Renderer::Cpu.forward(&splats, cam, options)?;
    let l = crate::cpu::loss::photometric_loss(&f.image, &recipe.target, h, w, 0.2);
    let g = Renderer::Cpu.backward(&splats, cam, options, &f, &l.grad_image)?;
    let grads = [
        g.means,
        g.log_scales,
        g.rotations,
        g.logit_opacities,
        g.sh_coeffs,
    ];
    let [b1, b2, eps] = recipe.adam;
    for (i, grad) in grads.iter().enumerate() {
        let hyper =
            AdamStep::new(recipe.lrs[i], t, b1, b2, eps)?.with_regulariser(recipe.regularisers[i]);
        let scale = (i == 4).then_some(LrScale {
            values: &recipe.sh_lr_scale,
            stride: 3,
        });
        let (p, m, v) = (&mut host.groups[i], &mut host.m[i], &mut host.v[i]);
        adam_step(p, grad, m, v, scale, &hyper)?;
    }
    Ok(l.loss)
}

/// `steps` steps of [`crate::cuda::train::GpuTrainState`] on `device` towards the recipe's
/// target, and the same steps with the CPU twin's forward, fused loss, backward and fused Adam;
/// returns the per-step losses (CPU first) and [`first_step_moment_diffs`]. Empty when
/// `device` is the CPU.
fn train_resident(
    device: &Renderer,
    scene: &Scene,
    options: &RenderOptions,
    steps: usize,
) -> Result<(Vec<[f64; 2]>, Vec<TensorDiff>), Error> {
    use crate::cuda::train::{GpuTrainState, TrainStep};
    let Renderer::Gpu(gpu) = device else {
        return Ok((Vec::new(), Vec::new()));
    };
    if scene.logit_opacities.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let recipe = resident_recipe(scene, options)?;
    let mut host = scene.train_state();
    let mut state = GpuTrainState::upload(std::sync::Arc::clone(gpu), &host, &recipe.sh_lr_scale)?;
    let mut losses = Vec::with_capacity(steps);
    let mut moments = Vec::new();
    for t in 1..=steps as u32 {
        let step = TrainStep {
            camera: &scene.camera,
            target_key: 0,
            target: &recipe.target,
            refresh_target: false,
            weights: None,
            sh_degree: scene.sh_degree,
            options,
            lambda: 0.2,
            lrs: recipe.lrs,
            adam: recipe.adam,
            regularisers: recipe.regularisers,
        };
        let device_loss = state.step(&step)?.loss;
        let cpu_loss = cpu_resident_step(&mut host, scene, options, &recipe, t)?;
        losses.push([cpu_loss, device_loss]);
        if t == 1 {
            moments = first_step_moment_diffs(&host, &state.download()?);
        }
    }
    Ok((losses, moments))
}

/// The first Adam moments after the first resident step, CPU against device, per group: `m` is
/// then `(1 − β₁)·g`, so this compares the gradients the device-resident path computed (its own
/// forward, fused loss and backward on resident buffers) under the gradient rule. The parameters
/// themselves are not compared: Adam's first step moves each by ≈ lr·sign(g), so a gradient far
/// below its tensor's largest (10⁻⁴ of it, the size of the rounding differences) can move the
/// other way on the other device.
fn first_step_moment_diffs(
    cpu: &crate::cuda::train::HostTrainState,
    dev: &crate::cuda::train::HostTrainState,
) -> Vec<TensorDiff> {
    const NAMES: [&str; 5] = [
        "means [N, 3]",
        "log_scales [N, 3]",
        "rotations [N, 4]",
        "logit_opacities [N]",
        "sh_coeffs [N, K, 3]",
    ];
    (0..5)
        .map(|i| {
            let name = format!("resident step 1 adam.m {}", NAMES[i]);
            diff(&name, &cpu.m[i], &dev.m[i], true)
        })
        .collect()
}

/// MSE to a target image (the scene with shifted colours) and `steps` sign-free gradient steps on
/// every parameter group, on the CPU and on `device` independently; returns the per-step losses.
fn train_both(
    device: &Renderer,
    scene: &Scene,
    options: &RenderOptions,
    steps: usize,
) -> Result<Vec<[f64; 2]>, Error> {
    let mut target_scene = scene.clone();
    for (i, v) in target_scene.sh_coeffs.iter_mut().enumerate() {
        if i % 3 == 0 {
            *v += 0.3;
        }
    }
    let target = Renderer::Cpu
        .forward(&target_scene.splats(), &scene.camera, options)?
        .image;
    let mut states = [scene.clone(), scene.clone()];
    let renderers = [Renderer::Cpu, device.clone()];
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let mut pair = [0.0f64; 2];
        for (slot, (s, r)) in states.iter_mut().zip(&renderers).enumerate() {
            let f = r.forward(&s.splats(), &s.camera, options)?;
            let m = f.image.len() as f32;
            let grad: Vec<f32> = f
                .image
                .iter()
                .zip(&target)
                .map(|(a, b)| 2.0 * (a - b) / m)
                .collect();
            pair[slot] = f
                .image
                .iter()
                .zip(&target)
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum::<f64>()
                / f64::from(m);
            let g = r.backward(&s.splats(), &s.camera, options, &f, &grad)?;
            let step = |p: &mut [f32], g: &[f32], lr: f32| {
                for (p, g) in p.iter_mut().zip(g) {
                    *p -= lr * g;
                }
            };
            step(&mut s.sh_coeffs, &g.sh_coeffs, 50.0);
            step(&mut s.logit_opacities, &g.logit_opacities, 20.0);
            step(&mut s.means, &g.means, 0.05);
            step(&mut s.log_scales, &g.log_scales, 0.5);
            step(&mut s.rotations, &g.rotations, 0.5);
        }
        losses.push(pair);
    }
    Ok(losses)
}

/// Runs every scene of [`default_scenes`] on `device` against the CPU twin, once with the
/// classic opacity and once antialiased (two [`SceneReport`]s per scene, in that order).
///
/// # Errors
/// Any renderer error.
pub fn run(device: &Renderer, large: bool, steps: usize) -> Result<Report, Error> {
    let mut scenes = Vec::new();
    for (seed, n, w, h, degree) in default_scenes(large) {
        let scene = random_scene(seed, n, w, h, degree);
        for antialiased in [false, true] {
            let options = selftest_options(antialiased);
            scenes.push(compare_scene(device, &scene, seed, steps, &options)?);
        }
    }
    let pass = scenes.iter().all(|s| s.pass);
    Ok(Report {
        device: device.device_label(),
        device_name: device.device_name(),
        peak_device_bytes: device.peak_device_bytes(),
        scenes,
        pass,
    })
}

/// Opens the renderer `kiln selftest --device D` tests: `emulator`, `cuda` or `cuda:N`.
///
/// # Errors
/// [`Error::Invalid`] for anything else (`cpu` and `auto` name nothing to compare with the CPU),
/// [`Error::Device`] when the CUDA device cannot be opened (the message points at `emulator`).
pub fn open_device(name: &str) -> Result<Renderer, Error> {
    if name.trim().eq_ignore_ascii_case("emulator") {
        return Renderer::emulator();
    }
    let invalid = || Error::Invalid {
        field: "device",
        reason: format!(
            "{name:?}: the selftest compares a device with the CPU rasterizer; use cuda, cuda:N, \
             or emulator (the CUDA kernels run on the CPU, no GPU needed)"
        ),
    };
    let Ok(DeviceRequest::Exact(d @ Device::Cuda(_))) = name.parse::<DeviceRequest>() else {
        return Err(invalid());
    };
    if !crate::device::cuda_available() {
        return Err(Error::Device {
            device: d.to_string(),
            reason: "no CUDA driver found (libcuda could not be loaded); on a machine without a \
                     GPU, `kiln selftest --device emulator` checks the same kernels on the CPU"
                .into(),
        });
    }
    Renderer::open(d)
}

#[cfg(test)]
mod tests {
    use super::{allow_flips, diff, flip_bound};

    #[test]
    fn rounding_flips_pass_only_when_rare_and_no_larger_than_one_flip() {
        let cpu = vec![0.5f32; 100_000];
        let one_flip = (flip_bound(1.0) * 0.9) as f32;
        let check = |dev: &[f32]| allow_flips(diff("image", &cpu, dev, false), 1.0);
        let mut dev = cpu.clone();
        dev[7] += one_flip;
        dev[90_000] -= one_flip;
        let d = check(&dev);
        assert!(d.pass && d.over_bound == 2 && d.worst_index == 7, "{d:?}");
        // Larger than any one flip: a wrong value, not rounding.
        dev[8] += 0.02;
        assert!(!check(&dev).pass);
        // Small but everywhere (one value in 100): a wrong kernel.
        let mut dev = cpu.clone();
        for v in dev.iter_mut().step_by(100) {
            *v += one_flip;
        }
        assert!(!check(&dev).pass);
        // The plain bound still holds on its own.
        assert!(check(&cpu).pass);
    }
}
