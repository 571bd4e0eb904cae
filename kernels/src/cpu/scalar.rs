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
    /// eˣ for the rasterizer's per-pixel `e^(−σ)`, inlined: for `f32` the table-driven algorithm of
    /// glibc / musl `expf` ([`expf_inline`], ≤ 0.502 ulp, results equal to the non-FMA libm build);
    /// for `f64` the library `exp` (the finite-difference tests want full double accuracy).
    fn exp_inline(self) -> Self;
    /// Natural log.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Smallest integer ≥ self.
    fn ceil(self) -> Self;
    /// Largest integer ≤ self.
    fn floor(self) -> Self;
    /// Neither NaN nor ±∞.
    fn is_finite(self) -> bool;
    /// The larger of the two (IEEE `max`: a NaN argument loses).
    fn max(self, other: Self) -> Self;
    /// The smaller of the two (IEEE `min`: a NaN argument loses).
    fn min(self, other: Self) -> Self;
}

/// `tab[i] = bits(2^(i/32)) − (i << 47)`: 2^(k/32) for an integer k is
/// `from_bits(tab[k % 32] + (k << 47))` (ARM optimized-routines / glibc / musl `exp2f_data`).
pub(crate) const EXP2F_TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// eˣ in `f32`, inlinable (no libm call, so no spill of the caller's SSE registers around it).
///
/// The algorithm of glibc's / musl's `expf` (ARM optimized-routines, Szabolcs Nagy 2017; MIT):
/// `x·32/ln2 = k + r` with integer k and |r| ≤ ½, `eˣ = 2^(k/32) · p(r)` with a cubic p, all in
/// `f64`, rounded once to `f32`: ≤ 0.502 ulp, and bit-identical to libm's non-FMA build (libm's FMA
/// build can differ in the last bit in rare cases). Arguments with |x| ≥ 88 (overflow, underflow,
/// ±∞, NaN) go to the library `exp`.
#[inline(always)]
pub fn expf_inline(x: f32) -> f32 {
    if x.abs() >= 88.0 || x.is_nan() {
        return x.exp();
    }
    const N: f64 = 32.0;
    const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000); // 0x1.8p52
    let inv_ln2_n = f64::from_bits(0x3ff7_1547_652b_82fe) * N;
    let c0 = f64::from_bits(0x3fac_6af8_4b91_2394) / N / N / N;
    let c1 = f64::from_bits(0x3fce_bfce_50fa_c4f3) / N / N;
    let c2 = f64::from_bits(0x3fe6_2e42_ff0c_52d6) / N;
    let z = inv_ln2_n * f64::from(x);
    // Round z to an integer (ties to even) with the 1.5·2⁵² shift; its low bits are k.
    let kd = z + SHIFT;
    let ki = kd.to_bits();
    let kd = kd - SHIFT;
    let r = z - kd;
    let t = EXP2F_TAB[(ki % 32) as usize].wrapping_add(ki << (52 - 5));
    let s = f64::from_bits(t);
    let p = c0 * r + c1;
    let r2 = r * r;
    let y = c2 * r + 1.0;
    let y = p * r2 + y;
    (y * s) as f32
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

    /// The inlined `expf` against libm over the rasterizer's argument range `[−6, 0]` (every
    /// 97th float) plus the special cases: at most one ulp apart, mostly identical.
    #[test]
    fn expf_inline_matches_libm() {
        let (mut same, mut total) = (0u64, 0u64);
        let mut bits = 0x8000_0000u32; // −0
        while f32::from_bits(bits) >= -6.0 {
            let x = f32::from_bits(bits);
            let (a, b) = (expf_inline(x), x.exp());
            let ulps = (a.to_bits() as i64 - b.to_bits() as i64).abs();
            assert!(ulps <= 1, "exp({x}): {a} vs libm {b}");
            same += u64::from(ulps == 0);
            total += 1;
            bits += 97;
        }
        println!("expf_inline: {same} of {total} sampled arguments bit-identical to libm");
        assert!(same * 1000 >= total * 999, "{same} of {total} identical");
        for x in [
            0.0f32,
            1.0,
            -1.0,
            10.0,
            -87.9,
            88.5,
            -104.0,
            -200.0,
            f32::INFINITY,
        ] {
            assert_eq!(expf_inline(x), x.exp(), "exp({x})");
        }
        assert_eq!(expf_inline(f32::NEG_INFINITY), 0.0);
        assert!(expf_inline(f32::NAN).is_nan());
    }
}
