//! Parity check of a device renderer against the CPU twin: seeded random scenes rendered on both,
//! the images, every gradient, the fused loss and one fused Adam step compared tensor by tensor, then
//! a few optimisation steps on both
//! (`kiln selftest`). The CPU twin is the reference: it is itself checked against finite
//! differences (`tests/finite_diff.rs`). Every scene runs twice, with the classic opacity and with
//! Mip-Splatting's compensated opacity ([`RenderOptions::antialiased`]), so both rules of the
//! projection kernels, forward and backward, are compared.
//!
//! Tolerances (issue 4): images within [`IMAGE_TOLERANCE`] absolute, gradients within
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
    /// Whether the tensor is within its bound (and has no NaN on either side).
    pub pass: bool,
}

fn diff(tensor: &str, cpu: &[f32], dev: &[f32], relative: bool) -> TensorDiff {
    let mut max_abs = 0.0f64;
    let mut max_ref = 0.0f64;
    let mut nan = cpu.len() != dev.len();
    for (&a, &b) in cpu.iter().zip(dev) {
        if a.is_nan() != b.is_nan() {
            nan = true;
        }
        max_abs = max_abs.max((f64::from(a) - f64::from(b)).abs());
        max_ref = max_ref.max(f64::from(a).abs());
    }
    let max_rel = if max_ref > 0.0 {
        max_abs / max_ref
    } else if max_abs > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
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
        pass: pass && !nan && max_abs.is_finite(),
    }
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
        diff("image [H, W, 3]", &fc.image, &fd.image, false),
        diff("alpha [H, W]", &fc.alpha, &fd.alpha, false),
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
    let resident_training_loss = train_resident(device, scene, &options, steps)?;
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

/// `steps` steps of [`crate::cuda::train::GpuTrainState`] on `device` towards a target render (the
/// scene with shifted colours), and the same steps with the CPU twin's forward, fused loss,
/// backward and fused Adam; returns the per-step losses (CPU first). Empty when `device` is the
/// CPU.
fn train_resident(
    device: &Renderer,
    scene: &Scene,
    options: &RenderOptions,
    steps: usize,
) -> Result<Vec<[f64; 2]>, Error> {
    use crate::cpu::adam::{ActivationL1, AdamStep, LrScale, adam_step};
    use crate::cuda::train::{GpuTrainState, HostTrainState, TrainStep};
    let Renderer::Gpu(gpu) = device else {
        return Ok(Vec::new());
    };
    let mut target_scene = scene.clone();
    for (i, v) in target_scene.sh_coeffs.iter_mut().enumerate() {
        if i % 3 == 1 {
            *v -= 0.25;
        }
    }
    let cam = &scene.camera;
    let target = Renderer::Cpu
        .forward(&target_scene.splats(), cam, options)?
        .image;
    let (h, w) = (cam.height as usize, cam.width as usize);
    let n = scene.logit_opacities.len();
    let k = scene.sh_coeffs.len() / (3 * n.max(1));
    let sh_lr_scale: Vec<f32> = (0..k).map(|i| if i == 0 { 1.0 } else { 0.05 }).collect();
    // A tenth of the INRIA rates: at those, the first Adam step (≈ lr·sign(g) per parameter)
    // overshoots on these small scenes (the loss rises), and a 1-ulp difference in e^(−σ)
    // between the devices then moves the next loss by 0.6 %, far more than the rasterizers differ.
    let lrs = [1e-4, 5e-4, 1e-4, 5e-3, 2.5e-4];
    let adam = [0.9, 0.999, 1e-15];
    // MCMC's opacity and scale L1 penalties (weight 0.01 over the mean), so the regularised path
    // of the Adam kernel is compared too.
    let mut regularisers = [ActivationL1::None; 5];
    regularisers[1] = ActivationL1::Exp(0.01 / (3 * n.max(1)) as f32);
    regularisers[3] = ActivationL1::Sigmoid(0.01 / n.max(1) as f32);
    let zeros = |len: usize| vec![0.0f32; len];
    let mut host = HostTrainState {
        groups: [
            scene.means.clone(),
            scene.log_scales.clone(),
            scene.rotations.clone(),
            scene.logit_opacities.clone(),
            scene.sh_coeffs.clone(),
        ],
        m: [
            zeros(3 * n),
            zeros(3 * n),
            zeros(4 * n),
            zeros(n),
            zeros(3 * k * n),
        ],
        v: [
            zeros(3 * n),
            zeros(3 * n),
            zeros(4 * n),
            zeros(n),
            zeros(3 * k * n),
        ],
        t: [0; 5],
        k: k.max(1),
    };
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut state = GpuTrainState::upload(std::sync::Arc::clone(gpu), &host, &sh_lr_scale)?;
    let mut losses = Vec::with_capacity(steps);
    for t in 1..=steps {
        let step = TrainStep {
            camera: cam,
            target_key: 0,
            target: &target,
            refresh_target: false,
            weights: None,
            sh_degree: scene.sh_degree,
            options,
            lambda: 0.2,
            lrs,
            adam,
            regularisers,
        };
        let dev_loss = state.step(&step)?.loss;
        // The CPU twin, function by function.
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
        let l = crate::cpu::loss::photometric_loss(&f.image, &target, h, w, 0.2);
        let g = Renderer::Cpu.backward(&splats, cam, options, &f, &l.grad_image)?;
        let grads = [
            g.means,
            g.log_scales,
            g.rotations,
            g.logit_opacities,
            g.sh_coeffs,
        ];
        for i in 0..5 {
            let hyper = AdamStep::new(lrs[i], t as u32, adam[0], adam[1], adam[2])?
                .with_regulariser(regularisers[i]);
            let scale = (i == 4).then_some(LrScale {
                values: &sh_lr_scale,
                stride: 3,
            });
            let (p, m, v) = (&mut host.groups[i], &mut host.m[i], &mut host.v[i]);
            adam_step(p, &grads[i], m, v, scale, &hyper)?;
        }
        losses.push([l.loss, dev_loss]);
    }
    Ok(losses)
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
