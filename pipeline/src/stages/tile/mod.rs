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
