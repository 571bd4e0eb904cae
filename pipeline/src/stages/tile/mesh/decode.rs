//! Reading a mesh tile GLB back: what a 3D Tiles client draws from the bytes Kiln wrote, so the
//! job page can show (and tests can check) the deliverable rather than the meshes it was made
//! from.
//!
//! Reads the subset [`super::encode`] writes (glTF 2.0 GLB, one mesh on one node with a
//! translation and a uniform scale): `EXT_meshopt_compression` buffer views (vertex codec for
//! attributes, index codec for `TRIANGLES`), `KHR_mesh_quantization` attributes (POSITION as
//! unsigned short dequantized by the node transform, NORMAL as normalized byte, TEXCOORD_0 as
//! normalized unsigned short or float). Sources: the two extensions' specifications
//! (github.com/KhronosGroup/glTF, `extensions/2.0/{Vendor/EXT_meshopt_compression,
//! Khronos/KHR_mesh_quantization}`). Anything else is an error naming the field, never a panic.

use kiln_formats::Error;
use kiln_formats::mesh::EXT_MESHOPT_COMPRESSION;
use serde_json::Value;

/// One primitive decoded: positions in metres in the tile's glTF frame (node translation and
/// scale applied, f64), triangle-list indices into them, and what the painter needs.
#[derive(Debug, Clone, Default)]
pub struct DecodedPrimitive {
    /// `[V, 3]` stored integer positions, before the node transform.
    pub stored: Vec<[u16; 3]>,
    /// `[V, 3]` metres, glTF frame: translation + scale · stored.
    pub positions_m: Vec<[f64; 3]>,
    /// `[3F]` triangle list.
    pub indices: Vec<u32>,
    /// `[V, 3]` unit normals (i8 / 127), when the primitive has NORMAL.
    pub normals: Option<Vec<[f32; 3]>>,
    /// `[V, 2]` TEXCOORD_0, when present.
    pub uvs: Option<Vec<[f32; 2]>>,
    /// `materials[]` index.
    pub material: Option<usize>,
}

/// A decoded tile GLB.
#[derive(Debug, Clone)]
pub struct DecodedGlb {
    pub primitives: Vec<DecodedPrimitive>,
    /// The node's translation (metres) and uniform scale.
    pub translation: [f64; 3],
    pub scale: f64,
    /// The glTF JSON (materials, textures, images).
    pub json: Value,
}

/// Decode a tile GLB written by the mesh tiler. `name` (a path or tile name) goes into errors.
///
/// # Errors
/// [`Error::InvalidInput`] naming `name` and the field when the file is not a GLB of that shape
/// or a compressed stream does not decode.
pub fn decode_tile_glb(bytes: &[u8], name: &str) -> Result<DecodedGlb, Error> {
    let bad = |field: &str, expected: &str, found: String| Error::InvalidInput {
        context: "MeshTileGlb",
        field: format!("{name}: {field}"),
        expected: expected.into(),
        found,
    };
    let (json, bin) = split_glb(bytes).map_err(|found| {
        bad(
            "GLB header",
            "a glTF 2.0 GLB with JSON and BIN chunks",
            found,
        )
    })?;
    let node = &json["nodes"][0];
    if node.get("matrix").is_some() || node.get("rotation").is_some() {
        return Err(bad(
            "nodes[0]",
            "translation and uniform scale only",
            "a matrix or rotation".into(),
        ));
    }
    let translation: [f64; 3] =
        std::array::from_fn(|k| node["translation"][k].as_f64().unwrap_or(0.0));
    let scale = node["scale"][0].as_f64().unwrap_or(1.0);
    let primitives = json["meshes"][0]["primitives"]
        .as_array()
        .ok_or_else(|| bad("meshes[0].primitives", "an array", "nothing".into()))?
        .iter()
        .enumerate()
        .map(|(p, primitive)| {
            decode_primitive(&json, bin, primitive, translation, scale).map_err(|(field, found)| {
                bad(
                    &format!("meshes[0].primitives[{p}].{field}"),
                    "a Kiln mesh tile stream",
                    found,
                )
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(DecodedGlb {
        primitives,
        translation,
        scale,
        json,
    })
}

/// The JSON and BIN chunks of a GLB (glTF 2.0 §4.4).
fn split_glb(bytes: &[u8]) -> Result<(Value, &[u8]), String> {
    let u32_at = |o: usize| -> Result<usize, String> {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| format!("{} bytes", bytes.len()))
    };
    if bytes.get(0..4) != Some(b"glTF".as_slice()) {
        return Err("no `glTF` magic".into());
    }
    let json_len = u32_at(12)?;
    let json_bytes = bytes
        .get(20..20 + json_len)
        .ok_or_else(|| format!("a JSON chunk of {json_len} bytes past the end"))?;
    let json: Value = serde_json::from_slice(json_bytes).map_err(|e| e.to_string())?;
    let bin_len = u32_at(20 + json_len)?;
    let bin_start = 20 + json_len + 8;
    let bin = bytes
        .get(bin_start..bin_start + bin_len)
        .ok_or_else(|| format!("a BIN chunk of {bin_len} bytes past the end"))?;
    Ok((json, bin))
}

type FieldError = (String, String);

fn decode_primitive(
    json: &Value,
    bin: &[u8],
    primitive: &Value,
    translation: [f64; 3],
    scale: f64,
) -> Result<DecodedPrimitive, FieldError> {
    let attributes = &primitive["attributes"];
    let (raw, stride, count) = decoded_view(json, bin, &attributes["POSITION"])
        .map_err(|e| ("attributes.POSITION".to_string(), e))?;
    if stride != 8 {
        return Err((
            "attributes.POSITION".into(),
            format!("byteStride {stride}, not 8"),
        ));
    }
    let stored: Vec<[u16; 3]> = raw
        .chunks_exact(8)
        .take(count)
        .map(|c| std::array::from_fn(|k| u16::from_le_bytes([c[2 * k], c[2 * k + 1]])))
        .collect();
    let positions_m = stored
        .iter()
        .map(|p| std::array::from_fn(|k| translation[k] + scale * f64::from(p[k])))
        .collect();
    let (raw, stride, count) =
        decoded_view(json, bin, &primitive["indices"]).map_err(|e| ("indices".to_string(), e))?;
    if stride != 4 {
        return Err(("indices".into(), format!("byteStride {stride}, not 4")));
    }
    let indices: Vec<u32> = raw
        .chunks_exact(4)
        .take(count)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(&i) = indices.iter().find(|&&i| i as usize >= stored.len()) {
        return Err((
            "indices".into(),
            format!("index {i} of {} vertices", stored.len()),
        ));
    }
    let normals = attributes
        .get("NORMAL")
        .map(|a| {
            let (raw, stride, count) =
                decoded_view(json, bin, a).map_err(|e| ("attributes.NORMAL".to_string(), e))?;
            if stride != 4 {
                return Err((
                    "attributes.NORMAL".into(),
                    format!("byteStride {stride}, not 4"),
                ));
            }
            Ok(raw
                .chunks_exact(4)
                .take(count)
                .map(|c| std::array::from_fn(|k| f32::from(c[k] as i8) / 127.0))
                .collect())
        })
        .transpose()?;
    let uvs = attributes
        .get("TEXCOORD_0")
        .map(|a| {
            let (raw, stride, count) =
                decoded_view(json, bin, a).map_err(|e| ("attributes.TEXCOORD_0".to_string(), e))?;
            Ok(match stride {
                4 => raw
                    .chunks_exact(4)
                    .take(count)
                    .map(|c| {
                        std::array::from_fn(|k| {
                            f32::from(u16::from_le_bytes([c[2 * k], c[2 * k + 1]])) / 65535.0
                        })
                    })
                    .collect(),
                8 => raw
                    .chunks_exact(8)
                    .take(count)
                    .map(|c| {
                        std::array::from_fn(|k| {
                            f32::from_le_bytes([c[4 * k], c[4 * k + 1], c[4 * k + 2], c[4 * k + 3]])
                        })
                    })
                    .collect(),
                _ => {
                    return Err((
                        "attributes.TEXCOORD_0".into(),
                        format!("byteStride {stride}, not 4 or 8"),
                    ));
                }
            })
        })
        .transpose()?;
    Ok(DecodedPrimitive {
        stored,
        positions_m,
        indices,
        normals,
        uvs,
        material: primitive["material"].as_u64().map(|m| m as usize),
    })
}

/// The decoded bytes of `accessor`'s buffer view, its byte stride and the accessor's count:
/// indices widened to u32 (stride 4).
fn decoded_view(
    json: &Value,
    bin: &[u8],
    accessor: &Value,
) -> Result<(Vec<u8>, usize, usize), String> {
    let accessor = accessor
        .as_u64()
        .and_then(|i| json["accessors"].get(i as usize))
        .ok_or("no such accessor")?;
    let view = accessor["bufferView"]
        .as_u64()
        .and_then(|v| json["bufferViews"].get(v as usize))
        .ok_or("no buffer view")?;
    let e = &view["extensions"][EXT_MESHOPT_COMPRESSION];
    let field = |k: &str| {
        e[k].as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| format!("no `{EXT_MESHOPT_COMPRESSION}.{k}`"))
    };
    let (offset, length, stride, count) = (
        field("byteOffset")?,
        field("byteLength")?,
        field("byteStride")?,
        field("count")?,
    );
    let data = bin
        .get(offset..offset + length)
        .ok_or_else(|| format!("bytes {offset}..{} past the BIN chunk", offset + length))?;
    let codec = |e: meshopt::Error| e.to_string();
    match e["mode"].as_str() {
        Some("TRIANGLES") => {
            let wide: Vec<u32> = match stride {
                2 => meshopt::decode_index_buffer::<u16>(data, count)
                    .map_err(codec)?
                    .into_iter()
                    .map(u32::from)
                    .collect(),
                4 => meshopt::decode_index_buffer::<u32>(data, count).map_err(codec)?,
                _ => return Err(format!("index byteStride {stride}")),
            };
            Ok((
                wide.iter().flat_map(|i| i.to_le_bytes()).collect(),
                4,
                count,
            ))
        }
        Some("ATTRIBUTES") => {
            let raw: Vec<u8> = match stride {
                4 => meshopt::decode_vertex_buffer::<[u8; 4]>(data, count)
                    .map_err(codec)?
                    .concat(),
                8 => meshopt::decode_vertex_buffer::<[u8; 8]>(data, count)
                    .map_err(codec)?
                    .concat(),
                _ => return Err(format!("attribute byteStride {stride}")),
            };
            Ok((raw, stride, count))
        }
        other => Err(format!("mode {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_tiles_are_errors_naming_the_tile_and_field() {
        let e = decode_tile_glb(b"glTF\x02\0\0\0", "tiles/0.glb")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tiles/0.glb") && e.contains("GLB header"), "{e}");
        let e = decode_tile_glb(b"nope", "t.glb").unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
    }
}
