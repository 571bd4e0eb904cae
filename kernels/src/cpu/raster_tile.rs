//! What the two raster passes (`rasterize_forward.rs`, `rasterize_backward.rs`) and their SIMD
//! loops (`simd.rs`) share about one tile: its pixel count ([`PIXELS`]), the gathered per-splat
//! record the pixel loops read ([`TileSplat`]), the per-splat screen-space gradient the backward
//! loops write ([`ScreenGrad`]) and the fixed lane-sum order every backward path uses
//! ([`SUM_LANES`], [`lane_tree`]). A file of its own so that the SIMD loops and the scalar passes
//! that call them both import it, and neither imports the other's types.

use super::project::ProjectedSplat;
use super::scalar::Scalar;
use crate::consts::{ALPHA_THRESHOLD, TILE_SIZE};

/// Pixels in a tile.
pub(crate) const PIXELS: usize = (TILE_SIZE * TILE_SIZE) as usize;

/// The per-splat data the per-pixel loop reads, gathered contiguously per tile.
#[derive(Debug, Clone, Copy, Default)]
pub struct TileSplat<T> {
    /// Screen centre, pixels.
    pub xy: [T; 2],
    /// Conic `(a, b, c)`, 1/pixels².
    pub conic: [T; 3],
    /// Opacity in (0, 1).
    pub opacity: T,
    /// Largest σ at which `opacity·e^(−σ)` can still reach `ALPHA_THRESHOLD` (plus a safety margin):
    /// a cheap test that skips the `exp` for most far pixels without changing which pixels pass.
    pub sigma_cut: T,
    /// Half-extent `(x, y)` in pixels of the ellipse `σ ≤ sigma_cut`: outside the box
    /// `xy ± extent` no pixel can pass [`splat_hit`], so the loops do not visit it. NaN/∞ when the
    /// box is unbounded (then the whole tile is visited).
    ///
    /// [`splat_hit`]: super::rasterize_forward::splat_hit
    pub extent: [T; 2],
    /// Clamped colour `[3]`.
    pub color: [T; 3],
    /// `1 / conic.a`, for the row chords of [`TileSplat::row_span`].
    pub inv_a: T,
}

impl<T: Scalar> TileSplat<T> {
    /// Gathers the rasterizer's view of a projected splat.
    #[inline]
    pub fn new(p: &ProjectedSplat<T>) -> Self {
        // ln(opacity / ALPHA_THRESHOLD) + 1e-3: the exact `α < ALPHA_THRESHOLD` test still follows.
        let sigma_cut = (p.opacity / T::from_f32(ALPHA_THRESHOLD)).ln() + T::of(1e-3);
        // {d : ½dᵀQd ≤ s} has x half-width sqrt(2s·(Q⁻¹)ₓₓ), (Q⁻¹)ₓₓ = c / (ac − b²).
        let [a, b, c] = p.conic;
        let det = a * c - b * b;
        let two_s = T::of(2.0) * sigma_cut.max(T::ZERO);
        let extent = [(two_s * c / det).sqrt(), (two_s * a / det).sqrt()];
        Self {
            xy: p.mean2d,
            conic: p.conic,
            opacity: p.opacity,
            sigma_cut,
            extent,
            color: p.color,
            inv_a: T::ONE / a,
        }
    }

    /// The pixels `[x0, x1) × [y0, y1)` of the tile `[tx0, tx1) × [ty0, ty1)` that this splat can
    /// touch (conservative by one pixel on each side; the exact test is [`splat_hit`]).
    ///
    /// [`splat_hit`]: super::rasterize_forward::splat_hit
    #[inline(always)]
    pub fn pixel_rect(&self, tx0: usize, tx1: usize, ty0: usize, ty1: usize) -> [usize; 4] {
        let span = |c: T, e: T, lo: usize, hi: usize| -> (usize, usize) {
            if !e.is_finite() {
                return (lo, hi);
            }
            let half = T::of(0.5);
            // Pixel x passes only if |c − (x + ½)| ≤ e, i.e. x ∈ [c − e − ½, c + e − ½].
            let a = floor_clamp(c - e - half, lo, hi);
            // ceil(v) + 1 clamped to [lo, hi]: clamp v to [lo − 1, hi] first (same result, as
            // the bounds are integers), so the value stays small and NaN still ends at `lo`.
            let v = (c + e - half).to_f64().max(lo as f64 - 1.0).min(hi as f64);
            let t = v as i64 as f64; // truncation toward zero
            let ceil = if t < v { t + 1.0 } else { t };
            let b = (ceil + 1.0).max(lo as f64).min(hi as f64) as usize;
            (a, b)
        };
        let (x0, x1) = span(self.xy[0], self.extent[0], tx0, tx1);
        let (y0, y1) = span(self.xy[1], self.extent[1], ty0, ty1);
        [x0, x1, y0, y1]
    }

    /// The pixels `[x0', x1')` of row `py` (pixel-centre y) inside `[x0, x1)` that can pass
    /// [`splat_hit`]: the chord of the ellipse `σ ≤ sigma_cut` at that row, widened by one pixel each
    /// side (conservative; the exact test is [`splat_hit`]).
    ///
    /// [`splat_hit`]: super::rasterize_forward::splat_hit
    #[inline(always)]
    pub fn row_span(&self, py: T, x0: usize, x1: usize) -> (usize, usize) {
        let [a, b, c] = self.conic;
        let dy = self.xy[1] - py;
        // ½(a·dx² + 2b·dy·dx + c·dy²) ≤ s  ⇔  a·dx² + 2b·dy·dx + (c·dy² − 2s) ≤ 0.
        let disc = b * b * dy * dy - a * (c * dy * dy - T::of(2.0) * self.sigma_cut);
        if !(a > T::ZERO && disc.is_finite()) {
            return (x0, x1);
        }
        if disc < T::ZERO {
            return (x0, x0);
        }
        let root = disc.sqrt();
        // Multiplying by the precomputed 1/a instead of dividing moves the roots by an ulp or so; the
        // one-pixel widening below absorbs that.
        let (lo, hi) = ((-b * dy - root) * self.inv_a, (-b * dy + root) * self.inv_a);
        // dx = xy.x − (x + ½) ∈ [lo, hi]  ⇔  x ∈ [xy.x − hi − ½, xy.x − lo − ½].
        let half = T::of(0.5);
        let s = floor_clamp(self.xy[0] - hi - half - T::ONE, x0, x1);
        let e = ceil_clamp(self.xy[0] - lo - half + T::ONE, x0, x1);
        (s, e.max(s))
    }
}

/// `clamp(floor(v), lo, hi)` as an index, NaN giving `lo`, without a libm `floor` call (x86-64
/// baseline has no rounding instruction). Exact: floor is monotone and the bounds are integers, so
/// clamping first and truncating the (then non-negative) value gives the same integer. The clamps
/// are compare-selects (a NaN `v` fails `v > lo` and so becomes `lo`, as with IEEE `max`).
#[inline(always)]
fn floor_clamp<T: Scalar>(v: T, lo: usize, hi: usize) -> usize {
    let (flo, fhi) = (T::of(lo as f64), T::of(hi as f64));
    let c = if v > flo { v } else { flo };
    let c = if c < fhi { c } else { fhi };
    c.to_f64() as usize
}

/// `clamp(ceil(v), lo, hi)` as an index, NaN giving `lo`; exact for the same reason as
/// [`floor_clamp`].
#[inline(always)]
fn ceil_clamp<T: Scalar>(v: T, lo: usize, hi: usize) -> usize {
    let (flo, fhi) = (T::of(lo as f64), T::of(hi as f64));
    let c = if v > flo { v } else { flo };
    let c = if c < fhi { c } else { fhi };
    let t = c.to_f64() as usize;
    if T::of(t as f64) < c { t + 1 } else { t }
}

/// ∂L/∂ of one splat's screen-space quantities.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScreenGrad<T> {
    /// ∂L/∂mean2d, per pixel of displacement.
    pub mean2d: [T; 2],
    /// ∂L/∂conic `(a, b, c)`.
    pub conic: [T; 3],
    /// ∂L/∂colour (clamped colour) `[3]`.
    pub color: [T; 3],
    /// ∂L/∂opacity.
    pub opacity: T,
}

impl<T: Scalar> ScreenGrad<T> {
    #[inline(always)]
    pub(super) fn add(&mut self, o: &Self) {
        for k in 0..2 {
            self.mean2d[k] += o.mean2d[k];
        }
        for k in 0..3 {
            self.conic[k] += o.conic[k];
            self.color[k] += o.color[k];
        }
        self.opacity += o.opacity;
    }
}

/// Lane sums per splat gradient field in the backward pass, for every path (AVX2: one vector;
/// SSE2: two, alternating by step; scalar: pixel `x` of a row in sum `(x − row start) mod 8`).
pub(crate) const SUM_LANES: usize = 8;

/// `((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))` for lane values `v(k)`, k < [`SUM_LANES`].
#[inline(always)]
pub(crate) fn lane_tree<T: Scalar>(v: impl Fn(usize) -> T) -> T {
    ((v(0) + v(1)) + (v(2) + v(3))) + ((v(4) + v(5)) + (v(6) + v(7)))
}
