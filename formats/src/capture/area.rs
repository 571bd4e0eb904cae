//! Area resampling of `[H, W, C]` f32 images: each output pixel is the mean of the source pixels
//! under its footprint, a source pixel that the footprint only partly covers weighing by the
//! covered fraction.
//!
//! This is the convention the field scores held-out photos under (3DGS, gsplat and nerfstudio
//! downscale with PIL or OpenCV area filters), so Kiln's PSNR reads like theirs. At an integer
//! factor it is exact box averaging of n × n blocks (OpenCV `INTER_AREA`, PIL `Image.reduce` /
//! `BOX`); at any other factor it is the area-weighted box over the fractional footprint, which
//! is what `INTER_AREA` computes for non-integer factors and what PIL `BOX` approximates. It
//! never aliases: every source pixel contributes, with total weight `W'/W · H'/H`. The filter is
//! separable, so rows and columns are weighted independently and the two passes give exactly the
//! 2-D area weights.
//!
//! Source: OpenCV `modules/imgproc/src/resize.cpp` (`computeResizeAreaTab`, `ResizeArea_Invoker`).

/// Resample `[H, W, C]` to `[H', W', C]` by area averaging.
///
/// Guaranteed: for `W = n·W'` and `H = m·H'` each output sample is the plain mean of its n × m
/// source block; in general the mean of the source over the output pixel's footprint (source
/// pixel (i, j) covers `[i, i+1) × [j, j+1)`, output pixel (i', j') covers
/// `[i'·W/W', (i'+1)·W/W') × …`), so a constant image stays constant and values stay within the
/// source's range. Upscaling (`W' > W`) is allowed and blends at most two source pixels per axis;
/// Kiln only upscales by a pixel, to give one camera's photos one size.
/// - `src`: samples, length `H·W·C`, row-major as [`super::RgbImage`].
/// - `width`, `height`: W, H, pixels, ≥ 1.
/// - `channels`: C ≥ 1 (3 for RGB, 4 for RGBA).
/// - `new_width`, `new_height`: W', H', pixels, ≥ 1.
///
/// # Panics
/// If `src.len() != H·W·C` or a size or `channels` is 0.
#[must_use]
pub fn area_resize(
    src: &[f32],
    (width, height): (u32, u32),
    channels: usize,
    (new_width, new_height): (u32, u32),
) -> Vec<f32> {
    check_area_resize_inputs(src, (width, height), channels, (new_width, new_height));
    if (width, height) == (new_width, new_height) {
        return src.to_vec();
    }
    let rows = resize_rows(src, width as usize, channels, &footprints(width, new_width));
    resize_columns(
        &rows,
        new_width as usize * channels,
        &footprints(height, new_height),
    )
}

/// [`area_resize`]'s preconditions, checked before any work.
fn check_area_resize_inputs(src: &[f32], size: (u32, u32), channels: usize, new_size: (u32, u32)) {
    assert!(
        size.0 > 0 && size.1 > 0 && new_size.0 > 0 && new_size.1 > 0 && channels > 0,
        "area_resize: sizes {size:?} → {new_size:?} and channels {channels} must be ≥ 1"
    );
    assert_eq!(
        src.len(),
        size.0 as usize * size.1 as usize * channels,
        "area_resize: src must be [H, W, C] = [{}, {}, {channels}]",
        size.1,
        size.0
    );
}

/// The source pixels under one output pixel along one axis: the first index and one weight per
/// pixel from there (summing to 1).
#[derive(Debug, Clone, PartialEq)]
struct Footprint {
    first: usize,
    weights: Vec<f32>,
}

/// One [`Footprint`] per output pixel of an axis of `src_len` pixels resampled to `dst_len`.
fn footprints(src_len: u32, dst_len: u32) -> Vec<Footprint> {
    let scale = f64::from(src_len) / f64::from(dst_len);
    (0..dst_len)
        .map(|i| {
            let lo = f64::from(i) * scale;
            let hi = (f64::from(i + 1) * scale).min(f64::from(src_len));
            // Integer bounds where the footprint ends on a pixel edge (integer factors), so
            // rounding never adds a zero-weight tap.
            let first = lo.floor() as usize;
            let end = (hi.ceil() as usize).max(first + 1);
            let covered = |k: usize| (hi.min(k as f64 + 1.0) - lo.max(k as f64)).max(0.0);
            let total = hi - lo;
            let weights = (first..end).map(|k| (covered(k) / total) as f32).collect();
            Footprint { first, weights }
        })
        .collect()
}

/// Resample every row of `[H, W, C]` to `[H, W', C]` (`row_len` = W).
fn resize_rows(src: &[f32], width: usize, channels: usize, columns: &[Footprint]) -> Vec<f32> {
    let mut out = Vec::with_capacity(src.len() / width * columns.len());
    for row in src.chunks_exact(width * channels) {
        for fp in columns {
            let start = out.len();
            out.resize(start + channels, 0.0);
            for (k, &w) in fp.weights.iter().enumerate() {
                let px = &row[(fp.first + k) * channels..][..channels];
                for (o, &v) in out[start..].iter_mut().zip(px) {
                    *o += w * v;
                }
            }
        }
    }
    out
}

/// Resample the columns of `[H, W'·C]` (rows of `row_len` samples) to `[H', W'·C]`.
fn resize_columns(src: &[f32], row_len: usize, rows: &[Footprint]) -> Vec<f32> {
    let mut out = vec![0.0_f32; rows.len() * row_len];
    for (dst, fp) in out.chunks_exact_mut(row_len).zip(rows) {
        for (k, &w) in fp.weights.iter().enumerate() {
            let row = &src[(fp.first + k) * row_len..][..row_len];
            for (o, &v) in dst.iter_mut().zip(row) {
                *o += w * v;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 × 2 → 2 × 1 (factor 2): each output is the plain mean of its 2 × 2 block.
    #[test]
    fn integer_factor_is_the_block_mean() {
        #[rustfmt::skip]
        let src = [
            0.0, 0.2, 0.4, 1.0,
            0.6, 0.2, 0.0, 0.2,
        ];
        let out = area_resize(&src, (4, 2), 1, (2, 1));
        let want = [(0.0 + 0.2 + 0.6 + 0.2) / 4.0, (0.4 + 1.0 + 0.0 + 0.2) / 4.0];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{out:?} vs {want:?}");
        }
    }

    /// 3 → 2 (factor 1.5), by hand: output 0 covers source [0, 1.5) = pixel 0 whole and half of
    /// pixel 1, so (1·a + 0.5·b) / 1.5; output 1 covers [1.5, 3) = (0.5·b + 1·c) / 1.5.
    #[test]
    fn fractional_factor_weighs_partly_covered_pixels_by_their_covered_fraction() {
        let (a, b, c) = (0.3_f32, 0.9, 0.6);
        let out = area_resize(&[a, b, c], (3, 1), 1, (2, 1));
        let want = [(a + 0.5 * b) / 1.5, (0.5 * b + c) / 1.5];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{out:?} vs {want:?}");
        }
        // Both axes at once: 3 × 3 → 2 × 2 weights are the products of the axis weights.
        let grid: Vec<f32> = (0..9).map(|v| v as f32 / 8.0).collect();
        let out = area_resize(&grid, (3, 3), 1, (2, 2));
        let axis = [[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]];
        for (j, wy) in axis.iter().enumerate() {
            for (i, wx) in axis.iter().enumerate() {
                let mut want = 0.0;
                for (y, wyy) in wy.iter().enumerate() {
                    for (x, wxx) in wx.iter().enumerate() {
                        want += wyy * wxx * grid[y * 3 + x] / 2.25;
                    }
                }
                assert!((out[j * 2 + i] - want).abs() < 1e-6, "({i}, {j}): {out:?}");
            }
        }
    }

    #[test]
    fn channels_are_averaged_independently_and_constants_stay_constant() {
        let src: Vec<f32> = (0..7 * 5).flat_map(|_| [0.25, 0.5, 1.0]).collect();
        let out = area_resize(&src, (7, 5), 3, (3, 2));
        assert_eq!(out.len(), 3 * 2 * 3);
        for px in out.chunks_exact(3) {
            for (v, want) in px.iter().zip([0.25, 0.5, 1.0]) {
                assert!((v - want).abs() < 1e-6, "{px:?}");
            }
        }
    }

    /// An integer factor never reaches past its block: no zero-weight or neighbouring taps.
    #[test]
    fn integer_factor_footprints_are_exactly_n_pixels() {
        for fp in footprints(12, 3) {
            assert_eq!(fp.weights, vec![0.25; 4]);
        }
        assert_eq!(footprints(12, 3)[2].first, 8);
    }

    #[test]
    fn same_size_is_a_copy() {
        let src = [0.1, 0.2, 0.3, 0.4];
        assert_eq!(area_resize(&src, (2, 2), 1, (2, 2)), src);
    }
}
