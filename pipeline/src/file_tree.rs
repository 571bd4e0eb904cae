//! Listing the files under a folder: one walk shared by content hashing ([`crate::dag`]) and
//! publishing ([`crate::run`]), so both see the same files in the same order.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Every regular file under `dir`, recursively, as paths relative to `dir`, sorted component by
/// component (the order of a depth-first walk with sorted entries). Symbolic links to folders are
/// not followed.
///
/// # Errors
/// [`Error::Io`] naming the folder that cannot be read.
pub fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .map_err(|e| Error::io(&d, e))?
            .flatten()
        {
            let p = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(_) => out.push(p.strip_prefix(dir).unwrap_or(&p).to_path_buf()),
                Err(e) => return Err(Error::io(&p, e)),
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_under_lists_nested_files_relative_and_sorted_by_component() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        for f in ["a.txt", "a/b/c", "a/z", "b"] {
            std::fs::write(d.path().join(f), b"").unwrap();
        }
        let got: Vec<String> = files_under(d.path())
            .unwrap()
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        // Component order: "a" (folder) sorts before "a.txt".
        assert_eq!(got, ["a/b/c", "a/z", "a.txt", "b"]);
    }
}
