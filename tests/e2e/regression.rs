//! One test per fixed issue, named `issue_<n>_…`, each through the real `kiln` binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::Client;

use super::api::{json, serve_with, token};
use super::harness::{Sandbox, dataset, stderr, stdout};

/// Team A's staged photo and points: the files a hostile team B points its job at.
struct TeamA {
    photo: PathBuf,
    points: PathBuf,
}

fn team_a(sb: &Sandbox) -> TeamA {
    let dir = sb.path().join("art/photos");
    std::fs::create_dir_all(&dir).unwrap();
    let photo = dir.join("0001.jpg");
    std::fs::copy(
        dataset("capture-fox-instantngp").join("images/0001.jpg"),
        &photo,
    )
    .unwrap();
    let points = dir.join("points.ply");
    std::fs::write(
        &points,
        "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
         property float z\nend_header\n0 0 0\n",
    )
    .unwrap();
    TeamA { photo, points }
}

/// Team B's capture folder `name` under `root`: three real fox photos and a transforms.json whose
/// frame 0 names `file_path` (frames 1 and 2 are `images/0002.jpg` and `images/0003.jpg`) and
/// whose top level adds `extra` (e.g. `"ply_file_path": …,`).
fn capture(root: &Path, name: &str, file_path: &str, extra: &str) -> PathBuf {
    let cap = root.join(name);
    std::fs::create_dir_all(cap.join("images")).unwrap();
    let fox = dataset("capture-fox-instantngp");
    for f in ["0002.jpg", "0003.jpg", "0004.jpg"] {
        std::fs::copy(fox.join("images").join(f), cap.join("images").join(f)).unwrap();
    }
    let m = "[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]";
    let json = format!(
        r#"{{"fl_x": 1375.52, "w": 1080, "h": 1920, {extra} "frames": [
            {{"file_path": {}, "transform_matrix": {m}}},
            {{"file_path": "images/0002.jpg", "transform_matrix": {m}}},
            {{"file_path": "images/0003.jpg", "transform_matrix": {m}}}]}}"#,
        serde_json::to_string(file_path).unwrap()
    );
    std::fs::write(cap.join("transforms.json"), json).unwrap();
    cap
}

fn capture_job(sb: &Sandbox, name: &str, input: &Path) -> PathBuf {
    sb.job(
        name,
        &format!(
            "name = \"{name}\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/{name}\"\n\
             [ingest]\nmax_side = 32\n",
            input.display()
        ),
    )
}

/// Issue 41 item 1: everything a job reads is inside what the job may read. `kiln run` on a
/// capture whose transforms.json names another team's photo by absolute path, by `../`, through
/// a symbolic link, or whose `ply_file_path` lies outside the input, and on a folder input holding
/// a link out at depth, fails naming the field (or the link) and publishes nothing; the same
/// capture with its own photo succeeds through ingest.
#[test]
fn issue_41_paths_a_capture_names_stay_inside_its_input() {
    let sb = Sandbox::new();
    let a = team_a(&sb);
    let b = sb.path().join("geo");
    let link_cap = capture(&b, "linked", "images/0001.jpg", "");
    std::os::unix::fs::symlink(&a.photo, link_cap.join("images/0001.jpg")).unwrap();
    let deep_cap = capture(&b, "deep", "images/0004.jpg", "");
    std::fs::create_dir_all(deep_cap.join("x/y")).unwrap();
    std::os::unix::fs::symlink(a.photo.parent().unwrap(), deep_cap.join("x/y/art")).unwrap();
    let ply = format!(
        r#""ply_file_path": {},"#,
        serde_json::to_string(&a.points).unwrap()
    );
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            capture(&b, "absolute", a.photo.to_str().unwrap(), ""),
            "frames[0].file_path",
        ),
        (
            capture(&b, "climbing", "../../../art/photos/0001.jpg", ""),
            "frames[0].file_path",
        ),
        (capture(&b, "ply", "images/0004.jpg", &ply), "ply_file_path"),
        // Links are refused while the folder is staged, naming the link.
        (link_cap, "images/0001.jpg"),
        (deep_cap, "x/y/art"),
    ];
    for (i, (cap, needle)) in cases.iter().enumerate() {
        let name = format!("b{i}");
        let o = sb.kiln(&["run", capture_job(&sb, &name, cap).to_str().unwrap()]);
        let err = stderr(&o);
        assert!(
            !o.status.success(),
            "{}: succeeded\n{}",
            cap.display(),
            stdout(&o)
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains(needle),
            "{}: should name `{needle}`:\n{err}",
            cap.display()
        );
        assert!(
            err.contains("leaves the input folder") || err.contains("outside the input folder"),
            "{err}"
        );
        assert!(
            !sb.path().join("out").join(&name).exists(),
            "a refused job published"
        );
    }
}

/// Issue 41 over the API (on PostgreSQL when `.ci/run` provides it): `kiln serve --tenants` cannot see inside an input at submission (the
/// input may be an object-store prefix the server never downloads), so it accepts the job and
/// the worker's ingest refuses it; the job fails with the error naming the field.
#[test]
fn issue_41_a_tenant_job_naming_another_teams_photo_fails_naming_the_field() {
    let sb = Sandbox::new();
    let a = team_a(&sb);
    let cap = capture(&sb.path().join("geo"), "cap", a.photo.to_str().unwrap(), "");
    let sqlite = sb.path().join("queue.sqlite");
    let db = super::queue::fresh_postgres().unwrap_or_else(|| sqlite.to_str().unwrap().to_string());
    let db = db.as_str();
    let geo = token(&sb, db, "geo");
    let tenants = sb.path().join("tenants.toml");
    let root = sb.path().display();
    std::fs::write(
        &tenants,
        format!("[team.geo]\ninputs = [\"{root}/geo/\"]\noutputs = [\"{root}/out/\"]\n"),
    )
    .unwrap();
    let server = serve_with(
        &sb,
        db,
        &[
            "--addr",
            "127.0.0.1:0",
            "--allow-local-paths",
            "--tenants",
            tenants.to_str().unwrap(),
        ],
    );
    let api = format!("{}/api/v1", server.base);
    let http = Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let job = format!(
        "name = \"cap\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"{root}/out/cap\"\n\
         [ingest]\nmax_side = 32\n",
        cap.display()
    );
    let (status, body) = json(
        http.post(format!("{api}/jobs"))
            .bearer_auth(&geo)
            .header("content-type", "application/toml")
            .body(job)
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "worker",
            "--drain",
            "--poll",
            "0.2",
            "--db",
            db,
            "--work-dir",
            "w",
        ])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "warn")
        .current_dir(sb.path())
        .output()
        .unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    let (_, detail) = json(
        http.get(format!("{api}/jobs/{id}"))
            .bearer_auth(&geo)
            .send()
            .unwrap(),
    );
    assert_eq!(detail["job"]["state"], "failed", "{detail}");
    let text = detail.to_string();
    assert!(
        text.contains("frames[0].file_path") && text.contains("leaves the input folder"),
        "{detail}"
    );
    assert!(!sb.path().join("out/cap").exists());
}

/// Issue 41 for meshes: an OBJ whose MTL names a texture outside the input (`../`, absolute) is
/// refused at ingest naming the statement; staging never fetched it (it skips such names).
#[test]
fn issue_41_a_mesh_texture_outside_the_input_is_refused_naming_the_statement() {
    let sb = Sandbox::new();
    let a = team_a(&sb);
    for (i, map) in [
        "../art/photos/0001.jpg".to_string(),
        a.photo.display().to_string(),
    ]
    .iter()
    .enumerate()
    {
        let dir = sb.path().join(format!("mesh{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("m.mtl"), format!("newmtl a\nmap_Kd {map}\n")).unwrap();
        std::fs::write(
            dir.join("m.obj"),
            "mtllib m.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl a\n\
             f 1/1 2/2 3/3\n",
        )
        .unwrap();
        let job = sb.job(
            &format!("m{i}"),
            &format!(
                "name = \"m{i}\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/m{i}\"\n",
                dir.join("m.obj").display()
            ),
        );
        let o = sb.kiln(&["run", job.to_str().unwrap()]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{map}: succeeded\n{}", stdout(&o));
        assert!(
            err.contains("map_Kd") && err.contains("leaves the input folder"),
            "{err}"
        );
        assert!(!sb.path().join(format!("out/m{i}")).exists());
    }
}
