//! The PLY container both PLY splat formats share: reading the header block (`ply` …
//! `end_header`) of a file, parsing it into elements and their properties with errors that
//! name the line, and the `vertex[i].field` check for NaN/±Inf values. The INRIA reader
//! ([`super::ply`]) and the PlayCanvas compressed PLY reader ([`super::compressed_ply`]) build on
//! it; it knows neither layout.
//!
//! Source: Greg Turk's PLY format description (as kept at paulbourke.net/dataformats/ply): the
//! header grammar of `format`, `element`, `property`, `property list`, `comment`, `obj_info`
//! and `end_header`.

use std::path::Path;

use super::GaussianSplats;
use crate::{Error, Result};

/// One `element` of the header with its scalar properties (name, type keyword).
#[derive(Debug)]
pub(super) struct ElementHeader {
    pub(super) name: String,
    pub(super) count: usize,
    pub(super) properties: Vec<(String, String)>,
}

/// What Kiln needs from a PLY header; parsed by hand so that errors can name the line.
#[derive(Debug)]
pub(super) struct PlyHeader {
    pub(super) format: String,
    pub(super) elements: Vec<ElementHeader>,
    pub(super) body_offset: usize,
}

impl PlyHeader {
    /// The element named `vertex` (the splats), if any.
    pub(super) fn vertex(&self) -> Option<&ElementHeader> {
        self.elements.iter().find(|e| e.name == "vertex")
    }

    /// True for a PlayCanvas compressed PLY: one with an `element chunk`.
    pub(super) fn is_compressed(&self) -> bool {
        self.elements.iter().any(|e| e.name == "chunk")
    }
}

/// An [`Error::Corrupt`] naming `path`, where in the file (`location`) and what is wrong.
pub(super) fn corrupt(path: &Path, location: impl Into<String>, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        location: location.into(),
        what: what.into(),
    }
}

/// Parse the header at the start of `bytes` (the whole file, or a block holding at least the
/// header): format, elements with their counts and properties (list properties typed `list`),
/// and the byte offset of the body.
///
/// # Errors
/// All name `path`: [`Error::Corrupt`] for an empty input, a first line other than `ply`, no
/// `end_header` line, a non-numeric element count, a property before any element, an
/// unrecognised line or no `format` line (with the line number); [`Error::Unsupported`] for a
/// format other than `ascii`, `binary_little_endian` or `binary_big_endian`.
pub(super) fn parse_header(path: &Path, bytes: &[u8]) -> Result<PlyHeader> {
    if bytes.is_empty() {
        return Err(corrupt(
            path,
            "byte 0",
            "empty file (0 bytes), expected a PLY header",
        ));
    }
    if !bytes.starts_with(b"ply\n") && !bytes.starts_with(b"ply\r\n") {
        let shown: String = String::from_utf8_lossy(&bytes[..bytes.len().min(8)])
            .chars()
            .map(|c| if c.is_control() { '.' } else { c })
            .collect();
        return Err(corrupt(
            path,
            "line 1",
            format!("wrong magic: expected `ply`, found `{shown}`"),
        ));
    }
    let mut offset = 0usize;
    let mut line_no = 0usize;
    let mut format = None;
    let mut elements: Vec<ElementHeader> = Vec::new();
    loop {
        let Some(len) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            return Err(corrupt(
                path,
                format!("line {}", line_no + 1),
                "truncated header: no `end_header` line",
            ));
        };
        let raw = &bytes[offset..offset + len];
        offset += len + 1;
        line_no += 1;
        let line = String::from_utf8_lossy(raw);
        let line = line.trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        let location = format!("header line {line_no}");
        match words.as_slice() {
            ["ply"] if line_no == 1 => {}
            ["end_header"] => break,
            ["comment", ..] | ["obj_info", ..] | [] => {}
            ["format", f, _version] => format = Some(f.to_string()),
            ["element", name, count] => {
                let count = count.parse::<usize>().map_err(|_| {
                    corrupt(
                        path,
                        &location,
                        format!("element count `{count}` is not a number"),
                    )
                })?;
                elements.push(ElementHeader {
                    name: name.to_string(),
                    count,
                    properties: Vec::new(),
                });
            }
            ["property", "list", _, _, name] => {
                let Some(el) = elements.last_mut() else {
                    return Err(corrupt(path, &location, "property before any element"));
                };
                el.properties.push((name.to_string(), "list".into()));
            }
            ["property", ty, name] => {
                let Some(el) = elements.last_mut() else {
                    return Err(corrupt(path, &location, "property before any element"));
                };
                el.properties.push((name.to_string(), ty.to_string()));
            }
            _ => {
                return Err(corrupt(
                    path,
                    &location,
                    format!("unrecognised header line `{line}`"),
                ));
            }
        }
    }
    let Some(format) = format else {
        return Err(corrupt(path, "header", "no `format` line"));
    };
    if !["ascii", "binary_little_endian", "binary_big_endian"].contains(&format.as_str()) {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "format".into(),
            found: format,
            supported: "ascii, binary_little_endian, binary_big_endian".into(),
        });
    }
    Ok(PlyHeader {
        format,
        elements,
        body_offset: offset,
    })
}

/// The header of the PLY file at `path` (only the header block is read).
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] naming `path` when it cannot be read; otherwise as
/// [`parse_header`].
pub(super) fn read_header(path: &Path) -> Result<PlyHeader> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let block = read_header_block(&mut file, path)?;
    parse_header(path, &block)
}

/// Read from the start of `file` until the header's `end_header` line is in the buffer (blocks
/// of 64 KiB, at most 16 MiB of header); the buffer may hold the start of the body too.
pub(super) fn read_header_block(file: &mut std::fs::File, path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    const BLOCK: usize = 64 * 1024;
    const MAX_HEADER: usize = 16 * 1024 * 1024;
    let mut buf = Vec::with_capacity(BLOCK);
    loop {
        let start = buf.len();
        buf.resize(start + BLOCK, 0);
        let got = file
            .read(&mut buf[start..])
            .map_err(|e| Error::io(path, e))?;
        buf.truncate(start + got);
        if got == 0 || buf.len() >= MAX_HEADER || header_ends_in(&buf) {
            return Ok(buf);
        }
    }
}

/// Whether `buf` holds a whole `end_header` line.
fn header_ends_in(buf: &[u8]) -> bool {
    buf.windows(b"end_header\n".len())
        .any(|w| w == b"end_header\n")
        || buf
            .windows(b"end_header\r\n".len())
            .any(|w| w == b"end_header\r\n")
}

/// Check that every value of `s` (as read from `path`) is finite. A `filter_3D` column is
/// checked on its own before it is baked in ([`super::mip_filter::is_valid`]), so a NaN here is
/// the named property's own (issue 44, trial F17).
///
/// # Errors
/// [`Error::Invalid`] naming `vertex[i].<property>` (the PLY property names: `x/y/z`,
/// `scale_*`, `rot_*`, `opacity`, `f_dc_*/f_rest_*`) and the first non-finite value.
pub(super) fn check_values_finite(path: &Path, s: &GaussianSplats) -> Result<()> {
    let k = s.sh_coeffs_per_channel();
    let fields: [(&str, &[f32], usize); 5] = [
        ("x/y/z", &s.means, 3),
        ("scale_*", &s.log_scales, 3),
        ("rot_*", &s.rotations, 4),
        ("opacity", &s.logit_opacities, 1),
        ("f_dc_*/f_rest_*", &s.sh_coeffs, k * 3),
    ];
    for (field, values, per) in fields {
        if let Some(pos) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("vertex[{}].{field}", pos / per),
                expected: "finite values (remove or re-export the splat)".into(),
                found: values[pos].to_string(),
            });
        }
    }
    Ok(())
}
