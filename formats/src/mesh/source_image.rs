//! Texture files as mesh readers find them, made into the image types the rest of Kiln handles:
//! PNG, JPEG and KTX2 (`KHR_texture_basisu`: Basis Universal ETC1S or UASTC LDR) are kept byte
//! for byte; WebP (`EXT_texture_webp`) is decoded and stored as lossless PNG of its texels.
//! KTX2 is kept (issue 44 rule 4) because its GPU-ready blocks are the point of the file: as PNG
//! a jet's 3.09 MB of KTX2 became 16.2 MB over the tile levels and 8× the GPU memory; a KTX2
//! that does not transcode to 8-bit RGBA is still refused here, where the file can be named.
//! Types are told by their leading bytes, not by file names or declared MIME types, which
//! exporters get wrong.
//!
//! Sources: PNG (ISO/IEC 15948 §5.2 signature), JPEG (SOI + marker), WebP (RIFF container,
//! `WEBP` form type), KTX 2.0 (§3.1 file identifier); KTX2 payloads are transcoded by the
//! `basisu` crate, a port of Binomial's reference transcoder.

use super::EmbeddedImage;

use super::ktx2_write::IDENTIFIER as KTX2_IDENTIFIER;

/// What a texture file became, for the reader's log line.
pub(crate) struct Converted {
    /// The image as Kiln keeps it (PNG, JPEG or KTX2).
    pub image: EmbeddedImage,
    /// `Some("WebP")` when the file was decoded and stored as PNG.
    pub from: Option<String>,
}

/// `bytes` as a PNG, JPEG or KTX2 [`EmbeddedImage`]: PNG, JPEG and KTX2 as they are (a KTX2 only
/// once its base level transcodes), WebP decoded to lossless PNG. `Ok(None)` for any other type.
///
/// # Errors
/// What is wrong, in words (for the reader's error naming the file and field): a WebP or KTX2
/// that does not decode, or a KTX2 that has no 8-bit RGBA form (HDR payloads).
pub(crate) fn as_kept_image(bytes: Vec<u8>) -> Result<Option<Converted>, String> {
    let kept = |mime: &str, bytes| {
        Ok(Some(Converted {
            image: EmbeddedImage {
                mime: mime.into(),
                bytes,
            },
            from: None,
        }))
    };
    match bytes.as_slice() {
        [0x89, b'P', b'N', b'G', ..] => kept("image/png", bytes),
        [0xFF, 0xD8, 0xFF, ..] => kept("image/jpeg", bytes),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => {
            let decoded = image::load_from_memory_with_format(&bytes, image::ImageFormat::WebP)
                .map_err(|e| format!("WebP image that cannot be decoded ({e})"))?;
            png(&decoded, "WebP".into()).map(Some)
        }
        b if b.starts_with(&KTX2_IDENTIFIER) => {
            // Transcoded once here so that a file every later stage would fail on is refused
            // while the reader can still name it.
            ktx2_pixels(&bytes)?;
            kept("image/ktx2", bytes)
        }
        _ => Ok(None),
    }
}

/// The base level of a KTX2 (Basis Universal) file as RGBA8 (RGB8 when it has no alpha), with
/// words saying what it was.
fn ktx2_pixels(bytes: &[u8]) -> Result<(image::DynamicImage, String), String> {
    let ktx2 = basisu::Transcoder::new(bytes)
        .map_err(|e| format!("KTX2 image that cannot be read ({e:?})"))?;
    let (w, h) = ktx2.base_dimensions();
    let what = format!("KTX2 ({:?}, {w} × {h})", ktx2.source_format());
    let rgba = ktx2
        .transcode_image(
            0,
            0,
            0,
            basisu::TargetFormat::Rgba32,
            basisu::DecodeFlags::NONE,
        )
        .map_err(|e| {
            format!(
                "{what} that cannot be transcoded to 8-bit RGBA ({e:?}); re-encode it as ETC1S \
                 or UASTC LDR, or reference a PNG or JPEG"
            )
        })?;
    let rgba = image::RgbaImage::from_raw(w, h, rgba)
        .ok_or_else(|| format!("{what} whose level 0 is not {w} × {h} RGBA texels"))?;
    let decoded = if ktx2.has_alpha() {
        image::DynamicImage::ImageRgba8(rgba)
    } else {
        image::DynamicImage::ImageRgb8(image::DynamicImage::ImageRgba8(rgba).to_rgb8())
    };
    Ok((decoded, what))
}

/// The base-level pixels of a texture file of any type a glTF tile may reference: PNG, JPEG,
/// WebP (decoded by `image`) or KTX2 (transcoded), told by its leading bytes.
///
/// # Errors
/// What is wrong, in words: a file of another type or one that does not decode.
pub fn decode_texture(bytes: &[u8]) -> Result<image::DynamicImage, String> {
    if bytes.starts_with(&KTX2_IDENTIFIER) {
        return ktx2_pixels(bytes).map(|(pixels, _)| pixels);
    }
    image::load_from_memory(bytes).map_err(|e| format!("an image that cannot be decoded ({e})"))
}

/// `pixels` as a PNG with zlib's balanced compression and adaptive row filters.
///
/// Why not `PngEncoder::new`: in `image` 0.25 it is the fast setting, whose files were 30 %
/// (Duck's 256² level, 18,530 → 14,286 bytes) and 4.5 % (Avocado's 1024² base colour, 680,623
/// → 650,235 bytes) larger, for 1.6 ms and 96 ms of encoding instead of 0.3 and 12 ms (release,
/// one core). `Best` saved 2–4 % more at 13× the time.
///
/// # Errors
/// The encoder's, e.g. for a colour type PNG cannot hold.
pub fn encode_png(pixels: &image::DynamicImage) -> Result<Vec<u8>, image::ImageError> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let mut bytes = Vec::new();
    pixels.write_with_encoder(PngEncoder::new_with_quality(
        &mut bytes,
        CompressionType::Default,
        FilterType::Adaptive,
    ))?;
    Ok(bytes)
}

/// `decoded` as a lossless PNG, noting what it was decoded from.
fn png(decoded: &image::DynamicImage, from: String) -> Result<Converted, String> {
    let bytes = encode_png(decoded)
        .map_err(|e| format!("{from} image that cannot be stored as PNG ({e})"))?;
    Ok(Converted {
        image: EmbeddedImage {
            mime: "image/png".into(),
            bytes,
        },
        from: Some(from),
    })
}
