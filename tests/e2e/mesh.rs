//! Mesh jobs end to end: glTF/GLB → LOD chain → 3D Tiles, published with a manifest; rerun resumes
//! from cache.

use super::harness::*;

fn mesh_job(sb: &Sandbox, name: &str, input: &str) -> std::path::PathBuf {
    sb.job(
        name,
        &format!(
            "name = \"{name}\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"out/{name}\"\n"
        ),
    )
}

#[test]
fn avocado_mesh_job_publishes_a_valid_replace_tileset_and_ledger() {
    let sb = Sandbox::new();
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    let job = mesh_job(&sb, "avocado", gltf.to_str().unwrap());
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let out = sb.path().join("out/avocado");
    let tileset: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    assert_eq!(tileset["asset"]["version"], "1.1");
    // geometricError never increases from the tileset down to the leaf, and the leaf is 0.
    let mut ge = tileset["geometricError"].as_f64().unwrap();
    let mut tile = &tileset["root"];
    let mut depth = 0;
    loop {
        let g = tile["geometricError"].as_f64().unwrap();
        assert!(g <= ge, "geometricError increases: {g} > {ge}");
        ge = g;
        depth += 1;
        match tile["children"].as_array().and_then(|c| c.first()) {
            Some(c) => {
                assert_eq!(tile["refine"].as_str().unwrap_or("REPLACE"), "REPLACE");
                tile = c;
            }
            None => break,
        }
    }
    assert_eq!(ge, 0.0, "leaf geometricError must be 0");
    assert_eq!(depth, 4, "one tile per LOD level (ratios 1, 1/2, 1/4, 1/8)");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    for f in manifest["files"].as_array().unwrap() {
        let p = out.join(f["path"].as_str().unwrap());
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len() as u64, f["bytes"].as_u64().unwrap());
        assert_eq!(
            blake3::hash(&bytes).to_hex().to_string(),
            f["blake3"].as_str().unwrap()
        );
    }
    validate_glbs(&files_with_ext(&out, "glb"));

    let id = job_id(&o);
    let r = sb.kiln(&["report", &id, "--json"]);
    ok(&r);
    let rep: serde_json::Value = serde_json::from_str(&stdout(&r)).unwrap();
    let stages: Vec<_> = rep["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stages, ["ingest", "decimate", "tile", "publish"]);
    for s in rep["stages"].as_array().unwrap() {
        assert_eq!(s["device"], "cpu");
        assert_eq!(s["gpu_s"], 0.0);
        assert!(s["wall_s"].as_f64().unwrap() > 0.0);
    }
    assert!(
        rep["stages"][0]["bytes_read"].as_i64().unwrap() > 3_000_000,
        "ingest reads the textures too"
    );
    assert!(rep["totals"]["bytes_written"].as_i64().unwrap() > 0);
    // The tile stage scores what a client loads (its tile GLBs rendered against lod_0, one row a
    // level): leaves like the source (53.4 dB measured), the 84-triangle root far below them.
    let delivered = &rep["stages"][2]["summary"]["delivered"];
    let levels = delivered["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 4, "{delivered}");
    let leaves = delivered["leaves_psnr_db"].as_f64().unwrap();
    let root = delivered["root_psnr_db"].as_f64().unwrap();
    assert!(
        leaves >= 45.0 && (10.0..leaves - 10.0).contains(&root),
        "{delivered}"
    );
    assert_eq!(levels[3]["psnr_db"].as_f64(), Some(leaves));

    // A rerun of the same job reuses every finished stage.
    let o2 = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o2);
    let id2 = job_id(&o2);
    let r2: serde_json::Value =
        serde_json::from_str(&stdout(&sb.kiln(&["report", &id2, "--json"]))).unwrap();
    let states: Vec<_> = r2["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_string())
        .collect();
    // publish too: the output already holds this result (its manifest carries the same key).
    assert_eq!(states, ["cached", "cached", "cached", "cached"]);
}

#[test]
fn carbon_sphere_glb_job_produces_four_lods_with_growing_error() {
    let sb = Sandbox::new();
    let glb = dataset("mesh-playcanvas-glb").join("carbon-sphere.glb");
    // The chain is opt-in: the default writes lod_0 only.
    let job = sb.job(
        "sphere",
        &format!(
            "name = \"sphere\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/sphere\"\n\
             [decimate]\nratios = [1.0, 0.5, 0.25, 0.125]\n",
            glb.display()
        ),
    );
    ok(&sb.kiln(&["run", job.to_str().unwrap()]));
    let lods: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sb.path().join("out/sphere/lods/lods.json")).unwrap(),
    )
    .unwrap();
    let lods = lods.as_array().expect("lods.json is an array of levels");
    assert_eq!(lods.len(), 4);
    let tris: Vec<u64> = lods
        .iter()
        .map(|l| l["triangles"].as_u64().unwrap())
        .collect();
    let errs: Vec<f64> = lods
        .iter()
        .map(|l| l["error_m"].as_f64().unwrap())
        .collect();
    assert_eq!(errs[0], 0.0);
    for i in 1..4 {
        assert!(tris[i] < tris[i - 1], "triangles must drop: {tris:?}");
        assert!(errs[i] >= errs[i - 1], "error must not drop: {errs:?}");
    }
    validate_glbs(&files_with_ext(&sb.path().join("out/sphere"), "glb"));
}

/// A repository fixture under `tests/fixtures/mesh/`.
fn mesh_fixture(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mesh")
        .join(rel)
}

/// The JSON chunk of a GLB (glTF 2.0 §4.4: 12-byte header, then chunk length, type, data).
fn glb_json(path: &std::path::Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[0..4], b"glTF", "{}", path.display());
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    assert_eq!(&bytes[16..20], b"JSON");
    serde_json::from_slice(&bytes[20..20 + len]).unwrap()
}

/// The content URIs of the tiles without children (the full-detail leaves).
fn leaf_uris(tile: &serde_json::Value, out: &mut Vec<String>) {
    match tile["children"].as_array() {
        Some(children) if !children.is_empty() => {
            for c in children {
                leaf_uris(c, out);
            }
        }
        _ => out.push(tile["content"]["uri"].as_str().unwrap().to_string()),
    }
}

/// An OBJ + MTL given as the `.obj` file (the job fetches the MTL, in a subfolder, and the PNG it
/// names) or as its folder: it tiles, and the leaves hold all 7 triangles (2 quads + a pentagon,
/// by hand) with the texture.
#[test]
fn obj_with_mtl_and_texture_tiles_with_every_triangle_and_the_texture() {
    let sb = Sandbox::new();
    let obj = mesh_fixture("obj_textured/quads.obj");
    for (name, input) in [
        ("quads", obj.clone()),
        ("folder", obj.parent().unwrap().into()),
    ] {
        let job = mesh_job(&sb, name, input.to_str().unwrap());
        ok(&sb.kiln(&["run", job.to_str().unwrap()]));
        check_quads_tileset(&sb.path().join("out").join(name));
    }
}

fn check_quads_tileset(out: &std::path::Path) {
    let tileset: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    let mut leaves = Vec::new();
    leaf_uris(&tileset["root"], &mut leaves);
    let mut triangles = 0;
    let mut textured = 0;
    for uri in &leaves {
        let glb = out.join(uri);
        let json = glb_json(&glb);
        for prim in json["meshes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["primitives"].as_array().unwrap())
        {
            let idx = prim["indices"].as_u64().unwrap() as usize;
            triangles += json["accessors"][idx]["count"].as_u64().unwrap() / 3;
        }
        for image in json["images"].as_array().into_iter().flatten() {
            let rel = image["uri"]
                .as_str()
                .expect("tile images are referenced by uri");
            let file = glb.parent().unwrap().join(rel);
            assert_eq!(
                std::fs::read(&file).unwrap(),
                std::fs::read(mesh_fixture("obj_textured/materials/checker.png")).unwrap(),
                "{}",
                file.display()
            );
            textured += 1;
        }
    }
    assert_eq!(triangles, 7, "leaves {leaves:?}");
    assert!(textured > 0, "no leaf references the map_Kd texture");
    validate_glbs(&files_with_ext(out, "glb"));
}

/// A photogrammetry-style export: Spot (5,856 triangles) cut into two OBJ blocks by face order,
/// each in its own subfolder with its own MTL (ContextCapture's `Tile_*/Tile_*.obj` layout). The
/// job's `input` is the folder: one tileset whose leaves hold every triangle of both blocks and
/// both materials.
#[test]
fn a_folder_of_obj_blocks_tiles_as_one_asset_with_every_triangle_and_material() {
    let sb = Sandbox::new();
    let source =
        std::fs::read_to_string(dataset("mesh-common-3d-test-models").join("spot.obj")).unwrap();
    let (mut header, mut faces) = (String::new(), Vec::new());
    for line in source.lines() {
        if line.starts_with("f ") {
            faces.push(line);
        } else if !line.starts_with("mtllib") && !line.starts_with("usemtl") {
            header.push_str(line);
            header.push('\n');
        }
    }
    assert_eq!(faces.len(), 5856);
    let export = sb.path().join("export");
    let half = faces.len() / 2;
    for (block, range, kd) in [
        ("Tile_+000_+000", 0..half, "0.9 0.2 0.2"),
        ("Tile_+000_+001", half..faces.len(), "0.2 0.2 0.9"),
    ] {
        let dir = export.join(block);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{block}.mtl")),
            format!("newmtl {block}\nKd {kd}\n"),
        )
        .unwrap();
        let obj = format!(
            "mtllib {block}.mtl\n{header}usemtl {block}\n{}\n",
            faces[range].join("\n")
        );
        std::fs::write(dir.join(format!("{block}.obj")), obj).unwrap();
    }
    let job = mesh_job(&sb, "blocks", export.to_str().unwrap());
    ok(&sb.kiln(&["run", job.to_str().unwrap()]));
    let out = sb.path().join("out/blocks");
    let tileset: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    let mut leaves = Vec::new();
    leaf_uris(&tileset["root"], &mut leaves);
    let (mut triangles, mut colours) = (0, std::collections::BTreeSet::new());
    for uri in &leaves {
        let json = glb_json(&out.join(uri));
        for prim in json["meshes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["primitives"].as_array().unwrap())
        {
            let idx = prim["indices"].as_u64().unwrap() as usize;
            triangles += json["accessors"][idx]["count"].as_u64().unwrap() / 3;
            let m = &json["materials"][prim["material"].as_u64().unwrap() as usize];
            colours.insert(m["pbrMetallicRoughness"]["baseColorFactor"].to_string());
        }
    }
    assert_eq!(triangles, 5856, "leaves {leaves:?}");
    assert_eq!(colours.len(), 2, "both blocks' materials: {colours:?}");
    validate_glbs(&files_with_ext(&out, "glb"));
}

/// Two missing textures: the job succeeds, and ONE warning names both files — on stderr, in
/// `kiln run`'s closing lines, `kiln report` (text and `--json`), the job page and the published
/// `manifest.json` (issue 44 rule 5); under `strict = true` the same job fails before tiling.
#[test]
fn gltf_with_two_missing_textures_tiles_with_one_warning_naming_both() {
    let sb = Sandbox::new();
    let gltf = mesh_fixture("missing_textures/two_missing.gltf");
    let job = mesh_job(&sb, "missing", gltf.to_str().unwrap());
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let err = stderr(&o);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("texture file(s) missing"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    let work_copy = sb.path().join("work").display().to_string();
    let names_both = |w: &str| {
        w.contains("textures/albedo missing.png")
            && w.contains("textures/bumpy_albedo.jpg")
            && w.contains(gltf.to_str().unwrap())
            && !w.contains(&work_copy)
    };
    assert!(names_both(warnings[0]), "{}", warnings[0]);
    assert!(sb.path().join("out/missing/tileset.json").exists());

    // `kiln run`'s own closing lines.
    let out = stdout(&o);
    assert!(out.contains("warnings ("), "{out}");
    let printed = out.lines().find(|l| l.contains("texture file(s) missing"));
    assert!(printed.is_some_and(|l| l.trim_start().starts_with("ingest") && names_both(l)));

    // The manifest a team reads from the output.
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sb.path().join("out/missing/manifest.json")).unwrap(),
    )
    .unwrap();
    let listed: Vec<&serde_json::Value> = manifest["warnings"]
        .as_array()
        .expect("manifest warnings")
        .iter()
        .filter(|w| {
            w["message"]
                .as_str()
                .unwrap()
                .contains("texture file(s) missing")
        })
        .collect();
    assert_eq!(listed.len(), 1, "{manifest}");
    assert_eq!(listed[0]["stage"], "ingest");
    assert!(names_both(listed[0]["message"].as_str().unwrap()));

    // `kiln report`, text and JSON, and the job page.
    let id = job_id(&o);
    let text = stdout(&sb.kiln(&["report", &id]));
    assert!(
        text.contains("warnings (") && text.contains("bumpy_albedo.jpg"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&sb.kiln(&["report", &id, "--json"]))).unwrap();
    assert_eq!(json["warnings"], manifest["warnings"]);
    let page = std::fs::read_to_string(sb.path().join("out/missing/report/index.html")).unwrap();
    assert!(page.contains("<h2>Warnings (") && page.contains("bumpy_albedo.jpg"));

    // `strict = true`: the warning is an error, and nothing past ingest runs.
    let strict = sb.job(
        "missing-strict",
        &format!(
            "name = \"missing-strict\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/strict\"\nstrict = true\n",
            gltf.display()
        ),
    );
    let o = sb.kiln(&["run", strict.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("strict") && err.contains("warning(s)") && err.contains("bumpy_albedo.jpg"),
        "{err}"
    );
    assert!(!sb.path().join("out/strict/tileset.json").exists());
}

/// The hand-made three-material fixture (`tests/fixtures/mesh/multi_material`, see its generator)
/// through a whole mesh job (ingest → decimate → tile → publish): every published leaf draws the
/// three materials with their modes and maps, and every GLB validates.
#[test]
fn multi_material_gltf_job_publishes_every_material_in_every_leaf() {
    let sb = Sandbox::new();
    let gltf = mesh_fixture("multi_material/multi_material.gltf");
    let job = mesh_job(&sb, "multi", gltf.to_str().unwrap());
    ok(&sb.kiln(&["run", job.to_str().unwrap()]));
    let out = sb.path().join("out/multi");
    let tileset: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    let mut leaves = Vec::new();
    leaf_uris(&tileset["root"], &mut leaves);
    for uri in &leaves {
        let json = glb_json(&out.join(uri));
        let materials = json["materials"].as_array().unwrap();
        let by_name = |n: &str| materials.iter().find(|m| m["name"] == n).cloned();
        let textured = by_name("textured").expect("textured");
        assert!(textured["pbrMetallicRoughness"]["baseColorTexture"].is_object());
        assert_eq!(textured["normalTexture"]["scale"], 0.5);
        let emissive = by_name("emissive").expect("emissive");
        assert_eq!(
            emissive["extensions"]["KHR_materials_emissive_strength"]["emissiveStrength"],
            4.0
        );
        let glass = by_name("glass").expect("glass");
        assert_eq!(glass["alphaMode"], "BLEND");
        assert_eq!(glass["doubleSided"], true);
        for image in json["images"].as_array().unwrap() {
            let file = out
                .join(uri)
                .parent()
                .unwrap()
                .join(image["uri"].as_str().unwrap());
            assert!(file.is_file(), "{}", file.display());
        }
    }
    validate_glbs(&files_with_ext(&out, "glb"));
    // The tileset declares the material extensions the tiles use (3DTILES_content_gltf), so
    // Kiln's own check has nothing to warn about (it warned once per tile and extension).
    let check = sb.kiln(&["check", out.to_str().unwrap()]);
    ok(&check);
    assert!(
        stdout(&check).contains("0 errors, 0 warnings"),
        "{}",
        stdout(&check)
    );
}

/// Spot (5,856 triangles) with its faces split in file order into three plain-colour materials,
/// which scatters each material over the surface in small patches (a new-user trial's input):
/// at 1,024 triangles per tile the root cannot be simplified to budget without removing every
/// patch, and the job once failed with "the tile has no indices". It must tile, every tile must
/// draw triangles, and the leaves must keep all three materials.
#[test]
fn a_mesh_of_small_material_patches_tiles_with_every_tile_drawing_triangles() {
    let sb = Sandbox::new();
    let source =
        std::fs::read_to_string(dataset("mesh-common-3d-test-models").join("spot.obj")).unwrap();
    let dir = sb.path().join("patches");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("patches.mtl"),
        "newmtl A\nKd 0.9 0.85 0.8\n\nnewmtl B\nKd 0.2 0.5 0.9\n\nnewmtl C\nKd 0.1 0.1 0.1\n",
    )
    .unwrap();
    let mut obj = String::from("mtllib patches.mtl\n");
    let mut faces = 0;
    for line in source.lines() {
        if line.starts_with("f ") {
            if let Some(m) = [(0, "A"), (2000, "B"), (4000, "C")]
                .iter()
                .find(|(at, _)| *at == faces)
            {
                obj.push_str(&format!("usemtl {}\n", m.1));
            }
            faces += 1;
        }
        obj.push_str(line);
        obj.push('\n');
    }
    let input = dir.join("patches.obj");
    std::fs::write(&input, obj).unwrap();
    let job = sb.job(
        "patches",
        &format!(
            "name = \"patches\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/patches\"\n\
             [mesh_tile]\nmax_triangles_per_tile = 1024\n",
            input.display()
        ),
    );
    ok(&sb.kiln(&["run", job.to_str().unwrap()]));
    let out = sb.path().join("out/patches");
    let mut leaf_materials = std::collections::BTreeSet::new();
    let tileset: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
    let mut leaves = Vec::new();
    leaf_uris(&tileset["root"], &mut leaves);
    for glb in files_with_ext(&out.join("tiles"), "glb") {
        let json = glb_json(&glb);
        let prims: Vec<&serde_json::Value> = json["meshes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["primitives"].as_array().unwrap())
            .collect();
        let triangles: u64 = prims
            .iter()
            .map(|p| {
                json["accessors"][p["indices"].as_u64().unwrap() as usize]["count"]
                    .as_u64()
                    .unwrap()
                    / 3
            })
            .sum();
        assert!(triangles > 0, "{} draws nothing", glb.display());
        let name = format!("tiles/{}", glb.file_name().unwrap().to_str().unwrap());
        if leaves.contains(&name) {
            for p in prims {
                let m = p["material"].as_u64().unwrap() as usize;
                leaf_materials.insert(json["materials"][m]["name"].as_str().unwrap().to_string());
            }
        }
    }
    assert_eq!(
        leaf_materials.into_iter().collect::<Vec<_>>(),
        ["A", "B", "C"],
        "leaves {leaves:?}"
    );
}
