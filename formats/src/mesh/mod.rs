//! Meshes: the in-memory triangle mesh ([`Mesh`]); reading glTF/GLB ([`read_gltf`], via the `gltf`
//! crate; `KHR_draco_mesh_compression` via the pure-Rust `draco-oxide-decoder`), Wavefront OBJ +
//! MTL ([`read_obj`], via `tobj`) and PLY meshes ([`read_ply_mesh`], via `ply-rs-bw`), chosen by
//! extension in [`read_mesh`]; GLB write
//! ([`write_glb`]); compact tile GLBs ([`write_quantized_glb`]: `KHR_mesh_quantization` +
//! `EXT_meshopt_compression`, images by URI) for the mesh tiler.
//!
//! Welding and simplification live in `kiln-pipeline`'s `decimate` stage, next to the
//! meshoptimizer dependency (as does reading tile GLBs back, `tile::mesh::decode`); the only native
//! code here is Binomial's Basis Universal encoder behind [`encode_ktx2`].
//!
//! Frame and units: positions are metres in the glTF world frame (right-handed, +Y up), with every
//! node transform of the default scene already applied (composed in f64), stored in f32 relative
//! to the mesh's f64 [`Mesh::origin_m`] (non-zero only for placements ≥ 1024 m from 0, such as
//! ECEF or UTM coordinates); OBJ and PLY state neither units nor up axis, and are taken as metres,
//! +Y up. Normals the source lacks are generated ([`generate_missing_normals`]). Letters: V
//! vertices, F triangles.

mod assemble;
mod cleanup;
mod draco;
mod glb_write;
mod gltf_read;
mod ktx2_write;
mod material;
mod meshopt_read;
mod normals;
mod obj_read;
mod ply_read;
mod source_image;
mod tile_glb;

use std::path::{Path, PathBuf};

pub use assemble::{mesh_files_in, read_meshes};
pub use cleanup::{MeshCleanup, MeshRepair, repair as repair_cleanup, survey as survey_cleanup};
pub use glb_write::{
    MaterialGroup, compact, split_by_material, with_tex_coord_sets, write_glb,
    write_glb_referencing_images,
};
pub use gltf_read::{EXT_TEXTURE_WEBP, KHR_TEXTURE_BASISU, read_gltf};
pub use ktx2_write::{BasisCodec, Ktx2Info, encode_ktx2};
pub use material::{
    AlphaMode, KHR_MATERIALS_EMISSIVE_STRENGTH, KHR_MATERIALS_UNLIT, KHR_TEXTURE_TRANSFORM,
    Material, MaterialTable, Sampler, TextureRef, WRAP_REPEAT, effective_tex_coord,
};
pub use normals::{CREASE_ANGLE_DEG, generate_missing_normals};
pub use obj_read::{mtl_texture_files, obj_material_libraries, read_obj};
pub use ply_read::read_ply_mesh;
pub use source_image::{decode_texture, encode_png};
pub use tile_glb::{
    EXT_MESHOPT_COMPRESSION, ImageRef, KHR_MESH_QUANTIZATION, MeshoptEncoder, QuantizedMesh,
    QuantizedPrimitive, TexCoords, quantize_normal, write_quantized_glb,
};

/// An image file kept as its encoded bytes (never decoded), to be embedded again on write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedImage {
    /// `image/png` or `image/jpeg` (the two glTF 2.0 core image types), or `image/ktx2`
    /// (`KHR_texture_basisu`: kept so that tiles keep its GPU-compressed blocks).
    pub mime: String,
    /// The encoded file, byte for byte as it was in the source asset.
    pub bytes: Vec<u8>,
}

/// One indexed triangle mesh with per-triangle materials.
///
/// Invariants that the readers ([`read_gltf`], [`read_obj`], [`read_ply_mesh`]) guarantee and
/// consumers check again at their boundary (the fields are public; see [`Mesh::check`]): every
/// index is `< positions.len()`, `indices.len()` is a multiple of 3, all positions are finite,
/// `normals` / `uvs` / `uvs1` / `colors` when present have `positions.len()` entries,
/// `triangle_materials` has one entry per triangle, each `< materials.len()`, and every texture's
/// `image` is `< images.len()`.
///
/// Materials: every material of the source is kept (glTF: each primitive's; OBJ: each `usemtl`;
/// PLY: one diffuse white material), see [`Material`]. A triangle's material is
/// `materials[triangle_materials[t]]`. Vertices may be shared by triangles of different materials
/// here; the tiler's weld splits them so that material borders become attribute seams.
#[derive(Debug, Clone, PartialEq)]
pub struct Mesh {
    /// `[3]` metres, glTF Y-up world frame: the point `positions` are relative to (world position
    /// of vertex i = `origin_m + positions[i]`, summed in f64). Non-zero when the source places
    /// the mesh far from 0 (a glTF node translation such as an ECEF point, see [`read_gltf`]),
    /// where f32 world coordinates would round to centimetres or worse; `[0, 0, 0]` otherwise.
    /// Writers put it in the node translation ([`write_glb`]) and the tiler in each tile's.
    pub origin_m: [f64; 3],
    /// `[V, 3]` metres, glTF Y-up world frame relative to `origin_m`, node transforms applied.
    pub positions: Vec<[f32; 3]>,
    /// `[V, 3]` unit normals in the same frame; `None` when any source primitive lacked them.
    pub normals: Option<Vec<[f32; 3]>>,
    /// `[V, 2]` texture coordinates set 0 (glTF `TEXCOORD_0` convention: origin top-left, v down);
    /// `None` when no source primitive had them (primitives without them read `[0, 0]`).
    pub uvs: Option<Vec<[f32; 2]>>,
    /// `[V, 2]` texture coordinates set 1 (`TEXCOORD_1`), kept only when a material samples set 1;
    /// primitives without them read `[0, 0]`.
    pub uvs1: Option<Vec<[f32; 2]>>,
    /// `[V, 4]` linear RGBA vertex colours (`COLOR_0`, multiplied into the base colour); `None`
    /// when no source vertex had one (vertices without one read opaque white, the glTF default).
    pub colors: Option<Vec<[f32; 4]>>,
    /// `[F, 3]` flattened, counter-clockwise front faces (glTF winding).
    pub indices: Vec<u32>,
    /// `[F]` index into `materials` of each triangle.
    pub triangle_materials: Vec<u32>,
    /// The materials (≥ 1 when there are triangles), in order of first use in the source.
    pub materials: Vec<Material>,
    /// The images the materials' textures index, encoded, each once.
    pub images: Vec<EmbeddedImage>,
}

impl Mesh {
    /// A test mesh: `positions` and `indices`, one white diffuse material, no attributes.
    #[cfg(test)]
    pub(crate) fn plain(positions: Vec<[f32; 3]>, indices: Vec<u32>) -> Mesh {
        Mesh {
            origin_m: [0.0; 3],
            positions,
            normals: None,
            uvs: None,
            uvs1: None,
            colors: None,
            triangle_materials: vec![0; indices.len() / 3],
            indices,
            materials: vec![Material::diffuse([1.0; 4])],
            images: Vec::new(),
        }
    }

    /// Number of triangles F (`indices.len() / 3`).
    pub fn triangle_count(&self) -> usize {
        self.indices.len() / 3
    }

    /// The base-colour image of `materials[material]`, if it has one.
    pub fn base_color_image(&self, material: usize) -> Option<&EmbeddedImage> {
        let t = self.materials.get(material)?.base_color_texture.as_ref()?;
        self.images.get(t.image)
    }

    /// Indices of the materials some triangle uses, ascending.
    pub fn used_materials(&self) -> Vec<u32> {
        let mut used = vec![false; self.materials.len()];
        for &m in &self.triangle_materials {
            if let Some(u) = used.get_mut(m as usize) {
                *u = true;
            }
        }
        (0..used.len() as u32)
            .filter(|&m| used[m as usize])
            .collect()
    }

    /// Check the material invariants of [`Mesh`] (one material per triangle, indices in range,
    /// textures naming existing images); the geometric ones are checked by each consumer.
    ///
    /// # Errors
    /// `(field, problem)` naming the first broken invariant.
    pub fn check_materials(&self) -> std::result::Result<(), (String, String)> {
        let f = self.indices.len() / 3;
        if self.triangle_materials.len() != f {
            return Err((
                "triangle_materials".into(),
                format!(
                    "{} entries, expected one per triangle ({f})",
                    self.triangle_materials.len()
                ),
            ));
        }
        if let Some((t, &m)) = self
            .triangle_materials
            .iter()
            .enumerate()
            .find(|&(_, &m)| m as usize >= self.materials.len())
        {
            return Err((
                format!("triangle_materials[{t}]"),
                format!("{m}, expected < material count {}", self.materials.len()),
            ));
        }
        for (i, m) in self.materials.iter().enumerate() {
            if let Some(t) = m.textures().find(|t| t.image >= self.images.len()) {
                return Err((
                    format!("materials[{i}] texture"),
                    format!(
                        "image {}, expected < image count {}",
                        t.image,
                        self.images.len()
                    ),
                ));
            }
        }
        let v = self.positions.len();
        if self.uvs1.as_ref().is_some_and(|t| t.len() != v)
            || self.colors.as_ref().is_some_and(|c| c.len() != v)
        {
            return Err((
                "uvs1/colors".into(),
                format!("expected {v} entries each (one per vertex)"),
            ));
        }
        Ok(())
    }

    /// Axis-aligned bounds `(min, max)` of all positions in metres, relative to `origin_m`, or
    /// `None` when there are none. Non-finite positions are skipped.
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

/// The sRGB electro-optical transfer function (IEC 61966-2-1 §5.2): a display value in [0, 1] as
/// a linear value, `c / 12.92` up to 0.04045, `((c + 0.055) / 1.055)^2.4` above.
pub fn srgb_to_linear(c: f32) -> f32 {
    if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    }
}

/// Generate the normals `mesh`'s source at `path` did not give ([`generate_missing_normals`]) and
/// say so in one info line naming the file; nothing when every vertex has one (`authored` all
/// `true`, or `None` with `mesh.normals` present).
pub(crate) fn fill_missing_normals(path: &Path, mesh: &mut Mesh, authored: Option<&[bool]>) {
    let complete = match authored {
        Some(a) => a.len() == mesh.positions.len() && a.iter().all(|&x| x),
        None => mesh.normals.is_some(),
    };
    if complete {
        return;
    }
    let vertices_before = mesh.positions.len();
    let generated = generate_missing_normals(mesh, authored);
    tracing::info!(
        file = %path.display(),
        "normals generated for {generated} vertices (angle-weighted smooth normals, creases above \
         {CREASE_ANGLE_DEG}° kept: {} vertices added); the source has none there",
        mesh.positions.len() - vertices_before
    );
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

    /// IEC 61966-2-1 reference points: 0 → 0, 1 → 1, 0.04045 → 0.04045 / 12.92 (the linear
    /// segment's end), 0.5 → ((0.555) / 1.055)^2.4 = 0.214041.
    #[test]
    fn srgb_decoding_matches_the_standard() {
        assert_eq!(srgb_to_linear(0.0), 0.0);
        assert!((srgb_to_linear(1.0) - 1.0).abs() < 1e-6);
        assert!((srgb_to_linear(0.04045) - 0.04045 / 12.92).abs() < 1e-7);
        assert!((srgb_to_linear(0.5) - 0.214_041).abs() < 1e-6);
    }

    #[test]
    fn read_mesh_refuses_other_extensions_naming_the_ones_it_reads() {
        let err = read_mesh(Path::new("/x/model.stl"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.stl") && err.contains(".obj") && err.contains(".ply"));
    }
}
