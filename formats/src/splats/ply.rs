//! INRIA 3DGS PLY: the de-facto interchange file for trained Gaussian splats.
//!
//! Source: Kerbl et al. 2023 reference implementation (`scene/gaussian_model.py`, `save_ply` /
//! `load_ply`), summarised in shared/research/tiles-formats.md §2.6. Layout written here, all
//! `float`, `binary_little_endian 1.0`, one `element vertex N`:
//! `x y z nx ny nz f_dc_0..2 f_rest_0..f_rest_{3(K−1)−1} opacity scale_0..2 rot_0..3`, with
//! normals 0, `f_rest` **channel-major** (`f_rest[c·(K−1) + (k−1)] = sh_coeffs[n, k, c]`, k ≥ 1),
//! `opacity` a logit, `scale_*` natural logs and `rot_*` a wxyz quaternion (not renormalised).
//!
//! Reading maps columns by name, in any order, so files from other tools (extra properties,
//! missing normals) load too. The fast path (`binary_little_endian`, one `vertex` element, only
//! `float` properties, in any order) reads the body in parallel chunks straight into the columns
//! and writing builds and writes rows the same way (`body`); little-endian `float`/`double` rows
//! stream a block at a time; anything else (ASCII, big-endian, integer columns, further
//! elements) goes through `ply_rs_bw`; `double` x/y/z that f32 cannot hold are kept at an f64
//! origin ([`read`]). A file with an `element chunk` is a PlayCanvas compressed PLY, which
//! [`super::compressed_ply`] reads. NaN and ±Inf values are rejected with the vertex
//! index: no Kiln stage can use them, and silently dropping splats would change the vertex count
//! a user expects; every other value then meets the [`super::domain`] policy. A Mip-Splatting
//! PLY's `filter_3D` column is baked into scale and opacity as rows are read
//! ([`super::mip_filter`]), so its splats come out as the authors' renderer draws them.

use std::path::Path;

use ply_rs_bw::parser::Parser;
use ply_rs_bw::ply::{DefaultElement, Property};

use super::placed::{PlacedRef, PlacedSplats};
use super::ply_container::{
    PlyHeader, check_values_finite, corrupt, parse_header, read_header_block,
};
use super::{GaussianSplats, MAX_SH_DEGREE, domain, mip_filter};
use crate::atomic_write::write_atomic_with;
use crate::{Error, Result};

mod body;
#[cfg(test)]
use body::fill_rows;

/// Short name of the format in messages.
pub const NAME: &str = "INRIA PLY";

/// Number of `f_rest_*` properties per SH degree 0..=3: 3·((d+1)² − 1).
const F_REST_COUNTS: [usize; 4] = [0, 9, 24, 45];

/// Property names of the INRIA layout in file order, for SH degree `sh_degree`.
fn inria_property_names(sh_degree: u32) -> Vec<String> {
    let mut names: Vec<String> = [
        "x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2",
    ]
    .map(String::from)
    .to_vec();
    names.extend((0..F_REST_COUNTS[sh_degree as usize]).map(|i| format!("f_rest_{i}")));
    names.extend(
        [
            "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3",
        ]
        .map(String::from),
    );
    names
}

/// Write splats as an INRIA 3DGS PLY at `path`, atomically (temporary file + rename).
///
/// The file holds exactly the f32 values of the splats (no renormalisation, no clamping), so
/// [`read`] returns bit-identical arrays. Normals are written as 0. At origin 0 every property
/// is `float`; otherwise `x y z` are `property double` holding `origin + mean` computed in f64
/// (the true coordinates, which other tools read as such), and [`read`] gives the same
/// positions back (within 1 µm; the origin it picks may differ from the one written).
///
/// - `path`: destination; missing parent directories are created.
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means (origin 0); N ≥ 0
///   splats, shapes as documented on [`GaussianSplats`], SH degree 0..=3.
///
/// # Errors
/// [`Error::InvalidInput`] when an array length does not match N or a value is NaN/±Inf (with the
/// splat index); [`Error::Io`] naming `path` when writing fails (the old file, if any, is kept).
pub fn write<'a>(path: &Path, splats: impl Into<PlacedRef<'a>>) -> Result<()> {
    let placed = splats.into();
    write_rows(path, placed.splats, placed.nonzero_origin())
}

/// The writer of [`write()`]: `origin` `None` writes all `float`, `Some` writes `double x y z` =
/// origin + mean.
fn write_rows(path: &Path, splats: &GaussianSplats, origin: Option<[f64; 3]>) -> Result<()> {
    const CONTEXT: &str = "INRIA PLY write";
    splats.check_shapes(CONTEXT)?;
    let n = splats.len();
    let names = inria_property_names(splats.sh_degree);
    let stride = names.len();

    let mut header = format!("ply\nformat binary_little_endian 1.0\nelement vertex {n}\n");
    for (i, name) in names.iter().enumerate() {
        header.push_str(if origin.is_some() && i < 3 {
            "property double "
        } else {
            "property float "
        });
        header.push_str(name);
        header.push('\n');
    }
    header.push_str("end_header\n");

    // The header goes through the buffered writer; the rows are checked, built and written a
    // chunk at a time on every core, each chunk at its own offset (memory: the splats plus one
    // chunk per thread).
    let written = write_atomic_with(path, |w| {
        use std::io::Write;
        w.write_all(header.as_bytes())?;
        w.flush()?;
        body::write_rows(w.get_ref(), header.len() as u64, splats, stride, origin)
    });
    match written {
        // A NaN/±Inf stopped the write (the temporary file is gone): name the first one in
        // field order, as every writer does.
        Err(Error::Io { source, .. }) if body::is_non_finite(&source) => {
            splats.check_finite(CONTEXT)?;
            Err(Error::Io {
                path: path.to_path_buf(),
                source,
            })
        }
        other => other,
    }
}

/// Read a 3DGS PLY (INRIA layout or any PLY with those property names) as splats at an f64
/// origin.
///
/// Columns are found by name in any order; `nx ny nz` and unknown properties are ignored. The SH
/// degree follows from the number of `f_rest_*` properties: 0, 9, 24, 45 → degree 0, 1, 2, 3,
/// and they must be named `f_rest_0..f_rest_{m−1}` (channel-major, transposed into `[N, K, 3]`).
/// Values are returned as stored: logit opacities, log scales, wxyz rotations not renormalised.
///
/// Positions: when f32 holds every x/y/z to [`super::placed::RECENTRE_ABOVE_M`] the origin is
/// `[0, 0, 0]` and the means are the values as f32 — always so for all-`float` files (every
/// PLY Kiln's trainer and ingest write at ordinary scene size), so callers that need plain
/// [`GaussianSplats`] of such files take `.splats`. `double` (or integer) coordinates beyond
/// that (a survey frame: 31 mm f32 steps at 500 km) get the bounding-box centre rounded to whole
/// metres as origin and means `(x − origin) as f32` subtracted in f64, which keeps 1 cm spacing
/// at 500 km to about 0.1 µm ([`PlacedSplats::from_absolute`]).
///
/// - `path`: the PLY file; ASCII, binary little- or big-endian; `float`, `double` or integer
///   scalar properties (converted to f32). The vertex element must be named `vertex`.
///
/// # Errors
/// All name `path`: [`Error::NotFound`] / [`Error::Io`] when it cannot be read;
/// [`Error::Corrupt`] for an empty file, wrong magic, a header without `end_header`, a truncated
/// body or a body the PLY parser rejects; [`Error::Invalid`] for a missing required property
/// (named), a body longer than `element vertex N` implies, or a NaN/±Inf value (with the vertex
/// index and property; a coordinate is named as `vertex[i].x/y/z` before any origin is picked);
/// [`Error::Unsupported`] for an `f_rest_*` count other than 0/9/24/45, a list-typed splat
/// property, or a PlayCanvas compressed PLY (`element chunk`: read it with
/// [`super::compressed_ply::read`], or with `convert::read`, which tells them apart).
pub fn read(path: &Path) -> Result<PlacedSplats> {
    domain::checked(path, &ATTRIBUTES, read_stored(path))
}

/// Attribute names of the INRIA layout, for [`domain`]'s messages.
const ATTRIBUTES: domain::AttributeNames = domain::AttributeNames {
    positions: "x/y/z",
    scales: "scale_*",
    rotations: "rot_*",
    opacities: "opacity",
    sh: "f_dc_*/f_rest_*",
};

/// The splats as the file stores them (values checked finite, not yet by [`domain`]).
fn read_stored(path: &Path) -> Result<PlacedSplats> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let prefix = read_header_block(&mut file, path)?;
    let prefix_header = parse_header(path, &prefix)?;
    // The common case, one all-float little-endian vertex element, is read in chunks on every
    // core straight into the columns: memory holds the splats and one chunk of rows per thread,
    // never the whole file. f32 values need no origin.
    if let Some(fast) = fast_layout(&prefix_header) {
        let body_len = file_len.saturating_sub(prefix_header.body_offset as u64);
        let splats = read_fast(path, &file, body_len, &prefix_header, fast)?;
        return Ok(PlacedSplats::at_zero(splats));
    }
    // Little-endian `float` and `double` columns (Kiln writes `double x y z` for placed splats)
    // stream the same way, positions kept in f64.
    if let Some(layout) = float_double_layout(&prefix_header) {
        let leftover = &prefix[prefix_header.body_offset..];
        let body_len = file_len.saturating_sub(prefix_header.body_offset as u64);
        let (splats, xyz) =
            read_float_double_stream(path, &mut file, leftover, body_len, &prefix_header, &layout)?;
        return place(path, &xyz, splats);
    }
    let mut bytes = prefix;
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| Error::io(path, e))?;
    let header = parse_header(path, &bytes)?;
    if header.is_compressed() {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "element chunk".into(),
            found: "a PlayCanvas compressed PLY".into(),
            supported: "INRIA 3DGS PLYs here; read compressed PLYs with \
                        kiln_formats::splats::compressed_ply::read, or with convert::read, which \
                        picks the reader by content"
                .into(),
        });
    }
    let (splats, xyz) = read_with_ply_rs(path, &bytes, &header)?;
    place(path, &xyz, splats)
}

/// Place `splats` at `xyz` (`[N, 3]` f64 as read; [`PlacedSplats::from_absolute`]), after
/// checking every value (coordinates first, in f64).
fn place(path: &Path, xyz: &[f64], splats: GaussianSplats) -> Result<PlacedSplats> {
    if let Some(pos) = xyz.iter().position(|v| !v.is_finite()) {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: format!("vertex[{}].x/y/z", pos / 3),
            expected: "finite values (remove or re-export the splat)".into(),
            found: xyz[pos].to_string(),
        });
    }
    let placed = PlacedSplats::from_absolute(xyz, splats);
    check_values_finite(path, &placed.splats)?;
    Ok(placed)
}

/// Column indices of the fast path: all properties are f32, so a row is `stride` floats.
struct FastLayout {
    stride: usize,
}

/// A little-endian row of `float` and `double` columns: its size and, per column, the byte
/// offset and whether it is a `double`.
struct RowLayout {
    row_bytes: usize,
    columns: Vec<(usize, bool)>,
}

impl RowLayout {
    /// Column `col` of `row` (a whole row's bytes) as f64.
    fn get(&self, row: &[u8], col: usize) -> f64 {
        let (at, is_double) = self.columns[col];
        if is_double {
            f64::from_le_bytes(row[at..at + 8].try_into().expect("8 bytes"))
        } else {
            f64::from(f32::from_le_bytes(
                row[at..at + 4].try_into().expect("4 bytes"),
            ))
        }
    }
}

/// The layout of the fast path, when `header` has one all-`float` little-endian `vertex` element.
fn fast_layout(header: &PlyHeader) -> Option<FastLayout> {
    let [vertex] = header.elements.as_slice() else {
        return None;
    };
    let all_float = vertex
        .properties
        .iter()
        .all(|(_, ty)| ty == "float" || ty == "float32");
    (header.format == "binary_little_endian" && vertex.name == "vertex" && all_float).then_some(
        FastLayout {
            stride: vertex.properties.len(),
        },
    )
}

/// Byte layout of a binary little-endian file whose only element is `vertex` and whose
/// properties are all `float` or `double` (at least one `double`: all-`float` files take
/// [`fast_layout`]).
fn float_double_layout(header: &PlyHeader) -> Option<RowLayout> {
    let [vertex] = header.elements.as_slice() else {
        return None;
    };
    if header.format != "binary_little_endian" || vertex.name != "vertex" {
        return None;
    }
    let mut offsets = Vec::with_capacity(vertex.properties.len());
    let mut bytes = 0;
    for (_, ty) in &vertex.properties {
        let size = match ty.as_str() {
            "float" | "float32" => 4,
            "double" | "float64" => 8,
            _ => return None,
        };
        offsets.push((bytes, size == 8));
        bytes += size;
    }
    (bytes != 4 * offsets.len()).then_some(RowLayout {
        row_bytes: bytes,
        columns: offsets,
    })
}

/// Where each splat field comes from: column index per required name, SH degree.
struct ColumnMap {
    xyz: [usize; 3],
    dc: [usize; 3],
    rest: Vec<usize>,
    opacity: usize,
    scale: [usize; 3],
    rot: [usize; 4],
    /// Mip-Splatting's `filter_3D` (metres), baked into scale and opacity as each row is read
    /// ([`super::mip_filter`]).
    filter_3d: Option<usize>,
    sh_degree: u32,
}

fn map_columns(path: &Path, names: &[&str]) -> Result<ColumnMap> {
    let find = |name: &str| -> Result<usize> {
        names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| Error::Invalid {
                path: path.to_path_buf(),
                field: format!("vertex.{name}"),
                expected: format!(
                    "a `property float {name}` in `element vertex` (INRIA 3DGS layout)"
                ),
                found: "no such property".into(),
            })
    };
    let rest_count = names.iter().filter(|n| n.starts_with("f_rest_")).count();
    let Some(sh_degree) = F_REST_COUNTS.iter().position(|&c| c == rest_count) else {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "vertex.f_rest_*".into(),
            found: format!("{rest_count} f_rest properties"),
            supported: "0, 9, 24 or 45 (SH degree 0, 1, 2, 3)".into(),
        });
    };
    debug_assert!(sh_degree as u32 <= MAX_SH_DEGREE);
    let rest = (0..rest_count)
        .map(|i| find(&format!("f_rest_{i}")))
        .collect::<Result<Vec<_>>>()?;
    Ok(ColumnMap {
        xyz: [find("x")?, find("y")?, find("z")?],
        dc: [find("f_dc_0")?, find("f_dc_1")?, find("f_dc_2")?],
        rest,
        opacity: find("opacity")?,
        scale: [find("scale_0")?, find("scale_1")?, find("scale_2")?],
        rot: [
            find("rot_0")?,
            find("rot_1")?,
            find("rot_2")?,
            find("rot_3")?,
        ],
        filter_3d: names.iter().position(|n| *n == "filter_3D"),
        sh_degree: sh_degree as u32,
    })
}

/// Build splats from N rows, `get(row, column)` returning the f32 value.
///
/// # Errors
/// `(row, value)` of the first invalid `filter_3D` ([`append_rows`]).
fn assemble(
    n: usize,
    cols: &ColumnMap,
    get: impl Fn(usize, usize) -> f32,
) -> std::result::Result<GaussianSplats, (usize, f32)> {
    let mut s = with_capacity(n, cols);
    append_rows(&mut s, n, cols, get)?;
    Ok(s)
}

/// Empty splats of the columns' SH degree with room for `n`.
fn with_capacity(n: usize, cols: &ColumnMap) -> GaussianSplats {
    let k = ((cols.sh_degree + 1) * (cols.sh_degree + 1)) as usize;
    GaussianSplats {
        means: Vec::with_capacity(n * 3),
        log_scales: Vec::with_capacity(n * 3),
        rotations: Vec::with_capacity(n * 4),
        logit_opacities: Vec::with_capacity(n),
        sh_coeffs: Vec::with_capacity(n * k * 3),
        sh_degree: cols.sh_degree,
    }
}

/// Append `n` rows to `s`, `get(row, column)` returning the f32 value.
///
/// # Errors
/// `(row, value)` of the first row whose `filter_3D` is not valid ([`mip_filter::is_valid`]);
/// `s` then holds the rows before it.
fn append_rows(
    s: &mut GaussianSplats,
    n: usize,
    cols: &ColumnMap,
    get: impl Fn(usize, usize) -> f32,
) -> std::result::Result<(), (usize, f32)> {
    let k = ((cols.sh_degree + 1) * (cols.sh_degree + 1)) as usize;
    for i in 0..n {
        s.means.extend(cols.xyz.map(|c| get(i, c)));
        s.log_scales.extend(cols.scale.map(|c| get(i, c)));
        s.rotations.extend(cols.rot.map(|c| get(i, c)));
        s.logit_opacities.push(get(i, cols.opacity));
        if let Some(c) = cols.filter_3d {
            let at = s.logit_opacities.len() - 1;
            let logs = &mut s.log_scales[3 * at..];
            let filter = get(i, c);
            if !mip_filter::bake(logs, &mut s.logit_opacities[at], filter) {
                return Err((i, filter));
            }
        }
        s.sh_coeffs.extend(cols.dc.map(|c| get(i, c)));
        for kk in 1..k {
            for c in 0..3 {
                s.sh_coeffs.push(get(i, cols.rest[c * (k - 1) + (kk - 1)]));
            }
        }
    }
    Ok(())
}

/// The fast path: one all-`float` little-endian `vertex` element, its columns in any order,
/// read in parallel chunks at their file offsets straight into the columns ([`body`]).
fn read_fast(
    path: &Path,
    file: &std::fs::File,
    body_len: u64,
    header: &PlyHeader,
    layout: FastLayout,
) -> Result<GaussianSplats> {
    let vertex = &header.elements[0];
    let names: Vec<&str> = vertex.properties.iter().map(|(n, _)| n.as_str()).collect();
    let cols = map_columns(path, &names)?;
    check_body_len(
        path,
        header,
        layout.stride * 4,
        &format!("{} floats", layout.stride),
        body_len,
    )?;
    let gather = body::RowGather::new(&cols, layout.stride);
    body::read_float_rows(path, file, header.body_offset as u64, vertex.count, &gather)
}

/// The body length a streamed file must have (`element vertex N` × `row_bytes`), checked
/// against `found` bytes; `row` describes a row for the message (`"17 floats"`).
fn check_body_len(
    path: &Path,
    header: &PlyHeader,
    row_bytes: usize,
    row: &str,
    found: u64,
) -> Result<()> {
    let n = header.elements[0].count;
    let expected = n.checked_mul(row_bytes).ok_or_else(|| {
        corrupt(
            path,
            "element vertex",
            format!("vertex count {n} overflows"),
        )
    })?;
    if found < expected as u64 {
        return Err(corrupt(
            path,
            format!("byte {}", header.body_offset as u64 + found),
            format!(
                "truncated body: `element vertex {n}` × {row} needs {expected} bytes, \
                 found {found}"
            ),
        ));
    }
    if found > expected as u64 {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "element vertex".into(),
            expected: format!("{expected} body bytes for {n} vertices of {row}"),
            found: format!("{found} bytes (vertex count does not match the data)"),
        });
    }
    Ok(())
}

/// Splats per block of rows when streaming a `float`/`double` body in (about 4 MB at SH degree
/// 3 with `double x y z`).
const ROWS_PER_BLOCK: usize = 16_384;

/// The `float`/`double` path, streamed a block at a time into the columns: returns the splats
/// (means not yet set) and x/y/z as read, `[N, 3]` f64.
fn read_float_double_stream(
    path: &Path,
    file: &mut std::fs::File,
    leftover: &[u8],
    body_len: u64,
    header: &PlyHeader,
    layout: &RowLayout,
) -> Result<(GaussianSplats, Vec<f64>)> {
    use std::io::Read;
    let vertex = &header.elements[0];
    let n = vertex.count;
    let names: Vec<&str> = vertex.properties.iter().map(|(n, _)| n.as_str()).collect();
    let cols = map_columns(path, &names)?;
    let row_bytes = layout.row_bytes;
    check_body_len(
        path,
        header,
        row_bytes,
        &format!("{row_bytes} bytes"),
        body_len,
    )?;
    let mut splats = with_capacity(n, &cols);
    let mut xyz = Vec::with_capacity(n * 3);
    let mut block = vec![0u8; ROWS_PER_BLOCK.min(n).max(1) * row_bytes];
    let mut leftover = leftover;
    for start in (0..n).step_by(ROWS_PER_BLOCK) {
        let rows = ROWS_PER_BLOCK.min(n - start);
        let bytes = &mut block[..rows * row_bytes];
        let from_leftover = leftover.len().min(bytes.len());
        bytes[..from_leftover].copy_from_slice(&leftover[..from_leftover]);
        leftover = &leftover[from_leftover..];
        file.read_exact(&mut bytes[from_leftover..]).map_err(|e| {
            corrupt(
                path,
                format!("vertex {start}"),
                format!("cannot read the body: {e}"),
            )
        })?;
        let bytes = &block[..rows * row_bytes];
        let row = |r: usize| &bytes[r * row_bytes..(r + 1) * row_bytes];
        for r in 0..rows {
            xyz.extend(cols.xyz.map(|c| layout.get(row(r), c)));
        }
        append_rows(&mut splats, rows, &cols, |r, col| {
            layout.get(row(r), col) as f32
        })
        .map_err(|(r, filter)| mip_filter::invalid(path, start + r, filter))?;
    }
    Ok((splats, xyz))
}

/// The general path (ASCII, big-endian, integer columns, further elements): returns the
/// splats (means not yet set) and x/y/z as read, `[N, 3]` f64.
fn read_with_ply_rs(
    path: &Path,
    bytes: &[u8],
    header: &PlyHeader,
) -> Result<(GaussianSplats, Vec<f64>)> {
    let Some(vertex) = header.vertex() else {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "element vertex".into(),
            expected: "an `element vertex N` holding the splats".into(),
            found: "no vertex element".into(),
        });
    };
    let names: Vec<&str> = vertex.properties.iter().map(|(n, _)| n.as_str()).collect();
    let cols = map_columns(path, &names)?;
    let parser = Parser::<DefaultElement>::new();
    let mut reader = bytes;
    let ply = parser.read_ply(&mut reader).map_err(|e| {
        if let Some(bad) = crate::ply_ascii::bad_token(bytes) {
            return Error::Invalid {
                path: path.to_path_buf(),
                expected: bad.expected().into(),
                field: bad.field,
                found: bad.token,
            };
        }
        corrupt(
            path,
            e.line().map_or("body".to_string(), |l| format!("line {l}")),
            format!("PLY parser: {e} (truncated body or values that do not match the header)"),
        )
    })?;
    let rows = ply
        .payload
        .get("vertex")
        .map(Vec::as_slice)
        .unwrap_or_default();
    if rows.len() != vertex.count {
        return Err(corrupt(
            path,
            "element vertex",
            format!(
                "header says {} vertices, body holds {}",
                vertex.count,
                rows.len()
            ),
        ));
    }
    // Resolve every needed column to an f32 up front so that `assemble` cannot fail.
    let mut needed: Vec<usize> = cols.xyz.to_vec();
    needed.extend(cols.dc);
    needed.extend(&cols.rest);
    needed.extend(cols.scale);
    needed.extend(cols.rot);
    needed.push(cols.opacity);
    needed.extend(cols.filter_3d);
    let width = names.len();
    let mut table = vec![0f32; rows.len() * width];
    let mut xyz = Vec::with_capacity(rows.len() * 3);
    for (i, row) in rows.iter().enumerate() {
        // `needed` starts with x, y, z: those are kept in f64 too.
        for (j, &c) in needed.iter().enumerate() {
            let name = names[c];
            let value = row.get(name).and_then(|p| match p {
                Property::Double(v) => Some(*v),
                Property::Int(v) => Some(f64::from(*v)),
                Property::UInt(v) => Some(f64::from(*v)),
                p => p.to_f32_lossy().map(f64::from),
            });
            let value = value.ok_or_else(|| Error::Unsupported {
                path: path.to_path_buf(),
                field: format!("vertex[{i}].{name}"),
                found: "a list or missing value".into(),
                supported: "scalar numeric properties".into(),
            })?;
            table[i * width + c] = value as f32;
            if j < 3 {
                xyz.push(value);
            }
        }
    }
    let splats = assemble(rows.len(), &cols, |row, col| table[row * width + col])
        .map_err(|(row, filter)| mip_filter::invalid(path, row, filter))?;
    Ok((splats, xyz))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::test_data::random_splats;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    fn assert_bit_exact(a: &GaussianSplats, b: &GaussianSplats) {
        assert_eq!(a.sh_degree, b.sh_degree);
        assert_eq!(bits(&a.means), bits(&b.means));
        assert_eq!(bits(&a.log_scales), bits(&b.log_scales));
        assert_eq!(bits(&a.rotations), bits(&b.rotations));
        assert_eq!(bits(&a.logit_opacities), bits(&b.logit_opacities));
        assert_eq!(bits(&a.sh_coeffs), bits(&b.sh_coeffs));
    }

    #[test]
    fn ply_round_trip_is_bit_exact_for_degrees_0_to_3() {
        let dir = tempfile::tempdir().unwrap();
        for degree in 0..=3 {
            let s = random_splats(257, degree, 5.0, 7 + degree as u64);
            let p = dir.path().join(format!("d{degree}.ply"));
            write(&p, &s).unwrap();
            let expected_len = 62 - 3 * (15 - (((degree + 1) * (degree + 1)) as usize - 1));
            let header_len = parse_header(&p, &std::fs::read(&p).unwrap())
                .unwrap()
                .body_offset;
            assert_eq!(
                std::fs::metadata(&p).unwrap().len() as usize,
                header_len + 257 * expected_len * 4
            );
            assert_bit_exact(&read(&p).unwrap().splats, &s);
        }
    }

    #[test]
    fn ply_f_rest_is_channel_major() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = random_splats(1, 1, 1.0, 3);
        // sh_coeffs[0, k, c] = 10k + c.
        for k in 0..4 {
            for c in 0..3 {
                s.sh_coeffs[k * 3 + c] = (10 * k + c) as f32;
            }
        }
        let p = dir.path().join("a.ply");
        write(&p, &s).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let h = parse_header(&p, &bytes).unwrap();
        let row: Vec<f32> = bytes[h.body_offset..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        // f_rest_0..2 are red of k = 1, 2, 3; f_rest_3..5 green.
        assert_eq!(&row[9..15], &[10.0, 20.0, 30.0, 11.0, 21.0, 31.0]);
        assert_eq!(&row[6..9], &[0.0, 1.0, 2.0]);
    }

    #[test]
    fn ply_reads_columns_in_any_order_and_without_normals_via_ascii() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ascii.ply");
        let text = "ply\nformat ascii 1.0\ncomment reordered\nelement vertex 2\n\
            property double rot_0\nproperty float opacity\nproperty float x\nproperty float y\n\
            property float z\nproperty float scale_2\nproperty float scale_1\nproperty float scale_0\n\
            property float f_dc_2\nproperty float f_dc_1\nproperty float f_dc_0\n\
            property float rot_3\nproperty float rot_2\nproperty float rot_1\nproperty uchar red\n\
            element face 0\nproperty list uchar int vertex_indices\nend_header\n\
            1 0.5 1 2 3 -3 -2 -1 0.3 0.2 0.1 0 0 0 7\n\
            0 -0.5 4 5 6 -6 -5 -4 0.6 0.5 0.4 1 0 0 9\n";
        std::fs::write(&p, text).unwrap();
        let s = read(&p).unwrap().splats;
        assert_eq!(s.len(), 2);
        assert_eq!(s.sh_degree, 0);
        assert_eq!(s.means, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(s.log_scales, vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]);
        assert_eq!(s.rotations, vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(s.logit_opacities, vec![0.5, -0.5]);
        assert_eq!(s.sh_coeffs, vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6]);
    }

    #[test]
    fn ply_reads_big_endian_doubles_via_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("be.ply");
        let names = inria_property_names(0);
        let mut bytes = b"ply\nformat binary_big_endian 1.0\nelement vertex 1\n".to_vec();
        for name in &names {
            bytes.extend_from_slice(format!("property double {name}\n").as_bytes());
        }
        bytes.extend_from_slice(b"end_header\n");
        let values: Vec<f64> = (0..names.len()).map(|i| i as f64 + 0.5).collect();
        for v in &values {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        std::fs::write(&p, &bytes).unwrap();
        let s = read(&p).unwrap().splats;
        // Columns: x y z nx ny nz f_dc_0..2 opacity scale_0..2 rot_0..3 → 0.5, 1.5, …
        assert_eq!(s.means, vec![0.5, 1.5, 2.5]);
        assert_eq!(s.sh_coeffs, vec![6.5, 7.5, 8.5]);
        assert_eq!(s.logit_opacities, vec![9.5]);
        assert_eq!(s.log_scales, vec![10.5, 11.5, 12.5]);
        assert_eq!(s.rotations, vec![13.5, 14.5, 15.5, 16.5]);
        // Truncated big-endian body: a clear Corrupt error, not a panic.
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        assert!(matches!(read(&p), Err(Error::Corrupt { .. })));
    }

    /// Write `s` (SH degree ≥ 0) in the INRIA layout by hand, in `format` with property type
    /// `ty` (`float` or `double`).
    fn hand_written_ply(s: &GaussianSplats, format: &str, ty: &str) -> Vec<u8> {
        let names = inria_property_names(s.sh_degree);
        let mut out = format!("ply\nformat {format} 1.0\nelement vertex {}\n", s.len());
        for name in &names {
            out.push_str(&format!("property {ty} {name}\n"));
        }
        out.push_str("end_header\n");
        let mut bytes = out.into_bytes();
        for i in 0..s.len() {
            let row = inria_row(s, i);
            match (format, ty) {
                ("ascii", _) => {
                    let line: Vec<String> = row.iter().map(|v| v.to_string()).collect();
                    bytes.extend_from_slice(line.join(" ").as_bytes());
                    bytes.push(b'\n');
                }
                ("binary_big_endian", "float") => {
                    row.iter().for_each(|v| bytes.extend(v.to_be_bytes()));
                }
                ("binary_big_endian", _) => {
                    row.iter()
                        .for_each(|v| bytes.extend((*v as f64).to_be_bytes()));
                }
                (_, "double") => {
                    row.iter()
                        .for_each(|v| bytes.extend((*v as f64).to_le_bytes()));
                }
                _ => row.iter().for_each(|v| bytes.extend(v.to_le_bytes())),
            }
        }
        bytes
    }

    /// Splat `i` of `s` as an INRIA row (`inria_property_names` order), built by hand from the
    /// layout in the module doc, independently of the writer.
    fn inria_row(s: &GaussianSplats, i: usize) -> Vec<f32> {
        let k = s.sh_coeffs_per_channel();
        let sh = &s.sh_coeffs[i * k * 3..(i + 1) * k * 3];
        let mut row: Vec<f32> = s.means[i * 3..i * 3 + 3].to_vec();
        row.extend([0.0; 3]);
        row.extend(&sh[..3]);
        for c in 0..3 {
            row.extend((1..k).map(|kk| sh[kk * 3 + c]));
        }
        row.push(s.logit_opacities[i]);
        row.extend(&s.log_scales[i * 3..i * 3 + 3]);
        row.extend(&s.rotations[i * 4..i * 4 + 4]);
        row
    }

    /// Splats enough for three and a bit body chunks at SH degree `degree`, so that chunk
    /// boundaries, a short last chunk and several threads are all exercised.
    fn splats_over_chunks(degree: u32, seed: u64) -> GaussianSplats {
        let stride = inria_property_names(degree).len();
        let n = 3 * (body::CHUNK_BYTES / (4 * stride)) + 17;
        random_splats(n, degree, 40.0, seed)
    }

    #[test]
    fn ply_writer_bytes_are_the_hand_computed_header_and_record() {
        let dir = tempfile::tempdir().unwrap();
        let s = GaussianSplats {
            means: vec![1.0, -2.0, 3.5],
            log_scales: vec![-3.0, -4.0, -5.0],
            rotations: vec![1.0, 0.0, 0.0, 0.0],
            logit_opacities: vec![0.25],
            sh_coeffs: vec![0.5, 0.75, -1.0],
            sh_degree: 0,
        };
        let p = dir.path().join("one.ply");
        write(&p, &s).unwrap();
        let mut want = b"ply\nformat binary_little_endian 1.0\nelement vertex 1\n\
            property float x\nproperty float y\nproperty float z\n\
            property float nx\nproperty float ny\nproperty float nz\n\
            property float f_dc_0\nproperty float f_dc_1\nproperty float f_dc_2\n\
            property float opacity\n\
            property float scale_0\nproperty float scale_1\nproperty float scale_2\n\
            property float rot_0\nproperty float rot_1\nproperty float rot_2\n\
            property float rot_3\nend_header\n"
            .to_vec();
        // x y z, normals 0, DC, opacity logit, log scales, wxyz: 17 little-endian f32.
        let record: [f32; 17] = [
            1.0, -2.0, 3.5, 0.0, 0.0, 0.0, 0.5, 0.75, -1.0, 0.25, -3.0, -4.0, -5.0, 1.0, 0.0, 0.0,
            0.0,
        ];
        record.iter().for_each(|v| want.extend(v.to_le_bytes()));
        assert_eq!(std::fs::read(&p).unwrap(), want);
        // 1.0f32 is 0x3F800000: the first x byte order is little-endian.
        assert_eq!(&want[want.len() - 68..want.len() - 64], &[0, 0, 0x80, 0x3F]);
    }

    #[test]
    fn ply_writer_bytes_match_a_hand_built_file_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        for degree in 0..=3 {
            let s = splats_over_chunks(degree, 90 + u64::from(degree));
            let p = dir.path().join(format!("w{degree}.ply"));
            write(&p, &s).unwrap();
            let want = hand_written_ply(&s, "binary_little_endian", "float");
            assert!(
                std::fs::read(&p).unwrap() == want,
                "degree {degree}: bytes differ"
            );
        }
    }

    #[test]
    fn ply_placed_writer_bytes_match_a_hand_built_file_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let s = splats_over_chunks(2, 95);
        let origin = [500_000.0, 4_000_000.0, 10.0];
        let p = dir.path().join("placed.ply");
        write(
            &p,
            &PlacedSplats {
                origin_m: origin,
                splats: s.clone(),
            },
        )
        .unwrap();
        let mut want = format!(
            "ply\nformat binary_little_endian 1.0\nelement vertex {}\n",
            s.len()
        );
        for (j, name) in inria_property_names(2).iter().enumerate() {
            let ty = if j < 3 { "double" } else { "float" };
            want.push_str(&format!("property {ty} {name}\n"));
        }
        want.push_str("end_header\n");
        let mut want = want.into_bytes();
        for i in 0..s.len() {
            let row = inria_row(&s, i);
            for a in 0..3 {
                want.extend((origin[a] + f64::from(row[a])).to_le_bytes());
            }
            row[3..].iter().for_each(|v| want.extend(v.to_le_bytes()));
        }
        assert!(std::fs::read(&p).unwrap() == want, "bytes differ");
    }

    #[test]
    fn ply_write_rejects_nan_in_a_later_chunk_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keep.ply");
        std::fs::write(&p, b"old").unwrap();
        let mut s = splats_over_chunks(3, 83);
        let last = s.len() - 1;
        s.rotations[4 * last + 2] = f32::NAN;
        s.sh_coeffs[48 * (last - 1) + 40] = f32::NEG_INFINITY;
        let e = write(&p, &s).unwrap_err();
        // The first bad field in check_finite's order (rotations before sh_coeffs).
        assert!(
            matches!(e, Error::InvalidInput { ref field, .. } if *field == format!("rotations[splat {last}]")),
            "{e}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn ply_large_body_written_while_flushing_reads_back_bit_exact() {
        // Above SYNC_BEHIND_MIN_BYTES the body is flushed by a helper thread while it is
        // written; the file must be the same.
        let stride = inria_property_names(3).len();
        let n = body::SYNC_BEHIND_MIN_BYTES / (4 * stride) + 1000;
        let s = random_splats(n, 3, 40.0, 84);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("large.ply");
        write(&p, &s).unwrap();
        let back = read(&p).unwrap().splats;
        assert_bit_exact(&back, &s);
    }

    /// `s` as a binary little-endian all-`float` PLY whose properties are the INRIA ones plus
    /// `extra` unknown ones (all NaN), in the order `order` (a permutation of their indices).
    fn shuffled_ply(s: &GaussianSplats, extra: &[&str], order: &[usize]) -> Vec<u8> {
        let mut names = inria_property_names(s.sh_degree);
        names.extend(extra.iter().map(|e| e.to_string()));
        let mut text = format!(
            "ply\nformat binary_little_endian 1.0\ncomment shuffled\nelement vertex {}\n",
            s.len()
        );
        for &j in order {
            text.push_str(&format!("property float {}\n", names[j]));
        }
        text.push_str("end_header\n");
        let mut bytes = text.into_bytes();
        for i in 0..s.len() {
            let mut row = inria_row(s, i);
            row.extend(extra.iter().map(|_| f32::NAN));
            order
                .iter()
                .for_each(|&j| bytes.extend(row[j].to_le_bytes()));
        }
        bytes
    }

    #[test]
    fn ply_fast_path_reads_shuffled_columns_and_skips_unknown_properties() {
        let dir = tempfile::tempdir().unwrap();
        let extra = ["red", "segment_id", "nx2"];
        for degree in [0, 1, 3] {
            let s = splats_over_chunks(degree, 70 + u64::from(degree));
            let width = inria_property_names(degree).len() + extra.len();
            // A seeded Fisher–Yates permutation of the columns.
            let mut order: Vec<usize> = (0..width).collect();
            let mut rng = crate::splats::test_data::Rng::new(5 + u64::from(degree));
            for j in (1..width).rev() {
                let pick = ((rng.next_f32() * (j + 1) as f32) as usize).min(j);
                order.swap(j, pick);
            }
            let p = dir.path().join(format!("shuffled{degree}.ply"));
            std::fs::write(&p, shuffled_ply(&s, &extra, &order)).unwrap();
            let h = parse_header(&p, &std::fs::read(&p).unwrap()).unwrap();
            assert!(
                fast_layout(&h).is_some(),
                "all-float LE must take the fast path"
            );
            // Unknown columns are skipped even when NaN; every splat value is bit-exact.
            assert_bit_exact(&read(&p).unwrap().splats, &s);
            assert_bit_exact(&read(&p).unwrap().splats, &s);
        }
    }

    #[test]
    fn ply_rejects_nan_in_a_later_chunk_with_its_vertex_index() {
        let dir = tempfile::tempdir().unwrap();
        let s = splats_over_chunks(3, 81);
        let p = dir.path().join("late-nan.ply");
        write(&p, &s).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        let h = parse_header(&p, &bytes).unwrap();
        // Vertex N − 2 (last chunk), column 20 (f_rest_11); and vertex 1, column 3 (nx, not a
        // splat field: ignored as before).
        let vertex = s.len() - 2;
        let at = h.body_offset + (vertex * 62 + 20) * 4;
        bytes[at..at + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
        let at = h.body_offset + (62 + 3) * 4;
        bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("vertex[{vertex}].f_dc_*/f_rest_*")) && e.contains("inf"),
            "{e}"
        );
    }

    #[test]
    fn ply_general_path_reads_doubles_ascii_and_big_endian_with_sh() {
        let dir = tempfile::tempdir().unwrap();
        for degree in [1, 3] {
            let s = random_splats(40, degree, 3.0, 60 + degree as u64);
            for (format, ty) in [
                ("binary_little_endian", "double"),
                ("binary_big_endian", "float"),
                ("binary_big_endian", "double"),
                ("ascii", "float"),
                ("ascii", "double"),
            ] {
                let p = dir.path().join(format!("{format}-{ty}-{degree}.ply"));
                std::fs::write(&p, hand_written_ply(&s, format, ty)).unwrap();
                let h = parse_header(&p, &std::fs::read(&p).unwrap()).unwrap();
                assert!(
                    fast_layout(&h).is_none(),
                    "{format} {ty} must take the general path"
                );
                // f32 → text/f64 → f32 is exact, so the general path must be bit-exact too.
                assert_bit_exact(&read(&p).unwrap().splats, &s);
            }
        }
    }

    /// Three splats 1 cm apart at x = 500 km, y = 4000 km (`survey_xyz`), the rest random, as a
    /// hand-written PLY whose x/y/z are `double` (other columns `float`) in `format`.
    fn survey_ply(format: &str) -> (GaussianSplats, Vec<u8>) {
        let s = random_splats(3, 1, 1.0, 11);
        let xyz = crate::splats::test_data::survey_xyz();
        let names = inria_property_names(1);
        let mut text = format!("ply\nformat {format} 1.0\nelement vertex 3\n");
        for (i, name) in names.iter().enumerate() {
            let ty = if i < 3 { "double" } else { "float" };
            text.push_str(&format!("property {ty} {name}\n"));
        }
        text.push_str("end_header\n");
        let mut bytes = text.into_bytes();
        let mut rows = vec![0f32; 3 * names.len()];
        fill_rows(&s, 0, names.len(), &mut rows);
        for (i, row) in rows.chunks_exact(names.len()).enumerate() {
            if format == "ascii" {
                let mut line: Vec<String> = xyz[i * 3..i * 3 + 3]
                    .iter()
                    .map(|v| format!("{v:.2}"))
                    .collect();
                line.extend(row[3..].iter().map(|v| v.to_string()));
                bytes.extend_from_slice(line.join(" ").as_bytes());
                bytes.push(b'\n');
            } else {
                xyz[i * 3..i * 3 + 3]
                    .iter()
                    .for_each(|v| bytes.extend(v.to_le_bytes()));
                row[3..].iter().for_each(|v| bytes.extend(v.to_le_bytes()));
            }
        }
        (s, bytes)
    }

    /// Assert that `placed` puts its splats at `survey_xyz` to well under a millimetre.
    fn assert_at_survey_positions(placed: &PlacedSplats) {
        let want = crate::splats::test_data::survey_xyz();
        for i in 0..3 {
            let got = placed.absolute_mean(i);
            for a in 0..3 {
                let err = (got[a] - want[i * 3 + a]).abs();
                assert!(err < 1e-3, "splat {i} axis {a}: {got:?} vs {want:?}");
            }
        }
        // The 1 cm spacing itself, in f64 from the f32 means.
        let dx = placed.absolute_mean(1)[0] - placed.absolute_mean(0)[0];
        assert!((dx - 0.01).abs() < 1e-6, "spacing {dx}");
    }

    #[test]
    fn ply_double_survey_coordinates_keep_1_cm_spacing_at_500_km() {
        let dir = tempfile::tempdir().unwrap();
        for format in ["binary_little_endian", "ascii"] {
            let (s, bytes) = survey_ply(format);
            let p = dir.path().join(format!("{format}.ply"));
            std::fs::write(&p, &bytes).unwrap();
            let placed = read(&p).unwrap();
            assert_eq!(placed.origin_m, [500_000.0, 4_000_000.0, 10.0], "{format}");
            assert_at_survey_positions(&placed);
            // Everything but the means is read as before.
            assert_eq!(placed.splats.log_scales, s.log_scales);
            assert_eq!(placed.splats.sh_coeffs, s.sh_coeffs);
            // A cast to absolute f32 collapses the three splats onto two f32 values 31.25 mm
            // apart.
            let (cast, _) = placed.clone().into_absolute_f32();
            assert_eq!(cast.means[0], 500_000.0);
            assert_eq!(cast.means[3], 500_000.0);
        }
    }

    #[test]
    fn ply_placed_write_stores_double_xyz_and_reads_back_the_same_positions() {
        let dir = tempfile::tempdir().unwrap();
        let (_, bytes) = survey_ply("binary_little_endian");
        let p = dir.path().join("in.ply");
        std::fs::write(&p, bytes).unwrap();
        let placed = read(&p).unwrap();
        let q = dir.path().join("out.ply");
        write(&q, &placed).unwrap();
        let out = std::fs::read(&q).unwrap();
        let text = String::from_utf8_lossy(&out[..parse_header(&q, &out).unwrap().body_offset]);
        assert!(
            text.contains(
                "property double x\nproperty double y\nproperty double z\nproperty float nx"
            ),
            "{text}"
        );
        // The first row's x as stored is the true coordinate, for any tool.
        let body = parse_header(&q, &out).unwrap().body_offset;
        let x0 = f64::from_le_bytes(out[body..body + 8].try_into().unwrap());
        assert_eq!(x0, 500_000.0);
        let back = read(&q).unwrap();
        assert_at_survey_positions(&back);
        assert_eq!(back.splats.rotations, placed.splats.rotations);
        assert_eq!(back.splats.sh_coeffs, placed.splats.sh_coeffs);
    }

    #[test]
    fn ply_float_files_read_placed_at_origin_zero_and_write_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(100, 2, 50.0, 5);
        let p = dir.path().join("f.ply");
        write(&p, &s).unwrap();
        let placed = read(&p).unwrap();
        assert!(placed.is_at_zero());
        assert_bit_exact(&placed.splats, &s);
        let q = dir.path().join("g.ply");
        write(&q, &placed).unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), std::fs::read(&p).unwrap());
        // A double file of f32 values reads identically too (origin 0, same means).
        let d = dir.path().join("d.ply");
        std::fs::write(&d, hand_written_ply(&s, "binary_little_endian", "double")).unwrap();
        let placed = read(&d).unwrap();
        assert!(placed.is_at_zero());
        assert_bit_exact(&placed.splats, &s);
    }

    #[test]
    fn ply_rejects_non_finite_double_coordinates_with_vertex_index() {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut bytes) = survey_ply("binary_little_endian");
        let body = parse_header(Path::new("x"), &bytes).unwrap().body_offset;
        // Vertex 1, y: a row is 3 doubles and 23 floats (SH degree 1).
        let row = 3 * 8 + (inria_property_names(1).len() - 3) * 4;
        let at = body + row + 8;
        bytes[at..at + 8].copy_from_slice(&f64::INFINITY.to_le_bytes());
        let p = dir.path().join("inf.ply");
        std::fs::write(&p, &bytes).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("vertex[1].x/y/z") && e.contains("inf"), "{e}");
    }

    #[test]
    fn ply_reads_real_inria_file() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/datasets/splat-plushdog-smartdatascan/point_cloud_29999_clean.ply");
        let bytes = std::fs::read(&p).expect("dataset splat-plushdog-smartdatascan is missing");
        let h = parse_header(&p, &bytes).unwrap();
        let n_header = h.elements[0].count;
        let s = read(&p).unwrap().splats;
        assert_eq!(n_header, 15_105);
        assert_eq!(s.len(), n_header);
        assert_eq!(s.sh_degree, 3);
        s.check_shapes("test").unwrap();
        s.check_finite("test").unwrap();
        // Re-writing the INRIA file reproduces its body byte for byte (normals there are 0).
        let dir = tempfile::tempdir().unwrap();
        let q = dir.path().join("copy.ply");
        write(&q, &s).unwrap();
        let copy = std::fs::read(&q).unwrap();
        let hq = parse_header(&q, &copy).unwrap();
        assert_eq!(&copy[hq.body_offset..], &bytes[h.body_offset..]);
    }

    fn write_bytes(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.ply");
        std::fs::write(&p, bytes).unwrap();
        (dir, p)
    }

    fn valid_file_bytes() -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ok.ply");
        write(&p, &random_splats(10, 1, 1.0, 1)).unwrap();
        std::fs::read(&p).unwrap()
    }

    #[test]
    fn ply_rejects_empty_file() {
        let (_d, p) = write_bytes(b"");
        let e = read(&p).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        assert!(
            e.to_string().contains("empty file") && e.to_string().contains("bad.ply"),
            "{e}"
        );
    }

    #[test]
    fn ply_rejects_wrong_magic() {
        let (_d, p) = write_bytes(b"PK\x03\x04 not a ply");
        let e = read(&p).unwrap_err();
        assert!(e.to_string().contains("wrong magic"), "{e}");
    }

    #[test]
    fn ply_rejects_truncated_header() {
        let bytes = valid_file_bytes();
        let (_d, p) = write_bytes(&bytes[..60]);
        let e = read(&p).unwrap_err();
        assert!(e.to_string().contains("truncated header"), "{e}");
    }

    #[test]
    fn ply_rejects_truncated_body() {
        let bytes = valid_file_bytes();
        let (_d, p) = write_bytes(&bytes[..bytes.len() - 5]);
        let e = read(&p).unwrap_err();
        assert!(e.to_string().contains("truncated body"), "{e}");
    }

    #[test]
    fn ply_rejects_count_mismatch() {
        let mut bytes = valid_file_bytes();
        bytes.extend_from_slice(&[0u8; 4 * 26]);
        let (_d, p) = write_bytes(&bytes);
        let e = read(&p).unwrap_err();
        assert!(
            matches!(e, Error::Invalid { ref field, .. } if field == "element vertex"),
            "{e}"
        );
    }

    #[test]
    fn ply_rejects_missing_property_by_name() {
        let text = b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
            property float z\nproperty float f_dc_0\nproperty float f_dc_1\nproperty float f_dc_2\n\
            property float scale_0\nproperty float scale_1\nproperty float scale_2\n\
            property float rot_0\nproperty float rot_1\nproperty float rot_2\nproperty float rot_3\n\
            end_header\n0 0 0 0 0 0 0 0 0 1 0 0 0\n";
        let (_d, p) = write_bytes(text);
        let e = read(&p).unwrap_err();
        assert!(e.to_string().contains("vertex.opacity"), "{e}");
    }

    #[test]
    fn ply_rejects_unsupported_f_rest_count() {
        let text = b"ply\nformat binary_little_endian 1.0\nelement vertex 0\nproperty float x\n\
            property float f_rest_0\nproperty float f_rest_1\nend_header\n";
        let (_d, p) = write_bytes(text);
        let e = read(&p).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported { .. }) && e.to_string().contains("2 f_rest"),
            "{e}"
        );
    }

    #[test]
    fn ply_rejects_nan_with_vertex_index() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nan.ply");
        let s = random_splats(4, 0, 1.0, 2);
        write(&p, &s).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        let h = parse_header(&p, &bytes).unwrap();
        // Vertex 2, column 1 (y).
        let at = h.body_offset + (2 * 17 + 1) * 4;
        bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let e = read(&p).unwrap_err();
        assert!(e.to_string().contains("vertex[2].x/y/z"), "{e}");
    }

    #[test]
    fn ply_write_rejects_shape_mismatch_and_nan() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.ply");
        let mut s = random_splats(3, 0, 1.0, 2);
        s.means.pop();
        assert!(matches!(write(&p, &s), Err(Error::InvalidInput { .. })));
        let mut s = random_splats(3, 0, 1.0, 2);
        s.logit_opacities[1] = f32::INFINITY;
        let e = write(&p, &s).unwrap_err();
        assert!(e.to_string().contains("logit_opacities[splat 1]"), "{e}");
        assert!(!p.exists());
    }
}
