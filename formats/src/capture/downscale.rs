//! The downscale plan of a capture ([`plan_downscale`]): one output size per camera, and for each
//! frame the file its pixels come from.
//!
//! Why per camera: rounding each photo's own size to `max_side` gives photos of one camera that
//! differ by a pixel (2588 vs 2589 px, gaussian-splatting #25) two sizes after downscaling (50×37
//! and 50×38), and so two sets of intrinsics for one lens. The size is decided once per camera
//! and every photo of it is resampled to exactly that size ([`super::load_rgb_at`]), so the
//! intrinsics, rescaled to it, are one set again.
//!
//! Why `images_<n>`: captures prepared for 3DGS-style trainers often ship their own downscaled
//! copies (`images_2`, `images_4`, `images_8` beside `images`, as COLMAP's and nerfstudio's
//! scripts write them). When a camera's copies are the size asked for, they are the field's own
//! ground truth for that resolution, so they are used as they are.

use std::path::{Component, Path, PathBuf};

use super::image::{image_size, scaled_size};
use super::model::Frame;
use crate::Result;

/// The integer factors whose `images_<n>` folders are looked for, as 3DGS-style captures ship them.
pub const PRESCALED_FACTORS: [u32; 3] = [2, 4, 8];

/// How one frame's pixels are read: from which file, at which size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameDownscale {
    /// The file to decode: the frame's photo ([`Frame::image_path`]) or the capture's own
    /// `images_<n>` copy of it.
    pub source: PathBuf,
    /// The photo's stored size `(W, H)` after EXIF orientation, pixels (of the photo, not of the
    /// copy).
    pub stored: (u32, u32),
    /// The size to resample to `(W', H')`, pixels; the same for every frame of one camera.
    pub size: (u32, u32),
}

/// Decide, for every frame of a capture, the file to decode and the size to give it.
///
/// Guaranteed: one entry per frame, in `frames`' order; frames of one camera (equal
/// [`Frame::intrinsics`] and [`Frame::distortion`]) get one `size`: the camera's most common
/// stored size (ties: the first frame's) downscaled by [`scaled_size`], never upscaled past it.
/// When every frame of a camera has a copy under a sibling `images_<n>` folder (same relative
/// name, or same stem with a `.png`/`.jpg` extension) for one n in [`PRESCALED_FACTORS`], the copies
/// all have one size, and that size is within a pixel of the planned one on each side, the
/// copies are the sources and their size the camera's size. Only image headers are read.
/// - `frames`: a capture's frames ([`super::Capture::frames`]).
/// - `max_side`: the largest output side, pixels, ≥ 1; `None` keeps each camera's stored size.
///
/// # Errors
/// [`crate::Error::NotFound`] / [`crate::Error::Io`] / [`crate::Error::Image`] naming a photo
/// whose header cannot be read.
pub fn plan_downscale(frames: &[Frame], max_side: Option<u32>) -> Result<Vec<FrameDownscale>> {
    let stored: Vec<(u32, u32)> = frames
        .iter()
        .map(|f| image_size(&f.image_path))
        .collect::<Result<_>>()?;
    let mut plan: Vec<FrameDownscale> = frames
        .iter()
        .zip(&stored)
        .map(|(f, &stored)| FrameDownscale {
            source: f.image_path.clone(),
            stored,
            size: stored,
        })
        .collect();
    for camera in camera_groups(frames) {
        plan_camera(frames, &camera, &mut plan, max_side);
    }
    Ok(plan)
}

/// Indices of the frames of each camera (equal intrinsics and distortion), in first-seen order.
fn camera_groups(frames: &[Frame]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let same_camera = |g: &&mut Vec<usize>| {
            let first = &frames[g[0]];
            first.intrinsics == f.intrinsics && first.distortion == f.distortion
        };
        match groups.iter_mut().find(same_camera) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

/// Fill in one camera's size (and sources, where the capture ships copies at that size).
fn plan_camera(
    frames: &[Frame],
    camera: &[usize],
    plan: &mut [FrameDownscale],
    max_side: Option<u32>,
) {
    let reference = most_common(camera.iter().map(|&i| plan[i].stored));
    let mut size = scaled_size(reference.0, reference.1, max_side);
    if size != reference
        && let Some((copies, copy_size)) = prescaled_copies(frames, camera, size)
    {
        size = copy_size;
        for (&i, copy) in camera.iter().zip(copies) {
            plan[i].source = copy;
        }
    }
    for &i in camera {
        plan[i].size = size;
    }
}

/// The most common size, ties going to the one seen first.
fn most_common(sizes: impl Iterator<Item = (u32, u32)>) -> (u32, u32) {
    let mut counts: Vec<((u32, u32), usize)> = Vec::new();
    for s in sizes {
        match counts.iter_mut().find(|(c, _)| *c == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    // max_by_key keeps the last maximum; reversing makes it the first seen.
    counts
        .into_iter()
        .rev()
        .max_by_key(|&(_, n)| n)
        .map_or((0, 0), |(s, _)| s)
}

/// The camera's frames' `images_<n>` copies and their common size, for the first n whose copies
/// all exist, share one size and are within a pixel of `size`; `None` otherwise.
fn prescaled_copies(
    frames: &[Frame],
    camera: &[usize],
    size: (u32, u32),
) -> Option<(Vec<PathBuf>, (u32, u32))> {
    PRESCALED_FACTORS.iter().find_map(|&n| {
        let copies: Vec<PathBuf> = camera
            .iter()
            .map(|&i| prescaled_copy(&frames[i].image_path, n))
            .collect::<Option<_>>()?;
        let sizes: Vec<(u32, u32)> = copies
            .iter()
            .map(|c| image_size(c).ok())
            .collect::<Option<_>>()?;
        let copy_size = sizes[0];
        let near = |a: u32, b: u32| a.abs_diff(b) <= 1;
        (sizes.iter().all(|&s| s == copy_size)
            && near(copy_size.0, size.0)
            && near(copy_size.1, size.1))
        .then_some((copies, copy_size))
    })
}

/// The copy of `photo` in the `images_<n>` folder beside the `images` folder it lies under: the
/// same relative path, or the same stem with a common image extension; `None` when there is none.
fn prescaled_copy(photo: &Path, n: u32) -> Option<PathBuf> {
    let components: Vec<Component> = photo.components().collect();
    let at = components.iter().rposition(|c| c.as_os_str() == "images")?;
    let mut copy: PathBuf = components[..at].iter().collect();
    copy.push(format!("images_{n}"));
    copy.extend(&components[at + 1..]);
    if copy.is_file() {
        return Some(copy);
    }
    ["png", "PNG", "jpg", "JPG", "jpeg"]
        .iter()
        .map(|ext| copy.with_extension(ext))
        .find(|c| c.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{Distortion, Intrinsics};

    fn frame(dir: &Path, name: &str, size: (u32, u32), declared: (u32, u32)) -> Frame {
        let image_path = dir.join("images").join(name);
        std::fs::create_dir_all(image_path.parent().unwrap()).unwrap();
        ::image::RgbImage::new(size.0, size.1)
            .save(&image_path)
            .unwrap();
        Frame {
            name: name.into(),
            image_path,
            intrinsics: Intrinsics {
                fx: 50.0,
                fy: 50.0,
                cx: f64::from(declared.0) / 2.0,
                cy: f64::from(declared.1) / 2.0,
                width: declared.0,
                height: declared.1,
            },
            distortion: Distortion::None,
            world_to_camera: [[0.0; 4]; 4],
            depth_bounds: None,
            mask_path: None,
            split: None,
        }
    }

    /// Issue 44 rule 7: 101 × 75 and 100 × 75 photos of one camera at `max_side` 50 would round
    /// to 50 × 37 and 50 × 38 one by one; planned per camera they all get the majority's size.
    #[test]
    fn photos_of_one_camera_a_pixel_apart_get_one_size() {
        let d = tempfile::tempdir().unwrap();
        let frames = [
            frame(d.path(), "a.png", (101, 75), (101, 75)),
            frame(d.path(), "b.png", (100, 75), (101, 75)),
            frame(d.path(), "c.png", (101, 75), (101, 75)),
        ];
        assert_ne!(
            scaled_size(101, 75, Some(50)),
            scaled_size(100, 75, Some(50))
        );
        let plan = plan_downscale(&frames, Some(50)).unwrap();
        let want = scaled_size(101, 75, Some(50));
        assert!(plan.iter().all(|p| p.size == want), "{plan:?}");
        assert_eq!(plan[1].stored, (100, 75));
        // Another camera (other intrinsics) keeps its own size.
        let other = frame(d.path(), "d.png", (60, 80), (60, 80));
        let plan = plan_downscale(&[frames[0].clone(), other], Some(50)).unwrap();
        assert_eq!(plan[1].size, (38, 50));
    }

    #[test]
    fn images_n_copies_at_the_planned_size_are_the_sources() {
        let d = tempfile::tempdir().unwrap();
        let frames = [
            frame(d.path(), "a.jpg", (64, 48), (64, 48)),
            frame(d.path(), "b.jpg", (64, 48), (64, 48)),
        ];
        std::fs::create_dir_all(d.path().join("images_4")).unwrap();
        std::fs::create_dir_all(d.path().join("images_2")).unwrap();
        for name in ["a.png", "b.png"] {
            // images_2 at the wrong size for max_side 16 (32 × 24), images_4 at the right one.
            ::image::RgbImage::new(32, 24)
                .save(d.path().join("images_2").join(name))
                .unwrap();
            ::image::RgbImage::new(16, 12)
                .save(d.path().join("images_4").join(name))
                .unwrap();
        }
        let plan = plan_downscale(&frames, Some(16)).unwrap();
        for (p, name) in plan.iter().zip(["a.png", "b.png"]) {
            assert_eq!(p.source, d.path().join("images_4").join(name));
            assert_eq!((p.stored, p.size), ((64, 48), (16, 12)));
        }
        // At a size no folder matches, the photos are downscaled.
        let plan = plan_downscale(&frames, Some(20)).unwrap();
        assert_eq!(plan[0].source, frames[0].image_path);
        assert_eq!(plan[0].size, (20, 15));
    }

    /// A folder where one frame lacks its copy is not used for that camera: one source per camera.
    #[test]
    fn images_n_is_used_only_when_every_frame_of_the_camera_has_a_copy() {
        let d = tempfile::tempdir().unwrap();
        let frames = [
            frame(d.path(), "a.png", (64, 48), (64, 48)),
            frame(d.path(), "b.png", (64, 48), (64, 48)),
        ];
        std::fs::create_dir_all(d.path().join("images_4")).unwrap();
        ::image::RgbImage::new(16, 12)
            .save(d.path().join("images_4/a.png"))
            .unwrap();
        let plan = plan_downscale(&frames, Some(16)).unwrap();
        assert!(
            plan.iter()
                .zip(&frames)
                .all(|(p, f)| p.source == f.image_path)
        );
    }

    #[test]
    fn most_common_size_breaks_ties_by_first_seen() {
        assert_eq!(most_common([(2, 1), (3, 1), (3, 1)].into_iter()), (3, 1));
        assert_eq!(most_common([(2, 1), (3, 1)].into_iter()), (2, 1));
    }
}
