//! `tile`: package a mesh (as an HLOD of its full-resolution level) or trained splats as an OGC
//! 3D Tiles 1.1 tileset with GLB content.

pub mod frame;
pub mod georef;
pub mod mesh;
pub mod splat;

use std::path::{Path, PathBuf};

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::tiles::tileset::{Asset, Tile, Tileset};

use crate::{Error, Result};

/// A tile stage's key parameters: its tiler's (`tiler`), wrapped with the georeference when the
/// job places the tileset on Earth (`{"tiler": …, "georef": …}`).
pub(crate) fn tile_key_params(
    plan: &crate::plan::JobPlan,
    tiler: serde_json::Value,
) -> serde_json::Value {
    match plan.georef {
        Some(g) => serde_json::json!({ "tiler": tiler, "georef": g }),
        None => tiler,
    }
}

/// Run `kiln check`'s tileset checker (structure, geometricError, content inside every bounding
/// volume, declared extensions, SPZ headers) on a tileset the tile stage just wrote, so that a
/// tiler bug fails the stage instead of being published. Tile budgets are not checked here
/// (leaves at the tilers' depth limits may exceed them by design); warnings are logged.
///
/// # Errors
/// [`Error::Input`] listing every error finding, on `tileset.json`.
pub(crate) fn check_written_tileset(tileset: &Path) -> Result<()> {
    use kiln_formats::tiles::check::{CheckOptions, Severity, check_tileset};
    let report = check_tileset(
        tileset,
        &CheckOptions {
            max_splats_per_tile: u64::MAX,
            max_triangles_per_tile: u64::MAX,
        },
    );
    let mut errors = Vec::new();
    for f in &report.findings {
        match f.severity {
            Severity::Error => errors.push(f.to_string()),
            Severity::Warning => tracing::warn!(finding = %f, "tileset check"),
            _ => {}
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(Error::Input {
        path: tileset.to_path_buf(),
        field: "tileset".into(),
        problem: format!(
            "the tileset just written fails `kiln check` (a Kiln bug; please report it):\n{}",
            errors.join("\n")
        ),
    })
}

/// What a tiling run wrote (shared by the splat and mesh tilers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileReport {
    /// Number of tiles in the tileset.
    pub tiles: usize,
    /// Number of levels, root = level 0 (a root with only leaf children has 2 levels).
    pub levels: u32,
    /// Sum of the content file sizes, bytes: the GLBs and, for meshes, the texture files they
    /// reference (each counted once); `tileset.json` not included.
    pub content_bytes: u64,
    /// Path of the written `tileset.json`.
    pub tileset_path: PathBuf,
}

/// Tileset extension that declares the glTF extensions of the content (3D Tiles 1.1,
/// `3DTILES_content_gltf`); CesiumJS routes splat GLBs to its splat renderer through it
/// (shared/research/tiles-formats.md §1.7).
pub(crate) const CONTENT_GLTF: &str = "3DTILES_content_gltf";

/// Write `out_dir/tileset.json` atomically: 3D Tiles 1.1 with `root`, `geometric_error` (metres)
/// and `3DTILES_content_gltf` declaring `gltf_used` as used and `gltf_required` as required by
/// the content;
/// the tileset extension itself is listed as required when `content_gltf_required` (splats:
/// clients must route the content) and as used only otherwise. Returns the file's path.
///
/// # Errors
/// [`Error::Input`] if the tileset cannot be serialised; [`Error::Format`] if it cannot be written.
fn write_tileset(
    out_dir: &Path,
    root: Tile,
    geometric_error: f64,
    gltf_used: &[&str],
    gltf_required: &[&str],
    content_gltf_required: bool,
    frame: Option<&frame::TilesetFrame>,
) -> Result<PathBuf> {
    let mut tileset = Tileset {
        asset: Asset {
            version: "1.1".into(),
            generator: Some(concat!("kiln ", env!("CARGO_PKG_VERSION")).into()),
            extras: None,
        },
        geometric_error,
        root,
        extensions_used: vec![CONTENT_GLTF.into()],
        extensions_required: if content_gltf_required {
            vec![CONTENT_GLTF.into()]
        } else {
            Vec::new()
        },
        extensions: [(
            CONTENT_GLTF.to_string(),
            serde_json::json!({
                "extensionsUsed": gltf_used,
                "extensionsRequired": gltf_required,
            }),
        )]
        .into_iter()
        .collect(),
    };
    if let Some(f) = frame {
        f.record_in(&mut tileset);
    }
    let tileset_path = out_dir.join("tileset.json");
    let json = serde_json::to_vec_pretty(&tileset).map_err(|e| Error::Input {
        path: tileset_path.clone(),
        field: "tileset".into(),
        problem: format!("cannot serialise: {e}"),
    })?;
    write_atomic(&tileset_path, &json)?;
    Ok(tileset_path)
}
