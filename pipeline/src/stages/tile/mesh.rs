//! Mesh tiling: package a decimated LOD chain (from `stages::decimate`) as an OGC 3D Tiles 1.1
//! tileset — one tile per level, REPLACE refinement, the coarsest level at the root and the
//! full-resolution mesh as the only leaf. Spatial splitting into HLOD tiles is a later step; this
//! file owns the chain layout, the bounding volumes and the geometric errors.
//!
//! Sources: OGC 3D Tiles 1.1 (OGC 22-025r4) §"Geometric error" (leaves 0, parents ≥ children,
//! tileset ≥ root), §"Bounding volumes" (content of a tile and of its descendants lies inside its
//! volume), §"glTF transforms" (clients rotate glTF content Y-up → Z-up *before* the tile
//! transforms apply, so volumes are written in the Z-up tile frame; CesiumGS/3d-tiles-samples
//! `1.1/BoundingBoxTests` computes boxes the same way); shared/research/tiles-formats.md §1.2, §1.6.
//!
//! Bad input: [`check_tile_mesh_inputs`] rejects an empty chain, non-finite or decreasing errors,
//! a leaf with non-zero error and file names that would escape `lod_dir`; every GLB is re-read with
//! `read_gltf` (so a truncated or foreign file is an error naming it) before anything is written.

use std::path::Path;

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::mesh::read_gltf;
use kiln_formats::tiles::tileset::{
    Asset, BoundingVolume, Content, Refine, Tile, Tileset, Y_UP_TO_Z_UP,
};

use super::TileReport;
use crate::stages::decimate::LodLevel;
use crate::{Error, Result};

/// Sub-directory of `out_dir` holding the tile contents.
pub const TILES_DIR: &str = "tiles";

/// Write `out_dir/tileset.json` and `out_dir/tiles/lod_<i>.glb` for the LOD chain `lods`.
///
/// Layout: root = coarsest level (last of `lods`) with `geometricError = lods[last].error_m`;
/// each child is the next finer level with its own `error_m`; the leaf is level 0 with
/// `geometricError = 0`. Errors are metres and non-increasing from the root to the leaf.
/// `tileset.geometricError` = max(root error, diagonal of the bounding box): the error of drawing
/// nothing is at most the size of the object. Each tile's `box` is the axis-aligned bounds of its
/// own content and all finer levels, in the Z-up tile frame (glTF `(x, y, z)` → `(x, −z, y)`, the
/// [`Y_UP_TO_Z_UP`] rotation that clients apply to glTF content). The root has no `transform`
/// (the content's local metres; a georeference is added at publish time). All files are written
/// atomically; GLBs are copied byte for byte.
///
/// * `lods` — as returned by `decimate` / `read_lods`, level 0 (full resolution, error 0) first.
/// * `lod_dir` — directory holding each `lods[i].file`.
/// * `out_dir` — created if missing.
///
/// # Errors
/// [`Error::Param`] — empty chain, level 0 with non-zero error, errors not finite / negative /
/// decreasing with the level, a file name that is not a plain name. [`Error::Format`] — a GLB is
/// missing or unreadable (names the file), or a write fails.
///
/// # Panics
/// Never.
pub fn tile_mesh_lods(lods: &[LodLevel], lod_dir: &Path, out_dir: &Path) -> Result<TileReport> {
    check_tile_mesh_inputs(lods)?;
    // Read and bound every level before writing anything.
    let mut contents = Vec::with_capacity(lods.len());
    for lod in lods {
        let src = lod_dir.join(&lod.file);
        let bytes = std::fs::read(&src).map_err(|e| kiln_formats::Error::io(&src, e))?;
        let mesh = read_gltf(&src)?;
        let (min, max) = mesh.aabb().ok_or_else(|| Error::Input {
            path: src.clone(),
            field: "POSITION".into(),
            problem: "no finite vertex; rerun the decimate stage".into(),
        })?;
        contents.push((bytes, z_up_aabb(min, max)));
    }

    // Bounds of each tile = its content ∪ all finer levels (REPLACE: descendants' content must lie
    // inside the parent's volume).
    let mut bounds: Vec<([f64; 3], [f64; 3])> = Vec::with_capacity(lods.len());
    for (i, (_, (min, max))) in contents.iter().enumerate() {
        let (mut lo, mut hi) = (*min, *max);
        if let Some((pmin, pmax)) = i.checked_sub(1).map(|p| bounds[p]) {
            for k in 0..3 {
                lo[k] = lo[k].min(pmin[k]);
                hi[k] = hi[k].max(pmax[k]);
            }
        }
        bounds.push((lo, hi));
    }

    let mut content_bytes = 0u64;
    let mut child: Option<Tile> = None;
    for (i, (lod, (bytes, _))) in lods.iter().zip(&contents).enumerate() {
        let uri = format!("{TILES_DIR}/lod_{i}.glb");
        write_atomic(&out_dir.join(&uri), bytes)?;
        content_bytes += bytes.len() as u64;
        let (lo, hi) = bounds[i];
        child = Some(Tile {
            bounding_volume: BoundingVolume::from_aabb(lo, hi),
            geometric_error: if i == 0 { 0.0 } else { lod.error_m },
            refine: Some(Refine::Replace),
            transform: None,
            content: Some(Content { uri }),
            children: child.into_iter().collect(),
        });
    }
    let root = child.expect("check_tile_mesh_inputs guarantees at least one level");
    let (lo, hi) = bounds[bounds.len() - 1];
    let diagonal_m = (0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>().sqrt();
    let tileset = Tileset {
        asset: Asset {
            version: "1.1".into(),
            generator: Some(concat!("kiln ", env!("CARGO_PKG_VERSION")).into()),
        },
        geometric_error: diagonal_m.max(root.geometric_error),
        root,
        extensions_used: Vec::new(),
        extensions_required: Vec::new(),
        extensions: Default::default(),
    };
    let tileset_path = out_dir.join("tileset.json");
    let json = serde_json::to_vec_pretty(&tileset).map_err(|e| Error::Input {
        path: tileset_path.clone(),
        field: "tileset".into(),
        problem: format!("cannot serialise: {e}"),
    })?;
    write_atomic(&tileset_path, &json)?;
    Ok(TileReport {
        tiles: lods.len(),
        levels: lods.len() as u32,
        content_bytes,
        tileset_path,
    })
}

/// The checks [`tile_mesh_lods`] runs before reading any file.
///
/// # Errors
/// [`Error::Param`] as listed on [`tile_mesh_lods`].
pub fn check_tile_mesh_inputs(lods: &[LodLevel]) -> Result<()> {
    let param = |field: String, expected: &str, found: String| Error::Param {
        stage: "tile",
        field,
        expected: expected.into(),
        found,
    };
    let Some(leaf) = lods.first() else {
        return Err(param(
            "lods".into(),
            "at least one LOD level (rerun decimate)",
            "none".into(),
        ));
    };
    if leaf.error_m != 0.0 {
        return Err(param(
            "lods[0].error_m".into(),
            "0 (level 0 is the full-resolution leaf)",
            leaf.error_m.to_string(),
        ));
    }
    for (i, lod) in lods.iter().enumerate() {
        if !(lod.error_m.is_finite() && lod.error_m >= 0.0) {
            return Err(param(
                format!("lods[{i}].error_m"),
                "a finite error ≥ 0 m",
                lod.error_m.to_string(),
            ));
        }
        if i > 0 && lod.error_m < lods[i - 1].error_m {
            return Err(param(
                format!("lods[{i}].error_m"),
                &format!("≥ the finer level's {} m", lods[i - 1].error_m),
                lod.error_m.to_string(),
            ));
        }
        let plain = Path::new(&lod.file)
            .file_name()
            .is_some_and(|n| n == lod.file.as_str())
            && lod.file != "..";
        if !plain {
            return Err(param(
                format!("lods[{i}].file"),
                "a plain file name inside the LOD directory",
                format!("{:?}", lod.file),
            ));
        }
    }
    Ok(())
}

/// Axis-aligned bounds, in the Z-up tile frame, of a glTF (Y-up) box `min..max`.
fn z_up_aabb(min: [f64; 3], max: [f64; 3]) -> ([f64; 3], [f64; 3]) {
    let m = Y_UP_TO_Z_UP;
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for corner in 0..8 {
        let p = [
            if corner & 1 == 0 { min[0] } else { max[0] },
            if corner & 2 == 0 { min[1] } else { max[1] },
            if corner & 4 == 0 { min[2] } else { max[2] },
        ];
        for r in 0..3 {
            // Column-major: element (r, c) is m[4c + r].
            let q = m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r];
            lo[r] = lo[r].min(q);
            hi[r] = hi[r].max(q);
        }
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::decimate::{DecimateParams, decimate};
    use std::path::PathBuf;

    fn avocado_lods(dir: &Path) -> Vec<LodLevel> {
        let root = std::env::var_os("KILN_DATASETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
        let src = root.join("mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf");
        assert!(
            src.exists(),
            "dataset file {} missing; set KILN_DATASETS",
            src.display()
        );
        let mesh = read_gltf(&src).unwrap();
        decimate(&mesh, &DecimateParams::default(), dir).unwrap()
    }

    fn chain(tileset: &Tileset) -> Vec<&Tile> {
        let mut out = vec![&tileset.root];
        while let Some(c) = out.last().unwrap().children.first() {
            out.push(c);
        }
        out
    }

    #[test]
    fn avocado_chain_has_monotone_geometric_error_and_zero_leaf() {
        let lod_dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let lods = avocado_lods(lod_dir.path());
        let report = tile_mesh_lods(&lods, lod_dir.path(), out.path()).unwrap();
        assert_eq!(report.tiles, 4);
        assert_eq!(report.levels, 4);
        let tileset: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        assert_eq!(tileset.asset.version, "1.1");
        assert_eq!(tileset.root.refine, Some(Refine::Replace));
        let tiles = chain(&tileset);
        assert_eq!(tiles.len(), 4);
        let mut previous = tileset.geometric_error;
        for t in &tiles {
            assert!(
                t.geometric_error <= previous,
                "geometricError increases: {} > {previous}",
                t.geometric_error
            );
            previous = t.geometric_error;
        }
        assert_eq!(tiles.last().unwrap().geometric_error, 0.0);
        assert_eq!(tiles[0].geometric_error, lods[3].error_m);
        assert!(tileset.geometric_error > 0.0);
        let mut total = 0;
        for t in &tiles {
            let uri = &t.content.as_ref().unwrap().uri;
            total += std::fs::metadata(out.path().join(uri)).unwrap().len();
        }
        assert_eq!(total, report.content_bytes);
    }

    #[test]
    fn boxes_contain_their_content_in_the_z_up_frame() {
        let lod_dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let lods = avocado_lods(lod_dir.path());
        let report = tile_mesh_lods(&lods, lod_dir.path(), out.path()).unwrap();
        let tileset: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        let tiles = chain(&tileset);
        // Every tile's box holds its own content and all descendants' (Y-up → Z-up applied).
        for (depth, t) in tiles.iter().enumerate() {
            let b = t.bounding_volume.box_.unwrap();
            for d in &tiles[depth..] {
                let mesh = read_gltf(&out.path().join(&d.content.as_ref().unwrap().uri)).unwrap();
                for p in &mesh.positions {
                    let q = [f64::from(p[0]), -f64::from(p[2]), f64::from(p[1])];
                    for k in 0..3 {
                        let half = b[3 + 4 * k];
                        assert!(
                            (q[k] - b[k]).abs() <= half + 1e-6,
                            "vertex {q:?} outside box {b:?} on axis {k}"
                        );
                    }
                }
            }
        }
        // The Avocado stands ~6 cm tall along glTF +Y, i.e. along the tile frame's +Z.
        let b = tiles[0].bounding_volume.box_.unwrap();
        assert!(
            b[11] > b[3] && b[11] > b[7],
            "up extent must be on Z: {b:?}"
        );
    }

    #[test]
    fn tile_glbs_pass_the_khronos_validator() {
        let lod_dir = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let lods = avocado_lods(lod_dir.path());
        tile_mesh_lods(&lods, lod_dir.path(), out.path()).unwrap();
        let files: Vec<PathBuf> = (0..lods.len())
            .map(|i| out.path().join(format!("{TILES_DIR}/lod_{i}.glb")))
            .collect();
        if let Some(ok) = crate::stages::decimate::tests::khronos_validate(&files) {
            assert!(ok, "Khronos glTF-Validator reported errors");
        }
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
            let e = tile_mesh_lods(&lods, out.path(), out.path()).unwrap_err();
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
        let e = tile_mesh_lods(&[level(0.0, "lod_0.glb")], dir.path(), dir.path()).unwrap_err();
        assert!(e.to_string().contains("lod_0.glb"), "{e}");
        assert!(!dir.path().join("tileset.json").exists());
    }
}
