//! Interop: `@playcanvas/splat-transform` (npm 3.7.0, run under Node 22 — see
//! `.ci/splat-transform/`) reads the PLY and SPZ files Kiln writes for the plush-dog splats and
//! reports the same splat count and SH degree (`--info json`: `numGaussians`, `shBands`).
//!
//! The files come from the plush-dog job (datasets/jobs/plushdog.toml): the INRIA PLY its ingest
//! stage writes, and the SPZ payload of every leaf tile (leaves hold the original splats, so
//! their counts add up to 15,105).
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
    let o = Command::new(tool)
        .arg("-q")
        .arg(file)
        .arg("null")
        .args(["--info", "json"])
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
    let v: serde_json::Value = serde_json::from_str(&out[a..=b])
        .unwrap_or_else(|e| panic!("bad JSON from splat-transform ({e}):\n{out}"));
    (
        v["numGaussians"].as_u64().expect("numGaussians"),
        v["shBands"].as_u64().expect("shBands"),
    )
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
