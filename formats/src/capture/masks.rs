//! Finding a frame's foreground mask in a capture's `masks/` folder, whatever the capture format.
//!
//! Naming schemes tried for an image `name` (its file name, any subfolder dropped), in order:
//! - `<stem>_mask.<ext>`: NeRD / LLFF Mary Rose (`IMG_0001_mask.JPG` for `IMG_0001.JPG`);
//! - `<stem>.<ext>`: nerfstudio's `masks/` and most hand-made folders (`IMG_0001.png`);
//! - `<name>.<ext>`: COLMAP's `--ImageReader.mask_path` convention (`IMG_0001.JPG.png`).
//!
//! `<ext>` is png, jpg or jpeg in any case. A nerfstudio frame's own `mask_path` key wins over
//! the folder (read in `nerfstudio.rs`).

use std::path::{Path, PathBuf};

use crate::confined::ConfinedRoot;
use crate::{Error, Result};

/// Extensions a mask file may have (compared case-insensitively).
const MASK_EXTENSIONS: [&str; 3] = ["png", "jpg", "jpeg"];

/// The mask images of a capture's `masks/` folder.
#[derive(Debug, Clone)]
pub(crate) struct Masks {
    /// The folder.
    pub dir: PathBuf,
    /// (file stem, path) of each mask image in `dir`.
    files: Vec<(String, PathBuf)>,
}

impl Masks {
    /// The mask images of `dir`, or `None` when there is no such folder (or it lies outside
    /// `root`).
    ///
    /// # Errors
    /// [`Error::Io`] when the folder cannot be listed; [`Error::OutsideInput`] when the folder or
    /// a mask image in it is a symbolic link leading out of `root`.
    pub fn list(root: &ConfinedRoot, dir: &Path) -> Result<Option<Masks>> {
        if !root.contains(dir) || !dir.is_dir() {
            return Ok(None);
        }
        root.check_inside(dir, dir, "masks/")?;
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| Error::io(dir, e))?.path();
            let is_image = path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| MASK_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)));
            if !path.is_file() || !is_image {
                continue;
            }
            root.check_inside(&path, dir, "masks/")?;
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                files.push((stem.to_string(), path.clone()));
            }
        }
        files.sort();
        Ok(Some(Masks {
            dir: dir.to_path_buf(),
            files,
        }))
    }

    /// The mask of image `name` by the schemes of the module docs, or `None`.
    pub fn find(&self, name: &str) -> Option<PathBuf> {
        let file = Path::new(name).file_name()?.to_str()?;
        let stem = Path::new(file).file_stem()?.to_str()?;
        let suffixed = format!("{stem}_mask");
        [suffixed.as_str(), stem, file].iter().find_map(|want| {
            self.files
                .iter()
                .find(|(s, _)| s == want)
                .map(|(_, p)| p.clone())
        })
    }

    /// Log a warning naming the frames without a mask (masks are per capture: a partial folder
    /// is usually a naming mistake).
    pub fn warn_unmasked<'a>(&self, unmasked: impl Iterator<Item = &'a str>) {
        let unmasked: Vec<&str> = unmasked.collect();
        if !unmasked.is_empty() {
            tracing::warn!(
                path = %self.dir.display(),
                count = unmasked.len(),
                "no mask (`<stem>_mask.<ext>`, `<stem>.<ext>` or `<name>.<ext>`) for {} frames: {}",
                unmasked.len(),
                unmasked.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_naming_schemes_are_found_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["a_mask.JPG", "a.png", "b.png", "c.jpg.png", "notes.txt"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let m = Masks::list(&ConfinedRoot::new(dir.path()).unwrap(), dir.path())
            .unwrap()
            .unwrap();
        // `_mask` wins over the plain stem; subfolders of the image name are dropped.
        assert_eq!(m.find("a.jpg"), Some(dir.path().join("a_mask.JPG")));
        assert_eq!(m.find("sub/b.JPG"), Some(dir.path().join("b.png")));
        assert_eq!(m.find("c.jpg"), Some(dir.path().join("c.jpg.png")));
        assert_eq!(m.find("d.jpg"), None);
        assert!(
            Masks::list(
                &ConfinedRoot::new(dir.path()).unwrap(),
                &dir.path().join("none")
            )
            .unwrap()
            .is_none()
        );
    }
}
