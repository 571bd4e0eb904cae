//! `ingest`: turn a fetched capture or mesh into the normalised stage output the next stages read.
//!
//! Capture: read the camera model (`transforms.json` or COLMAP), decode each image, downscale to
//! `max_side` with the intrinsics rescaled exactly, undistort to pinhole, and write
//! `capture.json` + `images/<frame>.png` (8-bit RGB). Frames whose image is missing are skipped with
//! one warning (in the reader); a corrupt image fails the stage naming the file.
//! Mesh: read glTF/GLB (validated: index ranges, finite positions, buffers present) and write it back
//! as one `mesh.glb`.

mod stage;
pub use stage::{CaptureIngestSummary, IngestCapture, IngestMesh, IngestSplats};

use std::path::Path;

use kiln_formats::capture::{self, Capture};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::bounds::{Bound, Bounded};
use crate::{Error, Result};

/// Parameters of the `ingest` stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestParams {
    /// Longest image side after downscaling, pixels; `None` keeps the original size. Default 540.
    pub max_side: Option<u32>,
    /// Use the capture's foreground masks (e.g. LLFF `masks/<stem>_mask.JPG`): each mask is
    /// decoded at the image's size, undistorted like it, thresholded at 50 % (masks are often
    /// lossy JPEGs), and written beside the image. Training then ignores the pixels outside the
    /// mask (`train.mask_mode = "ignore"`, the default) or replaces them by its background colour
    /// (`"background"`, so backgrounds that change between views, an object turned over on a
    /// turntable, are learnt as empty). Default false.
    pub masks: bool,
    /// Masks mark the pixels to leave out (white = ignore), as some tools write them (e.g.
    /// people or sky masks), instead of the foreground. Default false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub invert_masks: bool,
    /// Splats and mesh jobs: the input's up axis (`x`, `-x`, `y`, `-y`, `z`, `-z`; e.g. `-y` for
    /// COLMAP-frame 3DGS output, `z` for a Z-up scan or CAD export); splats are rotated (means,
    /// rotations and SH), meshes turned (positions and normals), so that it becomes glTF +Y, the
    /// up axis of tile content. Absent: the input is already Y-up (glTF's convention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up_axis: Option<String>,
    /// Mesh jobs: remove degenerate and duplicate triangles at ingest
    /// (`kiln_formats::mesh::repair_cleanup`: counted in the summary's `repair`). `false` keeps
    /// them as the source has them (they are still counted in `cleanup`). Default true.
    #[serde(skip_serializing_if = "is_true")]
    pub repair: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

impl IngestParams {
    /// [`Self::up_axis`] parsed.
    ///
    /// # Errors
    /// [`Error::Param`] naming `up_axis` and the accepted values.
    pub fn up_axis(&self) -> Result<Option<kiln_formats::splats::transform::UpAxis>> {
        self.up_axis
            .as_deref()
            .map(|a| {
                a.parse().map_err(|e| Error::Param {
                    stage: "ingest",
                    field: "up_axis".into(),
                    expected: "one of x, -x, y, -y, z, -z (the input's up axis)".into(),
                    found: format!("{a:?} ({e})"),
                })
            })
            .transpose()
    }

    /// Check the fields: `max_side` within its bound ([`Bounded::BOUNDS`]; at least one
    /// rasterizer tile, as smaller images make held-out metrics meaningless) and `up_axis` one of
    /// the six axes.
    ///
    /// # Errors
    /// [`Error::Param`] naming `up_axis` or `max_side`.
    pub fn validate(&self) -> Result<()> {
        self.up_axis()?;
        self.check_bounds()
    }
}

impl Bounded for IngestParams {
    const TABLE: &'static str = "ingest";
    const BOUNDS: &'static [Bound] = &[Bound::scalar(
        "max_side",
        16.0,
        16384.0,
        "pixels on the long side",
    )];
}

impl Default for IngestParams {
    fn default() -> Self {
        Self {
            max_side: Some(540),
            masks: false,
            invert_masks: false,
            up_axis: None,
            repair: true,
        }
    }
}

/// One ingested frame: a pinhole camera (OpenCV frame) and its 8-bit PNG in the stage directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestedFrame {
    /// Source image name (relative to the capture's image folder); sorting key for the hold-out.
    pub name: String,
    /// PNG path relative to the stage directory.
    pub image: String,
    /// Image size in pixels after downscaling.
    pub width: u32,
    pub height: u32,
    /// Pinhole intrinsics in pixels, for `width × height`.
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
    /// Row-major 4×4 world → camera (OpenCV: x right, y down, z forward), metres.
    pub world_to_camera: [[f64; 4]; 4],
    /// Foreground mask PNG (8-bit gray, 255 = foreground) relative to the stage directory, same
    /// size as `image`; `None` when masks are off or the frame has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
    /// Alpha PNG (8-bit gray, 255 = opaque) relative to the stage directory, same size as `image`,
    /// when the source image has an alpha channel that is not opaque everywhere; `image` then holds
    /// the colour premultiplied by alpha (composited over black). Training composites it over its
    /// background, so transparent parts of the photo are learnt as empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<String>,
    /// Valid-pixel mask PNG (8-bit gray, 255 = the pixel saw the scene) relative to the stage
    /// directory, written when undistortion left pixels with no source (beyond the photo's edge);
    /// training gives those pixels loss weight 0 and leaves them out of the held-out metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid: Option<String>,
    /// The split the capture declares for this frame (Blender `transforms_{train,val,test}.json`,
    /// nerfstudio `*_filenames`); `None` when it declares none (training holds out every n-th).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<capture::Split>,
}

/// SfM points carried from the capture (COLMAP `points3D`), world frame, metres.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestedPoints {
    /// `[P, 3]` positions.
    pub positions: Vec<[f64; 3]>,
    /// `[P, 3]` sRGB 8-bit colours.
    pub colors: Vec<[u8; 3]>,
}

/// `capture.json`: what `ingest` hands to `train`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestedCapture {
    /// Where the capture came from (local path after fetch).
    pub source: String,
    pub frames: Vec<IngestedFrame>,
    pub points: Option<IngestedPoints>,
    /// Frames listed by the capture but skipped (missing image files, non-finite poses).
    pub skipped: Vec<String>,
}

/// File name of the capture description inside the ingest stage directory.
pub const CAPTURE_JSON: &str = "capture.json";
/// File name of the normalised mesh inside the ingest stage directory.
pub const MESH_GLB: &str = "mesh.glb";

/// Ingest the capture at `input` (the capture's folder, or any file of it: issue 44 rule 1,
/// [`capture::read_named_capture`]) into `out_dir`. Images are decoded in parallel (rayon); a
/// frame whose photo cannot be read is skipped with one warning naming each (rule 3).
///
/// # Errors
/// Reader errors name the file and field (no frames, all images missing, bad JSON, unsupported
/// camera model); [`Error::Input`] naming every skipped frame when skipping bad cameras and
/// unreadable photos (each warned about) leaves fewer than [`MIN_VIEWS`]; [`Error::Param`] for
/// `max_side == 0`.
pub fn ingest_capture(
    input: &Path,
    params: &IngestParams,
    out_dir: &Path,
) -> Result<IngestedCapture> {
    params.validate()?;
    let mut cap: Capture = capture::read_named_capture(input)?;
    for sub in ["images", "masks", "alpha", "valid"] {
        let d = out_dir.join(sub);
        std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
    }
    let mut unreadable = drop_unreadable_headers(&mut cap.frames);
    let plan = capture::plan_downscale(&cap.frames, params.max_side)?;
    // Rayon's threads enter the stage's span, so their warnings reach its summary.
    let span = tracing::Span::current();
    let decoded: Vec<Result<IngestedFrame>> = cap
        .frames
        .par_iter()
        .zip(&plan)
        .map(|(f, downscale)| span.in_scope(|| ingest_frame(f, downscale, params, out_dir)))
        .collect();
    let frames = keep_decoded(&cap.frames, decoded, &mut unreadable)?;
    warn_unreadable(&unreadable);
    cap.skipped
        .extend(unreadable.into_iter().map(|(name, _)| name));
    cap.skipped.sort();
    check_enough_views(input, frames.len(), &cap.skipped)?;
    if params.masks && frames.iter().all(|f| f.mask.is_none()) {
        return Err(Error::Input {
            path: input.to_path_buf(),
            field: "ingest.masks".into(),
            problem: "masks are on but no frame has a mask (looked for masks/<stem>_mask.<ext>, \
                      masks/<stem>.<ext> and masks/<name>.<ext>, and nerfstudio's per-frame \
                      mask_path); add the masks or set ingest.masks = false"
                .into(),
        });
    }
    let ingested = IngestedCapture {
        source: cap.source.display().to_string(),
        frames,
        points: cap.points.map(|p| IngestedPoints {
            positions: p.positions,
            colors: p.colors,
        }),
        skipped: cap.skipped,
    };
    let json = serde_json::to_vec_pretty(&ingested).expect("IngestedCapture serialises");
    kiln_formats::atomic_write::write_atomic(&out_dir.join(CAPTURE_JSON), &json)?;
    Ok(ingested)
}

/// Fewest views a capture may keep after frames were skipped (issue 44, rule 3): 3 to train on
/// and 1 held out to score the result. A capture that lists fewer to begin with is trained as
/// listed; skipping bad frames may not bring it below this.
pub const MIN_VIEWS: usize = 4;

/// Remove the frames whose photo header cannot be read (issue 44, rule 3: skipped, not fatal);
/// returns `(name, why)` for each.
fn drop_unreadable_headers(frames: &mut Vec<capture::Frame>) -> Vec<(String, String)> {
    let mut unreadable = Vec::new();
    frames.retain(|f| match capture::image_size(&f.image_path) {
        Ok(_) => true,
        Err(e) => {
            unreadable.push((f.name.clone(), e.to_string()));
            false
        }
    });
    unreadable
}

/// The decoded frames, in order; a frame whose photo could not be decoded is added to
/// `unreadable` and left out (issue 44, rule 3).
///
/// # Errors
/// Any other error of a frame (a size or mask mismatch, a write failing): the first one.
fn keep_decoded(
    frames: &[capture::Frame],
    decoded: Vec<Result<IngestedFrame>>,
    unreadable: &mut Vec<(String, String)>,
) -> Result<Vec<IngestedFrame>> {
    let mut kept = Vec::with_capacity(decoded.len());
    for (f, result) in frames.iter().zip(decoded) {
        match result {
            Ok(frame) => kept.push(frame),
            Err(Error::Format(e @ kiln_formats::Error::Image { .. })) => {
                unreadable.push((f.name.clone(), e.to_string()));
            }
            // A photo that is not the shape its camera says (another photo, an EXIF turn the
            // poses did not use) is one bad view, not a bad capture.
            Err(Error::Input { field, problem, .. }) if field == "image size" => {
                unreadable.push((f.name.clone(), problem));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(kept)
}

/// One warning naming every frame whose photo could not be read, and why.
fn warn_unreadable(unreadable: &[(String, String)]) {
    if unreadable.is_empty() {
        return;
    }
    let each: Vec<String> = unreadable
        .iter()
        .map(|(name, why)| format!("{name} ({why})"))
        .collect();
    tracing::warn!(
        count = unreadable.len(),
        "ingest: skipping {} frame(s) whose image cannot be read or is not its camera's shape: {}",
        unreadable.len(),
        each.join("; ")
    );
}

/// [`MIN_VIEWS`]: when frames were skipped and fewer than that remain, one error naming every
/// skipped frame (each was named with its reason in a warning).
///
/// # Errors
/// [`Error::Input`] naming `input`, the count kept and every skipped frame.
fn check_enough_views(input: &Path, kept: usize, skipped: &[String]) -> Result<()> {
    if skipped.is_empty() || kept >= MIN_VIEWS {
        return Ok(());
    }
    Err(Error::Input {
        path: input.to_path_buf(),
        field: "frames".into(),
        problem: format!(
            "only {kept} usable views remain after skipping {} ({}); a capture needs at least \
             {MIN_VIEWS} (3 to train on, 1 held out): fix or remove the skipped frames",
            skipped.len(),
            skipped.join(", ")
        ),
    })
}

/// Ingest one frame: decode its photo at its camera's planned size (area downscale, or the
/// capture's own `images_<n>` copy), rescale the intrinsics to that size, undistort, and write the
/// PNG with its valid-pixel, alpha and mask PNGs.
fn ingest_frame(
    f: &capture::Frame,
    downscale: &capture::FrameDownscale,
    params: &IngestParams,
    out_dir: &Path,
) -> Result<IngestedFrame> {
    let (w, h) = downscale.stored;
    check_size_matches_intrinsics(
        f,
        capture::scaled_size(w, h, params.max_side),
        params.max_side,
    )?;
    let (img, alpha) = capture::load_rgb_alpha_at(&downscale.source, downscale.size)?;
    // The exact ratio the pixels were resampled by, the same for every frame of the camera.
    let k = f.intrinsics.scaled_to(img.width, img.height);
    let img = capture::undistort(&img, &k, &f.distortion);
    let png_name = format!("{}.png", f.name.replace(['/', '\\'], "_"));
    let rel = format!("images/{png_name}");
    write_png(&out_dir.join(&rel), &img)?;
    let valid = write_valid_pixels(out_dir, &png_name, &img, &k, &f.distortion)?;
    let alpha = match alpha {
        Some(a) => Some(write_alpha(
            out_dir,
            &png_name,
            &img,
            &a,
            &k,
            &f.distortion,
        )?),
        None => None,
    };
    let mask = match (&f.mask_path, params.masks) {
        (Some(mask_path), true) => Some(write_mask(
            out_dir, &png_name, mask_path, f, downscale, params, &k,
        )?),
        _ => None,
    };
    Ok(IngestedFrame {
        name: f.name.clone(),
        image: rel,
        width: img.width,
        height: img.height,
        fx: k.fx,
        fy: k.fy,
        cx: k.cx,
        cy: k.cy,
        world_to_camera: f.world_to_camera,
        mask,
        alpha,
        valid,
        split: f.split,
    })
}

/// Write `valid/<png_name>` when undistortion left pixels with no source (an all-ones image
/// through the same map, thresholded); `None` for pinhole frames or when every pixel has one.
fn write_valid_pixels(
    out_dir: &Path,
    png_name: &str,
    img: &capture::RgbImage,
    k: &capture::Intrinsics,
    distortion: &capture::Distortion,
) -> Result<Option<String>> {
    if matches!(distortion, capture::Distortion::None) {
        return Ok(None);
    }
    let ones = capture::RgbImage {
        width: img.width,
        height: img.height,
        data: vec![1.0; img.data.len()],
    };
    let v = capture::undistort(&ones, k, distortion);
    let gray: Vec<u8> = v
        .data
        .chunks_exact(3)
        .map(|p| if p[0] >= 0.5 { 255 } else { 0 })
        .collect();
    if gray.iter().all(|&g| g == 255) {
        return Ok(None);
    }
    let valid_rel = format!("valid/{png_name}");
    write_mask_png(&out_dir.join(&valid_rel), img.width, img.height, gray)?;
    Ok(Some(valid_rel))
}

/// Write `alpha/<png_name>`: the alpha `[H, W]`, undistorted like the colour (as a grey RGB image
/// through the same map).
fn write_alpha(
    out_dir: &Path,
    png_name: &str,
    img: &capture::RgbImage,
    alpha: &[f32],
    k: &capture::Intrinsics,
    distortion: &capture::Distortion,
) -> Result<String> {
    let grey = capture::RgbImage {
        width: img.width,
        height: img.height,
        data: alpha.iter().flat_map(|&v| [v; 3]).collect(),
    };
    let grey = capture::undistort(&grey, k, distortion);
    let bytes: Vec<u8> = grey
        .data
        .chunks_exact(3)
        .map(|p| (p[0].clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let alpha_rel = format!("alpha/{png_name}");
    write_mask_png(&out_dir.join(&alpha_rel), img.width, img.height, bytes)?;
    Ok(alpha_rel)
}

/// Write `masks/<png_name>`: the frame's mask resampled to its image's size, undistorted like
/// it and thresholded at 50 % (inverted with `invert_masks`).
///
/// # Errors
/// [`Error::Input`] naming the mask when it would not downscale to its photo's size (another
/// size or aspect ratio); decode errors naming the mask.
fn write_mask(
    out_dir: &Path,
    png_name: &str,
    mask_path: &Path,
    f: &capture::Frame,
    downscale: &capture::FrameDownscale,
    params: &IngestParams,
    k: &capture::Intrinsics,
) -> Result<String> {
    let scaled = |(w, h): (u32, u32)| capture::scaled_size(w, h, params.max_side);
    let (mask_size, image_size) = (
        scaled(capture::image_size(mask_path)?),
        scaled(downscale.stored),
    );
    if mask_size != image_size {
        return Err(Error::Input {
            path: mask_path.to_path_buf(),
            field: "mask".into(),
            problem: format!(
                "mask is {}×{} after downscaling but its image {} is {}×{}; \
                 masks must have the image's size (or set ingest.masks = false)",
                mask_size.0,
                mask_size.1,
                f.image_path.display(),
                image_size.0,
                image_size.1
            ),
        });
    }
    let m = capture::load_rgb_at(mask_path, downscale.size)?;
    let m = capture::undistort(&m, k, &f.distortion);
    let gray: Vec<u8> = m
        .data
        .chunks_exact(3)
        .map(|p| {
            if (p[0] >= 0.5) != params.invert_masks {
                255
            } else {
                0
            }
        })
        .collect();
    let mask_rel = format!("masks/{png_name}");
    write_mask_png(&out_dir.join(&mask_rel), m.width, m.height, gray)?;
    Ok(mask_rel)
}

/// Checks that an image decoded at `width × height` (after EXIF orientation and any downscale) is
/// the camera's `intrinsics.width × height` scaled uniformly, to within one pixel on either side:
/// the rounding of a downscaled copy (2588 vs 2589 px, gaussian-splatting #25) or a folder of
/// half-size images passes (the intrinsics are rescaled to the image), while another aspect ratio
/// (a photo rotated by its EXIF tag when the poses were computed on the stored pixels, or the wrong
/// image) is an error, since rescaling would silently distort the camera.
/// A size that passes but is not what the declared size becomes at `max_side` (the photo is not
/// the size its camera says) is rescaled with a warning naming the photo and both sizes.
fn check_size_matches_intrinsics(
    f: &capture::Frame,
    (width, height): (u32, u32),
    max_side: Option<u32>,
) -> Result<()> {
    let (kw, kh) = (
        f64::from(f.intrinsics.width),
        f64::from(f.intrinsics.height),
    );
    let (w, h) = (f64::from(width), f64::from(height));
    // Predict each side from the other side's scale; either prediction within a pixel passes.
    let w_from_h = kw * h / kh;
    let h_from_w = kh * w / kw;
    if (w - w_from_h).abs() <= 1.0 || (h - h_from_w).abs() <= 1.0 {
        if let Some(expected) = undeclared_rescale(f, width, height, max_side) {
            tracing::warn!(
                photo = %f.image_path.display(),
                "ingest: {} is {width}×{height} px after [ingest] max_side, but its camera \
                 declares {}×{} (→ {}×{}): the intrinsics were rescaled to the photo; check that \
                 it is the photo the poses were computed on",
                f.image_path.display(),
                f.intrinsics.width,
                f.intrinsics.height,
                expected.0,
                expected.1
            );
        }
        return Ok(());
    }
    Err(Error::Input {
        path: f.image_path.clone(),
        field: "image size".into(),
        problem: format!(
            "decoded at {width}×{height} (after EXIF orientation and [ingest] max_side), but \
             its camera is {}×{}: \
             not the same aspect ratio. If the photo carries an EXIF rotation the poses did not \
             use, re-export it without the tag; otherwise fix the camera's width/height",
            f.intrinsics.width, f.intrinsics.height
        ),
    })
}

/// The size the camera's declared size becomes at `max_side`, when the photo decoded at
/// `width × height` (after that same downscale) is not it: the photo is not the size its camera
/// says, and its intrinsics get rescaled.
fn undeclared_rescale(
    f: &capture::Frame,
    width: u32,
    height: u32,
    max_side: Option<u32>,
) -> Option<(u32, u32)> {
    let expected = capture::scaled_size(f.intrinsics.width, f.intrinsics.height, max_side);
    (expected != (width, height)).then_some(expected)
}

/// Where a posed capture's poses and initial points come from (`kiln plan`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaptureSources {
    /// The files the poses are read from (one per split for a Blender layout).
    pub pose_files: Vec<std::path::PathBuf>,
    /// Usable frames.
    pub frames: usize,
    /// Frames per declared split (`train`, `val`, `test`); empty when the capture declares none.
    pub splits: std::collections::BTreeMap<&'static str, usize>,
    /// The points file, when there is one.
    pub points_file: Option<std::path::PathBuf>,
    /// Points in it.
    pub points: usize,
}

impl CaptureSources {
    /// One line on the poses, e.g. `poses: …/transforms.json (50 frames)`.
    #[must_use]
    pub fn poses_line(&self) -> String {
        let files: Vec<String> = self
            .pose_files
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let frames = if self.splits.is_empty() {
            format!("{} frames", self.frames)
        } else {
            let per: Vec<String> = self
                .splits
                .iter()
                .map(|(s, n)| format!("{n} {s}"))
                .collect();
            let held_out = ["test", "val"]
                .into_iter()
                .find(|s| self.splits.contains_key(s))
                .unwrap_or("every eval_every-th train frame");
            format!(
                "{} frames: trained on train, evaluated on {held_out}",
                per.join(", ")
            )
        };
        format!("poses: {} ({frames})", files.join(", "))
    }

    /// One line on the initial points, e.g. `points: …/points3D.bin (4,000 points)`.
    #[must_use]
    pub fn points_line(&self) -> String {
        match &self.points_file {
            Some(file) => format!("points: {} ({} points)", file.display(), self.points),
            None => "points: none (training starts from random points inside the camera frustums)"
                .to_string(),
        }
    }
}

/// Read the posed capture at `input` (poses and points, no pixels) and say where they come from.
///
/// # Errors
/// The capture readers' errors, naming the file and field.
pub fn capture_sources(input: &Path) -> Result<CaptureSources> {
    let cap = capture::read_named_capture(input)?;
    let mut splits = std::collections::BTreeMap::new();
    for split in cap.frames.iter().filter_map(|f| f.split) {
        *splits.entry(split.name()).or_insert(0) += 1;
    }
    Ok(CaptureSources {
        pose_files: cap.pose_files,
        frames: cap.frames.len(),
        splits,
        points: cap.points.as_ref().map_or(0, |p| p.positions.len()),
        points_file: cap.points_file,
    })
}

/// Read back the `capture.json` written by [`ingest_capture`].
///
/// # Errors
/// [`Error::Io`] / [`kiln_formats::Error::Corrupt`] naming the file.
pub fn load_ingested(stage_dir: &Path) -> Result<IngestedCapture> {
    let path = stage_dir.join(CAPTURE_JSON);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        kiln_formats::Error::Corrupt {
            path: path.clone(),
            location: format!("line {}, column {}", e.line(), e.column()),
            what: e.to_string(),
        }
        .into()
    })
}

/// Load an ingested frame's PNG as `[H, W, 3]` floats in [0, 1]; with a mask, pixels outside it
/// are replaced by `background` (linear RGB in [0, 1], the colour training renders behind the
/// splats), so the trainer learns them as empty; with alpha, the (premultiplied) colour is
/// composited over `background` (`colour + (1 − alpha)·background`), likewise.
///
/// # Errors
/// Decode errors name the PNG; a mask of the wrong size names the mask.
pub fn load_frame_rgb(
    stage_dir: &Path,
    frame: &IngestedFrame,
    background: [f32; 3],
) -> Result<Vec<f32>> {
    Ok(load_frame(stage_dir, frame, background, false)?.image)
}

/// Load an ingested frame for training. Alpha is composited over `background` (premultiplied
/// colour); a mask either makes the pixels outside it ignored (`ignore_outside_mask`: loss
/// weight 0, the photo's pixels kept) or replaces them by `background`, as [`load_frame_rgb`]
/// does. The transparency lets the trainer re-composite over another background
/// (`image + transparency·(other − background)`).
///
/// # Errors
/// As [`load_frame_rgb`].
pub fn load_frame(
    stage_dir: &Path,
    frame: &IngestedFrame,
    background: [f32; 3],
    ignore_outside_mask: bool,
) -> Result<crate::stages::train::ViewPixels> {
    let mut img = capture::load_rgb(&stage_dir.join(&frame.image), None)?;
    let pixels = img.width as usize * img.height as usize;
    let mask_is_background = frame.mask.is_some() && !ignore_outside_mask;
    let mut transparency: Option<Vec<f32>> =
        (mask_is_background || frame.alpha.is_some()).then(|| vec![0.0; pixels]);
    let mut loss_weights: Option<Vec<f32>> = None;
    if let Some(mask_rel) = &frame.mask {
        let path = stage_dir.join(mask_rel);
        let mask = image::open(&path)
            .map_err(|e| Error::io(&path, std::io::Error::other(e)))?
            .to_luma8();
        if mask.width() != img.width || mask.height() != img.height {
            return Err(Error::Input {
                path,
                field: "mask".into(),
                problem: format!(
                    "mask is {}×{}, image is {}×{}; run ingest again",
                    mask.width(),
                    mask.height(),
                    img.width,
                    img.height
                ),
            });
        }
        if ignore_outside_mask {
            loss_weights = Some(
                mask.as_raw()
                    .iter()
                    .map(|&m| if m < 128 { 0.0 } else { 1.0 })
                    .collect(),
            );
        } else {
            let t = transparency.as_deref_mut().unwrap_or_default();
            for ((px, m), t) in img.data.chunks_exact_mut(3).zip(mask.as_raw()).zip(t) {
                if *m < 128 {
                    px.copy_from_slice(&background);
                    *t = 1.0;
                }
            }
        }
    }
    if let Some(alpha_rel) = &frame.alpha {
        let path = stage_dir.join(alpha_rel);
        let alpha = image::open(&path)
            .map_err(|e| Error::io(&path, std::io::Error::other(e)))?
            .to_luma8();
        if alpha.width() != img.width || alpha.height() != img.height {
            return Err(Error::Input {
                path,
                field: "alpha".into(),
                problem: format!(
                    "alpha is {}×{}, image is {}×{}; run ingest again",
                    alpha.width(),
                    alpha.height(),
                    img.width,
                    img.height
                ),
            });
        }
        // The colour is premultiplied: composite over the background.
        let tr = transparency.as_deref_mut().unwrap_or_default();
        for ((px, &a), tr) in img.data.chunks_exact_mut(3).zip(alpha.as_raw()).zip(tr) {
            let t = 1.0 - f32::from(a) / 255.0;
            // A masked-out pixel is all background already.
            if *tr == 1.0 {
                continue;
            }
            *tr = t;
            for (c, bg) in px.iter_mut().zip(background) {
                *c += t * bg;
            }
        }
    }
    if let Some(valid_rel) = &frame.valid {
        let path = stage_dir.join(valid_rel);
        let valid = image::open(&path)
            .map_err(|e| Error::io(&path, std::io::Error::other(e)))?
            .to_luma8();
        if valid.width() != img.width || valid.height() != img.height {
            return Err(Error::Input {
                path,
                field: "valid".into(),
                problem: format!(
                    "valid-pixel mask is {}×{}, image is {}×{}; run ingest again",
                    valid.width(),
                    valid.height(),
                    img.width,
                    img.height
                ),
            });
        }
        let w = loss_weights.get_or_insert_with(|| vec![1.0; pixels]);
        for (w, &v) in w.iter_mut().zip(valid.as_raw()) {
            if v < 128 {
                *w = 0.0;
            }
        }
    }
    Ok(crate::stages::train::ViewPixels {
        image: img.data,
        transparency,
        loss_weights,
    })
}

fn write_png(path: &Path, img: &capture::RgbImage) -> Result<()> {
    let bytes: Vec<u8> = img
        .data
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let buf = image::RgbImage::from_raw(img.width, img.height, bytes);
    save_png(path, buf.map(image::DynamicImage::ImageRgb8))
}

fn write_mask_png(path: &Path, width: u32, height: u32, gray: Vec<u8>) -> Result<()> {
    let buf = image::GrayImage::from_raw(width, height, gray);
    save_png(path, buf.map(image::DynamicImage::ImageLuma8))
}

/// Encode as PNG and write atomically; `None` means the pixel buffer did not match its size.
fn save_png(path: &Path, img: Option<image::DynamicImage>) -> Result<()> {
    let img = img.ok_or_else(|| Error::Input {
        path: path.to_path_buf(),
        field: "image".into(),
        problem: "pixel buffer does not match its size".into(),
    })?;
    let mut png = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| Error::io(path, std::io::Error::other(e)))?;
    kiln_formats::atomic_write::write_atomic(path, &png)?;
    Ok(())
}

/// Summary of an ingested mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestedMesh {
    pub vertices: usize,
    pub triangles: usize,
    /// Axis-aligned bounds, metres, glTF Y-up frame (after any `up_axis` turn).
    pub min: [f32; 3],
    pub max: [f32; 3],
    /// The input's up axis when it was turned to glTF +Y (`IngestParams::up_axis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_from_up_axis: Option<String>,
    /// Degenerate and duplicate triangles, non-manifold and boundary edges, counted by position
    /// (`kiln_formats::mesh::MeshCleanup`) after the repair; absent from summaries written
    /// before it existed.
    #[serde(default)]
    pub cleanup: kiln_formats::mesh::MeshCleanup,
    /// What the repair removed (`[ingest] repair`, on by default); absent when it was off, and
    /// from summaries written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<kiln_formats::mesh::MeshRepair>,
}

/// Ingest a mesh (glTF/GLB, OBJ + MTL or PLY, by extension: see
/// `kiln_formats::mesh::read_mesh`), or every mesh file under a folder as one asset
/// (`kiln_formats::mesh::read_meshes`: one OBJ per block of a photogrammetry export): validate,
/// remove its degenerate and duplicate triangles when `params.repair`, count the faults left (the
/// cleanup report), turn it so that `params.up_axis` becomes glTF +Y when given, and write
/// `out_dir/mesh.glb`.
///
/// # Errors
/// Reader errors name the file and the bad accessor, index, line or buffer; another extension is
/// refused naming the ones read.
pub fn ingest_mesh(input: &Path, params: &IngestParams, out_dir: &Path) -> Result<IngestedMesh> {
    use kiln_formats::splats::transform::{UpAxis, up_axis_rotation};
    let up_axis = params.up_axis()?;
    let mut mesh = if input.is_dir() {
        kiln_formats::mesh::read_meshes(input)?
    } else {
        kiln_formats::mesh::read_mesh(input)?
    };
    drop_undecodable_textures(input, &mut mesh);
    let read_triangles = mesh.indices.len() / 3;
    let repair = params.repair.then(|| repair_mesh(input, &mut mesh));
    refuse_empty_mesh(input, &mesh, read_triangles)?;
    let cleanup = report_cleanup(input, &mesh);
    let rotated_from_up_axis = up_axis.filter(|&a| a != UpAxis::Y).map(|from| {
        turn_mesh(&mut mesh, up_axis_rotation(from, UpAxis::Y));
        from.name().to_string()
    });
    let glb = kiln_formats::mesh::write_glb(&mesh)?;
    kiln_formats::atomic_write::write_atomic(&out_dir.join(MESH_GLB), &glb)?;
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for p in &mesh.positions {
        for i in 0..3 {
            min[i] = min[i].min(p[i]);
            max[i] = max[i].max(p[i]);
        }
    }
    // World bounds (positions are relative to the mesh's f64 origin).
    for i in 0..3 {
        min[i] = (mesh.origin_m[i] + f64::from(min[i])) as f32;
        max[i] = (mesh.origin_m[i] + f64::from(max[i])) as f32;
    }
    Ok(IngestedMesh {
        vertices: mesh.positions.len(),
        triangles: mesh.indices.len() / 3,
        min,
        max,
        rotated_from_up_axis,
        cleanup,
        repair,
    })
}

/// A texture whose image does not decode is one bad element (issue 44 rule 3): its materials
/// keep their factors without it, with one warning naming the file and every such image, instead
/// of the tile stage failing later without a path. Its bytes become a 1×1 white PNG, so nothing
/// downstream meets them.
fn drop_undecodable_textures(input: &Path, mesh: &mut kiln_formats::mesh::Mesh) {
    let bad: Vec<(usize, String)> = mesh
        .images
        .iter()
        .enumerate()
        .filter(|(_, img)| img.mime != "image/ktx2")
        .filter_map(|(i, img)| {
            image::load_from_memory(&img.bytes)
                .err()
                .map(|e| (i, e.to_string()))
        })
        .collect();
    if bad.is_empty() {
        return;
    }
    for m in &mut mesh.materials {
        for slot in [
            &mut m.base_color_texture,
            &mut m.metallic_roughness_texture,
            &mut m.normal_texture,
            &mut m.occlusion_texture,
            &mut m.emissive_texture,
        ] {
            if slot
                .as_ref()
                .is_some_and(|t| bad.iter().any(|(i, _)| *i == t.image))
            {
                *slot = None;
            }
        }
    }
    let mut white = Vec::new();
    image::RgbaImage::from_pixel(1, 1, image::Rgba([255; 4]))
        .write_to(
            &mut std::io::Cursor::new(&mut white),
            image::ImageFormat::Png,
        )
        .expect("a 1×1 PNG encodes");
    for (i, _) in &bad {
        mesh.images[*i] = kiln_formats::mesh::EmbeddedImage {
            mime: "image/png".into(),
            bytes: white.clone(),
        };
    }
    let each: Vec<String> = bad
        .iter()
        .map(|(i, e)| format!("images[{i}] ({e})"))
        .collect();
    tracing::warn!(
        file = %input.display(),
        "{} image(s) of {} cannot be decoded: {}; their materials keep their colour factors \
         without those textures (re-export the images)",
        bad.len(),
        input.display(),
        each.join("; ")
    );
}

/// A mesh with no triangle to draw is refused here, naming the user's file and why, rather than
/// by a later writer that knows neither.
///
/// # Errors
/// [`Error::Input`] naming `input` when `mesh` has no triangle left of the `read` it had.
fn refuse_empty_mesh(input: &Path, mesh: &kiln_formats::mesh::Mesh, read: usize) -> Result<()> {
    if !mesh.indices.is_empty() {
        return Ok(());
    }
    let why = match read {
        0 => "the file holds no triangles".to_string(),
        n => format!(
            "all {n} triangles read were degenerate (no area: their corners coincide or lie on \
             one line) or duplicates, which ingest removes; are the positions all zero (an \
             accessor without bufferView) or collapsed by the exporter?"
        ),
    };
    Err(Error::Input {
        path: input.to_path_buf(),
        field: "triangles".into(),
        problem: format!("nothing to tile: {why}"),
    })
}

/// Remove `mesh`'s degenerate and duplicate triangles (`[ingest] repair`), logging what went.
fn repair_mesh(
    input: &Path,
    mesh: &mut kiln_formats::mesh::Mesh,
) -> kiln_formats::mesh::MeshRepair {
    let r = kiln_formats::mesh::repair_cleanup(mesh);
    if r.removed_degenerate + r.removed_duplicate > 0 {
        tracing::info!(
            file = %input.display(),
            "ingest: removed {} degenerate and {} duplicate triangles ([ingest] repair = false \
             keeps them)",
            r.removed_degenerate,
            r.removed_duplicate
        );
    }
    r
}

/// Count `mesh`'s faults and warn once, naming the file, when there are any: a content team
/// wants to fix them at the source, and the tiles cannot show better than the source has.
fn report_cleanup(
    input: &Path,
    mesh: &kiln_formats::mesh::Mesh,
) -> kiln_formats::mesh::MeshCleanup {
    let c = kiln_formats::mesh::survey_cleanup(mesh);
    if !c.is_clean() {
        tracing::warn!(
            file = %input.display(),
            degenerate_triangles = c.degenerate_triangles,
            duplicate_triangles = c.duplicate_triangles,
            non_manifold_edges = c.non_manifold_edges,
            "mesh cleanup report: {} degenerate and {} duplicate triangles, {} non-manifold \
             edges kept (with `[ingest] repair` on, the duplicates kept are back faces of \
             single-sided materials; fix the rest in the modelling tool: they cause shading \
             seams, z-fighting and cracks)",
            c.degenerate_triangles,
            c.duplicate_triangles,
            c.non_manifold_edges
        );
    }
    c
}

/// Turn a mesh by the proper rotation `r` (row-major, p′ = r·p; from `up_axis_rotation`, so a
/// permutation of axes with signs): positions and normals. Computed in f64; a quarter turn maps
/// f32 coordinates to f32 coordinates exactly. Texture coordinates and winding are unchanged (a
/// rotation keeps front faces front). The f64 origin turns with them.
fn turn_mesh(mesh: &mut kiln_formats::mesh::Mesh, r: [[f64; 3]; 3]) {
    let turn = |p: [f32; 3]| -> [f32; 3] {
        std::array::from_fn(|i| (0..3).map(|k| r[i][k] * f64::from(p[k])).sum::<f64>() as f32)
    };
    for p in &mut mesh.positions {
        *p = turn(*p);
    }
    let o = mesh.origin_m;
    mesh.origin_m = std::array::from_fn(|i| (0..3).map(|k| r[i][k] * o[k]).sum());
    for n in mesh.normals.iter_mut().flatten() {
        *n = turn(*n);
    }
}

/// File name of the normalised splats written by [`ingest_splats`] (INRIA 3DGS PLY layout).
pub const SPLATS_PLY: &str = "splats.ply";

/// What [`ingest_splats`] read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestedSplats {
    /// Number of splats N.
    pub splats: usize,
    /// Spherical-harmonics degree (0–3).
    pub sh_degree: u32,
    /// Source format (`SplatFormat::name`): INRIA PLY, compressed PLY, SPZ, .splat or GLB.
    pub format: String,
    /// The input's up axis when it was rotated to glTF +Y (`IngestParams::up_axis`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotated_from_up_axis: Option<String>,
    /// The f64 origin (metres, glTF Y-up after any rotation) that the input's positions are kept
    /// around because f32 cannot hold them (`double` PLY coordinates such as UTM; see
    /// `kiln_formats::splats::placed`); absent when the positions fit f32 (origin 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_m: Option<[f64; 3]>,
}

/// Ingest splats trained elsewhere: read any splat format Kiln knows (INRIA 3DGS PLY, PlayCanvas
/// compressed PLY, SPZ v1–4, antimatter15 `.splat`, `KHR_gaussian_splatting` GLB; by extension,
/// see `kiln_formats::splats::convert::read`), reject non-finite values, rotate the
/// scene so that `up_axis` becomes glTF +Y when given, and write `out_dir/splats.ply` in the INRIA
/// layout for the tiler. Positions f32 cannot hold (a `double` PLY in a survey frame) keep an f64
/// origin: the PLY then stores `double x y z` (the true coordinates), which the tile stage reads
/// back with `kiln_formats::splats::ply::read` and puts in the tileset's transforms.
///
/// # Errors
/// [`Error::Format`] for an unknown extension (naming the file and the accepted ones) and the
/// readers' errors (naming the file and the bad property/field); non-finite values.
pub fn ingest_splats(
    input: &Path,
    up_axis: Option<kiln_formats::splats::transform::UpAxis>,
    out_dir: &Path,
) -> Result<IngestedSplats> {
    use kiln_formats::splats::convert::{self, SplatFormat};
    use kiln_formats::splats::ply;
    use kiln_formats::splats::transform::{UpAxis, up_axis_rotation};
    let format = SplatFormat::from_path(input)?;
    let mut placed = convert::read(input)?;
    placed.splats.check_finite("ingest splats")?;
    if let Some(from) = up_axis {
        placed.rotate(up_axis_rotation(from, UpAxis::Y))?;
    }
    ply::write(&out_dir.join(SPLATS_PLY), &placed)?;
    Ok(IngestedSplats {
        splats: placed.splats.len(),
        sh_degree: placed.splats.sh_degree,
        format: format.name().into(),
        rotated_from_up_axis: up_axis.map(|a| a.name().to_string()),
        origin_m: (!placed.is_at_zero()).then_some(placed.origin_m),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instant-ngp capture in `dir` of `n` 8×6 photos `images/f<i>.png` with identity rotations
    /// along x; photo `i` is garbage bytes when `corrupt(i)`.
    fn small_capture(dir: &Path, n: usize, corrupt: impl Fn(usize) -> bool) -> std::path::PathBuf {
        std::fs::create_dir_all(dir.join("images")).unwrap();
        let mut frames = Vec::new();
        for i in 0..n {
            let png = dir.join(format!("images/f{i}.png"));
            match corrupt(i) {
                true => std::fs::write(&png, b"\x89PNG\r\n\x1a\n truncated").unwrap(),
                false => image::RgbImage::from_pixel(8, 6, image::Rgb([10, 20, 30]))
                    .save(&png)
                    .unwrap(),
            }
            frames.push(format!(
                r#"{{"file_path": "images/f{i}.png", "transform_matrix": [[1,0,0,{i}],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}}"#
            ));
        }
        let json = dir.join("transforms.json");
        let text = format!(
            r#"{{"fl_x": 8, "w": 8, "h": 6, "frames": [{}]}}"#,
            frames.join(",")
        );
        std::fs::write(&json, text).unwrap();
        json
    }

    #[test]
    fn an_unreadable_photo_is_skipped_while_enough_views_remain() {
        let d = tempfile::tempdir().unwrap();
        let json = small_capture(&d.path().join("cap"), 6, |i| i == 2);
        let ing = ingest_capture(&json, &IngestParams::default(), &d.path().join("out")).unwrap();
        assert_eq!(ing.frames.len(), 5);
        assert_eq!(ing.skipped, ["f2.png"]);
    }

    #[test]
    fn below_the_minimum_one_error_names_every_skipped_frame() {
        let d = tempfile::tempdir().unwrap();
        // 5 listed: one photo unreadable, one missing, one pose mirrored: 2 remain (< 4).
        let json = small_capture(&d.path().join("cap"), 5, |i| i == 0);
        std::fs::remove_file(d.path().join("cap/images/f1.png")).unwrap();
        let text = std::fs::read_to_string(&json).unwrap();
        let text = text.replacen("[[1,0,0,2]", "[[-1,0,0,2]", 1);
        std::fs::write(&json, text).unwrap();
        let err = ingest_capture(&json, &IngestParams::default(), &d.path().join("out"))
            .unwrap_err()
            .to_string();
        for name in ["f0.png", "f1.png", "f2.png"] {
            assert!(err.contains(name), "{err}");
        }
        assert!(
            err.contains("only 2 usable views") && err.contains("at least 4"),
            "{err}"
        );
        // A capture listing 2 frames, none skipped, is trained as listed.
        let two = small_capture(&d.path().join("two"), 2, |_| false);
        let ing = ingest_capture(&two, &IngestParams::default(), &d.path().join("o2")).unwrap();
        assert_eq!(ing.frames.len(), 2);
    }

    /// Issue 44 rule 3 for the readers' newer skips (a transposed matrix, a frame listed twice,
    /// an absolute `file_path`): the job goes on with the rest while [`MIN_VIEWS`] remain, and
    /// below that one error names every skipped frame.
    #[test]
    fn transposed_and_duplicate_frames_are_skipped_down_to_the_minimum() {
        let d = tempfile::tempdir().unwrap();
        let damage = |dir: &Path, n: usize| {
            let json = small_capture(dir, n, |_| false);
            let text = std::fs::read_to_string(&json).unwrap();
            let text = text
                .replacen("[[1,0,0,3],[0,1,0,0],[0,0,1,0],[0,0,0,1]]", "[[1,0,0,0],[0,1,0,0],[0,0,1,0],[3,0,0,1]]", 1)
                .replacen("\"frames\": [", "\"frames\": [{\"file_path\": \"images/f1.png\", \"transform_matrix\": [[1,0,0,9],[0,1,0,0],[0,0,1,0],[0,0,0,1]]},", 1);
            std::fs::write(&json, text).unwrap();
            json
        };
        let json = damage(&d.path().join("seven"), 7);
        let ing = ingest_capture(&json, &IngestParams::default(), &d.path().join("o7")).unwrap();
        assert_eq!(ing.frames.len(), 6);
        assert_eq!(ing.skipped, ["f1.png", "f3.png"]);

        let json = damage(&d.path().join("four"), 4);
        let err = ingest_capture(&json, &IngestParams::default(), &d.path().join("o4"))
            .unwrap_err()
            .to_string();
        for name in ["f1.png", "f3.png"] {
            assert!(err.contains(name), "{err}");
        }
        assert!(err.contains("only 3 usable views"), "{err}");
    }

    /// Issue 44, rule 2: ingest applies the readers' one value policy before any later stage
    /// runs. A log-scale of 100 (which used to reach `tile` and fail there with a camera
    /// error) is clamped to the policy's e^20 m; a negative `.splat` scale is refused naming the
    /// file, the attribute and the splat.
    #[test]
    fn splat_values_out_of_their_domain_are_clamped_or_refused_at_ingest() {
        use kiln_formats::splats::GaussianSplats;
        use kiln_formats::splats::domain::LOG_SCALE_MAX;
        let d = tempfile::tempdir().unwrap();
        let s = GaussianSplats {
            means: vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
            log_scales: vec![-3.0, 100.0, -3.0, -2.0, -2.0, -2.0],
            rotations: vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
            logit_opacities: vec![0.5, 0.5],
            sh_coeffs: vec![0.1; 6],
            sh_degree: 0,
        };
        let input = d.path().join("huge.ply");
        kiln_formats::splats::ply::write(&input, &s).unwrap();
        let out = d.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        ingest_splats(&input, None, &out).unwrap();
        let back = kiln_formats::splats::ply::read(&out.join(SPLATS_PLY)).unwrap();
        assert_eq!(back.splats.log_scales[1], LOG_SCALE_MAX);
        // `.splat`: position, linear scale −0.5 on splat 0, colour, rotation.
        let mut row = Vec::new();
        for v in [0.0f32, 0.0, 0.0, 0.1, -0.5, 0.1] {
            row.extend(v.to_le_bytes());
        }
        row.extend([128, 128, 128, 255, 255, 128, 128, 128]);
        let bad = d.path().join("bad.splat");
        std::fs::write(&bad, &row).unwrap();
        let e = ingest_splats(&bad, None, &out).unwrap_err().to_string();
        assert!(
            e.contains(&bad.display().to_string()) && e.contains("scale of splat 0"),
            "{e}"
        );
    }

    fn frame(mask: Option<&str>) -> IngestedFrame {
        IngestedFrame {
            name: "a.jpg".into(),
            image: "images/a.png".into(),
            width: 2,
            height: 1,
            fx: 1.0,
            fy: 1.0,
            cx: 1.0,
            cy: 0.5,
            world_to_camera: [[0.0; 4]; 4],
            mask: mask.map(String::from),
            alpha: None,
            valid: None,
            split: None,
        }
    }

    /// gaussian-splatting #25: images one pixel narrower than their camera (41 → 40 px) ingest,
    /// with the intrinsics rescaled to the image; images of another aspect ratio (the camera's
    /// 41×30 stored as 30×41, as an unapplied EXIF rotation gives) are an error naming the image.
    #[test]
    fn a_one_pixel_size_mismatch_is_rescaled_and_another_aspect_ratio_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        for (folder, (w, h)) in [("near", (40u32, 30u32)), ("rotated", (30, 41))] {
            let cap = d.path().join(folder);
            std::fs::create_dir_all(cap.join("images")).unwrap();
            image::RgbImage::from_pixel(w, h, image::Rgb([90, 90, 90]))
                .save(cap.join("images/a.png"))
                .unwrap();
            let json = r#"{"fl_x": 41, "fl_y": 41, "cx": 20.5, "cy": 15, "w": 41, "h": 30,
                "frames": [{"file_path": "images/a.png",
                "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,2],[0,0,0,1]]}]}"#;
            std::fs::write(cap.join("transforms.json"), json).unwrap();
        }
        let params = IngestParams::default();
        let near = d.path().join("near/transforms.json");
        let ing = ingest_capture(&near, &params, &d.path().join("out1")).unwrap();
        let f = &ing.frames[0];
        assert_eq!((f.width, f.height), (40, 30));
        assert!(
            (f.fx - 40.0).abs() < 1e-9 && (f.cx - 20.0).abs() < 1e-9,
            "{f:?}"
        );
        assert!(
            (f.fy - 41.0).abs() < 1e-9 && (f.cy - 15.0).abs() < 1e-9,
            "{f:?}"
        );
        // That photo is warned about (1 px off its camera's 41×30); one of the declared size,
        // or the declared size downscaled by max_side, is not.
        let cap = capture::read_capture(&near).unwrap();
        let frame = &cap.frames[0];
        assert_eq!(undeclared_rescale(frame, 40, 30, None), Some((41, 30)));
        assert_eq!(undeclared_rescale(frame, 41, 30, None), None);
        let (w, h) = capture::scaled_size(41, 30, Some(20));
        assert_eq!(undeclared_rescale(frame, w, h, Some(20)), None);
        // The rotated photo is one bad view (issue 44 rule 3): skipped, with its reason in a
        // warning; its capture, left without views, is one error naming it.
        let rotated = d.path().join("rotated/transforms.json");
        crate::warnings::install_for_tests();
        let c = crate::warnings::Collector::begin(crate::dag::StageKind::INGEST);
        let err = c
            .span()
            .in_scope(|| ingest_capture(&rotated, &params, &d.path().join("out2")))
            .unwrap_err()
            .to_string();
        let warned = c.finish().join("\n");
        assert!(
            warned.contains("a.png") && warned.contains("30×41") && warned.contains("41×30"),
            "{warned}"
        );
        assert!(
            err.contains("a.png") && err.contains("only 0 usable views"),
            "{err}"
        );
    }

    /// brush #20: an RGBA capture (a transforms.json over two 4×2 RGBA PNGs whose right half is
    /// transparent) ingests without error; the premultiplied colour and the alpha PNG are written,
    /// and loading composites over the training background: opaque pixels keep their colour,
    /// transparent ones become the background exactly, a half-transparent one is the mix.
    #[test]
    fn rgba_images_are_trained_over_the_background() {
        let d = tempfile::tempdir().unwrap();
        let cap = d.path().join("cap");
        std::fs::create_dir_all(cap.join("images")).unwrap();
        for name in ["a", "b"] {
            let mut img = image::RgbaImage::new(4, 2);
            for (x, _, px) in img.enumerate_pixels_mut() {
                *px = match x {
                    0 => image::Rgba([255, 0, 0, 255]),
                    1 => image::Rgba([0, 0, 255, 128]),
                    _ => image::Rgba([0, 255, 0, 0]),
                };
            }
            img.save(cap.join(format!("images/{name}.png"))).unwrap();
        }
        let json = r#"{"fl_x": 4, "fl_y": 4, "cx": 2, "cy": 1, "w": 4, "h": 2, "frames": [
            {"file_path": "images/a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,2],[0,0,0,1]]},
            {"file_path": "images/b.png", "transform_matrix": [[1,0,0,1],[0,1,0,0],[0,0,1,2],[0,0,0,1]]}]}"#;
        std::fs::write(cap.join("transforms.json"), json).unwrap();
        let out = d.path().join("ingest");
        let ing =
            ingest_capture(&cap.join("transforms.json"), &IngestParams::default(), &out).unwrap();
        let f = &ing.frames[0];
        assert_eq!(f.alpha.as_deref(), Some("alpha/a.png.png"));
        let bg = [0.0, 0.5, 1.0];
        let px = load_frame_rgb(&out, f, bg).unwrap();
        assert_eq!(&px[0..3], &[1.0, 0.0, 0.0]);
        // 128/255 opaque blue over the background: 0.502·1 + 0.498·bg (8-bit round trips).
        let a = 128.0 / 255.0;
        let want = [(1.0 - a) * bg[0], (1.0 - a) * bg[1], a + (1.0 - a) * bg[2]];
        for (got, want) in px[3..6].iter().zip(want) {
            assert!(
                (got - want).abs() < 2.0 / 255.0,
                "{:?} vs {want:?}",
                &px[3..6]
            );
        }
        assert_eq!(&px[6..9], &bg);
        assert_eq!(&px[9..12], &bg);
        // The transparency the trainer re-composites with: 1 − alpha per pixel.
        let t = load_frame(&out, f, bg, true).unwrap().transparency;
        let t = t.expect("an RGBA frame has a transparency");
        assert_eq!(t.len(), 8);
        assert_eq!((t[0], t[2], t[3]), (0.0, 1.0, 1.0));
        assert!((t[1] - (1.0 - a)).abs() < 1e-6, "{t:?}");
    }

    /// A lens whose undistorted corners see beyond the photo (OPENCV k1 = 0.5 pushes them
    /// outwards): ingest writes a valid-pixel mask and training gives those corners weight 0.
    #[test]
    fn pixels_undistortion_cannot_fill_get_loss_weight_zero() {
        let d = tempfile::tempdir().unwrap();
        let cap = d.path().join("cap");
        std::fs::create_dir_all(cap.join("images")).unwrap();
        image::RgbImage::from_pixel(40, 30, image::Rgb([200, 100, 50]))
            .save(cap.join("images/a.png"))
            .unwrap();
        let json = r#"{"camera_model": "OPENCV", "fl_x": 30, "fl_y": 30, "cx": 20, "cy": 15,
            "w": 40, "h": 30, "k1": 0.5, "k2": 0, "p1": 0, "p2": 0, "frames": [
            {"file_path": "images/a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,2],[0,0,0,1]]}]}"#;
        std::fs::write(cap.join("transforms.json"), json).unwrap();
        let out = d.path().join("ingest");
        let params = IngestParams {
            max_side: None,
            ..IngestParams::default()
        };
        let ing = ingest_capture(&cap.join("transforms.json"), &params, &out).unwrap();
        let f = &ing.frames[0];
        assert_eq!(f.valid.as_deref(), Some("valid/a.png.png"));
        let w = load_frame(&out, f, [0.0; 3], true)
            .unwrap()
            .loss_weights
            .expect("weights from the valid-pixel mask");
        // Corner (r² = (20² + 15²)/30² ≈ 0.69: distorted 1.35× further out, off the photo) is
        // ignored; the centre is kept.
        assert_eq!(w[0], 0.0);
        assert_eq!(w[15 * 40 + 20], 1.0);
        let kept = w.iter().filter(|&&v| v == 1.0).count();
        assert!(kept > 40 * 30 / 2 && kept < 40 * 30, "{kept}");
    }

    /// `invert_masks`: a mask that marks what to leave out (white) ingests as its inverse.
    #[test]
    fn inverted_masks_keep_the_black_pixels() {
        let d = tempfile::tempdir().unwrap();
        let cap = d.path().join("cap");
        std::fs::create_dir_all(cap.join("images")).unwrap();
        std::fs::create_dir_all(cap.join("masks")).unwrap();
        image::RgbImage::from_pixel(16, 16, image::Rgb([200, 100, 50]))
            .save(cap.join("images/a.png"))
            .unwrap();
        // Left half white (to ignore), right half black.
        image::GrayImage::from_fn(16, 16, |x, _| image::Luma([if x < 8 { 255 } else { 0 }]))
            .save(cap.join("masks/a.png"))
            .unwrap();
        let json = r#"{"fl_x": 16, "fl_y": 16, "cx": 8, "cy": 8, "w": 16, "h": 16, "frames": [
            {"file_path": "images/a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,2],[0,0,0,1]]}]}"#;
        std::fs::write(cap.join("transforms.json"), json).unwrap();
        let ingest = |invert_masks: bool, out: &str| {
            let params = IngestParams {
                max_side: None,
                masks: true,
                invert_masks,
                ..IngestParams::default()
            };
            let out = d.path().join(out);
            let ing = ingest_capture(&cap.join("transforms.json"), &params, &out).unwrap();
            load_frame(&out, &ing.frames[0], [0.0; 3], true)
                .unwrap()
                .loss_weights
                .unwrap()
        };
        let plain = ingest(false, "plain");
        let inverted = ingest(true, "inverted");
        assert_eq!((plain[0], plain[15]), (1.0, 0.0));
        assert_eq!((inverted[0], inverted[15]), (0.0, 1.0));
    }

    #[test]
    fn a_mesh_job_reads_an_obj_and_names_the_formats_it_reads_for_an_stl() {
        let d = tempfile::tempdir().unwrap();
        let obj = d.path().join("tri.obj");
        std::fs::write(&obj, "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n").unwrap();
        let ingested = ingest_mesh(&obj, &IngestParams::default(), d.path()).unwrap();
        assert_eq!((ingested.vertices, ingested.triangles), (3, 1));
        assert!(d.path().join(MESH_GLB).exists());
        let stl = d.path().join("cube.stl");
        std::fs::write(&stl, "solid cube\nendsolid\n").unwrap();
        let out = d.path().join("stl");
        std::fs::create_dir_all(&out).unwrap();
        let err = ingest_mesh(&stl, &IngestParams::default(), &out)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cube.stl") && err.contains(".obj") && err.contains("`.stl`"),
            "{err}"
        );
        assert!(!out.join(MESH_GLB).exists());
    }

    /// The cleanup report of an OBJ with hand-placed faults: a quad (two triangles) repeated
    /// with reversed winding, a triangle with a repeated corner, and a fin on the quad's
    /// diagonal (three triangles on one edge). By default the degenerate triangle is removed and
    /// counted in `repair`; the reversed copy stays (its material is single-sided: it is the
    /// quad's back face); with `repair = false` everything is kept and counted.
    #[test]
    fn a_mesh_ingest_repairs_degenerate_faces_and_counts_what_is_left() {
        let d = tempfile::tempdir().unwrap();
        let obj = d.path().join("faulty.obj");
        std::fs::write(
            &obj,
            "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nv 0.5 0.5 1\n\
             f 1 2 3\nf 1 3 4\nf 3 2 1\nf 1 1 2\nf 1 3 5\n",
        )
        .unwrap();
        let counts = |c: kiln_formats::mesh::MeshCleanup| {
            (
                c.degenerate_triangles,
                c.duplicate_triangles,
                c.non_manifold_edges,
                c.boundary_edges,
            )
        };
        let ingested = ingest_mesh(&obj, &IngestParams::default(), d.path()).unwrap();
        let r = ingested.repair.expect("repaired by default");
        assert_eq!(
            (
                r.removed_degenerate,
                r.removed_duplicate,
                r.kept_back_to_back
            ),
            (1, 0, 1)
        );
        assert_eq!(ingested.triangles, 4);
        // Quad border (4) + the fin's two outer edges.
        assert_eq!(counts(ingested.cleanup), (0, 1, 1, 6));
        let json = serde_json::to_value(&ingested).unwrap();
        assert_eq!(json["repair"]["removed_degenerate"], 1);

        let keep = IngestParams {
            repair: false,
            ..IngestParams::default()
        };
        let ingested = ingest_mesh(&obj, &keep, d.path()).unwrap();
        assert_eq!(ingested.repair, None);
        assert_eq!(ingested.triangles, 5);
        assert_eq!(counts(ingested.cleanup), (1, 1, 1, 6));
    }

    /// A mesh whose every triangle is degenerate (all positions at one point, as a POSITION
    /// accessor without bufferView reads) is refused naming the user's file and why, not by a
    /// writer later as `<in-memory mesh>` "has no indices".
    #[test]
    fn a_mesh_left_without_triangles_is_refused_naming_the_file_and_why() {
        let d = tempfile::tempdir().unwrap();
        let obj = d.path().join("collapsed.obj");
        std::fs::write(&obj, "v 0 0 0\nv 0 0 0\nv 0 0 0\nf 1 2 3\nf 3 2 1\n").unwrap();
        let e = ingest_mesh(&obj, &IngestParams::default(), d.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("collapsed.obj") && e.contains("all 2 triangles read were degenerate"),
            "{e}"
        );
        assert!(!d.path().join(MESH_GLB).exists());
    }

    /// A texture whose image does not decode is skipped (issue 44 rule 3): the material keeps
    /// its colour factor, one warning names the file and the image, and the mesh ingests.
    #[test]
    fn an_undecodable_texture_is_dropped_with_one_warning_naming_it() {
        use kiln_formats::mesh::{EmbeddedImage, Material, Mesh, TextureRef};
        let d = tempfile::tempdir().unwrap();
        let mut material = Material::diffuse([0.2, 0.4, 0.6, 1.0]);
        material.base_color_texture = Some(TextureRef {
            image: 0,
            sampler: Default::default(),
            tex_coord: 0,
            transform: None,
        });
        let mesh = Mesh {
            origin_m: [0.0; 3],
            positions: vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
            normals: None,
            uvs: Some(vec![[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
            uvs1: None,
            colors: None,
            indices: vec![0, 1, 2],
            triangle_materials: vec![0],
            materials: vec![material],
            images: vec![EmbeddedImage {
                mime: "image/png".into(),
                bytes: b"\x89PNG\r\n\x1a\nGARBAGEGARBAGE".to_vec(),
            }],
        };
        let glb = d.path().join("badpng.glb");
        std::fs::write(&glb, kiln_formats::mesh::write_glb(&mesh).unwrap()).unwrap();
        crate::warnings::install_for_tests();
        let c = crate::warnings::Collector::begin(crate::dag::StageKind::INGEST);
        let out = d.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        c.span()
            .in_scope(|| ingest_mesh(&glb, &IngestParams::default(), &out))
            .unwrap();
        let warned = c.finish();
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(warned[0].contains("badpng.glb") && warned[0].contains("images[0]"));
        let back = kiln_formats::mesh::read_gltf(&out.join(MESH_GLB)).unwrap();
        assert!(back.materials[0].base_color_texture.is_none());
        assert_eq!(back.materials[0].base_color_factor, [0.2, 0.4, 0.6, 1.0]);
    }

    /// A Z-up OBJ (Blender's and most scanners' convention) turned by `up_axis = "z"`: glTF's
    /// (x, y, z) = the input's (x, z, −y) — the turn Blender's own glTF exporter applies — for
    /// positions and normals alike, read back from the written `mesh.glb`.
    #[test]
    fn a_z_up_mesh_is_turned_so_that_its_up_axis_becomes_gltf_y() {
        let d = tempfile::tempdir().unwrap();
        let obj = d.path().join("tower.obj");
        std::fs::write(
            &obj,
            "v 1 2 3\nv 1 2 13\nv 4 2 3\nvn 0 -1 0\nf 1//1 2//1 3//1\n",
        )
        .unwrap();
        let z_up = IngestParams {
            up_axis: Some("z".into()),
            ..IngestParams::default()
        };
        let ingested = ingest_mesh(&obj, &z_up, d.path()).unwrap();
        assert_eq!(ingested.rotated_from_up_axis.as_deref(), Some("z"));
        // Height 10 along the input's z is now along glTF y.
        assert_eq!(
            (ingested.min, ingested.max),
            ([1.0, 3.0, -2.0], [4.0, 13.0, -2.0])
        );
        let mesh = kiln_formats::mesh::read_mesh(&d.path().join(MESH_GLB)).unwrap();
        let mut positions = mesh.positions.clone();
        positions.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert_eq!(
            positions,
            vec![[1.0, 3.0, -2.0], [1.0, 13.0, -2.0], [4.0, 3.0, -2.0]]
        );
        // The normal (0, −1, 0) faced away from +y in the input: now it faces +z.
        assert!(mesh.normals.unwrap().iter().all(|n| *n == [0.0, 0.0, 1.0]));
        // Without up_axis nothing turns.
        let plain = d.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        let same = ingest_mesh(&obj, &IngestParams::default(), &plain).unwrap();
        assert_eq!((same.min, same.max), ([1.0, 2.0, 3.0], [4.0, 2.0, 13.0]));
        assert_eq!(same.rotated_from_up_axis, None);
    }

    #[test]
    fn pixels_outside_the_mask_become_the_training_background() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("images")).unwrap();
        std::fs::create_dir_all(d.path().join("masks")).unwrap();
        let img = capture::RgbImage {
            width: 2,
            height: 1,
            data: vec![0.2, 0.4, 0.6, 0.2, 0.4, 0.6],
        };
        write_png(&d.path().join("images/a.png"), &img).unwrap();
        write_mask_png(&d.path().join("masks/a.png"), 2, 1, vec![255, 0]).unwrap();
        let bg = [1.0, 0.5, 0.0];
        let px = load_frame_rgb(d.path(), &frame(Some("masks/a.png")), bg).unwrap();
        // Left pixel kept (8-bit round trip: 0.2 → 51/255), right pixel = background exactly.
        assert!((px[0] - 51.0 / 255.0).abs() < 1e-6, "{px:?}");
        assert_eq!(&px[3..6], &bg);
        let unmasked = load_frame_rgb(d.path(), &frame(None), bg).unwrap();
        assert!((unmasked[3] - 51.0 / 255.0).abs() < 1e-6);
        // Masked-out pixels are all background (transparency 1); no mask, no transparency.
        let f = load_frame(d.path(), &frame(Some("masks/a.png")), bg, false).unwrap();
        assert_eq!(
            (f.transparency, f.loss_weights),
            (Some(vec![0.0, 1.0]), None)
        );
        let plain = load_frame(d.path(), &frame(None), bg, false).unwrap();
        assert_eq!((plain.transparency, plain.loss_weights), (None, None));
        // Masks as ignored pixels: the photo is kept and the outside pixel weighs 0.
        let f = load_frame(d.path(), &frame(Some("masks/a.png")), bg, true).unwrap();
        assert_eq!(f.loss_weights, Some(vec![1.0, 0.0]));
        assert_eq!(f.transparency, None);
        assert!((f.image[3] - 51.0 / 255.0).abs() < 1e-6, "{:?}", f.image);
    }

    #[test]
    fn a_mask_of_another_size_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("images")).unwrap();
        std::fs::create_dir_all(d.path().join("masks")).unwrap();
        let img = capture::RgbImage {
            width: 2,
            height: 1,
            data: vec![0.0; 6],
        };
        write_png(&d.path().join("images/a.png"), &img).unwrap();
        write_mask_png(&d.path().join("masks/a.png"), 1, 1, vec![255]).unwrap();
        let err = load_frame_rgb(d.path(), &frame(Some("masks/a.png")), [0.0; 3])
            .unwrap_err()
            .to_string();
        assert!(err.contains("masks/a.png") && err.contains("1×1"), "{err}");
    }

    /// Issue 44 rule 7: photos of one camera 101 × 75 and 100 × 75 px would round to 50 × 37 and
    /// 50 × 38 one by one at `max_side` 50; ingested, they all have the camera's one size and one
    /// set of intrinsics, scaled by that exact ratio.
    #[test]
    fn photos_of_one_camera_keep_one_size_after_downscaling() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("images")).unwrap();
        for (name, w) in [("a", 101), ("b", 100), ("c", 101)] {
            image::RgbImage::from_pixel(w, 75, image::Rgb([90, 120, 150]))
                .save(d.path().join(format!("images/{name}.png")))
                .unwrap();
        }
        let json = r#"{"fl_x": 80, "fl_y": 80, "cx": 50.5, "cy": 37.5, "w": 101, "h": 75,
            "frames": [
            {"file_path": "images/a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,2],[0,0,0,1]]},
            {"file_path": "images/b.png", "transform_matrix": [[1,0,0,1],[0,1,0,0],[0,0,1,2],[0,0,0,1]]},
            {"file_path": "images/c.png", "transform_matrix": [[1,0,0,2],[0,1,0,0],[0,0,1,2],[0,0,0,1]]}]}"#;
        std::fs::write(d.path().join("transforms.json"), json).unwrap();
        let params = IngestParams {
            max_side: Some(50),
            ..IngestParams::default()
        };
        let ing = ingest_capture(d.path(), &params, &d.path().join("out")).unwrap();
        let want = capture::scaled_size(101, 75, Some(50));
        for f in &ing.frames {
            assert_eq!((f.width, f.height), want, "{}", f.name);
            assert_eq!((f.fx, f.fy), (80.0 * 50.0 / 101.0, 80.0 * 37.0 / 75.0));
            let png = image::open(d.path().join("out").join(&f.image)).unwrap();
            assert_eq!((png.width(), png.height()), want);
        }
    }

    /// Issue 42: the held-out ground truth ingest writes for the fox at `max_side` 270 (a 7.1×
    /// factor) is an area downscale of the photo, as OpenCV `INTER_AREA` or PIL `BOX` would give:
    /// it matches an independent f64 area average (then undistorted as ingest does) to ≥ 45 dB,
    /// so Kiln's PSNR reads like the field's. 45 dB: 8-bit rounding alone gives about 59 dB; the
    /// triangle filter Kiln used before matched area downscales at only about 30 dB.
    #[test]
    fn held_out_ground_truth_is_an_area_downscale_of_the_photo() {
        let fox = kiln_datasets::resolve("capture-fox-instantngp").unwrap();
        let d = tempfile::tempdir().unwrap();
        let params = IngestParams {
            max_side: Some(270),
            ..IngestParams::default()
        };
        let ingested = ingest_capture(&fox, &params, d.path()).unwrap();
        let cap = capture::read_capture(&fox).unwrap();
        // The views training holds out: every `eval_every`-th (8th) by name.
        for (f, source) in ingested.frames.iter().zip(&cap.frames).step_by(8) {
            let photo = image::open(&source.image_path).unwrap().to_rgb8();
            let k = capture::Intrinsics {
                fx: f.fx,
                fy: f.fy,
                cx: f.cx,
                cy: f.cy,
                width: f.width,
                height: f.height,
            };
            let reference = capture::undistort(
                &area_average_f64(&photo, (f.width, f.height)),
                &k,
                &source.distortion,
            );
            let truth = image::open(d.path().join(&f.image)).unwrap().to_rgb8();
            let valid = f
                .valid
                .as_ref()
                .map(|v| image::open(d.path().join(v)).unwrap().to_luma8().into_raw());
            let db = psnr_over_valid(truth.as_raw(), &reference.data, valid.as_deref());
            assert!(
                db >= 45.0,
                "{}: {db:.2} dB against an area downscale",
                f.name
            );
        }
    }

    /// An area downscale written apart from `capture::area_resize`: each output pixel is the sum
    /// over every source pixel of its value times the area of its overlap with the output pixel's
    /// footprint, over the footprint's area, in f64, two-dimensional (not separable).
    fn area_average_f64(photo: &image::RgbImage, (w, h): (u32, u32)) -> capture::RgbImage {
        let (sx, sy) = (
            f64::from(photo.width()) / f64::from(w),
            f64::from(photo.height()) / f64::from(h),
        );
        let overlap =
            |lo: f64, hi: f64, k: u32| (hi.min(f64::from(k) + 1.0) - lo.max(f64::from(k))).max(0.0);
        let mut data = Vec::with_capacity((w * h * 3) as usize);
        for j in 0..h {
            let (y0, y1) = (f64::from(j) * sy, f64::from(j + 1) * sy);
            for i in 0..w {
                let (x0, x1) = (f64::from(i) * sx, f64::from(i + 1) * sx);
                let mut sum = [0.0_f64; 3];
                let mut area = 0.0;
                for y in y0.floor() as u32..(y1.ceil() as u32).min(photo.height()) {
                    for x in x0.floor() as u32..(x1.ceil() as u32).min(photo.width()) {
                        let a = overlap(x0, x1, x) * overlap(y0, y1, y);
                        for (s, v) in sum.iter_mut().zip(photo.get_pixel(x, y).0) {
                            *s += a * f64::from(v);
                        }
                        area += a;
                    }
                }
                data.extend(sum.map(|s| (s / area / 255.0) as f32));
            }
        }
        capture::RgbImage {
            width: w,
            height: h,
            data,
        }
    }

    /// PSNR in dB of 8-bit `truth` against `reference` (in [0, 1]) over the pixels `valid` marks
    /// (255), every pixel when `None`.
    fn psnr_over_valid(truth: &[u8], reference: &[f32], valid: Option<&[u8]>) -> f64 {
        let (mut se, mut n) = (0.0_f64, 0_usize);
        for (p, (t, r)) in truth
            .chunks_exact(3)
            .zip(reference.chunks_exact(3))
            .enumerate()
        {
            if valid.is_some_and(|v| v[p] < 255) {
                continue;
            }
            for (&t, &r) in t.iter().zip(r) {
                se += (f64::from(t) / 255.0 - f64::from(r)).powi(2);
                n += 1;
            }
        }
        -10.0 * (se / n as f64).log10()
    }

    #[test]
    fn every_numeric_field_has_a_bound() {
        let p = IngestParams::default();
        p.validate().unwrap();
        assert_eq!(crate::bounds::unbounded_and_stale(&p), (vec![], vec![]));
        // Absent: full size.
        IngestParams {
            max_side: None,
            ..p.clone()
        }
        .validate()
        .unwrap();
        let e = IngestParams {
            max_side: Some(8),
            ..p
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("`max_side`: expected 16 ..= 16384"), "{e}");
    }
}
