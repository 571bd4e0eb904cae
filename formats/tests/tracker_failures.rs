//! Capture-reading failures that public Gaussian-splatting trainers hit, replayed against Kiln's
//! capture readers (`kiln_formats::capture`).
//!
//! Each test is named after its item in `shared/research/splat-anchors.md` §5 ("Input/output
//! problems from the trackers"), e.g. `item_01_colmap_simple_radial_is_accepted` for item 1.
//! Only the items about *reading captures* are here: COLMAP camera models (1, 2, 10, 16, 17, 28),
//! nerfstudio JSON naming and camera models (21, 22), COLMAP text models (23, 29), images in
//! subfolders and empty captures (24), RGBA images (20). Two cases have no item number: EXIF
//! orientation (the "Gap" paragraph of §5) and a `transforms.json` with `camera_angle_x` only;
//! their tests start with `gap_`.
//!
//! Every input is built by hand in a temporary directory: tiny PNG/JPEG images written with the
//! `image` crate, COLMAP binary files in the layout COLMAP's `Write*Binary` use (little-endian;
//! see `formats/src/capture/colmap_bin.rs`), text files as strings. Where a unit test inside the
//! crate already covers the same item at the level of one reader, the test here goes through
//! [`read_capture`] on a whole capture folder (as `kiln ingest` does) and says which unit test it
//! complements.
//!
//! Undistortion is checked on a ramp image (red = 6·column, green = 6·row, 8-bit), which bilinear
//! sampling reproduces exactly between pixel centres; so each undistorted pixel must hold the ramp
//! value at the distorted location computed here by hand from the lens formula.

use std::path::Path;

use kiln_formats::Error;
use kiln_formats::capture::{
    Capture, Distortion, Frame, Intrinsics, load_rgb, read_capture, read_capture_in, undistort,
};

// ---------------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------------

/// A camera as `cameras.bin` stores it: CAMERA_ID, MODEL_ID (COLMAP `models.h`), WIDTH, HEIGHT,
/// PARAMS[] in COLMAP's order.
struct Cam {
    id: u32,
    model_id: i32,
    width: u64,
    height: u64,
    params: Vec<f64>,
}

/// An image as `images.bin` stores it; [`write_images_bin`] gives each one 2D observation.
struct Img {
    id: u32,
    /// QW QX QY QZ.
    q: [f64; 4],
    /// TX TY TZ.
    t: [f64; 3],
    camera_id: u32,
    name: &'static str,
}

const IDENTITY_Q: [f64; 4] = [1.0, 0.0, 0.0, 0.0];

fn write_cameras_bin(dir: &Path, cams: &[Cam]) {
    let mut b = (cams.len() as u64).to_le_bytes().to_vec();
    for c in cams {
        b.extend(c.id.to_le_bytes());
        b.extend(c.model_id.to_le_bytes());
        b.extend(c.width.to_le_bytes());
        b.extend(c.height.to_le_bytes());
        for p in &c.params {
            b.extend(p.to_le_bytes());
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("cameras.bin"), b).unwrap();
}

fn write_images_bin(dir: &Path, imgs: &[Img]) {
    let mut b = (imgs.len() as u64).to_le_bytes().to_vec();
    for i in imgs {
        b.extend(i.id.to_le_bytes());
        for v in i.q.iter().chain(&i.t) {
            b.extend(v.to_le_bytes());
        }
        b.extend(i.camera_id.to_le_bytes());
        b.extend(i.name.as_bytes());
        b.push(0);
        // One 2D observation: X, Y, POINT3D_ID (u64::MAX = none, as COLMAP writes −1).
        b.extend(1_u64.to_le_bytes());
        b.extend(10.5_f64.to_le_bytes());
        b.extend(7.25_f64.to_le_bytes());
        b.extend(u64::MAX.to_le_bytes());
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("images.bin"), b).unwrap();
}

/// `points3D.bin` with the given (POINT3D_ID, XYZ, RGB), each with ERROR 0.5 and a one-element
/// track on image 1.
fn write_points_bin(dir: &Path, pts: &[(u64, [f64; 3], [u8; 3])]) {
    let mut b = (pts.len() as u64).to_le_bytes().to_vec();
    for (id, xyz, rgb) in pts {
        b.extend(id.to_le_bytes());
        for v in xyz {
            b.extend(v.to_le_bytes());
        }
        b.extend(rgb);
        b.extend(0.5_f64.to_le_bytes());
        b.extend(1_u64.to_le_bytes());
        b.extend(1_u32.to_le_bytes());
        b.extend(0_u32.to_le_bytes());
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("points3D.bin"), b).unwrap();
}

/// Ramp image size: red = 6·i ≤ 234 and green = 6·j ≤ 174 fit in 8 bits.
const W: u32 = 40;
const H: u32 = 30;

/// A `W × H` PNG (or JPEG, by extension) whose red channel is 6·column, green 6·row, blue 64.
fn ramp_image(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let img = image::RgbImage::from_fn(W, H, |i, j| image::Rgb([6 * i as u8, 6 * j as u8, 64]));
    img.save(path).unwrap();
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn names(capture: &Capture) -> Vec<&str> {
    capture.frames.iter().map(|f| f.name.as_str()).collect()
}

/// Undistort `frame`'s ramp image as ingest does (`load_rgb` then `undistort` with the frame's
/// intrinsics and distortion) and check every output pixel whose distorted location lies between
/// pixel centres against the ramp value there. `distort` maps undistorted normalised (x, y) to
/// distorted normalised coordinates, written out by hand from the lens formula.
///
/// Returns how many pixels were checked; asserts that most were, and that the lens moved some
/// sample by more than a pixel (so the check is not of an identity map).
fn assert_undistorts_like(frame: &Frame, distort: impl Fn(f64, f64) -> (f64, f64)) -> usize {
    let img = load_rgb(&frame.image_path, None).unwrap();
    let k = frame.intrinsics;
    assert_eq!((img.width, img.height), (k.width, k.height));
    let out = undistort(&img, &k, &frame.distortion);
    assert_eq!((out.width, out.height), (W, H));
    let (mut checked, mut moved) = (0, 0);
    for j in 0..H {
        for i in 0..W {
            let (u, v) = (f64::from(i) + 0.5, f64::from(j) + 0.5);
            let (xd, yd) = distort((u - k.cx) / k.fx, (v - k.cy) / k.fy);
            let (ud, vd) = (k.fx * xd + k.cx, k.fy * yd + k.cy);
            let inside = |p: f64, n: u32| (0.5..=f64::from(n) - 0.5).contains(&p);
            if !(inside(ud, W) && inside(vd, H)) {
                continue;
            }
            let want = [
                6.0 * (ud - 0.5) / 255.0,
                6.0 * (vd - 0.5) / 255.0,
                64.0 / 255.0,
            ];
            let got = &out.data[((j * W + i) * 3) as usize..][..3];
            for c in 0..3 {
                assert!(
                    (f64::from(got[c]) - want[c]).abs() < 1e-5,
                    "{}: pixel ({i}, {j}) channel {c}: got {}, want {} (sample at {ud:.3}, {vd:.3})",
                    frame.name,
                    got[c],
                    want[c]
                );
            }
            checked += 1;
            if (ud - u).abs().max((vd - v).abs()) > 1.0 {
                moved += 1;
            }
        }
    }
    assert!(
        checked > (W * H / 2) as usize,
        "only {checked} pixels checked"
    );
    assert!(moved > 0, "the lens moved no sample by more than a pixel");
    checked
}

/// OpenCV fisheye (Kannala–Brandt) distortion of a normalised point, by hand:
/// θ = atan r, θd = θ(1 + k1θ² + k2θ⁴ + k3θ⁶ + k4θ⁸), (x, y)·θd/r.
fn fisheye(x: f64, y: f64, k: [f64; 4]) -> (f64, f64) {
    let r = x.hypot(y);
    if r < 1e-12 {
        return (x, y);
    }
    let t = r.atan();
    let t2 = t * t;
    let td = t * (1.0 + k[0] * t2 + k[1] * t2.powi(2) + k[2] * t2.powi(3) + k[3] * t2.powi(4));
    (x * td / r, y * td / r)
}

// ---------------------------------------------------------------------------------------------
// COLMAP camera models
// ---------------------------------------------------------------------------------------------

/// gaussian-splatting#4: COLMAP 3.8's default SIMPLE_RADIAL model was refused ("Colmap camera
/// model not handled!"). Here: a binary model as COLMAP's mapper writes it, in `sparse/0`, read
/// from the scene folder. (Unit tests `colmap_reads_radial_models` and
/// `binary_every_camera_model_maps_like_the_text_reader` cover the reader alone.)
#[test]
fn item_01_colmap_simple_radial_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path();
    let sparse = scene.join("sparse/0");
    write_cameras_bin(
        &sparse,
        &[Cam {
            id: 1,
            model_id: 2, // SIMPLE_RADIAL: f, cx, cy, k
            width: 40,
            height: 30,
            params: vec![36.5, 20.25, 14.75, -0.0421],
        }],
    );
    write_images_bin(
        &sparse,
        &[
            Img {
                id: 2,
                q: IDENTITY_Q,
                t: [0.5, 0.0, 4.0],
                camera_id: 1,
                name: "0002.png",
            },
            Img {
                id: 1,
                q: IDENTITY_Q,
                t: [0.0, 0.0, 4.0],
                camera_id: 1,
                name: "0001.png",
            },
        ],
    );
    write_points_bin(&sparse, &[(1, [0.25, -0.5, 1.0], [200, 100, 50])]);
    ramp_image(&scene.join("images/0001.png"));
    ramp_image(&scene.join("images/0002.png"));

    let capture = read_capture(scene).unwrap();
    assert_eq!(capture.source, sparse);
    assert_eq!(names(&capture), ["0001.png", "0002.png"]);
    assert!(capture.skipped.is_empty());
    for frame in &capture.frames {
        assert_eq!(
            frame.intrinsics,
            Intrinsics {
                fx: 36.5,
                fy: 36.5,
                cx: 20.25,
                cy: 14.75,
                width: 40,
                height: 30,
            }
        );
        assert_eq!(frame.distortion, Distortion::SimpleRadial { k: -0.0421 });
    }
    assert_eq!(capture.frames[1].world_to_camera[0][3], 0.5);
    let points = capture.points.unwrap();
    assert_eq!(points.positions, [[0.25, -0.5, 1.0]]);
    assert_eq!(points.colors, [[200, 100, 50]]);
}

/// gaussian-splatting#272: the user pointed the trainer at the *distorted* model (`sparse/`, made
/// with convert.py's default OPENCV camera) instead of the undistorted `dense/0/sparse`. Kiln
/// reads the distorted model, keeps its distortion, and ingest (`load_rgb` + `undistort`, as
/// `pipeline/src/stages/ingest.rs` does) resamples the photo to the pinhole image.
#[test]
fn item_02_distorted_sparse_model_is_read_with_its_distortion() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path();
    let sparse = scene.join("sparse/0");
    let (k1, k2, p1, p2) = (-0.2, 0.03, 0.001, -0.002);
    write_cameras_bin(
        &sparse,
        &[Cam {
            id: 1,
            model_id: 4, // OPENCV: fx, fy, cx, cy, k1, k2, p1, p2
            width: 40,
            height: 30,
            params: vec![30.0, 31.0, 20.5, 14.5, k1, k2, p1, p2],
        }],
    );
    write_images_bin(
        &sparse,
        &[Img {
            id: 1,
            q: IDENTITY_Q,
            t: [0.0, 0.0, 3.0],
            camera_id: 1,
            name: "IMG_0001.png",
        }],
    );
    write_points_bin(&sparse, &[(1, [0.0, 0.0, 0.0], [1, 2, 3])]);
    ramp_image(&scene.join("images/IMG_0001.png"));

    let capture = read_capture(scene).unwrap();
    assert_eq!(capture.source, sparse);
    let frame = &capture.frames[0];
    assert_eq!(frame.name, "IMG_0001.png");
    assert_eq!(
        frame.intrinsics,
        Intrinsics {
            fx: 30.0,
            fy: 31.0,
            cx: 20.5,
            cy: 14.5,
            width: 40,
            height: 30,
        }
    );
    assert_eq!(frame.distortion, Distortion::OpenCv { k1, k2, p1, p2 });
    assert!(!frame.distortion.is_identity());
    // Brown–Conrady, by hand.
    assert_undistorts_like(frame, |x, y| {
        let r2 = x * x + y * y;
        let radial = 1.0 + k1 * r2 + k2 * r2 * r2;
        (
            x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
            y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
        )
    });
}

/// gaussian-splatting#1237: fisheye input only worked after undistorting to pinhole outside the
/// trainer. Kiln reads an OPENCV_FISHEYE model and `undistort` resamples it to the pinhole image
/// with the same intrinsics. (Unit test `undistorting_a_fisheye_rendering_restores_straight_lines`
/// checks `undistort` alone on rendered scenes.)
#[test]
fn item_10_opencv_fisheye_is_accepted_and_undistorted_to_pinhole() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path();
    let sparse = scene.join("sparse/0");
    let coeffs = [0.05, -0.01, 0.002, -0.0005];
    let mut params = vec![24.0, 24.5, 20.0, 15.0];
    params.extend(coeffs);
    write_cameras_bin(
        &sparse,
        &[Cam {
            id: 3,
            model_id: 5, // OPENCV_FISHEYE: fx, fy, cx, cy, k1, k2, k3, k4
            width: 40,
            height: 30,
            params,
        }],
    );
    write_images_bin(
        &sparse,
        &[Img {
            id: 1,
            q: IDENTITY_Q,
            t: [0.0, 0.0, 2.0],
            camera_id: 3,
            name: "fisheye.png",
        }],
    );
    ramp_image(&scene.join("images/fisheye.png"));

    let capture = read_capture(scene).unwrap();
    assert_eq!(capture.points, None, "no points3D.bin was written");
    let frame = &capture.frames[0];
    assert_eq!(
        frame.intrinsics,
        Intrinsics {
            fx: 24.0,
            fy: 24.5,
            cx: 20.0,
            cy: 15.0,
            width: 40,
            height: 30,
        }
    );
    assert_eq!(
        frame.distortion,
        Distortion::OpenCvFisheye {
            k1: 0.05,
            k2: -0.01,
            k3: 0.002,
            k4: -0.0005,
        }
    );
    // A pinhole view of a fisheye photo samples inwards: every output pixel is defined here.
    let checked = assert_undistorts_like(frame, |x, y| fisheye(x, y, coeffs));
    assert_eq!(checked, (W * H) as usize);
}

/// gsplat#813: a COLMAP SIMPLE_RADIAL_FISHEYE camera was rejected ("Camera type not supported").
/// Here in nerfstudio's `colmap/sparse/0` layout, read from the scene folder. (Unit tests
/// `colmap_reads_every_fisheye_and_full_model` and
/// `binary_every_camera_model_maps_like_the_text_reader` cover the reader alone.)
#[test]
fn item_16_simple_radial_fisheye_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path();
    let sparse = scene.join("colmap/sparse/0");
    let k = 0.03;
    write_cameras_bin(
        &sparse,
        &[Cam {
            id: 1,
            model_id: 8, // SIMPLE_RADIAL_FISHEYE: f, cx, cy, k
            width: 40,
            height: 30,
            params: vec![28.0, 19.75, 15.25, k],
        }],
    );
    write_images_bin(
        &sparse,
        &[Img {
            id: 1,
            q: IDENTITY_Q,
            t: [0.0, 0.0, 2.0],
            camera_id: 1,
            name: "frame_00001.png",
        }],
    );
    ramp_image(&scene.join("images/frame_00001.png"));

    let capture = read_capture(scene).unwrap();
    assert_eq!(capture.source, sparse);
    let frame = &capture.frames[0];
    assert_eq!(frame.name, "frame_00001.png");
    assert_eq!(
        frame.intrinsics,
        Intrinsics {
            fx: 28.0,
            fy: 28.0,
            cx: 19.75,
            cy: 15.25,
            width: 40,
            height: 30,
        }
    );
    assert_eq!(frame.distortion, Distortion::SimpleRadialFisheye { k });
    // Equidistant point scaled by (1 + k θ²), by hand.
    assert_undistorts_like(frame, |x, y| fisheye(x, y, [k, 0.0, 0.0, 0.0]));
}

/// gsplat#531: the fisheye undistortion map recentred on width//2 instead of cx. With the
/// principal point well off the image centre, the undistorted pixel at (cx, cy) keeps its own
/// value and every other pixel samples the fisheye location around (cx, cy).
#[test]
fn item_17_fisheye_undistortion_is_centred_on_the_principal_point() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path();
    let coeffs = [0.08, 0.0, 0.0, 0.0];
    let mut params = vec![22.0, 22.0, 13.5, 10.5]; // cx, cy: pixel (13, 10)'s centre
    params.extend(coeffs);
    write_cameras_bin(
        scene,
        &[Cam {
            id: 1,
            model_id: 5, // OPENCV_FISHEYE
            width: 40,
            height: 30,
            params,
        }],
    );
    write_images_bin(
        scene,
        &[Img {
            id: 1,
            q: IDENTITY_Q,
            t: [0.0, 0.0, 2.0],
            camera_id: 1,
            name: "a.png",
        }],
    );
    ramp_image(&scene.join("images/a.png"));
    let capture = read_capture(scene).unwrap();
    let frame = &capture.frames[0];
    assert_undistorts_like(frame, |x, y| fisheye(x, y, coeffs));
    let img = load_rgb(&frame.image_path, None).unwrap();
    let out = undistort(&img, &frame.intrinsics, &frame.distortion);
    let at = ((10 * W + 13) * 3) as usize;
    assert_eq!(&out.data[at..at + 3], &img.data[at..at + 3]);
    assert_eq!(out.data[at], 6.0 * 13.0 / 255.0);
}

/// OpenSplat#72: "Unsupported camera model: 2" on a `cameras.bin` from COLMAP's automatic
/// reconstruction. Here two SIMPLE_RADIAL cameras (model id 2, one per image folder as automatic
/// reconstruction makes them), read by naming the `cameras.bin` file itself, with no
/// `points3D.bin`.
#[test]
fn item_28_colmap_model_id_2_in_cameras_bin_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("reconstruction");
    write_cameras_bin(
        &model,
        &[
            Cam {
                id: 1,
                model_id: 2,
                width: 40,
                height: 30,
                params: vec![33.0, 20.0, 15.0, 0.0125],
            },
            Cam {
                id: 2,
                model_id: 2,
                width: 30,
                height: 40,
                params: vec![41.5, 15.5, 19.5, -0.25],
            },
        ],
    );
    write_images_bin(
        &model,
        &[
            Img {
                id: 1,
                q: IDENTITY_Q,
                t: [0.0, 0.0, 1.0],
                camera_id: 1,
                name: "wide.png",
            },
            Img {
                id: 2,
                q: IDENTITY_Q,
                t: [0.0, 0.0, 2.0],
                camera_id: 2,
                name: "tall.png",
            },
        ],
    );
    // Images next to the model directory (`images` beside `reconstruction`).
    ramp_image(&dir.path().join("images/wide.png"));
    ramp_image(&dir.path().join("images/tall.png"));

    // Images above the named model file are inside the input only when the root says so
    // (issue 41: a reader resolves nothing outside its root; a bare file's root is its folder).
    let root = kiln_formats::confined::ConfinedRoot::new(dir.path()).unwrap();
    let capture = read_capture_in(&root, &model.join("cameras.bin")).unwrap();
    assert_eq!(capture.source, model);
    assert_eq!(capture.points, None);
    assert_eq!(names(&capture), ["tall.png", "wide.png"]);
    let (tall, wide) = (&capture.frames[0], &capture.frames[1]);
    assert_eq!(
        wide.intrinsics,
        Intrinsics {
            fx: 33.0,
            fy: 33.0,
            cx: 20.0,
            cy: 15.0,
            width: 40,
            height: 30,
        }
    );
    assert_eq!(wide.distortion, Distortion::SimpleRadial { k: 0.0125 });
    assert_eq!(
        tall.intrinsics,
        Intrinsics {
            fx: 41.5,
            fy: 41.5,
            cx: 15.5,
            cy: 19.5,
            width: 30,
            height: 40,
        }
    );
    assert_eq!(tall.distortion, Distortion::SimpleRadial { k: -0.25 });
    assert_eq!(tall.world_to_camera[2][3], 2.0);
}

// ---------------------------------------------------------------------------------------------
// nerfstudio JSON
// ---------------------------------------------------------------------------------------------

const IDENTITY_M: &str = "[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]";

/// brush#41: nerfstudio content in a JSON named `transform_train.json` (no "s"), next to an init
/// PLY, gave "Couldn't parse dataset". `read_capture` on the file reads any `*.json`, and on the
/// folder finds the one `transform*.json` in it (`capture::tests` cover several such files).
#[test]
fn item_21_transform_train_json_is_read_by_read_capture() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    ramp_image(&root.join("images/frame_00001.png"));
    ramp_image(&root.join("images/frame_00002.png"));
    write(
        &root.join("sparse_pc.ply"),
        "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
         property float z\nend_header\n0 0 0\n",
    );
    let json = root.join("transform_train.json");
    write(
        &json,
        &format!(
            r#"{{
  "camera_model": "OPENCV",
  "fl_x": 35.25, "fl_y": 35.75, "cx": 20.5, "cy": 14.5, "w": 40, "h": 30,
  "k1": 0.012, "k2": -0.003, "p1": 0.0004, "p2": -0.0001,
  "ply_file_path": "sparse_pc.ply",
  "frames": [
    {{"file_path": "images/frame_00002.png", "transform_matrix": [[1,0,0,0.5],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}},
    {{"file_path": "images/frame_00001.png", "transform_matrix": {IDENTITY_M}}}
  ]
}}"#
        ),
    );

    let capture = read_capture(&json).unwrap();
    assert_eq!(capture.source, json);
    assert_eq!(names(&capture), ["frame_00001.png", "frame_00002.png"]);
    assert!(capture.skipped.is_empty());
    for frame in &capture.frames {
        assert_eq!(
            frame.intrinsics,
            Intrinsics {
                fx: 35.25,
                fy: 35.75,
                cx: 20.5,
                cy: 14.5,
                width: 40,
                height: 30,
            }
        );
        assert_eq!(
            frame.distortion,
            Distortion::OpenCv {
                k1: 0.012,
                k2: -0.003,
                p1: 0.0004,
                p2: -0.0001,
            }
        );
    }
    // camera_to_world translation (0.5, 0, 0) → camera centre (0.5, 0, 0).
    assert_eq!(capture.frames[1].camera_center(), [0.5, 0.0, 0.0]);

    // The folder itself (no `transforms.json` in it) finds the one `transform*.json` and reads
    // the same frames.
    let from_dir = read_capture(root).unwrap();
    assert_eq!(from_dir, capture);
}

/// brush#535: nerfstudio `camera_model: "PINHOLE"` was rejected after a refactor. Kiln reads it
/// as a pinhole (zero coefficients written beside it are not a distortion).
#[test]
fn item_22_nerfstudio_pinhole_camera_model_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    ramp_image(&root.join("images/0001.png"));
    write(
        &root.join("transforms.json"),
        &format!(
            r#"{{"camera_model": "PINHOLE",
  "fl_x": 31.5, "fl_y": 32.0, "cx": 19.5, "cy": 15.25, "w": 40, "h": 30,
  "k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0,
  "frames": [{{"file_path": "images/0001.png", "transform_matrix": {IDENTITY_M}}}]}}"#
        ),
    );

    let capture = read_capture(root).unwrap();
    assert_eq!(capture.source, root.join("transforms.json"));
    let frame = &capture.frames[0];
    assert_eq!(frame.name, "0001.png");
    assert_eq!(frame.distortion, Distortion::None);
    assert_eq!(
        frame.intrinsics,
        Intrinsics {
            fx: 31.5,
            fy: 32.0,
            cx: 19.5,
            cy: 15.25,
            width: 40,
            height: 30,
        }
    );
}

// ---------------------------------------------------------------------------------------------
// COLMAP text models
// ---------------------------------------------------------------------------------------------

/// brush#383: a RealityScan COLMAP **text** export (cameras.txt, images.txt, points3D.txt, with
/// COLMAP's comment headers and POINTS2D lines) failed with "IO error / Parse error". Read here
/// from the folder, with no `.bin` file anywhere. (Unit test
/// `colmap_reads_ids_in_any_order_with_empty_points2d_lines` covers `read_colmap` on text.)
#[test]
fn item_23_colmap_text_export_is_read_without_bin_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        &root.join("cameras.txt"),
        "# Camera list with one line of data per camera:\n\
         #   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n\
         # Number of cameras: 1\n\
         1 PINHOLE 40 30 34.125 34.375 20.0625 14.9375\n",
    );
    write(
        &root.join("images.txt"),
        "# Image list with two lines of data per image:\n\
         #   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n\
         #   POINTS2D[] as (X, Y, POINT3D_ID)\n\
         # Number of images: 2, mean observations per image: 1\n\
         1 0.7071067811865476 0 0 0.7071067811865476 1.5 -2 3 1 RS_0001.png\n\
         12.5 7.5 1\n\
         2 1 0 0 0 0 0 4 1 RS_0002.png\n\
         3.25 4.75 -1\n",
    );
    write(
        &root.join("points3D.txt"),
        "# 3D point list with one line of data per point:\n\
         #   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n\
         # Number of points: 2, mean track length: 1\n\
         1 0.5 -0.25 2 255 128 0 0.75 1 0\n\
         9 -1 1.5 3.5 10 20 30 1.25 2 0\n",
    );
    ramp_image(&root.join("images/RS_0001.png"));
    ramp_image(&root.join("images/RS_0002.png"));
    for bin in ["cameras.bin", "images.bin", "points3D.bin"] {
        assert!(!root.join(bin).exists());
    }

    let capture = read_capture(root).unwrap();
    assert_eq!(capture.source, root);
    assert_eq!(names(&capture), ["RS_0001.png", "RS_0002.png"]);
    for frame in &capture.frames {
        assert_eq!(
            frame.intrinsics,
            Intrinsics {
                fx: 34.125,
                fy: 34.375,
                cx: 20.0625,
                cy: 14.9375,
                width: 40,
                height: 30,
            }
        );
        assert_eq!(frame.distortion, Distortion::None);
    }
    // q = (cos 45°, 0, 0, sin 45°): 90° about z, R = [[0, −1, 0], [1, 0, 0], [0, 0, 1]].
    let m = capture.frames[0].world_to_camera;
    let want = [
        [0.0, -1.0, 0.0, 1.5],
        [1.0, 0.0, 0.0, -2.0],
        [0.0, 0.0, 1.0, 3.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    for r in 0..4 {
        for c in 0..4 {
            assert!(
                (m[r][c] - want[r][c]).abs() < 1e-12,
                "[{r}][{c}] = {}",
                m[r][c]
            );
        }
    }
    let points = capture.points.unwrap();
    assert_eq!(points.positions, [[0.5, -0.25, 2.0], [-1.0, 1.5, 3.5]]);
    assert_eq!(points.colors, [[255, 128, 0], [10, 20, 30]]);
}

/// OpenSplat#148: the COLMAP text-format gerrard-hall dataset (`sparse/0/*.txt`, JPEG images
/// named `IMG_*.JPG`) ended in an OpenCV "!_src.empty()" error because only `.bin` was read and
/// no image was found. Here the text model is named by its `images.txt`, and every frame's image
/// is found and decodes at the model's size.
#[test]
fn item_29_colmap_text_dataset_images_are_found_and_decode() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path().join("gerrard-hall");
    let sparse = scene.join("sparse/0");
    write(
        &sparse.join("cameras.txt"),
        "1 SIMPLE_RADIAL 40 30 38.5 20 15 -0.0125\n",
    );
    write(
        &sparse.join("images.txt"),
        "1 1 0 0 0 0 0 5 1 IMG_2331.JPG\n\n2 1 0 0 0 1 0 5 1 IMG_2332.JPG\n\n",
    );
    write(&sparse.join("points3D.txt"), "");
    ramp_image(&scene.join("images/IMG_2331.JPG"));
    ramp_image(&scene.join("images/IMG_2332.JPG"));

    let root = kiln_formats::confined::ConfinedRoot::new(&scene).unwrap();
    let capture = read_capture_in(&root, &sparse.join("images.txt")).unwrap();
    assert_eq!(capture.source, sparse);
    assert_eq!(names(&capture), ["IMG_2331.JPG", "IMG_2332.JPG"]);
    assert_eq!(capture.points.as_ref().map(|p| p.positions.len()), Some(0));
    for frame in &capture.frames {
        assert_eq!(frame.image_path, scene.join("images").join(&frame.name));
        assert_eq!(frame.distortion, Distortion::SimpleRadial { k: -0.0125 });
        let k = frame.intrinsics;
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (38.5, 38.5, 20.0, 15.0));
        let img = load_rgb(&frame.image_path, None).unwrap();
        assert_eq!((img.width, img.height), (k.width, k.height));
        assert_eq!(img.data.len(), (40 * 30 * 3) as usize);
    }
    // The same capture from the scene folder.
    assert_eq!(read_capture(&scene).unwrap(), capture);
}

// ---------------------------------------------------------------------------------------------
// Image discovery, empty captures
// ---------------------------------------------------------------------------------------------

/// brush#172: images in subfolders gave "Need at least one view in dataset". COLMAP NAMEs with a
/// subfolder (the south-building layout: model directly in `sparse/`) and nerfstudio file paths
/// with one are both found, and the frame name keeps the subfolder, so equal file names in two
/// folders stay distinct. (Unit test `colmap_finds_images_above_a_given_model_dir` covers one
/// subfolder name through `read_colmap`.)
#[test]
fn item_24_images_in_subfolders_are_found_and_named_with_the_subfolder() {
    let dir = tempfile::tempdir().unwrap();

    // COLMAP, binary, model in `sparse/`.
    let scene = dir.path().join("south-building");
    let sparse = scene.join("sparse");
    write_cameras_bin(
        &sparse,
        &[Cam {
            id: 1,
            model_id: 1, // PINHOLE
            width: 40,
            height: 30,
            params: vec![30.0, 30.0, 20.0, 15.0],
        }],
    );
    let img = |id, name| Img {
        id,
        q: IDENTITY_Q,
        t: [f64::from(id), 0.0, 0.0],
        camera_id: 1,
        name,
    };
    write_images_bin(
        &sparse,
        &[
            img(1, "b/0001.png"),
            img(2, "a/0002.png"),
            img(3, "a/0001.png"),
        ],
    );
    for name in ["a/0001.png", "a/0002.png", "b/0001.png"] {
        ramp_image(&scene.join("images").join(name));
    }
    let capture = read_capture(&scene).unwrap();
    assert_eq!(capture.source, sparse);
    assert_eq!(names(&capture), ["a/0001.png", "a/0002.png", "b/0001.png"]);
    for frame in &capture.frames {
        assert_eq!(frame.image_path, scene.join("images").join(&frame.name));
    }
    assert_eq!(capture.frames[2].world_to_camera[0][3], 1.0);

    // nerfstudio, file paths with a camera subfolder under `images/`.
    let ns = dir.path().join("ns");
    for name in ["cam0/0001.png", "cam1/0001.png"] {
        ramp_image(&ns.join("images").join(name));
    }
    write(
        &ns.join("transforms.json"),
        &format!(
            r#"{{"fl_x": 30, "w": 40, "h": 30, "frames": [
  {{"file_path": "images/cam1/0001.png", "transform_matrix": {IDENTITY_M}}},
  {{"file_path": "./images/cam0/0001.png", "transform_matrix": {IDENTITY_M}}}]}}"#
        ),
    );
    let capture = read_capture(&ns).unwrap();
    assert_eq!(names(&capture), ["cam0/0001.png", "cam1/0001.png"]);
    assert_eq!(
        capture.frames[1].image_path,
        ns.join("images/cam1/0001.png")
    );
}

/// brush#172 / brush#270: a capture with no usable view panicked ("Need at least one view in
/// dataset"). In Kiln every such case is an error naming the file: a model listing no images, a
/// model whose images are all missing, a folder of images with no model. (Unit tests
/// `colmap_with_all_images_missing_is_empty` and `transforms_with_all_images_missing_is_empty`
/// cover the text and JSON readers.)
#[test]
fn item_24_empty_or_all_missing_capture_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let cam = [Cam {
        id: 1,
        model_id: 0, // SIMPLE_PINHOLE
        width: 40,
        height: 30,
        params: vec![30.0, 20.0, 15.0],
    }];

    // A binary model listing no images.
    let none = dir.path().join("none");
    write_cameras_bin(&none.join("sparse/0"), &cam);
    write_images_bin(&none.join("sparse/0"), &[]);
    let err = read_capture(&none).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Empty { .. }), "{msg}");
    assert!(
        msg.contains(&none.join("sparse/0/images.bin").display().to_string())
            && msg.contains("lists no images"),
        "{msg}"
    );

    // A binary model whose two images are missing (no `images` folder at all).
    let missing = dir.path().join("missing");
    write_cameras_bin(&missing.join("sparse/0"), &cam);
    write_images_bin(
        &missing.join("sparse/0"),
        &[
            Img {
                id: 1,
                q: IDENTITY_Q,
                t: [0.0; 3],
                camera_id: 1,
                name: "sub/0002.png",
            },
            Img {
                id: 2,
                q: IDENTITY_Q,
                t: [0.0; 3],
                camera_id: 1,
                name: "sub/0001.png",
            },
        ],
    );
    let err = read_capture(&missing).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Empty { .. }), "{msg}");
    assert!(
        msg.contains(&missing.join("sparse/0/images.bin").display().to_string())
            && msg.contains("all 2 images listed are missing")
            && msg.contains("`sub/0001.png`"),
        "{msg}"
    );

    // A folder of images in subfolders with no poses at all.
    let loose = dir.path().join("loose");
    ramp_image(&loose.join("images/a/0001.png"));
    let err = read_capture(&loose).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::NotFound { .. }), "{msg}");
    assert!(
        msg.contains(&loose.display().to_string()) && msg.contains("cameras.bin"),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------------------------

/// brush#13: an RGBA PNG dataset crashed with a shape mismatch ([H, W, 4] against an RGB
/// buffer). `load_rgb` drops alpha (not composited): always `[H, W, 3]`.
#[test]
fn item_20_rgba_png_decodes_to_three_channels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rgba.png");
    let mut img = image::RgbaImage::new(3, 2);
    img.put_pixel(0, 0, image::Rgba([255, 0, 51, 0]));
    img.put_pixel(2, 1, image::Rgba([1, 2, 3, 128]));
    img.save(&path).unwrap();
    let rgb = load_rgb(&path, None).unwrap();
    assert_eq!((rgb.width, rgb.height), (3, 2));
    assert_eq!(rgb.data.len(), 3 * 2 * 3);
    assert_eq!(&rgb.data[..3], &[1.0, 0.0, 51.0 / 255.0]);
    assert_eq!(&rgb.data[15..18], &[1.0 / 255.0, 2.0 / 255.0, 3.0 / 255.0]);
}

/// `jpeg` with an APP1 EXIF segment holding only Orientation (tag 0x0112, SHORT) = `orientation`,
/// inserted after the JFIF APP0 segment (or right after SOI if there is none).
fn with_exif_orientation(jpeg: &[u8], orientation: u16) -> Vec<u8> {
    assert_eq!(&jpeg[..2], &[0xFF, 0xD8], "not a JPEG");
    // Big-endian TIFF: header, IFD0 at offset 8 with one entry, no next IFD.
    let mut tiff = b"MM\x00\x2A".to_vec();
    tiff.extend(8_u32.to_be_bytes());
    tiff.extend(1_u16.to_be_bytes()); // entry count
    tiff.extend(0x0112_u16.to_be_bytes()); // Orientation
    tiff.extend(3_u16.to_be_bytes()); // SHORT
    tiff.extend(1_u32.to_be_bytes()); // count
    tiff.extend(orientation.to_be_bytes());
    tiff.extend([0, 0]); // value field padding to 4 bytes
    tiff.extend(0_u32.to_be_bytes()); // next IFD
    let mut payload = b"Exif\x00\x00".to_vec();
    payload.extend(tiff);
    let mut app1 = vec![0xFF, 0xE1];
    app1.extend(u16::try_from(payload.len() + 2).unwrap().to_be_bytes());
    app1.extend(payload);

    let mut at = 2;
    if jpeg[2..4] == [0xFF, 0xE0] {
        at = 4 + usize::from(u16::from_be_bytes([jpeg[4], jpeg[5]]));
    }
    let mut out = jpeg[..at].to_vec();
    out.extend(app1);
    out.extend(&jpeg[at..]);
    out
}

/// §5 "Gap": Brush and gsplat ignore EXIF Orientation, so a portrait photo stored landscape with
/// Orientation = 6 ("Right-top", rotate 90° clockwise to display) comes out with width and height
/// swapped against its neighbours (darglein/ADOP#65). `load_rgb` applies the rotation, and the
/// header size a `transforms.json` without `w`/`h` falls back on agrees with it.
#[test]
fn gap_exif_orientation_6_decodes_with_width_and_height_swapped() {
    let dir = tempfile::tempdir().unwrap();
    // Stored 32 × 16: left half red, right half blue (16-pixel blocks: no chroma bleed).
    let stored = image::RgbImage::from_fn(32, 16, |i, _| {
        if i < 16 {
            image::Rgb([255, 0, 0])
        } else {
            image::Rgb([0, 0, 255])
        }
    });
    let mut jpeg = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 95)
        .encode_image(&stored)
        .unwrap();
    let path = dir.path().join("images/portrait.jpg");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, with_exif_orientation(&jpeg, 6)).unwrap();

    let img = load_rgb(&path, None).unwrap();
    assert_eq!((img.width, img.height), (16, 32));
    // Rotating 90° clockwise puts the stored left (red) half on top, the right (blue) below.
    let px = |i: u32, j: u32| {
        let at = ((j * img.width + i) * 3) as usize;
        [img.data[at], img.data[at + 1], img.data[at + 2]]
    };
    for (i, j, want) in [(8, 4, [1.0, 0.0, 0.0]), (8, 28, [0.0, 0.0, 1.0])] {
        let got = px(i, j);
        for c in 0..3 {
            assert!((got[c] - want[c]).abs() < 0.1, "({i}, {j}): {got:?}");
        }
    }
    // Downscaling keeps the displayed aspect: max side 8 → 4 × 8.
    let small = load_rgb(&path, Some(8)).unwrap();
    assert_eq!((small.width, small.height), (4, 8));

    // No `w`/`h`: the size comes from the header, after orientation, and cx, cy from it.
    write(
        &dir.path().join("transforms.json"),
        &format!(
            r#"{{"fl_x": 20, "frames": [
  {{"file_path": "images/portrait.jpg", "transform_matrix": {IDENTITY_M}}}]}}"#
        ),
    );
    let capture = read_capture(dir.path()).unwrap();
    assert_eq!(
        capture.frames[0].intrinsics,
        Intrinsics {
            fx: 20.0,
            fy: 20.0,
            cx: 8.0,
            cy: 16.0,
            width: 16,
            height: 32,
        }
    );
}

/// A NeRF-synthetic `transforms.json` gives `camera_angle_x` only (no `fl_x`, no `w`/`h`): the
/// focal length is fx = 0.5·W / tan(0.5·camera_angle_x), W from the image, and fy = fx. (Unit
/// test `transforms_camera_angle_and_header_size_fill_missing_keys` checks one angle, π/2,
/// through `read_transforms`.)
#[test]
fn gap_camera_angle_x_only_transforms_json_gets_focal_from_image_width() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    ramp_image(&root.join("train/r_0.png"));
    ramp_image(&root.join("train/r_1.png"));
    // The lego scene's angle.
    let angle = 0.6911112070083618_f64;
    write(
        &root.join("transforms.json"),
        &format!(
            r#"{{"camera_angle_x": {angle}, "frames": [
  {{"file_path": "./train/r_1", "rotation": 0.012566370614359171, "transform_matrix": {IDENTITY_M}}},
  {{"file_path": "./train/r_0", "rotation": 0.012566370614359171, "transform_matrix": {IDENTITY_M}}}]}}"#
        ),
    );

    let capture = read_capture(root).unwrap();
    assert_eq!(names(&capture), ["train/r_0.png", "train/r_1.png"]);
    // 0.5 · 40 / tan(0.5 · 0.6911112070083618) = 55.55555155968841 (by hand, Python `math`).
    let fx = 0.5 * 40.0 / (0.5 * angle).tan();
    assert!((fx - 55.555_551_559_688_41).abs() < 1e-9, "{fx}");
    for frame in &capture.frames {
        let k = frame.intrinsics;
        assert!((k.fx - fx).abs() < 1e-12, "{}: fx {}", frame.name, k.fx);
        assert_eq!(k.fy, k.fx);
        assert_eq!((k.cx, k.cy, k.width, k.height), (20.0, 15.0, 40, 30));
        assert_eq!(frame.distortion, Distortion::None);
    }
}

/// Masks for every reader (issue 3 inputs: `masks/`, several naming schemes): a COLMAP text
/// capture finds `masks/<name>.png` (COLMAP's own convention) and `masks/<stem>_mask.JPG`; a
/// nerfstudio capture takes a frame's `mask_path` before the `masks/` folder's `<stem>.png`, and
/// a `mask_path` naming a missing file is an error naming it.
#[test]
fn masks_are_found_for_colmap_and_nerfstudio_captures() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join("cameras.txt"), "1 PINHOLE 40 30 34 34 20 15\n");
    write(
        &root.join("images.txt"),
        "1 1 0 0 0 0 0 4 1 a.jpg\n\n2 1 0 0 0 0.5 0 4 1 b.jpg\n\n3 1 0 0 0 1 0 4 1 c.jpg\n\n",
    );
    write(&root.join("points3D.txt"), "");
    for n in ["a.jpg", "b.jpg", "c.jpg"] {
        ramp_image(&root.join("images").join(n));
    }
    ramp_image(&root.join("masks/a.jpg.png"));
    ramp_image(&root.join("masks/b_mask.png"));
    let capture = read_capture(root).unwrap();
    let masks: Vec<Option<String>> = capture
        .frames
        .iter()
        .map(|f| {
            f.mask_path
                .as_ref()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    assert_eq!(
        masks,
        [Some("a.jpg.png".into()), Some("b_mask.png".into()), None]
    );

    let ns = tempfile::tempdir().unwrap();
    let root = ns.path();
    ramp_image(&root.join("images/x.png"));
    ramp_image(&root.join("images/y.png"));
    ramp_image(&root.join("masks/x.png"));
    ramp_image(&root.join("masks/y.png"));
    ramp_image(&root.join("fg/y_alpha.png"));
    let json = |y_mask: &str| {
        format!(
            r#"{{"fl_x": 34, "fl_y": 34, "cx": 20, "cy": 15, "w": 40, "h": 30, "frames": [
  {{"file_path": "images/x.png", "transform_matrix": {IDENTITY_M}}},
  {{"file_path": "images/y.png", "mask_path": "{y_mask}", "transform_matrix": {IDENTITY_M}}}]}}"#
        )
    };
    write(&root.join("transforms.json"), &json("fg/y_alpha.png"));
    let capture = read_capture(&root.join("transforms.json")).unwrap();
    assert_eq!(capture.frames[0].mask_path, Some(root.join("masks/x.png")));
    assert_eq!(
        capture.frames[1].mask_path,
        Some(root.join("fg/y_alpha.png"))
    );
    write(&root.join("transforms.json"), &json("fg/nope.png"));
    let err = read_capture(&root.join("transforms.json"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fg/nope.png") && err.contains("mask_path"),
        "{err}"
    );
}
