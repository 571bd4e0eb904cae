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

macro_rules! impl_scalar {
    ($t:ty) => {
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

impl_scalar!(f32);
impl_scalar!(f64);
