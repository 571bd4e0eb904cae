//! Read a Wavefront OBJ (with its MTL material libraries) into one merged [`Mesh`].
//!
//! Sources: the OBJ and MTL descriptions of Wavefront's Advanced Visualizer manual (appendices B1
//! "Object Files" and B2 "Material Library Files", as mirrored by Paul Bourke: `v`, `vt`, `vn`,
//! `f` with 1-based or negative (relative, −1 = the latest) indices, `mtllib`, `usemtl`; `Kd`,
//! `d`/`Tr`, `map_Kd` with its `-o`/`-s`/… options). Parsing, n-gon triangulation (a fan from the
//! polygon's first vertex, right for the convex polygons exporters write) and negative indices
//! are the `tobj` crate's; this module checks what it returns, resolves texture paths and maps the
//! materials onto Kiln's single-material [`Mesh`].
//!
//! Frame: OBJ has no units or up axis. Positions are taken as metres with +Y up (what Blender,
//! Meshlab, Metashape and RealityCapture write by default). Texture `v` runs up from the image's
//! bottom row in OBJ and down from its top row in glTF, so `v` becomes `1 − v`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use super::{EmbeddedImage, Mesh, MissingTexture};
use crate::{Error, Result};

/// Read an OBJ file and the MTL files it names as one triangle mesh.
///
/// Every face of every object/group is kept: polygons of n ≥ 4 vertices become n − 2 triangles
/// (`(0, i, i+1)`, the face's own winding, so counter-clockwise faces stay counter-clockwise);
/// points and lines are skipped. Vertices are split where a position is used with different
/// `vt`/`vn`, so `positions`, `normals` and `uvs` share one index.
///
/// Materials: `mtllib` files resolve against the OBJ's folder, and texture paths (`map_Kd` etc.)
/// against the folder of the MTL that names them (`map_*` options such as `-s 1 1 1` are
/// skipped). Kiln's [`Mesh`] holds one material, so the material of the first object that uses one
/// is kept: `Kd` → `base_color_factor` RGB, `d` (or `1 − Tr`) → alpha, `map_Kd` →
/// `base_color_texture` (PNG or JPEG); objects with other materials keep their geometry and are
/// drawn with it (one warning). Missing MTL or texture files do not fail the read: all of them are
/// listed in one warning and the material keeps its colour.
///
/// Normals or UVs are dropped for the whole mesh (with a warning) when any object lacks them on
/// some vertex. Vertex colours (`v x y z r g b`) are parsed and checked but not kept: [`Mesh`] has
/// no colour channel yet (a warning says so).
///
/// * `path` — a `.obj` file (UTF-8 text).
///
/// # Errors
/// * [`Error::NotFound`] — `path` does not exist.
/// * [`Error::Corrupt`] — a line `tobj` cannot parse, or a face index outside the vertices (or
///   texture coordinates, normals) defined so far; an MTL that does not parse (the error names the
///   MTL file).
/// * [`Error::Invalid`] — a non-finite position (names the object and vertex).
/// * [`Error::Empty`] — no faces with 3 or more vertices.
///
/// # Panics
/// Never on file content.
pub fn read_obj(path: &Path) -> Result<Mesh> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let libraries: RefCell<Vec<Library>> = RefCell::new(Vec::new());
    let options = tobj::LoadOptions {
        single_index: true,
        triangulate: true,
        ignore_points: true,
        ignore_lines: true,
    };
    let loaded = tobj::load_obj_buf(
        &mut std::io::BufReader::new(file),
        &options,
        |mtl: &Path| {
            let file = dir.join(mtl.to_string_lossy().replace('\\', "/"));
            let result = tobj::load_mtl(&file);
            libraries.borrow_mut().push(Library {
                as_written: mtl.display().to_string(),
                materials: match &result {
                    Ok((m, _)) => Ok(m.len()),
                    Err(e) => Err(*e),
                },
                file,
            });
            result
        },
    );
    let (models, materials) = loaded.map_err(|e| obj_error(path, e))?;
    let libraries = libraries.into_inner();
    let mut missing = Vec::new();
    for lib in &libraries {
        match lib.materials {
            Ok(_) => {}
            Err(tobj::LoadError::OpenFileFailed) => missing.push(MissingTexture {
                field: "mtllib".into(),
                as_written: lib.as_written.clone(),
                resolved: lib.file.clone(),
            }),
            Err(e) => {
                return Err(Error::Corrupt {
                    path: lib.file.clone(),
                    location: "MTL body".into(),
                    what: format!("{e} (named by `mtllib {}` in the OBJ)", lib.as_written),
                });
            }
        }
    }
    // Materials of missing libraries were never appended, so indices map onto the libraries that
    // loaded, in order (tobj appends each library's materials as it reads `mtllib`).
    let materials = materials.unwrap_or_default();
    let material_dirs = material_dirs(&libraries, materials.len());
    for (m, mat_dir) in materials.iter().zip(&material_dirs) {
        missing.extend(missing_maps(m, mat_dir));
    }
    super::warn_missing_textures(path, &missing);

    let merged = merge_models(path, &models)?;
    let (base_color_factor, base_color_texture) = match merged.material {
        Some(id) => match (materials.get(id), material_dirs.get(id)) {
            (Some(m), Some(mat_dir)) => {
                let tex = match (&m.diffuse_texture, merged.uvs.is_some()) {
                    (Some(name), true) => load_texture(path, m, name, mat_dir)?,
                    _ => None,
                };
                (base_color_factor(m), tex)
            }
            _ => ([1.0; 4], None),
        },
        None => ([1.0; 4], None),
    };
    Ok(Mesh {
        positions: merged.positions,
        normals: merged.normals,
        uvs: merged.uvs,
        indices: merged.indices,
        base_color_texture,
        base_color_factor,
    })
}

/// One `mtllib` line: the file looked for and what loading it gave.
struct Library {
    as_written: String,
    file: PathBuf,
    /// Number of materials read, or why none were.
    materials: std::result::Result<usize, tobj::LoadError>,
}

/// The folder of the MTL each of `count` materials came from (texture paths resolve against it).
fn material_dirs(libraries: &[Library], count: usize) -> Vec<PathBuf> {
    let mut dirs = Vec::with_capacity(count);
    for lib in libraries {
        let dir = lib.file.parent().unwrap_or(Path::new(".")).to_path_buf();
        dirs.extend(std::iter::repeat_n(
            dir,
            *lib.materials.as_ref().unwrap_or(&0),
        ));
    }
    dirs.resize(count, PathBuf::from("."));
    dirs
}

/// Every texture map of `m` whose file is not in `dir`.
fn missing_maps(m: &tobj::Material, dir: &Path) -> Vec<MissingTexture> {
    let maps = [
        ("map_Kd", &m.diffuse_texture),
        ("map_Ka", &m.ambient_texture),
        ("map_Ks", &m.specular_texture),
        ("norm/map_Bump", &m.normal_texture),
        ("map_Ns", &m.shininess_texture),
        ("map_d", &m.dissolve_texture),
    ];
    maps.into_iter()
        .filter_map(|(key, value)| {
            let written = value.as_deref()?;
            let resolved = dir.join(texture_path(written));
            (!resolved.is_file()).then(|| MissingTexture {
                field: format!("{key} of material `{}`", m.name),
                as_written: written.to_string(),
                resolved,
            })
        })
        .collect()
}

/// The file name of an MTL map statement's argument, without its options (`-s 1 1 1 -clamp on
/// wood.png` → `wood.png`). Options take a fixed number of words, except `-o`/`-s`/`-t`, which take
/// one to three numbers. A name with spaces is kept whole.
pub(crate) fn texture_file_name(argument: &str) -> &str {
    let mut rest = argument.trim();
    while let Some(option) = rest.strip_prefix('-') {
        let (name, after) = option
            .split_once(char::is_whitespace)
            .unwrap_or((option, ""));
        let mut after = after.trim_start();
        let fixed = match name {
            "blendu" | "blendv" | "cc" | "clamp" | "texres" | "bm" | "boost" | "imfchan"
            | "type" => 1,
            "mm" => 2,
            "o" | "s" | "t" => 0,
            _ => return rest,
        };
        let mut words = 0;
        while !after.is_empty() {
            let (word, tail) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
            let take = if fixed > 0 {
                words < fixed
            } else {
                words < 3 && word.parse::<f32>().is_ok()
            };
            if !take {
                break;
            }
            words += 1;
            after = tail.trim_start();
        }
        rest = after;
    }
    rest
}

/// A map statement's argument as a relative path: options removed ([`texture_file_name`]) and
/// Windows separators (`textures\\wood.jpg`, common in exports) turned into `/`.
fn texture_path(argument: &str) -> String {
    texture_file_name(argument).replace('\\', "/")
}

/// The material libraries an OBJ's `mtllib` lines name, as written (relative to the OBJ's folder),
/// in order and without repeats; for fetching an asset's files before reading it.
pub fn obj_material_libraries(obj_text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in obj_text.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("mtllib")
            && rest.starts_with(char::is_whitespace)
        {
            let name = rest.trim().replace('\\', "/");
            if !name.is_empty() && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// The texture files an MTL's map statements (`map_Kd`, `map_Ka`, `map_Ks`, `map_Ns`, `map_d`,
/// `map_Bump`/`bump`, `norm`, `disp`, `decal`, `refl`) name, options removed and `\\` as `/`,
/// relative to the MTL's folder; in order and without repeats.
pub fn mtl_texture_files(mtl_text: &str) -> Vec<String> {
    const MAPS: [&str; 12] = [
        "map_kd", "map_ka", "map_ks", "map_ns", "map_d", "map_bump", "bump", "norm", "disp",
        "decal", "refl", "map_ke",
    ];
    let mut out: Vec<String> = Vec::new();
    for line in mtl_text.lines() {
        let line = line.trim();
        let Some((key, argument)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        if MAPS.contains(&key.to_ascii_lowercase().as_str()) {
            let name = texture_path(argument);
            if !name.is_empty() && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// The geometry of all objects, merged.
struct Merged {
    positions: Vec<[f32; 3]>,
    normals: Option<Vec<[f32; 3]>>,
    uvs: Option<Vec<[f32; 2]>>,
    indices: Vec<u32>,
    /// Index into the materials of the first object that names one.
    material: Option<usize>,
}

fn merge_models(path: &Path, models: &[tobj::Model]) -> Result<Merged> {
    let mut out = Merged {
        positions: Vec::new(),
        normals: Some(Vec::new()),
        uvs: Some(Vec::new()),
        indices: Vec::new(),
        material: None,
    };
    let mut colors_seen = 0usize;
    let mut warned_materials = false;
    for model in models.iter().filter(|m| !m.mesh.indices.is_empty()) {
        let mesh = &model.mesh;
        let count = mesh.positions.len() / 3;
        let base = out.positions.len();
        if base + count > u32::MAX as usize {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                field: format!("object `{}`", model.name),
                found: format!("more than {} vertices in total", u32::MAX),
                supported: "meshes with < 2^32 vertices".into(),
            });
        }
        for (i, p) in mesh.positions.chunks_exact(3).enumerate() {
            if !p.iter().all(|c| c.is_finite()) {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    field: format!("v (object `{}`, vertex {i} of its faces)", model.name),
                    expected: "finite coordinates".into(),
                    found: format!("{p:?}"),
                });
            }
            out.positions.push([p[0], p[1], p[2]]);
        }
        let normals_ok =
            mesh.normals.len() == count * 3 && mesh.normals.iter().all(|c| c.is_finite());
        drop_unless(path, &mut out.normals, normals_ok, "normals (vn)", base > 0);
        if let Some(n) = out.normals.as_mut() {
            n.extend(mesh.normals.chunks_exact(3).map(|v| [v[0], v[1], v[2]]));
        }
        let uvs_ok =
            mesh.texcoords.len() == count * 2 && mesh.texcoords.iter().all(|c| c.is_finite());
        drop_unless(
            path,
            &mut out.uvs,
            uvs_ok,
            "texture coordinates (vt)",
            base > 0,
        );
        if let Some(t) = out.uvs.as_mut() {
            // OBJ v counts up from the image's bottom row, glTF v down from its top row.
            t.extend(mesh.texcoords.chunks_exact(2).map(|v| [v[0], 1.0 - v[1]]));
        }
        if mesh.vertex_color.len() == count * 3 {
            colors_seen += count;
        }
        out.indices
            .extend(mesh.indices.iter().map(|&i| i + base as u32));
        match (out.material, mesh.material_id) {
            (None, Some(id)) => out.material = Some(id),
            (Some(first), Some(id)) if first != id && !warned_materials => {
                warned_materials = true;
                tracing::warn!(
                    file = %path.display(),
                    "object `{}` uses another material than the first; Kiln keeps one material per \
                     mesh for now, so it is drawn with the first (its geometry is kept)",
                    model.name
                );
            }
            _ => {}
        }
    }
    if out.indices.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
            what: "faces",
            reason: "no `f` line with 3 or more vertices (points and lines are not meshes)".into(),
        });
    }
    if colors_seen > 0 {
        tracing::warn!(
            file = %path.display(),
            "{colors_seen} vertices carry colours (`v x y z r g b`); Kiln's mesh has no colour \
             channel yet, so they are not kept"
        );
    }
    Ok(out)
}

/// Set `slot` to `None` (once, with a warning when earlier objects had it) unless `ok`.
fn drop_unless<T>(path: &Path, slot: &mut Option<Vec<T>>, ok: bool, what: &str, earlier: bool) {
    if !ok && slot.is_some() {
        if earlier {
            tracing::warn!(
                file = %path.display(),
                "an object lacks {what} on some vertices; {what} dropped for the whole mesh"
            );
        }
        *slot = None;
    }
}

/// `Kd` and `d` (or `1 − Tr`) as a linear RGBA factor; white and opaque where absent.
fn base_color_factor(m: &tobj::Material) -> [f32; 4] {
    let [r, g, b] = m.diffuse.unwrap_or([1.0; 3]);
    let alpha = m
        .dissolve
        .or_else(|| {
            m.unknown_param
                .get("Tr")
                .and_then(|t| t.trim().parse::<f32>().ok())
                .map(|t| 1.0 - t)
        })
        .unwrap_or(1.0);
    [r, g, b, alpha].map(|c| {
        if c.is_finite() {
            c.clamp(0.0, 1.0)
        } else {
            1.0
        }
    })
}

/// The `map_Kd` image of `m`, encoded; `None` when missing (already warned about) or not PNG/JPEG.
fn load_texture(
    obj: &Path,
    m: &tobj::Material,
    written: &str,
    dir: &Path,
) -> Result<Option<EmbeddedImage>> {
    let file = dir.join(texture_path(written));
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&file, e)),
    };
    let mime = match bytes.as_slice() {
        [0x89, b'P', b'N', b'G', ..] => "image/png",
        [0xFF, 0xD8, 0xFF, ..] => "image/jpeg",
        _ => {
            tracing::warn!(
                file = %obj.display(),
                "map_Kd `{written}` of material `{}` ({}) is not PNG or JPEG; texture dropped \
                 (re-export it as PNG or JPEG)",
                m.name,
                file.display()
            );
            return Ok(None);
        }
    };
    Ok(Some(EmbeddedImage {
        mime: mime.into(),
        bytes,
    }))
}

/// A `tobj` error as ours, naming the file and what to fix.
fn obj_error(path: &Path, e: tobj::LoadError) -> Error {
    use tobj::LoadError as E;
    let hint = match e {
        E::FaceVertexOutOfBounds => {
            "an `f` line names a vertex (`v`) that is not defined before it"
        }
        E::FaceTexCoordOutOfBounds => {
            "an `f` line names a texture coordinate (`vt`) that is not defined before it"
        }
        E::FaceNormalOutOfBounds => {
            "an `f` line names a normal (`vn`) that is not defined before it"
        }
        E::FaceColorOutOfBounds => "some `v` lines carry colours and others do not",
        E::OpenFileFailed | E::ReadError => "the file could not be read (is it UTF-8 text?)",
        _ => "a line does not parse",
    };
    Error::Corrupt {
        path: path.to_path_buf(),
        location: "OBJ body".into(),
        what: format!("{e}: {hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{fixture, geometry};
    use super::*;

    /// `tests/fixtures/mesh/obj_textured/quads.obj`: two quads (the second by negative indices) and
    /// a pentagon. By hand: 2 + 2 + 3 = 7 triangles; area 1 + 1 + 1.25 (shoelace of the pentagon
    /// (0,2) (1,2) (1.5,2.5) (1,3) (0,3)) = 3.25 m²; every face counter-clockwise seen from +z.
    #[test]
    fn quads_and_pentagon_with_negative_indices_triangulate_counter_clockwise() {
        let mesh = read_obj(&fixture("obj_textured/quads.obj")).unwrap();
        assert_eq!(mesh.triangle_count(), 7);
        // Quads: 6 distinct (v, vt, vn) corners (the shared edge is one vertex pair); pentagon: 5.
        assert_eq!(mesh.positions.len(), 11);
        assert!((geometry::area(&mesh) - 3.25).abs() < 1e-6);
        for t in 0..7 {
            let n = geometry::cross(&mesh, t);
            assert!(
                n[2] > 0.0 && n[0] == 0.0 && n[1] == 0.0,
                "triangle {t}: {n:?}"
            );
        }
        // The second quad's corners came from `f -5 -2 -1 -4`: v2 v5 v6 v3 = x in [1, 2].
        let second: Vec<[f32; 3]> = mesh.indices[6..12]
            .iter()
            .map(|&i| mesh.positions[i as usize])
            .collect();
        assert!(
            second
                .iter()
                .all(|p| (1.0..=2.0).contains(&p[0]) && p[1] <= 1.0)
        );
        assert_eq!(
            mesh.normals
                .as_deref()
                .map(|n| n.iter().all(|v| *v == [0.0, 0.0, 1.0])),
            Some(true)
        );
    }

    /// OBJ `v` runs up, glTF `v` down: `vt 0 0` at (0,0,0) becomes (0, 1), `vt 1 1` at (2,1,0)
    /// becomes (1, 0).
    #[test]
    fn texture_v_is_flipped_to_the_gltf_convention() {
        let mesh = read_obj(&fixture("obj_textured/quads.obj")).unwrap();
        let uvs = mesh.uvs.as_ref().expect("every face has vt");
        let uv_at = |p: [f32; 3]| uvs[mesh.positions.iter().position(|q| *q == p).unwrap()];
        assert_eq!(uv_at([0.0, 0.0, 0.0]), [0.0, 1.0]);
        assert_eq!(uv_at([2.0, 1.0, 0.0]), [1.0, 0.0]);
    }

    /// The first material (`checker`): `Kd 0.8 0.7 0.6`, `d 0.9`, `map_Kd -s 1 1 1 checker.png`
    /// resolved against the MTL's folder (materials/), not the OBJ's.
    #[test]
    fn first_material_keeps_kd_dissolve_and_the_map_kd_beside_its_mtl() {
        let mesh = read_obj(&fixture("obj_textured/quads.obj")).unwrap();
        assert_eq!(mesh.base_color_factor, [0.8, 0.7, 0.6, 0.9]);
        let tex = mesh.base_color_texture.expect("map_Kd checker.png");
        assert_eq!(tex.mime, "image/png");
        assert_eq!(
            tex.bytes,
            std::fs::read(fixture("obj_textured/materials/checker.png")).unwrap()
        );
    }

    #[test]
    fn map_options_are_skipped_and_names_with_spaces_kept() {
        assert_eq!(texture_file_name("checker.png"), "checker.png");
        assert_eq!(texture_file_name("-s 1 1 1 checker.png"), "checker.png");
        assert_eq!(texture_file_name("-o 0.5 -clamp on tex.jpg"), "tex.jpg");
        assert_eq!(texture_file_name("-bm 0.3 -s 2 2 n.png"), "n.png");
        assert_eq!(texture_file_name("  my wood.png "), "my wood.png");
    }

    #[test]
    fn sidecar_names_come_from_mtllib_and_map_lines() {
        assert_eq!(
            obj_material_libraries(
                "# x\nmtllib a.mtl\nmtllib sub\\b c.mtl\nmtllib a.mtl\nv 0 0 0\n"
            ),
            ["a.mtl", "sub/b c.mtl"]
        );
        assert_eq!(
            mtl_texture_files(
                "newmtl m\nKd 1 1 1\nmap_Kd -s 1 1 1 tex\\a.png\n  bump -bm 2 n.png\nmap_kd tex/a.png\n"
            ),
            ["tex/a.png", "n.png"]
        );
    }

    /// Two missing maps and a missing second MTL: the read succeeds, the material keeps `Kd`, and
    /// all three files are reported together.
    #[test]
    fn missing_textures_and_mtl_are_all_listed_and_the_material_keeps_its_colour() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("m.obj"),
            "mtllib m.mtl\nmtllib gone.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\n\
             usemtl a\nf 1/1 2/2 3/3\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("m.mtl"),
            "newmtl a\nKd 0.1 0.2 0.3\nmap_Kd tex/a.png\nmap_Bump -bm 1 tex/b.png\n",
        )
        .unwrap();
        let mesh = read_obj(&d.path().join("m.obj")).unwrap();
        assert_eq!(mesh.triangle_count(), 1);
        assert_eq!(mesh.base_color_factor, [0.1, 0.2, 0.3, 1.0]);
        assert!(mesh.base_color_texture.is_none());
        let mat = &tobj::load_mtl(d.path().join("m.mtl")).unwrap().0[0];
        let missing = missing_maps(mat, d.path());
        let names: Vec<&str> = missing.iter().map(|m| m.as_written.as_str()).collect();
        assert_eq!(names, ["tex/a.png", "-bm 1 tex/b.png"]);
        assert_eq!(missing[1].resolved, d.path().join("tex/b.png"));
    }

    /// `beast.obj` (shared datasets): 32,228 quads + 12 n-gons, 64,618 triangles after
    /// triangulation (the dataset's PROVENANCE.md, counted independently of this reader).
    #[test]
    fn beast_quads_and_ngons_triangulate_to_the_provenance_count() {
        let root = std::env::var_os("KILN_DATASETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
        let mesh = read_obj(&root.join("mesh-common-3d-test-models/beast.obj")).unwrap();
        assert_eq!(mesh.triangle_count(), 64_618);
        assert!(mesh.uvs.is_some(), "beast.obj has vt on every face");
    }

    #[test]
    fn face_index_past_the_vertices_is_a_corrupt_error_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("bad.obj");
        std::fs::write(&p, "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n").unwrap();
        let err = read_obj(&p).unwrap_err().to_string();
        assert!(err.contains("bad.obj") && err.contains("`v`"), "{err}");
    }

    #[test]
    fn points_only_obj_is_empty_not_a_mesh() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pts.obj");
        std::fs::write(&p, "v 0 0 0\nv 1 0 0\np 1 2\n").unwrap();
        assert!(matches!(read_obj(&p), Err(Error::Empty { .. })));
    }
}
