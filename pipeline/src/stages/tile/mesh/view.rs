//! Shaded renders of a mesh job's LODs: every triangle of a GLB in its base colour (the
//! material's `baseColorTexture` at `TEXCOORD_0` through its `KHR_texture_transform`, times its
//! `baseColorFactor`; a neutral clay without a material), flat Lambert shading, orthographic 3/4
//! view, z-buffered into an `RgbImage`. Other maps (normal, metallic-roughness, emissive) are not rendered: the page shows
//! what each level's geometry and base colour look like, CesiumJS shows the rest. The tileset's
//! levels are drawn the same way from the tile GLBs themselves ([`read_tile_surface`],
//! [`delivered_levels`]) and scored against the first LOD, so the tile stage's summary
//! ([`delivered_summary`]), the job page and `kiln regress` judge what a client loads.
//!
//! Frame: glTF (Y up, metres). The view looks at the centre of the bounds from azimuth 45°
//! (from +Z towards +X) and elevation 30°; the scale fits the bounding sphere, so every
//! orientation fits and all LODs rendered with one [`OrthoView`] share their framing.
//! Non-finite vertices and degenerate triangles are skipped, so bad geometry leaves holes rather
//! than failing the render. Cost is O(F + covered pixels): a 300k-triangle mesh takes well under a
//! second in a release build.
//!
//! Source: edge-function rasterization with pixel-centre sampling (Pineda 1988, "A Parallel
//! Algorithm for Polygon Rasterization"); Lambert's cosine law for the shading.

use std::path::{Path, PathBuf};

use image::{Rgb, RgbImage};

use super::decode::{DecodedGlb, DecodedPrimitive, decode_tile_glb};

/// Why a mesh or tileset could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// A file cannot be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file was read but a field or its shape is wrong.
    #[error("{path}: `{field}`: expected {expected}, found {found}")]
    Invalid {
        path: PathBuf,
        field: String,
        expected: String,
        found: String,
    },
    /// A glTF/GLB file or one of its buffers cannot be read.
    #[error("{path}: glTF: {source}; check it with the Khronos glTF validator")]
    Gltf {
        path: PathBuf,
        #[source]
        source: gltf::Error,
    },
}

/// One triangle: three vertex positions in metres.
pub type Triangle = [[f32; 3]; 3];

/// What colours one triangle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paint {
    /// Base colour, 8-bit sRGB scale (0–255) per channel: the material's `baseColorFactor`
    /// (linear, turned sRGB), or the clay albedo for a primitive without a material.
    pub colour: [f32; 3],
    /// With a readable base colour texture: its index in [`Surface::textures`] and the corners'
    /// `TEXCOORD_0`; the texel (sRGB) is multiplied by `colour` / 255.
    pub texture: Option<(usize, [[f32; 2]; 3])>,
}

impl Paint {
    /// The clay of untextured, material-less geometry.
    pub const CLAY: Paint = Paint {
        colour: ALBEDO,
        texture: None,
    };
}

/// A GLB's triangles with their paint (`tris[i]` is painted by `paint[i]`) and the decoded base
/// colour textures (at most [`MAX_TEXTURE_SIDE`] px a side: the renders are a few hundred pixels).
#[derive(Debug, Clone, Default)]
pub struct Surface {
    pub tris: Vec<Triangle>,
    pub paint: Vec<Paint>,
    pub textures: Vec<image::RgbImage>,
    /// The point (metres, f64, the file's frame) that `tris` are relative to.
    pub centre_m: [f64; 3],
}

impl Surface {
    /// This surface's triangles moved into the frame of `other` (relative to `other.centre_m`),
    /// so two surfaces of one mesh can share a view.
    #[must_use]
    pub fn in_frame_of(mut self, other: &Surface) -> Surface {
        let shift: [f32; 3] =
            std::array::from_fn(|k| (self.centre_m[k] - other.centre_m[k]) as f32);
        for t in &mut self.tris {
            for p in t.iter_mut() {
                for k in 0..3 {
                    p[k] += shift[k];
                }
            }
        }
        self.centre_m = other.centre_m;
        self
    }
}

/// Largest side of a texture kept for the renders (bigger ones are downsampled on load).
pub const MAX_TEXTURE_SIDE: u32 = 512;

/// Background colour of the renders.
const BACKGROUND: [u8; 3] = [246, 246, 246];
/// Surface albedo (a neutral clay), 8-bit sRGB.
const ALBEDO: [f32; 3] = [196.0, 172.0, 140.0];
/// Ambient share of the brightness so faces turned away from the light stay readable.
const AMBIENT: f32 = 0.18;

/// Every triangle of the default scene (else the first scene, else every mesh) of a glTF/GLB,
/// with node transforms applied. Only `TRIANGLES` primitives are read (points, lines, strips and
/// fans are skipped). Textures are not decoded, and the file is not validated against extensions
/// the page does not need (e.g. `EXT_texture_webp` in `extensionsRequired`), so any file whose
/// geometry is readable renders.
///
/// # Errors
/// [`ViewError::Gltf`] when the file or its buffers cannot be read or parsed;
/// [`ViewError::Invalid`] when its accessors are inconsistent (out-of-range views).
pub fn read_triangles(path: &Path) -> Result<Vec<Triangle>, ViewError> {
    Ok(read_surface(path)?.tris)
}

/// [`read_triangles`] with each triangle's paint and the base colour textures it samples. A
/// texture that cannot be read or decoded leaves its triangles in their factor colour.
///
/// # Errors
/// As [`read_triangles`].
pub fn read_surface(path: &Path) -> Result<Surface, ViewError> {
    let gerr = |source| ViewError::Gltf {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(path).map_err(|source| ViewError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let gltf = gltf::Gltf::from_slice_without_validation(&bytes).map_err(gerr)?;
    let buffers =
        gltf::import_buffers(&gltf.document, path.parent(), gltf.blob.clone()).map_err(gerr)?;
    let textures = base_colour_textures(&gltf.document, &buffers, path.parent());
    // Without validation, an inconsistent accessor can make the gltf crate's readers panic;
    // contain that and report the file instead of taking the whole report down.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut painted = Painted::default();
        collect_document(&gltf.document, &buffers, &textures.index, &mut painted);
        let (tris, centre_m) = recentred(&painted.tris);
        Surface {
            tris,
            paint: painted.paint,
            textures: textures.images,
            centre_m,
        }
    }))
    .map_err(|_| ViewError::Invalid {
        path: path.to_path_buf(),
        field: "accessors".into(),
        expected: "accessors inside their buffer views".into(),
        found: "out-of-range data (check the file with the Khronos glTF validator)".into(),
    })
}

/// Decoded base colour textures: `index[t]` is texture t's position in `images`, `None` when
/// no material uses it as `baseColorTexture` or its image cannot be read.
#[derive(Default)]
struct Textures {
    index: Vec<Option<usize>>,
    images: Vec<image::RgbImage>,
}

fn base_colour_textures(
    document: &gltf::Document,
    buffers: &[gltf::buffer::Data],
    dir: Option<&Path>,
) -> Textures {
    let mut out = Textures {
        index: vec![None; document.textures().len()],
        images: Vec::new(),
    };
    for material in document.materials() {
        let Some(info) = material.pbr_metallic_roughness().base_color_texture() else {
            continue;
        };
        let texture = info.texture();
        if out.index[texture.index()].is_some() {
            continue;
        }
        // The EXT_texture_webp or KHR_texture_basisu image when there is one (Kiln's WebP and
        // KTX2 tiles have no core source), else the core source; with none, the factor colour.
        let extension_image = |name: &str| {
            texture
                .extension_value(name)
                .and_then(|w| w["source"].as_u64())
                .and_then(|i| document.images().nth(i as usize))
        };
        let extended = extension_image("EXT_texture_webp")
            .or_else(|| extension_image(kiln_formats::mesh::KHR_TEXTURE_BASISU));
        let Some(image) = extended.or_else(|| texture.source()) else {
            continue;
        };
        let bytes = match image.source() {
            gltf::image::Source::View { view, .. } => buffers
                .get(view.buffer().index())
                .and_then(|b| b.0.get(view.offset()..view.offset() + view.length()))
                .map(<[u8]>::to_vec),
            gltf::image::Source::Uri { uri, .. } if !uri.contains(':') => dir
                .map(|d| d.join(kiln_formats::uri::percent_decode(uri)))
                .and_then(|p| std::fs::read(p).ok()),
            gltf::image::Source::Uri { .. } => None,
        };
        let Some(fitted) = bytes.and_then(|b| fitted_texture(&b)) else {
            continue;
        };
        out.index[texture.index()] = Some(out.images.len());
        out.images.push(fitted);
    }
    out
}

/// An encoded image (PNG, JPEG, WebP, KTX2) decoded and shrunk to at most [`MAX_TEXTURE_SIDE`].
fn fitted_texture(bytes: &[u8]) -> Option<RgbImage> {
    let decoded = kiln_formats::mesh::decode_texture(bytes).ok()?;
    let fitted = if decoded.width().max(decoded.height()) > MAX_TEXTURE_SIDE {
        decoded.thumbnail(MAX_TEXTURE_SIDE, MAX_TEXTURE_SIDE)
    } else {
        decoded
    };
    Some(fitted.to_rgb8())
}

/// A `baseColorFactor` (linear) as the 8-bit sRGB-scale paint colour.
fn factor_colour(factor: [f32; 4]) -> [f32; 3] {
    std::array::from_fn(|k| 255.0 * factor[k].clamp(0.0, 1.0).powf(1.0 / 2.2))
}

/// The triangles of Kiln mesh tiles (GLBs with `EXT_meshopt_compression` and
/// `KHR_mesh_quantization`, decoded by [`decode_tile_glb`]) as one surface, painted as
/// [`read_surface`] paints a GLB: what a 3D Tiles client draws when it shows exactly these tiles.
/// Tile images are read beside each tile (relative URIs) once per file.
///
/// # Errors
/// [`ViewError::Io`] when a tile cannot be read; [`ViewError::Invalid`] naming the tile when it
/// does not decode.
pub fn read_tile_surface(tiles: &[PathBuf]) -> Result<Surface, ViewError> {
    let mut painted = Painted::default();
    let mut images = TileImages::default();
    for path in tiles {
        let glb = read_tile(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for primitive in &glb.primitives {
            let (colour, texture) = tile_primitive_paint(&glb.json, primitive, dir, &mut images);
            paint_primitive(primitive, colour, texture, &mut painted);
        }
    }
    let (tris, centre_m) = recentred(&painted.tris);
    Ok(Surface {
        tris,
        paint: painted.paint,
        textures: images.images,
        centre_m,
    })
}

/// One tile GLB read and decoded.
fn read_tile(path: &Path) -> Result<DecodedGlb, ViewError> {
    let bytes = std::fs::read(path).map_err(|source| ViewError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode_tile_glb(&bytes, &path.display().to_string()).map_err(|e| ViewError::Invalid {
        path: path.to_path_buf(),
        field: "tile content".into(),
        expected: "a mesh tile GLB as Kiln writes it".into(),
        found: e.to_string(),
    })
}

/// The base colour textures of a set of tiles, each image file decoded once.
#[derive(Default)]
struct TileImages {
    images: Vec<RgbImage>,
    /// Image file → its index in `images` (`None`: unreadable, painted in its factor colour).
    loaded: std::collections::HashMap<PathBuf, Option<usize>>,
}

impl TileImages {
    /// The index of texture `texture` of a tile's glTF `json` (its `EXT_texture_webp` or
    /// `KHR_texture_basisu` image when there is one, as Kiln's WebP and KTX2 tiles have no core
    /// source; URIs relative to `dir`).
    fn index_of(&mut self, json: &serde_json::Value, texture: u64, dir: &Path) -> Option<usize> {
        let t = &json["textures"][texture as usize];
        let ext = &t["extensions"];
        let image = ext["EXT_texture_webp"]["source"]
            .as_u64()
            .or_else(|| ext[kiln_formats::mesh::KHR_TEXTURE_BASISU]["source"].as_u64())
            .or_else(|| t["source"].as_u64())?;
        let uri = json["images"][image as usize]["uri"].as_str()?;
        let file = dir.join(kiln_formats::uri::percent_decode(uri));
        let images = &mut self.images;
        *self.loaded.entry(file.clone()).or_insert_with(|| {
            images.push(fitted_texture(&std::fs::read(&file).ok()?)?);
            Some(images.len() - 1)
        })
    }
}

/// A tile primitive's base colour and base colour texture (when it reads `TEXCOORD_0`), as
/// [`primitive_paint`] finds them in a GLB the `gltf` crate reads.
fn tile_primitive_paint(
    json: &serde_json::Value,
    primitive: &DecodedPrimitive,
    dir: &Path,
    images: &mut TileImages,
) -> ([f32; 3], Option<(usize, UvTransform)>) {
    let Some(material) = primitive.material.map(|m| &json["materials"][m]) else {
        return (ALBEDO, None);
    };
    let pbr = &material["pbrMetallicRoughness"];
    let colour = factor_colour(std::array::from_fn(|k| {
        pbr["baseColorFactor"][k].as_f64().unwrap_or(1.0) as f32
    }));
    let info = &pbr["baseColorTexture"];
    let transform = &info["extensions"][kiln_formats::mesh::KHR_TEXTURE_TRANSFORM];
    let set = transform["texCoord"]
        .as_u64()
        .or_else(|| info["texCoord"].as_u64())
        .unwrap_or(0);
    let texture = (set == 0)
        .then(|| info["index"].as_u64())
        .flatten()
        .and_then(|t| images.index_of(json, t, dir))
        .map(|t| (t, UvTransform::from_json(transform)));
    (colour, texture)
}

/// `KHR_texture_transform` of a texture reference (identity without one): what a viewer does to
/// `TEXCOORD_n` before sampling. gltfpack relies on it: its quantized UVs are the unit square of
/// the mesh's UV range, mapped back by an offset and scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UvTransform {
    pub offset: [f32; 2],
    /// Radians.
    pub rotation: f32,
    pub scale: [f32; 2],
}

impl UvTransform {
    pub const IDENTITY: UvTransform = UvTransform {
        offset: [0.0, 0.0],
        rotation: 0.0,
        scale: [1.0, 1.0],
    };

    /// From the extension's JSON object (`null`: the identity); missing fields take the
    /// extension's defaults.
    #[must_use]
    pub fn from_json(t: &serde_json::Value) -> Self {
        let pair = |key: &str, default: [f32; 2]| {
            std::array::from_fn(|k| t[key][k].as_f64().map_or(default[k], |v| v as f32))
        };
        UvTransform {
            offset: pair("offset", [0.0, 0.0]),
            rotation: t["rotation"].as_f64().unwrap_or(0.0) as f32,
            scale: pair("scale", [1.0, 1.0]),
        }
    }

    /// `uv` transformed as the extension's specification defines it (github.com/KhronosGroup/glTF,
    /// `extensions/2.0/Khronos/KHR_texture_transform`): translation · rotation · scale, the
    /// rotation turning UVs counter-clockwise (u' = cos·u + sin·v, v' = −sin·u + cos·v), which
    /// is the direction that takes the specification's example (offset (0, 1), rotation π/2,
    /// scale ½) onto "the lower left quadrant of the source image, rotated clockwise 90°" (a
    /// draft's GLSL had the sign the other way).
    #[must_use]
    pub fn apply(&self, uv: [f32; 2]) -> [f32; 2] {
        let (u, v) = (uv[0] * self.scale[0], uv[1] * self.scale[1]);
        let (sin, cos) = self.rotation.sin_cos();
        [
            self.offset[0] + cos * u + sin * v,
            self.offset[1] - sin * u + cos * v,
        ]
    }
}

/// A decoded primitive's triangles into `painted`, each in `colour` and, with UVs, `texture`.
fn paint_primitive(
    primitive: &DecodedPrimitive,
    colour: [f32; 3],
    texture: Option<(usize, UvTransform)>,
    painted: &mut Painted,
) {
    for corner in primitive.indices.chunks_exact(3) {
        let at = |k: usize| corner[k] as usize;
        painted
            .tris
            .push(std::array::from_fn(|k| primitive.positions_m[at(k)]));
        let textured = texture
            .zip(primitive.uvs.as_ref())
            .map(|((t, uvt), uvs)| (t, std::array::from_fn(|k| uvt.apply(uvs[at(k)]))));
        painted.paint.push(Paint {
            colour,
            texture: textured,
        });
    }
}

/// Triangles collected in f64 with their paint.
#[derive(Default)]
struct Painted {
    tris: Vec<WorldTriangle>,
    paint: Vec<Paint>,
}

/// A triangle in f64 metres, before [`recentred`].
type WorldTriangle = [[f64; 3]; 3];

/// `tris` relative to the centre of their box, in f32: a mesh placed far from 0 (an ECEF node
/// translation of millions of metres) would otherwise collapse to f32's 0.25–0.5 m steps there
/// and draw nothing. The orthographic views frame the box, so the shift changes no picture.
fn recentred(tris: &[WorldTriangle]) -> (Vec<Triangle>, [f64; 3]) {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in tris
        .iter()
        .flatten()
        .filter(|p| p.iter().all(|c| c.is_finite()))
    {
        for k in 0..3 {
            lo[k] = lo[k].min(p[k]);
            hi[k] = hi[k].max(p[k]);
        }
    }
    let centre: [f64; 3] = std::array::from_fn(|k| {
        if lo[k] <= hi[k] {
            0.5 * (lo[k] + hi[k])
        } else {
            0.0
        }
    });
    let shifted = tris
        .iter()
        .map(|t| t.map(|p| std::array::from_fn(|k| (p[k] - centre[k]) as f32)))
        .collect();
    (shifted, centre)
}

fn collect_document(
    document: &gltf::Document,
    buffers: &[gltf::buffer::Data],
    textures: &[Option<usize>],
    out: &mut Painted,
) {
    match document
        .default_scene()
        .or_else(|| document.scenes().next())
    {
        Some(scene) => {
            for node in scene.nodes() {
                collect_node(&node, IDENTITY, buffers, textures, out, 0);
            }
        }
        None => {
            for mesh in document.meshes() {
                collect_mesh(&mesh, &IDENTITY, buffers, textures, out);
            }
        }
    }
}

/// Column-major 4 × 4 identity, glTF's matrix layout.
const IDENTITY: [[f64; 4]; 4] = [
    [1.0, 0.0, 0.0, 0.0],
    [0.0, 1.0, 0.0, 0.0],
    [0.0, 0.0, 1.0, 0.0],
    [0.0, 0.0, 0.0, 1.0],
];

/// Node graphs deeper than this are treated as cyclic (glTF forbids cycles; a hostile file
/// must not overflow the stack).
const MAX_NODE_DEPTH: usize = 256;

fn collect_node(
    node: &gltf::Node<'_>,
    parent: [[f64; 4]; 4],
    buffers: &[gltf::buffer::Data],
    textures: &[Option<usize>],
    out: &mut Painted,
    depth: usize,
) {
    if depth > MAX_NODE_DEPTH {
        return;
    }
    let local = node.transform().matrix().map(|c| c.map(f64::from));
    let world = mat_mul(&parent, &local);
    if let Some(mesh) = node.mesh() {
        collect_mesh(&mesh, &world, buffers, textures, out);
    }
    for child in node.children() {
        collect_node(&child, world, buffers, textures, out, depth + 1);
    }
}

fn collect_mesh(
    mesh: &gltf::Mesh<'_>,
    m: &[[f64; 4]; 4],
    buffers: &[gltf::buffer::Data],
    textures: &[Option<usize>],
    out: &mut Painted,
) {
    for prim in mesh.primitives() {
        if prim.mode() != gltf::mesh::Mode::Triangles {
            continue;
        }
        let reader = prim.reader(|b| buffers.get(b.index()).map(|d| &d.0[..]));
        let Some(positions) = reader.read_positions() else {
            continue;
        };
        let pos: Vec<[f64; 3]> = positions.map(|p| transform_point(m, p)).collect();
        let idx: Vec<u32> = match reader.read_indices() {
            Some(i) => i.into_u32().collect(),
            None => (0..pos.len() as u32).collect(),
        };
        let (colour, texture) = primitive_paint(&prim, textures);
        let uvs: Option<Vec<[f32; 2]>> = texture.and_then(|(_, uvt)| {
            let uvs = reader.read_tex_coords(0)?.into_f32();
            Some(uvs.map(|uv| uvt.apply(uv)).collect())
        });
        let texture = texture.map(|(t, _)| t);
        for t in idx.chunks_exact(3) {
            let get = |i: u32| pos.get(i as usize).copied();
            if let (Some(a), Some(b), Some(c)) = (get(t[0]), get(t[1]), get(t[2])) {
                out.tris.push([a, b, c]);
                let corner_uvs = uvs.as_ref().and_then(|uv| {
                    let g = |i: u32| uv.get(i as usize).copied();
                    Some([g(t[0])?, g(t[1])?, g(t[2])?])
                });
                out.paint.push(Paint {
                    colour,
                    texture: texture.zip(corner_uvs),
                });
            }
        }
    }
}

/// A primitive's base colour (sRGB, 0–255) and base colour texture (index into the decoded
/// textures, with its `KHR_texture_transform`), when it reads `TEXCOORD_0`.
fn primitive_paint(
    prim: &gltf::Primitive<'_>,
    textures: &[Option<usize>],
) -> ([f32; 3], Option<(usize, UvTransform)>) {
    let material = prim.material();
    if material.index().is_none() {
        return (ALBEDO, None);
    }
    let pbr = material.pbr_metallic_roughness();
    let factor = pbr.base_color_factor();
    let colour = factor_colour(factor);
    let texture = pbr.base_color_texture().and_then(|info| {
        let transform = info.texture_transform();
        let set = transform
            .as_ref()
            .and_then(|t| t.tex_coord())
            .unwrap_or(info.tex_coord());
        let uvt = transform.map_or(UvTransform::IDENTITY, |t| UvTransform {
            offset: t.offset(),
            rotation: t.rotation(),
            scale: t.scale(),
        });
        let index = textures.get(info.texture().index()).copied().flatten()?;
        (set == 0).then_some((index, uvt))
    });
    (colour, texture)
}

fn mat_mul(a: &[[f64; 4]; 4], b: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    // Column-major: (a·b)[col][row] = Σ_k a[k][row] · b[col][k].
    std::array::from_fn(|col| {
        std::array::from_fn(|row| (0..4).map(|k| a[k][row] * b[col][k]).sum())
    })
}

fn transform_point(m: &[[f64; 4]; 4], p: [f32; 3]) -> [f64; 3] {
    let p = p.map(f64::from);
    std::array::from_fn(|row| m[0][row] * p[0] + m[1][row] * p[1] + m[2][row] * p[2] + m[3][row])
}

/// One level of a mesh tileset as a client draws it (see [`delivered_levels`]).
pub struct DeliveredLevel {
    /// Depth in the tileset (0 = root).
    pub depth: usize,
    /// Tiles drawn (this depth's and the leaves above it).
    pub tiles: usize,
    pub triangles: usize,
    /// The level rendered through the reference's 3/4 view.
    pub image: RgbImage,
    /// PSNR against the reference's render over the pixels either covers ([`psnr_covered`]).
    pub psnr_db: Option<f64>,
}

/// The levels of the mesh tileset at `tileset_path` ([`tileset_levels`]), decoded from the tile
/// GLBs ([`read_tile_surface`]), each rendered through the 3/4 view of the GLB at `reference`
/// (a job's `lods/lod_0.glb`: the source, welded) at `size_px` square and scored against the
/// reference's render: one entry per level, root first (an error for a level that cannot be
/// read).
///
/// # Errors
/// As [`read_surface`] for the reference and [`tileset_levels`] for the tileset.
pub fn delivered_levels(
    tileset_path: &Path,
    reference: &Path,
    size_px: u32,
) -> Result<Vec<Result<DeliveredLevel, ViewError>>, ViewError> {
    let reference = read_surface(reference)?;
    let levels = tileset_levels(tileset_path)?;
    let Some((lo, hi)) = bounds(&reference.tris) else {
        return Err(ViewError::Invalid {
            path: tileset_path.to_path_buf(),
            field: "reference".into(),
            expected: "a mesh with triangles".into(),
            found: "none".into(),
        });
    };
    let view = OrthoView::three_quarter(lo, hi, size_px, size_px);
    let expected = render_painted(&reference, &view);
    let scored = levels
        .iter()
        .enumerate()
        .map(|(depth, tiles)| {
            let surface = read_tile_surface(tiles)?.in_frame_of(&reference);
            let image = render_painted(&surface, &view);
            Ok(DeliveredLevel {
                depth,
                tiles: tiles.len(),
                triangles: surface.tris.len(),
                psnr_db: psnr_covered(&image, &expected),
                image,
            })
        })
        .collect();
    Ok(scored)
}

/// Side (pixels) of the renders the tile stage scores its levels at (the job page's size).
pub const DELIVERED_RENDER_PX: u32 = 320;

/// The PSNR recorded for a render identical to its reference (infinite; JSON has no infinity,
/// and `kiln regress` baselines use the same value).
pub const IDENTICAL_PSNR_DB: f64 = 100.0;

/// The tile stage's record of what a client loads ([`delivered_summary`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeliveredSummary {
    /// Side of the square renders, pixels ([`DELIVERED_RENDER_PX`]).
    pub render_px: u32,
    /// File name of the reference the levels were scored against (`lod_0.glb`).
    pub reference: Option<String>,
    /// One row per level, root first.
    pub levels: Vec<DeliveredRow>,
    /// PSNR of the deepest level (the leaves), dB.
    pub leaves_psnr_db: Option<f64>,
    /// PSNR of the root level, dB.
    pub root_psnr_db: Option<f64>,
}

/// One level of [`DeliveredSummary`]: its figures, or why it could not be read.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum DeliveredRow {
    Scored {
        /// Depth in the tileset (0 = root).
        depth: usize,
        /// Tiles drawn.
        tiles: usize,
        triangles: usize,
        /// PSNR against the reference, dB ([`IDENTICAL_PSNR_DB`] for identical renders; `None`
        /// for a level that draws nothing).
        psnr_db: Option<f64>,
    },
    Failed {
        /// Why the level could not be read.
        error: String,
    },
}

/// The tile stage's record of what a client loads ([`delivered_levels`] at
/// [`DELIVERED_RENDER_PX`] against `reference`, the full-resolution LOD): per level its depth,
/// tiles, triangles and PSNR (dB; [`IDENTICAL_PSNR_DB`] for renders identical to the reference,
/// `null` for a level that draws nothing or could not be read, with its `error`), and
/// `leaves_psnr_db` / `root_psnr_db` for the deepest level and the root. Errors are logged and
/// leave the record out: the tileset itself has been checked already.
#[must_use]
pub fn delivered_summary(tileset_path: &Path, reference: &Path) -> Option<DeliveredSummary> {
    let levels = match delivered_levels(tileset_path, reference, DELIVERED_RENDER_PX) {
        Ok(levels) => levels,
        Err(e) => {
            tracing::warn!(error = %e, "tile: the delivered levels could not be rendered");
            return None;
        }
    };
    let recorded = |db: f64| db.min(IDENTICAL_PSNR_DB);
    let rows: Vec<DeliveredRow> = levels
        .iter()
        .map(|level| match level {
            Ok(l) => DeliveredRow::Scored {
                depth: l.depth,
                tiles: l.tiles,
                triangles: l.triangles,
                psnr_db: l.psnr_db.map(recorded),
            },
            Err(e) => DeliveredRow::Failed {
                error: e.to_string(),
            },
        })
        .collect();
    let psnr = |level: Option<&Result<DeliveredLevel, ViewError>>| {
        level
            .and_then(|l| l.as_ref().ok())
            .and_then(|l| l.psnr_db)
            .map(recorded)
    };
    Some(DeliveredSummary {
        render_px: DELIVERED_RENDER_PX,
        reference: reference
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        levels: rows,
        leaves_psnr_db: psnr(levels.last()),
        root_psnr_db: psnr(levels.first()),
    })
}

/// The content files of a tileset's levels: `levels[d]` holds the tiles at depth `d` and the
/// leaves above it (what a client that refines every tile down to depth `d` draws; REPLACE
/// refinement). Content URIs are resolved beside `tileset.json`.
///
/// # Errors
/// [`ViewError::Io`] / [`ViewError::Invalid`] when the tileset cannot be read or parsed.
pub fn tileset_levels(tileset_path: &Path) -> Result<Vec<Vec<PathBuf>>, ViewError> {
    let bytes = std::fs::read(tileset_path).map_err(|source| ViewError::Io {
        path: tileset_path.to_path_buf(),
        source,
    })?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ViewError::Invalid {
            path: tileset_path.to_path_buf(),
            field: "tileset.json".into(),
            expected: "JSON".into(),
            found: e.to_string(),
        })?;
    let dir = tileset_path.parent().unwrap_or(Path::new("."));
    // (depth, content file, is leaf), depth first.
    let mut tiles = Vec::new();
    let mut stack = vec![(0usize, &json["root"])];
    while let Some((depth, tile)) = stack.pop() {
        let children = tile["children"].as_array().map_or(&[][..], Vec::as_slice);
        if let Some(uri) = tile["content"]["uri"].as_str() {
            let file = dir.join(kiln_formats::uri::percent_decode(uri));
            tiles.push((depth, file, children.is_empty()));
        }
        stack.extend(children.iter().rev().map(|c| (depth + 1, c)));
    }
    let deepest = tiles.iter().map(|t| t.0).max().unwrap_or(0);
    Ok((0..=deepest)
        .map(|d| {
            tiles
                .iter()
                .filter(|(depth, _, leaf)| *depth == d || (*leaf && *depth < d))
                .map(|(_, file, _)| file.clone())
                .collect()
        })
        .collect())
}

/// PSNR (dB, 8-bit RGB) of `a` against `b` over the pixels where either differs from the
/// background; `None` when neither draws anything, infinite when they are identical there.
pub fn psnr_covered(a: &RgbImage, b: &RgbImage) -> Option<f64> {
    let mut squared = 0.0f64;
    let mut covered = 0usize;
    for (p, q) in a.pixels().zip(b.pixels()) {
        if p.0 == BACKGROUND && q.0 == BACKGROUND {
            continue;
        }
        covered += 1;
        squared += (0..3)
            .map(|k| (f64::from(p.0[k]) - f64::from(q.0[k])).powi(2))
            .sum::<f64>();
    }
    if covered == 0 {
        return None;
    }
    let mse = squared / (3 * covered) as f64;
    Some(if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    })
}

/// Axis-aligned bounds `(min, max)` of the finite vertices, or `None` when there are none.
pub fn bounds(tris: &[Triangle]) -> Option<([f32; 3], [f32; 3])> {
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for p in tris
        .iter()
        .flatten()
        .filter(|p| p.iter().all(|v| v.is_finite()))
    {
        for i in 0..3 {
            lo[i] = lo[i].min(p[i]);
            hi[i] = hi[i].max(p[i]);
        }
    }
    lo[0].is_finite().then_some((lo, hi))
}

/// An orthographic camera: screen x = `width/2 + s·(p − centre)·right`, screen y =
/// `height/2 − s·(p − centre)·up` (pixels, y down), depth = `(p − centre)·forward` (metres,
/// smaller is nearer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrthoView {
    /// Point at the image centre, metres.
    pub centre: [f32; 3],
    /// Unit screen-right direction in the mesh frame.
    pub right: [f32; 3],
    /// Unit screen-up direction.
    pub up: [f32; 3],
    /// Unit viewing direction (from the eye into the scene).
    pub forward: [f32; 3],
    /// Scale s, pixels per metre.
    pub pixels_per_m: f32,
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
}

impl OrthoView {
    /// The fixed 3/4 view (azimuth 45°, elevation 30°, Y up) of the box `lo..hi`, scaled so its
    /// bounding sphere fills 92% of the smaller image side.
    pub fn three_quarter(lo: [f32; 3], hi: [f32; 3], width: u32, height: u32) -> OrthoView {
        let (az, el) = (45f32.to_radians(), 30f32.to_radians());
        let to_eye = [el.cos() * az.sin(), el.sin(), el.cos() * az.cos()];
        let forward = to_eye.map(|v| -v);
        let right = normalize(cross(forward, [0.0, 1.0, 0.0]));
        let up = cross(right, forward);
        let centre = std::array::from_fn(|i| 0.5 * (lo[i] + hi[i]));
        let radius = 0.5 * (0..3).map(|i| (hi[i] - lo[i]).powi(2)).sum::<f32>().sqrt();
        let pixels_per_m = 0.92 * width.min(height) as f32 / (2.0 * radius).max(1e-9);
        OrthoView {
            centre,
            right,
            up,
            forward,
            pixels_per_m,
            width,
            height,
        }
    }

    /// `(screen x, screen y, depth)` of `p`.
    fn project(&self, p: [f32; 3]) -> [f32; 3] {
        let d = std::array::from_fn(|i| p[i] - self.centre[i]);
        [
            0.5 * self.width as f32 + self.pixels_per_m * dot(d, self.right),
            0.5 * self.height as f32 - self.pixels_per_m * dot(d, self.up),
            dot(d, self.forward),
        ]
    }
}

/// Render `tris` through `view` in clay: z-buffered, flat Lambert shading (two-sided, light
/// from the upper left behind the viewer), on a light grey background.
pub fn render_shaded(tris: &[Triangle], view: &OrthoView) -> RgbImage {
    let paint = vec![Paint::CLAY; tris.len()];
    render_painted(
        &Surface {
            tris: tris.to_vec(),
            paint,
            textures: Vec::new(),
            centre_m: [0.0; 3],
        },
        view,
    )
}

/// Render `surface` through `view` as [`render_shaded`], each triangle in its paint: the
/// texture sampled (nearest texel, repeating) at the pixel's interpolated UV, times the colour.
pub fn render_painted(surface: &Surface, view: &OrthoView) -> RgbImage {
    let mut img = RgbImage::from_pixel(view.width, view.height, Rgb(BACKGROUND));
    let mut depth = vec![f32::INFINITY; view.width as usize * view.height as usize];
    let light = normalize(std::array::from_fn(|i| {
        -view.forward[i] + 0.6 * view.up[i] - 0.4 * view.right[i]
    }));
    for (t, paint) in surface.tris.iter().zip(&surface.paint) {
        let n = cross(sub(t[1], t[0]), sub(t[2], t[0]));
        let len = dot(n, n).sqrt();
        if !(len > 0.0 && len.is_finite()) {
            continue;
        }
        let lambert = (dot(n, light) / len).abs();
        let shade = AMBIENT + (1.0 - AMBIENT) * lambert;
        let screen = t.map(|p| view.project(p));
        let texture = paint
            .texture
            .and_then(|(i, uv)| Some((surface.textures.get(i)?, uv)));
        let colour = |w: [f32; 3]| -> [u8; 3] {
            let base = match texture {
                Some((image, uv)) => {
                    let texel = sample_nearest(
                        image,
                        std::array::from_fn(|k| {
                            w[0] * uv[0][k] + w[1] * uv[1][k] + w[2] * uv[2][k]
                        }),
                    );
                    std::array::from_fn(|k| f32::from(texel[k]) * paint.colour[k] / 255.0)
                }
                None => paint.colour,
            };
            base.map(|c| (c * shade).round().clamp(0.0, 255.0) as u8)
        };
        fill_triangle(&mut img, &mut depth, &screen, colour);
    }
    img
}

/// The texel of `image` nearest to `uv` (glTF: u right, v down), repeating outside [0, 1].
fn sample_nearest(image: &RgbImage, uv: [f32; 2]) -> [u8; 3] {
    let (w, h) = (image.width(), image.height());
    if w == 0 || h == 0 || !uv.iter().all(|v| v.is_finite()) {
        return [0; 3];
    }
    let x = ((uv[0].rem_euclid(1.0) * w as f32) as u32).min(w - 1);
    let y = ((uv[1].rem_euclid(1.0) * h as f32) as u32).min(h - 1);
    image.get_pixel(x, y).0
}

/// Fill the screen-space triangle `s` (`[x, y, depth]` per vertex, pixels) into `img` where it
/// is nearer than `depth`. A pixel is covered when its centre `(x + ½, y + ½)` is inside or on an
/// edge; its colour is `colour` of its barycentric weights (one per corner of `s`). Either
/// winding; degenerate or non-finite triangles draw nothing.
fn fill_triangle(
    img: &mut RgbImage,
    depth: &mut [f32],
    s: &[[f32; 3]; 3],
    colour: impl Fn([f32; 3]) -> [u8; 3],
) {
    if s.iter().flatten().any(|v| !v.is_finite()) {
        return;
    }
    let edge = |a: [f32; 3], b: [f32; 3], x: f32, y: f32| {
        (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0])
    };
    let area = edge(s[0], s[1], s[2][0], s[2][1]);
    if area.abs() < 1e-12 {
        return;
    }
    let (w, h) = (img.width() as f32, img.height() as f32);
    let min_x = s
        .iter()
        .map(|v| v[0])
        .fold(f32::INFINITY, f32::min)
        .floor()
        .max(0.0);
    let max_x = s
        .iter()
        .map(|v| v[0])
        .fold(f32::NEG_INFINITY, f32::max)
        .ceil()
        .min(w);
    let min_y = s
        .iter()
        .map(|v| v[1])
        .fold(f32::INFINITY, f32::min)
        .floor()
        .max(0.0);
    let max_y = s
        .iter()
        .map(|v| v[1])
        .fold(f32::NEG_INFINITY, f32::max)
        .ceil()
        .min(h);
    let (mut y, width) = (min_y, img.width() as usize);
    while y < max_y {
        let mut x = min_x;
        while x < max_x {
            let (cx, cy) = (x + 0.5, y + 0.5);
            // Barycentric weights, positive inside for either winding after dividing by area.
            let w0 = edge(s[1], s[2], cx, cy) / area;
            let w1 = edge(s[2], s[0], cx, cy) / area;
            let w2 = edge(s[0], s[1], cx, cy) / area;
            if w0 >= 0.0 && w1 >= 0.0 && w2 >= 0.0 {
                let z = w0 * s[0][2] + w1 * s[1][2] + w2 * s[2][2];
                let i = y as usize * width + x as usize;
                if z < depth[i] {
                    depth[i] = z;
                    img.put_pixel(x as u32, y as u32, Rgb(colour([w0, w1, w2])));
                }
            }
            x += 1.0;
        }
        y += 1.0;
    }
}

fn sub(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    std::array::from_fn(|i| a[i] - b[i])
}

fn dot(a: [f32; 3], b: [f32; 3]) -> f32 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn cross(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn normalize(a: [f32; 3]) -> [f32; 3] {
    let l = dot(a, a).sqrt().max(1e-30);
    a.map(|v| v / l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covered(img: &RgbImage) -> Vec<(u32, u32)> {
        img.enumerate_pixels()
            .filter(|(_, _, p)| p.0 != BACKGROUND)
            .map(|(x, y, _)| (x, y))
            .collect()
    }

    #[test]
    fn known_triangle_covers_the_pixels_whose_centres_it_contains() {
        // Right triangle with legs 8.5 px: pixel (x, y) is covered iff (x+½)+(y+½) ≤ 8.5, i.e.
        // x + y ≤ 7: 1 + 2 + … + 8 = 36 pixels. Both windings give the same pixels.
        for tri in [
            [[0.0, 0.0, 1.0], [8.5, 0.0, 1.0], [0.0, 8.5, 1.0]],
            [[0.0, 0.0, 1.0], [0.0, 8.5, 1.0], [8.5, 0.0, 1.0]],
        ] {
            let mut img = RgbImage::from_pixel(12, 12, Rgb(BACKGROUND));
            let mut depth = vec![f32::INFINITY; 144];
            fill_triangle(&mut img, &mut depth, &tri, |_| [1, 2, 3]);
            let px = covered(&img);
            assert_eq!(px.len(), 36);
            assert!(px.iter().all(|&(x, y)| x + y <= 7));
        }
    }

    #[test]
    fn nearer_triangle_wins_regardless_of_order() {
        let near = [[0.0, 0.0, 1.0], [10.0, 0.0, 1.0], [0.0, 10.0, 1.0]];
        let far = [[0.0, 0.0, 5.0], [10.0, 0.0, 5.0], [0.0, 10.0, 5.0]];
        let mut img = RgbImage::from_pixel(4, 4, Rgb(BACKGROUND));
        let mut depth = vec![f32::INFINITY; 16];
        fill_triangle(&mut img, &mut depth, &near, |_| [10, 10, 10]);
        fill_triangle(&mut img, &mut depth, &far, |_| [200, 200, 200]);
        assert_eq!(img.get_pixel(0, 0).0, [10, 10, 10]);
    }

    #[test]
    fn degenerate_and_non_finite_triangles_draw_nothing() {
        let mut img = RgbImage::from_pixel(4, 4, Rgb(BACKGROUND));
        let mut depth = vec![f32::INFINITY; 16];
        fill_triangle(
            &mut img,
            &mut depth,
            &[[0.0, 0.0, 0.0], [4.0, 4.0, 0.0], [2.0, 2.0, 0.0]],
            |_| [0; 3],
        );
        fill_triangle(
            &mut img,
            &mut depth,
            &[[f32::NAN, 0.0, 0.0], [4.0, 0.0, 0.0], [0.0, 4.0, 0.0]],
            |_| [0; 3],
        );
        assert!(covered(&img).is_empty());
    }

    #[test]
    fn three_quarter_view_frames_a_unit_cube_in_the_centre() {
        // A cube's 12 triangles, centred on (0, 0.5, 0).
        let c = |x: f32, y: f32, z: f32| [x - 0.5, y, z - 0.5];
        let q = |a, b, cc, d| [[a, b, cc], [a, cc, d]];
        let faces = [
            q(c(0., 0., 0.), c(1., 0., 0.), c(1., 1., 0.), c(0., 1., 0.)),
            q(c(0., 0., 1.), c(1., 0., 1.), c(1., 1., 1.), c(0., 1., 1.)),
            q(c(0., 0., 0.), c(0., 1., 0.), c(0., 1., 1.), c(0., 0., 1.)),
            q(c(1., 0., 0.), c(1., 1., 0.), c(1., 1., 1.), c(1., 0., 1.)),
            q(c(0., 0., 0.), c(1., 0., 0.), c(1., 0., 1.), c(0., 0., 1.)),
            q(c(0., 1., 0.), c(1., 1., 0.), c(1., 1., 1.), c(0., 1., 1.)),
        ];
        let tris: Vec<Triangle> = faces.into_iter().flatten().collect();
        let (lo, hi) = bounds(&tris).unwrap();
        let view = OrthoView::three_quarter(lo, hi, 64, 64);
        let img = render_shaded(&tris, &view);
        assert_ne!(img.get_pixel(32, 32).0, BACKGROUND, "centre is covered");
        for (x, y) in [(0, 0), (63, 0), (0, 63), (63, 63)] {
            assert_eq!(
                img.get_pixel(x, y).0,
                BACKGROUND,
                "corner ({x}, {y}) is empty"
            );
        }
        // Three faces are visible from a 3/4 view, each with its own flat shade.
        let mut shades: Vec<[u8; 3]> = img
            .pixels()
            .map(|p| p.0)
            .filter(|p| *p != BACKGROUND)
            .collect();
        shades.sort();
        shades.dedup();
        assert_eq!(shades.len(), 3, "{shades:?}");
    }

    /// A 1 m square, 10 × 10 quads, at an ECEF point (node translation of millions of metres,
    /// as Kiln writes an f64 origin): it renders, and like the same square at 0. In f32 world
    /// coordinates its 10 cm steps collapse to f32's 0.5 m spacing there and nothing is drawn.
    #[test]
    fn a_mesh_placed_at_ecef_coordinates_renders_like_the_same_mesh_at_zero() {
        let square = |origin_m: [f64; 3]| {
            let n = 10u32;
            let positions = (0..=n)
                .flat_map(|j| (0..=n).map(move |i| [i as f32 / n as f32, 0.0, j as f32 / n as f32]))
                .collect();
            let indices = (0..n)
                .flat_map(|j| {
                    (0..n).flat_map(move |i| {
                        let a = j * (n + 1) + i;
                        [a, a + n + 1, a + 1, a + 1, a + n + 1, a + n + 2]
                    })
                })
                .collect::<Vec<u32>>();
            kiln_formats::mesh::Mesh {
                origin_m,
                positions,
                normals: None,
                uvs: None,
                uvs1: None,
                colors: None,
                triangle_materials: vec![0; indices.len() / 3],
                indices,
                materials: vec![kiln_formats::mesh::Material::diffuse([1.0; 4])],
                images: Vec::new(),
            }
        };
        let d = tempfile::tempdir().unwrap();
        let mut pictures = Vec::new();
        for (name, origin) in [
            ("zero", [0.0; 3]),
            ("ecef", [4_000_000.0, 3_000_000.0, 3_500_000.0]),
        ] {
            let path = d.path().join(format!("{name}.glb"));
            std::fs::write(
                &path,
                kiln_formats::mesh::write_glb(&square(origin)).unwrap(),
            )
            .unwrap();
            let tris = read_triangles(&path).unwrap();
            let (lo, hi) = bounds(&tris).unwrap();
            let img = render_shaded(&tris, &OrthoView::three_quarter(lo, hi, 64, 64));
            pictures.push(covered(&img).len());
        }
        assert!(pictures[0] > 500, "{pictures:?}");
        assert_eq!(pictures[0], pictures[1], "covered pixels at 0 and at ECEF");
    }

    #[test]
    fn a_mesh_of_320k_triangles_renders_without_holes() {
        // 400 × 400 quads on the unit square in the x–z plane (320,000 triangles, each far
        // smaller than a pixel): the z-buffer path must cover the middle of the picture solidly.
        let n = 400;
        let p = |i: usize, j: usize| [i as f32 / n as f32, 0.0, j as f32 / n as f32];
        let mut tris = Vec::with_capacity(2 * n * n);
        for i in 0..n {
            for j in 0..n {
                tris.push([p(i, j), p(i + 1, j), p(i + 1, j + 1)]);
                tris.push([p(i, j), p(i + 1, j + 1), p(i, j + 1)]);
            }
        }
        let (lo, hi) = bounds(&tris).unwrap();
        let img = render_shaded(&tris, &OrthoView::three_quarter(lo, hi, 128, 128));
        for (x, y) in [(64, 64), (54, 64), (74, 64), (64, 60), (64, 68)] {
            assert_ne!(img.get_pixel(x, y).0, BACKGROUND, "hole at ({x}, {y})");
        }
    }

    #[test]
    fn unreadable_glb_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.glb");
        std::fs::write(&p, b"glTF\x02\x00\x00\x00garbage").unwrap();
        let e = read_triangles(&p).unwrap_err().to_string();
        assert!(e.contains("bad.glb"), "{e}");
    }

    #[test]
    fn nearest_texel_repeats_outside_the_unit_square() {
        let image = RgbImage::from_fn(2, 2, |x, y| Rgb([x as u8, y as u8, 9]));
        assert_eq!(sample_nearest(&image, [0.25, 0.25]), [0, 0, 9]);
        assert_eq!(sample_nearest(&image, [0.75, 0.25]), [1, 0, 9]);
        assert_eq!(sample_nearest(&image, [0.25, 0.75]), [0, 1, 9]);
        assert_eq!(sample_nearest(&image, [1.75, -0.25]), [1, 1, 9]);
        assert_eq!(sample_nearest(&image, [f32::NAN, 0.5]), [0, 0, 0]);
    }

    /// The Khronos Avocado (one material, a green-and-brown base colour texture): drawn in its
    /// texture, most of its pixels are greener than red, which the clay (196:172:140) never is.
    #[test]
    fn a_textured_mesh_renders_in_its_base_colour_texture() {
        let root = std::env::var_os("KILN_DATASETS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
        let gltf = root.join("mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf");
        assert!(
            gltf.exists(),
            "{} missing; set KILN_DATASETS",
            gltf.display()
        );
        let surface = read_surface(&gltf).unwrap();
        assert_eq!(surface.textures.len(), 1);
        assert!(surface.paint.iter().all(|p| p.texture.is_some()));
        let (lo, hi) = bounds(&surface.tris).unwrap();
        let view = OrthoView::three_quarter(lo, hi, 128, 128);
        let green_share = |img: &RgbImage| {
            let covered: Vec<_> = img.pixels().filter(|p| p.0 != BACKGROUND).collect();
            assert!(covered.len() > 1000, "{} pixels", covered.len());
            covered.iter().filter(|p| p.0[1] > p.0[0]).count() as f64 / covered.len() as f64
        };
        let painted = green_share(&render_painted(&surface, &view));
        let clay = green_share(&render_shaded(&surface.tris, &view));
        assert!(painted > 0.5, "green share {painted}");
        assert_eq!(clay, 0.0);
    }

    /// The renders sample textures through `KHR_texture_transform`, as viewers do (gltfpack's
    /// quantized UVs mean nothing without it): the Avocado with a transform that scales every UV
    /// to zero and offsets it to (0.25, 0.75) paints every corner at exactly that point.
    #[test]
    fn renders_apply_the_texture_transform() {
        let src = kiln_datasets::resolve("mesh-khronos-gltf-samples")
            .unwrap()
            .join("Avocado/glTF");
        let dir = tempfile::tempdir().unwrap();
        for f in std::fs::read_dir(&src).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
        let path = dir.path().join("Avocado.gltf");
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        json["materials"][0]["pbrMetallicRoughness"]["baseColorTexture"]["extensions"] = serde_json::json!({
            "KHR_texture_transform": {"offset": [0.25, 0.75], "scale": [0.0, 0.0]}
        });
        json["extensionsUsed"] = serde_json::json!(["KHR_texture_transform"]);
        std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
        let surface = read_surface(&path).unwrap();
        assert!(!surface.paint.is_empty());
        for p in &surface.paint {
            let (_, uvs) = p.texture.expect("textured");
            assert!(uvs.iter().all(|&uv| uv == [0.25, 0.75]), "{uvs:?}");
        }
    }

    /// The Avocado tiled through the real stages (ingest → decimate → tile) into `out`, as a mesh
    /// job's output lays it out (`tileset.json`, `tiles/`, `lods/lod_0.glb`).
    fn tiled_avocado(out: &Path) {
        use crate::stages::decimate::{DecimateParams, decimate};
        use crate::stages::ingest::{MESH_GLB, ingest_mesh};
        use crate::stages::tile::mesh::{MeshTileParams, tile_mesh_lods};
        let gltf = kiln_datasets::resolve("mesh-khronos-gltf-samples")
            .unwrap()
            .join("Avocado/glTF/Avocado.gltf");
        let ingest_dir = out.join("ingest");
        ingest_mesh(
            &gltf,
            &crate::stages::ingest::IngestParams::default(),
            &ingest_dir,
        )
        .unwrap();
        let mesh = kiln_formats::mesh::read_gltf(&ingest_dir.join(MESH_GLB)).unwrap();
        let lod_dir = out.join("lods");
        let lods = decimate(&mesh, &DecimateParams::chain(), &lod_dir).unwrap();
        tile_mesh_lods(&lods, &lod_dir, &MeshTileParams::default(), out).unwrap();
    }

    /// The tiles a client loads score like the source at full detail and fall when a texture is
    /// lost: the measure sees the deliverable, not the meshes it was made from.
    #[test]
    fn delivered_levels_score_the_tiles_and_drop_when_a_texture_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        tiled_avocado(out);
        let tileset = out.join("tileset.json");
        let lod0 = out.join("lods/lod_0.glb");
        let levels = delivered_levels(&tileset, &lod0, 320).unwrap();
        let levels: Vec<DeliveredLevel> = levels.into_iter().map(Result::unwrap).collect();
        assert!(levels.iter().all(|l| l.image.dimensions() == (320, 320)));
        assert!(levels.len() >= 2, "{} levels", levels.len());
        let leaves = levels.last().unwrap();
        let root = &levels[0];
        // Full detail: only the position lattice differs from lod_0 (measured 53.4 dB; the
        // same tiles with grey textures 15.3 dB, the 84-triangle root 15.2 dB).
        let leaves_db = leaves.psnr_db.unwrap();
        assert!(leaves_db > 45.0, "leaves {leaves_db} dB");
        // The root is the coarsest simplification: visibly different, yet the same object.
        let root_db = root.psnr_db.unwrap();
        assert!((10.0..leaves_db).contains(&root_db), "root {root_db} dB");
        assert!(root.triangles < leaves.triangles);

        // Every tile texture replaced by flat grey: the leaves no longer look like the source.
        // (Level images sit in subfolders L1, L2, …)
        let mut folders = vec![out.join("tiles/textures")];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    folders.push(path);
                    continue;
                }
                let img = image::open(&path).unwrap();
                let grey = RgbImage::from_pixel(img.width(), img.height(), Rgb([128, 128, 128]));
                grey.save(&path).unwrap();
            }
        }
        let levels = delivered_levels(&tileset, &lod0, 320).unwrap();
        let broken = levels.last().unwrap().as_ref().unwrap().psnr_db.unwrap();
        assert!(broken < 25.0, "grey leaves {broken} dB");
    }

    /// The specification's example: offset (0, 1), rotation π/2, scale ½ takes the unit square
    /// onto the lower left quadrant (u ≤ ½, v ≥ ½ with v down), turned clockwise 90°; gltfpack's
    /// offset-and-scale dequantization is an affine map per axis.
    #[test]
    fn uv_transforms_follow_the_extension_s_example() {
        let example = UvTransform::from_json(&serde_json::json!({
            "offset": [0, 1], "rotation": std::f64::consts::FRAC_PI_2, "scale": [0.5, 0.5]
        }));
        let close =
            |a: [f32; 2], b: [f32; 2]| (a[0] - b[0]).abs() < 1e-6 && (a[1] - b[1]).abs() < 1e-6;
        for (uv, want) in [
            ([0.0, 0.0], [0.0, 1.0]),
            ([1.0, 0.0], [0.0, 0.5]),
            ([1.0, 1.0], [0.5, 0.5]),
            ([0.0, 1.0], [0.5, 1.0]),
        ] {
            let got = example.apply(uv);
            assert!(close(got, want), "{uv:?} → {got:?}, want {want:?}");
        }
        let gltfpack = UvTransform::from_json(&serde_json::json!({
            "offset": [0.0264, 0.02], "scale": [15.3, 15.4]
        }));
        assert!(close(
            gltfpack.apply([0.5, 0.25]),
            [0.0264 + 7.65, 0.02 + 3.85]
        ));
        assert_eq!(
            UvTransform::from_json(&serde_json::Value::Null),
            UvTransform::IDENTITY
        );
    }

    #[test]
    fn tileset_levels_are_each_depth_with_the_leaves_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let tileset = dir.path().join("tileset.json");
        let tile = |uri: &str, children: serde_json::Value| serde_json::json!({"content": {"uri": uri}, "children": children});
        let json = serde_json::json!({"root": tile("r.glb", serde_json::json!([
            tile("a.glb", serde_json::json!([])),
            tile("b.glb", serde_json::json!([tile("b%200.glb", serde_json::json!([]))])),
        ]))});
        std::fs::write(&tileset, json.to_string()).unwrap();
        let names = |files: &Vec<PathBuf>| -> Vec<String> {
            files
                .iter()
                .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        let levels = tileset_levels(&tileset).unwrap();
        let levels: Vec<Vec<String>> = levels.iter().map(names).collect();
        assert_eq!(
            levels,
            [
                vec!["r.glb"],
                vec!["a.glb", "b.glb"],
                vec!["a.glb", "b 0.glb"]
            ]
        );
    }

    #[test]
    fn psnr_covered_ignores_the_shared_background_and_is_none_for_empty_renders() {
        let bg = RgbImage::from_pixel(4, 4, Rgb(BACKGROUND));
        assert_eq!(psnr_covered(&bg, &bg), None);
        let mut a = bg.clone();
        a.put_pixel(0, 0, Rgb([10, 10, 10]));
        assert_eq!(psnr_covered(&a, &a), Some(f64::INFINITY));
        let mut b = a.clone();
        b.put_pixel(0, 0, Rgb([20, 10, 10]));
        // One covered pixel, squared error 100 over its three channels: MSE 100 / 3.
        let want = 10.0 * (255.0f64 * 255.0 / (100.0 / 3.0)).log10();
        assert!((psnr_covered(&a, &b).unwrap() - want).abs() < 1e-9);
    }
}
