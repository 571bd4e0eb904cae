//! Lens distortion models of captures, and resampling a distorted image to the pinhole image with
//! the same intrinsics ([`undistort`]).
//!
//! Sources: OpenCV camera calibration model (`calib3d` docs, "Camera Calibration and 3D
//! Reconstruction": x'' = x'(1 + k1 r² + k2 r⁴) + 2 p1 x'y' + p2(r² + 2x'²), …); COLMAP
//! `src/colmap/sensor/models.h` (`SimpleRadialCameraModel`, `RadialCameraModel`,
//! `OpenCVCameraModel`, which use the same formulas on normalised coordinates).
//!
//! NaN/Inf: distortion coefficients are finite when they come from a reader; an output pixel
//! whose distorted location is not finite is set to 0, like one that maps outside the image.

use rayon::prelude::*;

use super::{Intrinsics, RgbImage};

/// A lens distortion model, applied to normalised camera coordinates (x, y) = (X/Z, Y/Z) of the
/// OpenCV camera frame; coefficients are unitless.
///
/// Guaranteed: [`Distortion::distort`] maps undistorted to distorted normalised coordinates;
/// `(x, y) = (0, 0)` is a fixed point of every model. Not guaranteed: that the model is invertible
/// far outside the calibrated field of view (strong k2 folds back).
/// Marked `#[non_exhaustive]`: more COLMAP models (FULL_OPENCV, fisheye) are to come.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Distortion {
    /// A perfect pinhole: no distortion.
    None,
    /// COLMAP `SIMPLE_RADIAL`: `x' = x·(1 + k·r²)`, r² = x² + y².
    SimpleRadial {
        /// Radial coefficient of r².
        k: f64,
    },
    /// COLMAP `RADIAL`: `x' = x·(1 + k1·r² + k2·r⁴)`.
    Radial {
        /// Radial coefficient of r².
        k1: f64,
        /// Radial coefficient of r⁴.
        k2: f64,
    },
    /// OpenCV / COLMAP `OPENCV` (Brown–Conrady, two radial + two tangential terms):
    /// `x' = x·(1 + k1 r² + k2 r⁴) + 2 p1 x y + p2 (r² + 2x²)`,
    /// `y' = y·(1 + k1 r² + k2 r⁴) + p1 (r² + 2y²) + 2 p2 x y`.
    OpenCv {
        /// Radial coefficient of r².
        k1: f64,
        /// Radial coefficient of r⁴.
        k2: f64,
        /// First tangential coefficient.
        p1: f64,
        /// Second tangential coefficient.
        p2: f64,
    },
}

impl Distortion {
    /// Distorted normalised coordinates `[x', y']` of the undistorted normalised point (x, y).
    ///
    /// - `x`, `y`: normalised camera coordinates X/Z, Y/Z (OpenCV frame), unitless.
    ///
    /// Source: the formulas on each variant (OpenCV calib3d; COLMAP `models.h`).
    #[must_use]
    pub fn distort(&self, x: f64, y: f64) -> [f64; 2] {
        let r2 = x * x + y * y;
        match *self {
            Distortion::None => [x, y],
            Distortion::SimpleRadial { k } => {
                let radial = 1.0 + k * r2;
                [x * radial, y * radial]
            }
            Distortion::Radial { k1, k2 } => {
                let radial = 1.0 + k1 * r2 + k2 * r2 * r2;
                [x * radial, y * radial]
            }
            Distortion::OpenCv { k1, k2, p1, p2 } => {
                let radial = 1.0 + k1 * r2 + k2 * r2 * r2;
                let xy = x * y;
                [
                    x * radial + 2.0 * p1 * xy + p2 * (r2 + 2.0 * x * x),
                    y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * xy,
                ]
            }
        }
    }

    /// True when [`Self::distort`] is the identity (the variant is `None` or all its coefficients
    /// are exactly zero), so undistorting can be skipped.
    #[must_use]
    pub fn is_identity(&self) -> bool {
        match *self {
            Distortion::None => true,
            Distortion::SimpleRadial { k } => k == 0.0,
            Distortion::Radial { k1, k2 } => k1 == 0.0 && k2 == 0.0,
            Distortion::OpenCv { k1, k2, p1, p2 } => {
                k1 == 0.0 && k2 == 0.0 && p1 == 0.0 && p2 == 0.0
            }
        }
    }
}

/// Resample a distorted image to the ideal pinhole image with the same intrinsics.
///
/// For each output pixel centre (i + 0.5, j + 0.5) the normalised point
/// `x = (u − cx)/fx, y = (v − cy)/fy` is distorted with `distortion`, mapped back to pixels
/// (`u' = fx·x' + cx`, `v' = fy·y' + cy`) and `image` is sampled there bilinearly between pixel
/// centres. A location inside the image rectangle `[0, W] × [0, H]` but within half a pixel of
/// the border takes the nearest edge pixels (clamp); so does a location outside the rectangle by at
/// most [`BORDER_REPLICATE_FRACTION`] of the longer side (OpenCV `BORDER_REPLICATE`): mild lenses
/// (the fox capture's k1 = 0.058) pull ~2 % of the pinhole image's pixels, all in thin corner
/// slivers, from just outside the photo, and black slivers there cost ~1 dB of held-out PSNR until
/// a valid-pixel mask reaches the loss. A location farther out, or not finite, gives 0 (black) in
/// all three channels. Guaranteed: same size as `image`; zero
/// distortion reproduces `image` up to rounding of the pixel-centre arithmetic (~1e-12).
/// [`Distortion::None`] returns a clone without resampling.
/// - `image`: `[H, W, 3]` f32 image as captured (distorted).
/// - `intrinsics`: of the captured camera, pixels, corner-origin convention; if its size is not
///   `image`'s, it is rescaled to `image`'s size first ([`Intrinsics::scaled_to`]), so the
///   full-size intrinsics of a [`super::Frame`] work with a downscaled image.
/// - `distortion`: the lens model of the captured camera.
///
/// # Panics
/// If `image.data.len() != image.width · image.height · 3`.
///
/// Source: OpenCV `initUndistortRectifyMap` + `remap(INTER_LINEAR, BORDER_CONSTANT)` with the
/// new camera matrix equal to the old one; the model formulas are on [`Distortion`].
#[must_use]
pub fn undistort(image: &RgbImage, intrinsics: &Intrinsics, distortion: &Distortion) -> RgbImage {
    let (w, h) = (image.width as usize, image.height as usize);
    assert_eq!(
        image.data.len(),
        w * h * 3,
        "undistort: image data holds {} floats, expected [H={h}, W={w}, 3]",
        image.data.len()
    );
    if matches!(distortion, Distortion::None) || w == 0 || h == 0 {
        return image.clone();
    }
    let k = if intrinsics.width == image.width && intrinsics.height == image.height {
        *intrinsics
    } else {
        intrinsics.scaled_to(image.width, image.height)
    };
    let mut data = vec![0.0_f32; w * h * 3];
    data.par_chunks_mut(w * 3).enumerate().for_each(|(j, row)| {
        let v = j as f64 + 0.5;
        let y = (v - k.cy) / k.fy;
        for i in 0..w {
            let u = i as f64 + 0.5;
            let x = (u - k.cx) / k.fx;
            let [xd, yd] = distortion.distort(x, y);
            let ud = k.fx * xd + k.cx;
            let vd = k.fy * yd + k.cy;
            if let Some(rgb) = sample_bilinear(image, ud, vd) {
                row[i * 3..i * 3 + 3].copy_from_slice(&rgb);
            }
        }
    });
    RgbImage {
        width: image.width,
        height: image.height,
        data,
    }
}

/// How far outside the photo, as a fraction of its longer side, [`undistort`] still samples the
/// nearest edge pixel instead of writing black.
pub const BORDER_REPLICATE_FRACTION: f64 = 0.02;

/// Bilinear sample of `image` at pixel coordinates (u, v) (corner origin, centres at +0.5);
/// `None` farther than [`BORDER_REPLICATE_FRACTION`] outside `[0, W] × [0, H]` or for non-finite
/// input; nearer locations and edge pixels are clamped.
fn sample_bilinear(image: &RgbImage, u: f64, v: f64) -> Option<[f32; 3]> {
    let (w, h) = (image.width as usize, image.height as usize);
    let margin = BORDER_REPLICATE_FRACTION * w.max(h) as f64;
    if !(u >= -margin && u <= w as f64 + margin && v >= -margin && v <= h as f64 + margin) {
        return None;
    }
    let u = u.clamp(0.0, w as f64);
    let v = v.clamp(0.0, h as f64);
    // Continuous index space: pixel i's centre is at index i.
    let px = u - 0.5;
    let py = v - 0.5;
    let x0f = px.floor();
    let y0f = py.floor();
    let fx = px - x0f;
    let fy = py - y0f;
    let clamp = |idx: f64, n: usize| -> usize { idx.clamp(0.0, (n - 1) as f64) as usize };
    let (x0, x1) = (clamp(x0f, w), clamp(x0f + 1.0, w));
    let (y0, y1) = (clamp(y0f, h), clamp(y0f + 1.0, h));
    let at = |x: usize, y: usize, c: usize| f64::from(image.data[(y * w + x) * 3 + c]);
    let mut out = [0.0_f32; 3];
    for (c, o) in out.iter_mut().enumerate() {
        let top = at(x0, y0, c) * (1.0 - fx) + at(x1, y0, c) * fx;
        let bottom = at(x0, y1, c) * (1.0 - fx) + at(x1, y1, c) * fx;
        *o = (top * (1.0 - fy) + bottom * fy) as f32;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `w × h` image whose red channel is u/W and green channel v/H at each pixel centre:
    /// linear in pixel coordinates, so bilinear sampling reproduces (u, v) exactly.
    fn ramp(w: u32, h: u32) -> RgbImage {
        let mut data = Vec::with_capacity((w * h * 3) as usize);
        for j in 0..h {
            for i in 0..w {
                data.push((f64::from(i) + 0.5) as f32 / w as f32);
                data.push((f64::from(j) + 0.5) as f32 / h as f32);
                data.push(0.25);
            }
        }
        RgbImage {
            width: w,
            height: h,
            data,
        }
    }

    fn intrinsics(w: u32, h: u32) -> Intrinsics {
        Intrinsics {
            fx: 80.0,
            fy: 82.0,
            cx: f64::from(w) / 2.0 + 1.3,
            cy: f64::from(h) / 2.0 - 0.7,
            width: w,
            height: h,
        }
    }

    #[test]
    fn zero_distortion_is_identity() {
        let mut img = ramp(37, 23);
        // Non-smooth content too: identity must hold pixel by pixel, not only for ramps.
        for (n, v) in img.data.iter_mut().enumerate().filter(|(n, _)| n % 7 == 0) {
            *v = (n % 13) as f32 / 13.0;
        }
        let zero = Distortion::OpenCv {
            k1: 0.0,
            k2: 0.0,
            p1: 0.0,
            p2: 0.0,
        };
        let out = undistort(&img, &intrinsics(37, 23), &zero);
        assert_eq!((out.width, out.height), (37, 23));
        let worst = img
            .data
            .iter()
            .zip(&out.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0_f32, f32::max);
        assert!(worst < 1e-6, "max |Δ| = {worst}");
        assert_eq!(undistort(&img, &intrinsics(37, 23), &Distortion::None), img);
    }

    #[test]
    fn undistorted_pixel_samples_its_distorted_location() {
        let (w, h) = (64, 48);
        let img = ramp(w, h);
        let k = intrinsics(w, h);
        let d = Distortion::OpenCv {
            k1: 0.08,
            k2: -0.05,
            p1: 0.002,
            p2: -0.001,
        };
        let out = undistort(&img, &k, &d);
        // Hand check for output pixel (10, 5): centre (10.5, 5.5).
        let (x, y) = ((10.5 - k.cx) / k.fx, (5.5 - k.cy) / k.fy);
        let r2 = x * x + y * y;
        let radial = 1.0 + 0.08 * r2 - 0.05 * r2 * r2;
        let xd = x * radial + 2.0 * 0.002 * x * y + -0.001 * (r2 + 2.0 * x * x);
        let yd = y * radial + 0.002 * (r2 + 2.0 * y * y) + 2.0 * -0.001 * x * y;
        let (ud, vd) = (k.fx * xd + k.cx, k.fy * yd + k.cy);
        let px = &out.data[(5 * w as usize + 10) * 3..][..3];
        assert!(
            (f64::from(px[0]) * f64::from(w) - ud).abs() < 1e-3,
            "{px:?} vs {ud}"
        );
        assert!(
            (f64::from(px[1]) * f64::from(h) - vd).abs() < 1e-3,
            "{px:?} vs {vd}"
        );
        // And it really moved: the distorted location is not the pinhole one.
        assert!((ud - 10.5).abs() > 0.05);

        // Maps back: for every output pixel that read inside the image, the location it read
        // (recovered from the ramp) undistorts, by fixed-point inversion of the model, to that
        // pixel's own centre.
        let mut checked = 0;
        for j in 0..h as usize {
            for i in 0..w as usize {
                let px = &out.data[(j * w as usize + i) * 3..][..3];
                if px[2] == 0.0 {
                    continue; // read outside the image (blue is 0.25 everywhere inside)
                }
                let (ud, vd) = (
                    f64::from(px[0]) * f64::from(w),
                    f64::from(px[1]) * f64::from(h),
                );
                let inner = |p: f64, n: u32| p > 0.5 + 1e-3 && p < f64::from(n) - 0.5 - 1e-3;
                if !(inner(ud, w) && inner(vd, h)) {
                    continue; // within half a pixel of the border the ramp is clamped
                }
                let (xd, yd) = ((ud - k.cx) / k.fx, (vd - k.cy) / k.fy);
                let (mut xu, mut yu) = (xd, yd);
                for _ in 0..50 {
                    let [dx, dy] = d.distort(xu, yu);
                    xu += xd - dx;
                    yu += yd - dy;
                }
                let (uu, vu) = (k.fx * xu + k.cx, k.fy * yu + k.cy);
                assert!(
                    (uu - (i as f64 + 0.5)).abs() < 1e-3 && (vu - (j as f64 + 0.5)).abs() < 1e-3,
                    "pixel ({i}, {j}) read ({ud}, {vd}) which maps back to ({uu}, {vu})"
                );
                checked += 1;
            }
        }
        assert!(
            checked > (w * h) as usize * 8 / 10,
            "only {checked} pixels inside"
        );
    }

    #[test]
    fn locations_just_outside_the_photo_replicate_the_edge_pixel() {
        // 50×40 image whose pixel value is its column index: margin = 0.02·50 = 1 px.
        let (w, h) = (50u32, 40u32);
        let data = (0..h)
            .flat_map(|_| (0..w).flat_map(|x| [x as f32; 3]))
            .collect();
        let img = RgbImage {
            width: w,
            height: h,
            data,
        };
        assert_eq!(sample_bilinear(&img, -0.6, 10.0), Some([0.0; 3]));
        assert_eq!(sample_bilinear(&img, 50.9, 10.0), Some([49.0; 3]));
        assert_eq!(sample_bilinear(&img, -1.1, 10.0), None);
        assert_eq!(sample_bilinear(&img, 10.0, 41.2), None);
    }

    #[test]
    fn pixels_mapping_outside_the_image_are_zero() {
        let (w, h) = (40, 30);
        let img = RgbImage {
            width: w,
            height: h,
            data: vec![1.0; (w * h * 3) as usize],
        };
        // Strong barrel → pincushion: corners of the pinhole image come from outside the frame.
        let d = Distortion::Radial { k1: 0.5, k2: 0.5 };
        let k = Intrinsics {
            fx: 20.0,
            fy: 20.0,
            cx: 20.0,
            cy: 15.0,
            width: w,
            height: h,
        };
        let out = undistort(&img, &k, &d);
        assert_eq!(&out.data[..3], &[0.0, 0.0, 0.0], "corner maps outside");
        let centre = ((15 * w + 20) * 3) as usize;
        assert_eq!(&out.data[centre..centre + 3], &[1.0, 1.0, 1.0]);
    }

    #[test]
    fn undistort_rescales_full_size_intrinsics_to_the_image() {
        let img = ramp(32, 24);
        let full = intrinsics(64, 48);
        let d = Distortion::SimpleRadial { k: 0.1 };
        let a = undistort(&img, &full, &d);
        let b = undistort(&img, &full.scaled_to(32, 24), &d);
        assert_eq!(a, b);
    }

    #[test]
    fn distortion_models_match_their_formulas() {
        let (x, y) = (0.3, -0.2);
        let r2: f64 = 0.13;
        let [a, b] = Distortion::SimpleRadial { k: 0.1 }.distort(x, y);
        assert!((a - 0.3 * 1.013).abs() < 1e-15 && (b + 0.2 * 1.013).abs() < 1e-15);
        let [a, _] = Distortion::Radial { k1: 0.1, k2: 0.2 }.distort(x, y);
        assert!((a - 0.3 * (1.0 + 0.1 * r2 + 0.2 * r2 * r2)).abs() < 1e-15);
        // Tangential only: x' = x + 2 p1 x y + p2 (r² + 2x²), y' = y + p1 (r² + 2y²) + 2 p2 x y.
        let t = Distortion::OpenCv {
            k1: 0.0,
            k2: 0.0,
            p1: 0.01,
            p2: 0.02,
        };
        let [a, b] = t.distort(x, y);
        assert!((a - (0.3 + 2.0 * 0.01 * -0.06 + 0.02 * (0.13 + 0.18))).abs() < 1e-15);
        assert!((b - (-0.2 + 0.01 * (0.13 + 0.08) + 2.0 * 0.02 * -0.06)).abs() < 1e-15);
        assert!(Distortion::Radial { k1: 0.0, k2: 0.0 }.is_identity());
        assert!(!t.is_identity());
    }
}
