//! Captures: posed photographs of a scene, read from nerfstudio / instant-ngp `transforms*.json`
//! files, COLMAP models (binary or text) and LLFF `poses_bounds.npy` files, plus their images
//! (decode, downscale, undistort).
//!
//! This module owns the capture domain types ([`Capture`], [`Frame`], [`Intrinsics`],
//! [`Distortion`], [`SfmPoints`], [`RgbImage`]) and the format dispatch ([`read_capture`]). Each
//! input format is one file (`nerfstudio.rs`, `colmap.rs`, `llff.rs`); pixels live in `image.rs`,
//! lens models in `distortion.rs` (all eleven COLMAP 3.8 camera models: pinhole, radial,
//! OpenCV, full OpenCV, FOV and four fisheye models). Readers never load pixels (at most an
//! image header, for a missing size, or for LLFF every image's size).
//!
//! Conventions (fixed for every reader):
//! - camera frame OpenCV: x right, y down, z forward (viewing direction);
//! - poses are `world_to_camera`, f64, row-major 4×4 rigid transforms (`X_cam = R·X_world + t`);
//! - pixel coordinates in pixels with the origin at the top-left corner of the top-left pixel, so
//!   pixel (i, j) (column i, row j) has its centre at (i + 0.5, j + 0.5) — COLMAP's convention;
//! - frames sorted by [`Frame::name`] (byte-wise string order), so hold-out by index is stable.
//!
//! NaN/Inf: a transforms.json frame whose matrix is not finite, or an LLFF row holding a
//! non-finite number, is skipped (listed in [`Capture::skipped`]); any other non-finite number a
//! reader needs is an error naming the field.

mod colmap;
mod colmap_bin;
mod distortion;
mod image;
mod llff;
mod masks;
mod nerfstudio;
mod point_cloud;

use std::path::{Path, PathBuf};

use crate::{Error, Result};

pub use self::colmap::{MODEL_DIRS as COLMAP_MODEL_DIRS, read_colmap};
pub use self::colmap_bin::{ColmapModelStats, read_colmap_model_stats};
pub use self::distortion::{Distortion, undistort};
pub use self::image::{RgbImage, load_rgb, load_rgb_alpha, scaled_size};
pub use self::llff::{read_llff, read_llff_file};
pub use self::nerfstudio::read_transforms;
pub use self::point_cloud::read_point_cloud_ply;

/// Pinhole intrinsics of one image, in pixels.
///
/// Guaranteed by the readers: `fx`, `fy` > 0 and finite, `cx`, `cy` finite, `width`, `height` > 0.
/// The principal point (`cx`, `cy`) is measured from the top-left corner of the top-left pixel
/// (COLMAP convention: the centre of pixel (i, j) is at (i + 0.5, j + 0.5)), so rescaling an
/// image rescales every field by the same factor with no half-pixel shift ([`Self::scaled_to`]).
/// A camera-frame point (X, Y, Z) (OpenCV, Z > 0 in front) projects to
/// `u = fx·X/Z + cx`, `v = fy·Y/Z + cy` before lens distortion.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Intrinsics {
    /// Focal length along x (image columns), pixels.
    pub fx: f64,
    /// Focal length along y (image rows), pixels.
    pub fy: f64,
    /// Principal point x, pixels from the left edge of the image.
    pub cx: f64,
    /// Principal point y, pixels from the top edge of the image.
    pub cy: f64,
    /// Image width W, pixels.
    pub width: u32,
    /// Image height H, pixels.
    pub height: u32,
}

impl Intrinsics {
    /// These intrinsics for the same camera imaged at `width` × `height` pixels.
    ///
    /// Exact for any resize that maps the image rectangle onto the new one (what
    /// [`load_rgb`] does): `fx·W'/W`, `cx·W'/W`, `fy·H'/H`, `cy·H'/H`. No rounding is applied; the
    /// x and y factors differ when rounding the size changed the aspect ratio.
    /// - `width`, `height`: the new size W' × H', pixels; should be > 0.
    ///
    /// # Panics
    /// Never; if `self.width` or `self.height` is 0 the result holds non-finite values.
    ///
    /// Source: follows from the corner-origin pixel convention (COLMAP `Camera::Rescale`).
    #[must_use]
    pub fn scaled_to(&self, width: u32, height: u32) -> Intrinsics {
        let sx = f64::from(width) / f64::from(self.width);
        let sy = f64::from(height) / f64::from(self.height);
        Intrinsics {
            fx: self.fx * sx,
            fy: self.fy * sy,
            cx: self.cx * sx,
            cy: self.cy * sy,
            width,
            height,
        }
    }
}

/// One posed image of a capture.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Image file name relative to the capture's images directory, `/`-separated (e.g.
    /// `0001.jpg`); unique within a capture; frames are sorted by it and hold-out picks by it.
    /// For transforms.json it is `file_path` with a leading `./` and a leading `images/` (or
    /// `images_<n>/`) directory removed, plus the extension found on disk if `file_path` had none.
    pub name: String,
    /// Path of the image file, as found on disk (joined to the directory the user gave).
    pub image_path: PathBuf,
    /// Pinhole intrinsics for the image at its full stored size.
    pub intrinsics: Intrinsics,
    /// Lens distortion in normalised camera coordinates; [`Distortion::None`] for pinhole data.
    pub distortion: Distortion,
    /// Rigid world → camera transform, row-major 4×4, OpenCV camera frame (x right, y down,
    /// z forward), world units as the capture has them (metres only if the capture is metric).
    /// The last row is exactly `[0, 0, 0, 1]`.
    pub world_to_camera: [[f64; 4]; 4],
    /// Scene depth range `[near, far]` seen by this camera, world units along its viewing axis
    /// (camera-frame z), when the format stores one (LLFF `poses_bounds.npy`: finite, as stored,
    /// not otherwise checked); `None` for formats without bounds.
    pub depth_bounds: Option<[f64; 2]>,
    /// Foreground mask image for this frame, when the capture ships one (LLFF `masks/`); `None`
    /// otherwise. Only located, never read here: masks may be lossy JPEGs that need a threshold.
    pub mask_path: Option<PathBuf>,
    /// The split the capture assigns this frame to, when it declares splits (Blender
    /// `transforms_{train,val,test}.json`, nerfstudio `train_filenames`/`val_filenames`/
    /// `test_filenames`); `None` when it does not (training then holds out every n-th view).
    pub split: Option<Split>,
}

/// A frame's role as its capture declares it.
///
/// Training uses `Train` frames only; held-out evaluation uses `Test` frames, else `Val` frames
/// (the NeRF-synthetic protocol: train on `train`, report on `test`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Training views.
    Train,
    /// Validation views (held out; used for evaluation when there is no `Test` split).
    Val,
    /// Test views (held out; the evaluation set).
    Test,
}

impl Split {
    /// The split named by a file or key name: the first of `train`, `val`, `test` it contains
    /// (ASCII case-insensitive), e.g. `transforms_val.json` → `Val`; `None` when none does or more
    /// than one does.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Split> {
        let lower = name.to_ascii_lowercase();
        let found: Vec<Split> = [
            ("train", Split::Train),
            ("val", Split::Val),
            ("test", Split::Test),
        ]
        .into_iter()
        .filter(|(word, _)| lower.contains(word))
        .map(|(_, split)| split)
        .collect();
        match found.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Lower-case name as written in `capture.json` and logs: `train`, `val`, `test`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
            Split::Test => "test",
        }
    }
}

impl Frame {
    /// Camera centre in world coordinates: `−Rᵀ t` of [`Frame::world_to_camera`].
    #[must_use]
    pub fn camera_center(&self) -> [f64; 3] {
        let m = &self.world_to_camera;
        let mut c = [0.0; 3];
        for (k, ck) in c.iter_mut().enumerate() {
            *ck = -(m[0][k] * m[0][3] + m[1][k] * m[1][3] + m[2][k] * m[2][3]);
        }
        c
    }
}

/// A sparse structure-from-motion point cloud (e.g. COLMAP `points3D.bin` / `points3D.txt`),
/// `[N, 3]` each.
///
/// `positions[n]` and `colors[n]` describe point n; both have the same length N.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SfmPoints {
    /// Point positions in the world frame of the capture's poses, `[N, 3]`, world units.
    pub positions: Vec<[f64; 3]>,
    /// Point colours, 8-bit sRGB as stored, `[N, 3]`.
    pub colors: Vec<[u8; 3]>,
}

/// A posed image set read by [`read_capture`].
///
/// Guaranteed: `frames` is non-empty, sorted by name, names are unique, every `image_path`
/// existed when read. Pixels are not loaded (use [`load_rgb`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    /// What was read: the transforms.json file, the COLMAP model directory, or the LLFF
    /// `poses_bounds.npy` file.
    pub source: PathBuf,
    /// The usable frames, sorted by [`Frame::name`].
    pub frames: Vec<Frame>,
    /// The sparse point cloud, when the format has one (COLMAP `points3D.bin` / `.txt`); `None`
    /// otherwise.
    pub points: Option<SfmPoints>,
    /// Names of frames listed by the source but skipped (missing image file, non-finite pose),
    /// sorted; a warning listing them was logged.
    pub skipped: Vec<String>,
    /// Every file the poses were read from: the transforms JSON (one per split for a Blender
    /// layout), COLMAP's `images.bin`/`images.txt`, or `poses_bounds.npy`.
    pub pose_files: Vec<PathBuf>,
    /// The file [`Capture::points`] was read from (COLMAP `points3D.*`, nerfstudio
    /// `ply_file_path`); `None` when there are no points.
    pub points_file: Option<PathBuf>,
}

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
    if path.is_file() {
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if is_json {
            return read_transforms(path);
        }
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
        {
            return read_llff_file(path);
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
            return read_colmap(dir);
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
            return read_transforms(&transforms);
        }
        match other_transforms_json(path)? {
            Some(TransformsFiles::One(json)) => return read_transforms(&json),
            Some(TransformsFiles::Splits(files)) => return read_split_transforms(path, &files),
            None => {}
        }
        if path.join(llff::POSES_BOUNDS).is_file() {
            return read_llff(path);
        }
        return read_colmap(path);
    }
    Err(Error::NotFound {
        path: path.to_path_buf(),
        what: "capture: a transform*.json file, an LLFF poses_bounds.npy or a COLMAP directory",
    })
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
/// The errors of [`read_transforms`] for any file; [`Error::Invalid`] when two splits list the
/// same image.
fn read_split_transforms(dir: &Path, files: &[(Split, PathBuf)]) -> Result<Capture> {
    let mut merged = Capture {
        source: dir.to_path_buf(),
        frames: Vec::new(),
        points: None,
        skipped: Vec::new(),
        pose_files: Vec::new(),
        points_file: None,
    };
    for (split, file) in files {
        let part = read_transforms(file)?;
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
    merged.skipped.sort();
    sort_frames(
        dir,
        "frames[].file_path (across the split files)",
        &mut merged.frames,
    )?;
    Ok(merged)
}

/// Rotation part of a 4×4 row-major matrix times `diag(1, −1, −1)`, i.e. its camera y and z axes
/// negated: OpenGL/NeRF camera (x right, y up, z back) ↔ OpenCV camera (x right, y down, z fwd).
fn flip_yz_axes(m: &mut [[f64; 4]; 4]) {
    for row in m.iter_mut().take(3) {
        row[1] = -row[1];
        row[2] = -row[2];
    }
}

/// Inverse of a rigid 4×4 row-major transform `[R t; 0 1]`: `[Rᵀ −Rᵀt; 0 1]`.
fn rigid_inverse(m: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    let mut out = [[0.0; 4]; 4];
    for i in 0..3 {
        for j in 0..3 {
            out[i][j] = m[j][i];
        }
        out[i][3] = -(m[0][i] * m[0][3] + m[1][i] * m[1][3] + m[2][i] * m[2][3]);
    }
    out[3][3] = 1.0;
    out
}

/// Largest entry of |RᵀR − I| for the rotation block of `m`, and det R.
fn rotation_error(m: &[[f64; 4]; 4]) -> (f64, f64) {
    let mut worst: f64 = 0.0;
    for i in 0..3 {
        for j in 0..3 {
            let dot: f64 = (0..3).map(|k| m[k][i] * m[k][j]).sum();
            let want = if i == j { 1.0 } else { 0.0 };
            worst = worst.max((dot - want).abs());
        }
    }
    let det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    (worst, det)
}

/// Tolerance on |RᵀR − I| for a pose to count as rigid: poses written as text with 6+ significant
/// digits (COLMAP, instant-ngp) are orthonormal to ~1e-6; a scaled or sheared matrix (a different
/// convention) is off by far more than 1e-3.
const ROTATION_TOLERANCE: f64 = 1e-3;

/// Log one warning listing skipped frames (count + names) for a reason, if any.
fn warn_skipped(source: &Path, reason: &str, names: &[String], listed: usize) {
    if names.is_empty() {
        return;
    }
    tracing::warn!(
        path = %source.display(),
        count = names.len(),
        listed,
        "{}",
        skipped_message(source, reason, names, listed)
    );
}

/// The text of [`warn_skipped`]'s warning: file, count of skipped of listed frames, reason, names.
fn skipped_message(source: &Path, reason: &str, names: &[String], listed: usize) -> String {
    format!(
        "{}: skipping {} of {} frames ({reason}): {}",
        source.display(),
        names.len(),
        listed,
        names.join(", ")
    )
}

/// Sort frames by name, and reject duplicate names (they would break hold-out by name).
fn sort_frames(source: &Path, field: &str, frames: &mut [Frame]) -> Result<()> {
    frames.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = frames.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::Invalid {
            path: source.to_path_buf(),
            field: field.into(),
            expected: "each image listed once".into(),
            found: format!("`{}` listed twice", w[0].name),
        });
    }
    Ok(())
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
    fn scaled_to_is_exact_for_a_2x_downscale() {
        let k = Intrinsics {
            fx: 1375.52,
            fy: 1374.49,
            cx: 554.558,
            cy: 965.268,
            width: 1080,
            height: 1920,
        };
        let half = k.scaled_to(540, 960);
        assert_eq!(
            half,
            Intrinsics {
                fx: 687.76,
                fy: 687.245,
                cx: 277.279,
                cy: 482.634,
                width: 540,
                height: 960,
            }
        );
        // Pixel-centre grid: the centre of full-res pixel 0 is 0.5; the half-res pixel 0 spans
        // full-res [0, 2) with centre 1.0 = 0.5 · 2 in full-res units.
        let back = half.scaled_to(1080, 1920);
        assert_eq!(back, k);
    }

    #[test]
    fn scaled_to_uses_separate_x_and_y_factors() {
        let k = Intrinsics {
            fx: 100.0,
            fy: 200.0,
            cx: 50.0,
            cy: 40.0,
            width: 100,
            height: 80,
        };
        let s = k.scaled_to(50, 20);
        assert_eq!((s.fx, s.cx, s.fy, s.cy), (50.0, 25.0, 50.0, 10.0));
    }

    #[test]
    fn rigid_inverse_undoes_a_pose() {
        let (c, s) = (0.6_f64, 0.8_f64);
        let m = [
            [c, -s, 0.0, 1.0],
            [s, c, 0.0, -2.0],
            [0.0, 0.0, 1.0, 3.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let inv = rigid_inverse(&m);
        for i in 0..4 {
            for j in 0..4 {
                let p: f64 = (0..4).map(|k| m[i][k] * inv[k][j]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((p - want).abs() < 1e-12, "({i},{j}) = {p}");
            }
        }
    }

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
    fn split_names_are_read_from_file_names() {
        assert_eq!(
            Split::from_name("transforms_TRAIN.json"),
            Some(Split::Train)
        );
        assert_eq!(Split::from_name("transforms_val.json"), Some(Split::Val));
        assert_eq!(Split::from_name("transform_test.json"), Some(Split::Test));
        assert_eq!(Split::from_name("transforms.json"), None);
        assert_eq!(Split::from_name("train_test.json"), None);
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
