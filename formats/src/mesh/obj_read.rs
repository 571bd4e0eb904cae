//! Read a Wavefront OBJ (with its MTL material libraries) into one merged [`Mesh`].
//!
//! Sources: the OBJ and MTL descriptions of Wavefront's Advanced Visualizer manual (appendices B1
//! "Object Files" and B2 "Material Library Files", as mirrored by Paul Bourke: `v`, `vt`, `vn`,
//! `f` with 1-based or negative (relative, −1 = the latest) indices, `mtllib`, `usemtl`; `Kd`,
//! `d`/`Tr`, `map_Kd` with its `-o`/`-s`/… options). Parsing, n-gon triangulation (a fan from the
//! polygon's first vertex, right for the convex polygons exporters write) and negative indices
//! are the `tobj` crate's; this module checks what it returns, resolves texture paths and maps
//! every `usemtl` material onto glTF PBR (`MaterialConverter::convert` documents the mapping and
//! its sources).
//!
//! Frame: OBJ has no units or up axis. Positions are taken as metres with +Y up (what Blender,
//! Meshlab, Metashape and RealityCapture write by default). Texture `v` runs up from the image's
//! bottom row in OBJ and down from its top row in glTF, so `v` becomes `1 − v`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use super::{AlphaMode, EmbeddedImage, Material, Mesh, MissingTexture, Sampler, TextureRef};
use crate::confined::ConfinedRoot;
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
/// skipped). Every material a face uses becomes one [`Material`] (in order of first use; faces
/// before any `usemtl` get a white diffuse one): `Kd`/`d`/`Tr` → base colour and BLEND, `map_Kd`,
/// `Ke`/`map_Ke` → emissive, `norm` or `map_Bump`/`bump` → normal map, `Pr`/`Pm` → roughness and
/// metallic (see `MaterialConverter::convert`). Each texture file is loaded once. Missing MTL or
/// texture files do not fail the read: all of them are listed in one warning and the materials
/// keep their colours.
///
/// UVs or vertex colours are dropped for the whole mesh (with a warning) when any object lacks them
/// on some vertex. Normals likewise, and then (or when the file has no `vn`) smooth normals are
/// generated for the whole mesh with creases kept (see [`super::generate_missing_normals`]; one
/// info line says so), so the mesh never draws with the flat normals glTF clients fall back to. Vertex colours (`v x y z r g b`) are display values and become
/// linear [`Mesh::colors`] (sRGB decoded).
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
    // Every `mtllib` and map file must lie inside the OBJ's folder (issue 41).
    let root = ConfinedRoot::of_input(path)?;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut loaded = match load_with_libraries(path, &root, &mut std::io::BufReader::new(file)) {
        // tobj refuses `usemtl<TAB>name` outright: read normalised (below) before giving up.
        Err(e) if !needs_normalising(path)? => return Err(e),
        Err(_) => Loaded {
            models: Vec::new(),
            materials: Vec::new(),
            libraries: Vec::new(),
            unsplit: true,
        },
        Ok(loaded) => loaded,
    };
    if loaded.unsplit || (loaded.faces_without_material() && needs_normalising(path)?) {
        // A `usemtl` before the `mtllib` that defines it (tobj resolves names as it reads), or
        // a tab after either keyword (tobj splits on a space): read again with the libraries
        // first and one space after each keyword, as Blender's and Assimp's importers see it.
        let normalised = normalise_obj(path)?;
        loaded = load_with_libraries(path, &root, &mut normalised.as_slice())?;
    }
    let Loaded {
        models,
        materials,
        libraries,
        ..
    } = loaded;
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
    warn_missing_libraries(path, &missing);
    // Materials of missing libraries were never appended, so indices map onto the libraries that
    // loaded, in order (tobj appends each library's materials as it reads `mtllib`).
    let material_dirs = material_dirs(&libraries, materials.len());
    let mut missing_maps_found = Vec::new();
    for (m, mat_dir) in materials.iter().zip(&material_dirs) {
        missing_maps_found.extend(missing_maps(&root, path, m, mat_dir));
    }
    super::warn_missing_textures(path, &missing_maps_found);

    let merged = merge_models(path, &models)?;
    if merged.triangle_materials.contains(&None) {
        warn_undefined_materials(path, &materials)?;
    }
    let mut converter = MaterialConverter {
        obj: path,
        root: &root,
        images: Vec::new(),
        image_files: Vec::new(),
    };
    // Distinct source materials in order of first use; `None` = faces before any `usemtl`.
    let mut slots: Vec<Option<usize>> = Vec::new();
    let mut triangle_materials = Vec::with_capacity(merged.triangle_materials.len());
    for &id in &merged.triangle_materials {
        let slot = slots.iter().position(|&s| s == id).unwrap_or_else(|| {
            slots.push(id);
            slots.len() - 1
        });
        triangle_materials.push(slot as u32);
    }
    let mut out_materials = Vec::with_capacity(slots.len());
    for id in &slots {
        out_materials.push(
            match id.and_then(|i| materials.get(i).zip(material_dirs.get(i))) {
                Some((m, dir)) => converter.convert(m, dir, merged.uvs.is_some())?,
                None => Material::diffuse([1.0; 4]),
            },
        );
    }
    let mut mesh = Mesh {
        origin_m: [0.0; 3],
        positions: merged.positions,
        normals: merged.normals,
        uvs: merged.uvs,
        uvs1: None,
        colors: merged.colors,
        indices: merged.indices,
        triangle_materials,
        materials: out_materials,
        images: converter.images,
    };
    super::fill_missing_normals(path, &mut mesh, None);
    Ok(mesh)
}

/// What tobj read from an OBJ, and the MTL libraries it named.
struct Loaded {
    models: Vec<tobj::Model>,
    materials: Vec<tobj::Material>,
    libraries: Vec<Library>,
    /// A `mtllib` or `usemtl` whose argument tobj could not split off (a tab after the
    /// keyword): the text is read again normalised.
    unsplit: bool,
}

impl Loaded {
    /// Whether some face has no material (before any `usemtl`, or a name tobj did not know).
    fn faces_without_material(&self) -> bool {
        self.models.iter().any(|m| m.mesh.material_id.is_none())
    }
}

/// Read the OBJ text `reader` (of the file `path`) with tobj, resolving every `mtllib` inside
/// `root` and recording each library as written, where it resolved and what it held.
///
/// # Errors
/// A `mtllib` leaving `root` ([`ConfinedRoot::resolve`]); tobj's errors on the OBJ text.
fn load_with_libraries(
    path: &Path,
    root: &ConfinedRoot,
    reader: &mut impl std::io::BufRead,
) -> Result<Loaded> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let refused: RefCell<Option<Error>> = RefCell::new(None);
    let libraries: RefCell<Vec<Library>> = RefCell::new(Vec::new());
    let unsplit = RefCell::new(false);
    let options = tobj::LoadOptions {
        single_index: true,
        triangulate: true,
        ignore_points: true,
        ignore_lines: true,
    };
    let loaded = tobj::load_obj_buf(reader, &options, |mtl: &Path| {
        if mtl.as_os_str().is_empty() {
            // `mtllib<TAB>name`: tobj splits on a space only; read again normalised.
            *unsplit.borrow_mut() = true;
            return Err(tobj::LoadError::OpenFileFailed);
        }
        let mut merged: Option<tobj::MTLLoadResult> = None;
        for name in library_names(root, path, dir, &mtl.to_string_lossy()) {
            let file = match root.resolve(path, "mtllib", dir, &name) {
                Ok(file) => file,
                Err(e) => {
                    refused.borrow_mut().get_or_insert(e);
                    return Err(tobj::LoadError::OpenFileFailed);
                }
            };
            let result = tobj::load_mtl(&file);
            libraries.borrow_mut().push(Library {
                as_written: name,
                materials: match &result {
                    Ok((m, _)) => Ok(m.len()),
                    Err(e) => Err(*e),
                },
                file,
            });
            merged = Some(match (merged, result) {
                (Some(Ok((mut all, mut map))), Ok((more, more_map))) => {
                    // Later libraries' materials follow, their indices shifted past the earlier.
                    let offset = all.len();
                    map.extend(more_map.into_iter().map(|(k, v)| (k, v + offset)));
                    all.extend(more);
                    Ok((all, map))
                }
                (Some(Ok(kept)), Err(_)) => Ok(kept),
                (_, result) => result,
            });
        }
        merged.unwrap_or(Err(tobj::LoadError::OpenFileFailed))
    });
    if let Some(e) = refused.into_inner() {
        return Err(e);
    }
    let (models, materials) = loaded.map_err(|e| obj_error(path, e))?;
    Ok(Loaded {
        models,
        materials: materials.unwrap_or_default(),
        libraries: libraries.into_inner(),
        unsplit: unsplit.into_inner(),
    })
}

/// The MTL files one `mtllib` line names: the whole argument when a file of that name (spaces
/// and all) exists, else each whitespace-separated name, as the OBJ format lists several
/// libraries on one line (`mtllib a.mtl b.mtl`; tobj takes the whole line as one name).
fn library_names(root: &ConfinedRoot, obj: &Path, dir: &Path, argument: &str) -> Vec<String> {
    let whole = argument.trim();
    let exists = |name: &str| {
        root.resolve(obj, "mtllib", dir, name)
            .is_ok_and(|f| f.is_file())
    };
    if !whole.contains(char::is_whitespace) || exists(whole) {
        return vec![whole.to_string()];
    }
    whole.split_whitespace().map(String::from).collect()
}

/// Whether the OBJ `path` needs [`normalise_obj`]: a `mtllib` line after its first `usemtl`, or
/// a `usemtl`/`mtllib` keyword followed by something other than one space.
fn needs_normalising(path: &Path) -> Result<bool> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut seen_usemtl = false;
    for line in std::io::BufReader::new(file).split(b'\n') {
        let line = line.map_err(|e| Error::io(path, e))?;
        let keyword = statement(&line);
        if matches!(keyword, Some("usemtl" | "mtllib")) && !spaced_once(&line) {
            return Ok(true);
        }
        match keyword {
            Some("usemtl") => seen_usemtl = true,
            Some("mtllib") if seen_usemtl => return Ok(true),
            _ => {}
        }
    }
    Ok(false)
}

/// Whether the keyword of `line` is followed by exactly one space (what tobj splits on).
fn spaced_once(line: &[u8]) -> bool {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_start();
    let after = text.trim_start_matches(|c: char| !c.is_whitespace());
    after.starts_with(' ') && !after[1..].starts_with(char::is_whitespace)
}

/// The OBJ `path` with its `mtllib` lines moved to the front and one space after every
/// `mtllib`/`usemtl` keyword, every other line as it was, in order.
fn normalise_obj(path: &Path) -> Result<Vec<u8>> {
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let (mut libraries, mut rest) = (Vec::new(), Vec::with_capacity(text.len()));
    for line in text.split_inclusive(|&b| b == b'\n') {
        let keyword = statement(line).map(str::to_string);
        let out = match keyword.as_deref() {
            Some("mtllib") => &mut libraries,
            _ => &mut rest,
        };
        match keyword.as_deref() {
            Some(k @ ("mtllib" | "usemtl")) => {
                let text = String::from_utf8_lossy(line);
                let argument = text.trim_start()[k.len()..].trim();
                out.extend_from_slice(format!("{k} {argument}\n").as_bytes());
            }
            _ => {
                out.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    out.push(b'\n');
                }
            }
        }
    }
    libraries.extend(rest);
    Ok(libraries)
}

/// The keyword of an OBJ line (`usemtl`, `mtllib`, `v`, …), if it has one.
fn statement(line: &[u8]) -> Option<&str> {
    let line = std::str::from_utf8(line).ok()?;
    line.split_whitespace().next()
}

/// One warning for MTL libraries that are missing: every material they define is lost, so the
/// faces that use them are drawn white (not "keep their colour factors", which is what a
/// missing texture means; re-trial F5).
fn warn_missing_libraries(path: &Path, missing: &[MissingTexture]) {
    if missing.is_empty() {
        return;
    }
    let list = missing
        .iter()
        .map(|m| format!("{} (`mtllib {}`)", m.resolved.display(), m.as_written))
        .collect::<Vec<_>>()
        .join(", ");
    tracing::warn!(
        "{}: {} MTL file(s) missing: {list}; the faces using their materials are drawn white \
         (put the files there and run again)",
        path.display(),
        missing.len()
    );
}

/// Warn once for every `usemtl` that names no material of the OBJ's MTL libraries (trial F21):
/// tobj gives their faces no material, so they are drawn with the white diffuse one meant for
/// faces before any `usemtl`, which would otherwise go unnoticed. Called only when some faces
/// have no material, so the second pass over the file costs nothing on well-formed OBJs.
fn warn_undefined_materials(path: &Path, materials: &[tobj::Material]) -> Result<()> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut undefined: Vec<String> = Vec::new();
    for line in std::io::BufReader::new(file).split(b'\n') {
        let line = line.map_err(|e| Error::io(path, e))?;
        let text = String::from_utf8_lossy(&line);
        let Some(name) = text.trim_start().strip_prefix("usemtl") else {
            continue;
        };
        if !name.starts_with(char::is_whitespace) {
            continue;
        }
        let name = name.trim();
        let known = materials.iter().any(|m| m.name == name);
        if !name.is_empty() && !known && !undefined.iter().any(|u| u == name) {
            undefined.push(name.to_string());
        }
    }
    if !undefined.is_empty() {
        let names = undefined
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::warn!(
            "{}: `usemtl` names {} material(s) that no `mtllib` of it defines: {names}; their \
             faces are drawn white (define them in the MTL file or fix the names)",
            path.display(),
            undefined.len()
        );
    }
    Ok(())
}

/// Turns MTL materials into [`Material`]s, loading each texture file once.
struct MaterialConverter<'a> {
    obj: &'a Path,
    /// Texture files resolve inside it.
    root: &'a ConfinedRoot,
    images: Vec<EmbeddedImage>,
    /// The file of each entry of `images`.
    image_files: Vec<PathBuf>,
}

impl MaterialConverter<'_> {
    /// One MTL material as glTF PBR metallic-roughness. The mapping follows what obj2gltf
    /// (CesiumGS, `lib/loadMtl.js`) and Blender's OBJ importer do, and the "PBR extension" to MTL
    /// (Exocortex / Clara.io, as read by tinyobjloader):
    ///
    /// * `Kd` → `baseColorFactor` RGB (taken as linear, like obj2gltf); `d`, else `1 − Tr`, →
    ///   its alpha, and `alphaMode` BLEND when below 1 (with `doubleSided`, since see-through
    ///   surfaces show their back faces);
    /// * `map_Kd` → `baseColorTexture`;
    /// * `Ke` → `emissiveFactor` (clamped to [0, 1]; a larger component becomes
    ///   `KHR_materials_emissive_strength` = its maximum, the factor divided by it); `map_Ke` →
    ///   `emissiveTexture` (with factor 1 when `Ke` is absent, since MTL multiplies by `Ke` only
    ///   when given);
    /// * `norm`, else `map_Bump`/`bump` → `normalTexture`, `-bm` → its `scale` (exporters such as
    ///   Blender write tangent-space normal maps as `map_Bump`; a greyscale height map read this
    ///   way shades wrongly, which is why `norm` wins when both are present);
    /// * `Pr` → `roughnessFactor`, `Pm` → `metallicFactor`; without them metallic 0 and roughness
    ///   1 (a diffuse surface, [`Material::diffuse`]); `Ks`/`Ns` (Phong) have no PBR counterpart
    ///   and are dropped.
    ///
    /// Textures are PNG or JPEG files; others are dropped with a warning, missing files were
    /// already listed. Textures need UVs (`vt`); without them none is kept.
    fn convert(&mut self, m: &tobj::Material, dir: &Path, has_uvs: bool) -> Result<Material> {
        let param = |key: &str| {
            m.unknown_param
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.trim().to_string())
        };
        let number = |key: &str| {
            param(key)
                .and_then(|v| v.parse::<f32>().ok())
                .filter(|x| x.is_finite())
        };
        let mut out = Material {
            name: Some(m.name.clone()),
            base_color_factor: base_color_factor(m),
            metallic_factor: number("Pm").map_or(0.0, |x| x.clamp(0.0, 1.0)),
            roughness_factor: number("Pr").map_or(1.0, |x| x.clamp(0.0, 1.0)),
            ..Material::default()
        };
        if out.base_color_factor[3] < 1.0 {
            out.alpha_mode = AlphaMode::Blend;
            out.double_sided = true;
        }
        let emissive = m
            .emissive
            .filter(|e| e.iter().all(|c| c.is_finite() && *c >= 0.0));
        if let Some(e) = emissive {
            let peak = e.iter().copied().fold(0.0f32, f32::max);
            if peak > 1.0 {
                out.emissive_factor = e.map(|c| c / peak);
                out.emissive_strength = Some(peak);
            } else {
                out.emissive_factor = e;
            }
        }
        if !has_uvs {
            return Ok(out);
        }
        if let Some(name) = &m.diffuse_texture {
            out.base_color_texture = self.texture(m, "map_Kd", name, dir)?;
        }
        if let Some(name) = param("map_Ke") {
            out.emissive_texture = self.texture(m, "map_Ke", &name, dir)?;
            if out.emissive_texture.is_some() && emissive.is_none() {
                out.emissive_factor = [1.0; 3];
            }
        }
        let normal = param("norm").or_else(|| m.normal_texture.clone());
        if let Some(argument) = normal {
            out.normal_texture = self.texture(m, "norm/map_Bump", &argument, dir)?;
            out.normal_scale = bump_multiplier(&argument).unwrap_or(1.0);
        }
        Ok(out)
    }

    /// The texture a map statement names, its file loaded once per OBJ.
    fn texture(
        &mut self,
        m: &tobj::Material,
        key: &str,
        argument: &str,
        dir: &Path,
    ) -> Result<Option<TextureRef>> {
        let field = format!("{key} of material `{}`", m.name);
        let file = self
            .root
            .resolve(self.obj, &field, dir, &texture_path(argument))?;
        let image = match self.image_files.iter().position(|f| *f == file) {
            Some(i) => Some(i),
            None => load_texture(self.obj, m, key, argument, &file)?.map(|img| {
                self.images.push(img);
                self.image_files.push(file);
                self.images.len() - 1
            }),
        };
        Ok(image.map(|image| TextureRef {
            image,
            sampler: Sampler::default(),
            tex_coord: 0,
            transform: None,
        }))
    }
}

/// The `-bm <mult>` option of a bump/normal map statement, if any.
fn bump_multiplier(argument: &str) -> Option<f32> {
    let mut words = argument.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-bm" {
            return words.next()?.parse().ok().filter(|x: &f32| x.is_finite());
        }
    }
    None
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

/// Every texture map of `m` whose file is not in `dir`; a name leading outside `root` is not
/// looked at (the maps that are loaded report it as an error).
fn missing_maps(
    root: &ConfinedRoot,
    obj: &Path,
    m: &tobj::Material,
    dir: &Path,
) -> Vec<MissingTexture> {
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
            let resolved = root.resolve(obj, key, dir, &texture_path(written)).ok()?;
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
            let whole = rest.trim().replace('\\', "/");
            // The whole argument (a name with spaces) and each name of a list: the reader picks
            // whichever exists ([`read_obj`]); staging fetches those that do.
            let names = std::iter::once(whole.clone()).chain(
                whole
                    .split_whitespace()
                    .map(String::from)
                    .skip_while(|n| *n == whole),
            );
            for name in names {
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
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
    /// `[V, 4]` linear RGBA from `v x y z r g b`, when every object has them.
    colors: Option<Vec<[f32; 4]>>,
    indices: Vec<u32>,
    /// `[F]` tobj material id of each triangle (`None`: no `usemtl` before it).
    triangle_materials: Vec<Option<usize>>,
}

fn merge_models(path: &Path, models: &[tobj::Model]) -> Result<Merged> {
    let mut out = Merged {
        positions: Vec::new(),
        normals: Some(Vec::new()),
        uvs: Some(Vec::new()),
        colors: Some(Vec::new()),
        indices: Vec::new(),
        triangle_materials: Vec::new(),
    };
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
        let colors_ok =
            mesh.vertex_color.len() == count * 3 && mesh.vertex_color.iter().all(|c| c.is_finite());
        drop_unless(
            path,
            &mut out.colors,
            colors_ok,
            "vertex colours (v x y z r g b)",
            base > 0,
        );
        if let Some(c) = out.colors.as_mut() {
            // Display values (sRGB), as MeshLab and photogrammetry tools write them.
            c.extend(mesh.vertex_color.chunks_exact(3).map(|v| {
                let [r, g, b] =
                    [v[0], v[1], v[2]].map(|x| super::srgb_to_linear(x.clamp(0.0, 1.0)));
                [r, g, b, 1.0]
            }));
        }
        out.indices
            .extend(mesh.indices.iter().map(|&i| i + base as u32));
        out.triangle_materials.extend(std::iter::repeat_n(
            mesh.material_id,
            mesh.indices.len() / 3,
        ));
    }
    if out.indices.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
            what: "faces",
            reason: "no `f` line with 3 or more vertices (points and lines are not meshes)".into(),
        });
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

/// The image `file` (named by `key` of material `m`), encoded (WebP and KTX2 as PNG, see
/// `source_image`); `None` when missing (already warned about) or of another type.
fn load_texture(
    obj: &Path,
    m: &tobj::Material,
    key: &str,
    written: &str,
    file: &Path,
) -> Result<Option<EmbeddedImage>> {
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(file, e)),
    };
    let converted = super::source_image::as_kept_image(bytes).map_err(|what| Error::Corrupt {
        path: file.to_path_buf(),
        location: format!(
            "{key} of material `{}` in the MTL of {}",
            m.name,
            obj.display()
        ),
        what,
    })?;
    let Some(converted) = converted else {
        tracing::warn!(
            file = %obj.display(),
            "{key} `{written}` of material `{}` ({}) is not PNG, JPEG, WebP or KTX2; texture \
             dropped (re-export it as PNG or JPEG)",
            m.name,
            file.display()
        );
        return Ok(None);
    };
    if let Some(from) = &converted.from {
        tracing::info!(
            file = %obj.display(),
            "{key} `{written}`: {from} decoded and stored as lossless PNG"
        );
    }
    Ok(Some(converted.image))
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

    /// Trial F21, as a rule over generated OBJs: every `usemtl` naming a material no `mtllib`
    /// defines is listed in exactly one warning (each name once); an OBJ whose names are all
    /// defined, or whose faces before any `usemtl` have none, warns nothing.
    #[test]
    fn usemtl_of_an_undefined_material_warns_once_naming_each() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.mtl"),
            "newmtl a\nKd 1 0 0\nnewmtl b\nKd 0 1 0\n",
        )
        .unwrap();
        let names = ["a", "b", "ghost", "Ghost 2", "a"];
        let mut state = 7u64;
        for case in 0..24 {
            let mut text = String::from("mtllib m.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\n");
            if case % 3 == 0 {
                text.push_str("f 1 2 3\n");
            }
            let mut undefined: Vec<&str> = Vec::new();
            for _ in 0..1 + case % 4 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let name = names[(state >> 33) as usize % names.len()];
                text.push_str(&format!("usemtl {name}\nf 1 2 3\n"));
                if name != "a" && name != "b" && !undefined.contains(&name) {
                    undefined.push(name);
                }
            }
            let obj = dir.path().join(format!("c{case}.obj"));
            std::fs::write(&obj, &text).unwrap();
            let (mesh, lines) = crate::splats::domain::tests::warnings(|| read_obj(&obj).unwrap());
            assert!(!mesh.indices.is_empty());
            let about: Vec<&String> = lines.iter().filter(|l| l.contains("usemtl")).collect();
            if undefined.is_empty() {
                assert!(about.is_empty(), "case {case}: {text}\n{lines:?}");
                continue;
            }
            assert_eq!(about.len(), 1, "case {case}: {text}\n{lines:?}");
            let line = about[0];
            assert!(line.contains(&format!("c{case}.obj")), "{line}");
            assert!(
                line.contains(&format!("names {} material", undefined.len())),
                "{line}"
            );
            for name in &undefined {
                assert!(line.contains(&format!("`{name}`")), "{line}");
            }
            assert!(!line.contains("`a`") && !line.contains("`b`"), "{line}");
        }
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
        assert_eq!(mesh.materials[0].base_color_factor, [0.8, 0.7, 0.6, 0.9]);
        let tex = mesh.base_color_image(0).expect("map_Kd checker.png");
        assert_eq!(tex.mime, "image/png");
        assert_eq!(
            tex.bytes,
            std::fs::read(fixture("obj_textured/materials/checker.png")).unwrap()
        );
    }

    /// `map_Kd` files in WebP (decoded, kept as PNG) and KTX2 (the fixture's UASTC pattern, kept
    /// as KTX2) read at their size; a damaged KTX2 is an error naming the file and the material.
    #[test]
    fn mtl_textures_in_webp_and_ktx2_are_read_at_their_size() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::copy(fixture("ktx2/pattern-uastc.ktx2"), d.join("p.ktx2")).unwrap();
        let rgba: Vec<u8> = (0..12u8)
            .flat_map(|i| [20 * i, 255 - 20 * i, 7, 255])
            .collect();
        std::fs::write(
            d.join("c.webp"),
            &*webp::Encoder::from_rgba(&rgba, 4, 3).encode_lossless(),
        )
        .unwrap();
        std::fs::write(
            d.join("m.mtl"),
            "newmtl k\nmap_Kd p.ktx2\nnewmtl w\nmap_Kd c.webp\n",
        )
        .unwrap();
        std::fs::write(
            d.join("q.obj"),
            "mtllib m.mtl\nv 0 0 0\nv 1 0 0\nv 1 1 0\nvt 0 0\nvt 1 0\nvt 1 1\n\
             usemtl k\nf 1/1 2/2 3/3\nusemtl w\nf 1/1 3/3 2/2\n",
        )
        .unwrap();
        let mesh = read_obj(&d.join("q.obj")).unwrap();
        let sizes: Vec<(u32, u32)> = (0..2)
            .map(|m| {
                let image = mesh.base_color_image(m).expect("texture kept");
                assert_eq!(
                    image.mime,
                    ["image/ktx2", "image/png"][m],
                    "KTX2 kept, WebP as PNG"
                );
                let decoded = crate::mesh::decode_texture(&image.bytes).unwrap();
                (decoded.width(), decoded.height())
            })
            .collect();
        assert_eq!(sizes, [(64, 48), (4, 3)]);

        let mut ktx2 = std::fs::read(d.join("p.ktx2")).unwrap();
        ktx2.truncate(80);
        std::fs::write(d.join("p.ktx2"), ktx2).unwrap();
        let e = read_obj(&d.join("q.obj")).unwrap_err().to_string();
        assert!(e.contains("p.ktx2") && e.contains("material `k`"), "{e}");
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
            ["a.mtl", "sub/b c.mtl", "sub/b", "c.mtl"]
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
        assert_eq!(mesh.materials[0].base_color_factor, [0.1, 0.2, 0.3, 1.0]);
        assert!(mesh.base_color_image(0).is_none());
        let mat = &tobj::load_mtl(d.path().join("m.mtl")).unwrap().0[0];
        let root = ConfinedRoot::new(d.path()).unwrap();
        let missing = missing_maps(&root, &d.path().join("m.obj"), mat, d.path());
        let names: Vec<&str> = missing.iter().map(|m| m.as_written.as_str()).collect();
        assert_eq!(names, ["tex/a.png", "-bm 1 tex/b.png"]);
        assert_eq!(missing[1].resolved, d.path().join("tex/b.png"));
    }

    /// Re-trial F4 and F5, over every position of the `mtllib` line: materials resolve
    /// wherever the library is named (first line, between `usemtl` and its faces, last line),
    /// with no warning; a missing MTL is one warning naming it as an MTL file whose faces are
    /// drawn white, beside the one naming the materials left undefined.
    #[test]
    fn materials_resolve_wherever_mtllib_stands_and_a_missing_mtl_says_so() {
        use crate::splats::domain::tests::warnings;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("m.mtl"),
            "newmtl Red\nKd 1 0 0\nnewmtl Blue\nKd 0 0 1\n",
        )
        .unwrap();
        let body = [
            "v 0 0 0",
            "v 1 0 0",
            "v 0 1 0",
            "usemtl Red",
            "f 1 2 3",
            "usemtl Blue",
            "f 1 3 2",
        ];
        for at in 0..=body.len() {
            let mut lines: Vec<&str> = body.to_vec();
            lines.insert(at, "mtllib m.mtl");
            let obj = d.path().join(format!("at{at}.obj"));
            std::fs::write(&obj, lines.join("\n")).unwrap();
            let (mesh, warned) = warnings(|| read_obj(&obj).unwrap());
            assert!(warned.is_empty(), "mtllib at line {at}: {warned:?}");
            let colours: Vec<[f32; 4]> =
                mesh.materials.iter().map(|m| m.base_color_factor).collect();
            assert_eq!(
                colours,
                [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]],
                "mtllib at line {at}"
            );
        }
        let obj = d.path().join("gone.obj");
        std::fs::write(&obj, format!("mtllib nosuch.mtl\n{}", body.join("\n"))).unwrap();
        let (_, warned) = warnings(|| read_obj(&obj).unwrap());
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(
            warned[0].contains("1 MTL file(s) missing") && warned[0].contains("nosuch.mtl"),
            "{}",
            warned[0]
        );
        assert!(warned[0].contains("drawn white") && !warned[0].contains("texture"));
        assert!(warned[1].contains("`Red`, `Blue`"), "{}", warned[1]);
    }

    /// Re-trial N2's siblings: a tab (or several spaces) after `mtllib` or `usemtl` reads as
    /// one space; staging lists each name of a `mtllib` list as well as the whole argument.
    #[test]
    fn tabs_after_mtllib_and_usemtl_read_like_spaces() {
        use crate::splats::domain::tests::warnings;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("red.mtl"), "newmtl Red\nKd 1 0 0\n").unwrap();
        std::fs::write(d.path().join("blue.mtl"), "newmtl Blue\nKd 0 0 1\n").unwrap();
        for (libraries, red) in [
            ("mtllib\tred.mtl\nmtllib blue.mtl", "usemtl Red"),
            ("mtllib\tred.mtl\tblue.mtl", "usemtl\tRed"),
            ("mtllib  red.mtl blue.mtl", "usemtl   Red"),
        ] {
            let obj = d.path().join("t.obj");
            let text = format!(
                "{libraries}\nv 0 0 0\nv 1 0 0\nv 0 1 0\n{red}\nf 1 2 3\nusemtl Blue\nf 1 3 2\n"
            );
            std::fs::write(&obj, &text).unwrap();
            let (mesh, warned) = warnings(|| read_obj(&obj).unwrap());
            assert!(warned.is_empty(), "{text}: {warned:?}");
            let colours: Vec<[f32; 4]> =
                mesh.materials.iter().map(|m| m.base_color_factor).collect();
            assert_eq!(
                colours,
                [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]],
                "{text}"
            );
        }
        assert_eq!(
            obj_material_libraries("mtllib\tred.mtl\tblue.mtl\n"),
            ["red.mtl\tblue.mtl", "red.mtl", "blue.mtl"]
        );
    }

    /// Re-trial N2: one `mtllib` line naming two libraries loads both, in order; a library
    /// whose file name holds a space is still found whole.
    #[test]
    fn one_mtllib_line_may_name_several_libraries() {
        use crate::splats::domain::tests::warnings;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("red.mtl"), "newmtl Red\nKd 1 0 0\n").unwrap();
        std::fs::write(d.path().join("blue lib.mtl"), "newmtl Blue\nKd 0 0 1\n").unwrap();
        std::fs::write(d.path().join("green.mtl"), "newmtl Green\nKd 0 1 0\n").unwrap();
        let faces = "v 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl Red\nf 1 2 3\nusemtl Blue\nf 1 3 2\n";
        for (libraries, want) in [
            (
                "mtllib red.mtl green.mtl\nmtllib blue lib.mtl",
                [1.0, 0.0, 0.0],
            ),
            (
                "mtllib blue lib.mtl\nmtllib green.mtl red.mtl",
                [1.0, 0.0, 0.0],
            ),
        ] {
            let obj = d.path().join("m.obj");
            std::fs::write(&obj, format!("{libraries}\n{faces}")).unwrap();
            let (mesh, warned) = warnings(|| read_obj(&obj).unwrap());
            assert!(warned.is_empty(), "{libraries}: {warned:?}");
            let colours: Vec<[f32; 4]> =
                mesh.materials.iter().map(|m| m.base_color_factor).collect();
            assert_eq!(
                colours,
                [[want[0], want[1], want[2], 1.0], [0.0, 0.0, 1.0, 1.0]],
                "{libraries}"
            );
        }
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

    /// `tests/fixtures/mesh/obj_materials/pbr.obj`: three materials, each mapped as
    /// `MaterialConverter::convert` documents; expected values by hand from `pbr.mtl`.
    #[test]
    fn mtl_materials_map_onto_gltf_pbr() {
        let mesh = read_obj(&fixture("obj_materials/pbr.obj")).unwrap();
        assert_eq!(mesh.triangle_count(), 6);
        assert_eq!(mesh.materials.len(), 3);
        assert_eq!(mesh.triangle_materials, vec![0, 0, 1, 1, 2, 2]);
        let [painted, neon, smoked] = [0, 1, 2].map(|i| &mesh.materials[i]);
        assert_eq!(painted.name.as_deref(), Some("painted"));
        assert_eq!(painted.base_color_factor, [0.9, 0.8, 0.7, 1.0]);
        assert_eq!(
            (painted.metallic_factor, painted.roughness_factor),
            (0.75, 0.25)
        );
        let normal = painted
            .normal_texture
            .as_ref()
            .expect("norm wins over map_Bump");
        assert_eq!(painted.normal_scale, 0.5);
        let base = painted.base_color_texture.as_ref().unwrap();
        assert_ne!(normal.image, base.image);
        assert_eq!(
            mesh.images.len(),
            2,
            "checker.png loaded once for map_Kd and map_Ke"
        );
        assert_eq!(painted.alpha_mode, AlphaMode::Opaque);

        // Ke 4 2 0 → factor (1, 0.5, 0) × strength 4.
        assert_eq!(neon.emissive_factor, [1.0, 0.5, 0.0]);
        assert_eq!(neon.emissive_strength, Some(4.0));
        assert_eq!(neon.emissive_texture.as_ref().unwrap().image, base.image);
        assert_eq!((neon.metallic_factor, neon.roughness_factor), (0.0, 1.0));

        assert!((smoked.base_color_factor[3] - 0.4).abs() < 1e-6);
        assert_eq!(smoked.alpha_mode, AlphaMode::Blend);
        assert!(smoked.double_sided);

        // v … 1 0.5 0 → linear (1, sRGB⁻¹(0.5) = 0.21404, 0).
        let c = mesh.colors.as_ref().expect("vertex colours kept")[0];
        assert!(
            (c[1] - 0.214_041).abs() < 1e-5 && c[0] == 1.0 && c[2] == 0.0,
            "{c:?}"
        );
    }
}

/// Issue 41: `mtllib` and `map_*` names resolve through [`ConfinedRoot`].
#[cfg(test)]
mod confinement_tests {
    use super::*;
    use crate::confined::testing::{Seeded, is_refusal, layout, model_is_inside};

    /// Property: over generated names, an OBJ's `mtllib` and an MTL's `map_Kd` are refused
    /// exactly when the name leaves the OBJ's folder (the MTL sits in `in/`, so its maps resolve
    /// from there), naming the statement.
    #[test]
    fn mtllib_and_map_names_are_refused_exactly_when_they_leave_the_obj_folder() {
        let (_t, root) = layout();
        let obj = root.join("m.obj");
        let mut g = Seeded(4103);
        for case in 0..300 {
            let w = g.path();
            let (obj_text, mtl_text, field, base): (String, String, &str, &[&str]) = match case % 2
            {
                0 => (format!("mtllib {w}\n"), String::new(), "mtllib", &[]),
                _ => (
                    "mtllib in/m.mtl\n".into(),
                    format!("newmtl a\nmap_Kd {w}\n"),
                    "map_Kd of material `a`",
                    &["in"],
                ),
            };
            std::fs::write(root.join("in/m.mtl"), mtl_text).unwrap();
            let text = format!(
                "{obj_text}v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl a\nf 1/1 2/2 3/3\n"
            );
            std::fs::write(&obj, text).unwrap();
            let got = read_obj(&obj);
            let refused = got.as_ref().err().is_some_and(|e| is_refusal(e, field));
            let inside = model_is_inside(&root, base, &w);
            assert_eq!(
                refused,
                !inside,
                "case {case}: {field} `{w}` → {:?}",
                got.err()
            );
        }
    }
}
