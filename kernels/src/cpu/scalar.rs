//! The float type the CPU twin is generic over.
//!
//! Production renders run in `f32` (the public API); the finite-difference gradient tests run the very
//! same code in `f64`, so they can use tiny steps and tight tolerances. The trait holds only what the
//! rasterizer needs.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// A real number type: implemented for `f32` and `f64`.
pub trait Scalar:
    Copy
    + Debug
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Converts from `f64` (rounding for `f32`).
    fn of(v: f64) -> Self;
    /// Converts from `f32` exactly.
    fn from_f32(v: f32) -> Self;
    /// Converts to `f32` (rounding for `f64`).
    fn to_f32(self) -> f32;
    /// Converts to `f64` exactly.
    fn to_f64(self) -> f64;
    /// eˣ.
    fn exp(self) -> Self;
    /// eˣ for the rasterizer's per-pixel `e^(−σ)`, inlined: for `f32` an all-`f32` polynomial
    /// ([`expf_inline`], within 1 ulp of libm, the same operations as the SIMD loops' lane-wise
    /// version so both give the same bits); for `f64` the library `exp` (the finite-difference tests
    /// want full double accuracy).
    fn exp_inline(self) -> Self;
    /// Natural log.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Smallest integer ≥ self.
    fn ceil(self) -> Self;
    /// Largest integer ≤ self.
    fn floor(self) -> Self;
    /// |self|: the sign bit cleared (also on NaN and −0), as x86 `andnot` with −0 does lane-wise.
    fn abs(self) -> Self;
    /// Neither NaN nor ±∞.
    fn is_finite(self) -> bool;
    /// The larger of the two (IEEE `max`: a NaN argument loses).
    fn max(self, other: Self) -> Self;
    /// The smaller of the two (IEEE `min`: a NaN argument loses).
    fn min(self, other: Self) -> Self;
}

/// Cody–Waite split of ln 2 for [`expf_inline`]: this high part has few significant bits, so
/// `k·EXPF_LN2_HI` is exact for the |k| ≤ 127 that occur, and `EXPF_LN2_HI + EXPF_LN2_LO` is ln 2 to
/// about 1e-11 (Cephes `expf.c`).
pub(crate) const EXPF_LN2_HI: f32 = f32::from_bits(0x3f31_8000); // 0.693359375
/// See [`EXPF_LN2_HI`].
pub(crate) const EXPF_LN2_LO: f32 = -2.121_944_4e-4;
/// Coefficients of p(r), highest degree first, with e^r ≈ 1 + r + r²·p(r) on |r| ≤ ln2/2 (Cephes
/// `expf.c`, S. L. Moshier; relative error about 1e-7).
pub(crate) const EXPF_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5, // Cephes 5.0000001201e-1, which rounds to 0.5 in f32
];
/// 1.5·2²³: adding it to |v| < 2²² rounds v to an integer held in the low mantissa bits.
pub(crate) const EXPF_ROUND: f32 = 12_582_912.0;
/// Below this argument the result is subnormal, where the exponent trick does not apply.
pub(crate) const EXPF_MIN_ARG: f32 = -87.0;

/// eˣ in `f32` with `f32` arithmetic only, inlinable (no libm call, so no spill of the caller's
/// SSE registers around it, and four lanes per SSE instruction in `simd.rs`).
///
/// `x = k·ln2 + r` with k = round(x·log₂e) (by the 1.5·2²³ shift) and |r| ≤ ln2/2 (two-constant
/// Cody–Waite reduction), `e^r = 1 + r + r²·p(r)` with p of degree 5, then `· 2^k` built in the
/// exponent bits. Every step is a plain IEEE `f32` operation in a fixed order (no FMA), so the SIMD
/// loops, which do the same operations per lane, return the same bits. Within 1 ulp of libm on
/// `[−87, 0]`, and equal to it for 99 % of arguments (test
/// `expf_inline_is_within_one_ulp_of_libm`). Arguments outside `[−87, 88)` (which the rasterizer
/// never passes: its arguments are `−σ ∈ [−5.6, 0]`), ±∞ and NaN go to the library `exp`.
///
/// Source: the Cephes `expf` algorithm and coefficients (S. L. Moshier, Cephes Math Library).
#[inline(always)]
pub fn expf_inline(x: f32) -> f32 {
    // NaN is outside every range, so it goes to libm too.
    if !(EXPF_MIN_ARG..88.0).contains(&x) {
        return x.exp();
    }
    let z = x * std::f32::consts::LOG2_E + EXPF_ROUND;
    let k = z.to_bits() as i32 - EXPF_ROUND.to_bits() as i32;
    let kf = z - EXPF_ROUND;
    let r = x - kf * EXPF_LN2_HI;
    let r = r - kf * EXPF_LN2_LO;
    let mut p = EXPF_POLY[0];
    for &c in &EXPF_POLY[1..] {
        p = p * r + c;
    }
    let y = (p * (r * r) + r) + 1.0;
    y * f32::from_bits(((k + 127) as u32) << 23)
}

macro_rules! impl_scalar {
    ($t:ty, $exp_inline:path) => {
        impl Scalar for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)]
            fn of(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn exp_inline(self) -> Self {
                $exp_inline(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
        }
    };
}

impl_scalar!(f32, expf_inline);
impl_scalar!(f64, f64::exp);

#[cfg(test)]
mod tests {
    use super::*;

    /// The inlined `expf` against libm over `[−87, 0]` (every 97th float): at most one ulp apart, 99 %
    /// identical (measured: 11 435 783 of 11 532 985).
    #[test]
    fn expf_inline_is_within_one_ulp_of_libm() {
        let (mut same, mut total, mut worst) = (0u64, 0u64, 0i64);
        let mut bits = 0x8000_0000u32; // −0
        while f32::from_bits(bits) >= EXPF_MIN_ARG {
            let x = f32::from_bits(bits);
            let (a, b) = (expf_inline(x), x.exp());
            let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
            assert!(ulps <= 1, "exp({x}): {a} vs libm {b}");
            worst = worst.max(ulps);
            same += u64::from(ulps == 0);
            total += 1;
            bits += 97;
        }
        println!(
            "expf_inline: {same} of {total} sampled arguments equal to libm, worst {worst} ulp"
        );
        assert!(same * 100 >= total * 99, "{same} of {total} identical");
        assert_eq!(expf_inline(0.0), 1.0);
        assert_eq!(expf_inline(-0.0), 1.0);
        for x in [-87.9f32, 88.5, -104.0, -200.0, f32::INFINITY] {
            assert_eq!(expf_inline(x), x.exp(), "exp({x})");
        }
        assert_eq!(expf_inline(f32::NEG_INFINITY), 0.0);
        assert!(expf_inline(f32::NAN).is_nan());
    }
}
