//! antimatter15 `.splat`: 32 bytes per splat, no header, no SH.
//!
//! Source: antimatter15/splat `convert.py` (writer) and `main.js` (reader), the layout most web
//! viewers accept; summarised in shared/research/tiles-formats.md §2.5. Per splat, little-endian:
//!
//! | bytes  | content                                                                  |
//! |--------|--------------------------------------------------------------------------|
//! | 0–11   | position x, y, z: f32 (metres, stored as given)                          |
//! | 12–23  | **linear** scale (standard deviation) x, y, z: f32 = exp(log-scale)        |
//! | 24–27  | r, g, b, a: u8; rgb = (0.5 + C0·f_dc)·255, a = sigmoid(opacity)·255        |
//! | 28–31  | rotation w, x, y, z: u8 = q·128 + 128 of the normalised quaternion       |
//!
//! The file length is 32·N. Quantisation (what the round trip promises): positions and
//! scales exact f32 (log-scale error ≤ 1 ulp of exp/ln); base colour ≤ 0.5/255 while it lies in
//! [0, 1] (f_dc ≤ 0.5/(255·C0) ≈ 0.007; colours outside are clamped), linear opacity ≤ 0.5/255,
//! each quaternion component ≤ 0.5/128 before renormalisation; SH bands ≥ 1 are dropped.
//! Bytes are rounded to nearest (the reference converter truncates). Splat order is kept (the
//! reference converter sorts by size·opacity; viewers sort per frame anyway).

use std::path::Path;

use super::placed::{PlacedRef, PlacedSplats};
use super::{GaussianSplats, domain, logit, sigmoid};
use crate::atomic_write::write_atomic;
use crate::{Error, Result};

/// Bytes per splat.
pub const SPLAT_BYTES: usize = 32;
/// Zeroth-order SH basis constant: base colour = 0.5 + C0·f_dc.
const SH_C0: f64 = 0.282_094_791_773_878_14;
/// Decoded opacities are kept in [ε, 1 − ε] so that logits stay finite.
const ALPHA_EPS: f64 = 1e-6;

fn to_u8(x: f64) -> u8 {
    x.round().clamp(0.0, 255.0) as u8
}

/// The `.splat` bytes of `splats` (SH bands ≥ 1 are not representable and are dropped); errors
/// as [`write()`]'s [`Error::InvalidInput`].
fn encode(splats: &GaussianSplats) -> Result<Vec<u8>> {
    const CONTEXT: &str = ".splat encode";
    splats.check_shapes(CONTEXT)?;
    splats.check_finite(CONTEXT)?;
    let n = splats.len();
    let k = splats.sh_coeffs_per_channel();
    let mut out = Vec::with_capacity(n * SPLAT_BYTES);
    for i in 0..n {
        for a in 0..3 {
            out.extend_from_slice(&splats.means[i * 3 + a].to_le_bytes());
        }
        for a in 0..3 {
            let s = splats.log_scales[i * 3 + a].exp();
            if !s.is_finite() {
                return Err(Error::InvalidInput {
                    context: CONTEXT,
                    field: format!("log_scales[splat {i}][{a}]"),
                    expected: "a log-scale whose exp fits in f32 (≤ 88.7)".into(),
                    found: splats.log_scales[i * 3 + a].to_string(),
                });
            }
            out.extend_from_slice(&s.to_le_bytes());
        }
        for c in 0..3 {
            let dc = splats.sh_coeffs[i * k * 3 + c] as f64;
            out.push(to_u8((0.5 + SH_C0 * dc) * 255.0));
        }
        out.push(to_u8(sigmoid(splats.logit_opacities[i]) * 255.0));
        let q = &splats.rotations[i * 4..i * 4 + 4];
        let norm = q.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
        if norm < 1e-12 {
            return Err(Error::InvalidInput {
                context: CONTEXT,
                field: format!("rotations[splat {i}]"),
                expected: "a non-zero quaternion (wxyz)".into(),
                found: format!("{q:?}"),
            });
        }
        for v in q {
            out.push(to_u8(*v as f64 / norm * 128.0 + 128.0));
        }
    }
    Ok(out)
}

/// Short name of the format in messages.
pub const NAME: &str = ".splat";

/// Write splats as a `.splat` file at `path`, atomically (layout in the module docs; SH bands
/// ≥ 1 are not representable and are dropped).
///
/// - `path`: destination; missing parent directories are created.
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means; N ≥ 0 splats of
///   any SH degree, positions in metres in any frame. A non-zero origin is added to the means
///   in f64 and cast to f32 (the file stores absolute f32 positions).
///
/// # Errors
/// [`Error::PositionRange`] naming `path` when that cast moves a coordinate by more than
/// [`super::placed::POSITION_TOLERANCE_M`] (nothing is written); [`Error::InvalidInput`] when
/// shapes are inconsistent, a value is NaN/±Inf, a log-scale overflows f32 when exponentiated
/// (> 88.7), or a quaternion has zero length (splat index named); [`Error::Io`] naming `path`
/// when writing fails (the old file, if any, is kept).
pub fn write<'a>(path: &Path, splats: impl Into<PlacedRef<'a>>) -> Result<()> {
    let absolute = splats
        .into()
        .absolute_f32_for(path, NAME, "absolute f32 positions")?;
    warn_clamps(path, &absolute);
    let bytes = encode(&absolute)?;
    write_atomic(path, &bytes)
}

/// One warning per attribute whose values a `.splat` byte cannot hold (a base colour outside
/// [0, 1], i.e. f_dc outside [−0.5/C0, 0.5/C0]; SH bands ≥ 1, which the format drops), counting
/// them: the writer never clamps or drops silently (issue 44 rule 2).
fn warn_clamps(path: &Path, splats: &GaussianSplats) {
    let n = splats.len();
    let k3 = splats.sh_coeffs_per_channel() * 3;
    let dc = (0..n).flat_map(|i| (0..3).map(move |c| (i, i * k3 + c)));
    let dc = dc.map(|(i, at)| (i, splats.sh_coeffs[at]));
    let lim = (0.5 / SH_C0) as f32;
    domain::warn_write_clamp(path, NAME, "f_dc (base colour)", dc, n, (-lim, lim));
    if k3 > 3 {
        tracing::warn!(
            "{}: {NAME} has no view-dependent colour: SH degree {} dropped, degree 0 written",
            path.display(),
            splats.sh_degree
        );
    }
}

/// Read a `.splat` file into splats of SH degree 0 at origin `[0, 0, 0]`: means as stored,
/// log-scales = ln(scale), f_dc = (rgb/255 − 0.5)/C0, logit opacity of a/255 (kept in
/// [1e−6, 1 − 1e−6]), rotation (b − 128)/128 renormalised. Values meet the
/// [`domain`] policy: a zero scale, or a log-scale outside its range, is clamped with a warning.
///
/// # Errors
/// All name `path`: [`Error::NotFound`] / [`Error::Io`] when the file cannot be read;
/// [`Error::Corrupt`] when the length is not a multiple of 32; [`Error::Invalid`] for a
/// NaN/±Inf position, a negative or non-finite scale, or an all-128 (zero) rotation (splat
/// index named).
pub fn read(path: &Path) -> Result<PlacedSplats> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let read = decode(&bytes, path).map(PlacedSplats::at_zero);
    domain::checked(path, &ATTRIBUTES, read)
}

/// Attribute names of a `.splat` row, for [`domain`]'s messages.
const ATTRIBUTES: domain::AttributeNames = domain::AttributeNames {
    positions: "position",
    scales: "scale",
    rotations: "rotation",
    opacities: "alpha",
    sh: "rgb",
};

/// Decode `.splat` bytes read from `path` (named in errors); see [`read`].
fn decode(bytes: &[u8], path: &Path) -> Result<GaussianSplats> {
    if !bytes.len().is_multiple_of(SPLAT_BYTES) {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            location: format!("byte {}", bytes.len() - bytes.len() % SPLAT_BYTES),
            what: format!(
                "length {} is not a multiple of 32 bytes per splat (truncated, or not a .splat)",
                bytes.len()
            ),
        });
    }
    let n = bytes.len() / SPLAT_BYTES;
    let mut out = GaussianSplats {
        means: Vec::with_capacity(n * 3),
        log_scales: Vec::with_capacity(n * 3),
        rotations: Vec::with_capacity(n * 4),
        logit_opacities: Vec::with_capacity(n),
        sh_coeffs: Vec::with_capacity(n * 3),
        sh_degree: 0,
    };
    let invalid = |i: usize, field: &str, expected: &str, found: f32| Error::Invalid {
        path: path.to_path_buf(),
        field: format!("splat[{i}].{field}"),
        expected: expected.into(),
        found: found.to_string(),
    };
    let mut linear_scales = Vec::with_capacity(n * 3);
    for (i, b) in bytes.chunks_exact(SPLAT_BYTES).enumerate() {
        let f = |o: usize| f32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        for a in 0..3 {
            let x = f(a * 4);
            if !x.is_finite() {
                return Err(invalid(i, "position", "a finite value", x));
            }
            out.means.push(x);
        }
        linear_scales.extend((0..3).map(|a| f(12 + a * 4)));
        for c in 0..3 {
            out.sh_coeffs
                .push(((b[24 + c] as f64 / 255.0 - 0.5) / SH_C0) as f32);
        }
        out.logit_opacities.push(logit(
            (b[27] as f64 / 255.0).clamp(ALPHA_EPS, 1.0 - ALPHA_EPS),
        ));
        out.rotations
            .extend([28, 29, 30, 31].map(|o| (b[o] as f32 - 128.0) / 128.0));
    }
    // The domain policy sees the values as stored: linear scales, unnormalised quaternions.
    let check = domain::ValueCheck::new(path);
    out.log_scales = check.linear_scales_to_log("scale", &linear_scales)?;
    check.rotations("rotation", &out.rotations)?;
    for q in out.rotations.chunks_exact_mut(4) {
        let norm = q.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
        q.iter_mut()
            .for_each(|v| *v = (f64::from(*v) / norm) as f32);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::test_data::random_splats;

    #[test]
    fn dot_splat_round_trip_is_within_byte_bounds_and_drops_sh() {
        let s = random_splats(2000, 3, 50.0, 41);
        let bytes = encode(&s).unwrap();
        assert_eq!(bytes.len(), 2000 * 32);
        let back = decode(&bytes, Path::new("t.splat")).unwrap();
        assert_eq!((back.len(), back.sh_degree), (2000, 0));
        assert_eq!(back.means, s.means);
        for (a, b) in s.log_scales.iter().zip(&back.log_scales) {
            assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
        }
        for i in 0..2000 {
            let e = (sigmoid(back.logit_opacities[i]) - sigmoid(s.logit_opacities[i])).abs();
            assert!(e <= 0.5 / 255.0 + 1e-6, "opacity {i}: {e}");
            for c in 0..3 {
                let dc = s.sh_coeffs[i * 48 + c] as f64;
                let base = 0.5 + SH_C0 * dc;
                if (0.0..=1.0).contains(&base) {
                    let e = (back.sh_coeffs[i * 3 + c] as f64 - dc).abs();
                    assert!(e <= 0.5 / (255.0 * SH_C0) + 1e-5, "dc {i}/{c}: {e}");
                }
            }
            let qa = &s.rotations[i * 4..i * 4 + 4];
            let qb = &back.rotations[i * 4..i * 4 + 4];
            let dot: f32 = qa.iter().zip(qb).map(|(x, y)| x * y).sum();
            assert!(dot.abs() >= 0.9995, "rotation {i}: {qa:?} vs {qb:?}");
        }
    }

    #[test]
    fn dot_splat_layout_matches_the_reference_bytes() {
        let mut s = random_splats(1, 0, 1.0, 1);
        s.means = vec![1.0, -2.0, 3.5];
        s.log_scales = vec![0.0, 1.0f32.ln() - 1.0, -2.0];
        s.sh_coeffs = vec![0.0, 1.0, -1.0];
        s.logit_opacities = vec![0.0];
        s.rotations = vec![1.0, 0.0, 0.0, 0.0];
        let b = encode(&s).unwrap();
        assert_eq!(f32::from_le_bytes(b[4..8].try_into().unwrap()), -2.0);
        assert_eq!(f32::from_le_bytes(b[12..16].try_into().unwrap()), 1.0);
        assert_eq!(&b[24..28], &[128, 199, 56, 128]);
        assert_eq!(&b[28..32], &[255, 128, 128, 128]);
    }

    #[test]
    fn dot_splat_rejects_bad_length_and_values() {
        let bytes = encode(&random_splats(3, 0, 1.0, 2)).unwrap();
        let e = decode(&bytes[..95], Path::new("t.splat")).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }) && e.to_string().contains("multiple of 32"));
        let mut bad = bytes.clone();
        bad[32 + 12..32 + 16].copy_from_slice(&(-0.5f32).to_le_bytes());
        let e = decode(&bad, Path::new("t.splat")).unwrap_err();
        assert!(e.to_string().contains("scale of splat 1"), "{e}");
        let mut bad = bytes;
        bad[64..68].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(
            decode(&bad, Path::new("t.splat"))
                .unwrap_err()
                .to_string()
                .contains("splat[2].position")
        );
        assert_eq!(decode(&[], Path::new("t.splat")).unwrap().len(), 0);
        let mut s = random_splats(2, 0, 1.0, 2);
        s.log_scales[4] = 100.0;
        assert!(
            encode(&s)
                .unwrap_err()
                .to_string()
                .contains("log_scales[splat 1][1]")
        );
    }
}
