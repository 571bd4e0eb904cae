//! Texture LOD: one image pyramid per source image, shared by every tile of a level.
//!
//! Level `h` of a tile is its height in the tree (0 = leaf, a parent = 1 + its highest child).
//! A tile at height `h` references each image at `⌊w / 2^h⌋ × ⌊h_px / 2^h⌋` pixels (at least 1),
//! then shrunk to fit `max_texture_size` on its longer side (aspect kept): a parent's simplified
//! triangles cover the same surface as its children's, so halving the resolution per level keeps
//! texels per screen pixel roughly constant at the distance where the parent's geometric error
//! (about double its children's) is shown — the texture scale of ½ per level that OpenDroneMap's
//! Obj2Tiles uses. Pixel area, and so bytes, fall to about ¼ per level.
//!
//! Files: the source bytes unchanged at `textures/<blake3 of the source>.<ext>` when a level
//! needs the full size; otherwise `textures/L<h>/<blake3 of the source>.<ext>`, written once for
//! the first level that needs that size and shared by every tile (of any level) that needs the
//! same size. URIs are relative to the tile GLBs in [`super::TILES_DIR`].
//!
//! Resampling: `image`'s `Triangle` filter (a tent whose support widens with the reduction, so a
//! ½ step averages each 2×2 block with its ring — an area filter without aliasing). Lanczos3 is
//! sharper but rings at hard edges (alpha-cutout borders, UV-chart borders next to the padding
//! colour) and costs 3× the taps per axis; with each level resampled from the source (never from
//! the previous level), Triangle's softness does not accumulate. Normal maps are resampled like
//! colour and not renormalised: averaged unit vectors shorten slightly, which glTF viewers undo
//! by normalising the sampled normal (glTF 2.0 §3.9.3 normalTexture, "normalized" in the
//! shader), so renormalising the texels would only change the rounding.
//!
//! Encoding keeps the source's by default ([`TextureFormat::Source`]): PNG stays PNG (its colour
//! type and bit depth kept), JPEG is re-encoded as baseline JPEG at quality 90, KTX2 is
//! transcoded, resampled and re-encoded as KTX2 with the source's own codec (ETC1S or UASTC, read
//! from its header), so a GPU-compressed source stays GPU-compressed and small at every level
//! (issue 44 rule 4: as PNG, a jet's 3.09 MB of KTX2 became 16.2 MB over the levels). With
//! [`TextureFormat::Webp`] every level, the leaves' full size included, is WebP (see there), which
//! the tiles reference through `EXT_texture_webp`; with [`TextureFormat::Ktx2`] every level is a
//! KTX 2.0 file of GPU-compressible Basis Universal blocks with its mip chain
//! (`KHR_texture_basisu`). The mesh readers hand over only PNG, JPEG and KTX2 (WebP sources are
//! decoded to PNG); any other type would not be resampled: every level would reference the
//! source file.

use std::collections::HashMap;
use std::path::Path;

use image::codecs::jpeg::JpegEncoder;
use image::imageops::FilterType;
use image::{DynamicImage, ImageFormat};
use kiln_formats::atomic_write::write_atomic;
use kiln_formats::mesh::{BasisCodec, EmbeddedImage, ImageRef, Ktx2Info, Material};

use serde::Serialize;

use super::TEXTURES_DIR;
use crate::{Error, Result};

/// JPEG quality of the downscaled levels of a JPEG source (libjpeg's 0–100 scale).
pub const JPEG_QUALITY: u8 = 90;

/// libwebp quality (0–100) of [`TextureFormat::Webp`] images.
pub const WEBP_QUALITY: f32 = 90.0;

/// Basis Universal ETC1S quality (1–255) of [`TextureFormat::Ktx2Etc1s`] images: the highest;
/// ETC1S's loss is in its 4 × 4 blocks' shared colour line, not in the codebook size this sets.
pub const ETC1S_QUALITY: u32 = 255;

/// How the tiles' images are encoded ([`super::MeshTileParams::texture_format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TextureFormat {
    /// Each image as its source type: PNG stays PNG, JPEG stays JPEG, KTX2 stays KTX2 with its
    /// codec (full size: the source's own bytes).
    #[default]
    Source,
    /// WebP at every level (`EXT_texture_webp`, required: no fallback image is written): lossy at
    /// [`WEBP_QUALITY`] for colour images (sampled only as base colour or emissive), lossless for
    /// PNG data maps (normal, metallic-roughness, occlusion: lossy WebP's 4:2:0 chroma would mix
    /// their independent channels); JPEG data maps stay JPEG.
    Webp,
    /// KTX 2.0 at every level (`KHR_texture_basisu`, required: no fallback image), each file with
    /// its full mip chain, so a viewer uploads blocks the GPU samples compressed (8 bits a texel
    /// in GPU memory instead of 32): UASTC, Zstandard-supercompressed, colour images encoded and
    /// tagged in sRGB, data maps linear. Near the source's fidelity; downloads are larger than
    /// JPEG's (measured in CesiumJS, DamagedHelmet leaves: 38.8 dB at 18 MB against the JPEG
    /// source's 39.7 dB at 4.5 MB).
    Ktx2,
    /// KTX 2.0 like [`Self::Ktx2`] with ETC1S payloads (BasisLZ, quality [`ETC1S_QUALITY`]) for
    /// every image: the smallest downloads (DamagedHelmet 3.5 MB, Avocado 1.1 MB against its
    /// PNGs' 10.3 MB) and 4 bits a texel on the GPU, at a visible cost on detailed maps
    /// (DamagedHelmet 32.6 dB, Avocado 39.9 dB), worst on data maps whose channels differ
    /// (DamagedHelmet's metallic-roughness file: 23.2 dB against its pixels; UASTC 38.4 dB).
    #[serde(rename = "ktx2-etc1s")]
    Ktx2Etc1s,
}

impl TextureFormat {
    /// Every value a job file may name, as written there.
    pub const NAMES: [&'static str; 4] = ["source", "webp", "ktx2", "ktx2-etc1s"];

    fn from_name(name: &str) -> Option<Self> {
        let all = [Self::Source, Self::Webp, Self::Ktx2, Self::Ktx2Etc1s];
        Self::NAMES.iter().position(|&n| n == name).map(|i| all[i])
    }
}

/// By hand rather than derived so that any wrong value — another word, a number, a table — is
/// refused naming the accepted ones (the derived enum let TOML answer a number with "wanted
/// string or table").
impl<'de> serde::Deserialize<'de> for TextureFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = TextureFormat;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "one of \"{}\"", TextureFormat::NAMES.join("\", \""))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TextureFormat, E> {
                TextureFormat::from_name(v)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(Name)
    }
}

/// Writes the levels of the source images on demand and remembers what it wrote.
pub struct TexturePyramid<'a> {
    images: &'a [EmbeddedImage],
    tiles_dir: &'a Path,
    max_size: u32,
    format: TextureFormat,
    /// Per image: sampled only as colour (base colour, emissive), so lossy WebP may subsample its
    /// chroma; data maps (normal, metallic-roughness, occlusion, extensions' maps) are not.
    colour_only: Vec<bool>,
    /// Source pixel size per image, once read.
    dims: HashMap<usize, (u32, u32)>,
    /// Decoded sources (decoded once, resampled once per size).
    decoded: HashMap<usize, DynamicImage>,
    /// Resampled pixels by (image, width, height), for the per-tile atlases.
    resampled: HashMap<(usize, u32, u32), DynamicImage>,
    /// Encoded resampled levels by (image, width, height), not yet written.
    encoded: HashMap<(usize, u32, u32), Vec<u8>>,
    /// Written files by (image, width, height): their reference and byte count.
    written: HashMap<(usize, u32, u32), (ImageRef, u64)>,
    /// Bytes of every file written.
    pub bytes: u64,
    /// Per image: what its encoding kept of the pixels it encodes (see [`Self::fidelity`]).
    encoding_psnr: std::collections::BTreeMap<usize, Option<f64>>,
}

/// What encoding kept of one source image ([`TexturePyramid::fidelity`]).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ImageFidelity {
    /// Index into the mesh's images.
    pub image: usize,
    /// Type of its files in the tiles.
    pub mime: String,
    /// The lowest PSNR (dB, 8-bit RGB) of any of its encoded files (every level, atlases
    /// included), decoded, against the pixels that file encodes (the level's resampled image or
    /// the atlas); `None` when every file holds its pixels exactly (the source's own bytes, PNG,
    /// lossless WebP).
    pub psnr_db: Option<f64>,
}

impl<'a> TexturePyramid<'a> {
    /// A pyramid over `images` (the welded mesh's), writing under `tiles_dir/textures/`, no image
    /// side above `max_size` pixels (≥ 1), resampled images encoded as `format` says.
    pub fn new(
        images: &'a [EmbeddedImage],
        materials: &[Material],
        tiles_dir: &'a Path,
        max_size: u32,
        format: TextureFormat,
    ) -> Self {
        Self {
            images,
            tiles_dir,
            max_size: max_size.max(1),
            format,
            colour_only: colour_only_images(materials, images.len()),
            dims: HashMap::new(),
            decoded: HashMap::new(),
            resampled: HashMap::new(),
            encoded: HashMap::new(),
            written: HashMap::new(),
            bytes: 0,
            encoding_psnr: std::collections::BTreeMap::new(),
        }
    }

    /// Per image encoded so far: what its encoding kept (the loss `texture_format` costs before
    /// any viewer samples it), in image order.
    pub fn fidelity(&self) -> Vec<ImageFidelity> {
        self.encoding_psnr
            .iter()
            .map(|(&image, &psnr_db)| ImageFidelity {
                image,
                mime: self.out_mime(image).to_owned(),
                psnr_db,
            })
            .collect()
    }

    /// Record that a file of `image` keeps its pixels to `psnr_db` (`None`: exactly).
    fn note_encoding(&mut self, image: usize, psnr_db: Option<f64>) {
        let worst = self.encoding_psnr.entry(image).or_insert(None);
        *worst = match (*worst, psnr_db) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// The file of image `image` for a tile at height `level` (0 = leaf), written if it is not
    /// yet; returns its reference (URI relative to the tile GLBs) and its size in bytes.
    ///
    /// # Errors
    /// [`Error::Input`] — a PNG or JPEG the `image` crate cannot decode or encode (names the
    /// image's index); [`Error::Format`] — the write failed.
    pub fn image_at(&mut self, image: usize, level: u32) -> Result<(ImageRef, u64)> {
        let src = &self.images[image];
        let mime = self.out_mime(image).to_owned();
        let ext = extension(&mime);
        let hash = blake3::hash(&src.bytes).to_hex();
        let resamplable = self.resamplable(image);
        let full = (0, 0);
        let (w, h) = if resamplable {
            self.source_dims(image)?
        } else {
            full
        };
        let (tw, th) = if resamplable {
            level_size(w, h, level, self.max_size)
        } else {
            full
        };
        if let Some((r, n)) = self.written.get(&(image, tw, th)) {
            return Ok((r.clone(), *n));
        }
        let (uri, bytes) = if (tw, th) == (w, h) {
            let uri = format!("{TEXTURES_DIR}/{hash}.{ext}");
            // The source's own bytes when its type is kept, else re-encoded at full size.
            let bytes = if mime == src.mime {
                self.note_encoding(image, None);
                src.bytes.clone()
            } else {
                self.resample(image, tw, th)?
            };
            (uri, bytes)
        } else {
            let uri = format!("{TEXTURES_DIR}/L{level}/{hash}.{ext}");
            (uri, self.resample(image, tw, th)?)
        };
        write_atomic(&self.tiles_dir.join(&uri), &bytes)?;
        let n = bytes.len() as u64;
        self.bytes += n;
        let r = ImageRef { uri, mime };
        self.written.insert((image, tw, th), (r.clone(), n));
        Ok((r, n))
    }

    /// Pixel size of source image `image`, read from its header.
    fn source_dims(&mut self, image: usize) -> Result<(u32, u32)> {
        if let Some(&d) = self.dims.get(&image) {
            return Ok(d);
        }
        let src = &self.images[image];
        let d = if src.mime == "image/ktx2" {
            let k = Ktx2Info::read(&src.bytes).ok_or_else(|| bad_ktx2(image, "its header"))?;
            (k.width, k.height)
        } else {
            image::ImageReader::with_format(
                std::io::Cursor::new(&src.bytes),
                image_format(&src.mime),
            )
            .into_dimensions()
            .map_err(|e| bad_image(image, &src.mime, &e))?
        };
        self.dims.insert(image, d);
        Ok(d)
    }

    /// Longest image side allowed, pixels.
    pub fn max_size(&self) -> u32 {
        self.max_size
    }

    /// Whether image `image` is one this pyramid resamples (PNG, JPEG or KTX2); others are
    /// referenced as they are at every level.
    pub fn resamplable(&self, image: usize) -> bool {
        matches!(
            self.images[image].mime.as_str(),
            "image/png" | "image/jpeg" | "image/ktx2"
        )
    }

    /// The Basis Universal codec of image `image`'s KTX2 files: the one `texture_format` names,
    /// or under [`TextureFormat::Source`] the source's own (read from its header; ETC1S at
    /// [`ETC1S_QUALITY`], as the source's quality is not recorded), so that an ETC1S source's
    /// coarse levels stay as small as it is and a UASTC source's keep its fidelity.
    fn ktx2_codec(&self, image: usize) -> BasisCodec {
        let etc1s = BasisCodec::Etc1s {
            quality: ETC1S_QUALITY,
        };
        let uastc = BasisCodec::Uastc { rdo_lambda: None };
        match self.format {
            TextureFormat::Ktx2Etc1s => etc1s,
            TextureFormat::Source
                if Ktx2Info::read(&self.images[image].bytes).is_some_and(|k| !k.uastc) =>
            {
                etc1s
            }
            _ => uastc,
        }
    }

    /// The type image `image`'s files have in the tiles: the source's, WebP as
    /// [`TextureFormat::Webp`] says, or KTX2.
    pub fn out_mime(&self, image: usize) -> &str {
        let src = self.images[image].mime.as_str();
        match self.format {
            TextureFormat::Source => src,
            // Colour: lossy. Data maps: lossless from a PNG; a JPEG data map stays JPEG, as
            // lossless WebP of its compression noise is larger and lossy WebP subsamples chroma.
            TextureFormat::Webp
                if self.colour_only[image] && self.resamplable(image) || src == "image/png" =>
            {
                "image/webp"
            }
            TextureFormat::Webp => src,
            TextureFormat::Ktx2 | TextureFormat::Ktx2Etc1s if self.resamplable(image) => {
                "image/ktx2"
            }
            TextureFormat::Ktx2 | TextureFormat::Ktx2Etc1s => src,
        }
    }

    /// Pixel size of resamplable image `image` at tree height `level` (see [`level_size`]).
    ///
    /// # Errors
    /// [`Error::Input`] — the header cannot be read.
    pub fn level_dims(&mut self, image: usize, level: u32) -> Result<(u32, u32)> {
        let (w, h) = self.source_dims(image)?;
        Ok(level_size(w, h, level, self.max_size))
    }

    /// The pixels of resamplable image `image` at `w × h` (the source itself at its own size),
    /// decoded and resampled once.
    ///
    /// # Errors
    /// [`Error::Input`] — the image cannot be decoded.
    pub fn pixels(&mut self, image: usize, w: u32, h: u32) -> Result<&DynamicImage> {
        let src = &self.images[image];
        let decoded = match self.decoded.entry(image) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(decode_source(image, src)?),
        };
        if (decoded.width(), decoded.height()) == (w, h) {
            return Ok(decoded);
        }
        Ok(self
            .resampled
            .entry((image, w, h))
            .or_insert_with(|| decoded.resize_exact(w, h, FilterType::Triangle)))
    }

    /// `pixels`, derived from image `image` (a per-tile atlas), encoded like the source.
    ///
    /// # Errors
    /// [`Error::Input`] — encoding failed.
    pub fn encode_derived(&mut self, image: usize, pixels: &DynamicImage) -> Result<Vec<u8>> {
        let mime = self.out_mime(image).to_owned();
        let codec = self.ktx2_codec(image);
        let bytes = encode_like(pixels, &mime, self.colour_only[image], codec)
            .map_err(|e| bad_image(image, &mime, &e))?;
        let kept = encoding_psnr(&bytes, pixels).map_err(|e| undecodable(image, &mime, &e))?;
        self.note_encoding(image, kept);
        Ok(bytes)
    }

    /// Write `bytes` (from [`Self::encode_derived`] of image `image`) at `uri` (relative to the
    /// tile GLBs, without extension: the source's is added).
    ///
    /// # Errors
    /// [`Error::Format`] — the write failed.
    pub fn write_derived(
        &mut self,
        image: usize,
        uri: &str,
        bytes: &[u8],
    ) -> Result<(ImageRef, u64)> {
        let mime = self.out_mime(image).to_owned();
        let uri = format!("{uri}.{}", extension(&mime));
        write_atomic(&self.tiles_dir.join(&uri), bytes)?;
        let n = bytes.len() as u64;
        self.bytes += n;
        Ok((ImageRef { uri, mime }, n))
    }

    /// Bytes of the file image `image` has at tree height `level` ([`Self::image_at`]'s), without
    /// writing it: the source's own size at full size, else its encoding (kept for `image_at`).
    ///
    /// # Errors
    /// As [`Self::image_at`].
    pub fn level_bytes(&mut self, image: usize, level: u32) -> Result<u64> {
        if !self.resamplable(image) {
            return Ok(self.images[image].bytes.len() as u64);
        }
        let (w, h) = self.source_dims(image)?;
        let (tw, th) = level_size(w, h, level, self.max_size);
        if (tw, th) == (w, h) && self.out_mime(image) == self.images[image].mime {
            return Ok(self.images[image].bytes.len() as u64);
        }
        if let Some(b) = self.encoded.get(&(image, tw, th)) {
            return Ok(b.len() as u64);
        }
        let b = self.resample(image, tw, th)?;
        let n = b.len() as u64;
        self.encoded.insert((image, tw, th), b);
        Ok(n)
    }

    /// Source image `image` resampled to `w × h` and encoded as [`Self::out_mime`] (once).
    fn resample(&mut self, image: usize, w: u32, h: u32) -> Result<Vec<u8>> {
        if let Some(b) = self.encoded.get(&(image, w, h)) {
            return Ok(b.clone());
        }
        let mime = self.out_mime(image).to_owned();
        let (colour, codec) = (self.colour_only[image], self.ktx2_codec(image));
        let small = self.pixels(image, w, h)?;
        let bytes =
            encode_like(small, &mime, colour, codec).map_err(|e| bad_image(image, &mime, &e))?;
        let kept = encoding_psnr(&bytes, small).map_err(|e| undecodable(image, &mime, &e))?;
        self.note_encoding(image, kept);
        Ok(bytes)
    }
}

/// PSNR (dB) of `encoded`, decoded, against `pixels` over 8-bit RGB (the trainer's PSNR on
/// values in [0, 1]); `None` when they are equal.
fn encoding_psnr(
    encoded: &[u8],
    pixels: &DynamicImage,
) -> std::result::Result<Option<f64>, String> {
    let decoded = kiln_formats::mesh::decode_texture(encoded)?;
    let unit = |img: &DynamicImage| -> Vec<f32> {
        img.to_rgb8()
            .as_raw()
            .iter()
            .map(|&v| f32::from(v) / 255.0)
            .collect()
    };
    let (a, b) = (unit(&decoded), unit(pixels));
    if a.len() != b.len() {
        return Err(format!(
            "decodes to {} × {}, not {} × {}",
            decoded.width(),
            decoded.height(),
            pixels.width(),
            pixels.height()
        ));
    }
    Ok((a != b).then(|| crate::stages::train::eval::psnr(&a, &b)))
}

/// An image Kiln encoded that does not decode back (a bug in an encoder or in Kiln).
fn undecodable(image: usize, mime: &str, why: &str) -> Error {
    Error::Input {
        path: "<input mesh>".into(),
        field: format!("images[{image}]"),
        problem: format!("its {mime} encoding does not decode back ({why})"),
    }
}

/// File extension of an image type (a WebP or KTX2 source keeps its own, not `.png`).
fn extension(mime: &str) -> &'static str {
    match mime {
        "image/jpeg" => "jpg",
        "image/webp" => "webp",
        "image/ktx2" => "ktx2",
        _ => "png",
    }
}

/// `pixels` encoded as `mime`: JPEG (8-bit grey or RGB, quality [`JPEG_QUALITY`]), WebP (8-bit RGB
/// or RGBA; lossy at [`WEBP_QUALITY`] when `colour`, else lossless), KTX2 (`codec`, in sRGB when
/// `colour`, else linear) or PNG (colour type and bit depth kept).
fn encode_like(
    pixels: &DynamicImage,
    mime: &str,
    colour: bool,
    codec: BasisCodec,
) -> std::result::Result<Vec<u8>, image::ImageError> {
    let mut out = Vec::new();
    if mime == "image/webp" {
        return encode_webp(pixels, !colour);
    }
    if mime == "image/ktx2" {
        return encode_ktx2(pixels, codec, colour);
    }
    if mime == "image/jpeg" {
        let rgb_or_grey = if pixels.color().has_color() {
            DynamicImage::ImageRgb8(pixels.to_rgb8())
        } else {
            DynamicImage::ImageLuma8(pixels.to_luma8())
        };
        rgb_or_grey.write_with_encoder(JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY))?;
    } else {
        out = kiln_formats::mesh::encode_png(pixels)?;
    }
    Ok(out)
}

/// `pixels` as WebP, lossless or lossy at [`WEBP_QUALITY`], with an alpha plane only when the
/// image has alpha.
fn encode_webp(
    pixels: &DynamicImage,
    lossless: bool,
) -> std::result::Result<Vec<u8>, image::ImageError> {
    let (w, h) = (pixels.width(), pixels.height());
    let encoded = if pixels.color().has_alpha() {
        webp::Encoder::from_rgba(pixels.to_rgba8().as_raw(), w, h)
            .encode_simple(lossless, WEBP_QUALITY)
    } else {
        webp::Encoder::from_rgb(pixels.to_rgb8().as_raw(), w, h)
            .encode_simple(lossless, WEBP_QUALITY)
    };
    encoded.map(|m| m.to_vec()).map_err(|e| {
        image::ImageError::Encoding(image::error::EncodingError::new(
            ImageFormat::WebP.into(),
            format!("libwebp: {e:?}"),
        ))
    })
}

/// `pixels` as KTX2 with `codec`, in sRGB for colour images, else linear.
fn encode_ktx2(
    pixels: &DynamicImage,
    codec: BasisCodec,
    colour: bool,
) -> std::result::Result<Vec<u8>, image::ImageError> {
    kiln_formats::mesh::encode_ktx2(pixels, codec, colour).map_err(|e| {
        image::ImageError::Encoding(image::error::EncodingError::new(
            image::error::ImageFormatHint::Name("KTX2".into()),
            e,
        ))
    })
}

/// Bytes a WebGL viewer such as CesiumJS holds in GPU memory for the texture file `bytes`, its
/// mip chain included.
///
/// PNG, JPEG and WebP are decoded and uploaded as RGBA8 (4 bytes a texel; WebGL stores RGB8 in
/// 4-byte texels on common drivers) with generated mipmaps down to 1 × 1. KTX2 levels stay in
/// 4 × 4 blocks, counted from the file's own level sizes: UASTC is transcoded to a 16-byte block
/// format (ASTC 4×4, BC7 or ETC2 RGBA: 1 byte a texel), ETC1S to an 8-byte one (ETC1 or BC1: ½
/// byte) when opaque and to a 16-byte one with alpha (CesiumJS's `KTX2Transcoder` target choice;
/// a device without any compressed format decodes to RGBA8 instead, not counted here).
/// `None` when the header cannot be read.
pub fn gpu_bytes(bytes: &[u8]) -> Option<u64> {
    // Level l of a w × h image: max(w >> l, 1) × max(h >> l, 1), in units of `block` texels.
    let chain = |w: u32, h: u32, levels: u32, block: u32, unit_bytes: u64| -> u64 {
        (0..levels)
            .map(|l| {
                let side = |n: u32| u64::from(n.checked_shr(l).unwrap_or(0).max(1).div_ceil(block));
                side(w) * side(h) * unit_bytes
            })
            .sum()
    };
    if let Some(k) = Ktx2Info::read(bytes) {
        let block_bytes = if k.uastc || k.alpha { 16 } else { 8 };
        return Some(chain(k.width, k.height, k.levels.max(1), 4, block_bytes));
    }
    let (w, h) = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .ok()?
        .into_dimensions()
        .ok()?;
    let levels = 32 - w.max(h).max(1).leading_zeros();
    Some(chain(w, h, levels, 1, 4))
}

/// Per image of `n`: whether every material that samples it does so as colour (base colour or
/// emissive). An image no material samples counts as colour.
fn colour_only_images(materials: &[Material], n: usize) -> Vec<bool> {
    let mut colour = vec![true; n];
    for m in materials {
        let data = [
            &m.metallic_roughness_texture,
            &m.normal_texture,
            &m.occlusion_texture,
        ];
        let data = data
            .into_iter()
            .flatten()
            .chain(m.extension_textures.iter());
        for t in data {
            if let Some(c) = colour.get_mut(t.image) {
                *c = false;
            }
        }
    }
    colour
}

/// Pixel size of a `w × h` image at tree height `level`: halved per level (at least 1 pixel),
/// then scaled to fit `max_size` on its longer side with the aspect ratio kept (rounded, at
/// least 1).
pub fn level_size(w: u32, h: u32, level: u32, max_size: u32) -> (u32, u32) {
    let halve = |n: u32| n.checked_shr(level).unwrap_or(0).max(1);
    let (w, h) = (halve(w), halve(h));
    let longer = w.max(h);
    if longer <= max_size {
        return (w, h);
    }
    let fit = |n: u32| {
        ((f64::from(n) * f64::from(max_size) / f64::from(longer)).round() as u32).clamp(1, max_size)
    };
    (fit(w), fit(h))
}

fn image_format(mime: &str) -> ImageFormat {
    if mime == "image/jpeg" {
        ImageFormat::Jpeg
    } else {
        ImageFormat::Png
    }
}

/// The pixels of source image `src` (index `image`): PNG and JPEG by their type, KTX2 transcoded
/// from its base level.
fn decode_source(image: usize, src: &EmbeddedImage) -> Result<DynamicImage> {
    if src.mime == "image/ktx2" {
        return kiln_formats::mesh::decode_texture(&src.bytes).map_err(|why| bad_ktx2(image, &why));
    }
    image::load_from_memory_with_format(&src.bytes, image_format(&src.mime))
        .map_err(|e| bad_image(image, &src.mime, &e))
}

/// A KTX2 source whose `what` cannot be read (the reader checked it transcodes: a bug, or a file
/// changed since).
fn bad_ktx2(image: usize, what: &str) -> Error {
    Error::Input {
        path: "<input mesh>".into(),
        field: format!("images[{image}]"),
        problem: format!("cannot read this KTX2 for the coarser tile levels ({what})"),
    }
}

fn bad_image(image: usize, mime: &str, e: &image::ImageError) -> Error {
    Error::Input {
        path: "<input mesh>".into(),
        field: format!("images[{image}]"),
        problem: format!(
            "cannot resample this {mime} for the coarser tile levels ({e}); re-save the image \
             as a standard PNG or JPEG"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::level_size;

    #[test]
    fn level_size_halves_per_level_and_caps_the_longer_side() {
        assert_eq!(level_size(2048, 2048, 0, 4096), (2048, 2048));
        assert_eq!(level_size(2048, 2048, 3, 4096), (256, 256));
        assert_eq!(level_size(2048, 1024, 11, 4096), (1, 1));
        assert_eq!(level_size(3, 5, 40, 4096), (1, 1));
        // 8192 × 4096 capped to 4096: 4096 × 2048; one level up, 4096 × 2048 is within the cap.
        assert_eq!(level_size(8192, 4096, 0, 4096), (4096, 2048));
        assert_eq!(level_size(8192, 4096, 1, 4096), (4096, 2048));
        assert_eq!(level_size(8192, 4096, 2, 4096), (2048, 1024));
        // 1000 × 300 capped to 512: 512 × 153.6 → 154.
        assert_eq!(level_size(1000, 300, 0, 512), (512, 154));
    }

    /// Every accepted name reads back as written; anything else is refused naming all four.
    #[test]
    fn texture_format_names_round_trip_and_wrong_values_list_the_accepted_ones() {
        #[derive(serde::Deserialize)]
        struct Job {
            texture_format: super::TextureFormat,
        }
        for name in super::TextureFormat::NAMES {
            let job: Job = toml::from_str(&format!("texture_format = \"{name}\"")).unwrap();
            assert_eq!(
                serde_json::to_value(job.texture_format).unwrap(),
                serde_json::json!(name)
            );
        }
        for wrong in ["1", "\"ktx3\"", "{ a = 1 }", "true"] {
            let e = toml::from_str::<Job>(&format!("texture_format = {wrong}"))
                .err()
                .unwrap_or_else(|| panic!("{wrong} accepted"))
                .to_string();
            assert!(
                e.contains(r#"expected one of "source", "webp", "ktx2", "ktx2-etc1s""#),
                "{wrong}: {e}"
            );
        }
    }
}
