//! LLFF captures: a `poses_bounds.npy` file plus the `images/` (and optional `masks/`) directory
//! beside it, as written by LLFF's `imgs2poses.py` and read by NeRF's `load_llff.py`.
//!
//! Source: LLFF (github.com/Fyusion/LLFF) README "Using your own poses without running COLMAP" and
//! `llff/poses/pose_utils.py` (`save_poses`: COLMAP axes reordered to [down, right, back], one
//! row per image); NeRF (github.com/bmild/nerf) `load_llff.py` (`_load_data`: rows reshaped to
//! 3×5, images listed in sorted file-name order, `hwf` replaced by the loaded image size and the
//! focal scaled with it). NPY container: NumPy `numpy/lib/format.py` (NEP 1), read with `npyz`.
//!
//! File layout: `poses_bounds.npy` is an N×17 array (float64 or float32, C or Fortran order), one
//! row per image, rows in the sorted order of the image file names. Row n is a row-major 3×5 matrix
//! followed by two bounds:
//!
//! ```text
//! [ r00 r01 r02 tx h | r10 r11 r12 ty w | r20 r21 r22 tz f | near far ]
//! ```
//!
//! - the 3×3 block `R` is a camera-to-world rotation whose columns are the camera's **down, right,
//!   back** axes in world coordinates (LLFF order; NeRF reorders them to right, up, back);
//! - `t` = (tx, ty, tz) is the camera centre, world units;
//! - `h`, `w` are the image height and width, pixels, that the poses were made for, and `f` the
//!   focal length in those pixels (same for x and y; principal point at the image centre);
//! - `near`, `far` bound the scene depth along the viewing axis (LLFF: percentiles of the SfM
//!   point depths seen by that camera), world units.
//!
//! Conversion to Kiln's conventions (module doc of `capture`): OpenCV x right = LLFF column 1,
//! y down = column 0, z forward = −column 2, so `R_cv = [c1 | c0 | −c2]` (det R_cv = det R, so a
//! proper LLFF rotation stays proper) and `world_to_camera = [R_cvᵀ | −R_cvᵀ t]`. Intrinsics
//! are `fx = fy = f`, `cx = w/2`, `cy = h/2` (the image centre in corner-origin pixels), rescaled
//! to the size the image decodes to when that differs from `h × w`. The size comes from the
//! image header (what [`super::load_rgb`] decodes), never from EXIF `PixelXDimension`, which can
//! describe the uncropped sensor image (Mary Rose: EXIF 5184 × 3456, pixels 3456 × 3456).
//!
//! Bad cameras (issue 44, rule 3): a row holding a non-finite number, a rotation that is
//! singular, mirrored or not rigid, or an image whose header cannot be read is skipped (its image
//! named in [`Capture::skipped`], one warning per reason). Any other bad value (non-positive size
//! or focal) is an error naming file, row and image.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use npyz::NpyFile;

use super::distortion::Distortion;
use super::frames::{Skipped, sort_frames};
use super::image::image_size;
use super::intrinsics::Intrinsics;
use super::masks::Masks;
use super::model::{Capture, Frame};
use super::pose::{PoseDefect, pose_defect, rigid_inverse};
use crate::confined::ConfinedRoot;
use crate::{Error, Result};

/// File name of the LLFF poses array, looked for by [`read_llff`] and [`super::read_capture`].
pub(super) const POSES_BOUNDS: &str = "poses_bounds.npy";

/// Values per row of `poses_bounds.npy`: a 3×5 pose matrix and the near, far bounds.
const ROW_LEN: usize = 17;

/// Image file extensions listed from `images/` (compared case-insensitively), as `load_llff.py`
/// lists JPG/jpg/png.
const IMAGE_EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// Largest relative difference between the aspect ratio of the stored `h × w` and of the decoded
/// image for a plain rescale of the intrinsics: rounding a downscaled side changes the aspect by
/// well under 1%; a larger change means a crop or a rotated image, which a rescale cannot model.
const ASPECT_TOLERANCE: f64 = 0.01;

/// Read an LLFF capture from a directory holding `poses_bounds.npy` and `images/`.
///
/// Same as [`read_llff_file`] on `dir/poses_bounds.npy`.
///
/// # Errors
/// As [`read_llff_file`]; [`Error::NotFound`] naming `dir/poses_bounds.npy` if it is missing.
pub fn read_llff(dir: &Path) -> Result<Capture> {
    read_llff_file_in(&ConfinedRoot::of_input(dir)?, &dir.join(POSES_BOUNDS))
}

/// Read an LLFF `poses_bounds.npy` file (layout in the module doc) and the images beside it.
///
/// Guaranteed: one frame per row with finite values (others are named in [`Capture::skipped`]),
/// sorted by name; names are the image file names; intrinsics are pinhole
/// ([`Distortion::None`]) at the size each image decodes to; `depth_bounds` is `Some([near,
/// far])` as stored; `mask_path` is `Some` when `masks/` beside the file holds `<stem>_mask.<ext>`
/// or `<stem>.<ext>` for the image (an image extension, any case); `points` is `None`.
/// [`Capture::source`] is `npy_path`. Every image header is read (not the pixels).
/// - `npy_path`: the `poses_bounds.npy` file (any name); images are read from `images/` in its
///   directory: files with a `.jpg`, `.jpeg` or `.png` extension (any case), sorted by file name
///   (byte-wise), row n ↔ n-th image; other files are ignored.
///
/// # Errors
/// [`Error::NotFound`] if the file or the `images` directory is missing; [`Error::Corrupt`] for a
/// malformed or truncated NPY file; [`Error::Unsupported`] for a dtype other than float64 /
/// float32; [`Error::Invalid`] naming the file for a shape other than (N, 17), a row count that
/// differs from the image count (naming both), or a row with a non-rigid rotation (det ≤ 0 or
/// |RᵀR − I| > 1e-3), a non-positive or non-integer h or w, a non-positive focal, or an aspect
/// ratio that differs from its image's by more than 1%; [`Error::Empty`] if every row is
/// skipped; [`Error::Image`] / [`Error::Io`] reading an image header or a directory.
pub fn read_llff_file(npy_path: &Path) -> Result<Capture> {
    read_llff_file_in(&ConfinedRoot::of_input(npy_path)?, npy_path)
}

/// [`read_llff_file`] with the `images/` and `masks/` folders and every file listed in them
/// confined to `root` ([`ConfinedRoot`]).
///
/// # Errors
/// Those of [`read_llff_file`], and [`Error::OutsideInput`] for a folder or image that is a
/// symbolic link leading out of `root`.
pub fn read_llff_file_in(root: &ConfinedRoot, npy_path: &Path) -> Result<Capture> {
    let rows = read_rows(npy_path)?;
    let base_dir = npy_path.parent().unwrap_or(Path::new("."));
    let images_dir = base_dir.join("images");
    let images = list_images(&images_dir)?;
    for (_, path) in &images {
        root.check_inside(path, npy_path, "images/")?;
    }
    if rows.len() != images.len() {
        return Err(Error::Invalid {
            path: npy_path.to_path_buf(),
            field: "rows".into(),
            expected: format!(
                "one row per image in {} ({} images, sorted by name)",
                images_dir.display(),
                images.len()
            ),
            found: format!(
                "{} rows; add or remove images so the rows and the sorted images pair up",
                rows.len()
            ),
        });
    }
    let masks = Masks::list(root, &base_dir.join("masks"))?;

    let mut frames = Vec::with_capacity(rows.len());
    let mut skipped = Skipped::default();
    let mut rescaled = 0usize;
    for (index, (row, (name, image_path))) in rows.iter().zip(images).enumerate() {
        if row.iter().any(|v| !v.is_finite()) {
            skipped.push(ROW_NOT_FINITE, name);
            continue;
        }
        let world_to_camera = match world_to_camera(row) {
            Ok(pose) => pose,
            Err(defect) => {
                skipped.push(defect.reason(), name);
                continue;
            }
        };
        let field = format!("row {index} (`{name}`)");
        let stored = match stored_intrinsics(row) {
            Ok(stored) => stored,
            Err(reason) => {
                skipped.push(reason, name);
                continue;
            }
        };
        let Ok((width, height)) = image_size(&image_path) else {
            skipped.push(IMAGE_UNREADABLE, name);
            continue;
        };
        let intrinsics = if (width, height) == (stored.width, stored.height) {
            stored
        } else {
            check_aspect(npy_path, &field, &stored, &image_path, (width, height))?;
            rescaled += 1;
            stored.scaled_to(width, height)
        };
        let mask_path = masks.as_ref().and_then(|m| m.find(&name));
        frames.push(Frame {
            name,
            image_path,
            intrinsics,
            distortion: Distortion::None,
            world_to_camera,
            depth_bounds: Some([row[15], row[16]]),
            mask_path,
            split: None,
        });
    }

    let listed = rows.len();
    skipped.warn(npy_path, listed);
    if rescaled > 0 {
        tracing::info!(
            path = %npy_path.display(),
            rescaled,
            "intrinsics of {rescaled} frames rescaled from the stored h, w to the decoded size"
        );
    }
    if let Some(masks) = &masks {
        masks.warn_unmasked(
            frames
                .iter()
                .filter(|f| f.mask_path.is_none())
                .map(|f| f.name.as_str()),
        );
    }
    if frames.is_empty() {
        return Err(Error::Empty {
            path: npy_path.to_path_buf(),
            what: "frames",
            reason: format!("all {listed} rows were skipped: {}", skipped.listing()),
        });
    }
    let mut skipped_names = skipped.names();
    skipped_names.extend(sort_frames(npy_path, &mut frames, listed));
    Ok(Capture {
        source: npy_path.to_path_buf(),
        frames,
        points: None,
        skipped: skipped_names,
        pose_files: vec![npy_path.to_path_buf()],
        points_file: None,
    })
}

/// The rows of an N×17 float NPY file, as f64, in logical (row, column) order.
fn read_rows(path: &Path) -> Result<Vec<[f64; ROW_LEN]>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let npy = NpyFile::new(BufReader::new(file)).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        location: "NPY header".into(),
        what: e.to_string(),
    })?;
    let shape = npy.shape().to_vec();
    let n = match shape.as_slice() {
        [n, 17] if *n > 0 => usize::try_from(*n).ok(),
        _ => None,
    };
    let Some(n) = n else {
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "shape".into(),
            expected: "(N, 17) with N ≥ 1: per image a 3×5 pose [R | t | (h, w, focal)] \
                       then near, far"
                .into(),
            found: format!("({})", dims.join(", ")),
        });
    };
    let fortran = npy.order() == npyz::Order::Fortran;
    let dtype = npy.dtype().descr();
    let corrupt = |e: std::io::Error| Error::Corrupt {
        path: path.to_path_buf(),
        location: "array data".into(),
        what: e.to_string(),
    };
    // The dtype decides the element type; try f64, then f32 (widened exactly).
    let values: Vec<f64> = match npy.try_data::<f64>() {
        Ok(data) => data.collect::<std::io::Result<_>>().map_err(corrupt)?,
        Err(npy) => match npy.try_data::<f32>() {
            Ok(data) => data
                .map(|v| v.map(f64::from))
                .collect::<std::io::Result<_>>()
                .map_err(corrupt)?,
            Err(_) => {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    field: "dtype".into(),
                    found: format!("dtype {dtype}"),
                    supported: "float64 or float32 ('<f8', '>f8', '<f4', '>f4'); save with \
                                `np.save(path, arr.astype(np.float64))`"
                        .into(),
                });
            }
        },
    };
    if values.len() != n * ROW_LEN {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            location: "array data".into(),
            what: format!(
                "{} values for shape ({n}, {ROW_LEN}), expected {}",
                values.len(),
                n * ROW_LEN
            ),
        });
    }
    let rows = (0..n)
        .map(|i| {
            std::array::from_fn(|j| {
                // Fortran order stores column j contiguously: element (i, j) at j·N + i.
                if fortran {
                    values[j * n + i]
                } else {
                    values[i * ROW_LEN + j]
                }
            })
        })
        .collect();
    Ok(rows)
}

/// Image files of `dir` (extension in [`IMAGE_EXTENSIONS`], any case) as (file name, path),
/// sorted by file name.
fn list_images(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    if !dir.is_dir() {
        return Err(Error::NotFound {
            path: dir.to_path_buf(),
            what: "LLFF images directory (`images/` beside poses_bounds.npy)",
        });
    }
    let mut images: Vec<(String, PathBuf)> = read_dir_files(dir)?
        .into_iter()
        .filter(|(_, path)| has_image_extension(path))
        .collect();
    images.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(images)
}

/// Regular files of `dir` as (file name, path); names that are not UTF-8 are skipped (no LLFF
/// tool writes them, and a frame name must be a string).
fn read_dir_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        if let Ok(name) = entry.file_name().into_string() {
            files.push((name, path));
        }
    }
    Ok(files)
}

fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// The reason a row holding NaN or Inf is skipped for.
const ROW_NOT_FINITE: &str = "row not finite";
/// Reasons a row whose stored (h, w, focal) column is unusable is skipped for.
const STORED_H_INVALID: &str = "stored h (column 4 of the 3×5 pose) not a whole number of pixels";
const STORED_W_INVALID: &str = "stored w (column 4 of the 3×5 pose) not a whole number of pixels";
const STORED_FOCAL_INVALID: &str =
    "stored focal (column 4 of the 3×5 pose) not a positive focal length in pixels";
/// The reason a row whose image header cannot be read is skipped for.
const IMAGE_UNREADABLE: &str = "image unreadable";

/// OpenCV world_to_camera of a finite row, or why its rotation cannot be a camera's (the row is
/// then skipped, issue 44 rule 3).
fn world_to_camera(row: &[f64; ROW_LEN]) -> std::result::Result<[[f64; 4]; 4], PoseDefect> {
    // Row-major 3×5: element (r, c) at 5r + c. Columns 0, 1, 2 of R are down, right, back.
    let at = |r: usize, c: usize| row[5 * r + c];
    let mut camera_to_world = [[0.0; 4]; 4];
    for (r, out) in camera_to_world.iter_mut().take(3).enumerate() {
        *out = [at(r, 1), at(r, 0), -at(r, 2), at(r, 3)];
    }
    camera_to_world[3][3] = 1.0;
    match pose_defect(&camera_to_world) {
        Some(defect) => Err(defect),
        None => Ok(rigid_inverse(&camera_to_world)),
    }
}

/// Intrinsics from a finite row's (h, w, focal) column: centred principal point, at h × w; or the
/// reason the row's camera cannot be used. One row's bad h, w or focal is one bad camera, so its
/// frame is skipped with a warning, not the capture refused (issue 44 rule 3).
fn stored_intrinsics(row: &[f64; ROW_LEN]) -> std::result::Result<Intrinsics, &'static str> {
    let (h, w, focal) = (row[4], row[9], row[14]);
    // Sizes are whole pixel counts stored as floats; a fraction means a different layout.
    let pixels = |v: f64| (v >= 1.0 && v <= f64::from(u32::MAX) && v.fract() == 0.0).then_some(v);
    let height = pixels(h).ok_or(STORED_H_INVALID)? as u32;
    let width = pixels(w).ok_or(STORED_W_INVALID)? as u32;
    if focal <= 0.0 {
        return Err(STORED_FOCAL_INVALID);
    }
    Ok(Intrinsics {
        fx: focal,
        fy: focal,
        cx: w / 2.0,
        cy: h / 2.0,
        width,
        height,
    })
}

/// Reject a decoded size whose aspect ratio differs from the stored one beyond
/// [`ASPECT_TOLERANCE`]: the stored intrinsics would not describe that image.
fn check_aspect(
    path: &Path,
    field: &str,
    stored: &Intrinsics,
    image_path: &Path,
    (width, height): (u32, u32),
) -> Result<()> {
    let aspect = |w: u32, h: u32| f64::from(w) / f64::from(h);
    let want = aspect(stored.width, stored.height);
    let got = aspect(width, height);
    if ((got - want) / want).abs() > ASPECT_TOLERANCE {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: format!("{field}: h, w"),
            expected: format!(
                "an image with the aspect ratio of the stored {} × {} (w × h) or a uniform \
                 downscale of it",
                stored.width, stored.height
            ),
            found: format!(
                "{} decodes to {width} × {height}; fix h, w in the file or re-export the image \
                 uncropped and unrotated",
                image_path.display()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{read_capture, test_dataset};

    /// A v1.0 NPY file of `shape` holding `values` (C order) as `descr` ('<f8' or '<f4').
    ///
    /// Written by hand from the NPY spec (NEP 1: magic, version, little-endian u16 header length,
    /// Python-dict header padded with spaces to a multiple of 64 and ending in '\n') so the tests
    /// do not depend on the reader's crate to produce their input.
    fn npy_bytes(descr: &str, shape: &[usize], values: &[f64]) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let shape_text = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        for v in values {
            if descr == "<f4" {
                out.extend_from_slice(&(*v as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// A row: LLFF rotation columns (down, right, back), camera centre, (h, w, focal), bounds.
    fn row(
        down: [f64; 3],
        right: [f64; 3],
        back: [f64; 3],
        centre: [f64; 3],
        hwf: [f64; 3],
        bounds: [f64; 2],
    ) -> Vec<f64> {
        let mut out = Vec::with_capacity(ROW_LEN);
        for r in 0..3 {
            out.extend([down[r], right[r], back[r], centre[r], hwf[r]]);
        }
        out.extend(bounds);
        out
    }

    /// The LLFF identity: camera down = world x, right = world y, back = world z.
    fn identity_row(centre: [f64; 3]) -> Vec<f64> {
        row(
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
            centre,
            [4.0, 6.0, 5.0],
            [0.5, 9.0],
        )
    }

    /// A capture directory: `poses_bounds.npy` from `rows`, and a w × h PNG per name in images/.
    fn write_capture(
        dir: &Path,
        descr: &str,
        rows: &[Vec<f64>],
        images: &[&str],
        (w, h): (u32, u32),
    ) -> PathBuf {
        let values: Vec<f64> = rows.iter().flatten().copied().collect();
        let npy = dir.join(POSES_BOUNDS);
        std::fs::write(&npy, npy_bytes(descr, &[rows.len(), ROW_LEN], &values)).unwrap();
        let images_dir = dir.join("images");
        std::fs::create_dir_all(&images_dir).unwrap();
        for name in images {
            ::image::RgbImage::new(w, h)
                .save(images_dir.join(name))
                .unwrap();
        }
        npy
    }

    /// Issue 41: an image in `images/` that is a link out of the input is refused naming the
    /// folder; a link that stays inside reads.
    #[test]
    fn llff_image_linked_from_outside_the_input_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        ::image::RgbImage::new(6, 4)
            .save(outside.path().join("b.png"))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rows = [identity_row([1.0, 2.0, 3.0]), identity_row([1.0, 2.0, 4.0])];
        let npy = write_capture(dir.path(), "<f8", &rows, &["a.png"], (6, 4));
        let link = dir.path().join("images/b.png");
        std::os::unix::fs::symlink(outside.path().join("b.png"), &link).unwrap();
        let e = read_llff_file(&npy).unwrap_err();
        assert!(
            matches!(&e, Error::OutsideInput { field, .. } if field == "images/"),
            "{e}"
        );
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(dir.path().join("images/a.png"), &link).unwrap();
        assert_eq!(read_llff_file(&npy).unwrap().frames.len(), 2);
    }

    #[test]
    fn llff_identity_rotation_maps_down_right_back_to_opencv() {
        let dir = tempfile::tempdir().unwrap();
        write_capture(
            dir.path(),
            "<f8",
            &[identity_row([1.0, 2.0, 3.0])],
            &["a.png"],
            (6, 4),
        );
        let capture = read_llff(dir.path()).unwrap();
        let frame = &capture.frames[0];
        // Camera axes in world: x (right) = world y, y (down) = world x, z (forward) = −world z.
        // world_to_camera rows are those axes; t = −R·centre = −(2, 1, −3).
        let want = [
            [0.0, 1.0, 0.0, -2.0],
            [1.0, 0.0, 0.0, -1.0],
            [0.0, 0.0, -1.0, 3.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        assert_eq!(frame.world_to_camera, want);
        assert_eq!(frame.camera_center(), [1.0, 2.0, 3.0]);
        assert_eq!(
            frame.intrinsics,
            Intrinsics {
                fx: 5.0,
                fy: 5.0,
                cx: 3.0,
                cy: 2.0,
                width: 6,
                height: 4,
            }
        );
        assert_eq!(frame.depth_bounds, Some([0.5, 9.0]));
        assert_eq!(frame.distortion, Distortion::None);
        assert_eq!(frame.mask_path, None);
        assert!(capture.source.ends_with(POSES_BOUNDS));
        assert!(capture.skipped.is_empty());
    }

    #[test]
    fn llff_point_in_front_projects_to_the_right_pixel() {
        // Camera at the origin looking down world −z (back = +z) with down = −world y and
        // right = world x: the usual "y up" world. A point 2 units ahead, 0.4 right and 0.2 up
        // must land right of and above the centre: u = 5·0.4/2 + 3 = 4, v = −5·0.2/2 + 2 = 1.5.
        let dir = tempfile::tempdir().unwrap();
        let r = row(
            [0.0, -1.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0],
            [0.0, 0.0, 0.0],
            [4.0, 6.0, 5.0],
            [1.0, 3.0],
        );
        write_capture(dir.path(), "<f4", &[r], &["a.jpg"], (6, 4));
        let frame = &read_llff(dir.path()).unwrap().frames[0];
        let m = &frame.world_to_camera;
        let p = [0.4, 0.2, -2.0];
        let cam: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|k| m[i][k] * p[k]).sum::<f64>() + m[i][3])
            .collect();
        let k = &frame.intrinsics;
        assert!((cam[2] - 2.0).abs() < 1e-6, "depth {}", cam[2]);
        let (u, v) = (k.fx * cam[0] / cam[2] + k.cx, k.fy * cam[1] / cam[2] + k.cy);
        assert!(
            (u - 4.0).abs() < 1e-6 && (v - 1.5).abs() < 1e-6,
            "({u}, {v})"
        );
    }

    #[test]
    fn llff_rescales_intrinsics_to_the_decoded_image_size() {
        let dir = tempfile::tempdir().unwrap();
        // Stored for 6 × 4 pixels; the image on disk is a 2× downscale (images_2 style).
        write_capture(
            dir.path(),
            "<f8",
            &[identity_row([0.0; 3])],
            &["a.png"],
            (3, 2),
        );
        let k = read_llff(dir.path()).unwrap().frames[0].intrinsics;
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (2.5, 2.5, 1.5, 1.0));
        assert_eq!((k.width, k.height), (3, 2));
    }

    #[test]
    fn llff_rejects_an_image_of_another_aspect_ratio() {
        let dir = tempfile::tempdir().unwrap();
        write_capture(
            dir.path(),
            "<f8",
            &[identity_row([0.0; 3])],
            &["a.png"],
            (4, 6),
        );
        let err = read_llff(dir.path()).unwrap_err().to_string();
        assert!(err.contains("row 0 (`a.png`): h, w"), "{err}");
        assert!(err.contains("4 × 6"), "{err}");
    }

    #[test]
    fn llff_wrong_shape_names_the_file_and_the_shape() {
        let dir = tempfile::tempdir().unwrap();
        let npy = dir.path().join(POSES_BOUNDS);
        std::fs::write(&npy, npy_bytes("<f8", &[2, 15], &[0.0; 30])).unwrap();
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(&npy.display().to_string()), "{text}");
        assert!(
            text.contains("`shape`") && text.contains("(2, 15)") && text.contains("(N, 17)"),
            "{text}"
        );
        std::fs::write(&npy, npy_bytes("<f8", &[17], &[0.0; 17])).unwrap();
        let text = read_llff(dir.path()).unwrap_err().to_string();
        assert!(text.contains("found (17)"), "{text}");
    }

    #[test]
    fn llff_row_count_mismatch_names_both_counts() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [identity_row([0.0; 3]), identity_row([1.0, 0.0, 0.0])];
        write_capture(
            dir.path(),
            "<f8",
            &rows,
            &["a.png", "b.png", "c.png"],
            (6, 4),
        );
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("(3 images, sorted by name)") && text.contains("found 2 rows"),
            "{text}"
        );
    }

    #[test]
    fn llff_skips_a_nan_row_and_names_its_image() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = identity_row([0.0; 3]);
        bad[3] = f64::NAN;
        let rows = [identity_row([0.0; 3]), bad, identity_row([2.0, 0.0, 0.0])];
        write_capture(
            dir.path(),
            "<f8",
            &rows,
            &["a.png", "b.png", "c.png"],
            (6, 4),
        );
        let capture = read_llff(dir.path()).unwrap();
        let names: Vec<&str> = capture.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a.png", "c.png"]);
        assert_eq!(capture.skipped, ["b.png"]);
        // Rows pair with images by position, so c.png keeps the third row's pose.
        assert_eq!(capture.frames[1].camera_center(), [2.0, 0.0, 0.0]);
    }

    #[test]
    fn llff_all_rows_non_finite_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = identity_row([0.0; 3]);
        bad[16] = f64::INFINITY;
        write_capture(dir.path(), "<f8", &[bad], &["a.png"], (6, 4));
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Empty { .. }), "{err}");
    }

    #[test]
    fn llff_lists_images_sorted_case_insensitively_and_skips_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [
            identity_row([0.0; 3]),
            identity_row([1.0, 0.0, 0.0]),
            identity_row([2.0, 0.0, 0.0]),
        ];
        write_capture(
            dir.path(),
            "<f8",
            &rows,
            &["b.PNG", "a.png", "c.Png"],
            (6, 4),
        );
        let images = dir.path().join("images");
        std::fs::write(images.join("notes.txt"), "not an image").unwrap();
        std::fs::write(images.join(".DS_Store"), "").unwrap();
        std::fs::create_dir(images.join("sub.png")).unwrap();
        let capture = read_llff(dir.path()).unwrap();
        let got: Vec<(&str, [f64; 3])> = capture
            .frames
            .iter()
            .map(|f| (f.name.as_str(), f.camera_center()))
            .collect();
        // Byte-wise order: "a.png" < "b.PNG" < "c.Png"; rows follow that order.
        assert_eq!(
            got,
            [
                ("a.png", [0.0, 0.0, 0.0]),
                ("b.PNG", [1.0, 0.0, 0.0]),
                ("c.Png", [2.0, 0.0, 0.0]),
            ]
        );
    }

    #[test]
    fn llff_rejects_bad_rotation_size_focal_and_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let mut scaled = identity_row([0.0; 3]);
        scaled[0] = 2.0;
        write_capture(dir.path(), "<f8", &[scaled], &["a.png"], (6, 4));
        let text = read_llff(dir.path()).unwrap_err().to_string();
        assert!(text.contains("a.png (rotation not orthonormal"), "{text}");

        // Swapping down and right without negating gives a reflection (det −1).
        let mirrored = row(
            [0.0, 1.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0],
            [0.0; 3],
            [4.0, 6.0, 5.0],
            [0.5, 9.0],
        );
        write_capture(dir.path(), "<f8", &[mirrored], &["a.png"], (6, 4));
        let text = read_llff(dir.path()).unwrap_err().to_string();
        assert!(text.contains("a.png (rotation mirrored"), "{text}");

        let mut zero_focal = identity_row([0.0; 3]);
        zero_focal[14] = 0.0;
        write_capture(dir.path(), "<f8", &[zero_focal], &["a.png"], (6, 4));
        let text = read_llff(dir.path()).unwrap_err().to_string();
        assert!(text.contains("focal"), "{text}");

        let mut half_pixel = identity_row([0.0; 3]);
        half_pixel[4] = 4.5;
        write_capture(dir.path(), "<f8", &[half_pixel], &["a.png"], (6, 4));
        let text = read_llff(dir.path()).unwrap_err().to_string();
        assert!(text.contains("a.png (stored h (column 4"), "{text}");

        let npy = dir.path().join(POSES_BOUNDS);
        let mut ints = npy_bytes("<i8", &[1, ROW_LEN], &[]);
        ints.extend(std::iter::repeat_n(0u8, 8 * ROW_LEN));
        std::fs::write(&npy, ints).unwrap();
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
        assert!(err.to_string().contains("'<i8'"), "{err}");
    }

    #[test]
    fn llff_truncated_or_garbage_file_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let npy = write_capture(
            dir.path(),
            "<f8",
            &[identity_row([0.0; 3])],
            &["a.png"],
            (6, 4),
        );
        let bytes = std::fs::read(&npy).unwrap();
        std::fs::write(&npy, &bytes[..bytes.len() - 8]).unwrap();
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        std::fs::write(&npy, b"not an npy file at all").unwrap();
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[test]
    fn llff_missing_images_directory_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let npy = dir.path().join(POSES_BOUNDS);
        let values = identity_row([0.0; 3]);
        std::fs::write(&npy, npy_bytes("<f8", &[1, ROW_LEN], &values)).unwrap();
        let err = read_llff(dir.path()).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("images"), "{err}");
    }

    #[test]
    fn llff_finds_masks_by_suffix_or_same_stem() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [
            identity_row([0.0; 3]),
            identity_row([1.0, 0.0, 0.0]),
            identity_row([2.0, 0.0, 0.0]),
        ];
        write_capture(
            dir.path(),
            "<f8",
            &rows,
            &["a.png", "b.png", "c.png"],
            (6, 4),
        );
        let masks = dir.path().join("masks");
        std::fs::create_dir(&masks).unwrap();
        std::fs::write(masks.join("a_mask.JPG"), "").unwrap();
        std::fs::write(masks.join("b.png"), "").unwrap();
        let capture = read_llff(dir.path()).unwrap();
        let got: Vec<Option<PathBuf>> =
            capture.frames.iter().map(|f| f.mask_path.clone()).collect();
        assert_eq!(
            got,
            [
                Some(masks.join("a_mask.JPG")),
                Some(masks.join("b.png")),
                None
            ]
        );
    }

    #[test]
    fn read_capture_dispatches_llff_directory_and_npy_file() {
        let dir = tempfile::tempdir().unwrap();
        let npy = write_capture(
            dir.path(),
            "<f8",
            &[identity_row([0.0; 3])],
            &["a.png"],
            (6, 4),
        );
        let from_dir = read_capture(dir.path()).unwrap();
        let from_file = read_capture(&npy).unwrap();
        assert_eq!(from_dir, from_file);
        assert_eq!(from_dir.source, npy);
    }

    /// Mary Rose (69 turntable photos, PROVENANCE.md): sizes, focal, and pose geometry.
    ///
    /// The geometric check: in a turntable capture every camera aims at the object, so the point
    /// closest (least squares) to all optical axes is the object, and it must lie in front of
    /// every camera and project near the middle of every image. With a wrong axis mapping (z
    /// taken as LLFF "back" instead of forward) it would lie behind the cameras. It is also at a
    /// nearly constant distance from every camera (the turntable radius varies little with
    /// elevation: measured 3.64–4.08 world units, ratio 1.12).
    #[test]
    fn maryrose_reads_69_frames_aimed_at_one_point() {
        let dir = test_dataset("capture-maryrose-llff");
        let capture = read_capture(&dir).unwrap();
        assert_eq!(capture.frames.len(), 69);
        assert!(capture.skipped.is_empty());
        assert_eq!(capture.frames[0].name, "IMG_9669.JPG");
        for f in &capture.frames {
            let k = &f.intrinsics;
            assert_eq!((k.width, k.height), (3456, 3456), "{}", f.name);
            assert!((k.fx - 10547.24).abs() < 0.01 && k.fx == k.fy, "{}", f.name);
            assert_eq!((k.cx, k.cy), (1728.0, 1728.0), "{}", f.name);
            let [near, far] = f.depth_bounds.unwrap();
            assert!(0.0 < near && near < far, "{}: {near} {far}", f.name);
            let mask = f.mask_path.as_ref().unwrap();
            let stem = f.name.trim_end_matches(".JPG");
            assert!(mask.ends_with(format!("masks/{stem}_mask.JPG")), "{mask:?}");
        }

        // Least-squares point nearest all optical axes: Σ (I − d dᵀ) p = Σ (I − d dᵀ) c.
        let mut a = [[0.0; 3]; 3];
        let mut b = [0.0; 3];
        for f in &capture.frames {
            let c = f.camera_center();
            let d = f.world_to_camera[2]; // camera z (forward) in world coordinates
            for i in 0..3 {
                for j in 0..3 {
                    let p = f64::from(u8::from(i == j)) - d[i] * d[j];
                    a[i][j] += p;
                    b[i] += p * c[j];
                }
            }
        }
        let det3 = |m: &[[f64; 3]; 3]| {
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
                - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        };
        let target: [f64; 3] = std::array::from_fn(|k| {
            let mut m = a;
            for i in 0..3 {
                m[i][k] = b[i];
            }
            det3(&m) / det3(&a)
        });

        let mut distances = Vec::new();
        for f in &capture.frames {
            let m = &f.world_to_camera;
            let cam: [f64; 3] =
                std::array::from_fn(|i| (0..3).map(|k| m[i][k] * target[k]).sum::<f64>() + m[i][3]);
            assert!(
                cam[2] > 0.0,
                "{}: object behind the camera ({cam:?})",
                f.name
            );
            let k = &f.intrinsics;
            let (u, v) = (k.fx * cam[0] / cam[2] + k.cx, k.fy * cam[1] / cam[2] + k.cy);
            // Within the central half of the image (measured: at most 422 px off centre).
            let half = f64::from(k.width) / 4.0;
            assert!(
                (u - k.cx).abs() < half && (v - k.cy).abs() < half,
                "{}: object projects to ({u:.0}, {v:.0})",
                f.name
            );
            distances.push((cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2]).sqrt());
        }
        let min = distances.iter().copied().fold(f64::INFINITY, f64::min);
        let max = distances.iter().copied().fold(0.0, f64::max);
        assert!(max / min < 1.25, "distances {min:.3}..{max:.3}");
    }
}
