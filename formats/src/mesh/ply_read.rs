//! Read a PLY polygon mesh (ASCII or binary, as Meshlab, CloudCompare, Open3D and scanners write
//! it) into a [`Mesh`].
//!
//! Source: Greg Turk, "The PLY Polygon File Format" (1994; as mirrored by Paul Bourke): a header
//! of `element` / `property` lines, then the elements in header order. A mesh is an `element
//! vertex` with `x y z` (any scalar type), optionally `nx ny nz` and `red green blue [alpha]`, and
//! an `element face` whose `vertex_indices` (or `vertex_index`) list property holds each polygon's
//! 0-based vertex indices (or, as Stanford's range-scan tools write it, an `element tristrips`
//! whose rows are triangle strips separated by −1). Parsing of all three encodings is
//! `ply-rs-bw`'s; elements are read
//! straight into small typed rows (no per-vertex map).
//!
//! A Gaussian-splat PLY (3DGS: `f_dc_0`, `opacity`, `scale_0` … and no faces) is not a mesh; it is
//! refused with a pointer to the `splats` job kind.

use std::path::Path;

use ply_rs_bw::parser::{Parser, Reader};
use ply_rs_bw::ply::{
    DefaultElement, ElementDef, Header, Property, PropertyAccess, PropertyAccessResult,
    PropertyType, ScalarType,
};

use super::{AlphaMode, Material, Mesh};
use crate::{Error, Result};

/// Read a PLY mesh as one triangle mesh.
///
/// Faces of n ≥ 4 vertices become n − 2 triangles as a fan from the first vertex, `(v0, vi,
/// vi+1)`, keeping the face's winding (counter-clockwise front faces, as glTF); faces of fewer than
/// 3 vertices are skipped (counted in a warning). `tristrips` rows become triangles as glTF strips
/// do (`(i, i+1, i+2)` for even i, `(i, i+2, i+1)` for odd i, restarting after each −1).
/// Positions are read in f64 and stored as f32
/// metres relative to [`Mesh::origin_m`] (non-zero for coordinates ≥ 1024 m, e.g. a `double` UTM
/// scan), taken to be +Y up (the file states neither). Normals (`nx ny nz`) are kept when all
/// three are present and finite; otherwise smooth normals are generated with creases kept (see
/// [`super::generate_missing_normals`]; one info line says so), since glTF clients would draw
/// the scan with flat normals. Vertex colours (`red green blue [alpha]`; `uchar` scaled by
/// 1/255, `ushort` by 1/65535, `float`/`double` taken as 0–1, RGB decoded from sRGB) become
/// [`Mesh::colors`]. The material is one diffuse white material ([`Material::diffuse`]), with
/// `alphaMode` BLEND when some vertex alpha is below 1.
///
/// * `path` — a `.ply` file.
///
/// # Errors
/// * [`Error::NotFound`] — `path` does not exist.
/// * [`Error::Corrupt`] — the header or body does not parse (with the line where the parser knows
///   it).
/// * [`Error::Unsupported`] — a Gaussian-splat PLY (names the properties that show it and says to
///   use a `splats` job); `x`/`y`/`z` or the face list not of the types described above.
/// * [`Error::Invalid`] — no `element vertex` with `x y z`, a face index < 0 or ≥ the vertex count
///   (names the face and the value), a non-finite position (names the vertex).
/// * [`Error::Empty`] — no `element face` (a point cloud) or no face with 3 or more vertices.
///
/// # Panics
/// Never on file content.
pub fn read_ply_mesh(path: &Path) -> Result<Mesh> {
    let mut mesh = read_ply_as_written(path)?;
    super::fill_missing_normals(path, &mut mesh, None);
    Ok(mesh)
}

/// [`read_ply_mesh`] without generated normals: the file's vertices and faces, one for one.
fn read_ply_as_written(path: &Path) -> Result<Mesh> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = Reader::new(std::io::BufReader::new(file));
    let header = Parser::<DefaultElement>::new()
        .read_header(&mut reader)
        .map_err(|e| parse_error(path, &e, "header"))?;
    let layout = Layout::of(path, &header)?;
    let mut vertices: Vec<PlyVertex> = Vec::new();
    let mut faces: Vec<PlyFace> = Vec::new();
    let mut strips: Vec<PlyFace> = Vec::new();
    for def in header.elements.values() {
        let what = format!("element {}", def.name);
        if def.name == "vertex" {
            vertices = Parser::<PlyVertex>::new()
                .read_payload_for_element(&mut reader, def, &header)
                .map_err(|e| parse_error(path, &e, &what))?;
        } else if def.name == "face" || def.name == TRISTRIPS {
            let rows = Parser::<PlyFace>::new()
                .read_payload_for_element(&mut reader, def, &header)
                .map_err(|e| parse_error(path, &e, &what))?;
            if def.name == "face" {
                faces = rows;
            } else {
                strips = rows;
            }
        } else {
            // Other elements (edges, materials, range grids) are read past, not kept.
            Parser::<DefaultElement>::new()
                .read_payload_for_element(&mut reader, def, &header)
                .map_err(|e| parse_error(path, &e, &what))?;
        }
    }
    assemble(path, &layout, &vertices, &faces, &strips)
}

/// The element some scanners' software (Stanford's range-scan tools, e.g. `igea.ply`) writes
/// instead of `face`: one or more triangle strips per row, separated by index −1.
const TRISTRIPS: &str = "tristrips";

/// What the header says the vertex and face elements hold.
#[derive(Debug)]
struct Layout {
    has_normals: bool,
    /// Scale from the stored colour value to 0–1, when `red green blue` are present.
    color_scale: Option<f32>,
}

impl Layout {
    fn of(path: &Path, header: &Header) -> Result<Layout> {
        let vertex = header.elements.get("vertex");
        let face = header
            .elements
            .get("face")
            .filter(|f| f.count > 0)
            .or_else(|| header.elements.get(TRISTRIPS).filter(|f| f.count > 0));
        let has =
            |e: Option<&ElementDef>, name: &str| e.is_some_and(|e| e.properties.contains_key(name));
        // INRIA 3DGS columns, and PlayCanvas's compressed layout (packed vertex words plus a
        // `chunk` element of per-256-splat bounds).
        let mut splat_props: Vec<&str> = [
            "f_dc_0",
            "opacity",
            "scale_0",
            "rot_0",
            "packed_position",
            "packed_rotation",
        ]
        .into_iter()
        .filter(|p| has(vertex, p))
        .collect();
        if header.elements.contains_key("chunk") && has(vertex, "packed_position") {
            splat_props.push("element chunk");
        }
        if face.is_none() && !splat_props.is_empty() {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: "element vertex".into(),
                found: format!(
                    "a Gaussian-splat PLY ({}; no faces)",
                    splat_props.join(", ")
                ),
                supported: "PLY meshes (vertices and faces) in a mesh job; tile splats with \
                            `kind = \"splats\"` in the job file"
                    .into(),
            });
        }
        let Some(vertex) = vertex else {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: "element vertex".into(),
                expected: "an `element vertex N` with properties x, y, z".into(),
                found: "no vertex element".into(),
            });
        };
        for axis in ["x", "y", "z"] {
            match vertex.properties.get(axis).map(|p| &p.data_type) {
                Some(PropertyType::Scalar(_)) => {}
                Some(PropertyType::List(..)) => {
                    return Err(Error::Unsupported {
                        path: path.to_path_buf(),
                        field: format!("element vertex, property {axis}"),
                        found: "a list".into(),
                        supported: "a scalar (char … double)".into(),
                    });
                }
                None => {
                    return Err(Error::Invalid {
                        path: path.to_path_buf(),
                        field: format!("element vertex, property {axis}"),
                        expected: "x, y and z vertex properties".into(),
                        found: format!("no `{axis}`"),
                    });
                }
            }
        }
        let Some(face) = face else {
            return Err(Error::Empty {
                path: path.to_path_buf(),
                what: "faces",
                reason: "the PLY has no `element face` or `tristrips` (a point cloud, not a \
                         mesh); mesh it \
                         first (e.g. Poisson reconstruction in Meshlab or Open3D)"
                    .into(),
            });
        };
        match face_list(face).map(|p| &p.data_type) {
            Some(PropertyType::List(_, _)) => {}
            Some(PropertyType::Scalar(_)) => {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    field: format!("element {}, property vertex_indices", face.name),
                    found: "a scalar".into(),
                    supported: "a list of vertex indices".into(),
                });
            }
            None => {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    field: format!("element {}", face.name),
                    expected: "a list property `vertex_indices` (or `vertex_index`)".into(),
                    found: format!(
                        "properties {}",
                        face.properties
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        let scalar = |name: &str| match vertex.properties.get(name).map(|p| &p.data_type) {
            Some(PropertyType::Scalar(t)) => Some(t),
            _ => None,
        };
        let has_normals = ["nx", "ny", "nz"].iter().all(|n| scalar(n).is_some());
        let color_scale = match (scalar("red"), scalar("green"), scalar("blue")) {
            (Some(t), Some(_), Some(_)) => Some(match *t {
                ScalarType::UChar | ScalarType::Char => 1.0 / 255.0,
                ScalarType::UShort | ScalarType::Short => 1.0 / 65535.0,
                _ => 1.0,
            }),
            _ => None,
        };
        Ok(Layout {
            has_normals,
            color_scale,
        })
    }
}

/// The face element's index list property (`vertex_indices`, or `vertex_index` as some writers
/// spell it).
fn face_list(face: &ElementDef) -> Option<&ply_rs_bw::ply::PropertyDef> {
    face.properties
        .get("vertex_indices")
        .or_else(|| face.properties.get("vertex_index"))
}

/// One `vertex` row: only the properties a mesh uses.
#[derive(Debug, Clone, Copy, Default)]
struct PlyVertex {
    position: [f64; 3],
    normal: [f32; 3],
    /// Raw stored values (scaled by [`Layout::color_scale`] later); alpha defaults to opaque.
    color: [f32; 4],
    has_alpha: bool,
}

impl PropertyAccess for PlyVertex {
    fn new() -> Self {
        PlyVertex::default()
    }

    fn set_property(&mut self, name: &str, property: Property) -> PropertyAccessResult {
        let Some(v) = scalar_value(&property) else {
            return PropertyAccessResult::Ignored;
        };
        match name {
            "x" => self.position[0] = v,
            "y" => self.position[1] = v,
            "z" => self.position[2] = v,
            "nx" => self.normal[0] = v as f32,
            "ny" => self.normal[1] = v as f32,
            "nz" => self.normal[2] = v as f32,
            "red" => self.color[0] = v as f32,
            "green" => self.color[1] = v as f32,
            "blue" => self.color[2] = v as f32,
            "alpha" => {
                self.color[3] = v as f32;
                self.has_alpha = true;
            }
            _ => return PropertyAccessResult::Ignored,
        }
        PropertyAccessResult::Set
    }
}

/// One `face` row: its vertex indices, widened to i64 so that negative values can be reported.
#[derive(Debug, Clone, Default)]
struct PlyFace {
    indices: Vec<i64>,
}

impl PropertyAccess for PlyFace {
    fn new() -> Self {
        PlyFace::default()
    }

    fn set_property(&mut self, name: &str, property: Property) -> PropertyAccessResult {
        if name != "vertex_indices" && name != "vertex_index" {
            return PropertyAccessResult::Ignored;
        }
        self.indices = match property {
            Property::ListChar(v) => v.into_iter().map(i64::from).collect(),
            Property::ListUChar(v) => v.into_iter().map(i64::from).collect(),
            Property::ListShort(v) => v.into_iter().map(i64::from).collect(),
            Property::ListUShort(v) => v.into_iter().map(i64::from).collect(),
            Property::ListInt(v) => v.into_iter().map(i64::from).collect(),
            Property::ListUInt(v) => v.into_iter().map(i64::from).collect(),
            // Float index lists exist in the wild (rare); whole values only, others are invalid.
            Property::ListFloat(v) => v.into_iter().map(float_index).collect(),
            Property::ListDouble(v) => v.into_iter().map(float_index).collect(),
            _ => return PropertyAccessResult::UnsupportedType,
        };
        PropertyAccessResult::Set
    }
}

/// A float-typed index as an integer; a fraction or non-finite value becomes −1 (reported as
/// invalid with the face).
fn float_index(v: impl Into<f64>) -> i64 {
    let v: f64 = v.into();
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
        v as i64
    } else {
        -1
    }
}

fn scalar_value(p: &Property) -> Option<f64> {
    Some(match *p {
        Property::Char(v) => f64::from(v),
        Property::UChar(v) => f64::from(v),
        Property::Short(v) => f64::from(v),
        Property::UShort(v) => f64::from(v),
        Property::Int(v) => f64::from(v),
        Property::UInt(v) => f64::from(v),
        Property::Float(v) => f64::from(v),
        Property::Double(v) => v,
        _ => return None,
    })
}

/// The origin positions are kept relative to ([`Mesh::origin_m`]): the first vertex rounded to
/// whole metres when one of its coordinates is ≥ 1024 m (a `double` PLY in UTM or ECEF metres,
/// as photogrammetry tools export georeferenced scans, which f32 would round to centimetres or
/// worse), else 0 (see `gltf_read::RECENTRE_FROM_M` for the threshold).
fn ply_origin(vertices: &[PlyVertex]) -> [f64; 3] {
    match vertices.first() {
        Some(v)
            if v.position.iter().all(|c| c.is_finite())
                && v.position
                    .iter()
                    .any(|c| c.abs() >= super::gltf_read::RECENTRE_FROM_M) =>
        {
            v.position.map(f64::round)
        }
        _ => [0.0; 3],
    }
}

/// Build the mesh: check positions and indices, fan-triangulate the faces.
fn assemble(
    path: &Path,
    layout: &Layout,
    vertices: &[PlyVertex],
    faces: &[PlyFace],
    strips: &[PlyFace],
) -> Result<Mesh> {
    let origin_m = ply_origin(vertices);
    let mut positions = Vec::with_capacity(vertices.len());
    for (i, v) in vertices.iter().enumerate() {
        let p: [f32; 3] = std::array::from_fn(|k| (v.position[k] - origin_m[k]) as f32);
        if !p.iter().all(|c| c.is_finite()) {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("element vertex {i}: x, y, z"),
                expected: "finite coordinates within f32 range".into(),
                found: format!("{:?}", v.position),
            });
        }
        positions.push(p);
    }
    let n = vertices.len() as i64;
    let mut indices = Vec::with_capacity(faces.len() * 3);
    let mut short_faces = 0usize;
    for (f, face) in faces.iter().enumerate() {
        if let Some(&bad) = face.indices.iter().find(|&&i| !(0..n).contains(&i)) {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("element face {f}: vertex_indices"),
                expected: format!("indices in 0..{n} (the vertex count)"),
                found: format!("{bad}"),
            });
        }
        if face.indices.len() < 3 {
            short_faces += 1;
            continue;
        }
        let at = |k: usize| face.indices[k] as u32;
        for k in 1..face.indices.len() - 1 {
            indices.extend([at(0), at(k), at(k + 1)]);
        }
    }
    for (s, row) in strips.iter().enumerate() {
        // −1 ends one strip and starts the next (the only negative value allowed here).
        if let Some(&bad) = row.indices.iter().find(|&&i| i < -1 || i >= n) {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: format!("element {TRISTRIPS} {s}: vertex_indices"),
                expected: format!("indices in 0..{n} (the vertex count), or −1 between strips"),
                found: format!("{bad}"),
            });
        }
        for strip in row.indices.split(|&i| i == -1) {
            let strip: Vec<u32> = strip.iter().map(|&i| i as u32).collect();
            indices.extend(super::gltf_read::strip_to_list(&strip));
        }
    }
    if short_faces > 0 {
        tracing::warn!(
            file = %path.display(),
            "{short_faces} face(s) with fewer than 3 vertices skipped"
        );
    }
    if indices.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
            what: "faces",
            reason: "no face has 3 or more vertices".into(),
        });
    }
    let normals = layout
        .has_normals
        .then(|| vertices.iter().map(|v| v.normal).collect::<Vec<_>>());
    let normals = match normals {
        Some(n) if n.iter().flatten().all(|c| c.is_finite()) => Some(n),
        Some(_) => {
            tracing::warn!(
                file = %path.display(),
                "nx/ny/nz hold non-finite values; normals dropped"
            );
            None
        }
        None => None,
    };
    let colors = layout
        .color_scale
        .map(|scale| vertex_colors(vertices, scale));
    // Translucent vertices draw as such only under BLEND (glTF §3.9.4: OPAQUE ignores alpha).
    let translucent = colors.iter().flatten().any(|c| c[3] < 1.0);
    let material = Material {
        alpha_mode: if translucent {
            AlphaMode::Blend
        } else {
            AlphaMode::Opaque
        },
        ..Material::diffuse([1.0; 4])
    };
    let triangles = indices.len() / 3;
    Ok(Mesh {
        origin_m,
        positions,
        normals,
        uvs: None,
        uvs1: None,
        colors,
        indices,
        triangle_materials: vec![0; triangles],
        materials: vec![material],
        images: Vec::new(),
    })
}

/// `[V, 4]` linear RGBA in 0–1: stored value × `scale`, clamped (1 when not finite), then RGB
/// decoded from sRGB ([`super::srgb_to_linear`]: PLY colours are display values, as MeshLab and
/// CloudCompare write them; glTF `COLOR_0` is linear); alpha 1 when absent, and never decoded.
fn vertex_colors(vertices: &[PlyVertex], scale: f32) -> Vec<[f32; 4]> {
    vertices
        .iter()
        .map(|v| {
            let alpha = if v.has_alpha { v.color[3] * scale } else { 1.0 };
            let c = [
                v.color[0] * scale,
                v.color[1] * scale,
                v.color[2] * scale,
                alpha,
            ];
            let [r, g, b, a] = c.map(|x| {
                if x.is_finite() {
                    x.clamp(0.0, 1.0)
                } else {
                    1.0
                }
            });
            [
                super::srgb_to_linear(r),
                super::srgb_to_linear(g),
                super::srgb_to_linear(b),
                a,
            ]
        })
        .collect()
}

fn parse_error(path: &Path, e: &ply_rs_bw::parser::ParseError, what: &str) -> Error {
    // An ASCII `nan`/`inf` or non-number is named like a binary NaN (crate::ply_ascii): read
    // again, only here.
    let text = std::fs::File::open(path).map(std::io::BufReader::new);
    if let Some(bad) = text.ok().and_then(crate::ply_ascii::bad_token) {
        return Error::Invalid {
            path: path.to_path_buf(),
            expected: bad.expected().into(),
            field: bad.field,
            found: bad.token,
        };
    }
    Error::Corrupt {
        path: path.to_path_buf(),
        location: e
            .line()
            .map_or_else(|| what.to_string(), |l| format!("{what}, line {l}")),
        what: format!("PLY parser: {e} (truncated body or values that do not match the header)"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{fixture, geometry};
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The ASCII rule shared with the splat reader (`crate::ply_ascii`): a `nan`/`inf` in a
    /// mesh's vertex row is named as that vertex and property, whichever row and spelling.
    #[test]
    fn an_ascii_nan_or_inf_names_the_vertex_and_property() {
        let d = tempfile::tempdir().unwrap();
        for (row, col, token) in [
            (0, 0, "nan"),
            (2, 1, "-inf"),
            (1, 2, "Infinity"),
            (1, 0, "1.0e"),
            (2, 2, "1.#QNAN"),
        ] {
            let mut rows = [["0", "0", "0"], ["1", "0", "0"], ["0", "1", "0"]];
            rows[row][col] = token;
            let body: Vec<String> = rows.iter().map(|r| r.join(" ")).collect();
            let text = format!(
                "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n\
                 property float z\nelement face 1\nproperty list uchar int vertex_indices\n\
                 end_header\n{}\n3 0 1 2\n",
                body.join("\n")
            );
            let p = write(d.path(), "bad.ply", &text);
            let e = read_ply_mesh(&p).unwrap_err().to_string();
            let axis = ["x", "y", "z"][col];
            assert!(e.contains(&format!("vertex[{row}].{axis}")), "{e}");
            assert!(e.contains(token) && e.contains("bad.ply"), "{e}");
        }
        // A face row's token names the face and its index list (re-check of N1).
        let text = "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n\
                    property float z\nelement face 1\nproperty list uchar int vertex_indices\n\
                    end_header\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7x\n";
        let p = write(d.path(), "face.ply", text);
        let e = read_ply_mesh(&p).unwrap_err().to_string();
        assert!(
            e.contains("face[0].vertex_indices") && e.contains("7x"),
            "{e}"
        );
    }

    /// `tests/fixtures/mesh/pyramid_colors.ply`: a quad base (fan: (0,1,2), (0,2,3)) and four
    /// triangles, so 6 triangles in file order; each faces away from the pyramid's centroid
    /// (0.5, 0.2, 0.5).
    #[test]
    fn ascii_pyramid_fans_its_quad_and_keeps_outward_winding() {
        let mesh = read_ply_mesh(&fixture("pyramid_colors.ply")).unwrap();
        assert_eq!(mesh.triangle_count(), 6);
        // Corners as the file's vertex rows (normal generation copies vertices at creases).
        let rows = [
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [1.0, 0.0, 1.0],
            [0.0, 0.0, 1.0],
            [0.5, 1.0, 0.5],
        ];
        let corners: Vec<[f32; 3]> = mesh
            .indices
            .iter()
            .map(|&i| mesh.positions[i as usize])
            .collect();
        let expected: Vec<[f32; 3]> = [0, 1, 2, 0, 2, 3, 0, 4, 1, 1, 4, 2, 2, 4, 3, 3, 4, 0]
            .iter()
            .map(|&i: &usize| rows[i])
            .collect();
        assert_eq!(corners, expected);
        assert!(mesh.uvs.is_none());
        // Pure uchar colours (0 or 255) are 0 or 1 in sRGB and linear alike; opaque, one white
        // diffuse material.
        let colors = mesh
            .colors
            .as_ref()
            .expect("red/green/blue kept as COLOR_0");
        assert_eq!(colors[0], [1.0, 0.0, 0.0, 1.0]);
        assert_eq!(colors[3], [1.0, 1.0, 0.0, 1.0]);
        assert_eq!(mesh.materials, vec![Material::diffuse([1.0; 4])]);
        assert_eq!(mesh.triangle_materials, vec![0; 6]);
        let centroid = [0.5, 0.2, 0.5];
        for t in 0..6 {
            let n = geometry::cross(&mesh, t);
            let a = mesh.positions[mesh.indices[3 * t] as usize].map(f64::from);
            let out: f64 = (0..3).map(|k| n[k] * (a[k] - centroid[k])).sum();
            assert!(out > 0.0, "triangle {t} faces inward");
            // The file has no nx/ny/nz: normals are generated. Every edge of this pyramid is a
            // crease (faces meet at ≥ 78°, above the 60° crease angle), so each corner carries
            // its own face's unit normal.
            let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
            for k in 0..3 {
                let g = mesh.normals.as_ref().expect("generated")[mesh.indices[3 * t + k] as usize];
                for i in 0..3 {
                    assert!(
                        (f64::from(g[i]) - n[i] / len).abs() < 1e-6,
                        "{t}/{k}: {g:?}"
                    );
                }
            }
        }
        // Base 1 m² + four sides, each ½ · 1 · slant height √(1² + 0.5²).
        let expected = 1.0 + 4.0 * 0.5 * (1.25f64).sqrt();
        assert!((geometry::area(&mesh) - expected).abs() < 1e-6);
    }

    #[test]
    fn uchar_colours_scale_by_1_over_255_with_opaque_alpha() {
        let file = std::fs::File::open(fixture("pyramid_colors.ply")).unwrap();
        let mut reader = Reader::new(std::io::BufReader::new(file));
        let header = Parser::<DefaultElement>::new()
            .read_header(&mut reader)
            .unwrap();
        let layout = Layout::of(Path::new("p.ply"), &header).unwrap();
        assert_eq!(layout.color_scale, Some(1.0 / 255.0));
        let rows = Parser::<PlyVertex>::new()
            .read_payload_for_element(&mut reader, &header.elements["vertex"], &header)
            .unwrap();
        let colors = vertex_colors(&rows, layout.color_scale.unwrap());
        assert_eq!(colors[0], [1.0, 0.0, 0.0, 1.0]);
        assert_eq!(colors[3], [1.0, 1.0, 0.0, 1.0]);
    }

    /// `double` positions, `float` normals and colours, `int` index list named `vertex_index`.
    #[test]
    fn double_positions_float_normals_and_vertex_index_lists_read() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "q.ply",
            "ply\nformat ascii 1.0\nelement vertex 4\nproperty double x\nproperty double y\n\
             property double z\nproperty float nx\nproperty float ny\nproperty float nz\n\
             property float red\nproperty float green\nproperty float blue\nproperty float alpha\n\
             element face 1\nproperty list uchar uint vertex_index\nend_header\n\
             0 0 0 0 0 1 1 0 0 0.5\n1 0 0 0 0 1 0 1 0 1\n1 1 0 0 0 1 0 0 1 1\n0 1 0 0 0 1 1 1 1 1\n\
             4 0 1 2 3\n",
        );
        let mesh = read_ply_mesh(&p).unwrap();
        assert_eq!(mesh.indices, [0, 1, 2, 0, 2, 3]);
        assert_eq!(mesh.normals.as_deref(), Some(&[[0.0, 0.0, 1.0]; 4][..]));
        assert!((geometry::area(&mesh) - 1.0).abs() < 1e-9);
    }

    /// A `double` PLY in UTM metres (easting 500,000.1234, northing 5,400,000.5678) with 1 mm
    /// sides: f32 would put both at a spacing of 0.0625 m / 0.5 m; relative to the whole-metre
    /// origin the millimetres survive (f32 error ≤ 2^-24 · 0.6 m ≈ 4e-8 m).
    #[test]
    fn utm_double_positions_keep_millimetres_around_a_whole_metre_origin() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "utm.ply",
            "ply\nformat ascii 1.0\nelement vertex 3\nproperty double x\nproperty double y\n\
             property double z\nelement face 1\nproperty list uchar int vertex_indices\n\
             end_header\n500000.1234 5400000.5678 250.25\n500000.1244 5400000.5678 250.25\n\
             500000.1234 5400000.5688 250.25\n3 0 1 2\n",
        );
        let mesh = read_ply_mesh(&p).unwrap();
        assert_eq!(mesh.origin_m, [500_000.0, 5_400_001.0, 250.0]);
        let world = |i: usize| -> [f64; 3] {
            std::array::from_fn(|k| mesh.origin_m[k] + f64::from(mesh.positions[i][k]))
        };
        let expected = [
            [500_000.123_4, 5_400_000.567_8, 250.25],
            [500_000.124_4, 5_400_000.567_8, 250.25],
            [500_000.123_4, 5_400_000.568_8, 250.25],
        ];
        for (i, e) in expected.iter().enumerate() {
            let w = world(i);
            assert!((0..3).all(|k| (w[k] - e[k]).abs() < 1e-7), "{i}: {w:?}");
        }
    }

    fn dataset(rel: &str) -> std::path::PathBuf {
        std::env::var_os("KILN_DATASETS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"))
            .join(rel)
    }

    /// `igea.ply` (Cyberware scan, binary, one `tristrips` row of 134,345 vertices): a closed
    /// genus-0 surface, so Euler's formula V − E + F = 2 with E = 3F/2 gives F = 2V − 4 =
    /// 268,686; and consistent winding means every directed edge occurs exactly once (a wrong
    /// odd-triangle rule would repeat half of them).
    #[test]
    fn igea_tristrips_give_a_closed_consistently_wound_surface() {
        // As written: generated normals copy vertices at creases, which would open the edges.
        let mesh = read_ply_as_written(&dataset("mesh-common-3d-test-models/igea.ply")).unwrap();
        assert_eq!(mesh.positions.len(), 134_345);
        assert_eq!(mesh.triangle_count(), 2 * 134_345 - 4);
        let mut edges: Vec<(u32, u32)> = mesh
            .indices
            .chunks_exact(3)
            .flat_map(|t| [(t[0], t[1]), (t[1], t[2]), (t[2], t[0])])
            .collect();
        edges.sort_unstable();
        let before = edges.len();
        edges.dedup();
        assert_eq!(edges.len(), before, "a directed edge occurs twice");
        // Every directed edge has its reverse: closed and consistently oriented.
        assert!(
            edges
                .iter()
                .all(|&(a, b)| edges.binary_search(&(b, a)).is_ok())
        );
    }

    /// The assimp test suite's `cube_binary.ply` (VCGLIB, binary little endian): 8 vertices, 12
    /// triangles, a unit-volume cube's 6 m² of surface. It has no normals: the generated ones keep
    /// the cube's 90° edges (above the crease angle), so each corner becomes 3 vertices, 24 in all.
    #[test]
    fn binary_cube_reads_12_triangles() {
        let path = dataset("mesh-ply-obj-edgecases-assimp/PLY/cube_binary.ply");
        assert_eq!(read_ply_as_written(&path).unwrap().positions.len(), 8);
        let mesh = read_ply_mesh(&path).unwrap();
        assert_eq!(mesh.positions.len(), 24);
        assert_eq!(mesh.triangle_count(), 12);
        let (min, max) = mesh.aabb().unwrap();
        let side: Vec<f64> = (0..3).map(|k| max[k] - min[k]).collect();
        let expected = 2.0 * (side[0] * side[1] + side[1] * side[2] + side[0] * side[2]);
        assert!((geometry::area(&mesh) - expected).abs() < 1e-4 * expected);
    }

    /// Two strips in one `tristrips` row, split by −1: [0 1 2 3] → (0 1 2) (1 3 2), [2 3 4 5] →
    /// (2 3 4) (3 5 4); over the zigzag (0,1) (0,0) (1,1) (1,0) (2,1) (2,0) all face +z.
    #[test]
    fn tristrips_rows_split_at_minus_one_and_alternate_winding() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "ts.ply",
            "ply\nformat ascii 1.0\nelement vertex 6\nproperty float x\nproperty float y\n\
             property float z\nelement tristrips 1\nproperty list int int vertex_indices\n\
             end_header\n0 1 0\n0 0 0\n1 1 0\n1 0 0\n2 1 0\n2 0 0\n9 0 1 2 3 -1 2 3 4 5\n",
        );
        let mesh = read_ply_mesh(&p).unwrap();
        assert_eq!(mesh.indices, [0, 1, 2, 1, 3, 2, 2, 3, 4, 3, 5, 4]);
        for t in 0..4 {
            assert!(geometry::cross(&mesh, t)[2] > 0.0, "triangle {t}");
        }
    }

    #[test]
    fn splat_ply_is_refused_with_the_splats_job_kind() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "s.ply",
            "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
             property float z\nproperty float f_dc_0\nproperty float opacity\n\
             property float scale_0\nend_header\n0 0 0 0.1 0.5 -3\n",
        );
        let err = read_ply_mesh(&p).unwrap_err().to_string();
        assert!(err.contains("s.ply"), "{err}");
        assert!(err.contains("Gaussian-splat PLY"), "{err}");
        assert!(err.contains("kind = \"splats\""), "{err}");
    }

    #[test]
    fn point_cloud_ply_is_empty_with_a_meshing_hint() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "pc.ply",
            "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
             property float z\nend_header\n0 0 0\n",
        );
        let err = read_ply_mesh(&p).unwrap_err().to_string();
        assert!(err.contains("point cloud"), "{err}");
    }

    #[test]
    fn face_index_past_the_vertices_names_the_face() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "b.ply",
            "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n\
             property float z\nelement face 2\nproperty list uchar int vertex_indices\nend_header\n\
             0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n3 0 1 3\n",
        );
        let err = read_ply_mesh(&p).unwrap_err().to_string();
        assert!(
            err.contains("element face 1") && err.contains("found 3"),
            "{err}"
        );
    }

    #[test]
    fn truncated_body_is_corrupt_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "t.ply",
            "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n\
             property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n\
             0 0 0\n1 0 0\n",
        );
        assert!(matches!(read_ply_mesh(&p), Err(Error::Corrupt { .. })));
    }
}
