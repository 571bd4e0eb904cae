//! nerfstudio / instant-ngp `transforms*.json` captures (also the NeRF-synthetic "Blender" layout).
//!
//! Sources: nerfstudio data conventions (docs "Data conventions" and
//! `nerfstudio/data/dataparsers/nerfstudio_dataparser.py`: keys `fl_x fl_y cx cy w h k1 k2 k3 k4
//! p1 p2 camera_model`, per-frame overrides); instant-ngp `docs/nerf_dataset_tips.md` and
//! `src/nerf_loader.cu` (`camera_angle_x`, `camera_angle_y`); NeRF (Mildenhall et al. 2020)
//! `load_blender.py` (`transform_matrix` is camera-to-world with the OpenGL camera axes).
//!
//! `transform_matrix` is an OpenGL/NeRF camera_to_world (camera x right, y up, z back). It becomes
//! an OpenCV world_to_camera by negating the camera y and z axes (columns 1 and 2 of the
//! rotation) and taking the rigid inverse `[Rᵀ, −Rᵀt]`. The world frame is kept as the file has
//! it (instant-ngp's own internal axis swap and 0.33 scale are not applied).
//!
//! NaN/Inf: JSON has no NaN, but Python's `json.dump` writes `NaN`/`Infinity`; such a file is read
//! with those tokens as non-finite numbers. A frame whose matrix is then not finite, or whose
//! rotation is singular, mirrored or not rigid, is skipped (listed in [`Capture::skipped`], one
//! warning per reason; issue 44 rule 3). A non-finite intrinsic is an error naming the key.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::distortion::Distortion;
use super::frames::{Skipped, sort_frames};
use super::image::image_size;
use super::intrinsics::Intrinsics;
use super::masks::Masks;
use super::model::{Capture, Frame, Split};
use super::point_cloud::read_point_cloud_ply;
use super::pose::{flip_yz_axes, pose_defect, rigid_inverse};
use crate::confined::ConfinedRoot;
use crate::{Error, Result};

/// Extensions tried, in order, when a `file_path` has none (NeRF-synthetic writes `./train/r_0`).
const IMAGE_EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "PNG", "JPG"];

/// Read a nerfstudio / instant-ngp `transforms*.json` capture.
///
/// Guaranteed: frames sorted by name, one per listed frame whose image exists and whose matrix is
/// finite; the others are named in [`Capture::skipped`] and one warning per reason is logged.
/// `points` are read from the PLY named by `ply_file_path` (nerfstudio; relative to the JSON, in
/// the poses' world frame), else `None`. Frames listed in `train_filenames` / `val_filenames` /
/// `test_filenames` get that [`Frame::split`]. No pixels are decoded; an image header is read
/// only when `w`/`h` are absent.
/// - `json_path`: the JSON file. Keys used (top level, each overridable per frame):
///   `fl_x`, `fl_y` (pixels; else `fx = 0.5·w / tan(camera_angle_x / 2)` and likewise `fy` from
///   `camera_angle_y`, else `fy = fx`), `cx`, `cy` (pixels from the top-left image corner;
///   default `w/2`, `h/2`), `w`, `h` (pixels; default: the first existing image's header size),
///   `k1`, `k2`, `p1`, `p2` (OpenCV distortion; [`Distortion::OpenCv`] if any is present, missing
///   ones 0), `camera_model` (`OPENCV` default, `PINHOLE`, or `OPENCV_FISHEYE` with k1–k4). Per frame: `file_path` (relative to
///   the JSON's directory; if it has no extension `.png`, `.jpg`, `.jpeg` are tried) and
///   `transform_matrix` (4×4 or 3×4 rows, OpenGL camera_to_world).
///
/// # Errors
/// [`Error::NotFound`] / [`Error::Io`] reading the file; [`Error::Corrupt`] for malformed JSON
/// (with line and column); [`Error::Invalid`] naming the key (e.g. `frames` missing or empty,
/// `frames[3].transform_matrix` not 4×4 or not rigid, `fl_x` not a positive number);
/// [`Error::Unsupported`] for `camera_model` other than OPENCV/PINHOLE/OPENCV_FISHEYE, non-zero
/// `k3`/`k4` with OPENCV, or non-zero `p1`/`p2` with OPENCV_FISHEYE;
/// [`Error::Empty`] naming the file when every frame was skipped; [`Error::Image`] if an image
/// header has to be read and cannot be.
///
/// Source: see the module doc (nerfstudio, instant-ngp, NeRF `load_blender.py`).
pub fn read_transforms(json_path: &Path) -> Result<Capture> {
    read_transforms_in(&ConfinedRoot::of_input(json_path)?, json_path)
}

/// [`read_transforms`] with every path the JSON names (`file_path`, `mask_path`,
/// `ply_file_path`, the `masks/` folder's files) confined to `root` ([`ConfinedRoot`]): a path
/// that is absolute, climbs out of `root` or passes a symbolic link leading out is refused.
/// - `root`: the input folder holding `json_path` (a job's staged input).
///
/// # Errors
/// Those of [`read_transforms`], and [`Error::OutsideInput`] naming the field
/// (`frames[3].file_path`, `frames[3].mask_path`, `ply_file_path`, `masks/`).
pub fn read_transforms_in(root: &ConfinedRoot, json_path: &Path) -> Result<Capture> {
    match read_transforms_part(root, json_path)? {
        (_, Some(all_skipped)) => Err(all_skipped),
        (capture, None) => Ok(capture),
    }
}

/// [`read_transforms_in`] for one file of a split set: when every frame of this file was skipped,
/// a capture without frames (its skipped frames named) and the [`Error::Empty`] that a file read
/// alone gives, so the set can go on with its other files (issue 44, rule 3). The warnings are
/// logged either way.
///
/// # Errors
/// Those of [`read_transforms_in`] but [`Error::Empty`].
pub(super) fn read_transforms_part(
    root: &ConfinedRoot,
    json_path: &Path,
) -> Result<(Capture, Option<Error>)> {
    let text = std::fs::read_to_string(json_path).map_err(|e| Error::io(json_path, e))?;
    let root_keys = parse_json(json_path, &text)?;
    let Value::Object(root_keys) = root_keys else {
        return Err(invalid(
            json_path,
            "(root)",
            "a JSON object",
            kind(&root_keys),
        ));
    };
    let frames = frames_array(json_path, &root_keys)?;
    let base_dir = json_path.parent().unwrap_or(Path::new("."));
    let confined = root;
    let mut reader = FrameReader {
        json_path,
        base_dir,
        root: confined,
        global: CameraKeys::parse(json_path, &root_keys, "")?,
        masks: Masks::list(confined, &base_dir.join("masks"))?,
        header_size: None,
        skipped: SkippedFrames::default(),
    };
    let mut out = Vec::with_capacity(frames.len());
    for (index, value) in frames.iter().enumerate() {
        if let Some(frame) = reader.frame(index, value)? {
            out.push(frame);
        }
    }
    let skipped = reader.skipped;
    skipped.skipped.warn(json_path, frames.len());
    if out.is_empty() {
        let empty = skipped.all_skipped(json_path, base_dir, frames.len());
        let capture = Capture {
            source: json_path.to_path_buf(),
            frames: out,
            points: None,
            skipped: skipped.skipped.names(),
            pose_files: vec![json_path.to_path_buf()],
            points_file: None,
        };
        return Ok((capture, Some(empty)));
    }
    let mut skipped_names = skipped.skipped.names();
    skipped_names.extend(sort_frames(json_path, &mut out, frames.len()));
    assign_listed_splits(json_path, &root_keys, &mut out)?;
    let (points, points_file) = match initial_points_file(confined, json_path, &root_keys)? {
        Some(file) => (Some(read_point_cloud_ply(&file)?), Some(file)),
        None => (None, None),
    };
    Ok((
        Capture {
            source: json_path.to_path_buf(),
            frames: out,
            points,
            skipped: skipped_names,
            pose_files: vec![json_path.to_path_buf()],
            points_file,
        },
        None,
    ))
}

/// The `frames` array: present, an array, not empty.
fn frames_array<'r>(json_path: &Path, root: &'r Map<String, Value>) -> Result<&'r Vec<Value>> {
    match root.get("frames") {
        None => Err(invalid(
            json_path,
            "frames",
            "an array of frames",
            "no `frames` key".into(),
        )),
        Some(Value::Array(a)) if a.is_empty() => Err(invalid(
            json_path,
            "frames",
            "a non-empty array of frames",
            "an empty array".into(),
        )),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(invalid(
            json_path,
            "frames",
            "an array of frames",
            kind(other),
        )),
    }
}

/// The reason a frame whose image file does not exist is skipped for.
const IMAGE_MISSING: &str = "image file missing";

/// Frames listed but left out, by reason, and the first missing image's path (for the error when
/// every frame is skipped).
#[derive(Default)]
struct SkippedFrames {
    skipped: Skipped,
    first_missing: Option<PathBuf>,
}

impl SkippedFrames {
    /// [`Error::Empty`]: every listed frame was skipped, with how many for each reason, and each
    /// frame named.
    fn all_skipped(&self, json_path: &Path, base_dir: &Path, listed: usize) -> Error {
        let mut reasons = Vec::new();
        let missing = self.skipped.count(IMAGE_MISSING);
        if missing > 0 {
            let first = self.first_missing.as_deref().unwrap_or(base_dir);
            reasons.push(format!(
                "{missing} image files missing (first: {})",
                first.display()
            ));
        }
        let bad_poses = listed - missing;
        if bad_poses > 0 {
            reasons.push(format!("{bad_poses} unusable transform_matrix"));
        }
        Error::Empty {
            path: json_path.to_path_buf(),
            what: "frames",
            reason: format!(
                "all {listed} listed frames were skipped: {}; check `file_path` against the image \
                 files and each `transform_matrix` (skipped: {})",
                reasons.join(", "),
                self.skipped.listing()
            ),
        }
    }
}

/// Reads the frames of one transforms.json in turn: the file's camera keys, its `masks/`
/// folder, the image size read from the first image's header when a frame needs it (at most
/// once), and the frames skipped so far.
struct FrameReader<'a> {
    json_path: &'a Path,
    base_dir: &'a Path,
    /// Every path a frame names resolves inside it.
    root: &'a ConfinedRoot,
    global: CameraKeys,
    masks: Option<Masks>,
    header_size: Option<(u32, u32)>,
    skipped: SkippedFrames,
}

impl FrameReader<'_> {
    /// `frames[index]` as a [`Frame`], or `None` when it is skipped (image missing, matrix not
    /// finite).
    fn frame(&mut self, index: usize, value: &Value) -> Result<Option<Frame>> {
        let (json_path, base_dir) = (self.json_path, self.base_dir);
        let prefix = format!("frames[{index}]");
        let Value::Object(frame) = value else {
            return Err(invalid(json_path, &prefix, "a JSON object", kind(value)));
        };
        let file_path = frame_file_path(json_path, &prefix, frame)?;
        let camera_to_world_gl = parse_matrix(json_path, &prefix, frame)?;
        let field = format!("{prefix}.file_path");
        let given = self.root.resolve(json_path, &field, base_dir, file_path)?;
        let Some(image_path) = resolve_image(self.root, json_path, &field, given.clone())? else {
            let skipped = &mut self.skipped;
            skipped.first_missing.get_or_insert(given);
            skipped
                .skipped
                .push(IMAGE_MISSING, frame_name(file_path, None));
            return Ok(None);
        };
        let world_to_camera = match to_world_to_camera(camera_to_world_gl) {
            Ok(pose) => pose,
            Err(reason) => {
                let name = frame_name(file_path, image_path.extension());
                self.skipped.skipped.push(reason, name);
                return Ok(None);
            }
        };
        let keys = self
            .global
            .overridden_by(&CameraKeys::parse(json_path, frame, &prefix)?);
        let size = match (keys.w, keys.h) {
            (Some(w), Some(h)) => (w, h),
            (w, h) => {
                let header = match self.header_size {
                    Some(s) => s,
                    None => *self.header_size.insert(image_size(&image_path)?),
                };
                (w.unwrap_or(header.0), h.unwrap_or(header.1))
            }
        };
        Ok(Some(Frame {
            name: frame_name(file_path, image_path.extension()),
            intrinsics: keys.intrinsics(json_path, &prefix, size)?,
            distortion: keys.distortion(json_path)?,
            world_to_camera,
            mask_path: self.mask_path(&prefix, frame, file_path)?,
            image_path,
            depth_bounds: None,
            split: None,
        }))
    }

    /// nerfstudio's per-frame `mask_path` (relative to the JSON), else the `masks/` folder's.
    fn mask_path(
        &self,
        prefix: &str,
        frame: &Map<String, Value>,
        file_path: &str,
    ) -> Result<Option<PathBuf>> {
        match frame.get("mask_path") {
            Some(Value::String(s)) if !s.is_empty() => {
                let field = format!("{prefix}.mask_path");
                let p = self
                    .root
                    .resolve(self.json_path, &field, self.base_dir, s)?;
                if !p.is_file() {
                    return Err(Error::NotFound {
                        path: p,
                        what: "frame mask (`mask_path`); fix the path or remove the key",
                    });
                }
                Ok(Some(p))
            }
            Some(other) if !other.is_null() => Err(invalid(
                self.json_path,
                &format!("{prefix}.mask_path"),
                "a mask image path relative to the JSON file",
                kind(other),
            )),
            _ => Ok(self.masks.as_ref().and_then(|m| m.find(file_path))),
        }
    }
}

/// A frame's `file_path`: a non-empty string.
fn frame_file_path<'f>(
    json_path: &Path,
    prefix: &str,
    frame: &'f Map<String, Value>,
) -> Result<&'f str> {
    match frame.get("file_path") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.as_str()),
        Some(other) => Err(invalid(
            json_path,
            &format!("{prefix}.file_path"),
            "an image path relative to the JSON file",
            kind(other),
        )),
        None => Err(invalid(
            json_path,
            &format!("{prefix}.file_path"),
            "an image path relative to the JSON file",
            "no `file_path` key".into(),
        )),
    }
}

/// The split-list keys of a nerfstudio transforms.json and the split each names.
const SPLIT_LISTS: [(&str, Split); 3] = [
    ("train_filenames", Split::Train),
    ("val_filenames", Split::Val),
    ("test_filenames", Split::Test),
];

/// Tag `frames` with the splits nerfstudio's `train_filenames` / `val_filenames` /
/// `test_filenames` lists name (paths as in `file_path`, relative to the JSON). Frames in no list
/// keep `None` (training leaves them out when any list exists); entries that match no frame (an
/// image that was missing) are counted in one warning.
///
/// # Errors
/// [`Error::Invalid`] naming the key when a list is not an array of strings, or when one frame is
/// in two lists.
fn assign_listed_splits(
    json_path: &Path,
    root: &Map<String, Value>,
    frames: &mut [Frame],
) -> Result<()> {
    let mut unmatched = Vec::new();
    for (key, split) in SPLIT_LISTS {
        let Some(list) = root.get(key) else { continue };
        let Value::Array(entries) = list else {
            return Err(invalid(
                json_path,
                key,
                "an array of image paths",
                kind(list),
            ));
        };
        for (i, entry) in entries.iter().enumerate() {
            let Value::String(entry) = entry else {
                return Err(invalid(
                    json_path,
                    &format!("{key}[{i}]"),
                    "an image path",
                    kind(entry),
                ));
            };
            let wanted = frame_name(entry, None);
            let Some(frame) = frames.iter_mut().find(|f| same_image(&f.name, &wanted)) else {
                unmatched.push(entry.clone());
                continue;
            };
            match frame.split {
                Some(earlier) if earlier != split => {
                    return Err(invalid(
                        json_path,
                        &format!("{key}[{i}]"),
                        "each image in at most one of train_filenames, val_filenames, test_filenames",
                        format!("`{entry}` also in the {} list", earlier.name()),
                    ));
                }
                _ => frame.split = Some(split),
            }
        }
    }
    if !unmatched.is_empty() {
        tracing::warn!(
            path = %json_path.display(),
            count = unmatched.len(),
            "{}: {} split-list entries name no usable frame (missing image or not in `frames`), \
             first `{}`",
            json_path.display(),
            unmatched.len(),
            unmatched[0]
        );
    }
    Ok(())
}

/// A frame name and a split-list entry name the same image: equal, or equal once the frame's
/// extension (added when `file_path` had none) is dropped.
fn same_image(frame_name: &str, entry: &str) -> bool {
    frame_name == entry
        || Path::new(frame_name)
            .with_extension("")
            .to_str()
            .is_some_and(|stem| stem == entry)
}

/// The PLY named by nerfstudio's `ply_file_path` (relative to the JSON), when the key is there.
///
/// # Errors
/// [`Error::Invalid`] when the key is not a string; [`Error::NotFound`] naming the resolved path
/// when the file is missing.
fn initial_points_file(
    confined: &ConfinedRoot,
    json_path: &Path,
    root: &Map<String, Value>,
) -> Result<Option<PathBuf>> {
    let value = match root.get("ply_file_path") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(other) => {
            return Err(invalid(
                json_path,
                "ply_file_path",
                "a PLY path relative to the JSON file",
                kind(other),
            ));
        }
    };
    let base = json_path.parent().unwrap_or(Path::new("."));
    let file = confined.resolve(json_path, "ply_file_path", base, value)?;
    if !file.is_file() {
        return Err(Error::NotFound {
            path: file,
            what: "initial points named by the transforms file's `ply_file_path`; fix the path or remove the key",
        });
    }
    Ok(Some(file))
}

/// Parse JSON; on a syntax error retry with Python's `NaN`/`Infinity` tokens read as non-finite
/// numbers, and report the original error (line, column) if that fails too.
fn parse_json(path: &Path, text: &str) -> Result<Value> {
    let first = match serde_json::from_str::<Value>(text) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if let Some(patched) = replace_python_non_finite(text)
        && let Ok(v) = serde_json::from_str::<Value>(&patched)
    {
        return Ok(v);
    }
    let message = first.to_string();
    let what = match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    };
    Err(Error::Corrupt {
        path: path.to_path_buf(),
        location: format!("line {}, column {}", first.line(), first.column()),
        what: format!("invalid JSON: {what}"),
    })
}

/// Marker string standing in for a non-finite number after [`replace_python_non_finite`]
/// (decoded value; a control character, so no real JSON string collides with it by accident).
const NAN_MARKER: &str = "\u{1}kiln-nan";
/// [`NAN_MARKER`] as a JSON string literal (control characters must be escaped in JSON).
const NAN_MARKER_JSON: &str = "\"\\u0001kiln-nan\"";

/// `text` with bare `NaN`, `Infinity`, `-Infinity` tokens (outside strings) replaced by a marker
/// string that [`number`] reads as NaN; `None` if there are none.
fn replace_python_non_finite(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else {
            let rest = &text[i..];
            let token = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|t| rest.starts_with(t));
            if let Some(token) = token {
                out.push_str(NAN_MARKER_JSON);
                i += token.len();
                changed = true;
                continue;
            }
        }
        // Copy one whole UTF-8 character.
        let len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + len]);
        i += len;
    }
    changed.then_some(out)
}

/// The JSON value as f64: a number, or the non-finite marker (NaN); `None` otherwise.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if s == NAN_MARKER => Some(f64::NAN),
        Value::Null => Some(f64::NAN),
        _ => None,
    }
}

/// `transform_matrix` of one frame, padded to 4×4 (entries may be NaN or Inf: Python's
/// `json.dump` writes them; [`to_world_to_camera`] skips such a frame).
fn parse_matrix(path: &Path, prefix: &str, frame: &Map<String, Value>) -> Result<[[f64; 4]; 4]> {
    let field = format!("{prefix}.transform_matrix");
    let expected = "a 4×4 (or 3×4) array of numbers, rows first";
    let rows = match frame.get("transform_matrix") {
        Some(Value::Array(rows)) if rows.len() == 3 || rows.len() == 4 => rows,
        Some(other) => {
            let found = match other {
                Value::Array(rows) => format!("{} rows", rows.len()),
                _ => kind(other),
            };
            return Err(invalid(path, &field, expected, found));
        }
        None => {
            return Err(invalid(
                path,
                &field,
                expected,
                "no `transform_matrix` key".into(),
            ));
        }
    };
    let mut m = [
        [0.0, 0.0, 0.0, 0.0],
        [0.0; 4],
        [0.0; 4],
        [0.0, 0.0, 0.0, 1.0],
    ];
    for (r, row) in rows.iter().enumerate() {
        let row_values = match row {
            Value::Array(values) if values.len() == 4 => values,
            Value::Array(values) => {
                let found = format!("row {r} with {} entries", values.len());
                return Err(invalid(path, &field, expected, found));
            }
            other => {
                let found = format!("row {r}: {}", kind(other));
                return Err(invalid(path, &field, expected, found));
            }
        };
        for (c, v) in row_values.iter().enumerate() {
            m[r][c] = number(v)
                .ok_or_else(|| invalid(path, &format!("{field}[{r}][{c}]"), "a number", kind(v)))?;
        }
    }
    Ok(m)
}

/// The reason a frame whose matrix's last row is not `[0, 0, 0, 1]` is skipped for.
const LAST_ROW_NOT_AFFINE: &str =
    "transform_matrix last row not [0, 0, 0, 1] (written transposed?)";

/// OpenGL camera_to_world → OpenCV world_to_camera, or the reason the camera cannot be used: not
/// finite, singular, mirrored, not rigid, or a last row other than `[0, 0, 0, 1]` (one matrix
/// written transposed). Each is one bad frame among many, so the frame is skipped with a warning,
/// never fatal (issue 44 rule 3).
fn to_world_to_camera(mut m: [[f64; 4]; 4]) -> std::result::Result<[[f64; 4]; 4], &'static str> {
    if let Some(defect) = pose_defect(&m) {
        return Err(defect.reason());
    }
    if m[3] != [0.0, 0.0, 0.0, 1.0] {
        return Err(LAST_ROW_NOT_AFFINE);
    }
    flip_yz_axes(&mut m);
    Ok(rigid_inverse(&m))
}

/// Existing image file for `given` (a `file_path` already resolved inside `root`): as given,
/// else with each of [`IMAGE_EXTENSIONS`] appended when the path has no extension (that file is
/// checked against `root` too: it may be a link out).
fn resolve_image(
    root: &ConfinedRoot,
    json_path: &Path,
    field: &str,
    given: PathBuf,
) -> Result<Option<PathBuf>> {
    if given.is_file() {
        return Ok(Some(given));
    }
    if given.extension().is_some() {
        return Ok(None);
    }
    let found = IMAGE_EXTENSIONS.iter().find_map(|ext| {
        let mut s = given.clone().into_os_string();
        s.push(".");
        s.push(ext);
        let p = PathBuf::from(s);
        p.is_file().then_some(p)
    });
    if let Some(p) = &found {
        root.check_inside(p, json_path, field)?;
    }
    Ok(found)
}

/// [`Frame::name`] for a `file_path`: `/`-separated, leading `./` and a leading `images/` or
/// `images_<n>/` directory removed, plus `found_ext` when the given path had no extension.
fn frame_name(file_path: &str, found_ext: Option<&std::ffi::OsStr>) -> String {
    let mut name = file_path.replace('\\', "/");
    while let Some(rest) = name.strip_prefix("./") {
        name = rest.to_string();
    }
    if let Some((first, rest)) = name.split_once('/') {
        let is_images_dir = first == "images"
            || first
                .strip_prefix("images_")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if is_images_dir && !rest.is_empty() {
            name = rest.to_string();
        }
    }
    let has_ext = Path::new(&name).extension().is_some();
    if let (false, Some(ext)) = (has_ext, found_ext) {
        name = format!("{name}.{}", ext.to_string_lossy());
    }
    name
}

/// The camera keys of one JSON object (the root or a frame), each optional.
#[derive(Debug, Clone, Default)]
struct CameraKeys {
    fl_x: Option<f64>,
    fl_y: Option<f64>,
    cx: Option<f64>,
    cy: Option<f64>,
    w: Option<u32>,
    h: Option<u32>,
    camera_angle_x: Option<f64>,
    camera_angle_y: Option<f64>,
    k1: Option<f64>,
    k2: Option<f64>,
    k3: Option<f64>,
    k4: Option<f64>,
    p1: Option<f64>,
    p2: Option<f64>,
    camera_model: Option<String>,
    /// (key, full JSON field name such as `frames[3].fl_x`) of each key present, so errors about
    /// a merged value name the object that set it.
    fields: Vec<(&'static str, String)>,
}

impl CameraKeys {
    fn parse(path: &Path, obj: &Map<String, Value>, prefix: &str) -> Result<CameraKeys> {
        let field = |key: &str| {
            if prefix.is_empty() {
                key.to_string()
            } else {
                format!("{prefix}.{key}")
            }
        };
        let mut fields = Vec::new();
        let mut float = |key: &'static str| -> Result<Option<f64>> {
            let Some(v) = obj.get(key) else {
                return Ok(None);
            };
            let x = match v {
                Value::Number(n) => n.as_f64(),
                _ => None,
            };
            match x {
                Some(x) if x.is_finite() => {
                    fields.push((key, field(key)));
                    Ok(Some(x))
                }
                _ => Err(invalid(path, &field(key), "a finite number", kind(v))),
            }
        };
        let fl_x = float("fl_x")?;
        let fl_y = float("fl_y")?;
        let cx = float("cx")?;
        let cy = float("cy")?;
        let w = float("w")?;
        let h = float("h")?;
        let camera_angle_x = float("camera_angle_x")?;
        let camera_angle_y = float("camera_angle_y")?;
        let k1 = float("k1")?;
        let k2 = float("k2")?;
        let k3 = float("k3")?;
        let k4 = float("k4")?;
        let p1 = float("p1")?;
        let p2 = float("p2")?;
        let size = |key: &str, v: Option<f64>| -> Result<Option<u32>> {
            match v {
                None => Ok(None),
                Some(x) if x >= 1.0 && x <= f64::from(u32::MAX) && x.fract() == 0.0 => {
                    Ok(Some(x as u32))
                }
                Some(x) => Err(invalid(
                    path,
                    &field(key),
                    "a positive whole number of pixels",
                    x.to_string(),
                )),
            }
        };
        let w = size("w", w)?;
        let h = size("h", h)?;
        let camera_model = match obj.get("camera_model") {
            None => None,
            Some(Value::String(s)) => {
                fields.push(("camera_model", field("camera_model")));
                Some(s.clone())
            }
            Some(other) => {
                return Err(invalid(
                    path,
                    &field("camera_model"),
                    "a string such as \"OPENCV\"",
                    kind(other),
                ));
            }
        };
        Ok(CameraKeys {
            fl_x,
            fl_y,
            cx,
            cy,
            w,
            h,
            camera_angle_x,
            camera_angle_y,
            k1,
            k2,
            k3,
            k4,
            p1,
            p2,
            camera_model,
            fields,
        })
    }

    /// `self` (the top level) with every key `frame` sets replaced by the frame's value.
    fn overridden_by(&self, frame: &CameraKeys) -> CameraKeys {
        let mut fields = self.fields.clone();
        for (key, field) in &frame.fields {
            fields.retain(|(k, _)| k != key);
            fields.push((key, field.clone()));
        }
        CameraKeys {
            fl_x: frame.fl_x.or(self.fl_x),
            fl_y: frame.fl_y.or(self.fl_y),
            cx: frame.cx.or(self.cx),
            cy: frame.cy.or(self.cy),
            w: frame.w.or(self.w),
            h: frame.h.or(self.h),
            camera_angle_x: frame.camera_angle_x.or(self.camera_angle_x),
            camera_angle_y: frame.camera_angle_y.or(self.camera_angle_y),
            k1: frame.k1.or(self.k1),
            k2: frame.k2.or(self.k2),
            k3: frame.k3.or(self.k3),
            k4: frame.k4.or(self.k4),
            p1: frame.p1.or(self.p1),
            p2: frame.p2.or(self.p2),
            camera_model: frame.camera_model.clone().or(self.camera_model.clone()),
            fields,
        }
    }

    /// Field name (with frame prefix when the frame set it) of `key`, for error messages.
    fn field(&self, key: &str) -> String {
        self.fields
            .iter()
            .find(|(k, _)| *k == key)
            .map_or_else(|| key.to_string(), |(_, f)| f.clone())
    }

    fn intrinsics(&self, path: &Path, prefix: &str, (w, h): (u32, u32)) -> Result<Intrinsics> {
        let focal_from_angle = |side: u32, angle: f64| 0.5 * f64::from(side) / (0.5 * angle).tan();
        let fx = match (self.fl_x, self.camera_angle_x) {
            (Some(f), _) => f,
            (None, Some(a)) => focal_from_angle(w, a),
            (None, None) => {
                return Err(invalid(
                    path,
                    &format!("{prefix}.fl_x"),
                    "`fl_x` or `camera_angle_x` (top level or per frame)",
                    "neither".into(),
                ));
            }
        };
        let fy = match (self.fl_y, self.camera_angle_y) {
            (Some(f), _) => f,
            (None, Some(a)) => focal_from_angle(h, a),
            (None, None) => fx,
        };
        for (key, value) in [("fl_x", fx), ("fl_y", fy)] {
            if !(value.is_finite() && value > 0.0) {
                let key = match key {
                    "fl_x" if self.fl_x.is_none() => "camera_angle_x",
                    "fl_y" if self.fl_y.is_none() && self.camera_angle_y.is_some() => {
                        "camera_angle_y"
                    }
                    "fl_y" if self.fl_y.is_none() => "camera_angle_x",
                    k => k,
                };
                return Err(invalid(
                    path,
                    &self.field(key),
                    "a positive focal length (camera angle in (0, π) radians)",
                    self.raw(key)
                        .map_or_else(|| value.to_string(), |v| v.to_string()),
                ));
            }
        }
        Ok(Intrinsics {
            fx,
            fy,
            cx: self.cx.unwrap_or(f64::from(w) / 2.0),
            cy: self.cy.unwrap_or(f64::from(h) / 2.0),
            width: w,
            height: h,
        })
    }

    fn raw(&self, key: &str) -> Option<f64> {
        match key {
            "fl_x" => self.fl_x,
            "fl_y" => self.fl_y,
            "camera_angle_x" => self.camera_angle_x,
            "camera_angle_y" => self.camera_angle_y,
            _ => None,
        }
    }

    fn distortion(&self, path: &Path) -> Result<Distortion> {
        match self.camera_model.as_deref() {
            None | Some("OPENCV") => {}
            Some("PINHOLE") => return Ok(Distortion::None),
            Some("OPENCV_FISHEYE") => return self.fisheye(path),
            Some(other) => {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    field: self.field("camera_model"),
                    found: format!("\"{other}\""),
                    supported: "\"OPENCV\", \"PINHOLE\", \"OPENCV_FISHEYE\"".into(),
                });
            }
        }
        for (key, value) in [("k3", self.k3), ("k4", self.k4)] {
            if let Some(v) = value
                && v != 0.0
            {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    field: self.field(key),
                    found: format!("non-zero {key} = {v}"),
                    supported: "OPENCV distortion k1, k2, p1, p2 (k3, k4 absent or 0)".into(),
                });
            }
        }
        if self.k1.is_none() && self.k2.is_none() && self.p1.is_none() && self.p2.is_none() {
            return Ok(Distortion::None);
        }
        Ok(Distortion::OpenCv {
            k1: self.k1.unwrap_or(0.0),
            k2: self.k2.unwrap_or(0.0),
            p1: self.p1.unwrap_or(0.0),
            p2: self.p2.unwrap_or(0.0),
        })
    }
}

impl CameraKeys {
    /// `camera_model: "OPENCV_FISHEYE"`: the Kannala–Brandt k1–k4 of COLMAP's model of the same
    /// name (fx, fy, cx, cy, k1, k2, k3, k4), undistorted on ingest as a COLMAP fisheye is. The
    /// model has no tangential terms: non-zero p1/p2 are refused.
    fn fisheye(&self, path: &Path) -> Result<Distortion> {
        for (key, value) in [("p1", self.p1), ("p2", self.p2)] {
            if let Some(v) = value
                && v != 0.0
            {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    field: self.field(key),
                    found: format!("non-zero {key} = {v} with camera_model \"OPENCV_FISHEYE\""),
                    supported: "OPENCV_FISHEYE with k1, k2, k3, k4 (p1, p2 absent or 0)".into(),
                });
            }
        }
        Ok(Distortion::OpenCvFisheye {
            k1: self.k1.unwrap_or(0.0),
            k2: self.k2.unwrap_or(0.0),
            k3: self.k3.unwrap_or(0.0),
            k4: self.k4.unwrap_or(0.0),
        })
    }
}

fn invalid(path: &Path, field: &str, expected: &str, found: String) -> Error {
    Error::Invalid {
        path: path.to_path_buf(),
        field: field.to_string(),
        expected: expected.to_string(),
        found,
    }
}

/// Short description of a JSON value for "found …" in errors.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s == NAN_MARKER => "NaN".into(),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::test_dataset;

    fn fox() -> Capture {
        read_transforms(&test_dataset("capture-fox-instantngp").join("transforms.json")).unwrap()
    }

    #[test]
    fn fox_reads_50_of_67_frames_and_lists_the_17_missing() {
        let capture = fox();
        assert_eq!(capture.frames.len(), 50);
        let missing = [
            "0005", "0016", "0017", "0024", "0032", "0051", "0068", "0071", "0075", "0083", "0087",
            "0088", "0093", "0099", "0104", "0106", "0113",
        ];
        let want: Vec<String> = missing.iter().map(|n| format!("{n}.jpg")).collect();
        assert_eq!(capture.skipped, want);
        assert_eq!(capture.frames.len() + capture.skipped.len(), 67);
        assert!(capture.points.is_none());
        let names: Vec<&str> = capture.frames.iter().map(|f| f.name.as_str()).collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted by name");
        assert_eq!(names[0], "0001.jpg");
        assert!(capture.frames.iter().all(|f| f.image_path.is_file()));
    }

    #[test]
    fn fox_missing_images_warning_names_count_and_every_frame() {
        // The warning is emitted once per skip reason by `warn_skipped`; its text is checked here
        // (capturing tracing events is racy under the parallel test runner).
        let capture = fox();
        let path = test_dataset("capture-fox-instantngp").join("transforms.json");
        let warning = crate::capture::frames::skipped_message(
            &path,
            "image file missing",
            &capture.skipped,
            67,
        );
        assert!(warning.contains("skipping 17 of 67 frames"), "{warning}");
        assert!(warning.contains("transforms.json"), "{warning}");
        for name in &capture.skipped {
            assert!(warning.contains(name.as_str()), "{name} not in {warning}");
        }
    }

    #[test]
    fn fox_intrinsics_and_distortion_equal_the_json_values() {
        for frame in fox().frames {
            assert_eq!(
                frame.intrinsics,
                Intrinsics {
                    fx: 1375.52,
                    fy: 1374.49,
                    cx: 554.558,
                    cy: 965.268,
                    width: 1080,
                    height: 1920,
                }
            );
            assert_eq!(
                frame.distortion,
                Distortion::OpenCv {
                    k1: 0.0578421,
                    k2: -0.0805099,
                    p1: -0.000980296,
                    p2: 0.00015575,
                }
            );
        }
    }

    #[test]
    fn opencv_fisheye_cameras_keep_k1_to_k4() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"{{"fl_x": 300, "fl_y": 301, "cx": 320, "cy": 240, "w": 640, "h": 480,
            "camera_model": "OPENCV_FISHEYE", "k1": 0.05, "k2": -0.01, "k3": 0.002, "k4": -0.0003,
            "frames": [{{"file_path": "a.png", "transform_matrix": {IDENTITY}}}]}}"#
        );
        tiny_png(&dir.path().join("a.png"), 640, 480);
        let p = write(dir.path(), "transforms.json", &text);
        let capture = read_transforms(&p).unwrap();
        assert_eq!(
            capture.frames[0].distortion,
            Distortion::OpenCvFisheye {
                k1: 0.05,
                k2: -0.01,
                k3: 0.002,
                k4: -0.0003
            }
        );
    }

    #[test]
    fn fox_pose_is_opencv_world_to_camera() {
        let capture = fox();
        let frame = &capture.frames[0];
        assert_eq!(frame.name, "0001.jpg");
        let m = frame.world_to_camera;
        // images/0001.jpg transform_matrix (OpenGL camera_to_world), copied from the JSON:
        // translation column = camera centre in world.
        let centre = [3.168359405609479, -5.4794898611466945, -0.9791660699008925];
        for (r, row) in m.iter().take(3).enumerate() {
            let p = row[0] * centre[0] + row[1] * centre[1] + row[2] * centre[2] + row[3];
            assert!(p.abs() < 1e-12, "row {r}: w2c·centre = {p}");
        }
        assert_eq!(m[3], [0.0, 0.0, 0.0, 1.0]);
        // camera_center() = −Rᵀt assumes R orthonormal; the JSON's rotations are orthonormal
        // only to ~1e-6 (printed with 16 digits, but computed in f32 upstream), hence 1e-5.
        let c = frame.camera_center();
        for k in 0..3 {
            assert!((c[k] - centre[k]).abs() < 1e-5, "{c:?} vs {centre:?}");
        }
        // OpenCV +z (forward) in world = row 2 of R_w2c = −(OpenGL z column) of the JSON.
        let gl_z = [
            0.4420900262071262,
            -0.8940689141475064,
            -0.07209178487538156,
        ];
        for k in 0..3 {
            assert!((m[2][k] + gl_z[k]).abs() < 1e-15, "z axis {k}");
        }
        // OpenCV +x = OpenGL +x (column 0); OpenCV +y (down) = −(OpenGL y column).
        let gl_x = [
            0.8926439112348871,
            0.4464189982715247,
            -0.062425682580756266,
        ];
        let gl_y = [0.08799600283226543, -0.03675452191179031, 0.995442519072023];
        for k in 0..3 {
            assert!((m[0][k] - gl_x[k]).abs() < 1e-15 && (m[1][k] + gl_y[k]).abs() < 1e-15);
        }
        // The fox hangs in front of the cameras: the world origin region is in front (z > 0).
        let z_origin = m[2][3];
        assert!(z_origin > 0.0, "origin depth {z_origin}");
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tiny_png(path: &Path, w: u32, h: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        ::image::RgbImage::new(w, h).save(path).unwrap();
    }

    const IDENTITY: &str = "[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]";

    #[test]
    fn transforms_without_frames_is_rejected_naming_frames() {
        let dir = tempfile::tempdir().unwrap();
        for text in [r#"{"fl_x": 10}"#, r#"{"fl_x": 10, "frames": []}"#] {
            let p = write(dir.path(), "transforms.json", text);
            let err = read_transforms(&p).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::Invalid { .. }), "{msg}");
            assert!(
                msg.contains("`frames`") && msg.contains("transforms.json"),
                "{msg}"
            );
        }
    }

    #[test]
    fn transforms_with_all_images_missing_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"{{"fl_x": 10, "w": 4, "h": 3, "frames": [
                {{"file_path": "images/a.png", "transform_matrix": {IDENTITY}}},
                {{"file_path": "images/b", "transform_matrix": {IDENTITY}}}]}}"#
        );
        let p = write(dir.path(), "transforms.json", &text);
        let err = read_transforms(&p).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Empty { .. }), "{msg}");
        assert!(
            msg.contains("transforms.json") && msg.contains("2 image files missing"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("{}", dir.path().join("images/a.png").display())),
            "{msg}"
        );
    }

    #[test]
    fn transforms_with_corrupt_json_is_corrupt_with_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "transforms.json",
            "{\n  \"frames\": [\n    {,\n",
        );
        let err = read_transforms(&p).unwrap_err();
        let msg = err.to_string();
        match &err {
            Error::Corrupt { location, .. } => assert_eq!(location, "line 3, column 6"),
            _ => panic!("expected Corrupt, got {msg}"),
        }
        assert!(msg.contains("transforms.json"), "{msg}");
        let p = write(dir.path(), "empty.json", "");
        assert!(matches!(read_transforms(&p), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn transforms_camera_angle_and_header_size_fill_missing_keys() {
        // NeRF-synthetic style: camera_angle_x only, no w/h, file_path without extension.
        let dir = tempfile::tempdir().unwrap();
        tiny_png(&dir.path().join("train/r_0.png"), 8, 6);
        tiny_png(&dir.path().join("train/r_1.png"), 8, 6);
        let text = format!(
            r#"{{"camera_angle_x": 1.5707963267948966, "frames": [
                {{"file_path": "./train/r_1", "transform_matrix": {IDENTITY}}},
                {{"file_path": "./train/r_0", "transform_matrix": {IDENTITY}, "fl_y": 5.5}}]}}"#
        );
        let p = write(dir.path(), "transforms_train.json", &text);
        let capture = read_transforms(&p).unwrap();
        let names: Vec<&str> = capture.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["train/r_0.png", "train/r_1.png"]);
        let k0 = capture.frames[0].intrinsics;
        let k1 = capture.frames[1].intrinsics;
        // fx = 0.5·8 / tan(π/4) = 4; fy defaults to fx unless the frame overrides it.
        assert!((k1.fx - 4.0).abs() < 1e-12 && (k1.fy - 4.0).abs() < 1e-12);
        assert_eq!((k1.cx, k1.cy, k1.width, k1.height), (4.0, 3.0, 8, 6));
        assert_eq!(k0.fy, 5.5);
        assert_eq!(capture.frames[0].distortion, Distortion::None);
        // Identity OpenGL camera_to_world → OpenCV world_to_camera = diag(1, −1, −1, 1).
        let m = capture.frames[0].world_to_camera;
        assert_eq!(m[1][1], -1.0);
        assert_eq!(m[2][2], -1.0);
        assert_eq!(m[0][0], 1.0);
    }

    #[test]
    fn split_filename_lists_tag_frames_and_unlisted_frames_stay_untagged() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..4 {
            tiny_png(&dir.path().join(format!("images/f{n}.png")), 8, 6);
        }
        let frames: Vec<String> = (0..4)
            .map(|n| {
                format!(r#"{{"file_path": "images/f{n}.png", "transform_matrix": {IDENTITY}}}"#)
            })
            .collect();
        let text = format!(
            r#"{{"fl_x": 4, "w": 8, "h": 6, "frames": [{}],
                "train_filenames": ["images/f0.png", "images/f1.png"],
                "val_filenames": ["images/f2.png"],
                "test_filenames": ["images/f9.png"]}}"#,
            frames.join(",")
        );
        let p = write(dir.path(), "transforms.json", &text);
        let capture = read_transforms(&p).unwrap();
        let splits: Vec<Option<Split>> = capture.frames.iter().map(|f| f.split).collect();
        assert_eq!(
            splits,
            [
                Some(Split::Train),
                Some(Split::Train),
                Some(Split::Val),
                None
            ]
        );
        // One image in two lists is refused, naming the entry.
        let text = text.replace(
            r#""val_filenames": ["images/f2.png"]"#,
            r#""val_filenames": ["images/f1.png"]"#,
        );
        let p = write(dir.path(), "transforms.json", &text);
        let msg = read_transforms(&p).unwrap_err().to_string();
        assert!(
            msg.contains("val_filenames[0]") && msg.contains("images/f1.png"),
            "{msg}"
        );
    }

    #[test]
    fn ply_file_path_gives_the_initial_points_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        tiny_png(&dir.path().join("images/a.png"), 8, 6);
        std::fs::write(
            dir.path().join("sparse_pc.ply"),
            "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n\
             property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n\
             end_header\n0.25 -1 2 10 20 30\n1 1 1 0 0 0\n-3 0.5 0 255 255 255\n",
        )
        .unwrap();
        let text = format!(
            r#"{{"fl_x": 4, "w": 8, "h": 6, "ply_file_path": "sparse_pc.ply",
                "frames": [{{"file_path": "images/a.png", "transform_matrix": {IDENTITY}}}]}}"#
        );
        let p = write(dir.path(), "transforms.json", &text);
        let capture = read_transforms(&p).unwrap();
        let points = capture.points.unwrap();
        assert_eq!(
            points.positions,
            [[0.25, -1.0, 2.0], [1.0, 1.0, 1.0], [-3.0, 0.5, 0.0]]
        );
        assert_eq!(points.colors, [[10, 20, 30], [0, 0, 0], [255, 255, 255]]);
        assert_eq!(capture.points_file, Some(dir.path().join("sparse_pc.ply")));
        let p = write(
            dir.path(),
            "transforms.json",
            &text.replace("sparse_pc.ply", "gone.ply"),
        );
        let msg = read_transforms(&p).unwrap_err().to_string();
        assert!(
            msg.contains("gone.ply") && msg.contains("ply_file_path"),
            "{msg}"
        );
    }

    #[test]
    fn transforms_skips_non_finite_matrices() {
        let dir = tempfile::tempdir().unwrap();
        tiny_png(&dir.path().join("images/a.png"), 4, 3);
        tiny_png(&dir.path().join("images/b.png"), 4, 3);
        // Python's json.dump writes NaN for a failed pose.
        let text = format!(
            r#"{{"fl_x": 10, "w": 4, "h": 3, "frames": [
                {{"file_path": "images/a.png", "transform_matrix": {IDENTITY}}},
                {{"file_path": "images/b.png",
                  "transform_matrix": [[NaN,0,0,0],[0,1,0,0],[0,0,1,-Infinity],[0,0,0,1]]}}]}}"#
        );
        let p = write(dir.path(), "transforms.json", &text);
        let capture = read_transforms(&p).unwrap();
        assert_eq!(capture.frames.len(), 1);
        assert_eq!(capture.skipped, ["b.png"]);
    }

    #[test]
    fn transforms_rejects_bad_fields_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        tiny_png(&dir.path().join("a.png"), 4, 3);
        let cases = [
            (r#""fl_x": "10""#, IDENTITY, "fl_x"),
            (r#""fl_x": -3"#, IDENTITY, "fl_x"),
            (r#""fl_x": 10, "w": 4.5"#, IDENTITY, "w"),
            (
                r#""fl_x": 10"#,
                "[[1,0,0],[0,1,0],[0,0,1]]",
                "frames[0].transform_matrix",
            ),
            (
                r#""fl_x": 10, "camera_model": "EQUIRECTANGULAR""#,
                IDENTITY,
                "camera_model",
            ),
            (
                r#""fl_x": 10, "camera_model": "OPENCV_FISHEYE", "p1": 0.01"#,
                IDENTITY,
                "p1",
            ),
            (r#""fl_x": 10, "k3": 0.1"#, IDENTITY, "k3"),
        ];
        for (keys, matrix, field) in cases {
            let text = format!(
                r#"{{{keys}, "frames": [{{"file_path": "a.png", "transform_matrix": {matrix}}}]}}"#
            );
            let p = write(dir.path(), "transforms.json", &text);
            let err = read_transforms(&p).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(&format!("`{field}`")), "{keys}: {msg}");
        }
        // A scaled matrix is an unusable camera, skipped (issue 44, rule 3): the only frame.
        let text = r#"{"fl_x": 10, "frames": [{"file_path": "a.png", "transform_matrix": [[2,0,0,0],[0,2,0,0],[0,0,2,0],[0,0,0,1]]}]}"#;
        let p = write(dir.path(), "transforms.json", text);
        let msg = read_transforms(&p).unwrap_err().to_string();
        assert!(msg.contains("a.png (rotation not orthonormal"), "{msg}");
    }

    #[test]
    fn frame_name_strips_dot_and_images_dir() {
        assert_eq!(frame_name("images/0001.jpg", None), "0001.jpg");
        assert_eq!(frame_name("./images_4/a.png", None), "a.png");
        assert_eq!(
            frame_name("./train/r_0", Some("png".as_ref())),
            "train/r_0.png"
        );
        assert_eq!(frame_name("imagesX/a.png", None), "imagesX/a.png");
        assert_eq!(frame_name("a\\b.jpg", None), "a/b.jpg");
    }
}

/// Issue 41: every path a transforms.json names resolves through [`ConfinedRoot`].
#[cfg(test)]
mod confinement_tests {
    use super::*;
    use crate::confined::testing::{Seeded, is_refusal, layout, model_is_inside};

    const IDENTITY: &str = "[[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]";

    /// Read `root/in/transforms.json` holding `frame` (extra keys of frame 0) and `top` (extra
    /// top-level keys), with a real `in/a.png` as frame 1 (through the link `in/side`, which stays
    /// inside) so the capture is never empty.
    fn read_with(root: &Path, frame: &str, top: &str) -> Result<Capture> {
        ::image::RgbImage::new(4, 4)
            .save(root.join("in/a.png"))
            .unwrap();
        let json = format!(
            r#"{{"fl_x": 4, "w": 4, "h": 4, {top} "frames": [
                {{"transform_matrix": {IDENTITY}, {frame}}},
                {{"file_path": "side/a.png", "transform_matrix": {IDENTITY}}}]}}"#
        );
        let path = root.join("in/transforms.json");
        std::fs::write(&path, json).unwrap();
        read_transforms_in(&ConfinedRoot::new(root).unwrap(), &path)
    }

    /// Property: over generated names (absolute, `..` anywhere, `./`, `\`, links in and out),
    /// `file_path`, `mask_path` and `ply_file_path` are refused exactly when the model says the
    /// name leaves the root, and the refusal names the field.
    #[test]
    fn every_named_path_is_refused_exactly_when_it_leaves_the_input() {
        let (_t, root) = layout();
        let mut g = Seeded(4101);
        for case in 0..300 {
            let w = g.path();
            let quoted = serde_json::to_string(&w).unwrap();
            let inside = model_is_inside(&root, &["in"], &w);
            let (frame, top, field) = match case % 3 {
                0 => (
                    format!(r#""file_path": {quoted}"#),
                    String::new(),
                    "frames[0].file_path",
                ),
                1 => (
                    format!(r#""file_path": "a.png", "mask_path": {quoted}"#),
                    String::new(),
                    "frames[0].mask_path",
                ),
                _ => (
                    r#""file_path": "a.png""#.to_string(),
                    format!(r#""ply_file_path": {quoted},"#),
                    "ply_file_path",
                ),
            };
            let got = read_with(&root, &frame, &top);
            let refused = got.as_ref().is_err_and(|e| is_refusal(e, field));
            assert_eq!(refused, !inside, "case {case}: {field} = `{w}` → {got:?}");
        }
    }

    /// The hostile-team cases: another team's photo by absolute path, by `../`, through a link,
    /// and a PLY outside the input, each refused naming the field.
    #[test]
    fn absolute_climbing_and_linked_file_paths_and_ply_out_of_the_input_are_refused() {
        let (t, root) = layout();
        let secret = t.path().join("secret.png").display().to_string();
        for (frame, top, field) in [
            (
                format!(r#""file_path": "{secret}""#),
                "",
                "frames[0].file_path",
            ),
            (
                r#""file_path": "../../secret.png""#.into(),
                "",
                "frames[0].file_path",
            ),
            (
                r#""file_path": "../leak.png""#.into(),
                "",
                "frames[0].file_path",
            ),
            (
                r#""file_path": "up/secret""#.into(),
                "",
                "frames[0].file_path",
            ),
            (
                r#""file_path": "a.png""#.into(),
                r#""ply_file_path": "../../points.ply","#,
                "ply_file_path",
            ),
        ] {
            let e = read_with(&root, &frame, top).unwrap_err();
            assert!(is_refusal(&e, field), "{frame} {top}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(field) && msg.contains("inside"), "{msg}");
        }
    }

    /// A link in `masks/` leading out is refused; the input itself still reads without it.
    #[test]
    fn a_mask_folder_link_out_is_refused() {
        let (t, root) = layout();
        std::fs::create_dir_all(root.join("in/masks")).unwrap();
        std::os::unix::fs::symlink(t.path().join("secret.png"), root.join("in/masks/a.png"))
            .unwrap();
        let e = read_with(&root, r#""file_path": "a.png""#, "").unwrap_err();
        assert!(is_refusal(&e, "masks/"), "{e}");
        std::fs::remove_file(root.join("in/masks/a.png")).unwrap();
        read_with(&root, r#""file_path": "a.png""#, "").unwrap();
    }
}
