//! Gaussian splats in memory ([`GaussianSplats`]) and their file formats: INRIA 3DGS PLY (`ply`),
//! PlayCanvas compressed PLY (`compressed_ply`), SPZ v1–v4 (`spz`), antimatter15 `.splat`
//! (`dot_splat`), glTF `KHR_gaussian_splatting` GLB (`glb`), PlayCanvas SOG v2 (`sog`: `meta.json`
//! with lossless WebP images, folder or `.sog` bundle); `convert` picks a format from a file
//! name and converts between them, `transform` rotates scenes, changes their up axis and SH
//! degree, `sh` evaluates and rotates real SH.
//!
//! One API per format: `read(path) -> PlacedSplats` and `write(path, splats, ..)` taking a
//! [`placed::PlacedRef`] (a `&PlacedSplats`, or a `&GaussianSplats` with absolute means);
//! `spz` and `glb` add `encode`/`decode` for bytes in memory (GLB embeds SPZ, tiles are built in
//! memory). Positions f32 cannot hold (`double` PLY coordinates in a survey frame) travel as
//! [`placed::PlacedSplats`]: an f64 origin beside f32 means, kept by the PLY and GLB writers and
//! refused with the format's range by SPZ, `.splat`, compressed PLY and SOG.
//!
//! Imports run one way: a format module uses this module's types, `placed`, `sh`, `transform`
//! (and `ply_container`, the PLY header both PLY formats parse; `glb` also uses the `spz` codec
//! for its payload, and `spz` its `spz_frame` records); `convert` uses the formats, and nothing
//! uses `convert`.
//!
//! Every reader returns splats in the training parametrisation below, its values checked by the
//! one policy of [`domain`] (clamped with a warning, or refused naming file, attribute and
//! splat); writers that narrow a range warn through the same module. Every writer checks its input
//! once with [`GaussianSplats::check_shapes`] and, where the format cannot hold them, rejects
//! non-finite values with the splat index: before it writes a byte, or (the parallel INRIA PLY
//! writer, which checks each chunk as it builds it) before the output replaces anything — the
//! temporary file is removed and an existing output kept.

pub mod compressed_ply;
pub mod convert;
pub mod domain;
pub mod dot_splat;
pub mod glb;
mod mip_filter;
pub mod placed;
pub mod ply;
mod ply_container;
pub mod sh;
pub mod sog;
pub mod spz;
pub mod spz_frame;
pub mod transform;

#[cfg(test)]
mod real_data_tests;

use crate::{Error, Result};

/// A set of N 3D Gaussians in the training parametrisation.
///
/// - `means`: `[N, 3]` positions, metres, f32, in the scene's world frame — or relative to an
///   f64 origin when carried in a [`placed::PlacedSplats`] (what readers of `double` PLY
///   coordinates return for survey-sized positions: f32 steps are 31 mm at 500 km).
/// - `log_scales`: `[N, 3]` natural log of per-axis standard deviations (metres).
/// - `rotations`: `[N, 4]` unit quaternions wxyz (local → world).
/// - `logit_opacities`: `[N]` logits; opacity = sigmoid(logit).
/// - `sh_coeffs`: `[N, K, 3]` real SH coefficients, coefficient-major, K = (sh_degree + 1)².
///   Index 0 is the DC term; colour = 0.28209479·dc + … + 0.5 (INRIA convention).
/// - `sh_degree`: 0..=3.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GaussianSplats {
    pub means: Vec<f32>,
    pub log_scales: Vec<f32>,
    pub rotations: Vec<f32>,
    pub logit_opacities: Vec<f32>,
    pub sh_coeffs: Vec<f32>,
    pub sh_degree: u32,
}

/// Highest SH degree Kiln stores (INRIA 3DGS, SPZ v2/v3 and `KHR_gaussian_splatting` all stop at 3).
pub const MAX_SH_DEGREE: u32 = 3;

impl GaussianSplats {
    /// Number of splats N.
    pub fn len(&self) -> usize {
        self.logit_opacities.len()
    }

    /// True when there are no splats.
    pub fn is_empty(&self) -> bool {
        self.logit_opacities.is_empty()
    }

    /// SH coefficients per channel, K = (sh_degree + 1)².
    pub fn sh_coeffs_per_channel(&self) -> usize {
        ((self.sh_degree + 1) * (self.sh_degree + 1)) as usize
    }

    /// Check that every array has the length N (from `logit_opacities`) implies and that
    /// `sh_degree` ≤ [`MAX_SH_DEGREE`]. Values are not inspected (see [`Self::check_finite`]).
    ///
    /// `context` names the caller in the error (e.g. `"SPZ encode"`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first inconsistent field, with expected and found lengths.
    pub fn check_shapes(&self, context: &'static str) -> Result<()> {
        if self.sh_degree > MAX_SH_DEGREE {
            return Err(Error::InvalidInput {
                context,
                field: "sh_degree".into(),
                expected: format!("0..={MAX_SH_DEGREE}"),
                found: self.sh_degree.to_string(),
            });
        }
        let n = self.len();
        let k = self.sh_coeffs_per_channel();
        let fields: [(&str, usize, usize, &str); 4] = [
            ("means", self.means.len(), n * 3, "[N, 3]"),
            ("log_scales", self.log_scales.len(), n * 3, "[N, 3]"),
            ("rotations", self.rotations.len(), n * 4, "[N, 4]"),
            ("sh_coeffs", self.sh_coeffs.len(), n * k * 3, "[N, K, 3]"),
        ];
        for (field, found, expected, shape) in fields {
            if found != expected {
                return Err(Error::InvalidInput {
                    context,
                    field: field.into(),
                    expected: format!(
                        "{expected} values ({shape} with N = {n}, K = {k}; N is logit_opacities.len())"
                    ),
                    found: format!("{found} values"),
                });
            }
        }
        Ok(())
    }

    /// Check that every value is finite (no NaN or ±Inf). Call after [`Self::check_shapes`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the field and the first offending splat index.
    pub fn check_finite(&self, context: &'static str) -> Result<()> {
        let n = self.len().max(1);
        let fields: [(&str, &[f32]); 5] = [
            ("means", &self.means),
            ("log_scales", &self.log_scales),
            ("rotations", &self.rotations),
            ("logit_opacities", &self.logit_opacities),
            ("sh_coeffs", &self.sh_coeffs),
        ];
        for (field, values) in fields {
            if let Some(pos) = values.iter().position(|v| !v.is_finite()) {
                let per = (values.len() / n).max(1);
                return Err(Error::InvalidInput {
                    context,
                    field: format!("{field}[splat {}]", pos / per),
                    expected: "a finite value".into(),
                    found: values[pos].to_string(),
                });
            }
        }
        Ok(())
    }

    /// The splats at `indices`, in that order: N′ = the number of indices, an index may repeat,
    /// the SH degree is this set's. Every field of splat `indices[j]` is copied to row j.
    ///
    /// - `indices`: each in `0..N`; any iterator of `usize` (`[3, 0, 3]`, `0..n`,
    ///   `u32` indices mapped with `as usize`).
    ///
    /// # Panics
    /// When an index is ≥ N, or shapes are inconsistent (see [`Self::check_shapes`]) so that a
    /// row of some field is missing.
    #[must_use]
    pub fn select(&self, indices: impl IntoIterator<Item = usize>) -> Self {
        let indices = indices.into_iter();
        let n = indices.size_hint().0;
        let k3 = self.sh_coeffs_per_channel() * 3;
        let mut out = Self {
            means: Vec::with_capacity(n * 3),
            log_scales: Vec::with_capacity(n * 3),
            rotations: Vec::with_capacity(n * 4),
            logit_opacities: Vec::with_capacity(n),
            sh_coeffs: Vec::with_capacity(n * k3),
            sh_degree: self.sh_degree,
        };
        for i in indices {
            out.means.extend_from_slice(&self.means[i * 3..i * 3 + 3]);
            out.log_scales
                .extend_from_slice(&self.log_scales[i * 3..i * 3 + 3]);
            out.rotations
                .extend_from_slice(&self.rotations[i * 4..i * 4 + 4]);
            out.logit_opacities.push(self.logit_opacities[i]);
            out.sh_coeffs
                .extend_from_slice(&self.sh_coeffs[i * k3..(i + 1) * k3]);
        }
        out
    }

    /// Append the splats of `other` after this set's (N becomes N + N_other, order kept).
    /// Shapes are not checked (see [`Self::check_shapes`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the SH degrees differ (nothing is appended): raise the lower
    /// one with [`transform::raise_sh_degree`] or drop bands with
    /// [`transform::reduce_sh_degree`] first.
    pub fn extend(&mut self, other: &GaussianSplats) -> Result<()> {
        check_same_degree("extend splats", self.sh_degree, other.sh_degree, "other")?;
        self.means.extend_from_slice(&other.means);
        self.log_scales.extend_from_slice(&other.log_scales);
        self.rotations.extend_from_slice(&other.rotations);
        self.logit_opacities
            .extend_from_slice(&other.logit_opacities);
        self.sh_coeffs.extend_from_slice(&other.sh_coeffs);
        Ok(())
    }

    /// One set holding every splat of `parts`, in order (the first part's splats first). No
    /// parts give an empty set of SH degree 0.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first part whose SH degree differs from the first
    /// part's (see [`Self::extend`] for the fix).
    pub fn concat<'a>(parts: impl IntoIterator<Item = &'a GaussianSplats>) -> Result<Self> {
        let parts: Vec<&GaussianSplats> = parts.into_iter().collect();
        let Some(first) = parts.first() else {
            return Ok(Self::default());
        };
        let n: usize = parts.iter().map(|p| p.len()).sum();
        let k3 = first.sh_coeffs_per_channel() * 3;
        let mut out = Self {
            means: Vec::with_capacity(n * 3),
            log_scales: Vec::with_capacity(n * 3),
            rotations: Vec::with_capacity(n * 4),
            logit_opacities: Vec::with_capacity(n),
            sh_coeffs: Vec::with_capacity(n * k3),
            sh_degree: first.sh_degree,
        };
        for (i, part) in parts.iter().enumerate() {
            check_same_degree(
                "concatenate splats",
                out.sh_degree,
                part.sh_degree,
                &format!("parts[{i}]"),
            )?;
            out.extend(part)?;
        }
        Ok(out)
    }
}

/// [`Error::InvalidInput`] unless `found` (the degree of `what`) equals `expected`.
fn check_same_degree(context: &'static str, expected: u32, found: u32, what: &str) -> Result<()> {
    if expected == found {
        return Ok(());
    }
    Err(Error::InvalidInput {
        context,
        field: format!("{what}.sh_degree"),
        expected: format!(
            "{expected}, the SH degree of the splats it joins (raise the lower degree with \
             transform::raise_sh_degree, or drop bands with transform::reduce_sh_degree)"
        ),
        found: found.to_string(),
    })
}

/// Logistic sigmoid: opacity = sigmoid(logit). Computed in f64 so that encoders round the same
/// value on every platform.
pub(crate) fn sigmoid(logit: f32) -> f64 {
    1.0 / (1.0 + (-(logit as f64)).exp())
}

/// Inverse of [`sigmoid`] for `alpha` in (0, 1).
pub(crate) fn logit(alpha: f64) -> f32 {
    (alpha / (1.0 - alpha)).ln() as f32
}

#[cfg(test)]
pub(crate) mod test_data {
    //! Seeded random splats shared by the format tests (a tiny xorshift, no `rand` dependency in
    //! kiln-formats).

    use super::GaussianSplats;

    /// Deterministic xorshift64* stream of f32 in [0, 1).
    pub struct Rng(u64);

    impl Rng {
        pub fn new(seed: u64) -> Self {
            Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }
        pub fn next_f32(&mut self) -> f32 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
            (v >> 40) as f32 / (1u64 << 24) as f32
        }
        pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
            lo + (hi - lo) * self.next_f32()
        }
    }

    /// Three splats 1 cm apart along x at a UTM-like position (`[3, 3]` metres: x 500 km,
    /// y 4000 km, z 10 m), the case f32 cannot hold.
    pub fn survey_xyz() -> Vec<f64> {
        vec![
            500_000.00,
            4_000_000.0,
            10.0,
            500_000.01,
            4_000_000.0,
            10.0,
            500_000.02,
            4_000_000.0,
            10.0,
        ]
    }

    /// N random splats of the given degree: means in ±`half_extent_m`, log-scales in [−6, −1],
    /// unit quaternions, logits in [−4, 4], DC in ±2, higher SH in ±0.9.
    pub fn random_splats(
        n: usize,
        sh_degree: u32,
        half_extent_m: f32,
        seed: u64,
    ) -> GaussianSplats {
        let mut r = Rng::new(seed);
        let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
        let mut s = GaussianSplats {
            sh_degree,
            ..Default::default()
        };
        for _ in 0..n {
            for _ in 0..3 {
                s.means.push(r.range(-half_extent_m, half_extent_m));
                s.log_scales.push(r.range(-6.0, -1.0));
            }
            let q: [f32; 4] = std::array::from_fn(|_| r.range(-1.0, 1.0));
            let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-3);
            s.rotations.extend(q.iter().map(|v| v / norm));
            s.logit_opacities.push(r.range(-4.0, 4.0));
            for j in 0..k * 3 {
                s.sh_coeffs.push(if j < 3 {
                    r.range(-2.0, 2.0)
                } else {
                    r.range(-0.9, 0.9)
                });
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::test_data::random_splats;
    use super::*;

    #[test]
    fn select_copies_whole_rows_in_index_order_with_repeats() {
        let s = random_splats(5, 2, 1.0, 11);
        let picked = s.select([3, 0, 3]);
        picked.check_shapes("test").unwrap();
        assert_eq!((picked.len(), picked.sh_degree), (3, 2));
        let k3 = 27;
        for (row, i) in [3usize, 0, 3].into_iter().enumerate() {
            assert_eq!(
                picked.means[row * 3..row * 3 + 3],
                s.means[i * 3..i * 3 + 3]
            );
            assert_eq!(
                picked.log_scales[row * 3..row * 3 + 3],
                s.log_scales[i * 3..i * 3 + 3]
            );
            assert_eq!(
                picked.rotations[row * 4..row * 4 + 4],
                s.rotations[i * 4..i * 4 + 4]
            );
            assert_eq!(picked.logit_opacities[row], s.logit_opacities[i]);
            assert_eq!(
                picked.sh_coeffs[row * k3..(row + 1) * k3],
                s.sh_coeffs[i * k3..(i + 1) * k3]
            );
        }
        assert_eq!(s.select(0..5), s);
        let none = s.select([]);
        assert!(none.is_empty());
        assert_eq!(none.sh_degree, 2);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn select_panics_on_an_index_past_n() {
        let _ = random_splats(2, 0, 1.0, 1).select([2]);
    }

    #[test]
    fn extend_appends_and_concat_equals_successive_extends() {
        let a = random_splats(4, 1, 1.0, 1);
        let b = random_splats(3, 1, 1.0, 2);
        let c = random_splats(2, 1, 1.0, 3);
        let mut joined = a.clone();
        joined.extend(&b).unwrap();
        joined.extend(&c).unwrap();
        joined.check_shapes("test").unwrap();
        assert_eq!(joined.len(), 9);
        assert_eq!(joined.select(0..4), a);
        assert_eq!(joined.select(4..7), b);
        assert_eq!(joined.select(7..9), c);
        assert_eq!(GaussianSplats::concat([&a, &b, &c]).unwrap(), joined);
        assert_eq!(
            GaussianSplats::concat(std::iter::empty()).unwrap(),
            GaussianSplats::default()
        );
    }

    #[test]
    fn extend_and_concat_refuse_an_sh_degree_mismatch_naming_the_part() {
        let a = random_splats(2, 3, 1.0, 1);
        let b = random_splats(2, 1, 1.0, 2);
        let mut joined = a.clone();
        let e = joined.extend(&b).unwrap_err().to_string();
        assert!(
            e.contains("other.sh_degree") && e.contains("found 1") && e.contains("raise_sh_degree"),
            "{e}"
        );
        assert_eq!(joined, a, "nothing appended");
        let e = GaussianSplats::concat([&a, &a, &b])
            .unwrap_err()
            .to_string();
        assert!(e.contains("parts[2].sh_degree"), "{e}");
    }
}
