//! `kiln check TILESET`: Kiln's own 3D Tiles checker (structure, monotone geometricError, content
//! inside bounding volumes, per-tile budgets, extension declarations, SPZ payload versions). The
//! rules live in `kiln_formats::tiles::check`; this file parses, resolves the path and prints.

use std::path::PathBuf;

use anyhow::Context;
use kiln_formats::tiles::check::{
    CheckOptions, DEFAULT_MAX_SPLATS_PER_TILE, DEFAULT_MAX_TRIANGLES_PER_TILE, Severity,
    check_tileset,
};

/// Arguments of `kiln check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The tileset JSON, or a folder holding `tileset.json`.
    #[arg(value_name = "TILESET")]
    pub tileset: PathBuf,
    /// Print the report as JSON on stdout instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Most Gaussian splats one tile's content may hold.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SPLATS_PER_TILE)]
    pub max_splats_per_tile: u64,
    /// Most triangles one tile's content may hold.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_TRIANGLES_PER_TILE)]
    pub max_triangles_per_tile: u64,
}

/// Check the tileset and print findings (`error|warning|info  TILE  FILE: message (fix: …)`) and
/// a summary. Fails (exit 1) when any finding is an error; warnings do not fail.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    // Resolve: a folder means its tileset.json.
    let path = if args.tileset.is_dir() {
        args.tileset.join("tileset.json")
    } else {
        args.tileset.clone()
    };
    let options = CheckOptions {
        max_splats_per_tile: args.max_splats_per_tile,
        max_triangles_per_tile: args.max_triangles_per_tile,
    };
    let report = check_tileset(&path, &options);
    let (errors, warnings) = (
        report.count(Severity::Error),
        report.count(Severity::Warning),
    );
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("serialise the check report")?
        );
    } else {
        for f in &report.findings {
            println!("{f}");
        }
        println!(
            "{}: {} tiles, {} content files, {} splats, {} triangles: {errors} errors, {warnings} warnings",
            path.display(),
            report.tiles,
            report.contents,
            report.splats,
            report.triangles
        );
    }
    if errors > 0 {
        anyhow::bail!(
            "{}: {errors} errors (kiln check failed; see the lines above)",
            path.display()
        );
    }
    Ok(())
}
