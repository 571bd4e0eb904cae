//! Capture layouts as people hand them over: `kiln plan` names the files the poses and the points
//! come from for each layout, and a Blender-style split capture with a sparse nerfstudio point
//! cloud trains on its train split, is evaluated on its test split and tops its points up.

use std::path::{Path, PathBuf};

use super::harness::*;

/// `kiln plan` on a capture job for `input`; its stdout.
fn plan(sb: &Sandbox, name: &str, input: &Path) -> String {
    let job = sb.job(
        name,
        &format!(
            "name = \"{name}\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/{name}\"\n",
            input.display()
        ),
    );
    let o = sb.kiln(&["plan", job.to_str().unwrap()]);
    ok(&o);
    stdout(&o)
}

/// The line of `text` that starts with `prefix`.
fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
}

/// A Blender-layout copy of the first `n` fox frames (images hard-linked or copied): frames 0–5 in
/// `transforms_train.json` (with `ply_file_path` naming a 17-point `sparse_pc.ply`, and a 7th
/// frame whose image is missing), 6 in
/// `transforms_val.json`, 7 in `transforms_test.json`.
fn split_fox(dir: &Path) -> PathBuf {
    let fox = dataset("capture-fox-instantngp");
    let cap = dir.join("split-fox");
    std::fs::create_dir_all(&cap).unwrap();
    link_files(&fox.join("images"), &cap.join("images"));
    let text = std::fs::read_to_string(fox.join("transforms.json")).unwrap();
    let mut root: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut frames: Vec<serde_json::Value> = root["frames"].as_array().unwrap().clone();
    frames.retain(|f| {
        let p = f["file_path"].as_str().unwrap().trim_start_matches("./");
        fox.join(p).is_file()
    });
    frames.sort_by_key(|f| f["file_path"].as_str().unwrap().to_string());
    for (name, range) in [("train", 0..6), ("val", 6..7), ("test", 7..8)] {
        root["frames"] = serde_json::Value::Array(frames[range].to_vec());
        if name == "train" {
            root["ply_file_path"] = "sparse_pc.ply".into();
            // One listed photo is missing: skipped with a warning naming this file.
            let mut missing = frames[0].clone();
            missing["file_path"] = "images/missing.jpg".into();
            root["frames"].as_array_mut().unwrap().push(missing);
        } else {
            root.as_object_mut().unwrap().remove("ply_file_path");
        }
        std::fs::write(
            cap.join(format!("transforms_{name}.json")),
            serde_json::to_vec_pretty(&root).unwrap(),
        )
        .unwrap();
    }
    let mut ply = String::from(
        "ply\nformat ascii 1.0\nelement vertex 17\nproperty float x\nproperty float y\n\
         property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n\
         end_header\n",
    );
    for i in 0..17 {
        ply.push_str(&format!(
            "{} 0.1 -0.05 200 120 40\n",
            0.02 * f64::from(i) - 0.16
        ));
    }
    std::fs::write(cap.join("sparse_pc.ply"), ply).unwrap();
    cap
}

#[test]
fn plan_names_the_pose_and_point_files_of_each_capture_layout() {
    let sb = Sandbox::new();
    let fox = dataset("capture-fox-instantngp");
    let text = plan(&sb, "fox", &fox);
    assert_eq!(
        line(&text, "poses:"),
        format!(
            "poses: {} (50 frames)",
            fox.join("transforms.json").display()
        )
    );
    assert!(line(&text, "points:").starts_with("points: none"), "{text}");

    // A COLMAP text model; its points3D.txt header says "Number of points: 1039".
    let colmap = dataset("capture-maupertuis-colmap");
    let text = plan(&sb, "colmap", &colmap);
    let model = colmap.join("colmap/reconstruction");
    assert_eq!(
        line(&text, "poses:"),
        format!("poses: {} (4 frames)", model.join("images.txt").display())
    );
    assert_eq!(
        line(&text, "points:"),
        format!(
            "points: {} (1039 points)",
            model.join("points3D.txt").display()
        )
    );

    let llff = dataset("capture-maryrose-llff");
    let text = plan(&sb, "llff", &llff);
    assert!(
        line(&text, "poses:").contains("poses_bounds.npy ("),
        "{text}"
    );
    assert!(line(&text, "points:").starts_with("points: none"), "{text}");

    let split = split_fox(sb.path());
    let text = plan(&sb, "split", &split);
    let f = |n: &str| split.join(n).display().to_string();
    assert_eq!(
        line(&text, "poses:"),
        format!(
            "poses: {}, {}, {} (1 test, 6 train, 1 val frames: trained on train, evaluated on test)",
            f("transforms_train.json"),
            f("transforms_val.json"),
            f("transforms_test.json")
        )
    );
    assert_eq!(
        line(&text, "points:"),
        format!("points: {} (17 points)", f("sparse_pc.ply"))
    );
    // A capture that cannot be read: the plan is printed, the reason named, and the command fails.
    let broken = sb.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    link_files(&fox.join("images"), &broken.join("images"));
    let mut root: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fox.join("transforms.json")).unwrap()).unwrap();
    root["ply_file_path"] = "gone.ply".into();
    std::fs::write(broken.join("transforms.json"), root.to_string()).unwrap();
    let job = sb.job(
        "broken",
        &format!(
            "name = \"broken\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/b\"\n",
            broken.display()
        ),
    );
    let o = sb.kiln(&["plan", job.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let gone = broken.join("gone.ply").display().to_string();
    assert!(
        line(&stdout(&o), "capture:").contains(&gone),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains(&gone) && stderr(&o).contains("ply_file_path"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_split_capture_trains_on_train_evaluates_on_test_and_tops_up_sparse_points() {
    let sb = Sandbox::new();
    let split = split_fox(sb.path());
    let job = sb.job(
        "split",
        &format!(
            "name = \"split\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/split\"\n\
             [ingest]\nmax_side = 32\n[train]\nsteps = 30\nseed = 1\n",
            split.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains("only 17 SfM points") && err.contains("adding 10000 random points"),
        "the top-up must be announced:\n{err}"
    );
    // The warning names the user's file, not the job's work-directory copy of it.
    let skipped = format!(
        "{}: skipping 1 of 7 frames (image file missing): missing.jpg",
        split.join("transforms_train.json").display()
    );
    assert!(err.contains(&skipped), "{err}");
    assert!(!err.contains("/input/transforms_train.json"), "{err}");
    let out = sb.path().join("out/split");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["train_views"], 6, "{metrics}");
    assert_eq!(metrics["test_views"], 1, "{metrics}");
    assert_eq!(metrics["eval_on_train_views"], false);
    assert_eq!(metrics["init"]["sfm_points"], 17);
    assert_eq!(metrics["init"]["random_points"], 10_000);
    // The one held-out view is the test file's frame.
    let evaluated: Vec<&str> = metrics["views"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let test_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(split.join("transforms_test.json")).unwrap())
            .unwrap();
    let test_file = test_json["frames"][0]["file_path"].as_str().unwrap();
    let test_name = test_file
        .trim_start_matches("./")
        .trim_start_matches("images/");
    assert_eq!(evaluated, [test_name]);
}

/// Issue 44, rule 1: a capture job whose input is the capture's `transforms.json` (plain path or
/// `file://`) stages the whole capture: `kiln plan` reads the same 50 frames for the file as for
/// the folder, and `kiln run` gets past ingest with every photo, naming no work-folder copy.
#[test]
fn a_job_pointed_at_transforms_json_stages_the_capture_around_it() {
    let sb = Sandbox::new();
    let fox = dataset("capture-fox-instantngp");
    let json = fox.join("transforms.json");
    let want = format!("poses: {} (50 frames)", json.display());
    for (name, input) in [
        ("file", json.display().to_string()),
        ("url", format!("file://{}", json.display())),
    ] {
        let text = plan(&sb, name, Path::new(&input));
        assert_eq!(line(&text, "poses:"), want, "{input}");
    }
    let job = sb.job(
        "fox-json",
        &format!(
            "name = \"fox-json\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox-json\"\n\
             [ingest]\nmax_side = 32\n[train]\nsteps = 30\nseed = 1\n",
            json.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let err = stderr(&o);
    assert!(!err.contains("/input/"), "{err}");
    let out = sb.path().join("out/fox-json");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    let views = metrics["train_views"].as_u64().unwrap() + metrics["test_views"].as_u64().unwrap();
    assert_eq!(views, 50, "{metrics}");
}

/// Issue 44 (trial F10): a capture whose `transforms.json` names its photos by absolute paths
/// into the capture's own folder (as some exporters write them) trains from the job's copy of
/// those photos; an absolute path elsewhere stays refused (issue 41, `regression.rs`).
#[test]
fn absolute_photo_paths_into_the_users_own_capture_read_its_copy() {
    let sb = Sandbox::new();
    let fox = dataset("capture-fox-instantngp");
    let cap = sb.path().join("abs-fox");
    link_files(&fox.join("images"), &cap.join("images"));
    let text = std::fs::read_to_string(fox.join("transforms.json")).unwrap();
    let mut root: serde_json::Value = serde_json::from_str(&text).unwrap();
    let frames: Vec<serde_json::Value> = root["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| fox.join(f["file_path"].as_str().unwrap()).is_file())
        .take(8)
        .map(|f| {
            let mut f = f.clone();
            let rel = f["file_path"].as_str().unwrap().to_string();
            f["file_path"] = cap.join(rel).display().to_string().into();
            f
        })
        .collect();
    root["frames"] = serde_json::Value::Array(frames);
    std::fs::write(
        cap.join("transforms.json"),
        serde_json::to_vec_pretty(&root).unwrap(),
    )
    .unwrap();
    let job = sb.job(
        "abs-fox",
        &format!(
            "name = \"abs-fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/abs-fox\"\n\
             [ingest]\nmax_side = 32\n[train]\nsteps = 10\nseed = 1\n",
            cap.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sb.path().join("out/abs-fox/metrics.json")).unwrap())
            .unwrap();
    let views = metrics["train_views"].as_u64().unwrap() + metrics["test_views"].as_u64().unwrap();
    assert_eq!(views, 8, "{metrics}");
}
