//! Per-tile texture atlases: each tile references only the texels its triangles use.
//!
//! A shared per-level image (see [`super::texture`]) makes a leaf that covers a quarter of a
//! model download the whole texture. Here, for each tile, the triangles of the materials that
//! share one set of images are split into UV charts (connected through shared vertices: the weld
//! splits vertices at UV seams, so a chart is a UV-connected patch), each chart's UV box is cut
//! out of the tile's level image with a ring of [`BLEED_PX`] real neighbouring texels, the pieces
//! are packed on shelves into one atlas per image, and the chart's texture coordinates are moved
//! by the same whole-texel offset — the approach of OpenDroneMap's Obj2Tiles (per-tile atlas with a
//! bleed ring) at the texel density of [`super::texture`]'s pyramid (½ per level).
//!
//! Fidelity: a piece is a whole-texel translation of the level image and the ring holds the
//! level image's own neighbouring texels, so bilinear sampling inside a chart (and up to
//! [`BLEED_PX`] texels around it, which covers mipmap levels 1–3 of the atlas) reads the same
//! values as in the level image; only the encoder's rounding differs (PNG: none; JPEG: one more
//! quality-90 pass). UVs move in f64 from their stored (unorm16 or float) values and are stored
//! as unorm16 again: ≤ 1/65535 of the atlas, under 0.07 texel up to 4096 px.
//!
//! A group of a tile keeps the shared level image instead (nothing is lost, only less is saved)
//! when any of its textures reads `TEXCOORD_1` or has a `KHR_texture_transform`, an image is not
//! PNG/JPEG, its images' level sizes are not whole multiples of the smallest one's (a 2048² and a
//! 1024² image share one layout, planned on the 1024² grid), a UV lies outside [0, 1] (wrapping
//! textures), or
//! the atlas would not be under [`MAX_ATLAS_FRACTION`] of the level image's pixels or would exceed
//! `max_texture_size`.

use std::collections::{BTreeMap, HashMap};

use image::{DynamicImage, GenericImage, GenericImageView};
use kiln_formats::mesh::{QuantizedMesh, QuantizedPrimitive, TexCoords, WRAP_REPEAT};

use super::TEXTURES_DIR;
use super::texture::TexturePyramid;
use crate::Result;

/// Texels of real neighbouring content kept around each chart: bilinear filtering reads one,
/// each mipmap level of the atlas halves the ring, so 8 keeps levels 1 to 3 free of the
/// neighbouring pieces (with [`ALIGN_PX`] their blocks also match the level image's).
pub const BLEED_PX: i64 = 8;

/// An atlas is written only when it holds fewer pixels, and its files fewer bytes, than this
/// fraction of the level images it replaces; otherwise the tile references the shared level
/// images (which other tiles reuse).
pub const MAX_ATLAS_FRACTION: f64 = 0.75;

/// Sub-directory of [`TEXTURES_DIR`] holding the atlases (one file per tile, group and image).
pub const ATLAS_DIR: &str = "atlas";

/// A pixel rectangle `[x0, x1) × [y0, y1)` in a level image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rect {
    x0: i64,
    y0: i64,
    x1: i64,
    y1: i64,
}

impl Rect {
    fn width(&self) -> i64 {
        self.x1 - self.x0
    }
    fn height(&self) -> i64 {
        self.y1 - self.y0
    }
    fn area(&self) -> i64 {
        self.width() * self.height()
    }
    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    fn union(&self, o: &Rect) -> Rect {
        Rect {
            x0: self.x0.min(o.x0),
            y0: self.y0.min(o.y0),
            x1: self.x1.max(o.x1),
            y1: self.y1.max(o.y1),
        }
    }
}

/// What [`atlas_tile`] wrote: per written file its URI and bytes.
pub type Written = Vec<(String, u64)>;

/// Why a group of a tile kept the shared level images (see the module docs).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Skip {
    /// A texture reads `TEXCOORD_1` or has a `KHR_texture_transform`, or has no UVs, or an image
    /// is not PNG/JPEG.
    Unsupported,
    /// The group's images' sizes at this level are not whole multiples of the smallest.
    MixedSizes,
    /// A chart crosses a texture repeat (or leaves [0, 1] without `REPEAT`).
    Wrapping,
    /// The atlas would not save [`MAX_ATLAS_FRACTION`] of the pixels or bytes, or exceeds
    /// `max_texture_size`.
    NoSaving,
}

/// Counts over a tileset: groups of tiles given an atlas, and groups that kept the shared images
/// by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AtlasStats {
    /// (tile, image set) groups that got an atlas.
    pub atlased: usize,
    /// Groups that kept the shared level images, by reason.
    pub kept: BTreeMap<Skip, usize>,
}

/// Replace, in `mesh` (a tile at tree height `level`, file stem `name`), the level images of
/// every eligible group of materials by atlases of the texels its triangles use (see the module
/// docs). `mesh.images` holds one entry per source image on entry (URIs not yet set); atlases are
/// appended and the group's materials retargeted to them, so afterwards the source images still
/// referenced by some material are the ones the caller must provide at the tile's level.
///
/// # Errors
/// [`crate::Error::Input`] — an image cannot be decoded or encoded; [`crate::Error::Format`] — a
/// write failed.
pub fn atlas_tile(
    mesh: &mut QuantizedMesh,
    level: u32,
    name: &str,
    pyramid: &mut TexturePyramid<'_>,
    max_texture_size: u32,
    stats: &mut AtlasStats,
) -> Result<Written> {
    let mut written = Vec::new();
    let mut skip = |why: Skip| *stats.kept.entry(why).or_insert(0) += 1;
    let (groups, unsupported) = groups(mesh);
    for _ in 0..unsupported {
        skip(Skip::Unsupported);
    }
    for (g, (images, primitives)) in groups.into_iter().enumerate() {
        let (size, scales) = match common_level_size(&images, level, pyramid)? {
            Ok(sized) => sized,
            Err(why) => {
                skip(why);
                continue;
            }
        };
        // The largest image's atlas is its scale times the plan's.
        let largest = scales.iter().copied().max().unwrap_or(1);
        let plan = match plan(mesh, &primitives, size, max_texture_size / largest) {
            Ok(plan) => plan,
            Err(why) => {
                skip(why);
                continue;
            }
        };
        let mut encoded = Vec::with_capacity(images.len());
        let mut replaced = 0;
        for (&image, &k) in images.iter().zip(&scales) {
            let atlas = plan.compose(pyramid.pixels(image, k * size.0, k * size.1)?, k);
            encoded.push(pyramid.encode_derived(image, &atlas)?);
            replaced += pyramid.level_bytes(image, level)?;
        }
        // Pixels are not bytes: an atlas of a palette PNG is written as RGB, and JPEG blocks cost
        // more at piece borders; the shared image wins when the atlases would not be smaller.
        let atlas_bytes: u64 = encoded.iter().map(|b| b.len() as u64).sum();
        if atlas_bytes as f64 >= MAX_ATLAS_FRACTION * replaced as f64 {
            skip(Skip::NoSaving);
            continue;
        }
        let mut retarget = HashMap::new();
        for (k, (&image, bytes)) in images.iter().zip(&encoded).enumerate() {
            let uri = format!("{TEXTURES_DIR}/{ATLAS_DIR}/{name}-{g}-{k}");
            let (r, n) = pyramid.write_derived(image, &uri, bytes)?;
            written.push((r.uri.clone(), n));
            mesh.images.push(r);
            retarget.insert(image, mesh.images.len() - 1);
        }
        plan.apply(mesh, size);
        stats.atlased += 1;
        for &p in &primitives {
            let m = mesh.primitives[p].material;
            for t in mesh.materials[m].textures_mut() {
                t.image = retarget[&t.image];
            }
        }
    }
    Ok(written)
}

/// Primitives grouped by the images their material reads (in a fixed order), for the materials
/// that can use an atlas: every texture on `TEXCOORD_0`, no `KHR_texture_transform`, UVs present;
/// and the number of textured primitives that cannot.
fn groups(mesh: &QuantizedMesh) -> (BTreeMap<Vec<usize>, Vec<usize>>, usize) {
    let mut out: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    let mut unsupported = 0;
    for (p, prim) in mesh.primitives.iter().enumerate() {
        let m = &mesh.materials[prim.material];
        let textures: Vec<_> = m.textures().collect();
        let plain = |t: &&kiln_formats::mesh::TextureRef| t.tex_coord == 0 && t.transform.is_none();
        if textures.is_empty() {
            continue;
        }
        if !textures.iter().all(plain) || prim.uvs.is_none() {
            unsupported += 1;
            continue;
        }
        let mut images: Vec<usize> = textures.iter().map(|t| t.image).collect();
        images.sort_unstable();
        images.dedup();
        out.entry(images).or_default().push(p);
    }
    (out, unsupported)
}

/// A group's smallest level size (pixels) and each image's whole scale over it.
type GroupSizes = ((u32, u32), Vec<u32>);

/// The smallest level size among `images` at `level` and each image's whole scale `k` over it
/// (its size is exactly `k` times the smallest on both axes, e.g. a 2048² base colour with a
/// 1024² normal map: 2 and 1), or why there is none: an image is not resamplable, or a size is
/// not such a multiple. One layout, planned on the smallest image's texel grid, then fits every
/// image: at `k` times its coordinates each piece is still a whole-texel translation.
fn common_level_size(
    images: &[usize],
    level: u32,
    pyramid: &mut TexturePyramid<'_>,
) -> Result<std::result::Result<GroupSizes, Skip>> {
    let mut sizes = Vec::with_capacity(images.len());
    for &i in images {
        if !pyramid.resamplable(i) {
            return Ok(Err(Skip::Unsupported));
        }
        sizes.push(pyramid.level_dims(i, level)?);
    }
    let Some(&base) = sizes
        .iter()
        .min_by_key(|(w, h)| u64::from(*w) * u64::from(*h))
    else {
        return Ok(Err(Skip::Unsupported));
    };
    let scale = |(w, h): (u32, u32)| {
        let k = w / base.0;
        (k >= 1 && (w, h) == (k * base.0, k * base.1)).then_some(k)
    };
    Ok(sizes
        .into_iter()
        .map(scale)
        .collect::<Option<Vec<u32>>>()
        .map(|scales| (base, scales))
        .ok_or(Skip::MixedSizes))
}

/// Where each chart's piece goes.
struct Plan {
    /// Per primitive of the group, in order: its new triangles and vertices.
    primitives: Vec<PrimitivePlan>,
    /// Pieces: rectangle in the level image and its top-left corner in the atlas.
    pieces: Vec<(Rect, (i64, i64))>,
    /// Atlas size, pixels.
    width: u32,
    height: u32,
}

/// One primitive's charts after splitting: vertices on a cut between two pieces are duplicated
/// (same position and attributes, other UV), so each vertex lies on exactly one piece.
struct PrimitivePlan {
    /// The primitive's index in the tile.
    primitive: usize,
    /// `[F, 3]` flattened triangles over the old vertices followed by the duplicates.
    indices: Vec<u32>,
    /// Per duplicate (appended in order), the old vertex it copies.
    duplicates: Vec<u32>,
    /// Per vertex (old, then duplicates): its piece (index into [`Plan::pieces`] after merging)
    /// and the whole-texture shift `[u, v]` of its chart (see [`whole_cell`]).
    vertex_piece: Vec<(usize, [f64; 2])>,
}

/// UV of `prim`'s vertices as f64 (unorm16 decoded as `c / 65535`).
fn uvs_f64(uvs: &TexCoords) -> Vec<[f64; 2]> {
    match uvs {
        TexCoords::Unorm16(t) => t
            .iter()
            .map(|uv| uv.map(|c| f64::from(c) / 65535.0))
            .collect(),
        TexCoords::Float(t) => t.iter().map(|uv| uv.map(f64::from)).collect(),
    }
}

/// The atlas layout of `primitives` of `mesh` on a `size` level image, or why there is none.
fn plan(
    mesh: &QuantizedMesh,
    primitives: &[usize],
    size: (u32, u32),
    max_texture_size: u32,
) -> std::result::Result<Plan, Skip> {
    let (w, h) = (i64::from(size.0), i64::from(size.1));
    let mut rects = Vec::new();
    let mut shifts = Vec::new();
    let mut split = Vec::new();
    for &p in primitives {
        let prim = &mesh.primitives[p];
        let Some(uvs) = prim.uvs.as_ref().map(uvs_f64) else {
            return Err(Skip::Unsupported);
        };
        let repeat = |axis: usize| {
            mesh.materials[prim.material].textures().all(|t| {
                let wrap = if axis == 0 {
                    t.sampler.wrap_s
                } else {
                    t.sampler.wrap_t
                };
                wrap == WRAP_REPEAT
            })
        };
        let repeats = [repeat(0), repeat(1)];
        let mut part_of = vec![0usize; prim.indices.len() / 3];
        for chart in triangles_by_chart(&prim.indices, uvs.len()) {
            let b = uv_box(&prim.indices, &chart, &uvs);
            let shift = [0, 1].map(|k| whole_cell(b[k], b[k + 2], repeats[k]));
            let [Some(su), Some(sv)] = shift else {
                return Err(Skip::Wrapping);
            };
            let texel = |t: u32, k: usize| {
                (0..3)
                    .map(|c| uvs[prim.indices[3 * t as usize + c] as usize][k])
                    .sum::<f64>()
                    / 3.0
            };
            let (parts, _) = split_chart(chart, 0, &|t, k| texel(t, k), &mut |part: &[u32]| {
                let b = uv_box(&prim.indices, part, &uvs);
                texel_rect([b[0] - su, b[1] - sv, b[2] - su, b[3] - sv], w, h)
            });
            for (rect, part) in parts {
                for &t in &part {
                    part_of[t as usize] = rects.len();
                }
                rects.push(rect);
                shifts.push([su, sv]);
            }
        }
        split.push((p, part_of));
    }
    let (merged, chart_piece) = merge_overlapping(&rects);
    let merged: Vec<Rect> = merged.iter().map(|r| aligned(*r, w, h)).collect();
    let (positions, aw, ah) = shelf_pack(&merged);
    let fits = aw <= i64::from(max_texture_size) && ah <= i64::from(max_texture_size);
    if !fits || (aw * ah) as f64 >= MAX_ATLAS_FRACTION * (w * h) as f64 {
        return Err(Skip::NoSaving);
    }
    let primitives = split
        .into_iter()
        .map(|(p, part_of)| {
            let prim = &mesh.primitives[p];
            duplicate_cut_vertices(p, &prim.indices, prim.positions.len(), &part_of, |part| {
                (chart_piece[part], shifts[part])
            })
        })
        .collect();
    Ok(Plan {
        primitives,
        pieces: merged.into_iter().zip(positions).collect(),
        width: aw as u32,
        height: ah as u32,
    })
}

/// `[u0, v0, u1, v1]` box of the UVs of triangles `tris` (ids into `indices`).
fn uv_box(indices: &[u32], tris: &[u32], uvs: &[[f64; 2]]) -> [f64; 4] {
    let mut b = [
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ];
    for &t in tris {
        for c in 0..3 {
            let uv = uvs[indices[3 * t as usize + c] as usize];
            b[0] = b[0].min(uv[0]);
            b[1] = b[1].min(uv[1]);
            b[2] = b[2].max(uv[0]);
            b[3] = b[3].max(uv[1]);
        }
    }
    b
}

/// A chart is cut only when its pieces hold less than this fraction of the whole chart's piece's
/// pixels (each cut adds a bleed ring and a seam of duplicated vertices).
const SPLIT_GAIN: f64 = 0.8;

/// Deepest cut of one chart (at most 2^10 pieces).
const MAX_SPLIT_DEPTH: u32 = 10;

/// Cut chart `tris` in two at the median UV centroid along its piece's longer side, each half
/// recursively (to [`MAX_SPLIT_DEPTH`]), and keep the cut where the best pieces of the halves
/// hold less than [`SPLIT_GAIN`] of the whole's pixels (`rect_of` gives a set's piece): a tile
/// holding a thin or curved strip of a large chart (DamagedHelmet's charts span much of the
/// texture) keeps the strip's texels, not the chart's box. Looking down the whole recursion
/// rather than one cut ahead finds strips whose first cut alone saves little (an arc).
/// `centroid(t, axis)` is triangle `t`'s UV centroid. Returns the pieces and their pixels.
fn split_chart(
    mut tris: Vec<u32>,
    depth: u32,
    centroid: &dyn Fn(u32, usize) -> f64,
    rect_of: &mut dyn FnMut(&[u32]) -> Rect,
) -> (Vec<(Rect, Vec<u32>)>, i64) {
    let whole = rect_of(&tris);
    if tris.len() < MIN_SPLIT_TRIANGLES || depth >= MAX_SPLIT_DEPTH {
        return (vec![(whole, tris)], whole.area());
    }
    let axis = usize::from(whole.height() > whole.width());
    tris.sort_by(|&a, &b| centroid(a, axis).total_cmp(&centroid(b, axis)));
    let b = tris.split_off(tris.len() / 2);
    let (mut pa, ca) = split_chart(tris, depth + 1, centroid, rect_of);
    let (pb, cb) = split_chart(b, depth + 1, centroid, rect_of);
    if ((ca + cb) as f64) < SPLIT_GAIN * whole.area() as f64 {
        pa.extend(pb);
        (pa, ca + cb)
    } else {
        let all = pa.into_iter().chain(pb).flat_map(|(_, t)| t).collect();
        (vec![(whole, all)], whole.area())
    }
}

/// Charts of fewer triangles are not cut.
const MIN_SPLIT_TRIANGLES: usize = 2;

/// Triangles of `indices` grouped by chart (vertex-connected component), each group in triangle
/// order.
fn triangles_by_chart(indices: &[u32], vertex_count: usize) -> Vec<Vec<u32>> {
    let (chart_of, n) = charts(indices, vertex_count);
    let mut out = vec![Vec::new(); n];
    for (t, tri) in indices.chunks_exact(3).enumerate() {
        out[chart_of[tri[0] as usize]].push(t as u32);
    }
    out
}

/// Give every triangle of part `part_of[t]` vertices of its own part: a vertex used by triangles
/// of several parts stays with the first and is copied for each other (appended after the
/// `vertex_count` old vertices). `place(part)` is the part's piece and shift.
fn duplicate_cut_vertices(
    primitive: usize,
    indices: &[u32],
    vertex_count: usize,
    part_of: &[usize],
    place: impl Fn(usize) -> (usize, [f64; 2]),
) -> PrimitivePlan {
    let mut owner = vec![usize::MAX; vertex_count];
    let mut copies: HashMap<(u32, usize), u32> = HashMap::new();
    let mut duplicates = Vec::new();
    let mut vertex_piece = vec![(0, [0.0; 2]); vertex_count];
    let mut out = Vec::with_capacity(indices.len());
    for (t, tri) in indices.chunks_exact(3).enumerate() {
        let part = part_of[t];
        for &v in tri {
            let o = &mut owner[v as usize];
            if *o == usize::MAX {
                *o = part;
                vertex_piece[v as usize] = place(part);
            }
            if *o == part {
                out.push(v);
                continue;
            }
            let next = (vertex_count + duplicates.len()) as u32;
            let copy = *copies.entry((v, part)).or_insert_with(|| {
                duplicates.push(v);
                vertex_piece.push(place(part));
                next
            });
            out.push(copy);
        }
    }
    PrimitivePlan {
        primitive,
        indices: out,
        duplicates,
        vertex_piece,
    }
}

/// Connected components of the triangles `indices` over `vertex_count` vertices: per vertex its
/// chart (`usize::MAX` for a vertex no triangle uses) and the number of charts.
fn charts(indices: &[u32], vertex_count: usize) -> (Vec<usize>, usize) {
    let mut parent: Vec<usize> = (0..vertex_count).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for t in indices.chunks_exact(3) {
        let a = find(&mut parent, t[0] as usize);
        for &v in &t[1..] {
            let b = find(&mut parent, v as usize);
            parent[b] = a;
        }
    }
    let mut used = vec![false; vertex_count];
    for &v in indices {
        used[v as usize] = true;
    }
    let mut id = HashMap::new();
    let mut chart_of = vec![usize::MAX; vertex_count];
    for v in 0..vertex_count {
        if used[v] {
            let root = find(&mut parent, v);
            let next = id.len();
            chart_of[v] = *id.entry(root).or_insert(next);
        }
    }
    (chart_of, id.len())
}

/// The whole number of texture repeats `n` that moves a chart spanning `[lo, hi]` on one axis
/// into `[0, 1]`: 0 when it already lies there; `⌊lo⌋` when the texture repeats on this axis and
/// the chart lies within one cell `[n, n + 1]` (glTF `REPEAT` samples `u` and `u − n` alike);
/// `None` otherwise (a chart across a cell border, or outside [0, 1] without `REPEAT`, cannot be
/// cut out as one piece).
fn whole_cell(lo: f64, hi: f64, repeat: bool) -> Option<f64> {
    if (0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi) {
        return Some(0.0);
    }
    let n = lo.floor();
    (repeat && hi <= n + 1.0).then_some(n)
}

/// The texels bilinear sampling reads for UVs in `b` (`[u0, v0, u1, v1]`) on a `w × h` image
/// (texel `i` covers `[i, i + 1)` in `u · w`, so `u` reads texels `⌊u·w − ½⌋` and one more), plus
/// the bleed ring, clamped to the image. glTF's UV origin is the image's top-left corner, so `v`
/// maps to rows directly.
fn texel_rect(b: [f64; 4], w: i64, h: i64) -> Rect {
    let lo = |c: f64, n: i64| ((c * n as f64 - 0.5).floor() as i64 - BLEED_PX).clamp(0, n - 1);
    let hi = |c: f64, n: i64| ((c * n as f64 - 0.5).floor() as i64 + 2 + BLEED_PX).clamp(1, n);
    Rect {
        x0: lo(b[0], w),
        y0: lo(b[1], h),
        x1: hi(b[2], w),
        y1: hi(b[3], h),
    }
}

/// Pieces start and end on multiples of this many texels, both in the level image and in the
/// atlas, so every piece moves by a multiple of it: the 2×2 averages of the atlas's mipmap levels
/// 1 to 4 (blocks of up to 16 texels) are then the level image's own, block for block. (A
/// trial with unaligned pieces saw a tile drawn at 1/8 scale show its texture's highlights in the
/// wrong place.)
pub const ALIGN_PX: i64 = 16;

/// `r` grown outwards to multiples of [`ALIGN_PX`] (more real texels), clamped to the `w × h`
/// image (whose right and bottom edges need not be aligned: see [`aligned_size`]).
fn aligned(r: Rect, w: i64, h: i64) -> Rect {
    let down = |c: i64| c.div_euclid(ALIGN_PX) * ALIGN_PX;
    let up = |c: i64, n: i64| ((c + ALIGN_PX - 1).div_euclid(ALIGN_PX) * ALIGN_PX).min(n);
    Rect {
        x0: down(r.x0),
        y0: down(r.y0),
        x1: up(r.x1, w),
        y1: up(r.y1, h),
    }
}

/// The room a piece of `n` texels takes in the atlas: `n` rounded up to [`ALIGN_PX`], so the next
/// piece starts aligned (a piece ending at the image's unaligned edge leaves a gap).
fn aligned_size(n: i64) -> i64 {
    (n + ALIGN_PX - 1).div_euclid(ALIGN_PX) * ALIGN_PX
}

/// Overlapping rectangles merged into their union box where that costs no more pixels than
/// keeping both (the overlap is then stored once); returns the pieces and, per input rectangle,
/// its piece.
fn merge_overlapping(rects: &[Rect]) -> (Vec<Rect>, Vec<usize>) {
    let mut pieces: Vec<Option<Rect>> = rects.iter().copied().map(Some).collect();
    let mut owner: Vec<usize> = (0..rects.len()).collect();
    let mut changed = true;
    while changed {
        changed = false;
        let mut order: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].is_some()).collect();
        order.sort_by_key(|&i| pieces[i].map(|r| r.x0));
        for a in 0..order.len() {
            let i = order[a];
            for &j in &order[a + 1..] {
                let (Some(ri), Some(rj)) = (pieces[i], pieces[j]) else {
                    continue;
                };
                if rj.x0 >= ri.x1 {
                    break;
                }
                let u = ri.union(&rj);
                if ri.overlaps(&rj) && u.area() <= ri.area() + rj.area() {
                    pieces[i] = Some(u);
                    pieces[j] = None;
                    for o in owner.iter_mut().filter(|o| **o == j) {
                        *o = i;
                    }
                    changed = true;
                }
            }
        }
    }
    let mut index = vec![usize::MAX; pieces.len()];
    let mut kept = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        if let Some(r) = p {
            index[i] = kept.len();
            kept.push(*r);
        }
    }
    let piece_of = owner.iter().map(|&o| index[o]).collect();
    (kept, piece_of)
}

/// Shelf packing (tallest first, left to right, a new shelf when the row is full) into an atlas
/// whose sides are powers of two, trying each power-of-two row width from the widest piece's up
/// to twice √(area) and keeping the smallest atlas: top-left corners and the atlas size.
///
/// Why powers of two: CesiumJS (1.145, `GltfTextureLoader`) resizes every texture that is
/// mipmapped or repeats to the next power of two with the browser's image scaler, WebGL 2 or
/// not; a 224 × 608 atlas came back resampled to 256 × 1024 and its texels no longer sat where
/// the UVs point (a trial's Duck lost 10 dB). Padding costs pixels but not GPU memory there (the
/// resized texture would be as large) and few bytes (the padding is flat).
fn shelf_pack(rects: &[Rect]) -> (Vec<(i64, i64)>, i64, i64) {
    let area: i64 = rects
        .iter()
        .map(|r| aligned_size(r.width()) * aligned_size(r.height()))
        .sum();
    let widest = rects
        .iter()
        .map(|r| aligned_size(r.width()))
        .max()
        .unwrap_or(1);
    let mut order: Vec<usize> = (0..rects.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(rects[i].height()), i));
    let pow2 = |n: i64| (n.max(1) as u64).next_power_of_two() as i64;
    let widest_pow2 = pow2(widest);
    let last = pow2(2 * (area as f64).sqrt().ceil() as i64).max(widest_pow2);
    std::iter::successors(Some(widest_pow2), |w| Some(w * 2))
        .take_while(|&w| w <= last)
        .map(|width| {
            let (at, _, h) = shelves(rects, &order, width);
            (at, width, pow2(h))
        })
        .min_by_key(|(_, w, h)| (w * h, *w))
        .expect("at least one width tried")
}

/// [`shelf_pack`] into rows of `width` pixels, pieces in `order`.
fn shelves(rects: &[Rect], order: &[usize], width: i64) -> (Vec<(i64, i64)>, i64, i64) {
    let mut at = vec![(0, 0); rects.len()];
    let (mut x, mut y, mut shelf, mut used_w) = (0i64, 0i64, 0i64, 1i64);
    for &i in order {
        let (rw, rh) = (
            aligned_size(rects[i].width()),
            aligned_size(rects[i].height()),
        );
        if x + rw > width {
            x = 0;
            y += shelf;
            shelf = 0;
        }
        at[i] = (x, y);
        x += rw;
        used_w = used_w.max(x);
        shelf = shelf.max(rh);
    }
    (at, used_w, (y + shelf).max(1))
}

impl Plan {
    /// The atlas of `source`, a level image `k` times the planned size on both axes: each piece
    /// (and its place) scaled by `k` and copied.
    fn compose(&self, source: &DynamicImage, k: u32) -> DynamicImage {
        let (w, h) = (k * self.width, k * self.height);
        let mut atlas = match source {
            DynamicImage::ImageLuma8(_) => DynamicImage::new_luma8(w, h),
            DynamicImage::ImageLumaA8(_) => DynamicImage::new_luma_a8(w, h),
            DynamicImage::ImageRgb8(_) => DynamicImage::new_rgb8(w, h),
            DynamicImage::ImageLuma16(_) => DynamicImage::new_luma16(w, h),
            DynamicImage::ImageLumaA16(_) => DynamicImage::new_luma_a16(w, h),
            DynamicImage::ImageRgb16(_) => DynamicImage::new_rgb16(w, h),
            DynamicImage::ImageRgba16(_) => DynamicImage::new_rgba16(w, h),
            _ => DynamicImage::new_rgba8(w, h),
        };
        let k = i64::from(k);
        for (r, (x, y)) in &self.pieces {
            let piece = source.view(
                (k * r.x0) as u32,
                (k * r.y0) as u32,
                (k * r.width()) as u32,
                (k * r.height()) as u32,
            );
            atlas
                .copy_from(&*piece, (k * x) as u32, (k * y) as u32)
                .expect("pieces are packed inside the atlas");
        }
        atlas
    }

    /// Apply the plan to the group's primitives: append the duplicated vertices, rewire the
    /// triangles and move every UV onto its piece: `u' = ((u − shift)·w − x0 + x) / atlas_width`,
    /// the same for `v`; stored as unorm16.
    fn apply(&self, mesh: &mut QuantizedMesh, size: (u32, u32)) {
        let (w, h) = (f64::from(size.0), f64::from(size.1));
        let (aw, ah) = (f64::from(self.width), f64::from(self.height));
        for pp in &self.primitives {
            let prim = &mut mesh.primitives[pp.primitive];
            append_copies(prim, &pp.duplicates);
            prim.indices.clone_from(&pp.indices);
            let Some(uvs) = prim.uvs.as_ref() else {
                continue;
            };
            let moved = uvs_f64(uvs)
                .iter()
                .zip(&pp.vertex_piece)
                .map(|(uv, &(k, shift))| {
                    let (r, (x, y)) = self.pieces[k];
                    let u = ((uv[0] - shift[0]) * w - r.x0 as f64 + x as f64) / aw;
                    let v = ((uv[1] - shift[1]) * h - r.y0 as f64 + y as f64) / ah;
                    [u, v].map(|c| (c.clamp(0.0, 1.0) * 65535.0).round() as u16)
                })
                .collect();
            prim.uvs = Some(TexCoords::Unorm16(moved));
        }
    }
}

/// Append to every vertex attribute of `prim` a copy of the vertices `sources`, in order.
fn append_copies(prim: &mut QuantizedPrimitive, sources: &[u32]) {
    fn extend<T: Copy>(v: &mut Vec<T>, sources: &[u32]) {
        let copies: Vec<T> = sources.iter().map(|&s| v[s as usize]).collect();
        v.extend(copies);
    }
    let tex = |t: &mut TexCoords| match t {
        TexCoords::Unorm16(v) => extend(v, sources),
        TexCoords::Float(v) => extend(v, sources),
    };
    extend(&mut prim.positions, sources);
    if let Some(n) = prim.normals.as_mut() {
        extend(n, sources);
    }
    if let Some(t) = prim.uvs.as_mut() {
        tex(t);
    }
    if let Some(t) = prim.uvs1.as_mut() {
        tex(t);
    }
    if let Some(c) = prim.colors.as_mut() {
        extend(c, sources);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_vertex_connected_components() {
        // Two triangles sharing an edge, one apart, one unused vertex.
        let (chart_of, n) = charts(&[0, 1, 2, 2, 1, 3, 4, 5, 6], 8);
        assert_eq!(n, 2);
        assert_eq!(chart_of[0], chart_of[3]);
        assert_ne!(chart_of[0], chart_of[4]);
        assert_eq!(chart_of[7], usize::MAX);
    }

    #[test]
    fn texel_rect_covers_bilinear_taps_and_the_ring() {
        // u in [0.25, 0.5] on 64 px: taps from ⌊16 − ½⌋ = 15 to ⌊32 − ½⌋ + 1 = 32.
        let r = texel_rect([0.25, 0.25, 0.5, 0.5], 64, 64);
        assert_eq!((r.x0, r.x1), (15 - BLEED_PX, 33 + BLEED_PX));
        // Clamped at the image border.
        let r = texel_rect([0.0, 0.0, 1.0, 1.0], 64, 32);
        assert_eq!(
            r,
            Rect {
                x0: 0,
                y0: 0,
                x1: 64,
                y1: 32
            }
        );
    }

    #[test]
    fn overlapping_pieces_merge_only_when_it_saves_pixels() {
        let a = Rect {
            x0: 0,
            y0: 0,
            x1: 10,
            y1: 10,
        };
        let b = Rect {
            x0: 5,
            y0: 0,
            x1: 15,
            y1: 10,
        };
        // A long thin bar crossing `a`'s corner: its union box would cost more than both.
        let c = Rect {
            x0: 8,
            y0: 8,
            x1: 100,
            y1: 9,
        };
        let (pieces, of) = merge_overlapping(&[a, b]);
        assert_eq!(
            pieces,
            vec![Rect {
                x0: 0,
                y0: 0,
                x1: 15,
                y1: 10
            }]
        );
        assert_eq!(of, vec![0, 0]);
        let (pieces, _) = merge_overlapping(&[a, c]);
        assert_eq!(pieces.len(), 2);
    }

    #[test]
    fn shelf_packing_does_not_overlap() {
        let rects: Vec<Rect> = (0..40)
            .map(|i| Rect {
                x0: 0,
                y0: 0,
                x1: 3 + (i * 7) % 23,
                y1: 2 + (i * 5) % 17,
            })
            .collect();
        let (at, w, h) = shelf_pack(&rects);
        let placed: Vec<Rect> = rects
            .iter()
            .zip(&at)
            .map(|(r, &(x, y))| Rect {
                x0: x,
                y0: y,
                x1: x + r.width(),
                y1: y + r.height(),
            })
            .collect();
        for (i, a) in placed.iter().enumerate() {
            assert!(a.x1 <= w && a.y1 <= h);
            assert_eq!((a.x0 % ALIGN_PX, a.y0 % ALIGN_PX), (0, 0), "{a:?}");
            for b in &placed[i + 1..] {
                assert!(!a.overlaps(b), "{a:?} {b:?}");
            }
        }
        // Against the room the pieces take on the 16-texel grid.
        // Against the room the pieces take on the 16-texel grid; sides are powers of two, which
        // alone can double each side's need.
        let area: i64 = rects
            .iter()
            .map(|r| aligned_size(r.width()) * aligned_size(r.height()))
            .sum();
        assert!(w.count_ones() == 1 && h.count_ones() == 1, "{w}×{h}");
        assert!((w * h) as f64 <= 4.0 * area as f64, "{w}×{h} for {area}");
    }
}
