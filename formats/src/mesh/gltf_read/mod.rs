//! Read a glTF 2.0 asset (`.gltf` with external or data-URI buffers, or `.glb`) into one merged
//! [`Mesh`].
//!
//! Source: glTF 2.0 specification §3.6 (buffers, buffer views, accessors, data alignment), §3.7.2
//! (meshes, primitive modes), §3.5 (nodes and hierarchy: strict trees, column-major matrices).
//!
//! Bad input: the `gltf` crate parses and schema-checks the JSON, but its accessor readers assume
//! valid data (they underflow on `count == 0`, assert on stride and component type, and its URI
//! decoder unwraps), and gltf-json's own validation indexes the POSITION accessor unchecked. So
//! this module pre-checks that index, checks every accessor it reads (type, count, stride, byte
//! range inside its view and buffer), resolves URIs itself, checks every index against the vertex
//! count, and walks the node tree with a visited set (a cycle is an error, not a stack overflow).
//! Every failure is an [`Error`] naming the file and the glTF path of the field; nothing here
//! panics on untrusted bytes (`mutated_glb_bytes_never_panic` fuzzes this).
//!
//! `KHR_draco_mesh_compression` primitives are decoded by [`super::draco`] (see there for how a
//! panicking decoder is contained); their accessors give type and count but no bytes.
//!
//! Layout: this file walks the default scene and merges primitives ([`read_gltf`]); each
//! primitive's path is [`attributes`] (`read_attributes`: per-vertex data from accessors or a
//! Draco stream) → [`indices`] (`read_indices`: as written and checked; `to_triangle_list`:
//! strips and fans to lists) → [`world`] (`to_world`: node transform in f64, winding under
//! mirrors) → appended to the merged mesh. Around it: [`validation`] (pre-checks and the
//! `gltf` crate's errors in Kiln's words), [`buffers`] (buffer and image URIs), [`accessors`]
//! (the accessor checks that keep the crate's readers from panicking) and [`materials`]
//! (materials, textures, images).

mod accessors;
mod attributes;
mod buffers;
mod indices;
mod materials;
mod validation;
mod world;

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;

use gltf::mesh::Mode;
use gltf::{Document, Semantic};

use super::material::Material;
use super::meshopt_read;
use super::{EmbeddedImage, Mesh, MissingTexture};
use crate::{Error, Result};
use attributes::Attributes;
use indices::to_triangle_list;
use world::{IDENTITY, mat_from_cols, mat_mul, origin_for, to_world};

pub(crate) use indices::strip_to_list;
pub use materials::{EXT_TEXTURE_WEBP, KHR_TEXTURE_BASISU};
pub(crate) use world::RECENTRE_FROM_M;

/// Read the default scene of a glTF/GLB file as one triangle mesh.
///
/// Merges every triangle primitive reached from the default scene (or the first scene when no
/// default is set) into one [`Mesh`], with each node's world transform applied to positions
/// (metres, glTF Y-up) and its inverse transpose to normals (renormalised). A mirroring transform
/// (negative determinant) flips the triangle winding so front faces stay counter-clockwise.
///
/// Precision: node transforms (`matrix`, or translation/rotation/scale) are read from the JSON
/// text in f64 and composed in f64. When the first primitive's world translation is ≥ 1024 m on
/// some axis (an ECEF or projected placement), [`Mesh::origin_m`] is that translation rounded to
/// whole metres and positions are stored relative to it (world − origin in f64, then f32), so an
/// ECEF-placed mesh keeps the precision of its vertex data instead of f32's 0.25 m spacing at
/// 4,000 km; otherwise the origin is 0.
///
/// Normals: a primitive without a usable `NORMAL` gets generated smooth normals with creases
/// kept (see [`super::generate_missing_normals`]; one info line), where glTF clients would draw
/// flat facets; other primitives keep theirs.
///
/// Materials: every primitive keeps its material, converted in full (see
/// [`super::Material`]: PBR metallic-roughness factors and maps, normal/occlusion/emissive maps,
/// texCoord sets 0 and 1, `KHR_texture_transform`, samplers, `alphaMode`/`alphaCutoff`,
/// `doubleSided`, `KHR_materials_emissive_strength`, `KHR_materials_unlit`, other
/// `KHR_materials_*` as JSON with their textures resolved); identical materials share one entry.
/// `TEXCOORD_1` is read for primitives whose material samples set 1, `COLOR_0` (VEC3/VEC4, float
/// or normalized) for every primitive that has it; primitives without UVs or colours read the glTF
/// defaults (`[0, 0]`, opaque white) when others have them.
///
/// Primitives compressed with `KHR_draco_mesh_compression` are decoded (POSITION, NORMAL,
/// TEXCOORD_0 and TEXCOORD_1 from the Draco stream; attributes the extension does not list are read
/// from their accessors as usual). The decoded index count must equal the indices accessor's
/// `count`. The decoded vertex count may differ from the POSITION accessor's `count` (with a
/// warning): Draco decoders may split vertices differently from the encoder that wrote the count
/// (e.g. `chess-board.glb` mesh 5: 5,456 decoded vertices, accessor count 5,452, identical
/// triangles).
///
/// `TRIANGLE_STRIP` and `TRIANGLE_FAN` primitives (modes 5 and 6, indexed or not) become triangle
/// lists with the winding glTF 2.0 §3.7.2.1 defines (see [`strip_to_list`],
/// [`indices::fan_to_list`]).
///
/// Missing image files do not fail the read: every `images[].uri` that names an absent file is
/// listed in one warning (see [`super::warn_missing_textures`]) and the material keeps its factors
/// without the texture.
///
/// Not guaranteed: attributes other than POSITION, NORMAL, TEXCOORD_0/1 and COLOR_0 are dropped
/// (joints, weights, morph targets; `TANGENT` with one warning per file naming the primitives,
/// since viewers then compute MikkTSpace tangents as glTF 2.0 §3.7.2.1 asks); textures sampling
/// sets ≥ 2 and material extensions that are not `KHR_materials_*` are dropped with a warning; Draco
/// `COLOR_0` is not decoded (warned); point and line primitives are skipped with a warning;
/// WebP images (`EXT_texture_webp`, preferred over a texture's core fallback source) are decoded
/// and kept as lossless PNG; KTX2 images (`KHR_texture_basisu`, used when the texture has no core
/// source) are kept as they are, once their base level transcodes from ETC1S or UASTC;
/// other image types are dropped with a warning, their materials keeping their factors. A POSITION accessor without the schema-required
/// `min`/`max` is tolerated (with a warning) since the bounds are recomputed anyway. Accessors
/// without `bufferView` read as zeros where used and are ignored where not (glTF 2.0 §3.6.2.1);
/// sparse accessors are read (§3.6.2.3).
///
/// * `path` — a `.gltf` or `.glb` file; relative URIs resolve against its directory.
///
/// # Errors
/// * [`Error::NotFound`] — `path`, or a buffer file its URIs name (the error's path is that file).
/// * [`Error::Corrupt`] — not JSON / not a GLB, truncated GLB chunks, a buffer shorter than its
///   `byteLength`, an accessor range outside its buffer view, a node cycle, a Draco stream that
///   does not decode (names the primitive and buffer view).
/// * [`Error::Invalid`] — schema failures (field path from the `gltf` crate), an index ≥ the
///   primitive's vertex count (names mesh, primitive, element and value), a non-finite position
///   (names the accessor and element), a TRIANGLES index count that is not a multiple of 3, a strip
///   or fan of fewer than 3 indices.
/// * [`Error::Unsupported`] — required extensions other than those [`validation::READ_HERE`]
///   names, accessor types outside glTF 2.0 and `KHR_mesh_quantization`, non-file URI schemes.
/// * [`Error::Empty`] — no scene, or no triangles in the default scene.
///
/// # Panics
/// Never on file content.
pub fn read_gltf(path: &Path) -> Result<Mesh> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    // Parse once without validation, run our pre-check on the very `Root` the crate will validate,
    // then validate (see `check_position_accessor_indices` for why the order matters).
    let raw = gltf::Gltf::from_slice_without_validation(&bytes)
        .map_err(|e| validation::convert_gltf_error(path, &[], e))?;
    let blob = raw.blob;
    let mut json = raw.document.into_json();
    validation::check_position_accessor_indices(path, &json)?;
    let required = json.extensions_required.clone();
    // Supported here, though not by the `gltf` crate's validation (which rejects every required
    // extension it does not implement itself).
    json.extensions_required
        .retain(|e| !validation::READ_HERE.contains(&e.as_str()));
    let document = match gltf::Document::from_json(json.clone()) {
        Ok(d) => d,
        // Exporters often omit POSITION min/max (required by the schema, and impossible to write
        // when a coordinate is ±Inf). Tolerate exactly that: every other reference was validated,
        // and our own checks below catch non-finite positions with a precise message.
        // Accessors without bufferView are valid glTF (zeros, or Draco data: the extension
        // forbids a view when only compressed data is stored); the crate reports them missing.
        Err(gltf::Error::Validation(errors))
            if errors
                .iter()
                .all(|(p, e)| validation::is_tolerated(p.as_str(), e)) =>
        {
            if errors
                .iter()
                .any(|(p, e)| validation::is_missing_position_bounds(p.as_str(), e))
            {
                tracing::warn!(
                    file = %path.display(),
                    "POSITION accessor without min/max; bounds are recomputed"
                );
            }
            gltf::Document::from_json_without_validation(json)
        }
        Err(e) => return Err(validation::convert_gltf_error(path, &required, e)),
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let node_matrices = world::node_matrices_f64(&bytes, document.nodes().len());
    let mut buffers = buffers::load_buffers(path, base, &document, blob)?;
    meshopt_read::decode_views(path, document.as_json(), &mut buffers)?;
    let mut builder = Builder::new(path, base, &document, &buffers);
    builder.node_matrices = node_matrices;
    builder.walk_default_scene()?;
    builder.finish()
}

/// Accumulates primitives into one mesh while walking the scene.
struct Builder<'a> {
    path: &'a Path,
    base: &'a Path,
    document: &'a Document,
    buffers: &'a [Vec<u8>],
    /// Relative to `origin_m` (decided by the first primitive, see [`origin_for`]).
    positions: Vec<[f32; 3]>,
    /// `None` until the first primitive is added.
    origin_m: Option<[f64; 3]>,
    /// Local matrix of every node in f64 from the JSON text (`None` entries, or an empty list,
    /// fall back to the `gltf` crate's f32 values).
    node_matrices: Vec<Option<[f64; 16]>>,
    /// `[V, 3]`; zero where the primitive had no usable NORMAL (`normal_authored` false).
    normals: Vec<[f32; 3]>,
    normal_authored: Vec<bool>,
    /// Primitives whose TANGENT was not kept (one warning per file names them).
    dropped_tangents: Vec<String>,
    /// TEXCOORD_0 / TEXCOORD_1 / COLOR_0: `None` until a primitive has them, then back-filled
    /// with the glTF defaults for the vertices of primitives without them.
    uvs: Option<Vec<[f32; 2]>>,
    uvs1: Option<Vec<[f32; 2]>>,
    colors: Option<Vec<[f32; 4]>>,
    indices: Vec<u32>,
    triangle_materials: Vec<u32>,
    primitives: usize,
    /// glTF material index (`None` = the default material) → index into `materials`.
    material_slots: std::collections::HashMap<Option<usize>, u32>,
    materials: Vec<Material>,
    /// glTF image index → index into `images` (`None`: missing or not PNG/JPEG).
    image_slots: std::collections::HashMap<usize, Option<usize>>,
    images: Vec<EmbeddedImage>,
    /// Image files named but absent (filled before the walk, see [`Self::missing_images`]).
    missing: Vec<(usize, MissingTexture)>,
}

impl<'a> Builder<'a> {
    /// A builder with nothing gathered yet.
    fn new(path: &'a Path, base: &'a Path, document: &'a Document, buffers: &'a [Vec<u8>]) -> Self {
        Self {
            path,
            base,
            document,
            buffers,
            positions: Vec::new(),
            origin_m: None,
            node_matrices: Vec::new(),
            normals: Vec::new(),
            normal_authored: Vec::new(),
            dropped_tangents: Vec::new(),
            uvs: None,
            uvs1: None,
            colors: None,
            indices: Vec::new(),
            triangle_materials: Vec::new(),
            primitives: 0,
            material_slots: Default::default(),
            materials: Vec::new(),
            image_slots: Default::default(),
            images: Vec::new(),
            missing: Vec::new(),
        }
    }

    fn doc(&self) -> &'a Document {
        self.document
    }

    fn walk_default_scene(&mut self) -> Result<()> {
        self.missing = self.missing_images();
        let document = self.doc();
        let scene = document
            .default_scene()
            .or_else(|| document.scenes().next())
            .ok_or_else(|| Error::Empty {
                path: self.path.to_path_buf(),
                what: "scenes",
                reason: "the file has no scene; add a scene listing the root nodes".into(),
            })?;
        let mut visited = vec![false; document.nodes().len()];
        let mut stack: Vec<(gltf::Node<'a>, [f64; 16])> =
            scene.nodes().map(|n| (n, IDENTITY)).collect();
        while let Some((node, parent)) = stack.pop() {
            if std::mem::replace(&mut visited[node.index()], true) {
                return Err(Error::Corrupt {
                    path: self.path.to_path_buf(),
                    location: format!("nodes[{}]", node.index()),
                    what: "node reached twice from the scene (a cycle or a node with two parents)"
                        .into(),
                });
            }
            let local = self
                .node_matrices
                .get(node.index())
                .copied()
                .flatten()
                .unwrap_or_else(|| mat_from_cols(&node.transform().matrix()));
            let world = mat_mul(&parent, &local);
            if let Some(mesh) = node.mesh() {
                for primitive in mesh.primitives() {
                    self.add_primitive(&mesh, &primitive, &world)?;
                }
            }
            stack.extend(node.children().map(|c| (c, world)));
        }
        Ok(())
    }

    /// Add one primitive of `mesh`, placed by the world matrix `world`, to the merged mesh:
    /// [`Self::read_attributes`] → [`Self::read_indices`] → [`to_triangle_list`] →
    /// [`Self::append`] (which applies [`to_world`]). Points and lines are skipped with a
    /// warning, a primitive that draws no triangle adds nothing.
    ///
    /// # Errors
    /// As the steps, each naming the file and the primitive's glTF path.
    fn add_primitive(
        &mut self,
        mesh: &gltf::Mesh<'a>,
        primitive: &gltf::Primitive<'a>,
        world: &[f64; 16],
    ) -> Result<()> {
        let field = format!("meshes[{}].primitives[{}]", mesh.index(), primitive.index());
        let mode = primitive.mode();
        if !matches!(
            mode,
            Mode::Triangles | Mode::TriangleStrip | Mode::TriangleFan
        ) {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: mode {mode:?} draws points or lines, not triangles; primitive skipped"
            );
            return Ok(());
        }
        let material_slot = self.material_slot(primitive.material().index())?;
        let wants_uv1 = self.materials[material_slot as usize].uses_tex_coord(1);
        let draco = self.decode_draco(primitive, &field)?;
        let is_draco = draco.is_some();
        let attributes = self.read_attributes(primitive, &field, draco.as_ref(), wants_uv1)?;
        let vertex_count = attributes.positions.len();
        let indices = self.read_indices(primitive, &field, mode, draco, vertex_count)?;
        let triangles = to_triangle_list(indices, mode, is_draco);
        if triangles.is_empty() {
            return Ok(());
        }
        self.append(
            primitive,
            &field,
            world,
            attributes,
            triangles,
            material_slot,
        )
    }

    /// Append one primitive's vertices and triangles (indices into `attributes`), moved into the
    /// world frame by [`to_world`] (relative to the mesh origin, which the first primitive
    /// decides: [`origin_for`]); attributes the primitive lacks get the glTF defaults where
    /// others have them.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the merged mesh would hold 2³² vertices or more.
    fn append(
        &mut self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        world: &[f64; 16],
        attributes: Attributes,
        triangles: Vec<u32>,
        material_slot: u32,
    ) -> Result<()> {
        let vertex_count = attributes.positions.len();
        let base = self.positions.len() as u64;
        if base + vertex_count as u64 > u64::from(u32::MAX) {
            return Err(Error::Unsupported {
                path: self.path.to_path_buf(),
                field: field.to_string(),
                found: format!("more than {} vertices in total", u32::MAX),
                supported: "meshes with < 2^32 vertices".into(),
            });
        }
        let origin = *self.origin_m.get_or_insert_with(|| origin_for(world));
        let moved = to_world(
            &attributes.positions,
            attributes.normals.as_deref(),
            triangles,
            world,
            origin,
        );
        self.positions.extend(moved.positions);
        let authored = moved.normals.is_some();
        match moved.normals {
            Some(n) => self.normals.extend(n),
            None => self
                .normals
                .extend(std::iter::repeat_n([0.0; 3], vertex_count)),
        }
        self.normal_authored
            .extend(std::iter::repeat_n(authored, vertex_count));
        if primitive.get(&Semantic::Tangents).is_some() {
            self.dropped_tangents.push(field.to_string());
        }
        let base_len = base as usize;
        let uvs = attributes.uvs;
        append_or_default(&mut self.uvs, base_len, vertex_count, uvs, [0.0; 2]);
        let uvs1 = attributes.uvs1;
        append_or_default(&mut self.uvs1, base_len, vertex_count, uvs1, [0.0; 2]);
        let colors = attributes.colors;
        append_or_default(&mut self.colors, base_len, vertex_count, colors, [1.0; 4]);
        self.indices
            .extend(moved.triangles.iter().map(|&i| i + base as u32));
        self.triangle_materials.extend(std::iter::repeat_n(
            material_slot,
            moved.triangles.len() / 3,
        ));
        self.primitives += 1;
        Ok(())
    }

    fn finish(self) -> Result<Mesh> {
        if self.indices.is_empty() {
            return Err(Error::Empty {
                path: self.path.to_path_buf(),
                what: "triangles",
                reason: "the default scene has no TRIANGLES primitive with indices or vertices"
                    .into(),
            });
        }
        super::warn_missing_textures(
            self.path,
            &self
                .missing
                .iter()
                .map(|(_, m)| m.clone())
                .collect::<Vec<_>>(),
        );
        self.warn_dropped_tangents();
        let mut mesh = Mesh {
            origin_m: self.origin_m.unwrap_or([0.0; 3]),
            positions: self.positions,
            normals: Some(self.normals),
            uvs: self.uvs,
            uvs1: self.uvs1,
            colors: self.colors,
            indices: self.indices,
            triangle_materials: self.triangle_materials,
            materials: self.materials,
            images: self.images,
        };
        super::fill_missing_normals(self.path, &mut mesh, Some(&self.normal_authored));
        Ok(mesh)
    }

    /// One warning naming the primitives whose `TANGENT` is not kept (the tiles carry no
    /// tangents). glTF 2.0 §3.7.2.1: "When tangents are not specified, client implementations
    /// SHOULD calculate tangents using default MikkTSpace algorithms with the specified vertex
    /// positions, normals, and texture coordinates associated with the normal texture", which is
    /// what CesiumJS and three.js do for normal-mapped materials.
    fn warn_dropped_tangents(&self) {
        let Some(first) = self.dropped_tangents.first() else {
            return;
        };
        tracing::warn!(
            file = %self.path.display(),
            "TANGENT of {} primitive(s) ({first}{}) is not kept; viewers compute tangents \
             (MikkTSpace, as glTF 2.0 §3.7.2.1 asks) for normal maps, which matches the source \
             where its exporter used MikkTSpace (Blender, Substance, gltfpack do)",
            self.dropped_tangents.len(),
            if self.dropped_tangents.len() > 1 { ", …" } else { "" }
        );
    }
}

/// Append `count` values of one primitive's attribute to `slot`, which holds `base` values of the
/// earlier primitives: the primitive's own values, or `default` when it has none; the first
/// primitive that has the attribute back-fills `default` for the earlier ones.
fn append_or_default<T: Copy>(
    slot: &mut Option<Vec<T>>,
    base: usize,
    count: usize,
    values: Option<Vec<T>>,
    default: T,
) {
    match (slot.as_mut(), values) {
        (Some(all), Some(v)) => all.extend(v),
        (Some(all), None) => all.extend(std::iter::repeat_n(default, count)),
        (None, Some(v)) => {
            let mut all = vec![default; base];
            all.extend(v);
            *slot = Some(all);
        }
        (None, None) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::material::AlphaMode;

    /// `shared/datasets` next to the checkout, or `$KILN_DATASETS` (ARCHITECTURE.md §datasets).
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

    #[test]
    fn avocado_reads_with_triangles_equal_to_index_accessor_count() {
        let path = dataset("mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf");
        let mesh = read_gltf(&path).unwrap();
        let doc = gltf::Gltf::open(&path).unwrap();
        let idx_count: usize = doc
            .meshes()
            .flat_map(|m| m.primitives())
            .map(|p| p.indices().unwrap().count())
            .sum();
        assert_eq!(mesh.triangle_count(), idx_count / 3);
        assert!(mesh.positions.iter().flatten().all(|c| c.is_finite()));
        assert!(
            mesh.indices
                .iter()
                .all(|&i| (i as usize) < mesh.positions.len())
        );
        assert_eq!(
            mesh.normals.as_ref().map(Vec::len),
            Some(mesh.positions.len())
        );
        assert_eq!(mesh.uvs.as_ref().map(Vec::len), Some(mesh.positions.len()));
        let tex = mesh
            .base_color_image(0)
            .expect("Avocado has a base-colour texture");
        assert_eq!(tex.mime, "image/png");
        let (min, max) = mesh.aabb().unwrap();
        // The Avocado is about 6 cm tall (metres, Y up).
        assert!(
            (0.04..0.08).contains(&(max[1] - min[1])),
            "height {}",
            max[1] - min[1]
        );
    }

    #[test]
    fn carbon_sphere_draco_reads_with_index_accessor_triangle_count_and_14m_extent() {
        // KHR_draco_mesh_compression, 3 primitives; 215,579 triangles (PROVENANCE.md, measured with
        // glTF-Transform + draco3dgltf) = Σ indices-accessor count / 3.
        let path = dataset("mesh-playcanvas-glb/carbon-sphere.glb");
        let t = std::time::Instant::now();
        let (mesh, warned) = crate::splats::domain::tests::warnings(|| read_gltf(&path));
        let mesh = mesh.unwrap();
        // Draco accessors have no bufferView by design: the decoded normals are kept, with no
        // "reads as zeros" warning (they were once regenerated, which changed every tile).
        assert!(
            !warned.iter().any(|w| w.contains("bufferView")),
            "{warned:?}"
        );
        eprintln!(
            "carbon-sphere.glb read (Draco decode included) in {:?}",
            t.elapsed()
        );
        let (json, _) = glb_parts(&std::fs::read(&path).unwrap());
        let from_accessors: u64 = json["meshes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["primitives"].as_array().unwrap())
            .map(|p| {
                json["accessors"][p["indices"].as_u64().unwrap() as usize]["count"]
                    .as_u64()
                    .unwrap()
                    / 3
            })
            .sum();
        assert_eq!(from_accessors, 215_579);
        assert_eq!(mesh.triangle_count(), 215_579);
        assert!(mesh.positions.iter().flatten().all(|c| c.is_finite()));
        assert!(
            mesh.indices
                .iter()
                .all(|&i| (i as usize) < mesh.positions.len())
        );
        assert_eq!(
            mesh.normals.as_ref().map(Vec::len),
            Some(mesh.positions.len())
        );
        assert_eq!(mesh.uvs.as_ref().map(Vec::len), Some(mesh.positions.len()));
        // A sphere of radius ~50 units under the root node's scale 0.13987: ~14 m across.
        let (min, max) = mesh.aabb().unwrap();
        for axis in 0..3 {
            let extent = max[axis] - min[axis];
            assert!((12.0..16.0).contains(&extent), "axis {axis}: {extent} m");
        }
    }

    #[test]
    fn chess_board_draco_reads_with_index_accessor_triangle_count() {
        // 8 Draco primitives, with TANGENT and KHR_materials_clearcoat (not read); 178,848
        // triangles (PROVENANCE.md). Mesh 5 decodes to 4 more vertices than its accessor count
        // (see `read_gltf`): a warning, not an error.
        let path = dataset("mesh-playcanvas-glb/chess-board.glb");
        let mesh = read_gltf(&path).unwrap();
        assert_eq!(mesh.triangle_count(), 178_848);
        assert!(mesh.positions.iter().flatten().all(|c| c.is_finite()));
        assert!(
            mesh.indices
                .iter()
                .all(|&i| (i as usize) < mesh.positions.len())
        );
        assert_eq!(
            mesh.normals.as_ref().map(Vec::len),
            Some(mesh.positions.len())
        );
        assert!(mesh.base_color_image(0).is_some());
    }

    /// `(JSON, BIN chunk)` of a GLB.
    fn glb_parts(bytes: &[u8]) -> (serde_json::Value, Vec<u8>) {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let json_len = u32_at(12);
        let json = serde_json::from_slice(&bytes[20..20 + json_len]).unwrap();
        let bin_len = u32_at(20 + json_len);
        let bin = bytes[28 + json_len..28 + json_len + bin_len].to_vec();
        (json, bin)
    }

    /// The Avocado written as gltfpack writes meshes (`KHR_mesh_quantization` +
    /// `EXT_meshopt_compression` with a fallback buffer): POSITION as u16 under a node
    /// translation and scale, NORMAL as i8 with the OCTAHEDRAL filter; primitive 0 has float UVs
    /// under the EXPONENTIAL filter and TRIANGLES-coded indices, primitive 1 normalized-u16 UVs and
    /// INDICES-coded ones. Both read back as the float source within the quantization steps.
    /// `(glb, quantization step in metres)`.
    fn meshopt_avocado(src: &Mesh) -> (Vec<u8>, f32) {
        let (min, max) = src.aabb().unwrap();
        let (min, max) = (min.map(|v| v as f32), max.map(|v| v as f32));
        let step = (0..3).map(|a| max[a] - min[a]).fold(0.0f32, f32::max) / 65535.0;
        let pos: Vec<[u16; 4]> = src
            .positions
            .iter()
            .map(|p| {
                let q = |a: usize| ((p[a] - min[a]) / step).round().clamp(0.0, 65535.0) as u16;
                [q(0), q(1), q(2), 0]
            })
            .collect();
        let normals: Vec<[f32; 4]> = src
            .normals
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| [n[0], n[1], n[2], 0.0])
            .collect();
        let oct: Vec<[i8; 4]> = meshopt::encode_filter_oct(&normals, 8);
        let uvs = src.uvs.as_ref().unwrap();
        let uv_exp = meshopt::encode_filter_exp::<2>(uvs, 24, meshopt::EncodeExpMode::Separate);
        let uv_u16: Vec<[u16; 2]> = uvs
            .iter()
            .map(|t| t.map(|c| (c.clamp(0.0, 1.0) * 65535.0).round() as u16))
            .collect();
        let n = src.positions.len();
        let tri = meshopt::encode_index_buffer(&src.indices, n).unwrap();
        let seq = meshopt::encode_index_sequence(&src.indices, n).unwrap();
        let streams: [(Vec<u8>, usize, usize, &str, &str); 6] = [
            (
                meshopt::encode_vertex_buffer(&pos).unwrap(),
                8,
                n,
                "ATTRIBUTES",
                "NONE",
            ),
            (
                meshopt::encode_vertex_buffer(&oct).unwrap(),
                4,
                n,
                "ATTRIBUTES",
                "OCTAHEDRAL",
            ),
            (
                meshopt::encode_vertex_buffer(&uv_exp).unwrap(),
                8,
                n,
                "ATTRIBUTES",
                "EXPONENTIAL",
            ),
            (
                meshopt::encode_vertex_buffer(&uv_u16).unwrap(),
                4,
                n,
                "ATTRIBUTES",
                "NONE",
            ),
            (tri, 4, src.indices.len(), "TRIANGLES", "NONE"),
            (seq, 4, src.indices.len(), "INDICES", "NONE"),
        ];
        let (mut bin, mut fallback, mut views) = (Vec::new(), 0usize, Vec::new());
        for (bytes, stride, count, mode, filter) in &streams {
            views.push(serde_json::json!({
                "buffer": 1, "byteOffset": fallback, "byteLength": stride * count,
                "extensions": {"EXT_meshopt_compression": {
                    "buffer": 0, "byteOffset": bin.len(), "byteLength": bytes.len(),
                    "byteStride": stride, "count": count, "mode": mode, "filter": filter}}
            }));
            if *mode == "ATTRIBUTES" {
                views.last_mut().unwrap()["byteStride"] = serde_json::json!(stride);
            }
            bin.extend_from_slice(bytes);
            bin.resize(bin.len().next_multiple_of(4), 0);
            fallback += stride * count;
        }
        let accessor = |view: usize, ct: u32, ty: &str, normalized: bool, count: usize| {
            serde_json::json!({"bufferView": view, "componentType": ct, "type": ty,
                               "normalized": normalized, "count": count})
        };
        let mut position = accessor(0, 5123, "VEC3", false, n);
        position["min"] = serde_json::json!([0, 0, 0]);
        position["max"] = serde_json::json!(pos.iter().fold([0u16; 3], |m, p| [
            m[0].max(p[0]),
            m[1].max(p[1]),
            m[2].max(p[2])
        ]));
        let json = serde_json::json!({
            "asset": {"version": "2.0"},
            "extensionsUsed": ["KHR_mesh_quantization", "EXT_meshopt_compression"],
            "extensionsRequired": ["KHR_mesh_quantization", "EXT_meshopt_compression"],
            "buffers": [{"byteLength": bin.len()},
                        {"byteLength": fallback,
                         "extensions": {"EXT_meshopt_compression": {"fallback": true}}}],
            "bufferViews": views,
            "accessors": [position,
                          accessor(1, 5120, "VEC3", true, n),
                          accessor(2, 5126, "VEC2", false, n),
                          accessor(3, 5123, "VEC2", true, n),
                          accessor(4, 5125, "SCALAR", false, src.indices.len()),
                          accessor(5, 5125, "SCALAR", false, src.indices.len())],
            "meshes": [{"primitives": [
                {"attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 2}, "indices": 4},
                {"attributes": {"POSITION": 0, "NORMAL": 1, "TEXCOORD_0": 3}, "indices": 5}]}],
            "nodes": [{"mesh": 0, "translation": min, "scale": [step, step, step]}],
            "scenes": [{"nodes": [0]}], "scene": 0
        });
        (glb_bytes(&json, &bin), step)
    }

    #[test]
    fn meshopt_compressed_quantized_glb_reads_like_its_float_source() {
        let src = read_gltf(&dataset(
            "mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf",
        ))
        .unwrap();
        let (glb, step) = meshopt_avocado(&src);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("avocado.meshopt.glb");
        std::fs::write(&path, &glb).unwrap();
        let got = read_gltf(&path).unwrap();
        let n = src.positions.len();
        // Two primitives over the same vertices: each reads its own copy of them.
        assert_eq!(got.positions.len(), 2 * n);
        assert_eq!(got.triangle_count(), 2 * src.triangle_count());
        let (normals, uvs) = (got.normals.as_ref().unwrap(), got.uvs.as_ref().unwrap());
        let (src_normals, src_uvs) = (src.normals.as_ref().unwrap(), src.uvs.as_ref().unwrap());
        for copy in 0..2 {
            for i in 0..n {
                let j = copy * n + i;
                for a in 0..3 {
                    let d = (got.positions[j][a] - src.positions[i][a]).abs();
                    // Half a step of rounding, plus f32 rounding of the dequantization.
                    assert!(
                        d <= 0.5 * step + 1e-6,
                        "vertex {i} axis {a}: off by {d} (step {step})"
                    );
                }
                let dot: f32 = (0..3).map(|a| normals[j][a] * src_normals[i][a]).sum();
                // 8-bit octahedral encoding: within about 1° (cos 1° = 0.99985).
                assert!(dot > 0.9995, "normal {i}: dot {dot}");
                // EXPONENTIAL with 24-bit mantissas is near-exact; u16 is 1/65535 a step.
                let tol = if copy == 0 {
                    1e-6
                } else {
                    0.5 / 65535.0 + 1e-7
                };
                for a in 0..2 {
                    let d = (uvs[j][a] - src_uvs[i][a]).abs();
                    assert!(d <= tol, "uv {i} of primitive {copy}: off by {d}");
                }
            }
            // The TRIANGLES codec may rotate a triangle's corners (winding kept); INDICES keeps
            // them as they were.
            let offset = (copy * n) as u32;
            let tris = &got.indices[copy * src.indices.len()..(copy + 1) * src.indices.len()];
            for (t, (g, s)) in tris.chunks(3).zip(src.indices.chunks(3)).enumerate() {
                let s = [s[0] + offset, s[1] + offset, s[2] + offset];
                let rotations = [[s[0], s[1], s[2]], [s[1], s[2], s[0]], [s[2], s[0], s[1]]];
                let ok = if copy == 0 {
                    rotations.contains(&[g[0], g[1], g[2]])
                } else {
                    g == s
                };
                assert!(ok, "triangle {t} of primitive {copy}: {g:?}, source {s:?}");
            }
        }

        // A damaged stream is an error naming the file and the view, not garbage or a panic.
        let (mut json, mut bin) = glb_parts(&glb);
        let at = json["bufferViews"][1]["extensions"]["EXT_meshopt_compression"]["byteOffset"]
            .as_u64()
            .unwrap() as usize;
        bin[at..at + 64].fill(0xff);
        std::fs::write(&path, glb_bytes(&json, &bin)).unwrap();
        let err = read_gltf(&path).unwrap_err().to_string();
        assert!(
            err.contains("avocado.meshopt.glb")
                && err.contains("bufferViews[1]")
                && err.contains("damaged or truncated"),
            "{err}"
        );
        // QUATERNION takes 8-byte elements; the normals are 4.
        json["bufferViews"][1]["extensions"]["EXT_meshopt_compression"]["filter"] =
            serde_json::json!("QUATERNION");
        std::fs::write(&path, glb_bytes(&json, &bin)).unwrap();
        let err = read_gltf(&path).unwrap_err().to_string();
        assert!(
            err.contains("bufferViews[1]") && err.contains("byteStride"),
            "{err}"
        );
        // A download cut short says so, in words.
        std::fs::write(&path, &glb[..glb.len() * 2 / 3]).unwrap();
        let err = read_gltf(&path).unwrap_err().to_string();
        assert!(
            err.contains("truncated") && !err.contains("length_read"),
            "{err}"
        );
    }

    pub(super) fn glb_bytes(json: &serde_json::Value, bin: &[u8]) -> Vec<u8> {
        let mut j = serde_json::to_vec(json).unwrap();
        j.resize(j.len().next_multiple_of(4), b' ');
        let mut b = bin.to_vec();
        b.resize(b.len().next_multiple_of(4), 0);
        let mut out = Vec::new();
        out.extend_from_slice(b"glTF");
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&((28 + j.len() + b.len()) as u32).to_le_bytes());
        out.extend_from_slice(&(j.len() as u32).to_le_bytes());
        out.extend_from_slice(b"JSON");
        out.extend_from_slice(&j);
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b"BIN\0");
        out.extend_from_slice(&b);
        out
    }

    /// Byte range of the Draco stream of `meshes[mesh].primitives[0]` inside the BIN chunk.
    fn draco_range(json: &serde_json::Value, mesh: usize) -> std::ops::Range<usize> {
        let ext =
            &json["meshes"][mesh]["primitives"][0]["extensions"]["KHR_draco_mesh_compression"];
        let view = &json["bufferViews"][ext["bufferView"].as_u64().unwrap() as usize];
        let start = view["byteOffset"].as_u64().unwrap_or(0) as usize;
        start..start + view["byteLength"].as_u64().unwrap() as usize
    }

    /// chess-board.glb mesh 4 (930 vertices, 1,342 triangles) alone in a minimal GLB: a small
    /// Draco fixture for mutation tests. Returns its JSON and BIN chunk (the Draco stream).
    fn small_draco_glb() -> (serde_json::Value, Vec<u8>) {
        let (json, bin) =
            glb_parts(&std::fs::read(dataset("mesh-playcanvas-glb/chess-board.glb")).unwrap());
        let prim = &json["meshes"][4]["primitives"][0];
        let stream = bin[draco_range(&json, 4)].to_vec();
        let mut accessors = Vec::new();
        let mut attributes = serde_json::Map::new();
        for (semantic, acc) in prim["attributes"].as_object().unwrap() {
            attributes.insert(semantic.clone(), accessors.len().into());
            accessors.push(json["accessors"][acc.as_u64().unwrap() as usize].clone());
        }
        accessors.push(json["accessors"][prim["indices"].as_u64().unwrap() as usize].clone());
        let mut ext = prim["extensions"]["KHR_draco_mesh_compression"].clone();
        ext["bufferView"] = 0.into();
        let small = serde_json::json!({
            "asset": {"version": "2.0"},
            "extensionsUsed": ["KHR_draco_mesh_compression"],
            "extensionsRequired": ["KHR_draco_mesh_compression"],
            "scene": 0,
            "scenes": [{"nodes": [0]}],
            "nodes": [{"mesh": 0}],
            "meshes": [{"primitives": [{
                "attributes": attributes,
                "indices": accessors.len() - 1,
                "mode": 4,
                "extensions": {"KHR_draco_mesh_compression": ext},
            }]}],
            "accessors": accessors,
            "bufferViews": [{"buffer": 0, "byteLength": stream.len()}],
            "buffers": [{"byteLength": stream.len()}],
        });
        (small, stream)
    }

    #[test]
    fn corrupted_draco_buffer_is_a_corrupt_error_naming_file_and_primitive() {
        let src = std::fs::read(dataset("mesh-playcanvas-glb/carbon-sphere.glb")).unwrap();
        let (json, bin) = glb_parts(&src);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("corrupt-sphere.glb");
        // Broken magic ("DRACO") of mesh 1's stream.
        let mut b = bin.clone();
        let range = draco_range(&json, 1);
        b[range.start..range.start + 5].copy_from_slice(b"XXXXX");
        std::fs::write(&p, glb_bytes(&json, &b)).unwrap();
        let err = read_gltf(&p).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Corrupt { .. }), "{msg}");
        assert!(
            msg.contains("corrupt-sphere.glb") && msg.contains("meshes[1].primitives[0]"),
            "{msg}"
        );
        // Everything after the header of mesh 2's stream overwritten with noise.
        let mut b = bin.clone();
        let range = draco_range(&json, 2);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for byte in &mut b[range.start + 16..range.end] {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        std::fs::write(&p, glb_bytes(&json, &b)).unwrap();
        let err = read_gltf(&p).unwrap_err();
        assert!(err.to_string().contains("meshes[2].primitives[0]"), "{err}");
    }

    #[test]
    fn mutated_draco_streams_never_panic() {
        // Byte flips inside the Draco stream reach the decoder; it may return garbage geometry
        // (then our index/finiteness checks apply), an error, or panic (caught: `draco` module).
        let (json, stream) = small_draco_glb();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("small-draco.glb");
        std::fs::write(&p, glb_bytes(&json, &stream)).unwrap();
        let clean = read_gltf(&p).unwrap();
        assert_eq!(clean.triangle_count(), 1_342);
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut errors, mut caught_panics) = (0, 0);
        for _ in 0..400 {
            let mut bytes = stream.clone();
            for _ in 0..1 + next() % 6 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = if next() % 2 == 0 {
                    bytes[at] ^ (1 << (next() % 8))
                } else {
                    next() as u8
                };
            }
            std::fs::write(&p, glb_bytes(&json, &bytes)).unwrap();
            match read_gltf(&p) {
                Ok(m) => {
                    assert!(m.indices.iter().all(|&i| (i as usize) < m.positions.len()));
                    assert!(m.positions.iter().flatten().all(|c| c.is_finite()));
                }
                Err(e) => {
                    errors += 1;
                    caught_panics += usize::from(e.to_string().contains("panicked"));
                }
            }
        }
        eprintln!("400 mutations: {errors} errors, {caught_panics} of them caught decoder panics");
        assert!(errors > 0);
    }

    #[test]
    fn draco_index_count_mismatch_is_an_error_naming_the_accessor() {
        let (mut json, stream) = small_draco_glb();
        let last = json["accessors"].as_array().unwrap().len() - 1;
        json["accessors"][last]["count"] = 3.into();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad-count.glb");
        std::fs::write(&p, glb_bytes(&json, &stream)).unwrap();
        let err = read_gltf(&p).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Invalid { .. }), "{msg}");
        assert!(
            msg.contains(&format!(
                "accessors[{last}] (indices of meshes[0].primitives[0])"
            )),
            "{msg}"
        );
        assert!(msg.contains("4026"), "{msg}");
    }

    #[test]
    fn other_required_extensions_are_still_unsupported() {
        let (mut json, stream) = small_draco_glb();
        // The Khronos successor of EXT_meshopt_compression (newer codec versions): not read.
        json["extensionsRequired"] =
            serde_json::json!(["KHR_draco_mesh_compression", "KHR_meshopt_compression"]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("meshopt.glb");
        std::fs::write(&p, glb_bytes(&json, &stream)).unwrap();
        let err = read_gltf(&p).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Unsupported { .. }), "{msg}");
        assert!(msg.contains("KHR_meshopt_compression"), "{msg}");
        // The message lists what is read instead.
        assert!(
            msg.contains("EXT_meshopt_compression") && msg.contains("KHR_mesh_quantization"),
            "{msg}"
        );
    }

    /// A 4 × 3 RGBA pattern, every texel distinct (alpha too).
    fn pattern() -> Vec<u8> {
        (0..12u8)
            .flat_map(|i| [i * 20, 255 - i * 20, i * 7 + 3, 255 - i * 5])
            .collect()
    }

    /// A one-triangle GLB whose only texture is WebP-only (`EXT_texture_webp`, no core source,
    /// extension required, as glTF-Transform's `webp` command writes it) with `pattern()`
    /// encoded losslessly.
    fn webp_only_glb() -> Vec<u8> {
        let webp = webp::Encoder::from_rgba(&pattern(), 4, 3).encode_lossless();
        let positions: [[f32; 3]; 3] = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]];
        let uvs: [[f32; 2]; 3] = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]];
        let mut bin: Vec<u8> = bytemuck::cast_slice(&positions).to_vec();
        bin.extend_from_slice(bytemuck::cast_slice(&uvs));
        let image_at = bin.len();
        bin.extend_from_slice(&webp);
        let json = serde_json::json!({
            "asset": {"version": "2.0"},
            "extensionsUsed": ["EXT_texture_webp"],
            "extensionsRequired": ["EXT_texture_webp"],
            "scene": 0, "scenes": [{"nodes": [0]}], "nodes": [{"mesh": 0}],
            "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "TEXCOORD_0": 1},
                "material": 0}]}],
            "materials": [{"pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}],
            "textures": [{"extensions": {"EXT_texture_webp": {"source": 0}}}],
            "images": [{"bufferView": 2, "mimeType": "image/webp"}],
            "accessors": [
                {"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                 "min": [0.0, 0.0, 0.0], "max": [1.0, 1.0, 0.0]},
                {"bufferView": 1, "componentType": 5126, "count": 3, "type": "VEC2"},
            ],
            "bufferViews": [
                {"buffer": 0, "byteOffset": 0, "byteLength": 36},
                {"buffer": 0, "byteOffset": 36, "byteLength": 24},
                {"buffer": 0, "byteOffset": image_at, "byteLength": webp.len()},
            ],
            "buffers": [{"byteLength": bin.len().next_multiple_of(4)}],
        });
        glb_bytes(&json, &bin)
    }

    #[test]
    fn webp_only_texture_is_kept_as_a_lossless_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("webp.glb");
        std::fs::write(&p, webp_only_glb()).unwrap();
        let mesh = read_gltf(&p).unwrap();
        assert_eq!(mesh.images.len(), 1);
        assert_eq!(mesh.images[0].mime, "image/png");
        let base = mesh.materials[0].base_color_texture.as_ref().unwrap();
        assert_eq!(base.image, 0);
        let decoded = image::load_from_memory(&mesh.images[0].bytes)
            .unwrap()
            .to_rgba8();
        assert_eq!(decoded.dimensions(), (4, 3));
        assert_eq!(decoded.into_raw(), pattern());
    }

    #[test]
    fn corrupt_webp_is_an_error_naming_the_image() {
        let mut glb = webp_only_glb();
        // Damage the WebP payload (after its 12-byte RIFF header, inside the BIN chunk's tail).
        let n = glb.len();
        for b in &mut glb[n - 24..n - 8] {
            *b ^= 0x5A;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad-webp.glb");
        std::fs::write(&p, glb).unwrap();
        let e = read_gltf(&p).unwrap_err().to_string();
        assert!(e.contains("bad-webp.glb") && e.contains("images[0]"), "{e}");
    }

    /// The pattern `tests/fixtures/mesh/ktx2/make_ktx2.mjs` encoded: 64 × 48, r = 4x, g = 5y,
    /// b = 224 or 128 on a checker of 8-texel squares.
    fn ktx2_pattern() -> image::RgbImage {
        image::RgbImage::from_fn(64, 48, |x, y| {
            let b = if ((x >> 3) + (y >> 3)) % 2 == 1 {
                224
            } else {
                128
            };
            image::Rgb([(4 * x) as u8, (5 * y) as u8, b])
        })
    }

    fn rgb_psnr(a: &image::RgbImage, b: &image::RgbImage) -> f64 {
        let se: f64 = a
            .as_raw()
            .iter()
            .zip(b.as_raw())
            .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
            .sum();
        10.0 * (255.0f64.powi(2) * a.as_raw().len() as f64 / se.max(1e-9)).log10()
    }

    /// `tests/fixtures/mesh/ktx2/quad_basisu.gltf`: a quad whose base colour (UASTC + zstd) and
    /// emissive (ETC1S) textures are KTX2 only (`KHR_texture_basisu`, required). Both are read
    /// and kept as KTX2 (byte for byte, issue 44 rule 4), decode at their size, and look like the
    /// pattern they were encoded from: UASTC 51.3 dB, ETC1S 34.8 dB (measured; bars 40 and 30 dB: UASTC is the
    /// near-lossless mode, ETC1S the small one). Swapped channels, a wrong size or a blank
    /// decode fail them.
    #[test]
    fn ktx2_basisu_textures_are_kept_as_ktx2_and_decode_to_their_pattern() {
        let mesh = read_gltf(&super::super::fixture("ktx2/quad_basisu.gltf")).unwrap();
        assert_eq!(mesh.triangle_count(), 2);
        let m = &mesh.materials[0];
        for (name, texture, bar_db) in [
            ("UASTC base colour", &m.base_color_texture, 40.0),
            ("ETC1S emissive", &m.emissive_texture, 30.0),
        ] {
            let image = &mesh.images[texture.as_ref().unwrap().image];
            assert_eq!(image.mime, "image/ktx2", "{name}");
            let decoded = crate::mesh::decode_texture(&image.bytes).unwrap().to_rgb8();
            assert_eq!(decoded.dimensions(), (64, 48), "{name}");
            let psnr = rgb_psnr(&ktx2_pattern(), &decoded);
            assert!(psnr >= bar_db, "{name}: {psnr:.1} dB");
        }
    }

    /// A damaged KTX2 is an error naming the file and the image, not a dropped texture.
    #[test]
    fn corrupt_ktx2_is_an_error_naming_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let src = super::super::fixture("ktx2");
        for f in ["quad_basisu.gltf", "pattern-etc1s.ktx2"] {
            std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
        }
        let mut uastc = std::fs::read(src.join("pattern-uastc.ktx2")).unwrap();
        uastc.truncate(100);
        std::fs::write(dir.path().join("pattern-uastc.ktx2"), uastc).unwrap();
        let e = read_gltf(&dir.path().join("quad_basisu.gltf"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("quad_basisu.gltf") && e.contains("images[0]") && e.contains("KTX2"),
            "{e}"
        );
    }

    #[test]
    fn glb_with_embedded_texture_reads() {
        let mesh = read_gltf(&dataset(
            "mesh-gltf-edgecases-assimp/BoxTextured-glTF-Binary/BoxTextured.glb",
        ))
        .unwrap();
        assert_eq!(mesh.triangle_count(), 12);
        assert!(mesh.base_color_image(0).is_some());
    }

    #[test]
    fn instanced_meshes_count_once_per_node() {
        // 2CylinderEngine: 82 nodes, 29 meshes of 75,730 triangles (PROVENANCE.md); several meshes
        // are placed by more than one node, and each placement is baked into the merged mesh.
        let path =
            dataset("mesh-gltf-edgecases-assimp/2CylinderEngine-glTF-Binary/2CylinderEngine.glb");
        let mesh = read_gltf(&path).unwrap();
        let doc = gltf::Gltf::open(&path).unwrap();
        fn tris(node: gltf::Node<'_>) -> usize {
            let own: usize = node.mesh().map_or(0, |m| {
                m.primitives()
                    .map(|p| p.indices().unwrap().count() / 3)
                    .sum()
            });
            own + node.children().map(tris).sum::<usize>()
        }
        let expected: usize = doc.default_scene().unwrap().nodes().map(tris).sum();
        assert!(expected > 75_730);
        assert_eq!(mesh.triangle_count(), expected);
        assert!(mesh.positions.iter().flatten().all(|c| c.is_finite()));
    }

    #[test]
    fn index_out_of_range_is_an_error_naming_index_and_primitive() {
        for name in ["IndexOutOfRange", "AllIndicesOutOfRange"] {
            let err = read_gltf(&dataset(&format!(
                "mesh-gltf-edgecases-assimp/IndexOutOfRange/{name}.gltf"
            )))
            .unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::Invalid { .. }), "{msg}");
            assert!(msg.contains("meshes[0].primitives[0].indices"), "{msg}");
            assert!(
                msg.contains("IndexOutOfRange") && msg.contains("vertex count"),
                "{msg}"
            );
            assert!(msg.contains(&format!("{name}.gltf")), "{msg}");
        }
    }

    #[test]
    fn missing_bin_is_not_found_naming_the_bin() {
        let err = read_gltf(&dataset(
            "mesh-gltf-edgecases-assimp/MissingBin/BoxTextured.gltf",
        ))
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::NotFound { .. }), "{msg}");
        assert!(msg.contains(".bin"), "{msg}");
    }

    #[test]
    fn infinite_positions_are_rejected_naming_the_accessor() {
        let err = read_gltf(&dataset(
            "mesh-gltf-edgecases-assimp/BoxWithInfinites-glTF-Binary/BoxWithInfinites.glb",
        ))
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("accessors[") && msg.contains("POSITION"),
            "{msg}"
        );
    }

    #[test]
    fn malformed_samples_error_without_panicking() {
        for rel in [
            "BoxBadNormals-glTF-Binary/BoxBadNormals.glb",
            "IncorrectVertexArrays/Cube.gltf",
            "RecursiveNodes/RecursiveNodes.gltf",
            "SchemaFailures/sceneWrongType.gltf",
            "wrongTypes/badArray.gltf",
            "wrongTypes/badExtension.gltf",
            "wrongTypes/badNumber.gltf",
            "wrongTypes/badObject.gltf",
            "wrongTypes/badString.gltf",
            "wrongTypes/badUint.gltf",
            "draco/2CylinderEngine.gltf",
        ] {
            // Either a clean mesh or an error; the property is "no panic, no hang".
            match read_gltf(&dataset(&format!("mesh-gltf-edgecases-assimp/{rel}"))) {
                Ok(mesh) => assert!(
                    mesh.indices
                        .iter()
                        .all(|&i| (i as usize) < mesh.positions.len()),
                    "{rel}"
                ),
                Err(e) => {
                    eprintln!("{rel}: {e}");
                    assert!(!e.to_string().is_empty(), "{rel}");
                }
            }
        }
    }

    #[test]
    fn recursive_nodes_are_an_error_not_a_stack_overflow() {
        let err = read_gltf(&dataset(
            "mesh-gltf-edgecases-assimp/RecursiveNodes/RecursiveNodes.gltf",
        ))
        .unwrap_err();
        assert!(!err.to_string().is_empty());
    }

    #[test]
    fn random_bytes_glb_is_a_corrupt_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut bytes: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let p = dir.path().join("random.glb");
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(read_gltf(&p).unwrap_err(), Error::Corrupt { .. }));
        // Right magic, truncated chunks.
        bytes[..4].copy_from_slice(b"glTF");
        bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let err = read_gltf(&p).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        // Empty file.
        std::fs::write(&p, b"").unwrap();
        assert!(read_gltf(&p).is_err());
    }

    #[test]
    fn mutated_glb_bytes_never_panic() {
        // A valid textured GLB, and a meshopt-compressed, quantized one (every codec and filter).
        let src = std::fs::read(dataset(
            "mesh-gltf-edgecases-assimp/BoxTextured-glTF-Binary/BoxTextured.glb",
        ))
        .unwrap();
        assert_mutations_read_or_fail(&src);
        let avocado = read_gltf(&dataset(
            "mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf",
        ))
        .unwrap();
        assert_mutations_read_or_fail(&meshopt_avocado(&avocado).0);
    }

    /// Deterministic byte mutations of the valid GLB `src` (JSON and BIN chunks alike): every
    /// outcome must be a mesh that keeps the invariants or an error, never a panic.
    fn assert_mutations_read_or_fail(src: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mutated.glb");
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut errors = 0;
        for _ in 0..300 {
            let mut bytes = src.to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = match next() % 3 {
                    0 => bytes[at] ^ (1 << (next() % 8)),
                    1 => b"0123456789-e.[]{}\",:"[(next() % 18) as usize],
                    _ => 0xFF,
                };
            }
            std::fs::write(&p, &bytes).unwrap();
            match read_gltf(&p) {
                Ok(m) => assert!(m.indices.iter().all(|&i| (i as usize) < m.positions.len())),
                Err(_) => errors += 1,
            }
        }
        assert!(errors > 0);
    }

    #[test]
    fn missing_file_is_not_found() {
        let err = read_gltf(Path::new("/nonexistent/kiln/mesh.glb")).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }));
    }

    /// `tests/fixtures/mesh/strip_fan.gltf`: an indexed TRIANGLE_STRIP over a 2 × 1 m zigzag
    /// (4 triangles, 2 m²) and a non-indexed TRIANGLE_FAN of 5 vertices translated by +4 m in x
    /// (3 triangles, 1.5 m²): 7 triangles, every one counter-clockwise seen from +z.
    #[test]
    fn strip_and_fan_primitives_become_counter_clockwise_triangle_lists() {
        let mesh = read_gltf(&super::super::fixture("strip_fan.gltf")).unwrap();
        assert_eq!(mesh.triangle_count(), 7);
        // The scene walk reaches the fan's node first (vertices 0–4), then the strip's (5–10).
        assert_eq!(
            mesh.indices,
            [
                0, 1, 2, 0, 2, 3, 0, 3, 4, 5, 6, 7, 6, 8, 7, 7, 8, 9, 8, 10, 9
            ]
        );
        for t in 0..7 {
            let n = super::super::geometry::cross(&mesh, t);
            assert!(n[2] > 0.0, "triangle {t} is clockwise: {n:?}");
        }
        assert!((super::super::geometry::area(&mesh) - 3.5).abs() < 1e-6);
        assert_eq!(
            mesh.positions[0],
            [4.0, 0.0, 0.0],
            "fan node translation applied"
        );
    }

    /// `tests/fixtures/mesh/missing_textures/two_missing.gltf`: images[0] and images[1] name files
    /// that are not there (images[2] is a data URI). The read succeeds, both are found at once,
    /// and the first material keeps its factor without a texture.
    #[test]
    fn missing_images_are_all_found_and_the_material_keeps_its_factor() {
        let path = super::super::fixture("missing_textures/two_missing.gltf");
        let mesh = read_gltf(&path).unwrap();
        assert_eq!(mesh.triangle_count(), 2);
        assert_eq!(mesh.materials[0].base_color_factor, [0.2, 0.4, 0.6, 1.0]);
        assert!(mesh.base_color_image(0).is_none());
        let raw = gltf::Gltf::open(&path).unwrap();
        let base = path.parent().unwrap();
        let builder = Builder::new(&path, base, &raw.document, &[]);
        let missing = builder.missing_images();
        let found: Vec<(usize, &str)> = missing
            .iter()
            .map(|(i, m)| (*i, m.as_written.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (0, "textures/albedo%20missing.png"),
                (1, "textures/bumpy_albedo.jpg")
            ]
        );
        assert_eq!(
            missing[0].1.resolved,
            base.join("textures/albedo missing.png")
        );
    }

    /// `tests/fixtures/mesh/multi_material` (values from its generator): three materials, each
    /// field as written, primitives in order.
    #[test]
    fn multi_material_fixture_reads_every_material_field() {
        let mesh = read_gltf(&super::super::fixture("multi_material/multi_material.gltf")).unwrap();
        assert_eq!(mesh.triangle_count(), 72);
        assert_eq!(mesh.materials.len(), 3);
        let per_row: Vec<u32> = (0..3).flat_map(|r| std::iter::repeat_n(r, 24)).collect();
        assert_eq!(mesh.triangle_materials, per_row);
        let [textured, emissive, glass] = [0, 1, 2].map(|i| &mesh.materials[i]);
        let base = textured.base_color_texture.as_ref().unwrap();
        // The `gltf` crate fills the extension's defaults (offset 0, rotation 0) in.
        assert_eq!(
            base.transform,
            Some(serde_json::json!({"offset": [0.0, 0.0], "rotation": 0.0, "scale": [2.0, 2.0]}))
        );
        assert_eq!(base.sampler.wrap_s, 33071);
        assert_eq!(base.sampler.mag_filter, Some(9728));
        assert_eq!(textured.normal_scale, 0.5);
        assert_eq!(
            (textured.metallic_factor, textured.roughness_factor),
            (0.0, 0.75)
        );
        assert_eq!(mesh.images.len(), 2);
        assert_eq!(emissive.emissive_factor, [1.0, 0.5, 0.0]);
        assert_eq!(emissive.emissive_strength, Some(4.0));
        assert_eq!(glass.alpha_mode, AlphaMode::Blend);
        assert!(glass.double_sided);
        assert_eq!(glass.base_color_factor, [0.2, 0.6, 0.9, 0.4]);
    }

    /// chess-board.glb (PROVENANCE: Draco, KHR_materials_clearcoat, 8 textures): 3 materials
    /// with base colour, metallic-roughness, normal and occlusion maps where the JSON names them,
    /// and Black_Piece's clearcoat carried through.
    #[test]
    fn chess_board_keeps_every_map_and_the_clearcoat_extension() {
        let mesh = read_gltf(&dataset("mesh-playcanvas-glb/chess-board.glb")).unwrap();
        let names: Vec<&str> = mesh
            .materials
            .iter()
            .map(|m| m.name.as_deref().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let by_name = |n: &str| {
            mesh.materials
                .iter()
                .find(|m| m.name.as_deref() == Some(n))
                .unwrap()
        };
        let black = by_name("Black_Piece");
        assert!(black.base_color_texture.is_some() && black.metallic_roughness_texture.is_some());
        assert!(black.normal_texture.is_some() && black.occlusion_texture.is_some());
        assert!(black.double_sided);
        assert_eq!(
            black.other_extensions["KHR_materials_clearcoat"]["clearcoatFactor"],
            1.0
        );
        let white = by_name("White_Piece");
        assert!(white.normal_texture.is_none() && white.metallic_roughness_texture.is_some());
        assert_eq!(mesh.images.len(), 8);
    }
}
