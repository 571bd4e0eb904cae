//! Gaussian splats as a GLB: `KHR_gaussian_splatting` with the SPZ payload of
//! `KHR_gaussian_splatting_compression_spz_2` — the only splat glTF CesiumJS renders.
//!
//! Sources: KhronosGroup/glTF `extensions/2.0/Khronos/KHR_gaussian_splatting` (Release
//! Candidate: `kernel`, `colorSpace`, attribute semantics) and
//! `KHR_gaussian_splatting_compression_spz_2` (draft: `{ "bufferView": i }` nested in the
//! `KHR_gaussian_splatting` object, accessors typed as after decoding, `count` = SPZ numPoints);
//! shared/research/tiles-formats.md §1.7, §2.1, §2.2, §7. glTF 2.0 §4.4 (GLB framing).
//!
//! The JSON and the GLB framing are written by hand because the `gltf` crate rejects the
//! `KHR_gaussian_splatting:*` attribute names. One GLB holds one scene → one node (no matrix) →
//! one mesh → one POINTS primitive (cesium#12682) whose attributes are accessors *without*
//! `bufferView`: `POSITION` (VEC3 float, with the min/max glTF requires, taken from the
//! quantised positions), `COLOR_0` (VEC4 normalised u8), `KHR_gaussian_splatting:SCALE` (VEC3
//! float), `KHR_gaussian_splatting:ROTATION` (VEC4 float) and
//! `KHR_gaussian_splatting:SH_DEGREE_l_COEF_n` (VEC3 float) for 1 ≤ l ≤ degree. The SPZ bytes
//! (v3, gzip) live in the single BIN-chunk buffer. Both extensions are in `extensionsUsed` and
//! `extensionsRequired` (there is no uncompressed fallback).
//!
//! Frame: positions and quaternions are stored as given; pass glTF Y-up coordinates. The draft's
//! "pack with LUF" instruction is deliberately not applied: CesiumJS 1.145 unpacks SPZ without a
//! conversion and renders unconverted data correctly (research note §2.2, an open interop risk).

use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};

use super::spz::{SpzOptions, SpzVersion, decode_spz_from, encode_spz};
use super::{GaussianSplats, MAX_SH_DEGREE};
use crate::{Error, Result};

/// Extension name of the base splat extension.
pub const KHR_GAUSSIAN_SPLATTING: &str = "KHR_gaussian_splatting";
/// Extension name of the SPZ compression child extension.
pub const KHR_GAUSSIAN_SPLATTING_SPZ_2: &str = "KHR_gaussian_splatting_compression_spz_2";

const GLB_MAGIC: u32 = 0x4654_6C67; // "glTF"
const CHUNK_JSON: u32 = 0x4E4F_534A; // "JSON"
const CHUNK_BIN: u32 = 0x004E_4942; // "BIN\0"
const FLOAT: u32 = 5126;
const UNSIGNED_BYTE: u32 = 5121;

/// `KHR_gaussian_splatting.colorSpace` (display-referred BT.709 primaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplatColorSpace {
    /// `"srgb_rec709_display"`: what INRIA-style training produces (sRGB-encoded display values).
    #[default]
    SrgbRec709Display,
    /// `"lin_rec709_display"`: linear display-referred values.
    LinRec709Display,
}

impl SplatColorSpace {
    fn as_str(self) -> &'static str {
        match self {
            Self::SrgbRec709Display => "srgb_rec709_display",
            Self::LinRec709Display => "lin_rec709_display",
        }
    }
}

/// Options of [`write_splat_glb_with`]. `Default`: sRGB display colour space, SPZ v3 at 12
/// fractional bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplatGlbOptions {
    /// `KHR_gaussian_splatting.colorSpace`; default sRGB display-referred.
    pub color_space: SplatColorSpace,
    /// SPZ encoding: v2 or v3 (which CesiumJS 1.145 reads); v4 is rejected, since
    /// `KHR_gaussian_splatting_compression_spz_2` pins the gzip-era files.
    pub spz: SpzOptions,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Accessor {
    component_type: u32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    normalized: bool,
    count: usize,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<[f32; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<[f32; 3]>,
}

/// Build a GLB holding `splats` as one SPZ-compressed `KHR_gaussian_splatting` primitive, with
/// default options (sRGB display colour space, SPZ v3, 12 fractional bits).
///
/// - `splats`: 1 ≤ N ≤ 10 000 000, SH degree 0..=3, positions in glTF Y-up metres with
///   |x| < 2048 m (use tile-local coordinates).
///
/// # Errors
/// As [`write_splat_glb_with`].
pub fn write_splat_glb(splats: &GaussianSplats) -> Result<Vec<u8>> {
    write_splat_glb_with(splats, &SplatGlbOptions::default())
}

/// Build a splat GLB with explicit options. The layout is described in the module docs; the
/// result is deterministic for equal input.
///
/// # Errors
/// [`Error::InvalidInput`] for N = 0 (glTF accessors need count ≥ 1), for SPZ v4 in
/// `options.spz.version`, and for everything [`encode_spz`] rejects (shapes, NaN, positions beyond the fixed-point range).
pub fn write_splat_glb_with(splats: &GaussianSplats, options: &SplatGlbOptions) -> Result<Vec<u8>> {
    const CONTEXT: &str = "splat GLB write";
    splats.check_shapes(CONTEXT)?;
    let n = splats.len();
    if n == 0 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "logit_opacities (N)".into(),
            expected: "at least one splat (glTF accessor count ≥ 1)".into(),
            found: "0".into(),
        });
    }
    if options.spz.version == SpzVersion::V4 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "options.spz.version".into(),
            expected: "SPZ v2 or v3 (KHR_gaussian_splatting_compression_spz_2 pins gzip-era SPZ)"
                .into(),
            found: "v4".into(),
        });
    }
    let spz = encode_spz(splats, &options.spz)?;

    // POSITION min/max of the values a decoder will see (quantised), per glTF §3.6.2.5.
    let step = (1u64 << options.spz.fractional_bits) as f64;
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for p in splats.means.chunks_exact(3) {
        for a in 0..3 {
            let q = ((p[a] as f64 * step).round() / step) as f32;
            min[a] = min[a].min(q);
            max[a] = max[a].max(q);
        }
    }
    let float = |kind| Accessor {
        component_type: FLOAT,
        normalized: false,
        count: n,
        kind,
        min: None,
        max: None,
    };
    let mut accessors = vec![
        Accessor {
            min: Some(min),
            max: Some(max),
            ..float("VEC3")
        },
        Accessor {
            component_type: UNSIGNED_BYTE,
            normalized: true,
            ..float("VEC4")
        },
        float("VEC3"),
        float("VEC4"),
    ];
    let mut attributes = serde_json::Map::new();
    attributes.insert("POSITION".into(), json!(0));
    attributes.insert("COLOR_0".into(), json!(1));
    attributes.insert(format!("{KHR_GAUSSIAN_SPLATTING}:SCALE"), json!(2));
    attributes.insert(format!("{KHR_GAUSSIAN_SPLATTING}:ROTATION"), json!(3));
    for l in 1..=splats.sh_degree {
        for m in 0..(2 * l + 1) {
            attributes.insert(
                format!("{KHR_GAUSSIAN_SPLATTING}:SH_DEGREE_{l}_COEF_{m}"),
                json!(accessors.len()),
            );
            accessors.push(float("VEC3"));
        }
    }
    let extensions = [KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2];
    let doc = json!({
        "asset": { "version": "2.0", "generator": concat!("kiln-formats ", env!("CARGO_PKG_VERSION")) },
        "extensionsUsed": extensions,
        "extensionsRequired": extensions,
        "scene": 0,
        "scenes": [{ "nodes": [0] }],
        "nodes": [{ "mesh": 0 }],
        "meshes": [{ "primitives": [{
            "mode": 0,
            "attributes": attributes,
            "extensions": { KHR_GAUSSIAN_SPLATTING: {
                "kernel": "ellipse",
                "colorSpace": options.color_space.as_str(),
                "extensions": { KHR_GAUSSIAN_SPLATTING_SPZ_2: { "bufferView": 0 } }
            }}
        }]}],
        "accessors": accessors,
        "bufferViews": [{ "buffer": 0, "byteOffset": 0, "byteLength": spz.len() }],
        "buffers": [{ "byteLength": spz.len() }],
    });
    let json = serde_json::to_vec(&doc).map_err(|e| Error::InvalidInput {
        context: CONTEXT,
        field: "glTF JSON".into(),
        expected: "serialisable JSON".into(),
        found: e.to_string(),
    })?;
    Ok(frame_glb(&json, &spz))
}

/// Build a GLB holding `splats` as one **uncompressed** `KHR_gaussian_splatting` primitive:
/// float accessors, one tightly packed bufferView each, in the BIN chunk; lossless apart from
/// the exp/sigmoid (and back) rounding of scales and opacities.
///
/// Attributes: `POSITION` (VEC3, with min/max), `KHR_gaussian_splatting:ROTATION` (VEC4 **xyzw**
/// unit quaternion), `:SCALE` (VEC3 **linear** = exp(log-scale)), `:OPACITY` (SCALAR linear =
/// sigmoid(logit)), `:SH_DEGREE_0_COEF_0` (VEC3 raw DC) and `:SH_DEGREE_l_COEF_m` (VEC3) for
/// 1 ≤ l ≤ degree. Only `KHR_gaussian_splatting` is in `extensionsUsed` (not required: a viewer
/// without it can still draw the POINTS). `options.spz` is ignored. Positions are stored as
/// given (glTF is Y-up; see [`super::convert::UpAxis`]).
///
/// # Errors
/// [`Error::InvalidInput`] for N = 0, inconsistent shapes, NaN/±Inf, a zero quaternion, or a
/// log-scale whose exp overflows f32 (splat index named).
pub fn write_plain_splat_glb(
    splats: &GaussianSplats,
    options: &SplatGlbOptions,
) -> Result<Vec<u8>> {
    const CONTEXT: &str = "plain splat GLB write";
    splats.check_shapes(CONTEXT)?;
    splats.check_finite(CONTEXT)?;
    let n = splats.len();
    if n == 0 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "logit_opacities (N)".into(),
            expected: "at least one splat (glTF accessor count ≥ 1)".into(),
            found: "0".into(),
        });
    }
    let k = splats.sh_coeffs_per_channel();
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for p in splats.means.chunks_exact(3) {
        for a in 0..3 {
            min[a] = min[a].min(p[a]);
            max[a] = max[a].max(p[a]);
        }
    }
    let mut rotation = Vec::with_capacity(n * 4);
    for (i, q) in splats.rotations.chunks_exact(4).enumerate() {
        let norm = q.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
        if norm < 1e-12 {
            return Err(Error::InvalidInput {
                context: CONTEXT,
                field: format!("rotations[splat {i}]"),
                expected: "a non-zero quaternion (wxyz)".into(),
                found: format!("{q:?}"),
            });
        }
        for j in [1, 2, 3, 0] {
            rotation.push((q[j] as f64 / norm) as f32);
        }
    }
    let mut scale = Vec::with_capacity(n * 3);
    for (j, &l) in splats.log_scales.iter().enumerate() {
        let s = l.exp();
        if !s.is_finite() {
            return Err(Error::InvalidInput {
                context: CONTEXT,
                field: format!("log_scales[splat {}][{}]", j / 3, j % 3),
                expected: "a log-scale whose exp fits in f32 (≤ 88.7)".into(),
                found: l.to_string(),
            });
        }
        scale.push(s);
    }
    let opacity: Vec<f32> = splats
        .logit_opacities
        .iter()
        .map(|&l| super::sigmoid(l) as f32)
        .collect();
    // (semantic, glTF type, values)
    let mut columns: Vec<(String, &'static str, Vec<f32>)> = vec![
        ("POSITION".into(), "VEC3", splats.means.clone()),
        (
            format!("{KHR_GAUSSIAN_SPLATTING}:ROTATION"),
            "VEC4",
            rotation,
        ),
        (format!("{KHR_GAUSSIAN_SPLATTING}:SCALE"), "VEC3", scale),
        (
            format!("{KHR_GAUSSIAN_SPLATTING}:OPACITY"),
            "SCALAR",
            opacity,
        ),
    ];
    for l in 0..=splats.sh_degree as usize {
        for m in 0..(2 * l + 1) {
            let coeff = l * l + m;
            let values = (0..n)
                .flat_map(|i| {
                    let at = (i * k + coeff) * 3;
                    splats.sh_coeffs[at..at + 3].iter().copied()
                })
                .collect();
            columns.push((
                format!("{KHR_GAUSSIAN_SPLATTING}:SH_DEGREE_{l}_COEF_{m}"),
                "VEC3",
                values,
            ));
        }
    }
    let mut bin: Vec<u8> = Vec::new();
    let mut views = Vec::new();
    let mut accessors = Vec::new();
    let mut attributes = serde_json::Map::new();
    for (i, (semantic, kind, values)) in columns.iter().enumerate() {
        views.push(json!({ "buffer": 0, "byteOffset": bin.len(), "byteLength": values.len() * 4 }));
        bin.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        let mut acc = json!({ "bufferView": i, "componentType": FLOAT, "count": n, "type": kind });
        if i == 0 {
            acc["min"] = json!(min);
            acc["max"] = json!(max);
        }
        accessors.push(acc);
        attributes.insert(semantic.clone(), json!(i));
    }
    let doc = json!({
        "asset": { "version": "2.0", "generator": concat!("kiln-formats ", env!("CARGO_PKG_VERSION")) },
        "extensionsUsed": [KHR_GAUSSIAN_SPLATTING],
        "scene": 0,
        "scenes": [{ "nodes": [0] }],
        "nodes": [{ "mesh": 0 }],
        "meshes": [{ "primitives": [{
            "mode": 0,
            "attributes": attributes,
            "extensions": { KHR_GAUSSIAN_SPLATTING: {
                "kernel": "ellipse",
                "colorSpace": options.color_space.as_str(),
            }}
        }]}],
        "accessors": accessors,
        "bufferViews": views,
        "buffers": [{ "byteLength": bin.len() }],
    });
    let json = serde_json::to_vec(&doc).map_err(|e| Error::InvalidInput {
        context: CONTEXT,
        field: "glTF JSON".into(),
        expected: "serialisable JSON".into(),
        found: e.to_string(),
    })?;
    Ok(frame_glb(&json, &bin))
}

/// Read a splat GLB file (SPZ-compressed or plain); errors name `path`. See [`read_splat_glb`].
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] when the file cannot be read; otherwise as
/// [`read_splat_glb`].
pub fn read_splat_glb_file(path: &Path) -> Result<GaussianSplats> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_splat_glb_from(&bytes, path)
}

/// Read `count` × `width` f32 values of float accessor `index` from the BIN chunk.
fn read_float_accessor(
    doc: &Value,
    bin: &[u8],
    index: u64,
    width: usize,
    path: &Path,
) -> Result<Vec<f32>> {
    let acc = &doc["accessors"][index as usize];
    let field = format!("accessors[{index}]");
    let kind = acc["type"].as_str().unwrap_or("?");
    let expected_kind = ["SCALAR", "VEC2", "VEC3", "VEC4"][width - 1];
    if acc["componentType"].as_u64() != Some(FLOAT as u64) || kind != expected_kind {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field,
            found: format!(
                "componentType {} type {kind}",
                acc["componentType"].as_u64().unwrap_or(0)
            ),
            supported: format!("FLOAT (5126) {expected_kind} splat attributes"),
        });
    }
    let count = acc["count"].as_u64().unwrap_or(0) as usize;
    let Some(view_index) = acc["bufferView"].as_u64() else {
        return Ok(vec![0.0; count * width]);
    };
    let view = &doc["bufferViews"][view_index as usize];
    if view["buffer"].as_u64() != Some(0) || doc["buffers"][0].get("uri").is_some() {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: format!("bufferViews[{view_index}]"),
            found: "an external buffer".into(),
            supported: "buffer 0 = the GLB BIN chunk".into(),
        });
    }
    let start = view["byteOffset"].as_u64().unwrap_or(0) as usize
        + acc["byteOffset"].as_u64().unwrap_or(0) as usize;
    let stride = view["byteStride"]
        .as_u64()
        .map_or(width * 4, |s| s as usize);
    let view_end = view["byteOffset"].as_u64().unwrap_or(0) as usize
        + view["byteLength"].as_u64().unwrap_or(0) as usize;
    let end = if count == 0 {
        start
    } else {
        start + stride * (count - 1) + width * 4
    };
    if stride < width * 4 || end > view_end || end > bin.len() {
        return Err(corrupt(
            path,
            field,
            format!(
                "{count} elements at byte {start} (stride {stride}) run past the bufferView or BIN chunk"
            ),
        ));
    }
    let mut out = Vec::with_capacity(count * width);
    for i in 0..count {
        let at = start + i * stride;
        for c in 0..width {
            let o = at + c * 4;
            out.push(f32::from_le_bytes([
                bin[o],
                bin[o + 1],
                bin[o + 2],
                bin[o + 3],
            ]));
        }
    }
    Ok(out)
}

/// Decode an uncompressed `KHR_gaussian_splatting` primitive (see [`write_plain_splat_glb`]).
fn read_plain_primitive(
    doc: &Value,
    bin: &[u8],
    prim: &Value,
    path: &Path,
) -> Result<GaussianSplats> {
    let attrs = &prim["attributes"];
    let get = |semantic: &str, width: usize| -> Result<Option<Vec<f32>>> {
        match attrs[semantic].as_u64() {
            None => Ok(None),
            Some(i) => read_float_accessor(doc, bin, i, width, path).map(Some),
        }
    };
    let require = |semantic: &str, width: usize| -> Result<Vec<f32>> {
        get(semantic, width)?.ok_or_else(|| Error::Invalid {
            path: path.to_path_buf(),
            field: format!("attributes.{semantic}"),
            expected: "the attribute KHR_gaussian_splatting requires".into(),
            found: "missing".into(),
        })
    };
    let ext = |name: &str| format!("{KHR_GAUSSIAN_SPLATTING}:{name}");
    let means = require("POSITION", 3)?;
    let n = means.len() / 3;
    let xyzw = require(&ext("ROTATION"), 4)?;
    let scale = require(&ext("SCALE"), 3)?;
    let opacity = require(&ext("OPACITY"), 1)?;
    let mut bands = vec![require(&ext("SH_DEGREE_0_COEF_0"), 3)?];
    let mut sh_degree = 0;
    for l in 1..=MAX_SH_DEGREE as usize {
        let mut coefs = Vec::new();
        for m in 0..(2 * l + 1) {
            match get(&ext(&format!("SH_DEGREE_{l}_COEF_{m}")), 3)? {
                Some(v) => coefs.push(v),
                None => break,
            }
        }
        if coefs.len() != 2 * l + 1 {
            break;
        }
        bands.extend(coefs);
        sh_degree = l as u32;
    }
    for (name, v, w) in [
        ("ROTATION", &xyzw, 4),
        ("SCALE", &scale, 3),
        ("OPACITY", &opacity, 1),
    ] {
        if v.len() != n * w {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("attributes.{}", ext(name)),
                expected: format!("count {n} (the POSITION count)"),
                found: format!("count {}", v.len() / w),
            });
        }
    }
    if let Some(b) = bands.iter().find(|b| b.len() != n * 3) {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "attributes.KHR_gaussian_splatting:SH_DEGREE_*".into(),
            expected: format!("count {n} (the POSITION count)"),
            found: format!("count {}", b.len() / 3),
        });
    }
    let k = bands.len();
    let mut sh_coeffs = Vec::with_capacity(n * k * 3);
    for i in 0..n {
        for b in &bands {
            sh_coeffs.extend_from_slice(&b[i * 3..i * 3 + 3]);
        }
    }
    let rotations = xyzw
        .chunks_exact(4)
        .flat_map(|q| [q[3], q[0], q[1], q[2]])
        .collect();
    Ok(GaussianSplats {
        means,
        // Zero scales (flat splats) map to a tiny finite log-scale.
        log_scales: scale.iter().map(|s| s.max(1e-30).ln()).collect(),
        rotations,
        logit_opacities: opacity
            .iter()
            .map(|&a| super::logit((a as f64).clamp(1e-6, 1.0 - 1e-6)))
            .collect(),
        sh_coeffs,
        sh_degree,
    })
}

/// GLB container (glTF 2.0 §4.4): 12-byte header, JSON chunk padded with spaces, BIN chunk padded
/// with zeros, both to 4 bytes.
fn frame_glb(json: &[u8], bin: &[u8]) -> Vec<u8> {
    let pad = |len: usize| (4 - len % 4) % 4;
    let json_len = json.len() + pad(json.len());
    let bin_len = bin.len() + pad(bin.len());
    let total = 12 + 8 + json_len + 8 + bin_len;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&GLB_MAGIC.to_le_bytes());
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&(json_len as u32).to_le_bytes());
    out.extend_from_slice(&CHUNK_JSON.to_le_bytes());
    out.extend_from_slice(json);
    out.resize(out.len() + pad(json.len()), b' ');
    out.extend_from_slice(&(bin_len as u32).to_le_bytes());
    out.extend_from_slice(&CHUNK_BIN.to_le_bytes());
    out.extend_from_slice(bin);
    out.resize(out.len() + pad(bin.len()), 0);
    out
}

/// Decode the splats of a GLB written by [`write_splat_glb`] (or any GLB whose first
/// `KHR_gaussian_splatting` primitive carries a `KHR_gaussian_splatting_compression_spz_2`
/// bufferView into the GLB's BIN chunk), or, when no primitive has an SPZ payload, of the first
/// uncompressed `KHR_gaussian_splatting` primitive ([`write_plain_splat_glb`]'s layout; FLOAT
/// accessors only; linear scales of 0 become log-scale ln 1e−30, opacities are clamped to
/// [1e−6, 1 − 1e−6]). Errors name the source as `<GLB bytes>`; node transforms are not applied.
///
/// Returns the SPZ content as [`super::spz::decode_spz`] does (tile-local positions when the GLB
/// is a tile).
///
/// # Errors
/// [`Error::Corrupt`] for a wrong magic, version ≠ 2, bad chunk framing, invalid JSON or a
/// bufferView outside the BIN chunk; [`Error::Unsupported`] when no primitive carries
/// `KHR_gaussian_splatting`, an uncompressed attribute is not FLOAT, or the buffer is external;
/// [`Error::Invalid`] when a required attribute of an uncompressed primitive is missing or its
/// count differs from POSITION's; [`Error::Invalid`] when the
/// POSITION accessor count differs from the SPZ point count; SPZ errors as in
/// [`super::spz::decode_spz`].
pub fn read_splat_glb(bytes: &[u8]) -> Result<GaussianSplats> {
    read_splat_glb_from(bytes, Path::new("<GLB bytes>"))
}

fn corrupt(path: &Path, location: impl Into<String>, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        location: location.into(),
        what: what.into(),
    }
}

/// Split a GLB into its JSON value and BIN chunk.
fn parse_glb<'a>(bytes: &'a [u8], path: &Path) -> Result<(Value, &'a [u8])> {
    let u32_at = |o: usize| -> Option<u32> {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if u32_at(0) != Some(GLB_MAGIC) {
        return Err(corrupt(path, "byte 0", "wrong magic: expected `glTF`"));
    }
    let version = u32_at(4).unwrap_or(0);
    if version != 2 {
        return Err(corrupt(
            path,
            "header.version",
            format!("GLB version {version}, expected 2"),
        ));
    }
    let length = u32_at(8).unwrap_or(0) as usize;
    if length > bytes.len() || length < 20 {
        return Err(corrupt(
            path,
            "header.length",
            format!(
                "header says {length} bytes, have {} (truncated)",
                bytes.len()
            ),
        ));
    }
    let mut at = 12;
    let mut json = None;
    let mut bin: &[u8] = &[];
    while at + 8 <= length {
        let (Some(len), Some(kind)) = (u32_at(at), u32_at(at + 4)) else {
            break;
        };
        let len = len as usize;
        let start = at + 8;
        let Some(chunk) = bytes
            .get(start..start + len)
            .filter(|_| start + len <= length)
        else {
            return Err(corrupt(
                path,
                format!("chunk at byte {at}"),
                "chunk runs past the end",
            ));
        };
        match kind {
            CHUNK_JSON if json.is_none() => json = Some(chunk),
            CHUNK_BIN if bin.is_empty() => bin = chunk,
            _ => {}
        }
        at = start + len;
    }
    let Some(json) = json else {
        return Err(corrupt(path, "chunk 0", "no JSON chunk"));
    };
    let value: Value = serde_json::from_slice(json)
        .map_err(|e| corrupt(path, "JSON chunk", format!("invalid JSON: {e}")))?;
    Ok((value, bin))
}

/// The SPZ file version of a splat GLB's `KHR_gaussian_splatting_compression_spz_2` payload, or
/// `None` for an uncompressed `KHR_gaussian_splatting` GLB.
///
/// # Errors
/// As [`read_splat_glb`] for the container; [`super::spz::spz_file_version`] for the payload.
pub fn splat_glb_spz_version(bytes: &[u8]) -> Result<Option<u32>> {
    let path = Path::new("<GLB bytes>");
    let (doc, bin) = parse_glb(bytes, path)?;
    match spz_payload(&doc, bin, path)? {
        Some((spz, _)) => Ok(Some(super::spz::spz_file_version(spz)?)),
        None => Ok(None),
    }
}

/// The SPZ bytes of the first `KHR_gaussian_splatting_compression_spz_2` primitive and its
/// POSITION accessor, or `None` when no primitive carries that extension.
fn spz_payload<'a>(
    doc: &Value,
    bin: &'a [u8],
    path: &Path,
) -> Result<Option<(&'a [u8], Option<u64>)>> {
    let primitives = doc["meshes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["primitives"].as_array().into_iter().flatten());
    let mut found = None;
    for p in primitives {
        let ext =
            &p["extensions"][KHR_GAUSSIAN_SPLATTING]["extensions"][KHR_GAUSSIAN_SPLATTING_SPZ_2];
        if let Some(view) = ext["bufferView"].as_u64() {
            found = Some((view as usize, p["attributes"]["POSITION"].as_u64()));
            break;
        }
    }
    let Some((view_index, position_accessor)) = found else {
        return Ok(None);
    };
    let view = &doc["bufferViews"][view_index];
    let field = format!("bufferViews[{view_index}]");
    let buffer = view["buffer"].as_u64();
    if buffer != Some(0) || doc["buffers"][0].get("uri").is_some() {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field,
            found: format!("buffer {buffer:?} (external or not the GLB BIN chunk)"),
            supported: "buffer 0 = the GLB BIN chunk".into(),
        });
    }
    let offset = view["byteOffset"].as_u64().unwrap_or(0) as usize;
    let Some(length) = view["byteLength"].as_u64().map(|l| l as usize) else {
        return Err(corrupt(path, field, "bufferView without byteLength"));
    };
    let Some(spz) = offset
        .checked_add(length)
        .and_then(|end| bin.get(offset..end))
    else {
        return Err(corrupt(
            path,
            field,
            format!(
                "bytes {offset}..{} lie outside the {}-byte BIN chunk",
                offset + length,
                bin.len()
            ),
        ));
    };
    Ok(Some((spz, position_accessor)))
}

fn read_splat_glb_from(bytes: &[u8], path: &Path) -> Result<GaussianSplats> {
    let (doc, bin) = parse_glb(bytes, path)?;
    let Some((spz, position_accessor)) = spz_payload(&doc, bin, path)? else {
        // No SPZ payload: an uncompressed KHR_gaussian_splatting primitive.
        let plain = doc["meshes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["primitives"].as_array().into_iter().flatten())
            .find(|p| p["extensions"].get(KHR_GAUSSIAN_SPLATTING).is_some());
        return match plain {
            Some(p) => read_plain_primitive(&doc, bin, p, path),
            None => Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: format!("meshes[*].primitives[*].extensions.{KHR_GAUSSIAN_SPLATTING}"),
                found: "no primitive with KHR_gaussian_splatting (a mesh or point cloud GLB?)"
                    .into(),
                supported: format!(
                    "{KHR_GAUSSIAN_SPLATTING} primitives, plain or with {KHR_GAUSSIAN_SPLATTING_SPZ_2}"
                ),
            }),
        };
    };
    let splats = decode_spz_from(spz, path)?;
    if let Some(acc) = position_accessor {
        let count = doc["accessors"][acc as usize]["count"].as_u64();
        if count != Some(splats.len() as u64) {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("accessors[{acc}].count"),
                expected: format!("{} (the SPZ numPoints)", splats.len()),
                found: format!("{count:?}"),
            });
        }
    }
    Ok(splats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::test_data::random_splats;

    fn json_of(glb: &[u8]) -> Value {
        parse_glb(glb, Path::new("t")).unwrap().0
    }

    #[test]
    fn glb_round_trip_decodes_the_spz_payload() {
        for degree in [0, 3] {
            let s = random_splats(500, degree, 20.0, 9);
            let glb = write_splat_glb(&s).unwrap();
            let back = read_splat_glb(&glb).unwrap();
            let direct =
                super::super::spz::decode_spz(&encode_spz(&s, &SpzOptions::default()).unwrap())
                    .unwrap();
            assert_eq!(back, direct);
        }
    }

    #[test]
    fn glb_framing_is_aligned_and_lengths_match() {
        let glb = write_splat_glb(&random_splats(7, 1, 1.0, 2)).unwrap();
        assert_eq!(&glb[0..4], b"glTF");
        assert_eq!(u32::from_le_bytes(glb[4..8].try_into().unwrap()), 2);
        assert_eq!(
            u32::from_le_bytes(glb[8..12].try_into().unwrap()) as usize,
            glb.len()
        );
        let json_len = u32::from_le_bytes(glb[12..16].try_into().unwrap()) as usize;
        assert_eq!(json_len % 4, 0);
        assert_eq!(&glb[16..20], b"JSON");
        let bin_at = 20 + json_len;
        assert_eq!(&glb[bin_at + 4..bin_at + 8], b"BIN\0");
        let bin_len = u32::from_le_bytes(glb[bin_at..bin_at + 4].try_into().unwrap()) as usize;
        assert_eq!(bin_len % 4, 0);
        assert_eq!(bin_at + 8 + bin_len, glb.len());
        assert_eq!(&glb[bin_at + 8..bin_at + 10], &[0x1f, 0x8b]);
    }

    #[test]
    fn glb_json_declares_extensions_and_attributes() {
        let s = random_splats(11, 2, 1.0, 2);
        let v = json_of(&write_splat_glb(&s).unwrap());
        let both = json!([KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2]);
        assert_eq!(v["extensionsUsed"], both);
        assert_eq!(v["extensionsRequired"], both);
        let p = &v["meshes"][0]["primitives"][0];
        assert_eq!(p["mode"], 0);
        let ext = &p["extensions"]["KHR_gaussian_splatting"];
        assert_eq!(ext["kernel"], "ellipse");
        assert_eq!(ext["colorSpace"], "srgb_rec709_display");
        assert_eq!(
            ext["extensions"]["KHR_gaussian_splatting_compression_spz_2"]["bufferView"],
            0
        );
        let attrs = p["attributes"].as_object().unwrap();
        // POSITION, COLOR_0, SCALE, ROTATION + 3 (l=1) + 5 (l=2).
        assert_eq!(attrs.len(), 4 + 3 + 5);
        assert!(attrs.contains_key("KHR_gaussian_splatting:SH_DEGREE_2_COEF_4"));
        assert!(!attrs.contains_key("KHR_gaussian_splatting:SH_DEGREE_3_COEF_0"));
        for acc in v["accessors"].as_array().unwrap() {
            assert_eq!(acc["count"], 11);
            assert!(acc.get("bufferView").is_none());
        }
        let pos = &v["accessors"][attrs["POSITION"].as_u64().unwrap() as usize];
        assert_eq!(pos["type"], "VEC3");
        assert!(pos["min"].is_array() && pos["max"].is_array());
        let color = &v["accessors"][attrs["COLOR_0"].as_u64().unwrap() as usize];
        assert_eq!(
            (
                color["componentType"].as_u64(),
                color["normalized"].as_bool()
            ),
            (Some(5121), Some(true))
        );
        assert_eq!(v["nodes"][0].get("matrix"), None);
    }

    #[test]
    fn glb_position_min_max_bound_the_decoded_positions() {
        let s = random_splats(300, 0, 50.0, 4);
        let glb = write_splat_glb(&s).unwrap();
        let v = json_of(&glb);
        let back = read_splat_glb(&glb).unwrap();
        for a in 0..3 {
            let lo = v["accessors"][0]["min"][a].as_f64().unwrap() as f32;
            let hi = v["accessors"][0]["max"][a].as_f64().unwrap() as f32;
            let vals = back.means.iter().skip(a).step_by(3);
            let (mn, mx) = vals.fold((f32::MAX, f32::MIN), |(l, h), &x| (l.min(x), h.max(x)));
            assert_eq!((lo, hi), (mn, mx));
        }
    }

    #[test]
    fn glb_rejects_empty_splats_and_bad_bytes() {
        let empty = GaussianSplats::default();
        assert!(matches!(
            write_splat_glb(&empty),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(read_splat_glb(b""), Err(Error::Corrupt { .. })));
        assert!(matches!(
            read_splat_glb(b"glTF\x01\0\0\0"),
            Err(Error::Corrupt { .. })
        ));
        let glb = write_splat_glb(&random_splats(7, 1, 1.0, 2)).unwrap();
        assert!(matches!(
            read_splat_glb(&glb[..glb.len() - 8]),
            Err(Error::Corrupt { .. })
        ));
        // A glTF without any splat primitive is unsupported, not corrupt.
        let plain = frame_glb(
            br#"{"asset":{"version":"2.0"},"meshes":[{"primitives":[{"attributes":{}}]}]}"#,
            &[],
        );
        assert!(matches!(
            read_splat_glb(&plain),
            Err(Error::Unsupported { .. })
        ));
    }

    #[test]
    fn plain_glb_round_trips_exactly_apart_from_exp_and_sigmoid() {
        for degree in 0..=3 {
            let s = random_splats(333, degree, 40.0, 70 + degree as u64);
            let glb = write_plain_splat_glb(&s, &SplatGlbOptions::default()).unwrap();
            let v = json_of(&glb);
            assert_eq!(v["extensionsUsed"], json!([KHR_GAUSSIAN_SPLATTING]));
            assert_eq!(v.get("extensionsRequired"), None);
            let attrs = &v["meshes"][0]["primitives"][0]["attributes"];
            let n_attrs = attrs.as_object().unwrap().len();
            assert_eq!(n_attrs, 4 + ((degree + 1) * (degree + 1)) as usize);
            let back = read_splat_glb(&glb).unwrap();
            assert_eq!((back.len(), back.sh_degree), (333, degree));
            assert_eq!(back.means, s.means);
            assert_eq!(back.sh_coeffs, s.sh_coeffs);
            for (a, b) in s.log_scales.iter().zip(&back.log_scales) {
                assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
            for (a, b) in s.logit_opacities.iter().zip(&back.logit_opacities) {
                assert!((a - b).abs() < 1e-3, "{a} vs {b}");
            }
            for (a, b) in s.rotations.iter().zip(&back.rotations) {
                assert!((a - b).abs() < 1e-6, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn plain_glb_reader_honours_byte_stride_and_names_missing_attributes() {
        let s = random_splats(5, 0, 1.0, 3);
        let glb = write_plain_splat_glb(&s, &SplatGlbOptions::default()).unwrap();
        let (mut doc, bin) = parse_glb(&glb, Path::new("t")).unwrap();
        // Re-pack POSITION interleaved with 4 bytes of padding per element (stride 16).
        let mut bin = bin.to_vec();
        let start = bin.len();
        for p in s.means.chunks_exact(3) {
            p.iter().for_each(|v| bin.extend(v.to_le_bytes()));
            bin.extend([0u8; 4]);
        }
        doc["bufferViews"][0] =
            json!({ "buffer": 0, "byteOffset": start, "byteLength": 80, "byteStride": 16 });
        doc["buffers"][0]["byteLength"] = json!(bin.len());
        let glb2 = frame_glb(&serde_json::to_vec(&doc).unwrap(), &bin);
        assert_eq!(read_splat_glb(&glb2).unwrap().means, s.means);
        // Missing OPACITY: named.
        let attrs = doc["meshes"][0]["primitives"][0]["attributes"]
            .as_object_mut()
            .unwrap();
        attrs.remove("KHR_gaussian_splatting:OPACITY");
        let glb3 = frame_glb(&serde_json::to_vec(&doc).unwrap(), &bin);
        let e = read_splat_glb(&glb3).unwrap_err().to_string();
        assert!(e.contains("KHR_gaussian_splatting:OPACITY"), "{e}");
        // An empty scene cannot be written.
        assert!(
            write_plain_splat_glb(&GaussianSplats::default(), &SplatGlbOptions::default()).is_err()
        );
    }
}
