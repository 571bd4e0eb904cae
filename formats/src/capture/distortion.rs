//! Lens distortion models of captures, and resampling a distorted image to the pinhole image with
//! the same intrinsics ([`undistort`]).
//!
//! Sources: OpenCV camera calibration model (`calib3d` docs, "Camera Calibration and 3D
//! Reconstruction": x'' = x'(1 + k1 r² + k2 r⁴) + 2 p1 x'y' + p2(r² + 2x'²), …); COLMAP
//! `src/colmap/sensor/models.h` (the `Distortion` and `ImgFromCam` functions of
//! `SimpleRadialCameraModel`, `RadialCameraModel`, `OpenCVCameraModel`, `FullOpenCVCameraModel`,
//! `OpenCVFisheyeCameraModel`, `SimpleRadialFisheyeCameraModel`, `RadialFisheyeCameraModel`,
//! `ThinPrismFisheyeCameraModel`, `FOVCameraModel`, and `FisheyeFromNormal` of
//! `BasePerspectiveFisheyeCameraModel`), which Kiln follows formula for formula, small-value
//! branches included. Together with [`Distortion::None`] these are all eleven COLMAP camera
//! models (model ids 0..=10).
//!
//! NaN/Inf: distortion coefficients are finite when they come from a reader; an output pixel
//! whose distorted location is not finite is set to 0, like one that maps outside the image.

use rayon::prelude::*;

use super::image::RgbImage;
use super::intrinsics::Intrinsics;

/// A lens distortion model, applied to normalised camera coordinates (x, y) = (X/Z, Y/Z) of the
/// OpenCV camera frame; coefficients are unitless.
///
/// Guaranteed: [`Distortion::distort`] maps undistorted to distorted normalised coordinates;
/// `(x, y) = (0, 0)` is a fixed point of every model. Not guaranteed: that the model is invertible
/// far outside the calibrated field of view (strong k2 folds back).
///
/// The fisheye variants (`OpenCvFisheye`, `SimpleRadialFisheye`, `RadialFisheye`,
/// `ThinPrismFisheye`) first map the point to the equidistant fisheye plane, as COLMAP's
/// `FisheyeFromNormal` does: with r = √(x² + y²) and θ = atan(r) (the angle of the ray from the
/// optical axis), `(xf, yf) = (x·θ/r, y·θ/r)`, or `(x, y)` unchanged when r ≤ `f64::EPSILON`
/// (the limit θ/r → 1). Their coefficients then act on `(xf, yf)`, whose radius is θ. So a
/// fisheye model with all coefficients zero is the equidistant projection, not the identity, and
/// the whole half-space in front of the camera (r → ∞, θ → 90°) maps into the disc of radius
/// π/2 (times the distortion).
/// Marked `#[non_exhaustive]`: newer COLMAP models (ids above 10) may follow.
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
    /// COLMAP `FULL_OPENCV` (OpenCV's rational radial model with two tangential terms):
    /// with `q = (1 + k1 r² + k2 r⁴ + k3 r⁶) / (1 + k4 r² + k5 r⁴ + k6 r⁶)`,
    /// `x' = x·q + 2 p1 x y + p2 (r² + 2x²)`, `y' = y·q + p1 (r² + 2y²) + 2 p2 x y`.
    ///
    /// Source: COLMAP `models.h`, `FullOpenCVCameraModel::Distortion`. Fields in COLMAP's
    /// parameter order (k1, k2, p1, p2, k3, k4, k5, k6). A zero denominator gives a non-finite
    /// location, which [`undistort`] writes as black.
    FullOpenCv {
        /// Numerator coefficient of r².
        k1: f64,
        /// Numerator coefficient of r⁴.
        k2: f64,
        /// First tangential coefficient.
        p1: f64,
        /// Second tangential coefficient.
        p2: f64,
        /// Numerator coefficient of r⁶.
        k3: f64,
        /// Denominator coefficient of r².
        k4: f64,
        /// Denominator coefficient of r⁴.
        k5: f64,
        /// Denominator coefficient of r⁶.
        k6: f64,
    },
    /// COLMAP `OPENCV_FISHEYE` (OpenCV `fisheye` / Kannala–Brandt with four terms): on the
    /// equidistant point (xf, yf) of radius θ (enum doc),
    /// `x' = xf·(1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸)`, same for y'.
    ///
    /// Source: COLMAP `models.h`, `OpenCVFisheyeCameraModel::ImgFromCam` and `::Distortion`.
    OpenCvFisheye {
        /// Coefficient of θ².
        k1: f64,
        /// Coefficient of θ⁴.
        k2: f64,
        /// Coefficient of θ⁶.
        k3: f64,
        /// Coefficient of θ⁸.
        k4: f64,
    },
    /// COLMAP `SIMPLE_RADIAL_FISHEYE`: on the equidistant point (xf, yf) of radius θ (enum doc),
    /// `x' = xf·(1 + k θ²)`, same for y'.
    ///
    /// Source: COLMAP `models.h`, `SimpleRadialFisheyeCameraModel::ImgFromCam` and
    /// `::Distortion`.
    SimpleRadialFisheye {
        /// Coefficient of θ².
        k: f64,
    },
    /// COLMAP `RADIAL_FISHEYE`: on the equidistant point (xf, yf) of radius θ (enum doc),
    /// `x' = xf·(1 + k1 θ² + k2 θ⁴)`, same for y'.
    ///
    /// Source: COLMAP `models.h`, `RadialFisheyeCameraModel::ImgFromCam` and `::Distortion`.
    RadialFisheye {
        /// Coefficient of θ².
        k1: f64,
        /// Coefficient of θ⁴.
        k2: f64,
    },
    /// COLMAP `THIN_PRISM_FISHEYE` (Weng et al., TPAMI 1992): on the equidistant point (xf, yf)
    /// of radius θ (enum doc), with `ρ = k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸`,
    /// `x' = xf·(1 + ρ) + 2 p1 xf yf + p2 (θ² + 2 xf²) + sx1 θ²`,
    /// `y' = yf·(1 + ρ) + p1 (θ² + 2 yf²) + 2 p2 xf yf + sy1 θ²`.
    ///
    /// Source: COLMAP `models.h`, `ThinPrismFisheyeCameraModel::ImgFromCam` and `::Distortion`.
    /// Fields in COLMAP's parameter order (k1, k2, p1, p2, k3, k4, sx1, sy1).
    ThinPrismFisheye {
        /// Radial coefficient of θ².
        k1: f64,
        /// Radial coefficient of θ⁴.
        k2: f64,
        /// First tangential coefficient.
        p1: f64,
        /// Second tangential coefficient.
        p2: f64,
        /// Radial coefficient of θ⁶.
        k3: f64,
        /// Radial coefficient of θ⁸.
        k4: f64,
        /// Thin-prism coefficient of θ² in x.
        sx1: f64,
        /// Thin-prism coefficient of θ² in y.
        sy1: f64,
    },
    /// COLMAP `FOV` (Devernay & Faugeras 2001, "Straight lines have to be straight"):
    /// `x' = x·s`, `y' = y·s` with `s = atan(2 r tan(ω/2)) / (r ω)`.
    ///
    /// Near the singular limits COLMAP replaces s by second-order Taylor terms, and so does
    /// Kiln: for ω² < 1e-4, `s = 1 + ω² r²/3 − ω²/12`; else for r² < 1e-4,
    /// `s = −2 t (4 r² t² − 3) / (3 ω)` with t = tan(ω/2). (The ω branch is the expansion COLMAP
    /// also uses for the inverse map; the expansion of s itself has the opposite signs. The two
    /// differ by ω²(1/6 − 2r²/3) relative, under 1e-4 for r < 1, and Kiln keeps COLMAP's value
    /// because that is the projection COLMAP fitted ω with.)
    ///
    /// Source: COLMAP `models.h`, `FOVCameraModel::ImgFromCam` and `::Distortion`.
    Fov {
        /// Field-of-view parameter ω, radians; 0 is the pinhole.
        omega: f64,
    },
}

/// Below this, COLMAP's `FOVCameraModel::Distortion` switches ω² or r² to its Taylor branch
/// (COLMAP: "chosen arbitrarily").
const FOV_EPSILON: f64 = 1e-4;

/// COLMAP's `FisheyeFromNormal`: the equidistant fisheye point `(x·θ/r, y·θ/r)`, θ = atan(r), of
/// the normalised point (x, y); the point itself when r ≤ `f64::EPSILON` (θ/r → 1).
fn equidistant(x: f64, y: f64) -> (f64, f64) {
    let r = (x * x + y * y).sqrt();
    if r > f64::EPSILON {
        let scale = r.atan() / r;
        (x * scale, y * scale)
    } else {
        (x, y)
    }
}

impl Distortion {
    /// Distorted normalised coordinates `[x', y']` of the undistorted normalised point (x, y).
    ///
    /// - `x`, `y`: normalised camera coordinates X/Z, Y/Z (OpenCV frame), unitless.
    ///
    /// Source: the formulas on each variant (OpenCV calib3d; COLMAP `models.h`). Where COLMAP
    /// computes an offset and adds it back (`x + du`), so does this, to stay within rounding of
    /// COLMAP's projection.
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
            Distortion::FullOpenCv {
                k1,
                k2,
                p1,
                p2,
                k3,
                k4,
                k5,
                k6,
            } => {
                let r4 = r2 * r2;
                let r6 = r4 * r2;
                let radial =
                    (1.0 + k1 * r2 + k2 * r4 + k3 * r6) / (1.0 + k4 * r2 + k5 * r4 + k6 * r6);
                let xy = x * y;
                [
                    x * radial + 2.0 * p1 * xy + p2 * (r2 + 2.0 * x * x),
                    y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * xy,
                ]
            }
            Distortion::OpenCvFisheye { k1, k2, k3, k4 } => {
                let (xf, yf) = equidistant(x, y);
                let t2 = xf * xf + yf * yf;
                let t4 = t2 * t2;
                let radial = k1 * t2 + k2 * t4 + k3 * t4 * t2 + k4 * t4 * t4;
                [xf + xf * radial, yf + yf * radial]
            }
            Distortion::SimpleRadialFisheye { k } => {
                let (xf, yf) = equidistant(x, y);
                let radial = k * (xf * xf + yf * yf);
                [xf + xf * radial, yf + yf * radial]
            }
            Distortion::RadialFisheye { k1, k2 } => {
                let (xf, yf) = equidistant(x, y);
                let t2 = xf * xf + yf * yf;
                let radial = k1 * t2 + k2 * t2 * t2;
                [xf + xf * radial, yf + yf * radial]
            }
            Distortion::ThinPrismFisheye {
                k1,
                k2,
                p1,
                p2,
                k3,
                k4,
                sx1,
                sy1,
            } => {
                let (xf, yf) = equidistant(x, y);
                let t2 = xf * xf + yf * yf;
                let t4 = t2 * t2;
                let t6 = t4 * t2;
                let radial = k1 * t2 + k2 * t4 + k3 * t6 + k4 * t6 * t2;
                let xy = xf * yf;
                let dx = xf * radial + 2.0 * p1 * xy + p2 * (t2 + 2.0 * xf * xf) + sx1 * t2;
                let dy = yf * radial + 2.0 * p2 * xy + p1 * (t2 + 2.0 * yf * yf) + sy1 * t2;
                [xf + dx, yf + dy]
            }
            Distortion::Fov { omega } => {
                let omega2 = omega * omega;
                let factor = if omega2 < FOV_EPSILON {
                    omega2 * r2 / 3.0 - omega2 / 12.0 + 1.0
                } else if r2 < FOV_EPSILON {
                    let t = (omega / 2.0).tan();
                    -2.0 * t * (4.0 * r2 * t * t - 3.0) / (3.0 * omega)
                } else {
                    let r = r2.sqrt();
                    (r * 2.0 * (omega / 2.0).tan()).atan() / (r * omega)
                };
                [x * factor, y * factor]
            }
        }
    }

    /// True when [`Self::distort`] is the identity (the variant is `None`, or a pinhole-based
    /// variant whose coefficients are all exactly zero, or `Fov` with ω = 0), so undistorting
    /// can be skipped. Never for a fisheye variant: with zero coefficients it is still the
    /// equidistant projection.
    #[must_use]
    pub fn is_identity(&self) -> bool {
        match *self {
            Distortion::None => true,
            Distortion::SimpleRadial { k } => k == 0.0,
            Distortion::Radial { k1, k2 } => k1 == 0.0 && k2 == 0.0,
            Distortion::OpenCv { k1, k2, p1, p2 } => {
                k1 == 0.0 && k2 == 0.0 && p1 == 0.0 && p2 == 0.0
            }
            Distortion::FullOpenCv {
                k1,
                k2,
                p1,
                p2,
                k3,
                k4,
                k5,
                k6,
            } => [k1, k2, p1, p2, k3, k4, k5, k6].iter().all(|&c| c == 0.0),
            Distortion::Fov { omega } => omega == 0.0,
            Distortion::OpenCvFisheye { .. }
            | Distortion::SimpleRadialFisheye { .. }
            | Distortion::RadialFisheye { .. }
            | Distortion::ThinPrismFisheye { .. } => false,
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
/// [`Distortion::None`] returns a clone without resampling. Every output pixel is a ray in front
/// of the camera (θ < 90°), so every model's distorted location is defined, and no pixel is NaN.
///
/// Fisheye lenses (the fisheye variants and `Fov`): the output keeps the input's intrinsics, so
/// it covers only the field of view a pinhole with that focal length sees. A wide fisheye photo
/// shows more than that; its periphery is cropped (and the output is sharp in the centre and
/// stretched towards its edges). Rays beyond 90° off the axis, which a fisheye can image, have no
/// pinhole projection at all and are always cropped.
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

    /// One sample of each model added for COLMAP's fisheye and full models, with mild
    /// coefficients (monotone over the field of view the tests use).
    fn new_models() -> [Distortion; 6] {
        [
            Distortion::FullOpenCv {
                k1: 0.1,
                k2: -0.05,
                p1: 0.002,
                p2: -0.001,
                k3: 0.01,
                k4: 0.05,
                k5: -0.01,
                k6: 0.002,
            },
            Distortion::OpenCvFisheye {
                k1: 0.05,
                k2: -0.01,
                k3: 0.002,
                k4: -0.0005,
            },
            Distortion::SimpleRadialFisheye { k: -0.05 },
            Distortion::RadialFisheye {
                k1: 0.05,
                k2: -0.01,
            },
            Distortion::ThinPrismFisheye {
                k1: 0.05,
                k2: -0.01,
                p1: 0.002,
                p2: -0.001,
                k3: 0.001,
                k4: -0.0002,
                sx1: 0.003,
                sy1: -0.002,
            },
            Distortion::Fov { omega: 0.9 },
        ]
    }

    /// The undistorted point whose distortion is (xd, yd): Newton's method on
    /// [`Distortion::distort`] with a central-difference Jacobian and step halving. Test-only:
    /// [`undistort`] never inverts a model, it only distorts. `None` unless it converges.
    fn invert(d: &Distortion, xd: f64, yd: f64) -> Option<[f64; 2]> {
        let residual = |x: f64, y: f64| {
            let [a, b] = d.distort(x, y);
            [a - xd, b - yd]
        };
        let (mut x, mut y) = (xd, yd);
        for _ in 0..200 {
            let [ex, ey] = residual(x, y);
            let e = ex.hypot(ey);
            if e < 1e-14 {
                return Some([x, y]);
            }
            let h = 1e-7 * (1.0 + x.abs().max(y.abs()));
            let ([ax, ay], [bx, by]) = (d.distort(x + h, y), d.distort(x - h, y));
            let ([cx, cy], [dx, dy]) = (d.distort(x, y + h), d.distort(x, y - h));
            let (j00, j10) = ((ax - bx) / (2.0 * h), (ay - by) / (2.0 * h));
            let (j01, j11) = ((cx - dx) / (2.0 * h), (cy - dy) / (2.0 * h));
            let det = j00 * j11 - j01 * j10;
            if det == 0.0 || !det.is_finite() {
                return None;
            }
            let (sx, sy) = ((j11 * ex - j01 * ey) / det, (j00 * ey - j10 * ex) / det);
            let mut t = 1.0;
            loop {
                let (nx, ny) = (x - t * sx, y - t * sy);
                let [fx, fy] = residual(nx, ny);
                if fx.hypot(fy) < e || t < 1e-9 {
                    (x, y) = (nx, ny);
                    break;
                }
                t *= 0.5;
            }
        }
        let [ex, ey] = residual(x, y);
        (ex.hypot(ey) < 1e-12).then_some([x, y])
    }

    fn close(got: [f64; 2], want: [f64; 2], tol: f64, what: &str) {
        assert!(
            (got[0] - want[0]).abs() < tol && (got[1] - want[1]).abs() < tol,
            "{what}: got {got:?}, want {want:?}"
        );
    }

    #[test]
    fn full_opencv_matches_the_rational_formula() {
        let d = Distortion::FullOpenCv {
            k1: 0.1,
            k2: -0.05,
            p1: 0.002,
            p2: -0.001,
            k3: 0.01,
            k4: 0.05,
            k5: -0.01,
            k6: 0.002,
        };
        // (0.3, -0.2): r² = 0.09 + 0.04 = 0.13, r⁴ = 0.0169, r⁶ = 0.002197, x·y = -0.06.
        let q = (1.0 + 0.1 * 0.13 - 0.05 * 0.0169 + 0.01 * 0.002197)
            / (1.0 + 0.05 * 0.13 - 0.01 * 0.0169 + 0.002 * 0.002197);
        // x' = x q + 2 p1 x y + p2 (r² + 2x²),  y' = y q + p1 (r² + 2y²) + 2 p2 x y.
        let want = [
            0.3 * q + 2.0 * 0.002 * -0.06 - 0.001 * (0.13 + 0.18),
            -0.2 * q + 0.002 * (0.13 + 0.08) + 2.0 * -0.001 * -0.06,
        ];
        close(d.distort(0.3, -0.2), want, 1e-15, "(0.3, -0.2)");
        // (0.6, 0.8): r² = 1, so q = (1 + k1 + k2 + k3) / (1 + k4 + k5 + k6); x·y = 0.48.
        let q = (1.0 + 0.1 - 0.05 + 0.01) / (1.0 + 0.05 - 0.01 + 0.002);
        let want = [
            0.6 * q + 2.0 * 0.002 * 0.48 - 0.001 * (1.0 + 0.72),
            0.8 * q + 0.002 * (1.0 + 1.28) + 2.0 * -0.001 * 0.48,
        ];
        close(d.distort(0.6, 0.8), want, 1e-15, "(0.6, 0.8)");
    }

    #[test]
    fn fisheye_models_match_the_equidistant_formulas() {
        use std::f64::consts::PI;
        // Points whose θ = atan(r) is exact: r = 1 → θ = π/4; r = √3 → π/3; r = 1/√3 → π/6.
        // The equidistant point is (x, y)·θ/r and has radius θ.
        let s3 = 3.0_f64.sqrt();
        let q = PI / 4.0; // (0.6, 0.8): r = 1, equidistant point (0.6 q, 0.8 q)
        let d = Distortion::OpenCvFisheye {
            k1: 0.05,
            k2: -0.01,
            k3: 0.002,
            k4: -0.0005,
        };
        let g = |t: f64| {
            1.0 + 0.05 * t.powi(2) - 0.01 * t.powi(4) + 0.002 * t.powi(6) - 0.0005 * t.powi(8)
        };
        close(
            d.distort(0.6, 0.8),
            [0.6 * q * g(q), 0.8 * q * g(q)],
            1e-15,
            "KB (0.6, 0.8)",
        );
        // (√3, 0): equidistant point (π/3, 0).
        close(
            d.distort(s3, 0.0),
            [PI / 3.0 * g(PI / 3.0), 0.0],
            1e-15,
            "KB (√3, 0)",
        );
        // (0, -1/√3): equidistant point (0, -π/6).
        close(
            d.distort(0.0, -1.0 / s3),
            [0.0, -PI / 6.0 * g(PI / 6.0)],
            1e-15,
            "KB (0, -1/√3)",
        );

        let d = Distortion::SimpleRadialFisheye { k: 0.25 };
        let g = 1.0 + 0.25 * q * q;
        close(
            d.distort(0.6, 0.8),
            [0.6 * q * g, 0.8 * q * g],
            1e-15,
            "SRF (0.6, 0.8)",
        );
        let t = PI / 3.0;
        close(
            d.distort(-s3, 0.0),
            [-t * (1.0 + 0.25 * t * t), 0.0],
            1e-15,
            "SRF (-√3, 0)",
        );

        let d = Distortion::RadialFisheye { k1: 0.25, k2: -0.5 };
        // (√3, 0): θ = π/3, θ² = π²/9, θ⁴ = π⁴/81.
        let want = PI / 3.0 * (1.0 + 0.25 * PI * PI / 9.0 - 0.5 * PI.powi(4) / 81.0);
        close(d.distort(s3, 0.0), [want, 0.0], 1e-15, "RF (√3, 0)");
        let g = 1.0 + 0.25 * q * q - 0.5 * q.powi(4);
        close(
            d.distort(0.6, 0.8),
            [0.6 * q * g, 0.8 * q * g],
            1e-15,
            "RF (0.6, 0.8)",
        );

        let d = Distortion::ThinPrismFisheye {
            k1: 0.05,
            k2: -0.01,
            p1: 0.002,
            p2: -0.001,
            k3: 0.001,
            k4: -0.0002,
            sx1: 0.003,
            sy1: -0.002,
        };
        // (0.6, 0.8): xf = 0.6q, yf = 0.8q, θ² = q², xf·yf = 0.48 q², xf² = 0.36 q², yf² = 0.64 q².
        let q2 = q * q;
        let rho = 0.05 * q2 - 0.01 * q2.powi(2) + 0.001 * q2.powi(3) - 0.0002 * q2.powi(4);
        let want = [
            0.6 * q * (1.0 + rho) + 2.0 * 0.002 * 0.48 * q2 - 0.001 * (q2 + 0.72 * q2) + 0.003 * q2,
            0.8 * q * (1.0 + rho) + 0.002 * (q2 + 1.28 * q2) + 2.0 * -0.001 * 0.48 * q2
                - 0.002 * q2,
        ];
        close(d.distort(0.6, 0.8), want, 1e-15, "TP (0.6, 0.8)");
        // (0, -1/√3): xf = 0, yf = -π/6 = -a, θ² = a²: only y·(1 + ρ), p1 (θ² + 2 yf²) and the
        // prism terms sx1 θ², sy1 θ² remain.
        let a = PI / 6.0;
        let a2 = a * a;
        let rho = 0.05 * a2 - 0.01 * a2.powi(2) + 0.001 * a2.powi(3) - 0.0002 * a2.powi(4);
        let want = [
            -0.001 * a2 + 0.003 * a2,
            -a * (1.0 + rho) + 0.002 * 3.0 * a2 - 0.002 * a2,
        ];
        close(d.distort(0.0, -1.0 / s3), want, 1e-15, "TP (0, -1/√3)");
    }

    #[test]
    fn fov_matches_the_arctangent_formula_and_colmaps_small_value_branches() {
        use std::f64::consts::PI;
        // ω = π/2: tan(ω/2) = 1, so s = atan(2r) / (r π/2).
        let d = Distortion::Fov { omega: PI / 2.0 };
        // r = 0.5: atan(1) = π/4, s = (π/4) / (π/4) = 1.
        close(d.distort(0.3, 0.4), [0.3, 0.4], 1e-15, "r = 0.5");
        // r = √3/2 at (0.6, 0.8)·√3/2: atan(√3) = π/3, s = (π/3) / (√3 π/4) = 4/(3√3), and
        // (0.6, 0.8)·(√3/2)·4/(3√3) = (0.6, 0.8)·2/3 = (0.4, 0.8·2/3).
        let h = 3.0_f64.sqrt() / 2.0;
        close(
            d.distort(0.6 * h, 0.8 * h),
            [0.4, 0.8 * 2.0 / 3.0],
            1e-15,
            "r = √3/2",
        );
        // r² = 2.5e-5 < 1e-4: COLMAP's r-branch s = -2t(4r²t² - 3)/(3ω) with t = 1:
        // s = 2(3 - 1e-4) / (1.5π).
        let s = 2.0 * (3.0 - 1e-4) / (1.5 * PI);
        close(
            d.distort(0.003, 0.004),
            [0.003 * s, 0.004 * s],
            1e-17,
            "small r",
        );
        // ... which is the closed form atan(0.01) / (0.005 π/2) but for the z⁵/5 term of
        // atan z (z = 2r = 0.01): 2e-11 / (0.005 π/2) ≈ 2.5e-9.
        let exact = 0.01_f64.atan() / (0.005 * PI / 2.0);
        assert!((s - exact).abs() < 3e-9, "{s} vs {exact}");
        // ω² = 2.5e-5 < 1e-4: COLMAP's ω-branch s = 1 + ω² r²/3 - ω²/12, at r² = 0.25.
        let d = Distortion::Fov { omega: 0.005 };
        let s = 1.0 + 2.5e-5 * 0.25 / 3.0 - 2.5e-5 / 12.0;
        close(d.distort(0.3, 0.4), [0.3 * s, 0.4 * s], 1e-16, "small ω");
        // Within ω²(1/6 - 2r²/3) of the closed form (variant doc).
        let exact = (0.5 * 2.0 * 0.0025_f64.tan()).atan() / (0.5 * 0.005);
        assert!((s - exact).abs() < 1e-5, "{s} vs {exact}");
    }

    #[test]
    fn zero_coefficients_are_identity_except_for_fisheyes() {
        use std::f64::consts::PI;
        let full = Distortion::FullOpenCv {
            k1: 0.0,
            k2: 0.0,
            p1: 0.0,
            p2: 0.0,
            k3: 0.0,
            k4: 0.0,
            k5: 0.0,
            k6: 0.0,
        };
        let fov = Distortion::Fov { omega: 0.0 };
        for d in [full, fov] {
            assert!(d.is_identity(), "{d:?}");
            assert_eq!(d.distort(0.3, -0.2), [0.3, -0.2], "{d:?}");
            assert_eq!(d.distort(-2.5, 4.0), [-2.5, 4.0], "{d:?}");
        }
        // A fisheye with zero coefficients is the equidistant projection: (0.6, 0.8) → ·π/4.
        let fisheyes = [
            Distortion::OpenCvFisheye {
                k1: 0.0,
                k2: 0.0,
                k3: 0.0,
                k4: 0.0,
            },
            Distortion::SimpleRadialFisheye { k: 0.0 },
            Distortion::RadialFisheye { k1: 0.0, k2: 0.0 },
            Distortion::ThinPrismFisheye {
                k1: 0.0,
                k2: 0.0,
                p1: 0.0,
                p2: 0.0,
                k3: 0.0,
                k4: 0.0,
                sx1: 0.0,
                sy1: 0.0,
            },
        ];
        for d in fisheyes {
            assert!(!d.is_identity(), "{d:?}");
            close(
                d.distort(0.6, 0.8),
                [0.6 * PI / 4.0, 0.8 * PI / 4.0],
                1e-15,
                "zero fisheye",
            );
        }
        for d in new_models() {
            assert!(!d.is_identity(), "{d:?}");
        }
        assert!(!Distortion::Fov { omega: 1e-9 }.is_identity());
    }

    #[test]
    fn the_optical_axis_is_fixed_and_no_model_gives_nan() {
        for d in new_models() {
            assert_eq!(d.distort(0.0, 0.0), [0.0, 0.0], "{d:?}");
            // Inside and just outside the r ≤ ε and r² < 1e-4 branches, and very far out.
            for r in [1e-300, 1e-17, 2.3e-16, 1e-9, 0.0099, 0.0101, 10.0, 1e6] {
                let [a, b] = d.distort(r * 0.6, r * -0.8);
                assert!(a.is_finite() && b.is_finite(), "{d:?} at r = {r}: {a}, {b}");
            }
        }
        // Tiny ω with tiny r: the ω-branch, still exact at the origin.
        assert_eq!(
            Distortion::Fov { omega: 1e-3 }.distort(0.0, 0.0),
            [0.0, 0.0]
        );
    }

    #[test]
    fn new_models_round_trip_over_the_field_of_view() {
        // Fisheyes and FOV up to θ = 70° (r = tan 70° ≈ 2.75); FULL_OPENCV up to r = 1 (its
        // rational polynomial is calibrated for a pinhole's field of view).
        for d in new_models() {
            let r_max = if matches!(d, Distortion::FullOpenCv { .. }) {
                1.0
            } else {
                70_f64.to_radians().tan()
            };
            let mut n = 0;
            for ri in 0..=10 {
                let r = r_max * f64::from(ri) / 10.0;
                for k in 0..12 {
                    let phi = f64::from(k) * std::f64::consts::PI / 6.0 + 0.1;
                    let p = [r * phi.cos(), r * phi.sin()];
                    let [xd, yd] = d.distort(p[0], p[1]);
                    let back = invert(&d, xd, yd).unwrap_or_else(|| panic!("{d:?} at {p:?}"));
                    close(back, p, 1e-9 * (1.0 + r), &format!("{d:?} at {p:?}"));
                    n += 1;
                }
            }
            assert_eq!(n, 132);
        }
    }

    #[test]
    fn undistorting_a_fisheye_rendering_restores_straight_lines() {
        // A scene of straight stripes: red = 0.5 + 0.5 sin(4x), green = 0.5 + 0.5 sin(4y) in
        // undistorted normalised coordinates, so every column of the pinhole image has one red
        // value and every row one green value. It is rendered through each lens (each pixel's
        // distorted point inverted by Newton's method), then undistorted; the result must be
        // the pinhole rendering up to bilinear interpolation (≈ h²/8 · g'' ≈ 0.004 here).
        let (w, h) = (96_u32, 72_u32);
        let k = Intrinsics {
            fx: 40.0,
            fy: 40.0,
            cx: 48.0,
            cy: 36.0,
            width: w,
            height: h,
        };
        let scene = |x: f64, y: f64| {
            [
                (0.5 + 0.5 * (4.0 * x).sin()) as f32,
                (0.5 + 0.5 * (4.0 * y).sin()) as f32,
                0.25,
            ]
        };
        for d in new_models() {
            let mut data = Vec::with_capacity((w * h * 3) as usize);
            for j in 0..h {
                for i in 0..w {
                    let xd = (f64::from(i) + 0.5 - k.cx) / k.fx;
                    let yd = (f64::from(j) + 0.5 - k.cy) / k.fy;
                    // Beyond the lens's image of the forward half-space: black.
                    data.extend(invert(&d, xd, yd).map_or([0.0; 3], |[x, y]| scene(x, y)));
                }
            }
            let photo = RgbImage {
                width: w,
                height: h,
                data,
            };
            let out = undistort(&photo, &k, &d);
            let mut checked = 0;
            let mut worst = 0.0_f32;
            for j in 0..h as usize {
                for i in 0..w as usize {
                    let px = &out.data[(j * w as usize + i) * 3..][..3];
                    assert!(px.iter().all(|v| v.is_finite()), "{d:?} ({i}, {j})");
                    let x = (i as f64 + 0.5 - k.cx) / k.fx;
                    let y = (j as f64 + 0.5 - k.cy) / k.fy;
                    let [xd, yd] = d.distort(x, y);
                    let (ud, vd) = (k.fx * xd + k.cx, k.fy * yd + k.cy);
                    let inner = |p: f64, n: u32| p > 1.5 && p < f64::from(n) - 1.5;
                    if !(inner(ud, w) && inner(vd, h)) {
                        continue; // read at the border (clamped) or outside the photo
                    }
                    let want = scene(x, y);
                    for c in 0..3 {
                        worst = worst.max((px[c] - want[c]).abs());
                    }
                    checked += 1;
                }
            }
            assert!(worst < 0.02, "{d:?}: worst |Δ| = {worst}");
            assert!(
                checked > (w * h) as usize / 3,
                "{d:?}: only {checked} pixels"
            );
        }
    }

    #[test]
    fn undistort_writes_no_nan_for_any_model_or_field_of_view() {
        // fx = 2: pinhole rays up to ~87° off the axis; a FULL_OPENCV denominator 1 - r² that
        // crosses zero; a FOV with ω near π (tan(ω/2) huge).
        let (w, h) = (40_u32, 30_u32);
        let img = ramp(w, h);
        let k = Intrinsics {
            fx: 2.0,
            fy: 2.0,
            cx: 20.0,
            cy: 15.0,
            width: w,
            height: h,
        };
        let mut models = new_models().to_vec();
        models.push(Distortion::FullOpenCv {
            k1: 0.0,
            k2: 0.0,
            p1: 0.0,
            p2: 0.0,
            k3: 0.0,
            k4: -1.0,
            k5: 0.0,
            k6: 0.0,
        });
        models.push(Distortion::Fov {
            omega: std::f64::consts::PI - 1e-12,
        });
        for d in models {
            let out = undistort(&img, &k, &d);
            assert!(out.data.iter().all(|v| v.is_finite()), "{d:?}");
            // The centre pixel reads (close to) itself.
            let c = ((15 * w + 20) * 3) as usize;
            assert_eq!(out.data[c + 2], 0.25, "{d:?}");
        }
    }
}
