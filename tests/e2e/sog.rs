//! PlayCanvas SOG interop and fidelity, against the peer tool `@playcanvas/splat-transform` (npm
//! 3.7.0 under Node 22, `.ci/splat-transform/`; found as in `splat_transform.rs`: skipped locally
//! without it, a failure under CI):
//!
//! - splat-transform reads the SOGs Kiln writes of plush-dog (15,105 splats, SH 3) and biker
//!   (SH 0) with the same count and SH bands, and its decode has Kiln's positions (it re-exports
//!   them as PLY; both decoders undo the same 16-bit log transform, so they agree to f32
//!   rounding) — the bounds are compared.
//! - Kiln reads the SOG splat-transform writes of biker the way splat-transform itself decodes it
//!   (splat-transform's own SOG → PLY): the same splats, per attribute.
//! - `kiln eval` renders plush-dog's SOG from 24 orbit views against the source PLY: ≥ 35 dB
//!   (issue 21's bar; measured 40.9 dB on the 2-core CI machine, splat-transform's own SOG of the
//!   same splats 40.7 dB), and a 1024-entry palette (`--sog-sh-palette`) is smaller and still
//!   ≥ 35 dB.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::convert;

use super::harness::{Sandbox, dataset, ok};
use super::splat_transform::splat_transform;

fn plushdog() -> PathBuf {
    dataset("splat-plushdog-smartdatascan").join("point_cloud_29999_clean.ply")
}

fn biker() -> PathBuf {
    dataset("splat-playcanvas").join("biker.compressed.ply")
}

/// Run splat-transform (CPU only: the CI machine has no GPU) with `args`; panics with its output.
fn run_tool(tool: &Path, args: &[&str]) {
    let o = Command::new(tool)
        .args(["-q", "-w", "-g", "cpu"])
        .args(args)
        .output()
        .expect("run splat-transform");
    assert!(
        o.status.success(),
        "splat-transform {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Per-axis (min, max) of the means.
fn bounds(s: &GaussianSplats) -> [(f32, f32); 3] {
    let mut b = [(f32::INFINITY, f32::NEG_INFINITY); 3];
    for m in s.means.chunks_exact(3) {
        for (axis, v) in b.iter_mut().zip(m) {
            *axis = (axis.0.min(*v), axis.1.max(*v));
        }
    }
    b
}

/// Largest |a − b| over two equal-length columns.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn splat_transform_reads_kiln_sog_with_the_same_count_bands_and_bounds() {
    let Some(tool) = splat_transform() else {
        return;
    };
    let sb = Sandbox::new();
    for (name, input, sh_bands) in [("plushdog", plushdog(), 3), ("biker", biker(), 0)] {
        let sog = sb.path().join(format!("{name}.sog"));
        ok(&sb.kiln(&["convert", input.to_str().unwrap(), sog.to_str().unwrap()]));
        let (count, bands) = super::splat_transform::info(&tool, &sog);
        let kiln = convert::read(&sog).unwrap().splats;
        let source = convert::read(&input).unwrap().splats;
        assert_eq!((count, bands), (source.len() as u64, sh_bands), "{name}");
        assert_eq!(kiln.len(), source.len(), "{name}");
        // splat-transform's decode, as PLY, has the positions Kiln's decode has.
        let back = sb.path().join(format!("{name}-st.ply"));
        run_tool(&tool, &[sog.to_str().unwrap(), back.to_str().unwrap()]);
        let theirs = convert::read(&back).unwrap().splats;
        assert_eq!(theirs.len(), source.len(), "{name}");
        let (ours, theirs) = (bounds(&kiln), bounds(&theirs));
        let src = bounds(&source);
        for axis in 0..3 {
            let extent = src[axis].1 - src[axis].0;
            // Both decoders: the same 16-bit codes through exp(); f32 rounding only.
            for (a, b) in [
                (ours[axis].0, theirs[axis].0),
                (ours[axis].1, theirs[axis].1),
            ] {
                assert!(
                    (a - b).abs() <= 1e-5 * extent,
                    "{name} axis {axis}: Kiln {a} vs splat-transform {b}"
                );
            }
            // And the source's bounds within one 16-bit step of the log-transformed range
            // (far below 1e-3 of the extent for these scenes).
            for (a, b) in [(ours[axis].0, src[axis].0), (ours[axis].1, src[axis].1)] {
                assert!(
                    (a - b).abs() <= 1e-3 * extent,
                    "{name} axis {axis}: SOG {a} vs source {b}"
                );
            }
        }
    }
}

#[test]
fn kiln_reads_splat_transform_sog_as_splat_transform_decodes_it() {
    let Some(tool) = splat_transform() else {
        return;
    };
    let sb = Sandbox::new();
    let sog = sb.path().join("biker-st.sog");
    let decoded = sb.path().join("biker-st-decoded.ply");
    run_tool(&tool, &[biker().to_str().unwrap(), sog.to_str().unwrap()]);
    run_tool(&tool, &[sog.to_str().unwrap(), decoded.to_str().unwrap()]);
    let ours = convert::read(&sog).unwrap().splats;
    let theirs = convert::read(&decoded).unwrap().splats;
    assert_eq!(ours.len(), convert::read(&biker()).unwrap().splats.len());
    assert_eq!(
        (ours.len(), ours.sh_degree),
        (theirs.len(), theirs.sh_degree)
    );
    // The same stored bytes decoded twice: positions and log-scales through the same formulas
    // (f32 rounding), DC colour from the same codebook entries.
    let extent = bounds(&theirs)
        .iter()
        .map(|(lo, hi)| hi - lo)
        .fold(0.0, f32::max);
    assert!(max_diff(&ours.means, &theirs.means) <= 1e-5 * extent);
    assert!(max_diff(&ours.log_scales, &theirs.log_scales) <= 1e-5);
    assert!(max_diff(&ours.sh_coeffs, &theirs.sh_coeffs) <= 1e-5);
    // Opacity: one byte through sigmoid⁻¹; Kiln and the engine clamp 0 and 255 at ∓40 logits,
    // splat-transform's PLY at its own limit, so compare as opacity (sigmoid).
    let sig = |x: &f32| 1.0 / (1.0 + (-x).exp());
    let (a, b): (Vec<f32>, Vec<f32>) = (
        ours.logit_opacities.iter().map(sig).collect(),
        theirs.logit_opacities.iter().map(sig).collect(),
    );
    assert!(max_diff(&a, &b) <= 1e-4);
    // Rotations: the same smallest-three bytes; q and −q are one rotation.
    for (q, r) in ours
        .rotations
        .chunks_exact(4)
        .zip(theirs.rotations.chunks_exact(4))
    {
        let dot: f32 = q.iter().zip(r).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(
            dot.abs() / (norm(q) * norm(r)) >= 1.0 - 1e-5,
            "{q:?} vs {r:?}"
        );
    }
}

/// `vs full` PSNR of `fidelity.json` (`kiln eval FILE --orbit --reference SOURCE --json`).
fn eval_psnr(sb: &Sandbox, file: &Path, reference: &Path) -> f64 {
    let out = sb.path().join(format!(
        "eval-{}",
        file.file_stem().unwrap().to_string_lossy()
    ));
    let o = sb.kiln(&[
        "eval",
        file.to_str().unwrap(),
        "--orbit",
        "--reference",
        reference.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    ok(&o);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("fidelity.json")).unwrap()).unwrap();
    report["cuts"][0]["mean"]["psnr_vs_full_db"]
        .as_f64()
        .unwrap_or_else(|| panic!("no cuts[0].mean.psnr_vs_full_db in {report}"))
}

#[test]
fn plushdog_sog_renders_within_35_db_of_its_source_and_a_smaller_palette_trades_bytes() {
    let sb = Sandbox::new();
    let source = plushdog();
    let full = sb.path().join("plushdog.sog");
    let small = sb.path().join("plushdog-1024.sog");
    ok(&sb.kiln(&["convert", source.to_str().unwrap(), full.to_str().unwrap()]));
    ok(&sb.kiln(&[
        "convert",
        source.to_str().unwrap(),
        small.to_str().unwrap(),
        "--sog-sh-palette",
        "1024",
    ]));
    let (full_db, small_db) = (
        eval_psnr(&sb, &full, &source),
        eval_psnr(&sb, &small, &source),
    );
    assert!(full_db >= 35.0, "SOG of plush-dog: {full_db:.2} dB");
    assert!(small_db >= 35.0, "1024-entry palette: {small_db:.2} dB");
    assert!(small_db < full_db, "{small_db} vs {full_db}");
    let bytes = |p: &Path| std::fs::metadata(p).unwrap().len();
    // The 8192-entry palette is most of the full file: 1024 entries save over 40 %.
    assert!(
        (bytes(&small) as f64) < 0.6 * bytes(&full) as f64,
        "{} vs {} bytes",
        bytes(&small),
        bytes(&full)
    );
}
