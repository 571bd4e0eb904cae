//! Splat tiling: an octree of trained Gaussian splats as an OGC 3D Tiles 1.1 HLOD tileset whose
//! tiles are SPZ-compressed `KHR_gaussian_splatting` GLBs.
//!
//! Sources: OGC 3D Tiles 1.1 (22-025r4) §"Tiles" (geometricError, REPLACE refinement,
//! transforms, bounding volumes in the tile's frame) and §"glTF transforms" (content is Y-up and
//! rotated to Z-up at run time); `3DTILES_content_gltf`; CesiumJS 1.145 routing rules
//! (shared/research/tiles-formats.md §1.7, §7); parent levels by moment matching as in Kerbl et
//! al. 2024, "A Hierarchical 3D Gaussian Representation for Real-Time Rendering of Very Large
//! Datasets", §4 (merged Gaussian = mass-weighted mean and covariance of its children, mass =
//! opacity × area, opacity = conserved mass / merged area).
//!
//! Tree: an octree over the splat means, on the bounding cube of the means. A node splits into
//! its non-empty octants while it holds more than `max_splats_per_tile` splats and is shallower
//! than `max_depth`; leaves hold the original splats. Every node above the leaves holds merged
//! content: its splats grouped on a grid of [`MERGE_GRID_CELLS`]³ cells over the node's cube, one
//! moment-matched Gaussian per non-empty cell (so a parent holds at most 4096 splats). When the
//! whole input fits one leaf, a merged root is still put above it, so every tileset has at least
//! two levels. Refinement is REPLACE.
//!
//! geometricError (metres): leaves 0; a parent the diagonal of its merge cell (edge = node cube
//! edge / 16), raised to its largest child's if needed; the tileset value is the root box
//! diagonal (≥ the root's).
//!
//! Frames: splats are in the training world frame, used as the glTF Y-up frame of the content.
//! The runtime rotates glTF content Y-up → Z-up before any tile transform, so bounding boxes are
//! written in that Z-up tile frame (Y-up (x, y, z) → (x, −z, y), the [`Y_UP_TO_Z_UP`] matrix) and
//! the root carries no extra rotation (a `Y_UP_TO_Z_UP` root transform would rotate twice). Each
//! tile stores its content relative to its own box centre c (so SPZ's 24-bit fixed point never
//! overflows and precision is uniform) and its `transform` is the translation from the parent's
//! centre to c, expressed in the Z-up frame. The root's translation is its centre; put a
//! georeference (ENU → ECEF) in front of it when one exists.
//!
//! Boxes: axis-aligned in the tile frame, the union of the content's 3σ extents (mean ± 3·max
//! scale) and the children's boxes, so each tile's content lies inside its box and inside every
//! ancestor's box.
//!
//! NaN/Inf in the input is rejected before any work ([`GaussianSplats::check_finite`]).

use std::path::Path;

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::rotation::quaternion_to_rotation;
use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::glb::{
    KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2, SplatGlbOptions, write_splat_glb_with,
};
use kiln_formats::splats::spz::{SpzAntialiasing, spz_position_limit_m};
use kiln_formats::tiles::tileset::{BoundingVolume, Content, Refine, Tile, Y_UP_TO_Z_UP};
use rayon::prelude::*;

use super::{TileReport, write_tileset};
use crate::{Error, Result};

mod moments;
use moments::Grid;

/// Grid cells per node edge when merging a parent's splats: parents hold ≤ 16³ = 4096 splats,
/// and their geometricError is the diagonal of one such cell.
pub const MERGE_GRID_CELLS: u32 = 16;

/// SPZ fractional bits used for tile content (1/4096 m steps, ±2048 m range); lowered per tile
/// only when a tile is wider than that range.
const TILE_FRACTIONAL_BITS: u8 = 12;

/// Merged opacities are kept below 1 − ε so that logits stay finite.
const MAX_MERGED_OPACITY: f64 = 1.0 - 1e-6;

/// Smallest merged variance (m²), so that a group of coincident, flat splats still gives a valid
/// (positive) scale: (1 µm)².
const MIN_VARIANCE_M2: f64 = 1e-12;

/// 3σ: the extent used for bounding boxes (the same cut-off the rasterizer uses).
const EXTENT_SIGMAS: f64 = 3.0;

/// Parameters of [`tile_splats`]. Serialised into the stage key; missing fields take the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplatTileParams {
    /// Most original splats a leaf may hold (≥ 1); default 65 536 (CesiumJS decodes each tile in a
    /// 2 GB WASM heap; 64 K is Spark's chunk size). Leaves at `max_depth` may exceed it.
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
}

impl Default for SplatTileParams {
    fn default() -> Self {
        Self {
            max_splats_per_tile: 65_536,
            max_depth: 16,
            gzip_level: 2,
            antialiased: false,
        }
    }
}

impl SplatTileParams {
    /// Check ranges: `max_splats_per_tile` ≥ 1, `gzip_level` in 1..=9.
    ///
    /// # Errors
    /// [`Error::Param`] naming the field, the accepted range and the value found.
    pub fn validate(&self) -> Result<()> {
        if self.max_splats_per_tile == 0 {
            return Err(Error::Param {
                stage: "tile",
                field: "max_splats_per_tile".into(),
                expected: "≥ 1 (default 65536)".into(),
                found: "0".into(),
            });
        }
        if !(1..=9).contains(&self.gzip_level) {
            return Err(Error::Param {
                stage: "tile",
                field: "gzip_level".into(),
                expected: "1 (fastest) ..= 9 (smallest); default 2".into(),
                found: self.gzip_level.to_string(),
            });
        }
        Ok(())
    }
}

/// One octree node: a cube over the means and the original splats inside it.
#[derive(Debug)]
struct Node {
    /// Cube minimum corner, training frame (Y-up), metres.
    min: [f64; 3],
    /// Cube edge length, metres.
    edge: f64,
    depth: u32,
    /// Indices of the original splats in this leaf (empty for parents).
    indices: Vec<u32>,
    /// Child node indices in the arena (always larger than this node's index).
    children: Vec<usize>,
    /// Tile file stem: "r" then one octant digit per level ("r" + "l" for the single leaf under a
    /// merged root of a small input).
    name: String,
}

impl Node {
    fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}

/// Tile an in-memory splat set into `out_dir/tileset.json` + `out_dir/tiles/<name>.glb`.
///
/// Guarantees: every original splat is in exactly one leaf (leaf splat counts sum to N);
/// every tile has content; leaves have geometricError 0 and every child's error is ≤ its
/// parent's; each tile's decoded content lies inside its bounding box; all files are written
/// atomically (temporary name + rename), tiles before `tileset.json`. Not guaranteed: leaf sizes
/// ≤ `max_splats_per_tile` at `max_depth`; files of an earlier run with other names are not
/// removed.
///
/// - `splats`: N ≥ 1 splats, means in metres in the training frame (treated as glTF Y-up).
/// - `params`: see [`SplatTileParams`].
/// - `out_dir`: created if missing.
///
/// # Errors
/// [`Error::Param`] for `max_splats_per_tile` = 0; [`Error::Format`] wrapping
/// `InvalidInput` for N = 0, inconsistent array lengths or NaN/Inf values (with the splat
/// index); [`Error::Format`] wrapping `Io` when a file cannot be written.
pub fn tile_splats(
    splats: &GaussianSplats,
    params: &SplatTileParams,
    out_dir: &Path,
) -> Result<TileReport> {
    check_tile_inputs(splats, params)?;
    let nodes = build_octree(splats, params);

    let tiles_dir = out_dir.join("tiles");
    let k3 = splats.sh_coeffs_per_channel() * 3;

    // Leaves, grouped by parent, parents in parallel: each leaf's splats are gathered once (the
    // only random-access pass over the input), added to the parent's merge grid, boxed, encoded
    // relative to the box centre and written, then dropped — so the copies of the input are never
    // all in memory at once.
    let leaf_parents: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].children.iter().any(|&c| nodes[c].is_leaf()))
        .collect();
    let leaf_results: Vec<LeafPass> = leaf_parents
        .par_iter()
        .map(|&p| -> Result<_> {
            let mut grid = Grid::new(&nodes[p], k3);
            let mut leaves = Vec::new();
            for &c in nodes[p].children.iter().filter(|&&c| nodes[c].is_leaf()) {
                let content = gather(splats, &nodes[c].indices);
                for j in 0..content.len() {
                    grid.add_splat(&content, j);
                }
                let bbox = content_aabb(&content);
                let glb = encode_tile(content, bbox.center(), params)?;
                write_atomic(&tiles_dir.join(format!("{}.glb", nodes[c].name)), &glb)?;
                leaves.push((c, bbox, glb.len() as u64));
            }
            Ok((p, grid, leaves))
        })
        .collect::<Result<_>>()?;
    let mut boxes = vec![Aabb::EMPTY; nodes.len()];
    let mut sizes = vec![0u64; nodes.len()];
    let mut leaf_grids: Vec<Option<Grid>> = (0..nodes.len()).map(|_| None).collect();
    for (p, grid, leaves) in leaf_results {
        leaf_grids[p] = Some(grid);
        for (c, bbox, size) in leaves {
            boxes[c] = bbox;
            sizes[c] = size;
        }
    }

    // Merged content of every parent, in the training frame.
    let contents = parent_contents(splats, &nodes, leaf_grids);
    nodes
        .par_iter()
        .zip(contents.par_iter())
        .zip(boxes.par_iter_mut())
        .filter(|((node, _), _)| !node.is_leaf())
        .for_each(|((_, content), bbox)| *bbox = content_aabb(content));

    // Boxes bottom-up: own content's 3σ box ∪ children's boxes (children come later in the arena).
    for i in (0..nodes.len()).rev() {
        for &c in &nodes[i].children {
            let child = boxes[c];
            boxes[i].union(&child);
        }
    }
    // geometricError bottom-up.
    let mut errors = vec![0.0f64; nodes.len()];
    for i in (0..nodes.len()).rev() {
        if !nodes[i].is_leaf() {
            let cell = nodes[i].edge / MERGE_GRID_CELLS as f64;
            let own = cell * 3f64.sqrt();
            errors[i] = nodes[i]
                .children
                .iter()
                .map(|&c| errors[c])
                .fold(own, f64::max);
        }
    }

    // Encode and write the parents, each relative to its box centre.
    let parent_sizes: Vec<(usize, u64)> = nodes
        .par_iter()
        .enumerate()
        .zip(contents.into_par_iter())
        .filter(|((_, node), _)| !node.is_leaf())
        .map(|((i, node), content)| -> Result<(usize, u64)> {
            let glb = encode_tile(content, boxes[i].center(), params)?;
            write_atomic(&tiles_dir.join(format!("{}.glb", node.name)), &glb)?;
            Ok((i, glb.len() as u64))
        })
        .collect::<Result<_>>()?;
    for (i, size) in parent_sizes {
        sizes[i] = size;
    }

    let root = build_tile(&nodes, &boxes, &errors, 0, [0.0; 3]);
    let tileset_path = write_tileset(
        out_dir,
        root,
        boxes[0].diagonal().max(errors[0]),
        &[KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2],
        true,
    )?;

    let levels = nodes.iter().map(|n| n.depth).max().unwrap_or(0) + 1;
    tracing::info!(
        tiles = nodes.len(),
        levels,
        splats = splats.len(),
        "splat tileset written"
    );
    Ok(TileReport {
        tiles: nodes.len(),
        levels,
        content_bytes: sizes.iter().sum(),
        tileset_path,
    })
}

/// What the leaf pass of [`tile_splats`] returns per parent: the parent's index, its merge grid
/// with its leaf children's splats added, and per leaf child (index, content box, GLB bytes).
type LeafPass = (usize, Grid, Vec<(usize, Aabb, u64)>);

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

fn build_octree(splats: &GaussianSplats, params: &SplatTileParams) -> Vec<Node> {
    let n = splats.len();
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in splats.means.chunks_exact(3) {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a] as f64);
            hi[a] = hi[a].max(p[a] as f64);
        }
    }
    // A cube, slightly enlarged so the maximum lands inside the last cell; 1 mm minimum edge.
    let edge = (0..3).map(|a| hi[a] - lo[a]).fold(1e-3, f64::max) * (1.0 + 1e-9);
    let mut nodes = vec![Node {
        min: lo,
        edge,
        depth: 0,
        indices: (0..n as u32).collect(),
        children: Vec::new(),
        name: "r".into(),
    }];
    let mut i = 0;
    while i < nodes.len() {
        if nodes[i].indices.len() > params.max_splats_per_tile && nodes[i].depth < params.max_depth
        {
            let half = nodes[i].edge / 2.0;
            let min = nodes[i].min;
            let mut octants: [Vec<u32>; 8] = Default::default();
            for &s in &nodes[i].indices {
                let p = &splats.means[s as usize * 3..s as usize * 3 + 3];
                let o = (0..3).fold(0, |o, a| {
                    o | (((p[a] as f64 >= min[a] + half) as usize) << a)
                });
                octants[o].push(s);
            }
            nodes[i].indices = Vec::new(); // parents merge from moments, see `parent_contents`
            for (o, indices) in octants.into_iter().enumerate() {
                if indices.is_empty() {
                    continue;
                }
                let child = Node {
                    min: std::array::from_fn(|a| min[a] + if o >> a & 1 == 1 { half } else { 0.0 }),
                    edge: half,
                    depth: nodes[i].depth + 1,
                    indices,
                    children: Vec::new(),
                    name: format!("{}{o}", nodes[i].name),
                };
                nodes.push(child);
                let c = nodes.len() - 1;
                nodes[i].children.push(c);
            }
        } else if nodes[i].indices.len() > params.max_splats_per_tile {
            tracing::warn!(
                tile = %nodes[i].name,
                splats = nodes[i].indices.len(),
                max_depth = params.max_depth,
                "leaf at max_depth holds more than max_splats_per_tile"
            );
        }
        i += 1;
    }
    // A small input is a single leaf: put a merged root above it.
    if nodes.len() == 1 {
        let leaf = Node {
            min: nodes[0].min,
            edge: nodes[0].edge,
            depth: 1,
            indices: std::mem::take(&mut nodes[0].indices),
            children: Vec::new(),
            name: "rl".into(),
        };
        nodes.push(leaf);
        nodes[0].children.push(1);
    }
    nodes
}

/// Merged content of every parent (arena order; leaves get an empty set), built level by level
/// from the deepest parents up (`moments`), each level's nodes in parallel. `leaf_grids[p]` holds
/// parent p's grid with its leaf children's splats already added (see [`tile_splats`]); `None`
/// for a parent whose leaf children are still to be added from `splats`.
fn parent_contents(
    splats: &GaussianSplats,
    nodes: &[Node],
    mut leaf_grids: Vec<Option<Grid>>,
) -> Vec<GaussianSplats> {
    let k3 = splats.sh_coeffs_per_channel() * 3;
    let mut contents: Vec<GaussianSplats> = vec![GaussianSplats::default(); nodes.len()];
    let mut grids: Vec<Option<Grid>> = (0..nodes.len()).map(|_| None).collect();
    let max_depth = nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    for depth in (0..=max_depth).rev() {
        let level: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].depth == depth && !nodes[i].is_leaf())
            .collect();
        let started: Vec<(usize, Option<Grid>)> =
            level.iter().map(|&i| (i, leaf_grids[i].take())).collect();
        let built: Vec<(usize, Grid, GaussianSplats)> = started
            .into_par_iter()
            .map(|(i, leaf_grid)| {
                let leaves_added = leaf_grid.is_some();
                let mut grid = leaf_grid.unwrap_or_else(|| Grid::new(&nodes[i], k3));
                for &c in &nodes[i].children {
                    match &grids[c] {
                        Some(child) => grid.add_child(child),
                        None if leaves_added => {}
                        None => {
                            for &j in &nodes[c].indices {
                                grid.add_splat(splats, j as usize);
                            }
                        }
                    }
                }
                let content = grid.to_splats(splats.sh_degree);
                (i, grid, content)
            })
            .collect();
        for (i, grid, content) in built {
            for &c in &nodes[i].children {
                grids[c] = None;
            }
            grids[i] = Some(grid);
            contents[i] = content;
        }
    }
    contents
}

/// The splats at `indices`, in that order.
fn gather(s: &GaussianSplats, indices: &[u32]) -> GaussianSplats {
    let k3 = s.sh_coeffs_per_channel() * 3;
    let n = indices.len();
    let mut out = GaussianSplats {
        means: Vec::with_capacity(n * 3),
        log_scales: Vec::with_capacity(n * 3),
        rotations: Vec::with_capacity(n * 4),
        logit_opacities: Vec::with_capacity(n),
        sh_coeffs: Vec::with_capacity(n * k3),
        sh_degree: s.sh_degree,
    };
    for &i in indices {
        let i = i as usize;
        out.means.extend_from_slice(&s.means[i * 3..i * 3 + 3]);
        out.log_scales
            .extend_from_slice(&s.log_scales[i * 3..i * 3 + 3]);
        out.rotations
            .extend_from_slice(&s.rotations[i * 4..i * 4 + 4]);
        out.logit_opacities.push(s.logit_opacities[i]);
        out.sh_coeffs
            .extend_from_slice(&s.sh_coeffs[i * k3..(i + 1) * k3]);
    }
    out
}

/// Merge the original splats at `indices` on a [`MERGE_GRID_CELLS`]³ grid over `node`'s cube, one
/// Gaussian per non-empty cell, cells in x-fastest order: the direct (one pass per level)
/// reference that the tests hold `moments::Grid` to.
#[cfg(test)]
fn merge_on_grid(s: &GaussianSplats, node: &Node, indices: &[u32]) -> GaussianSplats {
    let cells = MERGE_GRID_CELLS as i64;
    let cell = node.edge / cells as f64;
    let mut keyed: Vec<(u32, u32)> = indices
        .iter()
        .map(|&i| {
            let p = &s.means[i as usize * 3..i as usize * 3 + 3];
            let c = |a: usize| {
                (((p[a] as f64 - node.min[a]) / cell).floor() as i64).clamp(0, cells - 1) as u32
            };
            let key = c(0) + MERGE_GRID_CELLS * (c(1) + MERGE_GRID_CELLS * c(2));
            (key, i)
        })
        .collect();
    keyed.sort_unstable();
    let mut out = GaussianSplats {
        sh_degree: s.sh_degree,
        ..Default::default()
    };
    let mut group = Vec::new();
    let mut start = 0;
    while start < keyed.len() {
        let key = keyed[start].0;
        group.clear();
        let mut end = start;
        while end < keyed.len() && keyed[end].0 == key {
            group.push(keyed[end].1);
            end += 1;
        }
        let m = merge_group(s, &group);
        out.means.extend(m.mean.map(|v| v as f32));
        out.log_scales.extend_from_slice(&m.log_scales);
        out.rotations.extend_from_slice(&m.rotation);
        out.logit_opacities.push(m.logit_opacity);
        out.sh_coeffs.extend_from_slice(&m.sh);
        start = end;
    }
    out
}

/// One moment-matched Gaussian.
#[derive(Debug, Clone, PartialEq)]
struct Merged {
    /// Mass-weighted mean, metres.
    mean: [f64; 3],
    log_scales: [f32; 3],
    /// wxyz.
    rotation: [f32; 4],
    logit_opacity: f32,
    /// `[K, 3]` mass-weighted SH.
    sh: Vec<f32>,
    /// Σ opacity·area of the inputs (m²).
    mass: f64,
}

fn sigmoid(x: f32) -> f64 {
    1.0 / (1.0 + (-(x as f64)).exp())
}

/// Rotation matrix (row-major, local → world) of a wxyz quaternion (normalised here); the
/// identity for a zero quaternion (an unrotated splat).
fn quat_to_matrix(q: &[f32]) -> [[f64; 3]; 3] {
    quaternion_to_rotation([0, 1, 2, 3].map(|i| f64::from(q[i]))).unwrap_or([
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
    ])
}

/// wxyz quaternion of a proper rotation matrix (row-major), Shepperd's method.
fn matrix_to_quat(m: &[[f64; 3]; 3]) -> [f64; 4] {
    let tr = m[0][0] + m[1][1] + m[2][2];
    let q = if tr > 0.0 {
        let s = (tr + 1.0).sqrt() * 2.0;
        [
            s / 4.0,
            (m[2][1] - m[1][2]) / s,
            (m[0][2] - m[2][0]) / s,
            (m[1][0] - m[0][1]) / s,
        ]
    } else if m[0][0] > m[1][1] && m[0][0] > m[2][2] {
        let s = (1.0 + m[0][0] - m[1][1] - m[2][2]).sqrt() * 2.0;
        [
            (m[2][1] - m[1][2]) / s,
            s / 4.0,
            (m[0][1] + m[1][0]) / s,
            (m[0][2] + m[2][0]) / s,
        ]
    } else if m[1][1] > m[2][2] {
        let s = (1.0 + m[1][1] - m[0][0] - m[2][2]).sqrt() * 2.0;
        [
            (m[0][2] - m[2][0]) / s,
            (m[0][1] + m[1][0]) / s,
            s / 4.0,
            (m[1][2] + m[2][1]) / s,
        ]
    } else {
        let s = (1.0 + m[2][2] - m[0][0] - m[1][1]).sqrt() * 2.0;
        [
            (m[1][0] - m[0][1]) / s,
            (m[0][2] + m[2][0]) / s,
            (m[1][2] + m[2][1]) / s,
            s / 4.0,
        ]
    };
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    q.map(|v| v / n)
}

/// Eigen-decomposition of a symmetric 3×3 by cyclic Jacobi rotations: eigenvalues and the
/// matrix whose columns are the matching unit eigenvectors (A = V·diag(λ)·Vᵀ).
fn eigen_symmetric3(mut a: [[f64; 3]; 3]) -> ([f64; 3], [[f64; 3]; 3]) {
    let mut v = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    for _ in 0..50 {
        let off = a[0][1].powi(2) + a[0][2].powi(2) + a[1][2].powi(2);
        let diag = a[0][0].powi(2) + a[1][1].powi(2) + a[2][2].powi(2);
        if off <= 1e-30 * diag || off == 0.0 {
            break;
        }
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            if a[p][q] == 0.0 {
                continue;
            }
            let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
            let t = if theta >= 0.0 { 1.0 } else { -1.0 }
                / (theta.abs() + (theta * theta + 1.0).sqrt());
            let c = 1.0 / (t * t + 1.0).sqrt();
            let s = t * c;
            for k in 0..3 {
                let (akp, akq) = (a[k][p], a[k][q]);
                a[k][p] = c * akp - s * akq;
                a[k][q] = s * akp + c * akq;
            }
            for k in 0..3 {
                let (apk, aqk) = (a[p][k], a[q][k]);
                a[p][k] = c * apk - s * aqk;
                a[q][k] = s * apk + c * aqk;
            }
            for row in &mut v {
                let (vp, vq) = (row[p], row[q]);
                row[p] = c * vp - s * vq;
                row[q] = s * vp + c * vq;
            }
        }
    }
    ([a[0][0], a[1][1], a[2][2]], v)
}

/// Area proxy of a Gaussian: product of its two largest standard deviations (m²).
fn area_of(scales: [f64; 3]) -> f64 {
    // The product of all three over the smallest, without a sort.
    let smallest = scales[0].min(scales[1]).min(scales[2]);
    let [a, b, c] = scales;
    if smallest == a {
        b * c
    } else if smallest == b {
        a * c
    } else {
        a * b
    }
}

/// Moment-match the splats at `group` into one Gaussian (Kerbl et al. 2024 §4):
/// mass mᵢ = αᵢ·areaᵢ; μ = Σmᵢμᵢ/M; Σ = Σmᵢ(Σᵢ + (μᵢ−μ)(μᵢ−μ)ᵀ)/M; SH = Σmᵢ·shᵢ/M;
/// α = min(1, M / area(merged)). Zero total mass falls back to equal weights.
#[cfg(test)]
fn merge_group(s: &GaussianSplats, group: &[u32]) -> Merged {
    let k3 = s.sh_coeffs_per_channel() * 3;
    let masses: Vec<f64> = group
        .iter()
        .map(|&i| {
            let i = i as usize;
            let scales = std::array::from_fn(|a| (s.log_scales[i * 3 + a] as f64).exp());
            sigmoid(s.logit_opacities[i]) * area_of(scales)
        })
        .collect();
    let mass: f64 = masses.iter().sum();
    let weights: Vec<f64> = if mass > 0.0 && mass.is_finite() {
        masses.iter().map(|m| m / mass).collect()
    } else {
        vec![1.0 / group.len() as f64; group.len()]
    };
    // Relative to the first mean, for precision far from the origin.
    let origin: [f64; 3] = std::array::from_fn(|a| s.means[group[0] as usize * 3 + a] as f64);
    let rel =
        |i: usize| -> [f64; 3] { std::array::from_fn(|a| s.means[i * 3 + a] as f64 - origin[a]) };
    let mut mu = [0.0; 3];
    for (&i, w) in group.iter().zip(&weights) {
        let p = rel(i as usize);
        for a in 0..3 {
            mu[a] += w * p[a];
        }
    }
    let mut cov = [[0.0; 3]; 3];
    let mut sh = vec![0.0f64; k3];
    for (&i, w) in group.iter().zip(&weights) {
        let i = i as usize;
        let r = quat_to_matrix(&s.rotations[i * 4..i * 4 + 4]);
        let var: [f64; 3] = std::array::from_fn(|a| (2.0 * s.log_scales[i * 3 + a] as f64).exp());
        let p = rel(i);
        let d: [f64; 3] = std::array::from_fn(|a| p[a] - mu[a]);
        for row in 0..3 {
            for col in 0..3 {
                let own: f64 = (0..3).map(|k| r[row][k] * var[k] * r[col][k]).sum();
                cov[row][col] += w * (own + d[row] * d[col]);
            }
        }
        for (acc, v) in sh.iter_mut().zip(&s.sh_coeffs[i * k3..(i + 1) * k3]) {
            *acc += w * *v as f64;
        }
    }
    let mean = std::array::from_fn(|a| origin[a] + mu[a]);
    gaussian_from_moments(mass, mean, cov, sh)
}

/// The Gaussian of merged moments: total mass M (m²), mean (metres), mass-weighted covariance
/// (m²) and mass-weighted SH `[K, 3]`; scales and rotation from the covariance's eigenvectors,
/// α = min(1 − ε, M / area(merged)) (Kerbl et al. 2024 §4).
fn gaussian_from_moments(mass: f64, mean: [f64; 3], cov: [[f64; 3]; 3], sh: Vec<f64>) -> Merged {
    let (lambda, mut vecs) = eigen_symmetric3(cov);
    // A proper rotation: flip the last axis if the eigenvectors form a left-handed basis.
    let det = vecs[0][0] * (vecs[1][1] * vecs[2][2] - vecs[1][2] * vecs[2][1])
        - vecs[0][1] * (vecs[1][0] * vecs[2][2] - vecs[1][2] * vecs[2][0])
        + vecs[0][2] * (vecs[1][0] * vecs[2][1] - vecs[1][1] * vecs[2][0]);
    if det < 0.0 {
        for row in &mut vecs {
            row[2] = -row[2];
        }
    }
    let scales = lambda.map(|l| l.max(MIN_VARIANCE_M2).sqrt());
    let alpha = (mass / area_of(scales)).clamp(0.0, MAX_MERGED_OPACITY);
    let alpha = if alpha > 0.0 { alpha } else { 1e-6 };
    Merged {
        mean,
        log_scales: scales.map(|v| v.ln() as f32),
        rotation: matrix_to_quat(&vecs).map(|v| v as f32),
        logit_opacity: (alpha / (1.0 - alpha)).ln() as f32,
        sh: sh.into_iter().map(|v| v as f32).collect(),
        mass,
    }
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
    let mut options = SplatGlbOptions::default();
    let mut fb = TILE_FRACTIONAL_BITS;
    while fb > 0 && max_abs >= spz_position_limit_m(fb) - 1.0 / (1u64 << fb) as f64 {
        fb -= 1;
    }
    options.spz.fractional_bits = fb;
    options.spz.gzip_level = params.gzip_level;
    if params.antialiased {
        options.spz.antialiasing = SpzAntialiasing::Antialiased;
    }
    Ok(write_splat_glb_with(&local, &options)?)
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

/// The tile of node `i`; `parent_center` is the parent's box centre (training frame; origin for
/// the root).
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
    use kiln_formats::splats::glb::read_splat_glb;
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
        let s = read_splat_glb(&bytes).unwrap();
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
                assert!(content.len() <= (MERGE_GRID_CELLS as usize).pow(3));
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
            let c = read_splat_glb(
                &std::fs::read(dir.path().join(&tile.content.as_ref().unwrap().uri)).unwrap(),
            )
            .unwrap();
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
        assert!(root.len() < 1_000 && !root.is_empty());
        assert_eq!(root.sh_degree, 2);
    }

    #[test]
    fn tiling_the_real_plush_dog_keeps_every_splat() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/datasets/splat-plushdog-smartdatascan/point_cloud_29999_clean.ply");
        let s = kiln_formats::splats::ply::read_ply(&p).unwrap();
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
    fn merging_two_identical_splats_doubles_mass_and_keeps_the_mean() {
        // Hand calculation: scales 0.1, 0.2, 0.4 m → area 0.2·0.4 = 0.08 m²; opacity 0.3 →
        // mass 0.024 each, 0.048 total; same covariance → same scales → α = 0.048/0.08 = 0.6.
        let one = GaussianSplats {
            means: vec![1.0, 2.0, 3.0],
            log_scales: vec![0.1f32.ln(), 0.2f32.ln(), 0.4f32.ln()],
            rotations: vec![1.0, 0.0, 0.0, 0.0],
            logit_opacities: vec![(0.3f32 / 0.7).ln()],
            sh_coeffs: vec![0.5, -0.25, 1.0],
            sh_degree: 0,
        };
        let two = gather(&one, &[0, 0]);
        let m = merge_group(&two, &[0, 1]);
        assert!((m.mass - 0.048).abs() < 1e-7, "{}", m.mass);
        assert_eq!(m.mean, [1.0, 2.0, 3.0]);
        assert!((sigmoid(m.logit_opacity) - 0.6).abs() < 1e-5);
        let mut got: Vec<f32> = m.log_scales.map(f32::exp).to_vec();
        got.sort_by(f32::total_cmp);
        for (g, e) in got.iter().zip([0.1, 0.2, 0.4]) {
            assert!((g - e).abs() < 1e-5, "{got:?}");
        }
        assert_eq!(m.sh, vec![0.5, -0.25, 1.0]);
        // Two points 2 m apart along x with tiny scales: variance along x = 1 m² → scale 1 m.
        let mut pair = gather(&one, &[0, 0]);
        pair.means[3] += 2.0;
        pair.log_scales = vec![-9.0; 6];
        let m = merge_group(&pair, &[0, 1]);
        assert!((m.mean[0] - 2.0).abs() < 1e-6);
        assert!((m.log_scales.iter().cloned().fold(f32::MIN, f32::max).exp() - 1.0).abs() < 1e-4);
    }

    /// The bottom-up moments (one pass over the splats) give the same parents as merging every
    /// parent directly from all original splats under it.
    #[test]
    fn bottom_up_moments_match_direct_merging() {
        let mut s = random_splats(6000, 2, 40.0, 11);
        // Far from the origin, where precision matters.
        for m in s.means.chunks_exact_mut(3) {
            m[0] += 5000.0;
            m[2] -= 3000.0;
        }
        let params = SplatTileParams {
            max_splats_per_tile: 60,
            max_depth: 16,
            ..Default::default()
        };
        let nodes = build_octree(&s, &params);
        assert!(nodes.iter().map(|n| n.depth).max().unwrap() >= 3);
        let fast = parent_contents(&s, &nodes, (0..nodes.len()).map(|_| None).collect());
        fn leaves_under(nodes: &[Node], i: usize, out: &mut Vec<u32>) {
            out.extend_from_slice(&nodes[i].indices);
            for &c in &nodes[i].children {
                leaves_under(nodes, c, out);
            }
        }
        let mut parents = 0;
        for (i, node) in nodes.iter().enumerate() {
            if node.is_leaf() {
                assert!(fast[i].is_empty());
                continue;
            }
            parents += 1;
            let mut under = Vec::new();
            leaves_under(&nodes, i, &mut under);
            let direct = merge_on_grid(&s, node, &under);
            let got = &fast[i];
            assert_eq!(got.len(), direct.len(), "node {}", node.name);
            let close = |a: &[f32], b: &[f32], tol: f32, what: &str| {
                for (x, y) in a.iter().zip(b) {
                    assert!(
                        (x - y).abs() <= tol * (1.0 + y.abs()),
                        "{} {what}: {x} vs {y}",
                        node.name
                    );
                }
            };
            close(&got.means, &direct.means, 1e-6, "means");
            close(&got.log_scales, &direct.log_scales, 1e-3, "log_scales");
            close(
                &got.logit_opacities,
                &direct.logit_opacities,
                1e-3,
                "opacities",
            );
            close(&got.sh_coeffs, &direct.sh_coeffs, 1e-4, "sh");
        }
        assert!(parents >= 3);
    }

    #[test]
    fn eigen_decomposition_reconstructs_the_covariance() {
        let r = quat_to_matrix(&[0.8, 0.2, -0.4, 0.4]);
        let var = [4.0, 0.25, 1.0];
        let a: [[f64; 3]; 3] = std::array::from_fn(|i| {
            std::array::from_fn(|j| (0..3).map(|k| r[i][k] * var[k] * r[j][k]).sum())
        });
        let (l, v) = eigen_symmetric3(a);
        for i in 0..3 {
            for j in 0..3 {
                let back: f64 = (0..3).map(|k| v[i][k] * l[k] * v[j][k]).sum();
                assert!((back - a[i][j]).abs() < 1e-10);
            }
        }
        let q = matrix_to_quat(&r);
        let r2 = quat_to_matrix(&q.map(|v| v as f32));
        for i in 0..3 {
            for j in 0..3 {
                assert!((r[i][j] - r2[i][j]).abs() < 1e-6);
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
        assert_eq!(report.levels, 4);
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
}
