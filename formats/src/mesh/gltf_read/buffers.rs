//! The bytes a glTF asset points at: its buffers (the GLB BIN chunk, files, data URIs), the
//! bytes of a buffer view, and the URI resolution images share, all without panicking on
//! malformed URIs (the `gltf` crate's own URI decoder unwraps).
//!
//! Source: glTF 2.0 §3.6.1 (buffers and URIs: data URIs, relative paths), RFC 4648 §4
//! (base64), RFC 3986 §2.1 (percent-encoding).

use std::path::{Path, PathBuf};

use gltf::Document;

use super::Builder;
use crate::confined::ConfinedRoot;
use crate::mesh::meshopt_read;
use crate::uri::percent_decode;
use crate::{Error, Result};

/// Where a URI points: inline bytes or a file.
pub(super) enum UriTarget {
    Inline(Vec<u8>),
    File(PathBuf),
}

/// Resolve a glTF URI (data URI, `file:` or relative, percent-encoded) without panicking; a file
/// must lie inside the glTF's folder ([`ConfinedRoot`], applied after percent-decoding, so
/// `%2e%2e/` is `../`).
pub(super) fn resolve_uri(path: &Path, base: &Path, field: &str, uri: &str) -> Result<UriTarget> {
    if let Some(rest) = uri.strip_prefix("data:") {
        let payload =
            rest.split_once(";base64,")
                .map(|(_, b)| b)
                .ok_or_else(|| Error::Unsupported {
                    path: path.to_path_buf(),
                    field: field.into(),
                    found: "a data URI that is not base64".into(),
                    supported: "data:<mime>;base64,<payload>".into(),
                })?;
        return decode_base64(payload)
            .map(UriTarget::Inline)
            .ok_or_else(|| Error::Corrupt {
                path: path.to_path_buf(),
                location: field.into(),
                what: "invalid base64 in data URI".into(),
            });
    }
    let rel = uri
        .strip_prefix("file://")
        .or_else(|| uri.strip_prefix("file:"))
        .unwrap_or(uri);
    if rel.contains(':') && !uri.starts_with("file:") {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: field.into(),
            found: format!("URI scheme of `{uri}`"),
            supported: "relative paths, file: and data: URIs".into(),
        });
    }
    let root = ConfinedRoot::new(base)?;
    let file = root.resolve(path, field, base, &percent_decode(rel))?;
    Ok(UriTarget::File(file))
}

/// Load every buffer's bytes; the error names the buffer's URI (as a path) when it is missing.
pub(super) fn load_buffers(
    path: &Path,
    base: &Path,
    document: &Document,
    mut blob: Option<Vec<u8>>,
) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(document.buffers().len());
    for buffer in document.buffers() {
        let field = format!("buffers[{}].uri", buffer.index());
        if meshopt_read::is_empty_fallback(&document.as_json().buffers[buffer.index()]) {
            // Filled by `meshopt_read::decode_views`; it owns no bytes of the GLB's BIN chunk.
            out.push(vec![0; buffer.length()]);
            continue;
        }
        let data = match buffer.source() {
            gltf::buffer::Source::Bin => blob.take().ok_or_else(|| Error::Corrupt {
                path: path.to_path_buf(),
                location: format!("buffers[{}]", buffer.index()),
                what: "buffer without uri but the file has no GLB BIN chunk".into(),
            })?,
            gltf::buffer::Source::Uri(uri) => match resolve_uri(path, base, &field, uri)? {
                UriTarget::Inline(b) => b,
                UriTarget::File(file) => {
                    std::fs::read(&file).map_err(|e| match Error::io(&file, e) {
                        Error::NotFound { path, .. } => Error::NotFound {
                            path,
                            what: "glTF buffer (named by buffers[].uri)",
                        },
                        other => other,
                    })?
                }
            },
        };
        if data.len() < buffer.length() {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                location: format!("buffers[{}].byteLength", buffer.index()),
                what: format!(
                    "buffer holds {} bytes but byteLength says {}",
                    data.len(),
                    buffer.length()
                ),
            });
        }
        out.push(data);
    }
    Ok(out)
}

impl<'a> Builder<'a> {
    /// The bytes of `bufferViews[index]`; `None` when it does not exist or lies outside its buffer.
    pub(super) fn view_bytes(&self, index: usize) -> Option<&'a [u8]> {
        let v = self.doc().as_json().buffer_views.get(index)?;
        let start = v.byte_offset.map_or(0, |o| o.0 as usize);
        let end = start.checked_add(v.byte_length.0 as usize)?;
        self.buffers.get(v.buffer.value())?.get(start..end)
    }
}

/// Standard base64 (RFC 4648 §4) with optional padding; `None` on any invalid character.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | val(c)?;
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            3 => out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]),
            2 => out.push((acc >> 4) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_rfc4648_vectors() {
        assert_eq!(decode_base64("Zm9vYmFy").unwrap(), b"foobar");
        assert_eq!(decode_base64("Zm9vYg==").unwrap(), b"foob");
        assert_eq!(decode_base64("Zm9vYmE=").unwrap(), b"fooba");
        assert!(decode_base64("Zm9v!").is_none());
        assert_eq!(percent_decode("a%20b.bin"), "a b.bin");
        assert_eq!(percent_decode("bad%ZZ%"), "bad%ZZ%");
    }

    /// Issue 41, property: over generated URIs (absolute, `..` anywhere, `./`, links in and out,
    /// some `.` and `/` percent-encoded, `file:` prefixes), `resolve_uri` (buffers and images)
    /// refuses exactly the names that leave the glTF's folder once decoded, naming the field;
    /// `data:` URIs are never refused.
    #[test]
    fn uris_are_refused_exactly_when_they_leave_the_gltf_folder() {
        use crate::confined::testing::{Seeded, is_refusal, layout, model_is_inside};
        let (_t, root) = layout();
        let gltf = root.join("m.gltf");
        let mut g = Seeded(4102);
        for case in 0..2000 {
            let written = g.uri_path();
            let mut uri = g.percent_encode_some(&written);
            if case % 7 == 0 && !uri.starts_with('/') {
                uri = format!("file:{uri}");
            }
            let field = if case % 2 == 0 {
                "buffers[0].uri"
            } else {
                "images[0].uri"
            };
            let got = resolve_uri(&gltf, &root, field, &uri);
            let refused = got.as_ref().err().is_some_and(|e| is_refusal(e, field));
            let inside = model_is_inside(&root, &[], &written);
            assert_eq!(refused, !inside, "case {case}: `{uri}` (`{written}`)");
            assert!(refused || got.is_ok(), "case {case}: `{uri}`");
        }
        let data = resolve_uri(&gltf, &root, "buffers[0].uri", "data:x;base64,AA==");
        assert!(matches!(data, Ok(UriTarget::Inline(_))));
        let abs = resolve_uri(&gltf, &root, "images[0].uri", "file:///etc/passwd")
            .err()
            .unwrap();
        assert!(is_refusal(&abs, "images[0].uri"), "{abs}");
    }
}
