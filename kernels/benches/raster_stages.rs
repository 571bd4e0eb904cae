//! The CPU rasterizer's stages one by one — project, bin + sort, rasterize forward, rasterize
//! backward — at the sizes issue 3 names: 100k splats at 270×480 and 1M splats at 540×960.
//!
//! The scene imitates the start of a real training run (fox, 100k splats initialised from points
//! with nearest-neighbour scales, measured with a counting build of `rasterize_forward`): opacity
//! 0.1 everywhere (the INRIA initial opacity), isotropic splats whose footprints average a few
//! hundred pixels, so a pixel composites a few hundred splats before its transmittance runs out.
//! That is the expensive end of training: splats shrink and become opaque as it goes on. At 1M
//! splats and 540×960 the splats are √10 smaller in world units so that each pixel sees about as
//! many splats as at 100k.
//!
//! Throughput: splats per second (project, sort) and pixels per second (forward, backward). Run
//! with `cargo bench -p kiln-kernels --bench raster_stages`; `-- 100k` for the small case only.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_kernels::Camera;
use kiln_kernels::cpu::project::{CameraModel, RasterizeMode, SplatParams, project};
use kiln_kernels::cpu::{bin, rasterize_backward, rasterize_forward, sort};
use rand::{Rng, SeedableRng};

/// Owned scene, SH degree 3 (16 coefficients per channel).
struct Scene {
    means: Vec<f32>,
    log_scales: Vec<f32>,
    rotations: Vec<f32>,
    logits: Vec<f32>,
    sh: Vec<f32>,
}

/// `n` splats spread through the view frustum at depths 2–6 m, 1σ scale `scale` metres (±20 %).
fn scene(n: usize, scale: f32, seed: u64) -> Scene {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut s = Scene {
        means: Vec::with_capacity(n * 3),
        log_scales: Vec::with_capacity(n * 3),
        rotations: Vec::with_capacity(n * 4),
        logits: Vec::with_capacity(n),
        sh: Vec::with_capacity(n * 48),
    };
    // logit(0.1): the INRIA initial opacity.
    let logit = (0.1f32 / 0.9).ln();
    for _ in 0..n {
        let z = rng.random_range(2.0..6.0f32);
        s.means.extend([
            rng.random_range(-0.6..0.6) * z,
            rng.random_range(-0.35..0.35) * z,
            z,
        ]);
        let ls = (scale * rng.random_range(0.8..1.2f32)).ln();
        s.log_scales.extend([ls; 3]);
        s.rotations
            .extend([0; 4].map(|_| rng.random_range(-1.0..1.0f32)));
        s.logits.push(logit);
        s.sh.extend([0; 48].map(|_| rng.random_range(-0.3..0.3f32)));
    }
    s
}

fn camera(width: u32, height: u32) -> Camera {
    let f = 0.8 * width as f32;
    Camera {
        width,
        height,
        fx: f,
        fy: f,
        cx: width as f32 / 2.0,
        cy: height as f32 / 2.0,
        world_to_camera: [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
    }
}

fn bench_stages(c: &mut Criterion) {
    // (splats, width, height, 1σ scale in metres)
    for (n, w, h, scale) in [
        (100_000usize, 480u32, 270u32, 0.02f32),
        (1_000_000, 960, 540, 0.02 / 10f32.sqrt()),
    ] {
        let label = format!("{}k_splats_{h}x{w}", n / 1000);
        let s = scene(n, scale, 7);
        let params = SplatParams {
            means: &s.means,
            log_scales: &s.log_scales,
            rotations: &s.rotations,
            logit_opacities: &s.logits,
            sh_coeffs: &s.sh,
            sh_degree: 3,
            sh_k: 16,
        };
        let cam = CameraModel::<f32>::new(&camera(w, h));
        let n_tiles = (cam.tiles_x() * cam.tiles_y()) as usize;
        let projected = project(&params, &cam, RasterizeMode::Classic);
        let (keys, ids) = bin::bin(&projected, cam.tiles_x());
        let (sorted_ids, tile_ranges) = sort::sort(keys.clone(), ids.clone(), n_tiles);
        let raster = rasterize_forward::rasterize_forward(
            &projected,
            &sorted_ids,
            &tile_ranges,
            w,
            h,
            [0.0; 3],
        );
        let composited: u64 = raster.n_contrib.iter().map(|&k| u64::from(k)).sum();
        println!(
            "{label}: {} tile intersections, {:.0} tile-list entries walked per pixel",
            sorted_ids.len(),
            composited as f64 / f64::from(w * h)
        );
        let grad_image: Vec<f32> = (0..(w * h * 3) as usize)
            .map(|i| ((i * 37) % 11) as f32 / 11.0 - 0.5)
            .collect();

        let mut group = c.benchmark_group("raster_stages");
        group.sample_size(10);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("project/{label}"), |b| {
            b.iter(|| project(black_box(&params), &cam, RasterizeMode::Classic))
        });
        group.bench_function(format!("bin_sort/{label}"), |b| {
            b.iter(|| {
                let (keys, ids) = bin::bin(black_box(&projected), cam.tiles_x());
                sort::sort(keys, ids, n_tiles)
            })
        });
        group.throughput(Throughput::Elements(u64::from(w * h)));
        group.bench_function(format!("rasterize_forward/{label}"), |b| {
            b.iter(|| {
                rasterize_forward::rasterize_forward(
                    black_box(&projected),
                    &sorted_ids,
                    &tile_ranges,
                    w,
                    h,
                    [0.0; 3],
                )
            })
        });
        group.bench_function(format!("rasterize_backward/{label}"), |b| {
            b.iter(|| {
                rasterize_backward::rasterize_backward(
                    black_box(&projected),
                    &sorted_ids,
                    &tile_ranges,
                    &raster.final_t,
                    &raster.n_contrib,
                    w,
                    h,
                    [0.0; 3],
                    &grad_image,
                )
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench_stages);
criterion_main!(benches);
