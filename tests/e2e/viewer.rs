//! The viewer end to end: a real job, `kiln serve` on a free port, and the job page opened in
//! headless Chromium (`.ci/browser/check_viewer.mjs`, puppeteer-core): the page loads, CesiumJS
//! loads the tileset, no console errors or failed tiles, the canvas shows more than background,
//! the job's HTML report (`kiln report --html <output>/report`) is framed beside it, and a
//! screenshot is written under `target/tmp/viewer/`.
//!
//! Needs Debian's `/usr/bin/chromium`, Node.js, and the npm packages of `.ci/browser` (CesiumJS,
//! puppeteer-core): `.ci/browser/install.sh ~/.cache/kiln-ci/browser` installs them. With `CI` set
//! a missing tool fails the test; otherwise the test prints `skipped: …` and passes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::harness::*;

/// Where the browser check's tools are.
pub(super) struct BrowserTools {
    /// `node_modules` holding `puppeteer-core` (for `NODE_PATH`).
    pub(super) node_path: PathBuf,
    /// The CesiumJS build folder (`…/cesium/Build/Cesium`).
    pub(super) cesium_dir: PathBuf,
    pub(super) chromium: PathBuf,
}

/// Find Chromium, Node.js, puppeteer-core and CesiumJS; `None` (after printing why) when one is
/// missing outside CI. In CI a missing tool is a test failure naming what to install.
pub(super) fn browser_tools() -> Option<BrowserTools> {
    let home = std::env::var("HOME").unwrap_or_default();
    let node_path: PathBuf = std::env::var_os("KILN_BROWSER_NODE_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&home).join(".cache/kiln-ci/browser/node_modules"));
    let cesium_dir: PathBuf = std::env::var_os("KILN_CESIUM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| node_path.join("cesium/Build/Cesium"));
    let chromium: PathBuf = std::env::var_os("KILN_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/chromium".into());
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut missing = Vec::new();
    if !chromium.is_file() {
        missing.push(format!(
            "Chromium at {} (apt-get install -y chromium)",
            chromium.display()
        ));
    }
    if !node_ok {
        missing.push("Node.js (`node` on PATH)".to_string());
    }
    if !node_path.join("puppeteer-core/package.json").is_file() {
        missing.push(format!(
            "puppeteer-core in {} (set KILN_BROWSER_NODE_PATH)",
            node_path.display()
        ));
    }
    if !cesium_dir.join("Cesium.js").is_file() {
        missing.push(format!(
            "CesiumJS build at {} (set KILN_CESIUM_DIR)",
            cesium_dir.display()
        ));
    }
    if missing.is_empty() {
        return Some(BrowserTools {
            node_path,
            cesium_dir,
            chromium,
        });
    }
    let msg = format!(
        "viewer browser check needs: {}; run `.ci/browser/install.sh ~/.cache/kiln-ci/browser` \
         (installs Debian's chromium and the pinned npm packages)",
        missing.join("; ")
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipped: {msg}");
    None
}

/// A running `kiln serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `kiln serve --addr 127.0.0.1:0` on the sandbox's ledger and read the bound URL from the
/// first stdout line.
fn start_server(sb: &Sandbox, tools: &BrowserTools) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--addr", "127.0.0.1:0", "--cesium"])
        .arg(&tools.cesium_dir)
        .env("KILN_HOME", sb.path())
        .env("KILN_DB", sb.path().join("ledger.sqlite"))
        .env("RUST_LOG", "warn")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start kiln serve");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let read = BufReader::new(stdout).read_line(&mut line);
    let mut server = Server {
        child,
        url: String::new(),
    };
    assert!(
        read.is_ok_and(|n| n > 0),
        "kiln serve printed nothing (did it fail to start?)"
    );
    // "serving http://127.0.0.1:PORT/ (ledger …)"
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in kiln serve's first line: {line:?}"))
        .trim_end_matches('/')
        .to_string();
    server.url = url;
    server
}

/// Run the browser check on `job_page` (`/jobs/ID[?sse=N]`); returns the summary JSON. Panics with the summary
/// when the check fails.
fn check_viewer(
    tools: &BrowserTools,
    server: &Server,
    job_page: &str,
    shot_name: &str,
) -> serde_json::Value {
    check_viewer_with(tools, server, job_page, shot_name, false)
}

/// [`check_viewer`], with the axis-fixture colour check (`KILN_AXES_CHECK=1`) when `axes`.
fn check_viewer_with(
    tools: &BrowserTools,
    server: &Server,
    job_page: &str,
    shot_name: &str,
    axes: bool,
) -> serde_json::Value {
    let (o, shot, url) = run_check(tools, server, job_page, shot_name, axes, None);
    let out = stdout(&o);
    assert!(
        o.status.success(),
        "browser check of {url} failed ({:?}):\n{out}\n{}",
        o.status,
        stderr(&o)
    );
    let summary: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("check_viewer.mjs printed no JSON ({e}):\n{out}"));
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000),
        "no screenshot at {}",
        shot.display()
    );
    eprintln!("viewer screenshot: {}", shot.display());
    summary
}

/// Run `.ci/browser/check_viewer.mjs` on `job_page`; with `compare`, against that reference PNG
/// (`KILN_COMPARE_PNG`). Returns the process output, the screenshot path and the URL.
fn run_check(
    tools: &BrowserTools,
    server: &Server,
    job_page: &str,
    shot_name: &str,
    axes: bool,
    compare: Option<&Path>,
) -> (std::process::Output, PathBuf, String) {
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("viewer");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join(shot_name);
    let _ = std::fs::remove_file(&shot);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/browser/check_viewer.mjs");
    let url = format!("{}{job_page}", server.url);
    // 120 s: the 90 s the check needs on an idle 2-core machine, plus room for a busy one.
    let o = Command::new("node")
        .arg(&script)
        .arg(&url)
        .arg(&shot)
        .arg("120")
        .env("NODE_PATH", &tools.node_path)
        .env("KILN_CHROMIUM", &tools.chromium)
        .env("KILN_AXES_CHECK", if axes { "1" } else { "0" })
        .env(
            "KILN_COMPARE_PNG",
            compare.map(Path::as_os_str).unwrap_or_default(),
        )
        .output()
        .expect("run node");
    (o, shot, url)
}

/// Kiln's own render of the first evaluated view with every leaf (τ = 0), cut from the
/// eval stage's strip of that view, saved as a PNG for the browser comparison.
fn kiln_render_of_first_view(output: &Path) -> PathBuf {
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(output.join("fidelity/fidelity.json")).expect("fidelity.json"),
    )
    .unwrap();
    let view = &report["views"][0];
    let (w, h) = (
        view["width"].as_u64().unwrap() as u32,
        view["height"].as_u64().unwrap() as u32,
    );
    let column = report["strip_columns"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c == "τ=0")
        .expect("a τ=0 column") as u32;
    let name = view["name"].as_str().unwrap();
    let stem: String = name
        .trim_end_matches(".png")
        .trim_end_matches(".jpg")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let strip = image::open(output.join("fidelity/strips").join(format!("{stem}.png")))
        .expect("the view's strip")
        .to_rgb8();
    let crop = image::imageops::crop_imm(&strip, column * (w + 2), 0, w, h).to_image();
    // Named after the sandbox too: tests of the same capture run at once and must not read
    // each other's half-written reference.
    let sandbox = output
        .ancestors()
        .nth(2)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("viewer/kiln-{sandbox}-{stem}.png"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    crop.save(&path).unwrap();
    path
}

#[test]
fn viewer_shows_avocado_mesh_tileset_without_console_errors() {
    let Some(tools) = browser_tools() else {
        return;
    };
    let sb = Sandbox::new();
    let id = run_avocado(&sb);
    // The HTML report goes where the job page looks for it, so the check also covers the page
    // with the report beside the viewer (and any console error the report itself causes).
    ok(&sb.kiln(&["report", &id, "--html", "out/avocado/report"]));
    let server = start_server(&sb, &tools);

    // The job list links the job; the job page frames the report.
    let list = http_get(&server.url, "/");
    assert!(list.contains(&format!("/jobs/{id}")), "{list}");
    let page = http_get(&server.url, &format!("/jobs/{id}"));
    assert!(
        page.contains(&format!("src=\"/jobs/{id}/files/report/index.html\"")),
        "{page}"
    );

    let s = check_viewer(&tools, &server, &format!("/jobs/{id}"), "avocado.png");
    assert!(
        s["viewer"]["contentKinds"]["model"].as_u64().unwrap_or(0) >= 1,
        "mesh tiles must load as glTF models: {s}"
    );
    assert!(
        s["viewer"]["statistics"]["numberOfTrianglesSelected"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{s}"
    );

    // At a 1-pixel screen-space error CesiumJS must refine through every LOD to the full mesh:
    // all four levels load as models without errors.
    let s = check_viewer(
        &tools,
        &server,
        &format!("/jobs/{id}?sse=1"),
        "avocado-finest.png",
    );
    assert_eq!(
        s["viewer"]["statistics"]["numberOfTilesWithContentReady"].as_u64(),
        Some(4),
        "all four LOD tiles must load when refining to the leaf: {s}"
    );
}

/// Run the fox capture at tiny settings (as tests/e2e/train.rs: the point is the tileset and the
/// viewer, not the quality) into `out/fox` of `sb`, with `extra` appended to the job file;
/// returns the job id.
fn run_tiny_fox(sb: &Sandbox, extra: &str) -> String {
    let fox = dataset("capture-fox-instantngp");
    let job = sb.job(
        "fox",
        &format!(
            "name = \"fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox\"\n\
             [ingest]\nmax_side = 64\n[train]\nsteps = 100\nseed = 1\n{extra}",
            fox.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    job_id(&o)
}

#[test]
fn viewer_shows_fox_splat_tileset_without_console_errors() {
    let Some(tools) = browser_tools() else {
        return;
    };
    let sb = Sandbox::new();
    let id = run_tiny_fox(&sb, "");
    ok(&sb.kiln(&["report", &id, "--html", "out/fox/report"]));
    let server = start_server(&sb, &tools);
    let s = check_viewer(&tools, &server, &format!("/jobs/{id}"), "fox-splats.png");
    assert!(
        s["viewer"]["contentKinds"]["gaussianSplat"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "splat tiles must load as Gaussian splat content (not plain models): {s}"
    );
    // The page opens upright at the first held-out photo's camera: CesiumJS's picture matches
    // Kiln's own render of that view.
    assert_eq!(s["viewer"]["view"], "camera", "{s}");
    let reference = kiln_render_of_first_view(&sb.path().join("out/fox"));
    // Every leaf on both sides (Kiln's τ = 0 column; CesiumJS at a tiny maximum screen-space
    // error): which level a client shows at τ = 16 depends on its canvas size (700 px here,
    // 64 px in Kiln's eval of this tiny job) and on when the leaf finishes loading, so a τ = 16
    // comparison matched or not from run to run.
    let page = format!("/jobs/{id}?camera=0&sse=0.01");
    let (o, _, _) = run_check(
        &tools,
        &server,
        &page,
        "fox-camera.png",
        false,
        Some(&reference),
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    eprintln!("viewer vs Kiln render: {}", s["compare"]);

    // A tileset turned on its side (the bug this guards against) fails the same comparison.
    let tileset_path = sb.path().join("out/fox/tileset.json");
    let mut ts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&tileset_path).unwrap()).unwrap();
    let t = ts["root"]["transform"]
        .as_array()
        .map(|m| {
            [
                m[12].as_f64().unwrap(),
                m[13].as_f64().unwrap(),
                m[14].as_f64().unwrap(),
            ]
        })
        .unwrap_or([0.0; 3]);
    // 90° about x (y → z) around the origin, then the root's own translation.
    ts["root"]["transform"] = serde_json::json!([
        1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, -1.0, 0.0, 0.0, t[0], t[1], t[2], 1.0
    ]);
    std::fs::write(&tileset_path, serde_json::to_vec(&ts).unwrap()).unwrap();
    let (o, _, _) = run_check(
        &tools,
        &server,
        &page,
        "fox-rotated.png",
        false,
        Some(&reference),
    );
    let out = stdout(&o);
    assert!(
        !o.status.success(),
        "a rotated tileset passed the comparison:\n{out}"
    );
    assert!(out.contains("compare:"), "{out}");
}

/// Tiles written with SPZ v2 payloads (`[tile] spz_version = 2`, for strict
/// `KHR_gaussian_splatting_compression_spz_2` readers) load in CesiumJS as splats, and its picture
/// from the first held-out camera matches Kiln's own render of that view.
#[test]
fn viewer_renders_spz_v2_splat_tiles_like_kiln() {
    let Some(tools) = browser_tools() else {
        return;
    };
    let sb = Sandbox::new();
    let id = run_tiny_fox(&sb, "[tile]\nspz_version = 2\n");
    let glb = std::fs::read(sb.path().join("out/fox/tiles/r.glb")).unwrap();
    let version = kiln_formats::splats::glb::splat_glb_spz_version(&glb).unwrap();
    assert_eq!(
        version,
        Some(2),
        "the tiles' SPZ payloads must be version 2"
    );
    ok(&sb.kiln(&["report", &id, "--html", "out/fox/report"]));
    let server = start_server(&sb, &tools);
    let reference = kiln_render_of_first_view(&sb.path().join("out/fox"));
    let (o, _, _) = run_check(
        &tools,
        &server,
        &format!("/jobs/{id}?camera=0&sse=0.01"),
        "fox-spz2-camera.png",
        false,
        Some(&reference),
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        s["viewer"]["contentKinds"]["gaussianSplat"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "SPZ v2 tiles must load as Gaussian splat content: {s}"
    );
    eprintln!("viewer (SPZ v2 tiles) vs Kiln render: {}", s["compare"]);
}

/// The biker splat (152,746 splats from PlayCanvas's compressed PLY), retiled, loads in CesiumJS as
/// Gaussian splat content with no failed tile or console error.
#[test]
fn viewer_shows_biker_splat_tileset_without_console_errors() {
    let Some(tools) = browser_tools() else {
        return;
    };
    let sb = Sandbox::new();
    let input = dataset("splat-playcanvas").join("biker.compressed.ply");
    let job = sb.job(
        "biker",
        &format!(
            "name = \"biker\"\nkind = \"splats\"\ninput = \"{}\"\noutput = \"out/biker\"\n",
            input.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let id = job_id(&o);
    let server = start_server(&sb, &tools);
    let s = check_viewer(&tools, &server, &format!("/jobs/{id}"), "biker-splats.png");
    assert!(
        s["viewer"]["contentKinds"]["gaussianSplat"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "splat tiles must load as Gaussian splat content: {s}"
    );
}

/// Where the axis fixture is placed: the Mary Rose museum, Portsmouth (lon, lat, ellipsoidal
/// height, heading 0).
const FIXTURE_GEOREF: &str = "-1.1088,50.8020,10";

/// Arm length (m) and half thickness (m) of the axis fixture.
const ARM_M: f32 = 1.0;
const HALF_THICK_M: f32 = 0.04;

/// The axis fixture as a mesh, in glTF axes (Y up): a red box along +X, a green box along +Y and
/// a blue box along +Z, coloured through a three-stripe base-colour texture (the mesh model has
/// one material) with every vertex of an arm on its stripe's centre.
fn axis_fixture_mesh() -> kiln_formats::mesh::Mesh {
    let mut png = Vec::new();
    let img = image::RgbImage::from_fn(96, 32, |x, _| match x / 32 {
        0 => image::Rgb([255, 0, 0]),
        1 => image::Rgb([0, 255, 0]),
        _ => image::Rgb([0, 0, 255]),
    });
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let mut mesh = kiln_formats::mesh::Mesh {
        origin_m: [0.0; 3],
        positions: Vec::new(),
        normals: Some(Vec::new()),
        uvs: Some(Vec::new()),
        uvs1: None,
        colors: None,
        indices: Vec::new(),
        triangle_materials: Vec::new(),
        materials: vec![kiln_formats::mesh::Material {
            base_color_texture: Some(kiln_formats::mesh::TextureRef {
                image: 0,
                sampler: kiln_formats::mesh::Sampler::default(),
                tex_coord: 0,
                transform: None,
            }),
            ..kiln_formats::mesh::Material::diffuse([1.0; 4])
        }],
        images: vec![kiln_formats::mesh::EmbeddedImage {
            mime: "image/png".into(),
            bytes: png,
        }],
    };
    let (t, l) = (HALF_THICK_M, ARM_M);
    // (min, max, stripe centre u) per arm; red and blue start past the green arm's footprint.
    let arms = [
        ([t, -t, -t], [l, t, t], 1.0 / 6.0),
        ([-t, 0.0, -t], [t, l, t], 0.5),
        ([-t, -t, t], [t, t, l], 5.0 / 6.0),
    ];
    for (lo, hi, u) in arms {
        // Six faces, four vertices each (flat normals), counter-clockwise seen from outside.
        for axis in 0..3 {
            for side in [0usize, 1] {
                let mut n = [0.0f32; 3];
                n[axis] = if side == 1 { 1.0 } else { -1.0 };
                let (a1, a2) = ((axis + 1) % 3, (axis + 2) % 3);
                let base = mesh.positions.len() as u32;
                for (s1, s2) in [(0, 0), (1, 0), (1, 1), (0, 1)] {
                    let mut p = [0.0f32; 3];
                    p[axis] = if side == 1 { hi[axis] } else { lo[axis] };
                    p[a1] = if s1 == 1 { hi[a1] } else { lo[a1] };
                    p[a2] = if s2 == 1 { hi[a2] } else { lo[a2] };
                    mesh.positions.push(p);
                    mesh.normals.as_mut().unwrap().push(n);
                    mesh.uvs.as_mut().unwrap().push([u, 0.5]);
                }
                let quad = if side == 1 {
                    [0, 1, 2, 0, 2, 3]
                } else {
                    [0, 2, 1, 0, 3, 2]
                };
                mesh.indices.extend(quad.iter().map(|i| base + i));
            }
        }
    }
    mesh.triangle_materials = vec![0; mesh.indices.len() / 3];
    mesh
}

/// The axis fixture as splats: 20 small opaque splats along each arm, SH degree 0 with the DC
/// term giving pure red, green and blue (colour = 0.28209479·dc + 0.5, the INRIA convention).
fn axis_fixture_splats() -> kiln_formats::splats::GaussianSplats {
    let mut s = kiln_formats::splats::GaussianSplats::default();
    let dc = |c: f32| (c - 0.5) / 0.282_094_79;
    for axis in 0..3 {
        for k in 0..20 {
            let mut p = [0.0f32; 3];
            p[axis] = if axis == 1 { 0.0 } else { 2.0 * HALF_THICK_M } + ARM_M * k as f32 / 19.0;
            s.means.extend_from_slice(&p);
            s.log_scales.extend([0.03f32.ln(); 3]);
            s.rotations.extend([1.0, 0.0, 0.0, 0.0]);
            s.logit_opacities.push(5.0);
            s.sh_coeffs
                .extend((0..3).map(|c| dc(if c == axis { 1.0 } else { 0.0 })));
        }
    }
    s
}

/// The axis fixture, tiled with a georeference as a mesh and as splats, seen from the top in
/// CesiumJS with north up: the red (+X) arm must land east (right) of the green (+Y, up) arm and
/// the blue (+Z) arm south (below) of it — glTF Y-up content in a Z-up tileset (3D Tiles 1.1
/// §glTF transforms) placed by an east-north-up frame.
#[test]
fn viewer_axis_fixture_lands_east_up_south_when_georeferenced() {
    let Some(tools) = browser_tools() else {
        return;
    };
    let sb = Sandbox::new();
    let glb = kiln_formats::mesh::write_glb(&axis_fixture_mesh()).unwrap();
    std::fs::write(sb.path().join("axes.glb"), glb).unwrap();
    kiln_formats::splats::ply::write(&sb.path().join("axes.ply"), &axis_fixture_splats()).unwrap();
    let mut ids = Vec::new();
    for (name, kind, input, extra) in [
        (
            "axes-mesh",
            "mesh",
            "axes.glb",
            "[decimate]\nratios = [1.0]\n",
        ),
        ("axes-splats", "splats", "axes.ply", ""),
    ] {
        let job = sb.job(
            name,
            &format!(
                "name = \"{name}\"\nkind = \"{kind}\"\ninput = \"{}\"\noutput = \"out/{name}\"\n{extra}",
                sb.path().join(input).display()
            ),
        );
        let o = sb.kiln(&["run", job.to_str().unwrap(), "--georef", FIXTURE_GEOREF]);
        ok(&o);
        let tileset: serde_json::Value = serde_json::from_slice(
            &std::fs::read(sb.path().join(format!("out/{name}/tileset.json"))).unwrap(),
        )
        .unwrap();
        // The root transform carries the ENU → ECEF placement: its origin is ~6,365 km from the
        // Earth's centre at this latitude (WGS84), not at the origin.
        let m = tileset["root"]["transform"]
            .as_array()
            .expect("root transform");
        let r = (12..15)
            .map(|i| m[i].as_f64().unwrap().powi(2))
            .sum::<f64>()
            .sqrt();
        assert!((6.36e6..6.37e6).contains(&r), "{name}: |origin| = {r} m");
        ids.push((name, job_id(&o)));
    }
    let server = start_server(&sb, &tools);
    for (name, id) in ids {
        let s = check_viewer_with(
            &tools,
            &server,
            &format!("/jobs/{id}?view=top"),
            &format!("{name}-top.png"),
            true,
        );
        eprintln!("{name} axes: {}", s["axes"]);
    }
}

/// GET `path` from the server with a raw HTTP/1.1 request (no HTTP client dependency needed).
fn http_get(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).expect("connect to kiln serve");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    assert!(buf.starts_with("HTTP/1.1 200"), "GET {path}: {buf}");
    buf
}
