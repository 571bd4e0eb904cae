//! Capture images: decode (JPEG, PNG) to `[H, W, 3]` f32, downscale to a maximum side or to a
//! given size by area averaging ([`super::area`]), and read an image's size from its header
//! without decoding pixels.
//!
//! EXIF orientation is applied on decode and in [`image_size`], so sizes agree between the two.
//! [`load_rgb`] drops alpha (not composited); [`load_rgb_alpha`] keeps it, premultiplied; gray is
//! replicated to RGB; 16-bit samples are scaled by 1/65535. Values are the stored (sRGB-encoded)
//! values, not linearised.

use std::io::Cursor;
use std::path::Path;

use ::image::error::{DecodingError, ImageFormatHint};
use ::image::metadata::Orientation;
use ::image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader};

use super::area::area_resize;
use crate::{Error, Result};

/// How capture photos are downscaled, as `metrics.json` states it: area averaging
/// ([`super::area`]; OpenCV `INTER_AREA`, PIL `BOX` at integer factors), unless the capture ships
/// its own `images_<n>` copies at the size asked for ([`super::plan_downscale`]).
pub const DOWNSCALE_FILTER: &str = "area";

/// An RGB image as f32, `[H, W, 3]` row-major (row j, column i, channel c at
/// `data[(j·W + i)·3 + c]`).
///
/// Values are the stored 8-bit (or 16-bit) sample values divided by 255 (65535), in [0, 1]: still
/// sRGB-encoded as stored ("linear-as-stored"), not converted to linear light.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RgbImage {
    /// Width W, pixels.
    pub width: u32,
    /// Height H, pixels.
    pub height: u32,
    /// Samples, `[H, W, 3]`, length H·W·3, each in [0, 1].
    pub data: Vec<f32>,
}

/// Size `(W', H')` that [`load_rgb`] gives an image of `width` × `height` for `max_side`.
///
/// Guaranteed: never larger than the input (no upscaling); `max(W', H') = max_side` when the image
/// is larger; the other side is `round(side · max_side / max(W, H))`, at least 1, so the aspect
/// ratio is kept to within half a pixel. `None` (or a large enough `max_side`) keeps the size.
/// - `width`, `height`: the stored size, pixels.
/// - `max_side`: the largest allowed side, pixels, ≥ 1; `None` for no limit.
///
/// Example: 1080 × 1920 with `max_side` 270 → 152 × 270 (1080·270/1920 = 151.875).
#[must_use]
pub fn scaled_size(width: u32, height: u32, max_side: Option<u32>) -> (u32, u32) {
    let long = width.max(height);
    let Some(max_side) = max_side else {
        return (width, height);
    };
    if long <= max_side || max_side == 0 {
        return (width, height);
    }
    let side = |s: u32| -> u32 {
        if s == long {
            max_side
        } else {
            // Integer rounding of s·max/long: exact, no float drift.
            let num = u64::from(s) * u64::from(max_side);
            let q = (2 * num + u64::from(long)) / (2 * u64::from(long));
            (q as u32).max(1)
        }
    };
    (side(width), side(height))
}

/// Decode an image file to `[H, W, 3]` f32 in [0, 1], downscaled so `max(W, H) ≤ max_side`.
///
/// Guaranteed: EXIF orientation applied; size as [`scaled_size`] says (never upscaled); the
/// downscale averages each output pixel's footprint by area ([`super::area::area_resize`]: the
/// block mean at integer factors, no aliasing), computed in f32 (no re-quantising).
/// Rescale the frame's intrinsics with [`super::Intrinsics::scaled_to`] to match.
/// - `path`: a JPEG or PNG file (format guessed from content, else from the extension).
/// - `max_side`: the largest allowed side, pixels, ≥ 1; `None` keeps the stored size.
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] if the file cannot be read; [`Error::Image`] naming the
/// file if it is not a decodable JPEG/PNG (truncated, corrupt, other format);
/// [`Error::Invalid`] if `max_side` is `Some(0)`.
///
/// Source: OpenCV `INTER_AREA` (see [`super::area`]).
pub fn load_rgb(path: &Path, max_side: Option<u32>) -> Result<RgbImage> {
    check_side(path, "max_side", max_side)?;
    let img = decode(path)?;
    let size = scaled_size(img.width(), img.height(), max_side);
    Ok(rgb_at(img, size))
}

/// Decode an image file to `[H, W, 3]` f32 in [0, 1] resampled by area to exactly `size`.
///
/// As [`load_rgb`], but the caller chooses the size: what gives every photo of one camera one
/// size ([`super::plan_downscale`]) when its photos differ by a pixel.
/// - `size`: `(W', H')`, pixels, each ≥ 1.
///
/// # Errors
/// As [`load_rgb`]; [`Error::Invalid`] if a side of `size` is 0.
pub fn load_rgb_at(path: &Path, size: (u32, u32)) -> Result<RgbImage> {
    check_side(path, "size", Some(size.0.min(size.1)))?;
    Ok(rgb_at(decode(path)?, size))
}

/// Decode an image file keeping its alpha channel: `(colour, alpha)` where the colour is
/// premultiplied by alpha (the image composited over black) and `alpha` is `[H, W]` in [0, 1], or
/// `None` when the file has no alpha channel or every pixel is opaque (then the colour is what
/// [`load_rgb`] returns).
///
/// Composite over a background `bg` as `colour + (1 − alpha)·bg`. The downscale filters the
/// premultiplied colour and the alpha together (as resampling RGBA must, or the colour of fully
/// transparent pixels, often arbitrary, would bleed into the edges).
/// - `path`, `max_side`: as [`load_rgb`].
///
/// # Errors
/// As [`load_rgb`].
pub fn load_rgb_alpha(path: &Path, max_side: Option<u32>) -> Result<(RgbImage, Option<Vec<f32>>)> {
    check_side(path, "max_side", max_side)?;
    let img = decode(path)?;
    let size = scaled_size(img.width(), img.height(), max_side);
    Ok(rgb_alpha_at(img, size))
}

/// [`load_rgb_alpha`] resampled by area to exactly `size` (as [`load_rgb_at`]).
///
/// # Errors
/// As [`load_rgb_at`].
pub fn load_rgb_alpha_at(path: &Path, size: (u32, u32)) -> Result<(RgbImage, Option<Vec<f32>>)> {
    check_side(path, "size", Some(size.0.min(size.1)))?;
    Ok(rgb_alpha_at(decode(path)?, size))
}

/// A decoded image, alpha kept and premultiplied, resampled to `size`: `(colour, alpha)` as
/// [`load_rgb_alpha`] returns them.
fn rgb_alpha_at(img: DynamicImage, (nw, nh): (u32, u32)) -> (RgbImage, Option<Vec<f32>>) {
    if !img.color().has_alpha() {
        return (rgb_at(img, (nw, nh)), None);
    }
    let mut rgba = img.into_rgba32f();
    for px in rgba.pixels_mut() {
        let a = px.0[3].clamp(0.0, 1.0);
        for c in &mut px.0[..3] {
            *c = c.clamp(0.0, 1.0) * a;
        }
        px.0[3] = a;
    }
    let size = rgba.dimensions();
    let rgba = area_resize(rgba.as_raw(), size, 4, (nw, nh));
    let n = (nw * nh) as usize;
    let mut data = Vec::with_capacity(n * 3);
    let mut alpha = Vec::with_capacity(n);
    for px in rgba.chunks_exact(4) {
        let a = px[3].clamp(0.0, 1.0);
        data.extend(px[..3].iter().map(|c| c.clamp(0.0, a)));
        alpha.push(a);
    }
    let image = RgbImage {
        width: nw,
        height: nh,
        data,
    };
    let opaque = alpha.iter().all(|&a| a >= 1.0);
    (image, (!opaque).then_some(alpha))
}

/// A decoded image as RGB (alpha dropped), resampled by area to `size` and clamped to [0, 1].
fn rgb_at(img: DynamicImage, (nw, nh): (u32, u32)) -> RgbImage {
    let rgb = img.into_rgb32f();
    let size = rgb.dimensions();
    let mut data = area_resize(rgb.as_raw(), size, 3, (nw, nh));
    for v in &mut data {
        *v = v.clamp(0.0, 1.0);
    }
    RgbImage {
        width: nw,
        height: nh,
        data,
    }
}

/// [`Error::Invalid`] naming `field` when a requested side is 0 pixels.
fn check_side(path: &Path, field: &str, side: Option<u32>) -> Result<()> {
    if side == Some(0) {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: field.into(),
            expected: "at least 1 pixel".into(),
            found: "0".into(),
        });
    }
    Ok(())
}

/// Read and decode an image file with its EXIF orientation applied (what the loaders share).
fn decode(path: &Path) -> Result<DynamicImage> {
    let image_err = |source| Error::Image {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut reader = ImageReader::new(Cursor::new(bytes.as_slice()));
    if let Ok(format) = ImageFormat::from_path(path) {
        reader.set_format(format);
    }
    let reader = reader
        .with_guessed_format()
        .map_err(|e| Error::io(path, e))?;
    if reader.format() == Some(ImageFormat::Jpeg) && jpeg_is_truncated(&bytes) {
        // The JPEG decoder fills missing rows with grey and reports success.
        return Err(image_err(ImageError::Decoding(DecodingError::new(
            ImageFormatHint::Exact(ImageFormat::Jpeg),
            "the file ends before the JPEG end-of-image marker (truncated)",
        ))));
    }
    let mut decoder = reader.into_decoder().map_err(image_err)?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let mut img = DynamicImage::from_decoder(decoder).map_err(image_err)?;
    img.apply_orientation(orientation);
    Ok(img)
}

/// Size `(W, H)` of an image file from its header, after EXIF orientation; pixels not decoded.
///
/// # Errors
/// As [`load_rgb`]: [`Error::NotFound`] / [`Error::Io`], or [`Error::Image`] naming the file.
pub fn image_size(path: &Path) -> Result<(u32, u32)> {
    let mut decoder = open_decoder(path)?;
    let (w, h) = decoder.dimensions();
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    Ok(match orientation {
        Orientation::Rotate90
        | Orientation::Rotate270
        | Orientation::Rotate90FlipH
        | Orientation::Rotate270FlipH => (h, w),
        _ => (w, h),
    })
}

/// Whether a JPEG stream (starting with SOI) ends before its EOI marker. Walks the marker
/// segments by their lengths and skips entropy-coded data by the byte-stuffing rule (`FF 00`,
/// `FF D0..D7` and fill `FF`s are data), so bytes appended after EOI (motion photos, MPF) and
/// marker-like bytes inside APP segments do not confuse it. Malformed segment lengths are left
/// to the decoder to report.
///
/// Source: ITU-T T.81 (JPEG) §B.1.1.2–B.1.1.5 (markers, fill bytes, byte stuffing).
fn jpeg_is_truncated(b: &[u8]) -> bool {
    if b.len() < 2 || b[0] != 0xFF || b[1] != 0xD8 {
        return false;
    }
    let mut i = 2;
    loop {
        // Expect a marker: one or more 0xFF, then the marker code.
        if i >= b.len() {
            return true;
        }
        if b[i] != 0xFF {
            return false; // not a marker where one must be: malformed, let the decoder say
        }
        while i < b.len() && b[i] == 0xFF {
            i += 1;
        }
        let Some(&marker) = b.get(i) else {
            return true;
        };
        i += 1;
        match marker {
            0xD9 => return false,           // EOI
            0x01 | 0xD0..=0xD7 => continue, // standalone markers (TEM, RSTn)
            _ => {}
        }
        let Some(len) = b
            .get(i..i + 2)
            .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
        else {
            return true;
        };
        if len < 2 {
            return false;
        }
        i += len;
        if i > b.len() {
            return true;
        }
        if marker == 0xDA {
            // Entropy-coded data up to the next real marker.
            loop {
                while i < b.len() && b[i] != 0xFF {
                    i += 1;
                }
                let Some(&next) = b.get(i + 1) else {
                    return true;
                };
                match next {
                    0x00 | 0xD0..=0xD7 => i += 2,
                    0xFF => i += 1,
                    _ => break,
                }
            }
        }
    }
}

/// Open `path` and read its header into a decoder (format from content, else extension).
fn open_decoder(path: &Path) -> Result<impl ImageDecoder> {
    let reader = ImageReader::open(path)
        .and_then(ImageReader::with_guessed_format)
        .map_err(|e| Error::io(path, e))?;
    reader.into_decoder().map_err(|source| Error::Image {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::test_dataset;

    /// An RGBA PNG (opaque red on every other pixel of every other row, the rest transparent
    /// green): premultiplied colour and alpha at full size, and after a 2× downscale partial alpha
    /// with premultiplied red equal to it and no green bleeding in; an opaque RGBA file reports no
    /// alpha.
    #[test]
    fn load_rgb_alpha_premultiplies_and_filters_colour_with_alpha() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rgba.png");
        let mut img = ::image::RgbaImage::new(4, 4);
        for (x, y, px) in img.enumerate_pixels_mut() {
            *px = if x % 2 == 0 && y % 2 == 0 {
                ::image::Rgba([255, 0, 0, 255])
            } else {
                ::image::Rgba([0, 255, 0, 0])
            };
        }
        img.save(&path).unwrap();
        let (full, alpha) = load_rgb_alpha(&path, None).unwrap();
        let alpha = alpha.unwrap();
        assert_eq!((full.width, full.height), (4, 4));
        assert_eq!(&full.data[..6], &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(&alpha[..2], &[1.0, 0.0]);
        let (half, alpha) = load_rgb_alpha(&path, Some(2)).unwrap();
        let alpha = alpha.unwrap();
        assert_eq!((half.width, half.height), (2, 2));
        for (px, a) in half.data.chunks_exact(3).zip(&alpha) {
            assert!(*a > 0.1 && *a < 0.9, "alpha {a}");
            // Premultiplied red equals alpha; no green from the transparent pixels.
            assert!(
                (px[0] - a).abs() < 1e-6 && px[1].abs() < 1e-6,
                "{px:?} at alpha {a}"
            );
        }
        let opaque = dir.path().join("opaque.png");
        ::image::RgbaImage::from_pixel(3, 3, ::image::Rgba([10, 20, 30, 255]))
            .save(&opaque)
            .unwrap();
        let (rgb, alpha) = load_rgb_alpha(&opaque, None).unwrap();
        assert!(alpha.is_none());
        assert_eq!(rgb, load_rgb(&opaque, None).unwrap());
    }

    #[test]
    fn scaled_size_rounds_and_never_upscales() {
        assert_eq!(scaled_size(1080, 1920, Some(270)), (152, 270));
        assert_eq!(scaled_size(1920, 1080, Some(270)), (270, 152));
        assert_eq!(scaled_size(1919, 1079, Some(960)), (960, 540)); // 539.78 → 540
        assert_eq!(scaled_size(1080, 1920, Some(4000)), (1080, 1920));
        assert_eq!(scaled_size(1080, 1920, None), (1080, 1920));
        assert_eq!(scaled_size(1000, 1, Some(10)), (10, 1)); // never 0
    }

    #[test]
    fn load_rgb_downscales_fox_to_max_side() {
        let path = test_dataset("capture-fox-instantngp").join("images/0001.jpg");
        let img = load_rgb(&path, Some(270)).unwrap();
        assert_eq!((img.width, img.height), (152, 270));
        assert_eq!(img.data.len(), 152 * 270 * 3);
        assert!(img.data.iter().all(|v| (0.0..=1.0).contains(v)));
        let mean = img.data.iter().map(|&v| f64::from(v)).sum::<f64>() / img.data.len() as f64;
        assert!(mean > 0.05 && mean < 0.95, "mean {mean}: not a real photo?");
        assert_eq!(image_size(&path).unwrap(), (1080, 1920));
    }

    #[test]
    fn load_rgb_full_size_keeps_8bit_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.png");
        let mut img = ::image::RgbImage::new(3, 2);
        img.put_pixel(0, 0, ::image::Rgb([255, 0, 51]));
        img.put_pixel(2, 1, ::image::Rgb([1, 2, 3]));
        img.save(&path).unwrap();
        let rgb = load_rgb(&path, None).unwrap();
        assert_eq!((rgb.width, rgb.height), (3, 2));
        assert_eq!(&rgb.data[..3], &[1.0, 0.0, 51.0 / 255.0]);
        assert_eq!(&rgb.data[15..18], &[1.0 / 255.0, 2.0 / 255.0, 3.0 / 255.0]);
    }

    #[test]
    fn load_rgb_rejects_corrupt_jpeg_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.jpg");
        // Deterministic pseudo-random bytes (LCG), not a JPEG.
        let mut state = 12345_u32;
        let bytes: Vec<u8> = (0..4096)
            .map(|_| {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (state >> 16) as u8
            })
            .collect();
        std::fs::write(&path, bytes).unwrap();
        let err = load_rgb(&path, Some(64)).unwrap_err();
        assert!(matches!(err, Error::Image { .. }), "{err:?}");
        assert!(err.to_string().contains("broken.jpg"), "{err}");
        // A truncated real JPEG fails cleanly too.
        let fox = test_dataset("capture-fox-instantngp").join("images/0001.jpg");
        let head = std::fs::read(&fox).unwrap()[..2000].to_vec();
        let truncated = dir.path().join("truncated.jpg");
        std::fs::write(&truncated, head).unwrap();
        let err = load_rgb(&truncated, None).unwrap_err();
        assert!(matches!(err, Error::Image { .. }), "{err:?}");
    }

    #[test]
    fn jpeg_truncation_is_detected_but_trailing_bytes_are_not() {
        let fox = test_dataset("capture-fox-instantngp").join("images/0001.jpg");
        let bytes = std::fs::read(&fox).unwrap();
        assert!(!jpeg_is_truncated(&bytes));
        for cut in [3, 100, 700, bytes.len() / 2, bytes.len() - 1] {
            assert!(jpeg_is_truncated(&bytes[..cut]), "cut at {cut}");
        }
        let mut appended = bytes.clone();
        appended.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x10, 1, 2, 3]);
        assert!(!jpeg_is_truncated(&appended));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("appended.jpg");
        std::fs::write(&path, &appended).unwrap();
        let img = load_rgb(&path, Some(64)).unwrap();
        assert_eq!((img.width, img.height), (36, 64));
    }

    #[test]
    fn load_rgb_reports_missing_file_and_zero_max_side() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_rgb(&dir.path().join("gone.png"), None).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
        let fox = test_dataset("capture-fox-instantngp").join("images/0001.jpg");
        let err = load_rgb(&fox, Some(0)).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    }
}
