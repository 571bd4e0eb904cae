//! Forward + backward benchmark of the CPU rasterizer on seeded random scenes.
//!
//! Cases: 20k splats at 270×150 (the trainer's low-resolution CPU setting) and 100k splats at
//! 640×480. Throughput is reported in splats per second. Also the fused loss and the fused Adam
//! step. Run with `cargo bench -p kiln-kernels`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_kernels::{Camera, RenderOptions, SplatsRef, render_backward, render_forward};
use rand::{Rng, SeedableRng};

/// Owned random scene: N splats in front of the camera, SH degree 3.
struct Scene {
    means: Vec<f32>,
    log_scales: Vec<f32>,
    rotations: Vec<f32>,
    logits: Vec<f32>,
    sh: Vec<f32>,
}

fn scene(n: usize, seed: u64) -> Scene {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut s = Scene {
        means: Vec::new(),
        log_scales: Vec::new(),
        rotations: Vec::new(),
        logits: Vec::new(),
        sh: Vec::new(),
    };
    for _ in 0..n {
        let z = rng.random_range(2.0..10.0f32);
        s.means.extend([
            rng.random_range(-0.7..0.7) * z,
            rng.random_range(-0.5..0.5) * z,
            z,
        ]);
        s.log_scales
            .extend([0; 3].map(|_| rng.random_range(-5.0..-2.5f32)));
        s.rotations
            .extend([0; 4].map(|_| rng.random_range(-1.0..1.0f32)));
        s.logits.push(rng.random_range(-2.0..2.0));
        s.sh.extend([0; 48].map(|_| rng.random_range(-0.3..0.3f32)));
    }
    s
}

fn camera(width: u32, height: u32) -> Camera {
    let f = 0.8 * width as f32;
    let id = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    Camera {
        width,
        height,
        fx: f,
        fy: f,
        cx: width as f32 / 2.0,
        cy: height as f32 / 2.0,
        world_to_camera: id,
    }
}

fn bench_forward_backward(c: &mut Criterion) {
    let mut group = c.benchmark_group("rasterize_forward_backward");
    group.sample_size(10);
    for (n, w, h) in [(20_000usize, 270u32, 150u32), (100_000, 640, 480)] {
        let s = scene(n, 42);
        let cam = camera(w, h);
        let splats = SplatsRef {
            means: &s.means,
            log_scales: &s.log_scales,
            rotations: &s.rotations,
            logit_opacities: &s.logits,
            sh_coeffs: &s.sh,
            sh_degree: 3,
        };
        let opts = RenderOptions {
            background: [0.0; 3],
            ..RenderOptions::default()
        };
        let grad: Vec<f32> = (0..(w * h * 3) as usize)
            .map(|i| ((i * 37) % 11) as f32 / 11.0 - 0.5)
            .collect();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("{n}_splats_{w}x{h}"), |b| {
            b.iter(|| {
                let f = render_forward(black_box(&splats), &cam, &opts).unwrap();
                black_box(render_backward(&splats, &cam, &opts, &f, &grad).unwrap())
            })
        });
    }
    group.finish();
}

/// The fused training loss (L1 + SSIM value and gradient, `cpu::loss`) at 270×480 and 540×960;
/// throughput in pixels per second.
fn bench_loss(c: &mut Criterion) {
    let mut group = c.benchmark_group("photometric_loss");
    group.sample_size(10);
    for (h, w) in [(270usize, 480usize), (540, 960)] {
        let n = h * w * 3;
        let image: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let target: Vec<f32> = (0..n)
            .map(|i| ((i * 104_729) % 997) as f32 / 997.0)
            .collect();
        group.throughput(Throughput::Elements((h * w) as u64));
        group.bench_function(format!("{h}x{w}"), |b| {
            b.iter(|| kiln_kernels::cpu::loss::photometric_loss(&image, &target, h, w, 0.2))
        });
    }
    group.finish();
}

/// One fused Adam step (`cpu::adam`) over every parameter of 100k and 1M splats at SH degree 3
/// (59 floats per splat, the five groups back to back); throughput in parameters per second.
fn bench_adam(c: &mut Criterion) {
    use kiln_kernels::cpu::adam::{AdamStep, adam_step};
    let mut group = c.benchmark_group("adam_step");
    group.sample_size(10);
    let hyper = AdamStep::new(1e-3, 10, 0.9, 0.999, 1e-15).unwrap();
    for splats in [100_000usize, 1_000_000] {
        let n = splats * 59;
        let mut p: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let g: Vec<f32> = (0..n)
            .map(|i| ((i * 104_729) % 997) as f32 / 997.0 - 0.5)
            .collect();
        let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("{splats}_splats"), |b| {
            b.iter(|| adam_step(&mut p, &g, &mut m, &mut v, None, &hyper).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench_forward_backward, bench_loss, bench_adam);
criterion_main!(benches);
