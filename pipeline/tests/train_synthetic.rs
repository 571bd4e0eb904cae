//! End-to-end trainer check on a synthetic scene with a known answer.
//!
//! A random Gaussian scene (splats with SH degree 1 in the unit cube) is rendered by the CPU
//! rasterizer from 16 cameras on a sphere looking at the centre (64×64 px); those renders are the
//! ground truth. The trainer starts from RANDOM points in the camera frustums (not the true
//! scene), trains on 14 views and is scored on the 2 held-out views (every 8th by name). The issue's
//! requirement is a held-out PSNR of at least 30 dB.
//!
//! Measured (2026-11-30, 2 shared CPU cores, 2 000 steps, INRIA schedule scaled to 2 000 steps):
//! 36.5 dB / SSIM 0.988 held out, ~8 200 splats from 2 000 random points, 55–90 s depending on machine load.

use std::f32::consts::PI;

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::{Camera, RenderOptions, SplatsRef};
use kiln_pipeline::stages::train::{TrainParams, TrainView, ViewPixels, train};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SIZE: u32 = 64;
const CAMERAS: usize = 16;
const CAMERA_DISTANCE: f32 = 3.0;
const FOV_Y_DEG: f32 = 40.0;
const SH_C0: f32 = 0.282_094_8;

/// `count` random splats in [−0.5, 0.5]³ with SH degree 1.
fn random_scene(count: usize, seed: u64) -> GaussianSplats {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut s = GaussianSplats {
        sh_degree: 1,
        ..Default::default()
    };
    for _ in 0..count {
        for _ in 0..3 {
            s.means.push(rng.random::<f32>() - 0.5);
        }
        for _ in 0..3 {
            s.log_scales.push((0.02 + 0.05 * rng.random::<f32>()).ln());
        }
        let q: [f32; 4] = std::array::from_fn(|_| rng.random::<f32>() * 2.0 - 1.0);
        let n = q.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-3);
        s.rotations.extend(q.iter().map(|v| v / n));
        let opacity = 0.5 + 0.45 * rng.random::<f32>();
        s.logit_opacities.push((opacity / (1.0 - opacity)).ln());
        for _ in 0..3 {
            let c = 0.1 + 0.8 * rng.random::<f32>();
            s.sh_coeffs.push((c - 0.5) / SH_C0);
        }
        for _ in 0..9 {
            s.sh_coeffs.push((rng.random::<f32>() - 0.5) * 0.2);
        }
    }
    s
}

/// OpenCV camera at `centre` looking at the origin, world up +z.
fn look_at_origin(centre: [f32; 3]) -> Camera {
    let norm = |v: [f32; 3]| {
        let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        [v[0] / l, v[1] / l, v[2] / l]
    };
    let cross = |a: [f32; 3], b: [f32; 3]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let forward = norm([-centre[0], -centre[1], -centre[2]]);
    let right = norm(cross(forward, [0.0, 0.0, 1.0]));
    let down = cross(forward, right);
    let r = [right, down, forward];
    let t: [f32; 3] = std::array::from_fn(|i| -(0..3).map(|j| r[i][j] * centre[j]).sum::<f32>());
    let f = SIZE as f32 / 2.0 / (FOV_Y_DEG.to_radians() / 2.0).tan();
    Camera {
        width: SIZE,
        height: SIZE,
        fx: f,
        fy: f,
        cx: SIZE as f32 / 2.0,
        cy: SIZE as f32 / 2.0,
        world_to_camera: [
            [r[0][0], r[0][1], r[0][2], t[0]],
            [r[1][0], r[1][1], r[1][2], t[1]],
            [r[2][0], r[2][1], r[2][2], t[2]],
            [0.0, 0.0, 0.0, 1.0],
        ],
    }
}

/// 16 cameras on a sphere (golden-angle spiral, elevations within ±37°).
fn cameras() -> Vec<Camera> {
    (0..CAMERAS)
        .map(|i| {
            let z = -0.6 + 1.2 * (i as f32 + 0.5) / CAMERAS as f32;
            let ring = (1.0 - z * z).sqrt();
            let phi = i as f32 * PI * (3.0 - 5f32.sqrt());
            look_at_origin([
                CAMERA_DISTANCE * ring * phi.cos(),
                CAMERA_DISTANCE * ring * phi.sin(),
                CAMERA_DISTANCE * z,
            ])
        })
        .collect()
}

fn render(scene: &GaussianSplats, camera: &Camera) -> Vec<f32> {
    let out = kiln_kernels::render_forward(
        &SplatsRef {
            means: &scene.means,
            log_scales: &scene.log_scales,
            rotations: &scene.rotations,
            logit_opacities: &scene.logit_opacities,
            sh_coeffs: &scene.sh_coeffs,
            sh_degree: scene.sh_degree,
        },
        camera,
        &RenderOptions::default(),
    )
    .expect("ground-truth render");
    out.image.iter().map(|v| v.clamp(0.0, 1.0)).collect()
}

fn views(scene: &GaussianSplats) -> Vec<TrainView> {
    cameras()
        .into_iter()
        .enumerate()
        .map(|(i, camera)| {
            let pixels = ViewPixels::opaque(render(scene, &camera));
            TrainView::resident(format!("view_{i:02}"), camera, pixels)
        })
        .collect()
}

fn params(steps: usize) -> TrainParams {
    TrainParams {
        sh_degree: 1,
        init_random_points: 2_000,
        seed: 42,
        ..TrainParams::inria(steps)
    }
}

#[test]
fn trains_a_random_scene_from_random_init_to_30_db_held_out() {
    let scene = random_scene(300, 7);
    let views = views(&scene);
    let dir = tempfile::tempdir().unwrap();
    // Set KILN_TRAIN_SYNTHETIC_OUT=<dir> to keep the outputs (PNGs, metrics.json, loss.svg).
    let out = std::env::var_os("KILN_TRAIN_SYNTHETIC_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().to_path_buf());
    let started = std::time::Instant::now();
    let log = |step: usize, total: usize, loss: f64| {
        if step.is_multiple_of(250) {
            eprintln!(
                "step {step}/{total}: loss {loss:.5} ({:.1} s)",
                started.elapsed().as_secs_f64()
            );
        }
    };
    let (splats, report) = train(views, None, &params(2000), &out, &log).unwrap();
    eprintln!(
        "synthetic: PSNR {:.2} dB, SSIM {:.4}, {} splats, {:.1} steps/s, {:.1} s ({:.1} s total)",
        report.psnr_db,
        report.ssim,
        report.splats,
        report.steps_per_s,
        report.wall_s,
        started.elapsed().as_secs_f64()
    );
    assert_eq!((report.train_views, report.test_views), (14, 2));
    assert_eq!(splats.len(), report.splats);
    assert_eq!(splats.sh_degree, 1);
    for f in [
        "splats.ply",
        "metrics.json",
        "loss.svg",
        "eval/view_00.png",
        "eval/view_08.png",
    ] {
        assert!(out.join(f).is_file(), "missing output {f}");
    }
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["views"].as_array().map(Vec::len), Some(2));
    assert!(
        report.psnr_db >= 30.0,
        "held-out PSNR {:.2} dB < 30 dB",
        report.psnr_db
    );
}

#[test]
fn same_seed_gives_the_same_splats() {
    let scene = random_scene(50, 3);
    let views = views(&scene);
    let run = || {
        let dir = tempfile::tempdir().unwrap();
        let p = TrainParams {
            densify_from: 10,
            densify_every: 20,
            ..params(60)
        };
        train(views.clone(), None, &p, dir.path(), &|_, _, _| {})
            .unwrap()
            .0
    };
    assert_eq!(run(), run());
}
