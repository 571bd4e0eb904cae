//! SIMD versions of the forward and backward per-tile loops for `f32`: eight pixels of a row per
//! step with AVX2 when the CPU has it, else four with SSE2 (the x86-64 baseline), written once over
//! [`super::lanes::Lanes`].
//!
//! Bit-identical to the scalar loops of `rasterize_forward` / `rasterize_backward`: every lane
//! performs exactly the scalar per-pixel operations in the same order (σ, the `f32` polynomial
//! `expf` of [`super::scalar::expf_inline`], `min`, the threshold tests, `T·(1 − α)`, the colour
//! sums, the backward chain), and lanes that the scalar loop would skip keep their state through
//! selects. The backward's per-splat sums are kept in [`SUM_LANES`] lane sums whatever the vector
//! width (see `rasterize_backward::combine_lanes`), so SSE2, AVX2 and the scalar loop give the same
//! bits. The `f64` path (finite-difference tests) and other architectures use the scalar loops; the
//! test `simd_tile_loops_match_scalar_loops_bit_for_bit` checks that all paths agree.
//!
//! Rows: each splat visits the rows and columns of its pixel rectangle
//! ([`TileSplat::pixel_rect`]), not the exact chord of its ellipse on each row: computing the chord
//! (a square root and four roundings per row) cost more than the σ test on the few extra pixels.

// Elsewhere only the state types exist (the callers fall back to the scalar loops).
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::raster_tile::{PIXELS, SUM_LANES, TileSplat};
use crate::consts::TILE_SIZE;
#[cfg(target_arch = "x86_64")]
use crate::consts::{ALPHA_THRESHOLD, MAX_ALPHA};

#[cfg(target_arch = "x86_64")]
use super::lanes::{Avx, Lanes, Sse};

/// Test switch: route `f32` tiles through the scalar loops (to check both agree bit for bit).
#[cfg(test)]
pub(crate) static FORCE_SCALAR: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Test switch: use SSE2 even when the CPU has AVX2.
#[cfg(test)]
pub(crate) static FORCE_SSE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the `f32` tile loops take a SIMD path.
#[inline(always)]
pub(crate) fn enabled() -> bool {
    #[cfg(test)]
    {
        !FORCE_SCALAR.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(test))]
    {
        true
    }
}

/// Whether the SIMD path may use AVX2 (runtime CPU check, cached by `std`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn avx2() -> bool {
    #[cfg(test)]
    if FORCE_SSE.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    std::arch::is_x86_feature_detected!("avx2")
}

/// Pads the per-pixel arrays so a full-width step that starts on the last pixel stays in bounds
/// (the padding lanes are masked and written back unchanged).
const PADDED: usize = PIXELS + 8;

/// Per-pixel state of one tile, structure of arrays.
pub(crate) struct SimdTile {
    t: [f32; PADDED],
    r: [f32; PADDED],
    g: [f32; PADDED],
    b: [f32; PADDED],
    last: [u32; PADDED],
    /// All ones once the pixel stopped (transmittance threshold), else 0.
    done: [u32; PADDED],
}

impl SimdTile {
    pub(crate) fn new() -> Box<Self> {
        Box::new(Self {
            t: [1.0; PADDED],
            r: [0.0; PADDED],
            g: [0.0; PADDED],
            b: [0.0; PADDED],
            last: [0; PADDED],
            done: [0; PADDED],
        })
    }
}

/// Per-pixel state of the backward tile loop, structure of arrays, padded like [`SimdTile`].
pub(crate) struct SimdBwdTile {
    t: [f32; PADDED],
    t_final: [f32; PADDED],
    bg_dot: [f32; PADDED],
    n: [u32; PADDED],
    behind: [[f32; PADDED]; 3],
    g: [[f32; PADDED]; 3],
}

impl SimdBwdTile {
    pub(crate) fn new() -> Box<Self> {
        Box::new(Self {
            t: [0.0; PADDED],
            t_final: [0.0; PADDED],
            bg_dot: [0.0; PADDED],
            n: [0; PADDED],
            behind: [[0.0; PADDED]; 3],
            g: [[0.0; PADDED]; 3],
        })
    }
}

/// [`super::scalar::expf_inline`] lane by lane: the same `f32` operations in the same order, so
/// each lane's bits equal the scalar result for arguments in `[EXPF_MIN_ARG, 0]` (the rasterizer's
/// `−σ`, σ ∈ [0, sigma_cut]); a NaN lane stays NaN.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn expf_lanes<V: Lanes>(x: V) -> V {
    use super::scalar::{EXPF_LN2_HI, EXPF_LN2_LO, EXPF_POLY, EXPF_ROUND};
    // SAFETY: register arithmetic; the caller runs on a CPU with V's instructions.
    unsafe {
        let round = V::splat(EXPF_ROUND);
        let z = x.mul(V::splat(std::f32::consts::LOG2_E)).add(round);
        let k = z.sub_i32(round);
        let kf = z.sub(round);
        let r = x.sub(kf.mul(V::splat(EXPF_LN2_HI)));
        let r = r.sub(kf.mul(V::splat(EXPF_LN2_LO)));
        let mut p = V::splat(EXPF_POLY[0]);
        for &c in &EXPF_POLY[1..] {
            p = p.mul(r).add(V::splat(c));
        }
        let y = p.mul(r.mul(r)).add(r).add(V::splat(1.0));
        y.mul(k.pow2_i32())
    }
}

/// `mask ? new : old` lane by lane, with the vector's blend instruction where it has one.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn select<V: Lanes>(mask: V, new: V, old: V) -> V {
    // SAFETY: register arithmetic.
    unsafe { V::select(mask, new, old) }
}

/// `mask ? new : old` as `(mask & new) | (!mask & old)`: in the forward loop this measured faster
/// than AVX2's blend (82 → 48 ms on the `raster_stages` 100k bench).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn select_bits<V: Lanes>(mask: V, new: V, old: V) -> V {
    // SAFETY: register arithmetic.
    unsafe { mask.and(new).or(mask.andnot(old)) }
}

/// Composites `splats` (the tile's list, front to back) into the tile `[x0, x1) × [y0, y1)` and
/// writes per pixel (index `(y − y0)·16 + (x − x0)`) the transmittance, colour sum and last
/// contributor, exactly as the scalar loop would.
#[cfg(target_arch = "x86_64")]
pub(crate) fn forward_tile_f32(
    st: &mut SimdTile,
    splats: &[TileSplat<f32>],
    rect: [usize; 4],
    t_stop: f32,
    out_t: &mut [f32; PIXELS],
    out_rgb: &mut [[f32; 3]; PIXELS],
    out_last: &mut [u32; PIXELS],
) {
    if avx2() {
        // SAFETY: the CPU has AVX2 (checked just above).
        unsafe { forward_tile_avx2(st, splats, rect, t_stop) }
    } else {
        // SAFETY: SSE2 is part of the x86-64 baseline.
        unsafe { forward_tile::<Sse>(st, splats, rect, t_stop) }
    }
    for li in 0..PIXELS {
        out_t[li] = st.t[li];
        out_rgb[li] = [st.r[li], st.g[li], st.b[li]];
        out_last[li] = st.last[li];
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn forward_tile_avx2(
    st: &mut SimdTile,
    splats: &[TileSplat<f32>],
    rect: [usize; 4],
    t: f32,
) {
    // SAFETY: this function only runs on a CPU with AVX2.
    unsafe { forward_tile::<Avx>(st, splats, rect, t) }
}

/// The forward tile loop over `V` lanes; leaves the result in `st`.
///
/// # Safety
/// The CPU must have `V`'s instructions.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn forward_tile<V: Lanes>(
    st: &mut SimdTile,
    splats: &[TileSplat<f32>],
    [x0, x1, y0, y1]: [usize; 4],
    t_stop: f32,
) {
    let ts = TILE_SIZE as usize;
    st.t.fill(1.0);
    st.r.fill(0.0);
    st.g.fill(0.0);
    st.b.fill(0.0);
    st.last.fill(0);
    st.done.fill(0);
    let mut active = (x1 - x0) * (y1 - y0);
    // SAFETY: every V::N-lane load/store starts at an index `i ≤ PIXELS − 1` (a pixel of the
    // tile) and so ends at `i + N − 1 < PADDED`; the pointers come from the arrays of `st`, which
    // this function borrows mutably. The caller guarantees the instructions exist.
    unsafe {
        let half = V::splat(0.5);
        let one = V::splat(1.0);
        let zero = V::splat(0.0);
        let neg_zero = V::splat(-0.0);
        let lane = V::iota();
        let max_alpha = V::splat(MAX_ALPHA);
        let alpha_thr = V::splat(ALPHA_THRESHOLD);
        let t_stop_v = V::splat(t_stop);
        for (j, s) in splats.iter().enumerate() {
            if active == 0 {
                break;
            }
            let [rx0, rx1, ry0, ry1] = s.pixel_rect(x0, x1, y0, y1);
            let (ca, cb, cc) = (
                V::splat(s.conic[0]),
                V::splat(s.conic[1]),
                V::splat(s.conic[2]),
            );
            let mx = V::splat(s.xy[0]);
            let cut = V::splat(s.sigma_cut);
            let opacity = V::splat(s.opacity);
            let (cr, cg, cbl) = (
                V::splat(s.color[0]),
                V::splat(s.color[1]),
                V::splat(s.color[2]),
            );
            let contrib = V::splat_bits((j + 1) as u32);
            for y in ry0..ry1 {
                let py = (y as f64 + 0.5) as f32;
                let dy = V::splat(s.xy[1] - py);
                // Loop-invariant part of σ: (c·dy)·dy, as the scalar expression groups it.
                let cdd = cc.mul(dy).mul(dy);
                let mut x = rx0;
                while x < rx1 {
                    let i = (y - y0) * ts + (x - x0);
                    let rem = (rx1 - x).min(V::N);
                    let in_span = lane.lt(V::splat(rem as f32));
                    let px = V::splat((x as f64 + 0.5) as f32).add(lane);
                    let dx = mx.sub(px);
                    // σ = ½((a·dx)·dx + (c·dy)·dy) + (b·dx)·dy.
                    let quad = ca.mul(dx).mul(dx).add(cdd);
                    let sigma = half.mul(quad).add(cb.mul(dx).mul(dy));
                    let done = V::load_bits(st.done.as_ptr().add(i));
                    // Scalar: skip when σ < 0 or σ > cut (NaN passes, as there).
                    let skip = sigma.lt(zero).or(sigma.gt(cut));
                    let live = skip.or(done).andnot(in_span);
                    if live.movemask() == 0 {
                        x += V::N;
                        continue;
                    }
                    // e^(−σ), −σ exactly (sign flip) as `(-sigma)` in the scalar code.
                    let vis = expf_lanes(sigma.xor(neg_zero));
                    let alpha = opacity.mul(vis).min(max_alpha);
                    let live = alpha.lt(alpha_thr).andnot(live);
                    let t = V::load(st.t.as_ptr().add(i));
                    let next_t = t.mul(one.sub(alpha));
                    let stop = live.and(next_t.lt(t_stop_v));
                    let comp = stop.andnot(live);
                    let stop_bits = stop.movemask();
                    if stop_bits != 0 {
                        active -= stop_bits.count_ones() as usize;
                        done.or(stop).store_bits(st.done.as_mut_ptr().add(i));
                    }
                    if comp.movemask() != 0 {
                        let weight = alpha.mul(t);
                        let r = V::load(st.r.as_ptr().add(i));
                        let g = V::load(st.g.as_ptr().add(i));
                        let b = V::load(st.b.as_ptr().add(i));
                        select_bits(comp, r.add(cr.mul(weight)), r).store(st.r.as_mut_ptr().add(i));
                        select_bits(comp, g.add(cg.mul(weight)), g).store(st.g.as_mut_ptr().add(i));
                        select_bits(comp, b.add(cbl.mul(weight)), b)
                            .store(st.b.as_mut_ptr().add(i));
                        select_bits(comp, next_t, t).store(st.t.as_mut_ptr().add(i));
                        let last = V::load_bits(st.last.as_ptr().add(i));
                        select_bits(comp, contrib, last).store_bits(st.last.as_mut_ptr().add(i));
                    }
                    x += V::N;
                }
            }
        }
    }
}

/// The backward tile loop of `rasterize_backward` for `f32`, bit-identical to the scalar loop:
/// the per-lane arithmetic is the scalar arithmetic, and each splat's gradient is summed in
/// [`SUM_LANES`] lane sums combined at the end of the splat as the scalar loop combines them.
/// Masked lanes add −0, which leaves every sum unchanged, so the lane sums need no per-pixel
/// horizontal work.
///
/// `splats` is the tile's list up to the last entry any pixel reaches; the per-pixel inputs are
/// indexed `(y − y0)·16 + (x − x0)`; `grads[j]` receives splat `j`'s gradient and, when given,
/// `abs[j]` its AbsGS sums `(Σ|∂L_p/∂mean2d_x|, Σ|∂L_p/∂mean2d_y|)` (a separate instantiation of
/// the loop, so the classic loop does no extra work).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
// a transpose: channel and lane index two arrays crosswise.
#[allow(clippy::needless_range_loop)]
pub(crate) fn backward_tile_f32(
    st: &mut SimdBwdTile,
    splats: &[TileSplat<f32>],
    rect: [usize; 4],
    t_final: &[f32; PIXELS],
    g: &[[f32; 3]; PIXELS],
    bg_dot: &[f32; PIXELS],
    n: &[u32; PIXELS],
    grads: &mut [super::raster_tile::ScreenGrad<f32>],
    abs: Option<&mut [[f32; 2]]>,
) {
    st.t[..PIXELS].copy_from_slice(t_final);
    st.t_final[..PIXELS].copy_from_slice(t_final);
    st.bg_dot[..PIXELS].copy_from_slice(bg_dot);
    st.n[..PIXELS].copy_from_slice(n);
    for ch in 0..3 {
        st.behind[ch].fill(0.0);
        for li in 0..PIXELS {
            st.g[ch][li] = g[li][ch];
        }
    }
    // SAFETY (all four calls): the CPU has AVX2 where it is checked just above; SSE2 is part of
    // the x86-64 baseline.
    match (avx2(), abs) {
        (true, None) => unsafe { backward_tile_avx2::<false>(st, splats, rect, grads, &mut []) },
        (true, Some(abs)) => unsafe { backward_tile_avx2::<true>(st, splats, rect, grads, abs) },
        (false, None) => unsafe {
            backward_tile::<Sse, 2, false>(st, splats, rect, grads, &mut [])
        },
        (false, Some(abs)) => unsafe {
            backward_tile::<Sse, 2, true>(st, splats, rect, grads, abs)
        },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn backward_tile_avx2<const ABS: bool>(
    st: &mut SimdBwdTile,
    splats: &[TileSplat<f32>],
    rect: [usize; 4],
    grads: &mut [super::raster_tile::ScreenGrad<f32>],
    abs: &mut [[f32; 2]],
) {
    // SAFETY: this function only runs on a CPU with AVX2.
    unsafe { backward_tile::<Avx, 1, ABS>(st, splats, rect, grads, abs) }
}

/// The backward tile loop over `V` lanes, with `SETS = SUM_LANES / V::N` accumulator vectors per
/// field (step k of a row adds to set `k mod SETS`). With `ABS` it also sums `|∂L_p/∂mean2d|` per
/// component into `abs[j]` (`abs` is unused otherwise).
///
/// # Safety
/// The CPU must have `V`'s instructions; `SETS · V::N == SUM_LANES`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn backward_tile<V: Lanes, const SETS: usize, const ABS: bool>(
    st: &mut SimdBwdTile,
    splats: &[TileSplat<f32>],
    [x0, x1, y0, y1]: [usize; 4],
    grads: &mut [super::raster_tile::ScreenGrad<f32>],
    abs: &mut [[f32; 2]],
) {
    use super::raster_tile::{ScreenGrad, lane_tree};
    debug_assert_eq!(SETS * V::N, SUM_LANES);
    let ts = TILE_SIZE as usize;
    // SAFETY: as in `forward_tile`: every V::N-lane access starts at a pixel index ≤ PIXELS − 1 of a
    // PADDED-long array of `st`; the caller guarantees the instructions exist.
    unsafe {
        let half_s = 0.5f32;
        let half = V::splat(half_s);
        let one = V::splat(1.0);
        let zero = V::splat(0.0);
        let neg_zero = V::splat(-0.0);
        let lane = V::iota();
        let max_alpha = V::splat(MAX_ALPHA);
        let alpha_thr = V::splat(ALPHA_THRESHOLD);
        for (j, s) in splats.iter().enumerate().rev() {
            let [rx0, rx1, ry0, ry1] = s.pixel_rect(x0, x1, y0, y1);
            // Fields: colour r, g, b; conic a, b, c; mean2d x, y; opacity.
            let mut acc = [[zero; 9]; SETS];
            // |mean2d x|, |mean2d y| (only with ABS).
            let mut acc_abs = [[zero; 2]; SETS];
            let (ca, cb, cc) = (
                V::splat(s.conic[0]),
                V::splat(s.conic[1]),
                V::splat(s.conic[2]),
            );
            let mx = V::splat(s.xy[0]);
            let cut = V::splat(s.sigma_cut);
            let opacity = V::splat(s.opacity);
            let neg_opacity = V::splat(-s.opacity);
            let color = [
                V::splat(s.color[0]),
                V::splat(s.color[1]),
                V::splat(s.color[2]),
            ];
            let jv = V::splat_bits(j as u32);
            for y in ry0..ry1 {
                let py = (y as f64 + 0.5) as f32;
                let dy_s = s.xy[1] - py;
                let dy = V::splat(dy_s);
                let cdd = cc.mul(dy).mul(dy);
                let hdd = V::splat(half_s * dy_s * dy_s);
                let mut x = rx0;
                let mut step = 0usize;
                while x < rx1 {
                    let set = step % SETS;
                    step += 1;
                    let i = (y - y0) * ts + (x - x0);
                    let rem = (rx1 - x).min(V::N);
                    let in_span = lane.lt(V::splat(rem as f32));
                    // Scalar: skip when j ≥ n.
                    let reach = V::load_bits(st.n.as_ptr().add(i)).gt_i32(jv);
                    let px = V::splat((x as f64 + 0.5) as f32).add(lane);
                    let dx = mx.sub(px);
                    let quad = ca.mul(dx).mul(dx).add(cdd);
                    let sigma = half.mul(quad).add(cb.mul(dx).mul(dy));
                    let skip = sigma.lt(zero).or(sigma.gt(cut));
                    let live = skip.andnot(in_span.and(reach));
                    x += V::N;
                    if live.movemask() == 0 {
                        continue;
                    }
                    let vis = expf_lanes(sigma.xor(neg_zero));
                    let op_vis = opacity.mul(vis);
                    let alpha = op_vis.min(max_alpha);
                    let live = alpha.lt(alpha_thr).andnot(live);
                    if live.movemask() == 0 {
                        continue;
                    }
                    let ra = one.div(one.sub(alpha));
                    let t_old = V::load(st.t.as_ptr().add(i));
                    let t = t_old.mul(ra);
                    select(live, t, t_old).store(st.t.as_mut_ptr().add(i));
                    let weight = alpha.mul(t);
                    let mut v_alpha = zero;
                    // Per-lane sums; a masked lane adds −0, which leaves any sum unchanged.
                    for ch in 0..3 {
                        let gch = V::load(st.g[ch].as_ptr().add(i));
                        let behind = V::load(st.behind[ch].as_ptr().add(i));
                        let term = select(live, weight.mul(gch), neg_zero);
                        acc[set][ch] = acc[set][ch].add(term);
                        let dv = color[ch].mul(t).sub(behind.mul(ra)).mul(gch);
                        v_alpha = v_alpha.add(dv);
                        let nb = behind.add(color[ch].mul(weight));
                        select(live, nb, behind).store(st.behind[ch].as_mut_ptr().add(i));
                    }
                    let tf = V::load(st.t_final.as_ptr().add(i));
                    let bgd = V::load(st.bg_dot.as_ptr().add(i));
                    let v_alpha = v_alpha.sub(tf.mul(ra).mul(bgd));
                    // Geometry terms only where α was not clamped (opacity·vis ≤ MAX_ALPHA).
                    let geo = live.and(op_vis.le(max_alpha));
                    let v_sigma = neg_opacity.mul(vis).mul(v_alpha);
                    let terms = [
                        half.mul(dx).mul(dx).mul(v_sigma),
                        dx.mul(dy).mul(v_sigma),
                        hdd.mul(v_sigma),
                        ca.mul(dx).add(cb.mul(dy)).mul(v_sigma),
                        cb.mul(dx).add(cc.mul(dy)).mul(v_sigma),
                        vis.mul(v_alpha),
                    ];
                    if ABS {
                        // |v| as the sign bit cleared (`!(−0) & v`), as `f32::abs` does.
                        for c in 0..2 {
                            let term = select(geo, neg_zero.andnot(terms[3 + c]), neg_zero);
                            acc_abs[set][c] = acc_abs[set][c].add(term);
                        }
                    }
                    for (k, term) in terms.into_iter().enumerate() {
                        let term = select(geo, term, neg_zero);
                        acc[set][3 + k] = acc[set][3 + k].add(term);
                    }
                }
            }
            // Lane sums in pixel order (set 0's lanes, then set 1's), combined as
            // `combine_lanes` combines the scalar loop's.
            let mut v = [[0.0f32; SUM_LANES]; 9];
            for (k, set) in acc.iter().enumerate() {
                for (vf, f) in v.iter_mut().zip(set) {
                    vf[k * V::N..(k + 1) * V::N].copy_from_slice(&f.to_array()[..V::N]);
                }
            }
            let sum = |f: usize| lane_tree(|k| v[f][k]);
            grads[j] = ScreenGrad {
                color: [sum(0), sum(1), sum(2)],
                conic: [sum(3), sum(4), sum(5)],
                mean2d: [sum(6), sum(7)],
                opacity: sum(8),
            };
            if ABS {
                let mut va = [[0.0f32; SUM_LANES]; 2];
                for (k, set) in acc_abs.iter().enumerate() {
                    for (vf, f) in va.iter_mut().zip(set) {
                        vf[k * V::N..(k + 1) * V::N].copy_from_slice(&f.to_array()[..V::N]);
                    }
                }
                abs[j] = [lane_tree(|k| va[0][k]), lane_tree(|k| va[1][k])];
            }
        }
    }
}
