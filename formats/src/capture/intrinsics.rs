//! Pinhole intrinsics ([`Intrinsics`]): focal lengths, principal point and image size of one
//! image, in pixels. A file of its own because both the lens models (`distortion.rs`) and the
//! capture types (`model.rs`) build on it.

/// Pinhole intrinsics of one image, in pixels.
///
/// Guaranteed by the readers: `fx`, `fy` > 0 and finite, `cx`, `cy` finite, `width`, `height` > 0.
/// The principal point (`cx`, `cy`) is measured from the top-left corner of the top-left pixel
/// (COLMAP convention: the centre of pixel (i, j) is at (i + 0.5, j + 0.5)), so rescaling an
/// image rescales every field by the same factor with no half-pixel shift ([`Self::scaled_to`]).
/// A camera-frame point (X, Y, Z) (OpenCV, Z > 0 in front) projects to
/// `u = fx·X/Z + cx`, `v = fy·Y/Z + cy` before lens distortion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Intrinsics {
    /// Focal length along x (image columns), pixels.
    pub fx: f64,
    /// Focal length along y (image rows), pixels.
    pub fy: f64,
    /// Principal point x, pixels from the left edge of the image.
    pub cx: f64,
    /// Principal point y, pixels from the top edge of the image.
    pub cy: f64,
    /// Image width W, pixels.
    pub width: u32,
    /// Image height H, pixels.
    pub height: u32,
}

impl Intrinsics {
    /// These intrinsics for the same camera imaged at `width` × `height` pixels.
    ///
    /// Exact for any resize that maps the image rectangle onto the new one (what
    /// [`load_rgb`](super::load_rgb) does): `fx·W'/W`, `cx·W'/W`, `fy·H'/H`, `cy·H'/H`. No rounding is applied; the
    /// x and y factors differ when rounding the size changed the aspect ratio.
    /// - `width`, `height`: the new size W' × H', pixels; should be > 0.
    ///
    /// # Panics
    /// Never; if `self.width` or `self.height` is 0 the result holds non-finite values.
    ///
    /// Source: follows from the corner-origin pixel convention (COLMAP `Camera::Rescale`).
    #[must_use]
    pub fn scaled_to(&self, width: u32, height: u32) -> Intrinsics {
        let sx = f64::from(width) / f64::from(self.width);
        let sy = f64::from(height) / f64::from(self.height);
        Intrinsics {
            fx: self.fx * sx,
            fy: self.fy * sy,
            cx: self.cx * sx,
            cy: self.cy * sy,
            width,
            height,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_to_is_exact_for_a_2x_downscale() {
        let k = Intrinsics {
            fx: 1375.52,
            fy: 1374.49,
            cx: 554.558,
            cy: 965.268,
            width: 1080,
            height: 1920,
        };
        let half = k.scaled_to(540, 960);
        assert_eq!(
            half,
            Intrinsics {
                fx: 687.76,
                fy: 687.245,
                cx: 277.279,
                cy: 482.634,
                width: 540,
                height: 960,
            }
        );
        // Pixel-centre grid: the centre of full-res pixel 0 is 0.5; the half-res pixel 0 spans
        // full-res [0, 2) with centre 1.0 = 0.5 · 2 in full-res units.
        let back = half.scaled_to(1080, 1920);
        assert_eq!(back, k);
    }

    #[test]
    fn scaled_to_uses_separate_x_and_y_factors() {
        let k = Intrinsics {
            fx: 100.0,
            fy: 200.0,
            cx: 50.0,
            cy: 40.0,
            width: 100,
            height: 80,
        };
        let s = k.scaled_to(50, 20);
        assert_eq!((s.fx, s.cx, s.fy, s.cy), (50.0, 25.0, 50.0, 10.0));
    }
}
