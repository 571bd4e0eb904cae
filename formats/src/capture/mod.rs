//! Captures: posed photographs of a scene, read from nerfstudio / instant-ngp `transforms*.json`
//! files, COLMAP models (binary or text) and LLFF `poses_bounds.npy` files, plus their images
//! (decode, downscale, undistort).
//!
//! This module owns the format dispatch ([`read_capture`]) and re-exports the rest. The capture
//! domain types ([`Capture`], [`Frame`], [`Split`], [`SfmPoints`]) live in `model.rs`,
//! [`Intrinsics`] in `intrinsics.rs`; what every reader does to its frames and poses in
//! `frames.rs` and `pose.rs`. Readers import those files directly, never this one, so no file
//! imports its own importer. Each input format is one file (`nerfstudio.rs`, `colmap.rs` with
//! `colmap_bin.rs` and their shared `colmap_model.rs`, `llff.rs`); pixels live in `image.rs`
//! ([`RgbImage`]), the area filter in `area.rs`, the per-camera downscale plan in `downscale.rs`,
//! lens models in `distortion.rs` ([`Distortion`]: all eleven COLMAP 3.8 camera models: pinhole,
//! radial, OpenCV, full OpenCV, FOV and four fisheye models). Readers never load pixels (at most an
//! image header, for a missing size, or for LLFF every image's size).
//!
//! Conventions (fixed for every reader):
//! - camera frame OpenCV: x right, y down, z forward (viewing direction);
//! - poses are `world_to_camera`, f64, row-major 4×4 rigid transforms (`X_cam = R·X_world + t`);
//! - pixel coordinates in pixels with the origin at the top-left corner of the top-left pixel, so
//!   pixel (i, j) (column i, row j) has its centre at (i + 0.5, j + 0.5) — COLMAP's convention;
//! - frames sorted by [`Frame::name`] (byte-wise string order), so hold-out by index is stable.
//!
//! A bad camera is skipped, never fatal, while the rest stands (issue 44, rule 3): a frame whose
//! pose is not finite, singular, mirrored (det R < 0) or not rigid (|RᵀR − I| > 1e-3), or whose
//! image is missing (LLFF: or whose header cannot be read), is left out and listed in
//! [`Capture::skipped`], with one warning per reason naming the file and every frame; only when
//! none remains is it an error, naming them all. How many views a job needs is the ingest stage's
//! rule (kiln-pipeline). Any other non-finite number a reader needs is an error naming the field.
//!
//! Any file of a capture names the capture (issue 44, rule 1): [`capture_root_of_key`],
//! [`name_capture`] and [`read_named_capture`] in `root.rs`.

mod area;
mod colmap;
mod colmap_bin;
mod colmap_model;
mod distortion;
mod downscale;
mod frames;
mod image;
mod intrinsics;
mod llff;
mod masks;
mod model;
mod nerfstudio;
mod point_cloud;
mod pose;
mod root;

use std::path::{Path, PathBuf};

use self::frames::sort_frames;
use crate::confined::ConfinedRoot;
use crate::{Error, Result};

pub use self::area::area_resize;
pub use self::colmap::{MODEL_DIRS as COLMAP_MODEL_DIRS, read_colmap, read_colmap_in};
pub use self::colmap_bin::{ColmapModelStats, read_colmap_model_stats};
pub use self::distortion::{Distortion, undistort};
pub use self::downscale::{FrameDownscale, PRESCALED_FACTORS, plan_downscale};
pub use self::image::{
    DOWNSCALE_FILTER, RgbImage, image_size, load_rgb, load_rgb_alpha, load_rgb_alpha_at,
    load_rgb_at, scaled_size,
};
pub use self::intrinsics::Intrinsics;
pub use self::llff::{read_llff, read_llff_file, read_llff_file_in};
pub use self::model::{Capture, Frame, SfmPoints, Split};
pub use self::nerfstudio::{read_transforms, read_transforms_in};
pub use self::point_cloud::read_point_cloud_ply;
pub use self::root::{NamedCapture, capture_root_of_key, name_capture, read_named_capture};

/// Read a capture from a transforms.json file, an LLFF `poses_bounds.npy` file or a COLMAP model
/// (binary or text), detected from `path`.
///
/// - `path`: one of
///   - a `*.json` file: nerfstudio / instant-ngp `transforms.json` ([`read_transforms`]);
///   - a directory holding `transforms.json`, or else exactly one other `transform*.json`
///     (name matched ASCII case-insensitively, e.g. `transform_train.json`), or several of which
///     exactly one has `train` in its name (Blender synthetic `transforms_{train,val,test}.json`:
///     the training split is read);
///   - a `*.npy` file: LLFF `poses_bounds.npy`, images in `images/` beside it
///     ([`read_llff_file`]);
///   - a directory holding `poses_bounds.npy` (and no `transform*.json`) ([`read_llff`]);
///   - a COLMAP model file (`cameras.bin`, `images.bin`, `points3D.bin`, `cameras.txt`,
///     `images.txt`, `points3D.txt`): its directory, read as [`read_colmap`] reads it (so the
///     binary form is read when both are there, whichever file was named);
///   - a COLMAP directory DIR: the model (`cameras.bin` + `images.bin` + optional
///     `points3D.bin`, or `cameras.txt` + `images.txt` + optional `points3D.txt`; binary
///     preferred) is looked for in DIR, DIR/sparse/0, DIR/sparse, DIR/colmap/sparse/0,
///     DIR/colmap/sparse, DIR/colmap, DIR/reconstruction, DIR/colmap/reconstruction
///     ([`read_colmap`]).
///
/// # Errors
/// [`Error::NotFound`] if `path` does not exist or holds no recognised capture;
/// [`Error::Unsupported`] for an unknown file type, or for a directory with several
/// `transform*.json` files none or several of which has `train` in its name (the message lists
/// them; pass the file itself); [`Error::Io`] if the directory cannot be listed; otherwise the
/// errors of [`read_transforms`], [`read_llff`] and [`read_colmap`].
pub fn read_capture(path: &Path) -> Result<Capture> {
    read_capture_in(&ConfinedRoot::of_input(path)?, path)
}

/// [`read_capture`] with every file the capture names confined to `root` ([`ConfinedRoot`]): the
/// rule a job's ingest reads its staged input by.
/// - `root`: the input folder; `path` lies inside it.
///
/// # Errors
/// Those of [`read_capture`], and [`Error::OutsideInput`] naming the file and field of a path
/// that is absolute, climbs out of `root` or passes a symbolic link leading out.
pub fn read_capture_in(root: &ConfinedRoot, path: &Path) -> Result<Capture> {
    root.check_inside(path, path, "input")?;
    if path.is_file() {
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if is_json {
            return read_transforms_in(root, path);
        }
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
        {
            return read_llff_file_in(root, path);
        }
        if matches!(
            file_name,
            "cameras.txt"
                | "images.txt"
                | "points3D.txt"
                | "cameras.bin"
                | "images.bin"
                | "points3D.bin"
        ) {
            let dir = path.parent().unwrap_or(Path::new("."));
            return read_colmap_in(root, dir);
        }
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: "path".into(),
            found: format!("file `{file_name}`"),
            supported: "a transforms*.json file, a directory holding a transform*.json, an LLFF \
                        poses_bounds.npy file or its directory, or a COLMAP model (binary or text) or its \
                        directory"
                .into(),
        });
    }
    if path.is_dir() {
        let transforms = path.join("transforms.json");
        if transforms.is_file() {
            return read_transforms_in(root, &transforms);
        }
        match other_transforms_json(path)? {
            Some(TransformsFiles::One(json)) => return read_transforms_in(root, &json),
            Some(TransformsFiles::Splits(files)) => {
                return read_split_transforms(root, path, &files);
            }
            None => {}
        }
        if path.join(llff::POSES_BOUNDS).is_file() {
            return read_llff_file_in(root, &path.join(llff::POSES_BOUNDS));
        }
        return read_colmap_in(root, path);
    }
    Err(Error::NotFound {
        path: path.to_path_buf(),
        what: "capture: a transform*.json file, an LLFF poses_bounds.npy or a COLMAP directory",
    })
}

/// The pose files [`read_capture`] on the folder `dir` reads, found by names alone (no file is
/// parsed): its `transforms.json`, else its other transform*.json (or each of a split set), else
/// its `poses_bounds.npy`, else the files of the COLMAP model folder it finds. Empty when it
/// finds none (or the transforms files are ambiguous).
fn folder_pose_files(dir: &Path) -> Vec<PathBuf> {
    let transforms = dir.join("transforms.json");
    if transforms.is_file() {
        return vec![transforms];
    }
    match other_transforms_json(dir) {
        Ok(Some(TransformsFiles::One(json))) => return vec![json],
        Ok(Some(TransformsFiles::Splits(files))) => {
            return files.into_iter().map(|(_, p)| p).collect();
        }
        Ok(None) => {}
        Err(_) => return Vec::new(),
    }
    if dir.join(llff::POSES_BOUNDS).is_file() {
        return vec![dir.join(llff::POSES_BOUNDS)];
    }
    match colmap::find_model_dir(dir) {
        Ok((model_dir, _)) => ["cameras", "images", "points3D"]
            .iter()
            .flat_map(|f| ["bin", "txt"].map(|ext| model_dir.join(format!("{f}.{ext}"))))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// What a directory without `transforms.json` holds instead: one transforms file, or one per split.
enum TransformsFiles {
    One(PathBuf),
    /// Blender / NeRF-synthetic `transforms_{train,val,test}.json`: (split, file), sorted by split.
    Splits(Vec<(Split, PathBuf)>),
}

/// The nerfstudio / instant-ngp JSON(s) of directory `dir` when it is not named `transforms.json`
/// (brush#41: `transform_train.json`; Blender synthetic scenes: `transforms_{train,val,test}.json`).
///
/// Candidates are the regular files directly in `dir` whose name starts with `transform` and ends
/// with `.json` (both ASCII case-insensitive; names that are not UTF-8 are ignored). One candidate
/// is returned as is. Several are a split set when each names exactly one of `train`, `val`,
/// `test` ([`Split::from_name`]), no split twice, and one is `train`; otherwise the only one whose
/// name contains `train` is returned alone.
/// - `dir`: an existing directory.
///
/// Returns `Ok(None)` when there is no candidate.
///
/// # Errors
/// [`Error::Unsupported`] listing the candidates (sorted) when there are several, they are not a
/// split set, and not exactly one of them contains `train`; [`Error::Io`] if `dir` cannot be
/// listed.
fn other_transforms_json(dir: &Path) -> Result<Option<TransformsFiles>> {
    let candidates = transforms_candidates(dir)?;
    if let [one] = candidates.as_slice() {
        return Ok(Some(TransformsFiles::One(dir.join(one))));
    }
    if candidates.is_empty() {
        return Ok(None);
    }
    if let Some(splits) = split_set(&candidates) {
        return Ok(Some(TransformsFiles::Splits(
            splits.into_iter().map(|(s, n)| (s, dir.join(n))).collect(),
        )));
    }
    let train: Vec<&String> = candidates
        .iter()
        .filter(|n| n.to_ascii_lowercase().contains("train"))
        .collect();
    if let [one] = train.as_slice() {
        return Ok(Some(TransformsFiles::One(dir.join(one))));
    }
    let listed = candidates
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::Unsupported {
        path: dir.to_path_buf(),
        field: "transform*.json".into(),
        found: format!(
            "{} candidate JSON files ({listed}), {} of them with `train` in the name,",
            candidates.len(),
            train.len()
        ),
        supported: format!(
            "one transform*.json per directory, a train/val/test set, or exactly one whose name \
             contains `train`; pass the file itself instead, e.g. `{}`",
            dir.join(&candidates[0]).display()
        ),
    })
}

/// Names of the regular files in `dir` that look like transforms JSONs, sorted.
fn transforms_candidates(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut candidates = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("transform") && lower.ends_with(".json") && entry.path().is_file() {
            candidates.push(name);
        }
    }
    candidates.sort();
    Ok(candidates)
}

/// `names` as a split set (each names one split, none twice, `train` among them), sorted by split.
fn split_set(names: &[String]) -> Option<Vec<(Split, &String)>> {
    let mut splits: Vec<(Split, &String)> = names
        .iter()
        .map(|n| Split::from_name(n).map(|s| (s, n)))
        .collect::<Option<_>>()?;
    splits.sort();
    let distinct = splits.windows(2).all(|w| w[0].0 != w[1].0);
    let has_train = splits.iter().any(|(s, _)| *s == Split::Train);
    (distinct && has_train).then_some(splits)
}

/// Read a Blender-layout capture: each split's transforms file, frames tagged with their split and
/// merged (sorted by name; names carry the split's folder, e.g. `test/r_0.png`). Points come from
/// the first file that has them.
///
/// # Errors
/// The errors of [`read_transforms`] for any file (an image two splits list is kept once, with a
/// warning).
fn read_split_transforms(
    root: &ConfinedRoot,
    dir: &Path,
    files: &[(Split, PathBuf)],
) -> Result<Capture> {
    let mut merged = Capture {
        source: dir.to_path_buf(),
        frames: Vec::new(),
        points: None,
        skipped: Vec::new(),
        pose_files: Vec::new(),
        points_file: None,
    };
    let mut emptied = Vec::new();
    for (split, file) in files {
        // A split whose every frame was skipped (warned) leaves the others to go on.
        let (part, empty) = nerfstudio::read_transforms_part(root, file)?;
        emptied.extend(empty.map(|e| e.to_string()));
        merged.frames.extend(part.frames.into_iter().map(|f| Frame {
            split: Some(*split),
            ..f
        }));
        merged.skipped.extend(part.skipped);
        merged.pose_files.extend(part.pose_files);
        if merged.points.is_none() {
            merged.points = part.points;
            merged.points_file = part.points_file;
        }
    }
    if merged.frames.is_empty() {
        return Err(Error::Empty {
            path: dir.to_path_buf(),
            what: "frames",
            reason: format!(
                "every split file's frames were skipped: {}",
                emptied.join("; ")
            ),
        });
    }
    let listed = merged.frames.len();
    let twice = sort_frames(dir, &mut merged.frames, listed);
    merged.skipped.extend(twice);
    merged.skipped.sort();
    Ok(merged)
}

/// Root of the shared sample datasets for tests: `$KILN_DATASETS`, else `../shared/datasets`
/// next to the checkout. A missing dataset fails the test (never a silent skip).
#[cfg(test)]
pub(crate) fn test_dataset(name: &str) -> PathBuf {
    let root = std::env::var_os("KILN_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/datasets"
            ))
        });
    let dir = root.join(name);
    assert!(
        dir.is_dir(),
        "dataset {name} not found at {}; set KILN_DATASETS or put it in ../shared/datasets",
        dir.display()
    );
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_capture_dispatches_on_directory_contents() {
        let fox = read_capture(&test_dataset("capture-fox-instantngp")).unwrap();
        assert_eq!(fox.frames.len(), 50);
        assert!(fox.source.ends_with("transforms.json"));
        let maup = read_capture(&test_dataset("capture-maupertuis-colmap")).unwrap();
        assert_eq!(maup.frames.len(), 4);
        assert!(maup.source.ends_with("colmap/reconstruction"));
    }

    #[test]
    fn read_capture_rejects_missing_path_and_unknown_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_capture(&dir.path().join("nope")).unwrap_err();
        assert!(matches!(missing, Error::NotFound { .. }), "{missing}");
        let empty_dir = read_capture(dir.path()).unwrap_err();
        assert!(matches!(empty_dir, Error::NotFound { .. }), "{empty_dir}");
        let other = dir.path().join("scene.obj");
        std::fs::write(&other, "v 0 0 0\n").unwrap();
        let err = read_capture(&other).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    }

    /// A nerfstudio JSON `name` in `dir` listing the images `images/<frame>.png` (written as 4×3
    /// PNGs), each with an identity camera-to-world except for translation x = `x`, so a test can
    /// tell which JSON was read from the frames' camera centres.
    fn transforms_json(dir: &Path, name: &str, frames: &[&str], x: f64) -> PathBuf {
        let mut listed = Vec::new();
        for frame in frames {
            let png = dir.join("images").join(format!("{frame}.png"));
            std::fs::create_dir_all(png.parent().unwrap()).unwrap();
            ::image::RgbImage::new(4, 3).save(&png).unwrap();
            listed.push(format!(
                r#"{{"file_path": "images/{frame}.png", "transform_matrix": [[1,0,0,{x}],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}}"#
            ));
        }
        let json = dir.join(name);
        let text = format!(
            r#"{{"fl_x": 5, "w": 4, "h": 3, "frames": [{}]}}"#,
            listed.join(",")
        );
        std::fs::write(&json, text).unwrap();
        json
    }

    fn frame_names(capture: &Capture) -> Vec<&str> {
        capture.frames.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn read_capture_reads_a_directory_with_one_transform_json_of_another_name() {
        for name in ["transform_train.json", "Transforms_Scene.JSON"] {
            let dir = tempfile::tempdir().unwrap();
            let json = transforms_json(dir.path(), name, &["b", "a"], 0.5);
            // Neither a JSON not starting with `transform` nor a `transform*` non-JSON counts.
            std::fs::write(dir.path().join("metadata.json"), "{}").unwrap();
            std::fs::write(dir.path().join("transforms_backup.txt"), "x").unwrap();
            let capture = read_capture(dir.path()).unwrap();
            assert_eq!(capture.source, json);
            assert_eq!(frame_names(&capture), ["a.png", "b.png"]);
            assert_eq!(capture.frames[0].camera_center(), [0.5, 0.0, 0.0]);
        }
    }

    #[test]
    fn read_capture_merges_train_val_test_files_tagging_each_frame_with_its_split() {
        let dir = tempfile::tempdir().unwrap();
        let test = transforms_json(dir.path(), "transforms_test.json", &["t0"], 3.0);
        let train = transforms_json(dir.path(), "transforms_train.json", &["r0", "r1"], 1.0);
        let val = transforms_json(dir.path(), "transforms_val.json", &["v0"], 2.0);
        let capture = read_capture(dir.path()).unwrap();
        assert_eq!(
            frame_names(&capture),
            ["r0.png", "r1.png", "t0.png", "v0.png"]
        );
        let splits: Vec<Option<Split>> = capture.frames.iter().map(|f| f.split).collect();
        assert_eq!(
            splits,
            [
                Some(Split::Train),
                Some(Split::Train),
                Some(Split::Test),
                Some(Split::Val)
            ]
        );
        // Each frame keeps its own file's pose.
        assert_eq!(capture.frames[1].camera_center(), [1.0, 0.0, 0.0]);
        assert_eq!(capture.frames[2].camera_center(), [3.0, 0.0, 0.0]);
        assert_eq!(capture.frames[3].camera_center(), [2.0, 0.0, 0.0]);
        assert_eq!(capture.pose_files, [train.clone(), val, test]);
        assert_eq!(capture.points_file, None);
        // Only a train file and an unrelated one: the train file alone, untagged.
        let other = tempfile::tempdir().unwrap();
        let alone = transforms_json(other.path(), "transforms_train.json", &["r0"], 1.0);
        transforms_json(other.path(), "transforms_backup.json", &["b0"], 1.0);
        let capture = read_capture(other.path()).unwrap();
        assert_eq!(capture.source, alone);
        assert_eq!(capture.frames[0].split, None);
        // A transforms.json beside the splits still wins.
        let main = transforms_json(dir.path(), "transforms.json", &["m0"], 4.0);
        let capture = read_capture(dir.path()).unwrap();
        assert_eq!(capture.source, main);
        assert_eq!(frame_names(&capture), ["m0.png"]);
    }

    #[test]
    fn read_capture_rejects_ambiguous_transform_jsons_naming_each() {
        // Neither has `train`, then both have it: each is ambiguous.
        for names in [
            ["transforms_left.json", "transforms_right.json"],
            ["transform_train.json", "transforms_train.json"],
        ] {
            let dir = tempfile::tempdir().unwrap();
            for name in names {
                transforms_json(dir.path(), name, &["a"], 0.0);
            }
            let err = read_capture(dir.path()).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::Unsupported { .. }), "{msg}");
            for name in names {
                assert!(msg.contains(&format!("`{name}`")), "{msg}");
            }
            assert!(msg.contains("pass the file itself"), "{msg}");
            assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        }
    }
}
