//! `kiln convert IN OUT`: convert a Gaussian splat file between formats (INRIA PLY, PlayCanvas
//! compressed PLY, SPZ, `.splat`, `KHR_gaussian_splatting` GLB, PlayCanvas SOG), optionally
//! dropping SH bands and changing the up axis. Formats follow the file names; the work is
//! `kiln_formats::splats::convert`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use kiln_formats::splats::convert::{
    self, SplatFormat, WriteOptions, frame_of_read, rotated_frame,
};
use kiln_formats::splats::sog::SogOptions;
use kiln_formats::splats::spz::{SpzOptions, SpzVersion};
use kiln_formats::splats::transform::{UpAxis, up_axis_rotation};

/// Arguments of `kiln convert`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Formats by file name: .ply (INRIA 3DGS), .compressed.ply (PlayCanvas), \
    .spz (Niantic, reads v1-v4), .splat (antimatter15, no SH), .glb (KHR_gaussian_splatting; \
    add --glb-spz for the SPZ-compressed variant CesiumJS renders), .sog (PlayCanvas SOG bundle) \
    or DIR/meta.json (unbundled SOG: meta.json plus WebP images in DIR).\n\
    Up axes: y (glTF, 3D Tiles content), neg-y (COLMAP / OpenCV / INRIA training output), z \
    (Blender, ENU), and x, neg-x, neg-z."
)]
pub struct ConvertArgs {
    /// Input splat file.
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// Output splat file; its name picks the format. Written atomically (never half-written).
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// Keep SH bands up to this degree (0-3); must not exceed the input's. Default: keep all.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=3))]
    pub sh_degree: Option<u32>,
    /// The input's up axis (y, neg-y, z, neg-z, x, neg-x). Given, the scene is rotated
    /// (positions, orientations and SH) so that --out-up-axis points up. Default: no rotation.
    #[arg(long, value_name = "AXIS", value_parser = parse_axis, allow_hyphen_values = true)]
    pub up_axis: Option<UpAxis>,
    /// The output's up axis, used with --up-axis.
    #[arg(long, value_name = "AXIS", value_parser = parse_axis, default_value = "y", requires = "up_axis", allow_hyphen_values = true)]
    pub out_up_axis: UpAxis,
    /// SPZ version of .spz outputs (2, 3 or 4); a .glb with --glb-spz takes 2 or 3.
    #[arg(long, value_name = "V", default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=4))]
    pub spz_version: u32,
    /// Write a .glb with an SPZ payload (KHR_gaussian_splatting_compression_spz_2) instead of
    /// plain float accessors.
    #[arg(long)]
    pub glb_spz: bool,
    /// SOG outputs: Lloyd rounds of the SH palette k-means, 0-1000 (splat-transform's -i; 0
    /// keeps the seeded initial palette: fast, coarse).
    #[arg(long, value_name = "N", default_value_t = SogOptions::default().kmeans_iterations, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub sog_iterations: u32,
    /// SOG outputs: SH palette entries, 1-65536. Default: splat-transform's size for the splat
    /// count (8192 for 15 K splats, 65536 from 64 K). Fewer entries: smaller files, coarser
    /// view-dependent colour (measure with kiln eval).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub sog_sh_palette: Option<u32>,
    /// SOG outputs: seed of the SH palette k-means (the same input, options and seed give the
    /// same files).
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub seed: u64,
}

/// Say so when `--sog-*` options were given for an output they do not apply to.
fn warn_unused_sog_options(args: &ConvertArgs, out_format: SplatFormat) {
    let given = args.sog_sh_palette.is_some()
        || args.sog_iterations != SogOptions::default().kmeans_iterations;
    if given && out_format != SplatFormat::Sog {
        eprintln!(
            "warning: --sog-sh-palette / --sog-iterations apply to SOG outputs only; {} is {}",
            args.output.display(),
            out_format.name()
        );
    }
}

fn parse_axis(s: &str) -> Result<UpAxis, String> {
    s.parse()
}

/// Read, transform, write, and print a one-line summary.
/// Refuse an output that is the input file (any spelling: `./x`, a link): the writer would
/// replace the very file it reads, and a lossy or baked conversion would be lost for good.
fn refuse_overwriting_the_input(input: &Path, output: &Path) -> anyhow::Result<()> {
    let (Ok(a), Ok(b)) = (std::fs::canonicalize(input), std::fs::canonicalize(output)) else {
        return Ok(());
    };
    if a == b {
        anyhow::bail!(
            "{} is the input file {}: write the conversion to another file name",
            output.display(),
            input.display()
        );
    }
    Ok(())
}

pub fn run(args: ConvertArgs) -> anyhow::Result<()> {
    // Check the output name first so a typo costs no read.
    let out_format = SplatFormat::from_path(&args.output)
        .context("choose the output format with the file name")?;
    let in_format = SplatFormat::from_path(&args.input)?;
    refuse_overwriting_the_input(&args.input, &args.output)?;
    warn_unused_sog_options(&args, out_format);
    // Positions stay f64 (an origin beside f32 means) until the writer: survey-sized PLY
    // coordinates keep their precision in .ply and .glb, and formats that cannot hold them
    // refuse with their range.
    let placed = convert::read(&args.input)
        .with_context(|| format!("cannot read {} splats", in_format.name()))?;
    let out_degree = args.sh_degree.unwrap_or(placed.splats.sh_degree);
    if out_format == SplatFormat::Sog && out_degree == 0 && args.sog_sh_palette.is_some() {
        eprintln!("warning: --sog-sh-palette has no effect: the output has no SH beyond degree 0");
    }
    let spz_version = match args.spz_version {
        2 => SpzVersion::V2,
        3 => SpzVersion::V3,
        _ => SpzVersion::V4,
    };
    // SPZ v4 outputs record the data's axis convention (after any --up-axis turn) when known.
    let frame = if out_format == SplatFormat::Spz && spz_version == SpzVersion::V4 {
        let read = frame_of_read(&args.input)?;
        match args.up_axis {
            Some(from) => {
                read.and_then(|f| rotated_frame(f, up_axis_rotation(from, args.out_up_axis)))
            }
            None => read,
        }
    } else {
        None
    };
    let mut options = WriteOptions {
        format: Some(out_format),
        sh_degree: args.sh_degree,
        up_axis: args.up_axis.map(|from| (from, args.out_up_axis)),
        spz: SpzOptions {
            version: spz_version,
            coordinate_system: frame,
            ..Default::default()
        },
        glb_spz: args.glb_spz,
        sog: SogOptions {
            kmeans_iterations: args.sog_iterations,
            seed: args.seed,
            sh_palette: args.sog_sh_palette.map(|p| p as usize),
        },
        ..Default::default()
    };
    // Antialiased splats (SPZ flag, Mip-Splatting filter_3D) stay so where the output can say it.
    convert::carry_antialiasing(&args.input, &args.output, out_format, &mut options)?;
    let summary = convert::write(&args.output, &placed, &options).with_context(|| {
        format!(
            "cannot write {} as {} (nothing was written)",
            args.output.display(),
            out_format.name()
        )
    })?;
    let dropped = if placed.splats.sh_degree > summary.sh_degree {
        format!(" (input SH {})", placed.splats.sh_degree)
    } else {
        String::new()
    };
    let origin = if placed.is_at_zero() {
        String::new()
    } else {
        let [x, y, z] = placed.origin_m;
        format!(", f64 origin ({x}, {y}, {z}) m")
    };
    let recorded = match frame {
        Some(f) => format!(", frame {} recorded", f.name()),
        None if out_format == SplatFormat::Spz && spz_version == SpzVersion::V4 => {
            ", no frame recorded (the input's is unknown)".into()
        }
        None => String::new(),
    };
    println!(
        "{} → {}: {} splats, SH degree {}{dropped}, {} bytes ({}{recorded}{origin})",
        args.input.display(),
        args.output.display(),
        summary.splats,
        summary.sh_degree,
        summary.bytes,
        summary.format.name()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Re-trial F8: the input under any spelling (itself, `./…`, a link to it) is refused as
    /// the output; another file, existing or not, is not.
    #[test]
    fn an_output_that_is_the_input_is_refused_under_any_spelling() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("same.ply");
        std::fs::write(&input, "ply").unwrap();
        let link = d.path().join("alias.ply");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let dotted = d.path().join(".").join("same.ply");
        for output in [&input, &link, &dotted] {
            let e = refuse_overwriting_the_input(&input, output).unwrap_err();
            assert!(e.to_string().contains("is the input file"), "{e}");
        }
        let other = d.path().join("other.ply");
        assert!(refuse_overwriting_the_input(&input, &other).is_ok());
        std::fs::write(&other, "ply").unwrap();
        assert!(refuse_overwriting_the_input(&input, &other).is_ok());
    }

    fn parse(args: &[&str]) -> ConvertArgs {
        let mut all = vec!["kiln", "convert"];
        all.extend_from_slice(args);
        match super::super::Cli::try_parse_from(all).unwrap().command {
            super::super::Command::Convert(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    /// One splat of SH degree 0 as an ASCII INRIA PLY.
    fn tiny_ply(dir: &std::path::Path) -> PathBuf {
        let p = dir.join("one.ply");
        let text = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
            property float z\nproperty float f_dc_0\nproperty float f_dc_1\nproperty float f_dc_2\n\
            property float opacity\nproperty float scale_0\nproperty float scale_1\n\
            property float scale_2\nproperty float rot_0\nproperty float rot_1\n\
            property float rot_2\nproperty float rot_3\nend_header\n\
            1 2 3 0.1 0.2 0.3 0.5 -3 -3 -3 1 0 0 0\n";
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn spz_v4_outputs_record_the_frame_and_read_back_into_the_ply_frame() {
        use kiln_formats::splats::spz::spz_recorded_frame;
        use kiln_formats::splats::spz_frame::SpzFrame;
        let dir = tempfile::tempdir().unwrap();
        let input = tiny_ply(dir.path());
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
        let recorded = |n: &str| spz_recorded_frame(&std::fs::read(path(n)).unwrap()).unwrap();
        let i = input.to_str().unwrap();
        // As read (a PLY is RDF), and turned y-up by --up-axis neg-y (RUB).
        run(parse(&[i, &path("rdf.spz"), "--spz-version", "4"])).unwrap();
        run(parse(&[
            i,
            &path("rub.spz"),
            "--spz-version",
            "4",
            "--up-axis",
            "neg-y",
        ]))
        .unwrap();
        assert_eq!(recorded("rdf.spz"), Some(SpzFrame::RDF));
        assert_eq!(recorded("rub.spz"), Some(SpzFrame::RUB));
        // Both read back to the PLY's numbers (the RUB file is turned back on read).
        for (spz, ply) in [("rdf.spz", "rdf.ply"), ("rub.spz", "rub.ply")] {
            run(parse(&[&path(spz), &path(ply)])).unwrap();
            let back = convert::read(std::path::Path::new(&path(ply)))
                .unwrap()
                .splats;
            for (a, b) in back.means.iter().zip([1.0f32, 2.0, 3.0]) {
                assert!((a - b).abs() < 1e-3, "{spz}: {:?}", back.means);
            }
        }
        // v3 files have no records.
        run(parse(&[i, &path("v3.spz")])).unwrap();
        assert_eq!(recorded("v3.spz"), None);
    }

    #[test]
    fn convert_parses_options_and_writes_every_format() {
        let dir = tempfile::tempdir().unwrap();
        let input = tiny_ply(dir.path());
        let a = parse(&[
            input.to_str().unwrap(),
            "out.spz",
            "--sh-degree",
            "0",
            "--up-axis",
            "neg-y",
            "--spz-version",
            "4",
        ]);
        assert_eq!(a.up_axis, Some(UpAxis::NegY));
        assert_eq!(a.out_up_axis, UpAxis::Y);
        assert_eq!((a.sh_degree, a.spz_version), (Some(0), 4));
        for name in ["a.ply", "a.compressed.ply", "a.spz", "a.splat", "a.glb"] {
            let out = dir.path().join(name);
            run(parse(&[input.to_str().unwrap(), out.to_str().unwrap()])).unwrap();
            assert!(out.exists(), "{name}");
        }
        assert!(
            super::super::Cli::try_parse_from(["kiln", "convert", "a", "b", "--sh-degree", "4"])
                .is_err()
        );
        assert!(
            super::super::Cli::try_parse_from(["kiln", "convert", "a", "b", "--up-axis", "up"])
                .is_err()
        );
    }

    #[test]
    fn convert_failures_name_the_file_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let input = tiny_ply(dir.path());
        let out = dir.path().join("b.spz");
        let e = run(parse(&[
            input.to_str().unwrap(),
            out.to_str().unwrap(),
            "--sh-degree",
            "2",
        ]))
        .unwrap_err();
        assert!(format!("{e:#}").contains("--sh-degree 0"), "{e:#}");
        assert!(!out.exists());
        let e = run(parse(&[input.to_str().unwrap(), "x.ksplat"])).unwrap_err();
        assert!(format!("{e:#}").contains("x.ksplat"), "{e:#}");
        let missing = dir.path().join("missing.spz");
        let e = run(parse(&[missing.to_str().unwrap(), out.to_str().unwrap()])).unwrap_err();
        assert!(format!("{e:#}").contains("missing.spz"), "{e:#}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn convert_keeps_1_cm_at_500_km_in_ply_and_glb_and_refuses_spz_and_splat() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("big.ply");
        let mut text = String::from("ply\nformat ascii 1.0\nelement vertex 3\n");
        text.push_str("property double x\nproperty double y\nproperty double z\n");
        for p in [
            "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2", "rot_0",
            "rot_1", "rot_2", "rot_3",
        ] {
            text.push_str(&format!("property float {p}\n"));
        }
        text.push_str("end_header\n");
        let xs = [500_000.00, 500_000.01, 500_000.02];
        for x in xs {
            text.push_str(&format!(
                "{x:.2} 4000000 10 0.1 0.2 0.3 0.5 -5 -5 -5 1 0 0 0\n"
            ));
        }
        std::fs::write(&input, text).unwrap();
        let i = input.to_str().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
        run(parse(&[i, &path("out.ply")])).unwrap();
        run(parse(&[i, &path("out.glb")])).unwrap();
        let back = convert::read(std::path::Path::new(&path("out.ply"))).unwrap();
        for (k, x) in xs.into_iter().enumerate() {
            let got = back.absolute_mean(k);
            assert!((got[0] - x).abs() < 1e-3, "{got:?}");
            assert!(
                (got[1] - 4e6).abs() < 1e-3 && (got[2] - 10.0).abs() < 1e-3,
                "{got:?}"
            );
        }
        // The GLB node carries the origin at f64.
        let glb = std::fs::read(path("out.glb")).unwrap();
        let json_len = u32::from_le_bytes(glb[12..16].try_into().unwrap()) as usize;
        let doc: serde_json::Value = serde_json::from_slice(&glb[20..20 + json_len]).unwrap();
        assert_eq!(
            doc["nodes"][0]["translation"],
            serde_json::json!([500_000.0, 4_000_000.0, 10.0])
        );
        for (name, format) in [("out.spz", "SPZ"), ("out.splat", ".splat")] {
            let e = run(parse(&[i, &path(name)])).unwrap_err();
            let msg = format!("{e:#}");
            for part in [name, format, "4000000.000 m", "write `.ply`"] {
                assert!(msg.contains(part), "{name}: `{part}` missing from {msg}");
            }
            assert!(!dir.path().join(name).exists());
        }
    }
}
