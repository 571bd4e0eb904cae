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
//! * `error_m` = max(children's) + the own simplification error: an upper bound on the distance
//!   to the full-resolution surface (triangle inequality), monotone towards the root; leaves 0.

use kiln_formats::mesh::compact;
use meshopt::{SimplifyOptions, SimplifyVertex, VertexDataAdapter};

use crate::{Error, Result};

/// Fraction of its children's triangles a parent aims for (one halving per level).
pub const PARENT_TRIANGLE_RATIO: f64 = 0.5;

/// A coarser level above the kd root is added only when it removes at least this fraction of the
/// triangles; otherwise the simplifier has stalled (locked borders, topology) and the chain stops.
const MIN_CHAIN_REDUCTION: f64 = 0.1;

/// A relative error limit meshopt never reaches (errors are relative to the extent, so ≤ ~1):
/// used for the second attempt on a parent that stayed over the triangle budget.
const UNLIMITED_ERROR: f32 = 1.0e3;

/// One tile of the tree.
#[derive(Debug, Clone)]
pub struct HlodNode {
    /// `[F_tile, 3]` flattened triangles, indices into the welded mesh's vertices.
    pub indices: Vec<u32>,
    /// Geometric error of this content against the full-resolution mesh, metres; 0 for leaves.
    pub error_m: f64,
    /// Finer tiles that REPLACE this one.
    pub children: Vec<HlodNode>,
}

impl HlodNode {
    /// Triangles of this tile's content.
    pub fn triangle_count(&self) -> usize {
        self.indices.len() / 3
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
/// # Errors
/// [`Error::Input`] when meshopt rejects the vertex buffer.
pub fn build_hlod(
    positions: &[[f32; 3]],
    indices: &[u32],
    vertex_materials: &[u32],
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
    let ctx = Ctx {
        positions,
        indices,
        vertex_range: &vertex_range,
        material_border: &material_border,
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
        let (simplified, own_error_m) = ctx.simplify(
            &root.indices,
            ctx.all_leaves,
            target,
            options.max_simplify_error,
            SimplifyOptions::None,
        )?;
        let kept = simplified.len() / 3;
        if simplified.is_empty() || (kept as f64) > (current as f64) * (1.0 - MIN_CHAIN_REDUCTION) {
            break;
        }
        let error_m = root.error_m + own_error_m;
        root = HlodNode {
            indices: simplified,
            error_m,
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
    /// `[V]` material of each vertex.
    vertex_materials: &'a [u32],
    /// 1 + the largest material index in `vertex_materials`.
    material_count: usize,
    /// First and last leaf id of the whole mesh.
    all_leaves: (u32, u32),
    options: HlodOptions,
}

impl Ctx<'_> {
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
                    children: Vec::new(),
                });
            }
            Part::Split { children, .. } => (&children[0], &children[1]),
        };
        let (a, b) = rayon::join(|| self.build(left), || self.build(right));
        let children = vec![a?, b?];
        let union: Vec<u32> = children
            .iter()
            .flat_map(|c| c.indices.iter().copied())
            .collect();
        let target = (((union.len() / 3) as f64 * PARENT_TRIANGLE_RATIO).ceil() as usize)
            .min(self.options.max_triangles);
        let cell = part.leaves();
        let (mut simplified, mut own_error_m) = self.simplify(
            &union,
            cell,
            target,
            self.options.max_simplify_error,
            SimplifyOptions::None,
        )?;
        // Over budget: first lift the error limit; then, only for a cell with no border (the kd
        // root), also allow collapses across attribute seams (meshopt `Permissive`), then removing
        // small disconnected parts (`Prune`). With locked
        // vertices, Permissive was seen to drop locked border edges (carbon-sphere, 8,192-triangle
        // tiles), so it is never used where a border must be kept.
        let fallbacks: &[SimplifyOptions] = if cell == self.all_leaves {
            &[
                SimplifyOptions::None,
                SimplifyOptions::Permissive,
                SimplifyOptions::Permissive.union(SimplifyOptions::Prune),
            ]
        } else {
            &[SimplifyOptions::None]
        };
        for &options in fallbacks {
            if simplified.len() / 3 <= self.options.max_triangles {
                break;
            }
            let (candidate, candidate_error_m) =
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
            (simplified, own_error_m) = (candidate, candidate_error_m);
        }
        let error_m = children.iter().map(|c| c.error_m).fold(0.0, f64::max) + own_error_m;
        Ok(HlodNode {
            indices: simplified,
            error_m,
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
        options: SimplifyOptions,
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
        options: SimplifyOptions,
        keep: &[bool],
    ) -> Result<(Vec<u32>, f64)> {
        let (vertices, local) = compact(global);
        let local_positions: Vec<[f32; 3]> = vertices
            .iter()
            .map(|&v| self.positions[v as usize])
            .collect();
        // Lock + Protect: Protect keeps `Permissive` from collapsing across a seam at them.
        let mut locks: Vec<SimplifyVertex> = vertices
            .iter()
            .map(|&v| {
                let (lo, hi) = self.vertex_range[v as usize];
                if lo < cell.0 || hi > cell.1 || keep[self.vertex_materials[v as usize] as usize] {
                    SimplifyVertex::Lock | SimplifyVertex::Protect
                } else if self.material_border[v as usize] {
                    SimplifyVertex::Protect
                } else {
                    SimplifyVertex::None
                }
            })
            .collect();
        lock_ears(&local, &mut locks);
        let adapter = adapter(&local_positions)?;
        let scale_m = f64::from(meshopt::simplify_scale(&adapter));
        let mut rel_error = 0.0f32;
        let kept = meshopt::simplify_with_locks(
            &local,
            &adapter,
            &locks,
            target_triangles * 3,
            max_error,
            options,
            Some(&mut rel_error),
        );
        let kept = kept.iter().map(|&i| vertices[i as usize]).collect();
        Ok((kept, f64::from(rel_error) * scale_m))
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
