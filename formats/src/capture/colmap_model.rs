//! What the COLMAP text reader (`colmap.rs`) and binary reader (`colmap_bin.rs`) share, so that
//! both forms of one model give the same capture bit for bit: the camera-model table
//! ([`CAMERA_MODELS`]) and its conversion to [`Intrinsics`] + [`Distortion`]
//! ([`camera_from_model`]), pose construction ([`pose_from_colmap`]), image names, the parsed
//! model both readers return ([`ParsedModel`], [`ImageEntry`]) and model-file lookup
//! ([`model_file`]). Both readers import this file; neither imports the other's parsing.
//!
//! Source: COLMAP `src/colmap/sensor/models.h` (model ids and parameter order).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::distortion::Distortion;
use super::intrinsics::Intrinsics;
use super::model::SfmPoints;
use super::pose::PoseDefect;
use crate::Error;
use crate::rotation::quaternion_to_rotation;

/// The COLMAP camera models of COLMAP 3.8, indexed by `MODEL_ID` as stored in `cameras.bin`
/// (ids 0..=10; `models.h`, `CameraModelId`), with their parameter names in COLMAP's order
/// (`models.h`, each model's `InitializeParamsInfo`). Kiln converts every one of them
/// ([`camera_from_model`]).
pub(super) const CAMERA_MODELS: [(&str, &[&str]); 11] = [
    ("SIMPLE_PINHOLE", &["f", "cx", "cy"]),
    ("PINHOLE", &["fx", "fy", "cx", "cy"]),
    ("SIMPLE_RADIAL", &["f", "cx", "cy", "k"]),
    ("RADIAL", &["f", "cx", "cy", "k1", "k2"]),
    ("OPENCV", &["fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2"]),
    (
        "OPENCV_FISHEYE",
        &["fx", "fy", "cx", "cy", "k1", "k2", "k3", "k4"],
    ),
    (
        "FULL_OPENCV",
        &[
            "fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6",
        ],
    ),
    ("FOV", &["fx", "fy", "cx", "cy", "omega"]),
    ("SIMPLE_RADIAL_FISHEYE", &["f", "cx", "cy", "k"]),
    ("RADIAL_FISHEYE", &["f", "cx", "cy", "k1", "k2"]),
    (
        "THIN_PRISM_FISHEYE",
        &[
            "fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3", "k4", "sx1", "sy1",
        ],
    ),
];

/// Parameter names of a COLMAP camera model (COLMAP's order); `None` for a name that is not one
/// of [`CAMERA_MODELS`].
pub(super) fn model_params(model: &str) -> Option<&'static [&'static str]> {
    CAMERA_MODELS
        .iter()
        .find(|(m, _)| *m == model)
        .map(|(_, names)| *names)
}

/// The [`Error::Unsupported`] for a camera model name not in [`CAMERA_MODELS`]; `field` locates
/// it.
pub(super) fn unsupported_model(path: &Path, field: String, found: String) -> Error {
    let supported: Vec<&str> = CAMERA_MODELS.iter().map(|(m, _)| *m).collect();
    Error::Unsupported {
        path: path.to_path_buf(),
        field,
        found,
        supported: supported.join(", "),
    }
}

/// Why a camera's size or parameters are unusable, for the caller to locate (line or byte).
#[derive(Debug)]
pub(super) struct CameraFault {
    /// Column as COLMAP names it: `WIDTH`, `HEIGHT`, `PARAMS[]` or a parameter name (`fy`).
    pub(super) field: &'static str,
    /// Index into the parameter list when one parameter is at fault.
    pub(super) param: Option<usize>,
    pub(super) expected: String,
    pub(super) found: String,
}

/// Image size from COLMAP's WIDTH and HEIGHT: both must be in 1..=u32::MAX pixels.
pub(super) fn image_size(width: u64, height: u64) -> std::result::Result<(u32, u32), CameraFault> {
    let check = |field: &'static str, v: u64| {
        u32::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| CameraFault {
                field,
                param: None,
                expected: format!("a positive number of pixels ≤ {}", u32::MAX),
                found: v.to_string(),
            })
    };
    Ok((check("WIDTH", width)?, check("HEIGHT", height)?))
}

/// Kiln intrinsics and distortion of a COLMAP camera: the one conversion both readers use.
///
/// - `model`: COLMAP model name (`SIMPLE_PINHOLE`, …); one of [`CAMERA_MODELS`].
/// - `width`, `height`: image size, pixels (checked by [`image_size`]).
/// - `params`: the model's parameters in COLMAP's order (focal lengths and principal point in
///   pixels, distortion coefficients unitless); must be exactly as many as the model has, finite,
///   with focal lengths > 0.
///
/// Returns a [`CameraFault`] naming the size, count or parameter at fault (a name that is not a
/// COLMAP model is reported as `MODEL`; callers check [`model_params`] first to report it as
/// unsupported).
pub(super) fn camera_from_model(
    model: &str,
    width: u64,
    height: u64,
    params: &[f64],
) -> std::result::Result<(Intrinsics, Distortion), CameraFault> {
    let Some(names) = model_params(model) else {
        return Err(CameraFault {
            field: "MODEL",
            param: None,
            expected: "a COLMAP 3.8 camera model".into(),
            found: model.to_string(),
        });
    };
    let (width, height) = image_size(width, height)?;
    if params.len() != names.len() {
        return Err(CameraFault {
            field: "PARAMS[]",
            param: None,
            expected: format!(
                "{} parameters for {model} ({})",
                names.len(),
                names.join(" ")
            ),
            found: format!("{} parameters", params.len()),
        });
    }
    if let Some(k) = params.iter().position(|v| !v.is_finite()) {
        return Err(CameraFault {
            field: names[k],
            param: Some(k),
            expected: "a finite number".into(),
            found: format!("`{}`", params[k]),
        });
    }
    let p = params;
    // Models with one focal length f (SIMPLE_*, RADIAL, RADIAL_FISHEYE) put cx, cy at 1, 2 and
    // their coefficients from 3; the others have fx, fy, cx, cy then coefficients from 4.
    let (fx, fy, cx, cy, c) = if names[0] == "f" {
        (p[0], p[0], p[1], p[2], &p[3..])
    } else {
        (p[0], p[1], p[2], p[3], &p[4..])
    };
    let distortion = match model {
        "SIMPLE_PINHOLE" | "PINHOLE" => Distortion::None,
        "SIMPLE_RADIAL" => Distortion::SimpleRadial { k: c[0] },
        "RADIAL" => Distortion::Radial { k1: c[0], k2: c[1] },
        "OPENCV" => Distortion::OpenCv {
            k1: c[0],
            k2: c[1],
            p1: c[2],
            p2: c[3],
        },
        "OPENCV_FISHEYE" => Distortion::OpenCvFisheye {
            k1: c[0],
            k2: c[1],
            k3: c[2],
            k4: c[3],
        },
        "FULL_OPENCV" => Distortion::FullOpenCv {
            k1: c[0],
            k2: c[1],
            p1: c[2],
            p2: c[3],
            k3: c[4],
            k4: c[5],
            k5: c[6],
            k6: c[7],
        },
        "FOV" => Distortion::Fov { omega: c[0] },
        "SIMPLE_RADIAL_FISHEYE" => Distortion::SimpleRadialFisheye { k: c[0] },
        "RADIAL_FISHEYE" => Distortion::RadialFisheye { k1: c[0], k2: c[1] },
        _ => Distortion::ThinPrismFisheye {
            k1: c[0],
            k2: c[1],
            p1: c[2],
            p2: c[3],
            k3: c[4],
            k4: c[5],
            sx1: c[6],
            sy1: c[7],
        },
    };
    for (k, f) in [(0, fx), (1, fy)] {
        if f <= 0.0 {
            return Err(CameraFault {
                field: names[k],
                param: Some(k),
                expected: "a positive focal length in pixels".into(),
                found: f.to_string(),
            });
        }
    }
    let intrinsics = Intrinsics {
        fx,
        fy,
        cx,
        cy,
        width,
        height,
    };
    Ok((intrinsics, distortion))
}

/// Rigid world_to_camera `[R(q) t; 0 1]` from a COLMAP pose (q normalised first), or why the
/// image cannot be used: a non-finite number, or a zero quaternion (singular). Such an image is
/// skipped (issue 44, rule 3).
pub(super) fn pose_from_colmap(
    q: [f64; 4],
    t: [f64; 3],
) -> std::result::Result<[[f64; 4]; 4], PoseDefect> {
    if q.iter().chain(&t).any(|v| !v.is_finite()) {
        return Err(PoseDefect::NonFinite);
    }
    let rotation = quaternion_to_rotation(q).ok_or(PoseDefect::Singular)?;
    let mut world_to_camera = [[0.0; 4]; 4];
    for r in 0..3 {
        world_to_camera[r][..3].copy_from_slice(&rotation[r]);
        world_to_camera[r][3] = t[r];
    }
    world_to_camera[3][3] = 1.0;
    Ok(world_to_camera)
}

/// COLMAP image NAME as Kiln uses it: relative path with `/` separators (`\` replaced).
pub(super) fn image_name(raw: &str) -> String {
    raw.replace('\\', "/")
}

/// A camera as read: intrinsics and distortion, or why they cannot be used (the text of the error
/// naming file, line or byte, field and value). One bad camera of several skips its own images
/// with a warning rather than refusing the model (issue 44 rule 3).
pub(super) type CameraEntry = std::result::Result<(Intrinsics, Distortion), String>;

/// A parsed model, text or binary: what [`read_colmap`](super::read_colmap) needs after parsing.
pub(super) struct ParsedModel {
    /// Intrinsics and distortion (or the fault) by CAMERA_ID.
    pub(super) cameras: HashMap<u32, CameraEntry>,
    /// Images in file order; a `camera_id` that is no key of `cameras` skips its image.
    pub(super) images: Vec<ImageEntry>,
    /// Points in file order, when the points file exists.
    pub(super) points: Option<SfmPoints>,
    /// The images file (`images.txt` or `images.bin`), for messages.
    pub(super) images_path: PathBuf,
}

/// One image of `images.txt` / `images.bin`.
#[derive(Debug)]
pub(super) struct ImageEntry {
    /// NAME, `/`-separated ([`image_name`]).
    pub(super) name: String,
    pub(super) camera_id: u32,
    /// From [`pose_from_colmap`]: the pose, or why the image is skipped.
    pub(super) world_to_camera: std::result::Result<[[f64; 4]; 4], PoseDefect>,
}

/// The model file `name` in `dir`, matched without regard to case as COLMAP's readers on
/// case-insensitive file systems do (exports with `points3d.txt` or `Cameras.bin` exist): the
/// exact name when present, else the one entry whose name differs only in case, else
/// `dir/name` (missing; errors name it).
pub(super) fn model_file(dir: &Path, name: &str) -> PathBuf {
    let exact = dir.join(name);
    if exact.is_file() {
        return exact;
    }
    let matches: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().eq_ignore_ascii_case(name))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    match matches.as_slice() {
        [one] => one.clone(),
        _ => exact,
    }
}
