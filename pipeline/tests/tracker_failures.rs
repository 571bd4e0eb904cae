//! Training and output failures that public Gaussian-splatting trainers hit, replayed against
//! Kiln's trainer (`kiln_pipeline::stages::train`), its rasterizer (`kiln_kernels`) and its PLY
//! writer (`kiln_formats::splats::ply`).
//!
//! Each test is named after its item in `shared/research/splat-anchors.md` §5 ("Input/output
//! problems from the trackers"), e.g. `item_06_...` for item 6. Only the items about *training
//! and outputs* are here:
//! - 4, 5 and 31: a capture without SfM points trains from random frustum init;
//! - 6: a splat with an infinite or NaN log-scale renders without a panic and is culled;
//! - 7: SfM points on camera centres are dropped before init and do not give a NaN loss;
//! - 8 and 30: RAM stays bounded by the image cache however many photos there are;
//! - 9: SH-degree-0 PLYs have no `f_rest_*`, and the writer's `f_rest_*` count follows the degree;
//! - 32: the outputs stay in the input's coordinate frame (`frame.json`, splat positions).
//!
//! The items about *reading captures* (COLMAP models, nerfstudio JSON names, images) are in
//! `formats/tests/tracker_failures.rs`.
//!
//! Every scene is synthetic: a few random splats rendered by the CPU rasterizer from 8 cameras
//! (32×32 px) on a sphere around the scene centre, as in `train_synthetic.rs` but far smaller, so
//! each training run takes about a second.

use std::f32::consts::PI;
use std::path::Path;

use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::ply;
use kiln_kernels::{Camera, RenderOptions, Renderer, SplatsRef, render_forward};
use kiln_pipeline::stages::train::init::{
    NEAR_CAMERA_FRACTION, camera_centre, drop_points_near_cameras, scene_extent,
};
use kiln_pipeline::stages::train::{
    FRAME_JSON, InitPoints, TrainParams, TrainReport, TrainView, ViewPixels, train, train_on,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SIZE: u32 = 32;
const CAMERAS: usize = 8;
const CAMERA_DISTANCE: f32 = 3.0;
const FOV_Y_DEG: f32 = 40.0;
const SH_C0: f32 = 0.282_094_8;
/// Training steps of every run here: enough for densification (from step 6, every 10) and an
/// opacity reset (every 40) to run, few enough for about a second per run.
const STEPS: usize = 120;

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

/// `count` random SH-degree-0 splats in the cube `centre` ± 0.5.
fn scene_around(centre: [f32; 3], count: usize, seed: u64) -> GaussianSplats {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut s = GaussianSplats::default();
    for _ in 0..count {
        for c in centre {
            s.means.push(c + rng.random::<f32>() - 0.5);
        }
        for _ in 0..3 {
            s.log_scales.push((0.05 + 0.1 * rng.random::<f32>()).ln());
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
    }
    s
}

/// OpenCV camera at `position` looking at `target`, world up +z.
fn look_at(position: [f32; 3], target: [f32; 3]) -> Camera {
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
    let forward = norm(std::array::from_fn(|a| target[a] - position[a]));
    let right = norm(cross(forward, [0.0, 0.0, 1.0]));
    let down = cross(forward, right);
    let r = [right, down, forward];
    let t: [f32; 3] = std::array::from_fn(|i| -(0..3).map(|j| r[i][j] * position[j]).sum::<f32>());
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

/// Positions of [`CAMERAS`] cameras on a sphere of radius [`CAMERA_DISTANCE`] around `centre`
/// (golden-angle spiral, elevations within ±37°).
fn camera_positions(centre: [f32; 3]) -> Vec<[f32; 3]> {
    (0..CAMERAS)
        .map(|i| {
            let z = -0.6 + 1.2 * (i as f32 + 0.5) / CAMERAS as f32;
            let ring = (1.0 - z * z).sqrt();
            let phi = i as f32 * PI * (3.0 - 5f32.sqrt());
            [
                centre[0] + CAMERA_DISTANCE * ring * phi.cos(),
                centre[1] + CAMERA_DISTANCE * ring * phi.sin(),
                centre[2] + CAMERA_DISTANCE * z,
            ]
        })
        .collect()
}

fn splats_ref(s: &GaussianSplats) -> SplatsRef<'_> {
    SplatsRef {
        means: &s.means,
        log_scales: &s.log_scales,
        rotations: &s.rotations,
        logit_opacities: &s.logit_opacities,
        sh_coeffs: &s.sh_coeffs,
        sh_degree: s.sh_degree,
    }
}

/// Ground-truth views of `scene` from cameras at `positions` looking at `centre`, named
/// `view_00`, `view_01`, ….
fn views(scene: &GaussianSplats, positions: &[[f32; 3]], centre: [f32; 3]) -> Vec<TrainView> {
    positions
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let camera = look_at(p, centre);
            let out = render_forward(&splats_ref(scene), &camera, &RenderOptions::default())
                .expect("ground-truth render");
            let image = out.image.iter().map(|v| v.clamp(0.0, 1.0)).collect();
            TrainView::resident(format!("view_{i:02}"), camera, ViewPixels::opaque(image))
        })
        .collect()
}

fn params() -> TrainParams {
    TrainParams {
        sh_degree: 0,
        init_random_points: 400,
        seed: 42,
        psnr_curve_evaluations: 0,
        ..TrainParams::inria(STEPS)
    }
}

/// Checks shared by every training run: the run finished with a finite loss, kept splats, every
/// parameter is finite, and `splats.ply` holds exactly the returned splats.
fn assert_trained(splats: &GaussianSplats, report: &TrainReport, out: &Path) {
    assert_eq!(report.steps, STEPS);
    assert!(
        report.final_loss.is_finite() && report.final_loss > 0.0,
        "final loss {}",
        report.final_loss
    );
    assert!(report.splats > 0);
    assert_eq!(splats.len(), report.splats);
    for (name, v) in [
        ("means", &splats.means),
        ("log_scales", &splats.log_scales),
        ("rotations", &splats.rotations),
        ("logit_opacities", &splats.logit_opacities),
        ("sh_coeffs", &splats.sh_coeffs),
    ] {
        assert!(v.iter().all(|x| x.is_finite()), "{name} not finite");
    }
    assert!(report.psnr_db.is_finite(), "PSNR {}", report.psnr_db);
    assert_eq!(&ply::read(&out.join("splats.ply")).unwrap().splats, splats);
}

fn mean_of_means(s: &GaussianSplats) -> [f64; 3] {
    let n = s.len() as f64;
    std::array::from_fn(|a| {
        s.means
            .chunks_exact(3)
            .map(|m| f64::from(m[a]))
            .sum::<f64>()
            / n
    })
}

// ---------------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------------

/// gaussian-splatting#618 / OpenSplat#7: training with no SfM points errored out ("random init
/// needs known scene bounds"); gaussian-splatting#138: the point file is derived on the first run.
/// Kiln needs no point file: with `init = None` it samples random points in the training cameras'
/// frustums (depths scaled from where the cameras converge) and trains from them.
#[test]
fn item_04_05_31_no_sfm_points_trains_from_random_frustum_init() {
    let centre = [0.0; 3];
    let scene = scene_around(centre, 40, 1);
    let views = views(&scene, &camera_positions(centre), centre);
    let dir = tempfile::tempdir().unwrap();
    let (splats, report) = train(views, None, &params(), dir.path(), &|_, _, _| {}).unwrap();
    assert_trained(&splats, &report, dir.path());
    assert_eq!((report.train_views, report.test_views), (7, 1));
    // Random init around the subject: the splats' centroid lies inside the camera sphere.
    let c = mean_of_means(&splats);
    let r = c.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(r < f64::from(CAMERA_DISTANCE), "centroid {c:?}");
    // It learnt something: the loss went down from the first samples of the curve to the last.
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("metrics.json")).unwrap()).unwrap();
    let curve: Vec<f64> = metrics["loss_curve"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_f64().unwrap())
        .collect();
    let k = curve.len() / 4;
    let first = curve[..k].iter().sum::<f64>() / k as f64;
    let last = curve[curve.len() - k..].iter().sum::<f64>() / k as f64;
    assert!(last < first, "loss {first} → {last}");
}

/// gaussian-splatting#381 (host `MemoryError` at 308 large photos) and OpenSplat#134 (~160 GB
/// for 3 564 images): every image was held in RAM. Kiln's job views decode their pixels on demand
/// through a least-recently-used cache bounded by `train.image_cache_mb`. With a budget of 0 the
/// cache holds only the view being trained on (its peak is exactly one view's bytes, however many
/// views there are), reloads views as they come up again, and trains to the same splats, bit
/// for bit, as views held in memory.
#[test]
fn item_08_30_ram_stays_bounded_by_the_image_cache_however_many_photos() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let centre = [0.0; 3];
    let scene = scene_around(centre, 40, 4);
    let resident = views(&scene, &camera_positions(centre), centre);
    let loads = Arc::new(AtomicUsize::new(0));
    let on_demand: Vec<TrainView> = resident
        .iter()
        .map(|v| {
            let pixels = v.load().unwrap();
            let loads = Arc::clone(&loads);
            let load = move || {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(ViewPixels::clone(&pixels))
            };
            TrainView::on_demand(v.name.clone(), v.camera, Arc::new(load))
        })
        .collect();
    let run = |views: Vec<TrainView>, image_cache_mb: u64| {
        let dir = tempfile::tempdir().unwrap();
        let p = TrainParams {
            image_cache_mb,
            ..params()
        };
        let (splats, report) = train(views, None, &p, dir.path(), &|_, _, _| {}).unwrap();
        assert_trained(&splats, &report, dir.path());
        let metrics: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("metrics.json")).unwrap())
                .unwrap();
        let stat = |k: &str| metrics["image_cache"][k].as_u64().unwrap();
        (splats, [stat("peak_bytes"), stat("loads")])
    };
    let view_bytes = 32 * 32 * 3 * 4;
    let (expected, [resident_peak, _]) = run(resident, 0);
    assert_eq!(
        resident_peak, 0,
        "views held by the caller are not the cache's"
    );

    let (bounded, [peak, cache_loads]) = run(on_demand.clone(), 0);
    assert_eq!(bounded, expected);
    assert_eq!(peak, view_bytes);
    // 7 training views drawn in shuffled epochs over STEPS steps: far more loads than views.
    assert!(
        cache_loads as usize > 2 * on_demand.len(),
        "{cache_loads} loads"
    );

    let (roomy, [peak, cache_loads]) = run(on_demand, 2048);
    assert_eq!(roomy, expected);
    assert_eq!((peak, cache_loads), (7 * view_bytes, 7));
    assert!(loads.load(Ordering::SeqCst) > 0);
}

/// gaussian-splatting#41: SfM points exactly on camera centres gave degenerate tiny Gaussians, a
/// NaN loss and an illegal memory access. Kiln drops points within `NEAR_CAMERA_FRACTION` × scene
/// extent of a camera centre before init: exactly those points go, the good points stay (in
/// order, colours following), and training from the rest has a finite loss.
#[test]
fn item_07_sfm_points_on_camera_centres_are_dropped_and_loss_stays_finite() {
    let centre = [0.0; 3];
    let scene = scene_around(centre, 40, 2);
    let positions = camera_positions(centre);
    let views = views(&scene, &positions, centre);
    let cameras: Vec<Camera> = views.iter().map(|v| v.camera).collect();

    // Good points: the scene's own splat centres, coloured by their DC colour.
    let mut good = InitPoints::default();
    for (m, sh) in scene
        .means
        .chunks_exact(3)
        .zip(scene.sh_coeffs.chunks_exact(3))
    {
        good.positions.push([m[0], m[1], m[2]]);
        good.colors
            .push(std::array::from_fn(|c| SH_C0 * sh[c] + 0.5));
    }
    // Bad points: one exactly on each camera centre, interleaved with the good ones.
    let mut points = InitPoints::default();
    for (i, (p, c)) in good.positions.iter().zip(&good.colors).enumerate() {
        points.positions.push(*p);
        points.colors.push(*c);
        if let Some(bad) = positions.get(i) {
            points.positions.push(*bad);
            points.colors.push([1.0, 0.0, 1.0]);
        }
    }
    assert_eq!(points.positions.len(), good.positions.len() + CAMERAS);

    let min_dist = NEAR_CAMERA_FRACTION * scene_extent(&cameras);
    let (kept, dropped) = drop_points_near_cameras(&points, &cameras, min_dist);
    assert_eq!(dropped, CAMERAS);
    assert_eq!(kept, good);
    // The threshold is a distance, not a fuzzy match: a point at 2 × min_dist from a camera
    // centre stays, one at 0.5 × min_dist goes.
    let c0 = camera_centre(&cameras[0]);
    let at = |f: f32| InitPoints {
        positions: vec![[c0[0] + f * min_dist, c0[1], c0[2]]],
        colors: vec![[0.5; 3]],
    };
    assert_eq!(drop_points_near_cameras(&at(2.0), &cameras, min_dist).1, 0);
    assert_eq!(drop_points_near_cameras(&at(0.5), &cameras, min_dist).1, 1);

    let dir = tempfile::tempdir().unwrap();
    let (splats, report) =
        train(views, Some(points), &params(), dir.path(), &|_, _, _| {}).unwrap();
    assert_trained(&splats, &report, dir.path());
    // No splat ended up on a lens.
    for m in splats.means.chunks_exact(3) {
        for p in &positions {
            let d = (0..3).map(|a| (m[a] - p[a]).powi(2)).sum::<f32>().sqrt();
            assert!(d >= min_dist, "splat at {m:?} is {d} from camera at {p:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rasterizer
// ---------------------------------------------------------------------------------------------

/// gaussian-splatting#781: infinite scales gave a NaN radius that was still counted, so binning
/// read uninitialised memory. Kiln's projection culls a splat whose log-scale is +∞ or NaN (radius
/// 0), and the image is exactly the render without it.
#[test]
fn item_06_infinite_or_nan_log_scale_is_culled_without_panic() {
    let centre = [0.0; 3];
    let finite = scene_around(centre, 12, 6);
    let camera = look_at([0.0, -3.0, 0.5], centre);
    let options = RenderOptions {
        background: [0.25, 0.5, 0.75],
        ..RenderOptions::default()
    };
    let expected = render_forward(&splats_ref(&finite), &camera, &options).unwrap();
    assert!(expected.image.iter().all(|v| v.is_finite()));
    // The finite scene covers some pixels, so "equal" is not trivially the background.
    assert!(expected.alpha.iter().any(|&a| a > 0.1));

    // One more splat at index `at`, between the scene and the camera, on the optical axis and
    // opaque, so it would change the image if it were drawn.
    let at = 6;
    let with_splat = |log_scale: [f32; 3]| {
        let mut s = finite.clone();
        s.means.splice(3 * at..3 * at, [0.0, -1.0, 0.5]);
        s.log_scales.splice(3 * at..3 * at, log_scale);
        s.rotations.splice(4 * at..4 * at, [1.0, 0.0, 0.0, 0.0]);
        s.logit_opacities.insert(at, 5.0);
        s.sh_coeffs.splice(3 * at..3 * at, [1.0, -1.0, 1.0]);
        s
    };
    let visible = render_forward(&splats_ref(&with_splat([-2.0; 3])), &camera, &options).unwrap();
    assert!(visible.radii[at] > 0.0);
    assert_ne!(visible.image, expected.image);

    let inf = f32::INFINITY;
    for bad_log_scale in [
        [inf, inf, inf],
        [inf, -2.0, -2.0],
        [f32::NAN, f32::NAN, f32::NAN],
        [-2.0, f32::NAN, -2.0],
    ] {
        let s = with_splat(bad_log_scale);
        let out = Renderer::Cpu
            .forward(&splats_ref(&s), &camera, &options)
            .unwrap();
        assert!(
            out.image
                .iter()
                .chain(&out.alpha)
                .chain(&out.radii)
                .all(|v| v.is_finite()),
            "{bad_log_scale:?}: non-finite output"
        );
        assert_eq!(out.radii[at], 0.0, "{bad_log_scale:?} not culled");
        let mut radii = out.radii.clone();
        radii.remove(at);
        assert_eq!(radii, expected.radii, "{bad_log_scale:?}");
        assert_eq!(out.image, expected.image, "{bad_log_scale:?}");
        assert_eq!(out.alpha, expected.alpha, "{bad_log_scale:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// PLY output
// ---------------------------------------------------------------------------------------------

/// The `property` names of a PLY header, in order.
fn header_properties(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let end = bytes
        .windows(b"end_header\n".len())
        .position(|w| w == b"end_header\n")
        .expect("end_header");
    std::str::from_utf8(&bytes[..end])
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("property float "))
        .map(str::to_string)
        .collect()
}

/// gaussian-splatting#705: SH-degree-0 PLYs have no `f_rest_*` and the SIBR viewer, which
/// hard-codes degree 3, broke on them. Kiln reads such a file as degree 0, and writes exactly
/// 3·((d+1)² − 1) = 0 / 9 / 24 / 45 `f_rest_*` properties for degree d = 0 / 1 / 2 / 3.
#[test]
fn item_09_sh0_ply_without_f_rest_is_read_and_f_rest_count_follows_sh_degree() {
    let dir = tempfile::tempdir().unwrap();

    // An SH0 file as INRIA's `save_ply` writes it at degree 0: normals, no f_rest.
    let names = [
        "x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0",
        "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3",
    ];
    let rows: [[f32; 17]; 2] = [
        [
            1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.5, -0.25, 0.125, -1.5, -3.0, -3.5, -4.0, 1.0, 0.0, 0.0,
            0.0,
        ],
        [
            -1.0, 0.5, 8.0, 0.0, 0.0, 0.0, -1.0, 0.0, 2.0, 2.5, -1.0, -2.0, -3.0, 0.5, 0.5, 0.5,
            0.5,
        ],
    ];
    let mut bytes = b"ply\nformat binary_little_endian 1.0\nelement vertex 2\n".to_vec();
    for name in names {
        bytes.extend(format!("property float {name}\n").as_bytes());
    }
    bytes.extend(b"end_header\n");
    for v in rows.iter().flatten() {
        bytes.extend(v.to_le_bytes());
    }
    let sh0 = dir.path().join("sh0.ply");
    std::fs::write(&sh0, bytes).unwrap();
    let read = ply::read(&sh0).unwrap().splats;
    assert_eq!(
        read,
        GaussianSplats {
            means: vec![1.0, 2.0, 3.0, -1.0, 0.5, 8.0],
            log_scales: vec![-3.0, -3.5, -4.0, -1.0, -2.0, -3.0],
            rotations: vec![1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5],
            logit_opacities: vec![-1.5, 2.5],
            sh_coeffs: vec![0.5, -0.25, 0.125, -1.0, 0.0, 2.0],
            sh_degree: 0,
        }
    );

    for (degree, f_rest) in [(0u32, 0usize), (1, 9), (2, 24), (3, 45)] {
        let k = ((degree + 1) * (degree + 1)) as usize;
        let n = 3;
        let splats = GaussianSplats {
            means: (0..3 * n).map(|i| i as f32).collect(),
            log_scales: vec![-2.0; 3 * n],
            rotations: [1.0, 0.0, 0.0, 0.0].repeat(n),
            logit_opacities: vec![0.5; n],
            sh_coeffs: (0..n * k * 3).map(|i| i as f32 * 0.01).collect(),
            sh_degree: degree,
        };
        let path = dir.path().join(format!("sh{degree}.ply"));
        ply::write(&path, &splats).unwrap();
        let props = header_properties(&path);
        let rest: Vec<&String> = props.iter().filter(|p| p.starts_with("f_rest_")).collect();
        assert_eq!(rest.len(), f_rest, "degree {degree}");
        // Named f_rest_0..f_rest_{m-1} in order, between f_dc_2 and opacity.
        for (i, name) in rest.iter().enumerate() {
            assert_eq!(**name, format!("f_rest_{i}"));
        }
        let dc2 = props.iter().position(|p| p == "f_dc_2").unwrap();
        assert_eq!(props[dc2 + 1 + f_rest], "opacity", "degree {degree}");
        assert_eq!(props.len(), 17 + f_rest, "degree {degree}");
        assert_eq!(ply::read(&path).unwrap().splats, splats, "degree {degree}");
    }
}

/// OpenSplat#34 / #53: the output PLY was in the normalised, rotated training frame. Kiln trains
/// in the capture's own frame: `frame.json` says `"frame": "input"` with an identity
/// `to_input_frame`, and splats trained on cameras around (100, 50, 20) stay there.
#[test]
fn item_32_outputs_stay_in_the_input_frame() {
    let centre = [100.0, 50.0, 20.0];
    let scene = scene_around(centre, 40, 32);
    let positions = camera_positions(centre);
    let views = views(&scene, &positions, centre);
    let dir = tempfile::tempdir().unwrap();
    let (splats, report) = train_on(
        &Renderer::Cpu,
        views,
        None,
        &params(),
        dir.path(),
        &|_, _, _| {},
    )
    .unwrap();
    assert_trained(&splats, &report, dir.path());

    let frame: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(FRAME_JSON)).unwrap()).unwrap();
    assert_eq!(FRAME_JSON, "frame.json");
    assert_eq!(frame["frame"], "input");
    let identity = serde_json::json!([
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0]
    ]);
    assert_eq!(frame["to_input_frame"], identity);
    // The cameras were built with world up +z.
    assert_eq!(frame["up_axis"], "+z");
    assert_eq!(frame["cameras"], CAMERAS);

    // The splats' centroid lies inside the cameras' bounding box, close to the scene centre,
    // and nowhere near the origin a normalising trainer would move it to.
    let c = mean_of_means(&splats);
    for a in 0..3 {
        let lo = positions
            .iter()
            .map(|p| f64::from(p[a]))
            .fold(f64::INFINITY, f64::min);
        let hi = positions
            .iter()
            .map(|p| f64::from(p[a]))
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(
            lo <= c[a] && c[a] <= hi,
            "axis {a}: centroid {c:?} outside [{lo}, {hi}]"
        );
        assert!(
            (c[a] - f64::from(centre[a])).abs() < 1.0,
            "axis {a}: centroid {c:?} far from the scene centre {centre:?}"
        );
    }
    // splats.ply (checked equal to `splats` above) holds the same input-frame positions.
    let r = c.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(r > 100.0, "centroid {c:?} is {r} from the origin");
}
