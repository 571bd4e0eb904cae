//! Mesh tiling: the full-resolution mesh (level 0 of the decimate stage) as an OGC 3D Tiles 1.1
//! HLOD tileset — spatial leaves, re-simplified parents, REPLACE refinement — with compact GLB
//! content (`KHR_mesh_quantization` + `EXT_meshopt_compression`) and each texture written once.
//!
//! Sources: OGC 3D Tiles 1.1 (OGC 22-025r4) §"Geometric error" (leaves 0, parents ≥ children,
//! tileset ≥ root), §"Bounding volumes" (content of a tile and of its descendants lies inside its
//! volume), §"Refinement" (REPLACE), §"glTF transforms" (clients rotate glTF content Y-up → Z-up
//! *before* the tile transforms apply, so volumes are written in the Z-up tile frame;
//! CesiumGS/3d-tiles-samples `1.1/BoundingBoxTests` computes boxes the same way);
//! shared/research/tiles-formats.md §1.2, §1.6, §4. Tree construction: [`hlod`]; measured
//! geometric error: [`deviation`]; content encoding: [`encode`].
//!
//! Layout of `out_dir`: `tileset.json`; `tiles/r.glb` (root), `tiles/r0.glb`, `tiles/r01.glb`, …
//! (one digit per level: the child's index); `tiles/textures/<blake3 of the source>.png|jpg` and
//! `tiles/textures/L<h>/<…>`, the texture pyramid of every image (see [`texture`]: leaves use the
//! source size, each level above ½ of its resolution, all capped by `max_texture_size`), each file
//! written once and referenced by every tile GLB of its level as `textures/<…>` (relative to the
//! GLB); `tiles/textures/atlas/<tile>-<group>-<image>.png|jpg`, a tile's own atlas of the texels
//! its triangles use where that saves pixels (see [`atlas`]).
//!
//! Materials: every tile holds one primitive per material among its triangles (only those), with
//! the full glTF PBR material (`kiln_formats::mesh::Material`); a tile's textures and samplers are
//! written once per tile and shared by its materials. Parents are simplified without merging
//! triangles across materials (material borders are attribute seams, see [`hlod::build_hlod`]).
//!
//! Frames: content stays in the glTF Y-up frame (metres) of the source mesh; the tileset's boxes
//! are in the Z-up tile frame (glTF `(x, y, z)` → `(x, −z, y)`, the [`Y_UP_TO_Z_UP`] rotation that
//! clients apply to glTF content). No tile has a `transform` (the georeference is added at publish
//! time).
//!
//! Bad input: [`check_tile_mesh_inputs`] rejects an empty chain, non-finite or decreasing errors,
//! a leaf with non-zero error and file names that would escape `lod_dir`; the level-0 GLB is read
//! with `read_gltf` (a truncated or foreign file is an error naming it) and checked like the
//! decimate stage's input (finite positions, indices in range) before anything is written.

pub mod atlas;
pub mod decode;
pub mod deviation;
pub mod encode;
pub mod hlod;
mod stage;
pub mod texture;
pub mod view;

pub use stage::{MeshTileSummary, TileMesh};

use std::path::Path;

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::mesh::{
    EXT_MESHOPT_COMPRESSION, EXT_TEXTURE_WEBP, ImageRef, KHR_MESH_QUANTIZATION, KHR_TEXTURE_BASISU,
    Mesh, QuantizedMesh, read_gltf, write_quantized_glb,
};
use kiln_formats::tiles::tileset::{BoundingVolume, Content, Refine, Tile, Y_UP_TO_Z_UP};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use super::{TileReport, write_tileset};
use crate::bounds::{Bound, Bounded};
use crate::stages::decimate::{LodLevel, vertex_materials, weld};
use crate::{Error, Result};
use encode::{Lattice, MeshoptCodec, quantize_tile};
use hlod::{HlodNode, HlodOptions, VertexAttributes, build_hlod};
use texture::TexturePyramid;

/// Sub-directory of `out_dir` holding the tile contents.
pub const TILES_DIR: &str = "tiles";
/// Sub-directory of [`TILES_DIR`] holding the images the tiles reference.
pub const TEXTURES_DIR: &str = "textures";

/// Upper bound of [`MeshTileParams::max_texture_size`]: the largest 2D texture WebGL 2 / WebGPU
/// implementations commonly allow.
pub const MAX_TEXTURE_SIZE_LIMIT: u32 = 16_384;

/// Parameters of the mesh tiler. Serialised into the tile stage's key; missing fields take the
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MeshTileParams {
    /// Most triangles a tile may hold (≥ 1); default 65,536 (leaves by construction; parents are
    /// simplified again without an error limit when over it, so only a locked border longer than
    /// the budget can keep a parent above it).
    pub max_triangles_per_tile: usize,
    /// Coarse levels are added above the spatial root until it holds ≤ this fraction of the
    /// full-resolution triangles (or simplification stalls). Range (0, 1]; default 0.125, like the
    /// decimate chain's coarsest level.
    pub root_fraction: f64,
    /// Largest error one simplification step may add, relative to the extent of the simplified
    /// tile (meshopt's `target_error`). Range (0, 1]; default 0.05.
    pub max_simplify_error: f32,
    /// Largest side, in pixels, of any image a tile references (leaves included): larger images
    /// are downscaled to fit, keeping their aspect ratio. Range 1 ..= 16384; default 4096 (a
    /// common GPU texture limit, and Obj2Tiles' default).
    pub max_texture_size: u32,
    /// Give a tile its own atlas of the texels its triangles use, where that saves pixels and
    /// bytes (see [`atlas`]); default false. The trade-off, measured: a client that shows a few
    /// leaves downloads and holds far less (Avocado at 64 triangles a tile: 21 % of the pixels
    /// per tile); one that shows every leaf downloads more (the leaves' atlases together hold
    /// 1.3–2× the shared images' bytes on Duck, spot and Avocado: rings, pieces' boxes and
    /// re-encoding), and a JPEG source is re-encoded at the leaves (DamagedHelmet at 4,096
    /// triangles a tile in CesiumJS: 39.3 dB against the source instead of 39.7 dB).
    pub texture_atlas: bool,
    /// How the tiles' PNG and JPEG images are encoded: `"source"` (default; each keeps its type)
    /// `"webp"` (lossy WebP at every level, `EXT_texture_webp`), `"ktx2"` (Basis Universal UASTC
    /// with mip chains, `KHR_texture_basisu`) or `"ktx2-etc1s"` (smaller, lossier ETC1S); see
    /// [`texture::TextureFormat`].
    /// Left out of the stage key when `"source"`.
    #[serde(skip_serializing_if = "is_source_format")]
    pub texture_format: texture::TextureFormat,
}

fn is_source_format(f: &texture::TextureFormat) -> bool {
    *f == texture::TextureFormat::Source
}

/// Longest image side libwebp encodes (`WEBP_MAX_DIMENSION`).
const WEBP_MAX_SIDE: u32 = 16_383;

impl Default for MeshTileParams {
    fn default() -> Self {
        Self {
            max_triangles_per_tile: 65_536,
            root_fraction: 0.125,
            max_simplify_error: 0.05,
            max_texture_size: 4096,
            texture_atlas: false,
            texture_format: texture::TextureFormat::Source,
        }
    }
}

impl Bounded for MeshTileParams {
    /// Named after the job file's table, `[mesh_tile]`.
    const TABLE: &'static str = "mesh_tile";
    const BOUNDS: &'static [Bound] = &[
        Bound::scalar(
            "max_triangles_per_tile",
            1.0,
            16_777_216.0,
            "16 M triangles",
        ),
        Bound::scalar("root_fraction", 0.0, 1.0, "a fraction"),
        Bound::scalar(
            "max_simplify_error",
            0.0,
            1.0,
            "relative to the mesh extent",
        ),
        Bound::scalar(
            "max_texture_size",
            1.0,
            MAX_TEXTURE_SIZE_LIMIT as f64,
            "pixels per image side",
        ),
    ];
}

impl MeshTileParams {
    /// Check the fields: the bounds ([`Bounded::BOUNDS`]), then what a range cannot express:
    /// `root_fraction` and `max_simplify_error` > 0, and `max_texture_size` within WebP's
    /// largest side with `texture_format = "webp"`.
    ///
    /// # Errors
    /// [`Error::Param`] naming the field.
    pub fn validate(&self) -> Result<()> {
        self.check_bounds()?;
        let param = |field: &str, expected: &str, found: String| Error::Param {
            stage: Self::TABLE,
            field: field.into(),
            expected: expected.into(),
            found,
        };
        if self.root_fraction == 0.0 {
            return Err(param(
                "root_fraction",
                "a fraction > 0, e.g. 0.125",
                self.root_fraction.to_string(),
            ));
        }
        if self.max_simplify_error == 0.0 {
            return Err(param(
                "max_simplify_error",
                "a relative error > 0, e.g. 0.05",
                self.max_simplify_error.to_string(),
            ));
        }
        if self.texture_format == texture::TextureFormat::Webp
            && self.max_texture_size > WEBP_MAX_SIDE
        {
            return Err(param(
                "max_texture_size",
                &format!(
                    "pixels in 1 ..= {WEBP_MAX_SIDE} with texture_format = \"webp\" (WebP's \
                     largest side)"
                ),
                self.max_texture_size.to_string(),
            ));
        }
        Ok(())
    }
}

/// Tiles, triangles and bytes of one level of the tree (level 0 = root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshLevelStats {
    /// Tiles at this level.
    pub tiles: usize,
    /// Triangles summed over the level's tiles.
    pub triangles: usize,
    /// GLB bytes of the level's tiles (textures not included).
    pub bytes: u64,
    /// Distinct materials drawn at this level (a material counts once however many tiles use it).
    #[serde(default)]
    pub materials: usize,
    /// Bytes of the distinct image files the level's tiles reference (a file shared with another
    /// level counts in both).
    #[serde(default)]
    pub texture_bytes: u64,
    /// GPU memory those images take in a WebGL viewer, mip chains included (RGBA8 for PNG, JPEG
    /// and WebP; compressed blocks for KTX2; see [`texture::gpu_bytes`]).
    #[serde(default)]
    pub gpu_texture_bytes: u64,
}

/// [`texture::gpu_bytes`] summed over the image files `uris` (relative to `tiles_dir`).
fn level_gpu_bytes<'u>(tiles_dir: &Path, uris: impl Iterator<Item = &'u String>) -> Result<u64> {
    let mut total = 0;
    for uri in uris {
        let path = tiles_dir.join(uri);
        let bytes = std::fs::read(&path).map_err(|e| crate::Error::Io {
            path: path.clone(),
            source: e,
        })?;
        total += texture::gpu_bytes(&bytes).unwrap_or(0);
    }
    Ok(total)
}

/// What [`tile_mesh`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshTileReport {
    /// Counts shared with the splat tiler; `content_bytes` includes the texture files.
    pub report: TileReport,
    /// One entry per level, root first.
    pub levels: Vec<MeshLevelStats>,
    /// Bytes of the texture files (each written once).
    pub texture_bytes: u64,
    /// Names of the source materials, in the mesh's order (`material <i>` when unnamed); every
    /// one whose triangles reach the leaves is in some leaf tile.
    pub materials: Vec<String>,
    /// With `texture_atlas`: how many (tile, image set) groups got an atlas and, by reason, how
    /// many kept the shared level images.
    pub texture_atlases: Option<atlas::AtlasStats>,
    /// Per source image (in image order): what its encoding kept of the pixels it encodes.
    pub texture_fidelity: Vec<texture::ImageFidelity>,
}

/// Version of the mesh tiler, part of the mesh tile stage's key (a rerun after the algorithm
/// changed tiles again instead of reusing an older tileset). 2 (the first recorded): per-tile
/// atlases, geometricError measured through descendants for large cells, WebP input. 3: KTX2
/// output, GPU texture bytes and texture encoding fidelity in the report. 4: PNG levels and
/// atlases at zlib's balanced setting instead of the fast one (smaller files, same pixels). 5: the
/// stage summary records the delivered levels' renders scored against `lod_0` (`delivered`). 6:
/// KTX2 sources stay KTX2 at every level under `texture_format = "source"` (resized levels
/// re-encoded with the source's codec) instead of arriving as PNG.
pub const MESH_TILER_VERSION: u32 = 6;

/// Tile the full-resolution level of a decimate chain: check `lods`, read `lod_dir/lods[0].file`
/// and run [`tile_mesh`] on it. The coarser levels of the chain are not used (the HLOD parents
/// are simplified per tile).
///
/// # Errors
/// [`Error::Param`] — see [`check_tile_mesh_inputs`] and [`MeshTileParams::validate`];
/// [`Error::Format`] — the GLB is missing or unreadable (names the file); as [`tile_mesh`].
pub fn tile_mesh_lods(
    lods: &[LodLevel],
    lod_dir: &Path,
    params: &MeshTileParams,
    out_dir: &Path,
) -> Result<MeshTileReport> {
    check_tile_mesh_inputs(lods)?;
    params.validate()?;
    let mesh = read_gltf(&lod_dir.join(&lods[0].file))?;
    tile_mesh(&mesh, params, out_dir)
}

/// Write `out_dir/tileset.json`, `out_dir/tiles/*.glb` and `out_dir/tiles/textures/*` for `mesh`.
///
/// Guarantees: leaves hold the welded mesh's triangles exactly once, ≤ `max_triangles_per_tile`
/// each; a parent's content is the union of its children's simplified with its cell border
/// locked (see [`hlod::build_hlod`]), so the border of every tile's cell is made of the full-resolution vertices and edges (no cracks
/// between tiles of any levels); all tiles share one position lattice (see [`encode`]), so those
/// vertices quantize to the same integers in every tile; geometricError (metres) is 0 at
/// leaves and, above, never below the measured two-sided Hausdorff distance between the tile's
/// content and the full-resolution triangles of its cell (a certified bound, see [`deviation`];
/// the lattice moves vertices by at most half a step per axis) nor below its children's;
/// `tileset.geometricError` =
/// max(root error, box diagonal); each tile's box is the Z-up AABB of its decoded content and of
/// its descendants'; refinement is REPLACE; each tile has one primitive per material it draws and
/// a parent draws every material its children draw (simplification keeps material seams); each
/// image file is written once: leaves reference the source size, each level above ½ the resolution
/// of the level below, capped by `max_texture_size` (see [`texture`]). Files are written
/// atomically, tiles and textures before `tileset.json`.
///
/// Not guaranteed: parents at exactly half their children's triangles (the simplifier stops at
/// locked borders and at `max_simplify_error`); files of an earlier run with other names are not
/// removed.
///
/// * `mesh` — `[V, 3]` metres, glTF Y-up, `[F, 3]` indices (see [`Mesh`]); it is welded first
///   (bit-identical position + normal + UV), so UV seams stay split.
/// * `params` — see [`MeshTileParams`].
/// * `out_dir` — created if missing.
///
/// # Errors
/// [`Error::Param`] — bad `params`; [`Error::Input`] — a mesh that breaks the [`Mesh`] invariants
/// (see `decimate::weld`); [`Error::Format`] — an encoding or write failure.
///
/// # Panics
/// Never.
pub fn tile_mesh(mesh: &Mesh, params: &MeshTileParams, out_dir: &Path) -> Result<MeshTileReport> {
    Ok(build_and_write(mesh, params, out_dir)?.0)
}

/// The glTF extensions the tiles' materials may use (`KHR_texture_transform`,
/// `KHR_materials_*`), for the tileset's `3DTILES_content_gltf.extensionsUsed`: 3D Tiles 1.1
/// asks that list to hold every extension the content uses (validators warn otherwise). None is
/// required: a client without one still draws the core material.
fn material_extensions(materials: &[kiln_formats::mesh::Material]) -> Vec<String> {
    let mut table = kiln_formats::mesh::MaterialTable::default();
    for m in materials {
        table.add(m);
    }
    table.extensions_used().map(str::to_string).collect()
}

/// [`tile_mesh`], also returning the welded mesh, the lattice and the tree (for tests).
fn build_and_write(
    mesh: &Mesh,
    params: &MeshTileParams,
    out_dir: &Path,
) -> Result<(MeshTileReport, Mesh, Lattice, HlodNode)> {
    params.validate()?;
    let welded = weld(mesh)?;
    let (min, max) = welded.aabb().ok_or_else(|| Error::Input {
        path: "<input mesh>".into(),
        field: "positions".into(),
        problem: "no finite vertex".into(),
    })?;
    let extent_m = (0..3).map(|k| max[k] - min[k]).fold(0.0, f64::max);
    let lattice = Lattice::for_extent(extent_m);
    let vertex_materials = vertex_materials(&welded);
    let tree = build_hlod(
        &welded.positions,
        &welded.indices,
        &vertex_materials,
        VertexAttributes {
            normals: welded.normals.as_deref(),
            uvs: welded.uvs.as_deref(),
            colors: welded.colors.as_deref(),
        },
        HlodOptions {
            max_triangles: params.max_triangles_per_tile,
            root_fraction: params.root_fraction,
            max_simplify_error: params.max_simplify_error,
            direct_deviation_max_triangles: hlod::DIRECT_DEVIATION_MAX_TRIANGLES,
        },
    )?;
    warn_parents_over_budget(&tree, params.max_triangles_per_tile);

    let tiles_dir = out_dir.join(TILES_DIR);
    let mut writer = Writer {
        welded: &welded,
        vertex_materials: &vertex_materials,
        lattice,
        textures: TexturePyramid::new(
            &welded.images,
            &welded.materials,
            &tiles_dir,
            params.max_texture_size,
            params.texture_format,
        ),
        texture_atlas: params.texture_atlas,
        atlas_stats: atlas::AtlasStats::default(),
        tiles_dir: &tiles_dir,
        levels: Vec::new(),
        level_materials: Vec::new(),
        level_textures: Vec::new(),
    };
    let (root, (lo, hi)) = writer.emit(&tree, "r", 0)?;
    let texture_bytes = writer.textures.bytes;
    let texture_fidelity = writer.textures.fidelity();
    let writer_atlas_stats = writer.atlas_stats.clone();
    if params.texture_atlas {
        let s = &writer.atlas_stats;
        let kept = |why| s.kept.get(&why).copied().unwrap_or(0);
        tracing::info!(
            atlased = s.atlased,
            kept_unsupported = kept(atlas::Skip::Unsupported),
            kept_mixed_sizes = kept(atlas::Skip::MixedSizes),
            kept_wrapping = kept(atlas::Skip::Wrapping),
            kept_no_saving = kept(atlas::Skip::NoSaving),
            "tile: texture atlases (per tile and image set; kept = shared level images: \
             TEXCOORD_1/KHR_texture_transform/non-PNG-JPEG, images whose sizes are not whole multiples of one another, charts \
             across a texture repeat, or no saving of 25 % in pixels and bytes)"
        );
    }
    let mut levels = writer.levels;
    for ((level, used), files) in levels
        .iter_mut()
        .zip(&writer.level_materials)
        .zip(&writer.level_textures)
    {
        level.materials = used.iter().filter(|&&u| u).count();
        level.texture_bytes = files.values().sum();
        level.gpu_texture_bytes = level_gpu_bytes(&tiles_dir, files.keys())?;
    }
    let diagonal_m = (0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>().sqrt();
    let geometric_error = diagonal_m.max(root.geometric_error);
    let material_extensions = material_extensions(&mesh.materials);
    let mut used = vec![KHR_MESH_QUANTIZATION, EXT_MESHOPT_COMPRESSION];
    let mut required = used.clone();
    // WebP and KTX2 images are named through their extensions, without a core fallback.
    for (ext, name) in [(".webp", EXT_TEXTURE_WEBP), (".ktx2", KHR_TEXTURE_BASISU)] {
        if writer
            .level_textures
            .iter()
            .any(|files| files.keys().any(|uri| uri.ends_with(ext)))
        {
            used.push(name);
            required.push(name);
        }
    }
    used.extend(material_extensions.iter().map(String::as_str));
    let tileset_path = write_tileset(
        out_dir,
        root,
        geometric_error,
        &used,
        &required,
        false,
        None,
    )?;
    for (depth, l) in levels.iter().enumerate() {
        tracing::info!(
            level = depth,
            tiles = l.tiles,
            triangles = l.triangles,
            bytes = l.bytes,
            materials = l.materials,
            "tile: mesh level"
        );
    }
    let glb_bytes: u64 = levels.iter().map(|l| l.bytes).sum();
    let report = MeshTileReport {
        report: TileReport {
            tiles: levels.iter().map(|l| l.tiles).sum(),
            levels: levels.len() as u32,
            content_bytes: glb_bytes + texture_bytes,
            tileset_path,
        },
        levels,
        texture_bytes,
        materials: welded
            .materials
            .iter()
            .enumerate()
            .map(|(i, m)| m.name.clone().unwrap_or_else(|| format!("material {i}")))
            .collect(),
        texture_atlases: params.texture_atlas.then_some(writer_atlas_stats),
        texture_fidelity,
    };
    Ok((report, welded, lattice, tree))
}

/// Axis-aligned box `(min, max)`, metres.
type Aabb = ([f64; 3], [f64; 3]);

/// Writes tile GLBs depth-first and assembles the [`Tile`] tree.
struct Writer<'a> {
    welded: &'a Mesh,
    vertex_materials: &'a [u32],
    lattice: Lattice,
    textures: TexturePyramid<'a>,
    /// [`MeshTileParams::texture_atlas`].
    texture_atlas: bool,
    /// What the atlas pass did, for the stage's log.
    atlas_stats: atlas::AtlasStats,
    tiles_dir: &'a Path,
    levels: Vec<MeshLevelStats>,
    /// Per level, per source material: drawn by some tile of the level.
    level_materials: Vec<Vec<bool>>,
    /// Per level: the image files its tiles reference (URI → bytes).
    level_textures: Vec<HashMap<String, u64>>,
}

impl Writer<'_> {
    /// Write `node` (named `name`, at `depth`) and its subtree; returns its tile and its box
    /// (Z-up, metres, content ∪ descendants).
    fn emit(&mut self, node: &HlodNode, name: &str, depth: usize) -> Result<(Tile, Aabb)> {
        if self.levels.len() <= depth {
            self.levels.resize(
                depth + 1,
                MeshLevelStats {
                    tiles: 0,
                    triangles: 0,
                    bytes: 0,
                    materials: 0,
                    texture_bytes: 0,
                    gpu_texture_bytes: 0,
                },
            );
            self.level_materials
                .resize(depth + 1, vec![false; self.welded.materials.len()]);
            self.level_textures.resize(depth + 1, HashMap::new());
        }
        let mut encoded = quantize_tile(
            self.welded,
            self.vertex_materials,
            &node.indices,
            self.lattice,
            &unset_images(&self.welded.images),
        );
        self.tile_textures(&mut encoded.mesh, node, name, depth)?;
        let bytes = write_quantized_glb(&encoded.mesh, &MeshoptCodec)?;
        let file = format!("{name}.glb");
        write_atomic(&self.tiles_dir.join(&file), &bytes)?;
        for t in node.indices.chunks_exact(3) {
            self.level_materials[depth][self.vertex_materials[t[0] as usize] as usize] = true;
        }
        let level = &mut self.levels[depth];
        level.tiles += 1;
        level.triangles += node.triangle_count();
        level.bytes += bytes.len() as u64;

        // Content bounds from the lattice points a client decodes (exact: s is a power of two).
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for p in encoded.mesh.primitives.iter().flat_map(|p| &p.positions) {
            let y_up = encoded.position_m(*p);
            let z_up = to_z_up(y_up);
            for k in 0..3 {
                lo[k] = lo[k].min(z_up[k]);
                hi[k] = hi[k].max(z_up[k]);
            }
        }
        let mut children = Vec::with_capacity(node.children.len());
        for (i, child) in node.children.iter().enumerate() {
            let (tile, (clo, chi)) = self.emit(child, &format!("{name}{i}"), depth + 1)?;
            for k in 0..3 {
                lo[k] = lo[k].min(clo[k]);
                hi[k] = hi[k].max(chi[k]);
            }
            children.push(tile);
        }
        let tile = Tile {
            bounding_volume: BoundingVolume::from_aabb(lo, hi),
            geometric_error: node.error_m,
            refine: Some(Refine::Replace),
            transform: None,
            content: Some(Content {
                uri: format!("{TILES_DIR}/{file}"),
            }),
            children,
        };
        Ok((tile, (lo, hi)))
    }
}

impl Writer<'_> {
    /// The images of tile `node` (file stem `name`, at `depth`), at its texture level (its
    /// height, see [`texture`]): per-tile atlases where they save pixels (see [`atlas`]), the
    /// shared level images for the rest; written if not yet, and counted in the level's bytes.
    fn tile_textures(
        &mut self,
        mesh: &mut QuantizedMesh,
        node: &HlodNode,
        name: &str,
        depth: usize,
    ) -> Result<()> {
        let level = height(node);
        if self.texture_atlas {
            let max_size = self.textures.max_size();
            let textures = &mut self.textures;
            let stats = &mut self.atlas_stats;
            for (uri, n) in atlas::atlas_tile(mesh, level, name, textures, max_size, stats)? {
                self.level_textures[depth].insert(uri, n);
            }
        }
        let mut used = vec![false; self.welded.images.len()];
        for m in &mesh.materials {
            for t in m.textures() {
                if let Some(u) = used.get_mut(t.image) {
                    *u = true;
                }
            }
        }
        for (i, used) in used.into_iter().enumerate() {
            if used {
                let (r, n) = self.textures.image_at(i, level)?;
                self.level_textures[depth].insert(r.uri.clone(), n);
                mesh.images[i] = r;
            }
        }
        Ok(())
    }
}

/// Say how many parents stayed over `budget` triangles: where locked cell borders or material
/// seams stop the simplifier, a parent keeps more (leaves never do).
fn warn_parents_over_budget(tree: &HlodNode, budget: usize) {
    let mut over = Vec::new();
    let mut stack = vec![tree];
    while let Some(n) = stack.pop() {
        stack.extend(&n.children);
        if !n.children.is_empty() && n.triangle_count() > budget {
            over.push(n.triangle_count());
        }
    }
    if let Some(largest) = over.iter().max() {
        tracing::warn!(
            parents = over.len(),
            largest,
            budget,
            "tile: parent tiles stay over max_triangles_per_tile: the simplifier stalled at \
             locked cell borders or material seams (clients still draw them; a larger budget \
             gives the simplifier room)"
        );
    }
}

/// One [`ImageRef`] per entry of `images`, URI not yet set (a tile's images before
/// [`Writer::tile_textures`] fills those it uses).
fn unset_images(images: &[kiln_formats::mesh::EmbeddedImage]) -> Vec<ImageRef> {
    images
        .iter()
        .map(|i| ImageRef {
            uri: String::new(),
            mime: i.mime.clone(),
        })
        .collect()
}

/// Height of `node` in its tree: 0 for a leaf, else 1 + its highest child's.
fn height(node: &HlodNode) -> u32 {
    node.children
        .iter()
        .map(|c| height(c) + 1)
        .max()
        .unwrap_or(0)
}

/// A glTF Y-up point in the Z-up tile frame ([`Y_UP_TO_Z_UP`], column-major).
fn to_z_up(p: [f64; 3]) -> [f64; 3] {
    let m = Y_UP_TO_Z_UP;
    [0, 1, 2].map(|r| m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r])
}

/// The checks [`tile_mesh_lods`] runs before reading any file.
///
/// # Errors
/// [`Error::Param`] — empty chain, level 0 with non-zero error, errors not finite / negative /
/// decreasing with the level, a file name that is not a plain name.
pub fn check_tile_mesh_inputs(lods: &[LodLevel]) -> Result<()> {
    let param = |field: String, expected: &str, found: String| Error::Param {
        stage: "tile",
        field,
        expected: expected.into(),
        found,
    };
    let Some(leaf) = lods.first() else {
        return Err(param(
            "lods".into(),
            "at least one LOD level (rerun decimate)",
            "none".into(),
        ));
    };
    if leaf.error_m != 0.0 {
        return Err(param(
            "lods[0].error_m".into(),
            "0 (level 0 is the full-resolution leaf)",
            leaf.error_m.to_string(),
        ));
    }
    for (i, lod) in lods.iter().enumerate() {
        if !(lod.error_m.is_finite() && lod.error_m >= 0.0) {
            return Err(param(
                format!("lods[{i}].error_m"),
                "a finite error ≥ 0 m",
                lod.error_m.to_string(),
            ));
        }
        if i > 0 && lod.error_m < lods[i - 1].error_m {
            return Err(param(
                format!("lods[{i}].error_m"),
                &format!("≥ the finer level's {} m", lods[i - 1].error_m),
                lod.error_m.to_string(),
            ));
        }
        let plain = Path::new(&lod.file)
            .file_name()
            .is_some_and(|n| n == lod.file.as_str())
            && lod.file != "..";
        if !plain {
            return Err(param(
                format!("lods[{i}].file"),
                "a plain file name inside the LOD directory",
                format!("{:?}", lod.file),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
