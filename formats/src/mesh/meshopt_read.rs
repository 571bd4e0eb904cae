//! `EXT_meshopt_compression` input: buffer views stored with meshoptimizer's codecs (what
//! `gltfpack -c`/`-cc` and Kiln's own mesh tiles write) decoded into the bytes their uncompressed
//! layout describes, so the rest of [`super::gltf_read`] reads them like any buffer view.
//!
//! Source: the extension's specification (github.com/KhronosGroup/glTF,
//! `extensions/2.0/Vendor/EXT_meshopt_compression/README.md`): a compressed view names the
//! `buffer`, `byteOffset` and `byteLength` of its compressed bytes, the decoded `byteStride` and
//! `count`, a `mode` (`ATTRIBUTES`: the vertex codec; `TRIANGLES`: the index codec;
//! `INDICES`: the index-sequence codec) and for attributes a `filter` (`NONE`, `OCTAHEDRAL`,
//! `QUATERNION`, `EXPONENTIAL`). The view's own `buffer` is then usually a *fallback* buffer
//! (`buffers[i].extensions.EXT_meshopt_compression.fallback = true`) with no bytes of its own:
//! its decoded contents are written here, at the view's `byteOffset`. Views whose buffer holds
//! real bytes (a fallback with a `uri`) are read as they are.
//!
//! Decoding is meshoptimizer's own (the `meshopt` crate's vendored library: "safe to use for
//! untrusted input"); every size and offset is checked first, and a stream that does not decode
//! is an error naming the file and the view.

use std::path::Path;

use serde_json::Value;

use crate::{Error, Result};

/// The extension's name.
pub(super) const EXTENSION: &str = super::EXT_MESHOPT_COMPRESSION;

/// Is `buffer` a fallback buffer without bytes of its own (no `uri`)? Its contents are the
/// decoded compressed views that point into it.
pub(super) fn is_empty_fallback(buffer: &gltf::json::Buffer) -> bool {
    buffer.uri.is_none()
        && buffer
            .extensions
            .as_ref()
            .and_then(|e| e.others.get(EXTENSION))
            .is_some_and(|e| e["fallback"].as_bool() == Some(true))
}

/// Decode every compressed view whose buffer is an empty fallback ([`is_empty_fallback`]) into
/// that buffer's bytes (allocated zeroed by the caller). Returns how many views were decoded.
///
/// # Errors
/// [`Error::Invalid`] for a compressed view whose fields break the specification's rules (mode,
/// filter, stride, counts) or do not fit its buffers; [`Error::Corrupt`] when meshoptimizer
/// cannot decode the stream.
pub(super) fn decode_views(
    path: &Path,
    root: &gltf::json::Root,
    buffers: &mut [Vec<u8>],
) -> Result<usize> {
    let fallbacks: Vec<bool> = root.buffers.iter().map(is_empty_fallback).collect();
    let mut decoded = 0;
    for (i, view) in root.buffer_views.iter().enumerate() {
        let Some(ext) = view
            .extensions
            .as_ref()
            .and_then(|e| e.others.get(EXTENSION))
        else {
            continue;
        };
        let target = view.buffer.value();
        if !fallbacks.get(target).copied().unwrap_or(false) {
            continue;
        }
        let field = format!("bufferViews[{i}].extensions.{EXTENSION}");
        let stream = Stream::parse(path, &field, ext)?;
        let bytes = stream.decode(path, &field, buffers)?;
        let offset = view.byte_offset.map_or(0, |o| o.0 as usize);
        let length = view.byte_length.0 as usize;
        let out = buffers
            .get_mut(target)
            .and_then(|b| b.get_mut(offset..offset.checked_add(length)?))
            .filter(|out| bytes.len() <= out.len())
            .ok_or_else(|| Error::Invalid {
                path: path.to_path_buf(),
                field: format!("bufferViews[{i}]"),
                expected: format!(
                    "room for the {} decoded bytes (count × byteStride) inside buffers[{target}]",
                    bytes.len()
                ),
                found: format!("byteOffset {offset}, byteLength {length}"),
            })?;
        out[..bytes.len()].copy_from_slice(&bytes);
        decoded += 1;
    }
    Ok(decoded)
}

/// What one compressed view says about its stream.
struct Stream {
    buffer: usize,
    offset: usize,
    length: usize,
    stride: usize,
    count: usize,
    mode: Mode,
    filter: Filter,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Attributes,
    Triangles,
    Indices,
}

#[derive(Clone, Copy, PartialEq)]
enum Filter {
    None,
    Octahedral,
    Quaternion,
    Exponential,
}

impl Stream {
    /// Read and check the extension object against the specification's rules.
    fn parse(path: &Path, field: &str, ext: &Value) -> Result<Self> {
        let invalid = |key: &str, expected: &str, found: String| Error::Invalid {
            path: path.to_path_buf(),
            field: format!("{field}.{key}"),
            expected: expected.into(),
            found,
        };
        let number = |key: &str, default: Option<usize>| -> Result<usize> {
            match ext.get(key) {
                None => default.ok_or_else(|| invalid(key, "a whole number", "nothing".into())),
                Some(v) => v
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| invalid(key, "a whole number", v.to_string())),
            }
        };
        let mode = match ext["mode"].as_str() {
            Some("ATTRIBUTES") => Mode::Attributes,
            Some("TRIANGLES") => Mode::Triangles,
            Some("INDICES") => Mode::Indices,
            _ => {
                return Err(invalid(
                    "mode",
                    "\"ATTRIBUTES\", \"TRIANGLES\" or \"INDICES\"",
                    ext["mode"].to_string(),
                ));
            }
        };
        let filter = match ext.get("filter").map(|f| f.as_str()) {
            None | Some(Some("NONE")) => Filter::None,
            Some(Some("OCTAHEDRAL")) => Filter::Octahedral,
            Some(Some("QUATERNION")) => Filter::Quaternion,
            Some(Some("EXPONENTIAL")) => Filter::Exponential,
            _ => {
                return Err(invalid(
                    "filter",
                    "\"NONE\", \"OCTAHEDRAL\", \"QUATERNION\" or \"EXPONENTIAL\"",
                    ext["filter"].to_string(),
                ));
            }
        };
        let stream = Self {
            buffer: number("buffer", None)?,
            offset: number("byteOffset", Some(0))?,
            length: number("byteLength", None)?,
            stride: number("byteStride", None)?,
            count: number("count", None)?,
            mode,
            filter,
        };
        let s = stream.stride;
        let stride_ok = match (mode, filter) {
            (Mode::Attributes, Filter::None | Filter::Exponential) => {
                s.is_multiple_of(4) && (4..=256).contains(&s)
            }
            (Mode::Attributes, Filter::Octahedral) => s == 4 || s == 8,
            (Mode::Attributes, Filter::Quaternion) => s == 8,
            (_, Filter::None) => s == 2 || s == 4,
            _ => {
                return Err(invalid(
                    "filter",
                    "\"NONE\" (filters apply to ATTRIBUTES only)",
                    ext["filter"].to_string(),
                ));
            }
        };
        if !stride_ok {
            return Err(invalid(
                "byteStride",
                "4 to 256 in steps of 4 for ATTRIBUTES (4 or 8 with OCTAHEDRAL, 8 with \
                 QUATERNION), 2 or 4 for TRIANGLES and INDICES",
                s.to_string(),
            ));
        }
        if mode == Mode::Triangles && !stream.count.is_multiple_of(3) {
            return Err(invalid(
                "count",
                "a multiple of 3 for TRIANGLES",
                stream.count.to_string(),
            ));
        }
        Ok(stream)
    }

    /// The decoded bytes (`count × byteStride`, little-endian as glTF stores them).
    fn decode(&self, path: &Path, field: &str, buffers: &[Vec<u8>]) -> Result<Vec<u8>> {
        let src = buffers
            .get(self.buffer)
            .and_then(|b| b.get(self.offset..self.offset.checked_add(self.length)?))
            .ok_or_else(|| Error::Invalid {
                path: path.to_path_buf(),
                field: format!("{field}.byteOffset"),
                expected: format!("a byte range inside buffers[{}]", self.buffer),
                found: format!("{} bytes at {}", self.length, self.offset),
            })?;
        let corrupt = |what: String| Error::Corrupt {
            path: path.to_path_buf(),
            location: field.to_string(),
            what,
        };
        // A decoded size no real asset reaches (4 GiB) is refused before allocating it.
        let size = self
            .count
            .checked_mul(self.stride)
            .filter(|&n| n <= u32::MAX as usize)
            .ok_or_else(|| corrupt(format!("count {} is too large", self.count)))?;
        // One wording for every codec: what failed, and what the user can do about it.
        let undecodable = |what: &str, code: String| {
            corrupt(format!(
                "its meshopt-compressed {what} do not decode (meshoptimizer code {code}): the \
                 file is damaged or truncated; export or download it again"
            ))
        };
        let codec = |e: meshopt::Error| {
            let code = match e {
                meshopt::Error::Native(code) => code.to_string(),
                other => other.to_string(),
            };
            undecodable("indices", code)
        };
        match (self.mode, self.stride) {
            (Mode::Attributes, _) => {
                // u32 words: the filters read 16- and 32-bit lanes, so the buffer must be aligned.
                let mut words = vec![0u32; size / 4];
                // SAFETY: `words` holds `count × stride` bytes, the size the decoder writes; the
                // decoder reads only `src` (its documented contract, checked against untrusted
                // input by meshoptimizer's fuzzers).
                let rc = unsafe {
                    meshopt::ffi::meshopt_decodeVertexBuffer(
                        words.as_mut_ptr().cast(),
                        self.count,
                        self.stride,
                        src.as_ptr(),
                        src.len(),
                    )
                };
                if rc != 0 {
                    return Err(undecodable("vertex attributes", rc.to_string()));
                }
                self.unfilter(&mut words);
                Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
            }
            (Mode::Triangles, 2) => Ok(le16(
                meshopt::decode_index_buffer::<u16>(src, self.count).map_err(codec)?,
            )),
            (Mode::Triangles, _) => Ok(le32(
                meshopt::decode_index_buffer::<u32>(src, self.count).map_err(codec)?,
            )),
            (Mode::Indices, 2) => Ok(le16(
                meshopt::decode_index_sequence::<u16>(src, self.count).map_err(codec)?,
            )),
            (Mode::Indices, _) => Ok(le32(
                meshopt::decode_index_sequence::<u32>(src, self.count).map_err(codec)?,
            )),
        }
    }

    /// Undo the attribute filter in place (`words` holds `count` elements of `stride` bytes).
    fn unfilter(&self, words: &mut [u32]) {
        let f = match self.filter {
            Filter::None => return,
            Filter::Octahedral => meshopt::ffi::meshopt_decodeFilterOct,
            Filter::Quaternion => meshopt::ffi::meshopt_decodeFilterQuat,
            Filter::Exponential => meshopt::ffi::meshopt_decodeFilterExp,
        };
        // SAFETY: `words` holds `count × stride` bytes, 4-byte aligned; the filters rewrite
        // exactly that many bytes in place, and `parse` checked the stride each filter takes.
        unsafe { f(words.as_mut_ptr().cast(), self.count, self.stride) };
    }
}

/// 16-bit indices as glTF stores them: little-endian.
fn le16(indices: Vec<u16>) -> Vec<u8> {
    indices.iter().flat_map(|i| i.to_le_bytes()).collect()
}

/// 32-bit indices as glTF stores them: little-endian.
fn le32(indices: Vec<u32>) -> Vec<u8> {
    indices.iter().flat_map(|i| i.to_le_bytes()).collect()
}
