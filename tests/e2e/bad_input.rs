//! Bad input: each case exits non-zero with a message naming the file, never panics, and publishes
//! nothing (no manifest, no output folder).

use super::harness::*;

fn assert_clean_failure(sb: &Sandbox, o: &std::process::Output, needle: &str, out: &str) {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected failure, got success:\n{}",
        stdout(o)
    );
    assert!(
        !err.contains("panicked"),
        "panic instead of an error:\n{err}"
    );
    assert!(err.contains(needle), "error should name `{needle}`:\n{err}");
    assert!(
        !sb.path().join(out).join("manifest.json").exists(),
        "a failed job must not publish"
    );
}

#[test]
fn missing_input_file_is_a_clear_error() {
    let sb = Sandbox::new();
    let job = sb.job(
        "m",
        "name = \"m\"\nkind = \"mesh\"\ninput = \"/no/such/model.glb\"\noutput = \"out/m\"\n",
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    assert_clean_failure(&sb, &o, "/no/such/model.glb", "out/m");
}

#[test]
fn missing_job_file_is_a_clear_error() {
    let sb = Sandbox::new();
    let o = sb.kiln(&["run", "nope.toml"]);
    assert_clean_failure(&sb, &o, "nope.toml", "out");
}

/// Issue 44, rule 3: an unreadable photo among many is skipped with a warning naming the user's
/// own file (not the job's work-folder copy), and the job goes on with the rest.
#[test]
fn a_corrupt_jpeg_is_skipped_with_a_warning_naming_it() {
    let sb = Sandbox::new();
    let cap = sb.path().join("cap");
    std::fs::create_dir_all(cap.join("images")).unwrap();
    let fox = dataset("capture-fox-instantngp");
    std::fs::copy(fox.join("transforms.json"), cap.join("transforms.json")).unwrap();
    for e in std::fs::read_dir(fox.join("images")).unwrap().flatten() {
        std::fs::copy(e.path(), cap.join("images").join(e.file_name())).unwrap();
    }
    std::fs::write(
        cap.join("images/0001.jpg"),
        b"\xff\xd8\xff\xe0 this is not a jpeg",
    )
    .unwrap();
    let job = sb.job("c", &format!("name = \"c\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/c\"\n[ingest]\nmax_side = 32\n[train]\nsteps = 30\nseed = 1\n", cap.display()));
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains(
            "skipping 1 frame(s) whose image cannot be read or is not its camera's shape: 0001.jpg"
        ),
        "{err}"
    );
    // The user's own file, not the job's work-directory copy of it.
    let user_file = cap.join("images/0001.jpg").display().to_string();
    assert!(err.contains(&user_file), "{err}");
    assert!(!err.contains("/input/images/0001.jpg"), "{err}");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sb.path().join("out/c/metrics.json")).unwrap())
            .unwrap();
    let views = metrics["train_views"].as_u64().unwrap() + metrics["test_views"].as_u64().unwrap();
    assert_eq!(views, 49, "{metrics}");
}

#[test]
fn transforms_without_frames_names_the_field() {
    let sb = Sandbox::new();
    let cap = sb.path().join("cap");
    std::fs::create_dir_all(&cap).unwrap();
    std::fs::write(
        cap.join("transforms.json"),
        br#"{"fl_x": 100, "fl_y": 100, "w": 64, "h": 64}"#,
    )
    .unwrap();
    let job = sb.job(
        "c",
        &format!(
            "name = \"c\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/c\"\n",
            cap.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    assert_clean_failure(&sb, &o, "frames", "out/c");
    let user_file = cap.join("transforms.json").display().to_string();
    assert!(stderr(&o).contains(&user_file), "{}", stderr(&o));
}

#[test]
fn glb_with_out_of_range_index_is_rejected() {
    let sb = Sandbox::new();
    let dir = dataset("mesh-gltf-edgecases-assimp").join("IndexOutOfRange");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "glb" || e == "gltf"))
        .expect("IndexOutOfRange sample");
    let job = sb.job(
        "m",
        &format!(
            "name = \"m\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/m\"\n",
            file.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    assert_clean_failure(&sb, &o, "index", "out/m");
}

#[test]
fn unknown_job_key_is_rejected_before_any_work() {
    let sb = Sandbox::new();
    let job = sb.job("m", "name = \"m\"\nkind = \"mesh\"\ninput = \"x.glb\"\noutput = \"out/m\"\n[decimate]\nratio = [0.5]\n");
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    assert_clean_failure(&sb, &o, "ratio", "out/m");
}
