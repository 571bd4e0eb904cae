//! Video input: probe the stream with ffprobe, score every decoded frame's sharpness from a small
//! gray copy piped out of ffmpeg (no frames on disk), keep the sharpest frame of each window, and
//! extract only those frames at full resolution as JPEG.
//!
//! ffmpeg applies the stream's display rotation (phone videos shot in portrait) before every
//! filter, so scoring, extraction and the sizes recorded here all refer to the upright frames.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::sharpness::{laplacian_variance, select_sharpest};
use super::tool::{CommandLine, Tool};
use crate::{Error, Result};

/// File extensions (lower case) read as video input.
pub const VIDEO_EXTENSIONS: [&str; 7] = ["mp4", "mov", "m4v", "mkv", "webm", "avi", "mts"];

/// True when `path` has one of [`VIDEO_EXTENSIONS`] (case-insensitive).
pub fn is_video(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| VIDEO_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// What ffprobe says about the first video stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoInfo {
    /// Codec name, e.g. `h264`.
    pub codec: String,
    /// Upright frame size (display rotation applied), pixels.
    pub width: u32,
    pub height: u32,
    /// Display rotation in degrees from the stream's side data or `rotate` tag (0 when none).
    pub rotation_deg: i32,
    /// Average frame rate, frames per second.
    pub fps: f64,
    /// Duration, seconds (0 when the container does not say).
    pub duration_s: f64,
}

/// Outcome of [`extract_frames`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameSelection {
    pub video: VideoInfo,
    /// Frames decoded and scored.
    pub decoded: usize,
    /// Frames the container's duration × frame rate promises (0 when unknown).
    pub expected: usize,
    /// Window length used, in frames: one frame kept per window.
    pub window_frames: usize,
    /// Decoded indices of the kept frames, increasing.
    pub kept: Vec<usize>,
    /// Sharpness (variance of the Laplacian at the scoring size) of every decoded frame.
    pub sharpness: Vec<f64>,
    /// The command lines run.
    pub commands: Vec<String>,
}

/// Probe `video` with ffprobe.
///
/// # Errors
/// [`Error::Input`] when ffprobe is missing or fails (not a video), or the file has no video
/// stream or no usable size / frame rate.
pub fn probe(video: &Path) -> Result<(VideoInfo, String)> {
    let cmd = Tool::ffprobe().command(&[
        "-v",
        "error",
        "-select_streams",
        "v:0",
        "-show_entries",
        "stream=codec_name,width,height,avg_frame_rate,r_frame_rate,duration:stream_tags=rotate:stream_side_data=rotation:format=duration",
        "-of",
        "json",
        &video.display().to_string(),
    ]);
    let bad = |problem: String| Error::Input {
        path: video.to_path_buf(),
        field: "video stream".into(),
        problem,
    };
    let out = cmd.run_captured()?;
    if !out.status.success() {
        return Err(bad(format!(
            "not a readable video (ffprobe: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let stdout = out.stdout;
    let json: serde_json::Value = serde_json::from_slice(&stdout)
        .map_err(|e| bad(format!("ffprobe printed no JSON ({e})")))?;
    let Some(stream) = json["streams"].as_array().and_then(|s| s.first()) else {
        return Err(bad(
            "the file has no video stream; give a video (mp4, mov, …) or a folder of photos".into(),
        ));
    };
    let (w, h) = (
        stream["width"].as_u64().unwrap_or(0),
        stream["height"].as_u64().unwrap_or(0),
    );
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        return Err(bad(format!("unusable frame size {w}×{h}")));
    }
    let rate = |key: &str| -> f64 {
        let s = stream[key].as_str().unwrap_or("0/0");
        let (n, d) = s.split_once('/').unwrap_or((s, "1"));
        let (n, d): (f64, f64) = (n.parse().unwrap_or(0.0), d.parse().unwrap_or(0.0));
        if d > 0.0 { n / d } else { 0.0 }
    };
    let fps = [rate("avg_frame_rate"), rate("r_frame_rate")]
        .into_iter()
        .find(|r| r.is_finite() && *r > 0.0 && *r < 1000.0)
        .ok_or_else(|| bad("no frame rate in the stream".into()))?;
    let rotation_deg = stream["side_data_list"]
        .as_array()
        .and_then(|l| l.iter().find_map(|d| d["rotation"].as_f64()))
        .or_else(|| {
            stream["tags"]["rotate"]
                .as_str()
                .and_then(|r| r.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        .round() as i32;
    let quarter_turn = rotation_deg.rem_euclid(180) == 90;
    let (width, height) = if quarter_turn { (h, w) } else { (w, h) };
    let duration_s = [
        stream["duration"].as_str(),
        json["format"]["duration"].as_str(),
    ]
    .into_iter()
    .flatten()
    .find_map(|d| d.parse::<f64>().ok().filter(|d| d.is_finite() && *d > 0.0))
    .unwrap_or(0.0);
    Ok((
        VideoInfo {
            codec: stream["codec_name"].as_str().unwrap_or("").to_string(),
            width: width as u32,
            height: height as u32,
            rotation_deg,
            fps,
            duration_s,
        },
        cmd.display(),
    ))
}

/// Longest side of the gray copy each frame is scored at, pixels: blur that matters for feature
/// matching survives this downscale, and scoring stays fast for 4K video.
const SCORE_SIDE: u32 = 480;

/// Choose and extract frames of `video` into `out_dir` as `frame_NNNNNN.jpg` (NNNNNN = decoded
/// frame index, so names sort in time order).
///
/// - `max_frames`: the most frames kept (≥ 1).
/// - `min_interval_s`: the shortest time between kept frames, seconds (a window is at least this
///   long).
/// - `on_progress(decoded, expected)`: called while scoring (expected is 0 when unknown).
///
/// # Errors
/// [`Error::Input`] when ffprobe/ffmpeg are missing or fail, or the video decodes to no frame;
/// [`Error::Io`] writing frames.
pub fn extract_frames(
    video: &Path,
    out_dir: &Path,
    max_frames: usize,
    min_interval_s: f64,
    on_progress: &mut dyn FnMut(usize, usize),
) -> Result<FrameSelection> {
    let (info, probe_cmd) = probe(video)?;
    let scale = SCORE_SIDE as f64 / f64::from(info.width.max(info.height));
    let even = |v: f64| ((v.round() as u32).max(2) / 2 * 2).max(2);
    let (sw, sh) = if scale < 1.0 {
        (
            even(f64::from(info.width) * scale),
            even(f64::from(info.height) * scale),
        )
    } else {
        (even(f64::from(info.width)), even(f64::from(info.height)))
    };
    let input = video.display().to_string();
    let score_cmd = decode_command(
        &input,
        &format!("scale={sw}:{sh}:flags=area,format=gray"),
        &["-f", "rawvideo", "-pix_fmt", "gray", "-"],
    );
    let expected = (info.duration_s * info.fps).round() as usize;
    let sharpness = score_frames(&score_cmd, video, sw as usize, sh as usize, &mut |n| {
        on_progress(n, expected)
    })?;
    if sharpness.is_empty() {
        return Err(Error::Input {
            path: video.to_path_buf(),
            field: "video stream".into(),
            problem: "ffmpeg decoded no frame from this video".into(),
        });
    }
    let min_window = (min_interval_s * info.fps).round().max(1.0) as usize;
    let kept = select_sharpest(&sharpness, max_frames, min_window);
    let window_frames = sharpness.len().div_ceil(max_frames.max(1)).max(min_window);

    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".frames")
        .tempdir_in(out_dir)
        .map_err(|e| Error::io(out_dir, e))?;
    let select = kept
        .iter()
        .map(|n| format!("eq(n\\,{n})"))
        .collect::<Vec<_>>()
        .join("+");
    let pattern = tmp.path().join("%06d.jpg").display().to_string();
    let extract_cmd = decode_command(
        &input,
        &format!("select='{select}'"),
        &["-q:v", "2", &pattern],
    );
    extract_cmd.output()?;
    for (k, n) in kept.iter().enumerate() {
        let from = tmp.path().join(format!("{:06}.jpg", k + 1));
        let to = out_dir.join(frame_name(*n));
        if !from.is_file() {
            return Err(Error::Input {
                path: video.to_path_buf(),
                field: "video stream".into(),
                problem: format!(
                    "ffmpeg wrote {k} of the {} selected frames (frame {n} missing): the video \
                     decodes differently on a second pass; re-encode it (ffmpeg -i IN -c:v libx264 \
                     OUT.mp4) and retry",
                    kept.len()
                ),
            });
        }
        std::fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
    }
    Ok(FrameSelection {
        video: info,
        decoded: sharpness.len(),
        expected,
        window_frames,
        kept,
        sharpness,
        commands: vec![probe_cmd, score_cmd.display(), extract_cmd.display()],
    })
}

impl FrameSelection {
    /// A warning when the video decoded to clearly fewer frames than its container promises (a
    /// truncated or damaged file): fewer than 90 % of them.
    pub fn short_decode_note(&self) -> Option<String> {
        (self.expected > 0 && (self.decoded as f64) < 0.9 * self.expected as f64).then(|| {
            format!(
                "the video decoded to {} frames but its header promises about {} ({:.1} s at \
                 {:.2} fps): the file may be truncated or damaged",
                self.decoded, self.expected, self.video.duration_s, self.video.fps
            )
        })
    }
}

/// An ffmpeg command decoding every frame of the first video stream of `input` through the
/// filter graph `filter`, one output frame per decoded frame (no frame-rate conversion), then
/// `output` (format options and destination).
fn decode_command(input: &str, filter: &str, output: &[&str]) -> CommandLine {
    let mut args = vec![
        "-nostdin",
        "-v",
        "error",
        "-i",
        input,
        "-map",
        "0:v:0",
        "-vf",
        filter,
        "-fps_mode",
        "passthrough",
    ];
    args.extend_from_slice(output);
    Tool::ffmpeg().command(&args)
}

/// Name of the extracted file of decoded frame `n`.
pub fn frame_name(n: usize) -> String {
    format!("frame_{n:06}.jpg")
}

/// Run `cmd` (ffmpeg writing raw `w × h` gray frames to stdout) and score each frame.
fn score_frames(
    cmd: &CommandLine,
    video: &Path,
    w: usize,
    h: usize,
    on_frame: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    let mut child = cmd.spawn_piped()?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut frame = vec![0_u8; w * h];
    let mut scores = Vec::new();
    loop {
        match stdout.read_exact(&mut frame) {
            Ok(()) => {
                scores.push(laplacian_variance(&frame, w, h));
                on_frame(scores.len());
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(Error::io(video, e)),
        }
    }
    let status = child.wait().map_err(|e| Error::io(video, e))?;
    let stderr = err_thread.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::Input {
            path: video.to_path_buf(),
            field: "video stream".into(),
            problem: format!("`{}` failed ({status}): {}", cmd.display(), stderr.trim()),
        });
    }
    Ok(scores)
}

/// The 35 mm-equivalent focal length a video's container metadata records, millimetres (e.g.
/// iPhone `com.apple.quicktime.camera.focal_length.35mm_equivalent`), if any tag whose key
/// mentions a 35 mm-equivalent focal length holds a number in 4..=2000.
pub fn focal_length_35mm_tag(video: &Path) -> Option<f64> {
    let out = Tool::ffprobe()
        .command(&[
            "-v",
            "error",
            "-show_entries",
            "format_tags:stream_tags",
            "-of",
            "json",
            &video.display().to_string(),
        ])
        .output()
        .ok()?;
    let json: serde_json::Value = serde_json::from_slice(&out).ok()?;
    let mut tag_maps = vec![&json["format"]["tags"]];
    if let Some(streams) = json["streams"].as_array() {
        tag_maps.extend(streams.iter().map(|s| &s["tags"]));
    }
    tag_maps
        .into_iter()
        .filter_map(|t| t.as_object())
        .flat_map(|m| m.iter())
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            k.contains("focal") && k.contains("35")
        })
        .find_map(|(_, v)| {
            v.as_str()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .or_else(|| v.as_f64())
        })
        .filter(|f| f.is_finite() && (4.0..=2000.0).contains(f))
}
