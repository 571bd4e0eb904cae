//! Meshes: the in-memory triangle mesh ([`Mesh`]), glTF/GLB read ([`read_gltf`], via the `gltf`
//! crate; `KHR_draco_mesh_compression` via the pure-Rust `draco-oxide-decoder`) and GLB write
//! ([`write_glb`]); compact tile GLBs ([`write_quantized_glb`]: `KHR_mesh_quantization` +
//! `EXT_meshopt_compression`, images by URI) for the mesh tiler.
//!
//! Welding and simplification live in `kiln-pipeline`'s `decimate` stage, next to the
//! meshoptimizer dependency; this crate stays free of native code.
//!
//! Frame and units: positions are metres in the glTF world frame (right-handed, +Y up), with every
//! node transform of the default scene already applied. Letters: V vertices, F triangles.

mod draco;
mod glb_write;
mod gltf_read;
mod tile_glb;

pub use glb_write::write_glb;
pub use gltf_read::read_gltf;
pub use tile_glb::{
    EXT_MESHOPT_COMPRESSION, ImageRef, KHR_MESH_QUANTIZATION, MeshoptEncoder, QuantizedMesh,
    TexCoords, quantize_normal, write_quantized_glb,
};

/// An image file kept as its encoded bytes (never decoded), to be embedded again on write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedImage {
    /// `image/png` or `image/jpeg` (the two glTF 2.0 core image types).
    pub mime: String,
    /// The encoded file, byte for byte as it was in the source asset.
    pub bytes: Vec<u8>,
}

/// One indexed triangle mesh with a single base-colour material.
///
/// Invariants that [`read_gltf`] guarantees and consumers check again at their boundary (the
/// fields are public): every index is `< positions.len()`, `indices.len()` is a multiple of 3,
/// all positions are finite, and `normals` / `uvs` when present have `positions.len()` entries.
///
/// Materials: only the material of the first triangle primitive is kept (its base-colour factor
/// and texture); primitives with other materials keep their geometry but are drawn with it. A
/// warning is logged when that happens.
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    /// `[V, 3]` metres, glTF Y-up world frame, node transforms applied.
    pub positions: Vec<[f32; 3]>,
    /// `[V, 3]` unit normals in the same frame; `None` when any source primitive lacked them.
    pub normals: Option<Vec<[f32; 3]>>,
    /// `[V, 2]` texture coordinates of the base-colour texture (glTF convention: origin top-left,
    /// v down); `None` when any source primitive lacked them.
    pub uvs: Option<Vec<[f32; 2]>>,
    /// `[F, 3]` flattened, counter-clockwise front faces (glTF winding).
    pub indices: Vec<u32>,
    /// The base-colour texture, encoded; `None` when the material has none (or it is not PNG/JPEG).
    pub base_color_texture: Option<EmbeddedImage>,
    /// Linear RGBA multiplier of the base colour (glTF `baseColorFactor`), default `[1, 1, 1, 1]`.
    pub base_color_factor: [f32; 4],
}

impl Mesh {
    /// Number of triangles F (`indices.len() / 3`).
    pub fn triangle_count(&self) -> usize {
        self.indices.len() / 3
    }

    /// Axis-aligned bounds `(min, max)` of all positions in metres, or `None` when there are none.
    /// Non-finite positions are skipped.
    pub fn aabb(&self) -> Option<([f64; 3], [f64; 3])> {
        let mut min = [f64::INFINITY; 3];
        let mut max = [f64::NEG_INFINITY; 3];
        for p in self
            .positions
            .iter()
            .filter(|p| p.iter().all(|c| c.is_finite()))
        {
            for i in 0..3 {
                min[i] = min[i].min(f64::from(p[i]));
                max[i] = max[i].max(f64::from(p[i]));
            }
        }
        (min[0] <= max[0]).then_some((min, max))
    }
}
