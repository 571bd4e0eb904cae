//! Write one mesh tile as a compact GLB: `KHR_mesh_quantization` attributes compressed with
//! `EXT_meshopt_compression`, one primitive per material, images referenced by URI instead of embedded.
//!
//! Sources: glTF 2.0 §4.4 (GLB framing), §3.6.2.4 (accessor element alignment: every element
//! starts on a 4-byte boundary, hence the padded `[u16; 4]` / `[i8; 4]` layouts); KHR_mesh_quantization
//! (ratified; POSITION as (normalized) byte/short dequantized by the node transform, NORMAL as
//! normalized byte/short, TEXCOORD as normalized unsigned byte/short; "must be listed in
//! extensionsRequired"); EXT_meshopt_compression (glTF `extensions/2.0/Vendor/EXT_meshopt_compression`:
//! a bufferView extension `{buffer, byteOffset, byteLength, byteStride, count, mode}` pointing at the
//! compressed bytes, while the bufferView itself describes the decoded layout inside a *fallback*
//! buffer; a fallback buffer without `uri` must carry `extensions.EXT_meshopt_compression.fallback
//! = true`, and the extension must then be required; vertex data uses the version 0 attribute
//! codec, stride a multiple of 4, ≤ 256; indices use mode `TRIANGLES`, stride 2 or 4). gltfpack
//! (`gltf/write.cpp`) writes the same two-buffer layout.
//!
//! This crate stays free of native code: the meshopt byte codec is supplied by the caller through
//! [`MeshoptEncoder`] (kiln-pipeline implements it with the `meshopt` crate).

use std::borrow::Cow;

use serde_json::{Value, json};

use super::gltf_read::{EXT_TEXTURE_WEBP, KHR_TEXTURE_BASISU};
use super::{Material, MaterialTable, with_tex_coord_sets};
use crate::{Error, Result};

/// `EXT_meshopt_compression`, the glTF extension name.
pub const EXT_MESHOPT_COMPRESSION: &str = "EXT_meshopt_compression";
/// `KHR_mesh_quantization`, the glTF extension name.
pub const KHR_MESH_QUANTIZATION: &str = "KHR_mesh_quantization";

const TARGET_ARRAY_BUFFER: u32 = 34962;
const TARGET_ELEMENT_ARRAY_BUFFER: u32 = 34963;
const BYTE: u32 = 5120;
const UNSIGNED_SHORT: u32 = 5123;
const UNSIGNED_INT: u32 = 5125;
const FLOAT: u32 = 5126;

/// The meshoptimizer byte codecs used by `EXT_meshopt_compression`.
///
/// Implementations must produce the bitstreams the extension specifies: vertex codec version 0
/// (`meshopt_encodeVertexBufferLevel(.., version = 0)`; meshoptimizer ≥ 0.23 defaults to version
/// 1, which only `KHR_meshopt_compression` allows) and the index codec (`meshopt_encodeIndexBuffer`,
/// versions 0 or 1).
pub trait MeshoptEncoder {
    /// Encode `count` vertices of `stride` bytes each (`data.len() == count · stride`, stride a
    /// multiple of 4 and ≤ 256) with the attribute codec, version 0.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the codec rejects the data (e.g. an unsupported stride).
    fn encode_vertices(&self, data: &[u8], stride: usize) -> Result<Vec<u8>>;
    /// Encode a triangle list (`indices.len()` a multiple of 3, every index < `vertex_count`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the codec rejects the data.
    fn encode_triangles(&self, indices: &[u32], vertex_count: usize) -> Result<Vec<u8>>;
}

/// Texture coordinates of a [`QuantizedMesh`].
#[derive(Debug, Clone, PartialEq)]
pub enum TexCoords {
    /// `[V, 2]` normalized unsigned shorts: uv = value / 65535 (all source UVs in [0, 1]).
    Unorm16(Vec<[u16; 2]>),
    /// `[V, 2]` floats (source UVs outside [0, 1], e.g. repeating textures).
    Float(Vec<[f32; 2]>),
}

impl TexCoords {
    fn len(&self) -> usize {
        match self {
            TexCoords::Unorm16(t) => t.len(),
            TexCoords::Float(t) => t.len(),
        }
    }
}

/// An image stored next to the GLB, referenced by a relative URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// URI relative to the GLB file (e.g. `textures/<blake3>.jpg`), RFC 3986 path characters only.
    pub uri: String,
    /// `image/png` or `image/jpeg`.
    pub mime: String,
}

/// One tile's mesh, already quantized (KHR_mesh_quantization layouts): one primitive per material.
///
/// Position of vertex i of any primitive in the glTF frame (metres, Y-up) = `translation_m +
/// step_m · positions[i][0..3]`: the node transform a client applies. With `step_m` a power of two
/// and `translation_m` an integer multiple of it that is < 2^24 steps from 0, that sum is exact in
/// f32, so two tiles that store the same lattice point draw bit-identical vertices.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedMesh {
    /// Lattice step, metres (the node's uniform `scale`); finite and > 0.
    pub step_m: f64,
    /// Node translation, metres, glTF frame.
    pub translation_m: [f64; 3],
    /// The primitives, drawn in order (≥ 1).
    pub primitives: Vec<QuantizedPrimitive>,
    /// The tile's materials; each texture's `image` indexes `images`.
    pub materials: Vec<Material>,
    /// The images the materials use, stored next to the GLB.
    pub images: Vec<ImageRef>,
}

/// One triangle primitive of a [`QuantizedMesh`], with its own vertices.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedPrimitive {
    /// `[V, 4]` lattice coordinates relative to the tile's offset; element 3 is padding (0).
    pub positions: Vec<[u16; 4]>,
    /// `[V, 4]` unit normals as normalized signed bytes (value / 127); element 3 is padding.
    pub normals: Option<Vec<[i8; 4]>>,
    /// `[V, 2]` texture coordinates, set 0.
    pub uvs: Option<TexCoords>,
    /// `[V, 2]` texture coordinates, set 1 (only with `uvs`).
    pub uvs1: Option<TexCoords>,
    /// `[V, 4]` linear RGBA vertex colours as normalized unsigned shorts (value / 65535).
    pub colors: Option<Vec<[u16; 4]>>,
    /// `[F, 3]` flattened, counter-clockwise; every index < V.
    pub indices: Vec<u32>,
    /// Index into [`QuantizedMesh::materials`].
    pub material: usize,
}

/// Quantize a normal to normalized signed bytes (KHR_mesh_quantization: `f = max(c / 127, -1)`),
/// renormalising first; zero or non-finite normals become +Y.
pub fn quantize_normal(n: [f32; 3]) -> [i8; 4] {
    let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
    let n = if len.is_finite() && len > 1e-12 {
        [n[0] / len, n[1] / len, n[2] / len]
    } else {
        [0.0, 1.0, 0.0]
    };
    let q = |c: f32| (c * 127.0).round().clamp(-127.0, 127.0) as i8;
    [q(n[0]), q(n[1]), q(n[2]), 0]
}

/// Encode `mesh` as a GLB with `KHR_mesh_quantization` + `EXT_meshopt_compression` (both listed in
/// `extensionsUsed` and `extensionsRequired`, since no uncompressed fallback is stored).
///
/// Layout: buffer 0 = the GLB BIN chunk holding the compressed streams (each 4-byte aligned);
/// buffer 1 = the fallback buffer (no `uri`, `fallback: true`), in which each bufferView describes
/// its decoded layout. Per primitive: POSITION `[V, 4]` u16 (accessor VEC3, byteStride 8, integer
/// `min`/`max`), NORMAL `[V, 4]` i8 normalized (VEC3, byteStride 4), TEXCOORD_0/1 `[V, 2]` u16
/// normalized or f32, COLOR_0 `[V, 4]` u16 normalized (VEC4), indices u16 when V ≤ 65,536 else u32.
/// One node carries `translation` and uniform `scale` (dequantization) for the one mesh holding
/// every primitive. Materials, textures and samplers are written by [`MaterialTable`]: each
/// distinct texture and sampler once per tile, referenced by every material using it; images by
/// URI (not embedded). Material extensions are added to `extensionsUsed` (not required). A texture
/// whose image is `image/webp` names it through `EXT_texture_webp` (used and required: there is no
/// core fallback image).
///
/// # Errors
/// [`Error::Empty`] — no triangles; [`Error::InvalidInput`] — an index ≥ V, an index count not a
/// multiple of 3, attribute arrays whose length differs from V, a material or image index out of
/// range, or a step / translation that is not finite (step must be > 0).
///
/// # Panics
/// Never.
pub fn write_quantized_glb(mesh: &QuantizedMesh, encoder: &dyn MeshoptEncoder) -> Result<Vec<u8>> {
    check_quantized_mesh(mesh)?;
    let mut buffers = CompressedBuffers::default();
    let mut table = MaterialTable::default();
    let primitives = mesh
        .primitives
        .iter()
        .map(|prim| buffers.primitive(prim, mesh, encoder, &mut table))
        .collect::<Result<Vec<Value>>>()?;
    let root = gltf_document(mesh, primitives, &table, &buffers);
    let json_bytes = serde_json::to_vec(&root).map_err(|e| Error::InvalidInput {
        context: CONTEXT,
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
        bin: Some(Cow::Owned(buffers.bin)),
    };
    glb.to_vec().map_err(|e| Error::InvalidInput {
        context: CONTEXT,
        field: "GLB".into(),
        expected: "a GLB under 4 GiB".into(),
        found: e.to_string(),
    })
}

/// The tile's JSON: asset, the meshopt and quantization extensions (used and required), one
/// node (dequantizing translation and uniform scale) over one mesh of every primitive,
/// materials, textures and images, bufferViews, accessors and the two buffers.
fn gltf_document(
    mesh: &QuantizedMesh,
    primitives: Vec<Value>,
    table: &MaterialTable,
    buffers: &CompressedBuffers,
) -> Value {
    let s = mesh.step_m;
    let mut root = json!({
        "asset": {"version": "2.0", "generator": concat!("kiln ", env!("CARGO_PKG_VERSION"))},
        "extensionsUsed": [EXT_MESHOPT_COMPRESSION, KHR_MESH_QUANTIZATION],
        "extensionsRequired": [EXT_MESHOPT_COMPRESSION, KHR_MESH_QUANTIZATION],
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0, "translation": mesh.translation_m, "scale": [s, s, s]}],
        "meshes": [{"primitives": primitives}],
    });
    table.write_into(&mut root);
    if !table.images().is_empty() {
        root["images"] = table
            .images()
            .iter()
            .map(|&i| json!({"uri": mesh.images[i].uri, "mimeType": mesh.images[i].mime}))
            .collect();
        let mimes: Vec<&str> = table
            .images()
            .iter()
            .map(|&i| mesh.images[i].mime.as_str())
            .collect();
        sources_through_extensions(&mut root, &mimes);
    }
    root["bufferViews"] = json!(buffers.views);
    root["accessors"] = json!(buffers.accessors);
    root["buffers"] = json!([
        {"byteLength": buffers.bin.len()},
        {"byteLength": buffers.fallback_len, "extensions": {EXT_MESHOPT_COMPRESSION: {"fallback": true}}},
    ]);
    root
}

/// The tile's two buffers as they are filled: the BIN chunk of compressed streams, the size of
/// the fallback buffer their decoded layouts take, and the bufferViews and accessors over them.
#[derive(Default)]
struct CompressedBuffers {
    bin: Vec<u8>,
    fallback_len: usize,
    views: Vec<Value>,
    accessors: Vec<Value>,
}

impl CompressedBuffers {
    /// One bufferView: decoded layout (`raw_len` bytes, `stride` each) in the fallback buffer,
    /// the `compressed` bytes (meshopt `mode`) 4-byte aligned in the BIN chunk. Returns its index.
    fn push_view(
        &mut self,
        compressed: Vec<u8>,
        raw_len: usize,
        stride: usize,
        mode: &str,
    ) -> usize {
        let bin = &mut self.bin;
        let offset = bin.len();
        bin.extend_from_slice(&compressed);
        while !bin.len().is_multiple_of(4) {
            bin.push(0);
        }
        let fallback_offset = self.fallback_len;
        self.fallback_len += raw_len.next_multiple_of(4);
        let count = raw_len / stride;
        let mut view = json!({
            "buffer": 1,
            "byteOffset": fallback_offset,
            "byteLength": raw_len,
            "extensions": {EXT_MESHOPT_COMPRESSION: {
                "buffer": 0,
                "byteOffset": offset,
                "byteLength": compressed.len(),
                "byteStride": stride,
                "count": count,
                "mode": mode,
            }},
        });
        if mode == "ATTRIBUTES" {
            view["byteStride"] = json!(stride);
            view["target"] = json!(TARGET_ARRAY_BUFFER);
        } else {
            view["target"] = json!(TARGET_ELEMENT_ARRAY_BUFFER);
        }
        self.views.push(view);
        self.views.len() - 1
    }

    /// A vertex attribute of `count` vertices (`raw`, `stride` bytes each) compressed by
    /// `encoder`, with its `accessor` (component type, type, …); returns the accessor's index.
    fn attribute(
        &mut self,
        encoder: &dyn MeshoptEncoder,
        raw: &[u8],
        stride: usize,
        mut accessor: Value,
        count: usize,
    ) -> Result<usize> {
        let view = self.push_view(
            encoder.encode_vertices(raw, stride)?,
            raw.len(),
            stride,
            "ATTRIBUTES",
        );
        accessor["bufferView"] = json!(view);
        accessor["count"] = json!(count);
        self.accessors.push(accessor);
        Ok(self.accessors.len() - 1)
    }

    /// One primitive: its attributes (POSITION with integer bounds, NORMAL, TEXCOORD_0/1,
    /// COLOR_0) and indices compressed, its material added to `table`; returns its JSON.
    fn primitive(
        &mut self,
        prim: &QuantizedPrimitive,
        mesh: &QuantizedMesh,
        encoder: &dyn MeshoptEncoder,
        table: &mut MaterialTable,
    ) -> Result<Value> {
        let v = prim.positions.len();
        let mut attributes = serde_json::Map::new();
        let mut min = [u16::MAX; 3];
        let mut max = [0u16; 3];
        for p in &prim.positions {
            for k in 0..3 {
                min[k] = min[k].min(p[k]);
                max[k] = max[k].max(p[k]);
            }
        }
        let a = self.attribute(
            encoder,
            bytemuck::cast_slice(&prim.positions),
            8,
            json!({"componentType": UNSIGNED_SHORT, "type": "VEC3", "min": min, "max": max}),
            v,
        )?;
        attributes.insert("POSITION".into(), json!(a));
        if let Some(normals) = &prim.normals {
            let a = self.attribute(
                encoder,
                bytemuck::cast_slice(normals),
                4,
                json!({"componentType": BYTE, "normalized": true, "type": "VEC3"}),
                v,
            )?;
            attributes.insert("NORMAL".into(), json!(a));
        }
        let mut sets = 0;
        for (set, uvs) in [(0, &prim.uvs), (1, &prim.uvs1)] {
            let Some(uvs) = uvs else { break };
            let (raw, stride, component, normalized): (&[u8], usize, u32, bool) = match uvs {
                TexCoords::Unorm16(t) => (bytemuck::cast_slice(t), 4, UNSIGNED_SHORT, true),
                TexCoords::Float(t) => (bytemuck::cast_slice(t), 8, FLOAT, false),
            };
            let mut accessor = json!({"componentType": component, "type": "VEC2"});
            if normalized {
                accessor["normalized"] = json!(true);
            }
            let a = self.attribute(encoder, raw, stride, accessor, v)?;
            attributes.insert(format!("TEXCOORD_{set}"), json!(a));
            sets += 1;
        }
        if let Some(colors) = &prim.colors {
            let a = self.attribute(
                encoder,
                bytemuck::cast_slice(colors),
                8,
                json!({"componentType": UNSIGNED_SHORT, "normalized": true, "type": "VEC4"}),
                v,
            )?;
            attributes.insert("COLOR_0".into(), json!(a));
        }
        let (raw_len, stride, component) = if v <= usize::from(u16::MAX) + 1 {
            (prim.indices.len() * 2, 2, UNSIGNED_SHORT)
        } else {
            (prim.indices.len() * 4, 4, UNSIGNED_INT)
        };
        let view = self.push_view(
            encoder.encode_triangles(&prim.indices, v)?,
            raw_len,
            stride,
            "TRIANGLES",
        );
        self.accessors
            .push(json!({"bufferView": view, "componentType": component,
            "count": prim.indices.len(), "type": "SCALAR"}));
        let material = table.add(&with_tex_coord_sets(&mesh.materials[prim.material], sets));
        Ok(
            json!({"attributes": attributes, "indices": self.accessors.len() - 1,
            "material": material, "mode": 4}),
        )
    }
}

const CONTEXT: &str = "write_quantized_glb";

/// The extension that names images of type `mime` (not a core glTF type), if any.
fn image_extension(mime: &str) -> Option<&'static str> {
    match mime {
        "image/webp" => Some(EXT_TEXTURE_WEBP),
        "image/ktx2" => Some(KHR_TEXTURE_BASISU),
        _ => None,
    }
}

/// Move each texture's `source` to `extensions.<ext>.source` where that image's type (`mimes[image]`)
/// is WebP (`EXT_texture_webp`) or KTX2 (`KHR_texture_basisu`), and list each extension as used and
/// required when any texture uses it (creating those lists where `root` has none).
pub(crate) fn sources_through_extensions(root: &mut Value, mimes: &[&str]) {
    let mut named: Vec<&str> = Vec::new();
    for texture in root["textures"].as_array_mut().into_iter().flatten() {
        let Some(source) = texture["source"].as_u64() else {
            continue;
        };
        let Some(ext) = mimes.get(source as usize).and_then(|m| image_extension(m)) else {
            continue;
        };
        if let Some(t) = texture.as_object_mut() {
            t.remove("source");
            t.insert("extensions".into(), json!({ext: {"source": source}}));
            if !named.contains(&ext) {
                named.push(ext);
            }
        }
    }
    for ext in named {
        for list in ["extensionsUsed", "extensionsRequired"] {
            if root[list].is_null() {
                root[list] = json!([]);
            }
            if let Some(names) = root[list].as_array_mut()
                && !names.contains(&json!(ext))
            {
                names.push(json!(ext));
            }
        }
    }
}

/// The per-primitive checks of [`check_quantized_mesh`], as `(field, expected, found)`.
fn check_primitive(
    prim: &QuantizedPrimitive,
    materials: usize,
) -> std::result::Result<(), (String, String, String)> {
    let v = prim.positions.len();
    let bad =
        |field: &str, expected: String, found: String| Err((field.to_string(), expected, found));
    if prim.indices.is_empty() || !prim.indices.len().is_multiple_of(3) {
        return bad(
            "indices",
            "a non-zero multiple of 3".into(),
            prim.indices.len().to_string(),
        );
    }
    if let Some((i, &x)) = prim
        .indices
        .iter()
        .enumerate()
        .find(|&(_, &x)| x as usize >= v)
    {
        return bad(
            &format!("indices[{i}]"),
            format!("< vertex count {v}"),
            x.to_string(),
        );
    }
    if prim.normals.as_ref().is_some_and(|n| n.len() != v) {
        return bad("normals", format!("{v} entries"), "another count".into());
    }
    for (name, t) in [("uvs", &prim.uvs), ("uvs1", &prim.uvs1)] {
        if let Some(t) = t.as_ref().filter(|t| t.len() != v) {
            return bad(name, format!("{v} entries"), t.len().to_string());
        }
    }
    if prim.uvs1.is_some() && prim.uvs.is_none() {
        return bad("uvs1", "only with uvs (set 0)".into(), "set 1 alone".into());
    }
    if let Some(c) = prim.colors.as_ref().filter(|c| c.len() != v) {
        return bad("colors", format!("{v} entries"), c.len().to_string());
    }
    if prim.material >= materials {
        return bad(
            "material",
            format!("< material count {materials}"),
            prim.material.to_string(),
        );
    }
    Ok(())
}

/// The checks [`write_quantized_glb`] runs before encoding.
fn check_quantized_mesh(mesh: &QuantizedMesh) -> Result<()> {
    let invalid = |field: &str, expected: String, found: String| Error::InvalidInput {
        context: CONTEXT,
        field: field.into(),
        expected,
        found,
    };
    if mesh.primitives.iter().all(|p| p.indices.is_empty()) {
        return Err(Error::Empty {
            path: "<in-memory tile>".into(),
            what: "triangles",
            reason: "the tile has no indices".into(),
        });
    }
    for (i, prim) in mesh.primitives.iter().enumerate() {
        check_primitive(prim, mesh.materials.len()).map_err(|(field, expected, found)| {
            invalid(&format!("primitives[{i}].{field}"), expected, found)
        })?;
    }
    for (i, m) in mesh.materials.iter().enumerate() {
        if let Some(t) = m.textures().find(|t| t.image >= mesh.images.len()) {
            return Err(invalid(
                &format!("materials[{i}] texture image"),
                format!("< image count {}", mesh.images.len()),
                t.image.to_string(),
            ));
        }
    }
    if !(mesh.step_m.is_finite() && mesh.step_m > 0.0) {
        return Err(invalid(
            "step_m",
            "a finite step > 0 m".into(),
            mesh.step_m.to_string(),
        ));
    }
    if !mesh.translation_m.iter().all(|c| c.is_finite()) {
        return Err(invalid(
            "translation_m",
            "finite metres".into(),
            format!("{:?}", mesh.translation_m),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stores bytes unencoded: enough to test the JSON layout without native code.
    struct Identity;
    impl MeshoptEncoder for Identity {
        fn encode_vertices(&self, data: &[u8], _stride: usize) -> Result<Vec<u8>> {
            Ok(data.to_vec())
        }
        fn encode_triangles(&self, indices: &[u32], _vertex_count: usize) -> Result<Vec<u8>> {
            Ok(bytemuck::cast_slice(indices).to_vec())
        }
    }

    fn quad() -> QuantizedMesh {
        QuantizedMesh {
            step_m: 0.25,
            translation_m: [1.0, 2.0, 3.0],
            primitives: vec![QuantizedPrimitive {
                positions: vec![[0, 0, 0, 0], [10, 0, 0, 0], [10, 0, 7, 0], [0, 0, 7, 0]],
                normals: Some(vec![quantize_normal([0.0, 2.0, 0.0]); 4]),
                uvs: Some(TexCoords::Unorm16(vec![
                    [0, 0],
                    [65535, 0],
                    [65535, 65535],
                    [0, 65535],
                ])),
                uvs1: None,
                colors: None,
                indices: vec![0, 1, 2, 0, 2, 3],
                material: 0,
            }],
            materials: vec![Material {
                base_color_texture: Some(crate::mesh::TextureRef {
                    image: 0,
                    sampler: crate::mesh::Sampler::default(),
                    tex_coord: 0,
                    transform: None,
                }),
                ..Material::default()
            }],
            images: vec![ImageRef {
                uri: "textures/abc.png".into(),
                mime: "image/png".into(),
            }],
        }
    }

    /// Two primitives whose materials share one image and sampler: one texture, one sampler and
    /// one image in the tile; the second primitive's COLOR_0 is a normalized VEC4.
    #[test]
    fn two_materials_share_one_texture_entry() {
        let mut m = quad();
        let mut second = m.primitives[0].clone();
        second.material = 1;
        second.colors = Some(vec![[65535, 0, 0, 65535]; 4]);
        m.primitives.push(second);
        let mut emissive = Material {
            emissive_factor: [1.0, 1.0, 1.0],
            ..Material::default()
        };
        emissive.emissive_texture = m.materials[0].base_color_texture.clone();
        m.materials.push(emissive);
        let bytes = write_quantized_glb(&m, &Identity).unwrap();
        let glb = gltf::binary::Glb::from_slice(&bytes).unwrap();
        let json: Value = serde_json::from_slice(&glb.json).unwrap();
        assert_eq!(json["meshes"][0]["primitives"].as_array().unwrap().len(), 2);
        assert_eq!(json["textures"].as_array().unwrap().len(), 1);
        assert_eq!(json["samplers"].as_array().unwrap().len(), 1);
        assert_eq!(json["images"].as_array().unwrap().len(), 1);
        assert_eq!(json["materials"][1]["emissiveTexture"]["index"], 0);
        let color = &json["meshes"][0]["primitives"][1]["attributes"]["COLOR_0"];
        let accessor = &json["accessors"][color.as_u64().unwrap() as usize];
        assert_eq!(accessor["type"], "VEC4");
        assert_eq!(accessor["normalized"], true);
    }

    /// A WebP image is named through `EXT_texture_webp` (no core `source`, which a viewer without
    /// WebP would try to decode), and the extension is used and required; a PNG beside it keeps
    /// its core `source`.
    #[test]
    fn a_webp_texture_is_named_through_ext_texture_webp_and_required() {
        let mut m = quad();
        m.images[0] = ImageRef {
            uri: "textures/abc.webp".into(),
            mime: "image/webp".into(),
        };
        m.images.push(ImageRef {
            uri: "textures/n.png".into(),
            mime: "image/png".into(),
        });
        m.materials[0].normal_texture = Some(crate::mesh::TextureRef {
            image: 1,
            ..m.materials[0].base_color_texture.clone().unwrap()
        });
        let bytes = write_quantized_glb(&m, &Identity).unwrap();
        let glb = gltf::binary::Glb::from_slice(&bytes).unwrap();
        let json: Value = serde_json::from_slice(&glb.json).unwrap();
        let base = &json["textures"]
            [json["materials"][0]["pbrMetallicRoughness"]["baseColorTexture"]["index"]
                .as_u64()
                .unwrap() as usize];
        let webp_image = base["extensions"][EXT_TEXTURE_WEBP]["source"]
            .as_u64()
            .unwrap();
        assert!(base.get("source").is_none(), "{base}");
        assert_eq!(
            json["images"][webp_image as usize]["mimeType"],
            "image/webp"
        );
        let normal = &json["textures"][json["materials"][0]["normalTexture"]["index"]
            .as_u64()
            .unwrap() as usize];
        let png_image = normal["source"].as_u64().unwrap();
        assert_eq!(json["images"][png_image as usize]["mimeType"], "image/png");
        for list in ["extensionsUsed", "extensionsRequired"] {
            let names = json[list].as_array().unwrap();
            assert_eq!(
                names.iter().filter(|n| *n == EXT_TEXTURE_WEBP).count(),
                1,
                "{list}"
            );
        }
        // A tile without WebP images does not mention the extension.
        let plain: Value = serde_json::from_slice(
            &gltf::binary::Glb::from_slice(&write_quantized_glb(&quad(), &Identity).unwrap())
                .unwrap()
                .json,
        )
        .unwrap();
        assert!(!plain.to_string().contains(EXT_TEXTURE_WEBP));
    }

    /// A KTX2 image is named through `KHR_texture_basisu` (no core `source`: PNG/JPEG-only viewers
    /// must refuse the tile rather than fail to decode it), used and required; beside a WebP
    /// image each extension is listed once.
    #[test]
    fn a_ktx2_texture_is_named_through_khr_texture_basisu_and_required() {
        let mut m = quad();
        m.images[0] = ImageRef {
            uri: "textures/abc.ktx2".into(),
            mime: "image/ktx2".into(),
        };
        m.images.push(ImageRef {
            uri: "textures/n.webp".into(),
            mime: "image/webp".into(),
        });
        m.materials[0].normal_texture = Some(crate::mesh::TextureRef {
            image: 1,
            ..m.materials[0].base_color_texture.clone().unwrap()
        });
        let bytes = write_quantized_glb(&m, &Identity).unwrap();
        let json: Value =
            serde_json::from_slice(&gltf::binary::Glb::from_slice(&bytes).unwrap().json).unwrap();
        let texture = |slot: &Value| &json["textures"][slot["index"].as_u64().unwrap() as usize];
        let base = texture(&json["materials"][0]["pbrMetallicRoughness"]["baseColorTexture"]);
        assert!(base.get("source").is_none(), "{base}");
        let ktx2 = base["extensions"][KHR_TEXTURE_BASISU]["source"]
            .as_u64()
            .unwrap();
        assert_eq!(json["images"][ktx2 as usize]["mimeType"], "image/ktx2");
        let normal = texture(&json["materials"][0]["normalTexture"]);
        assert!(
            normal["extensions"][EXT_TEXTURE_WEBP]["source"].is_u64(),
            "{normal}"
        );
        for list in ["extensionsUsed", "extensionsRequired"] {
            let names = json[list].as_array().unwrap();
            for ext in [KHR_TEXTURE_BASISU, EXT_TEXTURE_WEBP] {
                assert_eq!(
                    names.iter().filter(|n| *n == ext).count(),
                    1,
                    "{list} {ext}"
                );
            }
        }
    }

    #[test]
    fn quantized_glb_declares_both_extensions_as_required_and_a_fallback_buffer() {
        let bytes = write_quantized_glb(&quad(), &Identity).unwrap();
        let glb = gltf::binary::Glb::from_slice(&bytes).unwrap();
        let json: Value = serde_json::from_slice(&glb.json).unwrap();
        for list in ["extensionsUsed", "extensionsRequired"] {
            let names: Vec<&str> = json[list]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert!(names.contains(&EXT_MESHOPT_COMPRESSION), "{list}");
            assert!(names.contains(&KHR_MESH_QUANTIZATION), "{list}");
        }
        assert_eq!(
            json["buffers"][1]["extensions"][EXT_MESHOPT_COMPRESSION]["fallback"],
            true
        );
        assert!(json["buffers"][1].get("uri").is_none());
        assert_eq!(json["nodes"][0]["scale"], json!([0.25, 0.25, 0.25]));
        assert_eq!(json["accessors"][0]["max"], json!([10, 0, 7]));
        assert_eq!(json["images"][0]["uri"], "textures/abc.png");
        for view in json["bufferViews"].as_array().unwrap() {
            assert_eq!(view["buffer"], 1);
            let ext = &view["extensions"][EXT_MESHOPT_COMPRESSION];
            assert_eq!(ext["buffer"], 0);
            assert_eq!(ext["byteOffset"].as_u64().unwrap() % 4, 0);
        }
        // No image bytes inside the GLB.
        assert!(glb.bin.unwrap().len() < 200);
    }

    #[test]
    fn quantize_normal_is_unit_and_handles_zero() {
        assert_eq!(quantize_normal([0.0, 0.0, 0.0]), [0, 127, 0, 0]);
        assert_eq!(quantize_normal([3.0, 0.0, 0.0]), [127, 0, 0, 0]);
        assert_eq!(quantize_normal([0.0, 0.0, -1.0]), [0, 0, -127, 0]);
    }

    #[test]
    fn bad_quantized_meshes_are_rejected() {
        let mut m = quad();
        m.primitives[0].indices[2] = 4;
        assert!(matches!(
            write_quantized_glb(&m, &Identity),
            Err(Error::InvalidInput { .. })
        ));
        let mut m = quad();
        m.step_m = 0.0;
        assert!(write_quantized_glb(&m, &Identity).is_err());
        let mut m = quad();
        m.primitives[0].indices.clear();
        assert!(matches!(
            write_quantized_glb(&m, &Identity),
            Err(Error::Empty { .. })
        ));
    }
}
