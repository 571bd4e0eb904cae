//! Peak memory and wall time of splat tiling at scale (issue 18: "tiling 10 M splats with peak
//! memory stated and bounded"): tiles the seeded synthetic aerial scene of `benches/tile_splats.rs`
//! (SH degree 3, default `[tile]` settings, no refinement) into a temporary directory and prints
//! the input's in-memory size, the wall time and the process's peak resident memory (`VmHWM`).
//! The tiler's own log line ("splat tileset written") follows, with the time of its phases
//! (`merge_s`, `measure_s`, `encode_s`; exact with `RAYON_NUM_THREADS=1`, overlapping otherwise).
//!
//! `--streamed-sog` also writes the streamed SOG (`[tile] streamed_sog = true`), so its cost is the
//! difference between two runs (issue 43: "costs ≤ 2× the same job without it").
//!
//! `--keep DIR` tiles into DIR instead of a temporary folder and, with `--streamed-sog`, also
//! writes `DIR/input.ply` and `DIR/sog_level0.ply` (every LOD-0 chunk of the streamed SOG,
//! decoded and turned back into the content frame), for
//! `kiln eval DIR/sog_level0.ply --reference DIR/input.ply --orbit` (the SOG's fidelity).
//!
//! ```text
//! cargo run --release --example tile_synthetic -- 10000000
//! cargo run --release --example tile_synthetic -- 1000000 --streamed-sog
//! ```

use std::time::Instant;

use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::{ply, sog, transform::rotate_splats};
use kiln_pipeline::stages::tile::splat::streamed_sog::{LOD_META_JSON, PLY_FROM_CONTENT, SOG_DIR};
use kiln_pipeline::stages::tile::splat::{SplatTileParams, tile_splats};

/// Peak resident set of this process in bytes (Linux `/proc/self/status` VmHWM), if readable.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let streamed_sog = args.iter().any(|a| a == "--streamed-sog");
    let keep = args
        .iter()
        .position(|a| a == "--keep")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let n: usize = match args
        .iter()
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--keep"))
        .map(|(_, a)| a)
    {
        Some(v) => v
            .parse()
            .map_err(|_| format!("splat count: expected a positive integer, got {v:?}"))?,
        None => 1_000_000,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("kiln_pipeline=info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let splats = kiln_pipeline::synth::aerial_splats(n, 3);
    let input_bytes = 4
        * (splats.means.len()
            + splats.log_scales.len()
            + splats.rotations.len()
            + splats.logit_opacities.len()
            + splats.sh_coeffs.len()) as u64;
    let before = peak_rss_bytes().unwrap_or(0);
    let temp = tempfile::tempdir()?;
    let dir = keep.as_deref().unwrap_or(temp.path());
    std::fs::create_dir_all(dir)?;
    let start = Instant::now();
    let params = SplatTileParams {
        streamed_sog,
        ..Default::default()
    };
    let report = tile_splats(&splats, &params, dir)?;
    let wall = start.elapsed().as_secs_f64();
    let peak = peak_rss_bytes().unwrap_or(0);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "{n} splats{} (SH 3, {:.0} MiB in memory): {} tiles, {} levels, {:.1} MiB of tiles in \
         {wall:.1} s ({:.0} splats/s); peak resident {:.0} MiB ({:.2}× the input; {:.0} MiB \
         before tiling)",
        if streamed_sog { " + streamed SOG" } else { "" },
        mib(input_bytes),
        report.tiles,
        report.levels,
        mib(report.content_bytes),
        n as f64 / wall,
        mib(peak),
        peak as f64 / input_bytes as f64,
        mib(before),
    );
    if keep.is_some() && streamed_sog {
        ply::write(&dir.join("input.ply"), &splats)?;
        ply::write(&dir.join("sog_level0.ply"), &sog_level0(dir)?)?;
    }
    Ok(())
}

/// Every LOD-0 chunk of the streamed SOG in `dir`, decoded, in the content frame.
fn sog_level0(dir: &std::path::Path) -> Result<GaussianSplats, Box<dyn std::error::Error>> {
    let sog_dir = dir.join(SOG_DIR);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sog_dir.join(LOD_META_JSON))?)?;
    let mut level0 = Vec::new();
    for name in meta["filenames"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        if name.starts_with("0_") {
            level0.push(sog::read(&sog_dir.join(name))?.splats);
        }
    }
    let mut splats = GaussianSplats::concat(&level0)?;
    rotate_splats(&mut splats, PLY_FROM_CONTENT)?;
    Ok(splats)
}
