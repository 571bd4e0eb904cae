//! `rasterize_backward`: ∂L/∂pixel → per-splat ∂L/∂(mean2d, conic, colour, opacity), by walking each
//! pixel's contributors back to front.
//!
//! Source: gsplat `RasterizeToPixels3DGSBwd.cu` / INRIA `backward.cu::renderCUDA`. Going back from
//! `T_final`, the transmittance in front of splat i is recovered as `T_i = T_{i+1} / (1 − α_i)` and
//! the colour composited behind it is kept in a running sum, giving
//! `∂C/∂α_i = c_i·T_i − (Σ_{j>i} c_j α_j T_j + T_final·bg) / (1 − α_i)`.
//! Through `α = opacity·e^(−σ)` (zero when clamped at MAX_ALPHA): `∂σ/∂mean2d = (a·dx + b·dy, b·dx + c·dy)`,
//! `∂σ/∂conic = (½dx², dx·dy, ½dy²)`.
//!
//! Determinism without atomics: each tile writes the gradients of its own slice of the sorted
//! intersection list (tiles own disjoint slices), pixels in a fixed order; the slices are then summed
//! per splat sequentially in list order. The result is bit-identical for any thread count.
//! No allocation per pixel: one gather buffer per worker. Each splat's gradient is summed in eight
//! lane sums (pixel `x` of a row of its pixel rectangle in lane `(x − row start) mod 8`), combined
//! once per splat ([`combine_lanes`]). For `f32` on x86-64 the per-tile loop runs in `simd.rs`
//! (AVX2 or SSE2, eight or four pixels per step, one per lane), bit-identical to the scalar loop
//! here, which remains the `f64` path.
//!
//! AbsGS statistic ([`rasterize_backward_with`]): besides the signed sums, each splat also gets
//! `(Σ_p |∂L_p/∂mean2d_x|, Σ_p |∂L_p/∂mean2d_y|)` over the pixels p it touches, so contributions of
//! opposite sign no longer cancel. Source: Ye et al., "AbsGS: Recovering Fine Details for 3D
//! Gaussian Splatting" (2024), and gsplat's `absgrad=True` (`v_means2d_abs`). Summed in the same
//! lanes and the same order as the signed sums, so every path gives the same bits here too.

use rayon::prelude::*;

use super::project::ProjectedSplat;
pub use super::raster_tile::ScreenGrad;
use super::raster_tile::{PIXELS, SUM_LANES, TileSplat, lane_tree};
use super::rasterize_forward::{splat_hit, tile_splats};
use super::scalar::Scalar;
use crate::consts::{MAX_ALPHA, TILE_SIZE};

/// Per-worker scratch of the backward tile loop: gathered splats and per-pixel state of one tile.
struct BwdScratch<T> {
    splats: Vec<TileSplat<T>>,
    /// Transmittance in front of the splat being processed (starts at `T_final`).
    t: [T; PIXELS],
    t_final: [T; PIXELS],
    /// Σ colour·α·T of the splats behind the one being processed.
    behind: [[T; 3]; PIXELS],
    /// ∂L/∂pixel.
    g: [[T; 3]; PIXELS],
    /// background · ∂L/∂pixel.
    bg_dot: [T; PIXELS],
    /// Contributor count (0 for pixels with zero upstream gradient).
    n: [u32; PIXELS],
    /// State of the `f32` SIMD loop ([`super::simd`]).
    simd: Box<super::simd::SimdBwdTile>,
}

/// Runs the tile through the SIMD loop of [`super::simd`] when `T` is `f32` on x86-64 (writing
/// `grads`, and `abs` when it is not empty, bit for bit as the scalar loop would); returns whether
/// it did.
#[inline]
fn backward_tile_simd<T: Scalar>(
    sc: &mut BwdScratch<T>,
    rect: [usize; 4],
    grads: &mut [ScreenGrad<T>],
    abs: &mut [[T; 2]],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::any::Any;
        let BwdScratch {
            splats,
            t_final,
            g,
            bg_dot,
            n,
            simd,
            ..
        } = sc;
        if super::simd::enabled()
            && let (Some(splats), Some(t_final), Some(g), Some(bg_dot)) = (
                (splats as &dyn Any).downcast_ref::<Vec<TileSplat<f32>>>(),
                (t_final as &dyn Any).downcast_ref::<[f32; PIXELS]>(),
                (g as &dyn Any).downcast_ref::<[[f32; 3]; PIXELS]>(),
                (bg_dot as &dyn Any).downcast_ref::<[f32; PIXELS]>(),
            )
        {
            // SAFETY: the downcasts above succeeded, so `T` is `f32` and `ScreenGrad<T>` is
            // `ScreenGrad<f32>`: the cast only renames the type of the same slice.
            let grads = unsafe { &mut *(grads as *mut [ScreenGrad<T>] as *mut [ScreenGrad<f32>]) };
            // SAFETY: as above, `[T; 2]` is `[f32; 2]`.
            let abs = unsafe { &mut *(abs as *mut [[T; 2]] as *mut [[f32; 2]]) };
            let abs = (!abs.is_empty()).then_some(abs);
            super::simd::backward_tile_f32(simd, splats, rect, t_final, g, bg_dot, n, grads, abs);
            return true;
        }
    }
    let _ = (sc, rect, grads, abs);
    false
}

/// One splat's gradient from its [`SUM_LANES`] lane sums: a pairwise tree per field,
/// `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`.
///
/// Why lanes: the SIMD loops sum several pixels of a row at once, one pixel per lane (pixel `x` of
/// a row starting at `rx0` in lane `(x − rx0) mod 8`), and add the lanes once per splat. The scalar
/// loop keeps the same eight sums so that every path gives the same bits.
#[inline(always)]
fn combine_lanes<T: Scalar>(l: &[ScreenGrad<T>; SUM_LANES]) -> ScreenGrad<T> {
    ScreenGrad {
        mean2d: [lane_tree(|k| l[k].mean2d[0]), lane_tree(|k| l[k].mean2d[1])],
        conic: [
            lane_tree(|k| l[k].conic[0]),
            lane_tree(|k| l[k].conic[1]),
            lane_tree(|k| l[k].conic[2]),
        ],
        color: [
            lane_tree(|k| l[k].color[0]),
            lane_tree(|k| l[k].color[1]),
            lane_tree(|k| l[k].color[2]),
        ],
        opacity: lane_tree(|k| l[k].opacity),
    }
}

/// Per-splat screen-space gradients `[N]` given `grad_image [H, W, 3]` and the forward state.
#[allow(clippy::too_many_arguments)]
pub fn rasterize_backward<T: Scalar>(
    projected: &[ProjectedSplat<T>],
    sorted_ids: &[u32],
    tile_ranges: &[[u32; 2]],
    final_t: &[T],
    n_contrib: &[u32],
    width: u32,
    height: u32,
    background: [T; 3],
    grad_image: &[T],
) -> Vec<ScreenGrad<T>> {
    rasterize_backward_with(
        projected,
        sorted_ids,
        tile_ranges,
        final_t,
        n_contrib,
        width,
        height,
        background,
        grad_image,
        false,
    )
    .0
}

/// [`rasterize_backward`], plus the AbsGS statistic when `absgrad`: returns the same screen-space
/// gradients `[N]` (bit for bit) and, with `absgrad`, `[N, 2]`
/// `(Σ_p |∂L_p/∂mean2d_x|, Σ_p |∂L_p/∂mean2d_y|)` per pixel of displacement, where `∂L_p/∂mean2d`
/// is pixel p's term of `ScreenGrad::mean2d` (0 for splats no pixel reaches); without `absgrad`
/// an empty vector (and no extra work). Source: AbsGS (Ye et al. 2024); gsplat
/// `rasterize_to_pixels` with `absgrad=True`.
#[allow(clippy::too_many_arguments)]
pub fn rasterize_backward_with<T: Scalar>(
    projected: &[ProjectedSplat<T>],
    sorted_ids: &[u32],
    tile_ranges: &[[u32; 2]],
    final_t: &[T],
    n_contrib: &[u32],
    width: u32,
    height: u32,
    background: [T; 3],
    grad_image: &[T],
    absgrad: bool,
) -> (Vec<ScreenGrad<T>>, Vec<[T; 2]>) {
    let state = ForwardState {
        projected,
        sorted_ids,
        tile_ranges,
        final_t,
        n_contrib,
        width,
        height,
    };
    backward_tiles(&state, background, grad_image, absgrad)
}

/// The forward state the backward tile loop reads (see [`rasterize_backward`]).
struct ForwardState<'a, T> {
    projected: &'a [ProjectedSplat<T>],
    sorted_ids: &'a [u32],
    tile_ranges: &'a [[u32; 2]],
    final_t: &'a [T],
    n_contrib: &'a [u32],
    width: u32,
    height: u32,
}

/// The backward tile loop; with `absgrad` also the `[N, 2]` absolute sums (else an empty vector).
fn backward_tiles<T: Scalar>(
    st: &ForwardState<'_, T>,
    background: [T; 3],
    grad_image: &[T],
    absgrad: bool,
) -> (Vec<ScreenGrad<T>>, Vec<[T; 2]>) {
    let mut per_isect = vec![ScreenGrad::<T>::default(); st.sorted_ids.len()];
    // `[I, 2]` absolute mean2d sums per intersection, only when asked for.
    let mut abs_isect = vec![[T::ZERO; 2]; if absgrad { st.sorted_ids.len() } else { 0 }];
    let parts = split_by_tile(st.tile_ranges, &mut per_isect, &mut abs_isect, absgrad);
    let all = tile_splats(st.projected);
    let inputs = TileInputs {
        st,
        all: &all,
        background,
        grad_image,
        absgrad,
    };
    parts
        .into_par_iter()
        .for_each_init(BwdScratch::new, |sc: &mut BwdScratch<T>, part| {
            backward_tile(&inputs, sc, part);
        });
    sum_per_splat(st, &per_isect, &abs_isect, absgrad)
}

/// One tile's slice of the intersection buffers: `(tile, [I_tile] gradients, [I_tile, 2] absolute
/// sums)`, the latter empty without `absgrad`.
type Part<'b, T> = (usize, &'b mut [ScreenGrad<T>], &'b mut [[T; 2]]);

/// Splits the intersection buffers along the (contiguous, tile-ordered) tile ranges; tiles with
/// no intersections get no part.
fn split_by_tile<'b, T>(
    tile_ranges: &[[u32; 2]],
    per_isect: &'b mut [ScreenGrad<T>],
    abs_isect: &'b mut [[T; 2]],
    absgrad: bool,
) -> Vec<Part<'b, T>> {
    let mut parts: Vec<Part<'b, T>> = Vec::with_capacity(tile_ranges.len());
    let mut rest: &mut [ScreenGrad<T>] = per_isect;
    let mut rest_abs: &mut [[T; 2]] = abs_isect;
    for (tile, r) in tile_ranges.iter().enumerate() {
        let len = (r[1] - r[0]) as usize;
        let (head, tail) = rest.split_at_mut(len);
        let (head_abs, tail_abs) = rest_abs.split_at_mut(if absgrad { len } else { 0 });
        if !head.is_empty() {
            parts.push((tile, head, head_abs));
        }
        rest = tail;
        rest_abs = tail_abs;
    }
    parts
}

/// What every tile of the backward loop reads.
struct TileInputs<'a, T> {
    st: &'a ForwardState<'a, T>,
    /// `[N]` [`TileSplat`] of every projected splat ([`tile_splats`]).
    all: &'a [TileSplat<T>],
    background: [T; 3],
    /// `[H, W, 3]` ∂L/∂pixel.
    grad_image: &'a [T],
    absgrad: bool,
}

impl<T: Scalar> BwdScratch<T> {
    fn new() -> Self {
        Self {
            splats: Vec::new(),
            t: [T::ZERO; PIXELS],
            t_final: [T::ZERO; PIXELS],
            behind: [[T::ZERO; 3]; PIXELS],
            g: [[T::ZERO; 3]; PIXELS],
            bg_dot: [T::ZERO; PIXELS],
            n: [0; PIXELS],
            simd: super::simd::SimdBwdTile::new(),
        }
    }
}

/// One tile of the backward loop: loads its pixels' state, gathers the splats that can contribute
/// and writes the gradients of its part of the intersection list, through the SIMD loop where it
/// applies, else the scalar one.
#[inline]
fn backward_tile<T: Scalar>(
    inputs: &TileInputs<'_, T>,
    sc: &mut BwdScratch<T>,
    (tile, grads, abs): Part<'_, T>,
) {
    let ForwardState {
        sorted_ids,
        tile_ranges,
        width,
        height,
        ..
    } = *inputs.st;
    let (w, h) = (width as usize, height as usize);
    let ts = TILE_SIZE as usize;
    let tiles_x = w.div_ceil(ts);
    let [start, _] = tile_ranges[tile];
    let (tx, ty) = (tile % tiles_x, tile / tiles_x);
    let rect = [
        tx * ts,
        ((tx + 1) * ts).min(w),
        ty * ts,
        ((ty + 1) * ts).min(h),
    ];
    let max_n = load_tile_pixels(inputs, sc, rect);
    // Only the first `max_n` entries of the tile's list can contribute to any pixel.
    sc.splats.clear();
    sc.splats.extend(
        sorted_ids[start as usize..start as usize + max_n]
            .iter()
            .map(|&id| inputs.all[id as usize]),
    );
    if backward_tile_simd(sc, rect, grads, abs) {
        return;
    }
    backward_tile_scalar(sc, rect, inputs.absgrad, grads, abs);
}

/// Fills the scratch's per-pixel state of the tile `rect` = `[x0, x1, y0, y1]`; returns the
/// largest contributor count, pixels with zero upstream gradient counting 0.
#[inline]
fn load_tile_pixels<T: Scalar>(
    inputs: &TileInputs<'_, T>,
    sc: &mut BwdScratch<T>,
    [x0, x1, y0, y1]: [usize; 4],
) -> usize {
    let TileInputs {
        background,
        grad_image,
        ..
    } = *inputs;
    let ForwardState {
        final_t,
        n_contrib,
        width,
        ..
    } = *inputs.st;
    let w = width as usize;
    let ts = TILE_SIZE as usize;
    let mut max_n = 0usize;
    for y in y0..y1 {
        for x in x0..x1 {
            let (li, pix) = ((y - y0) * ts + (x - x0), y * w + x);
            let g = [
                grad_image[pix * 3],
                grad_image[pix * 3 + 1],
                grad_image[pix * 3 + 2],
            ];
            // A pixel with zero upstream gradient contributes nothing: skip it entirely.
            let n = if g.iter().all(|&v| v == T::ZERO) {
                0
            } else {
                n_contrib[pix]
            };
            sc.n[li] = n;
            sc.g[li] = g;
            sc.t[li] = final_t[pix];
            sc.t_final[li] = final_t[pix];
            sc.behind[li] = [T::ZERO; 3];
            sc.bg_dot[li] = background[0] * g[0] + background[1] * g[1] + background[2] * g[2];
            max_n = max_n.max(n as usize);
        }
    }
    max_n
}

/// The scalar tile loop (the `f64` path, and `f32` where SIMD does not apply): the gathered
/// splats back to front; each pixel sees its contributors in exactly the reverse of the forward
/// order, and each splat's gradient is summed in lanes (see [`combine_lanes`]). Writes `grads`
/// (`[I_tile]`) and, with `absgrad`, `abs` (`[I_tile, 2]`).
#[inline]
fn backward_tile_scalar<T: Scalar>(
    sc: &mut BwdScratch<T>,
    [x0, x1, y0, y1]: [usize; 4],
    absgrad: bool,
    grads: &mut [ScreenGrad<T>],
    abs: &mut [[T; 2]],
) {
    let ts = TILE_SIZE as usize;
    let max_alpha = T::from_f32(MAX_ALPHA);
    let half = T::of(0.5);
    for (j, s) in sc.splats.iter().enumerate().rev() {
        let [rx0, rx1, ry0, ry1] = s.pixel_rect(x0, x1, y0, y1);
        // Lane sums per splat, as the SIMD loops keep them (see `combine_lanes`).
        let mut lanes = [ScreenGrad::<T>::default(); SUM_LANES];
        // |∂L_p/∂mean2d| lane sums, kept only with `absgrad`.
        let mut abs_lanes = [[T::ZERO; 2]; SUM_LANES];
        for y in ry0..ry1 {
            let py = T::of(y as f64 + 0.5);
            // The whole row of the pixel rectangle, as the SIMD loops walk it.
            let (sx0, sx1) = (rx0, rx1);
            // This row's pixels [sx0, sx1) of the tile's state, walked in step.
            let r = (y - y0) * ts + (sx0 - x0)..(y - y0) * ts + (sx1 - x0);
            let pixels = sc.t[r.clone()]
                .iter_mut()
                .zip(&mut sc.behind[r.clone()])
                .zip(&sc.n[r.clone()])
                .zip(&sc.g[r.clone()])
                .zip(&sc.t_final[r.clone()])
                .zip(&sc.bg_dot[r]);
            // Pixel centres x + ½, stepped exactly (small integers plus ½).
            let mut px = T::of(sx0 as f64 - 0.5);
            for (k, (((((t_px, behind), &n), g), &t_final), &bg_dot)) in pixels.enumerate() {
                px += T::ONE;
                if j as u32 >= n {
                    continue;
                }
                let Some(hit) = splat_hit(s, px, py) else {
                    continue;
                };
                let lane = k % SUM_LANES;
                let acc = &mut lanes[lane];
                let ra = T::ONE / (T::ONE - hit.alpha);
                let t = *t_px * ra;
                *t_px = t;
                let weight = hit.alpha * t;
                let mut v_alpha = T::ZERO;
                for ch in 0..3 {
                    acc.color[ch] += weight * g[ch];
                    v_alpha += (s.color[ch] * t - behind[ch] * ra) * g[ch];
                    behind[ch] += s.color[ch] * weight;
                }
                v_alpha -= t_final * ra * bg_dot;
                if s.opacity * hit.vis <= max_alpha {
                    let v_sigma = -s.opacity * hit.vis * v_alpha;
                    let (dx, dy) = (hit.dx, hit.dy);
                    acc.conic[0] += half * dx * dx * v_sigma;
                    acc.conic[1] += dx * dy * v_sigma;
                    acc.conic[2] += half * dy * dy * v_sigma;
                    let m = [
                        (s.conic[0] * dx + s.conic[1] * dy) * v_sigma,
                        (s.conic[1] * dx + s.conic[2] * dy) * v_sigma,
                    ];
                    acc.mean2d[0] += m[0];
                    acc.mean2d[1] += m[1];
                    acc.opacity += hit.vis * v_alpha;
                    if absgrad {
                        abs_lanes[lane][0] += m[0].abs();
                        abs_lanes[lane][1] += m[1].abs();
                    }
                }
            }
        }
        grads[j] = combine_lanes(&lanes);
        if absgrad {
            abs[j] = [0, 1].map(|c| lane_tree(|k| abs_lanes[k][c]));
        }
    }
}

/// Sums the per-intersection gradients per splat, sequentially in list order (deterministic):
/// `[N]` screen gradients and, with `absgrad`, `[N, 2]` absolute sums (else an empty vector).
fn sum_per_splat<T: Scalar>(
    st: &ForwardState<'_, T>,
    per_isect: &[ScreenGrad<T>],
    abs_isect: &[[T; 2]],
    absgrad: bool,
) -> (Vec<ScreenGrad<T>>, Vec<[T; 2]>) {
    let (n, sorted_ids) = (st.projected.len(), st.sorted_ids);
    let mut per_splat = vec![ScreenGrad::<T>::default(); n];
    for (k, &id) in sorted_ids.iter().enumerate() {
        per_splat[id as usize].add(&per_isect[k]);
    }
    let mut abs_splat = vec![[T::ZERO; 2]; if absgrad { n } else { 0 }];
    for (k, a) in abs_isect.iter().enumerate() {
        let sum = &mut abs_splat[sorted_ids[k] as usize];
        sum[0] += a[0];
        sum[1] += a[1];
    }
    (per_splat, abs_splat)
}
