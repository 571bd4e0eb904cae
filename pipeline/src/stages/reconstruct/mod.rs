//! `reconstruct`: camera poses for a capture that has none, by structure-from-motion with COLMAP.
//!
//! Input: a folder of photos (in `images/` or at its top level) or one video file. A video is
//! first reduced to its sharpest frame per window ([`video`]). COLMAP (the installed binary; we
//! call it, we do not reimplement SfM) then runs feature extraction, matching (exhaustive for
//! photos, sequential for video frames) and incremental mapping. The model with the most
//! registered images is written as a COLMAP binary model, so the stage output is an ordinary
//! COLMAP capture that `ingest` reads like any other:
//!
//! ```text
//! reconstruct/images/…                       the photos (EXIF orientation applied) or frames
//! reconstruct/sparse/0/{cameras,images,points3D}.bin
//! reconstruct/reconstruct.json               COLMAP version, command lines, quality figures
//! reconstruct/logs/*.log                     COLMAP's and ffmpeg's output
//! ```
//!
//! Quality gate: the stage fails, naming the unregistered images, when fewer than
//! `min_registered_fraction` of the images register, instead of training on a broken model.
//! COLMAP runs on the CPU here (GPU SIFT when the installed COLMAP was built with CUDA and a CUDA
//! driver is present); its CPU time is metered with the stage (child process CPU time).
//!
//! Source of the recipe: COLMAP's documented command-line tutorial (`feature_extractor`,
//! `exhaustive_matcher` / `sequential_matcher`, `mapper`) and nerfstudio's `ns-process-data`
//! (sequential matching for video, one shared camera per device).

pub mod sharpness;
mod stage;
pub mod tool;
pub mod video;

pub use stage::{Reconstruct, ReconstructSummary};

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_formats::capture::{ColmapModelStats, read_colmap_model_stats};
use serde::{Deserialize, Serialize};

use self::tool::Tool;
use crate::bounds::{Bound, Bounded};
use crate::{Error, Result};

/// When a capture job runs `reconstruct`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReconstructMode {
    /// When the input has images (or is a video) but no camera poses (no transforms*.json,
    /// poses_bounds.npy or COLMAP model).
    #[default]
    Auto,
    /// Always, ignoring any poses the input ships (e.g. to compare against them).
    Always,
    /// Never: a capture without poses is an error.
    Never,
}

/// How COLMAP pairs images for feature matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Matcher {
    /// `sequential` for video frames, `exhaustive` for photos.
    #[default]
    Auto,
    /// Every pair (O(n²); right for unordered photo sets up to a few hundred images).
    Exhaustive,
    /// Each image with its `sequential_overlap` successors by name (video, ordered walks).
    Sequential,
}

/// COLMAP camera models the stage accepts: those Kiln's COLMAP reader undistorts on ingest, which
/// are all eleven of COLMAP 3.8 (model ids 0..=10; later COLMAP models such as `FISHEYE` are not).
/// The fisheye models and `FOV` are undistorted to a pinhole image with the same focal length,
/// which crops a wide lens's periphery ([`kiln_formats::capture::undistort`]).
pub const CAMERA_MODELS: [&str; 11] = [
    "SIMPLE_PINHOLE",
    "PINHOLE",
    "SIMPLE_RADIAL",
    "RADIAL",
    "OPENCV",
    "OPENCV_FISHEYE",
    "FULL_OPENCV",
    "FOV",
    "SIMPLE_RADIAL_FISHEYE",
    "RADIAL_FISHEYE",
    "THIN_PRISM_FISHEYE",
];

/// Parameters of the `reconstruct` stage (the job file's `[reconstruct]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconstructParams {
    /// When to run the stage. Default `auto`.
    pub mode: ReconstructMode,
    /// COLMAP camera model, one of [`CAMERA_MODELS`]. Default `SIMPLE_RADIAL` (COLMAP's default:
    /// one focal length and one radial term, robust for phone cameras).
    pub camera_model: String,
    /// One camera (shared intrinsics) for all images, as for photos from a single device or a
    /// video. Default true.
    pub single_camera: bool,
    /// Matching strategy. Default `auto`.
    pub matcher: Matcher,
    /// Images sharing a sequential match window (COLMAP `SequentialMatching.overlap`). Default 10.
    pub sequential_overlap: u32,
    /// Longest image side for SIFT extraction, pixels (COLMAP `SiftExtraction.max_image_size`).
    /// Default 1600.
    pub max_image_size: u32,
    /// Most SIFT features per image (COLMAP `SiftExtraction.max_num_features`). Absent: 8192
    /// (COLMAP's default) with GPU SIFT, 2048 on the CPU — COLMAP 3.8's CPU matcher is brute
    /// force, so matching time grows with the square of this number (50 photos, exhaustive, on 2
    /// cores: about 3.5 minutes at 1024 features, hours at 8192).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_num_features: Option<u32>,
    /// 35 mm-equivalent focal length of the camera, millimetres (e.g. 26 for a phone's main
    /// camera), used as the initial focal length for images without EXIF focal data (video
    /// frames): focal in pixels = f35 / 36 × the longer image side. Absent: taken from the
    /// video's metadata when it records one, else COLMAP's guess (1.2 × the longer side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focal_length_35mm: Option<f64>,
    /// Quality gate: the least share of images that must register, 0..=1. Default 0.6.
    pub min_registered_fraction: f64,
    /// Quality gate: the fewest 3D points per registered image. Default 10: COLMAP models of
    /// photo sets that train well hold hundreds per image, while a model of 25 points for 20
    /// photos (a textureless object) starts training from a handful of splats that never grow
    /// into the scene. 0 turns this check off (training then tops the points up at random,
    /// `[train] init_min_points`).
    pub min_points_per_image: f64,
    /// Video: the most frames kept. Default 300.
    pub max_frames: u32,
    /// Video: the shortest time between kept frames, seconds. Default 0 (only `max_frames`
    /// limits them).
    pub min_frame_interval_s: f64,
}

impl Default for ReconstructParams {
    fn default() -> Self {
        Self {
            mode: ReconstructMode::Auto,
            camera_model: "SIMPLE_RADIAL".into(),
            single_camera: true,
            matcher: Matcher::Auto,
            sequential_overlap: 10,
            max_image_size: 1600,
            max_num_features: None,
            focal_length_35mm: None,
            min_registered_fraction: 0.6,
            min_points_per_image: 10.0,
            max_frames: 300,
            min_frame_interval_s: 0.0,
        }
    }
}

impl Bounded for ReconstructParams {
    const TABLE: &'static str = "reconstruct";
    const BOUNDS: &'static [Bound] = &[
        Bound::scalar(
            "sequential_overlap",
            1.0,
            1000.0,
            "frames matched around each video frame",
        ),
        Bound::scalar(
            "max_image_size",
            64.0,
            16384.0,
            "pixels on the long side; 16 K covers any camera",
        ),
        Bound::scalar(
            "max_num_features",
            64.0,
            65536.0,
            "SIFT features per image; COLMAP's GPU default is 8192",
        ),
        Bound::scalar(
            "focal_length_35mm",
            4.0,
            2000.0,
            "mm, 35 mm equivalent (fisheye to 2 m telephoto)",
        ),
        Bound::scalar("min_registered_fraction", 0.0, 1.0, "a fraction"),
        Bound::scalar(
            "min_points_per_image",
            0.0,
            1_000_000.0,
            "3D points per registered photo",
        ),
        Bound::scalar("max_frames", 2.0, 100_000.0, "frames taken from a video"),
        Bound::scalar(
            "min_frame_interval_s",
            0.0,
            3600.0,
            "seconds between video frames",
        ),
    ];
}

impl ReconstructParams {
    /// Check every field: the bounds ([`Bounded::BOUNDS`]) and a camera model of
    /// [`CAMERA_MODELS`].
    ///
    /// # Errors
    /// [`Error::Param`] naming the field, what is accepted and what was found.
    pub fn validate(&self) -> Result<()> {
        if !CAMERA_MODELS.contains(&self.camera_model.as_str()) {
            return Err(Error::Param {
                stage: Self::TABLE,
                field: "camera_model".into(),
                expected: format!("one of {}", CAMERA_MODELS.join(", ")),
                found: format!("{:?}", self.camera_model),
            });
        }
        self.check_bounds()
    }
}

/// What a capture input holds, judged from its file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputShape {
    /// Camera poses are present (transforms*.json, poses_bounds.npy, or a COLMAP model).
    Posed,
    /// Images without poses.
    Photos,
    /// One video file.
    Video,
    /// Neither poses, images nor a video.
    Unknown,
}

/// Image file extensions (lower case) the stage gives COLMAP.
pub const IMAGE_EXTENSIONS: [&str; 6] = ["jpg", "jpeg", "png", "tif", "tiff", "bmp"];

fn has_extension(name: &str, list: &[&str]) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| list.contains(&e.to_ascii_lowercase().as_str()))
}

/// Classify a capture input from the relative names of its files (`/`-separated), looking where
/// `ingest` looks for poses: a single `.json` / `.npy` / COLMAP model file given as the input, or
/// in the input folder a `transform*.json` (`transforms.json`, Blender's
/// `transforms_{train,val,test}.json`, …), `poses_bounds.npy`, or a COLMAP model (`cameras` +
/// `images`, `.bin` or `.txt`) in one of [`kiln_formats::capture::COLMAP_MODEL_DIRS`], names
/// compared without regard to case. Pose-like
/// files elsewhere (notes, earlier outputs) do not count. Otherwise images make it
/// [`InputShape::Photos`], and a single video file without images [`InputShape::Video`].
#[must_use]
pub fn classify(names: &[String]) -> InputShape {
    // Compared without regard to case, as ingest finds the files.
    let set: std::collections::HashSet<String> =
        names.iter().map(|n| n.to_ascii_lowercase()).collect();
    if let [only] = names
        && !only.contains('/')
    {
        let lower = only.to_ascii_lowercase();
        if lower.ends_with(".json")
            || lower.ends_with(".npy")
            || matches!(
                lower.as_str(),
                "cameras.txt" | "images.txt" | "cameras.bin" | "images.bin"
            )
        {
            return InputShape::Posed;
        }
    }
    let model_at = |dir: &str| {
        ["bin", "txt"].iter().any(|ext| {
            let at = |f: &str| {
                if dir.is_empty() {
                    format!("{f}.{ext}")
                } else {
                    format!("{dir}/{f}.{ext}")
                }
            };
            set.contains(at("cameras").as_str()) && set.contains(at("images").as_str())
        })
    };
    // Any top-level transform*.json (transforms_train.json, transform_train.json, …): the
    // files `ingest` reads poses from (kiln_formats::capture::read_capture).
    let transforms_json = set
        .iter()
        .any(|n| !n.contains('/') && n.starts_with("transform") && n.ends_with(".json"));
    let posed = transforms_json
        || set.contains("poses_bounds.npy")
        || kiln_formats::capture::COLMAP_MODEL_DIRS
            .iter()
            .any(|d| model_at(d));
    if posed {
        return InputShape::Posed;
    }
    if names.iter().any(|n| has_extension(n, &IMAGE_EXTENSIONS)) {
        return InputShape::Photos;
    }
    let videos = names
        .iter()
        .filter(|n| has_extension(n, &video::VIDEO_EXTENSIONS))
        .count();
    if videos == 1 {
        InputShape::Video
    } else {
        InputShape::Unknown
    }
}

/// The error for a capture input that holds neither poses, photos nor one video: what was
/// expected, and what is there.
pub fn unusable_input_error(input: &str, names: &[String]) -> Error {
    let found = if names.is_empty() {
        "nothing is there (no file, or an empty folder)".to_string()
    } else {
        let videos = names
            .iter()
            .filter(|n| has_extension(n, &video::VIDEO_EXTENSIONS))
            .count();
        let mut shown: Vec<&str> = names.iter().map(String::as_str).take(8).collect();
        if names.len() > 8 {
            shown.push("…");
        }
        let extra = if videos > 1 {
            format!(" ({videos} videos: give one video per job)")
        } else {
            String::new()
        };
        format!("found {} file(s){extra}: {}", names.len(), shown.join(", "))
    };
    Error::Input {
        path: PathBuf::from(input),
        field: "input".into(),
        problem: format!(
            "a capture job needs camera poses (transforms.json, poses_bounds.npy, or a COLMAP \
             model in sparse/0, sparse, colmap, …), photos ({}) or one video ({}); {found}",
            IMAGE_EXTENSIONS.join(", "),
            video::VIDEO_EXTENSIONS.join(", ")
        ),
    }
}

/// Whether a capture job runs `reconstruct`, and why (a sentence for `kiln plan` and logs).
///
/// # Errors
/// [`Error::Param`] on `reconstruct.mode` when `mode = "never"` but the input has no poses, or
/// `mode = "always"` on an input without images.
pub fn decide(mode: ReconstructMode, shape: InputShape) -> Result<Option<String>> {
    let bad = |expected: &str, found: &str| {
        Err(Error::Param {
            stage: "reconstruct",
            field: "mode".into(),
            expected: expected.into(),
            found: found.into(),
        })
    };
    match (mode, shape) {
        (ReconstructMode::Never, InputShape::Photos | InputShape::Video) => bad(
            "\"auto\" for a capture without camera poses (or give poses: transforms.json, \
             poses_bounds.npy or a COLMAP model)",
            "\"never\", and the input has images but no poses",
        ),
        (_, InputShape::Unknown) => Ok(None),
        (ReconstructMode::Always, InputShape::Posed) => Ok(Some(
            "[reconstruct] mode = \"always\": poses shipped with the input are ignored".into(),
        )),
        (ReconstructMode::Always | ReconstructMode::Auto, InputShape::Video) => Ok(Some(
            "the input is a video: frames are selected, then posed by COLMAP".into(),
        )),
        (ReconstructMode::Always | ReconstructMode::Auto, InputShape::Photos) => Ok(Some(
            "the input has images but no camera poses: COLMAP estimates them".into(),
        )),
        (_, InputShape::Posed) => Ok(None),
    }
}

/// Quality figures of the chosen model and the gate's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconstructQuality {
    /// Images given to COLMAP.
    pub images: usize,
    /// Images registered in the chosen model.
    pub registered: usize,
    /// `registered / images`.
    pub registered_fraction: f64,
    /// Names of images not registered, sorted.
    pub unregistered: Vec<String>,
    /// 3D points in the chosen model.
    pub points: usize,
    /// Observations (sum of track lengths).
    pub observations: u64,
    /// Mean reprojection error, pixels at the images' stored size: the mean of the points' errors
    /// (COLMAP's `ComputeMeanReprojectionError`, what `colmap model_analyzer` prints).
    pub mean_reprojection_error_px: f64,
    /// Models COLMAP's mapper produced (several when the images fall apart into groups).
    pub models: usize,
    /// The gate's threshold (`min_registered_fraction`).
    pub min_registered_fraction: f64,
    /// `points / registered` (0 without a model).
    #[serde(default)]
    pub points_per_image: f64,
    /// The gate's threshold on it (`min_points_per_image`).
    #[serde(default)]
    pub min_points_per_image: f64,
    /// Whether the gate passed.
    pub passed: bool,
}

impl ReconstructQuality {
    /// Whether enough images registered (at least 2, and `min_registered_fraction` of them).
    fn enough_registered(&self) -> bool {
        self.registered >= 2 && self.registered_fraction + 1e-12 >= self.min_registered_fraction
    }

    /// Whether the model holds points, and `min_points_per_image` per registered image.
    fn enough_points(&self) -> bool {
        self.points > 0 && self.points_per_image + 1e-12 >= self.min_points_per_image
    }
}

/// `reconstruct.json`: everything needed to audit or rerun the stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconstructReport {
    /// `photos` or `video`.
    pub input: InputShape,
    /// First line of `colmap help`, e.g. `COLMAP 3.8 -- Structure-from-Motion and Multi-View Stereo`.
    pub colmap_version: String,
    /// Whether SIFT ran on the GPU.
    pub gpu_sift: bool,
    pub camera_model: String,
    /// Whether all images shared one camera (false when asked, or when the photos' sizes differ).
    pub single_camera: bool,
    /// `exhaustive` or `sequential`.
    pub matcher: Matcher,
    /// Where the initial focal length came from: `exif-or-colmap-default`, `job file`, or
    /// `video metadata`; with the focal length factor passed to COLMAP when set.
    pub focal_prior: String,
    /// Every external command run, in order, with the stage's output folder written `$STAGE`
    /// and the input `$INPUT` (COLMAP's database lived in a temporary `$STAGE/.colmap*` folder).
    pub commands: Vec<String>,
    /// Wall seconds per step (`frames`, `features`, `matching`, `mapping`).
    pub step_seconds: Vec<(String, f64)>,
    pub quality: ReconstructQuality,
    /// Warnings about the input (ignored or unreadable files, per-photo cameras, a video that
    /// decoded short), also logged.
    pub notes: Vec<String>,
    /// Video input: frame selection (decoded frames, window, kept indices, sharpness).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video: Option<video::FrameSelection>,
}

/// Name of the stage's report file.
pub const REPORT_JSON: &str = "reconstruct.json";

/// Reconstruct camera poses for `input` (a video file, or a folder of photos) into `out_dir`.
///
/// - `on_progress(step, done, total)`: progress of the current step (`frames`, `features`,
///   `matching`, `mapping`); `total` 0 when unknown.
///
/// `reconstruct.json` is written even when the quality gate fails, so the failure can be read.
///
/// # Errors
/// [`Error::Param`] for invalid parameters; [`Error::Input`] when the input holds fewer than 2
/// images, COLMAP/ffmpeg are missing or fail (naming the command and its log), or the quality
/// gate fails (naming registered/total, the unregistered images and the parameter to change);
/// [`Error::Io`] for local file failures.
pub fn reconstruct(
    input: &Path,
    params: &ReconstructParams,
    out_dir: &Path,
    on_progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<ReconstructReport> {
    params.validate()?;
    let images_dir = out_dir.join("images");
    let logs = out_dir.join("logs");
    for d in [&images_dir, &logs] {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    let colmap = Tool::colmap();
    let colmap_version = colmap_version(&colmap)?;
    let mut record = RunRecord::default();
    let images = prepare_images(input, params, &images_dir, &mut record, on_progress)?;
    for note in &record.notes {
        tracing::warn!("reconstruct: {note}");
    }
    let matcher = match (params.matcher, images.shape) {
        (Matcher::Auto, InputShape::Video) => Matcher::Sequential,
        (Matcher::Auto, _) => Matcher::Exhaustive,
        (m, _) => m,
    };
    let (focal_factor, focal_prior) = focal_prior(params, images.selection.as_ref(), input);
    let gpu_sift = colmap_version.contains("with CUDA") && kiln_kernels::device::cuda_available();
    let work = tempfile::Builder::new()
        .prefix(".colmap")
        .tempdir_in(out_dir)
        .map_err(|e| Error::io(out_dir, e))?;
    let run = ColmapRun {
        database: work.path().join("database.db").display().to_string(),
        image_path: images_dir.display().to_string(),
        sparse: work.path().join("sparse"),
        use_gpu: if gpu_sift { "1" } else { "0" },
    };
    let mut steps = ColmapSteps {
        colmap: &colmap,
        logs: &logs,
        total: images.names.len(),
        record: &mut record,
        on_progress,
    };
    steps.run(
        "features",
        run.extract_args(params, images.single_camera, gpu_sift, focal_factor),
    )?;
    steps.run("matching", run.match_args(params, matcher))?;
    let (models, best) = map_model(&mut steps, &run)?;
    let quality = quality(&images.names, models, best.as_ref().map(|(_, s)| s), params);
    if let Some((dir, _)) = &best {
        keep_model(dir, &out_dir.join("sparse").join("0"))?;
    }
    drop(work);
    let report = ReconstructReport {
        input: images.shape,
        colmap_version,
        gpu_sift,
        camera_model: params.camera_model.clone(),
        single_camera: images.single_camera,
        matcher,
        focal_prior,
        commands: record.portable_commands(out_dir, input),
        step_seconds: record.step_seconds,
        quality,
        notes: record.notes,
        video: images.selection,
    };
    let json = serde_json::to_vec_pretty(&report).expect("report serialises");
    kiln_formats::atomic_write::write_atomic(&out_dir.join(REPORT_JSON), &json)?;
    if !report.quality.passed {
        return Err(gate_error(&report.quality, out_dir));
    }
    Ok(report)
}

/// What a reconstruction ran and noticed, in order: for `reconstruct.json`.
#[derive(Default)]
struct RunRecord {
    commands: Vec<String>,
    step_seconds: Vec<(String, f64)>,
    notes: Vec<String>,
}

impl RunRecord {
    /// The commands with the stage folder and the input written `$STAGE` and `$INPUT`: the
    /// absolute paths are a temporary work folder that no longer exists when the report is read.
    fn portable_commands(&self, out_dir: &Path, input: &Path) -> Vec<String> {
        let (stage, input_path) = (out_dir.display().to_string(), input.display().to_string());
        self.commands
            .iter()
            .map(|c| c.replace(&stage, "$STAGE").replace(&input_path, "$INPUT"))
            .collect()
    }
}

/// The images COLMAP is given, in `images/`: frames chosen from a video or the input's photos.
struct PreparedImages {
    shape: InputShape,
    /// Video input: how the frames were chosen.
    selection: Option<video::FrameSelection>,
    /// Image names, as COLMAP will register them.
    names: Vec<String>,
    /// One shared camera (false when the job says so, or when the photos' sizes differ).
    single_camera: bool,
}

/// Put the input's images into `images_dir`: the frames chosen from its one video, or its
/// photos linked in (a video beside photos, unreadable files and other formats are noted and
/// left out).
///
/// # Errors
/// [`Error::Input`] when fewer than 2 images result; the video tools' and file errors.
fn prepare_images(
    input: &Path,
    params: &ReconstructParams,
    images_dir: &Path,
    record: &mut RunRecord,
    on_progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<PreparedImages> {
    let photos = if input.is_dir() {
        gather_photos(input)?
    } else {
        PhotoSet::default()
    };
    if photos.names.is_empty()
        && let Some(video_path) = the_video(input)?
    {
        return video_frames(&video_path, params, images_dir, record, on_progress);
    }
    if !photos.names.is_empty() && !photos.videos.is_empty() {
        record.notes.push(format!(
            "ignored {} video file(s) beside the photos ({}): give a video alone in its own job",
            photos.videos.len(),
            photos.videos.join(", ")
        ));
    }
    photo_images(input, &photos, params, images_dir, record)
}

/// The frames of `video_path` chosen for structure-from-motion, decoded into `images_dir`.
fn video_frames(
    video_path: &Path,
    params: &ReconstructParams,
    images_dir: &Path,
    record: &mut RunRecord,
    on_progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<PreparedImages> {
    let t = Instant::now();
    let selection = video::extract_frames(
        video_path,
        images_dir,
        params.max_frames as usize,
        params.min_frame_interval_s,
        &mut |n, total| on_progress("frames", n, total),
    )?;
    record
        .step_seconds
        .push(("frames".to_string(), t.elapsed().as_secs_f64()));
    record.commands.extend(selection.commands.iter().cloned());
    if let Some(short) = selection.short_decode_note() {
        record.notes.push(short);
    }
    let names: Vec<String> = selection
        .kept
        .iter()
        .map(|n| video::frame_name(*n))
        .collect();
    if names.len() < 2 {
        return Err(Error::Input {
            path: video_path.to_path_buf(),
            field: "video frames".into(),
            problem: format!(
                "{} frame(s) kept of {} decoded; structure-from-motion needs at least 2: give \
                 a longer video, or raise [reconstruct] max_frames / lower \
                 min_frame_interval_s",
                names.len(),
                selection.decoded
            ),
        });
    }
    Ok(PreparedImages {
        shape: InputShape::Video,
        selection: Some(selection),
        names,
        single_camera: params.single_camera,
    })
}

/// The readable photos of `photos` linked into `images_dir`; one camera per photo when their
/// sizes differ.
fn photo_images(
    input: &Path,
    photos: &PhotoSet,
    params: &ReconstructParams,
    images_dir: &Path,
    record: &mut RunRecord,
) -> Result<PreparedImages> {
    if !photos.ignored.is_empty() {
        record.notes.push(format!(
            "ignored {} file(s) in formats COLMAP and Kiln do not read ({}); convert them to \
             JPEG or PNG to use them",
            photos.ignored.len(),
            photos.ignored.join(", ")
        ));
    }
    if !photos.unreadable.is_empty() {
        record.notes.push(format!(
            "skipped {} unreadable image(s) ({}): they are not valid images; replace or \
             remove them",
            photos.unreadable.len(),
            photos.unreadable.join(", ")
        ));
    }
    if photos.names.len() < 2 {
        return Err(too_few_photos(input, photos));
    }
    let mut single_camera = params.single_camera;
    let mut sizes: Vec<(u32, u32)> = photos.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    if single_camera && sizes.len() > 1 {
        single_camera = false;
        record.notes.push(format!(
            "the photos have {} different sizes ({}), so each photo gets its own camera \
             (single_camera = false); photos of one size from one device share intrinsics",
            sizes.len(),
            sizes
                .iter()
                .take(4)
                .map(|(w, h)| format!("{w}×{h}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    link_photos(photos, images_dir)?;
    Ok(PreparedImages {
        shape: InputShape::Photos,
        selection: None,
        names: photos.names.clone(),
        single_camera,
    })
}

/// [`Error::Input`]: fewer than 2 readable photos in `input`.
fn too_few_photos(input: &Path, photos: &PhotoSet) -> Error {
    Error::Input {
        path: input.to_path_buf(),
        field: "images".into(),
        problem: format!(
            "{} readable image(s) found{}; structure-from-motion needs at least 2 \
             overlapping photos ({}) or one video ({})",
            photos.names.len(),
            if photos.unreadable.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} unreadable: {})",
                    photos.unreadable.len(),
                    photos.unreadable.join(", ")
                )
            },
            IMAGE_EXTENSIONS.join(", "),
            video::VIDEO_EXTENSIONS.join(", ")
        ),
    }
}

/// Where one COLMAP run keeps its database and model, and whether SIFT runs on the GPU.
struct ColmapRun {
    database: String,
    image_path: String,
    /// The mapper's output folder.
    sparse: PathBuf,
    /// `"1"` or `"0"`.
    use_gpu: &'static str,
}

impl ColmapRun {
    /// `feature_extractor`'s arguments.
    fn extract_args(
        &self,
        params: &ReconstructParams,
        single_camera: bool,
        gpu_sift: bool,
        focal_factor: Option<f64>,
    ) -> Vec<String> {
        let mut args = vec![
            "feature_extractor".to_string(),
            "--database_path".into(),
            self.database.clone(),
            "--image_path".into(),
            self.image_path.clone(),
            "--ImageReader.camera_model".into(),
            params.camera_model.clone(),
            "--ImageReader.single_camera".into(),
            u8::from(single_camera).to_string(),
            "--SiftExtraction.use_gpu".into(),
            self.use_gpu.into(),
            "--SiftExtraction.max_image_size".into(),
            params.max_image_size.to_string(),
            "--SiftExtraction.max_num_features".into(),
            params
                .max_num_features
                .unwrap_or(if gpu_sift { 8192 } else { 2048 })
                .to_string(),
        ];
        if let Some(f) = focal_factor {
            args.push("--ImageReader.default_focal_length_factor".into());
            args.push(format!("{f}"));
        }
        args
    }

    /// The matcher's arguments: sequential (video) or exhaustive.
    fn match_args(&self, params: &ReconstructParams, matcher: Matcher) -> Vec<String> {
        match matcher {
            Matcher::Sequential => vec![
                "sequential_matcher".to_string(),
                "--database_path".into(),
                self.database.clone(),
                "--SiftMatching.use_gpu".into(),
                self.use_gpu.into(),
                "--SequentialMatching.overlap".into(),
                params.sequential_overlap.to_string(),
            ],
            _ => vec![
                "exhaustive_matcher".to_string(),
                "--database_path".into(),
                self.database.clone(),
                "--SiftMatching.use_gpu".into(),
                self.use_gpu.into(),
            ],
        }
    }

    /// The mapper's arguments.
    fn map_args(&self) -> Vec<String> {
        vec![
            "mapper".to_string(),
            "--database_path".into(),
            self.database.clone(),
            "--image_path".into(),
            self.image_path.clone(),
            "--output_path".into(),
            self.sparse.display().to_string(),
        ]
    }
}

/// Runs COLMAP steps one after another, each logged to `logs/<step>.log`, timed and recorded,
/// reporting progress from COLMAP's output.
struct ColmapSteps<'a> {
    colmap: &'a Tool,
    logs: &'a Path,
    /// Images, for progress.
    total: usize,
    record: &'a mut RunRecord,
    on_progress: &'a mut dyn FnMut(&str, usize, usize),
}

impl ColmapSteps<'_> {
    /// Run COLMAP with `args` as step `step`.
    ///
    /// # Errors
    /// The command's failure, naming it and its log.
    fn run(&mut self, step: &str, args: Vec<String>) -> Result<()> {
        let t = Instant::now();
        let cmd = self.colmap.command(&args);
        let total = self.total;
        tracing::info!("reconstruct: {step} ({total} images): {}", cmd.display());
        self.record.commands.push(cmd.display());
        (self.on_progress)(step, 0, total);
        let on_progress = &mut self.on_progress;
        cmd.run_logged(&self.logs.join(format!("{step}.log")), &mut |line| {
            if let Some(n) = progress_count(step, line) {
                on_progress(step, n, total);
            }
        })?;
        self.record
            .step_seconds
            .push((step.to_string(), t.elapsed().as_secs_f64()));
        Ok(())
    }
}

/// Run COLMAP's mapper and pick its best model: (models built, the best one's folder and
/// figures). A mapper that builds no model at all is a verdict on the photos for the quality
/// gate ("No good initial image pair found"), not a tool failure; a failure after it built
/// one is.
fn map_model(
    steps: &mut ColmapSteps<'_>,
    run: &ColmapRun,
) -> Result<(usize, Option<(PathBuf, ColmapModelStats)>)> {
    std::fs::create_dir_all(&run.sparse).map_err(|e| Error::io(&run.sparse, e))?;
    let mapped = steps.run("mapping", run.map_args());
    let (models, best) = best_model(&run.sparse)?;
    if let Err(e) = mapped {
        if best.is_some() {
            return Err(e);
        }
        tracing::warn!("COLMAP's mapper built no model: {e}");
    }
    Ok((models, best))
}

/// Copy the chosen model's binary files from `dir` to `dest` (`sparse/0/` of the stage).
fn keep_model(dir: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest).map_err(|e| Error::io(dest, e))?;
    for f in ["cameras.bin", "images.bin", "points3D.bin"] {
        std::fs::copy(dir.join(f), dest.join(f)).map_err(|e| Error::io(dir.join(f), e))?;
    }
    Ok(())
}

/// The gate's failure message: figures, unregistered images or the point count, likely causes
/// and the knob.
fn gate_error(q: &ReconstructQuality, out_dir: &Path) -> Error {
    let problem = if q.enough_registered() {
        too_few_points(q)
    } else {
        too_few_registered(q)
    };
    Error::Input {
        path: out_dir.join(REPORT_JSON),
        field: "reconstruct quality gate".into(),
        problem,
    }
}

/// Too few images registered: which, why it usually happens, and the knob.
fn too_few_registered(q: &ReconstructQuality) -> String {
    let mut listed: Vec<&str> = q.unregistered.iter().map(String::as_str).take(10).collect();
    if q.unregistered.len() > 10 {
        listed.push("…");
    }
    format!(
        "only {} of {} images registered ({:.0} %, need ≥ {:.0} %; {} model(s), {} points); \
         not registered: {}. The photos probably do not overlap enough or show different \
         scenes: shoot the subject from closely spaced viewpoints (≥ 60 % overlap), or lower \
         [reconstruct] min_registered_fraction to accept a partial model. No training was \
         started.",
        q.registered,
        q.images,
        100.0 * q.registered_fraction,
        100.0 * q.min_registered_fraction,
        q.models,
        q.points,
        listed.join(", ")
    )
}

/// Too few 3D points for the registered images: the figures, why, and the knob.
fn too_few_points(q: &ReconstructQuality) -> String {
    format!(
        "the model is too sparse to train from: {} points for {} registered images ({:.1} per \
         image, need ≥ {}; mean reprojection error {:.2} px). The photos probably show too \
         little texture (plain backgrounds, shiny or uniform surfaces) or are too few: add \
         textured surroundings or more photos, or set [reconstruct] min_points_per_image = 0 \
         to train anyway (training then tops the points up at random, [train] \
         init_min_points). No training was started.",
        q.points,
        q.registered,
        q.points_per_image,
        q.min_points_per_image,
        q.mean_reprojection_error_px
    )
}

/// Quality figures of the best model (or of no model) against the gate.
fn quality(
    names: &[String],
    models: usize,
    best: Option<&ColmapModelStats>,
    params: &ReconstructParams,
) -> ReconstructQuality {
    let registered_names: std::collections::HashSet<&str> = best
        .map(|s| s.image_names.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut unregistered: Vec<String> = names
        .iter()
        .filter(|n| !registered_names.contains(n.as_str()))
        .cloned()
        .collect();
    unregistered.sort();
    let registered = best.map_or(0, |s| s.registered_images);
    let registered_fraction = registered as f64 / names.len().max(1) as f64;
    let points = best.map_or(0, |s| s.points);
    let mut q = ReconstructQuality {
        images: names.len(),
        registered,
        registered_fraction,
        unregistered,
        points,
        observations: best.map_or(0, |s| s.observations),
        mean_reprojection_error_px: best.map_or(0.0, |s| s.mean_reprojection_error_px),
        models,
        min_registered_fraction: params.min_registered_fraction,
        points_per_image: points as f64 / registered.max(1) as f64,
        min_points_per_image: params.min_points_per_image,
        passed: false,
    };
    q.passed = q.enough_registered() && q.enough_points();
    q
}

/// The mapper's model directories under `sparse` (`0`, `1`, …) and the one with the most
/// registered images (ties: the lower number).
fn best_model(sparse: &Path) -> Result<(usize, Option<(PathBuf, ColmapModelStats)>)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(sparse)
        .map_err(|e| Error::io(sparse, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("images.bin").is_file())
        .collect();
    dirs.sort();
    let mut best: Option<(PathBuf, ColmapModelStats)> = None;
    for dir in &dirs {
        let stats = read_colmap_model_stats(dir)?;
        if best
            .as_ref()
            .is_none_or(|(_, b)| stats.registered_images > b.registered_images)
        {
            best = Some((dir.clone(), stats));
        }
    }
    Ok((dirs.len(), best))
}

/// Progress counter in a COLMAP log line of `step`, if the line carries one.
///
/// COLMAP 3.8 prints `Processed file [i/N]` (feature extraction), `Matching image [i/N]`
/// (sequential) or `Matching block [i/N, j/M]` (exhaustive), and `Registering image #id (n)`
/// (mapping, n = images registered so far).
fn progress_count(step: &str, line: &str) -> Option<usize> {
    let after = |prefix: &str| line.trim().strip_prefix(prefix).map(str::to_string);
    let leading_number = |s: &str| -> Option<usize> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    match step {
        "features" => after("Processed file [").and_then(|s| leading_number(&s)),
        "matching" => after("Matching image [").and_then(|s| leading_number(&s)),
        "mapping" => {
            let rest = after("Registering image #")?;
            let open = rest.find('(')?;
            leading_number(&rest[open + 1..])
        }
        _ => None,
    }
}

/// First line of `colmap help` (its version and build).
fn colmap_version(colmap: &Tool) -> Result<String> {
    let out = colmap.command(&["help"]).output()?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("COLMAP (unknown version)")
        .to_string())
}

/// The initial focal length factor (focal px / longer side) passed to COLMAP, and a sentence
/// saying where it came from.
fn focal_prior(
    params: &ReconstructParams,
    selection: Option<&video::FrameSelection>,
    input: &Path,
) -> (Option<f64>, String) {
    // A 35 mm frame is 36 mm wide: focal px = f35 / 36 × the longer side of the image.
    if let Some(f) = params.focal_length_35mm {
        return (
            Some(f / 36.0),
            format!(
                "job file: focal_length_35mm = {f} mm → factor {:.4}",
                f / 36.0
            ),
        );
    }
    if selection.is_some()
        && let Some(f) = video::focal_length_35mm_tag(input)
    {
        return (
            Some(f / 36.0),
            format!(
                "video metadata: 35 mm-equivalent focal length {f} mm → factor {:.4}",
                f / 36.0
            ),
        );
    }
    (
        None,
        "EXIF focal length where present, else COLMAP's default (1.2 × the longer side), \
         refined by bundle adjustment"
            .into(),
    )
}

/// The photos of a capture folder, before any is copied.
#[derive(Debug, Clone, Default, PartialEq)]
struct PhotoSet {
    /// Folder the names are relative to: `input/images` when that holds images, else `input`.
    root: PathBuf,
    /// Readable images, relative `/`-separated names, sorted.
    names: Vec<String>,
    /// Stored size (width, height) of each of `names`, pixels, EXIF orientation applied.
    sizes: Vec<(u32, u32)>,
    /// Files with an image extension whose header cannot be read.
    unreadable: Vec<String>,
    /// Files in photo formats neither COLMAP nor Kiln reads (HEIC, RAW, …).
    ignored: Vec<String>,
    /// Video files found among the files.
    videos: Vec<String>,
}

/// Photo formats a phone or camera writes that this stage does not read (lower-case extensions).
const UNREAD_PHOTO_EXTENSIONS: [&str; 10] = [
    "heic", "heif", "avif", "webp", "dng", "cr2", "cr3", "nef", "arw", "raf",
];

/// The photos of `input`: its `images/` folder when that holds images, else the folder itself,
/// recursively (hidden entries skipped). Each image's header is read for its size (EXIF
/// orientation applied); files whose header cannot be read are listed as unreadable.
fn gather_photos(input: &Path) -> Result<PhotoSet> {
    let nested = input.join("images");
    let root = if list_files(&nested, &IMAGE_EXTENSIONS)?.is_empty() {
        input.to_path_buf()
    } else {
        nested
    };
    let mut set = PhotoSet {
        ignored: list_files(&root, &UNREAD_PHOTO_EXTENSIONS)?,
        videos: list_files(input, &video::VIDEO_EXTENSIONS)?,
        root: root.clone(),
        ..PhotoSet::default()
    };
    for name in list_files(&root, &IMAGE_EXTENSIONS)? {
        match upright_size(&root.join(&name)) {
            Some(size) => {
                set.names.push(name);
                set.sizes.push(size);
            }
            None => set.unreadable.push(name),
        }
    }
    Ok(set)
}

/// Size of an image as displayed (EXIF orientation applied), from its header; `None` when the
/// header cannot be read.
fn upright_size(path: &Path) -> Option<(u32, u32)> {
    use image::ImageDecoder;
    let mut decoder = image::ImageReader::open(path)
        .ok()?
        .with_guessed_format()
        .ok()?
        .into_decoder()
        .ok()?;
    let (w, h) = decoder.dimensions();
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    use image::metadata::Orientation::*;
    match orientation {
        Rotate90 | Rotate270 | Rotate90FlipH | Rotate270FlipH => Some((h, w)),
        _ => Some((w, h)),
    }
}

/// The one video a capture input is: the input itself, or the only video file in the input
/// folder; `None` when neither.
///
/// # Errors
/// [`Error::Io`] listing the folder.
fn the_video(input: &Path) -> Result<Option<PathBuf>> {
    if input.is_file() {
        return Ok(video::is_video(input).then(|| input.to_path_buf()));
    }
    let videos = list_files(input, &video::VIDEO_EXTENSIONS)?;
    Ok(match videos.as_slice() {
        [one] => Some(input.join(one)),
        _ => None,
    })
}

/// Put the photos of `set` into `images_dir`, keeping relative names. Photos whose EXIF
/// orientation is not upright are written upright (re-encoded, EXIF kept with the orientation
/// reset), since COLMAP reads stored pixels while Kiln's ingest applies the orientation: both
/// must see the same pixels. Others are hard-linked when possible, else copied.
fn link_photos(set: &PhotoSet, images_dir: &Path) -> Result<()> {
    for name in &set.names {
        let from = set.root.join(name);
        let to = images_dir.join(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        if !write_upright(&from, &to)? && std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(|e| Error::io(&from, e))?;
        }
    }
    Ok(())
}

/// Relative `/`-separated names of the files under `root` with one of `extensions`
/// (recursively; hidden entries skipped), sorted. Empty when `root` is not a folder.
fn list_files(root: &Path, extensions: &[&str]) -> Result<Vec<String>> {
    if !root.is_dir() {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = crate::file_tree::files_under(root)?
        .into_iter()
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .filter(|n| !n.split('/').any(|part| part.starts_with('.')))
        .filter(|n| has_extension(n, extensions))
        .collect();
    names.sort();
    Ok(names)
}

/// When `from` has an EXIF orientation other than upright, write it upright to `to` (same
/// format, JPEG quality 95) and return true; otherwise write nothing and return false.
fn write_upright(from: &Path, to: &Path) -> Result<bool> {
    use image::ImageDecoder;
    use image::metadata::Orientation;
    let mut decoder = match image::ImageReader::open(from)
        .ok()
        .and_then(|r| r.with_guessed_format().ok())
        .and_then(|r| r.into_decoder().ok())
    {
        Some(d) => d,
        None => return Ok(false),
    };
    let orientation = decoder.orientation().ok();
    if matches!(orientation, None | Some(Orientation::NoTransforms)) {
        return Ok(false);
    }
    // The rest of the EXIF block (focal length, camera model: COLMAP's focal prior) is kept.
    let mut exif = decoder.exif_metadata().ok().flatten().unwrap_or_default();
    let _ = Orientation::remove_from_exif_chunk(&mut exif);
    drop(decoder);
    let bad = |e: image::ImageError| Error::Input {
        path: from.to_path_buf(),
        field: "image".into(),
        problem: format!("cannot decode ({e}); replace or remove the file"),
    };
    let mut img = image::open(from).map_err(bad)?;
    img.apply_orientation(orientation.unwrap_or(Orientation::NoTransforms));
    let tmp = to.with_extension("upright.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let mut writer = std::io::BufWriter::new(file);
    let is_jpeg = has_extension(&from.to_string_lossy(), &["jpg", "jpeg"]);
    let result = if is_jpeg {
        let mut encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut writer, 95);
        if !exif.is_empty() {
            use image::ImageEncoder;
            let _ = encoder.set_exif_metadata(exif);
        }
        encoder.encode_image(&img.to_rgb8())
    } else {
        img.write_to(
            &mut writer,
            image::ImageFormat::from_path(from).unwrap_or(image::ImageFormat::Png),
        )
    };
    result.map_err(|e| Error::Input {
        path: tmp.clone(),
        field: "image".into(),
        problem: format!("cannot write the upright copy: {e}"),
    })?;
    drop(writer);
    std::fs::rename(&tmp, to).map_err(|e| Error::io(to, e))?;
    Ok(true)
}

#[cfg(test)]
mod tests;
