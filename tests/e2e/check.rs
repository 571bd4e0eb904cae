//! `kiln check` end to end: it passes on the tilesets Kiln writes (the Avocado mesh HLOD and the
//! plush-dog splat tileset) and on the CesiumGS sample tilesets, and fails with the right message
//! on hand-broken copies (non-monotone geometricError, content outside its box, a missing content
//! file, an undeclared extension, an SPZ v4 payload, tiles over budget).

use std::path::{Path, PathBuf};
use std::process::Output;

use super::harness::{Sandbox, dataset, ok, run_avocado, stderr, stdout};

/// Run the plush-dog splats job (datasets/jobs/plushdog.toml, copied into the sandbox so its
/// relative output lands there); returns the published tileset folder.
pub fn run_plushdog(sb: &Sandbox) -> PathBuf {
    let toml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/jobs/plushdog.toml"),
    )
    .expect("read datasets/jobs/plushdog.toml");
    let job = sb.job("plushdog", &toml);
    ok(&sb.kiln(&["run", job.to_str().unwrap()]));
    let out = sb.path().join("out/plushdog");
    assert!(out.join("tileset.json").is_file(), "no tileset in {out:?}");
    out
}

fn check(sb: &Sandbox, tileset: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["check", tileset.to_str().unwrap()];
    args.extend_from_slice(extra);
    sb.kiln(&args)
}

/// Assert `kiln check` passed with no error and no bounds/extension/SPZ warning (Kiln's own output
/// must be exact; a leftover warning there is a bug too).
fn assert_clean(o: &Output) {
    ok(o);
    let out = stdout(o);
    for line in out.lines() {
        assert!(
            !line.starts_with("error") && !line.starts_with("warning"),
            "kiln check reported:\n{out}"
        );
    }
    assert!(out.contains(": 0 errors, 0 warnings"), "{out}");
}

/// Assert `kiln check` failed (exit 1) with an error line containing `needle`.
fn assert_fails_with(o: &Output, needle: &str) {
    let out = stdout(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected failure\n{out}\n{}",
        stderr(o)
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("error") && l.contains(needle)),
        "no error line containing {needle:?}:\n{out}"
    );
    assert!(stderr(o).contains("kiln check failed"), "{}", stderr(o));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &serde_json::Value) {
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// A copy of the tileset folder `src` named `name`, with `edit` applied to its tileset.json.
fn broken_copy(
    sb: &Sandbox,
    src: &Path,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value, &Path),
) -> PathBuf {
    let dir = sb.path().join("broken").join(name);
    copy_dir(src, &dir);
    let mut ts = read_json(&dir.join("tileset.json"));
    edit(&mut ts, &dir);
    write_json(&dir.join("tileset.json"), &ts);
    dir.join("tileset.json")
}

/// The first leaf tile (depth-first) of a tileset JSON.
fn first_leaf(tile: &mut serde_json::Value) -> &mut serde_json::Value {
    if tile["children"].as_array().is_some_and(|c| !c.is_empty()) {
        first_leaf(&mut tile["children"][0])
    } else {
        tile
    }
}

/// Rewrite a Kiln splat GLB so its SPZ payload is `spz` (Kiln's tiles hold only the SPZ bytes in
/// their BIN chunk).
fn replace_spz(glb: &[u8], spz: &[u8]) -> Vec<u8> {
    let json_len = u32::from_le_bytes(glb[12..16].try_into().unwrap()) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&glb[20..20 + json_len]).unwrap();
    let mut bin = spz.to_vec();
    while !bin.len().is_multiple_of(4) {
        bin.push(0);
    }
    json["buffers"][0]["byteLength"] = bin.len().into();
    let view = json["meshes"][0]["primitives"][0]["extensions"]["KHR_gaussian_splatting"]
        ["extensions"]["KHR_gaussian_splatting_compression_spz_2"]["bufferView"]
        .as_u64()
        .unwrap() as usize;
    json["bufferViews"][view]["byteOffset"] = 0.into();
    json["bufferViews"][view]["byteLength"] = spz.len().into();
    let mut j = serde_json::to_vec(&json).unwrap();
    while !j.len().is_multiple_of(4) {
        j.push(b' ');
    }
    let mut out = b"glTF".to_vec();
    out.extend(2u32.to_le_bytes());
    out.extend(((12 + 8 + j.len() + 8 + bin.len()) as u32).to_le_bytes());
    out.extend((j.len() as u32).to_le_bytes());
    out.extend(0x4E4F_534Au32.to_le_bytes());
    out.extend(j);
    out.extend((bin.len() as u32).to_le_bytes());
    out.extend(0x004E_4942u32.to_le_bytes());
    out.extend(bin);
    out
}

#[test]
fn kiln_check_passes_on_the_avocado_mesh_tileset_and_enforces_the_triangle_budget() {
    let sb = Sandbox::new();
    run_avocado(&sb);
    let ts = sb.path().join("out/avocado/tileset.json");
    assert_clean(&check(&sb, &ts, &[]));
    // The same tileset over a tiny triangle budget.
    assert_fails_with(
        &check(&sb, &ts, &["--max-triangles-per-tile", "10"]),
        "over the budget of 10",
    );
}

#[test]
fn kiln_check_passes_on_the_plushdog_splat_tileset_and_fails_on_broken_copies() {
    let sb = Sandbox::new();
    let out = run_plushdog(&sb);
    let ts = out.join("tileset.json");
    assert_clean(&check(&sb, &ts, &[]));

    // --json: the same verdict, machine-readable.
    let o = check(&sb, &ts, &["--json"]);
    ok(&o);
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(report["splats"].as_u64().unwrap() >= 15_105, "{report}");
    assert!(
        report["findings"].as_array().unwrap().is_empty(),
        "{report}"
    );

    // Budget: the leaves hold up to 4096 splats.
    assert_fails_with(
        &check(&sb, &ts, &["--max-splats-per-tile", "10"]),
        "over the budget of 10",
    );

    // Non-monotone geometricError: a child above its parent.
    let p = broken_copy(&sb, &out, "error", |ts, _| {
        let parent = ts["root"]["geometricError"].as_f64().unwrap();
        ts["root"]["children"][0]["geometricError"] = (parent * 2.0 + 1.0).into();
    });
    assert_fails_with(&check(&sb, &p, &[]), "is greater than its parent's");

    // Tileset geometricError below the root's.
    let p = broken_copy(&sb, &out, "top-error", |ts, _| {
        ts["geometricError"] = 0.0.into();
    });
    assert_fails_with(&check(&sb, &p, &[]), "is less than the root's");

    // Content outside its box: shrink a leaf's box to a hundredth.
    let p = broken_copy(&sb, &out, "box", |ts, _| {
        let leaf = first_leaf(&mut ts["root"]);
        let b = leaf["boundingVolume"]["box"].as_array_mut().unwrap();
        for v in &mut b[3..12] {
            *v = (v.as_f64().unwrap() / 100.0).into();
        }
    });
    assert_fails_with(&check(&sb, &p, &[]), "splat means lie up to");

    // A missing content file.
    let p = broken_copy(&sb, &out, "missing", |ts, dir| {
        let uri = first_leaf(&mut ts["root"])["content"]["uri"]
            .as_str()
            .unwrap()
            .to_string();
        std::fs::remove_file(dir.join(uri)).unwrap();
    });
    assert_fails_with(&check(&sb, &p, &[]), "content file cannot be read");

    // An undeclared extension: CesiumJS would load the splat GLBs as plain models.
    let p = broken_copy(&sb, &out, "undeclared", |ts, _| {
        let cg = &mut ts["extensions"]["3DTILES_content_gltf"];
        for list in ["extensionsUsed", "extensionsRequired"] {
            cg[list]
                .as_array_mut()
                .unwrap()
                .retain(|e| e != "KHR_gaussian_splatting");
        }
    });
    assert_fails_with(
        &check(&sb, &p, &[]),
        "the glTF uses KHR_gaussian_splatting but the tileset's extensions.3DTILES_content_gltf.extensionsUsed does not list it",
    );

    // An SPZ v4 payload (ZSTD streams; CesiumJS 1.145 cannot decode it).
    let p = broken_copy(&sb, &out, "spz-v4", |ts, dir| {
        let uri = first_leaf(&mut ts["root"])["content"]["uri"]
            .as_str()
            .unwrap()
            .to_string();
        let glb = std::fs::read(dir.join(&uri)).unwrap();
        let splats = kiln_formats::splats::glb::decode(&glb).unwrap().splats;
        let v4 = kiln_formats::splats::spz::encode(
            &splats,
            &kiln_formats::splats::spz::SpzOptions {
                version: kiln_formats::splats::spz::SpzVersion::V4,
                ..Default::default()
            },
        )
        .unwrap();
        std::fs::write(dir.join(&uri), replace_spz(&glb, &v4)).unwrap();
    });
    assert_fails_with(&check(&sb, &p, &[]), "SPZ version 4");
}

/// The CesiumGS samples (tiles-cesium-3d-tiles-samples) that are complete pass: no errors.
#[test]
fn kiln_check_passes_on_the_cesium_sample_tilesets() {
    let sb = Sandbox::new();
    let root = dataset("tiles-cesium-3d-tiles-samples");
    let mut tilesets: Vec<PathBuf> = std::fs::read_dir(root.join("1.1/BoundingBoxTests"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("tileset.json"))
        .filter(|p| p.is_file())
        .collect();
    tilesets.sort();
    assert_eq!(tilesets.len(), 6, "{tilesets:?}");
    tilesets.push(root.join("1.1/MultipleContents/tileset.json"));
    tilesets.push(root.join("1.1/SparseImplicitQuadtree/tileset.json"));
    for ts in &tilesets {
        let o = check(&sb, ts, &[]);
        ok(&o);
        assert!(stdout(&o).contains(": 0 errors"), "{ts:?}:\n{}", stdout(&o));
    }
    // BoundingBoxTests are exact: no warnings either.
    for ts in &tilesets[..6] {
        assert_clean(&check(&sb, ts, &[]));
    }
}

/// The 1.0 dragon sample lacks `dragon_high.b3dm` (see the dataset's PROVENANCE.md): a natural
/// missing-content case.
#[test]
fn kiln_check_fails_on_the_dragon_sample_missing_its_high_lod() {
    let sb = Sandbox::new();
    let ts =
        dataset("tiles-cesium-3d-tiles-samples").join("1.0/TilesetWithDiscreteLOD/tileset.json");
    let o = check(&sb, &ts, &[]);
    assert_fails_with(&o, "dragon_high.b3dm: content file cannot be read");
    assert!(
        stdout(&o).contains("error    root.children[0].children[0]  dragon_high.b3dm"),
        "{}",
        stdout(&o)
    );
}

/// The biker splat (PlayCanvas, 152,746 splats) retiled from both of its published files — the
/// compressed PLY and the SPZ v4 (stored in the SPZ spec's frame: `up_axis = "-y"` brings it
/// back) — gives tilesets that pass `kiln check` and gltf-validator, with every splat in exactly
/// one leaf.
#[test]
fn biker_splats_from_compressed_ply_and_spz_v4_tile_cleanly() {
    let sb = Sandbox::new();
    let dir = dataset("splat-playcanvas");
    for (name, file, extra) in [
        ("biker-cply", "biker.compressed.ply", ""),
        ("biker-spz", "biker.spz", "[ingest]\nup_axis = \"-y\"\n"),
    ] {
        let job = sb.job(
            name,
            &format!(
                "name = \"{name}\"\nkind = \"splats\"\ninput = \"{}\"\noutput = \"out/{name}\"\n{extra}",
                dir.join(file).display()
            ),
        );
        let o = sb.kiln(&["run", job.to_str().unwrap()]);
        ok(&o);
        assert!(stdout(&o).contains("\"splats\":152746"), "{}", stdout(&o));
        let ts = sb.path().join(format!("out/{name}/tileset.json"));
        let c = check(&sb, &ts, &["--json"]);
        ok(&c);
        let report: serde_json::Value = serde_json::from_str(&stdout(&c)).unwrap();
        assert!(
            report["findings"].as_array().unwrap().is_empty(),
            "{report}"
        );
        // Leaves hold the originals; parents add merged splats on top.
        assert!(report["splats"].as_u64().unwrap() > 152_746, "{report}");
        super::harness::validate_glbs(&super::harness::files_with_ext(
            &sb.path().join(format!("out/{name}/tiles")),
            "glb",
        ));
    }
}
