//! Interop: `@playcanvas/splat-transform` (npm 3.7.0, run under Node 22 — see
//! `.ci/splat-transform/`) reads the PLY and SPZ files Kiln writes for the plush-dog splats and
//! reports the same splat count and SH degree (`--info json`: `numGaussians`, `shBands`).
//!
//! The files come from the plush-dog job (datasets/jobs/plushdog.toml): the INRIA PLY its ingest
//! stage writes, and the SPZ payload of every leaf tile (leaves hold the original splats, so
//! their counts add up to 15,105).
//!
//! The streamed SOG test runs the same job with `[tile] streamed_sog = true` and has
//! splat-transform read `sog/lod-meta.json` (its streamed-SOG reader checks the index against
//! every chunk file) with Kiln's per-level counts and the input's extent.
//!
//! The tool is found through `$KILN_SPLAT_TRANSFORM` (a runner script written by
//! `.ci/splat-transform/install.sh`, exported by `.ci/run`). Without it the test is skipped
//! locally, with the reason; under CI (`CI` set) it fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::check::run_plushdog;
use super::harness::{Sandbox, files_with_ext};

/// Splats in the plush-dog PLY (datasets/splat-plushdog-smartdatascan).
const PLUSHDOG_SPLATS: u64 = 15_105;
const PLUSHDOG_SH_DEGREE: u64 = 3;

/// The splat-transform runner, or `None` (skip) when it is not installed outside CI.
pub fn splat_transform() -> Option<PathBuf> {
    match std::env::var_os("KILN_SPLAT_TRANSFORM") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "KILN_SPLAT_TRANSFORM={} does not exist; run .ci/splat-transform/install.sh DIR",
                p.display()
            );
            Some(p)
        }
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "KILN_SPLAT_TRANSFORM is not set under CI; .ci/run installs splat-transform \
                 (.ci/splat-transform/install.sh) and exports it"
            );
            eprintln!(
                "SKIP splat-transform interop: KILN_SPLAT_TRANSFORM is not set (run \
                 .ci/splat-transform/install.sh DIR and export KILN_SPLAT_TRANSFORM=DIR/splat-transform)"
            );
            None
        }
    }
}

/// `splat-transform FILE null --info json` → (numGaussians, shBands).
pub fn info(tool: &Path, file: &Path) -> (u64, u64) {
    let v = report(tool, file, "--info");
    (
        v["numGaussians"].as_u64().expect("numGaussians"),
        v["shBands"].as_u64().expect("shBands"),
    )
}

/// `splat-transform -q FILE null FLAG json` (`--info` or `--stats`): the JSON it prints.
fn report(tool: &Path, file: &Path, flag: &str) -> serde_json::Value {
    let o = Command::new(tool)
        .arg("-q")
        .arg(file)
        .arg("null")
        .args([flag, "json"])
        .output()
        .expect("run splat-transform");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "splat-transform failed on {}:\n{out}\n{}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    // The JSON object is the only `{ … }` block on stdout.
    let (Some(a), Some(b)) = (out.find('{'), out.rfind('}')) else {
        panic!(
            "no JSON in splat-transform output for {}:\n{out}",
            file.display()
        );
    };
    serde_json::from_str(&out[a..=b])
        .unwrap_or_else(|e| panic!("bad JSON from splat-transform ({e}):\n{out}"))
}

/// The SPZ payload and the POSITION count of a Kiln splat tile GLB.
fn spz_of_tile(glb: &[u8]) -> (Vec<u8>, u64) {
    let json_len = u32::from_le_bytes(glb[12..16].try_into().unwrap()) as usize;
    let json: serde_json::Value = serde_json::from_slice(&glb[20..20 + json_len]).unwrap();
    let bin = &glb[20 + json_len + 8..];
    let prim = &json["meshes"][0]["primitives"][0];
    let view = prim["extensions"]["KHR_gaussian_splatting"]["extensions"]
        ["KHR_gaussian_splatting_compression_spz_2"]["bufferView"]
        .as_u64()
        .expect("SPZ bufferView") as usize;
    let bv = &json["bufferViews"][view];
    let off = bv["byteOffset"].as_u64().unwrap_or(0) as usize;
    let len = bv["byteLength"].as_u64().unwrap() as usize;
    let pos = prim["attributes"]["POSITION"].as_u64().unwrap() as usize;
    let count = json["accessors"][pos]["count"].as_u64().unwrap();
    (bin[off..off + len].to_vec(), count)
}

fn leaf_uris(tile: &serde_json::Value, out: &mut Vec<String>) {
    match tile["children"].as_array() {
        Some(c) if !c.is_empty() => c.iter().for_each(|t| leaf_uris(t, out)),
        _ => out.push(tile["content"]["uri"].as_str().unwrap().to_string()),
    }
}

#[test]
fn splat_transform_reads_kiln_ply_and_spz_with_the_same_count_and_sh_degree() {
    let Some(tool) = splat_transform() else {
        return;
    };
    let sb = Sandbox::new();
    let out = run_plushdog(&sb);

    // PLY: the INRIA PLY Kiln's ingest stage wrote (in the sandbox's work root).
    let ply = files_with_ext(sb.path(), "ply")
        .into_iter()
        .find(|p| p.parent().is_some_and(|d| d.ends_with("ingest")))
        .unwrap_or_else(|| panic!("no ingest/*.ply under {}", sb.path().display()));
    assert_eq!(
        info(&tool, &ply),
        (PLUSHDOG_SPLATS, PLUSHDOG_SH_DEGREE),
        "{}",
        ply.display()
    );

    // SPZ: each leaf tile's payload, as a .spz file.
    let ts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    let mut leaves = Vec::new();
    leaf_uris(&ts["root"], &mut leaves);
    let spz_dir = sb.path().join("spz");
    std::fs::create_dir_all(&spz_dir).unwrap();
    let mut total = 0;
    for (i, uri) in leaves.iter().enumerate() {
        let (spz, count) = spz_of_tile(&std::fs::read(out.join(uri)).unwrap());
        let file = spz_dir.join(format!("leaf{i}.spz"));
        std::fs::write(&file, spz).unwrap();
        let (n, sh) = info(&tool, &file);
        assert_eq!(
            n, count,
            "{uri}: splat-transform count vs the tile's accessor count"
        );
        assert_eq!(sh, PLUSHDOG_SH_DEGREE, "{uri}: SH degree");
        total += n;
    }
    assert_eq!(
        total, PLUSHDOG_SPLATS,
        "leaf splats must add up to the input"
    );
}

/// (min, max) of column `name` in LOD `lod` of a `--stats json` report.
fn column_range(stats: &serde_json::Value, lod: usize, name: &str) -> (f64, f64) {
    let t = &stats["stats"][lod];
    let i = t["columns"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("no column {name} in {t}"));
    (
        t["data"]["min"][i].as_f64().unwrap(),
        t["data"]["max"][i].as_f64().unwrap(),
    )
}

/// Splat counts of Kiln's LOD levels, finest first, from the tileset: level l is the cut at
/// depth D − l (tiles at that depth plus shallower leaves), counted from each tile GLB's
/// accessor count.
fn tileset_level_counts(out: &Path) -> Vec<u64> {
    fn walk(out: &Path, t: &serde_json::Value, depth: usize, acc: &mut Vec<(usize, bool, u64)>) {
        let uri = t["content"]["uri"].as_str().unwrap();
        let (_, n) = spz_of_tile(&std::fs::read(out.join(uri)).unwrap());
        let children = t["children"].as_array().map_or(&[][..], |c| &c[..]);
        acc.push((depth, children.is_empty(), n));
        for c in children {
            walk(out, c, depth + 1, acc);
        }
    }
    let ts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    let mut tiles = Vec::new();
    walk(out, &ts["root"], 0, &mut tiles);
    let deepest = tiles.iter().map(|t| t.0).max().unwrap();
    (0..=deepest)
        .map(|l| {
            tiles
                .iter()
                .filter(|(d, leaf, _)| *d == deepest - l || (*leaf && *d < deepest - l))
                .map(|t| t.2)
                .sum()
        })
        .collect()
}

/// Kiln's streamed SOG of plush-dog (a splats job, 4,096 splats per leaf tile,
/// `streamed_sog = true`): splat-transform reads `lod-meta.json` with one LOD per tileset level
/// and the same splat count per level, SH degree 3; its LOD 0 spans the input PLY's extent turned
/// into the SOG frame; every level lies inside the index's root bound; and the job's manifest
/// publishes the index.
#[test]
fn splat_transform_reads_kiln_streamed_sog_with_the_tileset_s_levels() {
    let Some(tool) = splat_transform() else {
        return;
    };
    let sb = Sandbox::new();
    let toml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/jobs/plushdog.toml"),
    )
    .expect("read datasets/jobs/plushdog.toml")
        + "streamed_sog = true\n";
    let job = sb.job("plushdog", &toml);
    super::harness::ok(&sb.kiln(&["run", job.to_str().unwrap()]));
    let out = sb.path().join("out/plushdog");
    let meta = out.join("sog/lod-meta.json");
    assert!(meta.is_file(), "no {}", meta.display());
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"sog/lod-meta.json\""), "{manifest}");

    let want = tileset_level_counts(&out);
    assert_eq!(want[0], PLUSHDOG_SPLATS);
    let info = report(&tool, &meta, "--info");
    assert_eq!(info["format"], "lod");
    assert_eq!(
        info["numLods"].as_u64().unwrap(),
        want.len() as u64,
        "{info}"
    );
    let got: Vec<u64> = serde_json::from_value(info["lodCounts"].clone()).unwrap();
    assert_eq!(
        got, want,
        "splat-transform's lodCounts vs the tileset's levels"
    );
    assert_eq!(info["shBands"].as_u64(), Some(PLUSHDOG_SH_DEGREE));

    // The dataset's PLY (COLMAP y-down) → tile content (up_axis "-y": (x, −y, −z)) → SOG (half
    // turn about Z: (−x, −y, z)), so SOG (x, y, z) = PLY (−x, y, −z). 1 mm covers SOG's 16-bit
    // positions on a 0.4 m scene.
    let ply =
        super::harness::dataset("splat-plushdog-smartdatascan").join("point_cloud_29999_clean.ply");
    let ply_stats = report(&tool, &ply, "--stats");
    let sog_stats = report(&tool, &meta, "--stats");
    for (axis, sign) in [("x", -1.0), ("y", 1.0), ("z", -1.0)] {
        let (lo, hi) = column_range(&ply_stats, 0, axis);
        let want = if sign > 0.0 { (lo, hi) } else { (-hi, -lo) };
        let got = column_range(&sog_stats, 0, axis);
        assert!(
            (got.0 - want.0).abs() < 1e-3 && (got.1 - want.1).abs() < 1e-3,
            "LOD 0 {axis}: {got:?}, want {want:?}"
        );
    }
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    let bound = &index["tree"]["bound"];
    for lod in 0..want.len() {
        for (a, axis) in ["x", "y", "z"].into_iter().enumerate() {
            let (lo, hi) = column_range(&sog_stats, lod, axis);
            let (blo, bhi) = (
                bound["min"][a].as_f64().unwrap(),
                bound["max"][a].as_f64().unwrap(),
            );
            assert!(
                lo >= blo - 1e-4 && hi <= bhi + 1e-4,
                "LOD {lod} {axis} [{lo}, {hi}] outside the root bound [{blo}, {bhi}]"
            );
        }
    }

    // Bytes per input splat of the whole streamed output (every level), for the record.
    let bytes: u64 = files_with_ext(&out.join("sog"), "webp")
        .iter()
        .chain(&files_with_ext(&out.join("sog"), "json"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    eprintln!(
        "plush-dog streamed SOG: levels {want:?}, {bytes} bytes, {:.2} B per input splat",
        bytes as f64 / PLUSHDOG_SPLATS as f64
    );
}
