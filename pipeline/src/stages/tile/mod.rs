//! `tile`: package a mesh (as an HLOD of its full-resolution level) or trained splats as an OGC
//! 3D Tiles 1.1 tileset with GLB content.

pub mod georef;
pub mod mesh;
pub mod splat;

use std::path::PathBuf;

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
