//! Splat tiling: a level-of-detail hierarchy of trained Gaussian splats as an OGC 3D Tiles 1.1
//! tileset whose tiles are SPZ-compressed `KHR_gaussian_splatting` GLBs.
//!
//! Sources: OGC 3D Tiles 1.1 (22-025r4) §"Tiles" (geometricError, REPLACE refinement,
//! transforms, bounding volumes in the tile's frame) and §"glTF transforms" (content is Y-up and
//! rotated to Z-up at run time); `3DTILES_content_gltf`; CesiumJS 1.145 routing rules
//! (shared/research/tiles-formats.md §1.7, §7); parents by merging similar neighbours
//! ([`merge`]: Kerbl et al. 2024 §4 moment matching, Spark's Bhattacharyya pairing).
//!
//! Tree: a k-d tree over the splat means with fan-out 4. A node holding more than
//! `max_splats_per_tile` splats (and shallower than `max_depth`) is cut at the median of its
//! longest axis, and each half again at the median of its own longest axis, so siblings hold
//! equal counts and leaves hold between a quarter of the budget and the budget. Leaves hold the
//! original splats. A parent holds its children's content merged down to a quarter
//! ([`SplatTileParams::fanout`], 4 by default), so each level has about 4× fewer splats than the
//! level below and a parent tile about as many as a leaf; the root fills a whole tile's budget
//! (2–4× fewer than level 1, see `parent_target`). When the whole input fits one leaf, a merged root is put
//! above it, so every tileset has at least two levels. Levels are built bottom-up, each from the
//! level below (never from all the leaves), and a leaf's splats are gathered only when its parent
//! is built, so memory holds the input and about two levels at a time.
//!
//! geometricError (metres): leaves 0; a parent the size of one pixel at the finest resolution at
//! which its render still matches its children's ([`error`]: measured after merging and
//! refinement), raised to its largest child's; the tileset value is the root box diagonal (≥ the
//! root's). A client that refines while geometricError · focal / distance > τ thus shows a parent
//! only where the screen is at most τ times finer than that resolution.
//!
//! Frames: splats come in the glTF Y-up content frame (capture jobs are turned upright first, see
//! [`super::frame`]). The runtime rotates glTF content Y-up → Z-up before any tile transform, so
//! bounding boxes are written in that Z-up tile frame (Y-up (x, y, z) → (x, −z, y), the
//! [`Y_UP_TO_Z_UP`] matrix) and the root carries no extra rotation (a `Y_UP_TO_Z_UP` root transform
//! would rotate twice). Each tile stores its content relative to its own box centre c (so SPZ's
//! 24-bit fixed point never overflows and precision is uniform) and its `transform` is the
//! translation from the parent's centre to c, expressed in the Z-up frame. The root's translation
//! is its centre plus the frame's f64 translation (the origin of survey-sized inputs, see
//! [`TilesetFrame::content_from_capture`]); put a georeference (ENU → ECEF) in front of it when
//! one exists.
//!
//! Boxes: axis-aligned in the tile frame, the union of the content's 3σ extents (mean ± 3·max
//! scale) and the children's boxes, so each tile's content lies inside its box and inside every
//! ancestor's box.
//!
//! NaN/Inf in the input is rejected before any work ([`GaussianSplats::check_finite`]).

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::glb::{
    self, KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2, SplatGlbOptions,
};
use kiln_formats::splats::spz::{SpzAntialiasing, SpzOptions, SpzVersion, spz_position_limit_m};
use kiln_formats::tiles::tileset::{BoundingVolume, Content, Refine, Tile, Y_UP_TO_Z_UP};
use rayon::prelude::*;

use super::frame::TilesetFrame;
use super::{TileReport, write_tileset};
use crate::bounds::{Bound, Bounded};
use crate::{Error, Result};

mod error;
pub mod merge;
pub mod refine;
mod stage;
pub mod streamed_sog;
mod tree;

use merge::MergeSet;
pub use stage::{SplatSource, SplatTileSummary, TileSplats};
use tree::{Node, build_tree};

/// SPZ fractional bits used for tile content (1/4096 m steps, ±2048 m range); lowered per tile
/// only when a tile is wider than that range.
const TILE_FRACTIONAL_BITS: u8 = 12;

/// Version of the splat tiling algorithm, part of the tile stage's key (so a rerun after the
/// algorithm changed tiles again instead of reusing an older tileset). 3: k-d tree with merged
/// parents at 4× per level, SH kept at 6 bits, capture tilesets upright. 4: geometricError
/// measured by rendering. 5: tile payloads gzipped by libdeflate (same content, fewer bytes).
pub const TILER_VERSION: u32 = 5;

/// SH bits of degree 1 in tile SPZ payloads (the reference encoder keeps 5).
///
/// Measured with `kiln eval` on the README fox job (56,184 splats, SH degree 3, 7 held-out views
/// at 152×270, gzip level 2, tiles upright): publish loss (full splats − full-detail tiles against
/// the photos, dB) and tile bytes for degree-1 / degree-2–3 bits:
///
/// | bits | 5/4 (SPZ default) | 6/5 | 6/6 | 8/8 |
/// |---|---|---|---|---|
/// | loss, dB | 2.05 | 0.31 | 0.04 | 0.01 |
/// | MB | 1.34 | 1.67 | 1.84 | 2.39 |
///
/// 6/6 is the cheapest setting within 0.3 dB (+37 % bytes over SPZ's default). In the capture's
/// own (unrotated) frame the same splats lose 2.43 / 0.54 / 0.23 / 0.01 dB: rotating the SH
/// changes which coefficients carry the energy, so the margin differs by scene and frame.
/// Positions, scales, rotations, opacities and DC colour cost nothing measurable at SPZ's fixed
/// precision.
pub const DEFAULT_TILE_SH1_BITS: u8 = 6;
/// SH bits of degrees 2–3 in tile SPZ payloads (the reference encoder keeps 4); see
/// [`DEFAULT_TILE_SH1_BITS`].
pub const DEFAULT_TILE_SH_REST_BITS: u8 = 6;

/// 3σ: the extent used for bounding boxes (the same cut-off the rasterizer uses).
const EXTENT_SIGMAS: f64 = 3.0;

/// Parameters of [`tile_splats`]. Serialised into the stage key; missing fields take the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplatTileParams {
    /// Most original splats a leaf may hold (≥ 1); default 65 536 (CesiumJS decodes each tile in a
    /// 2 GB WASM heap; 64 K is Spark's chunk size). `max_depth` must leave room for it.
    pub max_splats_per_tile: usize,
    /// Deepest octree level (root = 0); default 16. Stops endless splitting of coincident splats.
    pub max_depth: u32,
    /// zlib level of each tile's SPZ gzip stream, 1 (fastest) ..= 9 (smallest); default 2.
    /// Deflate dominates tiling time. On the plush-dog scene (15,105 splats, SH 3) level 2 writes
    /// 7 % more bytes than 6, level 1 (zlib-rs' static-Huffman "quick" mode) 35 % more; see
    /// benches/tile_splats.rs for the time per level.
    pub gzip_level: u8,
    /// The splats were trained for Mip-Splatting's anti-aliased rasterization: every tile's SPZ
    /// header gets flag 0x1 (nianticlabs/spz `FlagAntialiased`) so viewers apply the 2D filter
    /// and opacity compensation. Capture jobs set it from `train.antialiased`; a `splats` job
    /// sets it in `[tile]`. Default `false`; left out of the stage key when off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub antialiased: bool,
    /// Bits kept of each degree-1 SH coefficient in the tiles' SPZ, 1..=8 (see
    /// [`DEFAULT_TILE_SH1_BITS`]). Any SPZ reader decodes any value (the bits only choose the
    /// encoder's rounding step).
    pub sh1_bits: u8,
    /// Bits kept of each degree-2 and degree-3 SH coefficient, 1..=8 (see
    /// [`DEFAULT_TILE_SH_REST_BITS`]).
    pub sh_rest_bits: u8,
    /// Optimisation steps per parent level against the capture's training photos ([`refine`]);
    /// default 300, 0 = keep the plain merges. Only capture jobs have photos: splats jobs always
    /// keep the plain merges.
    pub refine_steps: usize,
    /// SPZ version of the tiles' payloads, 2 or 3 (default 3). `KHR_gaussian_splatting_
    /// compression_spz_2` names SPZ v2 and cesium-native documents v2; CesiumJS 1.145 reads
    /// both (the job page's picture of a tiny fox job's v2 tiles matches Kiln's render of the
    /// same camera: correlation 0.991, tests/e2e/viewer.rs). Version 2 stores rotations as three bytes (w rebuilt ≥ 0) instead of v3's smallest
    /// three in four. Measured with `kiln eval` on the README fox job (56,184 splats, SH 3,
    /// 7 held-out views; 2-core CPU): v2 tiles are 2.19 MB against 2.27 MB (−3.5 %), with the
    /// same publish loss (0.038 against 0.039 dB) and 45.2 against 45.4 dB PSNR against the full
    /// splats: v2's coarser rotations cost nothing visible here.
    pub spz_version: u8,
    /// Also write PlayCanvas's streamed SOG (`sog/lod-meta.json` + one SOG per chunk and level,
    /// [`streamed_sog`]) from the same levels as the tiles, for the PlayCanvas engine, SuperSplat
    /// and splat-transform. Default `false`; left out of the stage key when off. Measured (2-core
    /// CPU, loaded): plush-dog (15,105 splats, SH 3, 4,096 per leaf: 2 levels) 780 KB, 52 B per
    /// input splat, as small chunks pay for their SH palette (317 KB of LOD 0's 552 KB; the
    /// 4,096-splat root level gets a palette of 4,096, 227 KB); biker (152,746 splats, SH 0,
    /// 16,384 per leaf: 3 levels) 2.59 MB, 16.9 B per input splat, against 3.13 MB of SPZ tiles;
    /// the tile stage took 1.7 s longer on each.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub streamed_sog: bool,
    /// Children per parent tile, 2 or 4 (default 4), and the factor by which each level has
    /// fewer splats than the level below, so a parent tile holds about as many splats as a leaf
    /// either way. 2 gives twice as many levels, each half the step in detail: a client moving
    /// away or lowering its budget sees smaller changes at each switch, at the cost of more tiles
    /// (about 2× the parents) and a slower tile stage. Left out of the stage key when 4.
    ///
    /// Measured with `kiln eval` (2-core CPU). Biker (152,746 splats, SH 0, 16,384 a leaf, no
    /// refinement; 8 orbit views at 2× its radius against the full splats): fanout 4 has levels
    /// of 16,384 (the root fills a tile) / 38,188 / 152,746 splats and 3.13 MB of tiles, and
    /// Spark-style budget cuts of 20 k / 40 k / 80 k splats score 29.7 / 33.8 / 35.5 dB; fanout 2
    /// has five levels (9,547 to 152,746, 2× apart) and 4.60 MB, and the same budgets score
    /// 30.2 / 31.4 / 36.2 dB. README fox retiled at 4,096 a leaf (refined parents, 7 held-out
    /// photos, relative to the full leaves): τ = 16 / 64 / 120 cuts −0.35 / −0.47 / −0.48 dB at
    /// 1.18 / 0.99 / 0.93 MB with fanout 4, −0.28 / −0.28 / −0.31 dB at 1.36 / 1.33 / 1.30 MB with
    /// fanout 2; its tile stage took 14 s and 32 s.
    #[serde(skip_serializing_if = "is_default_fanout")]
    pub fanout: u8,
}

fn is_default_fanout(fanout: &u8) -> bool {
    *fanout == DEFAULT_FANOUT
}

/// Default [`SplatTileParams::fanout`].
pub const DEFAULT_FANOUT: u8 = 4;

impl Default for SplatTileParams {
    fn default() -> Self {
        Self {
            max_splats_per_tile: 65_536,
            max_depth: 16,
            gzip_level: 2,
            antialiased: false,
            sh1_bits: DEFAULT_TILE_SH1_BITS,
            sh_rest_bits: DEFAULT_TILE_SH_REST_BITS,
            refine_steps: DEFAULT_REFINE_STEPS,
            spz_version: 3,
            streamed_sog: false,
            fanout: DEFAULT_FANOUT,
        }
    }
}

/// Default [`SplatTileParams::refine_steps`].
pub const DEFAULT_REFINE_STEPS: usize = 300;

impl Bounded for SplatTileParams {
    const TABLE: &'static str = "tile";
    const BOUNDS: &'static [Bound] = &[
        Bound::scalar(
            "max_splats_per_tile",
            1.0,
            16_777_216.0,
            "16 M splats (about 400 MB per tile)",
        ),
        Bound::scalar(
            "max_depth",
            1.0,
            32.0,
            "levels below the root; enough for the leaf budget",
        ),
        Bound::scalar("gzip_level", 1.0, 9.0, "gzip's levels, 1 fastest"),
        Bound::scalar("sh1_bits", 1.0, 8.0, "SPZ stores at most 8 bits"),
        Bound::scalar("sh_rest_bits", 1.0, 8.0, "SPZ stores at most 8 bits"),
        Bound::scalar(
            "spz_version",
            2.0,
            3.0,
            "the SPZ versions spz_2 readers decode",
        ),
        Bound::scalar("fanout", 2.0, 4.0, "children per tile: 2 or 4, not 3"),
        Bound::scalar(
            "refine_steps",
            0.0,
            100_000.0,
            "optimisation steps per LOD level",
        ),
    ];
}

impl SplatTileParams {
    /// Check the fields: the bounds ([`Bounded::BOUNDS`]) and `fanout` 2 or 4 (not 3).
    ///
    /// # Errors
    /// [`Error::Param`] naming the field, the accepted range and the value found.
    pub fn validate(&self) -> Result<()> {
        self.check_bounds()?;
        if !matches!(self.fanout, 2 | 4) {
            return Err(Error::Param {
                stage: Self::TABLE,
                field: "fanout".into(),
                expected: "2 or 4 children per tile (default 4)".into(),
                found: self.fanout.to_string(),
            });
        }
        Ok(())
    }
}

/// Tile an in-memory splat set into `out_dir/tileset.json` + `out_dir/tiles/<name>.glb`.
///
/// Guarantees: every original splat is in exactly one leaf (leaf splat counts sum to N);
/// every tile has content; leaves have geometricError 0 and every child's error is ≤ its
/// parent's; each tile's decoded content lies inside its bounding box; all files are written
/// atomically (temporary name + rename), tiles before `tileset.json`. Not guaranteed: leaf sizes
/// files of an earlier run with other names are not removed. Every leaf holds at most
/// `max_splats_per_tile` splats (a `max_depth` too small for that is an error).
///
/// - `splats`: N ≥ 1 splats, means in metres in the glTF Y-up content frame.
/// - `params`: see [`SplatTileParams`].
/// - `out_dir`: created if missing.
///
/// # Errors
/// [`Error::Param`] for `max_splats_per_tile` = 0 or a `max_depth` too small for it; [`Error::Format`] wrapping
/// `InvalidInput` for N = 0, inconsistent array lengths or NaN/Inf values (with the splat
/// index); [`Error::Format`] wrapping `Io` when a file cannot be written.
pub fn tile_splats(
    splats: &GaussianSplats,
    params: &SplatTileParams,
    out_dir: &Path,
) -> Result<TileReport> {
    tile_splats_framed(splats, params, &TilesetFrame::default(), out_dir)
}

/// [`tile_splats`] for splats already turned into the glTF content frame by `frame`
/// ([`TilesetFrame::content_from_capture`], e.g. a capture made upright), recording `frame` in
/// `tileset.json` (`asset.extras.kiln.frame`) so that evaluation and viewers can place the
/// capture's cameras. When `frame` has a translation t (an f64 origin the splats were kept
/// around: survey coordinates), `splats` are relative to it (content = splats + t) and the root
/// `transform` carries t in f64 on top of its box centre, so the tiles sit at the true
/// coordinates; tile content stays relative to each tile's centre. Same contract otherwise.
///
/// # Errors
/// As [`tile_splats`].
pub fn tile_splats_framed(
    splats: &GaussianSplats,
    params: &SplatTileParams,
    frame: &TilesetFrame,
    out_dir: &Path,
) -> Result<TileReport> {
    Ok(tile_splats_refined(splats, params, frame, None, out_dir)?.0)
}

/// [`tile_splats_framed`], with every parent level optimised against photos by `refiner` (when
/// given and `params.refine_steps` > 0) after it is merged and before it is written; returns what
/// each level's refinement did (deepest first).
///
/// # Errors
/// As [`tile_splats`]; the refiner's view, rasterizer and numeric errors.
pub fn tile_splats_refined(
    splats: &GaussianSplats,
    params: &SplatTileParams,
    frame: &TilesetFrame,
    refiner: Option<&refine::LevelRefiner<'_>>,
    out_dir: &Path,
) -> Result<(TileReport, Vec<refine::LevelRefinement>)> {
    check_tile_inputs(splats, params)?;
    let mut refinements = Vec::new();
    let nodes = build_tree(splats, params);
    let tiles_dir = out_dir.join("tiles");
    let mut built = Built::new(nodes.len());
    let mut times = PhaseTimes::default();
    let max_depth = nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    // Parents level by level from the deepest up: each from its children's content (leaves
    // gathered from the input and written on the way), then written; a level's content is kept
    // only until the level above has merged it.
    let mut contents: Vec<Option<LevelContent>> = (0..nodes.len()).map(|_| None).collect();
    // Parents' contents kept for the streamed SOG (only when asked: it holds every level).
    let mut kept: Vec<Option<LevelContent>> = (0..nodes.len()).map(|_| None).collect();
    for depth in (0..max_depth).rev() {
        let level: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].depth == depth && !nodes[i].is_leaf())
            .collect();
        let mut merged: Vec<ParentPass> = level
            .par_iter()
            .map(|&p| build_parent(splats, &nodes, p, &contents, params, &tiles_dir))
            .collect::<Result<_>>()?;
        if let Some(r) = refiner.filter(|_| params.refine_steps > 0) {
            refinements.push(refine_level(r, &mut merged, max_depth - depth)?);
        }
        for pass in &merged {
            times += pass.times;
            for &(c, bbox, size) in &pass.leaves {
                built.boxes[c] = bbox;
                built.sizes[c] = size;
            }
        }
        // Write the level: boxes from content and children, errors measured by rendering.
        let written: Vec<(usize, Aabb, f64, u64, PhaseTimes)> = merged
            .par_iter()
            .map(|pass| -> Result<_> {
                let start = Instant::now();
                let node = &nodes[pass.node];
                let mut bbox = content_aabb(&pass.content);
                for &c in &node.children {
                    bbox.union(&built.boxes[c]);
                }
                let children = children_content(splats, &nodes, pass.node, &contents)?;
                let measured = error::measure(
                    &pass.content,
                    &children,
                    bbox.center(),
                    bbox.diagonal() / 2.0,
                )?;
                tracing::debug!(
                    tile = %node.name,
                    measured_m = measured.metres,
                    psnr_db = ?measured.psnr_db,
                    "tile: parent geometricError measured"
                );
                let mut error = measured.metres.max(MIN_PARENT_ERROR_M);
                for &c in &node.children {
                    error = error.max(built.errors[c]);
                }
                let measure = start.elapsed();
                let glb = encode_tile(pass.content.clone(), bbox.center(), params)?;
                write_atomic(&tiles_dir.join(format!("{}.glb", node.name)), &glb)?;
                let spent = PhaseTimes {
                    measure,
                    encode: start.elapsed() - measure,
                    ..Default::default()
                };
                Ok((pass.node, bbox, error, glb.len() as u64, spent))
            })
            .collect::<Result<_>>()?;
        for (i, bbox, error, size, spent) in written {
            times += spent;
            built.boxes[i] = bbox;
            built.errors[i] = error;
            built.sizes[i] = size;
        }
        for pass in merged {
            for &c in &nodes[pass.node].children {
                let done = contents[c].take();
                if params.streamed_sog {
                    kept[c] = done;
                }
            }
            contents[pass.node] = Some(pass.content);
        }
    }
    if params.streamed_sog {
        kept[0] = contents[0].take();
        // Before tileset.json, which stays the last file written.
        streamed_sog::write_from_tree(splats, &nodes, &kept, &built.errors, frame, out_dir)?;
    }
    drop((contents, kept));

    // The root is placed at the frame's translation (an f64 origin the splats are relative to),
    // plus its box centre: tile_from_parent = c − (−t).
    let origin = kiln_formats::tiles::transform::translation_part(&frame.content_from_capture);
    let below_root = if origin == [0.0; 3] {
        [0.0; 3] // not −0.0: tilesets without an origin stay byte-identical
    } else {
        origin.map(|v| -v)
    };
    let root = build_tile(&nodes, &built.boxes, &built.errors, 0, below_root);
    let tileset_path = write_tileset(
        out_dir,
        root,
        built.boxes[0].diagonal().max(built.errors[0]),
        &[KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2],
        &[KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2],
        true,
        Some(frame),
    )?;
    let levels = max_depth + 1;
    tracing::info!(
        tiles = nodes.len(),
        levels,
        splats = splats.len(),
        merge_s = times.merge.as_secs_f64(),
        measure_s = times.measure.as_secs_f64(),
        encode_s = times.encode.as_secs_f64(),
        "splat tileset written"
    );
    Ok((
        TileReport {
            tiles: nodes.len(),
            levels,
            content_bytes: built.sizes.iter().sum(),
            tileset_path,
        },
        refinements,
    ))
}

/// Refine one level: its parents' contents together (the level as a client shows it from afar),
/// then split back per tile (refinement keeps counts and order).
fn refine_level(
    refiner: &refine::LevelRefiner<'_>,
    level: &mut [ParentPass],
    levels_above_leaves: u32,
) -> Result<refine::LevelRefinement> {
    let mut all = GaussianSplats {
        sh_degree: level.first().map_or(0, |p| p.content.sh_degree),
        ..Default::default()
    };
    for p in level.iter() {
        all.extend(&p.content)?;
    }
    let done = refiner.refine(&mut all, levels_above_leaves)?;
    tracing::info!(
        levels_above_leaves,
        splats = done.splats,
        loss_start = done.loss_start,
        loss_end = done.loss_end,
        "tile: parent level refined against the photos"
    );
    let mut at = 0;
    for p in level.iter_mut() {
        let n = p.content.len();
        p.content = all.select(at..at + n);
        at += n;
    }
    Ok(done)
}

/// A built parent's content, kept for the level above.
type LevelContent = GaussianSplats;
/// What a client shows when it refines parent `p`: its children's contents together (leaves
/// gathered again from the input, parent children from `contents`).
fn children_content(
    splats: &GaussianSplats,
    nodes: &[Node],
    p: usize,
    contents: &[Option<LevelContent>],
) -> Result<GaussianSplats> {
    let mut all = GaussianSplats {
        sh_degree: splats.sh_degree,
        ..Default::default()
    };
    for &c in &nodes[p].children {
        let gathered;
        let content = if nodes[c].is_leaf() {
            gathered = gather(splats, &nodes[c].indices);
            &gathered
        } else if let Some(content) = &contents[c] {
            content
        } else {
            continue;
        };
        all.extend(content)?;
    }
    Ok(all)
}

/// Smallest geometricError of a parent (metres), so a parent whose merges moved nothing (e.g.
/// coincident splats) still refines into its children when the camera comes close.
const MIN_PARENT_ERROR_M: f64 = 1e-6;

/// Boxes, geometricErrors and content sizes of the tiles written so far (arena order).
struct Built {
    boxes: Vec<Aabb>,
    errors: Vec<f64>,
    sizes: Vec<u64>,
}

impl Built {
    fn new(n: usize) -> Self {
        Self {
            boxes: vec![Aabb::EMPTY; n],
            errors: vec![0.0; n],
            sizes: vec![0; n],
        }
    }
}

/// One parent built: its merged content, and the leaves written on the way as
/// (index, content box, GLB bytes).
struct ParentPass {
    node: usize,
    content: GaussianSplats,
    leaves: Vec<(usize, Aabb, u64)>,
    /// Time spent gathering and merging (`merge`), and encoding and writing the leaves
    /// (`encode`).
    times: PhaseTimes,
}

/// Time spent in each phase of the tiler, summed over parents. Parents of a level run at once
/// and lend each other threads, so with more than one thread the sums overlap and exceed the
/// wall time; with `RAYON_NUM_THREADS=1` they are exact and add up to it (less the tree and
/// `tileset.json`). Logged with "splat tileset written".
#[derive(Debug, Clone, Copy, Default)]
struct PhaseTimes {
    /// Gathering leaves and merging parents ([`merge::merge_to`] and its conversions).
    merge: Duration,
    /// Gathering each parent's children again and rendering the parent against them for its
    /// geometricError ([`error::measure`]).
    measure: Duration,
    /// SPZ, gzip and GLB encoding and the atomic writes of every tile.
    encode: Duration,
}

impl std::ops::AddAssign for PhaseTimes {
    fn add_assign(&mut self, o: Self) {
        self.merge += o.merge;
        self.measure += o.measure;
        self.encode += o.encode;
    }
}

/// Merge parent `p`'s children into its content: leaf children are gathered from `splats`,
/// boxed, encoded and written first; parent children's content comes from `contents`.
fn build_parent(
    splats: &GaussianSplats,
    nodes: &[Node],
    p: usize,
    contents: &[Option<LevelContent>],
    params: &SplatTileParams,
    tiles_dir: &Path,
) -> Result<ParentPass> {
    let start = Instant::now();
    let mut encode_time = Duration::ZERO;
    let mut set = MergeSet::with_degree(splats.sh_degree);
    let mut leaves = Vec::new();
    for &c in nodes[p].children.iter().filter(|&&c| nodes[c].is_leaf()) {
        let content = gather(splats, &nodes[c].indices);
        set.extend_from(&content);
        let bbox = content_aabb(&content);
        let encoding = Instant::now();
        let glb = encode_tile(content, bbox.center(), params)?;
        write_atomic(&tiles_dir.join(format!("{}.glb", nodes[c].name)), &glb)?;
        encode_time += encoding.elapsed();
        leaves.push((c, bbox, glb.len() as u64));
    }
    for &c in &nodes[p].children {
        if let Some(content) = &contents[c] {
            set.extend_from(content);
        }
    }
    let target = parent_target(set.len(), p == 0, params);
    let content = merge::merge_to(set, target).to_splats();
    Ok(ParentPass {
        node: p,
        content,
        leaves,
        times: PhaseTimes {
            merge: start.elapsed() - encode_time,
            measure: Duration::ZERO,
            encode: encode_time,
        },
    })
}

/// How many of its children's `n` splats a parent keeps: `n / fanout`, except the root above
/// children that fill more than one tile, which keeps a whole tile's budget (at most half of `n`,
/// so it stays a level of its own). Every client fetches the root first and a distant one shows
/// nothing else, so its tile budget is spent there rather than left unused: biker (152,746 splats,
/// 16,384 a leaf) gets a 16,384-splat root instead of 9,547, 2.3× below its 38,188-splat level 1,
/// and the τ = 16 → 32 step at 2× its radius goes from 2.03 dB to none (the root alone matches
/// level 1 there). A root above a single small leaf stays a `1 / fanout` preview of it.
fn parent_target(n: usize, is_root: bool, params: &SplatTileParams) -> usize {
    let per_level = n.div_ceil(usize::from(params.fanout));
    if is_root && n > params.max_splats_per_tile {
        per_level.max(params.max_splats_per_tile.min(n.div_ceil(2)))
    } else {
        per_level
    }
}

/// The boundary check of [`tile_splats`].
fn check_tile_inputs(splats: &GaussianSplats, params: &SplatTileParams) -> Result<()> {
    const CONTEXT: &str = "splat tiling";
    params.validate()?;
    splats.check_shapes(CONTEXT)?;
    if splats.is_empty() {
        return Err(kiln_formats::Error::InvalidInput {
            context: CONTEXT,
            field: "splats (N)".into(),
            expected: "at least one splat".into(),
            found: "0".into(),
        }
        .into());
    }
    check_depth(splats.len(), params)?;
    // The scan in parallel; the serial check only to name the first bad value.
    let finite = [
        &splats.means,
        &splats.log_scales,
        &splats.rotations,
        &splats.logit_opacities,
        &splats.sh_coeffs,
    ]
    .par_iter()
    .all(|v| {
        v.par_chunks(1 << 16)
            .all(|c| c.iter().all(|x| x.is_finite()))
    });
    if !finite {
        splats.check_finite(CONTEXT)?;
    }
    Ok(())
}

/// `max_depth` must leave room for leaves of at most `max_splats_per_tile`: a tileset whose
/// leaves break the budget breaks the clients that chose it (Spark's 64 K chunks, a WASM heap),
/// so it is refused before any work instead of written with a warning.
fn check_depth(n: usize, params: &SplatTileParams) -> Result<()> {
    let need = tree::required_depth(n, params.max_splats_per_tile, params.fanout);
    if need <= params.max_depth {
        return Ok(());
    }
    let leaf_at_max = tree::largest_leaf(n, params.max_depth, params.fanout);
    Err(Error::Param {
        stage: "tile",
        field: "max_depth".into(),
        expected: format!(
            "≥ {need} for {n} splats at ≤ {} a leaf and {} children per tile (default 16); or \
             raise max_splats_per_tile to ≥ {leaf_at_max}",
            params.max_splats_per_tile, params.fanout
        ),
        found: params.max_depth.to_string(),
    })
}

/// Axis-aligned box in the training (Y-up) frame, metres.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Aabb {
    min: [f64; 3],
    max: [f64; 3],
}

impl Aabb {
    const EMPTY: Aabb = Aabb {
        min: [f64::INFINITY; 3],
        max: [f64::NEG_INFINITY; 3],
    };

    fn union(&mut self, o: &Aabb) {
        for a in 0..3 {
            self.min[a] = self.min[a].min(o.min[a]);
            self.max[a] = self.max[a].max(o.max[a]);
        }
    }

    fn center(&self) -> [f64; 3] {
        std::array::from_fn(|a| (self.min[a] + self.max[a]) / 2.0)
    }

    fn diagonal(&self) -> f64 {
        (0..3)
            .map(|a| (self.max[a] - self.min[a]).powi(2))
            .sum::<f64>()
            .sqrt()
    }
}

/// The glTF Y-up → 3D Tiles Z-up rotation (x, y, z) → (x, −z, y), i.e. [`Y_UP_TO_Z_UP`] applied
/// to a vector.
fn y_up_to_z_up(v: [f64; 3]) -> [f64; 3] {
    let m = Y_UP_TO_Z_UP; // column-major
    std::array::from_fn(|r| m[r] * v[0] + m[4 + r] * v[1] + m[8 + r] * v[2])
}

/// 3σ box of a splat set: mean ± 3·exp(max log-scale) per splat.
fn content_aabb(s: &GaussianSplats) -> Aabb {
    let mut b = Aabb::EMPTY;
    for i in 0..s.len() {
        let r = EXTENT_SIGMAS
            * (s.log_scales[i * 3..i * 3 + 3]
                .iter()
                .copied()
                .fold(f32::MIN, f32::max) as f64)
                .exp();
        for a in 0..3 {
            let m = s.means[i * 3 + a] as f64;
            b.min[a] = b.min[a].min(m - r);
            b.max[a] = b.max[a].max(m + r);
        }
    }
    b
}

/// The splats of a tree node (`indices` into the tiler's input), in that order.
fn gather(s: &GaussianSplats, indices: &[u32]) -> GaussianSplats {
    s.select(indices.iter().map(|&i| i as usize))
}

/// Encode one tile: positions relative to `center` (training frame), SPZ fixed point lowered
/// below 12 fractional bits only if the tile is wider than ±2048 m; gzip level and antialiasing
/// flag from `params`.
fn encode_tile(
    mut local: GaussianSplats,
    center: [f64; 3],
    params: &SplatTileParams,
) -> Result<Vec<u8>> {
    let mut max_abs = 0f64;
    for (i, m) in local.means.iter_mut().enumerate() {
        let v = *m as f64 - center[i % 3];
        max_abs = max_abs.max(v.abs());
        *m = v as f32;
    }
    let mut fb = TILE_FRACTIONAL_BITS;
    while fb > 0 && max_abs >= spz_position_limit_m(fb) - 1.0 / (1u64 << fb) as f64 {
        fb -= 1;
    }
    let spz = SpzOptions {
        fractional_bits: fb,
        gzip_level: params.gzip_level,
        sh1_bits: params.sh1_bits,
        sh_rest_bits: params.sh_rest_bits,
        version: if params.spz_version == 2 {
            SpzVersion::V2
        } else {
            SpzVersion::V3
        },
        antialiasing: if params.antialiased {
            SpzAntialiasing::Antialiased
        } else {
            SpzAntialiasing::Standard
        },
        ..SpzOptions::default()
    };
    let options = SplatGlbOptions {
        spz: Some(spz),
        ..SplatGlbOptions::default()
    };
    Ok(glb::encode(&local, &options)?)
}

/// Column-major 4×4 translation; `None` (no `transform`) for a zero translation.
fn translation(t: [f64; 3]) -> Option<[f64; 16]> {
    if t == [0.0; 3] {
        return None;
    }
    let mut m = [0.0; 16];
    m[0] = 1.0;
    m[5] = 1.0;
    m[10] = 1.0;
    m[15] = 1.0;
    m[12..15].copy_from_slice(&t);
    Some(m)
}

/// The tile of node `i`; `parent_center` is the parent's box centre (training frame; for the
/// root, minus the frame's translation, so the root's transform puts it at the true place).
fn build_tile(
    nodes: &[Node],
    boxes: &[Aabb],
    errors: &[f64],
    i: usize,
    parent_center: [f64; 3],
) -> Tile {
    let b = boxes[i];
    let c = b.center();
    // Box in the Z-up tile frame, centred on the tile origin.
    let lo = y_up_to_z_up(std::array::from_fn(|a| b.min[a] - c[a]));
    let hi = y_up_to_z_up(std::array::from_fn(|a| b.max[a] - c[a]));
    let zmin = std::array::from_fn(|a| lo[a].min(hi[a]));
    let zmax = std::array::from_fn(|a| lo[a].max(hi[a]));
    Tile {
        bounding_volume: BoundingVolume::from_aabb(zmin, zmax),
        geometric_error: errors[i],
        refine: (i == 0).then_some(Refine::Replace),
        transform: translation(y_up_to_z_up(std::array::from_fn(|a| {
            c[a] - parent_center[a]
        }))),
        content: Some(Content {
            uri: format!("tiles/{}.glb", nodes[i].name),
        }),
        children: nodes[i]
            .children
            .iter()
            .map(|&ch| build_tile(nodes, boxes, errors, ch, c))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::tile::CONTENT_GLTF;
    use kiln_formats::tiles::tileset::Tileset;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn random_splats(n: usize, degree: u32, half_extent_m: f32, seed: u64) -> GaussianSplats {
        let mut r = SmallRng::seed_from_u64(seed);
        let k = ((degree + 1) * (degree + 1)) as usize;
        let mut s = GaussianSplats {
            sh_degree: degree,
            ..Default::default()
        };
        for _ in 0..n {
            for _ in 0..3 {
                s.means.push(r.random_range(-half_extent_m..half_extent_m));
                s.log_scales.push(r.random_range(-6.0..-2.0));
            }
            let q: [f32; 4] = std::array::from_fn(|_| r.random_range(-1.0f32..1.0));
            let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-3);
            s.rotations.extend(q.map(|v| v / norm));
            s.logit_opacities.push(r.random_range(-3.0..3.0));
            s.sh_coeffs
                .extend((0..k * 3).map(|_| r.random_range(-0.8..0.8)));
        }
        s
    }

    /// Translation of a tile's `transform` (the tiler writes nothing else), zero when absent.
    fn offset_of(t: &Tile) -> [f64; 3] {
        t.transform.map_or([0.0; 3], |m| {
            assert_eq!(
                &m[..12],
                &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
            );
            [m[12], m[13], m[14]]
        })
    }

    /// Walk the tileset: (tile, cumulative translation in the Z-up frame, parent error).
    fn walk<'a>(t: &'a Tile, offset: [f64; 3], out: &mut Vec<(&'a Tile, [f64; 3])>) {
        let m = offset_of(t);
        let o = [offset[0] + m[0], offset[1] + m[1], offset[2] + m[2]];
        out.push((t, o));
        for c in &t.children {
            walk(c, o, out);
        }
    }

    fn check_error_monotone(t: &Tile) {
        if t.children.is_empty() {
            assert_eq!(t.geometric_error, 0.0);
        } else {
            assert!(t.geometric_error > 0.0);
        }
        for c in &t.children {
            assert!(c.geometric_error <= t.geometric_error);
            check_error_monotone(c);
        }
    }

    /// Decoded content of `tile` (tile-local, Y-up) lies inside its box (Z-up tile frame).
    fn assert_content_inside_box(dir: &Path, tile: &Tile) -> GaussianSplats {
        let bytes = std::fs::read(dir.join(&tile.content.as_ref().unwrap().uri)).unwrap();
        let s = glb::decode(&bytes).unwrap().splats;
        let b = tile.bounding_volume.box_.unwrap();
        let half = [b[3], b[7], b[11]];
        for p in s.means.chunks_exact(3) {
            let z = y_up_to_z_up([p[0] as f64, p[1] as f64, p[2] as f64]);
            for a in 0..3 {
                assert!(
                    (z[a] - b[a]).abs() <= half[a] + 1e-6,
                    "{z:?} outside box {b:?}"
                );
            }
        }
        s
    }

    #[test]
    fn tiling_200k_splats_gives_a_consistent_hlod_tileset() {
        let s = random_splats(200_000, 1, 50.0, 42);
        let dir = tempfile::tempdir().unwrap();
        let params = SplatTileParams::default();
        let report = tile_splats(&s, &params, dir.path()).unwrap();
        println!("200k splats, SH degree 1: {report:?}");
        assert!(report.levels >= 2, "{report:?}");
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        assert_eq!(ts.asset.version, "1.1");
        assert!(ts.geometric_error >= ts.root.geometric_error);
        assert_eq!(ts.root.refine, Some(Refine::Replace));
        assert!(ts.extensions_used.contains(&CONTENT_GLTF.to_string()));
        let ext = &ts.extensions[CONTENT_GLTF];
        for key in ["extensionsUsed", "extensionsRequired"] {
            assert_eq!(
                ext[key],
                serde_json::json!([KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2])
            );
        }
        check_error_monotone(&ts.root);
        let mut tiles = Vec::new();
        walk(&ts.root, [0.0; 3], &mut tiles);
        assert_eq!(tiles.len(), report.tiles);
        let mut leaf_count = 0;
        let mut leaf_splats = 0;
        let mut bytes = 0;
        for (tile, offset) in &tiles {
            let content = assert_content_inside_box(dir.path(), tile);
            bytes += std::fs::metadata(dir.path().join(&tile.content.as_ref().unwrap().uri))
                .unwrap()
                .len();
            if tile.children.is_empty() {
                leaf_count += 1;
                leaf_splats += content.len();
                assert!(content.len() <= params.max_splats_per_tile);
            } else {
                // A parent holds its children's splats merged to a quarter, the root to a whole
                // tile's budget: within the leaf budget.
                assert!(content.len() <= params.max_splats_per_tile);
                // Children's boxes lie inside the parent's (all in the parent's frame).
                let pb = tile.bounding_volume.box_.unwrap();
                for c in &tile.children {
                    let cb = c.bounding_volume.box_.unwrap();
                    let t = offset_of(c);
                    for a in 0..3 {
                        let (ph, ch) = (pb[3 + 4 * a], cb[3 + 4 * a]);
                        let cc = cb[a] + t[a];
                        assert!(cc - ch >= pb[a] - ph - 1e-9 && cc + ch <= pb[a] + ph + 1e-9);
                    }
                }
            }
            let _ = offset;
        }
        assert!(leaf_count >= 4, "{leaf_count} leaves");
        assert_eq!(leaf_splats, s.len());
        assert_eq!(bytes, report.content_bytes);
        // Levels 2–4× apart (issue 18).
        let mut per_depth = vec![0usize; report.levels as usize];
        let mut depth_of = Vec::new();
        fn depths(t: &Tile, d: usize, out: &mut Vec<usize>) {
            out.push(d);
            for c in &t.children {
                depths(c, d + 1, out);
            }
        }
        depths(&ts.root, 0, &mut depth_of);
        for ((tile, _), d) in tiles.iter().zip(&depth_of) {
            per_depth[*d] += glb::decode(
                &std::fs::read(dir.path().join(&tile.content.as_ref().unwrap().uri)).unwrap(),
            )
            .unwrap()
            .splats
            .len();
        }
        // The root spends a whole tile's budget (200,000 / 4 leaves of 50,000 under it: 65,536,
        // 3.05× fewer); every level below it is about 4× fewer than the next.
        assert_eq!(per_depth[0], params.max_splats_per_tile, "{per_depth:?}");
        for (d, w) in per_depth.windows(2).enumerate() {
            let ratio = w[1] as f64 / w[0] as f64;
            let expected = if d == 0 { 2.0..=4.0 } else { 3.5..=4.5 };
            assert!(expected.contains(&ratio), "levels {per_depth:?}");
        }
    }

    #[test]
    fn fanout_two_halves_the_splats_per_level_with_two_children_per_tile() {
        let s = random_splats(40_000, 0, 20.0, 5);
        let dir = tempfile::tempdir().unwrap();
        let params = SplatTileParams {
            max_splats_per_tile: 5_000,
            fanout: 2,
            ..Default::default()
        };
        let report = tile_splats(&s, &params, dir.path()).unwrap();
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        check_error_monotone(&ts.root);
        // (depth, splats) of every tile.
        fn count(dir: &Path, t: &Tile, d: usize, out: &mut Vec<(usize, usize, bool)>) {
            assert!(t.children.len() <= 2, "{} children", t.children.len());
            let bytes = std::fs::read(dir.join(&t.content.as_ref().unwrap().uri)).unwrap();
            let n = glb::decode(&bytes).unwrap().splats.len();
            out.push((d, n, t.children.is_empty()));
            for c in &t.children {
                count(dir, c, d + 1, out);
            }
        }
        let mut tiles = Vec::new();
        count(dir.path(), &ts.root, 0, &mut tiles);
        // 40,000 splats in leaves of ≤ 5,000: 8 leaves at depth 3 under 7 parents.
        assert_eq!(report.levels, 4, "{report:?}");
        assert_eq!(tiles.len(), 15);
        let leaves: usize = tiles.iter().filter(|t| t.2).map(|t| t.1).sum();
        assert_eq!(leaves, s.len());
        let mut per_depth = vec![0usize; 4];
        for &(d, n, _) in &tiles {
            per_depth[d] += n;
            assert!(n <= params.max_splats_per_tile);
        }
        for w in per_depth.windows(2) {
            let ratio = w[1] as f64 / w[0] as f64;
            assert!((1.8..=2.2).contains(&ratio), "levels {per_depth:?}");
        }
        let three = SplatTileParams {
            fanout: 3,
            ..Default::default()
        };
        let err = tile_splats(&s, &three, dir.path()).unwrap_err().to_string();
        assert!(err.contains("fanout") && err.contains("2 or 4"), "{err}");
    }

    #[test]
    fn leaf_content_decodes_to_the_original_splats_in_world_frame() {
        let s = random_splats(3_000, 0, 10.0, 3);
        let dir = tempfile::tempdir().unwrap();
        let params = SplatTileParams {
            max_splats_per_tile: 1_000,
            max_depth: 8,
            ..Default::default()
        };
        tile_splats(&s, &params, dir.path()).unwrap();
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(dir.path().join("tileset.json")).unwrap())
                .unwrap();
        let mut tiles = Vec::new();
        walk(&ts.root, [0.0; 3], &mut tiles);
        let mut world: Vec<[f32; 3]> = Vec::new();
        for (tile, offset) in tiles.iter().filter(|(t, _)| t.children.is_empty()) {
            let c = glb::decode(
                &std::fs::read(dir.path().join(&tile.content.as_ref().unwrap().uri)).unwrap(),
            )
            .unwrap()
            .splats;
            // Z-up offset back to the Y-up training frame: (x, y, z)_zup = (x, −z, y)_yup.
            let off_yup = [offset[0], offset[2], -offset[1]];
            for p in c.means.chunks_exact(3) {
                world.push(std::array::from_fn(|a| (p[a] as f64 + off_yup[a]) as f32));
            }
        }
        // Every decoded splat is an original one, within the SPZ position step (brute force).
        assert_eq!(world.len(), s.len());
        let tol = 0.5 / 4096.0 + 1e-5;
        for w in &world {
            let hit = s
                .means
                .chunks_exact(3)
                .any(|o| (0..3).all(|a| (o[a] - w[a]).abs() <= tol));
            assert!(hit, "{w:?} matches no input splat");
        }
    }

    /// Splats 1 cm apart at a UTM-like position (x 500 km, y 4000 km, z 10 m), kept relative to
    /// an f64 origin by the frame: the root transform carries the origin, so transforms (f64)
    /// plus tile content reproduce every position to the millimetre, and the evaluation loader
    /// sees the content relative to the origin again.
    #[test]
    fn a_survey_origin_goes_into_the_root_transform_and_keeps_1_cm_spacing() {
        let absolute = [
            [500_000.00, 4_000_000.0, 10.0],
            [500_000.01, 4_000_000.0, 10.0],
            [500_000.02, 4_000_000.0, 10.0],
        ];
        let origin = [500_000.0, 4_000_000.0, 10.0];
        let mut s = random_splats(3, 1, 1.0, 4);
        s.means = absolute
            .iter()
            .flat_map(|p| (0..3).map(move |a| (p[a] - origin[a]) as f32))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let frame = TilesetFrame::default().placed_at(origin);
        tile_splats_framed(&s, &SplatTileParams::default(), &frame, dir.path()).unwrap();
        let path = dir.path().join("tileset.json");
        let ts: Tileset = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let mut tiles = Vec::new();
        walk(&ts.root, [0.0; 3], &mut tiles);
        let leaves: Vec<_> = tiles
            .iter()
            .filter(|(t, _)| t.children.is_empty())
            .collect();
        assert_eq!(leaves.len(), 1);
        let (leaf, offset) = leaves[0];
        // The root sits near the origin (Z-up: (x, −z, y)).
        assert!((offset[0] - 500_000.0).abs() < 1.0 && (offset[2] - 4_000_000.0).abs() < 1.0);
        let c = assert_content_inside_box(dir.path(), leaf);
        let off_yup = [offset[0], offset[2], -offset[1]];
        let got: Vec<[f64; 3]> = c
            .means
            .chunks_exact(3)
            .map(|p| std::array::from_fn(|a| off_yup[a] + f64::from(p[a])))
            .collect();
        // Each input position is matched by a decoded one within 1 mm (1 cm apart: one each).
        assert_eq!(got.len(), 3);
        for want in &absolute {
            let hits = got
                .iter()
                .filter(|g| (0..3).all(|a| (g[a] - want[a]).abs() < 1e-3))
                .count();
            assert_eq!(hits, 1, "{want:?} in {got:?}");
        }
        // Evaluation places the content in the capture frame: relative to the origin.
        let loaded = crate::stages::eval::LoadedTileset::open(&path).unwrap();
        let back = loaded.leaves().unwrap();
        for want in s.means.chunks_exact(3) {
            let hit = back
                .means
                .chunks_exact(3)
                .any(|b| (0..3).all(|a| (b[a] - want[a]).abs() < 1e-3));
            assert!(hit, "{want:?} in {:?}", back.means);
        }
    }

    /// The SPZ header flags byte of a tile GLB: the payload is the gzip stream in the BIN chunk,
    /// and the flags follow magic, version, point count, SH degree and fractional bits (byte 14
    /// of the SPZ v2/v3 header, nianticlabs/spz `PackedGaussiansHeader`).
    fn spz_flags(glb: &[u8]) -> u8 {
        use std::io::Read;
        let start = glb
            .windows(3)
            .position(|w| w == [0x1f, 0x8b, 0x08])
            .expect("an SPZ gzip stream");
        let mut header = [0u8; 16];
        flate2::read::GzDecoder::new(&glb[start..])
            .read_exact(&mut header)
            .unwrap();
        assert_eq!(&header[..4], b"NGSP");
        header[14]
    }

    #[test]
    fn antialiased_splats_get_the_spz_flag_in_every_tile() {
        let s = random_splats(3_000, 1, 2.0, 11);
        for antialiased in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let params = SplatTileParams {
                max_splats_per_tile: 1_000,
                antialiased,
                ..SplatTileParams::default()
            };
            let report = tile_splats(&s, &params, dir.path()).unwrap();
            let mut glbs = 0;
            for rel in crate::file_tree::files_under(dir.path()).unwrap() {
                if rel.extension().is_some_and(|e| e == "glb") {
                    let flags = spz_flags(&std::fs::read(dir.path().join(rel)).unwrap());
                    assert_eq!(flags & 1, u8::from(antialiased));
                    glbs += 1;
                }
            }
            assert_eq!(glbs, report.tiles);
        }
    }

    #[test]
    fn small_input_still_gets_a_merged_root_above_one_leaf() {
        let s = random_splats(1_000, 2, 2.0, 7);
        let dir = tempfile::tempdir().unwrap();
        let report = tile_splats(&s, &SplatTileParams::default(), dir.path()).unwrap();
        assert_eq!((report.tiles, report.levels), (2, 2));
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        assert_eq!(ts.root.children.len(), 1);
        assert!(ts.root.geometric_error > 0.0);
        assert_eq!(ts.root.children[0].geometric_error, 0.0);
        let root = assert_content_inside_box(dir.path(), &ts.root);
        let leaf = assert_content_inside_box(dir.path(), &ts.root.children[0]);
        assert_eq!(leaf.len(), 1_000);
        // Above a single leaf the root stays a quarter preview (it fills a tile only above
        // children holding more than one tile).
        assert_eq!(root.len(), 250);
        assert_eq!(root.sh_degree, 2);
    }

    #[test]
    fn tiling_the_real_plush_dog_keeps_every_splat() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/datasets/splat-plushdog-smartdatascan/point_cloud_29999_clean.ply");
        let s = kiln_formats::splats::ply::read(&p).unwrap().splats;
        let dir = tempfile::tempdir().unwrap();
        let params = SplatTileParams {
            max_splats_per_tile: 4_096,
            max_depth: 8,
            ..Default::default()
        };
        let report = tile_splats(&s, &params, dir.path()).unwrap();
        println!("plush dog (N = {}, max 4096/tile): {report:?}", s.len());
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        check_error_monotone(&ts.root);
        let mut tiles = Vec::new();
        walk(&ts.root, [0.0; 3], &mut tiles);
        let mut leaf_splats = 0;
        for (tile, _) in &tiles {
            let c = assert_content_inside_box(dir.path(), tile);
            if tile.children.is_empty() {
                leaf_splats += c.len();
            }
        }
        assert_eq!(leaf_splats, s.len());
        assert!(report.levels >= 2);
    }

    #[test]
    fn eigen_decomposition_reconstructs_the_covariance() {
        let r = kiln_formats::rotation::quaternion_to_rotation([0.8, 0.2, -0.4, 0.4]).unwrap();
        let var = [4.0, 0.25, 1.0];
        let a: [[f64; 3]; 3] = std::array::from_fn(|i| {
            std::array::from_fn(|j| (0..3).map(|k| r[i][k] * var[k] * r[j][k]).sum())
        });
        let (l, v) = merge::eigen_symmetric3(a);
        for i in 0..3 {
            for j in 0..3 {
                let back: f64 = (0..3).map(|k| v[i][k] * l[k] * v[j][k]).sum();
                assert!((back - a[i][j]).abs() < 1e-10);
            }
        }
        let q = kiln_formats::rotation::rotation_to_quaternion(r);
        let r2 = kiln_formats::rotation::quaternion_to_rotation(q).unwrap();
        for i in 0..3 {
            for j in 0..3 {
                assert!((r[i][j] - r2[i][j]).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn coincident_and_kilometre_wide_inputs_tile_without_error() {
        // 100 splats at one point: splitting stops at max_depth with an oversized leaf.
        let mut s = random_splats(100, 0, 1.0, 5);
        for p in s.means.chunks_exact_mut(3) {
            p.copy_from_slice(&[3.0, -2.0, 1.0]);
        }
        let dir = tempfile::tempdir().unwrap();
        let params = SplatTileParams {
            max_splats_per_tile: 10,
            max_depth: 3,
            ..Default::default()
        };
        let report = tile_splats(&s, &params, dir.path()).unwrap();
        // The median cuts split coincident splats by index: 100 → 4 × 25 → 16 leaves of ≤ 7.
        assert_eq!(report.levels, 3);
        // 10 km wide: beyond SPZ's ±2048 m at 12 bits, so the tile encoder lowers the bits.
        let s = random_splats(200, 0, 5_000.0, 6);
        let dir = tempfile::tempdir().unwrap();
        let report = tile_splats(&s, &SplatTileParams::default(), dir.path()).unwrap();
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        let leaf = assert_content_inside_box(dir.path(), &ts.root.children[0]);
        assert_eq!(leaf.len(), 200);
    }

    #[test]
    fn spz_version_chooses_every_tile_s_payload_version_and_only_2_or_3_are_accepted() {
        let s = random_splats(3_000, 1, 2.0, 11);
        for version in [2u8, 3] {
            let dir = tempfile::tempdir().unwrap();
            let params = SplatTileParams {
                max_splats_per_tile: 1_000,
                spz_version: version,
                ..SplatTileParams::default()
            };
            let report = tile_splats(&s, &params, dir.path()).unwrap();
            let mut glbs = 0;
            for rel in crate::file_tree::files_under(dir.path()).unwrap() {
                if rel.extension().is_some_and(|e| e == "glb") {
                    let glb = std::fs::read(dir.path().join(rel)).unwrap();
                    let found = kiln_formats::splats::glb::splat_glb_spz_version(&glb).unwrap();
                    assert_eq!(found, Some(u32::from(version)));
                    glbs += 1;
                }
            }
            assert_eq!(glbs, report.tiles);
        }
        for bad in [1u8, 4] {
            let params = SplatTileParams {
                spz_version: bad,
                ..SplatTileParams::default()
            };
            let err = params.validate().unwrap_err().to_string();
            assert!(err.contains("spz_version"), "{err}");
        }
    }

    #[test]
    fn a_max_depth_too_small_for_the_leaf_budget_is_refused_naming_both_fixes() {
        // 1,000 splats, ≤ 10 a leaf: 4-way cuts give ≤ 250, 63, 16, 4 at depths 1..4.
        let s = random_splats(1_000, 0, 1.0, 9);
        let dir = tempfile::tempdir().unwrap();
        let params = SplatTileParams {
            max_splats_per_tile: 10,
            max_depth: 3,
            ..Default::default()
        };
        let err = tile_splats(&s, &params, dir.path()).unwrap_err();
        let Error::Param {
            field,
            expected,
            found,
            ..
        } = &err
        else {
            panic!("expected a parameter error, got {err}");
        };
        assert_eq!((field.as_str(), found.as_str()), ("max_depth", "3"));
        assert!(expected.starts_with("≥ 4 for 1000 splats"), "{expected}");
        assert!(
            expected.contains("max_splats_per_tile to ≥ 16"),
            "{expected}"
        );
        assert!(!dir.path().join("tileset.json").exists());
        // Binary cuts need 7 levels (500, 250, 125, 63, 32, 16, 8).
        assert_eq!(tree::required_depth(1_000, 10, 2), 7);
        assert_eq!(tree::largest_leaf(1_000, 3, 2), 125);
        // The depth it names is enough: every leaf within the budget.
        let params = SplatTileParams {
            max_depth: 4,
            ..params
        };
        let report = tile_splats(&s, &params, dir.path()).unwrap();
        let ts: Tileset =
            serde_json::from_slice(&std::fs::read(&report.tileset_path).unwrap()).unwrap();
        let mut tiles = Vec::new();
        walk(&ts.root, [0.0; 3], &mut tiles);
        for (t, _) in tiles.iter().filter(|(t, _)| t.children.is_empty()) {
            let uri = &t.content.as_ref().unwrap().uri;
            let glb = std::fs::read(dir.path().join(uri)).unwrap();
            let leaf = glb::decode(&glb).unwrap().splats;
            assert!(leaf.len() <= 10, "{uri}: {} splats", leaf.len());
        }
    }

    #[test]
    fn tiling_rejects_empty_input_and_zero_budget() {
        let dir = tempfile::tempdir().unwrap();
        let empty = GaussianSplats::default();
        assert!(matches!(
            tile_splats(&empty, &SplatTileParams::default(), dir.path()),
            Err(Error::Format(_))
        ));
        let s = random_splats(10, 0, 1.0, 1);
        let p = SplatTileParams {
            max_splats_per_tile: 0,
            max_depth: 4,
            ..Default::default()
        };
        assert!(matches!(
            tile_splats(&s, &p, dir.path()),
            Err(Error::Param { .. })
        ));
        let mut bad = s.clone();
        bad.means[5] = f32::NAN;
        assert!(matches!(
            tile_splats(&bad, &SplatTileParams::default(), dir.path()),
            Err(Error::Format(_))
        ));
        assert!(!dir.path().join("tileset.json").exists());
    }

    #[test]
    fn every_numeric_field_has_a_bound_and_fanout_is_2_or_4() {
        // fanout 2: serialised (4, the default, is left out of the stage key).
        let p = SplatTileParams {
            fanout: 2,
            ..SplatTileParams::default()
        };
        p.validate().unwrap();
        assert_eq!(crate::bounds::unbounded_and_stale(&p), (vec![], vec![]));
        let e = SplatTileParams { fanout: 3, ..p }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("`fanout`") && e.contains("2 or 4"), "{e}");
        let e = SplatTileParams { max_depth: 40, ..p }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("`max_depth`: expected 1 ..= 32"), "{e}");
    }
}
