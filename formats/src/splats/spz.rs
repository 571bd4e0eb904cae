//! SPZ, Niantic's compressed Gaussian splat container: encode v2/v3 (gzip) and v4 (ZSTD), decode
//! v1–v4.
//!
//! Source: nianticlabs/spz `src/cc/load-spz.cc` (tag v2.0.0, the version that
//! `KHR_gaussian_splatting_compression_spz_2` pins), summarised in
//! shared/research/tiles-formats.md §2.4. A v1–v3 file is one gzip stream holding a 16-byte
//! little-endian header — magic `0x5053474e` ("NGSP"), version u32, numPoints u32, shDegree u8,
//! fractionalBits u8, flags u8 (0x1 antialiased), reserved u8 — then the attribute blocks, each
//! for all N splats in turn: positions (3 × 24-bit signed fixed point; v1: 3 × float16), alphas
//! (u8), colours (3 × u8), scales (3 × u8), rotations (v3: 4-byte "smallest three"; v2: 3 × u8
//! xyz with w ≥ 0), SH (u8, per splat coefficient-major with r,g,b inner, degree ≥ 1 only).
//!
//! Quantisation (what the format promises, and what the tests check):
//! - position: round(x·2^fb) in 24 bits → error ≤ 2^−fb/2 m; |x| must stay below
//!   2^(23−fb) m (2048 m at fb = 12). The reference library silently wraps beyond that
//!   (nianticlabs/spz#81); [`encode`] and [`write()`] return an error instead.
//! - alpha: u8 = round(sigmoid(logit)·255) → linear opacity error ≤ 0.5/255.
//! - colour: u8 = round(dc·0.15·255 + 127.5) (`colorScale` 0.15, not 0.282: headroom for DC
//!   outside [0, 1] that SH brings back) → DC error ≤ 0.5/38.25 ≈ 0.013 inside ±3.33.
//! - scale: u8 = round((ln s + 10)·16) → log-scale error ≤ 1/32 inside [−10, 5.9].
//! - rotation v3: index of the largest |component| (2 bits) + three 10-bit fields (sign bit +
//!   9-bit magnitude of |q_i|/√½), largest made positive; SPZ quaternions are **xyzw**.
//! - SH: q = round(x·128) + 128, snapped to the nearest multiple of the bucket 2^(8 − bits)
//!   ([`SpzOptions::sh1_bits`] for degree 1, default 5 bits = bucket 8;
//!   [`SpzOptions::sh_rest_bits`] for degrees 2–3, default 4 bits = bucket 16), clamped to
//!   0..=255; decoded (q − 128)/128 whatever the bits, so any reader decodes files written with
//!   more bits (nianticlabs/spz `PackOptions::sh1Bits` / `shRestBits`): more bits cost bytes, not
//!   compatibility. At the defaults the step of degrees 2–3 is 0.125, larger than most trained
//!   coefficients, which all round to 0.
//!
//! Values outside a field's range are clamped, as the reference encoder does; only positions
//! (where clamping would move splats) are rejected. Coordinates are stored as given (the SPZ
//! library's `UNSPECIFIED` coordinate system): Kiln passes glTF-frame data, which is what
//! CesiumJS 1.145 renders correctly (research note §2.2). Files written by splat-transform or
//! the current nianticlabs library from a PLY are in the spec's RUB frame, i.e. (x, −y, −z) of
//! the PLY's coordinates and quaternions (w, x, −y, −z): `biker.spz` vs `biker.compressed.ply`
//! shows exactly that. [`super::transform::rotate_splats`] with
//! `up_axis_rotation(UpAxis::NegY, UpAxis::Y)` undoes it (an equivalent covariance).
//!
//! Version 4 (nianticlabs/spz `README.md` "File layout (version 4)" and `load-spz.cc`
//! `decompressNgspStreams`): the same six blocks with the same quantisation (v3 rotations), but
//! no gzip: a 32-byte plaintext header — magic, version = 4, numPoints u32, shDegree u8,
//! fractionalBits u8, flags u8, numStreams u8, tocByteOffset u32, 12 zero bytes — then optional
//! vendor extension records (`[u32 type][u32 length][payload]`, skipped on read: camera limits
//! and the like, no splat data), at `tocByteOffset` a table of `numStreams` × (compressedSize
//! u64, uncompressedSize u64), then one independent ZSTD frame per non-empty block in block
//! order (degree 0 files have 5 streams). Readers tell the versions apart by the first bytes:
//! `NGSP` → v4, `1f 8b` → v1–v3. SH degree 4 (allowed by v4) is rejected: Kiln stops at 3.

use std::io::Read;
use std::path::Path;

use super::placed::{PlacedRef, PlacedSplats, largest_coordinate};
use super::spz_frame::{SpzFrame, record, recorded_frame};
use super::{GaussianSplats, MAX_SH_DEGREE, domain, logit, sigmoid};
use crate::atomic_write::write_atomic;
use crate::{Error, Result};

/// SPZ header magic ("NGSP" in file byte order).
pub const SPZ_MAGIC: u32 = 0x5053_474e;
/// Size of the v1–v3 header in bytes.
const HEADER_BYTES: usize = 16;
/// Size of the v4 plaintext header in bytes.
const V4_HEADER_BYTES: usize = 32;
/// ZSTD level of the v4 streams (the library default).
const ZSTD_LEVEL: i32 = 3;
/// A v4 header whose blocks would exceed this many times the file size is rejected before any
/// allocation (the reference loader's `kMaxCompressionRatio`).
const MAX_ZSTD_RATIO: usize = 1024;
/// `colorScale` of the reference library: colour byte = dc·0.15·255 + 127.5.
const COLOR_SCALE: f32 = 0.15;
/// Header flag: splats were trained with mip/antialiased rasterisation.
const FLAG_ANTIALIASED: u8 = 0x1;
/// Header flag (newer libraries): extension records follow the header.
const FLAG_HAS_EXTENSIONS: u8 = 0x2;
/// Readers of the reference library refuse more points than this; so do we.
const MAX_POINTS: u32 = 10_000_000;
/// Default SH bits of the reference encoder: degree 1 keeps 5 bits, degrees ≥ 2 keep 4 bits.
pub const DEFAULT_SH1_BITS: u8 = 5;
/// See [`DEFAULT_SH1_BITS`].
pub const DEFAULT_SH_REST_BITS: u8 = 4;
/// Decoded opacities are kept inside [ε, 1 − ε] so that logits stay finite (alpha byte 0 or
/// 255); ε is far below the 0.5/255 quantisation step.
const ALPHA_EPS: f64 = 1e-6;

/// SPZ file version to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpzVersion {
    /// Version 2: rotations as 3 bytes of xyz (w ≥ 0). Read by spz-js 1.x.
    V2,
    /// Version 3: "smallest three" rotations. What the v2.0.0 library writes; CesiumJS reads it.
    #[default]
    V3,
    /// Version 4: v3 quantisation, plaintext header, one ZSTD frame per attribute. What current
    /// nianticlabs/spz and splat-transform write; not valid inside
    /// `KHR_gaussian_splatting_compression_spz_2` (which pins v2-era files).
    V4,
}

/// Which rasterisation the splats were trained for (SPZ header flag 0x1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpzAntialiasing {
    /// Plain 3DGS (flag clear).
    #[default]
    Standard,
    /// Mip-splatting / antialiased training (flag 0x1 set).
    Antialiased,
}

/// Options of [`write()`] and [`encode`]. `Default`: version 3, 12 fractional bits, standard
/// rasterisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpzOptions {
    /// File version written (2, 3 or 4).
    pub version: SpzVersion,
    /// Fractional bits of the 24-bit fixed-point positions, 0..=23; 12 gives 1/4096 m steps
    /// and a ±2048 m range.
    pub fractional_bits: u8,
    /// Header flag 0x1.
    pub antialiasing: SpzAntialiasing,
    /// zlib compression level of the gzip stream of versions 1–3, 1 (fastest) ..= 9 (smallest);
    /// default 6 (zlib's default). On the plush-dog scene level 1 writes 11.6 % more bytes than
    /// 6, and deflates ~5× faster. Decoders do not care. Ignored by v4 (ZSTD).
    pub gzip_level: u8,
    /// Bits kept of each degree-1 SH coefficient, 1..=8 (default 5, the reference encoder's).
    pub sh1_bits: u8,
    /// Bits kept of each degree-2 and degree-3 SH coefficient, 1..=8 (default 4).
    pub sh_rest_bits: u8,
    /// The axis convention of the data, recorded in a v4 file as its `SPZ_ADOBE_coordinate_system`
    /// extension ([`SpzFrame`]) so that readers turn it into theirs; `None` (default) records
    /// nothing, and readers assume RUB. Versions 2 and 3 carry no records: setting it with
    /// them is an error.
    pub coordinate_system: Option<SpzFrame>,
}

impl Default for SpzOptions {
    fn default() -> Self {
        Self {
            version: SpzVersion::V3,
            fractional_bits: 12,
            antialiasing: SpzAntialiasing::Standard,
            gzip_level: 6,
            sh1_bits: DEFAULT_SH1_BITS,
            sh_rest_bits: DEFAULT_SH_REST_BITS,
            coordinate_system: None,
        }
    }
}

/// The bucket (in 1/128 units) of an SH coefficient kept at `bits` bits (1..=8).
#[must_use]
pub fn sh_bucket(bits: u8) -> i32 {
    1 << (8 - i32::from(bits.clamp(1, 8)))
}

/// Largest |coordinate| (metres) that `fractional_bits` can store: 2^(23 − fb) − 2^−fb.
pub fn spz_position_limit_m(fractional_bits: u8) -> f64 {
    ((1i64 << 23) - 1) as f64 / (1i64 << fractional_bits) as f64
}

/// `x` rounded half away from zero, as `f32::round`, saturating to i32. A cast instead of
/// `round()`, which is a libm call on baseline x86-64 and was a tenth of splat tiling time. Differs
/// from `round()` only for the f32 just below a half (0.49999997 → 1), within any quantisation
/// bound here.
#[inline]
fn round_to_i32(x: f32) -> i32 {
    (x + 0.5f32.copysign(x)) as i32
}

fn to_u8(x: f32) -> u8 {
    round_to_i32(x).clamp(0, 255) as u8
}

#[inline]
fn quantize_sh(x: f32, bucket: i32) -> u8 {
    let q = round_to_i32(x * 128.0) + 128;
    let q = (q + bucket / 2).div_euclid(bucket) * bucket;
    q.clamp(0, 255) as u8
}

/// The bytes of an SPZ file holding `splats`: v2 or v3 (one gzip stream, embeddable in a GLB)
/// or v4 (plaintext header + ZSTD streams). The in-memory codec: [`write()`] writes a file, and
/// the GLB writer embeds these bytes.
///
/// Guarantees: the decoded splats ([`decode`]) match the input within the quantisation
/// bounds listed in the module docs; N and the SH degree are preserved; output is deterministic.
/// Not guaranteed: byte equality with the reference library (gzip settings differ).
///
/// - `splats`: N ≥ 0 splats, SH degree 0..=3, positions in metres in the frame the consumer
///   expects (glTF Y-up for `KHR_gaussian_splatting`), |x| < [`spz_position_limit_m`].
/// - `options`: version, fractional bits (default 12) and antialiasing flag.
///
/// # Errors
/// [`Error::InvalidInput`] when shapes are inconsistent, a value is NaN/±Inf, N > 10 000 000,
/// `fractional_bits` > 23, a position does not fit the 24-bit fixed point (with the splat index and
/// the limit in metres: store tile-local coordinates), or a quaternion has zero length.
pub fn encode(splats: &GaussianSplats, options: &SpzOptions) -> Result<Vec<u8>> {
    const CONTEXT: &str = "SPZ encode";
    splats.check_shapes(CONTEXT)?;
    splats.check_finite(CONTEXT)?;
    let n = splats.len();
    if n > MAX_POINTS as usize {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "logit_opacities (N)".into(),
            expected: format!("at most {MAX_POINTS} splats per SPZ (split into tiles)"),
            found: n.to_string(),
        });
    }
    let fb = options.fractional_bits;
    if fb > 23 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "options.fractional_bits".into(),
            expected: "0..=23".into(),
            found: fb.to_string(),
        });
    }
    for (field, bits) in [
        ("options.sh1_bits", options.sh1_bits),
        ("options.sh_rest_bits", options.sh_rest_bits),
    ] {
        if !(1..=8).contains(&bits) {
            return Err(Error::InvalidInput {
                context: CONTEXT,
                field: field.into(),
                expected: "1..=8 bits".into(),
                found: bits.to_string(),
            });
        }
    }
    if options.coordinate_system.is_some() && options.version != SpzVersion::V4 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "options.coordinate_system".into(),
            expected: "SPZ version 4 (versions 1-3 carry no extension records)".into(),
            found: format!("{:?}", options.version),
        });
    }
    let mut blocks = pack_blocks(splats, options, CONTEXT)?;
    let mut flags = match options.antialiasing {
        SpzAntialiasing::Standard => 0,
        SpzAntialiasing::Antialiased => FLAG_ANTIALIASED,
    };
    let records: Vec<u8> = options
        .coordinate_system
        .map(|f| record(f).to_vec())
        .unwrap_or_default();
    if !records.is_empty() {
        flags |= FLAG_HAS_EXTENSIONS;
    }
    let version: u32 = match options.version {
        SpzVersion::V2 => 2,
        SpzVersion::V3 => 3,
        SpzVersion::V4 => 4,
    };
    if options.version == SpzVersion::V4 {
        // Plaintext 32-byte header, TOC of the non-empty streams, then one ZSTD frame each.
        let streams: Vec<&Vec<u8>> = blocks.iter().filter(|b| !b.is_empty()).collect();
        let mut frames = Vec::with_capacity(streams.len());
        for s in &streams {
            frames.push(
                zstd::bulk::compress(s, ZSTD_LEVEL)
                    .map_err(|e| in_memory("zstd stream", e.to_string()))?,
            );
        }
        let toc_offset = V4_HEADER_BYTES + records.len();
        let mut out = Vec::with_capacity(
            toc_offset + 16 * frames.len() + frames.iter().map(Vec::len).sum::<usize>(),
        );
        out.extend_from_slice(&SPZ_MAGIC.to_le_bytes());
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(n as u32).to_le_bytes());
        out.extend_from_slice(&[splats.sh_degree as u8, fb, flags, frames.len() as u8]);
        out.extend_from_slice(&(toc_offset as u32).to_le_bytes());
        out.extend_from_slice(&[0u8; 12]);
        out.extend_from_slice(&records);
        for (s, f) in streams.iter().zip(&frames) {
            out.extend_from_slice(&(f.len() as u64).to_le_bytes());
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        }
        for f in &frames {
            out.extend_from_slice(f);
        }
        return Ok(out);
    }
    let mut header = Vec::with_capacity(HEADER_BYTES);
    header.extend_from_slice(&SPZ_MAGIC.to_le_bytes());
    header.extend_from_slice(&version.to_le_bytes());
    header.extend_from_slice(&(n as u32).to_le_bytes());
    header.extend_from_slice(&[splats.sh_degree as u8, fb, flags, 0]);
    gzip(&header, &mut blocks, options.gzip_level)
}

/// One gzip stream of `header` followed by `blocks`, at `level` (1 ..= 9, clamped), by libdeflate
/// (whole-buffer compression: smaller and faster than a streaming deflate at the same level).
/// Each block is freed once copied, so the peak is the raw bytes once plus the output.
fn gzip(header: &[u8], blocks: &mut [Vec<u8>], level: u8) -> Result<Vec<u8>> {
    let mut raw = Vec::with_capacity(header.len() + blocks.iter().map(Vec::len).sum::<usize>());
    raw.extend_from_slice(header);
    for b in blocks {
        raw.extend_from_slice(&std::mem::take(b));
    }
    let level = libdeflater::CompressionLvl::new(i32::from(level.clamp(1, 9)))
        .map_err(|e| in_memory("gzip level", format!("{e:?}")))?;
    let mut compressor = libdeflater::Compressor::new(level);
    let mut out = vec![0; compressor.gzip_compress_bound(raw.len())];
    // The buffer is the compressor's own bound, so this cannot run out of space.
    let n = compressor
        .gzip_compress(&raw, &mut out)
        .map_err(|e| in_memory("gzip stream", format!("{e:?}")))?;
    drop(raw);
    out.truncate(n);
    out.shrink_to_fit();
    Ok(out)
}

/// A compression step of [`encode`] that failed on in-memory data (`what`: the step).
fn in_memory(what: &str, found: String) -> Error {
    Error::InvalidInput {
        context: "SPZ encode",
        field: what.into(),
        expected: "in-memory compression to succeed".into(),
        found,
    }
}

/// Quantise `splats` into the six SPZ attribute blocks, in file order: positions, alphas,
/// colours, scales, rotations, SH. Shapes and finiteness were checked by the caller.
fn pack_blocks(
    splats: &GaussianSplats,
    options: &SpzOptions,
    context: &'static str,
) -> Result<[Vec<u8>; 6]> {
    let n = splats.len();
    let fb = options.fractional_bits;
    let k = splats.sh_coeffs_per_channel();
    let sh_dim = k - 1;

    // Positions.
    let mut positions = Vec::with_capacity(n * 9);
    let scale = (1i64 << fb) as f64;
    let limit = (1i64 << 23) as f64;
    for (i, &x) in splats.means.iter().enumerate() {
        let fixed = (x as f64 * scale).round();
        if fixed >= limit || fixed < -limit {
            return Err(Error::InvalidInput {
                context,
                field: format!("means[splat {}][{}]", i / 3, i % 3),
                expected: format!(
                    "|x| ≤ {:.3} m at {fb} fractional bits (24-bit fixed point); store tile-local \
                     coordinates or lower fractional_bits",
                    spz_position_limit_m(fb)
                ),
                found: format!("{x} m"),
            });
        }
        let fixed = fixed as i32;
        positions.extend_from_slice(&fixed.to_le_bytes()[..3]);
    }
    // Alphas.
    let alphas: Vec<u8> = splats
        .logit_opacities
        .iter()
        .map(|&l| to_u8((sigmoid(l) * 255.0) as f32))
        .collect();
    // Colours (SH DC).
    let mut colors = Vec::with_capacity(n * 3);
    for i in 0..n {
        for c in 0..3 {
            let dc = splats.sh_coeffs[i * k * 3 + c];
            colors.push(to_u8(dc * (COLOR_SCALE * 255.0) + 0.5 * 255.0));
        }
    }
    // Scales.
    let scales: Vec<u8> = splats
        .log_scales
        .iter()
        .map(|&s| to_u8((s + 10.0) * 16.0))
        .collect();
    // Rotations: Kiln wxyz → SPZ xyzw.
    let mut rotations = Vec::with_capacity(n * 4);
    for i in 0..n {
        let r = &splats.rotations[i * 4..i * 4 + 4];
        let norm = r.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
        if norm < 1e-12 {
            return Err(Error::InvalidInput {
                context,
                field: format!("rotations[splat {i}]"),
                expected: "a non-zero quaternion (wxyz)".into(),
                found: format!("{r:?}"),
            });
        }
        let q = [
            r[1] as f64 / norm,
            r[2] as f64 / norm,
            r[3] as f64 / norm,
            r[0] as f64 / norm,
        ];
        match options.version {
            SpzVersion::V3 | SpzVersion::V4 => rotations.extend_from_slice(&pack_smallest_three(q)),
            SpzVersion::V2 => {
                let s = if q[3] < 0.0 { -127.5 } else { 127.5 };
                for v in &q[..3] {
                    rotations.push(to_u8((v * s + 127.5) as f32));
                }
            }
        }
    }
    // SH, degree ≥ 1: per splat, coefficient-major with channels inner (our [N, K, 3] minus DC).
    let (sh1_bucket, sh_rest_bucket) =
        (sh_bucket(options.sh1_bits), sh_bucket(options.sh_rest_bits));
    let mut sh_bytes = Vec::with_capacity(n * sh_dim * 3);
    for i in 0..n {
        let sh = &splats.sh_coeffs[i * k * 3 + 3..(i + 1) * k * 3];
        // Degree 1 (3 coefficients × 3 channels) at `sh1_bits`, the rest at `sh_rest_bits`.
        let split = sh.len().min(9);
        sh_bytes.extend(sh[..split].iter().map(|&x| quantize_sh(x, sh1_bucket)));
        sh_bytes.extend(sh[split..].iter().map(|&x| quantize_sh(x, sh_rest_bucket)));
    }
    Ok([positions, alphas, colors, scales, rotations, sh_bytes])
}

/// "Smallest three" packing of a unit quaternion `q` (xyzw): 2-bit index of the largest |q_i|,
/// then for each other component in index order a sign bit (relative to the largest, which is
/// made positive) and 9 bits of |q_i|/√½. Little-endian u32.
fn pack_smallest_three(q: [f64; 4]) -> [u8; 4] {
    let largest = (0..4).fold(0, |m, i| if q[i].abs() > q[m].abs() { i } else { m });
    let negate = q[largest] < 0.0;
    let mut comp = largest as u32;
    for (i, &v) in q.iter().enumerate() {
        if i == largest {
            continue;
        }
        let negbit = ((v < 0.0) ^ negate) as u32;
        let mag = ((511.0 * (v.abs() / std::f64::consts::FRAC_1_SQRT_2) + 0.5) as u32).min(511);
        comp = (comp << 10) | (negbit << 9) | mag;
    }
    comp.to_le_bytes()
}

/// Inverse of [`pack_smallest_three`]: xyzw.
fn unpack_smallest_three(bytes: [u8; 4]) -> [f32; 4] {
    let mut comp = u32::from_le_bytes(bytes);
    let largest = (comp >> 30) as usize;
    let mut q = [0f32; 4];
    let mut sum = 0f32;
    for i in (0..4).rev() {
        if i == largest {
            continue;
        }
        let mag = (comp & 511) as f32;
        let neg = (comp >> 9) & 1 == 1;
        comp >>= 10;
        let v = std::f32::consts::FRAC_1_SQRT_2 * mag / 511.0;
        q[i] = if neg { -v } else { v };
        sum += q[i] * q[i];
    }
    q[largest] = (1.0 - sum).max(0.0).sqrt();
    q
}

/// Short name of the format in messages.
pub const NAME: &str = "SPZ";

/// Write splats as an SPZ file at `path`, atomically ([`encode`] with `options`).
///
/// - `path`: destination; missing parent directories are created.
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means; as [`encode`]
///   takes them. A non-zero origin is added to the means in f64 and cast to f32 before the
///   fixed-point quantisation (SPZ stores absolute positions).
/// - `options`: version, fractional bits, flags, frame record ([`SpzOptions`]).
///
/// # Errors
/// [`Error::PositionRange`] naming `path`, the range at `options.fractional_bits` and the
/// fractional bits the largest coordinate would need, when a position does not fit the 24-bit
/// fixed point, or when the cast to f32 moves a coordinate by more than
/// [`super::placed::POSITION_TOLERANCE_M`] (nothing is written); otherwise as [`encode`];
/// [`Error::Io`] naming `path` when writing fails (the old file, if any, is kept).
pub fn write<'a>(
    path: &Path,
    splats: impl Into<PlacedRef<'a>>,
    options: &SpzOptions,
) -> Result<()> {
    let placed = splats.into();
    check_position_range(path, &placed, options.fractional_bits)?;
    let absolute =
        placed.absolute_f32_for(path, NAME, "f32 positions before fixed-point quantisation")?;
    let bytes = encode(&absolute, options)?;
    warn_clamps(path, &absolute);
    write_atomic(path, &bytes)
}

/// Log-scales SPZ's byte holds ((s + 10)·16 in 0..=255): [−10, 5.9375].
const SPZ_LOG_SCALE_RANGE: (f32, f32) = (-10.0, 255.0 / 16.0 - 10.0);

/// Warn (naming `path`) about every attribute of `splats` that [`encode`] clamps into SPZ's
/// byte ranges: log-scales, DC colour (±0.5 / [`COLOR_SCALE`]) and higher SH ([−1, 1]),
/// so no SPZ output is written with silently clamped values (the [`domain`] policy): one
/// warning per attribute, counting the values. [`write()`] and `glb::write` call it; callers of
/// [`encode`] that write many payloads (a tileset's tiles) call it once on the whole set.
///
/// - `splats`: shapes consistent ([`GaussianSplats::check_shapes`]); values may be anything.
///
/// # Panics
/// When shapes are inconsistent.
pub fn warn_clamps(path: &Path, splats: &GaussianSplats) {
    let n = splats.len();
    let k3 = splats.sh_coeffs_per_channel() * 3;
    let logs = splats
        .log_scales
        .iter()
        .enumerate()
        .map(|(j, &v)| (j / 3, v));
    domain::warn_write_clamp(path, NAME, "log_scales", logs, n, SPZ_LOG_SCALE_RANGE);
    let dc_limit = 0.5 / COLOR_SCALE;
    let sh = |rest: bool| {
        splats
            .sh_coeffs
            .iter()
            .enumerate()
            .filter(move |(j, _)| (j % k3 >= 3) == rest)
            .map(move |(j, &v)| (j / k3, v))
    };
    domain::warn_write_clamp(
        path,
        NAME,
        "SH DC colour",
        sh(false),
        n,
        (-dc_limit, dc_limit),
    );
    // Both bucket sizes round into the byte x·128 + 128 in [0, 255]: |x| ≤ 1 within a step.
    domain::warn_write_clamp(path, NAME, "SH degree ≥ 1", sh(true), n, (-1.0, 1.0));
}

/// [`Error::PositionRange`] unless every absolute coordinate of `placed` fits SPZ's 24-bit
/// fixed point at `fractional_bits` (capped at 23), naming the bits the largest would need.
fn check_position_range(path: &Path, placed: &PlacedRef<'_>, fractional_bits: u8) -> Result<()> {
    let fb = fractional_bits.min(23);
    let fits = |fb: u8, x: f64| {
        let fixed = (x * (1u64 << fb) as f64).round();
        (-((1i64 << 23) as f64)..(1i64 << 23) as f64).contains(&fixed)
    };
    let (largest_m, _, _) = largest_coordinate(placed.splats, placed.origin_m);
    if fits(fb, largest_m) {
        return Ok(());
    }
    let needed = (0..=fb).rev().find(|&b| fits(b, largest_m));
    let step_mm = |b: u8| 1e3 / (1u64 << b) as f64;
    let reach = match needed {
        Some(b) => format!(
            "{largest_m:.3} m would need {b} fractional bits, steps of {:.3} mm",
            step_mm(b)
        ),
        None => "no fractional-bit setting reaches it".into(),
    };
    Err(placed.position_range_error(
        path,
        NAME,
        format!(
            "24-bit fixed-point positions, |x| ≤ {:.3} m at {fb} fractional bits in steps of \
             {:.3} mm ({reach})",
            spz_position_limit_m(fb),
            step_mm(fb)
        ),
    ))
}

/// Read and decode an SPZ file (see [`decode`]) at origin `[0, 0, 0]` (SPZ stores absolute
/// positions); errors name `path`.
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] when the file cannot be read; otherwise as [`decode`].
pub fn read(path: &Path) -> Result<PlacedSplats> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let read = decode_from(&bytes, path).map(PlacedSplats::at_zero);
    domain::checked(path, &ATTRIBUTES, read)
}

/// Attribute names of SPZ's blocks, for [`domain`]'s messages.
const ATTRIBUTES: domain::AttributeNames = domain::AttributeNames {
    positions: "positions",
    scales: "scales",
    rotations: "rotations",
    opacities: "alphas",
    sh: "colors / sh",
};

/// Decode SPZ bytes (file versions 1, 2 and 3, gzip-wrapped; version 4, ZSTD streams) into
/// [`GaussianSplats`]: the in-memory codec of [`read`], and what the GLB reader and the tileset
/// checker decode payloads with.
///
/// Returned values are in the training parametrisation: logit opacities (opacity kept in
/// [1e−6, 1 − 1e−6] so logits are finite), log scales, wxyz unit quaternions, DC from the colour
/// bytes, SH from the SH bytes; positions in metres in the frame they were stored in (a v4
/// file's recorded frame is turned into RDF). Errors name the source as `<SPZ bytes>`; use
/// [`read`] for files.
///
/// # Errors
/// [`Error::Corrupt`] when the bytes are neither gzip nor `NGSP`, a gzip or ZSTD stream is
/// broken, the magic is wrong, the body is shorter than the header promises, or a v4 TOC does not
/// match the header (stream count, sizes, offsets); [`Error::Unsupported`] for versions other
/// than 1–4, SH degree > 3, more than 10 000 000 points, extension records in a v1–v3 file or a
/// left-handed recorded frame; [`Error::Invalid`] for trailing bytes.
pub fn decode(bytes: &[u8]) -> Result<GaussianSplats> {
    decode_from(bytes, Path::new("<SPZ bytes>"))
}

/// The file version in the header of SPZ bytes (1–3 inside gzip, 4 plain), without decoding the
/// splats: which version a writer produced, e.g. inside a tile.
///
/// # Errors
/// [`Error::Corrupt`] for bytes that are neither gzip nor `NGSP`, or a header shorter than 8
/// bytes or with the wrong magic.
pub fn spz_file_version(bytes: &[u8]) -> Result<u32> {
    let header = header_prefix::<8>(bytes)?;
    Ok(u32::from_le_bytes([
        header[4], header[5], header[6], header[7],
    ]))
}

/// The antialiasing flag (header flags 0x1) of SPZ bytes of any version, without decoding the
/// splats: whether the splats were trained for antialiased (Mip-Splatting-style) rasterisation,
/// which a conversion must carry or name in a warning (issue 44, rule 6).
///
/// # Errors
/// As [`spz_file_version`], and for a header shorter than 16 bytes.
pub fn spz_antialiasing(bytes: &[u8]) -> Result<SpzAntialiasing> {
    let header = header_prefix::<16>(bytes)?;
    Ok(if header[14] & FLAG_ANTIALIASED != 0 {
        SpzAntialiasing::Antialiased
    } else {
        SpzAntialiasing::Standard
    })
}

/// The first `L` header bytes (≤ 16) of SPZ bytes: as stored (v4) or inflated (v1–v3).
fn header_prefix<const L: usize>(bytes: &[u8]) -> Result<[u8; L]> {
    let path = Path::new("<SPZ bytes>");
    let mut header = [0u8; L];
    if bytes.len() >= L && bytes[..4] == SPZ_MAGIC.to_le_bytes() {
        header.copy_from_slice(&bytes[..L]);
    } else if bytes.len() >= 2 && bytes[..2] == [0x1f, 0x8b] {
        flate2::read::GzDecoder::new(bytes)
            .read_exact(&mut header)
            .map_err(|e| corrupt(path, "gzip stream", format!("no {L}-byte SPZ header: {e}")))?;
        if header[..4] != SPZ_MAGIC.to_le_bytes() {
            return Err(corrupt(path, "header.magic", "expected `NGSP`"));
        }
    } else {
        return Err(corrupt(
            path,
            "byte 0",
            "not an SPZ file (SPZ v1-v3 start with gzip bytes 1f 8b, v4 with `NGSP`)",
        ));
    }
    Ok(header)
}

fn corrupt(path: &Path, location: impl Into<String>, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        location: location.into(),
        what: what.into(),
    }
}

fn unsupported(path: &Path, field: &str, found: String, supported: &str) -> Error {
    Error::Unsupported {
        path: path.to_path_buf(),
        field: field.into(),
        found,
        supported: supported.into(),
    }
}

/// [`decode`] with errors naming `path`.
pub(crate) fn decode_from(bytes: &[u8], path: &Path) -> Result<GaussianSplats> {
    if bytes.len() >= 4 && bytes[..4] == SPZ_MAGIC.to_le_bytes() {
        let (mut splats, frame) = decode_v4(bytes, path)?;
        if let Some(frame) = frame {
            into_kiln_frame(&mut splats, frame, path)?;
        }
        return Ok(splats);
    }
    if bytes.len() < 2 || bytes[..2] != [0x1f, 0x8b] {
        return Err(corrupt(
            path,
            "byte 0",
            "not an SPZ file (SPZ v1-v3 start with gzip bytes 1f 8b, v4 with `NGSP`)",
        ));
    }
    let gzip_error =
        |e: std::io::Error| corrupt(path, "gzip stream", format!("cannot decompress: {e}"));
    let mut decoder = flate2::read::GzDecoder::new(bytes);
    let mut raw = Vec::new();
    (&mut decoder)
        .take(HEADER_BYTES as u64)
        .read_to_end(&mut raw)
        .map_err(gzip_error)?;
    if raw.len() < HEADER_BYTES {
        return Err(corrupt(
            path,
            "header",
            format!(
                "truncated: {} bytes, the header needs {HEADER_BYTES}",
                raw.len()
            ),
        ));
    }
    let u32_at = |o: usize| u32::from_le_bytes([raw[o], raw[o + 1], raw[o + 2], raw[o + 3]]);
    let magic = u32_at(0);
    if magic != SPZ_MAGIC {
        return Err(corrupt(
            path,
            "header.magic",
            format!("wrong magic {magic:#010x}, expected {SPZ_MAGIC:#010x} (\"NGSP\")"),
        ));
    }
    let version = u32_at(4);
    if !(1..=3).contains(&version) {
        return Err(unsupported(
            path,
            "header.version",
            format!("{version} inside gzip"),
            "1, 2, 3 (gzip) and 4 (plain NGSP header + ZSTD)",
        ));
    }
    let n32 = u32_at(8);
    if n32 > MAX_POINTS {
        return Err(unsupported(
            path,
            "header.numPoints",
            n32.to_string(),
            "at most 10000000 points per SPZ v1-v3",
        ));
    }
    let header = Header {
        version,
        n: n32 as usize,
        sh_degree: raw[12] as u32,
        fractional_bits: raw[13],
        flags: raw[14],
    };
    header.check(path)?;
    if header.flags & FLAG_HAS_EXTENSIONS != 0 {
        return Err(unsupported(
            path,
            "header.flags",
            format!("{:#04x} (extension records in a v1-v3 file)", header.flags),
            "v1-v3 files without SPZ extension records (flag 0x2 clear), or SPZ v4",
        ));
    }
    let sizes = header.block_sizes();
    let needed = HEADER_BYTES + sizes.iter().sum::<usize>();
    // Inflate at most one byte past what the header promises, so that a hostile stream cannot
    // exhaust memory; reaching the end of the stream verifies the gzip CRC.
    raw.reserve_exact(needed - HEADER_BYTES);
    (&mut decoder)
        .take((needed - HEADER_BYTES) as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(gzip_error)?;
    if raw.len() < needed {
        return Err(corrupt(
            path,
            "body",
            format!(
                "truncated: {} points of SH degree {} need {needed} bytes, found {}",
                header.n,
                header.sh_degree,
                raw.len()
            ),
        ));
    }
    if raw.len() > needed {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "header.numPoints".into(),
            expected: format!("{needed} decompressed bytes for {} points", header.n),
            found: "more bytes (trailing data)".into(),
        });
    }
    let mut blocks: [&[u8]; 6] = [&[]; 6];
    let mut at = HEADER_BYTES;
    for (b, s) in blocks.iter_mut().zip(sizes) {
        *b = &raw[at..at + s];
        at += s;
    }
    Ok(unpack(&header, blocks))
}

/// The header fields every SPZ version shares.
struct Header {
    version: u32,
    n: usize,
    sh_degree: u32,
    fractional_bits: u8,
    flags: u8,
}

impl Header {
    fn check(&self, path: &Path) -> Result<()> {
        if self.sh_degree > MAX_SH_DEGREE {
            return Err(unsupported(
                path,
                "header.shDegree",
                self.sh_degree.to_string(),
                "0..=3 (re-export with SH degree 3 or lower)",
            ));
        }
        if self.fractional_bits > 23 {
            return Err(corrupt(
                path,
                "header.fractionalBits",
                format!("{} > 23", self.fractional_bits),
            ));
        }
        Ok(())
    }

    /// Byte sizes of the six attribute blocks in file order.
    fn block_sizes(&self) -> [usize; 6] {
        let n = self.n;
        let k = ((self.sh_degree + 1) * (self.sh_degree + 1)) as usize;
        let pos_bytes = if self.version == 1 { 6 } else { 9 };
        let rot_bytes = if self.version >= 3 { 4 } else { 3 };
        [
            n * pos_bytes,
            n,
            n * 3,
            n * 3,
            n * rot_bytes,
            n * (k - 1) * 3,
        ]
    }
}

/// Names of the six attribute blocks (streams in v4), for error messages.
const BLOCK_NAMES: [&str; 6] = ["positions", "alphas", "colors", "scales", "rotations", "sh"];

/// Decode an SPZ v4 file: 32-byte plaintext header (magic, version, numPoints u32; shDegree,
/// fractionalBits, flags, numStreams u8; tocByteOffset u32; 12 reserved bytes), optional
/// extension records up to `tocByteOffset` (skipped: they carry metadata, not splat data), a TOC
/// of `numStreams` × (compressedSize u64, uncompressedSize u64), then one ZSTD frame per
/// non-empty attribute block, in block order.
fn decode_v4(bytes: &[u8], path: &Path) -> Result<(GaussianSplats, Option<SpzFrame>)> {
    if bytes.len() < V4_HEADER_BYTES {
        return Err(corrupt(
            path,
            "header",
            format!(
                "truncated: {} bytes, an SPZ v4 header needs {V4_HEADER_BYTES}",
                bytes.len()
            ),
        ));
    }
    let u32_at =
        |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let version = u32_at(4);
    if version != 4 {
        return Err(unsupported(
            path,
            "header.version",
            format!("SPZ version {version} without gzip"),
            "plain `NGSP` headers of version 4; versions 1-3 are gzip streams",
        ));
    }
    let header = Header {
        version,
        n: u32_at(8) as usize,
        sh_degree: bytes[12] as u32,
        fractional_bits: bytes[13],
        flags: bytes[14],
    };
    header.check(path)?;
    let num_streams = bytes[15] as usize;
    let toc_offset = u32_at(16) as usize;
    let sizes = header.block_sizes();
    let expected: Vec<(usize, usize)> = sizes
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, s)| s > 0)
        .collect();
    if num_streams != expected.len() {
        return Err(corrupt(
            path,
            "header.numStreams",
            format!(
                "{num_streams} streams, but {} points of SH degree {} need {}",
                header.n,
                header.sh_degree,
                expected.len()
            ),
        ));
    }
    // A hostile header must not make us allocate far more than the file could hold.
    let total: usize = sizes.iter().sum();
    if total / MAX_ZSTD_RATIO > bytes.len() {
        return Err(corrupt(
            path,
            "header.numPoints",
            format!(
                "{} points need {total} bytes, implausible for a {}-byte file",
                header.n,
                bytes.len()
            ),
        ));
    }
    let toc_end = toc_offset + 16 * num_streams;
    if toc_offset < V4_HEADER_BYTES || toc_end > bytes.len() {
        return Err(corrupt(
            path,
            "header.tocByteOffset",
            format!(
                "TOC at {toc_offset}..{toc_end} lies outside the header zone 32..{}",
                bytes.len()
            ),
        ));
    }
    let frame = recorded_frame(&bytes[V4_HEADER_BYTES..toc_offset], |l, w| {
        corrupt(path, l, w)
    })?;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or_default());
    let mut decoded: [Vec<u8>; 6] = Default::default();
    let mut at = toc_end;
    for (t, &(block, size)) in expected.iter().enumerate() {
        let e = toc_offset + 16 * t;
        let compressed = u64_at(e);
        let uncompressed = u64_at(e + 8);
        let name = BLOCK_NAMES[block];
        if uncompressed != size as u64 {
            return Err(corrupt(
                path,
                format!("TOC entry {t} ({name})"),
                format!("uncompressed size {uncompressed}, expected {size}"),
            ));
        }
        let end = (at as u64).saturating_add(compressed);
        if end > bytes.len() as u64 {
            return Err(corrupt(
                path,
                format!("stream {t} ({name})"),
                format!(
                    "truncated: {compressed} compressed bytes from offset {at}, file has {}",
                    bytes.len()
                ),
            ));
        }
        let frame = &bytes[at..end as usize];
        let data = zstd::bulk::decompress(frame, size)
            .map_err(|e| corrupt(path, format!("stream {t} ({name})"), format!("ZSTD: {e}")))?;
        if data.len() != size {
            return Err(corrupt(
                path,
                format!("stream {t} ({name})"),
                format!("decompressed to {} bytes, expected {size}", data.len()),
            ));
        }
        decoded[block] = data;
        at = end as usize;
    }
    if at != bytes.len() {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "TOC".into(),
            expected: format!(
                "streams ending at the end of the file ({} bytes)",
                bytes.len()
            ),
            found: format!("{} trailing bytes", bytes.len() - at),
        });
    }
    let blocks: [&[u8]; 6] = std::array::from_fn(|i| decoded[i].as_slice());
    Ok((unpack(&header, blocks), frame))
}

/// The frame a v4 file records in its `SPZ_ADOBE_coordinate_system` extension, without decoding
/// the splats; `None` for v1–v3 files and v4 files without the record.
///
/// # Errors
/// [`Error::Corrupt`] for a truncated header, a table of contents outside the file or a bad
/// record.
pub fn spz_recorded_frame(bytes: &[u8]) -> Result<Option<SpzFrame>> {
    let path = Path::new("<SPZ bytes>");
    if bytes.len() < V4_HEADER_BYTES || bytes[..4] != SPZ_MAGIC.to_le_bytes() {
        return Ok(None);
    }
    let toc_offset = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]) as usize;
    let Some(zone) = bytes.get(V4_HEADER_BYTES..toc_offset) else {
        return Err(corrupt(
            path,
            "header.tocByteOffset",
            format!("{toc_offset} lies outside the {}-byte file", bytes.len()),
        ));
    };
    recorded_frame(zone, |l, w| corrupt(path, l, w))
}

/// Turn splats decoded from a file that records `frame` into Kiln's splat frame, RDF (the INRIA
/// PLY's: x right, y down, z forward), rotating positions, orientations and SH.
///
/// # Errors
/// [`Error::Unsupported`] naming `path` for a left-handed frame (a mirror image).
fn into_kiln_frame(splats: &mut GaussianSplats, frame: SpzFrame, path: &Path) -> Result<()> {
    if frame == SpzFrame::RDF {
        return Ok(());
    }
    let Some(r) = frame.rotation_to(SpzFrame::RDF) else {
        return Err(unsupported(
            path,
            "SPZ_ADOBE_coordinate_system",
            format!(
                "{} (left-handed: its splats are a mirror image)",
                frame.name()
            ),
            "right-handed frames (RDF, RUB, LUF, LDB, RFU, LBU, RBD, LFD); convert the file to \
             one with the tool that wrote it",
        ));
    };
    super::transform::rotate_splats(splats, r)
}

/// Dequantise the six attribute blocks (sizes already checked against the header).
fn unpack(header: &Header, blocks: [&[u8]; 6]) -> GaussianSplats {
    let [positions, alphas, colors, scales, rotations, sh] = blocks;
    let n = header.n;
    let sh_degree = header.sh_degree;
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    let sh_dim = k - 1;
    let rot_bytes = if header.version >= 3 { 4 } else { 3 };
    let mut out = GaussianSplats {
        means: Vec::with_capacity(n * 3),
        log_scales: scales.iter().map(|&b| b as f32 / 16.0 - 10.0).collect(),
        rotations: Vec::with_capacity(n * 4),
        logit_opacities: alphas
            .iter()
            .map(|&b| logit((b as f64 / 255.0).clamp(ALPHA_EPS, 1.0 - ALPHA_EPS)))
            .collect(),
        sh_coeffs: Vec::with_capacity(n * k * 3),
        sh_degree,
    };
    if header.version == 1 {
        out.means.extend(
            positions
                .chunks_exact(2)
                .map(|h| f16_to_f32(u16::from_le_bytes([h[0], h[1]]))),
        );
    } else {
        let inv = 1.0 / (1u32 << header.fractional_bits) as f32;
        out.means.extend(positions.chunks_exact(3).map(|b| {
            let v = i32::from_le_bytes([b[0], b[1], b[2], if b[2] & 0x80 != 0 { 0xff } else { 0 }]);
            v as f32 * inv
        }));
    }
    for r in rotations.chunks_exact(rot_bytes) {
        let xyzw = if rot_bytes == 4 {
            unpack_smallest_three([r[0], r[1], r[2], r[3]])
        } else {
            let xyz = [0, 1, 2].map(|i| r[i] as f32 / 127.5 - 1.0);
            let w = (1.0 - xyz.iter().map(|v| v * v).sum::<f32>())
                .max(0.0)
                .sqrt();
            [xyz[0], xyz[1], xyz[2], w]
        };
        out.rotations
            .extend_from_slice(&[xyzw[3], xyzw[0], xyzw[1], xyzw[2]]);
    }
    for i in 0..n {
        out.sh_coeffs.extend(
            colors[i * 3..i * 3 + 3]
                .iter()
                .map(|&b| (b as f32 / 255.0 - 0.5) / COLOR_SCALE),
        );
        out.sh_coeffs.extend(
            sh[i * sh_dim * 3..(i + 1) * sh_dim * 3]
                .iter()
                .map(|&b| (b as f32 - 128.0) / 128.0),
        );
    }
    out
}

/// IEEE 754 binary16 → f32 (SPZ v1 positions).
fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32;
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 if frac == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::test_data::random_splats;
    use std::io::Write;

    fn quat_dot(a: &[f32], b: &[f32]) -> f32 {
        let na = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        let nb = b.iter().map(|v| v * v).sum::<f32>().sqrt();
        (a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (na * nb)).abs()
    }

    /// Checks every quantisation bound of the module docs at the default SH bits; `tol` absorbs
    /// f32 rounding.
    fn assert_within_bounds(a: &GaussianSplats, b: &GaussianSplats, fb: u8, v3: bool) {
        assert_within_bounds_at(a, b, fb, v3, DEFAULT_SH1_BITS, DEFAULT_SH_REST_BITS);
    }

    fn assert_within_bounds_at(
        a: &GaussianSplats,
        b: &GaussianSplats,
        fb: u8,
        v3: bool,
        sh1_bits: u8,
        sh_rest_bits: u8,
    ) {
        assert_eq!(a.len(), b.len());
        assert_eq!(a.sh_degree, b.sh_degree);
        let tol = 1e-6;
        let step = 1.0 / (1u32 << fb) as f32;
        for (x, y) in a.means.iter().zip(&b.means) {
            assert!(
                (x - y).abs() <= step * 0.5 + tol * x.abs().max(1.0),
                "position {x} vs {y}"
            );
        }
        for (x, y) in a.logit_opacities.iter().zip(&b.logit_opacities) {
            let (ax, ay) = (sigmoid(*x), sigmoid(*y));
            assert!(
                (ax - ay).abs() <= 0.5 / 255.0 + 1e-6,
                "opacity {ax} vs {ay}"
            );
        }
        for (x, y) in a.log_scales.iter().zip(&b.log_scales) {
            assert!((x - y).abs() <= 1.0 / 32.0 + tol, "log scale {x} vs {y}");
        }
        for (qa, qb) in a.rotations.chunks(4).zip(b.rotations.chunks(4)) {
            let min_dot = if v3 { 0.9999 } else { 0.99 };
            assert!(quat_dot(qa, qb) >= min_dot, "rotation {qa:?} vs {qb:?}");
        }
        let k = a.sh_coeffs_per_channel();
        for (j, (x, y)) in a.sh_coeffs.iter().zip(&b.sh_coeffs).enumerate() {
            let coeff = (j / 3) % k;
            let bound = match coeff {
                0 => 0.5 / (COLOR_SCALE * 255.0),
                1..=3 => (sh_bucket(sh1_bits) as f32 / 2.0 + 0.5) / 128.0,
                _ => (sh_bucket(sh_rest_bits) as f32 / 2.0 + 0.5) / 128.0,
            };
            assert!(
                (x - y).abs() <= bound + tol,
                "sh[{j}] (coeff {coeff}) {x} vs {y}"
            );
        }
    }

    #[test]
    fn spz_v3_round_trip_is_within_quantisation_bounds() {
        for degree in 0..=3 {
            let s = random_splats(2000, degree, 100.0, 11 + degree as u64);
            let bytes = encode(&s, &SpzOptions::default()).unwrap();
            assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
            let back = decode(&bytes).unwrap();
            assert_within_bounds(&s, &back, 12, true);
        }
    }

    #[test]
    fn spz_with_more_sh_bits_keeps_small_coefficients_and_decodes_with_any_reader_rule() {
        let mut s = random_splats(500, 3, 10.0, 21);
        // Trained degree-2/3 coefficients are small: all round to 0 at the default 4 bits.
        for (j, v) in s.sh_coeffs.iter_mut().enumerate() {
            if (j / 3) % 16 >= 4 {
                *v *= 0.05;
            }
        }
        let default = decode(&encode(&s, &SpzOptions::default()).unwrap()).unwrap();
        let eight = SpzOptions {
            sh1_bits: 8,
            sh_rest_bits: 8,
            ..SpzOptions::default()
        };
        let fine = decode(&encode(&s, &eight).unwrap()).unwrap();
        assert_within_bounds_at(&s, &fine, 12, true, 8, 8);
        let rest_error = |b: &GaussianSplats| -> f32 {
            s.sh_coeffs
                .iter()
                .zip(&b.sh_coeffs)
                .enumerate()
                .filter(|(j, _)| (j / 3) % 16 >= 4)
                .map(|(_, (x, y))| (x - y).abs())
                .fold(0.0, f32::max)
        };
        assert!(rest_error(&fine) <= 0.5 / 128.0 + 1e-6);
        assert!(rest_error(&default) > 4.0 * rest_error(&fine));
        let bad = SpzOptions {
            sh_rest_bits: 9,
            ..SpzOptions::default()
        };
        assert!(encode(&s, &bad).is_err());
    }

    #[test]
    fn spz_v2_round_trip_is_within_quantisation_bounds() {
        let s = random_splats(2000, 3, 100.0, 5);
        let opts = SpzOptions {
            version: SpzVersion::V2,
            ..Default::default()
        };
        let back = decode(&encode(&s, &opts).unwrap()).unwrap();
        assert_within_bounds(&s, &back, 12, false);
    }

    #[test]
    fn spz_header_fields_are_as_written() {
        let s = random_splats(5, 2, 1.0, 5);
        let opts = SpzOptions {
            fractional_bits: 10,
            antialiasing: SpzAntialiasing::Antialiased,
            ..Default::default()
        };
        let bytes = encode(&s, &opts).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(u32::from_le_bytes(raw[0..4].try_into().unwrap()), SPZ_MAGIC);
        assert_eq!(&raw[0..4], b"NGSP");
        assert_eq!(u32::from_le_bytes(raw[4..8].try_into().unwrap()), 3);
        assert_eq!(u32::from_le_bytes(raw[8..12].try_into().unwrap()), 5);
        assert_eq!(&raw[12..16], &[2, 10, 1, 0]);
        assert_eq!(raw.len(), 16 + 5 * (9 + 1 + 3 + 3 + 4 + 8 * 3));
        assert_within_bounds(&s, &decode(&bytes).unwrap(), 10, true);
    }

    #[test]
    fn spz_positions_beyond_fixed_point_range_are_an_error_not_wrapped() {
        let mut s = random_splats(3, 0, 1.0, 5);
        s.means[4] = 2048.0; // splat 1, y: first value that does not fit at 12 bits
        let e = encode(&s, &SpzOptions::default()).unwrap_err();
        assert!(e.to_string().contains("means[splat 1][1]"), "{e}");
        s.means[4] = -2048.0; // −2^23 itself fits
        let back = decode(&encode(&s, &SpzOptions::default()).unwrap()).unwrap();
        assert_eq!(back.means[4], -2048.0);
        s.means[4] = 2047.9997; // rounds to 2^23 − 1 steps
        let back = decode(&encode(&s, &SpzOptions::default()).unwrap()).unwrap();
        assert!((back.means[4] - 2047.9997).abs() <= 0.5 / 4096.0 + 1e-4);
        // At 16 fractional bits the limit is 128 m.
        s.means[4] = 130.0;
        let opts = SpzOptions {
            fractional_bits: 16,
            ..Default::default()
        };
        assert!(encode(&s, &opts).is_err());
        assert!((spz_position_limit_m(12) - (2047.0 + 4095.0 / 4096.0)).abs() < 1e-12);
    }

    #[test]
    fn spz_encode_rejects_nan_and_zero_quaternion() {
        let mut s = random_splats(3, 0, 1.0, 5);
        s.sh_coeffs[4] = f32::NAN;
        assert!(matches!(
            encode(&s, &SpzOptions::default()),
            Err(Error::InvalidInput { .. })
        ));
        let mut s = random_splats(3, 0, 1.0, 5);
        s.rotations[4..8].fill(0.0);
        let e = encode(&s, &SpzOptions::default()).unwrap_err();
        assert!(e.to_string().contains("rotations[splat 1]"), "{e}");
    }

    #[test]
    fn spz_extreme_opacities_decode_to_finite_logits() {
        let mut s = random_splats(2, 0, 1.0, 5);
        s.logit_opacities = vec![-30.0, 30.0];
        let back = decode(&encode(&s, &SpzOptions::default()).unwrap()).unwrap();
        assert!(back.logit_opacities.iter().all(|l| l.is_finite()));
        assert!(back.logit_opacities[0] < -10.0 && back.logit_opacities[1] > 10.0);
    }

    #[test]
    fn spz_empty_cloud_round_trips() {
        let s = GaussianSplats {
            sh_degree: 1,
            ..Default::default()
        };
        let back = decode(&encode(&s, &SpzOptions::default()).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    fn gzip(raw: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(raw).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn spz_decode_rejects_bad_input() {
        assert!(matches!(decode(b""), Err(Error::Corrupt { .. })));
        assert!(matches!(
            decode(b"PK\x03\x04...."),
            Err(Error::Corrupt { .. })
        ));
        let good = encode(&random_splats(10, 1, 1.0, 1), &SpzOptions::default()).unwrap();
        // Truncated gzip stream.
        assert!(matches!(
            decode(&good[..good.len() / 2]),
            Err(Error::Corrupt { .. })
        ));
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&good[..])
            .read_to_end(&mut raw)
            .unwrap();
        // Truncated body inside a valid gzip stream.
        let e = decode(&gzip(&raw[..raw.len() - 1])).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        // Trailing bytes: count mismatch.
        let mut longer = raw.clone();
        longer.push(0);
        assert!(matches!(decode(&gzip(&longer)), Err(Error::Invalid { .. })));
        // Wrong magic inside gzip.
        let mut bad = raw.clone();
        bad[0] ^= 0xff;
        let e = decode(&gzip(&bad)).unwrap_err();
        assert!(e.to_string().contains("wrong magic"), "{e}");
        // Unsupported version and SH degree.
        let mut bad = raw.clone();
        bad[4] = 9;
        assert!(matches!(
            decode(&gzip(&bad)),
            Err(Error::Unsupported { .. })
        ));
        let mut bad = raw;
        bad[12] = 4;
        assert!(matches!(
            decode(&gzip(&bad)),
            Err(Error::Unsupported { .. })
        ));
    }

    #[test]
    fn spz_v4_biker_file_decodes() {
        let p = crate::capture::test_dataset("splat-playcanvas").join("biker.spz");
        let s = read(&p).unwrap().splats;
        assert_eq!((s.len(), s.sh_degree), (152_746, 0));
        s.check_shapes("test").unwrap();
        s.check_finite("test").unwrap();
        for q in s.rotations.chunks_exact(4) {
            let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-3, "{q:?}");
        }
        // Re-encoding as v4 reproduces the decoded values exactly (same quantisation grid).
        let again = decode(&encode(&s, &v4()).unwrap()).unwrap();
        assert_within_bounds(&s, &again, 12, true);
        assert_eq!(again.means, s.means);
    }

    #[test]
    fn spz_v4_records_its_frame_and_a_recorded_frame_is_turned_into_rdf_on_read() {
        let s = random_splats(300, 3, 10.0, 31);
        let plain = decode(&encode(&s, &v4()).unwrap()).unwrap();
        // RDF (Kiln's own frame): the record is there, the data is read as it is stored.
        let rdf = encode(
            &s,
            &SpzOptions {
                coordinate_system: Some(SpzFrame::RDF),
                ..v4()
            },
        )
        .unwrap();
        assert_eq!(rdf[14] & FLAG_HAS_EXTENSIONS, FLAG_HAS_EXTENSIONS);
        assert_eq!(u32::from_le_bytes(rdf[16..20].try_into().unwrap()), 44);
        assert_eq!(spz_recorded_frame(&rdf).unwrap(), Some(SpzFrame::RDF));
        assert_eq!(decode(&rdf).unwrap(), plain);
        // The same numbers recorded as RUB are (x, −y, −z) of RDF data: read back turned.
        let rub = encode(
            &s,
            &SpzOptions {
                coordinate_system: Some(SpzFrame::RUB),
                ..v4()
            },
        )
        .unwrap();
        let turned = decode(&rub).unwrap();
        let mut expected = plain.clone();
        super::super::transform::rotate_splats(
            &mut expected,
            [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]],
        )
        .unwrap();
        for (a, b) in turned.means.iter().zip(&expected.means) {
            assert!((a - b).abs() < 1e-6);
        }
        for (a, b) in turned.sh_coeffs.iter().zip(&expected.sh_coeffs) {
            assert!((a - b).abs() < 1e-5);
        }
        // A left-handed frame is named in the error; versions 2-3 cannot record one.
        let ldf = encode(
            &s,
            &SpzOptions {
                coordinate_system: SpzFrame::parse("LDF"),
                ..v4()
            },
        )
        .unwrap();
        let err = decode(&ldf).unwrap_err().to_string();
        assert!(err.contains("LDF") && err.contains("left-handed"), "{err}");
        let err = encode(
            &s,
            &SpzOptions {
                coordinate_system: Some(SpzFrame::RDF),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("version 4"), "{err}");
        assert_eq!(
            spz_recorded_frame(&encode(&s, &SpzOptions::default()).unwrap()).unwrap(),
            None
        );
    }

    fn v4() -> SpzOptions {
        SpzOptions {
            version: SpzVersion::V4,
            ..Default::default()
        }
    }

    #[test]
    fn spz_v4_round_trip_is_within_quantisation_bounds() {
        for degree in 0..=3 {
            let s = random_splats(1500, degree, 100.0, 21 + degree as u64);
            let bytes = encode(&s, &v4()).unwrap();
            assert_eq!(&bytes[..4], b"NGSP");
            assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 4);
            assert_eq!(bytes[15], if degree == 0 { 5 } else { 6 });
            let back = decode(&bytes).unwrap();
            assert_within_bounds(&s, &back, 12, true);
            // Same quantisation as v3.
            let v3 = decode(&encode(&s, &SpzOptions::default()).unwrap()).unwrap();
            assert_eq!(back, v3);
        }
    }

    #[test]
    fn spz_v4_rejects_bad_toc_and_truncation() {
        let good = encode(&random_splats(50, 1, 1.0, 3), &v4()).unwrap();
        // Truncated inside the streams.
        let e = decode(&good[..good.len() - 10]).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        // Truncated header.
        assert!(matches!(decode(&good[..20]), Err(Error::Corrupt { .. })));
        // Wrong stream count.
        let mut bad = good.clone();
        bad[15] = 3;
        let e = decode(&bad).unwrap_err();
        assert!(e.to_string().contains("numStreams"), "{e}");
        // Uncompressed size in the TOC that does not match numPoints.
        let mut bad = good.clone();
        bad[32 + 8] ^= 1;
        let e = decode(&bad).unwrap_err();
        assert!(e.to_string().contains("uncompressed size"), "{e}");
        // Corrupt ZSTD frame.
        let mut bad = good.clone();
        let first_frame = 32 + 16 * 6;
        bad[first_frame..first_frame + 4].fill(0);
        assert!(matches!(decode(&bad), Err(Error::Corrupt { .. })));
        // Trailing bytes.
        let mut bad = good.clone();
        bad.push(0);
        assert!(matches!(decode(&bad), Err(Error::Invalid { .. })));
        // Implausible point count for the file size: rejected before allocating.
        let mut bad = good;
        bad[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&bad), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn spz_v4_skips_extension_records() {
        let s = random_splats(20, 0, 1.0, 4);
        let good = encode(&s, &v4()).unwrap();
        // Insert one 8-byte-payload record between header and TOC, set flag 0x2.
        let mut with_ext = good[..32].to_vec();
        with_ext[14] |= FLAG_HAS_EXTENSIONS;
        with_ext[16..20].copy_from_slice(&(32u32 + 16).to_le_bytes());
        with_ext.extend_from_slice(&0xADBE_0002u32.to_le_bytes());
        with_ext.extend_from_slice(&8u32.to_le_bytes());
        with_ext.extend_from_slice(&[0u8; 8]);
        with_ext.extend_from_slice(&good[32..]);
        assert_eq!(decode(&with_ext).unwrap(), decode(&good).unwrap());
    }

    #[test]
    fn spz_compresses_the_real_plush_dog_and_keeps_positions() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/datasets/splat-plushdog-smartdatascan/point_cloud_29999_clean.ply");
        let s = crate::splats::ply::read(&p).unwrap().splats;
        let ply_bytes = std::fs::metadata(&p).unwrap().len() as usize;
        let spz = encode(&s, &SpzOptions::default()).unwrap();
        println!(
            "plush dog: N = {}, PLY {ply_bytes} bytes, SPZ v3 {} bytes",
            s.len(),
            spz.len()
        );
        assert!(
            spz.len() * 5 < ply_bytes,
            "SPZ {} vs PLY {ply_bytes}",
            spz.len()
        );
        let back = decode(&spz).unwrap();
        assert_eq!((back.len(), back.sh_degree), (s.len(), 3));
        for (x, y) in s.means.iter().zip(&back.means) {
            assert!((x - y).abs() <= 0.5 / 4096.0 + 1e-6);
        }
    }

    #[test]
    fn spz_smallest_three_round_trips_axis_quaternions() {
        for q in [
            [0.0, 0.0, 0.0, 1.0],
            [1.0, 0.0, 0.0, 0.0],
            [0.0, -1.0, 0.0, 0.0],
            [0.5, -0.5, 0.5, -0.5],
        ] {
            let back = unpack_smallest_three(pack_smallest_three(q));
            let dot: f64 = q.iter().zip(&back).map(|(a, b)| a * *b as f64).sum();
            assert!(dot.abs() > 0.99999, "{q:?} -> {back:?}");
        }
    }
}
