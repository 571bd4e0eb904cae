//! Tile content encoding: one position lattice for the whole tileset, per-tile integer offsets,
//! `KHR_mesh_quantization` attributes and the meshoptimizer codecs of `EXT_meshopt_compression`.
//!
//! Sources: KHR_mesh_quantization (positions as unsigned shorts dequantized by the node's
//! translation and scale); EXT_meshopt_compression (vertex codec version 0, index codec);
//! meshoptimizer 1.x `meshoptimizer.h` (`meshopt_encodeVertexBufferLevel`'s `version` argument:
//! the library default is 1, which the EXT extension does not allow; `meshopt_optimizeVertexCache`,
//! `meshopt_optimizeVertexFetchRemap`); draco#713 / gltf-pipeline#379 for why per-primitive
//! quantization grids crack shared borders (hence one lattice).
//!
//! Lattice: step `s` = the smallest power of two with `extent / s ≤ MAX_LATTICE_SPAN` (extent =
//! largest side of the mesh's box). A vertex's lattice point is `q = round(p / s)` (i64, glTF
//! frame). A tile stores `q − o` as u16, o = the tile's smallest q per axis, and its node carries
//! translation `o · s` and scale `s`. The same vertex therefore has the same `q` in every tile,
//! and with `s` a power of two the client's `o·s + (q − o)·s` is exact in f32 whenever |q| < 2^24
//! (meshes within 2^24 steps of their origin, i.e. any mesh not stored far from 0).

use kiln_formats::mesh::{
    ImageRef, Material, Mesh, MeshoptEncoder, QuantizedMesh, QuantizedPrimitive, TexCoords,
    quantize_normal,
};

use kiln_formats::mesh::compact;

/// Largest lattice span of a tile on any axis: u16 coordinates hold 0..=65535; one step of
/// headroom because rounding both ends can add one.
pub const MAX_LATTICE_SPAN: f64 = 65_534.0;

/// The tileset's position lattice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lattice {
    /// Step, metres; a power of two.
    pub step_m: f64,
}

impl Lattice {
    /// The lattice for a mesh whose box has largest side `extent_m` (≥ 0, finite).
    pub fn for_extent(extent_m: f64) -> Self {
        let raw = (extent_m / MAX_LATTICE_SPAN).max(f64::MIN_POSITIVE);
        Lattice {
            step_m: 2f64.powi(raw.log2().ceil() as i32),
        }
    }

    /// Lattice point of a position (glTF frame, metres).
    pub fn point(&self, p: [f32; 3]) -> [i64; 3] {
        p.map(|c| (f64::from(c) / self.step_m).round() as i64)
    }
}

/// One tile quantized: the [`QuantizedMesh`] plus its lattice offset and Z-up content bounds.
pub struct EncodedTile {
    /// What `write_quantized_glb` encodes.
    pub mesh: QuantizedMesh,
    /// Lattice offset `o` of the tile (glTF frame).
    pub offset: [i64; 3],
}

/// Quantize the triangles `global` (indices into `welded`) as one tile: one primitive per material
/// its triangles use (ascending material index; a triangle's material is its first vertex's in
/// `vertex_materials`, which after `decimate::weld` is that of all three), each with only those
/// materials; `images` (one per `welded.images` entry) are the files the textures point at.
///
/// Each primitive's vertices are compacted, reordered for the vertex cache and for fetch locality
/// (which also helps the meshopt codecs), then quantized: positions on `lattice` relative to the
/// tile's offset (the smallest lattice point over all its primitives), normals to i8, UVs to
/// normalized u16 when all of a primitive's lie in [0, 1] (else f32), colours to normalized u16.
pub fn quantize_tile(
    welded: &Mesh,
    vertex_materials: &[u32],
    global: &[u32],
    lattice: Lattice,
    images: &[ImageRef],
) -> EncodedTile {
    let mut groups: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for t in global.chunks_exact(3) {
        let m = vertex_materials[t[0] as usize];
        groups.entry(m).or_default().extend_from_slice(t);
    }
    let mut offset = [i64::MAX; 3];
    for &v in global {
        let q = lattice.point(welded.positions[v as usize]);
        for k in 0..3 {
            offset[k] = offset[k].min(q[k]);
        }
    }
    let materials: Vec<Material> = groups
        .keys()
        .map(|&m| welded.materials[m as usize].clone())
        .collect();
    let primitives = groups
        .values()
        .zip(&materials)
        .enumerate()
        .map(|(slot, (triangles, m))| {
            let mut p = quantize_primitive(welded, triangles, lattice, offset, m.uses_tex_coord(1));
            p.material = slot;
            p
        })
        .collect();
    let s = lattice.step_m;
    EncodedTile {
        mesh: QuantizedMesh {
            step_m: s,
            translation_m: offset.map(|o| o as f64 * s),
            primitives,
            materials,
            images: images.to_vec(),
        },
        offset,
    }
}

/// One material's triangles `global` of a tile as a [`QuantizedPrimitive`] (see [`quantize_tile`]).
fn quantize_primitive(
    welded: &Mesh,
    global: &[u32],
    lattice: Lattice,
    offset: [i64; 3],
    uses_set1: bool,
) -> QuantizedPrimitive {
    let (vertices, local) = compact(global);
    let local = meshopt::optimize_vertex_cache(&local, vertices.len());
    let remap = meshopt::optimize_vertex_fetch_remap(&local, vertices.len());
    let indices: Vec<u32> = local.iter().map(|&i| remap[i as usize]).collect();
    let mut order = vec![0u32; vertices.len()];
    for (old, &new) in remap.iter().enumerate() {
        if (new as usize) < order.len() {
            order[new as usize] = vertices[old];
        }
    }
    let positions = order
        .iter()
        .map(|&v| {
            let q = lattice.point(welded.positions[v as usize]);
            let c = |k: usize| (q[k] - offset[k]).clamp(0, i64::from(u16::MAX)) as u16;
            [c(0), c(1), c(2), 0]
        })
        .collect();
    let normals = welded.normals.as_ref().map(|n| {
        order
            .iter()
            .map(|&v| quantize_normal(n[v as usize]))
            .collect()
    });
    let uv_set = |t: &Vec<[f32; 2]>| {
        let tile: Vec<[f32; 2]> = order.iter().map(|&v| t[v as usize]).collect();
        if tile.iter().flatten().all(|c| (0.0..=1.0).contains(c)) {
            TexCoords::Unorm16(
                tile.iter()
                    .map(|uv| uv.map(|c| (c * 65535.0).round() as u16))
                    .collect(),
            )
        } else {
            TexCoords::Float(tile)
        }
    };
    let uvs = welded.uvs.as_ref().map(uv_set);
    let uvs1 = welded
        .uvs1
        .as_ref()
        .filter(|_| uses_set1 && uvs.is_some())
        .map(uv_set);
    let colors = welded.colors.as_ref().map(|c| {
        order
            .iter()
            .map(|&v| c[v as usize].map(|x| (x.clamp(0.0, 1.0) * 65535.0).round() as u16))
            .collect()
    });
    QuantizedPrimitive {
        positions,
        normals,
        uvs,
        uvs1,
        colors,
        indices,
        material: 0,
    }
}

/// [`MeshoptEncoder`] backed by the `meshopt` crate, with the bitstream versions
/// `EXT_meshopt_compression` allows (vertex codec 0).
pub struct MeshoptCodec;

/// meshoptimizer's default compression level for the vertex codec (ignored by version 0).
const VERTEX_CODEC_LEVEL: i32 = 2;
/// The attribute codec version `EXT_meshopt_compression` specifies.
const EXT_VERTEX_CODEC_VERSION: i32 = 0;

impl MeshoptEncoder for MeshoptCodec {
    fn encode_vertices(&self, data: &[u8], stride: usize) -> kiln_formats::Result<Vec<u8>> {
        let level = VERTEX_CODEC_LEVEL;
        let version = Some(EXT_VERTEX_CODEC_VERSION);
        let encoded = match stride {
            4 => meshopt::encode_vertex_buffer_level::<[u8; 4]>(
                bytemuck::cast_slice(data),
                level,
                version,
            ),
            8 => meshopt::encode_vertex_buffer_level::<[u8; 8]>(
                bytemuck::cast_slice(data),
                level,
                version,
            ),
            12 => meshopt::encode_vertex_buffer_level::<[u8; 12]>(
                bytemuck::cast_slice(data),
                level,
                version,
            ),
            16 => meshopt::encode_vertex_buffer_level::<[u8; 16]>(
                bytemuck::cast_slice(data),
                level,
                version,
            ),
            _ => {
                return Err(kiln_formats::Error::InvalidInput {
                    context: "MeshoptCodec::encode_vertices",
                    field: "stride".into(),
                    expected: "4, 8, 12 or 16 bytes".into(),
                    found: stride.to_string(),
                });
            }
        };
        encoded.map_err(|e| codec_error("vertices", e))
    }

    fn encode_triangles(
        &self,
        indices: &[u32],
        vertex_count: usize,
    ) -> kiln_formats::Result<Vec<u8>> {
        meshopt::encode_index_buffer(indices, vertex_count).map_err(|e| codec_error("indices", e))
    }
}

fn codec_error(field: &str, e: meshopt::Error) -> kiln_formats::Error {
    kiln_formats::Error::InvalidInput {
        context: "MeshoptCodec",
        field: field.into(),
        expected: "data meshoptimizer can encode".into(),
        found: e.to_string(),
    }
}

/// A tile GLB decoded back (tests only): what a client would draw.
#[cfg(test)]
pub(crate) struct DecodedTile {
    /// Lattice points (tile offset added back), glTF frame.
    pub points: Vec<[i64; 3]>,
    /// Positions in metres, glTF frame (translation + step · stored).
    pub positions_m: Vec<[f64; 3]>,
    pub indices: Vec<u32>,
    /// Every primitive has NORMAL / TEXCOORD_0.
    pub has_normals: bool,
    pub has_uvs: bool,
    /// `materials[]` index of each primitive, in order.
    pub primitive_materials: Vec<usize>,
    /// `images[*].uri`.
    pub image_uris: Vec<String>,
    /// The parsed glTF JSON.
    pub json: serde_json::Value,
}

/// Decode a tile GLB written by `write_quantized_glb` (tests only; panics on anything else).
#[cfg(test)]
pub(crate) fn decode_tile(bytes: &[u8], lattice: Lattice) -> DecodedTile {
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as usize;
    assert_eq!(&bytes[0..4], b"glTF");
    let json_len = u32_at(12);
    let json: serde_json::Value = serde_json::from_slice(&bytes[20..20 + json_len]).unwrap();
    let bin_start = 20 + json_len + 8;
    let bin = &bytes[bin_start..bin_start + u32_at(20 + json_len)];
    let ext = kiln_formats::mesh::EXT_MESHOPT_COMPRESSION;
    let view_bytes = |accessor: &serde_json::Value| -> (Vec<u8>, usize, usize) {
        let view = &json["bufferViews"][accessor["bufferView"].as_u64().unwrap() as usize];
        let e = &view["extensions"][ext];
        let off = e["byteOffset"].as_u64().unwrap() as usize;
        let len = e["byteLength"].as_u64().unwrap() as usize;
        let stride = e["byteStride"].as_u64().unwrap() as usize;
        let count = e["count"].as_u64().unwrap() as usize;
        let data = &bin[off..off + len];
        let raw = if e["mode"] == "TRIANGLES" {
            let idx: Vec<u32> = if stride == 2 {
                meshopt::decode_index_buffer::<u16>(data, count)
                    .unwrap()
                    .into_iter()
                    .map(u32::from)
                    .collect()
            } else {
                meshopt::decode_index_buffer::<u32>(data, count).unwrap()
            };
            bytemuck::cast_slice(&idx).to_vec()
        } else {
            match stride {
                4 => bytemuck::cast_slice(
                    &meshopt::decode_vertex_buffer::<[u8; 4]>(data, count).unwrap(),
                )
                .to_vec(),
                8 => bytemuck::cast_slice(
                    &meshopt::decode_vertex_buffer::<[u8; 8]>(data, count).unwrap(),
                )
                .to_vec(),
                _ => panic!("stride {stride}"),
            }
        };
        (raw, stride, count)
    };
    let node = &json["nodes"][0];
    let t: Vec<f64> = (0..3)
        .map(|k| node["translation"][k].as_f64().unwrap())
        .collect();
    let s = node["scale"][0].as_f64().unwrap();
    assert_eq!(s, lattice.step_m);
    let offset: Vec<i64> = t.iter().map(|&c| (c / s).round() as i64).collect();
    let accessor = |i: &serde_json::Value| &json["accessors"][i.as_u64().unwrap() as usize];
    let mut points = Vec::new();
    let mut positions_m = Vec::new();
    let mut indices = Vec::new();
    let mut has_normals = true;
    let mut has_uvs = true;
    let mut primitive_materials = Vec::new();
    // Primitives concatenated: vertices appended, indices offset by the vertices before them.
    for primitive in json["meshes"][0]["primitives"].as_array().unwrap() {
        let (raw, _, count) = view_bytes(accessor(&primitive["attributes"]["POSITION"]));
        let stored: Vec<[u16; 4]> = bytemuck::cast_slice(&raw).to_vec();
        assert_eq!(stored.len(), count);
        let base = points.len() as u32;
        points.extend(
            stored
                .iter()
                .map(|p| [0, 1, 2].map(|k| offset[k] + i64::from(p[k]))),
        );
        positions_m.extend(
            stored
                .iter()
                .map(|p| [0, 1, 2].map(|k| t[k] + s * f64::from(p[k]))),
        );
        let (raw, _, _) = view_bytes(accessor(&primitive["indices"]));
        let local: Vec<u32> = bytemuck::cast_slice(&raw).to_vec();
        indices.extend(local.iter().map(|&i| i + base));
        has_normals &= primitive["attributes"].get("NORMAL").is_some();
        has_uvs &= primitive["attributes"].get("TEXCOORD_0").is_some();
        primitive_materials.push(primitive["material"].as_u64().unwrap() as usize);
    }
    let image_uris = json["images"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["uri"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    DecodedTile {
        points,
        positions_m,
        indices,
        has_normals,
        has_uvs,
        primitive_materials,
        image_uris,
        json,
    }
}
