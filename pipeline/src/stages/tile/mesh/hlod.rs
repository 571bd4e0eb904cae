//! The HLOD tree of a mesh: leaves from a kd-split of the full-resolution triangles, parents from
//! re-simplifying the union of their children with the cell border locked.
//!
//! Sources: meshoptimizer 1.x `src/meshoptimizer.h` (vendored by `meshopt` 0.7):
//! `meshopt_simplifyWithAttributes`' `vertex_lock` ("vertices that can't be moved") — the explicit
//! form of `meshopt_SimplifyLockBorder` ("individual levels of detail can be stitched together
//! later without gaps"), `meshopt_generatePositionRemap`,
//! `meshopt_simplifyScale` (relative → absolute error); the group-locking scheme of meshoptimizer's
//! `demo/clusterlod.h` after Karis 2021 ("Nanite", SIGGRAPH course): lock what is shared with
//! neighbours, so siblings never disagree on a border until a common ancestor merges them;
//! shared/research/tiles-formats.md §4.
//!
//! Invariants (tested in `super::tests`):
//! * every node's triangles index the welded mesh's vertex array — simplification only drops
//!   triangles and never creates or moves vertices, so a border vertex is the *same* vertex in
//!   every tile that has it;
//! * a leaf holds ≤ `max_triangles` original triangles (median kd-split by centroid);
//! * a parent's cell border (vertices its cell shares with triangles outside it) is locked: it is
//!   kept vertex for vertex and edge for edge;
//! * `error_m` ≥ the measured deviation of the node's surface from the full-resolution surface
//!   of its cell (a certified upper bound of the two-sided Hausdorff distance, see
//!   [`super::deviation`]), ≥ its children's `error_m` (monotone towards the root); leaves 0.
//!
//! Attribute-aware simplification (meshopt `meshopt_simplifyWithAttributes`): normals (weight
//! 0.5) and vertex colours (premultiplied RGB, weight 1) as gltfpack does (meshoptimizer
//! `gltf/mesh.cpp`, `simplifyAttributes`); texture coordinates with a weight that turns a UV
//! shift into the surface distance it slides the texture by (see [`uv_weight`]), so a collapse
//! that drags a texture costs what the same move of the surface would. UV seams: the welded
//! mesh splits vertices where UVs differ (see `decimate::weld`); meshopt finds vertices that
//! share a position (its own position remap) and keeps such seams, collapsing only along them;
//! mirrored UV charts (triangles of both UV windings around one vertex, which have no seam in the
//! index buffer) are split for the simplifier as gltfpack's `simplifyUvSplit` does (a parent
//! still over budget without the error limit is retried without this split, whose extra seams
//! can stall it); where `Permissive` lets meshopt collapse across seams (the kd root over
//! budget), UV-seam vertices are marked `Protect` (gltfpack's `simplifyProtect`).
//!
//! Measured error: the two-sided Hausdorff distance (Cignoni, Rocchini, Scopigno 1998, "Metro:
//! measuring error on simplified surfaces"), bounded from above in [`super::deviation`].

use kiln_formats::mesh::compact;
use meshopt::{SimplifyOptions, SimplifyVertex, VertexDataAdapter};

use super::deviation::{Surface, hausdorff_bound};
use crate::{Error, Result};

/// Fraction of its children's triangles a parent aims for (one halving per level).
pub const PARENT_TRIANGLE_RATIO: f64 = 0.5;

/// A coarser level above the kd root is added only when it removes at least this fraction of the
/// triangles; otherwise the simplifier has stalled (locked borders, topology) and the chain stops.
const MIN_CHAIN_REDUCTION: f64 = 0.1;

/// A relative error limit meshopt never reaches (errors are relative to the extent, so ≤ ~1):
/// used for the second attempt on a parent that stayed over the triangle budget.
const UNLIMITED_ERROR: f32 = 1.0e3;

/// Samples per side of the first pass of one deviation measurement (see [`super::deviation`]):
/// they only set the level the certified bound is driven to (its largest sampled distance), so
/// fewer samples cost more splitting in the second pass, never a bound below the truth; 4,096
/// (plus every vertex) finds the maximum of the Khronos samples' roots to within the 2 %
/// tolerance; measuring every parent of DamagedHelmet's tree costs ≈ 0.4 s on 2 cores.
pub const DEVIATION_SAMPLES: usize = 4096;

/// Largest cell (leaf triangles) whose parent is measured directly against its leaves. Above it a
/// parent `P` is measured against its descendants `D` [`DEVIATION_FRONTIER_LEVELS`] levels down
/// (or its leaves where the tree is shallower) and their own bounds are added:
/// `H(P, L) ≤ H(P, D) + max_i H(D_i, L_i)` (the triangle inequality of the Hausdorff distance,
/// `L` the leaves, `L_i` those under `D_i`). Still a certified bound, looser by at most the
/// descendants' errors (about 1/2^levels of the parent's, errors roughly doubling per level), and
/// a level costs its descendants' triangles instead of the whole mesh's: measuring every level
/// against the leaves measured the full mesh once per level (a 10 M-triangle mesh spent 35
/// minutes there). 262,144 triangles keeps every Khronos and PlayCanvas sample fully direct.
pub const DIRECT_DEVIATION_MAX_TRIANGLES: usize = 1 << 18;

/// How many levels below a large cell's parent its deviation is measured (see
/// [`DIRECT_DEVIATION_MAX_TRIANGLES`]).
pub const DEVIATION_FRONTIER_LEVELS: usize = 3;

/// meshopt attribute weight of each normal component (gltfpack's value).
const NORMAL_WEIGHT: f32 = 0.5;

/// meshopt attribute weight of each premultiplied colour component (gltfpack's value).
const COLOR_WEIGHT: f32 = 1.0;

/// One tile of the tree.
#[derive(Debug, Clone)]
pub struct HlodNode {
    /// `[F_tile, 3]` flattened triangles, indices into the welded mesh's vertices.
    pub indices: Vec<u32>,
    /// Geometric error of this content against the full-resolution mesh, metres; 0 for leaves.
    /// max(`measured_m`, children's `error_m`): the measured distance to the full-resolution
    /// surface, kept monotone towards the root.
    pub error_m: f64,
    /// Certified upper bound of the two-sided Hausdorff distance between this content and the
    /// full-resolution triangles of its cell (its leaves'), metres; 0 for leaves. Measured
    /// directly for cells of ≤ [`DIRECT_DEVIATION_MAX_TRIANGLES`], else through the children
    /// (see there).
    pub measured_m: f64,
    /// Finer tiles that REPLACE this one.
    pub children: Vec<HlodNode>,
}

impl HlodNode {
    /// Triangles of this tile's content.
    pub fn triangle_count(&self) -> usize {
        self.indices.len() / 3
    }

    /// The tiles `levels` below this one (leaves where the tree ends sooner; itself at 0).
    pub fn descendants<'a>(&'a self, levels: usize, out: &mut Vec<&'a HlodNode>) {
        if levels == 0 || self.children.is_empty() {
            out.push(self);
        } else {
            for c in &self.children {
                c.descendants(levels - 1, out);
            }
        }
    }

    /// Triangles of the leaves under this tile (its own for a leaf).
    pub fn leaf_triangle_count(&self) -> usize {
        if self.children.is_empty() {
            self.triangle_count()
        } else {
            self.children.iter().map(Self::leaf_triangle_count).sum()
        }
    }
}

/// How the tree is built (see [`super::MeshTileParams`]).
#[derive(Debug, Clone, Copy)]
pub struct HlodOptions {
    /// Leaf budget (and parent target cap), triangles; ≥ 1.
    pub max_triangles: usize,
    /// Coarse single-child levels are added until the root holds ≤ this fraction of F.
    pub root_fraction: f64,
    /// meshopt `target_error` of one simplification, relative to the simplified tile's extent.
    pub max_simplify_error: f32,
    /// Cells of more leaf triangles are measured through their children (see
    /// [`DIRECT_DEVIATION_MAX_TRIANGLES`], the value the tile stage uses).
    pub direct_deviation_max_triangles: usize,
}

/// Build the HLOD tree of `positions` / `indices` (a welded mesh, see `decimate::weld`).
///
/// Leaves: split the triangles at the median centroid along the longest axis of their centroids'
/// box, recursively, until each part has ≤ `max_triangles` (each part then is a leaf; leaves are
/// numbered depth-first, so every subtree's cell is a range of leaf ids). Parents: union of the
/// two children, simplified towards `PARENT_TRIANGLE_RATIO` of it with the cell border locked;
/// when the result is over `max_triangles` it is simplified again without an error limit (and,
/// for the kd root only, across attribute seams: `SimplifyOptions::Permissive`), and is left over
/// the budget when locked borders and seams stop the simplifier. Above
/// the kd root, single-child levels halve the root until it holds ≤ `root_fraction · F` triangles
/// (or the simplifier stalls), so small meshes still get coarse levels.
///
/// Cell border = the vertices (by exact position, so both sides of a UV seam) used both by a
/// triangle inside the cell and by one outside. They are locked explicitly (meshopt
/// `vertex_lock`) rather than with `SimplifyOptions::LockBorder`: LockBorder locks every
/// *topological* border of the union, which is the cell border plus the mesh's own open edges;
/// meshes made of many open parts (carbon-sphere: thousands of open cylinders) would then never
/// get below ~1/8 of their triangles. The own open edges are shared with no other tile, so moving
/// them cannot open a crack.
///
/// Materials: `vertex_materials` (`[V]`, see `decimate::vertex_materials`) gives each vertex's
/// material; after `decimate::weld` no vertex is shared by two materials, so a material border is
/// an attribute seam, which the simplifier keeps without a lock (collapses run along it, not
/// across it), and no triangle is merged across materials. This is preferred to simplifying each
/// material on its own with its border locked: locked material borders would stop CAD assemblies
/// (many small parts, one colour each) from simplifying at all. Where `Permissive` is used (the
/// kd root over budget), the vertices on material borders are marked `Protect`, which keeps
/// meshopt from collapsing across that seam.
///
/// Attributes (`attributes`, optional per kind, `[V, ·]` like `positions`) steer the collapses,
/// see the module docs; they do not change which vertices exist or are locked.
///
/// Errors: each parent's [`HlodNode::measured_m`] is [`hausdorff_bound`] between its content and
/// its cell's leaf triangles ([`DEVIATION_SAMPLES`] samples a side; for cells larger than
/// `options.direct_deviation_max_triangles`, between its content and its descendants a few
/// levels down, plus their bounds), and `error_m` the larger of
/// that and its children's `error_m`. meshopt's own estimate (`result_error` ×
/// `meshopt_simplifyScale`) only steers the simplification: it includes the attribute terms, so it
/// overstates the geometric distance (up to 3.4× on Avocado at 64 triangles per tile), and a
/// larger geometricError makes clients fetch finer tiles than the measured error needs.
///
/// # Errors
/// [`Error::Input`] when meshopt rejects the vertex buffer.
pub fn build_hlod(
    positions: &[[f32; 3]],
    indices: &[u32],
    vertex_materials: &[u32],
    attributes: VertexAttributes<'_>,
    options: HlodOptions,
) -> Result<HlodNode> {
    let f = indices.len() / 3;
    let centroids: Vec<[f32; 3]> = indices
        .chunks_exact(3)
        .map(|t| {
            let [a, b, c] = [0, 1, 2].map(|k| positions[t[k] as usize]);
            [0, 1, 2].map(|k| (a[k] + b[k] + c[k]) / 3.0)
        })
        .collect();
    let mut next_leaf = 0u32;
    let part = partition(
        &centroids,
        (0..f as u32).collect(),
        options.max_triangles.max(1),
        &mut next_leaf,
    );

    // Leaf-id range of the triangles around each position.
    let adapter = adapter(positions)?;
    let position_of = meshopt::generate_position_remap(&adapter);
    let mut range = vec![(u32::MAX, 0u32); positions.len()];
    part.for_each_leaf(&mut |leaf, triangles| {
        for &t in triangles {
            for k in 0..3 {
                let p = position_of[indices[t as usize * 3 + k] as usize] as usize;
                range[p].0 = range[p].0.min(leaf);
                range[p].1 = range[p].1.max(leaf);
            }
        }
    });
    let vertex_range: Vec<(u32, u32)> = position_of.iter().map(|&p| range[p as usize]).collect();
    let material_border = material_borders(&position_of, vertex_materials);
    let uv_seam = attributes
        .uvs
        .map(|uvs| uv_seams(&position_of, uvs))
        .unwrap_or_else(|| vec![false; positions.len()]);
    let weighted = WeightedAttributes::new(positions, indices, attributes);
    let ctx = Ctx {
        positions,
        indices,
        vertex_range: &vertex_range,
        material_border: &material_border,
        uv_seam: &uv_seam,
        attributes: &weighted,
        uvs: attributes.uvs,
        vertex_materials,
        material_count: vertex_materials
            .iter()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1),
        all_leaves: part.leaves(),
        options,
    };
    let mut root = ctx.build(&part)?;

    let root_target = ((f as f64) * options.root_fraction).ceil() as usize;
    while root.triangle_count() > root_target.max(1) {
        let current = root.triangle_count();
        let target = ((current as f64) * PARENT_TRIANGLE_RATIO).ceil() as usize;
        let (simplified, _estimate_m) = ctx.simplify(
            &root.indices,
            ctx.all_leaves,
            target,
            options.max_simplify_error,
            Pass::DEFAULT,
        )?;
        let kept = simplified.len() / 3;
        if simplified.is_empty() || (kept as f64) > (current as f64) * (1.0 - MIN_CHAIN_REDUCTION) {
            break;
        }
        let measured_m = ctx.measure_against(&simplified, std::slice::from_ref(&root), || {
            indices.to_vec()
        });
        let error_m = root.error_m.max(measured_m);
        root = HlodNode {
            indices: simplified,
            error_m,
            measured_m,
            children: vec![root],
        };
    }
    Ok(root)
}

/// The kd partition: triangle ids per leaf, leaves numbered depth-first.
enum Part {
    Leaf {
        id: u32,
        triangles: Vec<u32>,
    },
    Split {
        leaves: (u32, u32),
        children: Box<[Part; 2]>,
    },
}

impl Part {
    /// First and last leaf id under this part.
    fn leaves(&self) -> (u32, u32) {
        match self {
            Part::Leaf { id, .. } => (*id, *id),
            Part::Split { leaves, .. } => *leaves,
        }
    }

    fn for_each_leaf(&self, f: &mut impl FnMut(u32, &[u32])) {
        match self {
            Part::Leaf { id, triangles } => f(*id, triangles),
            Part::Split { children, .. } => {
                children[0].for_each_leaf(f);
                children[1].for_each_leaf(f);
            }
        }
    }
}

/// Median kd-split of `triangles` by centroid until parts hold ≤ `max_triangles`.
fn partition(
    centroids: &[[f32; 3]],
    mut triangles: Vec<u32>,
    max_triangles: usize,
    next_leaf: &mut u32,
) -> Part {
    if triangles.len() <= max_triangles {
        let id = *next_leaf;
        *next_leaf += 1;
        return Part::Leaf { id, triangles };
    }
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for &t in &triangles {
        for k in 0..3 {
            lo[k] = lo[k].min(centroids[t as usize][k]);
            hi[k] = hi[k].max(centroids[t as usize][k]);
        }
    }
    let axis = (0..3)
        .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
        .unwrap_or(0);
    let mid = triangles.len() / 2;
    triangles.select_nth_unstable_by(mid, |&a, &b| {
        centroids[a as usize][axis].total_cmp(&centroids[b as usize][axis])
    });
    let right = triangles.split_off(mid);
    let a = partition(centroids, triangles, max_triangles, next_leaf);
    let b = partition(centroids, right, max_triangles, next_leaf);
    Part::Split {
        leaves: (a.leaves().0, b.leaves().1),
        children: Box::new([a, b]),
    }
}

/// What the bottom-up pass needs.
struct Ctx<'a> {
    positions: &'a [[f32; 3]],
    indices: &'a [u32],
    /// `[V]` first and last leaf id among the triangles at each vertex's position.
    vertex_range: &'a [(u32, u32)],
    /// `[V]` whether a vertex of another material lies at this vertex's position.
    material_border: &'a [bool],
    /// `[V]` whether another vertex at this vertex's position has other texture coordinates.
    uv_seam: &'a [bool],
    /// What the simplifier weighs besides positions.
    attributes: &'a WeightedAttributes,
    /// `[V, 2]` texture coordinates set 0, for the UV-mirror split.
    uvs: Option<&'a [[f32; 2]]>,
    /// `[V]` material of each vertex.
    vertex_materials: &'a [u32],
    /// 1 + the largest material index in `vertex_materials`.
    material_count: usize,
    /// First and last leaf id of the whole mesh.
    all_leaves: (u32, u32),
    options: HlodOptions,
}

impl Ctx<'_> {
    /// Certified bound of the Hausdorff distance between the surfaces `simplified` and `full`
    /// (indices into `positions`), metres.
    fn measure(&self, simplified: &[u32], full: &[u32]) -> f64 {
        let surface = |indices| Surface {
            positions: self.positions,
            indices,
        };
        hausdorff_bound(surface(simplified), surface(full), DEVIATION_SAMPLES).hausdorff_m()
    }

    /// Certified bound of the Hausdorff distance between `simplified` and the full-resolution
    /// triangles of the cell of `children` (`leaves()` lists them): measured directly when the
    /// cell holds ≤ `options.direct_deviation_max_triangles`, else against the descendants
    /// [`DEVIATION_FRONTIER_LEVELS`] down plus their own bounds (see
    /// [`DIRECT_DEVIATION_MAX_TRIANGLES`]).
    fn measure_against(
        &self,
        simplified: &[u32],
        children: &[HlodNode],
        leaves: impl FnOnce() -> Vec<u32>,
    ) -> f64 {
        let leaf_triangles: usize = children.iter().map(HlodNode::leaf_triangle_count).sum();
        if leaf_triangles <= self.options.direct_deviation_max_triangles {
            return self.measure(simplified, &leaves());
        }
        let mut frontier = Vec::new();
        for c in children {
            c.descendants(DEVIATION_FRONTIER_LEVELS - 1, &mut frontier);
        }
        let content: Vec<u32> = frontier
            .iter()
            .flat_map(|d| d.indices.iter().copied())
            .collect();
        let below = frontier.iter().map(|d| d.measured_m).fold(0.0, f64::max);
        self.measure(simplified, &content) + below
    }

    /// The node of `part`: leaves as they are, parents simplified (the two halves in parallel).
    fn build(&self, part: &Part) -> Result<HlodNode> {
        let (left, right) = match part {
            Part::Leaf { triangles, .. } => {
                let leaf: Vec<u32> = triangles
                    .iter()
                    .flat_map(|&t| {
                        let t = t as usize * 3;
                        [self.indices[t], self.indices[t + 1], self.indices[t + 2]]
                    })
                    .collect();
                return Ok(HlodNode {
                    indices: leaf,
                    error_m: 0.0,
                    measured_m: 0.0,
                    children: Vec::new(),
                });
            }
            Part::Split { children, .. } => (&children[0], &children[1]),
        };
        // Rayon's threads enter the stage's span, so their warnings reach its summary.
        let span = tracing::Span::current();
        let (a, b) = rayon::join(
            || span.in_scope(|| self.build(left)),
            || span.in_scope(|| self.build(right)),
        );
        let children = vec![a?, b?];
        let union: Vec<u32> = children
            .iter()
            .flat_map(|c| c.indices.iter().copied())
            .collect();
        let target = (((union.len() / 3) as f64 * PARENT_TRIANGLE_RATIO).ceil() as usize)
            .min(self.options.max_triangles);
        let cell = part.leaves();
        let (mut simplified, _estimate_m) = self.simplify(
            &union,
            cell,
            target,
            self.options.max_simplify_error,
            Pass::DEFAULT,
        )?;
        // Over budget: first lift the error limit; then, only for a cell with no border (the kd
        // root), also allow collapses across attribute seams (meshopt `Permissive`), then removing
        // small disconnected parts (`Prune`). With locked
        // vertices, Permissive was seen to drop locked border edges (carbon-sphere, 8,192-triangle
        // tiles), so it is never used where a border must be kept.
        // Each attempt without the error limit first keeps, then drops, the UV-mirror split (its
        // extra seams can stall a tile that positions alone would bring under budget:
        // carbon-sphere at 8,192 triangles a tile).
        let unsplit = |options| Pass {
            options,
            split_mirrors: false,
        };
        let fallbacks: &[Pass] = if cell == self.all_leaves {
            &[
                Pass::DEFAULT,
                unsplit(SimplifyOptions::None),
                unsplit(SimplifyOptions::Permissive),
                unsplit(SimplifyOptions::Permissive.union(SimplifyOptions::Prune)),
            ]
        } else {
            &[Pass::DEFAULT, unsplit(SimplifyOptions::None)]
        };
        for &options in fallbacks {
            if simplified.len() / 3 <= self.options.max_triangles {
                break;
            }
            let (candidate, _estimate_m) =
                self.simplify(&union, cell, target, UNLIMITED_ERROR, options)?;
            // `Prune` can remove every triangle of a mesh made of many small material patches
            // (each patch is a component once seams split it): an over-budget parent is kept
            // rather than an empty one, which no client could draw.
            if candidate.is_empty() {
                tracing::warn!(
                    triangles = simplified.len() / 3,
                    budget = self.options.max_triangles,
                    "tile: the root stays over its triangle budget: simplifying further removed \
                     every triangle (material seams split the mesh into many small patches)"
                );
                break;
            }
            simplified = candidate;
        }
        let measured_m = self.measure_against(&simplified, &children, || {
            let mut cell_triangles = Vec::new();
            part.for_each_leaf(&mut |_, triangles| {
                cell_triangles.extend(triangles.iter().flat_map(|&t| {
                    let t = t as usize * 3;
                    [self.indices[t], self.indices[t + 1], self.indices[t + 2]]
                }));
            });
            cell_triangles
        });
        let children_m = children.iter().map(|c| c.error_m).fold(0.0, f64::max);
        Ok(HlodNode {
            indices: simplified,
            error_m: children_m.max(measured_m),
            measured_m,
            children,
        })
    }

    /// Simplify the triangles `global` (indices into `positions`) of the cell made of leaves
    /// `cell` towards `target_triangles`, with the cell border locked; returns the kept
    /// triangles (indices into `positions`) and the error in metres (meshopt's relative
    /// `result_error` × `simplify_scale` of these vertices). `max_error` is relative to the extent
    /// of these vertices (meshopt's convention).
    ///
    /// Every material of `global` stays in the result: when the simplifier removed all triangles
    /// of some material (a small part collapsed away), it runs again with those materials'
    /// vertices locked, so a parent draws every material its subtree draws.
    fn simplify(
        &self,
        global: &[u32],
        cell: (u32, u32),
        target_triangles: usize,
        max_error: f32,
        options: Pass,
    ) -> Result<(Vec<u32>, f64)> {
        let before = self.materials_of(global);
        let no_keep = vec![false; before.len()];
        let first =
            self.simplify_once(global, cell, target_triangles, max_error, options, &no_keep)?;
        let after = self.materials_of(&first.0);
        let lost: Vec<bool> = before.iter().zip(&after).map(|(&b, &a)| b && !a).collect();
        if !lost.contains(&true) {
            return Ok(first);
        }
        self.simplify_once(global, cell, target_triangles, max_error, options, &lost)
    }

    /// Per material: does some triangle of `global` use it?
    fn materials_of(&self, global: &[u32]) -> Vec<bool> {
        let mut used = vec![false; self.material_count];
        for t in global.chunks_exact(3) {
            used[self.vertex_materials[t[0] as usize] as usize] = true;
        }
        used
    }

    /// One meshopt run of [`Self::simplify`]; vertices of the materials flagged in `keep` are
    /// locked.
    fn simplify_once(
        &self,
        global: &[u32],
        cell: (u32, u32),
        target_triangles: usize,
        max_error: f32,
        pass: Pass,
        keep: &[bool],
    ) -> Result<(Vec<u32>, f64)> {
        let (vertices, local) = compact(global);
        // Lock + Protect: Protect keeps `Permissive` from collapsing across a seam at them.
        let mut locks: Vec<SimplifyVertex> = vertices
            .iter()
            .map(|&v| {
                let (lo, hi) = self.vertex_range[v as usize];
                if lo < cell.0 || hi > cell.1 || keep[self.vertex_materials[v as usize] as usize] {
                    SimplifyVertex::Lock | SimplifyVertex::Protect
                } else if self.material_border[v as usize] || self.uv_seam[v as usize] {
                    SimplifyVertex::Protect
                } else {
                    SimplifyVertex::None
                }
            })
            .collect();
        lock_ears(&local, &mut locks);
        // Mirrored UV charts: split after the locks, so a copy inherits its vertex's flags.
        let (mut vertices, mut local) = (vertices, local);
        if let (Some(uvs), true) = (self.uvs, pass.split_mirrors) {
            split_uv_mirrors(uvs, &mut vertices, &mut local, &mut locks);
        }
        let local_positions: Vec<[f32; 3]> = vertices
            .iter()
            .map(|&v| self.positions[v as usize])
            .collect();
        let adapter = adapter(&local_positions)?;
        let scale_m = f64::from(meshopt::simplify_scale(&adapter));
        let attributes = self.attributes.gather(&vertices);
        let mut rel_error = 0.0f32;
        let kept = meshopt::simplify_with_attributes_and_locks(
            &local,
            &adapter,
            &attributes,
            &self.attributes.weights,
            self.attributes.stride_bytes(),
            &locks,
            target_triangles * 3,
            max_error,
            pass.options,
            Some(&mut rel_error),
        );
        let kept = kept.iter().map(|&i| vertices[i as usize]).collect();
        Ok((kept, f64::from(rel_error) * scale_m))
    }
}

/// One simplifier configuration.
#[derive(Debug, Clone, Copy)]
struct Pass {
    /// meshopt options.
    options: SimplifyOptions,
    /// Split vertices on UV mirror lines ([`split_uv_mirrors`]).
    split_mirrors: bool,
}

impl Pass {
    /// No meshopt options, mirror lines split.
    const DEFAULT: Pass = Pass {
        options: SimplifyOptions::None,
        split_mirrors: true,
    };
}

/// The optional vertex attributes of the welded mesh the simplifier weighs (each `[V, ·]`, same
/// vertex order as the positions).
#[derive(Debug, Clone, Copy, Default)]
pub struct VertexAttributes<'a> {
    /// `[V, 3]` unit normals.
    pub normals: Option<&'a [[f32; 3]]>,
    /// `[V, 2]` texture coordinates set 0.
    pub uvs: Option<&'a [[f32; 2]]>,
    /// `[V, 4]` linear RGBA vertex colours.
    pub colors: Option<&'a [[f32; 4]]>,
}

/// `[V, n]` interleaved attribute values, already in the units the weights expect, with their
/// `[n]` meshopt weights (n ≤ 8 of meshopt's 32).
struct WeightedAttributes {
    values: Vec<f32>,
    weights: Vec<f32>,
}

impl WeightedAttributes {
    /// Normals (weight [`NORMAL_WEIGHT`]), premultiplied RGB colours ([`COLOR_WEIGHT`]) and UVs
    /// ([`uv_weight`]), each when present.
    fn new(positions: &[[f32; 3]], indices: &[u32], a: VertexAttributes<'_>) -> Self {
        let mut columns: Vec<(Vec<f32>, f32)> = Vec::new();
        if let Some(n) = a.normals {
            for k in 0..3 {
                columns.push((n.iter().map(|v| v[k]).collect(), NORMAL_WEIGHT));
            }
        }
        if let Some(c) = a.colors {
            for k in 0..3 {
                columns.push((c.iter().map(|v| v[k] * v[3]).collect(), COLOR_WEIGHT));
            }
        }
        if let Some(t) = a.uvs {
            let w = uv_weight(positions, indices, t);
            if w > 0.0 {
                for k in 0..2 {
                    columns.push((t.iter().map(|v| v[k]).collect(), w));
                }
            }
        }
        let n = columns.len();
        let mut values = vec![0.0f32; positions.len() * n];
        for (k, (column, _)) in columns.iter().enumerate() {
            for (v, &x) in column.iter().enumerate() {
                values[v * n + k] = if x.is_finite() { x } else { 0.0 };
            }
        }
        Self {
            values,
            weights: columns.into_iter().map(|(_, w)| w).collect(),
        }
    }

    fn stride_bytes(&self) -> usize {
        self.weights.len() * std::mem::size_of::<f32>()
    }

    /// `[vertices.len(), n]` the rows of `vertices`.
    fn gather(&self, vertices: &[u32]) -> Vec<f32> {
        let n = self.weights.len();
        let mut out = Vec::with_capacity(vertices.len() * n);
        for &v in vertices {
            out.extend_from_slice(&self.values[v as usize * n..(v as usize + 1) * n]);
        }
        out
    }
}

/// meshopt weight of a UV component: metres per UV unit at the mesh's mean texel scale,
/// `sqrt(Σ area_3D / Σ |area_UV|)`, divided by the mesh's extent (`meshopt_simplifyScale`: meshopt
/// measures positions in units of it). A UV shift δ then costs what moving the surface by the
/// distance the texture slides (δ · metres per UV unit) costs. 0 when the UVs span no area.
///
/// The extent is the whole mesh's while a tile's simplification rescales positions by the tile's
/// extent, so within smaller tiles UVs weigh relatively less than positions: a parent never
/// favours UV fidelity over shape more than the root does.
fn uv_weight(positions: &[[f32; 3]], indices: &[u32], uvs: &[[f32; 2]]) -> f32 {
    let (mut area_3d, mut area_uv) = (0.0f64, 0.0f64);
    for t in indices.chunks_exact(3) {
        let [a, b, c] = [0, 1, 2].map(|k| positions[t[k] as usize].map(f64::from));
        let e1 = [0, 1, 2].map(|k| b[k] - a[k]);
        let e2 = [0, 1, 2].map(|k| c[k] - a[k]);
        let cross = [
            e1[1] * e2[2] - e1[2] * e2[1],
            e1[2] * e2[0] - e1[0] * e2[2],
            e1[0] * e2[1] - e1[1] * e2[0],
        ];
        area_3d += 0.5 * cross.iter().map(|x| x * x).sum::<f64>().sqrt();
        area_uv += 0.5 * signed_uv_area2(uvs, t).abs();
    }
    let Some(extent) = extent(positions, indices) else {
        return 0.0;
    };
    let w = (area_3d / area_uv).sqrt() / extent;
    if w.is_finite() && w > 0.0 {
        w as f32
    } else {
        0.0
    }
}

/// Largest side of the box of the vertices `indices` use, metres; `None` when it is 0.
fn extent(positions: &[[f32; 3]], indices: &[u32]) -> Option<f64> {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for &v in indices {
        for k in 0..3 {
            let x = f64::from(positions[v as usize][k]);
            lo[k] = lo[k].min(x);
            hi[k] = hi[k].max(x);
        }
    }
    let e = (0..3).map(|k| hi[k] - lo[k]).fold(0.0, f64::max);
    (e > 0.0 && e.is_finite()).then_some(e)
}

/// Twice the signed UV-space area of triangle `t` (positive = counter-clockwise in UV).
fn signed_uv_area2(uvs: &[[f32; 2]], t: &[u32]) -> f64 {
    let [a, b, c] = [0, 1, 2].map(|k| uvs[t[k] as usize].map(f64::from));
    (b[0] - a[0]) * (c[1] - a[1]) - (c[0] - a[0]) * (b[1] - a[1])
}

/// Split the vertices around which UV windings of both signs meet (the mirror line of a mirrored
/// chart): such a vertex gets a copy (same global vertex, same lock flags, marked `Protect`) used
/// by its negative-winding triangles, so meshopt sees a seam there and never collapses a triangle
/// into the mirrored half, which would flip or stretch its texture. The idea of gltfpack's
/// `simplifyUvSplit` (meshoptimizer `gltf/mesh.cpp`). `vertices` (local → global) and `local`
/// grow/change in place; copies map back through `vertices`.
fn split_uv_mirrors(
    uvs: &[[f32; 2]],
    vertices: &mut Vec<u32>,
    local: &mut [u32],
    locks: &mut Vec<SimplifyVertex>,
) {
    const POSITIVE: u8 = 1;
    const NEGATIVE: u8 = 2;
    let mut signs = vec![0u8; vertices.len()];
    let triangle_sign: Vec<u8> = local
        .chunks_exact(3)
        .map(|t| {
            let global = [0, 1, 2].map(|k| vertices[t[k] as usize]);
            let a = signed_uv_area2(uvs, &global);
            let sign = if a > 0.0 {
                POSITIVE
            } else if a < 0.0 {
                NEGATIVE
            } else {
                0
            };
            for &v in t {
                signs[v as usize] |= sign;
            }
            sign
        })
        .collect();
    let mut copy = vec![u32::MAX; signs.len()];
    for (v, &s) in signs.iter().enumerate() {
        if s == POSITIVE | NEGATIVE {
            copy[v] = vertices.len() as u32;
            vertices.push(vertices[v]);
            locks.push(locks[v] | SimplifyVertex::Protect);
        }
    }
    for (t, &sign) in local.chunks_exact_mut(3).zip(&triangle_sign) {
        if sign == NEGATIVE {
            for v in t {
                if copy[*v as usize] != u32::MAX {
                    *v = copy[*v as usize];
                }
            }
        }
    }
}

/// Lock the third vertex of every triangle whose edge between two locked vertices is open in
/// `indices` (a cell-border edge). Without this, meshopt may collapse that third vertex along an
/// open edge of the mesh's own (a border collapse, topologically valid) and so delete the
/// triangle and the cell-border edge with it: seen on carbon-sphere where open cylinder ends cross
/// a cell border.
fn lock_ears(indices: &[u32], locks: &mut [SimplifyVertex]) {
    let locked = |v: u32| locks[v as usize].contains(SimplifyVertex::Lock);
    let key = |a: u32, b: u32| if a < b { (a, b) } else { (b, a) };
    let mut counts: std::collections::HashMap<(u32, u32), u32> = Default::default();
    for t in indices.chunks_exact(3) {
        for (a, b) in [(t[0], t[1]), (t[1], t[2]), (t[2], t[0])] {
            if locked(a) && locked(b) {
                *counts.entry(key(a, b)).or_insert(0) += 1;
            }
        }
    }
    let mut extra = Vec::new();
    for t in indices.chunks_exact(3) {
        for (a, b, c) in [(t[0], t[1], t[2]), (t[1], t[2], t[0]), (t[2], t[0], t[1])] {
            if counts.get(&key(a, b)) == Some(&1) {
                extra.push(c);
            }
        }
    }
    for v in extra {
        locks[v as usize] |= SimplifyVertex::Lock | SimplifyVertex::Protect;
    }
}

/// `[V]` whether another vertex at the same position (`position_of`, meshopt's position remap)
/// has another material.
fn material_borders(position_of: &[u32], vertex_materials: &[u32]) -> Vec<bool> {
    let mut first = vec![u32::MAX; position_of.len()];
    let mut mixed = vec![false; position_of.len()];
    for (v, &p) in position_of.iter().enumerate() {
        let m = vertex_materials.get(v).copied().unwrap_or(0);
        let slot = &mut first[p as usize];
        if *slot == u32::MAX {
            *slot = m;
        } else if *slot != m {
            mixed[p as usize] = true;
        }
    }
    position_of.iter().map(|&p| mixed[p as usize]).collect()
}

/// `[V]` whether another vertex at the same position (`position_of`) has other texture
/// coordinates (a UV seam).
fn uv_seams(position_of: &[u32], uvs: &[[f32; 2]]) -> Vec<bool> {
    let mut first = vec![u32::MAX; position_of.len()];
    let mut seam = vec![false; position_of.len()];
    for (v, &p) in position_of.iter().enumerate() {
        let slot = &mut first[p as usize];
        if *slot == u32::MAX {
            *slot = v as u32;
        } else if uvs[*slot as usize] != uvs[v] {
            seam[p as usize] = true;
        }
    }
    position_of.iter().map(|&p| seam[p as usize]).collect()
}

fn adapter(positions: &[[f32; 3]]) -> Result<VertexDataAdapter<'_>> {
    VertexDataAdapter::new(
        bytemuck::cast_slice(positions),
        std::mem::size_of::<[f32; 3]>(),
        0,
    )
    .map_err(|e| Error::Input {
        path: "<tile mesh>".into(),
        field: "positions".into(),
        problem: format!("meshopt rejected the vertex buffer: {e}"),
    })
}
