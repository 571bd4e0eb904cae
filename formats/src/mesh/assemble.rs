//! One asset from several mesh files: photogrammetry tools export a large model as one OBJ (or
//! glTF, PLY) per block (ContextCapture's `Tile_+000_+001/Tile_+000_+001.obj`, Metashape's
//! tiled OBJ export), and CAD pipelines export one file per part. Cesium ion tiles such a set as
//! one tileset; so does Kiln: every mesh file under a folder is read with [`read_mesh`] and
//! appended into one [`Mesh`], each file's materials and images kept (indices renumbered).

use std::path::{Path, PathBuf};

use super::{MESH_EXTENSIONS, Mesh, read_mesh};
use crate::confined::ConfinedRoot;
use crate::{Error, Result};

/// The mesh files under `dir` (recursively; hidden entries skipped; symbolic links to folders
/// not followed, so the walk stays inside `dir`), sorted by path so the result does not depend on
/// the filesystem's order.
///
/// # Errors
/// [`Error::Io`] naming a folder that cannot be listed.
pub fn mesh_files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let path = entry.map_err(|e| Error::io(&d, e))?.path();
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if hidden {
                continue;
            }
            let linked = path
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink());
            if path.is_dir() && !linked {
                pending.push(path);
            } else if extension(&path).is_some_and(|e| MESH_EXTENSIONS.contains(&e.as_str())) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn extension(path: &Path) -> Option<String> {
    path.extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
}

/// Read every mesh file under `dir` ([`mesh_files_in`]) as one mesh, in path order.
///
/// # Errors
/// [`Error::InvalidInput`] naming the folder when it holds no mesh file, or files of more than
/// one format (usually one asset exported twice, e.g. `model.obj` beside `model.glb`: the fix
/// is to keep one); the readers' errors, naming the file.
pub fn read_meshes(dir: &Path) -> Result<Mesh> {
    let files = mesh_files_in(dir)?;
    check_one_format(dir, &files)?;
    let root = ConfinedRoot::new(dir)?;
    let mut all: Option<Mesh> = None;
    for file in &files {
        // A mesh file that is a link must not lead out of the folder (issue 41).
        root.check_inside(file, dir, "mesh file")?;
        let mesh = read_mesh(file)?;
        match all.as_mut() {
            None => all = Some(mesh),
            Some(all) => all.append(mesh),
        }
    }
    let all = all.unwrap_or_else(|| unreachable!("check_one_format refuses an empty list"));
    tracing::info!(
        folder = %dir.display(),
        files = files.len(),
        triangles = all.triangle_count(),
        materials = all.materials.len(),
        "mesh files read as one asset"
    );
    Ok(all)
}

fn check_one_format(dir: &Path, files: &[PathBuf]) -> Result<()> {
    let mut formats: Vec<String> = files.iter().filter_map(|f| extension(f)).collect();
    formats.sort();
    formats.dedup();
    // `.gltf` beside `.glb` counts as two formats too: the usual case is one model in both.
    if formats.len() == 1 {
        return Ok(());
    }
    Err(Error::InvalidInput {
        context: "mesh input folder",
        field: dir.display().to_string(),
        expected: if files.is_empty() {
            format!(
                "at least one mesh file ({})",
                MESH_EXTENSIONS.map(|e| format!(".{e}")).join(", ")
            )
        } else {
            "mesh files of one format (files of several formats are usually one asset exported \
             twice: keep one format, or point `input` at one file)"
                .into()
        },
        found: if files.is_empty() {
            "none".into()
        } else {
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

impl Mesh {
    /// Append `other`'s triangles, vertices, materials and images. Its positions are re-expressed
    /// relative to this mesh's origin (the difference of the f64 origins added in f64); vertex
    /// attributes one side lacks get the glTF defaults for the side without them (normal +Y, as
    /// no reader leaves normals out, UV (0, 0), colour opaque white).
    pub fn append(&mut self, other: Mesh) {
        let base_vertex = self.positions.len() as u32;
        let base_material = self.materials.len() as u32;
        let base_image = self.images.len();
        let (n_self, n_other) = (self.positions.len(), other.positions.len());
        let shift: [f64; 3] = std::array::from_fn(|k| other.origin_m[k] - self.origin_m[k]);
        self.positions.extend(
            other
                .positions
                .iter()
                .map(|p| std::array::from_fn(|k| (shift[k] + f64::from(p[k])) as f32)),
        );
        merge_attribute(
            &mut self.normals,
            other.normals,
            n_self,
            n_other,
            [0.0, 1.0, 0.0],
        );
        merge_attribute(&mut self.uvs, other.uvs, n_self, n_other, [0.0, 0.0]);
        merge_attribute(&mut self.uvs1, other.uvs1, n_self, n_other, [0.0, 0.0]);
        merge_attribute(&mut self.colors, other.colors, n_self, n_other, [1.0; 4]);
        self.indices
            .extend(other.indices.iter().map(|&i| i + base_vertex));
        self.triangle_materials
            .extend(other.triangle_materials.iter().map(|&m| m + base_material));
        self.materials
            .extend(other.materials.into_iter().map(|mut m| {
                for t in m.textures_mut() {
                    t.image += base_image;
                }
                m
            }));
        self.images.extend(other.images);
    }
}

/// `[V, _]` attribute of the appended mesh: both sides' values, or the default for the side
/// that has none; `None` only when neither has it.
fn merge_attribute<T: Copy>(
    mine: &mut Option<Vec<T>>,
    theirs: Option<Vec<T>>,
    n_mine: usize,
    n_theirs: usize,
    default: T,
) {
    match (mine.as_mut(), theirs) {
        (None, None) => {}
        (Some(m), Some(t)) => m.extend(t),
        (Some(m), None) => m.extend(std::iter::repeat_n(default, n_theirs)),
        (None, Some(t)) => {
            let mut m = vec![default; n_mine];
            m.extend(t);
            *mine = Some(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two OBJ blocks of one model, each with its own MTL and texture, in subfolders (the
    /// ContextCapture layout): one mesh with both materials, both images, every triangle.
    #[test]
    fn obj_blocks_in_subfolders_read_as_one_mesh_with_every_material() {
        let d = tempfile::tempdir().unwrap();
        let png = {
            let mut b = Vec::new();
            image::RgbImage::from_pixel(2, 2, image::Rgb([200, 10, 10]))
                .write_to(&mut std::io::Cursor::new(&mut b), image::ImageFormat::Png)
                .unwrap();
            b
        };
        for (block, x0, colour) in [
            ("Tile_+000", 0.0, "0.8 0.1 0.1"),
            ("Tile_+001", 1.0, "0.1 0.1 0.8"),
        ] {
            let dir = d.path().join(block);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("tex.png"), &png).unwrap();
            std::fs::write(
                dir.join(format!("{block}.mtl")),
                format!("newmtl m_{block}\nKd {colour}\nmap_Kd tex.png\n"),
            )
            .unwrap();
            std::fs::write(
                dir.join(format!("{block}.obj")),
                format!(
                    "mtllib {block}.mtl\nv {x0} 0 0\nv {} 0 0\nv {x0} 1 0\nv {} 1 0\n\
                     vt 0 0\nvt 1 0\nvt 0 1\nvt 1 1\nusemtl m_{block}\nf 1/1 2/2 3/3\nf 2/2 4/4 3/3\n",
                    x0 + 1.0,
                    x0 + 1.0
                ),
            )
            .unwrap();
        }
        std::fs::write(d.path().join(".hidden.obj"), "v 0 0 0\n").unwrap();
        let files = mesh_files_in(d.path()).unwrap();
        assert_eq!(files.len(), 2, "{files:?}");
        let m = read_meshes(d.path()).unwrap();
        assert_eq!(m.triangle_count(), 4);
        assert_eq!(m.materials.len(), 2);
        assert_eq!(m.images.len(), 2);
        assert_eq!(m.triangle_materials, vec![0, 0, 1, 1]);
        // Each block's material reads its own image; indices of the second block are offset.
        let images: Vec<usize> = m
            .materials
            .iter()
            .map(|mat| mat.base_color_texture.as_ref().unwrap().image)
            .collect();
        assert_eq!(images, vec![0, 1]);
        // The second block's triangles index its own (offset) vertices.
        assert!(m.indices[6..].iter().all(|&i| i >= 4));
        assert!(m.check_materials().is_ok());
        // The second block's vertices keep their place (x from 1 to 2).
        let xs: Vec<f32> = m.positions[4..].iter().map(|p| p[0]).collect();
        assert!(xs.iter().all(|&x| (1.0..=2.0).contains(&x)), "{xs:?}");
    }

    /// Appending a mesh placed at another f64 origin keeps its world positions.
    #[test]
    fn appending_re_expresses_positions_relative_to_the_first_origin() {
        let tri = |origin_m: [f64; 3], normals: bool| Mesh {
            origin_m,
            positions: vec![[0.0, 0.0, 0.0], [0.001, 0.0, 0.0], [0.0, 0.001, 0.0]],
            normals: normals.then(|| vec![[0.0, 0.0, 1.0]; 3]),
            uvs: None,
            uvs1: None,
            colors: None,
            indices: vec![0, 1, 2],
            triangle_materials: vec![0],
            materials: vec![Default::default()],
            images: Vec::new(),
        };
        let mut a = tri([4_000_000.0, 3_000_000.0, 3_500_000.0], true);
        a.append(tri([4_000_010.0, 3_000_000.0, 3_500_000.0], false));
        assert_eq!(a.positions[3], [10.0, 0.0, 0.0]);
        assert_eq!(a.positions[4], [10.001, 0.0, 0.0]);
        assert_eq!(a.indices, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(a.triangle_materials, vec![0, 1]);
        let n = a.normals.unwrap();
        assert_eq!((n[0], n[3]), ([0.0, 0.0, 1.0], [0.0, 1.0, 0.0]));
    }

    #[test]
    fn a_folder_of_two_formats_or_none_is_refused_naming_the_files() {
        let d = tempfile::tempdir().unwrap();
        let err = read_meshes(d.path()).unwrap_err().to_string();
        assert!(
            err.contains("at least one mesh file") && err.contains(".obj"),
            "{err}"
        );
        std::fs::write(
            d.path().join("model.obj"),
            "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
        )
        .unwrap();
        std::fs::write(d.path().join("model.ply"), "ply\n").unwrap();
        let err = read_meshes(d.path()).unwrap_err().to_string();
        assert!(
            err.contains("model.obj") && err.contains("model.ply") && err.contains("one format"),
            "{err}"
        );
    }
}
