//! Frame sharpness and the choice of one frame per window of a video.
//!
//! Sharpness is the variance of the 4-neighbour Laplacian of the gray image (Pech-Pacheco et al.
//! 2000, "Diatom autofocusing in brightfield microscopy: a comparative study"; the usual blur
//! score of video-to-SfM tools): motion blur and defocus remove high frequencies, so a blurred
//! frame has a smaller Laplacian variance than a sharp frame of the same view.

/// Variance of the 4-neighbour Laplacian `4·I(x,y) − I(x±1,y) − I(x,y±1)` over the interior
/// pixels of an 8-bit gray image, in (gray levels)².
///
/// - `gray`: `[height, width]` row-major, one byte per pixel.
///
/// Returns 0 for images smaller than 3×3 or when `gray.len() != width·height`.
#[must_use]
pub fn laplacian_variance(gray: &[u8], width: usize, height: usize) -> f64 {
    if width < 3 || height < 3 || gray.len() != width * height {
        return 0.0;
    }
    let (mut sum, mut sum_sq, mut n) = (0.0_f64, 0.0_f64, 0.0_f64);
    for y in 1..height - 1 {
        let row = &gray[y * width..(y + 1) * width];
        let up = &gray[(y - 1) * width..y * width];
        let down = &gray[(y + 1) * width..(y + 2) * width];
        // Per-row integer sums keep the inner loop exact and vectorisable.
        let (mut s, mut s2) = (0_i64, 0_i64);
        for x in 1..width - 1 {
            let l = 4 * i64::from(row[x])
                - i64::from(row[x - 1])
                - i64::from(row[x + 1])
                - i64::from(up[x])
                - i64::from(down[x]);
            s += l;
            s2 += l * l;
        }
        sum += s as f64;
        sum_sq += s2 as f64;
        n += (width - 2) as f64;
    }
    let mean = sum / n;
    (sum_sq / n - mean * mean).max(0.0)
}

/// Indices of the frames to keep: the sharpest frame of each window of `window` consecutive
/// frames (ties: the earliest), in increasing order.
///
/// - `scores`: one sharpness score per decoded frame, in decode order (e.g. from
///   [`laplacian_variance`]); non-finite scores never win against finite ones.
/// - `max_frames`: the most frames to keep (≥ 1); the window is
///   `max(min_window, ceil(len / max_frames))` frames.
/// - `min_window`: the smallest window in frames (≥ 1), e.g. the frame rate times the shortest
///   time between kept frames.
#[must_use]
pub fn select_sharpest(scores: &[f64], max_frames: usize, min_window: usize) -> Vec<usize> {
    if scores.is_empty() {
        return Vec::new();
    }
    let max_frames = max_frames.max(1);
    let window = scores.len().div_ceil(max_frames).max(min_window.max(1));
    scores
        .chunks(window)
        .enumerate()
        .map(|(w, chunk)| {
            let mut best = 0;
            for (i, s) in chunk.iter().enumerate() {
                let better = match (s.is_finite(), chunk[best].is_finite()) {
                    (true, false) => true,
                    (true, true) => *s > chunk[best],
                    _ => false,
                };
                if better {
                    best = i;
                }
            }
            w * window + best
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vertical step edge from 0 to 255 at column `edge`, `width × height`.
    fn step(width: usize, height: usize, edge: usize) -> Vec<u8> {
        (0..height)
            .flat_map(|_| (0..width).map(move |x| if x < edge { 0 } else { 255 }))
            .collect()
    }

    #[test]
    fn flat_image_has_zero_variance() {
        assert_eq!(laplacian_variance(&[77; 100], 10, 10), 0.0);
    }

    #[test]
    fn step_edge_variance_matches_hand_calculation() {
        // 5×3 image, edge at column 2: the only interior row is y = 1, x = 1..=3.
        // Laplacians: x=1: 4·0 − 0 − 255 − 0 − 0 = −255; x=2: 4·255 − 0 − 255 − 255 − 255 = 255;
        // x=3: 4·255 − 255 − 255 − 255 − 255 = 0. Mean 0, variance (255² + 255²)/3 = 43350.
        let img = step(5, 3, 2);
        assert_eq!(laplacian_variance(&img, 5, 3), 43_350.0);
    }

    #[test]
    fn blurring_lowers_the_score() {
        let sharp = step(32, 32, 16);
        // A 3-pixel ramp instead of a step: the same edge, blurred.
        let blurred: Vec<u8> = (0..32)
            .flat_map(|_| {
                (0..32).map(|x| match x {
                    0..15 => 0,
                    15 => 64,
                    16 => 128,
                    17 => 192,
                    _ => 255,
                })
            })
            .collect();
        assert!(laplacian_variance(&blurred, 32, 32) < laplacian_variance(&sharp, 32, 32) / 4.0);
    }

    #[test]
    fn bad_sizes_score_zero_instead_of_panicking() {
        assert_eq!(laplacian_variance(&[1, 2, 3], 2, 2), 0.0);
        assert_eq!(laplacian_variance(&[0; 4], 2, 2), 0.0);
    }

    #[test]
    fn one_frame_per_window_is_the_sharpest() {
        let scores = [1.0, 5.0, 2.0, 9.0, 3.0, 3.0, 0.5];
        // 7 frames, at most 3 kept → window ceil(7/3) = 3: [0..3) [3..6) [6..7).
        assert_eq!(select_sharpest(&scores, 3, 1), [1, 3, 6]);
        // min_window 4 wins over ceil(7/3).
        assert_eq!(select_sharpest(&scores, 3, 4), [3, 4]);
        // Enough budget: every frame kept.
        assert_eq!(select_sharpest(&scores, 100, 1), [0, 1, 2, 3, 4, 5, 6]);
        assert!(select_sharpest(&[], 3, 1).is_empty());
    }

    #[test]
    fn non_finite_scores_lose_and_ties_keep_the_earliest() {
        assert_eq!(select_sharpest(&[f64::NAN, 1.0, 1.0], 1, 1), [1]);
        assert_eq!(select_sharpest(&[f64::NAN, f64::NAN], 1, 1), [0]);
    }
}
