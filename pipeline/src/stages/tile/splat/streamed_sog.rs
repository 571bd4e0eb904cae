//! Streamed SOG output: Kiln's splat LOD hierarchy as PlayCanvas's streamed level-of-detail form,
//! a `lod-meta.json` index plus one unbundled SOG (`meta.json` + WebP images) per chunk and level,
//! which the PlayCanvas engine streams, SuperSplat publishes and splat-transform reads.
//!
//! Sources: the "Streamed SOG Format" specification, version 1 (developer.playcanvas.com,
//! `user-manual/gaussian-splatting/formats/streamed-sog`: file set, `LodMeta` / `Node` schema,
//! leaf bounds, `lodErrors`, 7-digit precision), read against splat-transform 3.7.0
//! (`src/lib/writers/write-lod.ts`: chunk limits, kd split rule, 1σ bounds, file naming;
//! `readers/read-lod.ts`: what a reader validates). The code is Kiln's own.
//!
//! Levels. LOD 0 is the finest (the spec's order). Kiln's tile tree has its root at depth 0 and
//! leaves at depth ≤ D; LOD l is the cut at depth D − l: every tile at that depth, plus every
//! leaf shallower than it (a leaf is the finest content of its region, so it stands in for the
//! levels below it that its region lacks). LOD 0 is therefore exactly the original splats and
//! LOD D the root's content, and each level covers the whole scene once, as a client showing only
//! that level would see it: the merged (and, for capture jobs, photo-refined) parents of
//! [`super::merge`] / [`super::refine`], not a decimation.
//!
//! Chunks. As splat-transform does, a binary kd-tree is built over the means of every level's
//! splats together: a node is split at the median of the longest axis of its means' box while it
//! holds more than [`ChunkLimits::max_splats`] (512 Ki) splats, or is wider than
//! [`ChunkLimits::max_extent_m`] (16 m) and holds more than [`ChunkLimits::min_splats`] (8 Ki).
//! Each splat of each level thus belongs to the chunk containing its mean, not to the chunk of
//! the Kiln tile it came from: a coarse Kiln tile (the root, say) spans many chunks, and the spec
//! requires every level of a chunk to cover the same region, which only assignment by position
//! gives. Kiln's tree is a 4-ary kd tree over the finest means and the chunk tree a binary one
//! over all means, so the two partitions need not line up; nothing in the format asks them to.
//!
//! Files. Each (chunk, level) with splats gets its own SOG `{lod}_{k}/meta.json` (k counts that
//! level's files in tree order, left first), so every `lods` entry has offset 0. splat-transform
//! packs several small chunks of a level into one file; that needs the SOG encoder to keep each
//! chunk's run contiguous, while [`sog::write`] Morton-sorts the whole file, so Kiln writes one file
//! per run (more, smaller files for coarse levels of scenes with many chunks; the same splats).
//!
//! Palette. The chunks of a level share one SH palette ([`sog::ShPalette`]): a k-means codebook
//! of SH rest vectors fitted once per level, on at most [`sog::PALETTE_FIT_MAX_ROWS`] evenly
//! spaced splats of it, with splat-transform's size rule for the level's splat count (65,536
//! entries from 64 Ki splats), instead of one k-means per (chunk, level), which on a 1 M-splat
//! 200 m scene (≥ 182 chunks) cost more than 25× the tiling (issue 43). Each chunk's SOG still
//! carries its own palette image, as the format requires: the shared entries its splats use, in
//! the level's order, with the level's scalar codebook, so one entry decodes to the same values in
//! every chunk of the level. A level per palette, not the scene: parents are merges, whose SH are
//! averages of their children's, so each level's rest vectors spread differently.
//!
//! Bounds: a leaf's box is the union over its splats (all levels) of each splat's 1σ ellipsoid box
//! (the box of half-extents exp(log_scale) turned by the splat's rotation, made axis-aligned),
//! splat-transform's rule, so the engine's view-dependent choices match those for its own output;
//! an interior node's box is its children's union. Written rounded outwards to 7 significant
//! digits (the spec's precision), so rounding never shrinks a box.
//!
//! Errors (`lodErrors: true`): a leaf's error at level l is the largest geometricError (metres,
//! measured by rendering, see [`super::error`]) of the Kiln tiles its level-l splats came from;
//! leaves of Kiln's tree have 0, so level 0 is 0. Values are made non-decreasing with level by a
//! running maximum (the spec requires it; a chunk's level-l tiles need not be ancestors of its
//! level-(l−1) tiles), and levels a chunk lacks carry the previous value. splat-transform's own
//! errors (`--lod-errors`) are dimensionless image differences instead; the spec gives meaning
//! only to relative magnitudes, which metres of one scene keep.
//!
//! Frame. SOG stores splats in the PLY convention, which the PlayCanvas engine (like
//! splat-transform's `Transform.PLY`) turns by 180° about Z for display. Kiln's tile content is
//! glTF Y-up, so each level is turned by the same half turn (x, y, z) → (−x, −y, z)
//! ([`PLY_FROM_CONTENT`], applied with SH rotation by [`rotate_splats`]): the engine then shows
//! exactly the tileset's content frame, upright. The f64 origin of survey-sized inputs is not
//! applied (lod-meta.json has no transform and SOG positions are f32): positions stay relative
//! to it, and a warning says so.
//!
//! Environment: far-field splats the viewer always shows (spec §4) go to `env/meta.json` when
//! given to [`write_streamed_sog`]; Kiln's hierarchy has no such splats yet, so the tile stage
//! writes none.
//!
//! Memory: every level is held at once (the input copied once more for LOD 0, plus about a third
//! for the parents) with a palette entry (4 bytes) per splat, then each chunk is gathered and
//! encoded in parallel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::sog::{self, ShPalette, SogOptions};
use kiln_formats::splats::transform::rotate_splats;
use rayon::prelude::*;
use serde::Serialize;

use super::gather;
use super::tree::Node;
use crate::stages::tile::frame::TilesetFrame;
use crate::{Error, Result};

/// Folder of the streamed SOG inside the tile stage's output, beside `tileset.json`.
pub const SOG_DIR: &str = "sog";
/// The index file; readers recognise the format by this exact name.
pub const LOD_META_JSON: &str = "lod-meta.json";
/// The environment SOG's `meta.json`, relative to `lod-meta.json` (the spec's file set).
pub const ENVIRONMENT_META: &str = "env/meta.json";
/// `lod-meta.json` `version` written (the spec's current major version).
pub const LOD_META_VERSION: u32 = 1;

/// Significant digits of non-integer numbers in `lod-meta.json` (spec §5, ≈ f32 precision).
const JSON_DIGITS: i32 = 7;

/// PLY / SOG frame from the glTF Y-up content frame: a half turn about Z, (x, y, z) → (−x, −y, z),
/// the inverse (and equal) of the turn the PlayCanvas engine applies to SOG data for display.
pub const PLY_FROM_CONTENT: [[f64; 3]; 3] = [[-1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0]];

/// The kd split rule of the chunk tree (splat-transform's `--lod-chunk-count`,
/// `--lod-chunk-extent` and minimum). `Default`: 512 Ki splats, 16 m, 8 Ki splats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkLimits {
    /// Split a node holding more splats than this (all levels counted), ≥ 1.
    pub max_splats: usize,
    /// Split a node whose means' box is wider than this on its longest axis (metres)…
    pub max_extent_m: f64,
    /// …when it also holds more splats than this.
    pub min_splats: usize,
}

impl Default for ChunkLimits {
    fn default() -> Self {
        Self {
            max_splats: 512 * 1024,
            max_extent_m: 16.0,
            min_splats: 8 * 1024,
        }
    }
}

/// One level of detail to write: its splats in the frame they are stored in (PLY convention for
/// PlayCanvas viewers) and, per splat, the error (metres, ≥ 0) of the representation it belongs
/// to (0 for original splats).
#[derive(Debug, Clone, Default)]
pub struct LodLevel {
    pub splats: GaussianSplats,
    /// `[N]` per-splat error in metres (same length as `splats`).
    pub errors_m: Vec<f64>,
}

/// What [`write_streamed_sog`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamedSogReport {
    /// Path of `lod-meta.json`.
    pub meta_path: PathBuf,
    /// Splats per level, finest first (the file's `counts`).
    pub counts: Vec<usize>,
    /// Leaves of the chunk tree.
    pub chunks: usize,
    /// Chunk SOG files (one per chunk and level that has splats).
    pub files: usize,
    /// Splats of the environment SOG (0: none written).
    pub environment_splats: usize,
    /// Bytes of every file written, `lod-meta.json` included.
    pub bytes: u64,
}

/// `lod-meta.json` (spec §2). Field names are the spec's.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LodMeta {
    version: u32,
    asset: Asset,
    count: usize,
    counts: Vec<usize>,
    lod_levels: usize,
    lod_errors: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    environment: Option<String>,
    filenames: Vec<String>,
    tree: MetaNode,
}

#[derive(Debug, Serialize)]
struct Asset {
    generator: String,
}

#[derive(Debug, Serialize)]
struct Bound {
    min: [f64; 3],
    max: [f64; 3],
}

/// A tree node: interior (`children`, exactly two) or leaf (`lods`, `errors`), never both.
#[derive(Debug, Serialize)]
struct MetaNode {
    bound: Bound,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<[Box<MetaNode>; 2]>,
    /// Level → run; serde_json writes the integer keys as the decimal strings the spec asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    lods: Option<BTreeMap<usize, LodRef>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Vec<f64>>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct LodRef {
    file: usize,
    offset: usize,
    count: usize,
}

/// The chunk tree before files are named: leaves hold flat indices over all levels.
enum Part {
    Interior(Box<Part>, Box<Part>),
    Leaf(Vec<u32>),
}

/// One chunk SOG to encode: level and the level-local splat indices.
struct ChunkFile {
    level: usize,
    indices: Vec<u32>,
    rel: String,
}

/// Write `levels` (finest first) as a streamed SOG into `dir`: `dir/lod-meta.json` and one
/// unbundled SOG per chunk and level (`dir/{lod}_{k}/meta.json` + images), plus the
/// environment's SOG (`dir/env/meta.json`, shown always, outside the tree and the counts) when
/// `environment` has splats.
///
/// Guarantees: `counts[l]` = `levels[l].splats.len()` and every splat of every level is in exactly
/// one chunk run; each leaf's bound contains the 1σ box of each of its splats; the chunk SOGs are
/// written first and `lod-meta.json` last (atomically), so a reader never sees an index whose
/// files are missing; the same input, limits and options give the same bytes. Not guaranteed:
/// files of an earlier run with other names are not removed.
///
/// - `levels`: ≥ 1 levels, each with ≥ 1 splat of one SH degree, finite, non-zero quaternions.
/// - `environment`: far-field splats (sky, distant background) every viewer loads whatever the
///   camera; `None` or no splats writes none. Same frame as `levels`.
/// - `limits`: the kd split rule ([`ChunkLimits::default`] for the published defaults).
/// - `options`: SOG encoding: k-means iterations, seed and size (`sh_palette`, default by the
///   level's splat count) of each level's shared SH palette; the environment fits its own.
/// - `dir`: created if missing.
///
/// # Errors
/// [`Error::Param`] for no levels, an empty level, mismatched error counts, or limits of 0;
/// [`Error::Format`] from the SOG encoder (NaN, zero quaternion, naming the field) or when a file
/// cannot be written.
pub fn write_streamed_sog(
    levels: &[LodLevel],
    environment: Option<&GaussianSplats>,
    limits: &ChunkLimits,
    options: &SogOptions,
    dir: &Path,
) -> Result<StreamedSogReport> {
    check_levels(levels, limits)?;
    let mut cum = vec![0usize];
    for l in levels {
        cum.push(cum.last().copied().unwrap_or(0) + l.splats.len());
    }
    let total = cum.last().copied().unwrap_or(0);
    if total > u32::MAX as usize {
        return Err(param(
            "levels",
            "at most 2³² − 1 splats over all levels",
            total.to_string(),
        ));
    }
    let means: Vec<[f32; 3]> = levels
        .iter()
        .flat_map(|l| l.splats.means.chunks_exact(3).map(|p| [p[0], p[1], p[2]]))
        .collect();
    let part = partition(&means, (0..total as u32).collect(), limits);

    let mut files = Vec::new();
    let mut per_level_files = vec![0usize; levels.len()];
    let mut chunks = 0usize;
    let tree = name_files(
        &part,
        levels,
        &cum,
        &mut files,
        &mut per_level_files,
        &mut chunks,
    );
    drop(part);

    let palettes = level_palettes(levels, options)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let bytes: Vec<u64> = files
        .par_iter()
        .map(|f| {
            write_chunk(
                dir,
                f,
                &levels[f.level],
                palettes[f.level].as_ref(),
                options,
            )
        })
        .collect::<Result<_>>()?;

    let environment = environment.filter(|e| !e.is_empty());
    let env_bytes = match environment {
        Some(env) => {
            let path = dir.join(ENVIRONMENT_META);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            sog::write(&path, env, options)?
        }
        None => 0,
    };
    let counts: Vec<usize> = levels.iter().map(|l| l.splats.len()).collect();
    let meta = LodMeta {
        version: LOD_META_VERSION,
        asset: Asset {
            generator: format!("kiln v{}", env!("CARGO_PKG_VERSION")),
        },
        count: total,
        counts: counts.clone(),
        lod_levels: levels.len(),
        lod_errors: true,
        environment: environment.map(|_| ENVIRONMENT_META.to_string()),
        filenames: files.iter().map(|f| f.rel.clone()).collect(),
        tree,
    };
    let meta_path = dir.join(LOD_META_JSON);
    let json =
        serde_json::to_vec(&meta).map_err(|e| Error::io(&meta_path, std::io::Error::other(e)))?;
    write_atomic(&meta_path, &json)?;
    let bytes = bytes.iter().sum::<u64>() + env_bytes + json.len() as u64;
    tracing::info!(
        levels = levels.len(),
        chunks,
        files = files.len(),
        splats = total,
        bytes,
        "streamed SOG written"
    );
    Ok(StreamedSogReport {
        meta_path,
        counts,
        chunks,
        files: files.len(),
        environment_splats: environment.map_or(0, GaussianSplats::len),
        bytes,
    })
}

/// A level's shared SH palette and every splat's entry in it (`[N]`, level order).
struct LevelPalette {
    palette: ShPalette,
    labels: Vec<u32>,
}

/// The shared SH palette of every level with SH above degree 0 (`None` for degree 0), one level
/// at a time (each fit and labelling is parallel).
fn level_palettes(levels: &[LodLevel], options: &SogOptions) -> Result<Vec<Option<LevelPalette>>> {
    levels
        .iter()
        .map(|level| {
            if level.splats.sh_degree == 0 {
                return Ok(None);
            }
            let start = std::time::Instant::now();
            let palette = ShPalette::fit(&level.splats, options)?;
            let labels = palette.labels(&level.splats)?;
            tracing::debug!(
                splats = level.splats.len(),
                entries = palette.len(),
                seconds = start.elapsed().as_secs_f64(),
                "streamed SOG: level palette fitted"
            );
            Ok(Some(LevelPalette { palette, labels }))
        })
        .collect()
}

/// Encode one chunk file of `level` into `dir`, indexing the level's shared palette when it has
/// one; returns the bytes written.
fn write_chunk(
    dir: &Path,
    file: &ChunkFile,
    level: &LodLevel,
    palette: Option<&LevelPalette>,
    options: &SogOptions,
) -> Result<u64> {
    let path = dir.join(&file.rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let chunk = gather(&level.splats, &file.indices);
    let bytes = match palette {
        Some(p) => {
            let labels: Vec<u32> = file.indices.iter().map(|&i| p.labels[i as usize]).collect();
            sog::write_with_palette(&path, &chunk, options, &p.palette, &labels)?
        }
        None => sog::write(&path, &chunk, options)?,
    };
    Ok(bytes)
}

/// The boundary check of [`write_streamed_sog`] (the SOG encoder checks values).
fn check_levels(levels: &[LodLevel], limits: &ChunkLimits) -> Result<()> {
    if levels.is_empty() {
        return Err(param("levels", "at least one level", "none".into()));
    }
    for (l, level) in levels.iter().enumerate() {
        level.splats.check_shapes("streamed SOG")?;
        if level.splats.is_empty() {
            return Err(param(
                &format!("levels[{l}]"),
                "at least one splat in every level",
                "0 splats".into(),
            ));
        }
        if level.errors_m.len() != level.splats.len() {
            return Err(param(
                &format!("levels[{l}].errors_m"),
                "one error per splat",
                format!(
                    "{} errors for {} splats",
                    level.errors_m.len(),
                    level.splats.len()
                ),
            ));
        }
        if level.splats.sh_degree != levels[0].splats.sh_degree {
            return Err(param(
                &format!("levels[{l}].sh_degree"),
                "the SH degree of level 0",
                level.splats.sh_degree.to_string(),
            ));
        }
    }
    // NaN is refused along with a negative or zero width.
    let extent_ok = limits.max_extent_m.partial_cmp(&0.0) == Some(std::cmp::Ordering::Greater);
    if limits.max_splats == 0 || !extent_ok {
        return Err(param(
            "chunk limits",
            "max_splats ≥ 1 and max_extent_m > 0",
            format!("{limits:?}"),
        ));
    }
    Ok(())
}

fn param(field: &str, expected: &str, found: String) -> Error {
    Error::Param {
        stage: "tile (streamed SOG)",
        field: field.into(),
        expected: expected.into(),
        found,
    }
}

/// The chunk kd-tree over `means` (flat indices `idx`): split at the median of the longest axis
/// of the means' box (ties by index, so coincident means still split) while the limits ask.
fn partition(means: &[[f32; 3]], mut idx: Vec<u32>, limits: &ChunkLimits) -> Part {
    let (lo, hi) = means_box(means, &idx);
    let axis = (0..3)
        .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
        .unwrap_or(0);
    let n = idx.len();
    let wide = f64::from(hi[axis] - lo[axis]) > limits.max_extent_m;
    if n < 2 || !(n > limits.max_splats || (wide && n > limits.min_splats)) {
        return Part::Leaf(idx);
    }
    let mid = n / 2;
    idx.select_nth_unstable_by(mid, |&x, &y| {
        means[x as usize][axis]
            .total_cmp(&means[y as usize][axis])
            .then(x.cmp(&y))
    });
    let right = idx.split_off(mid);
    let (l, r) = rayon::join(
        || partition(means, idx, limits),
        || partition(means, right, limits),
    );
    Part::Interior(Box::new(l), Box::new(r))
}

fn means_box(means: &[[f32; 3]], idx: &[u32]) -> ([f32; 3], [f32; 3]) {
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for &i in idx {
        let p = means[i as usize];
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    (lo, hi)
}

/// The `lod-meta.json` tree of `part`, naming one file per (leaf, level) in tree order (left
/// first, levels ascending within a leaf) and computing bounds and errors.
fn name_files(
    part: &Part,
    levels: &[LodLevel],
    cum: &[usize],
    files: &mut Vec<ChunkFile>,
    per_level_files: &mut [usize],
    chunks: &mut usize,
) -> MetaNode {
    match part {
        Part::Interior(l, r) => {
            let a = name_files(l, levels, cum, files, per_level_files, chunks);
            let b = name_files(r, levels, cum, files, per_level_files, chunks);
            let bound = Bound {
                min: std::array::from_fn(|i| a.bound.min[i].min(b.bound.min[i])),
                max: std::array::from_fn(|i| a.bound.max[i].max(b.bound.max[i])),
            };
            MetaNode {
                bound,
                children: Some([Box::new(a), Box::new(b)]),
                lods: None,
                errors: None,
            }
        }
        Part::Leaf(idx) => {
            *chunks += 1;
            // Flat index → (level, local index), grouped by level.
            let mut bins: Vec<Vec<u32>> = vec![Vec::new(); levels.len()];
            for &g in idx {
                let level = cum.partition_point(|&c| c <= g as usize) - 1;
                bins[level].push((g as usize - cum[level]) as u32);
            }
            let mut lods = BTreeMap::new();
            let mut errors = Vec::with_capacity(levels.len());
            let mut lo = [f64::INFINITY; 3];
            let mut hi = [f64::NEG_INFINITY; 3];
            let mut running = 0f64;
            for (level, mut local) in bins.into_iter().enumerate() {
                if !local.is_empty() {
                    local.sort_unstable();
                    let s = &levels[level].splats;
                    for &i in &local {
                        let (a, b) = splat_box(s, i as usize);
                        for k in 0..3 {
                            lo[k] = lo[k].min(a[k]);
                            hi[k] = hi[k].max(b[k]);
                        }
                        running = running.max(levels[level].errors_m[i as usize]);
                    }
                    let rel = format!("{level}_{}/meta.json", per_level_files[level]);
                    per_level_files[level] += 1;
                    lods.insert(
                        level,
                        LodRef {
                            file: files.len(),
                            offset: 0,
                            count: local.len(),
                        },
                    );
                    files.push(ChunkFile {
                        level,
                        indices: local,
                        rel,
                    });
                }
                errors.push(round_digits(running, 0.0));
            }
            MetaNode {
                bound: Bound {
                    min: lo.map(|v| round_digits(v, -1.0)),
                    max: hi.map(|v| round_digits(v, 1.0)),
                },
                children: None,
                lods: Some(lods),
                errors: Some(errors),
            }
        }
    }
}

/// Axis-aligned box (metres) of splat `i`'s 1σ ellipsoid: centre ± Σₖ |R_ak|·exp(log_scale_k).
/// A quaternion without orientation (zero) is boxed by its largest scale on every axis.
fn splat_box(s: &GaussianSplats, i: usize) -> ([f64; 3], [f64; 3]) {
    let sc: [f64; 3] = std::array::from_fn(|k| f64::from(s.log_scales[3 * i + k]).exp());
    let q: [f64; 4] = std::array::from_fn(|k| f64::from(s.rotations[4 * i + k]));
    let half: [f64; 3] = match kiln_formats::rotation::quaternion_to_rotation(q) {
        Some(r) => std::array::from_fn(|a| (0..3).map(|k| r[a][k].abs() * sc[k]).sum()),
        None => [sc[0].max(sc[1]).max(sc[2]); 3],
    };
    let c: [f64; 3] = std::array::from_fn(|a| f64::from(s.means[3 * i + a]));
    (
        std::array::from_fn(|a| c[a] - half[a]),
        std::array::from_fn(|a| c[a] + half[a]),
    )
}

/// `v` to [`JSON_DIGITS`] significant digits: rounded down for `direction` < 0, up for > 0, to
/// nearest for 0. Non-finite and zero values are returned as they are.
fn round_digits(v: f64, direction: f64) -> f64 {
    if !v.is_finite() || v == 0.0 {
        return v;
    }
    let step = 10f64.powi(v.abs().log10().floor() as i32 - (JSON_DIGITS - 1));
    let q = v / step;
    let q = if direction < 0.0 {
        // The tiny slack keeps a value already on the grid from moving a step out.
        (q + 1e-9).floor()
    } else if direction > 0.0 {
        (q - 1e-9).ceil()
    } else {
        q.round()
    };
    // Through decimal text, so the f64 is the shortest one that prints with 7 digits.
    format!("{:.*e}", (JSON_DIGITS - 1) as usize, q * step)
        .parse()
        .unwrap_or(v)
}

/// Kiln's tile tree as levels, finest first: LOD l is the cut at depth D − l (tiles at that depth
/// plus shallower leaves; see the module docs), turned into the PLY frame, with each splat's
/// error the geometricError of its tile.
///
/// - `splats`: the tiler's input (leaves index it), glTF Y-up content frame.
/// - `nodes`: the tile tree (arena, root first).
/// - `parents`: the written content of every parent tile (`None` for leaves), same frame.
/// - `errors_m`: every tile's geometricError (metres; 0 for leaves).
///
/// # Errors
/// [`Error::Param`] when a parent's content is missing (an internal inconsistency, named).
pub(super) fn levels_from_tree(
    splats: &GaussianSplats,
    nodes: &[Node],
    parents: &[Option<GaussianSplats>],
    errors_m: &[f64],
) -> Result<Vec<LodLevel>> {
    let deepest = nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    (0..=deepest)
        .map(|l| {
            let cut = deepest - l;
            let mut level = LodLevel {
                splats: GaussianSplats {
                    sh_degree: splats.sh_degree,
                    ..Default::default()
                },
                errors_m: Vec::new(),
            };
            for (i, node) in nodes.iter().enumerate() {
                if !(node.depth == cut || (node.is_leaf() && node.depth < cut)) {
                    continue;
                }
                let gathered;
                let content = if node.is_leaf() {
                    gathered = gather(splats, &node.indices);
                    &gathered
                } else {
                    parents.get(i).and_then(Option::as_ref).ok_or_else(|| {
                        param(
                            &format!("tile {} content", node.name),
                            "the merged content of every parent tile",
                            "none kept".into(),
                        )
                    })?
                };
                level.splats.extend(content)?;
                let e = if node.is_leaf() { 0.0 } else { errors_m[i] };
                level.errors_m.extend(std::iter::repeat_n(e, content.len()));
            }
            rotate_splats(&mut level.splats, PLY_FROM_CONTENT)?;
            Ok(level)
        })
        .collect()
}

/// The tile stage's streamed SOG: [`levels_from_tree`] written by [`write_streamed_sog`] with the
/// published chunk limits and SOG defaults (10 k-means rounds, seed 0) into `out_dir/sog/`.
///
/// # Errors
/// As [`levels_from_tree`] and [`write_streamed_sog`].
pub(super) fn write_from_tree(
    splats: &GaussianSplats,
    nodes: &[Node],
    parents: &[Option<GaussianSplats>],
    errors_m: &[f64],
    frame: &TilesetFrame,
    out_dir: &Path,
) -> Result<StreamedSogReport> {
    let origin = kiln_formats::tiles::transform::translation_part(&frame.content_from_capture);
    if origin != [0.0; 3] {
        tracing::warn!(
            origin_m = ?origin,
            "streamed SOG: positions are relative to the input's origin (lod-meta.json has no \
             transform to carry it)"
        );
    }
    let levels = levels_from_tree(splats, nodes, parents, errors_m)?;
    write_streamed_sog(
        &levels,
        None,
        &ChunkLimits::default(),
        &SogOptions::default(),
        &out_dir.join(SOG_DIR),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Splats at `means`, SH degree 0, all with `log_scales` and quaternion `q` (wxyz).
    fn splats_at(means: &[[f32; 3]], log_scales: [f32; 3], q: [f32; 4]) -> GaussianSplats {
        GaussianSplats {
            means: means.iter().flatten().copied().collect(),
            log_scales: means.iter().flat_map(|_| log_scales).collect(),
            rotations: means.iter().flat_map(|_| q).collect(),
            logit_opacities: vec![1.0; means.len()],
            sh_coeffs: means.iter().flat_map(|_| [0.1, 0.2, 0.3]).collect(),
            sh_degree: 0,
        }
    }

    /// `actual` equals `expected`, numbers within `tol` (absolute), keys and arrays exactly.
    fn assert_json_near(actual: &Value, expected: &Value, tol: f64, at: &str) {
        match (actual, expected) {
            (Value::Number(a), Value::Number(e)) => {
                let (a, e) = (a.as_f64().unwrap(), e.as_f64().unwrap());
                assert!((a - e).abs() <= tol, "{at}: {a} vs expected {e}");
            }
            (Value::Array(a), Value::Array(e)) => {
                assert_eq!(a.len(), e.len(), "{at}: array length");
                for (i, (a, e)) in a.iter().zip(e).enumerate() {
                    assert_json_near(a, e, tol, &format!("{at}[{i}]"));
                }
            }
            (Value::Object(a), Value::Object(e)) => {
                let ak: Vec<_> = a.keys().collect();
                let ek: Vec<_> = e.keys().collect();
                assert_eq!(ak, ek, "{at}: keys");
                for (k, e) in e {
                    assert_json_near(&a[k], e, tol, &format!("{at}.{k}"));
                }
            }
            _ => assert_eq!(actual, expected, "{at}"),
        }
    }

    /// Two levels along x, split by a limit of 4 splats into two chunks of 3.
    ///
    /// Level 0: 4 splats at x = −3, −2, 2, 3, half-extent 1 on every axis (log-scale 0,
    /// identity rotation), error 0. Level 1: 2 splats at x = ±2.5, scales (2, 1, 1) turned 90°
    /// about Z (so half-extents x 1, y 2, z 1), errors 0.25 (left) and 0.5 (right).
    /// All six means sorted on x (the longest axis): −3, −2.5, −2 | 2, 2.5, 3: the median split
    /// puts three in each leaf. Left leaf: x from −3 − 1 to −2 + 1, y ±2 (level 1), z ±1.
    fn two_level_example() -> Vec<LodLevel> {
        let s = std::f32::consts::FRAC_1_SQRT_2;
        vec![
            LodLevel {
                splats: splats_at(
                    &[
                        [-3.0, 0.0, 0.0],
                        [-2.0, 0.0, 0.0],
                        [2.0, 0.0, 0.0],
                        [3.0, 0.0, 0.0],
                    ],
                    [0.0; 3],
                    [1.0, 0.0, 0.0, 0.0],
                ),
                errors_m: vec![0.0; 4],
            },
            LodLevel {
                splats: splats_at(
                    &[[-2.5, 0.0, 0.0], [2.5, 0.0, 0.0]],
                    [std::f32::consts::LN_2, 0.0, 0.0],
                    [s, 0.0, 0.0, s],
                ),
                errors_m: vec![0.25, 0.5],
            },
        ]
    }

    fn small_limits() -> ChunkLimits {
        ChunkLimits {
            max_splats: 4,
            max_extent_m: 100.0,
            min_splats: 0,
        }
    }

    #[test]
    fn lod_meta_follows_the_published_schema_with_hand_computed_counts_files_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let report = write_streamed_sog(
            &two_level_example(),
            None,
            &small_limits(),
            &SogOptions::default(),
            dir.path(),
        )
        .unwrap();
        assert_eq!(report.counts, vec![4, 2]);
        assert_eq!((report.chunks, report.files), (2, 4));
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(LOD_META_JSON)).unwrap())
                .unwrap();
        let expected = json!({
            "version": 1,
            "asset": { "generator": format!("kiln v{}", env!("CARGO_PKG_VERSION")) },
            "count": 6,
            "counts": [4, 2],
            "lodLevels": 2,
            "lodErrors": true,
            "filenames": ["0_0/meta.json", "1_0/meta.json", "0_1/meta.json", "1_1/meta.json"],
            "tree": {
                "bound": { "min": [-4.0, -2.0, -1.0], "max": [4.0, 2.0, 1.0] },
                "children": [
                    {
                        "bound": { "min": [-4.0, -2.0, -1.0], "max": [-1.0, 2.0, 1.0] },
                        "lods": {
                            "0": { "file": 0, "offset": 0, "count": 2 },
                            "1": { "file": 1, "offset": 0, "count": 1 }
                        },
                        "errors": [0.0, 0.25]
                    },
                    {
                        "bound": { "min": [1.0, -2.0, -1.0], "max": [4.0, 2.0, 1.0] },
                        "lods": {
                            "0": { "file": 2, "offset": 0, "count": 2 },
                            "1": { "file": 3, "offset": 0, "count": 1 }
                        },
                        "errors": [0.0, 0.5]
                    }
                ]
            }
        });
        // f32 scales and quaternions move the bounds by a few 1e−7 (then rounded outwards).
        assert_json_near(&meta, &expected, 2e-6, "lod-meta");
        // Each file holds its run: the left leaf's level 0 is the splats at x = −3 and −2.
        let left0 = sog::read(&dir.path().join("0_0/meta.json")).unwrap().splats;
        let mut xs: Vec<f32> = left0.means.chunks_exact(3).map(|p| p[0]).collect();
        xs.sort_by(f32::total_cmp);
        assert_eq!(xs.len(), 2);
        assert!(
            (xs[0] + 3.0).abs() < 1e-3 && (xs[1] + 2.0).abs() < 1e-3,
            "{xs:?}"
        );
        for (rel, n) in [("1_0", 1), ("0_1", 2), ("1_1", 1)] {
            let s = sog::read(&dir.path().join(rel).join("meta.json"))
                .unwrap()
                .splats;
            assert_eq!(s.len(), n, "{rel}");
        }
    }

    /// Environment splats go to `env/meta.json`, named by `environment`, outside the tree and the
    /// counts (spec §4); an empty environment writes nothing.
    #[test]
    fn environment_splats_are_a_separate_sog_outside_the_counts() {
        let env = splats_at(
            &[[0.0, 50.0, 0.0], [0.0, -50.0, 0.0], [50.0, 0.0, 0.0]],
            [0.0; 3],
            [1.0, 0.0, 0.0, 0.0],
        );
        let dir = tempfile::tempdir().unwrap();
        let r = write_streamed_sog(
            &two_level_example(),
            Some(&env),
            &small_limits(),
            &SogOptions::default(),
            dir.path(),
        )
        .unwrap();
        assert_eq!((r.environment_splats, r.counts.clone()), (3, vec![4, 2]));
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(LOD_META_JSON)).unwrap())
                .unwrap();
        assert_eq!(meta["environment"], "env/meta.json");
        assert_eq!(meta["count"], 6);
        // The root bound is the levels' (x within ±4), not the environment's (±50).
        assert!(meta["tree"]["bound"]["max"][0].as_f64().unwrap() < 5.0);
        assert_eq!(
            sog::read(&dir.path().join("env/meta.json"))
                .unwrap()
                .splats
                .len(),
            3
        );

        let dir = tempfile::tempdir().unwrap();
        let empty = GaussianSplats::default();
        let r = write_streamed_sog(
            &two_level_example(),
            Some(&empty),
            &small_limits(),
            &SogOptions::default(),
            dir.path(),
        )
        .unwrap();
        assert_eq!(r.environment_splats, 0);
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(LOD_META_JSON)).unwrap())
                .unwrap();
        assert!(meta.get("environment").is_none(), "{meta}");
        assert!(!dir.path().join("env").exists());
    }

    #[test]
    fn bounds_are_rounded_outwards_to_seven_significant_digits() {
        assert_eq!(round_digits(1.234_567_89, 1.0), 1.234_568);
        assert_eq!(round_digits(1.234_567_89, -1.0), 1.234_567);
        assert_eq!(round_digits(-1.234_567_89, -1.0), -1.234_568);
        assert_eq!(round_digits(-1.234_567_89, 1.0), -1.234_567);
        assert_eq!(round_digits(0.000_123_456_789, 0.0), 0.000_123_456_8);
        assert_eq!(round_digits(4.0, 1.0), 4.0);
        assert_eq!(round_digits(-4.0, -1.0), -4.0);
        assert_eq!(round_digits(0.0, 1.0), 0.0);
    }

    #[test]
    fn the_same_levels_give_the_same_bytes() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [&a, &b] {
            write_streamed_sog(
                &two_level_example(),
                None,
                &small_limits(),
                &SogOptions::default(),
                d.path(),
            )
            .unwrap();
        }
        let files = crate::file_tree::files_under(a.path()).unwrap();
        assert_eq!(files.len(), 1 + 4 * 6, "{files:?}"); // lod-meta + 4 × (meta.json + 5 images)
        for rel in files {
            assert_eq!(
                std::fs::read(a.path().join(&rel)).unwrap(),
                std::fs::read(b.path().join(&rel)).unwrap(),
                "{rel:?}"
            );
        }
    }

    #[test]
    fn under_the_limits_the_scene_is_one_chunk_and_coincident_means_still_split() {
        let dir = tempfile::tempdir().unwrap();
        let r = write_streamed_sog(
            &two_level_example(),
            None,
            &ChunkLimits::default(),
            &SogOptions::default(),
            dir.path(),
        )
        .unwrap();
        assert_eq!((r.chunks, r.files), (1, 2));
        // 10 splats at one point with a limit of 3: median cuts by index, leaves of 2 or 3.
        let levels = vec![LodLevel {
            splats: splats_at(&[[1.0, 1.0, 1.0]; 10], [0.0; 3], [1.0, 0.0, 0.0, 0.0]),
            errors_m: vec![0.0; 10],
        }];
        let limits = ChunkLimits {
            max_splats: 3,
            ..small_limits()
        };
        let dir = tempfile::tempdir().unwrap();
        let r =
            write_streamed_sog(&levels, None, &limits, &SogOptions::default(), dir.path()).unwrap();
        assert_eq!((r.chunks, r.counts.clone()), (4, vec![10]));
    }

    #[test]
    fn bad_levels_are_refused_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let o = SogOptions::default();
        let err = write_streamed_sog(&[], None, &small_limits(), &o, dir.path()).unwrap_err();
        assert!(err.to_string().contains("levels"), "{err}");
        let mut levels = two_level_example();
        levels[1].errors_m.pop();
        let err = write_streamed_sog(&levels, None, &small_limits(), &o, dir.path()).unwrap_err();
        assert!(err.to_string().contains("levels[1].errors_m"), "{err}");
        let mut levels = two_level_example();
        levels[1].splats = GaussianSplats::default();
        levels[1].errors_m.clear();
        let err = write_streamed_sog(&levels, None, &small_limits(), &o, dir.path()).unwrap_err();
        assert!(err.to_string().contains("levels[1]"), "{err}");
        assert!(!dir.path().join(LOD_META_JSON).exists());
    }

    /// A hand-made tile tree of depth 2: root r (error 0.7) over a leaf r0 (splats 0, 1, depth 1)
    /// and a parent r1 (error 0.3) over the leaf r10 (splats 2, 3, depth 2). LOD 0 = r0 + r10 (the
    /// shallow leaf stands in at the finest cut), LOD 1 = r0 + r1, LOD 2 = r.
    #[test]
    fn levels_are_depth_cuts_from_the_deepest_with_shallow_leaves_and_the_ply_frame() {
        let node = |depth, indices: Vec<u32>, children: Vec<usize>, name: &str| Node {
            depth,
            indices,
            children,
            name: name.into(),
        };
        let nodes = vec![
            node(0, vec![], vec![1, 2], "r"),
            node(1, vec![0, 1], vec![], "r0"),
            node(1, vec![], vec![3], "r1"),
            node(2, vec![2, 3], vec![], "r10"),
        ];
        let q = [1.0, 0.0, 0.0, 0.0];
        let input = splats_at(
            &[
                [1.0, 2.0, 3.0],
                [1.0, 2.0, 4.0],
                [5.0, 0.0, 0.0],
                [6.0, 0.0, 0.0],
            ],
            [0.0; 3],
            q,
        );
        let r1 = splats_at(&[[5.5, 0.0, 0.0]], [0.5; 3], q);
        let root = splats_at(&[[3.0, 1.0, 1.0]], [1.0; 3], q);
        let parents = vec![Some(root), None, Some(r1), None];
        let errors = [0.7, 0.0, 0.3, 0.0];
        let levels = levels_from_tree(&input, &nodes, &parents, &errors).unwrap();
        let counts: Vec<usize> = levels.iter().map(|l| l.splats.len()).collect();
        assert_eq!(counts, vec![4, 3, 1]);
        assert_eq!(levels[0].errors_m, vec![0.0; 4]);
        assert_eq!(levels[1].errors_m, vec![0.0, 0.0, 0.3]);
        assert_eq!(levels[2].errors_m, vec![0.7]);
        // (x, y, z) → (−x, −y, z): r0's first splat, then r1's merged one.
        assert_eq!(&levels[1].splats.means[..3], &[-1.0, -2.0, 3.0]);
        assert_eq!(&levels[1].splats.means[6..9], &[-5.5, -0.0, 0.0]);
        assert_eq!(&levels[2].splats.means[..], &[-3.0, -1.0, 1.0]);
        // The half turn about Z as a quaternion: q_z(180°) ⊗ identity = (0, 0, 0, 1).
        let r = &levels[2].splats.rotations;
        assert!(
            r[0].abs() < 1e-6
                && r[1].abs() < 1e-6
                && r[2].abs() < 1e-6
                && (r[3].abs() - 1.0).abs() < 1e-6,
            "{r:?}"
        );
        // A missing parent content is an error naming the tile, not a panic.
        let err = levels_from_tree(&input, &nodes, &[None, None, None, None], &errors).unwrap_err();
        assert!(err.to_string().contains("tile r"), "{err}");
    }

    /// 11,500 random splats in a 40 × 4 × 4 m box, SH degree 1 (seeded): with the tiler's
    /// levels about 16,000 splats over 40 m, so the published limits (wider than 16 m and more
    /// than 8 Ki splats) cut it into two chunks of about 8,000.
    fn random_scene() -> GaussianSplats {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut r = SmallRng::seed_from_u64(9);
        let n = 11_500;
        let mut s = GaussianSplats {
            sh_degree: 1,
            ..Default::default()
        };
        for _ in 0..n {
            s.means.push(r.random_range(-20.0f32..20.0));
            s.means.extend((0..2).map(|_| r.random_range(-2.0f32..2.0)));
            s.log_scales
                .extend((0..3).map(|_| r.random_range(-5.0f32..-3.0)));
            let q: [f32; 4] = std::array::from_fn(|_| r.random_range(-1.0f32..1.0));
            let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-3);
            s.rotations.extend(q.map(|v| v / norm));
            s.logit_opacities.push(r.random_range(-2.0..2.0));
            s.sh_coeffs
                .extend((0..12).map(|_| r.random_range(-0.5f32..0.5)));
        }
        s
    }

    /// The chunks of a level index one SH palette: with a 64-entry palette, both chunks of the
    /// random scene store the level's scalar codebook, and together they decode to at most 64
    /// distinct SH rest vectors (a k-means per chunk would give up to 128); the same levels give
    /// the same bytes.
    #[test]
    fn a_level_s_chunks_share_one_sh_palette() {
        let input = random_scene();
        let levels = vec![LodLevel {
            errors_m: vec![0.0; input.len()],
            splats: input,
        }];
        let options = SogOptions {
            sh_palette: Some(64),
            ..SogOptions::default()
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for d in [&a, &b] {
            let r = write_streamed_sog(&levels, None, &ChunkLimits::default(), &options, d.path())
                .unwrap();
            assert_eq!((r.chunks, r.files), (2, 2));
        }
        let mut codebooks = Vec::new();
        let mut rest = std::collections::BTreeSet::new();
        for rel in ["0_0", "0_1"] {
            let meta: Value = serde_json::from_slice(
                &std::fs::read(a.path().join(rel).join("meta.json")).unwrap(),
            )
            .unwrap();
            assert!(meta["shN"]["count"].as_u64().unwrap() <= 64, "{rel}");
            codebooks.push(meta["shN"]["codebook"].clone());
            let s = sog::read(&a.path().join(rel).join("meta.json"))
                .unwrap()
                .splats;
            for row in s.sh_coeffs.chunks_exact(12) {
                rest.insert(row[3..].iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            }
        }
        assert_eq!(codebooks[0], codebooks[1]);
        assert!(rest.len() <= 64, "{} distinct rest vectors", rest.len());
        for rel in crate::file_tree::files_under(a.path()).unwrap() {
            assert_eq!(
                std::fs::read(a.path().join(&rel)).unwrap(),
                std::fs::read(b.path().join(&rel)).unwrap(),
                "{rel:?}"
            );
        }
    }

    /// Through the tiler: lod-meta.json's per-level counts are the tileset's depth cuts counted
    /// from its GLBs, every run's count is its file's, and LOD 0 decodes to the input turned into
    /// the PLY frame.
    #[test]
    fn the_tiler_s_streamed_sog_holds_the_tileset_s_levels() {
        use kiln_formats::splats::glb;
        use kiln_formats::tiles::tileset::{Tile, Tileset};
        let input = random_scene();
        let dir = tempfile::tempdir().unwrap();
        let params = super::super::SplatTileParams {
            max_splats_per_tile: 2_000,
            streamed_sog: true,
            ..Default::default()
        };
        super::super::tile_splats(&input, &params, dir.path()).unwrap();
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(dir.path().join("tileset.json")).unwrap())
                .unwrap();
        // (depth, is leaf, splats) of every tile.
        fn walk(dir: &Path, t: &Tile, depth: u32, out: &mut Vec<(u32, bool, usize)>) {
            let glb = std::fs::read(dir.join(&t.content.as_ref().unwrap().uri)).unwrap();
            let n = glb::decode(&glb).unwrap().splats.len();
            out.push((depth, t.children.is_empty(), n));
            for c in &t.children {
                walk(dir, c, depth + 1, out);
            }
        }
        let mut tiles = Vec::new();
        walk(dir.path(), &ts.root, 0, &mut tiles);
        let deepest = tiles.iter().map(|t| t.0).max().unwrap();
        let want: Vec<usize> = (0..=deepest)
            .map(|l| {
                let cut = deepest - l;
                tiles
                    .iter()
                    .filter(|(d, leaf, _)| *d == cut || (*leaf && *d < cut))
                    .map(|t| t.2)
                    .sum()
            })
            .collect();
        assert!(want.len() >= 3, "{want:?}");
        let sog = dir.path().join(SOG_DIR);
        let meta: Value =
            serde_json::from_slice(&std::fs::read(sog.join(LOD_META_JSON)).unwrap()).unwrap();
        let counts: Vec<usize> = serde_json::from_value(meta["counts"].clone()).unwrap();
        assert_eq!(counts, want);
        assert_eq!(counts[0], input.len());
        // Every run names its whole file; the runs of a level add up to its count.
        let names: Vec<String> = serde_json::from_value(meta["filenames"].clone()).unwrap();
        let mut per_level = vec![0usize; counts.len()];
        let mut lod0 = Vec::new();
        fn leaves<'a>(n: &'a Value, out: &mut Vec<&'a Value>) {
            match n["children"].as_array() {
                Some(c) => c.iter().for_each(|c| leaves(c, out)),
                None => out.push(n),
            }
        }
        let mut all = Vec::new();
        leaves(&meta["tree"], &mut all);
        assert_eq!(all.len(), 2, "chunks");
        for leaf in all {
            let (lo, hi) = (&leaf["bound"]["min"], &leaf["bound"]["max"]);
            for (level, run) in leaf["lods"].as_object().unwrap() {
                let level: usize = level.parse().unwrap();
                let file = &names[run["file"].as_u64().unwrap() as usize];
                let s = sog::read(&sog.join(file)).unwrap().splats;
                assert_eq!(run["offset"], 0);
                assert_eq!(run["count"].as_u64().unwrap() as usize, s.len(), "{file}");
                per_level[level] += s.len();
                for p in s.means.chunks_exact(3) {
                    for a in 0..3 {
                        let (l, h) = (lo[a].as_f64().unwrap(), hi[a].as_f64().unwrap());
                        assert!(f64::from(p[a]) >= l - 1e-3 && f64::from(p[a]) <= h + 1e-3);
                    }
                }
                if level == 0 {
                    lod0.extend(s.means.chunks_exact(3).map(|p| [p[0], p[1], p[2]]));
                }
            }
        }
        assert_eq!(per_level, counts);
        // LOD 0 is the input turned by (x, y, z) → (−x, −y, z), to SOG's 16-bit positions.
        assert_eq!(lod0.len(), input.len());
        for p in input.means.chunks_exact(3) {
            let want = [-p[0], -p[1], p[2]];
            assert!(
                lod0.iter()
                    .any(|q| (0..3).all(|a| (q[a] - want[a]).abs() < 1e-3)),
                "{want:?} not in LOD 0"
            );
        }
    }
}
