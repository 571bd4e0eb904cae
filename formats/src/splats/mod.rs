//! Gaussian splats in memory ([`GaussianSplats`]) and their file formats: INRIA 3DGS PLY (`ply`),
//! PlayCanvas compressed PLY (`compressed_ply`), SPZ v1–v4 (`spz`), antimatter15 `.splat`
//! (`dot_splat`), glTF `KHR_gaussian_splatting` GLB (`glb`), PlayCanvas SOG v2 (`sog`: `meta.json`
//! with lossless WebP images, folder or `.sog` bundle); `convert` picks a format from a file
//! name and converts between them, `transform` rotates scenes, changes their up axis and SH
//! degree, `sh` evaluates and rotates real SH.
//! Positions f32 cannot hold (`double` PLY coordinates in a survey frame) travel as
//! [`placed::PlacedSplats`]: an f64 origin beside f32 means, kept by the PLY and GLB writers and
//! refused with the format's range by SPZ, `.splat` and compressed PLY.
//!
//! Every reader returns splats in the training parametrisation below; every writer checks its input
//! once with [`GaussianSplats::check_shapes`] and, where the format cannot hold them, rejects
//! non-finite values with the splat index: before it writes a byte, or (the parallel INRIA PLY
//! writer, which checks each chunk as it builds it) before the output replaces anything — the
//! temporary file is removed and an existing output kept.

pub mod compressed_ply;
pub mod convert;
pub mod dot_splat;
pub mod glb;
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
