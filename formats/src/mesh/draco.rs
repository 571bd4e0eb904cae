//! `KHR_draco_mesh_compression`: parse a primitive's extension object and decode its Draco stream
//! into per-vertex arrays that [`super::gltf_read`] merges like uncompressed accessor data.
//!
//! Source: the Khronos `KHR_draco_mesh_compression` extension specification (glTF Schema Updates,
//! Conformance) and the Draco bitstream 2.2 it names; decoding is done by `draco-oxide-decoder`
//! (a pure-Rust rewrite of Google's Draco decoder).
//!
//! Bad input: the decoder is an alpha release; on mutated streams it returns errors for most, but
//! also panics (arithmetic overflow, a `clamp` assertion, index checks — about 1 % of byte-flipped
//! streams when this module was written). A panic inside it is caught with
//! [`std::panic::catch_unwind`] and becomes [`Error::Corrupt`] naming the file and primitive, so
//! [`super::read_gltf`] keeps its "never panics on file content" guarantee. (The default panic hook
//! still prints the message to stderr; the process does not stop.) Everything read back from the
//! decoded mesh is bounds-checked here: value indices against the value count, byte lengths
//! against the declared component layout, point counts across attributes.

use std::path::Path;

use crate::{Error, Result};

/// The extension's name, as it appears in `extensionsRequired` and `primitive.extensions`.
pub(super) const EXTENSION: &str = "KHR_draco_mesh_compression";

/// The extension object of one primitive.
pub(super) struct Extension {
    /// Index of the buffer view holding the Draco stream.
    pub buffer_view: usize,
    /// glTF attribute semantic (e.g. `POSITION`) → Draco attribute unique id.
    pub attributes: Vec<(String, usize)>,
}

impl Extension {
    /// Parse `primitive.extensions.KHR_draco_mesh_compression`; `field` is the primitive's glTF
    /// path (`meshes[m].primitives[p]`).
    pub fn parse(path: &Path, field: &str, value: &serde_json::Value) -> Result<Self> {
        let at = format!("{field}.extensions.{EXTENSION}");
        let invalid = |sub: &str, expected: &str, found: String| Error::Invalid {
            path: path.to_path_buf(),
            field: format!("{at}{sub}"),
            expected: expected.into(),
            found,
        };
        let index = |v: &serde_json::Value| v.as_u64().and_then(|i| usize::try_from(i).ok());
        let buffer_view = value.get("bufferView").and_then(index).ok_or_else(|| {
            invalid(
                ".bufferView",
                "a buffer view index (integer ≥ 0)",
                value
                    .get("bufferView")
                    .map_or("none".into(), |v| v.to_string()),
            )
        })?;
        let map = value
            .get("attributes")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| {
                invalid(
                    ".attributes",
                    "an object of semantic → Draco attribute id",
                    value
                        .get("attributes")
                        .map_or("none".into(), |v| v.to_string()),
                )
            })?;
        let mut attributes = Vec::with_capacity(map.len());
        for (semantic, id) in map {
            let id = index(id).ok_or_else(|| {
                invalid(
                    &format!(".attributes.{semantic}"),
                    "a Draco attribute id (integer ≥ 0)",
                    id.to_string(),
                )
            })?;
            attributes.push((semantic.clone(), id));
        }
        Ok(Self {
            buffer_view,
            attributes,
        })
    }

    /// Draco unique id of the attribute with glTF semantic `semantic`, if the stream carries it.
    pub fn id_of(&self, semantic: &str) -> Option<usize> {
        self.attributes
            .iter()
            .find(|(s, _)| s == semantic)
            .map(|&(_, id)| id)
    }
}

/// Component type of a decoded attribute, as far as this reader uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    F32,
    U8,
    U16,
    /// Any other Draco component type (its Draco data type id).
    Other(u8),
}

/// One decoded attribute, expanded to one value per point (vertex).
struct Attribute {
    id: usize,
    kind: Kind,
    components: usize,
    /// `point count × components` values; integer types hold their raw integer values.
    values: Vec<f32>,
}

/// A decoded Draco mesh: triangle indices and the requested attributes, per point.
pub(super) struct Decoded {
    /// Flattened triangle corners; not range-checked here (the caller checks them like any index).
    pub indices: Vec<u32>,
    attributes: Vec<Attribute>,
}

/// Decode the Draco stream `bytes`, keeping the attributes whose unique id is in `wanted` (all
/// attributes must cover the same number of points). `location` names the primitive, extension
/// and buffer view for errors.
pub(super) fn decode(
    path: &Path,
    location: &str,
    bytes: &[u8],
    wanted: &[usize],
) -> Result<Decoded> {
    let corrupt = |what: String| Error::Corrupt {
        path: path.to_path_buf(),
        location: location.to_string(),
        what,
    };
    // See the module docs: the alpha decoder can panic on corrupt streams.
    let mesh = match std::panic::catch_unwind(|| draco_oxide_decoder::decode_mesh(bytes)) {
        Ok(Ok(mesh)) => mesh,
        Ok(Err(e)) => return Err(corrupt(format!("Draco stream does not decode: {e}"))),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            return Err(corrupt(format!(
                "Draco stream does not decode (the decoder panicked: {msg})"
            )));
        }
    };

    let mut vertex_count: Option<usize> = None;
    let mut attributes = Vec::new();
    for att in &mesh.attributes {
        let id = att.get_id().as_usize();
        let points = att.len();
        match vertex_count {
            None => vertex_count = Some(points),
            Some(n) if n != points => {
                return Err(corrupt(format!(
                    "Draco attribute {id} covers {points} points, another covers {n}"
                )));
            }
            _ => {}
        }
        if !wanted.contains(&id) {
            continue;
        }
        let components = att.get_num_components();
        let ty = att.get_component_type();
        let kind = match ty.get_id() {
            9 => Kind::F32,
            2 => Kind::U8,
            4 => Kind::U16,
            other => Kind::Other(other),
        };
        let unique = att.num_unique_values();
        let bytes = att.get_data_as_bytes();
        let size = ty.size();
        if !(1..=4).contains(&components)
            || unique.checked_mul(components * size) != Some(bytes.len())
        {
            return Err(corrupt(format!(
                "Draco attribute {id}: {} bytes for {unique} values of {components} × {size}-byte components",
                bytes.len()
            )));
        }
        let unique_values: Vec<f32> = match kind {
            // The attribute buffer is in-memory data of the decoder: native byte order.
            Kind::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Kind::U8 => bytes.iter().map(|&b| f32::from(b)).collect(),
            Kind::U16 => bytes
                .chunks_exact(2)
                .map(|c| f32::from(u16::from_ne_bytes([c[0], c[1]])))
                .collect(),
            Kind::Other(_) => Vec::new(),
        };
        let mut values = Vec::with_capacity(if unique_values.is_empty() {
            0
        } else {
            points * components
        });
        if !unique_values.is_empty() {
            let map = att.point_map_as_slice();
            for p in 0..points {
                let v = match map {
                    Some(m) => m.get(p).map(|&v| usize::from(v)),
                    None => Some(p),
                }
                .filter(|&v| v < unique)
                .ok_or_else(|| {
                    corrupt(format!(
                        "Draco attribute {id}: point {p} maps to no value (of {unique})"
                    ))
                })?;
                values.extend_from_slice(&unique_values[v * components..(v + 1) * components]);
            }
        }
        attributes.push(Attribute {
            id,
            kind,
            components,
            values,
        });
    }
    let indices: Vec<u32> = mesh
        .faces
        .iter()
        .flatten()
        .map(|&i| u32::try_from(usize::from(i)).unwrap_or(u32::MAX))
        .collect();
    Ok(Decoded {
        indices,
        attributes,
    })
}

impl Decoded {
    fn attribute(&self, path: &Path, field: &str, id: usize) -> Result<&Attribute> {
        self.attributes
            .iter()
            .find(|a| a.id == id)
            .ok_or_else(|| Error::Invalid {
                path: path.to_path_buf(),
                field: field.to_string(),
                expected: "a Draco attribute unique id present in the stream".into(),
                found: format!("id {id}, which the stream does not hold"),
            })
    }

    /// Attribute `id` as `N` 32-bit floats per vertex; `field` names the extension's attribute
    /// entry for errors.
    pub fn floats<const N: usize>(
        &self,
        path: &Path,
        field: &str,
        id: usize,
    ) -> Result<Vec<[f32; N]>> {
        let att = self.attribute(path, field, id)?;
        if att.kind != Kind::F32 || att.components != N {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: field.to_string(),
                found: format!(
                    "Draco attribute {id} of {} × {:?}",
                    att.components, att.kind
                ),
                supported: format!("{N} × F32"),
            });
        }
        Ok(att
            .values
            .chunks_exact(N)
            .map(|c| std::array::from_fn(|i| c[i]))
            .collect())
    }

    /// Attribute `id` as 2 components per vertex in [0, 1] (texture coordinates): 32-bit floats
    /// as they are, unsigned 8/16-bit integers normalized (glTF §3.11 normalized accessors).
    pub fn tex_coords(&self, path: &Path, field: &str, id: usize) -> Result<Vec<[f32; 2]>> {
        let att = self.attribute(path, field, id)?;
        let scale = match att.kind {
            Kind::F32 => 1.0,
            Kind::U8 => 1.0 / 255.0,
            Kind::U16 => 1.0 / 65535.0,
            Kind::Other(_) => 0.0,
        };
        if scale == 0.0 || att.components != 2 {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: field.to_string(),
                found: format!(
                    "Draco attribute {id} of {} × {:?}",
                    att.components, att.kind
                ),
                supported: "2 × F32, U8 or U16".into(),
            });
        }
        Ok(att
            .values
            .chunks_exact(2)
            .map(|c| [c[0] * scale, c[1] * scale])
            .collect())
    }
}
