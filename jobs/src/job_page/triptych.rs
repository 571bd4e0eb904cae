//! Held-out view triptychs: ground truth | render | error heat-map, from the trainer's
//! side-by-side `eval/<view>.png` (ground truth LEFT half, render RIGHT half).
//!
//! The heat-map value of a pixel is the mean absolute error over R, G and B of the 8-bit images
//! scaled to [0, 1], divided by [`ERROR_SCALE_MAX`] and clamped, then mapped through viridis.
//! A fixed scale (rather than each view's maximum) keeps colours comparable across views and jobs.
//!
//! Source (colormap): viridis by van der Walt & Smith for matplotlib (CC0); the degree-6
//! polynomial fit used here is Matt Zucker's, <https://www.shadertoy.com/view/WlfXRN> (CC0), within
//! about 0.01 of matplotlib's 256-entry table per channel.

use std::path::Path;

use image::{Rgb, RgbImage};

use super::PageError;

/// Mean absolute error (RGB in [0, 1]) that maps to the top of the colormap; larger errors
/// saturate. 0.25 is a quarter of the full range: a clearly wrong pixel.
pub const ERROR_SCALE_MAX: f64 = 0.25;

/// Gap between the three panels, pixels.
const GAP_PX: u32 = 2;

/// Viridis at `t` in [0, 1] (clamped; NaN maps to 0) as 8-bit sRGB.
///
/// Source: polynomial fit by Matt Zucker (<https://www.shadertoy.com/view/WlfXRN>) to
/// matplotlib's viridis.
pub fn viridis(t: f64) -> [u8; 3] {
    const C: [[f64; 3]; 7] = [
        [
            0.277_727_327_223_417_7,
            0.005_407_344_544_966_578,
            0.334_099_805_335_306_1,
        ],
        [
            0.105_093_043_108_577_4,
            1.404_613_529_898_575,
            1.384_590_162_594_685,
        ],
        [
            -0.330_861_828_725_556_3,
            0.214_847_559_468_213,
            0.095_095_163_028_236_59,
        ],
        [
            -4.634_230_498_983_486,
            -5.799_100_973_351_585,
            -19.332_440_956_279_87,
        ],
        [
            6.228_269_936_347_081,
            14.179_933_366_805_09,
            56.690_552_600_681_05,
        ],
        [
            4.776_384_997_670_288,
            -13.745_145_377_746_01,
            -65.353_032_633_372_34,
        ],
        [
            -5.435_455_855_934_631,
            4.645_852_612_178_535,
            26.312_435_249_583_2,
        ],
    ];
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    std::array::from_fn(|ch| {
        // Horner's rule from the highest coefficient down.
        let v = C.iter().rev().fold(0.0, |acc, c| acc * t + c[ch]);
        (v.clamp(0.0, 1.0) * 255.0).round() as u8
    })
}

/// Split a trainer eval PNG into (ground truth, render).
///
/// # Errors
/// [`PageError::Image`] when `path` cannot be read or decoded; [`PageError::Invalid`] when its
/// width is odd or zero (not two equal halves).
pub fn split_eval_png(path: &Path) -> Result<(RgbImage, RgbImage), PageError> {
    let img = image::open(path)
        .map_err(|source| PageError::Image {
            path: path.to_path_buf(),
            source,
        })?
        .to_rgb8();
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 || !w.is_multiple_of(2) {
        return Err(PageError::Invalid {
            path: path.to_path_buf(),
            field: "width".into(),
            expected: "an even, non-zero width (ground truth left half, render right half)".into(),
            found: format!("{w} × {h} px"),
        });
    }
    let half = w / 2;
    let gt = image::imageops::crop_imm(&img, 0, 0, half, h).to_image();
    let render = image::imageops::crop_imm(&img, half, 0, half, h).to_image();
    Ok((gt, render))
}

/// Per-pixel error heat-map of two same-size images and their mean absolute error in [0, 1].
///
/// Pixel value: viridis(mean over RGB of |a − b| / 255 / [`ERROR_SCALE_MAX`]). Identical images
/// give a map of `viridis(0.0)` everywhere. Images of different sizes are compared over their
/// common top-left region.
pub fn error_heatmap(a: &RgbImage, b: &RgbImage) -> (RgbImage, f64) {
    let (w, h) = (a.width().min(b.width()), a.height().min(b.height()));
    let mut sum = 0.0;
    let map = RgbImage::from_fn(w, h, |x, y| {
        let (pa, pb) = (a.get_pixel(x, y).0, b.get_pixel(x, y).0);
        let err = (0..3)
            .map(|c| (pa[c] as f64 - pb[c] as f64).abs())
            .sum::<f64>()
            / (3.0 * 255.0);
        sum += err;
        Rgb(viridis(err / ERROR_SCALE_MAX))
    });
    let mean = if w * h == 0 {
        0.0
    } else {
        sum / (w as f64 * h as f64)
    };
    (map, mean)
}

/// A PNG-encoded triptych.
#[derive(Debug, Clone, PartialEq)]
pub struct Triptych {
    /// PNG bytes: three panels side by side, separated by white gaps.
    pub png: Vec<u8>,
    /// Width of the whole picture, pixels (3 panels + 2 gaps).
    pub width: u32,
    /// Mean absolute error over pixels and RGB, in [0, 1].
    pub mean_abs_error: f64,
}

/// Ground truth | render | error heat-map of one trainer eval PNG, PNG-encoded.
///
/// # Errors
/// As [`split_eval_png`]; [`PageError::Image`] when encoding fails.
pub fn triptych_png(path: &Path) -> Result<Triptych, PageError> {
    let (gt, render) = split_eval_png(path)?;
    let (heat, mean_abs_error) = error_heatmap(&gt, &render);
    let (w, h) = gt.dimensions();
    let mut out = RgbImage::from_pixel(3 * w + 2 * GAP_PX, h, Rgb([255, 255, 255]));
    for (i, panel) in [&gt, &render, &heat].into_iter().enumerate() {
        image::imageops::replace(&mut out, panel, (i as u32 * (w + GAP_PX)) as i64, 0);
    }
    let width = out.width();
    Ok(Triptych {
        png: super::encode_png(&out, path)?,
        width,
        mean_abs_error,
    })
}

/// A 256 × 12 px colour bar of the heat-map scale (0 left, [`ERROR_SCALE_MAX`] right), as PNG.
///
/// # Errors
/// [`PageError::Image`] when encoding fails.
pub fn colorbar_png() -> Result<Vec<u8>, PageError> {
    let bar = RgbImage::from_fn(256, 12, |x, _| Rgb(viridis(x as f64 / 255.0)));
    super::encode_png(&bar, Path::new("colour bar"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heatmap_of_identical_halves_is_all_the_zero_colour() {
        let img = RgbImage::from_fn(5, 3, |x, y| Rgb([x as u8 * 40, y as u8 * 70, 9]));
        let (map, mean) = error_heatmap(&img, &img);
        assert_eq!(mean, 0.0);
        assert!(map.pixels().all(|p| p.0 == viridis(0.0)));
        // Viridis starts dark purple: matplotlib's first entry is (0.267, 0.005, 0.329).
        assert_eq!(viridis(0.0), [71, 1, 85]);
    }

    #[test]
    fn viridis_endpoints_match_matplotlib_within_a_few_levels() {
        // matplotlib viridis(1.0) = (0.993, 0.906, 0.144) → (253, 231, 37).
        let top = viridis(1.0);
        for (got, want) in top.iter().zip([253u8, 231, 37]) {
            assert!(got.abs_diff(want) <= 4, "{top:?}");
        }
        assert_eq!(viridis(f64::NAN), viridis(0.0));
        assert_eq!(viridis(7.0), top);
    }

    #[test]
    fn saturating_error_maps_to_the_top_colour() {
        let a = RgbImage::from_pixel(2, 2, Rgb([0, 0, 0]));
        let b = RgbImage::from_pixel(2, 2, Rgb([255, 255, 255]));
        let (map, mean) = error_heatmap(&a, &b);
        assert_eq!(mean, 1.0);
        assert!(map.pixels().all(|p| p.0 == viridis(1.0)));
    }

    #[test]
    fn eval_png_splits_into_halves_and_odd_widths_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.png");
        RgbImage::from_fn(6, 2, |x, _| Rgb([if x < 3 { 10 } else { 200 }, 0, 0]))
            .save(&p)
            .unwrap();
        let (gt, render) = split_eval_png(&p).unwrap();
        assert_eq!((gt.dimensions(), render.dimensions()), ((3, 2), (3, 2)));
        assert!(gt.pixels().all(|p| p.0[0] == 10) && render.pixels().all(|p| p.0[0] == 200));
        let t = triptych_png(&p).unwrap();
        assert_eq!(t.width, 3 * 3 + 2 * GAP_PX);

        let odd = dir.path().join("odd.png");
        RgbImage::new(5, 2).save(&odd).unwrap();
        let e = split_eval_png(&odd).unwrap_err().to_string();
        assert!(e.contains("odd.png") && e.contains("5 × 2"), "{e}");
        let missing = split_eval_png(&dir.path().join("none.png")).unwrap_err();
        assert!(missing.to_string().contains("none.png"));
    }
}
