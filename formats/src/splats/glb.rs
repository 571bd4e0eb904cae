//! Gaussian splats as a GLB: `KHR_gaussian_splatting` with the SPZ payload of
//! `KHR_gaussian_splatting_compression_spz_2` — the only splat glTF CesiumJS renders.
//!
//! Sources: KhronosGroup/glTF `extensions/2.0/Khronos/KHR_gaussian_splatting` (Release
//! Candidate: `kernel`, `colorSpace`, attribute semantics) and
//! `KHR_gaussian_splatting_compression_spz_2` (draft: `{ "bufferView": i }` nested in the
//! `KHR_gaussian_splatting` object, accessors typed as after decoding, `count` = SPZ numPoints);
//! shared/research/tiles-formats.md §1.7, §2.1, §2.2, §7. glTF 2.0 §4.4 (GLB framing), §3.5.2
//! and §5.25 (node transforms).
//!
//! The JSON and the GLB framing are written by hand because the `gltf` crate rejects the
//! `KHR_gaussian_splatting:*` attribute names. A GLB Kiln writes holds one scene → one node (no
//! transform, or an f64 `translation` holding the origin of survey-sized splats) → one mesh →
//! one POINTS primitive (cesium#12682); the readers accept any node hierarchy and apply its
//! transforms ([`decode`], `node_transforms` below). The SPZ
//! writer's attributes are accessors *without* `bufferView`: `POSITION` (VEC3 float, with the
//! min/max glTF requires, taken from the quantised positions), `COLOR_0` (VEC4 normalised u8),
//! `KHR_gaussian_splatting:SCALE` (VEC3 float), `KHR_gaussian_splatting:ROTATION` (VEC4 float)
//! and `KHR_gaussian_splatting:SH_DEGREE_l_COEF_n` (VEC3 float) for 1 ≤ l ≤ degree. The SPZ bytes
//! (v3, gzip) live in the single BIN-chunk buffer. Both extensions are in `extensionsUsed` and
//! `extensionsRequired` (there is no uncompressed fallback).
//!
//! Frame: the writers store positions and quaternions as given; pass glTF Y-up coordinates. The
//! readers return the glTF scene frame (every node transform applied). The draft's
//! "pack with LUF" instruction is deliberately not applied: CesiumJS 1.145 unpacks SPZ without a
//! conversion and renders unconverted data correctly (research note §2.2, an open interop risk).

use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};

use super::placed::{PlacedRef, PlacedSplats};
use super::spz::{self, SpzOptions, SpzVersion};
use super::transform::raise_sh_degree;
use super::{GaussianSplats, MAX_SH_DEGREE, domain};
use crate::atomic_write::write_atomic;
use crate::{Error, Result};

mod accessor;

/// Short name of the format in messages.
pub const NAME: &str = "GLB";

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

/// Options of [`encode`] and [`write()`]. `Default`: sRGB display colour space, SPZ-compressed
/// (v3 at 12 fractional bits), the variant CesiumJS renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplatGlbOptions {
    /// `KHR_gaussian_splatting.colorSpace`; default sRGB display-referred.
    pub color_space: SplatColorSpace,
    /// `Some`: one `KHR_gaussian_splatting_compression_spz_2` primitive with these SPZ settings
    /// (v2 or v3, which CesiumJS 1.145 reads; v4 is rejected, since the extension pins the
    /// gzip-era files). `None`: plain float accessors (lossless apart from the exp/sigmoid
    /// round trip of scales and opacities).
    pub spz: Option<SpzOptions>,
}

impl Default for SplatGlbOptions {
    fn default() -> Self {
        Self {
            color_space: SplatColorSpace::default(),
            spz: Some(SpzOptions::default()),
        }
    }
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

/// Build a GLB holding splats as one `KHR_gaussian_splatting` POINTS primitive, in memory (tile
/// contents are built this way): SPZ-compressed when `options.spz` is set, else plain float
/// accessors. The layouts are in the module docs and on [`SplatGlbOptions::spz`]; the result is
/// deterministic for equal input. Positions and quaternions are stored as given (glTF is Y-up;
/// see [`super::transform::UpAxis`]).
///
/// Plain attributes: `POSITION` (VEC3, with min/max), `KHR_gaussian_splatting:ROTATION` (VEC4
/// **xyzw** unit quaternion), `:SCALE` (VEC3 **linear** = exp(log-scale)), `:OPACITY` (SCALAR
/// linear = sigmoid(logit)), `:SH_DEGREE_0_COEF_0` (VEC3 raw DC) and `:SH_DEGREE_l_COEF_m` (VEC3)
/// for 1 ≤ l ≤ degree, one tightly packed bufferView each; only `KHR_gaussian_splatting` is in
/// `extensionsUsed` (not required: a viewer without it can still draw the POINTS).
///
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means; 1 ≤ N ≤
///   10 000 000, SH degree 0..=3, glTF Y-up metres. A non-zero origin becomes the node's f64
///   `"translation"` and the means are stored relative to it, so a client places splat i at
///   `origin + mean` without f32 loss; origin 0 writes no translation. SPZ-compressed: means
///   within the fixed-point range (±2048 m at 12 fractional bits; use tile-local coordinates).
/// - `options`: colour space and SPZ settings ([`SplatGlbOptions::default`]: sRGB, SPZ v3).
///
/// # Errors
/// [`Error::InvalidInput`] for N = 0 (glTF accessors need count ≥ 1) and inconsistent shapes;
/// SPZ-compressed: for SPZ v4 in `options.spz` and everything [`super::spz::encode`] rejects
/// (NaN, positions beyond the fixed-point range); plain: for NaN/±Inf, a zero quaternion, or a
/// log-scale whose exp overflows f32 (splat index named).
pub fn encode<'a>(splats: impl Into<PlacedRef<'a>>, options: &SplatGlbOptions) -> Result<Vec<u8>> {
    let placed = splats.into();
    let translation = placed.nonzero_origin();
    match &options.spz {
        Some(spz) => spz_glb(placed.splats, spz, options.color_space, translation),
        None => plain_glb(placed.splats, options.color_space, translation),
    }
}

/// Write a splat GLB ([`encode`]) at `path`, atomically.
///
/// # Errors
/// As [`encode`]; [`Error::Io`] naming `path` when writing fails (the old file, if any, is
/// kept).
pub fn write<'a>(
    path: &Path,
    splats: impl Into<PlacedRef<'a>>,
    options: &SplatGlbOptions,
) -> Result<()> {
    let placed = splats.into();
    let bytes = encode(placed, options)?;
    // An SPZ payload clamps what its bytes cannot hold: say so, naming this file.
    if options.spz.is_some() {
        spz::warn_clamps(path, placed.splats);
    }
    write_atomic(path, &bytes)
}

/// The one node of a splat GLB: the mesh, translated when `translation` is given.
fn node_json(translation: Option<[f64; 3]>) -> Value {
    match translation {
        Some(t) => json!({ "mesh": 0, "translation": t }),
        None => json!({ "mesh": 0 }),
    }
}

/// The SPZ-compressed GLB of [`encode`].
fn spz_glb(
    splats: &GaussianSplats,
    spz_options: &SpzOptions,
    color_space: SplatColorSpace,
    translation: Option<[f64; 3]>,
) -> Result<Vec<u8>> {
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
    if spz_options.version == SpzVersion::V4 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "options.spz.version".into(),
            expected: "SPZ v2 or v3 (KHR_gaussian_splatting_compression_spz_2 pins gzip-era SPZ)"
                .into(),
            found: "v4".into(),
        });
    }
    let spz = spz::encode(splats, spz_options)?;

    // POSITION min/max of the values a decoder will see (quantised), per glTF §3.6.2.5.
    let step = (1u64 << spz_options.fractional_bits) as f64;
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
        "nodes": [node_json(translation)],
        "meshes": [{ "primitives": [{
            "mode": 0,
            "attributes": attributes,
            "extensions": { KHR_GAUSSIAN_SPLATTING: {
                "kernel": "ellipse",
                "colorSpace": color_space.as_str(),
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

/// The plain (float accessor) GLB of [`encode`].
fn plain_glb(
    splats: &GaussianSplats,
    color_space: SplatColorSpace,
    translation: Option<[f64; 3]>,
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
        "nodes": [node_json(translation)],
        "meshes": [{ "primitives": [{
            "mode": 0,
            "attributes": attributes,
            "extensions": { KHR_GAUSSIAN_SPLATTING: {
                "kernel": "ellipse",
                "colorSpace": color_space.as_str(),
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

/// Read a splat GLB file (SPZ-compressed or plain) in its glTF scene frame, node transforms
/// applied; see [`decode`] for what is returned. Errors name `path`.
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] when the file cannot be read; otherwise as [`decode`].
pub fn read(path: &Path) -> Result<PlacedSplats> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    domain::checked(path, &ATTRIBUTES, decode_from(&bytes, path))
}

/// Attribute names of `KHR_gaussian_splatting`, for [`domain`]'s messages.
const ATTRIBUTES: domain::AttributeNames = domain::AttributeNames {
    positions: "POSITION",
    scales: "KHR_gaussian_splatting:SCALE",
    rotations: "KHR_gaussian_splatting:ROTATION",
    opacities: "KHR_gaussian_splatting:OPACITY",
    sh: "KHR_gaussian_splatting:SH_DEGREE_*",
};

/// Read `count` × `width` f32 values of float accessor `index` from the BIN chunk.
/// Any component type the specification allows for `semantic` is decoded (normalized or
/// quantized integers too): see [`accessor::read_attribute`].
fn read_float_accessor(
    doc: &Value,
    bin: &[u8],
    semantic: &str,
    index: u64,
    width: usize,
    path: &Path,
) -> Result<Vec<f32>> {
    accessor::read_attribute(doc, bin, semantic, index, width, path)
}

/// Decode an uncompressed `KHR_gaussian_splatting` primitive (the plain layout of [`encode`]).
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
            Some(i) => read_float_accessor(doc, bin, semantic, i, width, path).map(Some),
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
    // Linear values meet the domain policy before they become logs: a negative scale or an
    // opacity of 1.2 has no log or logit to hide in afterwards.
    let check = domain::ValueCheck::new(path);
    Ok(GaussianSplats {
        means,
        log_scales: check.linear_scales_to_log(&ext("SCALE"), &scale)?,
        rotations,
        logit_opacities: check.linear_opacities_to_logit(&ext("OPACITY"), &opacity)?,
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

/// Decode the splats of a splat GLB in its glTF scene frame: every `KHR_gaussian_splatting`
/// primitive reached from the default scene, moved by the world transform of the node that
/// references its mesh, concatenated in scene order (depth first, children in file order).
///
/// Which splats: the scene named by `scene`, else scene 0, else (a file without scenes) every
/// root node. A mesh referenced by k nodes contributes k copies; a mesh no node reaches is not
/// read (glTF does not draw it). A primitive is SPZ-compressed (a
/// `KHR_gaussian_splatting_compression_spz_2` bufferView into the BIN chunk, as [`encode`]
/// writes with [`SplatGlbOptions::spz`] set) or plain ([`encode`]'s plain layout; FLOAT
/// accessors only; linear scales of 0 become log-scale ln 1e−30, opacities are clamped to
/// [1e−6, 1 − 1e−6]).
/// Primitives of different SH degrees are merged at the highest degree with the missing bands
/// zero, which leaves every splat's colour as it was.
///
/// Transforms: a node's local transform is its `matrix` (column-major 4×4, bottom row 0 0 0 1)
/// or T·R·S (`rotation` a unit quaternion **x, y, z, w**); its world transform M is its parent's
/// times its own, composed in f64. Each splat's mean becomes M·mean and its covariance
/// Σ = R·diag(s²)·Rᵀ becomes A·Σ·Aᵀ, A the 3×3 linear part of M, written back as a unit
/// quaternion (**w, x, y, z**, Kiln's order) and log-scales:
/// - A a rotation times a uniform scale s > 0 (to a relative 1e−5): exact; q → q_A ⊗ q,
///   log-scales + ln s, SH bands 1..=3 rotated by q_A ([`super::sh::ShRotation`]) so that the
///   colour seen along A·d equals the colour seen along d before;
/// - A mirroring (det < 0) but otherwise as above: the same with the rotation −A/s, SH degree 0
///   only (Σ does not see the sign);
/// - any other invertible A (non-uniform scale, shear): A·Σ·Aᵀ by its eigen-decomposition,
///   SH degree 0 only.
///
/// Opacities and the DC term are unchanged. A scene of one node without a transform (what Kiln
/// writes) returns the primitive exactly as decoded, bit for bit; a pure translation changes only
/// the means.
///
/// Returns N = the sum over placed primitives, positions in metres in the glTF scene frame
/// (tile-local when the GLB is a 3D Tiles tile: the tile's own `transform` lives in the
/// tileset, not the GLB), at an f64 origin: the node transforms are applied in f64 and
/// [`PlacedSplats::from_absolute`] picks the origin, so a GLB whose node `translation` holds
/// survey coordinates ([`encode`] of splats at a non-zero origin) decodes without f32 loss. A
/// scene f32 holds to 1 µm (every GLB Kiln writes without an origin, every tile) decodes at
/// origin `[0, 0, 0]` with the means each transform gives cast to f32, so callers that need
/// plain [`GaussianSplats`] take `.splats` (or [`PlacedSplats::into_absolute_f32`] for
/// absolute f32 means whatever the origin). Errors name the source as `<GLB bytes>`.
///
/// # Errors
/// [`Error::Corrupt`] for a wrong magic, version ≠ 2, bad chunk framing, invalid JSON, a
/// bufferView outside the BIN chunk, or a node reached twice (a cycle or two parents);
/// [`Error::Unsupported`] when no primitive carries `KHR_gaussian_splatting`, an uncompressed
/// attribute is not FLOAT, the buffer is external, or a node's world transform has a non-uniform
/// scale or mirrors while the splats have SH degree ≥ 1 (their view-dependent colour cannot
/// follow; the error names the node's `scale` or `matrix`); [`Error::Invalid`] when a required
/// attribute of an uncompressed primitive is missing or its count differs from POSITION's, when
/// the POSITION accessor count differs from the SPZ point count, for a `scene`, node or mesh
/// index out of range, a malformed `matrix`/`translation`/`rotation`/`scale` (wrong length, not
/// numbers, a zero quaternion, a projective matrix), a singular world transform (a zero scale),
/// a transformed value that is not finite, or a scene that reaches no splat mesh; SPZ errors as
/// in [`super::spz::decode`].
///
/// Source: glTF 2.0 §3.5.2 (Transformations) and §5.25 (node); Kerbl et al. 2023, "3D Gaussian
/// Splatting", §4 (Σ = R·S·Sᵀ·Rᵀ, so a linear map A sends Σ to A·Σ·Aᵀ).
pub fn decode(bytes: &[u8]) -> Result<PlacedSplats> {
    decode_from(bytes, Path::new("<GLB bytes>"))
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
/// As [`decode`] for the container; [`super::spz::spz_file_version`] for the payload.
pub fn splat_glb_spz_version(bytes: &[u8]) -> Result<Option<u32>> {
    let path = Path::new("<GLB bytes>");
    let (doc, bin) = parse_glb(bytes, path)?;
    match spz_payload(&doc, bin, path)? {
        Some((payload, _)) => Ok(Some(spz::spz_file_version(payload)?)),
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
    let first = all_primitives(doc)
        .find_map(|p| spz_buffer_view(p).map(|view| (view, p["attributes"]["POSITION"].as_u64())));
    let Some((view_index, position_accessor)) = first else {
        return Ok(None);
    };
    Ok(Some((
        spz_bytes(doc, bin, view_index, path)?,
        position_accessor,
    )))
}

/// Every primitive of every mesh, in file order.
fn all_primitives(doc: &Value) -> impl Iterator<Item = &Value> {
    doc["meshes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["primitives"].as_array().into_iter().flatten())
}

/// The `KHR_gaussian_splatting` primitives of mesh `mesh`, in file order.
fn splat_primitives(doc: &Value, mesh: usize) -> impl Iterator<Item = &Value> {
    doc["meshes"][mesh]["primitives"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| is_splat_primitive(p))
}

fn is_splat_primitive(prim: &Value) -> bool {
    prim["extensions"].get(KHR_GAUSSIAN_SPLATTING).is_some()
}

/// The bufferView of a primitive's `KHR_gaussian_splatting_compression_spz_2` payload, if any.
fn spz_buffer_view(prim: &Value) -> Option<u64> {
    prim["extensions"][KHR_GAUSSIAN_SPLATTING]["extensions"][KHR_GAUSSIAN_SPLATTING_SPZ_2]
        ["bufferView"]
        .as_u64()
}

/// The bytes of bufferView `view_index`, which must lie in the GLB BIN chunk.
fn spz_bytes<'a>(doc: &Value, bin: &'a [u8], view_index: u64, path: &Path) -> Result<&'a [u8]> {
    let view = &doc["bufferViews"][view_index as usize];
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
    offset
        .checked_add(length)
        .and_then(|end| bin.get(offset..end))
        .ok_or_else(|| {
            corrupt(
                path,
                field,
                format!(
                    "bytes {offset}..{} lie outside the {}-byte BIN chunk",
                    offset + length,
                    bin.len()
                ),
            )
        })
}

/// [`decode`] with errors naming `path`.
fn decode_from(bytes: &[u8], path: &Path) -> Result<PlacedSplats> {
    let (doc, bin) = parse_glb(bytes, path)?;
    if !all_primitives(&doc).any(is_splat_primitive) {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: format!("meshes[*].primitives[*].extensions.{KHR_GAUSSIAN_SPLATTING}"),
            found: "no primitive with KHR_gaussian_splatting (a mesh or point cloud GLB?)".into(),
            supported: format!(
                "{KHR_GAUSSIAN_SPLATTING} primitives, plain or with {KHR_GAUSSIAN_SPLATTING_SPZ_2}"
            ),
        });
    }
    // Positions in f64 beside the splats: node translations of a survey-scale scene exceed
    // f32's precision, so the origin is picked from these.
    let mut positions_m = Vec::new();
    let mut parts = Vec::new();
    for placement in node_transforms::splat_mesh_placements(&doc, path)? {
        for prim in splat_primitives(&doc, placement.mesh) {
            let mut splats = read_splat_primitive(&doc, bin, prim, path)?;
            positions_m.extend(placement.positions_m(&splats.means));
            placement.apply(&mut splats, &doc, path)?;
            parts.push(splats);
        }
    }
    Ok(PlacedSplats::from_absolute(
        &positions_m,
        concatenate(parts)?,
    ))
}

/// Decode one `KHR_gaussian_splatting` primitive, SPZ-compressed or plain, in its mesh's frame.
fn read_splat_primitive(
    doc: &Value,
    bin: &[u8],
    prim: &Value,
    path: &Path,
) -> Result<GaussianSplats> {
    let Some(view_index) = spz_buffer_view(prim) else {
        return read_plain_primitive(doc, bin, prim, path);
    };
    let splats = spz::decode_from(spz_bytes(doc, bin, view_index, path)?, path)?;
    if let Some(acc) = prim["attributes"]["POSITION"].as_u64() {
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

/// The splats of several placed primitives as one set. A part of lower SH degree gets zero
/// coefficients for the bands it lacks ([`raise_sh_degree`]): they add nothing to the colour,
/// so no splat changes.
fn concatenate(mut parts: Vec<GaussianSplats>) -> Result<GaussianSplats> {
    if parts.len() == 1 {
        return Ok(parts.pop().unwrap_or_default());
    }
    let sh_degree = parts.iter().map(|p| p.sh_degree).max().unwrap_or(0);
    for part in &mut parts {
        raise_sh_degree(part, sh_degree)?;
    }
    GaussianSplats::concat(&parts)
}

/// glTF node transforms applied to splats: which nodes of the default scene place which splat
/// meshes with what world transform, and how that transform moves a Gaussian.
///
/// Sources: glTF 2.0 §3.5.2 (a node's `matrix` is column-major; otherwise T·R·S with a unit
/// quaternion x, y, z, w; a node's world transform is its parent's times its own) and §5.25
/// (node properties); `KHR_gaussian_splatting` (Σ′ = M·Σ·Mᵀ with M the node's world 3×3, SH
/// rotated with the node; shared/research/tiles-formats.md §2.1); Kerbl et al. 2023 §4
/// (Σ = R·S·Sᵀ·Rᵀ, so M = A·R·S and A·Σ·Aᵀ = M·Mᵀ);
/// Demmel & Veselić 1992, "Jacobi's method is more accurate than QR" (one-sided Jacobi keeps the
/// small singular values of a column-scaled matrix to high relative accuracy, which keeps
/// needle-thin splats thin).
mod node_transforms {
    use std::path::Path;

    use serde_json::Value;

    use super::super::GaussianSplats;
    use super::super::transform::rotate_splats;
    use crate::rotation::{quaternion_to_rotation, rotation_to_quaternion};
    use crate::{Error, Result};

    type Mat3 = [[f64; 3]; 3];

    const IDENTITY3: Mat3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];

    /// Largest deviation of AᵀA from s²·I, relative to s², still treated as a rotation times a
    /// uniform scale s. Exporters write matrices and quaternions as f32 decimals (relative error
    /// ~6e−8 per entry) and a few nested nodes multiply that; 1e−5 sits well above that round-off
    /// and far below any scale difference a scene uses on purpose, and treating such a
    /// near-similarity as exact changes a covariance by less than 1e−5 relative.
    const SIMILARITY_TOLERANCE: f64 = 1e-5;

    /// One-sided Jacobi converges quadratically; a 3×3 needs about five sweeps, so hitting this
    /// bound means the input was not finite.
    const JACOBI_MAX_SWEEPS: usize = 30;

    /// An affine map p ↦ linear·p + translation (row-major, f64).
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Affine {
        linear: Mat3,
        translation: [f64; 3],
    }

    impl Affine {
        const IDENTITY: Self = Self {
            linear: IDENTITY3,
            translation: [0.0; 3],
        };

        /// `self ∘ child`: the world transform of a node whose parent's is `self`.
        fn then_child(&self, child: &Affine) -> Affine {
            Affine {
                linear: mat_mul(&self.linear, &child.linear),
                translation: self.apply(child.translation),
            }
        }

        fn apply(&self, p: [f64; 3]) -> [f64; 3] {
            let a = &self.linear;
            std::array::from_fn(|r| {
                a[r][0] * p[0] + a[r][1] * p[1] + a[r][2] * p[2] + self.translation[r]
            })
        }
    }

    /// Where a splat mesh is drawn: one node that references it, with that node's world
    /// transform.
    pub(super) struct Placement {
        /// Index into `meshes`; the mesh holds at least one splat primitive.
        pub(super) mesh: usize,
        /// Node indices from a scene root down to the node holding the mesh (for messages).
        chain: Vec<usize>,
        world: Affine,
    }

    /// Every placement of a splat mesh in the default scene, in scene order (depth first,
    /// children in file order).
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad indices or node transforms, or when no node reaches a splat
    /// mesh; [`Error::Corrupt`] when a node is reached twice.
    pub(super) fn splat_mesh_placements(doc: &Value, path: &Path) -> Result<Vec<Placement>> {
        let (scene, roots) = scene_roots(doc, path)?;
        let nodes = doc["nodes"].as_array().map_or(&[][..], Vec::as_slice);
        let mut reached = vec![false; nodes.len()];
        let mut placements = Vec::new();
        let mut stack: Vec<(usize, Vec<usize>, Affine)> = roots
            .iter()
            .rev()
            .map(|&root| (root, Vec::new(), Affine::IDENTITY))
            .collect();
        while let Some((node, mut chain, parent)) = stack.pop() {
            if std::mem::replace(&mut reached[node], true) {
                return Err(Error::Corrupt {
                    path: path.to_path_buf(),
                    location: format!("nodes[{node}]"),
                    what: "node reached twice from the scene (a cycle or a node with two parents)"
                        .into(),
                });
            }
            chain.push(node);
            let world = parent.then_child(&local_transform(&nodes[node], node, path)?);
            if let Some(mesh) = splat_mesh_of(doc, node, path)? {
                placements.push(Placement {
                    mesh,
                    chain: chain.clone(),
                    world,
                });
            }
            let children = node_indices(
                &nodes[node]["children"],
                &format!("nodes[{node}].children"),
                nodes.len(),
                path,
            )?;
            stack.extend(children.iter().rev().map(|&c| (c, chain.clone(), world)));
        }
        if placements.is_empty() {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: scene,
                expected: "a node that references a mesh with a KHR_gaussian_splatting primitive \
                    (glTF draws only meshes reached from the scene); add such a node to the scene"
                    .into(),
                found: "no node reaching a splat mesh".into(),
            });
        }
        Ok(placements)
    }

    /// The root nodes to walk, and their field name for messages: those of the scene named by
    /// `scene`, else of scene 0, else (a file without scenes) every node that is nobody's child.
    fn scene_roots(doc: &Value, path: &Path) -> Result<(String, Vec<usize>)> {
        let node_count = doc["nodes"].as_array().map_or(0, Vec::len);
        let scenes = doc["scenes"].as_array().map_or(&[][..], Vec::as_slice);
        let scene = match doc.get("scene") {
            None => (!scenes.is_empty()).then_some(0),
            Some(v) => Some(
                v.as_u64()
                    .map(|i| i as usize)
                    .filter(|&i| i < scenes.len())
                    .ok_or_else(|| Error::Invalid {
                        path: path.to_path_buf(),
                        field: "scene".into(),
                        expected: format!("the index of one of the {} scenes", scenes.len()),
                        found: excerpt(v),
                    })?,
            ),
        };
        if let Some(i) = scene {
            let field = format!("scenes[{i}].nodes");
            let roots = node_indices(&scenes[i]["nodes"], &field, node_count, path)?;
            return Ok((field, roots));
        }
        let mut is_child = vec![false; node_count];
        for (n, node) in doc["nodes"].as_array().into_iter().flatten().enumerate() {
            let field = format!("nodes[{n}].children");
            for c in node_indices(&node["children"], &field, node_count, path)? {
                is_child[c] = true;
            }
        }
        let roots = (0..node_count).filter(|&n| !is_child[n]).collect();
        Ok(("nodes (no scenes: every root node)".into(), roots))
    }

    /// A JSON array of node indices below `node_count`; absent means empty.
    fn node_indices(v: &Value, field: &str, node_count: usize, path: &Path) -> Result<Vec<usize>> {
        if v.is_null() {
            return Ok(Vec::new());
        }
        let indices = v.as_array().and_then(|a| {
            a.iter()
                .map(|i| i.as_u64().map(|i| i as usize).filter(|&i| i < node_count))
                .collect::<Option<Vec<_>>>()
        });
        indices.ok_or_else(|| Error::Invalid {
            path: path.to_path_buf(),
            field: field.into(),
            expected: format!("an array of node indices below {node_count}"),
            found: excerpt(v),
        })
    }

    /// `nodes[node].mesh` when that mesh holds a splat primitive.
    fn splat_mesh_of(doc: &Value, node: usize, path: &Path) -> Result<Option<usize>> {
        let v = &doc["nodes"][node]["mesh"];
        if v.is_null() {
            return Ok(None);
        }
        let mesh_count = doc["meshes"].as_array().map_or(0, Vec::len);
        let Some(mesh) = v.as_u64().map(|m| m as usize).filter(|&m| m < mesh_count) else {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("nodes[{node}].mesh"),
                expected: format!("the index of one of the {mesh_count} meshes"),
                found: excerpt(v),
            });
        };
        Ok(super::splat_primitives(doc, mesh).next().map(|_| mesh))
    }

    /// A node's local transform: its `matrix`, else T·R·S (each part defaulting to identity).
    fn local_transform(node: &Value, index: usize, path: &Path) -> Result<Affine> {
        let field = |property: &str| format!("nodes[{index}].{property}");
        if let Some(v) = node.get("matrix") {
            let m: [f64; 16] = numbers(v, &field("matrix"), path)?;
            if [m[3], m[7], m[11], m[15]] != [0.0, 0.0, 0.0, 1.0] {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    field: field("matrix"),
                    expected: "an affine column-major matrix: elements 3, 7, 11, 15 = 0, 0, 0, 1 \
                        (glTF requires a matrix that decomposes into T·R·S)"
                        .into(),
                    found: excerpt(v),
                });
            }
            return Ok(Affine {
                linear: std::array::from_fn(|r| std::array::from_fn(|c| m[c * 4 + r])),
                translation: [m[12], m[13], m[14]],
            });
        }
        let optional = |property: &str| node.get(property).map(|v| (v, field(property)));
        let translation = match optional("translation") {
            Some((v, f)) => numbers(v, &f, path)?,
            None => [0.0; 3],
        };
        let [x, y, z, w] = match optional("rotation") {
            Some((v, f)) => numbers(v, &f, path)?,
            None => [0.0, 0.0, 0.0, 1.0],
        };
        let scale: [f64; 3] = match optional("scale") {
            Some((v, f)) => numbers(v, &f, path)?,
            None => [1.0; 3],
        };
        // glTF quaternions are x, y, z, w; Kiln's are w, x, y, z.
        let rotation = quaternion_to_rotation([w, x, y, z]).ok_or_else(|| Error::Invalid {
            path: path.to_path_buf(),
            field: field("rotation"),
            expected: "a unit quaternion (x, y, z, w)".into(),
            found: format!("{:?}", [x, y, z, w]),
        })?;
        Ok(Affine {
            linear: std::array::from_fn(|r| std::array::from_fn(|c| rotation[r][c] * scale[c])),
            translation,
        })
    }

    /// A JSON array of exactly `L` finite numbers.
    fn numbers<const L: usize>(v: &Value, field: &str, path: &Path) -> Result<[f64; L]> {
        let parsed = v.as_array().filter(|a| a.len() == L).and_then(|a| {
            a.iter()
                .map(|x| x.as_f64().filter(|f| f.is_finite()))
                .collect::<Option<Vec<f64>>>()
        });
        parsed
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| Error::Invalid {
                path: path.to_path_buf(),
                field: field.into(),
                expected: format!("an array of {L} finite numbers"),
                found: excerpt(v),
            })
    }

    /// A JSON value for a message, cut to a readable length.
    fn excerpt(v: &Value) -> String {
        let text = v.to_string();
        match text.char_indices().nth(80) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    }

    /// What the 3×3 linear part A of a world transform does to a Gaussian.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum LinearPart {
        /// Exactly the identity: only the means move.
        Identity,
        /// A = ±s·R with R a proper rotation and s > 0; `mirrored` when the sign is −.
        Similarity {
            rotation: Mat3,
            ln_scale: f64,
            mirrored: bool,
        },
        /// Invertible, but not a similarity (non-uniform scale or shear).
        General,
        /// det A = 0 (a zero scale) or not finite.
        Singular,
    }

    fn classify(a: &Mat3) -> LinearPart {
        if *a == IDENTITY3 {
            return LinearPart::Identity;
        }
        let det = det3(a);
        if det == 0.0 || !det.is_finite() {
            return LinearPart::Singular;
        }
        let gram: Mat3 = std::array::from_fn(|i| {
            std::array::from_fn(|j| (0..3).map(|k| a[k][i] * a[k][j]).sum())
        });
        let s2 = (gram[0][0] + gram[1][1] + gram[2][2]) / 3.0;
        let uniform = (0..3).all(|i| {
            (0..3).all(|j| {
                let target = if i == j { s2 } else { 0.0 };
                (gram[i][j] - target).abs() <= SIMILARITY_TOLERANCE * s2
            })
        });
        if !uniform {
            return LinearPart::General;
        }
        let s = s2.sqrt();
        let sign = det.signum();
        // Re-derive the rotation from its quaternion so that the splat quaternions and the SH
        // rotation use the same exactly orthonormal matrix.
        let q = rotation_to_quaternion(std::array::from_fn(|i| {
            std::array::from_fn(|j| a[i][j] * sign / s)
        }));
        LinearPart::Similarity {
            rotation: quaternion_to_rotation(q).unwrap_or(IDENTITY3),
            ln_scale: s.ln(),
            mirrored: det < 0.0,
        }
    }

    impl Placement {
        /// Move `splats`, read in the mesh's frame, into the scene frame by this placement's
        /// world transform (the rules are in [`super::decode`]'s docs).
        ///
        /// # Errors
        /// [`Error::Invalid`] for a singular transform, a zero splat quaternion under a general
        /// transform, or a non-finite result; [`Error::Unsupported`] for a non-uniform or
        /// mirroring transform on SH degree ≥ 1.
        pub(super) fn apply(
            &self,
            splats: &mut GaussianSplats,
            doc: &Value,
            path: &Path,
        ) -> Result<()> {
            // Kiln's own files: no work, so the splats stay bit-identical to the decoded ones.
            if self.world == Affine::IDENTITY {
                return Ok(());
            }
            // Computed up front: `rotate_splats` below also rotates the means it is given.
            let means: Vec<f32> = self.positions_m(&splats.means).map(|m| m as f32).collect();
            let view_dependent = splats.sh_degree >= 1;
            match classify(&self.world.linear) {
                LinearPart::Identity => {}
                LinearPart::Singular => return Err(self.singular(doc, path)),
                LinearPart::Similarity { mirrored: true, .. } if view_dependent => {
                    return Err(self.unsupported(doc, path, splats.sh_degree, Culprit::Mirroring));
                }
                LinearPart::General if view_dependent => {
                    return Err(self.unsupported(doc, path, splats.sh_degree, Culprit::NonUniform));
                }
                LinearPart::Similarity {
                    rotation, ln_scale, ..
                } => {
                    if rotation != IDENTITY3 {
                        rotate_splats(splats, rotation)?;
                    }
                    for l in &mut splats.log_scales {
                        *l = (f64::from(*l) + ln_scale) as f32;
                    }
                }
                LinearPart::General => self.reshape_covariances(splats, path)?,
            }
            splats.means = means;
            self.check_finite(splats, path)
        }

        /// `means` (`[N, 3]`, the mesh's frame) moved into the scene frame, in f64 metres.
        pub(super) fn positions_m(&self, means: &[f32]) -> impl Iterator<Item = f64> {
            means
                .chunks_exact(3)
                .flat_map(|p| self.world.apply([p[0], p[1], p[2]].map(f64::from)))
        }

        /// Non-similar A at SH degree 0: each covariance becomes A·Σ·Aᵀ, re-expressed as a
        /// rotation and three log-scales.
        fn reshape_covariances(&self, splats: &mut GaussianSplats, path: &Path) -> Result<()> {
            let gaussians = splats
                .rotations
                .chunks_exact_mut(4)
                .zip(splats.log_scales.chunks_exact_mut(3));
            for (i, (q, l)) in gaussians.enumerate() {
                let q_in: [f64; 4] = std::array::from_fn(|j| f64::from(q[j]));
                let l_in: [f64; 3] = std::array::from_fn(|j| f64::from(l[j]));
                let Some((q_out, l_out)) = transformed_covariance(&self.world.linear, q_in, l_in)
                else {
                    return Err(Error::Invalid {
                        path: path.to_path_buf(),
                        field: format!(
                            "{}:ROTATION (splat {i} of the mesh of {})",
                            super::KHR_GAUSSIAN_SPLATTING,
                            self.node_name()
                        ),
                        expected: "a non-zero quaternion (a zero one has no axes to transform)"
                            .into(),
                        found: format!("{q_in:?}"),
                    });
                };
                q.iter_mut().zip(q_out).for_each(|(d, s)| *d = s as f32);
                l.iter_mut().zip(l_out).for_each(|(d, s)| *d = s as f32);
            }
            Ok(())
        }

        /// Huge scales or translations can overflow f32; say which node and value.
        fn check_finite(&self, splats: &GaussianSplats, path: &Path) -> Result<()> {
            let fields: [(&str, &[f32], usize); 4] = [
                ("means", &splats.means, 3),
                ("log_scales", &splats.log_scales, 3),
                ("rotations", &splats.rotations, 4),
                (
                    "sh_coeffs",
                    &splats.sh_coeffs,
                    splats.sh_coeffs_per_channel() * 3,
                ),
            ];
            for (name, values, per_splat) in fields {
                if let Some(at) = values.iter().position(|v| !v.is_finite()) {
                    return Err(Error::Invalid {
                        path: path.to_path_buf(),
                        field: self.node_name(),
                        expected: "a world transform that keeps every splat finite in f32; \
                            check the scales and translations of this node and its parents"
                            .into(),
                        found: format!(
                            "{name}[splat {}] = {} after the transform of {}",
                            at / per_splat,
                            values[at],
                            self.chain_text()
                        ),
                    });
                }
            }
            Ok(())
        }

        fn singular(&self, doc: &Value, path: &Path) -> Error {
            let (field, value) = self.blame(doc, |part| matches!(part, LinearPart::Singular));
            Error::Invalid {
                path: path.to_path_buf(),
                field,
                expected:
                    "an invertible world transform (a non-zero, finite scale on every axis); \
                    remove the zero scale or the node"
                        .into(),
                found: format!(
                    "{value}, which makes the world transform of {} singular",
                    self.chain_text()
                ),
            }
        }

        fn unsupported(&self, doc: &Value, path: &Path, sh_degree: u32, culprit: Culprit) -> Error {
            let (field, value) = self.blame(doc, |part| culprit.is_in(part));
            Error::Unsupported {
                path: path.to_path_buf(),
                field,
                found: format!(
                    "{value}: {} in the world transform of {} on splats of SH degree \
                     {sh_degree} (their view-dependent colour would be distorted)",
                    culprit.description(),
                    self.chain_text()
                ),
                supported: format!(
                    "rotations, translations and uniform positive scales at SH degree ≥ 1 (any \
                     invertible transform at SH degree 0); {}, or re-export the splats at SH \
                     degree 0",
                    culprit.fix()
                ),
            }
        }

        /// The node property to blame for a world-transform problem, and its JSON value: the
        /// first node of the chain whose own linear part has the problem (its `matrix`, else its
        /// `scale`; a TRS rotation alone is never singular, mirroring or non-uniform), else the
        /// node holding the mesh.
        fn blame(&self, doc: &Value, has: impl Fn(&LinearPart) -> bool) -> (String, String) {
            let node_has = |&n: &usize| {
                local_transform(&doc["nodes"][n], n, Path::new(""))
                    .is_ok_and(|t| has(&classify(&t.linear)))
            };
            let node = self.chain.iter().copied().find(node_has);
            let node = node.unwrap_or_else(|| *self.chain.last().unwrap_or(&0));
            let json = &doc["nodes"][node];
            let property = if json.get("matrix").is_some() {
                "matrix"
            } else {
                "scale"
            };
            (
                format!("nodes[{node}].{property}"),
                excerpt(&json[property]),
            )
        }

        /// `nodes[i]`, the node holding the mesh.
        fn node_name(&self) -> String {
            format!("nodes[{}]", self.chain.last().unwrap_or(&0))
        }

        /// `nodes 0 → 3 → 4`, the path from the scene root.
        fn chain_text(&self) -> String {
            let names: Vec<String> = self.chain.iter().map(usize::to_string).collect();
            format!("nodes {}", names.join(" → "))
        }
    }

    /// Which representability rule a transform broke at SH degree ≥ 1.
    #[derive(Debug, Clone, Copy)]
    enum Culprit {
        Mirroring,
        NonUniform,
    }

    impl Culprit {
        fn is_in(self, part: &LinearPart) -> bool {
            match self {
                Self::Mirroring => matches!(part, LinearPart::Similarity { mirrored: true, .. }),
                Self::NonUniform => matches!(part, LinearPart::General),
            }
        }

        fn description(self) -> &'static str {
            match self {
                Self::Mirroring => "a mirroring transform (negative determinant)",
                Self::NonUniform => "a non-uniform scale or shear",
            }
        }

        fn fix(self) -> &'static str {
            match self {
                Self::Mirroring => "remove the negative scale (mirroring) from the node",
                Self::NonUniform => "make the node's scale uniform",
            }
        }
    }

    /// The unit quaternion (wxyz) and log-scales of A·Σ·Aᵀ, where
    /// Σ = R(q)·diag(e^{2·log_scales})·R(q)ᵀ; `None` for a zero quaternion.
    ///
    /// A·Σ·Aᵀ = M·Mᵀ with M = A·R·diag(s), so M's left singular vectors are the new axes and
    /// its singular values the new scales. M is factored as e^{l_max}·A·R·diag(e^{l − l_max}) so
    /// that no column under- or overflows, and its SVD is taken by one-sided Jacobi, which keeps
    /// tiny scales accurate where an eigen-solver on M·Mᵀ would lose them below round-off.
    fn transformed_covariance(
        a: &Mat3,
        q: [f64; 4],
        log_scales: [f64; 3],
    ) -> Option<([f64; 4], [f64; 3])> {
        let r = quaternion_to_rotation(q)?;
        let l_max = log_scales.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let ar = mat_mul(a, &r);
        let columns: [[f64; 3]; 3] = std::array::from_fn(|k| {
            let w = (log_scales[k] - l_max).exp();
            std::array::from_fn(|row| ar[row][k] * w)
        });
        let (axes, singular_values) = left_singular_vectors(columns);
        let log_scales_out = singular_values.map(|s| s.ln() + l_max);
        Some((rotation_to_quaternion(axes), log_scales_out))
    }

    /// U (row-major, a proper rotation) and σ of the SVD M = U·diag(σ)·Vᵀ of the 3×3 matrix
    /// with the given columns, by one-sided (Hestenes) Jacobi: rotate pairs of columns until all
    /// are orthogonal; then σₖ = ‖column k‖ and uₖ = column k / σₖ. V is not needed
    /// (M·Mᵀ = U·diag(σ²)·Uᵀ), and flipping one uₖ to make det U = +1 leaves M·Mᵀ unchanged.
    fn left_singular_vectors(mut columns: [[f64; 3]; 3]) -> (Mat3, [f64; 3]) {
        let dot = |a: &[f64; 3], b: &[f64; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
        for _ in 0..JACOBI_MAX_SWEEPS {
            let mut rotated = false;
            for (i, j) in [(0, 1), (0, 2), (1, 2)] {
                let alpha = dot(&columns[i], &columns[i]);
                let beta = dot(&columns[j], &columns[j]);
                let gamma = dot(&columns[i], &columns[j]);
                if gamma.abs() <= f64::EPSILON * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                // The rotation angle that zeroes the pair's inner product (smaller root).
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                let (ci, cj) = (columns[i], columns[j]);
                columns[i] = std::array::from_fn(|r| c * ci[r] - s * cj[r]);
                columns[j] = std::array::from_fn(|r| s * ci[r] + c * cj[r]);
            }
            if !rotated {
                break;
            }
        }
        let sigma = columns.map(|col| dot(&col, &col).sqrt());
        let mut u: Mat3 =
            std::array::from_fn(|r| std::array::from_fn(|k| columns[k][r] / sigma[k]));
        if det3(&u) < 0.0 {
            u.iter_mut().for_each(|row| row[0] = -row[0]);
        }
        (u, sigma)
    }

    fn mat_mul(a: &Mat3, b: &Mat3) -> Mat3 {
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
    }

    fn det3(a: &Mat3) -> f64 {
        a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
            - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
            + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
    }
}

#[cfg(test)]
// Matrix and per-axis checks index several arrays at once, as the formulas do.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::splats::test_data::random_splats;

    /// Plain (float accessor) GLB options.
    fn plain() -> SplatGlbOptions {
        SplatGlbOptions {
            spz: None,
            ..SplatGlbOptions::default()
        }
    }

    fn json_of(glb: &[u8]) -> Value {
        parse_glb(glb, Path::new("t")).unwrap().0
    }

    #[test]
    fn glb_round_trip_decodes_the_spz_payload() {
        for degree in [0, 3] {
            let s = random_splats(500, degree, 20.0, 9);
            let glb = encode(&s, &SplatGlbOptions::default()).unwrap();
            let back = decode(&glb).unwrap().splats;
            let direct = spz::decode(&spz::encode(&s, &SpzOptions::default()).unwrap()).unwrap();
            assert_eq!(back, direct);
        }
    }

    #[test]
    fn glb_framing_is_aligned_and_lengths_match() {
        let glb = encode(&random_splats(7, 1, 1.0, 2), &SplatGlbOptions::default()).unwrap();
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
        let v = json_of(&encode(&s, &SplatGlbOptions::default()).unwrap());
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
        let glb = encode(&s, &SplatGlbOptions::default()).unwrap();
        let v = json_of(&glb);
        let back = decode(&glb).unwrap().splats;
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
            encode(&empty, &SplatGlbOptions::default()),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(decode(b""), Err(Error::Corrupt { .. })));
        assert!(matches!(
            decode(b"glTF\x01\0\0\0"),
            Err(Error::Corrupt { .. })
        ));
        let glb = encode(&random_splats(7, 1, 1.0, 2), &SplatGlbOptions::default()).unwrap();
        assert!(matches!(
            decode(&glb[..glb.len() - 8]),
            Err(Error::Corrupt { .. })
        ));
        // A glTF without any splat primitive is unsupported, not corrupt.
        let plain = frame_glb(
            br#"{"asset":{"version":"2.0"},"meshes":[{"primitives":[{"attributes":{}}]}]}"#,
            &[],
        );
        assert!(matches!(decode(&plain), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn plain_glb_round_trips_exactly_apart_from_exp_and_sigmoid() {
        for degree in 0..=3 {
            let s = random_splats(333, degree, 40.0, 70 + degree as u64);
            let glb = encode(&s, &plain()).unwrap();
            let v = json_of(&glb);
            assert_eq!(v["extensionsUsed"], json!([KHR_GAUSSIAN_SPLATTING]));
            assert_eq!(v.get("extensionsRequired"), None);
            let attrs = &v["meshes"][0]["primitives"][0]["attributes"];
            let n_attrs = attrs.as_object().unwrap().len();
            assert_eq!(n_attrs, 4 + ((degree + 1) * (degree + 1)) as usize);
            let back = decode(&glb).unwrap().splats;
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
        let glb = encode(&s, &plain()).unwrap();
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
        assert_eq!(decode(&glb2).unwrap().splats.means, s.means);
        // Missing OPACITY: named.
        let attrs = doc["meshes"][0]["primitives"][0]["attributes"]
            .as_object_mut()
            .unwrap();
        attrs.remove("KHR_gaussian_splatting:OPACITY");
        let glb3 = frame_glb(&serde_json::to_vec(&doc).unwrap(), &bin);
        let e = decode(&glb3).unwrap_err().to_string();
        assert!(e.contains("KHR_gaussian_splatting:OPACITY"), "{e}");
        // An empty scene cannot be written.
        assert!(encode(&GaussianSplats::default(), &plain()).is_err());
    }

    // Node transforms (glTF 2.0 §3.5.2). Each GLB below is a plain (lossless) GLB whose JSON
    // nodes were replaced; expected values are worked out by hand in the comments.

    const H: f64 = std::f64::consts::FRAC_1_SQRT_2;
    /// 90° about +Y as a glTF (x, y, z, w) quaternion: (x, y, z) ↦ (z, y, −x).
    const QUARTER_TURN_Y_XYZW: [f64; 4] = [0.0, H, 0.0, H];

    /// Two hand-picked splats of SH degree `degree`: splat 0 at (1, 2, 3) unrotated with scales
    /// 1, 2, 3; splat 1 at (−0.5, 0.25, 4) turned 90° about +X (wxyz (√½, √½, 0, 0)) with
    /// log-scales −1, −2, −0.5; SH coefficients all distinct.
    fn hand_splats(degree: u32) -> GaussianSplats {
        let k = super::super::sh::sh_coeff_count(degree);
        let h = H as f32;
        GaussianSplats {
            means: vec![1.0, 2.0, 3.0, -0.5, 0.25, 4.0],
            log_scales: vec![0.0, 2f32.ln(), 3f32.ln(), -1.0, -2.0, -0.5],
            rotations: vec![1.0, 0.0, 0.0, 0.0, h, h, 0.0, 0.0],
            logit_opacities: vec![0.5, -1.0],
            sh_coeffs: (0..2 * k * 3).map(|j| 0.05 * j as f32 - 0.4).collect(),
            sh_degree: degree,
        }
    }

    /// `glb` with its JSON edited by `edit` (the BIN chunk kept).
    fn edit_json(glb: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
        let (mut doc, bin) = parse_glb(glb, Path::new("t")).unwrap();
        edit(&mut doc);
        frame_glb(&serde_json::to_vec(&doc).unwrap(), bin)
    }

    /// A plain GLB of `splats` whose `nodes` and scene-0 roots are replaced.
    fn glb_with_nodes(splats: &GaussianSplats, nodes: Value, roots: Value) -> Vec<u8> {
        let glb = encode(splats, &plain()).unwrap();
        edit_json(&glb, |doc| {
            doc["nodes"] = nodes;
            doc["scenes"][0]["nodes"] = roots;
        })
    }

    fn read_with_nodes(splats: &GaussianSplats, nodes: Value, roots: Value) -> GaussianSplats {
        decode(&glb_with_nodes(splats, nodes, roots))
            .unwrap()
            .splats
    }

    /// The splats as the file stores them (read under one node without a transform).
    fn stored(splats: &GaussianSplats) -> GaussianSplats {
        read_with_nodes(splats, json!([{ "mesh": 0 }]), json!([0]))
    }

    fn assert_close(found: &[f32], expected: &[f64], tolerance: f64, what: &str) {
        assert_eq!(found.len(), expected.len(), "{what}: length");
        for (i, (f, e)) in found.iter().zip(expected).enumerate() {
            assert!(
                (f64::from(*f) - e).abs() <= tolerance,
                "{what}[{i}]: found {f}, expected {e}"
            );
        }
    }

    /// Σ = R·diag(s²)·Rᵀ of splat `i`.
    fn covariance(s: &GaussianSplats, i: usize) -> [[f64; 3]; 3] {
        let q = std::array::from_fn(|j| f64::from(s.rotations[i * 4 + j]));
        let r = crate::rotation::quaternion_to_rotation(q).unwrap();
        let s2: [f64; 3] =
            std::array::from_fn(|k| (2.0 * f64::from(s.log_scales[i * 3 + k])).exp());
        std::array::from_fn(|a| {
            std::array::from_fn(|b| (0..3).map(|k| r[a][k] * s2[k] * r[b][k]).sum())
        })
    }

    fn assert_covariance(found: [[f64; 3]; 3], expected: [[f64; 3]; 3], what: &str) {
        let scale = expected.iter().flatten().fold(0f64, |m, v| m.max(v.abs()));
        for a in 0..3 {
            for b in 0..3 {
                let err = (found[a][b] - expected[a][b]).abs();
                assert!(err <= 1e-5 * scale, "{what}: {found:?} vs {expected:?}");
            }
        }
    }

    #[test]
    fn identity_node_transforms_leave_splats_bit_identical() {
        let glb = encode(&random_splats(40, 2, 5.0, 21), &SplatGlbOptions::default()).unwrap();
        let plain = decode(&glb).unwrap().splats;
        let identity_matrix = json!([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
        for nodes in [
            json!([{ "mesh": 0, "translation": [0, 0, 0], "rotation": [0, 0, 0, 1],
                     "scale": [1, 1, 1] }]),
            json!([{ "mesh": 0, "matrix": identity_matrix }]),
            json!([{ "children": [1] }, { "mesh": 0 }]),
        ] {
            let edited = edit_json(&glb, |doc| doc["nodes"] = nodes.clone());
            assert_eq!(decode(&edited).unwrap().splats, plain, "{nodes}");
        }
    }

    #[test]
    fn node_translation_shifts_means_exactly_and_nothing_else() {
        let s = hand_splats(1);
        let base = stored(&s);
        let moved = read_with_nodes(
            &s,
            json!([{ "mesh": 0, "translation": [10.0, -2.5, 0.125] }]),
            json!([0]),
        );
        // (1, 2, 3) + t and (−0.5, 0.25, 4) + t.
        assert_eq!(moved.means, [11.0, -0.5, 3.125, 9.5, -2.25, 4.125]);
        assert_eq!(moved.log_scales, base.log_scales);
        assert_eq!(moved.rotations, base.rotations);
        assert_eq!(moved.sh_coeffs, base.sh_coeffs);
        assert_eq!(moved.logit_opacities, base.logit_opacities);
    }

    #[test]
    fn node_rotation_turns_means_quaternions_and_sh_together() {
        let s = hand_splats(1);
        let base = stored(&s);
        let moved = read_with_nodes(
            &s,
            json!([{ "mesh": 0, "rotation": QUARTER_TURN_Y_XYZW }]),
            json!([0]),
        );
        // (x, y, z) ↦ (z, y, −x).
        assert_close(
            &moved.means,
            &[3.0, 2.0, -1.0, 4.0, 0.25, 0.5],
            1e-6,
            "means",
        );
        // q_Y = (√½, 0, √½, 0); q_Y ⊗ 1 = q_Y; q_Y ⊗ (√½, √½, 0, 0) = (½, ½, ½, −½).
        let expected_q = [H, 0.0, H, 0.0, 0.5, 0.5, 0.5, -0.5];
        assert_close(&moved.rotations, &expected_q, 1e-6, "rotations");
        assert_eq!(moved.log_scales, base.log_scales);
        assert_eq!(moved.logit_opacities, base.logit_opacities);
        // Band 1 is C1·(−c₋₁·y + c₀·z − c₁·x); turning the gradient by R gives
        // (c₋₁, c₀, c₁) ↦ (c₋₁, c₁, −c₀). The DC term stays.
        for i in 0..2 {
            for ch in 0..3 {
                let c = |k: usize| base.sh_coeffs[(i * 4 + k) * 3 + ch];
                let at = |k: usize| (i * 4 + k) * 3 + ch;
                assert_eq!(moved.sh_coeffs[at(0)], c(0));
                let found = [1, 2, 3].map(|k| moved.sh_coeffs[at(k)]);
                let expected = [c(1), c(3), -c(2)].map(f64::from);
                assert_close(&found, &expected, 1e-5, "band 1");
            }
        }
        // The colour seen along d before is the colour seen along R·d after.
        for d in [[0.6, 0.0, 0.8], [0.0, -1.0, 0.0], [H, H, 0.0]] {
            let turned = [d[2], d[1], -d[0]];
            for i in 0..2 {
                let coeffs = |sh: &[f32]| sh[i * 12..i * 12 + 12].to_vec();
                let before = super::super::sh::eval_sh_colour(&coeffs(&base.sh_coeffs), d);
                let after = super::super::sh::eval_sh_colour(&coeffs(&moved.sh_coeffs), turned);
                assert_close(&after.map(|v| v as f32), &before, 1e-5, "colour");
            }
        }
    }

    #[test]
    fn uniform_node_scale_doubles_means_and_adds_ln2_to_log_scales() {
        let s = hand_splats(2);
        let base = stored(&s);
        let moved = read_with_nodes(&s, json!([{ "mesh": 0, "scale": [2, 2, 2] }]), json!([0]));
        assert_eq!(moved.means, [2.0, 4.0, 6.0, -1.0, 0.5, 8.0]);
        let expected: Vec<f64> = base
            .log_scales
            .iter()
            .map(|&l| f64::from(l) + std::f64::consts::LN_2)
            .collect();
        assert_close(&moved.log_scales, &expected, 1e-6, "log_scales");
        // No rotation: quaternions and every SH band are untouched.
        assert_eq!(moved.rotations, base.rotations);
        assert_eq!(moved.sh_coeffs, base.sh_coeffs);
    }

    #[test]
    fn non_uniform_node_scale_reshapes_degree_0_covariances() {
        // Pure scale (2, 3, 4), worked by hand. Splat 0: axes stay, scales 1·2, 2·3, 3·4.
        let s = hand_splats(0);
        let moved = read_with_nodes(&s, json!([{ "mesh": 0, "scale": [2, 3, 4] }]), json!([0]));
        assert_close(
            &moved.means,
            &[2.0, 6.0, 12.0, -1.0, 0.75, 16.0],
            1e-6,
            "means",
        );
        let ln = |x: f64| x.ln();
        assert_close(
            &moved.log_scales[..3],
            &[ln(2.0), ln(6.0), ln(12.0)],
            1e-6,
            "splat 0",
        );
        assert!((f64::from(moved.rotations[0].abs()) - 1.0).abs() < 1e-6);
        // Splat 1: Σ = diag(e⁻², e⁻¹, e⁻⁴) (its local y, z lie along world z, −y), so
        // A·Σ·Aᵀ = diag(4e⁻², 9e⁻¹, 16e⁻⁴).
        let e = |x: f64| x.exp();
        let expected = [
            [4.0 * e(-2.0), 0.0, 0.0],
            [0.0, 9.0 * e(-1.0), 0.0],
            [0.0, 0.0, 16.0 * e(-4.0)],
        ];
        assert_covariance(covariance(&moved, 1), expected, "splat 1");

        // Rotation 30° about Z times scale (2, 0.5, 3) on random splats: A·Σ·Aᵀ per splat.
        let s = random_splats(50, 0, 5.0, 17);
        let base = stored(&s);
        let (sin, cos) = (15f64.to_radians().sin(), 15f64.to_radians().cos());
        let node = json!([{ "mesh": 0, "rotation": [0.0, 0.0, sin, cos], "scale": [2, 0.5, 3] }]);
        let moved = read_with_nodes(&s, node, json!([0]));
        let (s30, c30) = (0.5, 3f64.sqrt() / 2.0);
        let scale = [2.0, 0.5, 3.0];
        let r = [[c30, -s30, 0.0], [s30, c30, 0.0], [0.0, 0.0, 1.0]];
        let a: [[f64; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| r[i][j] * scale[j]));
        for i in 0..s.len() {
            let sigma = covariance(&base, i);
            let expected = std::array::from_fn(|p| {
                std::array::from_fn(|q| {
                    let mut v = 0.0;
                    for k in 0..3 {
                        for l in 0..3 {
                            v += a[p][k] * sigma[k][l] * a[q][l];
                        }
                    }
                    v
                })
            });
            assert_covariance(covariance(&moved, i), expected, &format!("splat {i}"));
            let m: [f64; 3] = std::array::from_fn(|k| f64::from(base.means[i * 3 + k]));
            let am: Vec<f64> = (0..3)
                .map(|p| (0..3).map(|k| a[p][k] * m[k]).sum())
                .collect();
            assert_close(&moved.means[i * 3..i * 3 + 3], &am, 1e-5, "means");
        }
        assert_eq!(moved.logit_opacities, base.logit_opacities);
    }

    #[test]
    fn node_matrix_reads_like_the_same_trs() {
        let s = hand_splats(1);
        let trs = read_with_nodes(
            &s,
            json!([{ "mesh": 0, "translation": [1, 2, 3], "rotation": [0.0, 0.0, H, H],
                     "scale": [2, 2, 2] }]),
            json!([0]),
        );
        // T·R_z(90°)·2, column-major.
        let matrix = json!([0, 2, 0, 0, -2, 0, 0, 0, 0, 0, 2, 0, 1, 2, 3, 1]);
        let m = read_with_nodes(&s, json!([{ "mesh": 0, "matrix": matrix }]), json!([0]));
        // (x, y, z) ↦ 2·(−y, x, z) + (1, 2, 3).
        assert_close(&m.means, &[-3.0, 4.0, 9.0, 0.5, 1.0, 11.0], 1e-6, "means");
        let as_f64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        assert_close(&m.means, &as_f64(&trs.means), 1e-6, "means");
        assert_close(&m.rotations, &as_f64(&trs.rotations), 1e-6, "rotations");
        assert_close(&m.log_scales, &as_f64(&trs.log_scales), 1e-6, "log_scales");
        assert_close(&m.sh_coeffs, &as_f64(&trs.sh_coeffs), 1e-6, "sh_coeffs");
    }

    #[test]
    fn parent_translation_applies_after_child_rotation() {
        let s = hand_splats(1);
        let nodes = json!([
            { "translation": [10, 0, 0], "children": [1] },
            { "mesh": 0, "rotation": QUARTER_TURN_Y_XYZW },
        ]);
        let moved = read_with_nodes(&s, nodes, json!([0]));
        // T·R: (x, y, z) ↦ (z + 10, y, −x); R·T would give (3, 2, −11) for splat 0.
        assert_close(
            &moved.means,
            &[13.0, 2.0, -1.0, 14.0, 0.25, 0.5],
            1e-6,
            "means",
        );
        let expected_q = [H, 0.0, H, 0.0, 0.5, 0.5, 0.5, -0.5];
        assert_close(&moved.rotations, &expected_q, 1e-6, "rotations");
    }

    #[test]
    fn mesh_referenced_by_two_nodes_yields_both_copies() {
        let s = hand_splats(1);
        let base = stored(&s);
        let nodes = json!([{ "mesh": 0 }, { "mesh": 0, "translation": [5, 0, 0] }]);
        let both = read_with_nodes(&s, nodes, json!([0, 1]));
        assert_eq!(both.len(), 2 * s.len());
        assert_eq!(both.means[..6], base.means);
        assert_eq!(both.means[6..], [6.0, 2.0, 3.0, 4.5, 0.25, 4.0]);
        assert_eq!(
            both.rotations,
            [&base.rotations[..], &base.rotations[..]].concat()
        );
        assert_eq!(
            both.sh_coeffs,
            [&base.sh_coeffs[..], &base.sh_coeffs[..]].concat()
        );
    }

    #[test]
    fn non_uniform_scale_on_view_dependent_splats_is_refused_naming_the_node() {
        let s = hand_splats(1);
        let nodes = json!([{ "children": [1] }, { "mesh": 0, "scale": [1, 2, 1] }]);
        let e = decode(&glb_with_nodes(&s, nodes, json!([0]))).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        let msg = e.to_string();
        for part in [
            "nodes[1].scale",
            "[1,2,1]",
            "non-uniform",
            "SH degree 1",
            "nodes 0 → 1",
        ] {
            assert!(msg.contains(part), "`{part}` missing from: {msg}");
        }
        // A stretching parent matrix is named as such.
        let nodes = json!([
            { "matrix": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 3, 0, 0, 0, 0, 1], "children": [1] },
            { "mesh": 0 },
        ]);
        let msg = decode(&glb_with_nodes(&s, nodes, json!([0])))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("nodes[0].matrix"), "{msg}");
    }

    #[test]
    fn zero_scale_and_mirroring_with_sh_are_refused_mirroring_at_degree_0_is_read() {
        let one = |scale: Value| json!([{ "mesh": 0, "scale": scale }]);
        let e = decode(&glb_with_nodes(
            &hand_splats(0),
            one(json!([1, 0, 1])),
            json!([0]),
        ))
        .unwrap_err();
        assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
        assert!(e.to_string().contains("nodes[0].scale"), "{e}");
        let e = decode(&glb_with_nodes(
            &hand_splats(1),
            one(json!([-1, 1, 1])),
            json!([0]),
        ))
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert!(e.to_string().contains("mirroring"), "{e}");
        // At SH degree 0 the mirror only moves means: Σ' = A·Σ·Aᵀ with A = diag(−1, 1, 1).
        let s = hand_splats(0);
        let base = stored(&s);
        let m = read_with_nodes(&s, one(json!([-1, 1, 1])), json!([0]));
        assert_eq!(m.means, [-1.0, 2.0, 3.0, 0.5, 0.25, 4.0]);
        for i in 0..2 {
            let mut expected = covariance(&base, i);
            for k in 0..3 {
                expected[0][k] = -expected[0][k];
                expected[k][0] = -expected[k][0];
            }
            assert_covariance(covariance(&m, i), expected, "mirrored");
        }
    }

    #[test]
    fn default_scene_is_scene_property_else_scene_0_else_root_nodes() {
        let s = hand_splats(0);
        let glb = glb_with_nodes(
            &s,
            json!([{ "mesh": 0 }, { "mesh": 0, "translation": [0, 7, 0] }]),
            json!([0]),
        );
        let picked = edit_json(&glb, |doc| {
            doc["scenes"] = json!([{ "nodes": [0] }, { "nodes": [1] }]);
            doc["scene"] = json!(1);
        });
        assert_eq!(
            decode(&picked).unwrap().splats.means,
            [1.0, 9.0, 3.0, -0.5, 7.25, 4.0]
        );
        let first = edit_json(&picked, |doc| {
            doc.as_object_mut().unwrap().remove("scene");
        });
        assert_eq!(decode(&first).unwrap().splats.means, s.means);
        // No scenes: every root node, a child only once under its parent.
        let roots = edit_json(&glb, |doc| {
            let doc = doc.as_object_mut().unwrap();
            doc.remove("scene");
            doc.remove("scenes");
            doc["nodes"] = json!([{ "mesh": 0 }, { "translation": [0, 7, 0], "children": [0] }]);
        });
        assert_eq!(
            decode(&roots).unwrap().splats.means,
            [1.0, 9.0, 3.0, -0.5, 7.25, 4.0]
        );
    }

    #[test]
    fn bad_node_hierarchies_are_refused_naming_the_field() {
        let s = hand_splats(0);
        let error =
            |nodes: Value, roots: Value| decode(&glb_with_nodes(&s, nodes, roots)).unwrap_err();
        let e = error(json!([{ "mesh": 0, "children": [0] }]), json!([0]));
        assert!(matches!(e, Error::Corrupt { .. }), "cycle: {e:?}");
        let e = error(json!([{ "mesh": 0, "children": [4] }]), json!([0]));
        assert!(e.to_string().contains("nodes[0].children"), "{e}");
        let e = error(json!([{ "mesh": 3 }]), json!([0]));
        assert!(e.to_string().contains("nodes[0].mesh"), "{e}");
        let e = error(json!([{ "mesh": 0, "rotation": [0, 0, 0, 0] }]), json!([0]));
        assert!(e.to_string().contains("nodes[0].rotation"), "{e}");
        let e = error(json!([{ "mesh": 0, "scale": [1, 1] }]), json!([0]));
        assert!(e.to_string().contains("nodes[0].scale"), "{e}");
        let projective = json!([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1]);
        let e = error(json!([{ "mesh": 0, "matrix": projective }]), json!([0]));
        assert!(e.to_string().contains("nodes[0].matrix"), "{e}");
        // A splat mesh that no node of the scene reaches is not drawn, so not read.
        let e = error(json!([{}]), json!([0]));
        assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
        assert!(e.to_string().contains("scenes[0].nodes"), "{e}");
        let e = error(
            json!([{ "mesh": 0, "scale": [1e40, 1e40, 1e40] }]),
            json!([0]),
        );
        assert!(e.to_string().contains("nodes[0]"), "overflow: {e}");
    }

    #[test]
    fn parts_of_lower_sh_degree_are_padded_with_zero_bands() {
        let (a, b) = (hand_splats(0), hand_splats(1));
        let both = concatenate(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!((both.len(), both.sh_degree), (4, 1));
        // Splat 0 of `a`: its DC, then three zero band-1 coefficients per channel.
        assert_eq!(both.sh_coeffs[..3], a.sh_coeffs[..3]);
        assert_eq!(both.sh_coeffs[3..12], [0.0; 9]);
        assert_eq!(both.sh_coeffs[24..], b.sh_coeffs);
        assert_eq!(both.means, [a.means, b.means].concat());
    }

    #[test]
    fn placed_reader_keeps_survey_translations_in_f64() {
        let s = hand_splats(0);
        let nodes = json!([{ "mesh": 0, "translation": [500_000.0, 4_000_000.0, 0.0] }]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("survey.glb");
        std::fs::write(&path, glb_with_nodes(&s, nodes, json!([0]))).unwrap();
        let placed = read(&path).unwrap();
        // Splat i sits at translation + mean, to well under a millimetre.
        let expected = [500_001.0, 4_000_002.0, 3.0, 499_999.5, 4_000_000.25, 4.0];
        for (j, e) in expected.iter().enumerate() {
            let found = placed.origin_m[j % 3] + f64::from(placed.splats.means[j]);
            assert!((found - e).abs() < 1e-4, "coordinate {j}: {found} vs {e}");
        }
        // A scene that f32 holds reads at origin 0, the means as stored.
        std::fs::write(
            &path,
            glb_with_nodes(&s, json!([{ "mesh": 0 }]), json!([0])),
        )
        .unwrap();
        let near = read(&path).unwrap();
        assert_eq!(near.origin_m, [0.0; 3]);
        assert_eq!(near.splats.means, s.means);
    }
}
