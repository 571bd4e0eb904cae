//! PlayCanvas "compressed PLY" (`.compressed.ply`): 3DGS splats quantised in chunks of 256.
//!
//! Source: playcanvas/splat-transform `src/lib/readers/decompress-ply.ts` (decoder) and
//! `src/lib/writers/compressed-chunk.ts` + `write-compressed-ply.ts` (encoder), the format
//! SuperSplat and the PlayCanvas engine read; summarised in shared/research/tiles-formats.md
//! §2.7. Layout (`binary_little_endian`, elements in this order):
//!
//! - `element chunk C`, C = ⌈N / 256⌉, 18 `float`s: `min_x min_y min_z max_x max_y max_z`
//!   (position bounds, metres), `min_scale_x..z max_scale_x..z` (log-scale bounds, clamped to
//!   ±20), `min_r min_g min_b max_r max_g max_b` (bounds of the base colour 0.5 + C0·f_dc).
//!   Older files have only the first 12 (colour then stored directly in 0..1).
//! - `element vertex N`, 4 `uint`s per splat, splat i belonging to chunk ⌊i / 256⌋:
//!   - `packed_position`: x 11 bits (31..21), y 10 bits (20..11), z 11 bits (10..0), each the
//!     unsigned normalised position t = (v − min)/(max − min) within the chunk bounds;
//!   - `packed_scale`: the same 11/10/11 packing of the log-scales within the chunk's scale
//!     bounds;
//!   - `packed_rotation`: 2 bits (31..30) index of the largest |component| of the unit
//!     quaternion in `rot_0..3` order (= Kiln's wxyz), the quaternion negated so that component
//!     is positive, then the other three in index order, 10 bits each, storing v·√½ + 0.5;
//!   - `packed_color`: r, g, b, a 8 bits each (31..24, 23..16, 15..8, 7..0); rgb normalised in
//!     the chunk colour bounds, a = sigmoid(opacity).
//! - optional `element sh N` with `uchar f_rest_0..f_rest_{m−1}`, m ∈ {9, 24, 45}, channel-major
//!   as in the INRIA PLY; byte q = clamp(⌊(v/8 + 0.5)·256⌋, 0, 255), decoded as
//!   ((q + 0.5)/256 − 0.5)·8, except q = 0 → −4 and q = 255 → +4.
//!
//! Unsigned normalisation: t → round(t·(2^bits − 1)), decoded t = q/(2^bits − 1); a chunk whose
//! range is below 1e−5 stores 0 (every splat decodes to `min`).
//!
//! Quantisation bounds (what [`write()`] promises; chunk range r = max − min):
//! position and log-scale error ≤ r/(2·2047) on x and z, ≤ r/(2·1023) on y; base colour error ≤
//! r/(2·255), i.e. f_dc error ≤ r/(2·255·C0); linear opacity ≤ 0.5/255; each stored quaternion
//! component ≤ √2·0.5/1023 ≈ 6.9e−4; SH ≤ 1/64 for |v| < 3.97 (values beyond ±4 clamp).
//!
//! Splat order is **not** preserved by the writer: like splat-transform it sorts splats along a
//! Morton (Z-order) curve of their positions so that each chunk is spatially compact, which is
//! what makes the 10–11-bit chunk-relative positions precise. The decoder keeps file order.

use std::path::Path;

use super::placed::{PlacedRef, PlacedSplats};
use super::ply_container::{PlyHeader, check_values_finite, corrupt, parse_header};
use super::{GaussianSplats, domain, logit, sigmoid};
use crate::atomic_write::write_atomic;
use crate::{Error, Result};

/// Splats per chunk.
pub const CHUNK_SPLATS: usize = 256;
/// Zeroth-order SH basis constant: base colour = 0.5 + C0·f_dc.
const SH_C0: f64 = 0.282_094_791_773_878_14;
/// Log-scale bounds are clamped to ±this (the reference clamps infinities this way).
const SCALE_CLAMP: f32 = 20.0;
/// Ranges below this store t = 0 for every splat of the chunk (reference behaviour).
const MIN_RANGE: f64 = 1e-5;
/// Decoded opacities are kept in [ε, 1 − ε] so that logits stay finite (alpha byte 0 or 255).
const ALPHA_EPS: f64 = 1e-6;
/// Chunk properties in file order; the last six (colour bounds) are optional on read.
const CHUNK_PROPS: [&str; 18] = [
    "min_x",
    "min_y",
    "min_z",
    "max_x",
    "max_y",
    "max_z",
    "min_scale_x",
    "min_scale_y",
    "min_scale_z",
    "max_scale_x",
    "max_scale_y",
    "max_scale_z",
    "min_r",
    "min_g",
    "min_b",
    "max_r",
    "max_g",
    "max_b",
];
/// Vertex properties in file order.
const VERTEX_PROPS: [&str; 4] = [
    "packed_position",
    "packed_rotation",
    "packed_scale",
    "packed_color",
];

/// Byte size of a PLY scalar type keyword, `None` for lists and unknown names.
fn type_size(ty: &str) -> Option<usize> {
    Some(match ty {
        "char" | "int8" | "uchar" | "uint8" => 1,
        "short" | "int16" | "ushort" | "uint16" => 2,
        "int" | "int32" | "uint" | "uint32" | "float" | "float32" => 4,
        "double" | "float64" => 8,
        _ => return None,
    })
}

/// One element's place in the body: byte offset, row stride and property offsets by name.
struct ElementLayout<'h> {
    offset: usize,
    stride: usize,
    count: usize,
    props: Vec<(&'h str, &'h str, usize)>,
}

impl ElementLayout<'_> {
    /// Byte offset of property `name` within a row, if it has type class `types`.
    fn column(&self, path: &Path, element: &str, name: &str, types: &[&str]) -> Result<usize> {
        let Some(&(_, ty, at)) = self.props.iter().find(|(n, _, _)| *n == name) else {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("{element}.{name}"),
                expected: format!(
                    "a `property {} {name}` (PlayCanvas compressed PLY)",
                    types[0]
                ),
                found: "no such property".into(),
            });
        };
        if !types.contains(&ty) {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: format!("{element}.{name}"),
                found: format!("type `{ty}`"),
                supported: types.join(", "),
            });
        }
        Ok(at)
    }
}

fn read_f32(body: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]])
}

fn read_u32(body: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]])
}

/// Decode a compressed PLY (`bytes`, the whole file) whose header [`read`] already parsed (it
/// has an `element chunk`). Returns splats in file order, training parametrisation.
///
/// # Errors
/// All name `path`: [`Error::Unsupported`] for a non-`binary_little_endian` body, list or
/// unexpected property types, or an `f_rest` count other than 9/24/45; [`Error::Invalid`] for a
/// missing element or property (named), a chunk count other than ⌈N/256⌉, an `sh` row count
/// other than N, or a body longer than the header implies; [`Error::Corrupt`] for a truncated
/// body.
fn decode(path: &Path, bytes: &[u8], header: &PlyHeader) -> Result<GaussianSplats> {
    if header.format != "binary_little_endian" {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "format".into(),
            found: format!("{} compressed PLY", header.format),
            supported: "binary_little_endian (what SuperSplat and splat-transform write)".into(),
        });
    }
    let layouts = element_layouts(path, bytes, header)?;
    let find = |name: &str| -> Result<&ElementLayout> {
        layouts
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| l)
            .ok_or_else(|| Error::Invalid {
                path: path.to_path_buf(),
                field: format!("element {name}"),
                expected: format!("an `element {name}` (PlayCanvas compressed PLY)"),
                found: "no such element".into(),
            })
    };
    let columns = Columns::locate(path, find("chunk")?, find("vertex")?)?;
    columns.check_bounds_finite(path, bytes)?;
    let sh = layouts
        .iter()
        .find(|(name, _)| *name == "sh")
        .map(|(_, l)| l);
    let sh = match sh {
        None => None,
        Some(sh) => Some(ShColumns::locate(path, sh, columns.vertex.count)?),
    };
    Ok(columns.decode(bytes, sh.as_ref()))
}

/// Where every element's rows lie in the body (unknown extra elements included, so they are
/// skipped correctly), checked against the body's length.
fn element_layouts<'h>(
    path: &Path,
    bytes: &[u8],
    header: &'h PlyHeader,
) -> Result<Vec<(&'h str, ElementLayout<'h>)>> {
    let mut layouts = Vec::new();
    let mut offset = header.body_offset;
    for el in &header.elements {
        let mut props = Vec::new();
        let mut stride = 0;
        for (name, ty) in &el.properties {
            let Some(size) = type_size(ty) else {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    field: format!("{}.{name}", el.name),
                    found: format!("a `{ty}` property"),
                    supported: "scalar properties in a compressed PLY".into(),
                });
            };
            props.push((name.as_str(), ty.as_str(), stride));
            stride += size;
        }
        let layout = ElementLayout {
            offset,
            stride,
            count: el.count,
            props,
        };
        offset = stride
            .checked_mul(el.count)
            .and_then(|b| b.checked_add(offset))
            .ok_or_else(|| {
                corrupt(
                    path,
                    format!("element {}", el.name),
                    format!("{} rows overflow", el.count),
                )
            })?;
        layouts.push((el.name.as_str(), layout));
    }
    if bytes.len() < offset {
        return Err(corrupt(
            path,
            format!("byte {}", bytes.len()),
            format!(
                "truncated body: the header's elements need {} bytes, found {}",
                offset - header.body_offset,
                bytes.len() - header.body_offset
            ),
        ));
    }
    if bytes.len() > offset {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "elements".into(),
            expected: format!("{} body bytes", offset - header.body_offset),
            found: format!(
                "{} bytes (element counts do not match the data)",
                bytes.len() - header.body_offset
            ),
        });
    }
    Ok(layouts)
}

const FLOAT: &[&str] = &["float", "float32"];
const UINT: &[&str] = &["uint", "uint32"];
const UCHAR: &[&str] = &["uchar", "uint8"];

/// The chunk and vertex elements with the byte offsets of the properties decoding reads.
struct Columns<'a, 'h> {
    chunk: &'a ElementLayout<'h>,
    vertex: &'a ElementLayout<'h>,
    /// The chunk's bounds: position, scale and (when present) colour min/max.
    chunk_cols: Vec<usize>,
    has_colour_bounds: bool,
    /// The vertex's packed position, rotation, scale and colour.
    vertex_cols: Vec<usize>,
}

impl<'a, 'h> Columns<'a, 'h> {
    /// Check one chunk per 256 vertices and find the properties.
    fn locate(
        path: &Path,
        chunk: &'a ElementLayout<'h>,
        vertex: &'a ElementLayout<'h>,
    ) -> Result<Self> {
        let n = vertex.count;
        let chunks_needed = n.div_ceil(CHUNK_SPLATS);
        if chunk.count != chunks_needed {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: "element chunk".into(),
                expected: format!("{chunks_needed} chunks (⌈{n} vertices / 256⌉)"),
                found: format!("{} chunks", chunk.count),
            });
        }
        let has_colour_bounds = chunk.props.iter().any(|(name, _, _)| *name == "min_r");
        let used = if has_colour_bounds { 18 } else { 12 };
        let chunk_cols = CHUNK_PROPS[..used]
            .iter()
            .map(|name| chunk.column(path, "chunk", name, FLOAT))
            .collect::<Result<Vec<_>>>()?;
        let vertex_cols = VERTEX_PROPS
            .iter()
            .map(|name| vertex.column(path, "vertex", name, UINT))
            .collect::<Result<Vec<_>>>()?;
        Ok(Columns {
            chunk,
            vertex,
            chunk_cols,
            has_colour_bounds,
            vertex_cols,
        })
    }

    /// Refuse a NaN/±Inf chunk bound, naming the chunk row and property: every vertex of that
    /// chunk would decode from it, so naming the first such vertex would point at a row that is
    /// fine (issue 44, trial F18).
    fn check_bounds_finite(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        for c in 0..self.chunk.count {
            let row = self.chunk.offset + c * self.chunk.stride;
            for (&col, name) in self.chunk_cols.iter().zip(CHUNK_PROPS) {
                let value = read_f32(bytes, row + col);
                if !value.is_finite() {
                    return Err(Error::Invalid {
                        path: path.to_path_buf(),
                        field: format!("chunk[{c}].{name}"),
                        expected: format!(
                            "finite bounds (they dequantise vertices {}..{}; re-export the file)",
                            c * CHUNK_SPLATS,
                            ((c + 1) * CHUNK_SPLATS).min(self.vertex.count)
                        ),
                        found: value.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Every vertex dequantised against its chunk's bounds, with its higher SH bands when the
    /// file has an `sh` element: splats in file order, training parametrisation.
    fn decode(&self, bytes: &[u8], sh: Option<&ShColumns<'_, '_>>) -> GaussianSplats {
        let n = self.vertex.count;
        let sh_degree = sh.map_or(0, |s| s.degree);
        let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
        let mut out = GaussianSplats {
            means: Vec::with_capacity(n * 3),
            log_scales: Vec::with_capacity(n * 3),
            rotations: Vec::with_capacity(n * 4),
            logit_opacities: Vec::with_capacity(n),
            sh_coeffs: Vec::with_capacity(n * k * 3),
            sh_degree,
        };
        let mut bounds = [0f32; 18];
        for i in 0..n {
            if i % CHUNK_SPLATS == 0 {
                let row = self.chunk.offset + (i / CHUNK_SPLATS) * self.chunk.stride;
                for (b, &col) in bounds.iter_mut().zip(&self.chunk_cols) {
                    *b = read_f32(bytes, row + col);
                }
            }
            self.push_vertex(bytes, i, &bounds, &mut out);
            if let Some(sh) = sh {
                sh.push_rest(bytes, i, k, &mut out);
            }
        }
        out
    }

    /// Vertex `i`'s mean, log-scales, rotation, DC colour and opacity.
    fn push_vertex(&self, bytes: &[u8], i: usize, bounds: &[f32; 18], out: &mut GaussianSplats) {
        let row = self.vertex.offset + i * self.vertex.stride;
        let [pos, rot, scale, color] =
            [0, 1, 2, 3].map(|j| read_u32(bytes, row + self.vertex_cols[j]));
        let p = unpack_11_10_11(pos);
        let s = unpack_11_10_11(scale);
        for a in 0..3 {
            out.means.push(lerp(bounds[a], bounds[3 + a], p[a]));
            out.log_scales
                .push(lerp(bounds[6 + a], bounds[9 + a], s[a]));
        }
        out.rotations.extend_from_slice(&unpack_rotation(rot));
        let rgba = [24, 16, 8, 0].map(|shift| ((color >> shift) & 0xff) as f64 / 255.0);
        for c in 0..3 {
            let base = if self.has_colour_bounds {
                lerp(bounds[12 + c], bounds[15 + c], rgba[c]) as f64
            } else {
                rgba[c]
            };
            out.sh_coeffs.push(((base - 0.5) / SH_C0) as f32);
        }
        out.logit_opacities
            .push(logit(rgba[3].clamp(ALPHA_EPS, 1.0 - ALPHA_EPS)));
    }
}

/// The `sh` element: its SH degree (from its count of `f_rest_*`) and their byte offsets.
struct ShColumns<'a, 'h> {
    sh: &'a ElementLayout<'h>,
    degree: u32,
    cols: Vec<usize>,
}

impl<'a, 'h> ShColumns<'a, 'h> {
    /// Check 9, 24 or 45 `f_rest_*` and one row per vertex.
    fn locate(path: &Path, sh: &'a ElementLayout<'h>, n: usize) -> Result<Self> {
        let m = sh.props.len();
        let Some(degree) = [0usize, 9, 24, 45].iter().position(|&c| c == m) else {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: "sh.f_rest_*".into(),
                found: format!("{m} f_rest properties"),
                supported: "9, 24 or 45 (SH degree 1, 2, 3)".into(),
            });
        };
        if sh.count != n {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: "element sh".into(),
                expected: format!("{n} rows (one per vertex)"),
                found: format!("{} rows", sh.count),
            });
        }
        let cols = (0..m)
            .map(|i| sh.column(path, "sh", &format!("f_rest_{i}"), UCHAR))
            .collect::<Result<Vec<_>>>()?;
        Ok(ShColumns {
            sh,
            degree: degree as u32,
            cols,
        })
    }

    /// Vertex `i`'s SH bands above DC (`k` coefficients per channel in all), coefficient-major.
    fn push_rest(&self, bytes: &[u8], i: usize, k: usize, out: &mut GaussianSplats) {
        let row = self.sh.offset + i * self.sh.stride;
        for kk in 1..k {
            for c in 0..3 {
                let q = bytes[row + self.cols[c * (k - 1) + (kk - 1)]];
                out.sh_coeffs.push(dequantize_sh(q));
            }
        }
    }
}

fn lerp(min: f32, max: f32, t: f64) -> f32 {
    (min as f64 * (1.0 - t) + max as f64 * t) as f32
}

fn unpack_unorm(v: u32, bits: u32) -> f64 {
    let max = (1u32 << bits) - 1;
    (v & max) as f64 / max as f64
}

fn unpack_11_10_11(v: u32) -> [f64; 3] {
    [
        unpack_unorm(v >> 21, 11),
        unpack_unorm(v >> 11, 10),
        unpack_unorm(v, 11),
    ]
}

/// Inverse of [`pack_rotation`]: a unit quaternion in `rot_0..3` (wxyz) order.
fn unpack_rotation(v: u32) -> [f32; 4] {
    let largest = (v >> 30) as usize;
    let small =
        [20, 10, 0].map(|shift| (unpack_unorm(v >> shift, 10) - 0.5) * std::f64::consts::SQRT_2);
    let m = (1.0 - small.iter().map(|x| x * x).sum::<f64>())
        .max(0.0)
        .sqrt();
    let mut q = [0f32; 4];
    let mut j = 0;
    for (i, out) in q.iter_mut().enumerate() {
        if i == largest {
            *out = m as f32;
        } else {
            *out = small[j] as f32;
            j += 1;
        }
    }
    q
}

fn dequantize_sh(q: u8) -> f32 {
    let n = match q {
        0 => 0.0,
        255 => 1.0,
        q => (q as f32 + 0.5) / 256.0,
    };
    (n - 0.5) * 8.0
}

fn quantize_sh(v: f32) -> u8 {
    ((v as f64 / 8.0 + 0.5) * 256.0).floor().clamp(0.0, 255.0) as u8
}

fn pack_unorm(t: f64, bits: u32) -> u32 {
    let max = ((1u32 << bits) - 1) as f64;
    (t * max + 0.5).floor().clamp(0.0, max) as u32
}

fn normalize(x: f64, min: f64, max: f64) -> f64 {
    if x <= min {
        0.0
    } else if x >= max {
        1.0
    } else if max - min < MIN_RANGE {
        0.0
    } else {
        (x - min) / (max - min)
    }
}

fn pack_11_10_11(t: [f64; 3]) -> u32 {
    (pack_unorm(t[0], 11) << 21) | (pack_unorm(t[1], 10) << 11) | pack_unorm(t[2], 11)
}

/// "Largest component" packing of a quaternion in wxyz (= `rot_0..3`) order; `q` non-zero.
fn pack_rotation(q: [f64; 4]) -> u32 {
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let mut q = q.map(|v| v / norm);
    let largest = (0..4).fold(0, |m, i| if q[i].abs() > q[m].abs() { i } else { m });
    if q[largest] < 0.0 {
        q = q.map(|v| -v);
    }
    let mut out = largest as u32;
    for (i, v) in q.iter().enumerate() {
        if i != largest {
            out = (out << 10) | pack_unorm(v * std::f64::consts::FRAC_1_SQRT_2 + 0.5, 10);
        }
    }
    out
}

/// Order of splat indices along a Morton (Z-order) curve of `means` (`[N, 3]`): each axis is
/// quantised to 21 bits within the bounding box and the bits interleaved; ties keep input
/// order. This is the order [`write()`] writes splats in.
pub fn morton_order(means: &[f32]) -> Vec<usize> {
    let n = means.len() / 3;
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for p in means.chunks_exact(3) {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    let spread = |mut v: u64| {
        // Insert two zero bits between each of the low 21 bits.
        v &= 0x1f_ffff;
        v = (v | (v << 32)) & 0x1f_0000_0000_ffff;
        v = (v | (v << 16)) & 0x1f_0000_ff00_00ff;
        v = (v | (v << 8)) & 0x100f_00f0_0f00_f00f;
        v = (v | (v << 4)) & 0x10c3_0c30_c30c_30c3;
        v = (v | (v << 2)) & 0x1249_2492_4924_9249;
        v
    };
    let max_cell = ((1u64 << 21) - 1) as f64;
    let mut keys: Vec<(u64, usize)> = (0..n)
        .map(|i| {
            let mut code = 0u64;
            for a in 0..3 {
                let range = (hi[a] - lo[a]) as f64;
                let t = if range > 0.0 {
                    (means[i * 3 + a] - lo[a]) as f64 / range
                } else {
                    0.0
                };
                code |= spread((t * max_cell).round() as u64) << (2 - a);
            }
            (code, i)
        })
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|(_, i)| i).collect()
}

/// The bytes of a PlayCanvas compressed PLY holding `splats` (layout in the module docs), splats
/// in [`morton_order`]. N = 0 gives a valid file with empty elements.
///
/// - `splats`: N ≥ 0 splats, SH degree 0..=3 (degree ≥ 1 adds the `sh` element), positions in
///   metres in any frame (stored as given).
///
/// # Errors
/// [`Error::InvalidInput`] when shapes are inconsistent, a value is NaN/±Inf or a quaternion
/// has zero length (with the splat index).
fn encode(splats: &GaussianSplats) -> Result<Vec<u8>> {
    const CONTEXT: &str = "compressed PLY encode";
    splats.check_shapes(CONTEXT)?;
    splats.check_finite(CONTEXT)?;
    let n = splats.len();
    let k = splats.sh_coeffs_per_channel();
    for i in 0..n {
        let r = &splats.rotations[i * 4..i * 4 + 4];
        if r.iter().all(|v| *v == 0.0) {
            return Err(Error::InvalidInput {
                context: CONTEXT,
                field: format!("rotations[splat {i}]"),
                expected: "a non-zero quaternion (wxyz)".into(),
                found: format!("{r:?}"),
            });
        }
    }
    let order = morton_order(&splats.means);
    let chunks = n.div_ceil(CHUNK_SPLATS);
    let rest = 3 * (k - 1);

    let mut header = format!(
        "ply\nformat binary_little_endian 1.0\ncomment Generated by Kiln\nelement chunk {chunks}\n"
    );
    for p in CHUNK_PROPS {
        header.push_str(&format!("property float {p}\n"));
    }
    header.push_str(&format!("element vertex {n}\n"));
    for p in VERTEX_PROPS {
        header.push_str(&format!("property uint {p}\n"));
    }
    if rest > 0 {
        header.push_str(&format!("element sh {n}\n"));
        for i in 0..rest {
            header.push_str(&format!("property uchar f_rest_{i}\n"));
        }
    }
    header.push_str("end_header\n");

    let mut chunk_data: Vec<u8> = Vec::with_capacity(chunks * 18 * 4);
    let mut vertex_data: Vec<u8> = Vec::with_capacity(n * 16);
    let mut sh_data: Vec<u8> = Vec::with_capacity(n * rest);
    let base_colour = |i: usize, c: usize| splats.sh_coeffs[i * k * 3 + c] as f64 * SH_C0 + 0.5;
    for members in order.chunks(CHUNK_SPLATS) {
        // Bounds: positions, log-scales (clamped to ±20), base colours.
        let mut lo = [f64::INFINITY; 9];
        let mut hi = [f64::NEG_INFINITY; 9];
        for &i in members {
            for a in 0..3 {
                let values = [
                    splats.means[i * 3 + a] as f64,
                    splats.log_scales[i * 3 + a] as f64,
                    base_colour(i, a),
                ];
                for (g, v) in values.into_iter().enumerate() {
                    lo[g * 3 + a] = lo[g * 3 + a].min(v);
                    hi[g * 3 + a] = hi[g * 3 + a].max(v);
                }
            }
        }
        for a in 3..6 {
            let c = SCALE_CLAMP as f64;
            lo[a] = lo[a].clamp(-c, c);
            hi[a] = hi[a].clamp(-c, c);
        }
        // The decoder lerps between the stored f32 bounds, so normalise against those.
        let lo = lo.map(|v| v as f32 as f64);
        let hi = hi.map(|v| v as f32 as f64);
        for g in 0..3 {
            for a in 0..3 {
                chunk_data.extend_from_slice(&(lo[g * 3 + a] as f32).to_le_bytes());
            }
            for a in 0..3 {
                chunk_data.extend_from_slice(&(hi[g * 3 + a] as f32).to_le_bytes());
            }
        }
        for &i in members {
            let t = |g: usize, v: [f64; 3]| {
                std::array::from_fn(|a| normalize(v[a], lo[g * 3 + a], hi[g * 3 + a]))
            };
            let p = std::array::from_fn(|a| splats.means[i * 3 + a] as f64);
            let s = std::array::from_fn(|a| splats.log_scales[i * 3 + a] as f64);
            let c: [f64; 3] = std::array::from_fn(|a| base_colour(i, a));
            let tc: [f64; 3] = t(2, c);
            let q = std::array::from_fn(|j| splats.rotations[i * 4 + j] as f64);
            let color = (pack_unorm(tc[0], 8) << 24)
                | (pack_unorm(tc[1], 8) << 16)
                | (pack_unorm(tc[2], 8) << 8)
                | pack_unorm(sigmoid(splats.logit_opacities[i]), 8);
            for word in [
                pack_11_10_11(t(0, p)),
                pack_rotation(q),
                pack_11_10_11(t(1, s)),
                color,
            ] {
                vertex_data.extend_from_slice(&word.to_le_bytes());
            }
            for c in 0..3 {
                for kk in 1..k {
                    sh_data.push(quantize_sh(splats.sh_coeffs[(i * k + kk) * 3 + c]));
                }
            }
        }
    }
    let mut out = header.into_bytes();
    out.extend_from_slice(&chunk_data);
    out.extend_from_slice(&vertex_data);
    out.extend_from_slice(&sh_data);
    Ok(out)
}

/// Short name of the format in messages.
pub const NAME: &str = "compressed PLY";

/// Write splats as a PlayCanvas compressed PLY at `path`, atomically (temporary file + rename):
/// the layout of the module docs, splats reordered along a Morton curve ([`morton_order`]),
/// positions stored as given, absolute (chunk bounds are f32).
///
/// - `path`: destination; missing parent directories are created.
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means; N ≥ 0 splats, SH
///   degree 0..=3 (degree ≥ 1 adds the `sh` element), positions in metres in any frame. A
///   non-zero origin is added to the means in f64 and cast to f32.
///
/// # Errors
/// [`Error::PositionRange`] naming `path` when that cast moves a coordinate by more than
/// [`super::placed::POSITION_TOLERANCE_M`] (nothing is written); [`Error::InvalidInput`] when
/// shapes are inconsistent, a value is NaN/±Inf or a quaternion has zero length (with the splat
/// index); [`Error::Io`] naming `path` when writing fails (the old file, if any, is kept).
pub fn write<'a>(path: &Path, splats: impl Into<PlacedRef<'a>>) -> Result<()> {
    let absolute = splats.into().absolute_f32_for(
        path,
        NAME,
        "f32 chunk bounds (positions quantised between them)",
    )?;
    let bytes = encode(&absolute)?;
    warn_clamps(path, &absolute);
    write_atomic(path, &bytes)
}

/// Warn (naming `path`) about the values [`encode`] clamps: log-scales beyond
/// ±[`SCALE_CLAMP`] and higher SH beyond the byte's [−4, 4] (the [`domain`] policy: no writer
/// clamps silently). Call after `encode` succeeded.
fn warn_clamps(path: &Path, splats: &GaussianSplats) {
    let n = splats.len();
    let k3 = splats.sh_coeffs_per_channel() * 3;
    let logs = splats
        .log_scales
        .iter()
        .enumerate()
        .map(|(j, &v)| (j / 3, v));
    domain::warn_write_clamp(
        path,
        NAME,
        "log_scales",
        logs,
        n,
        (-SCALE_CLAMP, SCALE_CLAMP),
    );
    let rest = splats
        .sh_coeffs
        .iter()
        .enumerate()
        .filter(|(j, _)| j % k3 >= 3)
        .map(|(j, &v)| (j / k3, v));
    domain::warn_write_clamp(path, NAME, "SH degree ≥ 1 (f_rest_*)", rest, n, (-4.0, 4.0));
}

/// Read a PlayCanvas compressed PLY (layout in the module docs) into splats in file order,
/// training parametrisation, at origin `[0, 0, 0]` (the format stores f32 positions).
///
/// - `path`: a compressed PLY, i.e. one whose header has an `element chunk`.
///
/// # Errors
/// All name `path`: [`Error::NotFound`] / [`Error::Io`] when it cannot be read;
/// [`Error::Corrupt`] for an empty file, a header without `end_header` or a truncated body;
/// [`Error::Unsupported`] for a file without `element chunk` (an INRIA PLY: read it with
/// [`super::ply::read`]), a non-`binary_little_endian` body, list or unexpected property
/// types, or an `f_rest` count other than 9/24/45; [`Error::Invalid`] for a missing element or
/// property (named), a chunk count other than ⌈N/256⌉, an `sh` row count other than N, a body
/// longer than the header implies, or a NaN/±Inf value decoded (with the vertex index).
pub fn read(path: &Path) -> Result<PlacedSplats> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let header = parse_header(path, &bytes)?;
    if !header.is_compressed() {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "element chunk".into(),
            found: "a PLY without `element chunk` (an INRIA 3DGS PLY?)".into(),
            supported: "PlayCanvas compressed PLYs here; read INRIA PLYs with \
                        kiln_formats::splats::ply::read, or with convert::read, which picks the \
                        reader by content"
                .into(),
        });
    }
    let splats = decode(path, &bytes, &header)?;
    check_values_finite(path, &splats)?;
    domain::checked(path, &ATTRIBUTES, Ok(PlacedSplats::at_zero(splats)))
}

/// Attribute names for [`domain`]'s messages: the chunk bounds and packed rows decode into these.
const ATTRIBUTES: domain::AttributeNames = domain::AttributeNames {
    positions: "packed_position (with the chunk's min/max_x/y/z)",
    scales: "packed_scale (with the chunk's min/max_scale_x/y/z)",
    rotations: "packed_rotation",
    opacities: "packed_color alpha",
    sh: "packed_color / f_rest_*",
};

#[cfg(test)]
// Per-axis checks index several arrays at once, as the formulas do.
#[allow(clippy::needless_range_loop)]
pub(crate) mod tests {
    use super::*;
    use crate::splats::test_data::random_splats;

    /// Per-component bounds of the module docs, checked splat by splat. `original[order[i]]`
    /// is the splat stored at position i.
    pub(crate) fn assert_within_bounds(
        original: &GaussianSplats,
        order: &[usize],
        back: &GaussianSplats,
    ) {
        assert_eq!(original.len(), back.len());
        assert_eq!(original.sh_degree, back.sh_degree);
        let k = original.sh_coeffs_per_channel();
        let bits = [11, 10, 11];
        for (ci, members) in order.chunks(CHUNK_SPLATS).enumerate() {
            let range = |f: &dyn Fn(usize, usize) -> f64, a: usize| {
                let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                for &i in members {
                    lo = lo.min(f(i, a));
                    hi = hi.max(f(i, a));
                }
                hi - lo
            };
            let pos = |i: usize, a: usize| original.means[i * 3 + a] as f64;
            let sca = |i: usize, a: usize| original.log_scales[i * 3 + a] as f64;
            let col = |i: usize, a: usize| original.sh_coeffs[i * k * 3 + a] as f64;
            for (j, &i) in members.iter().enumerate() {
                let d = ci * CHUNK_SPLATS + j;
                for a in 0..3 {
                    let step = ((1u32 << bits[a]) - 1) as f64;
                    let tol = |r: f64, v: f64| r / (2.0 * step) + 1e-6 * v.abs().max(1.0);
                    let e = (back.means[d * 3 + a] as f64 - pos(i, a)).abs();
                    assert!(e <= tol(range(&pos, a), pos(i, a)), "pos {d}/{a}: {e}");
                    let e = (back.log_scales[d * 3 + a] as f64 - sca(i, a)).abs();
                    assert!(e <= tol(range(&sca, a), sca(i, a)), "scale {d}/{a}: {e}");
                    let e = (back.sh_coeffs[d * k * 3 + a] as f64 - col(i, a)).abs();
                    assert!(
                        e <= range(&col, a) / (2.0 * 255.0) + 1e-5,
                        "f_dc {d}/{a}: {e} (range {})",
                        range(&col, a)
                    );
                }
                let e =
                    (sigmoid(back.logit_opacities[d]) - sigmoid(original.logit_opacities[i])).abs();
                assert!(e <= 0.5 / 255.0 + 1e-6, "opacity {d}: {e}");
                let qa = &original.rotations[i * 4..i * 4 + 4];
                let qb = &back.rotations[d * 4..d * 4 + 4];
                let na = qa.iter().map(|v| v * v).sum::<f32>().sqrt();
                let dot: f32 = qa.iter().zip(qb).map(|(x, y)| x * y).sum::<f32>() / na;
                assert!(dot.abs() >= 0.99999, "rotation {d}: {qa:?} vs {qb:?}");
                for j in 3..k * 3 {
                    let v = original.sh_coeffs[i * k * 3 + j];
                    let e = (back.sh_coeffs[d * k * 3 + j] - v).abs();
                    let bound = if v.abs() < 3.96 {
                        1.0 / 64.0
                    } else {
                        1.0 / 32.0
                    };
                    assert!(e <= bound + 1e-6, "sh {d}/{j}: {v} -> {e}");
                }
            }
        }
    }

    #[test]
    fn compressed_ply_round_trip_is_within_chunk_bounds() {
        let dir = tempfile::tempdir().unwrap();
        for degree in 0..=3 {
            // 1000 splats: 3 full chunks and a partial one.
            let mut s = random_splats(1000, degree, 10.0, 31 + degree as u64);
            // Include SH values at and beyond the ±4 clamp.
            if degree > 0 {
                s.sh_coeffs[3] = 5.0;
                s.sh_coeffs[4] = -3.99;
            }
            let p = dir.path().join(format!("d{degree}.compressed.ply"));
            write(&p, &s).unwrap();
            let back = read(&p).unwrap().splats;
            let mut clamped = s.clone();
            if degree > 0 {
                clamped.sh_coeffs[3] = 4.0;
            }
            assert_within_bounds(&clamped, &morton_order(&s.means), &back);
        }
    }

    #[test]
    fn each_ply_reader_refuses_the_other_layout_naming_the_right_reader() {
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(10, 1, 1.0, 3);
        let c = dir.path().join("c.compressed.ply");
        write(&c, &s).unwrap();
        let e = crate::splats::ply::read(&c).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("compressed_ply::read"), "{e}");
        let i = dir.path().join("i.ply");
        crate::splats::ply::write(&i, &s).unwrap();
        let e = read(&i).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("ply::read"), "{e}");
    }

    #[test]
    fn compressed_ply_empty_and_single_splat() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.compressed.ply");
        let empty = GaussianSplats {
            sh_degree: 2,
            ..Default::default()
        };
        write(&p, &empty).unwrap();
        assert_eq!(read(&p).unwrap().splats, empty);
        let one = random_splats(1, 1, 1.0, 2);
        write(&p, &one).unwrap();
        let back = read(&p).unwrap().splats;
        // A zero-range chunk decodes every value to its bound, i.e. exactly (up to f32).
        for (a, b) in one.means.iter().zip(&back.means) {
            assert_eq!(a, b);
        }
    }

    #[test]
    fn compressed_ply_rejects_truncated_and_mismatched_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.compressed.ply");
        write(&p, &random_splats(300, 1, 1.0, 5)).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 7]).unwrap();
        let e = read(&p).unwrap_err();
        assert!(
            matches!(e, Error::Corrupt { .. }) && e.to_string().contains("truncated"),
            "{e}"
        );
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&p, &longer).unwrap();
        assert!(matches!(read(&p), Err(Error::Invalid { .. })));
        // Wrong chunk count for the vertex count.
        let text = String::from_utf8_lossy(&bytes).replace("element chunk 2", "element chunk 3");
        let mut edited = text.as_bytes()[..text.find("end_header\n").unwrap() + 11].to_vec();
        let body_at = String::from_utf8_lossy(&bytes)
            .find("end_header\n")
            .unwrap()
            + 11;
        edited.extend_from_slice(&bytes[body_at..]);
        edited.extend_from_slice(&[0u8; 72]);
        std::fs::write(&p, &edited).unwrap();
        let e = read(&p).unwrap_err();
        assert!(e.to_string().contains("element chunk"), "{e}");
    }

    /// Trial F18, as a rule: a NaN/±Inf in any chunk bound of any chunk is named as that chunk's
    /// property, never as the first vertex it dequantises.
    #[test]
    fn a_non_finite_chunk_bound_is_named_as_the_chunk_property() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.compressed.ply");
        write(&p, &random_splats(700, 1, 1.0, 8)).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let header = parse_header(&p, &bytes).unwrap();
        let layouts = element_layouts(&p, &bytes, &header).unwrap();
        let chunk = &layouts.iter().find(|(n, _)| *n == "chunk").unwrap().1;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY].repeat(4) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let c = (rng % chunk.count as u64) as usize;
            let (name, _, at) = chunk.props[(rng >> 8) as usize % chunk.props.len()];
            let mut edited = bytes.clone();
            let offset = chunk.offset + c * chunk.stride + at;
            edited[offset..offset + 4].copy_from_slice(&bad.to_le_bytes());
            std::fs::write(&p, &edited).unwrap();
            let e = read(&p).unwrap_err().to_string();
            assert!(e.contains(&format!("chunk[{c}].{name}")), "{e}");
            assert!(!e.contains("vertex["), "{e}");
        }
    }

    #[test]
    fn compressed_ply_encode_rejects_nan_and_zero_quaternion() {
        let mut s = random_splats(3, 0, 1.0, 5);
        s.means[2] = f32::NAN;
        assert!(matches!(encode(&s), Err(Error::InvalidInput { .. })));
        let mut s = random_splats(3, 0, 1.0, 5);
        s.rotations[8..12].fill(0.0);
        let e = encode(&s).unwrap_err();
        assert!(e.to_string().contains("rotations[splat 2]"), "{e}");
    }

    #[test]
    fn morton_order_is_a_permutation_that_groups_neighbours() {
        let s = random_splats(5000, 0, 50.0, 9);
        let order = morton_order(&s.means);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..5000).collect::<Vec<_>>());
        // A Morton chunk of 256 is far more compact than the whole cloud.
        let extent = |idx: &[usize]| {
            (0..3)
                .map(|a| {
                    let v = idx.iter().map(|&i| s.means[i * 3 + a]);
                    v.clone().fold(f32::MIN, f32::max) - v.fold(f32::MAX, f32::min)
                })
                .fold(0f32, f32::max)
        };
        assert!(extent(&order[..256]) < 0.6 * extent(&order));
    }
}
