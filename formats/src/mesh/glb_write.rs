//! Write a [`Mesh`] as one self-contained GLB (glTF 2.0 binary): one node, one mesh, one triangle
//! primitive per material, every material in full with its images embedded in the BIN chunk.
//!
//! Source: glTF 2.0 specification §4.4 (GLB file format: 12-byte header, JSON chunk padded with
//! spaces, BIN chunk padded with zeros, 4-byte alignment), §3.6.2 (accessor alignment, `min`/`max`
//! required on POSITION), §3.7.2.1 (NORMAL must be unit length), §3.8 (materials). The JSON is
//! built with `serde_json` and framed by `gltf::binary::Glb`; it is checked by the Khronos
//! glTF-Validator in tests (`.ci/validate_gltf.mjs`).

use std::borrow::Cow;

use serde_json::{Value, json};

use super::{ImageRef, Material, MaterialTable, Mesh, effective_tex_coord};
use crate::{Error, Result};

/// glTF `bufferView.target` for vertex attributes (ARRAY_BUFFER).
const TARGET_ARRAY_BUFFER: u32 = 34962;
/// glTF `bufferView.target` for indices (ELEMENT_ARRAY_BUFFER).
const TARGET_ELEMENT_ARRAY_BUFFER: u32 = 34963;
/// glTF component types.
const FLOAT: u32 = 5126;
const UNSIGNED_SHORT: u32 = 5123;
const UNSIGNED_INT: u32 = 5125;

/// Encode `mesh` as GLB bytes.
///
/// One node (translated by [`Mesh::origin_m`] when it is not 0, the f64 value written in full),
/// one glTF mesh with one triangle primitive per used material (in material order); each primitive has its own compacted vertices (a vertex used by two materials is written twice),
/// so a reader that appends primitive by primitive gets no unused vertices. Per primitive, in the
/// BIN chunk (each part 4-byte aligned): POSITION `[V_p, 3]` f32 (with exact `min` / `max`),
/// NORMAL `[V_p, 3]` f32, TEXCOORD_0 / TEXCOORD_1 `[V_p, 2]` f32 and COLOR_0 `[V_p, 4]` f32 when
/// the mesh has them (TEXCOORD_1 only for materials that sample set 1), indices as u16 when
/// V_p ≤ 65,536 else u32; then every image the materials use, once (bufferView + mimeType; a
/// KTX2 image through `KHR_texture_basisu`, listed as used and required).
/// Materials, textures and samplers are written by [`MaterialTable`] (each distinct texture and
/// sampler once). A texture whose texCoord set the mesh lacks is left out of the written material.
/// Normals that are not unit length are renormalised; zero or non-finite normals become +Y.
///
/// Not guaranteed: byte-identical output across kiln versions (the generator string changes).
///
/// # Errors
/// * [`Error::Empty`] — no triangles.
/// * [`Error::Invalid`] — an index ≥ V, a non-finite position or origin, `indices.len()` not a multiple of 3,
///   attribute arrays whose length differs from V, or broken material invariants (see
///   [`Mesh::check_materials`]). The `path` is `<in-memory mesh>`.
///
/// # Panics
/// Never.
pub fn write_glb(mesh: &Mesh) -> Result<Vec<u8>> {
    write_glb_images(mesh, None)
}

/// [`write_glb`], except that the images are not embedded: image `i` of `mesh` is written as
/// `{"uri": image_uris[i].uri, "mimeType": …}` (a URI relative to the GLB, glTF 2.0 §3.8.4.3),
/// so several GLBs can share one file per image. The caller writes the files.
///
/// # Errors
/// As [`write_glb`]; [`Error::Invalid`] when `image_uris` does not have one entry per
/// `mesh.images` entry.
pub fn write_glb_referencing_images(mesh: &Mesh, image_uris: &[ImageRef]) -> Result<Vec<u8>> {
    if image_uris.len() != mesh.images.len() {
        return Err(Error::Invalid {
            path: IN_MEMORY.into(),
            field: "image_uris".into(),
            expected: format!("one URI per image ({})", mesh.images.len()),
            found: image_uris.len().to_string(),
        });
    }
    write_glb_images(mesh, Some(image_uris))
}

/// [`write_glb`] with images embedded (`None`) or referenced by `image_uris`.
fn write_glb_images(mesh: &Mesh, image_uris: Option<&[ImageRef]>) -> Result<Vec<u8>> {
    check_write_glb_inputs(mesh)?;
    let mut out = Buffers::default();
    let mut table = MaterialTable::default();
    let mut primitives = Vec::new();
    for MaterialGroup {
        material,
        vertices,
        local,
    } in split_by_material(mesh)
    {
        let v = vertices.len();
        let gather = |src: &[[f32; 3]]| -> Vec<[f32; 3]> {
            vertices.iter().map(|&i| src[i as usize]).collect()
        };
        let mut attributes = serde_json::Map::new();
        let positions = gather(&mesh.positions);
        let mut min = [f32::INFINITY; 3];
        let mut max = [f32::NEG_INFINITY; 3];
        for p in &positions {
            for i in 0..3 {
                min[i] = min[i].min(p[i]);
                max[i] = max[i].max(p[i]);
            }
        }
        let a = out.attribute(bytemuck::cast_slice(&positions), v, "VEC3");
        out.accessors[a]["min"] = json!(min);
        out.accessors[a]["max"] = json!(max);
        attributes.insert("POSITION".into(), json!(a));
        if let Some(normals) = &mesh.normals {
            let unit: Vec<[f32; 3]> = gather(normals).iter().map(unit_normal).collect();
            let a = out.attribute(bytemuck::cast_slice(&unit), v, "VEC3");
            attributes.insert("NORMAL".into(), json!(a));
        }
        let m = &mesh.materials[material as usize];
        let mut sets = 0;
        for (set, uvs) in [(0, &mesh.uvs), (1, &mesh.uvs1)] {
            let Some(uvs) = uvs.as_ref().filter(|_| set == 0 || m.uses_tex_coord(1)) else {
                break;
            };
            let t: Vec<[f32; 2]> = vertices.iter().map(|&i| uvs[i as usize]).collect();
            let a = out.attribute(bytemuck::cast_slice(&t), v, "VEC2");
            attributes.insert(format!("TEXCOORD_{set}"), json!(a));
            sets += 1;
        }
        if let Some(colors) = &mesh.colors {
            let c: Vec<[f32; 4]> = vertices.iter().map(|&i| colors[i as usize]).collect();
            let a = out.attribute(bytemuck::cast_slice(&c), v, "VEC4");
            attributes.insert("COLOR_0".into(), json!(a));
        }
        let (index_bytes, component): (Vec<u8>, u32) = if v <= usize::from(u16::MAX) + 1 {
            let narrow: Vec<u16> = local.iter().map(|&i| i as u16).collect();
            (bytemuck::cast_slice(&narrow).to_vec(), UNSIGNED_SHORT)
        } else {
            (bytemuck::cast_slice(&local).to_vec(), UNSIGNED_INT)
        };
        let view = out.view(&index_bytes, Some(TARGET_ELEMENT_ARRAY_BUFFER));
        out.accessors.push(json!({"bufferView": view, "componentType": component, "count": local.len(), "type": "SCALAR"}));
        let written = table.add(&with_tex_coord_sets(m, sets));
        primitives.push(
            json!({"attributes": attributes, "indices": out.accessors.len() - 1,
            "material": written, "mode": 4}),
        );
    }
    let mut images = Vec::new();
    for &i in table.images() {
        let image = &mesh.images[i];
        if let Some(uris) = image_uris {
            images.push(json!({"uri": uris[i].uri, "mimeType": image.mime}));
        } else {
            let view = out.view(&image.bytes, None);
            images.push(json!({"bufferView": view, "mimeType": image.mime}));
        }
    }
    let mut root = json!({
        "asset": {"version": "2.0", "generator": concat!("kiln ", env!("CARGO_PKG_VERSION"))},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [node_json(mesh.origin_m)],
        "meshes": [{"primitives": primitives}],
    });
    table.write_into(&mut root);
    if !images.is_empty() {
        root["images"] = json!(images);
        // KTX2 sources are kept as KTX2 (issue 44 rule 4), which glTF names only through
        // `KHR_texture_basisu`.
        let mimes: Vec<&str> = table
            .images()
            .iter()
            .map(|&i| mesh.images[i].mime.as_str())
            .collect();
        super::tile_glb::sources_through_extensions(&mut root, &mimes);
    }
    let Buffers {
        bin,
        views,
        accessors,
    } = out;
    root["bufferViews"] = json!(views);
    root["accessors"] = json!(accessors);
    root["buffers"] = json!([{"byteLength": bin.len()}]);

    let json_bytes = serde_json::to_vec(&root).map_err(|e| Error::Invalid {
        path: IN_MEMORY.into(),
        field: "glTF JSON".into(),
        expected: "serialisable JSON".into(),
        found: e.to_string(),
    })?;
    let glb = gltf::binary::Glb {
        header: gltf::binary::Header {
            magic: *b"glTF",
            version: 2,
            length: 0,
        },
        json: Cow::Owned(json_bytes),
        bin: Some(Cow::Owned(bin)),
    };
    glb.to_vec().map_err(|e| Error::Invalid {
        path: IN_MEMORY.into(),
        field: "GLB".into(),
        expected: "a GLB under 4 GiB".into(),
        found: e.to_string(),
    })
}

/// The BIN chunk with its bufferViews and accessors, filled in order.
#[derive(Default)]
struct Buffers {
    bin: Vec<u8>,
    views: Vec<Value>,
    accessors: Vec<Value>,
}

impl Buffers {
    /// Append `bytes` (4-byte aligned) as a new bufferView; returns its index.
    fn view(&mut self, bytes: &[u8], target: Option<u32>) -> usize {
        let offset = self.bin.len();
        self.bin.extend_from_slice(bytes);
        while !self.bin.len().is_multiple_of(4) {
            self.bin.push(0);
        }
        let mut view = json!({"buffer": 0, "byteOffset": offset, "byteLength": bytes.len()});
        if let Some(t) = target {
            view["target"] = json!(t);
        }
        self.views.push(view);
        self.views.len() - 1
    }

    /// A float vertex attribute of `count` elements of glTF type `ty`; returns the accessor index.
    fn attribute(&mut self, bytes: &[u8], count: usize, ty: &str) -> usize {
        let view = self.view(bytes, Some(TARGET_ARRAY_BUFFER));
        self.accessors
            .push(json!({"bufferView": view, "componentType": FLOAT, "count": count, "type": ty}));
        self.accessors.len() - 1
    }
}

/// The triangles of one material, over their own vertices (see [`split_by_material`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaterialGroup {
    /// Index into `Mesh::materials`.
    pub material: u32,
    /// The group's distinct vertices, sorted (indices into the mesh).
    pub vertices: Vec<u32>,
    /// `[F_m, 3]` the group's triangles, indices into `vertices`.
    pub local: Vec<u32>,
}

/// One [`MaterialGroup`] per used material, ascending.
pub fn split_by_material(mesh: &Mesh) -> Vec<MaterialGroup> {
    let mut groups: Vec<Vec<u32>> = vec![Vec::new(); mesh.materials.len()];
    for (t, &m) in mesh.triangle_materials.iter().enumerate() {
        groups[m as usize].extend_from_slice(&mesh.indices[3 * t..3 * t + 3]);
    }
    groups
        .into_iter()
        .enumerate()
        .filter(|(_, g)| !g.is_empty())
        .map(|(m, g)| {
            let (vertices, local) = compact(&g);
            MaterialGroup {
                material: m as u32,
                vertices,
                local,
            }
        })
        .collect()
}

/// The distinct vertices of `global` (sorted) and `global` re-indexed into them.
pub fn compact(global: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut vertices = global.to_vec();
    vertices.sort_unstable();
    vertices.dedup();
    let local = global
        .iter()
        .map(|v| vertices.binary_search(v).unwrap_or_default() as u32)
        .collect();
    (vertices, local)
}

/// `m` without the textures that sample a texture-coordinate set ≥ `sets` (the primitive does not
/// carry it; glTF-Validator reports such a reference as an error), extensions naming one dropped.
pub fn with_tex_coord_sets(m: &Material, sets: u32) -> Material {
    if m.textures().all(|t| effective_tex_coord(t) < sets) {
        return m.clone();
    }
    let mut out = m.clone();
    for slot in [
        &mut out.base_color_texture,
        &mut out.metallic_roughness_texture,
        &mut out.normal_texture,
        &mut out.occlusion_texture,
        &mut out.emissive_texture,
    ] {
        if slot
            .as_ref()
            .is_some_and(|t| effective_tex_coord(t) >= sets)
        {
            *slot = None;
        }
    }
    if out
        .extension_textures
        .iter()
        .any(|t| effective_tex_coord(t) >= sets)
    {
        out.other_extensions.clear();
        out.extension_textures.clear();
    }
    out
}

/// The `path` reported for errors about a mesh that is not (yet) a file.
const IN_MEMORY: &str = "<in-memory mesh>";

/// The checks [`write_glb`] runs before encoding anything.
fn check_write_glb_inputs(mesh: &Mesh) -> Result<()> {
    let v = mesh.positions.len();
    let invalid = |field: &str, expected: String, found: String| Error::Invalid {
        path: IN_MEMORY.into(),
        field: field.into(),
        expected,
        found,
    };
    if !mesh.origin_m.iter().all(|c| c.is_finite()) {
        return Err(invalid(
            "origin_m",
            "finite metres".into(),
            format!("{:?}", mesh.origin_m),
        ));
    }
    if mesh.indices.is_empty() {
        return Err(Error::Empty {
            path: IN_MEMORY.into(),
            what: "triangles",
            reason: "the mesh has no indices".into(),
        });
    }
    if !mesh.indices.len().is_multiple_of(3) {
        return Err(invalid(
            "indices",
            "a multiple of 3".into(),
            format!("{} indices", mesh.indices.len()),
        ));
    }
    if let Some((i, &bad)) = mesh
        .indices
        .iter()
        .enumerate()
        .find(|&(_, &x)| x as usize >= v)
    {
        return Err(invalid(
            "indices",
            format!("indices < vertex count {v}"),
            format!("index {bad} at element {i}"),
        ));
    }
    if let Some(i) = mesh
        .positions
        .iter()
        .position(|p| !p.iter().all(|c| c.is_finite()))
    {
        return Err(invalid(
            "positions",
            "finite coordinates".into(),
            format!("{:?} at vertex {i}", mesh.positions[i]),
        ));
    }
    if let Some(n) = mesh.normals.as_ref().filter(|n| n.len() != v) {
        return Err(invalid(
            "normals",
            format!("{v} normals (one per vertex)"),
            format!("{}", n.len()),
        ));
    }
    if let Err((field, problem)) = mesh.check_materials() {
        return Err(invalid(
            &field,
            "the Mesh material invariants".into(),
            problem,
        ));
    }
    if let Some(t) = mesh.uvs.as_ref().filter(|t| t.len() != v) {
        return Err(invalid(
            "uvs",
            format!("{v} UVs (one per vertex)"),
            format!("{}", t.len()),
        ));
    }
    if let Some(i) = mesh
        .uvs
        .iter()
        .flatten()
        .position(|t| !t.iter().all(|c| c.is_finite()))
    {
        return Err(invalid(
            "uvs",
            "finite texture coordinates".into(),
            format!("non-finite at vertex {i}"),
        ));
    }
    Ok(())
}

/// Unit-length normal (validator tolerance is 4e-4 on |n|−1); degenerate ones become +Y.
/// The one node: the mesh, translated by `origin_m` when that is not 0 (f64 in the JSON text, so
/// [`super::read_gltf`] reads the same origin back and the positions relative to it bit for bit).
fn node_json(origin_m: [f64; 3]) -> serde_json::Value {
    if origin_m == [0.0; 3] {
        json!({"mesh": 0})
    } else {
        json!({"mesh": 0, "translation": origin_m})
    }
}

fn unit_normal(n: &[f32; 3]) -> [f32; 3] {
    let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
    if len.is_finite() && len > 1e-12 {
        [n[0] / len, n[1] / len, n[2] / len]
    } else {
        [0.0, 1.0, 0.0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{EmbeddedImage, read_gltf};
    use std::path::{Path, PathBuf};

    fn quad() -> Mesh {
        Mesh {
            origin_m: [0.0; 3],
            positions: vec![
                [0.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [1.0, 0.0, -1.0],
                [0.0, 0.0, -1.0],
            ],
            normals: Some(vec![[0.0, 2.0, 0.0]; 4]),
            uvs: Some(vec![[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]),
            uvs1: None,
            colors: None,
            indices: vec![0, 1, 2, 0, 2, 3],
            triangle_materials: vec![0, 0],
            materials: vec![Material::diffuse([0.5, 0.5, 0.5, 1.0])],
            images: Vec::new(),
        }
    }

    /// Run `.ci/validate_gltf.mjs` on `files`; `None` (with the reason printed) when node or the
    /// validator module is missing locally. Under CI (`CI` set) a missing validator fails the test
    /// (STYLE.md rule 15); `.ci/run` installs it with `npm install -g gltf-validator`.
    pub(crate) fn khronos_validate(files: &[&Path]) -> Option<bool> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/validate_gltf.mjs");
        let skip = |why: String| {
            assert!(
                std::env::var_os("CI").is_none(),
                "Khronos glTF validation unavailable under CI: {why}"
            );
            eprintln!(
                "SKIPPED Khronos glTF validation: {why}; install nodejs + `npm install -g gltf-validator`"
            );
            None
        };
        match std::process::Command::new("node")
            .arg(&script)
            .args(files)
            .output()
        {
            Err(e) => skip(format!("cannot run node ({e})")),
            Ok(o) if o.status.code() == Some(2) => {
                skip(String::from_utf8_lossy(&o.stderr).into_owned())
            }
            Ok(o) => {
                eprintln!("{}", String::from_utf8_lossy(&o.stdout));
                eprintln!("{}", String::from_utf8_lossy(&o.stderr));
                Some(o.status.success())
            }
        }
    }

    fn round_trip(mesh: &Mesh, dir: &Path, name: &str) -> (Mesh, PathBuf) {
        let bytes = write_glb(mesh).unwrap();
        let p = dir.join(name);
        crate::atomic_write::write_atomic(&p, &bytes).unwrap();
        (read_gltf(&p).unwrap(), p)
    }

    /// A mesh placed at an ECEF point keeps its origin and its positions bit for bit through
    /// write and read: the origin is a whole-metre node translation (f64 in the JSON), and the
    /// reader takes a whole-metre translation ≥ 1024 m back as the origin.
    #[test]
    fn an_ecef_origin_round_trips_as_the_node_translation() {
        let mut mesh = quad();
        mesh.origin_m = [4_000_000.0, 3_000_000.0, -3_500_000.0];
        mesh.positions[1] = [0.123_456_7, 1e-4, -2.5];
        let dir = tempfile::tempdir().unwrap();
        let (back, p) = round_trip(&mesh, dir.path(), "ecef.glb");
        assert_eq!(back.origin_m, mesh.origin_m);
        assert_eq!(back.positions, mesh.positions);
        let bytes = std::fs::read(&p).unwrap();
        let n = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let json: serde_json::Value = serde_json::from_slice(&bytes[20..20 + n]).unwrap();
        assert_eq!(
            json["nodes"][0]["translation"],
            serde_json::json!([4_000_000.0, 3_000_000.0, -3_500_000.0])
        );
        mesh.origin_m[0] = f64::NAN;
        assert!(
            write_glb(&mesh)
                .unwrap_err()
                .to_string()
                .contains("origin_m")
        );
    }

    #[test]
    fn written_glb_round_trips_geometry_and_material() {
        let dir = tempfile::tempdir().unwrap();
        let mut mesh = quad();
        mesh.images.push(EmbeddedImage {
            mime: "image/png".into(),
            bytes: tiny_png(),
        });
        mesh.materials[0].base_color_texture = Some(crate::mesh::TextureRef {
            image: 0,
            sampler: crate::mesh::Sampler::default(),
            tex_coord: 0,
            transform: None,
        });
        let (back, p) = round_trip(&mesh, dir.path(), "quad.glb");
        assert_eq!(back.positions, mesh.positions);
        assert_eq!(back.indices, mesh.indices);
        assert_eq!(back.uvs, mesh.uvs);
        assert_eq!(back.normals, Some(vec![[0.0, 1.0, 0.0]; 4]));
        assert_eq!(
            back.materials[0].base_color_factor,
            mesh.materials[0].base_color_factor
        );
        assert_eq!(back.base_color_image(0), mesh.base_color_image(0));
        if let Some(ok) = khronos_validate(&[&p]) {
            assert!(
                ok,
                "Khronos glTF-Validator reported errors for {}",
                p.display()
            );
        }
    }

    /// The KTX2 fixture (UASTC base colour, ETC1S emissive, `KHR_texture_basisu` only) written
    /// again keeps both images byte for byte as `image/ktx2`, named through the extension (used
    /// and required), and validates: mesh.glb and the LOD GLBs keep KTX2 (issue 44 rule 4).
    #[test]
    fn ktx2_images_are_written_through_khr_texture_basisu() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/mesh/ktx2/quad_basisu.gltf");
        let mesh = read_gltf(&src).unwrap();
        assert!(mesh.images.iter().all(|i| i.mime == "image/ktx2"));
        let dir = tempfile::tempdir().unwrap();
        let (back, p) = round_trip(&mesh, dir.path(), "ktx2.glb");
        assert_eq!(back.images, mesh.images);
        let bytes = std::fs::read(&p).unwrap();
        let n = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let json: serde_json::Value = serde_json::from_slice(&bytes[20..20 + n]).unwrap();
        let basisu = serde_json::json!(["KHR_texture_basisu"]);
        assert_eq!(json["extensionsRequired"], basisu);
        for t in json["textures"].as_array().unwrap() {
            assert!(t["source"].is_null(), "{t}");
            assert!(
                t["extensions"]["KHR_texture_basisu"]["source"].is_u64(),
                "{t}"
            );
        }
        if let Some(ok) = khronos_validate(&[&p]) {
            assert!(
                ok,
                "Khronos glTF-Validator reported errors for {}",
                p.display()
            );
        }
    }

    #[test]
    fn avocado_rewritten_as_glb_validates_with_zero_errors() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/datasets/mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf");
        let mesh = read_gltf(&src).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (back, p) = round_trip(&mesh, dir.path(), "avocado.glb");
        assert_eq!(back.triangle_count(), mesh.triangle_count());
        assert_eq!(back.positions, mesh.positions);
        assert!(back.base_color_image(0).is_some());
        if let Some(ok) = khronos_validate(&[&p]) {
            assert!(
                ok,
                "Khronos glTF-Validator reported errors for {}",
                p.display()
            );
        }
    }

    /// Two materials sharing the quad's diagonal: each primitive gets its own copy of the two
    /// shared vertices (4 + 2 = 6 written, 3 per primitive), every material field survives the
    /// round trip, and vertex colours and TEXCOORD_1 (sampled by the second material) come back.
    #[test]
    fn two_materials_round_trip_as_two_primitives_with_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let mut mesh = quad();
        mesh.images.push(EmbeddedImage {
            mime: "image/png".into(),
            bytes: tiny_png(),
        });
        mesh.uvs1 = Some(vec![[0.5, 0.5]; 4]);
        mesh.colors = Some(vec![[1.0, 0.5, 0.25, 1.0]; 4]);
        let tex = |tex_coord| crate::mesh::TextureRef {
            image: 0,
            sampler: crate::mesh::Sampler {
                mag_filter: Some(9728),
                min_filter: None,
                wrap_s: 33071,
                wrap_t: 10497,
            },
            tex_coord,
            transform: None,
        };
        let emissive = Material {
            name: Some("glow".into()),
            emissive_factor: [1.0, 0.5, 0.0],
            emissive_strength: Some(5.0),
            emissive_texture: Some(tex(1)),
            alpha_mode: crate::mesh::AlphaMode::Blend,
            double_sided: true,
            normal_texture: Some(tex(0)),
            normal_scale: 0.25,
            ..Material::default()
        };
        mesh.materials.push(emissive.clone());
        mesh.triangle_materials = vec![0, 1];
        let (back, p) = round_trip(&mesh, dir.path(), "two.glb");
        assert_eq!(back.positions.len(), 6);
        assert_eq!(back.triangle_materials, vec![0, 1]);
        assert_eq!(back.materials.len(), 2);
        assert_eq!(back.materials[0], mesh.materials[0]);
        assert_eq!(back.materials[1], emissive);
        assert_eq!(back.images, mesh.images);
        assert!(back.uvs1.is_some());
        assert_eq!(back.colors, Some(vec![[1.0, 0.5, 0.25, 1.0]; 6]));
        if let Some(ok) = khronos_validate(&[&p]) {
            assert!(
                ok,
                "Khronos glTF-Validator reported errors for {}",
                p.display()
            );
        }
    }

    #[test]
    fn large_meshes_use_u32_indices() {
        let n = 70_000u32;
        let mesh = Mesh {
            origin_m: [0.0; 3],
            positions: (0..n).map(|i| [i as f32, (i % 2) as f32, 0.0]).collect(),
            // Given, so that the reader does not generate (and split) any.
            normals: Some(vec![[0.0, 0.0, 1.0]; n as usize]),
            uvs: None,
            uvs1: None,
            colors: None,
            indices: (0..n - 2).flat_map(|i| [i, i + 1, i + 2]).collect(),
            triangle_materials: vec![0; n as usize - 2],
            materials: vec![Material::default()],
            images: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let (back, _) = round_trip(&mesh, dir.path(), "big.glb");
        assert_eq!(back.indices, mesh.indices);
    }

    #[test]
    fn write_rejects_out_of_range_index_and_nan() {
        let mut m = quad();
        m.indices[4] = 9;
        assert!(matches!(write_glb(&m), Err(Error::Invalid { .. })));
        let mut m = quad();
        m.positions[1][0] = f32::NAN;
        assert!(matches!(write_glb(&m), Err(Error::Invalid { .. })));
        let mut m = quad();
        m.indices.clear();
        assert!(matches!(write_glb(&m), Err(Error::Empty { .. })));
        let mut m = quad();
        m.uvs = Some(vec![[0.0; 2]; 3]);
        assert!(matches!(write_glb(&m), Err(Error::Invalid { .. })));
    }

    /// A valid 1×1 RGBA PNG, encoded with the `image` crate.
    fn tiny_png() -> Vec<u8> {
        let img = image::RgbaImage::from_pixel(1, 1, image::Rgba([200, 100, 50, 255]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }
}
