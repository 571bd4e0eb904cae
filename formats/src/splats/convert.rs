//! Read and write any supported splat file by name: [`SplatFormat`] picks the format module
//! from the file name (and, for `.ply`, the content), and a write applies the transforms a
//! conversion may need (SH degree, up axis; both from [`super::transform`]) before encoding.
//! This module imports the format modules; none of them imports it.
//!
//! Formats ([`SplatFormat`], chosen from the file name): INRIA 3DGS PLY (`.ply`), PlayCanvas
//! compressed PLY (`.compressed.ply`), SPZ (`.spz`, v1–v4 read; v2/v3/v4 written), antimatter15
//! `.splat`, glTF `KHR_gaussian_splatting` GLB (`.glb`): plain float accessors, or with the
//! SPZ payload of `KHR_gaussian_splatting_compression_spz_2` when [`WriteOptions::glb_spz`] is
//! set, and PlayCanvas SOG v2 (`.sog` bundle, or a `meta.json` with its WebP images beside it).
//! Reading a `.ply` looks at the content, so an INRIA file named `.compressed.ply` (or the
//! reverse) still reads.
//!
//! SPZ files from splat-transform / nianticlabs are stored in RUB, a half turn about X away from
//! the PLY they came from; `--up-axis neg-y` (→ `y`) turns them back (see the `spz` docs).

use std::path::Path;

use super::glb::{SplatColorSpace, SplatGlbOptions};
use super::placed::{PlacedRef, PlacedSplats};
use super::sog::SogOptions;
use super::spz::{SpzAntialiasing, SpzOptions, spz_antialiasing, spz_recorded_frame};
use super::spz_frame::SpzFrame;
use super::transform::{UpAxis, reduce_sh_degree, up_axis_rotation};
use super::{
    GaussianSplats, MAX_SH_DEGREE, compressed_ply, dot_splat, glb, ply, ply_container, sog, spz,
};
use crate::{Error, Result};

/// A splat file format, as named by its file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplatFormat {
    /// INRIA 3DGS PLY (`.ply`): float properties, lossless.
    InriaPly,
    /// PlayCanvas compressed PLY (`.compressed.ply`): chunk-quantised, ~4× smaller than PLY.
    CompressedPly,
    /// Niantic SPZ (`.spz`): quantised + gzip (v2/v3) or ZSTD (v4), ~10× smaller than PLY.
    Spz,
    /// antimatter15 `.splat`: 32 bytes per splat, no SH.
    DotSplat,
    /// glTF 2.0 binary with `KHR_gaussian_splatting` (`.glb`).
    Glb,
    /// PlayCanvas SOG v2: a `.sog` ZIP bundle, or an unbundled `meta.json` (the name must be
    /// `meta.json`, or an existing folder holding one) with lossless WebP images beside it.
    Sog,
}

impl SplatFormat {
    /// Every format with the file-name suffix that selects it, for help and error texts.
    pub const ALL: [(SplatFormat, &'static str); 6] = [
        (SplatFormat::InriaPly, ".ply"),
        (SplatFormat::CompressedPly, ".compressed.ply"),
        (SplatFormat::Spz, ".spz"),
        (SplatFormat::DotSplat, ".splat"),
        (SplatFormat::Glb, ".glb"),
        (SplatFormat::Sog, ".sog"),
    ];

    /// The format a file name asks for (case-insensitive suffix; `.compressed.ply` wins over
    /// `.ply`). A file named `meta.json`, or an existing folder holding one, is an unbundled SOG.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming `path` and the supported suffixes when none matches.
    pub fn from_path(path: &Path) -> Result<Self> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let found = if name.ends_with(".compressed.ply") {
            Some(Self::CompressedPly)
        } else if name == "meta.json" || (path.is_dir() && path.join("meta.json").is_file()) {
            Some(Self::Sog)
        } else {
            Self::ALL
                .iter()
                .find(|(f, suffix)| *f != Self::CompressedPly && name.ends_with(suffix))
                .map(|(f, _)| *f)
        };
        found.ok_or_else(|| Error::Unsupported {
            path: path.to_path_buf(),
            field: "file extension".into(),
            found: format!("`{name}`"),
            supported: Self::ALL
                .iter()
                .map(|(_, s)| *s)
                .chain(["meta.json (unbundled SOG)"])
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Short human name (`"INRIA PLY"`, `"SPZ"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::InriaPly => ply::NAME,
            Self::CompressedPly => compressed_ply::NAME,
            Self::Spz => spz::NAME,
            Self::DotSplat => dot_splat::NAME,
            Self::Glb => glb::NAME,
            Self::Sog => sog::NAME,
        }
    }

    /// Highest SH degree the format stores (`.splat`: 0; all others 3).
    pub fn max_sh_degree(self) -> u32 {
        match self {
            Self::DotSplat => 0,
            _ => MAX_SH_DEGREE,
        }
    }
}

/// Read a splat file of any supported format, chosen by [`SplatFormat::from_path`]; `.ply`
/// files are told apart by content (an `element chunk` makes a PlayCanvas compressed PLY,
/// [`compressed_ply::read`]; anything else is read by [`ply::read`]).
///
/// Returns splats in the training parametrisation, in the frame the file stored them in, at an
/// f64 origin ([`PlacedSplats`]): INRIA PLYs with `double` (or integer) x/y/z beyond f32's
/// precision and GLBs whose node transforms place them far from the origin (a survey
/// translation) keep those positions; every other file, and every one that f32 holds to 1 µm,
/// reads at origin `[0, 0, 0]` (SPZ, `.splat`, compressed PLY and SOG store f32 or fixed-point
/// positions). Callers that work in absolute f32 take [`PlacedSplats::into_absolute_f32`].
///
/// # Errors
/// [`Error::Unsupported`] for an unknown extension; [`Error::Invalid`] naming `path` for a file
/// with no splats or a splat whose rotation is the zero quaternion (with its index); otherwise
/// the format reader's errors, all naming `path` ([`ply::read`], [`compressed_ply::read`],
/// [`spz::read`], [`dot_splat::read`], [`glb::read`], [`sog::read`]).
pub fn read(path: &Path) -> Result<PlacedSplats> {
    let placed = match SplatFormat::from_path(path)? {
        SplatFormat::InriaPly | SplatFormat::CompressedPly => {
            if ply_container::read_header(path)?.is_compressed() {
                compressed_ply::read(path)?
            } else {
                ply::read(path)?
            }
        }
        SplatFormat::Spz => spz::read(path)?,
        SplatFormat::DotSplat => dot_splat::read(path)?,
        SplatFormat::Glb => glb::read(path)?,
        SplatFormat::Sog => sog::read(path)?,
    };
    check_usable(path, &placed.splats)?;
    Ok(placed)
}

/// What every reader's output must be before anything is built from it: at least one splat
/// (each reader has checked its values by the [`super::domain`] policy).
fn check_usable(path: &Path, splats: &GaussianSplats) -> Result<()> {
    if splats.is_empty() {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "splat count".into(),
            expected: "at least one splat".into(),
            found: "0 splats (an empty file: nothing to convert or tile)".into(),
        });
    }
    Ok(())
}

/// The axis convention ([`SpzFrame`]) of the splats [`read`] returns for `path`: RDF
/// for INRIA and PlayCanvas PLYs and `.splat` files (the trainers' frame), LUF for
/// `KHR_gaussian_splatting` GLBs (glTF's), RDF for SPZ v4 files that record a frame (the reader
/// turns them into RDF), and `None` for SPZ files that record none (their numbers are kept as
/// stored: RUB if the writer followed the SPZ default, often the PLY's RDF in practice).
///
/// # Errors
/// As [`read`] when the SPZ file cannot be read or its header is corrupt.
pub fn frame_of_read(path: &Path) -> Result<Option<SpzFrame>> {
    Ok(match SplatFormat::from_path(path)? {
        // splat-transform writes SOG in the PLY's frame (it bakes its transform to PLY space).
        SplatFormat::InriaPly
        | SplatFormat::CompressedPly
        | SplatFormat::DotSplat
        | SplatFormat::Sog => Some(SpzFrame::RDF),
        SplatFormat::Glb => Some(SpzFrame::LUF),
        SplatFormat::Spz => {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            spz_recorded_frame(&bytes)?.map(|_| SpzFrame::RDF)
        }
    })
}

/// Whether the splats [`read`] returns for `path` were trained for antialiased rasterisation
/// (issue 44, rule 6): an SPZ file's header flag 0x1, or an INRIA PLY with Mip-Splatting's
/// `filter_3D` column (Mip-Splatting trains with its 2D mip filter, the antialiased
/// rasterisation the SPZ flag names). No other format Kiln reads records it.
///
/// # Errors
/// As [`read`] when the file or its header cannot be read.
pub fn antialiasing_of_read(path: &Path) -> Result<SpzAntialiasing> {
    Ok(match SplatFormat::from_path(path)? {
        SplatFormat::Spz => {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            let shown = path.display().to_string();
            spz_antialiasing(&bytes)
                .map_err(|e| e.renamed(&|t| t.replace("<SPZ bytes>", &shown)))?
        }
        SplatFormat::InriaPly | SplatFormat::CompressedPly => {
            let header = ply_container::read_header(path)?;
            let mip = header
                .vertex()
                .is_some_and(|v| v.properties.iter().any(|(name, _)| name == "filter_3D"));
            if mip && !header.is_compressed() {
                SpzAntialiasing::Antialiased
            } else {
                SpzAntialiasing::Standard
            }
        }
        _ => SpzAntialiasing::Standard,
    })
}

/// Carry `input`'s antialiasing ([`antialiasing_of_read`]) into `options` when the output
/// `format` can record it (SPZ, and a GLB whose SPZ payload has the header flag), and otherwise
/// say, in one warning naming both files and the flag, that the output loses it: viewers will
/// then draw the splats with standard rasterisation (slightly thinner, more aliased).
///
/// # Errors
/// As [`antialiasing_of_read`].
pub fn carry_antialiasing(
    input: &Path,
    output: &Path,
    format: SplatFormat,
    options: &mut WriteOptions,
) -> Result<SpzAntialiasing> {
    let flag = antialiasing_of_read(input)?;
    if flag == SpzAntialiasing::Standard {
        return Ok(flag);
    }
    let holds = format == SplatFormat::Spz || (format == SplatFormat::Glb && options.glb_spz);
    if holds {
        options.spz.antialiasing = flag;
    } else {
        tracing::warn!(
            "{}: the splats are marked antialiased (SPZ flag `antialiased`, or a Mip-Splatting \
             `filter_3D`); {} cannot record that flag, so {} will be drawn with standard \
             rasterisation (write .spz to keep it)",
            input.display(),
            format.name(),
            output.display(),
        );
    }
    Ok(flag)
}

/// The frame of splats in `frame` after [`super::transform::rotate_splats`] with `r`
/// (p′ = r·p): the basis B·rᵀ, if it is one of the sixteen SPZ frames.
#[must_use]
pub fn rotated_frame(frame: SpzFrame, r: [[f64; 3]; 3]) -> Option<SpzFrame> {
    let b = frame.basis();
    let turned =
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| b[i][k] * r[j][k]).sum()));
    SpzFrame::from_basis(&turned)
}

/// What [`write()`] does besides encoding. `Default`: format from the file name, keep the SH
/// degree, no rotation, SPZ v3 at 12 fractional bits, plain (uncompressed) GLB in sRGB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteOptions {
    /// Output format; `None` picks it from the file name ([`SplatFormat::from_path`]).
    pub format: Option<SplatFormat>,
    /// Keep SH bands up to this degree (0..=3); `None` keeps the input's. Must not exceed the
    /// input's degree.
    pub sh_degree: Option<u32>,
    /// `(input up axis, output up axis)`: rotate the scene with [`up_axis_rotation`]; `None`
    /// stores coordinates as given.
    pub up_axis: Option<(UpAxis, UpAxis)>,
    /// SPZ encoding of `.spz` outputs (version 2, 3 or 4; fractional bits; antialiasing flag),
    /// and of the payload of `.glb` outputs with [`Self::glb_spz`].
    pub spz: SpzOptions,
    /// `.glb` outputs: `true` embeds an SPZ payload (`KHR_gaussian_splatting_compression_spz_2`,
    /// SPZ v2/v3 from [`Self::spz`], what CesiumJS renders); `false` writes plain float
    /// accessors.
    pub glb_spz: bool,
    /// `.glb` outputs: `KHR_gaussian_splatting.colorSpace`.
    pub glb_color_space: SplatColorSpace,
    /// SOG encoding of `.sog` / `meta.json` outputs (SH palette k-means rounds, seed, size).
    pub sog: SogOptions,
}

/// What [`write()`] wrote, for a one-line summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteSummary {
    /// Format written.
    pub format: SplatFormat,
    /// Number of splats written.
    pub splats: usize,
    /// SH degree stored in the file (0 for `.splat`, whatever the input held).
    pub sh_degree: u32,
    /// Size of the written file in bytes (of every file of an unbundled SOG).
    pub bytes: u64,
}

/// Transform (SH degree, up axis) and write splats to `path` in the format its name asks for
/// (or `options.format`), atomically: the file appears complete or not at all, and an existing
/// file is kept on any error. SH degree reduction happens before rotation (cheaper; the result
/// is the same since rotation never mixes bands); an up-axis turn rotates the origin too.
/// `.splat` stores no SH; higher bands are dropped and the summary says degree 0.
///
/// - `splats`: a `&PlacedSplats`, or a `&GaussianSplats` with absolute means (origin 0).
///   Formats that hold f64 positions keep a non-zero origin: INRIA PLY as `double x y z` =
///   origin + mean, GLB as the node `translation`. SPZ (24-bit fixed point), `.splat`,
///   compressed PLY and SOG (absolute f32) are written from `origin + mean` when that moves no
///   coordinate by more than [`super::placed::POSITION_TOLERANCE_M`] (and, for SPZ, fits its
///   range), and refused otherwise. Origin 0 writes exactly the bytes of the format's writer.
///
/// # Errors
/// [`Error::Unsupported`] for an unknown extension (names the supported ones);
/// [`Error::InvalidInput`] for an SH degree above the input's (names the fix), inconsistent
/// shapes, non-finite values, SPZ v4 inside a GLB, an empty scene for GLB;
/// [`Error::PositionRange`] naming `path`, the format, its range and precision, the largest
/// coordinate and the fix (write `.ply` or `.glb`, or tile with a splats job) when the format
/// cannot hold the positions (SPZ: beyond its fixed-point range, ±2048 m at 12 fractional
/// bits); [`Error::Io`] naming `path` when writing fails.
pub fn write<'a>(
    path: &Path,
    splats: impl Into<PlacedRef<'a>>,
    options: &WriteOptions,
) -> Result<WriteSummary> {
    let placed = splats.into();
    let format = match options.format {
        Some(f) => f,
        None => SplatFormat::from_path(path)?,
    };
    placed.splats.check_shapes("write splats")?;
    let mut owned;
    let mut s = placed.splats;
    if let Some(degree) = options.sh_degree
        && degree != s.sh_degree
    {
        owned = s.clone();
        reduce_sh_degree(&mut owned, degree)?;
        s = &owned;
    }
    let mut origin_m = placed.origin_m;
    if let Some((from, to)) = options.up_axis
        && from != to
    {
        let mut turned = PlacedSplats {
            origin_m,
            splats: s.clone(),
        };
        turned.rotate(up_axis_rotation(from, to))?;
        origin_m = turned.origin_m;
        owned = turned.splats;
        s = &owned;
    }
    let out = PlacedRef {
        origin_m,
        splats: s,
    };
    let mut written = None;
    match format {
        SplatFormat::InriaPly => ply::write(path, out)?,
        SplatFormat::CompressedPly => compressed_ply::write(path, out)?,
        SplatFormat::Spz => spz::write(path, out, &options.spz)?,
        SplatFormat::DotSplat => dot_splat::write(path, out)?,
        SplatFormat::Glb => {
            let glb = SplatGlbOptions {
                color_space: options.glb_color_space,
                spz: options.glb_spz.then_some(options.spz),
            };
            glb::write(path, out, &glb)?;
        }
        // An unbundled SOG is several files: count them all.
        SplatFormat::Sog => written = Some(sog::write(path, out, &options.sog)?),
    }
    let bytes = match written {
        Some(bytes) => bytes,
        None => std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len(),
    };
    Ok(WriteSummary {
        format,
        splats: s.len(),
        sh_degree: s.sh_degree.min(format.max_sh_degree()),
        bytes,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_files_and_zero_quaternions_are_refused_at_read_naming_file_and_splat() {
        use super::super::ply;
        let dir = tempfile::tempdir().unwrap();
        // A 0-splat PLY and an empty .splat.
        let empty_ply = dir.path().join("empty.ply");
        std::fs::write(
            &empty_ply,
            "ply\nformat binary_little_endian 1.0\nelement vertex 0\nproperty float x\n\
             property float y\nproperty float z\nproperty float f_dc_0\nproperty float f_dc_1\n\
             property float f_dc_2\nproperty float opacity\nproperty float scale_0\n\
             property float scale_1\nproperty float scale_2\nproperty float rot_0\n\
             property float rot_1\nproperty float rot_2\nproperty float rot_3\nend_header\n",
        )
        .unwrap();
        let empty_splat = dir.path().join("empty.splat");
        std::fs::write(&empty_splat, b"").unwrap();
        for p in [&empty_ply, &empty_splat] {
            let err = read(p).unwrap_err().to_string();
            assert!(
                err.contains(&p.display().to_string()) && err.contains("at least one splat"),
                "{err}"
            );
        }
        // Splat 1 of 3 with rotation (0, 0, 0, 0).
        let mut s = crate::splats::test_data::random_splats(3, 0, 1.0, 2);
        s.rotations[4..8].fill(0.0);
        let zero = dir.path().join("zero.ply");
        ply::write(&zero, &s).unwrap();
        let err = read(&zero).unwrap_err().to_string();
        assert!(
            err.contains("zero.ply") && err.contains("rot_* of splat 1"),
            "{err}"
        );
    }

    use super::*;
    use crate::splats::spz::SpzVersion;
    use crate::splats::test_data::random_splats;
    use std::path::PathBuf;

    #[test]
    fn format_is_chosen_by_suffix() {
        let f = |s: &str| SplatFormat::from_path(Path::new(s));
        assert_eq!(f("a/b.ply").unwrap(), SplatFormat::InriaPly);
        assert_eq!(f("B.Compressed.PLY").unwrap(), SplatFormat::CompressedPly);
        assert_eq!(f("x.spz").unwrap(), SplatFormat::Spz);
        assert_eq!(f("x.splat").unwrap(), SplatFormat::DotSplat);
        assert_eq!(f("x.glb").unwrap(), SplatFormat::Glb);
        assert_eq!(f("x.SOG").unwrap(), SplatFormat::Sog);
        assert_eq!(f("out/meta.json").unwrap(), SplatFormat::Sog);
        assert!(f("out/other.json").is_err());
        let e = f("scene.ksplat").unwrap_err().to_string();
        assert!(
            e.contains("scene.ksplat") && e.contains(".compressed.ply"),
            "{e}"
        );
    }

    fn out(dir: &tempfile::TempDir, name: &str) -> PathBuf {
        dir.path().join(name)
    }

    #[test]
    fn write_and_read_every_format_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(300, 2, 3.0, 8);
        for (format, suffix) in SplatFormat::ALL {
            let p = out(&dir, &format!("scene{suffix}"));
            let summary = write(&p, &s, &WriteOptions::default()).unwrap();
            assert_eq!(summary.format, format);
            assert_eq!(summary.splats, 300);
            assert_eq!(summary.bytes, std::fs::metadata(&p).unwrap().len());
            let back = read(&p).unwrap().splats;
            assert_eq!(back.len(), 300, "{format:?}");
            let expected_degree = if format == SplatFormat::DotSplat {
                0
            } else {
                2
            };
            assert_eq!(
                (summary.sh_degree, back.sh_degree),
                (expected_degree, expected_degree)
            );
        }
        // Unbundled SOG: `meta.json` names it; the summary counts every file of the folder,
        // and the folder itself reads back.
        let p = out(&dir, "sog/meta.json");
        let summary = write(&p, &s, &WriteOptions::default()).unwrap();
        let on_disk: u64 = std::fs::read_dir(out(&dir, "sog"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!((summary.format, summary.bytes), (SplatFormat::Sog, on_disk));
        assert_eq!(read(&out(&dir, "sog")).unwrap().splats.len(), 300);
        // SPZ-compressed GLB and SPZ v4 through the same entry point.
        let p = out(&dir, "c.glb");
        let opts = WriteOptions {
            glb_spz: true,
            ..Default::default()
        };
        write(&p, &s, &opts).unwrap();
        assert_eq!(read(&p).unwrap().splats.len(), 300);
        let p = out(&dir, "v4.spz");
        let opts = WriteOptions {
            spz: SpzOptions {
                version: SpzVersion::V4,
                ..Default::default()
            },
            ..Default::default()
        };
        write(&p, &s, &opts).unwrap();
        assert_eq!(&std::fs::read(&p).unwrap()[..4], b"NGSP");
    }

    #[test]
    fn write_applies_sh_degree_and_up_axis() {
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(50, 3, 3.0, 8);
        let p = out(&dir, "r.ply");
        let opts = WriteOptions {
            sh_degree: Some(1),
            up_axis: Some((UpAxis::NegY, UpAxis::Y)),
            ..Default::default()
        };
        let summary = write(&p, &s, &opts).unwrap();
        assert_eq!(summary.sh_degree, 1);
        let back = read(&p).unwrap().splats;
        assert_eq!(back.sh_degree, 1);
        for i in 0..50 {
            assert_eq!(back.means[i * 3], s.means[i * 3]);
            assert_eq!(back.means[i * 3 + 1], -s.means[i * 3 + 1]);
            assert_eq!(back.means[i * 3 + 2], -s.means[i * 3 + 2]);
        }
        // Too high an SH degree: an error naming the fix, and no file.
        let q = out(&dir, "bad.spz");
        let opts = WriteOptions {
            sh_degree: Some(3),
            ..Default::default()
        };
        let e = write(&q, &back, &opts).unwrap_err().to_string();
        assert!(e.contains("--sh-degree 1 or lower"), "{e}");
        assert!(!q.exists());
        // A failing encoder leaves an existing file untouched and no temporary behind.
        std::fs::write(&q, b"old").unwrap();
        let mut far = s.clone();
        far.means[0] = 1e6;
        assert!(write(&q, &far, &WriteOptions::default()).is_err());
        assert_eq!(std::fs::read(&q).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    /// The survey splats (`survey_xyz`: 1 cm apart at x = 500 km, y = 4000 km) as read from a
    /// `double` PLY.
    fn survey_placed() -> PlacedSplats {
        let xyz = crate::splats::test_data::survey_xyz();
        PlacedSplats::from_absolute(&xyz, random_splats(3, 1, 1.0, 21))
    }

    /// Assert positions within 1 mm of `survey_xyz`, given as origin + f32 means.
    fn assert_survey_positions(origin: [f64; 3], means: &[f32], what: &str) {
        let want = crate::splats::test_data::survey_xyz();
        for (j, &m) in means.iter().enumerate() {
            let got = origin[j % 3] + f64::from(m);
            assert!(
                (got - want[j]).abs() < 1e-3,
                "{what}: splat {} axis {}: {got} vs {}",
                j / 3,
                j % 3,
                want[j]
            );
        }
    }

    /// JSON and BIN chunks of a GLB.
    fn glb_chunks(glb: &[u8]) -> (serde_json::Value, Vec<u8>) {
        let json_len = u32::from_le_bytes(glb[12..16].try_into().unwrap()) as usize;
        let json = serde_json::from_slice(&glb[20..20 + json_len]).unwrap();
        let bin_at = 20 + json_len;
        let bin_len = u32::from_le_bytes(glb[bin_at..bin_at + 4].try_into().unwrap()) as usize;
        (json, glb[bin_at + 8..bin_at + 8 + bin_len].to_vec())
    }

    /// The node translation of a splat GLB and its stored (relative) positions, read from the
    /// file's own bytes: the plain accessor, or the SPZ payload decoded.
    fn glb_translation_and_positions(glb: &[u8]) -> ([f64; 3], Vec<f32>) {
        let (json, bin) = glb_chunks(glb);
        let t = &json["nodes"][0]["translation"];
        let translation = std::array::from_fn(|a| t[a].as_f64().expect("a translation"));
        let view = &json["bufferViews"][0];
        let at = view["byteOffset"].as_u64().unwrap_or(0) as usize;
        let len = view["byteLength"].as_u64().unwrap() as usize;
        let bytes = &bin[at..at + len];
        let positions = if json["accessors"][0].get("bufferView").is_some() {
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect()
        } else {
            crate::splats::spz::decode(bytes).unwrap().means
        };
        (translation, positions)
    }

    #[test]
    fn survey_positions_keep_1_cm_in_ply_and_glb() {
        let dir = tempfile::tempdir().unwrap();
        let placed = survey_placed();
        // PLY: double x/y/z, read back to the same positions.
        let p = out(&dir, "s.ply");
        write(&p, &placed, &WriteOptions::default()).unwrap();
        let back = read(&p).unwrap();
        assert_survey_positions(back.origin_m, &back.splats.means, "PLY");
        // GLB, plain and SPZ-compressed: node translation + stored positions.
        for glb_spz in [false, true] {
            let p = out(&dir, &format!("s{glb_spz}.glb"));
            let opts = WriteOptions {
                glb_spz,
                ..Default::default()
            };
            write(&p, &placed, &opts).unwrap();
            let (t, means) = glb_translation_and_positions(&std::fs::read(&p).unwrap());
            assert_eq!(t, [500_000.0, 4_000_000.0, 10.0]);
            assert_survey_positions(t, &means, if glb_spz { "SPZ GLB" } else { "GLB" });
        }
        // An up-axis turn rotates the origin too: NegY → Y is (x, y, z) → (x, −y, −z).
        let p = out(&dir, "turned.glb");
        let opts = WriteOptions {
            up_axis: Some((UpAxis::NegY, UpAxis::Y)),
            ..Default::default()
        };
        write(&p, &placed, &opts).unwrap();
        let (t, means) = glb_translation_and_positions(&std::fs::read(&p).unwrap());
        assert_eq!(t, [500_000.0, -4_000_000.0, -10.0]);
        let flipped: Vec<f32> = means
            .iter()
            .enumerate()
            .map(|(j, &m)| if j % 3 == 0 { m } else { -m })
            .collect();
        assert_survey_positions([t[0], -t[1], -t[2]], &flipped, "turned GLB");
    }

    #[test]
    fn spz_splat_and_compressed_ply_refuse_survey_positions_naming_their_range() {
        let dir = tempfile::tempdir().unwrap();
        let placed = survey_placed();
        for (name, format, range) in [
            ("s.spz", "SPZ", "|x| ≤ 2048.000 m at 12 fractional bits"),
            (
                "s.splat",
                ".splat",
                "absolute f32 positions, within 0.001 m only for |x| < 32768 m",
            ),
            ("s.compressed.ply", "compressed PLY", "f32 chunk bounds"),
        ] {
            let p = out(&dir, name);
            let e = write(&p, &placed, &WriteOptions::default()).unwrap_err();
            assert!(
                matches!(&e, Error::PositionRange { format: f, largest_m, .. }
                    if *f == format && *largest_m == 4_000_000.0),
                "{e:?}"
            );
            let msg = e.to_string();
            for part in [
                name,
                format,
                range,
                "the largest |coordinate| is 4000000.000 m (splat 0, y)",
                "write `.ply`",
                "`.glb`",
            ] {
                assert!(msg.contains(part), "{name}: `{part}` missing from: {msg}");
            }
            assert!(!p.exists(), "{name} was written");
        }
        // SPZ says what 4000 km would take: 1 fractional bit, 500 mm steps.
        let e = write(&out(&dir, "t.spz"), &placed, &WriteOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 fractional bits, steps of 500.000 mm"), "{e}");
        // Within f32's 1 mm range (origin 3 km here) `.splat` is written, to the millimetre.
        let near: Vec<f64> = crate::splats::test_data::survey_xyz()
            .chunks_exact(3)
            .flat_map(|p| [p[0] - 497_000.0, 12.0, p[2]])
            .collect();
        let near = PlacedSplats::from_absolute(&near, random_splats(3, 0, 1.0, 2));
        assert_eq!(near.origin_m, [3000.0, 12.0, 10.0]);
        let p = out(&dir, "near.splat");
        write(&p, &near, &WriteOptions::default()).unwrap();
        let back = read(&p).unwrap().splats;
        for (i, x) in [3000.0, 3000.01, 3000.02].into_iter().enumerate() {
            assert!(
                (f64::from(back.means[i * 3]) - x).abs() < 1e-3,
                "{:?}",
                back.means
            );
        }
    }

    #[test]
    fn origin_zero_writes_the_same_bytes_as_before_in_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(64, 2, 3.0, 9);
        let placed = PlacedSplats::at_zero(s.clone());
        for (_, suffix) in SplatFormat::ALL {
            for glb_spz in [false, true] {
                let opts = WriteOptions {
                    glb_spz,
                    ..Default::default()
                };
                let a = out(&dir, &format!("a{glb_spz}{suffix}"));
                let b = out(&dir, &format!("b{glb_spz}{suffix}"));
                write(&a, &s, &opts).unwrap();
                write(&b, &placed, &opts).unwrap();
                assert_eq!(
                    std::fs::read(&a).unwrap(),
                    std::fs::read(&b).unwrap(),
                    "{suffix}"
                );
            }
        }
        // And reading a float PLY back gives origin 0 and the splats written, bit for bit.
        let p = out(&dir, "afalse.ply");
        let placed = read(&p).unwrap();
        assert!(placed.is_at_zero());
        assert_eq!(placed.splats, s);
    }

    /// Issue 44, rule 6: an antialiased input (SPZ flag 0x1, or a Mip-Splatting PLY) keeps the
    /// flag in an SPZ output, and an output that cannot record it gets one warning naming the
    /// flag, the input and the output; standard inputs say nothing.
    #[test]
    fn antialiasing_is_carried_into_spz_and_named_in_a_warning_where_the_output_cannot_hold_it() {
        use crate::splats::domain::tests::{raw_ply, warnings};
        use crate::splats::spz::{self, SpzAntialiasing};
        let dir = tempfile::tempdir().unwrap();
        let s = random_splats(20, 0, 1.0, 5);
        let aa = dir.path().join("aa.spz");
        let antialiased = SpzOptions {
            antialiasing: SpzAntialiasing::Antialiased,
            ..Default::default()
        };
        spz::write(&aa, &s, &antialiased).unwrap();
        let mip = dir.path().join("mip.ply");
        raw_ply(&mip, &s, Some(&[0.01; 20]));
        let plain = dir.path().join("plain.ply");
        raw_ply(&plain, &s, None);
        for input in [&aa, &mip] {
            assert_eq!(
                antialiasing_of_read(input).unwrap(),
                SpzAntialiasing::Antialiased
            );
            let out = dir.path().join("out.spz");
            let mut options = WriteOptions::default();
            let (flag, lines) =
                warnings(|| carry_antialiasing(input, &out, SplatFormat::Spz, &mut options));
            assert_eq!(flag.unwrap(), SpzAntialiasing::Antialiased);
            assert!(lines.is_empty(), "{lines:?}");
            write(&out, &read(input).unwrap(), &options).unwrap();
            let written = spz::spz_antialiasing(&std::fs::read(&out).unwrap()).unwrap();
            assert_eq!(written, SpzAntialiasing::Antialiased);
            let ply_out = dir.path().join("out.ply");
            let mut options = WriteOptions::default();
            let (_, lines) = warnings(|| {
                carry_antialiasing(input, &ply_out, SplatFormat::InriaPly, &mut options)
            });
            assert_eq!(lines.len(), 1, "{lines:?}");
            let w = &lines[0];
            assert!(
                w.contains("antialiased")
                    && w.contains(&input.display().to_string())
                    && w.contains(&ply_out.display().to_string()),
                "{w}"
            );
        }
        let mut options = WriteOptions::default();
        let out = dir.path().join("x.glb");
        let (flag, lines) =
            warnings(|| carry_antialiasing(&plain, &out, SplatFormat::Glb, &mut options));
        assert_eq!(flag.unwrap(), SpzAntialiasing::Standard);
        assert!(lines.is_empty(), "{lines:?}");
    }
}
