//! Which capture a path names (issue 44, rule 1: *any file of a capture names the capture*).
//!
//! People point a job at the file they see, not at the folder: `fox/transforms.json`,
//! `scene/sparse/0/cameras.bin`, `room/poses_bounds.npy`, or one of the photos. A capture is read
//! relative to its folder (images, masks, points), so staging only the named file loses the
//! photos. [`capture_root_of_key`] maps such a path to its capture's folder by names alone, so
//! the same rule serves local paths and object-store keys; [`name_capture`] adds the checks only
//! a local disk allows; [`read_named_capture`] reads what the path names. Plan, run and the
//! queue's staging all go through these three, so they agree on what a job reads.

use std::path::{Path, PathBuf};

use super::colmap::MODEL_DIRS;
use crate::Result;
use crate::confined::ConfinedRoot;

/// COLMAP model file names (matched ASCII case-insensitively, as the reader matches them).
const COLMAP_FILES: [&str; 6] = [
    "cameras.bin",
    "images.bin",
    "points3D.bin",
    "cameras.txt",
    "images.txt",
    "points3D.txt",
];

/// Photo extensions a capture's images carry (ASCII case-insensitive).
const PHOTO_EXTENSIONS: [&str; 7] = ["png", "jpg", "jpeg", "tif", "tiff", "webp", "bmp"];

/// Folder names that hold a capture's photos one level below its root: `images`, `images_<n>`
/// (nerfstudio / LLFF downscaled copies), the Blender splits and `rgb`.
fn is_photo_folder(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let downscaled = lower
        .strip_prefix("images_")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    downscaled || matches!(lower.as_str(), "images" | "train" | "val" | "test" | "rgb")
}

/// What a path inside a capture names: the capture's folder and what to read in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedCapture {
    /// The capture folder: staged whole, and the root every path its files name must stay in.
    pub root: PathBuf,
    /// The named pose file, `/`-separated and relative to `root`; empty when the folder itself is
    /// read (the path was the folder, a model folder or a photo).
    pub entry: String,
}

/// The capture folder a `/`-separated path (a local path or an object key) names, by names alone:
/// `(root, entry)`, `entry` relative to `root` as in [`NamedCapture`]; `None` when the path names
/// no file of a capture (it is then the capture itself, or not one).
///
/// - `…/transform*.json`, `…/*.npy`: the folder holding it.
/// - a COLMAP model file: its model folder, less a trailing [`MODEL_DIRS`] entry or `sparse/<n>`
///   (`scene/sparse/0/cameras.bin` → `scene`).
/// - a photo (`png`, `jpg`, …): its folder, or the folder above when that is `images`,
///   `images_<n>`, `train`, `val`, `test` or `rgb` (`scene/images/0001.jpg` → `scene`).
#[must_use]
pub fn capture_root_of_key(key: &str) -> Option<(String, String)> {
    let key = key.trim_end_matches('/');
    let (parent, name) = key.rsplit_once('/').unwrap_or(("", key));
    let lower = name.to_ascii_lowercase();
    let pose_file =
        (lower.starts_with("transform") && lower.ends_with(".json")) || lower.ends_with(".npy");
    if pose_file {
        return Some((parent.to_string(), name.to_string()));
    }
    if COLMAP_FILES.iter().any(|f| f.eq_ignore_ascii_case(name)) {
        let root = strip_model_dir(parent);
        return Some((root.to_string(), relative(key, root)));
    }
    let photo = lower
        .rsplit_once('.')
        .is_some_and(|(_, ext)| PHOTO_EXTENSIONS.contains(&ext));
    if !photo {
        return None;
    }
    let (above, folder) = parent.rsplit_once('/').unwrap_or(("", parent));
    let root = if is_photo_folder(folder) {
        above
    } else {
        parent
    };
    Some((root.to_string(), String::new()))
}

/// `model_dir` less its trailing model sub-folder (`sparse/0`, `colmap/sparse`, `sparse/3`, …),
/// the longest that matches whole components; `model_dir` itself when none does.
fn strip_model_dir(model_dir: &str) -> &str {
    let parts: Vec<&str> = model_dir.split('/').collect();
    let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut best = 0;
    for sub in MODEL_DIRS.iter().filter(|s| !s.is_empty()) {
        let want: Vec<&str> = sub.split('/').collect();
        if parts.len() > want.len() && parts.ends_with(&want) {
            best = best.max(want.len());
        }
    }
    // `sparse/<n>` for any model number (COLMAP writes one folder per model).
    let n = parts.len();
    if n >= 3 && parts[n - 2] == "sparse" && numbered(parts[n - 1]) {
        let colmap = n >= 4 && parts[n - 3] == "colmap";
        best = best.max(if colmap { 3 } else { 2 });
    }
    if best == 0 {
        return model_dir;
    }
    let keep = parts.len() - best;
    let cut: usize = parts[..keep].iter().map(|p| p.len() + 1).sum::<usize>() - 1;
    &model_dir[..cut]
}

/// `key` relative to its prefix `root` (`/`-separated).
fn relative(key: &str, root: &str) -> String {
    if root.is_empty() {
        return key.to_string();
    }
    key.strip_prefix(root)
        .map_or(key, |r| r.trim_start_matches('/'))
        .to_string()
}

/// The capture a local `path` names ([`capture_root_of_key`]), checked on disk: a folder is its
/// own capture unless it is a COLMAP model folder (`scene/sparse/0`), which names the folder the
/// model lies in; a photo climbs out of its `images/` folder only when the folder above holds
/// poses (else the photos' own folder is the capture, for `reconstruct` to pose).
#[must_use]
pub fn name_capture(path: &Path) -> NamedCapture {
    let own = |root: &Path, entry: String| NamedCapture {
        root: root.to_path_buf(),
        entry,
    };
    let text = path.to_string_lossy().replace('\\', "/");
    if path.is_dir() {
        let model = COLMAP_FILES[..2].iter().all(|f| path.join(f).is_file())
            || COLMAP_FILES[3..5].iter().all(|f| path.join(f).is_file());
        let root = strip_model_dir(text.trim_end_matches('/'));
        let climbed = model && root.len() < text.trim_end_matches('/').len();
        return match climbed {
            true => own(Path::new(root), String::new()),
            false => own(path, String::new()),
        };
    }
    let Some((root, entry)) = capture_root_of_key(&text) else {
        return own(path, String::new());
    };
    let root = if root.is_empty() && !text.starts_with('/') {
        PathBuf::new()
    } else if root.is_empty() {
        PathBuf::from("/")
    } else {
        PathBuf::from(root)
    };
    let photo_climbed = entry.is_empty() && path.parent().is_some_and(|p| p != root);
    if photo_climbed && !holds_poses(&root) {
        return own(path.parent().unwrap_or(Path::new("")), String::new());
    }
    own(&root, entry)
}

/// Whether `dir` holds the poses of a capture: a transform*.json, an `.npy`, or a COLMAP model
/// in one of the [`MODEL_DIRS`].
fn holds_poses(dir: &Path) -> bool {
    let on_disk = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let pose_file = std::fs::read_dir(on_disk).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().to_ascii_lowercase();
            (name.starts_with("transform") && name.ends_with(".json")) || name.ends_with(".npy")
        })
    });
    pose_file || super::colmap::find_model_dir(on_disk).is_ok()
}

/// Read the capture a local `path` names ([`name_capture`]), with every file it names confined to
/// the capture's folder. A pose file that reading the folder would use is read as the folder
/// (so `transforms_train.json` of a Blender split set reads all three splits, as the folder
/// does); a pose file the folder would not pick (one of several candidates) is read alone, as
/// the user chose it.
///
/// # Errors
/// Those of [`super::read_capture`].
pub fn read_named_capture(path: &Path) -> Result<super::Capture> {
    let named = name_capture(path);
    let root = ConfinedRoot::of_input(&named.root)?;
    let target = if named.entry.is_empty() || folder_reads(&named.root, path) {
        named.root.clone()
    } else {
        path.to_path_buf()
    };
    super::read_capture_in(&root, &target)
}

/// Whether reading the folder `root` reads the pose file `file`: the pose files the folder's
/// dispatch would pick ([`super::read_capture`]), found by names without reading them.
fn folder_reads(root: &Path, file: &Path) -> bool {
    let same = |p: &Path| p == file || (p.is_file() && same_file(p, file));
    super::folder_pose_files(root)
        .iter()
        .any(|p| same(p.as_path()))
}

/// Whether `a` and `b` are the same file on disk (spelled differently, e.g. `./x` and `x`).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
