//! KTX 2.0 textures with Basis Universal payloads, as glTF's `KHR_texture_basisu` requires: an
//! RGBA8 image is encoded (with its mip chain) by Binomial's encoder, which the
//! `basis-universal` binding returns as a `.basis` file; this module moves that file's slices
//! into a KTX 2.0 container.
//!
//! Sources: KTX 2.0 specification (Khronos, §3 file structure, §3.12 Basis Universal global data,
//! §4 data format descriptor); Khronos Data Format 1.3 (colour models `KHR_DF_MODEL_ETC1S` = 163
//! and `KHR_DF_MODEL_UASTC` = 166, their channel ids); the `.basis` header and slice descriptor
//! layouts in basis_universal `transcoder/basisu_file_headers.h`; `KHR_texture_basisu` (glTF
//! extension: ETC1S or UASTC payloads, 2D, one layer and face, colour textures with the sRGB
//! transfer function, others linear).
//!
//! Codecs: ETC1S (BasisLZ supercompression: a shared endpoint and selector codebook in the
//! supercompression global data, about 1–2 bits a texel) for colour; UASTC (8 bits a texel,
//! near-lossless, here Zstandard-supercompressed) for data maps whose channels are independent
//! (normal, metallic-roughness), which ETC1S's shared-luma blocks would mix.

use basis_universal::{BasisTextureFormat, ColorSpace, Compressor, CompressorParams};
use image::DynamicImage;

/// The 12-byte KTX 2.0 file identifier (KTX 2.0 §3.1).
pub(crate) const IDENTIFIER: [u8; 12] = [
    0xAB, b'K', b'T', b'X', b' ', b'2', b'0', 0xBB, b'\r', b'\n', 0x1A, b'\n',
];
/// `supercompressionScheme` values (KTX 2.0 §3.1.9).
const SCHEME_BASISLZ: u32 = 1;
const SCHEME_ZSTD: u32 = 2;
/// Khronos Data Format colour models.
const MODEL_ETC1S: u8 = 163;
const MODEL_UASTC: u8 = 166;
/// Channel ids: ETC1S RGB and AAA slices, UASTC RGB and RGBA.
const CHANNEL_ETC1S_RGB: u8 = 0;
const CHANNEL_ETC1S_AAA: u8 = 15;
const CHANNEL_UASTC_RGB: u8 = 0;
const CHANNEL_UASTC_RGBA: u8 = 3;
/// Transfer functions and the BT.709 primaries.
const TRANSFER_LINEAR: u8 = 1;
const TRANSFER_SRGB: u8 = 2;
const PRIMARIES_BT709: u8 = 1;
/// `.basis` header: its size and the slice descriptor's (packed little-endian fields).
const BASIS_HEADER_LEN: usize = 77;
const BASIS_SLICE_LEN: usize = 23;
/// `.basis` slice flag: the slice holds an ETC1S image's alpha.
const SLICE_HAS_ALPHA: u8 = 1;
/// Zstandard level of UASTC levels (basisu's own KTX2 writer uses 6; 19 is 3 % smaller on
/// UASTC blocks and still far faster than the UASTC encoding before it).
const ZSTD_LEVEL: i32 = 19;

/// How an image's texels are encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BasisCodec {
    /// ETC1S at a quality level in 1 ..= 255 (basisu's default 128).
    Etc1s { quality: u32 },
    /// UASTC at the encoder's default pack level; `rdo_lambda` (≈ 0.2–4) trades quality for
    /// smaller Zstandard output, `None` encodes without rate-distortion optimisation.
    Uastc { rdo_lambda: Option<f32> },
}

/// What a KTX 2.0 file with a Basis Universal payload holds, from its header (§3.1) and data
/// format descriptor: base size, level count, codec and alpha.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ktx2Info {
    pub width: u32,
    pub height: u32,
    pub levels: u32,
    /// Colour model `KHR_DF_MODEL_UASTC`; else ETC1S (or another model).
    pub uastc: bool,
    /// UASTC RGBA, or an ETC1S file with a second (alpha) sample.
    pub alpha: bool,
}

impl Ktx2Info {
    /// `None` when `b` is not a KTX 2.0 file or is cut short.
    #[must_use]
    pub fn read(b: &[u8]) -> Option<Self> {
        if !b.starts_with(&IDENTIFIER) {
            return None;
        }
        let word = |at: usize| Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?));
        // The basic block after the DFD's 4-byte total size: its length at +6, the colour model
        // at +8, samples of 16 bytes from +24 (the first sample's channel id in byte +27).
        let block = word(48)? as usize + 4;
        let model = *b.get(block + 8)?;
        let block_len = usize::from(u16::from_le_bytes([*b.get(block + 6)?, *b.get(block + 7)?]));
        let uastc = model == MODEL_UASTC;
        let alpha = if uastc {
            b.get(block + 27)? & 0x0F == CHANNEL_UASTC_RGBA
        } else {
            block_len > 24 + 16
        };
        Some(Self {
            width: word(20)?,
            height: word(24)?,
            levels: word(40)?,
            uastc,
            alpha,
        })
    }
}

/// `image` as a KTX 2.0 file: `codec`'s payload with a full mip chain (down to 1 × 1), filtered
/// and tagged in sRGB when `srgb` (colour textures), else linear (data maps).
///
/// # Errors
/// What failed, in words: an image side above 16,384 or a zero side, the encoder's error code,
/// or a `.basis` file this writer cannot read (a bug).
pub fn encode_ktx2(image: &DynamicImage, codec: BasisCodec, srgb: bool) -> Result<Vec<u8>, String> {
    let (basis, has_alpha) = encode_basis(image, codec, srgb)?;
    ktx2_from_basis(&basis, has_alpha, srgb)
}

/// `image` encoded by basisu as a `.basis` file, and whether any texel has alpha below 255.
fn encode_basis(
    image: &DynamicImage,
    codec: BasisCodec,
    srgb: bool,
) -> Result<(Vec<u8>, bool), String> {
    let (w, h) = (image.width(), image.height());
    if w == 0 || h == 0 || w.max(h) > basis_universal::TEXTURE_DIMENSION_MAX {
        return Err(format!(
            "a {w} × {h} image (Basis Universal encodes sides of 1 ..= {})",
            basis_universal::TEXTURE_DIMENSION_MAX
        ));
    }
    let space = if srgb {
        ColorSpace::Srgb
    } else {
        ColorSpace::Linear
    };
    let mut params = CompressorParams::new();
    match codec {
        BasisCodec::Etc1s { quality } => {
            params.set_basis_format(BasisTextureFormat::ETC1S);
            params.set_etc1s_quality_level(quality.clamp(
                basis_universal::ETC1S_QUALITY_MIN,
                basis_universal::ETC1S_QUALITY_MAX,
            ));
        }
        BasisCodec::Uastc { rdo_lambda } => {
            params.set_basis_format(BasisTextureFormat::UASTC4x4);
            params.set_rdo_uastc(rdo_lambda);
        }
    }
    params.set_color_space(space);
    params.set_mip_color_space(space);
    params.set_generate_mipmaps(true);
    params.set_mipmap_smallest_dimension(1);
    let rgba = image.to_rgba8();
    params.source_image_mut(0).init(rgba.as_raw(), w, h, 4);
    // The encoder's own job pool, one thread per core: the tiler encodes images one at a time.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut compressor = Compressor::new(threads);
    // SAFETY: `params` outlives `init` (the compressor copies them) and holds one initialised
    // source image of `w × h × 4` bytes, as `init` and `process` require.
    let processed = unsafe {
        if compressor.init(&params) {
            compressor.process().map_err(|e| format!("{e:?}"))
        } else {
            Err("parameters refused".into())
        }
    };
    processed.map_err(|e| format!("the Basis Universal encoder failed ({e})"))?;
    Ok((
        compressor.basis_file().to_vec(),
        compressor.any_source_image_has_alpha(),
    ))
}

/// One slice of a `.basis` file: a mip level's RGB (or RGBA, UASTC) or alpha (ETC1S) payload.
#[derive(Clone, Copy)]
struct Slice<'a> {
    image: u32,
    level: u32,
    alpha: bool,
    width: u32,
    height: u32,
    data: &'a [u8],
}

/// What a `.basis` file holds that KTX2 needs.
struct Basis<'a> {
    etc1s: bool,
    endpoints: (u32, &'a [u8]),
    selectors: (u32, &'a [u8]),
    tables: &'a [u8],
    slices: Vec<Slice<'a>>,
}

/// Little-endian unsigned integer of `n` bytes at `at`.
fn le(b: &[u8], at: usize, n: usize) -> Result<u32, String> {
    let bytes = b
        .get(at..at + n)
        .ok_or_else(|| format!("a .basis file cut short at byte {at}"))?;
    Ok(bytes.iter().rev().fold(0, |v, &x| v << 8 | u32::from(x)))
}

/// `len` bytes of `b` at `at`.
fn span(b: &[u8], at: u32, len: u32) -> Result<&[u8], String> {
    b.get(at as usize..at as usize + len as usize)
        .ok_or_else(|| {
            format!(
                "a .basis section at {at} + {len} past its {} bytes",
                b.len()
            )
        })
}

fn parse_basis(b: &[u8]) -> Result<Basis<'_>, String> {
    if le(b, 0, 2)? != u32::from(b'B') << 8 | u32::from(b's')
        || le(b, 4, 2)? as usize != BASIS_HEADER_LEN
    {
        return Err("a .basis file without the `sB` signature and 77-byte header".into());
    }
    let total_slices = le(b, 14, 3)?;
    let etc1s = le(b, 20, 1)? == 0;
    let slice_descs = le(b, 65, 4)? as usize;
    let slices = (0..total_slices as usize)
        .map(|i| {
            let d = slice_descs + i * BASIS_SLICE_LEN;
            Ok(Slice {
                image: le(b, d, 3)?,
                level: le(b, d + 3, 1)?,
                alpha: le(b, d + 4, 1)? as u8 & SLICE_HAS_ALPHA != 0,
                width: le(b, d + 5, 2)?,
                height: le(b, d + 7, 2)?,
                data: span(b, le(b, d + 13, 4)?, le(b, d + 17, 4)?)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Basis {
        etc1s,
        endpoints: (le(b, 39, 2)?, span(b, le(b, 41, 4)?, le(b, 45, 3)?)?),
        selectors: (le(b, 48, 2)?, span(b, le(b, 50, 4)?, le(b, 54, 3)?)?),
        tables: span(b, le(b, 57, 4)?, le(b, 61, 4)?)?,
        slices,
    })
}

/// A level's bytes as stored, and its uncompressed length (0 for BasisLZ, KTX 2.0 §3.1.10).
struct Level {
    bytes: Vec<u8>,
    uncompressed: u64,
}

/// The KTX 2.0 file of the one 2D image in `basis` (every mip level).
fn ktx2_from_basis(basis: &[u8], has_alpha: bool, srgb: bool) -> Result<Vec<u8>, String> {
    let basis = parse_basis(basis)?;
    // A UASTC slice holds RGBA and is flagged as alpha when the image has any: only ETC1S
    // splits a level into an RGB and an alpha slice.
    let slices: Vec<Slice> = basis
        .slices
        .iter()
        .filter(|s| s.image == 0)
        .map(|s| Slice {
            alpha: s.alpha && basis.etc1s,
            ..*s
        })
        .collect();
    let base = slices
        .iter()
        .find(|s| s.level == 0 && !s.alpha)
        .ok_or("a .basis file without a base level")?;
    let level_count = slices.iter().map(|s| s.level + 1).max().unwrap_or(1);
    let mut levels = Vec::new();
    let mut image_descs = Vec::new();
    for level in 0..level_count {
        let of = |alpha: bool| slices.iter().find(|s| s.level == level && s.alpha == alpha);
        let rgb = of(false).ok_or_else(|| format!("a .basis file missing mip level {level}"))?;
        if basis.etc1s {
            // One image descriptor per level: the RGB slice, then the alpha slice, in the level.
            let alpha = of(true).map_or(&[][..], |s| s.data);
            let mut bytes = rgb.data.to_vec();
            bytes.extend_from_slice(alpha);
            let alpha_at = if alpha.is_empty() { 0 } else { rgb.data.len() };
            for v in [0, 0, rgb.data.len(), alpha_at, alpha.len()] {
                image_descs.extend_from_slice(&(v as u32).to_le_bytes());
            }
            levels.push(Level {
                bytes,
                uncompressed: 0,
            });
        } else {
            let bytes = zstd::bulk::compress(rgb.data, ZSTD_LEVEL)
                .map_err(|e| format!("Zstandard failed on a UASTC level ({e})"))?;
            levels.push(Level {
                bytes,
                uncompressed: rgb.data.len() as u64,
            });
        }
    }
    let global = if basis.etc1s {
        etc1s_global_data(&basis, &image_descs)
    } else {
        Vec::new()
    };
    let scheme = if basis.etc1s {
        SCHEME_BASISLZ
    } else {
        SCHEME_ZSTD
    };
    let dfd = data_format_descriptor(basis.etc1s, has_alpha, srgb);
    Ok(container(
        base.width,
        base.height,
        scheme,
        &dfd,
        &global,
        &levels,
    ))
}

/// BasisLZ global data (KTX 2.0 §3.12.2): counts and lengths, the image descriptors, then the
/// endpoint and selector codebooks and Huffman tables as the `.basis` file holds them.
fn etc1s_global_data(basis: &Basis, image_descs: &[u8]) -> Vec<u8> {
    let mut g = Vec::new();
    g.extend_from_slice(&(basis.endpoints.0 as u16).to_le_bytes());
    g.extend_from_slice(&(basis.selectors.0 as u16).to_le_bytes());
    for len in [
        basis.endpoints.1.len(),
        basis.selectors.1.len(),
        basis.tables.len(),
        0,
    ] {
        g.extend_from_slice(&(len as u32).to_le_bytes());
    }
    g.extend_from_slice(image_descs);
    g.extend_from_slice(basis.endpoints.1);
    g.extend_from_slice(basis.selectors.1);
    g.extend_from_slice(basis.tables);
    g
}

/// The data format descriptor (Khronos Data Format §5, one basic block): 4 × 4 blocks, one sample
/// for RGB (ETC1S's alpha slice is a second), BT.709 primaries, sRGB or linear transfer;
/// `bytesPlane0` is 0 as both payloads are supercompressed.
fn data_format_descriptor(etc1s: bool, has_alpha: bool, srgb: bool) -> Vec<u8> {
    let transfer = if srgb { TRANSFER_SRGB } else { TRANSFER_LINEAR };
    let (model, samples) = if etc1s {
        let mut s = vec![(0u16, 63u8, CHANNEL_ETC1S_RGB)];
        if has_alpha {
            s.push((64, 63, CHANNEL_ETC1S_AAA));
        }
        (MODEL_ETC1S, s)
    } else {
        let channel = if has_alpha {
            CHANNEL_UASTC_RGBA
        } else {
            CHANNEL_UASTC_RGB
        };
        (MODEL_UASTC, vec![(0, 127, channel)])
    };
    let block_len = 24 + 16 * samples.len();
    let mut d = Vec::with_capacity(4 + block_len);
    d.extend_from_slice(&((4 + block_len) as u32).to_le_bytes());
    d.extend_from_slice(&0u32.to_le_bytes()); // vendor Khronos, descriptor type basic
    d.extend_from_slice(&2u16.to_le_bytes()); // version 1.3
    d.extend_from_slice(&(block_len as u16).to_le_bytes());
    d.extend_from_slice(&[model, PRIMARIES_BT709, transfer, 0]); // straight alpha
    d.extend_from_slice(&[3, 3, 0, 0]); // texel block 4 × 4 (dimensions − 1)
    d.extend_from_slice(&[0; 8]); // bytesPlane0..7
    for (offset, bits, channel) in samples {
        d.extend_from_slice(&offset.to_le_bytes());
        d.extend_from_slice(&[bits, channel]);
        d.extend_from_slice(&[0; 4]); // sample position
        d.extend_from_slice(&0u32.to_le_bytes()); // sampleLower
        d.extend_from_slice(&u32::MAX.to_le_bytes()); // sampleUpper
    }
    d
}

/// The KTX 2.0 file (§3): identifier, header, index, level index, DFD, key/value data (the
/// writer), supercompression global data at an 8-byte boundary, then the levels from the
/// smallest to the base (supercompressed levels need no alignment).
fn container(w: u32, h: u32, scheme: u32, dfd: &[u8], global: &[u8], levels: &[Level]) -> Vec<u8> {
    let kvd = key_value_data();
    let dfd_at = 80 + 24 * levels.len();
    let kvd_at = dfd_at + dfd.len();
    let global_at = if global.is_empty() {
        0
    } else {
        (kvd_at + kvd.len()).next_multiple_of(8)
    };
    let mut at = if global.is_empty() {
        kvd_at + kvd.len()
    } else {
        global_at + global.len()
    };
    let mut level_at = vec![0usize; levels.len()];
    for (i, level) in levels.iter().enumerate().rev() {
        level_at[i] = at;
        at += level.bytes.len();
    }
    let mut f = Vec::with_capacity(at);
    f.extend_from_slice(&IDENTIFIER);
    let level_count = levels.len() as u32;
    // vkFormat UNDEFINED, typeSize 1, width, height, depth 0, layers 0, faces 1, levels, scheme.
    for v in [0, 1, w, h, 0, 0, 1, level_count, scheme] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for v in [dfd_at, dfd.len(), kvd_at, kvd.len()] {
        f.extend_from_slice(&(v as u32).to_le_bytes());
    }
    for v in [global_at, global.len()] {
        f.extend_from_slice(&(v as u64).to_le_bytes());
    }
    for (level, &offset) in levels.iter().zip(&level_at) {
        for v in [offset as u64, level.bytes.len() as u64, level.uncompressed] {
            f.extend_from_slice(&v.to_le_bytes());
        }
    }
    f.extend_from_slice(dfd);
    f.extend_from_slice(&kvd);
    f.resize(f.len().max(global_at), 0);
    f.extend_from_slice(global);
    for level in levels.iter().rev() {
        f.extend_from_slice(&level.bytes);
    }
    f
}

/// One key/value pair (§3.11): `KTXwriter`, NUL-terminated, padded to 4 bytes.
fn key_value_data() -> Vec<u8> {
    let pair = format!(
        "KTXwriter\0Kiln {} (Basis Universal encoder, basis-universal 0.3.1)\0",
        env!("CARGO_PKG_VERSION")
    );
    let mut kvd = (pair.len() as u32).to_le_bytes().to_vec();
    kvd.extend_from_slice(pair.as_bytes());
    kvd.resize(kvd.len().next_multiple_of(4), 0);
    kvd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 61 × 37 picture (sides not multiples of 4) with smooth gradients, hard edges and, in the
    /// alpha variant, a cut-out.
    pub(super) fn pattern(alpha: bool) -> DynamicImage {
        let img = image::RgbaImage::from_fn(61, 37, |x, y| {
            let edge = if (x / 8 + y / 8) % 2 == 0 { 60 } else { 0 };
            let a = if alpha && x < 20 { 40 } else { 255 };
            image::Rgba([(x * 3) as u8 + edge, (y * 6) as u8, 200 - edge, a])
        });
        DynamicImage::ImageRgba8(img)
    }

    fn psnr(a: &[u8], b: &[u8]) -> f64 {
        let mse = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
            .sum::<f64>()
            / a.len() as f64;
        10.0 * (255.0f64.powi(2) / mse.max(1e-12)).log10()
    }

    /// Base level transcoded to RGBA8 by the independent pure-Rust transcoder (`basisu`), with
    /// the level count and whether it reports alpha.
    fn decode(ktx2: &[u8]) -> (Vec<u8>, (u32, u32), u32, bool) {
        let t = basisu::Transcoder::new(ktx2).expect("a KTX2 the transcoder reads");
        let rgba = t
            .transcode_image(
                0,
                0,
                0,
                basisu::TargetFormat::Rgba32,
                basisu::DecodeFlags::NONE,
            )
            .expect("transcoded");
        (rgba, t.base_dimensions(), t.level_count(), t.has_alpha())
    }

    #[test]
    fn etc1s_and_uastc_files_decode_like_the_image_with_every_mip_level() {
        for alpha in [false, true] {
            let img = pattern(alpha);
            let source = img.to_rgba8().into_raw();
            for (codec, floor_db) in [
                (BasisCodec::Etc1s { quality: 255 }, 33.0),
                (BasisCodec::Uastc { rdo_lambda: None }, 45.0),
            ] {
                let file = encode_ktx2(&img, codec, true).unwrap();
                assert_eq!(file[..12], IDENTIFIER);
                let (rgba, dims, levels, has_alpha) = decode(&file);
                assert_eq!(dims, (61, 37));
                // 61 × 37 down to 1 × 1: ⌊log2 61⌋ + 1 levels.
                assert_eq!(levels, 6, "{codec:?}");
                assert_eq!(has_alpha, alpha, "{codec:?}");
                let uastc = matches!(codec, BasisCodec::Uastc { .. });
                let info = Ktx2Info::read(&file).unwrap();
                assert_eq!(
                    info,
                    Ktx2Info {
                        width: 61,
                        height: 37,
                        levels: 6,
                        uastc,
                        alpha
                    },
                    "{codec:?}"
                );
                let db = psnr(&rgba, &source);
                eprintln!("{codec:?} alpha {alpha}: {db:.2} dB, {} bytes", file.len());
                assert!(db >= floor_db, "{codec:?} alpha {alpha}: {db:.1} dB");
            }
        }
    }

    #[test]
    fn the_descriptor_names_the_model_transfer_and_channels() {
        let d = data_format_descriptor(true, true, true);
        assert_eq!(d.len(), 60);
        assert_eq!(u32::from_le_bytes(d[0..4].try_into().unwrap()), 60);
        assert_eq!(d[12..16], [MODEL_ETC1S, PRIMARIES_BT709, TRANSFER_SRGB, 0]);
        assert_eq!(d[31], CHANNEL_ETC1S_RGB);
        assert_eq!(d[47], CHANNEL_ETC1S_AAA);
        let u = data_format_descriptor(false, false, false);
        assert_eq!(u.len(), 44);
        assert_eq!(
            u[12..16],
            [MODEL_UASTC, PRIMARIES_BT709, TRANSFER_LINEAR, 0]
        );
        assert_eq!((u[30], u[31]), (127, CHANNEL_UASTC_RGB));
    }

    #[test]
    fn a_damaged_basis_file_is_an_error_not_a_panic() {
        let (basis, _) = encode_basis(
            &pattern(false),
            BasisCodec::Uastc { rdo_lambda: None },
            false,
        )
        .unwrap();
        for cut in [0, 10, 76, 100, basis.len() - 1] {
            assert!(
                ktx2_from_basis(&basis[..cut], false, false).is_err(),
                "cut at {cut}"
            );
        }
        assert!(
            encode_ktx2(
                &DynamicImage::new_rgba8(0, 4),
                BasisCodec::Etc1s { quality: 128 },
                true
            )
            .is_err()
        );
    }
}
