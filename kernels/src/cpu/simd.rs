//! SSE2 (x86-64 baseline) versions of the forward and backward per-tile loops for `f32`: four
//! pixels of a row chord per step instead of one.
//!
//! Bit-identical to the scalar loops of `rasterize_forward` / `rasterize_backward`: every lane
//! performs exactly the scalar per-pixel operations in the same order (σ, the inlined `expf` of
//! [`super::scalar::expf_inline`] in `f64`, `min`, the threshold tests, `T·(1 − α)`, the colour sums,
//! the backward chain), lanes that the scalar loop would skip keep their state through selects, and
//! the backward's per-splat sums take the lanes one by one in pixel order. The `f64` path
//! (finite-difference tests) and other architectures use the scalar loops; the test
//! `simd_tile_loops_match_scalar_loops_bit_for_bit` checks the two agree.

// Elsewhere only the state types exist (the callers fall back to the scalar loops).
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::rasterize_forward::{PIXELS, TileSplat};
use crate::consts::{ALPHA_THRESHOLD, MAX_ALPHA, TILE_SIZE};

/// Test switch: route `f32` tiles through the scalar loops (to check both agree bit for bit).
#[cfg(test)]
pub(crate) static FORCE_SCALAR: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the `f32` tile loops take this SSE2 path.
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

/// Per-pixel state of one tile, structure of arrays, padded so a 4-lane step that starts on the last
/// pixel stays in bounds (the padding lanes are masked and written back unchanged).
pub(crate) struct SimdTile {
    t: [f32; PADDED],
    r: [f32; PADDED],
    g: [f32; PADDED],
    b: [f32; PADDED],
    last: [u32; PADDED],
    /// All ones once the pixel stopped (transmittance threshold), else 0.
    done: [u32; PADDED],
}

const PADDED: usize = PIXELS + 4;

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

/// Composites `splats` (the tile's list, front to back) into the tile `[x0, x1) × [y0, y1)` and
/// writes per pixel (index `(y − y0)·16 + (x − x0)`) the transmittance, colour sum and last
/// contributor, exactly as the scalar loop would.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_tile_f32(
    st: &mut SimdTile,
    splats: &[TileSplat<f32>],
    [x0, x1, y0, y1]: [usize; 4],
    t_stop: f32,
    out_t: &mut [f32; PIXELS],
    out_rgb: &mut [[f32; 3]; PIXELS],
    out_last: &mut [u32; PIXELS],
) {
    use std::arch::x86_64::*;
    let ts = TILE_SIZE as usize;
    st.t.fill(1.0);
    st.r.fill(0.0);
    st.g.fill(0.0);
    st.b.fill(0.0);
    st.last.fill(0);
    st.done.fill(0);
    let mut active = (x1 - x0) * (y1 - y0);
    // SAFETY: SSE2 is part of the x86-64 baseline. Every 4-lane load/store starts at an index
    // `i ≤ PIXELS − 1` (a pixel of the tile) and so ends at `i + 3 < PADDED`; the pointers come from
    // the arrays of `st`, which this function borrows mutably.
    unsafe {
        let half = _mm_set1_ps(0.5);
        let one = _mm_set1_ps(1.0);
        let zero = _mm_setzero_ps();
        let lane = _mm_set_ps(3.0, 2.0, 1.0, 0.0);
        let lane_i = _mm_set_epi32(3, 2, 1, 0);
        let max_alpha = _mm_set1_ps(MAX_ALPHA);
        let alpha_thr = _mm_set1_ps(ALPHA_THRESHOLD);
        let t_stop_v = _mm_set1_ps(t_stop);
        // expf constants (see `expf_inline`).
        let n = 32.0f64;
        let inv_ln2_n = _mm_set1_pd(f64::from_bits(0x3ff7_1547_652b_82fe) * n);
        let shift = _mm_set1_pd(f64::from_bits(0x4338_0000_0000_0000));
        let c0 = _mm_set1_pd(f64::from_bits(0x3fac_6af8_4b91_2394) / n / n / n);
        let c1 = _mm_set1_pd(f64::from_bits(0x3fce_bfce_50fa_c4f3) / n / n);
        let c2 = _mm_set1_pd(f64::from_bits(0x3fe6_2e42_ff0c_52d6) / n);
        let one_d = _mm_set1_pd(1.0);
        let tab = &super::scalar::EXP2F_TAB;
        // 2^(k/32)·p(r) of two f64 lanes, as `expf_inline` computes it per lane.
        let exp2 = |x: __m128d| -> __m128d {
            let z = _mm_mul_pd(inv_ln2_n, x);
            let kd = _mm_add_pd(z, shift);
            let ki = _mm_castpd_si128(kd);
            let k0 = _mm_cvtsi128_si64(ki) as u64;
            let k1 = _mm_cvtsi128_si64(_mm_unpackhi_epi64(ki, ki)) as u64;
            let kd = _mm_sub_pd(kd, shift);
            let r = _mm_sub_pd(z, kd);
            let t0 = tab[(k0 % 32) as usize].wrapping_add(k0 << 47);
            let t1 = tab[(k1 % 32) as usize].wrapping_add(k1 << 47);
            let s = _mm_castsi128_pd(_mm_set_epi64x(t1 as i64, t0 as i64));
            let p = _mm_add_pd(_mm_mul_pd(c0, r), c1);
            let r2 = _mm_mul_pd(r, r);
            let y = _mm_add_pd(_mm_mul_pd(c2, r), one_d);
            let y = _mm_add_pd(_mm_mul_pd(p, r2), y);
            _mm_mul_pd(y, s)
        };
        for (j, s) in splats.iter().enumerate() {
            if active == 0 {
                break;
            }
            let [rx0, rx1, ry0, ry1] = s.pixel_rect(x0, x1, y0, y1);
            let (ca, cb, cc) = (
                _mm_set1_ps(s.conic[0]),
                _mm_set1_ps(s.conic[1]),
                _mm_set1_ps(s.conic[2]),
            );
            let mx = _mm_set1_ps(s.xy[0]);
            let cut = _mm_set1_ps(s.sigma_cut);
            let opacity = _mm_set1_ps(s.opacity);
            let (cr, cg, cbl) = (
                _mm_set1_ps(s.color[0]),
                _mm_set1_ps(s.color[1]),
                _mm_set1_ps(s.color[2]),
            );
            let contrib = _mm_set1_epi32((j + 1) as i32);
            for y in ry0..ry1 {
                let py = (y as f64 + 0.5) as f32;
                let (sx0, sx1) = s.row_span(py, rx0, rx1);
                let dy = _mm_set1_ps(s.xy[1] - py);
                // Loop-invariant part of σ: (c·dy)·dy, as the scalar expression groups it.
                let cdd = _mm_mul_ps(_mm_mul_ps(cc, dy), dy);
                let mut x = sx0;
                while x < sx1 {
                    let i = (y - y0) * ts + (x - x0);
                    let rem = (sx1 - x).min(4) as i32;
                    let in_span = _mm_castsi128_ps(_mm_cmplt_epi32(lane_i, _mm_set1_epi32(rem)));
                    let px = _mm_add_ps(_mm_set1_ps((x as f64 + 0.5) as f32), lane);
                    let dx = _mm_sub_ps(mx, px);
                    // σ = ½((a·dx)·dx + (c·dy)·dy) + (b·dx)·dy.
                    let quad = _mm_add_ps(_mm_mul_ps(_mm_mul_ps(ca, dx), dx), cdd);
                    let sigma =
                        _mm_add_ps(_mm_mul_ps(half, quad), _mm_mul_ps(_mm_mul_ps(cb, dx), dy));
                    let done = _mm_castsi128_ps(_mm_loadu_si128(st.done.as_ptr().add(i).cast()));
                    // Scalar: skip when σ < 0 or σ > cut (NaN passes, as there).
                    let skip = _mm_or_ps(_mm_cmplt_ps(sigma, zero), _mm_cmpgt_ps(sigma, cut));
                    let live = _mm_andnot_ps(_mm_or_ps(skip, done), in_span);
                    if _mm_movemask_ps(live) == 0 {
                        x += 4;
                        continue;
                    }
                    // −σ exactly (sign flip), as `(-sigma)` in the scalar code.
                    let xneg = _mm_xor_ps(sigma, _mm_set1_ps(-0.0));
                    let lo = exp2(_mm_cvtps_pd(xneg));
                    let hi = exp2(_mm_cvtps_pd(_mm_movehl_ps(xneg, xneg)));
                    let vis = _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
                    let alpha = _mm_min_ps(_mm_mul_ps(opacity, vis), max_alpha);
                    let live = _mm_andnot_ps(_mm_cmplt_ps(alpha, alpha_thr), live);
                    let t = _mm_loadu_ps(st.t.as_ptr().add(i));
                    let next_t = _mm_mul_ps(t, _mm_sub_ps(one, alpha));
                    let stop = _mm_and_ps(live, _mm_cmplt_ps(next_t, t_stop_v));
                    let comp = _mm_andnot_ps(stop, live);
                    let stop_bits = _mm_movemask_ps(stop);
                    if stop_bits != 0 {
                        active -= stop_bits.count_ones() as usize;
                        let d = _mm_or_ps(done, stop);
                        _mm_storeu_si128(st.done.as_mut_ptr().add(i).cast(), _mm_castps_si128(d));
                    }
                    if _mm_movemask_ps(comp) != 0 {
                        let weight = _mm_mul_ps(alpha, t);
                        let sel = |new: __m128, old: __m128| {
                            _mm_or_ps(_mm_and_ps(comp, new), _mm_andnot_ps(comp, old))
                        };
                        let r = _mm_loadu_ps(st.r.as_ptr().add(i));
                        let g = _mm_loadu_ps(st.g.as_ptr().add(i));
                        let b = _mm_loadu_ps(st.b.as_ptr().add(i));
                        let r = sel(_mm_add_ps(r, _mm_mul_ps(cr, weight)), r);
                        let g = sel(_mm_add_ps(g, _mm_mul_ps(cg, weight)), g);
                        let b = sel(_mm_add_ps(b, _mm_mul_ps(cbl, weight)), b);
                        _mm_storeu_ps(st.r.as_mut_ptr().add(i), r);
                        _mm_storeu_ps(st.g.as_mut_ptr().add(i), g);
                        _mm_storeu_ps(st.b.as_mut_ptr().add(i), b);
                        _mm_storeu_ps(st.t.as_mut_ptr().add(i), sel(next_t, t));
                        let last = _mm_loadu_si128(st.last.as_ptr().add(i).cast());
                        let ci = _mm_castps_si128(comp);
                        let last =
                            _mm_or_si128(_mm_and_si128(ci, contrib), _mm_andnot_si128(ci, last));
                        _mm_storeu_si128(st.last.as_mut_ptr().add(i).cast(), last);
                    }
                    x += 4;
                }
            }
        }
    }
    for li in 0..PIXELS {
        out_t[li] = st.t[li];
        out_rgb[li] = [st.r[li], st.g[li], st.b[li]];
        out_last[li] = st.last[li];
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

/// The backward tile loop of `rasterize_backward` for `f32`, four pixels of a row chord per step,
/// bit-identical to the scalar loop: the per-lane arithmetic is the scalar arithmetic, and each
/// splat's gradient sums take the lanes' terms one by one in pixel order (masked lanes add +0, which
/// leaves a sum that started at +0 unchanged).
///
/// `splats` is the tile's list up to the last entry any pixel reaches; the per-pixel inputs are
/// indexed `(y − y0)·16 + (x − x0)`; `grads[j]` receives splat `j`'s gradient.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_tile_f32(
    st: &mut SimdBwdTile,
    splats: &[TileSplat<f32>],
    [x0, x1, y0, y1]: [usize; 4],
    t_final: &[f32; PIXELS],
    g: &[[f32; 3]; PIXELS],
    bg_dot: &[f32; PIXELS],
    n: &[u32; PIXELS],
    grads: &mut [super::rasterize_backward::ScreenGrad<f32>],
) {
    use super::rasterize_backward::ScreenGrad;
    use std::arch::x86_64::*;
    let ts = TILE_SIZE as usize;
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
    // SAFETY: as in `forward_tile_f32`: SSE2 is baseline on x86-64, and every 4-lane access starts
    // at a pixel index ≤ PIXELS − 1 of a PADDED-long array of `st`.
    unsafe {
        let half_s = 0.5f32;
        let half = _mm_set1_ps(half_s);
        let one = _mm_set1_ps(1.0);
        let zero = _mm_setzero_ps();
        let lane = _mm_set_ps(3.0, 2.0, 1.0, 0.0);
        let lane_i = _mm_set_epi32(3, 2, 1, 0);
        let max_alpha = _mm_set1_ps(MAX_ALPHA);
        let alpha_thr = _mm_set1_ps(ALPHA_THRESHOLD);
        let n32 = 32.0f64;
        let inv_ln2_n = _mm_set1_pd(f64::from_bits(0x3ff7_1547_652b_82fe) * n32);
        let shift = _mm_set1_pd(f64::from_bits(0x4338_0000_0000_0000));
        let c0 = _mm_set1_pd(f64::from_bits(0x3fac_6af8_4b91_2394) / n32 / n32 / n32);
        let c1 = _mm_set1_pd(f64::from_bits(0x3fce_bfce_50fa_c4f3) / n32 / n32);
        let c2 = _mm_set1_pd(f64::from_bits(0x3fe6_2e42_ff0c_52d6) / n32);
        let one_d = _mm_set1_pd(1.0);
        let tab = &super::scalar::EXP2F_TAB;
        let exp2 = |x: __m128d| -> __m128d {
            let z = _mm_mul_pd(inv_ln2_n, x);
            let kd = _mm_add_pd(z, shift);
            let ki = _mm_castpd_si128(kd);
            let k0 = _mm_cvtsi128_si64(ki) as u64;
            let k1 = _mm_cvtsi128_si64(_mm_unpackhi_epi64(ki, ki)) as u64;
            let kd = _mm_sub_pd(kd, shift);
            let r = _mm_sub_pd(z, kd);
            let t0 = tab[(k0 % 32) as usize].wrapping_add(k0 << 47);
            let t1 = tab[(k1 % 32) as usize].wrapping_add(k1 << 47);
            let s = _mm_castsi128_pd(_mm_set_epi64x(t1 as i64, t0 as i64));
            let p = _mm_add_pd(_mm_mul_pd(c0, r), c1);
            let r2 = _mm_mul_pd(r, r);
            let y = _mm_add_pd(_mm_mul_pd(c2, r), one_d);
            let y = _mm_add_pd(_mm_mul_pd(p, r2), y);
            _mm_mul_pd(y, s)
        };
        let lanes = |v: __m128| -> [f32; 4] {
            let mut out = [0.0f32; 4];
            _mm_storeu_ps(out.as_mut_ptr(), v);
            out
        };
        for (j, s) in splats.iter().enumerate().rev() {
            let [rx0, rx1, ry0, ry1] = s.pixel_rect(x0, x1, y0, y1);
            let mut acc = ScreenGrad::<f32>::default();
            let (ca, cb, cc) = (
                _mm_set1_ps(s.conic[0]),
                _mm_set1_ps(s.conic[1]),
                _mm_set1_ps(s.conic[2]),
            );
            let mx = _mm_set1_ps(s.xy[0]);
            let cut = _mm_set1_ps(s.sigma_cut);
            let opacity = _mm_set1_ps(s.opacity);
            let neg_opacity = _mm_set1_ps(-s.opacity);
            let color = [
                _mm_set1_ps(s.color[0]),
                _mm_set1_ps(s.color[1]),
                _mm_set1_ps(s.color[2]),
            ];
            let jv = _mm_set1_epi32(j as i32);
            for y in ry0..ry1 {
                let py = (y as f64 + 0.5) as f32;
                let (sx0, sx1) = s.row_span(py, rx0, rx1);
                let dy_s = s.xy[1] - py;
                let dy = _mm_set1_ps(dy_s);
                let cdd = _mm_mul_ps(_mm_mul_ps(cc, dy), dy);
                let mut x = sx0;
                while x < sx1 {
                    let i = (y - y0) * ts + (x - x0);
                    let rem = (sx1 - x).min(4) as i32;
                    let in_span = _mm_castsi128_ps(_mm_cmplt_epi32(lane_i, _mm_set1_epi32(rem)));
                    let nv = _mm_loadu_si128(st.n.as_ptr().add(i).cast());
                    // Scalar: skip when j ≥ n.
                    let reach = _mm_castsi128_ps(_mm_cmpgt_epi32(nv, jv));
                    let px = _mm_add_ps(_mm_set1_ps((x as f64 + 0.5) as f32), lane);
                    let dx = _mm_sub_ps(mx, px);
                    let quad = _mm_add_ps(_mm_mul_ps(_mm_mul_ps(ca, dx), dx), cdd);
                    let sigma =
                        _mm_add_ps(_mm_mul_ps(half, quad), _mm_mul_ps(_mm_mul_ps(cb, dx), dy));
                    let skip = _mm_or_ps(_mm_cmplt_ps(sigma, zero), _mm_cmpgt_ps(sigma, cut));
                    let live = _mm_andnot_ps(skip, _mm_and_ps(in_span, reach));
                    if _mm_movemask_ps(live) == 0 {
                        x += 4;
                        continue;
                    }
                    let xneg = _mm_xor_ps(sigma, _mm_set1_ps(-0.0));
                    let lo = exp2(_mm_cvtps_pd(xneg));
                    let hi = exp2(_mm_cvtps_pd(_mm_movehl_ps(xneg, xneg)));
                    let vis = _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
                    let op_vis = _mm_mul_ps(opacity, vis);
                    let alpha = _mm_min_ps(op_vis, max_alpha);
                    let live = _mm_andnot_ps(_mm_cmplt_ps(alpha, alpha_thr), live);
                    let live_bits = _mm_movemask_ps(live);
                    if live_bits == 0 {
                        x += 4;
                        continue;
                    }
                    let sel = |m: __m128, new: __m128, old: __m128| {
                        _mm_or_ps(_mm_and_ps(m, new), _mm_andnot_ps(m, old))
                    };
                    let ra = _mm_div_ps(one, _mm_sub_ps(one, alpha));
                    let t_old = _mm_loadu_ps(st.t.as_ptr().add(i));
                    let t = _mm_mul_ps(t_old, ra);
                    _mm_storeu_ps(st.t.as_mut_ptr().add(i), sel(live, t, t_old));
                    let weight = _mm_mul_ps(alpha, t);
                    let mut v_alpha = zero;
                    let mut color_terms = [zero; 3];
                    for ch in 0..3 {
                        let gch = _mm_loadu_ps(st.g[ch].as_ptr().add(i));
                        let behind = _mm_loadu_ps(st.behind[ch].as_ptr().add(i));
                        color_terms[ch] = _mm_and_ps(live, _mm_mul_ps(weight, gch));
                        let term = _mm_mul_ps(
                            _mm_sub_ps(_mm_mul_ps(color[ch], t), _mm_mul_ps(behind, ra)),
                            gch,
                        );
                        v_alpha = _mm_add_ps(v_alpha, term);
                        let nb = _mm_add_ps(behind, _mm_mul_ps(color[ch], weight));
                        _mm_storeu_ps(st.behind[ch].as_mut_ptr().add(i), sel(live, nb, behind));
                    }
                    let tf = _mm_loadu_ps(st.t_final.as_ptr().add(i));
                    let bgd = _mm_loadu_ps(st.bg_dot.as_ptr().add(i));
                    let v_alpha = _mm_sub_ps(v_alpha, _mm_mul_ps(_mm_mul_ps(tf, ra), bgd));
                    // Geometry terms only where α was not clamped (opacity·vis ≤ MAX_ALPHA).
                    let geo = _mm_and_ps(live, _mm_cmple_ps(op_vis, max_alpha));
                    let v_sigma = _mm_mul_ps(_mm_mul_ps(neg_opacity, vis), v_alpha);
                    let conic0 = _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(half, dx), dx), v_sigma);
                    let conic1 = _mm_mul_ps(_mm_mul_ps(dx, dy), v_sigma);
                    let hdd = half_s * dy_s * dy_s;
                    let conic2 = _mm_mul_ps(_mm_set1_ps(hdd), v_sigma);
                    let mean0 =
                        _mm_mul_ps(_mm_add_ps(_mm_mul_ps(ca, dx), _mm_mul_ps(cb, dy)), v_sigma);
                    let mean1 =
                        _mm_mul_ps(_mm_add_ps(_mm_mul_ps(cb, dx), _mm_mul_ps(cc, dy)), v_sigma);
                    let op_term = _mm_mul_ps(vis, v_alpha);
                    // Sum the lanes in pixel order, exactly as the scalar loop adds per pixel.
                    let cols = color_terms.map(lanes);
                    let geo_bits = _mm_movemask_ps(geo);
                    let (c0l, c1l, c2l, m0l, m1l, opl) = (
                        lanes(conic0),
                        lanes(conic1),
                        lanes(conic2),
                        lanes(mean0),
                        lanes(mean1),
                        lanes(op_term),
                    );
                    for k in 0..4 {
                        if live_bits & (1 << k) == 0 {
                            continue;
                        }
                        for ch in 0..3 {
                            acc.color[ch] += cols[ch][k];
                        }
                        if geo_bits & (1 << k) != 0 {
                            acc.conic[0] += c0l[k];
                            acc.conic[1] += c1l[k];
                            acc.conic[2] += c2l[k];
                            acc.mean2d[0] += m0l[k];
                            acc.mean2d[1] += m1l[k];
                            acc.opacity += opl[k];
                        }
                    }
                    x += 4;
                }
            }
            grads[j] = acc;
        }
    }
}
