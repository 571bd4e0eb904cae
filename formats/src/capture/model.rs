//! The capture domain types every reader returns: [`Capture`], its [`Frame`]s with their
//! [`Split`], and the sparse point cloud [`SfmPoints`]. Readers build these; `mod.rs` re-exports
//! them as `kiln_formats::capture::*`.

use std::path::PathBuf;

use super::distortion::Distortion;
use super::intrinsics::Intrinsics;

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

/// A posed image set read by [`read_capture`](super::read_capture).
///
/// Guaranteed: `frames` is non-empty, sorted by name, names are unique, every `image_path`
/// existed when read. Pixels are not loaded (use [`load_rgb`](super::load_rgb)).
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
