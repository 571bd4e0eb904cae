//! COLMAP sparse models in text form (`cameras.txt`, `images.txt`, `points3D.txt`), the layout
//! of the directories that hold them, and [`read_colmap`], which reads either form. The binary
//! form (`*.bin`) is parsed in `colmap_bin.rs`; what the two parsers share (camera-model
//! conversion, pose construction, image names, model-file lookup) is in `colmap_model.rs`, so
//! both forms yield the same [`Capture`] for the same model, bit for bit.
//!
//! Source: COLMAP docs "Output Format" (text model) and "Camera Models";
//! `src/colmap/scene/reconstruction_io.cc` (`ReadCamerasText`, `ReadImagesText`,
//! `ReadPoints3DText`), `src/colmap/sensor/models.h` (model ids and parameter order).
//!
//! Camera models: the eleven of COLMAP 3.8 (model ids 0..=10): SIMPLE_PINHOLE, PINHOLE,
//! SIMPLE_RADIAL, RADIAL, OPENCV, OPENCV_FISHEYE, FULL_OPENCV, FOV, SIMPLE_RADIAL_FISHEYE,
//! RADIAL_FISHEYE and THIN_PRISM_FISHEYE, each to pinhole [`Intrinsics`] plus a [`Distortion`]
//! (formulas in `distortion.rs`). Models added by later COLMAP versions (ids 11 and up, such as
//! FISHEYE or EQUIRECTANGULAR) are rejected as unsupported. Fisheye cameras are undistorted to a
//! pinhole image with the same focal length, which crops a wide lens's periphery
//! ([`super::undistort`]).
//!
//! `images.txt` poses (QW QX QY QZ TX TY TZ) are already world_to_camera in the OpenCV camera
//! frame: `X_cam = R(q)·X_world + t`, with q a Hamilton quaternion (w first), normalised on read.
//! COLMAP's principal point uses the corner-origin pixel convention, as [`Intrinsics`] does.
//!
//! A directory holding both forms is read as binary: COLMAP writes `.bin` natively (its mapper
//! and `model_converter` default), so a `.txt` beside it is an export that may be stale.
//!
//! NaN/Inf: an image whose pose (QW…TZ) holds a non-finite number or a zero quaternion is
//! skipped with a warning (issue 44, rule 3); any other non-finite or out-of-range number is an
//! error naming file, line and column name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::colmap_bin;
use super::colmap_model::{
    CameraEntry, ImageEntry, ParsedModel, camera_from_model, image_name, model_file, model_params,
    pose_from_colmap, unsupported_model,
};
use super::frames::{Skipped, sort_frames};
use super::model::{Capture, Frame, SfmPoints};
use crate::confined::ConfinedRoot;
use crate::{Error, Result};

/// Sub-directories (relative, `/`-separated; `""` is the directory itself) of a capture directory
/// searched, in order, for a COLMAP model by [`read_colmap`].
pub const MODEL_DIRS: [&str; 8] = [
    "",
    "sparse/0",
    "sparse",
    "colmap/sparse/0",
    "colmap/sparse",
    "colmap",
    "reconstruction",
    "colmap/reconstruction",
];

/// Which form a model directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ModelForm {
    Text,
    Binary,
}

/// Read a COLMAP model, text or binary, and locate its images.
///
/// Guaranteed: frames sorted by name, one per image of `images.txt` / `images.bin` whose file
/// exists (others are named in [`Capture::skipped`], with one warning); `points` is `Some` when
/// the points file (`points3D.txt` / `points3D.bin`, same form as the model) exists (`None` if
/// it does not), in file order. Ids may appear in any order. No pixels read. The text and binary
/// forms of one model give identical captures (every f64 bit-exact).
/// - `dir`: the model directory or a directory above it; the model (`cameras.bin` +
///   `images.bin`, or `cameras.txt` + `images.txt`) is looked for in `dir`, `dir/sparse/0`,
///   `dir/sparse`, `dir/colmap/sparse/0`, `dir/colmap/sparse`, `dir/colmap`,
///   `dir/reconstruction`, `dir/colmap/reconstruction`; the first directory holding either form
///   wins, and in it the binary form is preferred (module doc).
///   Images (`NAME` column, relative) are looked for in `dir/images`, then in `images/` inside the
///   model directory and up to three directories above it (`scene/sparse/0` → `scene/images`)
///   that lie inside the root ([`read_colmap_in`]; here `dir` itself); the first that holds the
///   first image (by name) wins, else the first that exists.
///   [`Capture::source`] is the model directory.
///
/// # Errors
/// [`Error::NotFound`] if no model is found; [`Error::Unsupported`] for a MODEL name in
/// `cameras.txt` other than the eleven COLMAP 3.8 models (module doc; naming it); for text,
/// [`Error::InvalidLine`] naming file, line and column for a malformed line, a duplicate id or an
/// unknown CAMERA_ID; for binary, [`Error::Corrupt`] (truncated file, impossible count, trailing
/// bytes) or [`Error::Invalid`] (bad value, duplicate or unknown id), naming file, record, field
/// and byte offset (an image listed twice is skipped with a warning); [`Error::Empty`] if no
/// image file exists; [`Error::Io`] reading a file.
///
/// Source: COLMAP text and binary model formats (module doc, `colmap_bin.rs`).
pub fn read_colmap(dir: &Path) -> Result<Capture> {
    read_colmap_in(&ConfinedRoot::of_input(dir)?, dir)
}

/// [`read_colmap`] with every image name, the images and masks folders and the model confined
/// to `root` ([`ConfinedRoot`]): images folders above the model are looked for only inside
/// `root`, and an image `NAME` that is absolute, climbs out of `root` or passes a symbolic link
/// leading out is refused.
/// - `root`: the input folder holding `dir` (a job's staged input).
///
/// # Errors
/// Those of [`read_colmap`], and [`Error::OutsideInput`] naming the images file and
/// its `NAME` column.
pub fn read_colmap_in(root: &ConfinedRoot, dir: &Path) -> Result<Capture> {
    let (model_dir, form) = find_model_dir(dir)?;
    root.check_inside(&model_dir, dir, "COLMAP model folder")?;
    let ParsedModel {
        cameras,
        images,
        points,
        images_path,
    } = match form {
        ModelForm::Text => read_text_model(&model_dir)?,
        ModelForm::Binary => colmap_bin::read_binary_model(&model_dir)?,
    };

    let images_dir = find_images_dir(root, dir, &model_dir, &images);
    // `masks/` in the capture folder, else beside the images folder.
    let masks = match super::masks::Masks::list(root, &dir.join("masks"))? {
        Some(m) => Some(m),
        None => match images_dir.parent() {
            Some(parent) => super::masks::Masks::list(root, &parent.join("masks"))?,
            None => None,
        },
    };
    let listed = images.len();
    let mut frames = Vec::with_capacity(listed);
    let mut skipped = Skipped::default();
    for image in images {
        let image_path = root.resolve(&images_path, "NAME", &images_dir, &image.name)?;
        if !image_path.is_file() {
            skipped.push(IMAGE_MISSING, image.name);
            continue;
        }
        let world_to_camera = match image.world_to_camera {
            Ok(pose) => pose,
            Err(defect) => {
                skipped.push(defect.reason(), image.name);
                continue;
            }
        };
        let (intrinsics, distortion) = match cameras.get(&image.camera_id) {
            Some(Ok(camera)) => *camera,
            Some(Err(fault)) => {
                skipped.push(
                    format!("camera {} invalid: {fault}", image.camera_id),
                    image.name,
                );
                continue;
            }
            None => {
                skipped.push(camera_unknown(&images_path, image.camera_id), image.name);
                continue;
            }
        };
        let mask_path = masks.as_ref().and_then(|m| m.find(&image.name));
        frames.push(Frame {
            name: image.name,
            image_path,
            intrinsics,
            distortion,
            world_to_camera,
            depth_bounds: None,
            mask_path,
            split: None,
        });
    }
    if let Some(m) = &masks {
        m.warn_unmasked(
            frames
                .iter()
                .filter(|f| f.mask_path.is_none())
                .map(|f| f.name.as_str()),
        );
    }
    skipped.warn(&images_path, listed);
    if frames.is_empty() {
        return Err(no_frames(&images_path, &images_dir, listed, &skipped));
    }
    let mut skipped_names = skipped.names();
    skipped_names.extend(sort_frames(&images_path, &mut frames, listed));
    let points_name = match form {
        ModelForm::Text => "points3D.txt",
        ModelForm::Binary => "points3D.bin",
    };
    let points_file = points.as_ref().map(|_| model_file(&model_dir, points_name));
    Ok(Capture {
        source: model_dir,
        frames,
        points,
        skipped: skipped_names,
        pose_files: vec![images_path],
        points_file,
    })
}

/// The reason an image whose file does not exist is skipped for.
const IMAGE_MISSING: &str = "image file missing";

/// The reason an image whose CAMERA_ID the cameras file does not list is skipped for: one bad id
/// among many images is one bad view, not a broken model (issue 44 rule 3).
fn camera_unknown(images_path: &Path, id: u32) -> String {
    let cameras = match images_path.extension().and_then(|e| e.to_str()) {
        Some("bin") => "cameras.bin",
        _ => "cameras.txt",
    };
    format!("CAMERA_ID {id} not listed in {cameras}")
}

/// [`Error::Empty`] for a model none of whose `listed` images could be used, naming each.
fn no_frames(images_path: &Path, images_dir: &Path, listed: usize, skipped: &Skipped) -> Error {
    let file = images_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let reason = if listed == 0 {
        format!("{file} lists no images")
    } else if skipped.count(IMAGE_MISSING) == listed {
        format!(
            "all {listed} images listed are missing from {} (first: `{}`); put the images \
             in an `images` directory next to the model",
            images_dir.display(),
            skipped.names()[0]
        )
    } else {
        format!(
            "all {listed} images listed were skipped: {}",
            skipped.listing()
        )
    };
    Error::Empty {
        path: images_path.to_path_buf(),
        what: "frames",
        reason,
    }
}

/// Parse the text model in `model_dir` (`points3D.txt` optional).
fn read_text_model(model_dir: &Path) -> Result<ParsedModel> {
    let cameras_path = model_file(model_dir, "cameras.txt");
    let images_path = model_file(model_dir, "images.txt");
    let points_path = model_file(model_dir, "points3D.txt");
    let cameras = parse_cameras(&cameras_path, &read_text(&cameras_path)?)?;
    let images = parse_images(&images_path, &read_text(&images_path)?)?;
    let points = if points_path.is_file() {
        Some(parse_points(&points_path, &read_text(&points_path)?)?)
    } else {
        None
    };
    Ok(ParsedModel {
        cameras,
        images,
        points,
        images_path,
    })
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// First of [`MODEL_DIRS`] under `dir` holding a model (`cameras.bin` + `images.bin`, or
/// `cameras.txt` + `images.txt`), and its form; binary wins within one directory.
pub(super) fn find_model_dir(dir: &Path) -> Result<(PathBuf, ModelForm)> {
    let candidates = MODEL_DIRS.iter().map(|sub| {
        if sub.is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(sub)
        }
    });
    for candidate in candidates {
        let has = |a: &str, b: &str| {
            model_file(&candidate, a).is_file() && model_file(&candidate, b).is_file()
        };
        if has("cameras.bin", "images.bin") {
            return Ok((candidate, ModelForm::Binary));
        }
        if has("cameras.txt", "images.txt") {
            return Ok((candidate, ModelForm::Text));
        }
    }
    Err(Error::NotFound {
        path: dir.to_path_buf(),
        what: "capture: transforms.json, or a COLMAP model (cameras.bin + images.bin or \
               cameras.txt + images.txt) in the directory, sparse/0, sparse, colmap/sparse/0, \
               colmap/sparse, colmap, reconstruction or colmap/reconstruction",
    })
}

/// Images directory for a model: see [`read_colmap`]; only folders inside `root` are candidates.
fn find_images_dir(
    root: &ConfinedRoot,
    dir: &Path,
    model_dir: &Path,
    images: &[ImageEntry],
) -> PathBuf {
    let mut candidates = vec![dir.join("images")];
    candidates.extend(
        model_dir
            .ancestors()
            .take(4)
            .filter(|a| root.contains(a))
            .map(|a| a.join("images")),
    );
    let first = images.iter().map(|i| i.name.as_str()).min();
    if let Some(first) = first
        && let Some(found) = candidates.iter().find(|c| c.join(first).is_file())
    {
        return found.clone();
    }
    candidates
        .iter()
        .find(|c| c.is_dir())
        .unwrap_or(&candidates[0])
        .clone()
}

/// Data lines of a COLMAP text file: (1-based line number, trimmed text), skipping blank lines
/// and `#` comments.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// One text line being parsed, for errors that name file, line and column.
struct Line<'a> {
    path: &'a Path,
    number: usize,
    fields: Vec<&'a str>,
}

impl<'a> Line<'a> {
    fn new(path: &'a Path, number: usize, text: &'a str) -> Line<'a> {
        Line {
            path,
            number,
            fields: text.split_whitespace().collect(),
        }
    }

    fn error(&self, field: &str, expected: &str, found: String) -> Error {
        Error::InvalidLine {
            path: self.path.to_path_buf(),
            line: self.number,
            field: field.to_string(),
            expected: expected.to_string(),
            found,
        }
    }

    /// Require at least `n` whitespace-separated fields, naming the first missing column.
    fn require(&self, n: usize, columns: &[&str]) -> Result<()> {
        if self.fields.len() < n {
            let missing = columns.get(self.fields.len()).copied().unwrap_or("(field)");
            return Err(self.error(
                missing,
                &format!("{n} fields ({})", columns.join(" ")),
                format!("{} fields", self.fields.len()),
            ));
        }
        Ok(())
    }

    fn parse<T: std::str::FromStr>(&self, index: usize, column: &str, expected: &str) -> Result<T> {
        let raw = self.fields.get(index).copied().unwrap_or("");
        raw.parse()
            .map_err(|_| self.error(column, expected, format!("`{raw}`")))
    }

    fn finite(&self, index: usize, column: &str) -> Result<f64> {
        let v: f64 = self.parse(index, column, "a finite number")?;
        if !v.is_finite() {
            return Err(self.error(column, "a finite number", format!("`{v}`")));
        }
        Ok(v)
    }
}

/// `cameras.txt`: CAMERA_ID MODEL WIDTH HEIGHT PARAMS[] → intrinsics and distortion by id.
fn parse_cameras(path: &Path, text: &str) -> Result<HashMap<u32, CameraEntry>> {
    let columns = ["CAMERA_ID", "MODEL", "WIDTH", "HEIGHT", "PARAMS[]"];
    let mut cameras = HashMap::new();
    for (number, text) in data_lines(text) {
        let line = Line::new(path, number, text);
        line.require(4, &columns)?;
        let id: u32 = line.parse(0, "CAMERA_ID", "a camera id (unsigned integer)")?;
        let model = line.fields[1];
        let Some(names) = model_params(model) else {
            return Err(unsupported_model(
                path,
                format!("MODEL (line {number})"),
                format!("camera model {model}"),
            ));
        };
        let width: u64 = line.parse(2, "WIDTH", "a width in pixels (positive integer)")?;
        let height: u64 = line.parse(3, "HEIGHT", "a height in pixels (positive integer)")?;
        let mut params = Vec::with_capacity(line.fields.len() - 4);
        for k in 4..line.fields.len() {
            let column = names.get(k - 4).copied().unwrap_or("PARAMS[]");
            params.push(line.parse::<f64>(k, column, "a finite number")?);
        }
        let camera = camera_from_model(model, width, height, &params)
            .map_err(|f| line.error(f.field, &f.expected, f.found).to_string());
        if cameras.insert(id, camera).is_some() {
            return Err(line.error("CAMERA_ID", "each camera id once", format!("{id} again")));
        }
    }
    Ok(cameras)
}

/// `images.txt`: per image a line `IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME` followed by one
/// POINTS2D line, which may be empty (read as COLMAP's `ReadImagesText` does: the line right after
/// an image line, whatever it holds), except that a line in the POINTS2D place that reads as an
/// image line ([`looks_like_image_line`]) is read as the next image: some exporters leave the
/// POINTS2D lines out, and reading every other image as point data would silently lose half the
/// views. That, and an image count other than the header's, is warned about ([`warn_layout`]).
/// NAME is the rest of the line (may contain spaces).
fn parse_images(path: &Path, text: &str) -> Result<Vec<ImageEntry>> {
    let columns = [
        "IMAGE_ID",
        "QW",
        "QX",
        "QY",
        "QZ",
        "TX",
        "TY",
        "TZ",
        "CAMERA_ID",
        "NAME",
    ];
    let mut images = Vec::new();
    let mut ids = HashMap::new();
    let mut no_points2d = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, raw)) = lines.next() {
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let number = i + 1;
        let line = Line::new(path, number, text);
        line.require(10, &columns)?;
        let id: u32 = line.parse(0, "IMAGE_ID", "an image id (unsigned integer)")?;
        let mut q = [0.0; 4];
        for (k, column) in ["QW", "QX", "QY", "QZ"].into_iter().enumerate() {
            q[k] = line.parse(1 + k, column, "a number")?;
        }
        let mut t = [0.0; 3];
        for (k, column) in ["TX", "TY", "TZ"].into_iter().enumerate() {
            t[k] = line.parse(5 + k, column, "a number")?;
        }
        let camera_id: u32 = line.parse(8, "CAMERA_ID", "a camera id (unsigned integer)")?;
        let name = image_name(rest_after_fields(text, 9));
        let world_to_camera = pose_from_colmap(q, t);
        if let Some(previous) = ids.insert(id, number) {
            return Err(line.error(
                "IMAGE_ID",
                "each image id once",
                format!("{id}, also on line {previous}"),
            ));
        }
        images.push(ImageEntry {
            name,
            camera_id,
            world_to_camera,
        });
        // The POINTS2D line (2D observations; not needed here), unless it is the next image.
        match lines.peek() {
            Some((_, next)) if looks_like_image_line(next) => no_points2d.push(number),
            _ => {
                lines.next();
            }
        }
    }
    warn_layout(path, text, images.len(), &no_points2d);
    Ok(images)
}

/// Whether `line` reads as an image line rather than a POINTS2D line: at least 10 fields, an
/// integer IMAGE_ID, seven numbers and an integer CAMERA_ID, and a field count that is no whole
/// number of POINTS2D triples (X Y POINT3D_ID), so it cannot be point data.
fn looks_like_image_line(line: &str) -> bool {
    let f: Vec<&str> = line.split_whitespace().collect();
    f.len() >= 10
        && !f.len().is_multiple_of(3)
        && f[0].parse::<u32>().is_ok()
        && f[1..8].iter().all(|v| v.parse::<f64>().is_ok())
        && f[8].parse::<u32>().is_ok()
}

/// One warning naming `path` when image lines had no POINTS2D line after them (`lines`: the
/// image lines, 1-based), and one when the header comment `# Number of images: N` disagrees with
/// the `read` count: either means the file was not written the way COLMAP writes it, and the user
/// should know which images Kiln took from it.
fn warn_layout(path: &Path, text: &str, read: usize, lines: &[usize]) {
    if let Some(first) = lines.first() {
        tracing::warn!(
            path = %path.display(),
            "{}: images.txt has no POINTS2D line after {} image lines (first: line {first}); \
             read each such next line as the next image",
            path.display(),
            lines.len()
        );
    }
    let header = text
        .lines()
        .take_while(|l| l.trim_start().starts_with('#'))
        .find_map(|l| l.trim_start().strip_prefix("# Number of images:"))
        .and_then(|rest| rest.split(',').next()?.trim().parse::<usize>().ok());
    if let Some(stated) = header.filter(|n| *n != read) {
        tracing::warn!(
            path = %path.display(),
            "{}: header says `# Number of images: {stated}` but {read} image lines were read; \
             check the file",
            path.display()
        );
    }
}

/// The text after the first `n` whitespace-separated fields of `line`, trimmed.
fn rest_after_fields(line: &str, n: usize) -> &str {
    let mut rest = line.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = rest[end..].trim_start();
    }
    rest.trim_end()
}

/// `points3D.txt`: POINT3D_ID X Y Z R G B ERROR TRACK[] → positions and colours, file order.
fn parse_points(path: &Path, text: &str) -> Result<SfmPoints> {
    let columns = [
        "POINT3D_ID",
        "X",
        "Y",
        "Z",
        "R",
        "G",
        "B",
        "ERROR",
        "TRACK[]",
    ];
    let mut points = SfmPoints::default();
    let mut ids = HashMap::new();
    for (number, text) in data_lines(text) {
        let line = Line::new(path, number, text);
        line.require(7, &columns)?;
        let id: u64 = line.parse(0, "POINT3D_ID", "a point id (unsigned integer)")?;
        let mut xyz = [0.0; 3];
        for (k, column) in ["X", "Y", "Z"].into_iter().enumerate() {
            xyz[k] = line.finite(1 + k, column)?;
        }
        let mut rgb = [0_u8; 3];
        for (k, column) in ["R", "G", "B"].into_iter().enumerate() {
            rgb[k] = line.parse(4 + k, column, "an 8-bit colour value 0..=255")?;
        }
        if let Some(previous) = ids.insert(id, number) {
            return Err(line.error(
                "POINT3D_ID",
                "each point id once",
                format!("{id}, also on line {previous}"),
            ));
        }
        points.positions.push(xyz);
        points.colors.push(rgb);
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::distortion::Distortion;
    use crate::capture::intrinsics::Intrinsics;
    use crate::capture::test_dataset;

    fn maupertuis() -> Capture {
        read_colmap(&test_dataset("capture-maupertuis-colmap")).unwrap()
    }

    #[test]
    fn maupertuis_reads_four_frames_sorted_with_simple_pinhole() {
        let capture = maupertuis();
        let names: Vec<&str> = capture.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["00.jpg", "01.jpg", "02.jpg", "03.jpg"]);
        assert!(capture.skipped.is_empty());
        assert!(capture.source.ends_with("colmap/reconstruction"));
        for frame in &capture.frames {
            assert!(frame.image_path.is_file());
            assert!(
                frame
                    .image_path
                    .parent()
                    .unwrap()
                    .ends_with("colmap/images")
            );
            assert_eq!(
                frame.intrinsics,
                Intrinsics {
                    fx: 1847.53,
                    fy: 1847.53,
                    cx: 959.5,
                    cy: 539.5,
                    width: 1919,
                    height: 1079,
                }
            );
            assert_eq!(frame.distortion, Distortion::None);
        }
    }

    #[test]
    fn maupertuis_points_count_equals_point_lines() {
        let capture = maupertuis();
        let text = std::fs::read_to_string(capture.source.join("points3D.txt")).unwrap();
        let lines = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty());
        let n = lines.count();
        assert_eq!(n, 1039);
        let points = capture.points.unwrap();
        assert_eq!(points.positions.len(), n);
        assert_eq!(points.colors.len(), n);
        // First data line: `708 -2.39675 4.62278 13.2759 57 57 49 …`.
        assert_eq!(points.positions[0], [-2.39675, 4.62278, 13.2759]);
        assert_eq!(points.colors[0], [57, 57, 49]);
    }

    #[test]
    fn maupertuis_pose_comes_from_quaternion_and_translation() {
        let capture = maupertuis();
        // images.txt: `1 0.998245 -0.000889039 -0.0384732 -0.045019 3.24777 -2.58119
        // -0.0457181 1 00.jpg`; R hand-computed from the normalised quaternion.
        let m = capture.frames[0].world_to_camera;
        assert_eq!(capture.frames[0].name, "00.jpg");
        let want_r = [
            [0.992986210427371, 0.08994832258967987, -0.07673125285300453],
            [
                -0.08981150599372138,
                0.9959450016111242,
                0.00523900343170764,
            ],
            [
                0.07689134731703284,
                0.001689091211446007,
                0.9970380472573004,
            ],
        ];
        for r in 0..3 {
            for c in 0..3 {
                assert!((m[r][c] - want_r[r][c]).abs() < 1e-12, "R[{r}][{c}]");
            }
        }
        assert_eq!([m[0][3], m[1][3], m[2][3]], [3.24777, -2.58119, -0.0457181]);
        assert_eq!(m[3], [0.0, 0.0, 0.0, 1.0]);
        for frame in &capture.frames {
            let (err, det) = crate::capture::pose::rotation_error(&frame.world_to_camera);
            assert!(
                err < 1e-12 && (det - 1.0).abs() < 1e-12,
                "{}: {err} {det}",
                frame.name
            );
        }
    }

    fn model(dir: &Path, cameras: &str, images: &str, points: &str) {
        std::fs::write(dir.join("cameras.txt"), cameras).unwrap();
        std::fs::write(dir.join("images.txt"), images).unwrap();
        std::fs::write(dir.join("points3D.txt"), points).unwrap();
    }

    fn image_file(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"not decoded by the reader").unwrap();
    }

    const CAMERAS: &str =
        "# c\n1 PINHOLE 40 30 50 51 20 15\n2 OPENCV 40 30 50 51 20 15 0.1 0.2 0.3 0.4\n";

    #[test]
    fn model_file_names_match_without_regard_to_case() {
        // An export with `Cameras.txt`, `IMAGES.TXT` and `points3d.txt` (lower-case d): every
        // file is found, and the two points are read rather than silently dropped.
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse/0");
        std::fs::create_dir_all(&sparse).unwrap();
        std::fs::write(sparse.join("Cameras.txt"), CAMERAS).unwrap();
        std::fs::write(sparse.join("IMAGES.TXT"), "1 1 0 0 0 0 0 0 1 a.png\n\n").unwrap();
        std::fs::write(
            sparse.join("points3d.txt"),
            "1 0.5 0.25 2 255 0 0 0.1\n2 -1 0 3 0 255 0 0.2\n",
        )
        .unwrap();
        image_file(&dir.path().join("images/a.png"));
        let capture = read_colmap(dir.path()).unwrap();
        assert_eq!(capture.frames.len(), 1);
        let points = capture.points.expect("points3d.txt read");
        assert_eq!(points.positions, vec![[0.5, 0.25, 2.0], [-1.0, 0.0, 3.0]]);
    }

    #[test]
    fn colmap_reads_ids_in_any_order_with_empty_points2d_lines() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse/0");
        std::fs::create_dir_all(&sparse).unwrap();
        let images = "# header\n\
            7 1 0 0 0 1 2 3 2 b.png\n\
            \n\
            3 1 0 0 0 4 5 6 1 a.png\n\
            1.0 2.0 -1\n";
        model(&sparse, CAMERAS, images, "");
        image_file(&dir.path().join("images/a.png"));
        image_file(&dir.path().join("images/b.png"));
        let capture = read_colmap(dir.path()).unwrap();
        assert_eq!(capture.source, sparse);
        assert_eq!(capture.frames.len(), 2);
        let (a, b) = (&capture.frames[0], &capture.frames[1]);
        assert_eq!((a.name.as_str(), b.name.as_str()), ("a.png", "b.png"));
        assert_eq!(a.distortion, Distortion::None);
        assert_eq!(
            b.distortion,
            Distortion::OpenCv {
                k1: 0.1,
                k2: 0.2,
                p1: 0.3,
                p2: 0.4
            }
        );
        assert_eq!((a.intrinsics.fx, a.intrinsics.fy), (50.0, 51.0));
        assert_eq!(b.world_to_camera[2][3], 3.0);
        assert_eq!(capture.points, Some(SfmPoints::default()));
    }

    #[test]
    fn colmap_reads_radial_models() {
        let dir = tempfile::tempdir().unwrap();
        let cameras = "1 SIMPLE_RADIAL 40 30 50 20 15 -0.1\n2 RADIAL 40 30 50 20 15 0.1 0.2\n";
        let images = "1 1 0 0 0 0 0 0 1 a.png\n\n2 1 0 0 0 0 0 0 2 b.png\n\n";
        model(dir.path(), cameras, images, "");
        image_file(&dir.path().join("images/a.png"));
        image_file(&dir.path().join("images/b.png"));
        let capture = read_colmap(dir.path()).unwrap();
        assert_eq!(
            capture.frames[0].distortion,
            Distortion::SimpleRadial { k: -0.1 }
        );
        assert_eq!(
            capture.frames[1].distortion,
            Distortion::Radial { k1: 0.1, k2: 0.2 }
        );
    }

    #[test]
    fn colmap_reads_every_fisheye_and_full_model() {
        let dir = tempfile::tempdir().unwrap();
        let cameras = "\
            1 OPENCV_FISHEYE 40 30 50 51 20 15 0.1 -0.2 0.03 -0.04\n\
            2 FULL_OPENCV 40 30 50 51 20 15 0.1 -0.2 0.003 -0.004 0.05 -0.06 0.07 -0.08\n\
            3 FOV 40 30 50 51 20 15 0.9\n\
            4 SIMPLE_RADIAL_FISHEYE 40 30 50 20 15 0.25\n\
            5 RADIAL_FISHEYE 40 30 50 20 15 0.25 -0.5\n\
            6 THIN_PRISM_FISHEYE 40 30 50 51 20 15 0.1 -0.2 0.003 -0.004 0.05 -0.06 0.007 -0.008\n";
        let mut images = String::new();
        for id in 1..=6 {
            images += &format!("{id} 1 0 0 0 0 0 0 {id} {id}.png\n\n");
            image_file(&dir.path().join(format!("images/{id}.png")));
        }
        model(dir.path(), cameras, &images, "");
        let capture = read_colmap(dir.path()).unwrap();
        let got: Vec<(f64, f64, f64, f64, Distortion)> = capture
            .frames
            .iter()
            .map(|f| {
                let k = f.intrinsics;
                (k.fx, k.fy, k.cx, k.cy, f.distortion)
            })
            .collect();
        let want = [
            (
                50.0,
                51.0,
                20.0,
                15.0,
                Distortion::OpenCvFisheye {
                    k1: 0.1,
                    k2: -0.2,
                    k3: 0.03,
                    k4: -0.04,
                },
            ),
            (
                50.0,
                51.0,
                20.0,
                15.0,
                Distortion::FullOpenCv {
                    k1: 0.1,
                    k2: -0.2,
                    p1: 0.003,
                    p2: -0.004,
                    k3: 0.05,
                    k4: -0.06,
                    k5: 0.07,
                    k6: -0.08,
                },
            ),
            (50.0, 51.0, 20.0, 15.0, Distortion::Fov { omega: 0.9 }),
            (
                50.0,
                50.0,
                20.0,
                15.0,
                Distortion::SimpleRadialFisheye { k: 0.25 },
            ),
            (
                50.0,
                50.0,
                20.0,
                15.0,
                Distortion::RadialFisheye { k1: 0.25, k2: -0.5 },
            ),
            (
                50.0,
                51.0,
                20.0,
                15.0,
                Distortion::ThinPrismFisheye {
                    k1: 0.1,
                    k2: -0.2,
                    p1: 0.003,
                    p2: -0.004,
                    k3: 0.05,
                    k4: -0.06,
                    sx1: 0.007,
                    sy1: -0.008,
                },
            ),
        ];
        assert_eq!(got, want);
        // A wrong parameter count names the model's own parameter list.
        model(
            dir.path(),
            "1 THIN_PRISM_FISHEYE 40 30 50 51 20 15 0 0 0 0 0 0 0\n",
            "1 1 0 0 0 0 0 0 1 1.png\n\n",
            "",
        );
        let msg = read_colmap(dir.path()).unwrap_err().to_string();
        assert!(
            msg.contains("cameras.txt:1:") && msg.contains("12 parameters") && msg.contains("sy1"),
            "{msg}"
        );
    }

    #[test]
    fn colmap_bad_lines_are_rejected_naming_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        image_file(&dir.path().join("images/a.png"));
        let good_images = "1 1 0 0 0 0 0 0 1 a.png\n\n";
        let cases: [(&str, &str, &str, &str); 5] = [
            (
                "1 PINHOLE 40 30 50 x 20 15\n",
                good_images,
                "cameras.txt:1:",
                "`fy`",
            ),
            (
                "#\n1 PINHOLE 40 30 50 51 20\n",
                good_images,
                "cameras.txt:2:",
                "`PARAMS[]`",
            ),
            (
                "1 PINHOLE 0 30 50 51 20 15\n",
                good_images,
                "cameras.txt:1:",
                "`WIDTH`",
            ),
            (
                CAMERAS,
                "1 1 0 0 0 0 0 0 9 a.png\n\n",
                "images.txt",
                "a.png (CAMERA_ID 9 not listed in cameras.txt)",
            ),
            (
                CAMERAS,
                "1 1 0 0 0 0 0 1 a.png\n\n",
                "images.txt:1:",
                "`NAME`",
            ),
        ];
        for (cameras, images, at, field) in cases {
            model(dir.path(), cameras, images, "");
            let err = read_colmap(dir.path()).unwrap_err();
            let msg = err.to_string();
            // A line that does not parse refuses the model; a camera that parses but cannot be
            // used, or an unknown CAMERA_ID, skips its images (here all: one error naming them).
            let fatal_or_skipped = matches!(err, Error::InvalidLine { .. } | Error::Empty { .. });
            assert!(fatal_or_skipped, "{msg}");
            assert!(
                msg.contains(at) && msg.contains(field),
                "want {at} {field}: {msg}"
            );
        }
        // An unusable pose skips its image (issue 44, rule 3): with none left, one error names it.
        for (images, reason) in [
            (
                "#\n#\n1 1 0 0 nan 0 0 0 1 a.png\n\n",
                "a.png (pose not finite",
            ),
            ("1 0 0 0 0 0 0 0 1 a.png\n\n", "a.png (rotation singular"),
        ] {
            model(dir.path(), CAMERAS, images, "");
            let err = read_colmap(dir.path()).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::Empty { .. }), "{msg}");
            assert!(msg.contains(reason), "want {reason}: {msg}");
        }
        model(
            dir.path(),
            CAMERAS,
            good_images,
            "1 0 0 0 255 255 256 0.5\n",
        );
        let msg = read_colmap(dir.path()).unwrap_err().to_string();
        assert!(
            msg.contains("points3D.txt:1:") && msg.contains("`B`"),
            "{msg}"
        );
        model(
            dir.path(),
            CAMERAS,
            good_images,
            "1 0 0 0 1 2 3 0.5\n1 0 0 0 1 2 3 0.5\n",
        );
        let msg = read_colmap(dir.path()).unwrap_err().to_string();
        assert!(
            msg.contains("points3D.txt:2:") && msg.contains("line 1"),
            "{msg}"
        );
    }

    #[test]
    fn colmap_unsupported_camera_model_is_named() {
        let dir = tempfile::tempdir().unwrap();
        model(
            dir.path(),
            // A model of later COLMAP versions (id 15), which Kiln does not convert.
            "1 FISHEYE 40 30 50 51 20 15\n",
            "1 1 0 0 0 0 0 0 1 a.png\n\n",
            "",
        );
        let err = read_colmap(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Unsupported { .. }), "{msg}");
        assert!(
            msg.contains("FISHEYE") && msg.contains("line 1") && msg.contains("OPENCV_FISHEYE"),
            "{msg}"
        );
    }

    #[test]
    fn colmap_with_all_images_missing_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        model(dir.path(), CAMERAS, "1 1 0 0 0 0 0 0 1 a.png\n\n", "");
        let err = read_colmap(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Empty { .. }), "{err}");
        assert!(err.to_string().contains("a.png"), "{err}");
    }

    #[test]
    fn colmap_finds_images_above_a_given_model_dir() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse/0");
        std::fs::create_dir_all(&sparse).unwrap();
        model(&sparse, CAMERAS, "1 1 0 0 0 0 0 0 1 sub dir/a b.png\n", "");
        image_file(&dir.path().join("images/sub dir/a b.png"));
        let root = ConfinedRoot::new(dir.path()).unwrap();
        let capture = read_colmap_in(&root, &sparse).unwrap();
        assert_eq!(capture.frames[0].name, "sub dir/a b.png");
        assert!(capture.frames[0].image_path.is_file());
    }
}

/// Issue 41: COLMAP image names resolve through [`ConfinedRoot`].
#[cfg(test)]
mod confinement_tests {
    use super::*;
    use crate::confined::testing::{Seeded, is_refusal, layout, model_is_inside};

    /// Property: over generated names, an `images.txt` NAME is refused exactly when it leaves
    /// the input (resolved from `images/`), naming the column; an images folder above the root
    /// is never looked in.
    #[test]
    fn image_names_are_refused_exactly_when_they_leave_the_input() {
        let (_t, root) = layout();
        std::fs::create_dir_all(root.join("images")).unwrap();
        std::fs::write(root.join("images/a.png"), b"x").unwrap();
        std::fs::write(root.join("cameras.txt"), "1 PINHOLE 40 30 50 51 20 15\n").unwrap();
        let confined = ConfinedRoot::new(&root).unwrap();
        let mut g = Seeded(4105);
        for case in 0..300 {
            let w = g.path();
            let images = format!("1 1 0 0 0 0 0 0 1 {w}\n\n");
            std::fs::write(root.join("images.txt"), images).unwrap();
            let got = read_colmap_in(&confined, &root);
            let refused = got.as_ref().err().is_some_and(|e| is_refusal(e, "NAME"));
            let inside = model_is_inside(&root, &["images"], &w);
            assert_eq!(
                refused,
                !inside,
                "case {case}: NAME `{w}` → {:?}",
                got.err()
            );
        }
    }
}
