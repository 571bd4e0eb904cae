//! Captures without camera poses: the `reconstruct` stage (COLMAP structure-from-motion, ffmpeg
//! frame selection for video) in front of training, through the real binary.
//!
//! These tests need the `colmap` and `ffmpeg` binaries (Debian packages, installed by `.ci/run`).
//! In CI (`CI=true`) a missing binary fails the test; locally it is skipped with a message.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::{Sandbox, dataset, job_id, link_files, ok, stderr, stdout};

/// Whether `program` runs; panics in CI when it does not.
fn have(program: &str, arg: &str) -> bool {
    let found = Command::new(program)
        .arg(arg)
        .env("QT_QPA_PLATFORM", "offscreen")
        .output()
        .is_ok();
    if !found {
        assert!(
            std::env::var("CI").is_err(),
            "{program} is not installed; .ci/run installs it (apt-get install colmap ffmpeg)"
        );
        eprintln!("SKIP: {program} not installed (apt-get install colmap ffmpeg)");
    }
    found
}

/// The 50 fox photos, without transforms.json, in `dir/images`.
fn unposed_fox(dir: &Path) -> PathBuf {
    let src = dataset("capture-fox-instantngp").join("images");
    let dest = dir.join("fox-photos/images");
    std::fs::create_dir_all(&dest).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        std::fs::copy(e.path(), dest.join(e.file_name())).unwrap();
    }
    dir.join("fox-photos")
}

/// Reconstruction settings sized for a 2-core CI machine: COLMAP 3.8's CPU matcher is brute
/// force, so matching time grows with the square of the features per image.
const CPU_SFM: &str = "[reconstruct]\nmax_image_size = 1024\nmax_num_features = 1024\n";

/// Training settings shared by the posed and unposed fox runs, so their PSNR compares.
const SHORT_TRAIN: &str = "[ingest]\nmax_side = 135\n[train]\nsteps = 600\n";

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn psnr(metrics: &Path) -> f64 {
    read_json(metrics)["psnr_db"]
        .as_f64()
        .unwrap_or_else(|| panic!("no psnr_db in {}", metrics.display()))
}

#[test]
fn plan_shows_reconstruct_for_photos_without_poses_and_not_for_posed_captures() {
    let sb = Sandbox::new();
    let photos = unposed_fox(sb.path());
    let job = sb.job(
        "unposed",
        &format!(
            "name = \"unposed\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/u\"\n",
            photos.display()
        ),
    );
    let o = sb.kiln(&["plan", job.to_str().unwrap()]);
    ok(&o);
    let text = stdout(&o);
    assert!(
        text.contains("reconstruct: the input has images but no camera poses"),
        "{text}"
    );
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().split_once(". "))
        .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map(|(_, r)| r)
        .filter_map(|r| r.split_whitespace().next())
        .collect();
    assert_eq!(
        order,
        ["reconstruct", "ingest", "train", "tile", "eval", "publish"]
    );

    let posed = sb.job(
        "posed",
        "name = \"posed\"\nkind = \"capture\"\ninput = \"dataset://capture-fox-instantngp\"\noutput = \"out/p\"\n",
    );
    let o = sb.kiln(&["plan", posed.to_str().unwrap(), "--json"]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(doc["reconstruct_reason"].is_null(), "{doc}");
    assert_eq!(doc["stages"][0]["stage"], "ingest");

    // mode = "never" on photos without poses: refused at planning, naming the field.
    let never = sb.job(
        "never",
        &format!(
            "name = \"never\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/n\"\n[reconstruct]\nmode = \"never\"\n",
            photos.display()
        ),
    );
    let o = sb.kiln(&["plan", never.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("reconstruct") && stderr(&o).contains("mode"));
}

#[test]
fn unposed_fox_photos_reconstruct_register_and_train_within_1_db_of_the_shipped_poses() {
    if !have("colmap", "help") {
        return;
    }
    let sb = Sandbox::new();
    let photos = unposed_fox(sb.path());
    let job = sb.job(
        "fox-sfm",
        &format!(
            "name = \"fox-sfm\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/sfm\"\n{CPU_SFM}{SHORT_TRAIN}",
            photos.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let sfm_job_id = job_id(&o);
    let out = sb.path().join("out/sfm");
    let report = read_json(&out.join("reconstruct/reconstruct.json"));
    let q = &report["quality"];
    assert_eq!(q["images"], 50, "{report}");
    let registered = q["registered"].as_u64().unwrap();
    assert!(
        registered >= 45,
        "only {registered}/50 registered: {report}"
    );
    let reproj = q["mean_reprojection_error_px"].as_f64().unwrap();
    assert!(
        reproj > 0.0 && reproj < 2.0,
        "reprojection error {reproj} px"
    );
    assert!(q["points"].as_u64().unwrap() > 1000, "{report}");
    assert!(
        report["colmap_version"]
            .as_str()
            .unwrap()
            .starts_with("COLMAP"),
        "{report}"
    );
    let commands = report["commands"].as_array().unwrap();
    assert!(
        commands
            .iter()
            .any(|c| c.as_str().unwrap().contains("exhaustive_matcher"))
    );
    assert!(out.join("tileset.json").is_file());

    // The binary model COLMAP wrote reads back as COLMAP's own text export of it: names,
    // intrinsics, distortion and points exactly (COLMAP 3.8 writes text with 17 significant
    // digits, which round-trips every f64), poses to a few ulps (see below).
    let images = photos.join("images");
    let capture_dir = |name: &str| {
        let d = sb.path().join(name);
        std::fs::create_dir_all(d.join("sparse/0")).unwrap();
        link_files(&images, &d.join("images"));
        d
    };
    let (bin_dir, txt_dir) = (capture_dir("bin-model"), capture_dir("txt-model"));
    for f in ["cameras.bin", "images.bin", "points3D.bin"] {
        std::fs::copy(
            out.join("reconstruct/sparse/0").join(f),
            bin_dir.join("sparse/0").join(f),
        )
        .unwrap();
    }
    let conv = Command::new("colmap")
        .args(["model_converter", "--input_path"])
        .arg(bin_dir.join("sparse/0"))
        .arg("--output_path")
        .arg(txt_dir.join("sparse/0"))
        .args(["--output_type", "TXT"])
        .env("QT_QPA_PLATFORM", "offscreen")
        .output()
        .unwrap();
    assert!(
        conv.status.success(),
        "{}",
        String::from_utf8_lossy(&conv.stderr)
    );
    let from_bin = kiln_formats::capture::read_colmap(&bin_dir).unwrap();
    let from_txt = kiln_formats::capture::read_colmap(&txt_dir).unwrap();
    assert!(from_bin.source.join("images.bin").is_file());
    assert!(from_txt.source.join("images.txt").is_file());
    assert_eq!(from_bin.frames.len(), registered as usize);
    for (b, t) in from_bin.frames.iter().zip(&from_txt.frames) {
        assert_eq!(
            (&b.name, b.intrinsics, &b.distortion),
            (&t.name, t.intrinsics, &t.distortion)
        );
        // COLMAP's text export can differ from its binary by an ulp in a few rotation entries
        // (seen once in CI: 1 ulp in 3 of 12; the cause is inside COLMAP's read/write path, not
        // Kiln's readers, which parse both exactly); more than a few ulps would be a reader bug.
        for (rb, rt) in b.world_to_camera.iter().zip(&t.world_to_camera) {
            for (x, y) in rb.iter().zip(rt) {
                assert!(
                    (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(1.0),
                    "{}: world_to_camera {:?} vs {:?}",
                    b.name,
                    b.world_to_camera,
                    t.world_to_camera
                );
            }
        }
    }
    // COLMAP keeps points in a hash map, so the two files list them in different orders.
    let sorted = |c: &kiln_formats::capture::Capture| {
        let p = c.points.as_ref().expect("points3D");
        let mut v: Vec<([u64; 3], [u8; 3])> = p
            .positions
            .iter()
            .zip(&p.colors)
            .map(|(x, c)| (x.map(f64::to_bits), *c))
            .collect();
        v.sort_unstable();
        v
    };
    let (bin_points, txt_points) = (sorted(&from_bin), sorted(&from_txt));
    assert_eq!(bin_points.len(), q["points"].as_u64().unwrap() as usize);
    assert!(
        bin_points == txt_points,
        "points differ between the .bin and .txt models"
    );

    // Issue 8's bar, on the poses themselves: COLMAP's poses agree with the shipped ones (which
    // instant-ngp's colmap2nerf made) to within a degree, pair by pair. Relative pose errors need
    // no alignment: the two captures differ by an unknown similarity transform, which cancels in
    // R_i·R_jᵀ and in the direction from camera i to camera j seen in camera i's frame. Measured
    // on four COLMAP runs of these photos (2 cores): median rotation error 0.25°, median
    // direction error 0.56°, worst pair 0.73° and 1.72°.
    let shipped = kiln_formats::capture::read_capture(&dataset("capture-fox-instantngp")).unwrap();
    let errors = relative_pose_errors(&from_bin.frames, &shipped.frames);
    assert_eq!(
        errors.len(),
        registered as usize * (registered as usize - 1) / 2
    );
    let (rotation, direction) = (
        median(errors.iter().map(|e| e.0)),
        median(errors.iter().map(|e| e.1)),
    );
    let worst = errors
        .iter()
        .fold((0.0f64, 0.0f64), |w, e| (w.0.max(e.0), w.1.max(e.1)));
    eprintln!(
        "COLMAP vs shipped poses over {} pairs: median rotation error {rotation:.2}°, median \
         direction error {direction:.2}°, worst {:.2}° / {:.2}°",
        errors.len(),
        worst.0,
        worst.1
    );
    assert!(
        rotation < 1.0 && direction < 2.0,
        "median pose errors {rotation:.2}° / {direction:.2}°"
    );
    assert!(
        worst.0 < 5.0 && worst.1 < 10.0,
        "worst pair {:.2}° / {:.2}°",
        worst.0,
        worst.1
    );

    // The same poses trained from random points, so reconstruct and ingest are reused from the
    // work directory (same job name) and only train reruns.
    let random = sb.job(
        "fox-sfm-random",
        &format!(
            "name = \"fox-sfm\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/sfm-random\"\n{CPU_SFM}{SHORT_TRAIN}init = \"random\"\n",
            photos.display()
        ),
    );
    let o = sb.kiln(&["run", random.to_str().unwrap()]);
    ok(&o);
    let printed = stdout(&o);
    let cached: Vec<&str> = printed
        .lines()
        .filter(|l| l.contains(" cached "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(cached, ["reconstruct", "ingest"], "{printed}");
    let posed = sb.job(
        "fox-posed",
        &format!(
            "name = \"fox-posed\"\nkind = \"capture\"\ninput = \"dataset://capture-fox-instantngp\"\noutput = \"out/posed\"\n{SHORT_TRAIN}"
        ),
    );
    let o = sb.kiln(&["run", posed.to_str().unwrap()]);
    ok(&o);
    let (sfm_db, sfm_random_db, posed_db) = (
        psnr(&out.join("metrics.json")),
        psnr(&sb.path().join("out/sfm-random/metrics.json")),
        psnr(&sb.path().join("out/posed/metrics.json")),
    );
    eprintln!(
        "held-out PSNR: COLMAP poses + SfM points {sfm_db:.2} dB, COLMAP poses + random init \
         {sfm_random_db:.2} dB, shipped poses (random init) {posed_db:.2} dB"
    );
    // The product path (COLMAP's poses and its points) against the shipped poses. The two
    // random-init runs are printed, not compared: at 600 steps and 135 px their PSNR moves with
    // the frame COLMAP happens to pick (same photos, poses equal to 0.25°: 20.11, 20.58, 21.24,
    // 21.51 and 21.65 dB against the shipped poses' 21.42), so a dB bar between them tested
    // COLMAP's run-to-run noise, not the poses; the pose errors above test the poses.
    assert!(
        sfm_db >= posed_db - 1.0,
        "with its SfM points: {sfm_db:.2} dB vs shipped poses {posed_db:.2} dB"
    );

    // The ledger counts COLMAP's CPU time (a child process) against the stage.
    let o = sb.kiln(&["report", &sfm_job_id, "--json"]);
    ok(&o);
    let ledger: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let stage = ledger["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "reconstruct")
        .unwrap_or_else(|| panic!("no reconstruct stage in {ledger}"));
    let (cpu, wall) = (
        stage["cpu_s"].as_f64().unwrap(),
        stage["wall_s"].as_f64().unwrap(),
    );
    // COLMAP is multi-threaded: on an idle machine cpu > wall. A fifth still holds when other
    // jobs share the machine, and a meter that missed the child's CPU time would report ~0.
    assert!(
        cpu > 0.2 * wall,
        "COLMAP CPU time missing: cpu {cpu} s, wall {wall} s"
    );
}

#[test]
fn a_video_goes_through_frame_selection_reconstruction_and_training_in_one_run() {
    if !have("colmap", "help") || !have("ffmpeg", "-version") {
        return;
    }
    let sb = Sandbox::new();
    let video = sb.path().join("fox.mp4");
    let images = dataset("capture-fox-instantngp").join("images");
    let made = Command::new("ffmpeg")
        .args([
            "-v",
            "error",
            "-framerate",
            "5",
            "-pattern_type",
            "glob",
            "-i",
        ])
        .arg(images.join("*.jpg"))
        .args([
            "-vf",
            "scale=540:-2",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
        ])
        .arg(&video)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let job = sb.job(
        "fox-video",
        &format!(
            "name = \"fox-video\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/video\"\n{CPU_SFM}max_frames = 40\n[ingest]\nmax_side = 135\n[train]\nsteps = 200\n",
            video.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let out = sb.path().join("out/video");
    let report = read_json(&out.join("reconstruct/reconstruct.json"));
    let v = &report["video"];
    assert_eq!(v["decoded"], 50, "10 s at 5 fps: {v}");
    assert_eq!(v["video"]["width"], 540);
    assert_eq!(v["video"]["height"], 960);
    // 50 frames, at most 40 kept → windows of ceil(50/40) = 2 frames → 25 frames.
    assert_eq!(v["window_frames"], 2);
    assert_eq!(v["kept"].as_array().unwrap().len(), 25);
    assert_eq!(report["matcher"], "sequential");
    let q = &report["quality"];
    assert!(q["passed"].as_bool().unwrap(), "{report}");
    assert!(out.join("tileset.json").is_file());
    assert!(
        read_json(&out.join("metrics.json"))["psnr_db"]
            .as_f64()
            .unwrap()
            > 10.0
    );
}

#[test]
fn five_photos_of_unrelated_scenes_fail_the_quality_gate_and_no_training_starts() {
    if !have("colmap", "help") {
        return;
    }
    let sb = Sandbox::new();
    let dir = sb.path().join("unrelated");
    std::fs::create_dir_all(&dir).unwrap();
    let picks = [
        dataset("capture-fox-instantngp").join("images/0001.jpg"),
        dataset("capture-maupertuis-colmap").join("colmap/images/00.jpg"),
        dataset("mesh-khronos-gltf-samples").join("DamagedHelmet/glTF/Default_albedo.jpg"),
        dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado_baseColor.png"),
        dataset("capture-maryrose-llff").join("images/IMG_9669.JPG"),
    ];
    for (i, p) in picks.iter().enumerate() {
        let ext = p.extension().unwrap().to_str().unwrap();
        std::fs::copy(p, dir.join(format!("{i}.{ext}"))).unwrap();
    }
    let job = sb.job(
        "unrelated",
        &format!(
            "name = \"unrelated\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/x\"\n{CPU_SFM}",
            dir.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let err = stderr(&o);
    for want in [
        "reconstruct quality gate",
        "of 5 images registered",
        "need ≥ 60 %",
        "min_registered_fraction",
        "No training was started",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    let work = sb.path().join("work/unrelated");
    assert!(!work.join("train").exists() && !work.join("ingest").exists());
    assert!(
        !sb.path().join("out/x").exists(),
        "nothing may be published"
    );
    // The failed stage keeps its report for inspection.
    let report = read_json(&work.join("reconstruct.partial/reconstruct.json"));
    assert_eq!(report["quality"]["passed"], false);
}

/// Per pair of frames present in both captures (matched by name): the angle in degrees between
/// their relative rotations `R_i·R_jᵀ`, and between the directions from camera i to camera j
/// in camera i's frame. Both are invariant to a similarity transform of either capture's world.
fn relative_pose_errors(
    a: &[kiln_formats::capture::Frame],
    b: &[kiln_formats::capture::Frame],
) -> Vec<(f64, f64)> {
    let pairs: Vec<_> = a
        .iter()
        .filter_map(|f| Some((f, b.iter().find(|g| g.name == f.name)?)))
        .collect();
    let mut errors = Vec::new();
    for (i, (ai, bi)) in pairs.iter().enumerate() {
        for (aj, bj) in &pairs[i + 1..] {
            let rotation =
                angle_between_rotations(relative_rotation(ai, aj), relative_rotation(bi, bj));
            let direction = angle_between(direction_in(ai, aj), direction_in(bi, bj));
            errors.push((rotation, direction));
        }
    }
    errors
}

type M3 = [[f64; 3]; 3];

fn rotation(f: &kiln_formats::capture::Frame) -> M3 {
    std::array::from_fn(|r| std::array::from_fn(|c| f.world_to_camera[r][c]))
}

/// World position of a camera: `-Rᵀ t`.
fn centre(f: &kiln_formats::capture::Frame) -> [f64; 3] {
    let (r, w) = (rotation(f), &f.world_to_camera);
    std::array::from_fn(|k| -(0..3).map(|i| r[i][k] * w[i][3]).sum::<f64>())
}

/// `R_i · R_jᵀ`.
fn relative_rotation(i: &kiln_formats::capture::Frame, j: &kiln_formats::capture::Frame) -> M3 {
    let (ri, rj) = (rotation(i), rotation(j));
    std::array::from_fn(|r| std::array::from_fn(|c| (0..3).map(|k| ri[r][k] * rj[c][k]).sum()))
}

/// The direction from camera i to camera j, in camera i's frame: `R_i (C_j − C_i)`.
fn direction_in(i: &kiln_formats::capture::Frame, j: &kiln_formats::capture::Frame) -> [f64; 3] {
    let (ci, cj, ri) = (centre(i), centre(j), rotation(i));
    std::array::from_fn(|r| (0..3).map(|k| ri[r][k] * (cj[k] - ci[k])).sum())
}

/// Rotation angle of `p · qᵀ` in degrees: `acos((trace − 1) / 2)`.
fn angle_between_rotations(p: M3, q: M3) -> f64 {
    let trace: f64 = (0..3)
        .map(|d| (0..3).map(|k| p[d][k] * q[d][k]).sum::<f64>())
        .sum();
    ((trace - 1.0) / 2.0).clamp(-1.0, 1.0).acos().to_degrees()
}

fn angle_between(u: [f64; 3], v: [f64; 3]) -> f64 {
    let dot = |a: [f64; 3], b: [f64; 3]| a.iter().zip(&b).map(|(x, y)| x * y).sum::<f64>();
    (dot(u, v) / (dot(u, u) * dot(v, v)).sqrt())
        .clamp(-1.0, 1.0)
        .acos()
        .to_degrees()
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
