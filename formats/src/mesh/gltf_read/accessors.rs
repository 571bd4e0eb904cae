//! Accessor checks and reads: before the `gltf` crate's readers touch an accessor (they assume
//! valid data: they underflow on `count == 0` and assert on stride and component type), its type,
//! density, count and byte range inside its view and buffer are checked here; integer
//! components (`KHR_mesh_quantization`) are read and converted to floats here.
//!
//! Source: glTF 2.0 §3.6.2 (accessors: element size, byteStride, data alignment) and §3.11
//! (normalized integer to float conversion); `KHR_mesh_quantization` (attribute types).

use gltf::accessor::{DataType, Dimensions};

use super::Builder;
use crate::{Error, Result};

/// Component types of POSITION, NORMAL and TEXCOORD_n: float, and the integer types
/// `KHR_mesh_quantization` adds (normals only normalized).
pub(super) const QUANTIZED_POSITION: [DataType; 5] = [
    DataType::F32,
    DataType::I8,
    DataType::U8,
    DataType::I16,
    DataType::U16,
];
pub(super) const QUANTIZED_NORMAL: [DataType; 3] = [DataType::F32, DataType::I8, DataType::I16];
pub(super) const QUANTIZED_TEXCOORD: [DataType; 5] = QUANTIZED_POSITION;

/// Most elements an accessor without bufferView may have: its zeros take memory but no file
/// bytes, so a corrupt `count` would otherwise allocate without bound (2^26 vertices is far
/// beyond any mesh a GLB holds in a 4 GiB buffer at its real size).
const MAX_VIEWLESS_COUNT: usize = 1 << 26;

/// One component of `kind` from its little-endian `bytes` (exactly its size) as a float.
fn component(kind: DataType, bytes: &[u8], normalized: bool) -> f32 {
    let (value, max) = match kind {
        DataType::I8 => (f32::from(bytes[0] as i8), 127.0),
        DataType::U8 => (f32::from(bytes[0]), 255.0),
        DataType::I16 => (f32::from(i16::from_le_bytes([bytes[0], bytes[1]])), 32767.0),
        DataType::U16 => (f32::from(u16::from_le_bytes([bytes[0], bytes[1]])), 65535.0),
        DataType::U32 => {
            let v = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            (v as f32, u32::MAX as f32)
        }
        DataType::F32 => return f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
    };
    if normalized {
        (value / max).max(-1.0)
    } else {
        value
    }
}

impl<'a> Builder<'a> {
    /// Check an accessor's type, density and count (everything but its bytes; a Draco primitive's
    /// accessors have none).
    pub(super) fn check_accessor_type(
        &self,
        acc: &gltf::Accessor<'_>,
        semantic: &str,
        dims: Dimensions,
        types: &[DataType],
    ) -> Result<()> {
        let field = format!("accessors[{}] ({semantic})", acc.index());
        let invalid = |expected: String, found: String| Error::Invalid {
            path: self.path.to_path_buf(),
            field: field.clone(),
            expected,
            found,
        };
        if acc.dimensions() != dims || !types.contains(&acc.data_type()) {
            return Err(Error::Unsupported {
                path: self.path.to_path_buf(),
                field: field.clone(),
                found: format!(
                    "{:?} of {:?}{}",
                    acc.dimensions(),
                    acc.data_type(),
                    if acc.normalized() {
                        " (normalized)"
                    } else {
                        ""
                    }
                ),
                supported: format!("{dims:?} of {types:?}"),
            });
        }
        if acc.data_type() != DataType::F32 && semantic == "NORMAL" && !acc.normalized() {
            return Err(invalid(
                "normalized integer normals (KHR_mesh_quantization)".into(),
                format!("{:?} not normalized", acc.data_type()),
            ));
        }
        if acc.count() == 0 {
            return Err(invalid("count ≥ 1".into(), "0".into()));
        }
        Ok(())
    }

    /// Check that reading `acc` through the `gltf` crate cannot panic and reads `count` elements.
    pub(super) fn check_accessor(
        &self,
        acc: &gltf::Accessor<'_>,
        semantic: &str,
        dims: Dimensions,
        types: &[DataType],
    ) -> Result<()> {
        self.check_accessor_type(acc, semantic, dims, types)?;
        let field = format!("accessors[{}] ({semantic})", acc.index());
        let invalid = |expected: String, found: String| Error::Invalid {
            path: self.path.to_path_buf(),
            field: field.clone(),
            expected,
            found,
        };
        // glTF 2.0 §3.6.2.1: without bufferView the elements are zeros (then replaced by any
        // sparse values, whose ranges `apply_sparse` checks as it reads them).
        let Some(view) = acc.view() else {
            if acc.count() > MAX_VIEWLESS_COUNT {
                return Err(invalid(
                    format!("count ≤ {MAX_VIEWLESS_COUNT} for an accessor without bufferView"),
                    acc.count().to_string(),
                ));
            }
            // Valid, but all zeros is rarely what was meant: one UV or colour for every vertex,
            // every position at the origin. NORMAL says so itself (it regenerates them).
            if acc.sparse().is_none() && semantic != "NORMAL" {
                tracing::warn!(
                    file = %self.path.display(),
                    "{field} has no bufferView: every element reads as zero (glTF 2.0 §3.6.2.1); \
                     check the exporter if that is not what was meant"
                );
            }
            return Ok(());
        };
        let elem = acc.size();
        let stride = view.stride().unwrap_or(elem);
        if stride < elem {
            return Err(invalid(
                format!(
                    "bufferViews[{}].byteStride ≥ element size {elem}",
                    view.index()
                ),
                format!("{stride}"),
            ));
        }
        let end = (acc.count() - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(elem))
            .and_then(|x| x.checked_add(acc.offset()));
        let buffer_len = self.buffers.get(view.buffer().index()).map_or(0, Vec::len);
        let view_end = view.offset().checked_add(view.length());
        match (end, view_end) {
            (Some(end), Some(view_end)) if end <= view.length() && view_end <= buffer_len => Ok(()),
            _ => Err(Error::Corrupt {
                path: self.path.to_path_buf(),
                location: field.clone(),
                what: format!(
                    "{} elements of {elem} bytes (stride {stride}) at offset {} do not fit bufferViews[{}] ({} bytes at {} of a {buffer_len}-byte buffer)",
                    acc.count(),
                    acc.offset(),
                    view.index(),
                    view.length(),
                    view.offset()
                ),
            }),
        }
    }

    /// Must `acc` be read by [`Self::read_floats`] rather than the `gltf` crate's readers (which
    /// read nothing for an accessor without bufferView)?
    pub(super) fn needs_own_read(acc: &gltf::Accessor<'_>) -> bool {
        acc.view().is_none() || acc.sparse().is_some()
    }

    /// An accessor already checked by [`Self::check_accessor`], as floats: integer components
    /// as glTF 2.0 §3.11 converts them (normalized signed `c / (2^(b−1) − 1)`, at least −1;
    /// normalized unsigned `c / (2^b − 1)`; otherwise the integer's value), which is how
    /// `KHR_mesh_quantization` attributes are meant to be read (positions then scaled by their
    /// node's transform). Without bufferView the elements are zeros (glTF 2.0 §3.6.2.1); sparse
    /// values then replace the elements they index (§3.6.2.3).
    pub(super) fn read_floats<const N: usize>(
        &self,
        acc: &gltf::Accessor<'_>,
    ) -> Result<Vec<[f32; N]>> {
        let mut out = match acc.view() {
            Some(view) => self.dense_floats(acc, &view)?,
            None => vec![[0.0; N]; acc.count()],
        };
        if let Some(sparse) = acc.sparse() {
            self.apply_sparse(acc, &sparse, &mut out)?;
        }
        Ok(out)
    }

    /// The elements of a view-backed accessor, as [`Self::read_floats`] converts them.
    fn dense_floats<const N: usize>(
        &self,
        acc: &gltf::Accessor<'_>,
        view: &gltf::buffer::View<'_>,
    ) -> Result<Vec<[f32; N]>> {
        let corrupt = || Error::Corrupt {
            path: self.path.to_path_buf(),
            location: format!("accessors[{}]", acc.index()),
            what: "elements outside their buffer view".into(),
        };
        let buffer = self
            .buffers
            .get(view.buffer().index())
            .ok_or_else(corrupt)?;
        let stride = view.stride().unwrap_or(acc.size());
        let start = view.offset() + acc.offset();
        (0..acc.count())
            .map(|i| read_element(acc, buffer, start + i * stride).ok_or_else(corrupt))
            .collect()
    }

    /// Replace the elements a sparse accessor indexes by its values (glTF 2.0 §3.6.2.3:
    /// `count` indices of type u8/u16/u32, strictly increasing and below the accessor's count,
    /// then `count` tightly packed elements of the accessor's own type).
    fn apply_sparse<const N: usize>(
        &self,
        acc: &gltf::Accessor<'_>,
        sparse: &gltf::accessor::sparse::Sparse<'_>,
        out: &mut [[f32; N]],
    ) -> Result<()> {
        let field = format!("accessors[{}].sparse", acc.index());
        let corrupt = |what: String| Error::Corrupt {
            path: self.path.to_path_buf(),
            location: field.clone(),
            what,
        };
        let indices = self.sparse_indices(sparse, &field)?;
        let values = sparse.values();
        let view = values.view();
        let buffer = self.buffers.get(view.buffer().index());
        let start = view.offset().saturating_add(values.offset());
        let mut previous = None;
        for (k, &index) in indices.iter().enumerate() {
            if index >= out.len() || previous.is_some_and(|p| index <= p) {
                return Err(corrupt(format!(
                    "indices[{k}] = {index}: sparse indices must increase strictly and stay                      below the accessor's count {}",
                    out.len()
                )));
            }
            previous = Some(index);
            let at = start.saturating_add(k * acc.size());
            let fits = at.saturating_add(acc.size()) <= view.offset().saturating_add(view.length());
            out[index] = buffer
                .filter(|_| fits)
                .and_then(|b| read_element(acc, b, at))
                .ok_or_else(|| {
                    corrupt(format!(
                        "values element {k} lies outside bufferViews[{}]",
                        view.index()
                    ))
                })?;
        }
        Ok(())
    }

    /// The `count` indices of a sparse accessor, checked to lie inside their bufferView.
    fn sparse_indices(
        &self,
        sparse: &gltf::accessor::sparse::Sparse<'_>,
        field: &str,
    ) -> Result<Vec<usize>> {
        use gltf::accessor::sparse::IndexType;
        let indices = sparse.indices();
        let view = indices.view();
        let size = match indices.index_type() {
            IndexType::U8 => 1,
            IndexType::U16 => 2,
            IndexType::U32 => 4,
        };
        let start = view.offset().saturating_add(indices.offset());
        let end = start.saturating_add(sparse.count().saturating_mul(size));
        let bytes = self
            .buffers
            .get(view.buffer().index())
            .filter(|_| end <= view.offset().saturating_add(view.length()))
            .and_then(|b| b.get(start..end))
            .ok_or_else(|| Error::Corrupt {
                path: self.path.to_path_buf(),
                location: format!("{field}.indices"),
                what: format!(
                    "{} indices of {size} bytes at offset {} run past bufferViews[{}]",
                    sparse.count(),
                    indices.offset(),
                    view.index()
                ),
            })?;
        Ok(bytes
            .chunks_exact(size)
            .map(|c| match size {
                1 => c[0] as usize,
                2 => u16::from_le_bytes([c[0], c[1]]) as usize,
                _ => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize,
            })
            .collect())
    }

    pub(super) fn check_count(&self, acc: &gltf::Accessor<'_>, read: usize) -> Result<()> {
        if read == acc.count() {
            return Ok(());
        }
        Err(Error::Corrupt {
            path: self.path.to_path_buf(),
            location: format!("accessors[{}]", acc.index()),
            what: format!("read {read} elements, accessor count is {}", acc.count()),
        })
    }
}

/// The element of `acc` starting at byte `at` of `buffer` as `N` floats (§3.11 conversion);
/// `None` when it runs past the buffer.
fn read_element<const N: usize>(
    acc: &gltf::Accessor<'_>,
    buffer: &[u8],
    at: usize,
) -> Option<[f32; N]> {
    let (kind, normalized) = (acc.data_type(), acc.normalized());
    let size = kind.size();
    let mut out = [0.0; N];
    for (k, v) in out.iter_mut().enumerate() {
        let from = at.checked_add(k * size)?;
        *v = component(kind, buffer.get(from..from.checked_add(size)?)?, normalized);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::read_gltf;
    use super::super::tests::glb_bytes;

    /// One triangle at (0,0,0), (1,0,0), (0,1,0) (accessor 3, view 0) with indices 0, 1, 2
    /// (accessor 6, view 1); three unused accessors without `bufferView` (0–2, as a Draco GLB
    /// leaves them); NORMAL without `bufferView` (accessor 4, zeros); TEXCOORD_0 without
    /// `bufferView` but sparse (accessor 5: vertex 2 ↦ (0.5, 0.25), values in view 2, u8
    /// index in view 3).
    fn glb_with_viewless_accessors(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
        let mut bin = Vec::new();
        for v in [0.0f32, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0] {
            bin.extend(v.to_le_bytes());
        }
        bin.extend([0u16, 1, 2, 0].iter().flat_map(|i| i.to_le_bytes()));
        bin.extend([0.5f32, 0.25].iter().flat_map(|v| v.to_le_bytes()));
        bin.extend([2u8, 0, 0, 0]);
        let unused = json!({"componentType": 5126, "type": "VEC3", "count": 5});
        let mut doc = json!({
            "asset": {"version": "2.0"},
            "buffers": [{"byteLength": bin.len()}],
            "bufferViews": [
                {"buffer": 0, "byteOffset": 0, "byteLength": 36},
                {"buffer": 0, "byteOffset": 36, "byteLength": 6},
                {"buffer": 0, "byteOffset": 44, "byteLength": 8},
                {"buffer": 0, "byteOffset": 52, "byteLength": 1}],
            "accessors": [unused, unused, unused,
                {"bufferView": 0, "componentType": 5126, "type": "VEC3", "count": 3,
                 "min": [0, 0, 0], "max": [1, 1, 0]},
                {"componentType": 5126, "type": "VEC3", "count": 3},
                {"componentType": 5126, "type": "VEC2", "count": 3,
                 "sparse": {"count": 1,
                            "indices": {"bufferView": 3, "componentType": 5121},
                            "values": {"bufferView": 2}}},
                {"bufferView": 1, "componentType": 5123, "type": "SCALAR", "count": 3}],
            "meshes": [{"primitives": [{"attributes":
                {"POSITION": 3, "NORMAL": 4, "TEXCOORD_0": 5}, "indices": 6}]}],
            "nodes": [{"mesh": 0}],
            "scenes": [{"nodes": [0]}], "scene": 0
        });
        edit(&mut doc);
        glb_bytes(&doc, &bin)
    }

    fn read(glb: &[u8]) -> crate::Result<crate::mesh::Mesh> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("viewless.glb");
        std::fs::write(&path, glb).unwrap();
        read_gltf(&path)
    }

    #[test]
    fn accessors_without_buffer_view_read_as_zeros_or_are_ignored_and_sparse_values_apply() {
        let mesh = read(&glb_with_viewless_accessors(|_| {})).unwrap();
        assert_eq!(mesh.indices, [0, 1, 2]);
        assert_eq!(mesh.positions.len(), 3);
        let uvs = mesh.uvs.expect("TEXCOORD_0 read");
        assert_eq!(uvs, [[0.0, 0.0], [0.0, 0.0], [0.5, 0.25]]);
        // The all-zero NORMAL is unusable and replaced by the face normal (±Z).
        let normals = mesh.normals.expect("normals");
        assert!(normals.iter().all(|n| n[2].abs() > 0.99), "{normals:?}");
    }

    #[test]
    fn a_truly_bad_accessor_is_named_not_the_valid_viewless_ones_before_it() {
        // Accessor 7 (unused) points at a bufferView that does not exist.
        let glb = glb_with_viewless_accessors(|doc| {
            let bad = json!({"bufferView": 9, "componentType": 5126, "type": "VEC3", "count": 1});
            doc["accessors"].as_array_mut().unwrap().push(bad);
        });
        let e = read(&glb).unwrap_err().to_string();
        assert!(e.contains("accessors[7]"), "{e}");
        assert!(!e.contains("accessors[0]"), "{e}");
        // A sparse index past the accessor's count names the sparse accessor.
        let glb = glb_with_viewless_accessors(|doc| {
            doc["accessors"][5]["count"] = json!(2);
            doc["accessors"][3]["count"] = json!(2);
            doc["accessors"][6]["count"] = json!(2);
        });
        let e = read(&glb).unwrap_err().to_string();
        assert!(e.contains("accessors[5].sparse"), "{e}");
    }

    /// A used accessor without bufferView (and without sparse values) reads as zeros with one
    /// warning naming it: every vertex samples UV (0, 0). Unused ones, and sparse ones, say
    /// nothing (they are what the file means).
    #[test]
    fn a_used_viewless_accessor_warns_that_it_reads_as_zeros() {
        use crate::splats::domain::tests::warnings;
        let glb = glb_with_viewless_accessors(|doc| {
            doc["accessors"][5]
                .as_object_mut()
                .unwrap()
                .remove("sparse");
        });
        let (mesh, warned) = warnings(|| read(&glb));
        assert_eq!(mesh.unwrap().uvs.unwrap(), [[0.0, 0.0]; 3]);
        let uv: Vec<&String> = warned.iter().filter(|w| w.contains("TEXCOORD")).collect();
        assert_eq!(uv.len(), 1, "{warned:?}");
        assert!(uv[0].contains("accessors[5]") && uv[0].contains("no bufferView"));
        let (_, warned) = warnings(|| read(&glb_with_viewless_accessors(|_| {})));
        assert!(!warned.iter().any(|w| w.contains("TEXCOORD")), "{warned:?}");
    }
}
