//! `f32` vectors for the SIMD tile loops of `simd.rs`: four lanes on SSE2 (the x86-64 baseline)
//! and eight on AVX2 (used when the CPU has it), behind one trait so both loops are written once.
//!
//! Every method is one IEEE operation per lane (no FMA, no approximate reciprocal), so a loop
//! written over [`Lanes`] computes, lane for lane, what the scalar loop computes. Masks are all-ones
//! / all-zeros lanes, as the compare instructions make them.

#![cfg(target_arch = "x86_64")]
// Each method is a thin wrapper around one or two intrinsics whose safety conditions are the
// trait's (see `Lanes`); an `unsafe` block per line would only repeat that.
#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

/// A vector of `N` `f32` lanes (or `u32` bit patterns in the same register).
///
/// # Safety
/// The methods are `unsafe` because the AVX2 implementation may only run on a CPU with AVX2
/// (checked by `simd::avx2()` before any call); loads and stores read or write `N` consecutive
/// elements at the pointer, which must be valid for them.
pub(crate) trait Lanes: Copy {
    /// Lanes per vector.
    const N: usize;
    unsafe fn splat(v: f32) -> Self;
    unsafe fn splat_bits(v: u32) -> Self;
    /// `[0, 1, …, N − 1]` as floats.
    unsafe fn iota() -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    unsafe fn load_bits(p: *const u32) -> Self;
    unsafe fn store_bits(self, p: *mut u32);
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn sub(self, o: Self) -> Self;
    unsafe fn mul(self, o: Self) -> Self;
    unsafe fn div(self, o: Self) -> Self;
    /// x86 `minps`: `self < o ? self : o` (so a NaN `self` gives `o`).
    unsafe fn min(self, o: Self) -> Self;
    unsafe fn lt(self, o: Self) -> Self;
    unsafe fn gt(self, o: Self) -> Self;
    unsafe fn le(self, o: Self) -> Self;
    /// Signed 32-bit integer `self > o` on the bit patterns.
    unsafe fn gt_i32(self, o: Self) -> Self;
    unsafe fn and(self, o: Self) -> Self;
    unsafe fn or(self, o: Self) -> Self;
    /// `!self & o`.
    unsafe fn andnot(self, o: Self) -> Self;
    /// `mask ? new : old` lane by lane (`mask` all-ones or all-zeros per lane).
    unsafe fn select(mask: Self, new: Self, old: Self) -> Self;
    unsafe fn xor(self, o: Self) -> Self;
    /// One bit per lane, lane 0 lowest: the lane's sign bit.
    unsafe fn movemask(self) -> u32;
    /// Lane-wise 32-bit integer `self − o` on the bit patterns.
    unsafe fn sub_i32(self, o: Self) -> Self;
    /// `2^k` for lane-wise integers k (bit patterns) with −126 ≤ k ≤ 127.
    unsafe fn pow2_i32(self) -> Self;
    /// The lanes, in the first `N` entries.
    unsafe fn to_array(self) -> [f32; 8];
}

/// Four SSE2 lanes.
#[derive(Clone, Copy)]
pub(crate) struct Sse(__m128);

// SAFETY (whole impl): SSE2 is part of the x86-64 baseline.
impl Lanes for Sse {
    const N: usize = 4;
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Sse(_mm_set1_ps(v))
    }
    #[inline(always)]
    unsafe fn splat_bits(v: u32) -> Self {
        Sse(_mm_castsi128_ps(_mm_set1_epi32(v as i32)))
    }
    #[inline(always)]
    unsafe fn iota() -> Self {
        Sse(_mm_set_ps(3.0, 2.0, 1.0, 0.0))
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Sse(unsafe { _mm_loadu_ps(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        unsafe { _mm_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    unsafe fn load_bits(p: *const u32) -> Self {
        Sse(unsafe { _mm_loadu_ps(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store_bits(self, p: *mut u32) {
        unsafe { _mm_storeu_ps(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        Sse(_mm_add_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        Sse(_mm_sub_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn mul(self, o: Self) -> Self {
        Sse(_mm_mul_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn div(self, o: Self) -> Self {
        Sse(_mm_div_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn min(self, o: Self) -> Self {
        Sse(_mm_min_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn lt(self, o: Self) -> Self {
        Sse(_mm_cmplt_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn gt(self, o: Self) -> Self {
        Sse(_mm_cmpgt_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn le(self, o: Self) -> Self {
        Sse(_mm_cmple_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn gt_i32(self, o: Self) -> Self {
        let (a, b) = (_mm_castps_si128(self.0), _mm_castps_si128(o.0));
        Sse(_mm_castsi128_ps(_mm_cmpgt_epi32(a, b)))
    }
    #[inline(always)]
    unsafe fn and(self, o: Self) -> Self {
        Sse(_mm_and_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        Sse(_mm_or_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn andnot(self, o: Self) -> Self {
        Sse(_mm_andnot_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        Sse(_mm_xor_ps(self.0, o.0))
    }
    #[inline(always)]
    unsafe fn select(mask: Self, new: Self, old: Self) -> Self {
        // SSE2 has no blend: (mask & new) | (!mask & old).
        Sse(_mm_or_ps(
            _mm_and_ps(mask.0, new.0),
            _mm_andnot_ps(mask.0, old.0),
        ))
    }
    #[inline(always)]
    unsafe fn movemask(self) -> u32 {
        _mm_movemask_ps(self.0) as u32
    }
    #[inline(always)]
    unsafe fn sub_i32(self, o: Self) -> Self {
        let (a, b) = (_mm_castps_si128(self.0), _mm_castps_si128(o.0));
        Sse(_mm_castsi128_ps(_mm_sub_epi32(a, b)))
    }
    #[inline(always)]
    unsafe fn pow2_i32(self) -> Self {
        let k = _mm_add_epi32(_mm_castps_si128(self.0), _mm_set1_epi32(127));
        Sse(_mm_castsi128_ps(_mm_slli_epi32::<23>(k)))
    }
    #[inline(always)]
    unsafe fn to_array(self) -> [f32; 8] {
        let mut out = [0.0f32; 8];
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), self.0) };
        out
    }
}

/// Eight AVX2 lanes. Only constructed after `simd::avx2()` said the CPU has AVX2.
#[derive(Clone, Copy)]
pub(crate) struct Avx(__m256);

impl Lanes for Avx {
    const N: usize = 8;
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn splat(v: f32) -> Self {
        Avx(_mm256_set1_ps(v))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn splat_bits(v: u32) -> Self {
        Avx(_mm256_castsi256_ps(_mm256_set1_epi32(v as i32)))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn iota() -> Self {
        Avx(_mm256_set_ps(7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load(p: *const f32) -> Self {
        Avx(unsafe { _mm256_loadu_ps(p) })
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store(self, p: *mut f32) {
        unsafe { _mm256_storeu_ps(p, self.0) }
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_bits(p: *const u32) -> Self {
        Avx(unsafe { _mm256_loadu_ps(p.cast()) })
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn store_bits(self, p: *mut u32) {
        unsafe { _mm256_storeu_ps(p.cast(), self.0) }
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn add(self, o: Self) -> Self {
        Avx(_mm256_add_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sub(self, o: Self) -> Self {
        Avx(_mm256_sub_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mul(self, o: Self) -> Self {
        Avx(_mm256_mul_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn div(self, o: Self) -> Self {
        Avx(_mm256_div_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn min(self, o: Self) -> Self {
        Avx(_mm256_min_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn lt(self, o: Self) -> Self {
        Avx(_mm256_cmp_ps::<_CMP_LT_OS>(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn gt(self, o: Self) -> Self {
        Avx(_mm256_cmp_ps::<_CMP_GT_OS>(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn le(self, o: Self) -> Self {
        Avx(_mm256_cmp_ps::<_CMP_LE_OS>(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn gt_i32(self, o: Self) -> Self {
        let (a, b) = (_mm256_castps_si256(self.0), _mm256_castps_si256(o.0));
        Avx(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, b)))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn and(self, o: Self) -> Self {
        Avx(_mm256_and_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn or(self, o: Self) -> Self {
        Avx(_mm256_or_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn andnot(self, o: Self) -> Self {
        Avx(_mm256_andnot_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn xor(self, o: Self) -> Self {
        Avx(_mm256_xor_ps(self.0, o.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn select(mask: Self, new: Self, old: Self) -> Self {
        // One instruction; picks by each lane's sign bit, which a compare mask sets with the rest.
        Avx(_mm256_blendv_ps(old.0, new.0, mask.0))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn movemask(self) -> u32 {
        _mm256_movemask_ps(self.0) as u32
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn sub_i32(self, o: Self) -> Self {
        let (a, b) = (_mm256_castps_si256(self.0), _mm256_castps_si256(o.0));
        Avx(_mm256_castsi256_ps(_mm256_sub_epi32(a, b)))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pow2_i32(self) -> Self {
        let k = _mm256_add_epi32(_mm256_castps_si256(self.0), _mm256_set1_epi32(127));
        Avx(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(k)))
    }
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn to_array(self) -> [f32; 8] {
        let mut out = [0.0f32; 8];
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) };
        out
    }
}
