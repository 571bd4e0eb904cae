//! `decimate`: turn one mesh into a chain of levels of detail (LODs) with meshoptimizer, each with
//! its geometric error in metres, written as `lod_<i>.glb` plus a `lods.json` index; the levels'
//! images are written once under `textures/` and referenced by URI from every level.
//!
//! Sources: meshoptimizer 1.x `src/meshoptimizer.h` (vendored by the `meshopt` 0.7 crate):
//! `meshopt_simplify` ("target_error represents the error relative to mesh extents … result_error
//! … will contain the resulting (relative) error"), `meshopt_simplifyScale` ("Relative error returned
//! by meshopt_simplify via result_error must be *multiplied* by the scaling factor to get absolute
//! error"), `meshopt_generateVertexRemap`, `meshopt_optimizeVertexFetch`. Garland & Heckbert 1997
//! (quadric error metrics) is the simplifier's basis. shared/research/tiles-formats.md §1.6 for
//! using the result as a 3D Tiles `geometricError`.
//!
//! Bad input: [`check_decimate_inputs`] runs before any native call (meshopt reads out of bounds
//! on an index ≥ V, so that is checked here, not assumed): NaN/Inf positions, out-of-range indices,
//! attribute arrays of the wrong length and empty meshes are [`Error::Input`]; bad parameters are
//! [`Error::Param`]. Degenerate (zero-area) triangles are accepted; meshopt removes them.

mod stage;
pub use stage::{Decimate, DecimateSummary};

use std::path::Path;

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::mesh::{ImageRef, Mesh, write_glb_referencing_images};
use meshopt::{SimplifyOptions, VertexDataAdapter};
use serde::{Deserialize, Serialize};

use crate::bounds::{Bound, Bounded};
use crate::stages::tile::mesh::deviation::{Surface, hausdorff_bound};
use crate::stages::tile::mesh::hlod::{DEVIATION_SAMPLES, DIRECT_DEVIATION_MAX_TRIANGLES};
use crate::{Error, Result};

/// Sub-directory of the stage directory holding the images every level references (each once).
pub const LOD_TEXTURES_DIR: &str = "textures";

/// Name of the LOD index written next to the GLBs.
pub const LODS_JSON: &str = "lods.json";

/// Parameters of the decimate stage (the `[decimate]` table of a job file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecimateParams {
    /// Target triangle fraction per level, level 0 first. Must start at 1.0 (the full-resolution
    /// leaf), be strictly descending and lie in (0, 1]. Default `[1.0]`: only `lod_0.glb`, the
    /// mesh the tiler reads. The chain below it is opt-in (e.g. `[1.0, 0.5, 0.25, 0.125]`): the
    /// tileset never reads it (its parents are simplified from their children), and on held-out
    /// CAD and scanned assets it was 48–62 % of the job's time (issue 43).
    pub ratios: Vec<f32>,
    /// Largest error the simplifier may introduce at any level, relative to the mesh extent (the
    /// largest side of its bounding box): 0.05 = 5 %. A level stops short of its triangle target
    /// rather than exceed it. Range (0, 1]; default 0.05, which keeps silhouettes recognisable at
    /// 1/8 of the triangles on scanned and CAD meshes alike.
    pub target_error: f32,
}

impl DecimateParams {
    /// The classic four-level chain, `[1.0, ½, ¼, ⅛]` (what `ratios` defaulted to before the
    /// chain became opt-in).
    #[must_use]
    pub fn chain() -> Self {
        Self {
            ratios: vec![1.0, 0.5, 0.25, 0.125],
            ..Self::default()
        }
    }
}

impl Default for DecimateParams {
    fn default() -> Self {
        Self {
            ratios: vec![1.0],
            target_error: 0.05,
        }
    }
}

/// Version of the LOD chain's algorithm, part of the decimate stage's key (a rerun after it
/// changed decimates again instead of reusing older levels). 2: errors measured (Hausdorff bound)
/// instead of meshoptimizer's estimate.
pub const DECIMATOR_VERSION: u32 = 2;

/// One level of the chain, as recorded in `lods.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LodLevel {
    /// The requested triangle fraction (from [`DecimateParams::ratios`]).
    pub ratio: f32,
    /// Triangles actually kept. About `⌈ratio · F⌉` (a collapse removes two triangles, so it can
    /// land one below) when the simplifier reaches its target; more (at most F) when it stops early
    /// at `target_error` or at topology it cannot collapse.
    pub triangles: usize,
    /// Geometric error of this level against the full-resolution mesh, metres: 0 for level 0, and
    /// never smaller than the previous level's (the chain is made monotone with a running max).
    /// Measured (see `error_measured`) for meshes up to
    /// [`DIRECT_DEVIATION_MAX_TRIANGLES`](crate::stages::tile::mesh::hlod::DIRECT_DEVIATION_MAX_TRIANGLES)
    /// triangles, else meshoptimizer's estimate.
    pub error_m: f64,
    /// `error_m` is a certified upper bound of the two-sided Hausdorff distance between this level
    /// and the full mesh (the tile stage's bound, within 2 % of the true distance); false: it is
    /// meshoptimizer's own estimate, which understates the deviation (Avocado levels 1–3:
    /// meshoptimizer said 0.36 / 0.78 / 1.50 mm, measured 0.65 / 1.08 / 2.11 mm).
    #[serde(default)]
    pub error_measured: bool,
    /// GLB file name, relative to the stage directory (`lod_<i>.glb`).
    pub file: String,
}

/// Merge vertices whose position, normal, UVs, colour and material are all bit-identical, and drop
/// unreferenced ones.
///
/// The result draws the same triangles (same order, same `triangle_materials`) over its own
/// vertices; materials and images are copied. A source vertex used by triangles of several
/// materials is first split into one vertex per material, so in the result every vertex belongs
/// to exactly one material ([`vertex_materials`]): material borders become attribute seams, which
/// meshoptimizer's simplifier keeps (it does not collapse across attribute discontinuities unless
/// told to with `Permissive`), so no triangle is merged across materials. Bit equality means `0.0`
/// and `-0.0` stay distinct, which only costs a few extra vertices.
///
/// # Errors
/// [`Error::Input`] when the mesh breaks the [`Mesh`] invariants (see [`check_decimate_inputs`]).
pub fn weld(mesh: &Mesh) -> Result<Mesh> {
    check_mesh(mesh)?;
    let split = split_material_borders(mesh);
    let mesh = &split;
    let vertices = interleave(mesh, &vertex_materials(mesh));
    let (unique, remap) = meshopt::generate_vertex_remap(&vertices, Some(&mesh.indices));
    let indices = meshopt::remap_index_buffer(Some(&mesh.indices), unique, &remap);
    let vertices = meshopt::remap_vertex_buffer(&vertices, unique, &remap);
    Ok(deinterleave(mesh, &vertices, indices))
}

/// The two-sided Hausdorff bound, metres, between the level drawn by `indices` over `welded`'s
/// vertices and `welded` itself; exactly 0 when the simplifier kept every triangle (the bound
/// alone would report its floor, 1/64 of a triangle's size, for an unchanged mesh).
fn measured_error_m(welded: &Mesh, indices: &[u32]) -> f64 {
    if same_triangles(indices, &welded.indices) {
        return 0.0;
    }
    let level = Surface {
        positions: &welded.positions,
        indices,
    };
    let full = Surface {
        positions: &welded.positions,
        indices: &welded.indices,
    };
    hausdorff_bound(level, full, DEVIATION_SAMPLES).hausdorff_m()
}

/// Whether two index buffers over the same vertices draw the same triangles (in any order, each
/// triangle's corners rotated to start at its smallest index; winding kept).
fn same_triangles(a: &[u32], b: &[u32]) -> bool {
    let canonical = |idx: &[u32]| {
        let mut tris: Vec<[u32; 3]> = idx
            .chunks_exact(3)
            .map(|t| {
                let k = (0..3).min_by_key(|&k| t[k]).unwrap_or(0);
                [t[k], t[(k + 1) % 3], t[(k + 2) % 3]]
            })
            .collect();
        tris.sort_unstable();
        tris
    };
    a.len() == b.len() && canonical(a) == canonical(b)
}

/// Build the LOD chain of `mesh` and write it to `out_dir`.
///
/// Steps: [`weld`]; then for each ratio r (level i) simplify the *full* welded mesh with
/// `meshopt::simplify` towards `⌈r · F⌉` triangles within `params.target_error`; compact the
/// level's vertices (`optimize_vertex_fetch`); write `out_dir/lod_<i>.glb`
/// ([`write_glb_referencing_images`]: the images are written once to `out_dir/textures/` and
/// shared by every level, not embedded); finally
/// write `out_dir/lods.json` (a JSON array of [`LodLevel`]). All writes are atomic. Level 0 is the
/// welded mesh itself with `error_m = 0`.
///
/// Errors are metres: the measured Hausdorff bound between the level and the full mesh
/// ([`hausdorff_bound`], Metro-style, as the tile stage measures its parents) for meshes up to
/// [`DIRECT_DEVIATION_MAX_TRIANGLES`] triangles; above that meshoptimizer's estimate
/// `result_error × meshopt::simplify_scale(positions)` (`result_error` is relative to the mesh
/// extent: meshoptimizer.h, `meshopt_simplify` and `meshopt_simplifyScale`), flagged
/// `error_measured = false`. Each level's error is raised to the previous level's if smaller, so
/// the chain is monotone as 3D Tiles requires of parents over children.
///
/// Not guaranteed: exact triangle counts (the simplifier may stop short: `triangles` can exceed
/// the target, never `F`); UV seams and borders are kept topologically (meshopt does not collapse
/// across attribute discontinuities), but UV/normal *values* do not steer collapses, so that
/// `error_m` stays a pure geometric distance.
///
/// * `mesh` — `[V, 3]` metres, Y-up, `[F, 3]` indices (see [`Mesh`]).
/// * `params` — see [`DecimateParams`].
/// * `out_dir` — created if missing; existing `lod_*.glb` of the same names are replaced.
///
/// # Errors
/// [`Error::Param`] for bad ratios / target error; [`Error::Input`] for a mesh that breaks its
/// invariants or a level that simplifies to nothing; [`Error::Format`] when writing fails.
///
/// # Panics
/// Never.
pub fn decimate(mesh: &Mesh, params: &DecimateParams, out_dir: &Path) -> Result<Vec<LodLevel>> {
    check_decimate_inputs(mesh, params)?;
    let welded = weld(mesh)?;
    let vertices = interleave(&welded, &vertex_materials(&welded));
    let positions: &[u8] = bytemuck::cast_slice(&welded.positions);
    let adapter =
        VertexDataAdapter::new(positions, std::mem::size_of::<[f32; 3]>(), 0).map_err(|e| {
            Error::Input {
                path: MESH_PATH.into(),
                field: "positions".into(),
                problem: format!("meshopt rejected the vertex buffer: {e}"),
            }
        })?;
    let scale_m = f64::from(meshopt::simplify_scale(&adapter));
    let full_triangles = welded.triangle_count();
    let image_uris = write_lod_textures(&welded, out_dir)?;

    let mut levels = Vec::with_capacity(params.ratios.len());
    let mut prev_error_m = 0.0f64;
    for (i, &ratio) in params.ratios.iter().enumerate() {
        let (indices, error_m) = if i == 0 {
            (welded.indices.clone(), 0.0)
        } else {
            let target_triangles =
                ((full_triangles as f64) * f64::from(ratio)).ceil().max(1.0) as usize;
            let mut rel_error = 0.0f32;
            let idx = meshopt::simplify(
                &welded.indices,
                &adapter,
                target_triangles * 3,
                params.target_error,
                SimplifyOptions::None,
                Some(&mut rel_error),
            );
            let short = Shortfall {
                level: i,
                ratio,
                full_triangles,
                target_triangles,
                reached_triangles: idx.len() / 3,
                rel_error,
                target_error: params.target_error,
            };
            short.warn();
            (idx, f64::from(rel_error) * scale_m)
        };
        if indices.is_empty() {
            return Err(Error::Input {
                path: MESH_PATH.into(),
                field: format!("ratios[{i}]"),
                problem: format!(
                    "simplifying to ratio {ratio} removed every triangle; use a larger ratio"
                ),
            });
        }
        let error_measured = i > 0 && full_triangles <= DIRECT_DEVIATION_MAX_TRIANGLES;
        let error_m = if error_measured {
            measured_error_m(&welded, &indices)
        } else {
            error_m
        };
        let error_m = error_m.max(prev_error_m);
        prev_error_m = error_m;

        let mut indices = meshopt::optimize_vertex_cache(&indices, vertices.len());
        let level_vertices = meshopt::optimize_vertex_fetch(&mut indices, &vertices);
        let level_mesh = deinterleave(&welded, &level_vertices, indices);
        let file = format!("lod_{i}.glb");
        write_atomic(
            &out_dir.join(&file),
            &write_glb_referencing_images(&level_mesh, &image_uris)?,
        )?;
        tracing::info!(
            level = i,
            ratio,
            triangles = level_mesh.triangle_count(),
            error_m,
            "decimate: wrote {file}"
        );
        levels.push(LodLevel {
            ratio,
            triangles: level_mesh.triangle_count(),
            error_m,
            error_measured: error_measured || i == 0,
            file,
        });
    }
    let json = serde_json::to_vec_pretty(&levels).map_err(|e| Error::Input {
        path: out_dir.join(LODS_JSON),
        field: "lods".into(),
        problem: format!("cannot serialise: {e}"),
    })?;
    write_atomic(&out_dir.join(LODS_JSON), &json)?;
    Ok(levels)
}

/// A level of the chain that stopped short of its triangle target, and why.
struct Shortfall {
    level: usize,
    ratio: f32,
    full_triangles: usize,
    target_triangles: usize,
    reached_triangles: usize,
    /// meshoptimizer's error of the result, relative to the mesh extent.
    rel_error: f32,
    target_error: f32,
}

impl Shortfall {
    /// Whether the level kept clearly more triangles than asked (5 %, and more than the two a
    /// last collapse can leave).
    fn is_short(&self) -> bool {
        self.reached_triangles as f64 > self.target_triangles as f64 * 1.05 + 2.0
    }

    /// Why the simplifier stopped: at the error bound, or on edges it may not collapse.
    fn reason(&self) -> String {
        if self.rel_error >= 0.95 * self.target_error {
            format!(
                "it stopped at the error bound ([decimate] target_error = {} of the mesh's \
                 extent); raise target_error to go further",
                self.target_error
            )
        } else {
            "the edges left are locked: UV seams, material borders and open borders, which the \
             simplifier keeps so that textures do not smear and the surface does not tear \
             (a closed mesh cut by many UV seams stops here whatever the ratio)"
                .to_string()
        }
    }

    /// One warning naming the level, the ratio asked and the ratio reached, and the reason.
    fn warn(&self) {
        if !self.is_short() {
            return;
        }
        let reached = self.reached_triangles as f64 / self.full_triangles.max(1) as f64;
        tracing::warn!(
            level = self.level,
            "decimate: lod_{} asked for ratio {} ({} of {} triangles) and reached ratio {:.3} \
             ({} triangles): {}",
            self.level,
            self.ratio,
            self.target_triangles,
            self.full_triangles,
            reached,
            self.reached_triangles,
            self.reason()
        );
    }
}

/// Write every image a material of `welded` uses to `out_dir/textures/<blake3>.png|jpg`, once;
/// returns one reference per `welded.images` entry (relative to the GLBs). Every level's GLB
/// references these files instead of embedding a copy: a chain of four levels would otherwise
/// hold every texture four times (Avocado: 4 × 8.3 MB of PNG for 682 triangles).
fn write_lod_textures(welded: &Mesh, out_dir: &Path) -> Result<Vec<ImageRef>> {
    let mut used = vec![false; welded.images.len()];
    for m in &welded.materials {
        for t in m.textures() {
            used[t.image] = true;
        }
    }
    let mut refs = Vec::with_capacity(welded.images.len());
    for (img, used) in welded.images.iter().zip(used) {
        let ext = match img.mime.as_str() {
            "image/jpeg" => "jpg",
            "image/ktx2" => "ktx2",
            _ => "png",
        };
        let uri = format!(
            "{LOD_TEXTURES_DIR}/{}.{ext}",
            blake3::hash(&img.bytes).to_hex()
        );
        if used {
            write_atomic(&out_dir.join(&uri), &img.bytes)?;
        }
        refs.push(ImageRef {
            uri,
            mime: img.mime.clone(),
        });
    }
    Ok(refs)
}

/// Read the `lods.json` that [`decimate`] wrote into `dir`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::Input`] when it is not a JSON array of
/// [`LodLevel`] or is empty.
pub fn read_lods(dir: &Path) -> Result<Vec<LodLevel>> {
    let path = dir.join(LODS_JSON);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let lods: Vec<LodLevel> = serde_json::from_slice(&bytes).map_err(|e| Error::Input {
        path: path.clone(),
        field: format!("line {} column {}", e.line(), e.column()),
        problem: format!(
            "not a lods.json written by `kiln` decimate: {e}; rerun the decimate stage"
        ),
    })?;
    if lods.is_empty() {
        return Err(Error::Input {
            path,
            field: "[]".into(),
            problem: "no LOD levels; rerun the decimate stage".into(),
        });
    }
    Ok(lods)
}

/// The `path` reported for problems with an in-memory input mesh.
const MESH_PATH: &str = "<input mesh>";

/// The checks [`decimate`] runs before any native call.
///
/// # Errors
/// [`Error::Param`] — `ratios` empty, longer than 16, not starting at 1.0, not strictly
/// descending, or outside (0, 1]; `target_error` not in (0, 1]. [`Error::Input`] — see [`weld`] and the [`Mesh`]
/// invariants (indices `< V` and a multiple of 3, finite positions, attributes of length V, at
/// least one triangle).
pub fn check_decimate_inputs(mesh: &Mesh, params: &DecimateParams) -> Result<()> {
    params.validate()?;
    check_mesh(mesh)
}

impl Bounded for DecimateParams {
    const TABLE: &'static str = "decimate";
    const BOUNDS: &'static [Bound] = &[
        Bound::list(
            "ratios",
            0.0,
            1.0,
            16,
            "fractions of the triangles; 16 levels",
        ),
        Bound::scalar("target_error", 0.0, 1.0, "relative to the mesh extent"),
    ];
}

impl DecimateParams {
    /// The parameter checks of [`check_decimate_inputs`], without a mesh (run when a job file is
    /// parsed, so a bad `[decimate]` table fails before any stage runs): the bounds
    /// ([`Bounded::BOUNDS`]), then what a range cannot express: at least one ratio, the first
    /// 1.0, each next one > 0 and below the one before; `target_error` > 0.
    ///
    /// # Errors
    /// [`Error::Param`] as in [`check_decimate_inputs`].
    pub fn validate(&self) -> Result<()> {
        self.check_bounds()?;
        let params = self;
        let param = |field: String, expected: &str, found: String| Error::Param {
            stage: Self::TABLE,
            field,
            expected: expected.into(),
            found,
        };
        if params.ratios.is_empty() {
            return Err(param(
                "ratios".into(),
                "at least one ratio, starting with 1.0",
                "[]".into(),
            ));
        }
        if params.ratios[0] != 1.0 {
            return Err(param(
                "ratios[0]".into(),
                "1.0 (level 0 is the full-resolution leaf)",
                params.ratios[0].to_string(),
            ));
        }
        for (i, w) in params.ratios.windows(2).enumerate() {
            if !(w[1] > 0.0 && w[1] < w[0]) {
                return Err(param(
                    format!("ratios[{}]", i + 1),
                    &format!("a value in (0, {}) (strictly descending)", w[0]),
                    w[1].to_string(),
                ));
            }
        }
        if params.target_error == 0.0 {
            return Err(param(
                "target_error".into(),
                "a relative error > 0, e.g. 0.05",
                params.target_error.to_string(),
            ));
        }
        Ok(())
    }
}

fn check_mesh(mesh: &Mesh) -> Result<()> {
    let v = mesh.positions.len();
    let input = |field: &str, problem: String| Error::Input {
        path: MESH_PATH.into(),
        field: field.into(),
        problem,
    };
    if mesh.indices.is_empty() {
        return Err(input("indices", "no triangles".into()));
    }
    if !mesh.indices.len().is_multiple_of(3) {
        return Err(input(
            "indices",
            format!("{} indices is not a multiple of 3", mesh.indices.len()),
        ));
    }
    if let Some((i, &bad)) = mesh
        .indices
        .iter()
        .enumerate()
        .find(|&(_, &x)| x as usize >= v)
    {
        return Err(input(
            "indices",
            format!("element {i} is {bad}, expected < vertex count {v}"),
        ));
    }
    if let Some(i) = mesh
        .positions
        .iter()
        .position(|p| !p.iter().all(|c| c.is_finite()))
    {
        return Err(input(
            "positions",
            format!("vertex {i} is {:?}, expected finite", mesh.positions[i]),
        ));
    }
    if mesh.normals.as_ref().is_some_and(|n| n.len() != v)
        || mesh.uvs.as_ref().is_some_and(|t| t.len() != v)
    {
        return Err(input(
            "normals/uvs",
            format!("expected {v} entries each (one per vertex)"),
        ));
    }
    mesh.check_materials()
        .map_err(|(field, problem)| input(&field, problem))?;
    Ok(())
}

/// `[V]` the material of each vertex: that of the last triangle using it (after [`weld`], the only
/// one); 0 for unused vertices.
pub fn vertex_materials(mesh: &Mesh) -> Vec<u32> {
    let mut out = vec![0u32; mesh.positions.len()];
    for (t, &m) in mesh.triangle_materials.iter().enumerate() {
        for &v in &mesh.indices[3 * t..3 * t + 3] {
            out[v as usize] = m;
        }
    }
    out
}

/// `mesh` with every vertex used by triangles of more than one material duplicated, one copy per
/// further material (attributes copied), so that each vertex belongs to one material.
fn split_material_borders(mesh: &Mesh) -> Mesh {
    let mut out = mesh.clone();
    let mut first = vec![u32::MAX; mesh.positions.len()];
    let mut copies: std::collections::HashMap<(u32, u32), u32> = Default::default();
    for (t, &m) in mesh.triangle_materials.iter().enumerate() {
        for k in 0..3 {
            let v = mesh.indices[3 * t + k];
            let owner = &mut first[v as usize];
            if *owner == u32::MAX {
                *owner = m;
            }
            if *owner == m {
                continue;
            }
            let copy = *copies.entry((v, m)).or_insert_with(|| {
                let i = v as usize;
                out.positions.push(mesh.positions[i]);
                push_copy(&mut out.normals, i);
                push_copy(&mut out.uvs, i);
                push_copy(&mut out.uvs1, i);
                push_copy(&mut out.colors, i);
                (out.positions.len() - 1) as u32
            });
            out.indices[3 * t + k] = copy;
        }
    }
    out
}

/// Append a copy of element `i` to an optional per-vertex attribute.
fn push_copy<T: Copy>(attribute: &mut Option<Vec<T>>, i: usize) {
    if let Some(a) = attribute.as_mut() {
        a.push(a[i]);
    }
}

/// One interleaved vertex: position (3), normal (3), uv (2), uv1 (2), colour (4), material (the
/// bits of its u32 index), padding (1); absent attributes are zeros.
type Vertex = [f32; 16];

/// Slot of the material bits in a [`Vertex`].
const MATERIAL_SLOT: usize = 14;

fn interleave(mesh: &Mesh, vertex_materials: &[u32]) -> Vec<Vertex> {
    (0..mesh.positions.len())
        .map(|i| {
            let p = mesh.positions[i];
            let n = mesh.normals.as_ref().map_or([0.0; 3], |n| n[i]);
            let t = mesh.uvs.as_ref().map_or([0.0; 2], |t| t[i]);
            let t1 = mesh.uvs1.as_ref().map_or([0.0; 2], |t| t[i]);
            let c = mesh.colors.as_ref().map_or([0.0; 4], |c| c[i]);
            let m = f32::from_bits(vertex_materials[i]);
            [
                p[0], p[1], p[2], n[0], n[1], n[2], t[0], t[1], t1[0], t1[1], c[0], c[1], c[2],
                c[3], m, 0.0,
            ]
        })
        .collect()
}

/// A mesh over `vertices` with `template`'s attribute set, materials and images; each triangle's
/// material is its first vertex's.
fn deinterleave(template: &Mesh, vertices: &[Vertex], indices: Vec<u32>) -> Mesh {
    let attribute = |present: bool, f: &dyn Fn(&Vertex) -> [f32; 2]| {
        present.then(|| vertices.iter().map(f).collect::<Vec<_>>())
    };
    Mesh {
        origin_m: template.origin_m,
        positions: vertices.iter().map(|v| [v[0], v[1], v[2]]).collect(),
        normals: template
            .normals
            .as_ref()
            .map(|_| vertices.iter().map(|v| [v[3], v[4], v[5]]).collect()),
        uvs: attribute(template.uvs.is_some(), &|v| [v[6], v[7]]),
        uvs1: attribute(template.uvs1.is_some(), &|v| [v[8], v[9]]),
        colors: template.colors.as_ref().map(|_| {
            vertices
                .iter()
                .map(|v| [v[10], v[11], v[12], v[13]])
                .collect()
        }),
        triangle_materials: indices
            .chunks_exact(3)
            .map(|t| vertices[t[0] as usize][MATERIAL_SLOT].to_bits())
            .collect(),
        indices,
        materials: template.materials.clone(),
        images: template.images.clone(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    fn dataset(rel: &str) -> PathBuf {
        let root = std::env::var_os("KILN_DATASETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
        let p = root.join(rel);
        assert!(
            p.exists(),
            "dataset file {} missing; set KILN_DATASETS or put shared/datasets next to the checkout",
            p.display()
        );
        p
    }

    /// Run `.ci/validate_gltf.mjs` on `files`; `None` (with the reason printed) when node or the
    /// validator module is missing locally. Under CI (`CI` set) a missing validator fails the test
    /// (STYLE.md rule 15); `.ci/run` installs it with `npm install -g gltf-validator`.
    pub(crate) fn khronos_validate(files: &[PathBuf]) -> Option<bool> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/validate_gltf.mjs");
        let skip = |why: String| {
            assert!(
                std::env::var_os("CI").is_none(),
                "Khronos glTF validation unavailable under CI: {why}"
            );
            eprintln!(
                "SKIPPED Khronos glTF validation: {why}; install nodejs + `npm install -g gltf-validator`"
            );
            None
        };
        match std::process::Command::new("node")
            .arg(&script)
            .args(files)
            .output()
        {
            Err(e) => skip(format!("cannot run node ({e})")),
            Ok(o) if o.status.code() == Some(2) => {
                skip(String::from_utf8_lossy(&o.stderr).into_owned())
            }
            Ok(o) => {
                eprintln!("{}", String::from_utf8_lossy(&o.stdout));
                Some(o.status.success())
            }
        }
    }

    /// An n×n-quad flat grid in the y = 0 plane, 1 m across, with per-vertex up normals and UVs.
    fn flat_grid(n: u32) -> Mesh {
        let mut positions = Vec::new();
        let mut uvs = Vec::new();
        for j in 0..=n {
            for i in 0..=n {
                let (u, v) = (i as f32 / n as f32, j as f32 / n as f32);
                positions.push([u, 0.0, v]);
                uvs.push([u, v]);
            }
        }
        let mut indices = Vec::new();
        for j in 0..n {
            for i in 0..n {
                let a = j * (n + 1) + i;
                let (b, c, d) = (a + 1, a + n + 1, a + n + 2);
                indices.extend_from_slice(&[a, c, b, b, c, d]);
            }
        }
        Mesh {
            origin_m: [0.0; 3],
            normals: Some(vec![[0.0, 1.0, 0.0]; positions.len()]),
            positions,
            uvs: Some(uvs),
            uvs1: None,
            colors: None,
            triangle_materials: vec![0; indices.len() / 3],
            indices,
            materials: vec![kiln_formats::mesh::Material::diffuse([1.0; 4])],
            images: Vec::new(),
        }
    }

    /// The largest distance from a vertex of `a` to the surface of `b` (brute force), metres.
    fn farthest_vertex_m(a: &Mesh, b: &Mesh) -> f64 {
        use crate::stages::tile::mesh::deviation::closest_point_on_triangle;
        let p64 = |p: [f32; 3]| p.map(f64::from);
        let tris: Vec<[[f64; 3]; 3]> = b
            .indices
            .chunks_exact(3)
            .map(|t| [0, 1, 2].map(|k| p64(b.positions[t[k] as usize])))
            .collect();
        a.positions
            .iter()
            .map(|&p| {
                let p = p64(p);
                tris.iter()
                    .map(|t| {
                        let q = closest_point_on_triangle(p, t);
                        (0..3).map(|k| (p[k] - q[k]).powi(2)).sum::<f64>()
                    })
                    .fold(f64::INFINITY, f64::min)
                    .sqrt()
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn avocado_decimates_to_four_levels_with_errors_in_metres() {
        let mesh = kiln_formats::mesh::read_gltf(&dataset(
            "mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf",
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let params = DecimateParams::chain();
        let lods = decimate(&mesh, &params, dir.path()).unwrap();
        assert_eq!(lods.len(), 4);
        let f = weld(&mesh).unwrap().triangle_count();
        let (min, max) = mesh.aabb().unwrap();
        let extent_m = (0..3).map(|i| max[i] - min[i]).fold(0.0, f64::max);
        for (i, l) in lods.iter().enumerate() {
            eprintln!(
                "avocado lod {i}: ratio {} triangles {} error_m {:.3e}",
                l.ratio, l.triangles, l.error_m
            );
            // meshopt may stop short of the target, never above the full count.
            assert!(l.triangles <= f);
            assert!(
                l.error_m >= 0.0 && l.error_m < extent_m,
                "error {} m vs extent {} m",
                l.error_m,
                extent_m
            );
            // Measured against the full mesh: at least the farthest vertex of either surface
            // from the other (brute force over every triangle).
            assert!(l.error_measured);
            let level = kiln_formats::mesh::read_gltf(&dir.path().join(&l.file)).unwrap();
            let sampled = farthest_vertex_m(&level, &mesh).max(farthest_vertex_m(&mesh, &level));
            assert!(
                l.error_m >= sampled - 1e-6,
                "lod {i}: {} < sampled {sampled}",
                l.error_m
            );
            assert!(
                l.error_m <= 1.5 * sampled + 1e-5,
                "lod {i}: {} vs sampled {sampled}",
                l.error_m
            );
            assert!(dir.path().join(&l.file).exists());
        }
        assert_eq!(lods[0].triangles, f);
        // The Avocado is smooth: every level reaches its target within a collapse or two.
        for l in &lods {
            let target = (f as f64 * f64::from(l.ratio)).ceil();
            assert!(
                (l.triangles as f64 - target).abs() <= 2.0,
                "{l:?} vs target {target}"
            );
        }
        assert_eq!(lods[0].error_m, 0.0);
        for w in lods.windows(2) {
            assert!(
                w[1].error_m >= w[0].error_m,
                "error must not drop: {lods:?}"
            );
            assert!(
                w[1].triangles <= w[0].triangles,
                "triangles must not grow: {lods:?}"
            );
        }
        assert!(lods[3].triangles < lods[0].triangles);
        assert_eq!(read_lods(dir.path()).unwrap(), lods);
        let files: Vec<PathBuf> = lods.iter().map(|l| dir.path().join(&l.file)).collect();
        if let Some(ok) = khronos_validate(&files) {
            assert!(ok, "Khronos glTF-Validator reported errors");
        }
    }

    #[test]
    fn levels_the_simplifier_cannot_reduce_have_zero_error() {
        // A single quad (two triangles, four border vertices, all locked): every level keeps it.
        let mut quad = flat_grid(1);
        quad.normals = None;
        let dir = tempfile::tempdir().unwrap();
        let lods = decimate(&quad, &DecimateParams::chain(), dir.path()).unwrap();
        for l in &lods {
            assert_eq!(l.triangles, 2, "{l:?}");
            assert_eq!(l.error_m, 0.0, "{l:?}");
        }
        assert!(same_triangles(&[0, 1, 2, 2, 3, 0], &[3, 0, 2, 1, 2, 0]));
        assert!(!same_triangles(&[0, 1, 2], &[0, 2, 1]), "winding differs");
    }

    #[test]
    fn flat_grid_decimates_with_near_zero_error() {
        let mesh = flat_grid(32);
        let dir = tempfile::tempdir().unwrap();
        let lods = decimate(&mesh, &DecimateParams::chain(), dir.path()).unwrap();
        for l in &lods {
            eprintln!(
                "grid: ratio {} triangles {} error_m {:.3e}",
                l.ratio, l.triangles, l.error_m
            );
            // The true deviation is 0 (coplanar); the measured bound's floor is the covering
            // radius of its finest subdivision, 1/64 of a triangle's (the 1/8 level's quarter-
            // metre triangles: 3.9 mm), below a real fold (≥ 1e-2 m here).
            assert!(
                l.error_m < 5e-3,
                "coplanar grid must simplify with ~0 error: {l:?}"
            );
        }
        // A coplanar interior collapses freely: the 1/8 level reaches its target.
        assert!(
            lods[3].triangles <= (2048f64 * 0.125).ceil() as usize,
            "{lods:?}"
        );
    }

    #[test]
    fn simplify_error_is_in_metres() {
        // The same grid scaled by 100 must report 100× the error (relative error is scale-free).
        let mut bumpy = flat_grid(24);
        for (i, p) in bumpy.positions.iter_mut().enumerate() {
            p[1] = 0.02 * ((i * 7919) % 13) as f32 / 13.0;
        }
        bumpy.normals = None;
        let mut big = bumpy.clone();
        for p in &mut big.positions {
            *p = p.map(|c| c * 100.0);
        }
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let small = decimate(&bumpy, &DecimateParams::chain(), d1.path()).unwrap();
        let large = decimate(&big, &DecimateParams::chain(), d2.path()).unwrap();
        // meshopt may keep one triangle more or less at the larger scale, and the bound is within
        // 2 % of the true distance: the ratio is 100 within 3 %.
        for (s, l) in small.iter().zip(&large).skip(1) {
            assert!(s.error_m > 0.0);
            assert!(
                (l.error_m / s.error_m - 100.0).abs() < 3.0,
                "{s:?} vs {l:?}"
            );
        }
    }

    #[test]
    fn weld_merges_bit_identical_vertices_only() {
        let mut mesh = flat_grid(2);
        // Split into a triangle soup: 24 vertices, 8 triangles.
        let soup_positions: Vec<[f32; 3]> = mesh
            .indices
            .iter()
            .map(|&i| mesh.positions[i as usize])
            .collect();
        let soup_uvs: Vec<[f32; 2]> = mesh
            .indices
            .iter()
            .map(|&i| mesh.uvs.as_ref().unwrap()[i as usize])
            .collect();
        mesh.normals = None;
        mesh.positions = soup_positions;
        mesh.uvs = Some(soup_uvs);
        mesh.indices = (0..24).collect();
        let welded = weld(&mesh).unwrap();
        assert_eq!(welded.positions.len(), 9);
        assert_eq!(welded.triangle_count(), 8);
        for (t, tri) in welded.indices.chunks(3).enumerate() {
            for (k, &v) in tri.iter().enumerate() {
                assert_eq!(welded.positions[v as usize], mesh.positions[t * 3 + k]);
            }
        }
        // A differing UV keeps a vertex apart (a UV seam); soup vertex 1 is grid vertex 3, shared
        // by several triangles.
        mesh.uvs.as_mut().unwrap()[1][0] += 0.5;
        assert_eq!(weld(&mesh).unwrap().positions.len(), 10);
    }

    #[test]
    fn bad_params_are_rejected_before_work() {
        let mesh = flat_grid(2);
        let dir = tempfile::tempdir().unwrap();
        for (ratios, err) in [
            (vec![], 0.05),
            (vec![0.5, 0.25], 0.05),
            (vec![1.0, 0.5, 0.5], 0.05),
            (vec![1.0, 1.5], 0.05),
            (vec![1.0, 0.0], 0.05),
            (vec![1.0, f32::NAN], 0.05),
            (vec![1.0, 0.5], 0.0),
            (vec![1.0, 0.5], f32::INFINITY),
        ] {
            let p = DecimateParams {
                ratios: ratios.clone(),
                target_error: err,
            };
            let e = decimate(&mesh, &p, dir.path()).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Param {
                        stage: "decimate",
                        ..
                    }
                ),
                "{ratios:?} {err}: {e}"
            );
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing written on bad params"
        );
    }

    #[test]
    fn bad_meshes_are_input_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let p = DecimateParams::chain();
        let mut m = flat_grid(2);
        m.indices[5] = 1000;
        assert!(matches!(
            decimate(&m, &p, dir.path()),
            Err(Error::Input { .. })
        ));
        let mut m = flat_grid(2);
        m.positions[3][1] = f32::NAN;
        assert!(matches!(
            decimate(&m, &p, dir.path()),
            Err(Error::Input { .. })
        ));
        let mut m = flat_grid(2);
        m.indices.clear();
        assert!(matches!(
            decimate(&m, &p, dir.path()),
            Err(Error::Input { .. })
        ));
        let mut m = flat_grid(2);
        m.uvs.as_mut().unwrap().pop();
        assert!(matches!(
            decimate(&m, &p, dir.path()),
            Err(Error::Input { .. })
        ));
    }

    #[test]
    fn read_lods_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(read_lods(dir.path()), Err(Error::Io { .. })));
        std::fs::write(dir.path().join(LODS_JSON), b"{not json").unwrap();
        assert!(matches!(read_lods(dir.path()), Err(Error::Input { .. })));
        std::fs::write(dir.path().join(LODS_JSON), b"[]").unwrap();
        assert!(matches!(read_lods(dir.path()), Err(Error::Input { .. })));
    }

    #[test]
    fn every_numeric_field_has_a_bound() {
        let p = DecimateParams::chain();
        p.validate().unwrap();
        assert_eq!(crate::bounds::unbounded_and_stale(&p), (vec![], vec![]));
        let e = DecimateParams {
            ratios: (0..17).map(|i| 1.0 / (i + 1) as f32).collect(),
            ..p
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("`ratios`") && e.contains("at most 16"), "{e}");
    }

    /// Issue 44 rule 8: a level the simplifier cannot reach says so, with the ratio reached and
    /// why. Disjoint triangles have only open borders, which meshoptimizer locks: nothing
    /// collapses, and the warning names the locked edges; the smooth Avocado reaches every
    /// target and warns about nothing.
    #[test]
    fn a_ratio_that_cannot_be_reached_warns_with_the_ratio_reached_and_the_reason() {
        use crate::warnings::{Collector, install_for_tests};
        install_for_tests();
        let mut positions = Vec::new();
        for i in 0..64 {
            let x = (i % 8) as f32;
            let z = (i / 8) as f32;
            positions.extend([[x, 0.0, z], [x + 0.9, 0.0, z], [x, 0.1, z + 0.9]]);
        }
        let indices: Vec<u32> = (0..positions.len() as u32).collect();
        let mesh = Mesh {
            origin_m: [0.0; 3],
            normals: None,
            uvs: None,
            uvs1: None,
            colors: None,
            triangle_materials: vec![0; indices.len() / 3],
            positions,
            indices,
            materials: vec![kiln_formats::mesh::Material::diffuse([1.0; 4])],
            images: Vec::new(),
        };
        let dir = tempfile::tempdir().unwrap();
        let c = Collector::begin(crate::dag::StageKind::DECIMATE);
        let lods = c
            .span()
            .in_scope(|| decimate(&mesh, &DecimateParams::chain(), dir.path()))
            .unwrap();
        let warnings = c.finish();
        assert!(lods.iter().all(|l| l.triangles == 64), "{lods:?}");
        assert_eq!(warnings.len(), 3, "one a level below lod_0: {warnings:?}");
        assert!(
            warnings[0].contains("lod_1 asked for ratio 0.5 (32 of 64 triangles)")
                && warnings[0].contains("reached ratio 1.000 (64 triangles)")
                && warnings[0].contains("locked"),
            "{}",
            warnings[0]
        );

        let avocado = kiln_formats::mesh::read_gltf(&dataset(
            "mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf",
        ))
        .unwrap();
        let c = Collector::begin(crate::dag::StageKind::DECIMATE);
        c.span()
            .in_scope(|| decimate(&avocado, &DecimateParams::chain(), dir.path()))
            .unwrap();
        assert_eq!(c.finish(), Vec::<String>::new());
    }
}
