//! Meshes: the in-memory triangle mesh ([`Mesh`]); reading glTF/GLB ([`read_gltf`], via the `gltf`
//! crate; `KHR_draco_mesh_compression` via the pure-Rust `draco-oxide-decoder`), Wavefront OBJ +
//! MTL ([`read_obj`], via `tobj`) and PLY meshes ([`read_ply_mesh`], via `ply-rs-bw`), chosen by
//! extension in [`read_mesh`]; GLB write
//! ([`write_glb`]); compact tile GLBs ([`write_quantized_glb`]: `KHR_mesh_quantization` +
//! `EXT_meshopt_compression`, images by URI) for the mesh tiler.
//!
//! Welding and simplification live in `kiln-pipeline`'s `decimate` stage, next to the
//! meshoptimizer dependency; this crate stays free of native code.
//!
//! Frame and units: positions are metres in the glTF world frame (right-handed, +Y up), with every
//! node transform of the default scene already applied; OBJ and PLY state neither units nor up
//! axis, and are taken as metres, +Y up. Letters: V vertices, F triangles.

mod draco;
mod glb_write;
mod gltf_read;
mod obj_read;
mod ply_read;
mod tile_glb;

use std::path::{Path, PathBuf};

pub use glb_write::write_glb;
pub use gltf_read::read_gltf;
pub use obj_read::{mtl_texture_files, obj_material_libraries, read_obj};
pub use ply_read::read_ply_mesh;
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
/// Invariants that the readers ([`read_gltf`], [`read_obj`], [`read_ply_mesh`]) guarantee and
/// consumers check again at their boundary (the fields are public): every index is
/// `< positions.len()`, `indices.len()` is a multiple of 3, all positions are finite, and
/// `normals` / `uvs` when present have `positions.len()` entries.
///
/// Materials: only the material of the first triangle primitive (glTF) or object (OBJ) is kept
/// (its base-colour factor and texture); primitives with other materials keep their geometry but
/// are drawn with it. A warning is logged when that happens.
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

/// The mesh file extensions [`read_mesh`] accepts (lower case, without the dot).
pub const MESH_EXTENSIONS: [&str; 4] = ["glb", "gltf", "obj", "ply"];

/// Read a mesh file, choosing the reader by extension (case-insensitive): `.gltf`/`.glb` →
/// [`read_gltf`], `.obj` → [`read_obj`], `.ply` → [`read_ply_mesh`].
///
/// # Errors
/// [`crate::Error::Unsupported`] for another extension (naming the file and the accepted ones),
/// else the chosen reader's errors.
pub fn read_mesh(path: &Path) -> crate::Result<Mesh> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "gltf" | "glb" => read_gltf(path),
        "obj" => read_obj(path),
        "ply" => read_ply_mesh(path),
        _ => Err(crate::Error::Unsupported {
            path: path.to_path_buf(),
            field: "file extension".into(),
            found: format!("`.{ext}`"),
            supported:
                "glTF 2.0 (.gltf, .glb), Wavefront OBJ (.obj + .mtl) and PLY meshes (.ply); \
                        convert other formats first (e.g. Blender's glTF exporter)"
                    .into(),
        }),
    }
}

/// A texture file that a material names but that is not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingTexture {
    /// Where the name was found: `images[2].uri`, or `map_Kd of material `wood` in a.mtl`.
    pub field: String,
    /// The name as the file wrote it (relative path or URI).
    pub as_written: String,
    /// The file that was looked for.
    pub resolved: PathBuf,
}

/// Log every missing texture of `path` in ONE warning (nothing when `missing` is empty), so that a
/// user supplies them all in one go rather than one per run; the materials keep their factors.
/// Files are named relative to `path`'s folder (the user's own layout, whatever copy is read).
pub(crate) fn warn_missing_textures(path: &Path, missing: &[MissingTexture]) {
    if missing.is_empty() {
        return;
    }
    tracing::warn!(
        file = %path.display(),
        "{}",
        missing_textures_message(path, missing)
    );
}

fn missing_textures_message(path: &Path, missing: &[MissingTexture]) -> String {
    let dir = path.parent().unwrap_or(Path::new(""));
    let list = missing
        .iter()
        .map(|m| {
            let rel = m.resolved.strip_prefix(dir).unwrap_or(&m.resolved);
            format!("{} ({} `{}`)", rel.display(), m.field, m.as_written)
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{} texture file(s) missing beside {}: {list}; their materials keep their colour factors \
         without a texture (put the files there and run again to texture them)",
        missing.len(),
        path.display()
    )
}

/// Hand-made mesh fixtures in the repository's `tests/fixtures/mesh/` (a few KB each).
#[cfg(test)]
pub(crate) fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/mesh")
        .join(rel)
}

/// Test helpers: per-triangle geometry by hand-checkable formulas.
#[cfg(test)]
pub(crate) mod geometry {
    use super::Mesh;

    /// `(b − a) × (c − a)` of triangle `t` (twice its area, along its front-face normal for
    /// counter-clockwise winding).
    pub fn cross(mesh: &Mesh, t: usize) -> [f64; 3] {
        let p = |k: usize| mesh.positions[mesh.indices[3 * t + k] as usize].map(f64::from);
        let (a, b, c) = (p(0), p(1), p(2));
        let u = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
        let v = [c[0] - a[0], c[1] - a[1], c[2] - a[2]];
        [
            u[1] * v[2] - u[2] * v[1],
            u[2] * v[0] - u[0] * v[2],
            u[0] * v[1] - u[1] * v[0],
        ]
    }

    /// Σ triangle areas.
    pub fn area(mesh: &Mesh) -> f64 {
        (0..mesh.triangle_count())
            .map(|t| {
                let c = cross(mesh, t);
                0.5 * (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_texture_warning_lists_every_file_relative_to_the_model() {
        let m = |field: &str, written: &str, rel: &str| MissingTexture {
            field: field.into(),
            as_written: written.into(),
            resolved: Path::new("/data/asset").join(rel),
        };
        let text = missing_textures_message(
            Path::new("/data/asset/model.gltf"),
            &[
                m("images[0].uri", "tex/a%20b.png", "tex/a b.png"),
                m("images[3].uri", "n.jpg", "n.jpg"),
            ],
        );
        assert!(
            text.starts_with(
                "2 texture file(s) missing beside /data/asset/model.gltf: tex/a b.png \
                 (images[0].uri `tex/a%20b.png`), n.jpg (images[3].uri `n.jpg`)"
            ),
            "{text}"
        );
    }

    #[test]
    fn read_mesh_refuses_other_extensions_naming_the_ones_it_reads() {
        let err = read_mesh(Path::new("/x/model.stl"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.stl") && err.contains(".obj") && err.contains(".ply"));
    }
}
