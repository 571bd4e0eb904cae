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
        if acc.sparse().is_some() {
            return Err(Error::Unsupported {
                path: self.path.to_path_buf(),
                field: format!("{field}.sparse"),
                found: "a sparse accessor".into(),
                supported: "dense accessors".into(),
            });
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
        let view = acc.view().ok_or_else(|| Error::Unsupported {
            path: self.path.to_path_buf(),
            field: format!("{field}.bufferView"),
            found: "an accessor without bufferView (compressed or all-zero data)".into(),
            supported: "accessors backed by a bufferView".into(),
        })?;
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

    /// A dense accessor already checked by [`Self::check_accessor`], as floats: integer
    /// components as glTF 2.0 §3.11 converts them (normalized signed `c / (2^(b−1) − 1)`, at least
    /// −1; normalized unsigned `c / (2^b − 1)`; otherwise the integer's value), which is how
    /// `KHR_mesh_quantization` attributes are meant to be read (positions then scaled by their
    /// node's transform).
    pub(super) fn read_floats<const N: usize>(
        &self,
        acc: &gltf::Accessor<'_>,
    ) -> Result<Vec<[f32; N]>> {
        let corrupt = || Error::Corrupt {
            path: self.path.to_path_buf(),
            location: format!("accessors[{}]", acc.index()),
            what: "elements outside their buffer view".into(),
        };
        let view = acc.view().ok_or_else(corrupt)?;
        let buffer = self
            .buffers
            .get(view.buffer().index())
            .ok_or_else(corrupt)?;
        let (kind, normalized) = (acc.data_type(), acc.normalized());
        let size = kind.size();
        let stride = view.stride().unwrap_or(acc.size());
        let start = view.offset() + acc.offset();
        (0..acc.count())
            .map(|i| {
                let mut out = [0.0; N];
                for (k, v) in out.iter_mut().enumerate() {
                    let at = start + i * stride + k * size;
                    let bytes = buffer.get(at..at + size).ok_or_else(corrupt)?;
                    *v = component(kind, bytes, normalized);
                }
                Ok(out)
            })
            .collect()
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
