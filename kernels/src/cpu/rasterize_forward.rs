//! `rasterize_forward`: front-to-back alpha compositing of the depth-sorted splats, one 16×16 tile at
//! a time (rayon over tile rows).
//!
//! Per pixel (centre `(x + 0.5, y + 0.5)`) and per splat of its tile, front to back (Kerbl et al. 2023
//! eq. 3; gsplat `RasterizeToPixels3DGSFwd.cu`):
//! `d = mean2d − pixel`, `σ = ½(a·dx² + c·dy²) + b·dx·dy`, `α = min(MAX_ALPHA, opacity·e^(−σ))`;
//! skipped when `σ < 0` or `α < ALPHA_THRESHOLD`; the pixel stops *before* a splat that would bring
//! `T·(1 − α)` below `TRANSMITTANCE_THRESHOLD` (that splat is not composited).
//! `pixel = Σ colour·α·T + T_final·background`. Saved: `T_final` and the number of tile-list entries
//! walked up to the last contributor, which the backward pass walks in reverse.
//!
//! Loop order: per tile, splats front to back and, per splat, only the pixels of the chord of its
//! `α ≥ ALPHA_THRESHOLD` ellipse on each row (conservatively widened; the exact per-pixel test still
//! decides), with per-pixel state (T, colour, last contributor, done) kept for the tile. Each pixel
//! therefore sees exactly the per-pixel sequence above, bit for bit as a pixel-by-pixel loop would
//! (checked against a brute-force reference in the tests).
//!
//! Inputs come from `project`, so they are finite; there is no allocation per pixel or per tile
//! (each rayon worker reuses one scratch of gathered splats and per-pixel state).
//!
//! Cost notes (the trainer runs this thousands of times): the per-splat rasterizer data
//! ([`TileSplat`]: its `ln`, square roots and divisions) is computed once per splat per pass
//! ([`tile_splats`]) and copied per tile into a contiguous array in sorted order; the pixel loops walk
//! the per-pixel state row slices with iterators (no bounds checks inside); the span ends are rounded
//! without libm `floor`/`ceil` calls; and `e^(−σ)` is an inlined copy of libm's `expf`
//! ([`Scalar::exp_inline`]), so the loop keeps its registers instead of spilling them around a call.
//! For `f32` on x86-64 the per-tile loop runs in `simd.rs` (AVX2 or SSE2, eight or four pixels of a
//! row of the splat's pixel rectangle per step), bit-identical to the scalar loop below, which
//! remains the `f64` path (checked by `simd_tile_loops_match_scalar_loops_bit_for_bit`).

use rayon::prelude::*;

use super::project::ProjectedSplat;
use super::raster_tile::PIXELS;
pub use super::raster_tile::TileSplat;
use super::scalar::Scalar;
use crate::consts::{ALPHA_THRESHOLD, MAX_ALPHA, TILE_SIZE, TRANSMITTANCE_THRESHOLD};

/// [`TileSplat::new`] of every projected splat, indexed like `projected` (computed once per pass,
/// then gathered per tile; culled splats get a meaningless entry that no tile references).
pub fn tile_splats<T: Scalar>(projected: &[ProjectedSplat<T>]) -> Vec<TileSplat<T>> {
    projected.par_iter().map(TileSplat::new).collect()
}

/// A splat's footprint at one pixel.
#[derive(Debug, Clone, Copy)]
pub struct Hit<T> {
    /// Composited alpha, `min(MAX_ALPHA, opacity·vis)`.
    pub alpha: T,
    /// `e^(−σ)`.
    pub vis: T,
    /// `mean2d.x − pixel.x`, pixels.
    pub dx: T,
    /// `mean2d.y − pixel.y`, pixels.
    pub dy: T,
}

/// The footprint of `s` at pixel centre `(px, py)`, or `None` when the splat is skipped there. Both
/// passes call this one function, so forward and backward agree on every skip.
#[inline(always)]
pub fn splat_hit<T: Scalar>(s: &TileSplat<T>, px: T, py: T) -> Option<Hit<T>> {
    let dx = s.xy[0] - px;
    let dy = s.xy[1] - py;
    let sigma = T::of(0.5) * (s.conic[0] * dx * dx + s.conic[2] * dy * dy) + s.conic[1] * dx * dy;
    if sigma < T::ZERO || sigma > s.sigma_cut {
        return None;
    }
    let vis = (-sigma).exp_inline();
    // `min` by comparison: one `minss`, and the same value as IEEE `min` (the bound is not NaN).
    let (a, max_alpha) = (s.opacity * vis, T::from_f32(MAX_ALPHA));
    let alpha = if a < max_alpha { a } else { max_alpha };
    if alpha < T::from_f32(ALPHA_THRESHOLD) {
        return None;
    }
    Some(Hit { alpha, vis, dx, dy })
}

/// Output of [`rasterize_forward`].
#[derive(Debug, Clone)]
pub struct Raster<T> {
    /// `[H, W, 3]` RGB.
    pub image: Vec<T>,
    /// `[H, W]` final transmittance.
    pub final_t: Vec<T>,
    /// `[H, W]` number of entries of the pixel's tile list walked up to and including its last
    /// contributor (0 when nothing contributed).
    pub n_contrib: Vec<u32>,
}

/// Per-worker scratch of the forward tile loop: gathered splats and per-pixel state of one tile.
struct TileScratch<T> {
    splats: Vec<TileSplat<T>>,
    t: [T; PIXELS],
    rgb: [[T; 3]; PIXELS],
    last: [u32; PIXELS],
    done: [bool; PIXELS],
    /// State of the `f32` SIMD loop ([`super::simd`]).
    simd: Box<super::simd::SimdTile>,
}

/// Writes a finished tile's pixels: colour over `background`, final transmittance, last contributor.
fn write_tile<T: Scalar>(
    sc: &TileScratch<T>,
    [x0, x1, y0, y1]: [usize; 4],
    w: usize,
    background: [T; 3],
    img_rows: &mut [T],
    t_rows: &mut [T],
    n_rows: &mut [u32],
) {
    let ts = TILE_SIZE as usize;
    for y in y0..y1 {
        for x in x0..x1 {
            let li = (y - y0) * ts + (x - x0);
            let pix = (y - y0) * w + x;
            let t = sc.t[li];
            for ch in 0..3 {
                img_rows[pix * 3 + ch] = sc.rgb[li][ch] + t * background[ch];
            }
            t_rows[pix] = t;
            n_rows[pix] = sc.last[li];
        }
    }
}

/// Runs the tile through the SIMD loop of [`super::simd`] when `T` is `f32` on x86-64 (filling
/// `sc.t`, `sc.rgb`, `sc.last` bit for bit as the scalar loop would); returns whether it did.
#[inline]
fn forward_tile_simd<T: Scalar>(sc: &mut TileScratch<T>, rect: [usize; 4], t_stop: T) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::any::Any;
        let TileScratch {
            splats,
            t,
            rgb,
            last,
            simd,
            ..
        } = sc;
        if super::simd::enabled()
            && let (Some(splats), Some(t), Some(rgb), Some(&t_stop)) = (
                (splats as &dyn Any).downcast_ref::<Vec<TileSplat<f32>>>(),
                (t as &mut dyn Any).downcast_mut::<[f32; PIXELS]>(),
                (rgb as &mut dyn Any).downcast_mut::<[[f32; 3]; PIXELS]>(),
                (&t_stop as &dyn Any).downcast_ref::<f32>(),
            )
        {
            super::simd::forward_tile_f32(simd, splats, rect, t_stop, t, rgb, last);
            return true;
        }
    }
    let _ = (sc, rect, t_stop);
    false
}

/// Composites the sorted splats into a `width × height` image over `background`.
///
/// `sorted_ids [I]` and `tile_ranges [T]` come from `sort`; `projected [N]` from `project`.
/// Each tile walks its splats front to back and, per splat, only the pixels of its alpha box; every
/// pixel still sees exactly the per-pixel sequence described in the module doc.
// colour channels index the pixel and the splat colour together (hot loop, kept as written).
#[allow(clippy::needless_range_loop)]
pub fn rasterize_forward<T: Scalar>(
    projected: &[ProjectedSplat<T>],
    sorted_ids: &[u32],
    tile_ranges: &[[u32; 2]],
    width: u32,
    height: u32,
    background: [T; 3],
) -> Raster<T> {
    let (w, h) = (width as usize, height as usize);
    let ts = TILE_SIZE as usize;
    let tiles_x = w.div_ceil(ts);
    let mut image = vec![T::ZERO; w * h * 3];
    let mut final_t = vec![T::ONE; w * h];
    let mut n_contrib = vec![0u32; w * h];
    let t_stop = T::from_f32(TRANSMITTANCE_THRESHOLD);
    let all = tile_splats(projected);
    let scratch = || TileScratch {
        splats: Vec::new(),
        t: [T::ONE; PIXELS],
        rgb: [[T::ZERO; 3]; PIXELS],
        last: [0; PIXELS],
        done: [false; PIXELS],
        simd: super::simd::SimdTile::new(),
    };

    image
        .par_chunks_mut(ts * w * 3)
        .zip(final_t.par_chunks_mut(ts * w))
        .zip(n_contrib.par_chunks_mut(ts * w))
        .enumerate()
        .for_each_init(
            scratch,
            |sc: &mut TileScratch<T>, (ty, ((img_rows, t_rows), n_rows))| {
                let (y0, y1) = (ty * ts, ty * ts + t_rows.len() / w);
                for tx in 0..tiles_x {
                    let (x0, x1) = (tx * ts, ((tx + 1) * ts).min(w));
                    let [start, end] = tile_ranges[ty * tiles_x + tx];
                    sc.splats.clear();
                    sc.splats.extend(
                        sorted_ids[start as usize..end as usize]
                            .iter()
                            .map(|&id| all[id as usize]),
                    );
                    if forward_tile_simd(sc, [x0, x1, y0, y1], t_stop) {
                        write_tile(
                            sc,
                            [x0, x1, y0, y1],
                            w,
                            background,
                            img_rows,
                            t_rows,
                            n_rows,
                        );
                        continue;
                    }
                    sc.t = [T::ONE; PIXELS];
                    sc.rgb = [[T::ZERO; 3]; PIXELS];
                    sc.last = [0; PIXELS];
                    sc.done = [false; PIXELS];
                    let mut active = (x1 - x0) * (y1 - y0);
                    for (j, s) in sc.splats.iter().enumerate() {
                        if active == 0 {
                            break;
                        }
                        let [rx0, rx1, ry0, ry1] = s.pixel_rect(x0, x1, y0, y1);
                        for y in ry0..ry1 {
                            let py = T::of(y as f64 + 0.5);
                            let (sx0, sx1) = s.row_span(py, rx0, rx1);
                            // This row's pixels [sx0, sx1) of the tile's state, walked in step.
                            let r = (y - y0) * ts + (sx0 - x0)..(y - y0) * ts + (sx1 - x0);
                            let pixels = sc.t[r.clone()]
                                .iter_mut()
                                .zip(&mut sc.rgb[r.clone()])
                                .zip(&mut sc.last[r.clone()])
                                .zip(&mut sc.done[r]);
                            // Pixel centres x + ½, stepped exactly (small integers plus ½).
                            let mut px = T::of(sx0 as f64 - 0.5);
                            for (((t, rgb), last), done) in pixels {
                                px += T::ONE;
                                if *done {
                                    continue;
                                }
                                let Some(hit) = splat_hit(s, px, py) else {
                                    continue;
                                };
                                let next_t = *t * (T::ONE - hit.alpha);
                                if next_t < t_stop {
                                    *done = true;
                                    active -= 1;
                                    continue;
                                }
                                let weight = hit.alpha * *t;
                                for ch in 0..3 {
                                    rgb[ch] += s.color[ch] * weight;
                                }
                                *t = next_t;
                                *last = j as u32 + 1;
                            }
                        }
                    }
                    write_tile(
                        sc,
                        [x0, x1, y0, y1],
                        w,
                        background,
                        img_rows,
                        t_rows,
                        n_rows,
                    );
                }
            },
        );
    Raster {
        image,
        final_t,
        n_contrib,
    }
}

#[cfg(test)]
// Per-channel checks index the render, the colour and the background together.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::Camera;
    use crate::cpu::project::{CameraModel, RasterizeMode, SplatParams, project};
    use crate::cpu::{bin, sort};

    /// Brute force: per pixel, every splat whose tile box holds the pixel's tile, in (depth, index)
    /// order, composited with the same per-pixel rule. The tiled, splat-major loop must match it bit
    /// for bit (same per-pixel arithmetic in the same order).
    #[test]
    fn tiled_rasterizer_matches_brute_force_per_pixel_reference() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let n = 1500;
        let (mut means, mut ls, mut rot, mut logit, mut sh) =
            (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..n {
            let z = rng.random_range(2.0..6.0f32);
            means.extend([
                rng.random_range(-0.8..0.8) * z,
                rng.random_range(-0.6..0.6) * z,
                z,
            ]);
            ls.extend([0; 3].map(|_| rng.random_range(-3.5..-1.0f32)));
            rot.extend([0; 4].map(|_| rng.random_range(-1.0..1.0f32)));
            logit.push(rng.random_range(-3.0..8.0f32));
            sh.extend([0; 3].map(|_| rng.random_range(-1.0..1.0f32)));
        }
        let id = [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let camera = Camera {
            width: 70,
            height: 45,
            fx: 60.0,
            fy: 60.0,
            cx: 35.0,
            cy: 22.5,
            world_to_camera: id,
        };
        let params = SplatParams {
            means: &means,
            log_scales: &ls,
            rotations: &rot,
            logit_opacities: &logit,
            sh_coeffs: &sh,
            sh_degree: 0,
            sh_k: 1,
        };
        let cam = CameraModel::<f32>::new(&camera);
        let projected = project(&params, &cam, RasterizeMode::Classic);
        let (keys, ids) = bin::bin(&projected, cam.tiles_x());
        let (sorted, ranges) = sort::sort(keys, ids, (cam.tiles_x() * cam.tiles_y()) as usize);
        let bg = [0.2, 0.5, 0.1];
        let out = rasterize_forward(&projected, &sorted, &ranges, 70, 45, bg);

        let mut order: Vec<usize> = (0..n).filter(|&i| projected[i].radius > 0.0).collect();
        order.sort_by(|&a, &b| {
            projected[a]
                .depth
                .to_bits()
                .cmp(&projected[b].depth.to_bits())
                .then(a.cmp(&b))
        });
        let mut saturated = 0;
        for y in 0..45usize {
            for x in 0..70usize {
                let tile = [(x / 16) as u32, (y / 16) as u32];
                let (mut t, mut rgb, mut last) = (1.0f32, [0.0f32; 3], 0u32);
                let mut j = 0u32;
                for &i in &order {
                    let p = &projected[i];
                    if !(p.tile_min[0] <= tile[0]
                        && tile[0] < p.tile_max[0]
                        && p.tile_min[1] <= tile[1]
                        && tile[1] < p.tile_max[1])
                    {
                        continue;
                    }
                    j += 1;
                    let Some(hit) = splat_hit(&TileSplat::new(p), x as f32 + 0.5, y as f32 + 0.5)
                    else {
                        continue;
                    };
                    let next_t = t * (1.0 - hit.alpha);
                    if next_t < TRANSMITTANCE_THRESHOLD {
                        saturated += 1;
                        break;
                    }
                    let weight = hit.alpha * t;
                    for ch in 0..3 {
                        rgb[ch] += p.color[ch] * weight;
                    }
                    t = next_t;
                    last = j;
                }
                let pix = y * 70 + x;
                assert_eq!(out.final_t[pix], t, "T at ({x}, {y})");
                assert_eq!(out.n_contrib[pix], last, "last contributor at ({x}, {y})");
                for ch in 0..3 {
                    assert_eq!(
                        out.image[pix * 3 + ch],
                        rgb[ch] + t * bg[ch],
                        "pixel ({x}, {y}) ch {ch}"
                    );
                }
            }
        }
        assert!(
            saturated > 0,
            "the scene should exercise the transmittance stop"
        );
    }
}
