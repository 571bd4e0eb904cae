//! Tests of the mesh HLOD tiler on the Avocado (textured, 682 triangles) and carbon-sphere
//! (215,579 triangles) samples: no cracks, budgets, monotone errors, content inside boxes,
//! textures written once, Khronos validation.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::encode::{DecodedTile, decode_tile};
use super::*;
use crate::stages::decimate::tests::khronos_validate;
use kiln_formats::tiles::tileset::Tileset;

fn dataset(rel: &str) -> PathBuf {
    let root = std::env::var_os("KILN_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
    let p = root.join(rel);
    assert!(
        p.exists(),
        "dataset file {} missing; set KILN_DATASETS or put shared/datasets next to the checkout",
        p.display()
    );
    p
}

fn avocado() -> Mesh {
    read_gltf(&dataset(
        "mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf",
    ))
    .unwrap()
}

fn carbon_sphere() -> Mesh {
    read_gltf(&dataset("mesh-playcanvas-glb/carbon-sphere.glb")).unwrap()
}

/// One tile as written: its tileset entry, tree node and decoded content.
struct Written<'a> {
    tile: &'a Tile,
    node: &'a HlodNode,
    decoded: DecodedTile,
    /// Index of the parent in the flattened list.
    parent: Option<usize>,
}

fn flatten<'a>(
    tile: &'a Tile,
    node: &'a HlodNode,
    out_dir: &Path,
    lattice: Lattice,
    parent: Option<usize>,
    out: &mut Vec<Written<'a>>,
) {
    let uri = &tile.content.as_ref().unwrap().uri;
    let bytes = std::fs::read(out_dir.join(uri)).unwrap();
    out.push(Written {
        tile,
        node,
        decoded: decode_tile(&bytes, lattice),
        parent,
    });
    let me = out.len() - 1;
    assert_eq!(tile.children.len(), node.children.len());
    for (t, n) in tile.children.iter().zip(&node.children) {
        flatten(t, n, out_dir, lattice, Some(me), out);
    }
}

type Edge = ([i64; 3], [i64; 3]);

fn edge(a: [i64; 3], b: [i64; 3]) -> Option<Edge> {
    match a.cmp(&b) {
        std::cmp::Ordering::Less => Some((a, b)),
        std::cmp::Ordering::Greater => Some((b, a)),
        std::cmp::Ordering::Equal => None,
    }
}

/// Edges (keyed by lattice points) of triangles given as lattice-point triples, with use counts.
fn edge_counts(triangles: impl Iterator<Item = [[i64; 3]; 3]>) -> HashMap<Edge, u32> {
    let mut counts = HashMap::new();
    for t in triangles {
        for (a, b) in [(t[0], t[1]), (t[1], t[2]), (t[2], t[0])] {
            if let Some(e) = edge(a, b) {
                *counts.entry(e).or_insert(0) += 1;
            }
        }
    }
    counts
}

fn decoded_triangles(d: &DecodedTile) -> impl Iterator<Item = [[i64; 3]; 3]> + '_ {
    d.indices
        .chunks_exact(3)
        .map(|t| [0, 1, 2].map(|k| d.points[t[k] as usize]))
}

/// Original (full-resolution) triangles of every leaf below `node`, as lattice-point triples.
fn cell_triangles(node: &HlodNode, welded: &Mesh, lattice: Lattice, out: &mut Vec<[[i64; 3]; 3]>) {
    if node.children.is_empty() {
        out.extend(
            node.indices
                .chunks_exact(3)
                .map(|t| [0, 1, 2].map(|k| lattice.point(welded.positions[t[k] as usize]))),
        );
    }
    for c in &node.children {
        cell_triangles(c, welded, lattice, out);
    }
}

/// Everything the issue asks of a mesh HLOD, checked on the files as a client decodes them.
/// Returns the flattened tiles' per-level (tiles, triangles, bytes) for the report.
fn check_hlod(
    mesh: &Mesh,
    params: &MeshTileParams,
    parent_slack: f64,
    name: &str,
) -> MeshTileReport {
    let out = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let (report, welded, lattice, tree) = build_and_write(mesh, params, out.path()).unwrap();
    eprintln!(
        "{name}: tile stage {:.2} s, lattice step {:e} m, {} tiles, {} levels, {} content bytes \
         ({} texture)",
        t0.elapsed().as_secs_f64(),
        lattice.step_m,
        report.report.tiles,
        report.report.levels,
        report.report.content_bytes,
        report.texture_bytes
    );
    for (i, l) in report.levels.iter().enumerate() {
        eprintln!(
            "{name}: level {i}: {} tiles, {} triangles, {} bytes",
            l.tiles, l.triangles, l.bytes
        );
    }
    let tileset: Tileset =
        serde_json::from_slice(&std::fs::read(&report.report.tileset_path).unwrap()).unwrap();
    assert_eq!(tileset.asset.version, "1.1");
    assert_eq!(tileset.root.refine, Some(Refine::Replace));
    let mut chain = vec![tileset.geometric_error];
    let mut t = &tileset.root;
    loop {
        chain.push(t.geometric_error);
        match t.children.first() {
            Some(c) => t = c,
            None => break,
        }
    }
    eprintln!("{name}: geometricError tileset, root, …, leaf (m): {chain:?}");
    let mut tiles = Vec::new();
    flatten(&tileset.root, &tree, out.path(), lattice, None, &mut tiles);
    assert_eq!(tiles.len(), report.report.tiles);

    // (2) Budgets; leaves partition the welded mesh.
    let mut leaf_triangles = 0;
    for w in &tiles {
        let f = w.decoded.indices.len() / 3;
        assert_eq!(f, w.node.triangle_count());
        // Leaves always fit; parents fit up to `parent_slack` (a parent whose locked border and
        // attribute seams stop the simplifier stays over, see `hlod::build_hlod`).
        let limit = if w.node.children.is_empty() {
            params.max_triangles_per_tile
        } else {
            (params.max_triangles_per_tile as f64 * parent_slack) as usize
        };
        if f > params.max_triangles_per_tile {
            eprintln!(
                "{name}: parent {} over budget: {f} triangles",
                w.tile.content.as_ref().unwrap().uri
            );
        }
        assert!(
            f <= limit,
            "{name}: tile {} has {f} triangles > {limit} (budget {})",
            w.tile.content.as_ref().unwrap().uri,
            params.max_triangles_per_tile
        );
        assert!(f > 0);
        assert_eq!(w.decoded.has_normals, welded.normals.is_some());
        assert_eq!(w.decoded.has_uvs, welded.uvs.is_some());
        if w.node.children.is_empty() {
            leaf_triangles += f;
        }
    }
    assert_eq!(leaf_triangles, welded.triangle_count());

    // (3) geometricError: leaves 0, parents ≥ children, tileset ≥ root.
    assert!(tileset.geometric_error >= tileset.root.geometric_error);
    assert!(tileset.geometric_error > 0.0);
    for w in &tiles {
        let g = w.tile.geometric_error;
        assert!(g.is_finite() && g >= 0.0);
        if w.node.children.is_empty() {
            assert_eq!(g, 0.0, "{name}: leaf with error {g}");
        } else {
            assert!(g > 0.0 || w.node.error_m == 0.0);
        }
        if let Some(p) = w.parent {
            assert!(
                tiles[p].tile.geometric_error >= g,
                "{name}: parent error {} < child error {g}",
                tiles[p].tile.geometric_error
            );
        }
    }

    // (4) Decoded content inside its own box and every ancestor's (Z-up tile frame).
    for w in &tiles {
        let mut boxes = vec![w.tile.bounding_volume.box_.unwrap()];
        let mut up = w.parent;
        while let Some(p) = up {
            boxes.push(tiles[p].tile.bounding_volume.box_.unwrap());
            up = tiles[p].parent;
        }
        for p in &w.decoded.positions_m {
            let q = to_z_up(*p);
            for b in &boxes {
                for k in 0..3 {
                    let half = b[3 + 4 * k];
                    assert!(
                        (q[k] - b[k]).abs() <= half * (1.0 + 1e-12) + 1e-12,
                        "{name}: vertex {q:?} outside box {b:?} on axis {k}"
                    );
                }
            }
        }
    }

    // (1) Cracks. Every tile keeps its cell's outer border edge for edge (lattice-keyed), so any
    // two tiles drawn side by side, at any levels, meet on identical lattice points.
    // A cell's border: its edges used once inside the cell but also by a triangle outside it
    // (the mesh's own open edges are shared with no tile and may be simplified).
    let mut all = Vec::new();
    cell_triangles(&tree, &welded, lattice, &mut all);
    let full_edges = edge_counts(all.into_iter());
    let mut cell_borders: Vec<HashSet<Edge>> = Vec::new();
    for w in &tiles {
        let mut cell = Vec::new();
        cell_triangles(w.node, &welded, lattice, &mut cell);
        let border: HashSet<Edge> = edge_counts(cell.into_iter())
            .into_iter()
            .filter(|&(e, n)| n == 1 && full_edges[&e] > 1)
            .map(|(e, _)| e)
            .collect();
        let content = edge_counts(decoded_triangles(&w.decoded));
        for e in &border {
            assert!(
                content.contains_key(e),
                "{name}: tile {} lost cell-border edge {e:?}",
                w.tile.content.as_ref().unwrap().uri
            );
        }
        cell_borders.push(border);
    }
    // Sibling / neighbour leaves: their shared border edges are in both files, same lattice points.
    let leaves: Vec<usize> = (0..tiles.len())
        .filter(|&i| tiles[i].node.children.is_empty())
        .collect();
    let mut shared_pairs = 0;
    for (ai, &a) in leaves.iter().enumerate() {
        let ea = edge_counts(decoded_triangles(&tiles[a].decoded));
        for &b in &leaves[ai + 1..] {
            let shared: Vec<&Edge> = cell_borders[a].intersection(&cell_borders[b]).collect();
            if shared.is_empty() {
                continue;
            }
            shared_pairs += 1;
            let eb = edge_counts(decoded_triangles(&tiles[b].decoded));
            for e in shared {
                assert!(
                    ea.contains_key(e) && eb.contains_key(e),
                    "{name}: crack at {e:?}"
                );
            }
        }
    }
    if leaves.len() > 1 {
        assert!(shared_pairs > 0, "{name}: leaves share no border");
    }
    // Parents' border vertices ⊆ union of their children's border vertices (cell borders, as
    // decoded: each child kept its border, checked above).
    for (i, w) in tiles.iter().enumerate() {
        if w.node.children.is_empty() {
            continue;
        }
        let child_border: HashSet<[i64; 3]> = (0..tiles.len())
            .filter(|&c| tiles[c].parent == Some(i))
            .flat_map(|c| {
                let decoded: HashSet<[i64; 3]> = tiles[c].decoded.points.iter().copied().collect();
                cell_borders[c]
                    .iter()
                    .flat_map(|&(a, b)| [a, b])
                    .filter(move |v| decoded.contains(v))
                    .collect::<Vec<_>>()
            })
            .collect();
        for &(a, b) in &cell_borders[i] {
            for v in [a, b] {
                assert!(
                    child_border.contains(&v),
                    "{name}: parent border vertex {v:?} is not on a child's border"
                );
            }
        }
        // And the parent's decoded content uses no vertex its children did not have.
        let child_points: HashSet<[i64; 3]> = (0..tiles.len())
            .filter(|&c| tiles[c].parent == Some(i))
            .flat_map(|c| tiles[c].decoded.points.iter().copied())
            .collect();
        assert!(w.decoded.points.iter().all(|p| child_points.contains(p)));
    }

    // (5) Textures written once, referenced by URI from every GLB, never embedded.
    let textures_dir = out.path().join(TILES_DIR).join(TEXTURES_DIR);
    let texture_files: Vec<_> = std::fs::read_dir(&textures_dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    match &welded.base_color_texture {
        Some(img) if welded.uvs.is_some() => {
            assert_eq!(texture_files.len(), 1, "{name}: {texture_files:?}");
            assert_eq!(std::fs::read(&texture_files[0]).unwrap(), img.bytes);
            assert_eq!(report.texture_bytes, img.bytes.len() as u64);
            for w in &tiles {
                assert_eq!(w.decoded.image_uris.len(), 1);
                let glb_dir = out.path().join(TILES_DIR);
                assert_eq!(
                    glb_dir.join(&w.decoded.image_uris[0]),
                    texture_files[0],
                    "{name}: image URI must resolve from the GLB's folder"
                );
                assert!(w.decoded.json["images"][0].get("bufferView").is_none());
            }
        }
        _ => assert!(texture_files.is_empty()),
    }
    // Both extensions are declared and required in every GLB.
    for w in &tiles {
        for list in ["extensionsUsed", "extensionsRequired"] {
            let names = w.decoded.json[list].to_string();
            assert!(names.contains("EXT_meshopt_compression"), "{list}");
            assert!(names.contains("KHR_mesh_quantization"), "{list}");
        }
    }
    let glbs: Vec<PathBuf> = tiles
        .iter()
        .take(8)
        .map(|w| out.path().join(&w.tile.content.as_ref().unwrap().uri))
        .collect();
    if let Some(ok) = khronos_validate(&glbs) {
        assert!(ok, "{name}: Khronos glTF-Validator reported errors");
    }
    report
}

#[test]
fn avocado_hlod_is_crack_free_within_budget_with_one_texture_file() {
    let report = check_hlod(&avocado(), &MeshTileParams::default(), 1.0, "avocado");
    // 682 triangles fit one leaf; coarse levels halve it down to ≤ 1/8.
    assert_eq!(report.levels.len(), 4, "{report:?}");
    assert!(report.levels.iter().all(|l| l.tiles == 1));
    // Every GLB is far smaller than the texture it references.
    assert!(
        report
            .levels
            .iter()
            .all(|l| l.bytes * 10 < report.texture_bytes)
    );
}

#[test]
fn avocado_split_into_small_leaves_keeps_uv_seams_and_borders() {
    let params = MeshTileParams {
        max_triangles_per_tile: 64,
        ..MeshTileParams::default()
    };
    let report = check_hlod(&avocado(), &params, 1.5, "avocado/64");
    assert!(report.levels.last().unwrap().tiles >= 8, "{report:?}");
}

#[test]
fn carbon_sphere_hlod_is_crack_free_within_budget() {
    let report = check_hlod(
        &carbon_sphere(),
        &MeshTileParams::default(),
        1.0,
        "carbon-sphere",
    );
    assert!(report.levels.len() >= 3, "{report:?}");
    assert_eq!(report.levels.last().unwrap().tiles, 4);
}

#[test]
fn carbon_sphere_deep_tree_is_crack_free_across_levels() {
    let params = MeshTileParams {
        max_triangles_per_tile: 8_192,
        ..MeshTileParams::default()
    };
    let report = check_hlod(&carbon_sphere(), &params, 1.25, "carbon-sphere/8192");
    assert!(report.levels.len() >= 6, "{report:?}");
}

#[test]
fn lattice_step_is_a_power_of_two_covering_the_extent() {
    for extent in [0.0, 1e-9, 0.06, 1.0, 1234.5] {
        let l = Lattice::for_extent(extent);
        assert_eq!(l.step_m.log2().fract(), 0.0, "{extent}");
        assert!(extent / l.step_m <= encode::MAX_LATTICE_SPAN);
        assert!(extent == 0.0 || extent / l.step_m > encode::MAX_LATTICE_SPAN / 2.0 - 1.0);
    }
}

#[test]
fn bad_params_are_rejected_before_work() {
    let out = tempfile::tempdir().unwrap();
    for p in [
        MeshTileParams {
            max_triangles_per_tile: 0,
            ..MeshTileParams::default()
        },
        MeshTileParams {
            root_fraction: 0.0,
            ..MeshTileParams::default()
        },
        MeshTileParams {
            max_simplify_error: f32::NAN,
            ..MeshTileParams::default()
        },
    ] {
        let e = tile_mesh(&avocado(), &p, out.path()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Param {
                    stage: "mesh_tile",
                    ..
                }
            ),
            "{e}"
        );
    }
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

#[test]
fn mesh_params_default_when_missing_from_json() {
    let p: MeshTileParams = serde_json::from_str("{}").unwrap();
    assert_eq!(p, MeshTileParams::default());
    let p: MeshTileParams = serde_json::from_str(r#"{"max_triangles_per_tile": 10}"#).unwrap();
    assert_eq!(p.max_triangles_per_tile, 10);
}

fn level(error_m: f64, file: &str) -> LodLevel {
    LodLevel {
        ratio: 1.0,
        triangles: 1,
        error_m,
        file: file.into(),
    }
}

#[test]
fn bad_chains_are_param_errors_and_write_nothing() {
    let out = tempfile::tempdir().unwrap();
    let params = MeshTileParams::default();
    for lods in [
        vec![],
        vec![level(0.1, "lod_0.glb")],
        vec![
            level(0.0, "lod_0.glb"),
            level(0.2, "lod_1.glb"),
            level(0.1, "lod_2.glb"),
        ],
        vec![level(0.0, "lod_0.glb"), level(f64::NAN, "lod_1.glb")],
        vec![level(0.0, "../lod_0.glb")],
        vec![level(0.0, "/etc/passwd")],
    ] {
        let e = tile_mesh_lods(&lods, out.path(), &params, out.path()).unwrap_err();
        assert!(
            matches!(e, Error::Param { stage: "tile", .. }),
            "{lods:?}: {e}"
        );
    }
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

#[test]
fn missing_lod_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = tile_mesh_lods(
        &[level(0.0, "lod_0.glb")],
        dir.path(),
        &MeshTileParams::default(),
        dir.path(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("lod_0.glb"), "{e}");
    assert!(!dir.path().join("tileset.json").exists());
}
