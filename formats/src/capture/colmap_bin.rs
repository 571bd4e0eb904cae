//! COLMAP sparse models in binary form (`cameras.bin`, `images.bin`, `points3D.bin`), and a
//! summary of such a model for quality gates ([`read_colmap_model_stats`]).
//!
//! Source: COLMAP `src/colmap/scene/reconstruction_io.cc` (`ReadCamerasBinary`,
//! `ReadImagesBinary`, `ReadPoints3DBinary` and their writers), `src/colmap/sensor/models.h`
//! (model ids), `src/colmap/scene/reconstruction.cc` (`ComputeMeanReprojectionError`).
//!
//! Layout, little-endian, no padding or header beyond the counts:
//! - `cameras.bin`: u64 num_cameras; per camera: u32 CAMERA_ID, i32 MODEL_ID, u64 WIDTH,
//!   u64 HEIGHT, f64 PARAMS[n] (n fixed by MODEL_ID, see `colmap_model.rs` `CAMERA_MODELS`; every
//!   MODEL_ID 0..=10 is converted).
//! - `images.bin`: u64 num_reg_images; per image: u32 IMAGE_ID, f64 QW QX QY QZ, f64 TX TY TZ,
//!   u32 CAMERA_ID, NAME as bytes ending in NUL, u64 num_points2D, then num_points2D ×
//!   (f64 X, f64 Y, u64 POINT3D_ID).
//! - `points3D.bin`: u64 num_points; per point: u64 POINT3D_ID, f64 X Y Z, u8 R G B, f64 ERROR,
//!   u64 TRACK_LENGTH, then TRACK_LENGTH × (u32 IMAGE_ID, u32 POINT2D_IDX).
//!
//! Every field is read through a bounds-checked cursor, and no count is used to allocate before
//! it is checked against the bytes left. A file that ends inside a record, a count larger than
//! the rest of the file could hold, or bytes after the last record is [`Error::Corrupt`]; a value
//! Kiln cannot use (non-finite number, zero quaternion, duplicate or unknown id, non-UTF-8 or
//! empty NAME, MODEL_ID outside 0..=10, WIDTH/HEIGHT 0 or above u32::MAX) is [`Error::Invalid`].
//! Both name the file, the record (1-based, with its id once read), the field and its byte
//! offset, e.g. `images.bin record 3 of 4 (IMAGE_ID 7) QW at byte 1234`.
//!
//! Values are then converted by the same functions as the text reader's (`colmap_model.rs`), so the
//! text and binary forms of one model give identical captures. 2D observations and tracks are
//! skipped (bounds-checked, not interpreted) except for counting.

use std::collections::HashMap;
use std::path::Path;

use super::colmap_model::{
    CAMERA_MODELS, CameraEntry, ImageEntry, ParsedModel, camera_from_model, image_name, image_size,
    model_file, pose_from_colmap,
};
use super::model::SfmPoints;
use crate::{Error, Result};

/// Smallest camera record: id, model id, width, height, and 3 parameters (SIMPLE_PINHOLE).
const CAMERA_MIN_BYTES: usize = 4 + 4 + 8 + 8 + 3 * 8;
/// Smallest image record: id, pose (7 f64), camera id, an empty NAME's NUL, num_points2D.
const IMAGE_MIN_BYTES: usize = 4 + 7 * 8 + 4 + 1 + 8;
/// One 2D observation of `images.bin`: X, Y, POINT3D_ID.
const POINT2D_BYTES: usize = 8 + 8 + 8;
/// Smallest point record: id, X Y Z, R G B, ERROR, TRACK_LENGTH.
const POINT_MIN_BYTES: usize = 8 + 3 * 8 + 3 + 8 + 8;
/// One track element of `points3D.bin`: IMAGE_ID, POINT2D_IDX.
const TRACK_ELEMENT_BYTES: usize = 4 + 4;

/// Summary of a binary COLMAP model, for quality gates (counts and COLMAP's error measure).
#[derive(Debug, Clone, PartialEq)]
pub struct ColmapModelStats {
    /// Cameras in `cameras.bin` (any of COLMAP's models 0..=10, supported by Kiln or not).
    pub cameras: usize,
    /// Images in `images.bin`; COLMAP writes registered images only.
    pub registered_images: usize,
    /// Their NAMEs (`/`-separated, as [`crate::capture::Frame::name`]), sorted byte-wise.
    pub image_names: Vec<String>,
    /// 3D points in `points3D.bin`.
    pub points: usize,
    /// Sum of the points' track lengths: the number of 2D observations of 3D points.
    pub observations: u64,
    /// Mean reprojection error, pixels: COLMAP's `ComputeMeanReprojectionError`, the plain mean
    /// of the per-point ERROR over points that have one (ERROR ≠ −1, COLMAP's "not computed"),
    /// *not* weighted by track length; 0 when no point has an error. Each point's ERROR is itself
    /// the mean over its track of the pixel distance between observation and reprojection.
    pub mean_reprojection_error_px: f64,
}

/// Summarise the binary COLMAP model in `model_dir` (`cameras.bin`, `images.bin`,
/// `points3D.bin`, all required).
///
/// Reads and validates all three files as [`super::read_colmap`] does, except that every COLMAP
/// camera model (MODEL_ID 0..=10) is accepted, since no intrinsics are converted. No image files
/// are looked for. Counts as stored; see [`ColmapModelStats`] for units and definitions.
/// - `model_dir`: the directory holding the `.bin` files itself (not searched below).
///
/// # Errors
/// [`Error::NotFound`] if a file is missing; [`Error::Io`] reading it; [`Error::Corrupt`] for a
/// truncated file, an impossible count or trailing bytes; [`Error::Invalid`] for an unusable
/// value, a duplicate id or an unknown CAMERA_ID (all naming file, record, field and byte offset;
/// module doc).
///
/// Source: COLMAP binary model format (module doc); `Reconstruction::ComputeMeanReprojectionError`.
pub fn read_colmap_model_stats(model_dir: &Path) -> Result<ColmapModelStats> {
    let cameras_path = model_file(model_dir, "cameras.bin");
    let images_path = model_file(model_dir, "images.bin");
    let points_path = model_file(model_dir, "points3D.bin");
    let cameras = parse_cameras(&cameras_path, &read_bytes(&cameras_path)?, false)?;
    let images = parse_images(&images_path, &read_bytes(&images_path)?)?;
    let points = parse_points(&points_path, &read_bytes(&points_path)?)?;
    let mut image_names: Vec<String> = images.into_iter().map(|i| i.name).collect();
    image_names.sort();
    let mean_reprojection_error_px = if points.errors == 0 {
        0.0
    } else {
        points.error_sum / points.errors as f64
    };
    Ok(ColmapModelStats {
        cameras: cameras.len(),
        registered_images: image_names.len(),
        image_names,
        points: points.points.positions.len(),
        observations: points.observations,
        mean_reprojection_error_px,
    })
}

/// Parse the binary model in `model_dir` for [`super::read_colmap`] (`points3D.bin` optional).
pub(super) fn read_binary_model(model_dir: &Path) -> Result<ParsedModel> {
    let cameras_path = model_file(model_dir, "cameras.bin");
    let images_path = model_file(model_dir, "images.bin");
    let points_path = model_file(model_dir, "points3D.bin");
    let cameras: HashMap<_, _> = parse_cameras(&cameras_path, &read_bytes(&cameras_path)?, true)?
        .into_iter()
        .filter_map(|(id, camera)| camera.map(|c| (id, c)))
        .collect();
    let images = parse_images(&images_path, &read_bytes(&images_path)?)?;
    let points = if points_path.is_file() {
        Some(parse_points(&points_path, &read_bytes(&points_path)?)?.points)
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

fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// A bounds-checked little-endian reader over one file's bytes that knows which record and field
/// it is in, for errors.
struct Cursor<'a> {
    path: &'a Path,
    /// File name for locations (`images.bin`).
    file: String,
    bytes: &'a [u8],
    pos: usize,
    /// Record being read: 0-based index and record count; `None` outside records.
    record: Option<(usize, usize)>,
    /// Id of the record being read, once read: (column, value).
    id: Option<(&'static str, u64)>,
}

impl<'a> Cursor<'a> {
    fn new(path: &'a Path, bytes: &'a [u8]) -> Cursor<'a> {
        let file = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        Cursor {
            path,
            file,
            bytes,
            pos: 0,
            record: None,
            id: None,
        }
    }

    fn begin_record(&mut self, index: usize, count: usize) {
        self.record = Some((index, count));
        self.id = None;
    }

    /// Take `id`, read at byte `at` as column `field`, as the id of record `index`: it names the
    /// record in later messages, and a repeat of an id already in `seen` is an error naming both
    /// records (`what`: e.g. "each camera id once").
    fn claim_id(
        &mut self,
        field: &'static str,
        at: usize,
        id: u64,
        index: usize,
        seen: &mut HashMap<u64, usize>,
        what: &str,
    ) -> Result<()> {
        self.id = Some((field, id));
        match seen.insert(id, index) {
            Some(previous) => Err(self.invalid(
                field,
                at,
                what,
                format!("{id}, also in record {}", previous + 1),
            )),
            None => Ok(()),
        }
    }

    /// `images.bin record 3 of 4 (IMAGE_ID 7) QW at byte 1234`.
    fn location(&self, field: &str, at: usize) -> String {
        let mut s = self.file.clone();
        if let Some((index, count)) = self.record {
            s.push_str(&format!(" record {} of {count}", index + 1));
            if let Some((column, id)) = self.id {
                s.push_str(&format!(" ({column} {id})"));
            }
        }
        s.push_str(&format!(" {field} at byte {at}"));
        s
    }

    fn corrupt(&self, field: &str, at: usize, what: String) -> Error {
        Error::Corrupt {
            path: self.path.to_path_buf(),
            location: self.location(field, at),
            what,
        }
    }

    fn invalid(&self, field: &str, at: usize, expected: impl Into<String>, found: String) -> Error {
        Error::Invalid {
            path: self.path.to_path_buf(),
            field: self.location(field, at),
            expected: expected.into(),
            found,
        }
    }

    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let at = self.pos;
        let Some(chunk) = self.bytes.get(at..).and_then(|rest| rest.get(..N)) else {
            return Err(self.corrupt(
                field,
                at,
                format!(
                    "truncated: the file ends {} byte(s) into this {N}-byte field",
                    self.left()
                ),
            ));
        };
        let mut out = [0; N];
        out.copy_from_slice(chunk);
        self.pos += N;
        Ok(out)
    }

    fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.take::<1>(field)?[0])
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        self.take(field).map(u32::from_le_bytes)
    }

    fn i32(&mut self, field: &str) -> Result<i32> {
        self.take(field).map(i32::from_le_bytes)
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        self.take(field).map(u64::from_le_bytes)
    }

    fn f64(&mut self, field: &str) -> Result<f64> {
        self.take(field).map(f64::from_le_bytes)
    }

    fn finite(&mut self, field: &str) -> Result<f64> {
        let at = self.pos;
        let v = self.f64(field)?;
        if !v.is_finite() {
            return Err(self.invalid(field, at, "a finite number", v.to_string()));
        }
        Ok(v)
    }

    /// A u64 count of items of at least `min_bytes` each, checked against the bytes left.
    fn count(&mut self, field: &str, min_bytes: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(field)?;
        let left = self.left();
        let fits = usize::try_from(n).ok().filter(|&n| n <= left / min_bytes);
        fits.ok_or_else(|| {
            self.corrupt(
                field,
                at,
                format!(
                    "count {n} needs at least {} bytes ({min_bytes} each) but only {left} remain",
                    u128::from(n) * min_bytes as u128
                ),
            )
        })
    }

    /// Skip `n` bytes of `field` (already covered by a checked count).
    fn skip(&mut self, n: usize, field: &str) -> Result<()> {
        if n > self.left() {
            let left = self.left();
            return Err(self.corrupt(
                field,
                self.pos,
                format!("truncated: {n} bytes needed, the file ends after {left}"),
            ));
        }
        self.pos += n;
        Ok(())
    }

    /// Bytes up to the next NUL, which is consumed and not returned.
    fn c_string(&mut self, field: &str) -> Result<&'a [u8]> {
        let at = self.pos;
        let rest = self.bytes.get(at..).unwrap_or_default();
        let Some(end) = rest.iter().position(|&b| b == 0) else {
            return Err(self.corrupt(
                field,
                at,
                format!(
                    "truncated: no NUL ending the name in the {} byte(s) left",
                    rest.len()
                ),
            ));
        };
        self.pos += end + 1;
        Ok(&rest[..end])
    }

    /// Require the end of the file after the last record.
    fn finish(&mut self) -> Result<()> {
        self.record = None;
        let left = self.left();
        if left > 0 {
            return Err(self.corrupt(
                "end of data",
                self.pos,
                format!("{left} byte(s) after the last record; the counts do not match the data"),
            ));
        }
        Ok(())
    }
}

/// Converted camera (when `convert`), or why it cannot be used, of each CAMERA_ID.
type Cameras = HashMap<u32, Option<CameraEntry>>;

/// `cameras.bin` → cameras by id; with `convert`, each converted by [`camera_from_model`], else
/// `None`.
fn parse_cameras(path: &Path, bytes: &[u8], convert: bool) -> Result<Cameras> {
    let mut cur = Cursor::new(path, bytes);
    let n = cur.count("num_cameras", CAMERA_MIN_BYTES)?;
    let mut cameras = HashMap::with_capacity(n);
    let mut records = HashMap::with_capacity(n);
    for index in 0..n {
        cur.begin_record(index, n);
        let id_at = cur.pos;
        let id = cur.u32("CAMERA_ID")?;
        cur.claim_id(
            "CAMERA_ID",
            id_at,
            id.into(),
            index,
            &mut records,
            "each camera id once",
        )?;
        let model_at = cur.pos;
        let raw_model = cur.i32("MODEL_ID")?;
        let Some(&(model, names)) = usize::try_from(raw_model)
            .ok()
            .and_then(|m| CAMERA_MODELS.get(m))
        else {
            return Err(cur.invalid(
                "MODEL_ID",
                model_at,
                format!("a COLMAP camera model id 0..={}", CAMERA_MODELS.len() - 1),
                raw_model.to_string(),
            ));
        };
        let size_at = cur.pos;
        let width = cur.u64("WIDTH")?;
        let height = cur.u64("HEIGHT")?;
        image_size(width, height).map_err(|f| {
            let at = if f.field == "WIDTH" {
                size_at
            } else {
                size_at + 8
            };
            cur.invalid(f.field, at, f.expected, f.found)
        })?;
        let params_at = cur.pos;
        let mut params = Vec::with_capacity(names.len());
        for field in names {
            params.push(cur.finite(field)?);
        }
        let camera = if convert {
            let camera = camera_from_model(model, width, height, &params).map_err(|f| {
                let at = f.param.map_or(params_at, |k| params_at + 8 * k);
                cur.invalid(f.field, at, f.expected, f.found).to_string()
            });
            Some(camera)
        } else {
            None
        };
        cameras.insert(id, camera);
    }
    cur.finish()?;
    Ok(cameras)
}

/// `images.bin` → images in file order (a CAMERA_ID missing from `cameras.bin` skips its image in
/// [`super::read_colmap`], not the model).
fn parse_images(path: &Path, bytes: &[u8]) -> Result<Vec<ImageEntry>> {
    let mut cur = Cursor::new(path, bytes);
    let n = cur.count("num_reg_images", IMAGE_MIN_BYTES)?;
    let mut images = Vec::with_capacity(n);
    let mut ids = HashMap::with_capacity(n);
    for index in 0..n {
        cur.begin_record(index, n);
        let id_at = cur.pos;
        let id = cur.u32("IMAGE_ID")?;
        cur.claim_id(
            "IMAGE_ID",
            id_at,
            id.into(),
            index,
            &mut ids,
            "each image id once",
        )?;
        let mut q = [0.0; 4];
        for (k, field) in ["QW", "QX", "QY", "QZ"].into_iter().enumerate() {
            q[k] = cur.f64(field)?;
        }
        let mut t = [0.0; 3];
        for (k, field) in ["TX", "TY", "TZ"].into_iter().enumerate() {
            t[k] = cur.f64(field)?;
        }
        let world_to_camera = pose_from_colmap(q, t);
        let camera_id = cur.u32("CAMERA_ID")?;
        let name_at = cur.pos;
        let raw = cur.c_string("NAME")?;
        let name = match std::str::from_utf8(raw) {
            Ok("") => {
                return Err(cur.invalid(
                    "NAME",
                    name_at,
                    "an image file name",
                    "an empty name".into(),
                ));
            }
            Ok(name) => image_name(name),
            Err(e) => {
                return Err(cur.invalid(
                    "NAME",
                    name_at,
                    "a UTF-8 file name",
                    format!(
                        "`{}` (invalid byte at {})",
                        String::from_utf8_lossy(raw),
                        name_at + e.valid_up_to()
                    ),
                ));
            }
        };
        let n_points2d = cur.count("num_points2D", POINT2D_BYTES)?;
        cur.skip(n_points2d * POINT2D_BYTES, "POINTS2D[]")?;
        images.push(ImageEntry {
            name,
            camera_id,
            world_to_camera,
        });
    }
    cur.finish()?;
    Ok(images)
}

/// What `points3D.bin` holds that Kiln uses.
#[derive(Debug)]
struct PointsSummary {
    /// Positions and colours, file order.
    points: SfmPoints,
    /// Sum of track lengths.
    observations: u64,
    /// Sum of ERROR over points that have one (ERROR ≠ −1), pixels.
    error_sum: f64,
    /// Number of points that have an ERROR.
    errors: usize,
}

/// COLMAP's ERROR of a point whose error was never computed (`Point3D::HasError`).
const NO_ERROR: f64 = -1.0;

/// `points3D.bin` → positions, colours and error statistics.
fn parse_points(path: &Path, bytes: &[u8]) -> Result<PointsSummary> {
    let mut cur = Cursor::new(path, bytes);
    let n = cur.count("num_points", POINT_MIN_BYTES)?;
    let mut summary = PointsSummary {
        points: SfmPoints {
            positions: Vec::with_capacity(n),
            colors: Vec::with_capacity(n),
        },
        observations: 0,
        error_sum: 0.0,
        errors: 0,
    };
    let mut ids = HashMap::with_capacity(n);
    for index in 0..n {
        cur.begin_record(index, n);
        let id_at = cur.pos;
        let id = cur.u64("POINT3D_ID")?;
        cur.claim_id(
            "POINT3D_ID",
            id_at,
            id,
            index,
            &mut ids,
            "each point id once",
        )?;
        let mut xyz = [0.0; 3];
        for (k, field) in ["X", "Y", "Z"].into_iter().enumerate() {
            xyz[k] = cur.finite(field)?;
        }
        let mut rgb = [0_u8; 3];
        for (k, field) in ["R", "G", "B"].into_iter().enumerate() {
            rgb[k] = cur.u8(field)?;
        }
        let error_at = cur.pos;
        let error = cur.finite("ERROR")?;
        if error == NO_ERROR {
            // Not computed: left out of the mean, as COLMAP does.
        } else if error >= 0.0 {
            summary.error_sum += error;
            summary.errors += 1;
        } else {
            return Err(cur.invalid(
                "ERROR",
                error_at,
                "a reprojection error ≥ 0 pixels, or -1 (not computed)",
                error.to_string(),
            ));
        }
        let track = cur.count("TRACK_LENGTH", TRACK_ELEMENT_BYTES)?;
        cur.skip(track * TRACK_ELEMENT_BYTES, "TRACK[]")?;
        summary.observations += track as u64;
        summary.points.positions.push(xyz);
        summary.points.colors.push(rgb);
    }
    cur.finish()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{Capture, Distortion, Intrinsics, read_colmap, test_dataset};
    use std::path::PathBuf;

    /// A camera as `cameras.bin` stores it.
    #[derive(Debug, Clone)]
    struct Cam {
        id: u32,
        model_id: i32,
        width: u64,
        height: u64,
        params: Vec<f64>,
    }

    /// An image as `images.bin` stores it.
    #[derive(Debug, Clone)]
    struct Img {
        id: u32,
        q: [f64; 4],
        t: [f64; 3],
        camera_id: u32,
        name: Vec<u8>,
        points2d: Vec<(f64, f64, u64)>,
    }

    /// A point as `points3D.bin` stores it.
    #[derive(Debug, Clone)]
    struct Pt {
        id: u64,
        xyz: [f64; 3],
        rgb: [u8; 3],
        error: f64,
        track: Vec<(u32, u32)>,
    }

    // Test-only encoders: the layout of the module doc, as COLMAP's Write*Binary write it.

    fn encode_cameras(cams: &[Cam]) -> Vec<u8> {
        let mut b = (cams.len() as u64).to_le_bytes().to_vec();
        for c in cams {
            b.extend(c.id.to_le_bytes());
            b.extend(c.model_id.to_le_bytes());
            b.extend(c.width.to_le_bytes());
            b.extend(c.height.to_le_bytes());
            for p in &c.params {
                b.extend(p.to_le_bytes());
            }
        }
        b
    }

    fn encode_images(imgs: &[Img]) -> Vec<u8> {
        let mut b = (imgs.len() as u64).to_le_bytes().to_vec();
        for i in imgs {
            b.extend(i.id.to_le_bytes());
            for v in i.q.iter().chain(&i.t) {
                b.extend(v.to_le_bytes());
            }
            b.extend(i.camera_id.to_le_bytes());
            b.extend(&i.name);
            b.push(0);
            b.extend((i.points2d.len() as u64).to_le_bytes());
            for (x, y, id) in &i.points2d {
                b.extend(x.to_le_bytes());
                b.extend(y.to_le_bytes());
                b.extend(id.to_le_bytes());
            }
        }
        b
    }

    fn encode_points(pts: &[Pt]) -> Vec<u8> {
        let mut b = (pts.len() as u64).to_le_bytes().to_vec();
        for p in pts {
            b.extend(p.id.to_le_bytes());
            for v in p.xyz {
                b.extend(v.to_le_bytes());
            }
            b.extend(p.rgb);
            b.extend(p.error.to_le_bytes());
            b.extend((p.track.len() as u64).to_le_bytes());
            for (image, idx) in &p.track {
                b.extend(image.to_le_bytes());
                b.extend(idx.to_le_bytes());
            }
        }
        b
    }

    fn write_binary(dir: &Path, cams: &[Cam], imgs: &[Img], pts: &[Pt]) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("cameras.bin"), encode_cameras(cams)).unwrap();
        std::fs::write(dir.join("images.bin"), encode_images(imgs)).unwrap();
        std::fs::write(dir.join("points3D.bin"), encode_points(pts)).unwrap();
    }

    /// The same model as COLMAP text (f64 `Display` is shortest round-trip, so bits survive).
    fn write_text(dir: &Path, cams: &[Cam], imgs: &[Img], pts: &[Pt]) {
        std::fs::create_dir_all(dir).unwrap();
        let mut c = String::from("# CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n");
        for cam in cams {
            let model = CAMERA_MODELS[cam.model_id as usize].0;
            c += &format!("{} {model} {} {}", cam.id, cam.width, cam.height);
            for p in &cam.params {
                c += &format!(" {p}");
            }
            c += "\n";
        }
        let mut i = String::new();
        for img in imgs {
            let [qw, qx, qy, qz] = img.q;
            let [tx, ty, tz] = img.t;
            let name = String::from_utf8(img.name.clone()).unwrap();
            i += &format!(
                "{} {qw} {qx} {qy} {qz} {tx} {ty} {tz} {} {name}\n",
                img.id, img.camera_id
            );
            let obs: Vec<String> = img
                .points2d
                .iter()
                .map(|(x, y, id)| {
                    let id = if *id == u64::MAX {
                        "-1".to_string()
                    } else {
                        id.to_string()
                    };
                    format!("{x} {y} {id}")
                })
                .collect();
            i += &obs.join(" ");
            i += "\n";
        }
        let mut p = String::new();
        for pt in pts {
            let [x, y, z] = pt.xyz;
            let [r, g, b] = pt.rgb;
            p += &format!("{} {x} {y} {z} {r} {g} {b} {}", pt.id, pt.error);
            for (image, idx) in &pt.track {
                p += &format!(" {image} {idx}");
            }
            p += "\n";
        }
        std::fs::write(dir.join("cameras.txt"), c).unwrap();
        std::fs::write(dir.join("images.txt"), i).unwrap();
        std::fs::write(dir.join("points3D.txt"), p).unwrap();
    }

    fn image_file(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"not decoded by the reader").unwrap();
    }

    fn img(id: u32, camera_id: u32, name: &str) -> Img {
        Img {
            id,
            q: [0.9, 0.1, -0.2, 0.3],
            t: [1.5, -2.25, 3.0],
            camera_id,
            name: name.as_bytes().to_vec(),
            points2d: vec![(10.5, 20.25, 0), (1.0, 2.0, u64::MAX)],
        }
    }

    fn pt(id: u64, error: f64, track: Vec<(u32, u32)>) -> Pt {
        Pt {
            id,
            xyz: [0.1 * id as f64, -2.0, 7.25],
            rgb: [id as u8, 128, 255],
            error,
            track,
        }
    }

    /// A small model: two cameras, two images with observations, two points with tracks.
    fn small_model() -> (Vec<Cam>, Vec<Img>, Vec<Pt>) {
        let cams = vec![
            Cam {
                id: 2,
                model_id: 4,
                width: 40,
                height: 30,
                params: vec![50.0, 51.0, 20.0, 15.0, 0.1, 0.2, 0.3, 0.4],
            },
            Cam {
                id: 1,
                model_id: 1,
                width: 40,
                height: 30,
                params: vec![50.0, 51.0, 20.0, 15.0],
            },
        ];
        let imgs = vec![img(7, 2, "sub dir/b c.png"), img(3, 1, "a.png")];
        let pts = vec![pt(5, 0.5, vec![(7, 0), (3, 0)]), pt(2, 1.5, vec![(7, 1)])];
        (cams, imgs, pts)
    }

    /// Both forms of one model under `root/{bin,txt}/sparse/0`, images in `root/{bin,txt}/images`.
    fn both_forms(root: &Path, cams: &[Cam], imgs: &[Img], pts: &[Pt]) -> (Capture, Capture) {
        let mut out = Vec::new();
        for form in ["bin", "txt"] {
            let scene = root.join(form);
            let sparse = scene.join("sparse/0");
            if form == "bin" {
                write_binary(&sparse, cams, imgs, pts);
            } else {
                write_text(&sparse, cams, imgs, pts);
            }
            for i in imgs {
                image_file(
                    &scene
                        .join("images")
                        .join(std::str::from_utf8(&i.name).unwrap()),
                );
            }
            out.push(read_colmap(&scene).unwrap());
        }
        let txt = out.pop().unwrap();
        let bin = out.pop().unwrap();
        (bin, txt)
    }

    /// Frames, intrinsics, distortion, poses (bit-exact), points and skipped of two captures
    /// equal; `image_path` and `source` compared relative to their scene roots.
    fn assert_same_capture(bin: &Capture, txt: &Capture, bin_root: &Path, txt_root: &Path) {
        assert_eq!(bin.frames.len(), txt.frames.len());
        for (b, t) in bin.frames.iter().zip(&txt.frames) {
            assert_eq!(b.name, t.name);
            assert_eq!(
                b.image_path.strip_prefix(bin_root).unwrap(),
                t.image_path.strip_prefix(txt_root).unwrap()
            );
            assert_eq!(b.intrinsics, t.intrinsics, "{}", b.name);
            assert_eq!(b.distortion, t.distortion, "{}", b.name);
            let bits = |m: &[[f64; 4]; 4]| m.map(|r| r.map(f64::to_bits));
            assert_eq!(
                bits(&b.world_to_camera),
                bits(&t.world_to_camera),
                "{}",
                b.name
            );
            assert_eq!((b.depth_bounds, &b.mask_path), (None, &None));
        }
        assert_eq!(bin.points, txt.points);
        assert_eq!(bin.skipped, txt.skipped);
        assert_eq!(
            bin.source.strip_prefix(bin_root).unwrap(),
            txt.source.strip_prefix(txt_root).unwrap()
        );
    }

    #[test]
    fn binary_every_camera_model_maps_like_the_text_reader() {
        let params = [
            50.5, 51.25, 20.125, 15.0625, 0.1, -0.2, 0.003, -0.004, 0.02, -0.03, 0.04, -0.05,
        ];
        // (fx, fy, cx, cy, distortion) per model id, from COLMAP's parameter order.
        let expected = [
            (50.5, 50.5, 51.25, 20.125, Distortion::None),
            (50.5, 51.25, 20.125, 15.0625, Distortion::None),
            (
                50.5,
                50.5,
                51.25,
                20.125,
                Distortion::SimpleRadial { k: 15.0625 },
            ),
            (
                50.5,
                50.5,
                51.25,
                20.125,
                Distortion::Radial {
                    k1: 15.0625,
                    k2: 0.1,
                },
            ),
            (
                50.5,
                51.25,
                20.125,
                15.0625,
                Distortion::OpenCv {
                    k1: 0.1,
                    k2: -0.2,
                    p1: 0.003,
                    p2: -0.004,
                },
            ),
            (
                50.5,
                51.25,
                20.125,
                15.0625,
                Distortion::OpenCvFisheye {
                    k1: 0.1,
                    k2: -0.2,
                    k3: 0.003,
                    k4: -0.004,
                },
            ),
            (
                50.5,
                51.25,
                20.125,
                15.0625,
                Distortion::FullOpenCv {
                    k1: 0.1,
                    k2: -0.2,
                    p1: 0.003,
                    p2: -0.004,
                    k3: 0.02,
                    k4: -0.03,
                    k5: 0.04,
                    k6: -0.05,
                },
            ),
            (50.5, 51.25, 20.125, 15.0625, Distortion::Fov { omega: 0.1 }),
            (
                50.5,
                50.5,
                51.25,
                20.125,
                Distortion::SimpleRadialFisheye { k: 15.0625 },
            ),
            (
                50.5,
                50.5,
                51.25,
                20.125,
                Distortion::RadialFisheye {
                    k1: 15.0625,
                    k2: 0.1,
                },
            ),
            (
                50.5,
                51.25,
                20.125,
                15.0625,
                Distortion::ThinPrismFisheye {
                    k1: 0.1,
                    k2: -0.2,
                    p1: 0.003,
                    p2: -0.004,
                    k3: 0.02,
                    k4: -0.03,
                    sx1: 0.04,
                    sy1: -0.05,
                },
            ),
        ];
        assert_eq!(expected.len(), CAMERA_MODELS.len());
        for (model_id, (fx, fy, cx, cy, distortion)) in expected.into_iter().enumerate() {
            let n = CAMERA_MODELS[model_id].1.len();
            let cams = [Cam {
                id: 4,
                model_id: model_id as i32,
                width: 41,
                height: 31,
                params: params[..n].to_vec(),
            }];
            let dir = tempfile::tempdir().unwrap();
            let (bin, txt) = both_forms(dir.path(), &cams, &[img(1, 4, "a.png")], &[]);
            assert_same_capture(&bin, &txt, &dir.path().join("bin"), &dir.path().join("txt"));
            let frame = &bin.frames[0];
            assert_eq!(
                frame.intrinsics,
                Intrinsics {
                    fx,
                    fy,
                    cx,
                    cy,
                    width: 41,
                    height: 31
                },
                "model {model_id}"
            );
            assert_eq!(frame.distortion, distortion, "model {model_id}");
            let stats = read_colmap_model_stats(&dir.path().join("bin/sparse/0")).unwrap();
            assert_eq!((stats.cameras, stats.registered_images), (1, 1));
        }
    }

    #[test]
    fn binary_reads_ids_in_any_order_names_with_spaces_and_points_with_tracks() {
        let dir = tempfile::tempdir().unwrap();
        let (cams, imgs, pts) = small_model();
        let (bin, txt) = both_forms(dir.path(), &cams, &imgs, &pts);
        assert_same_capture(&bin, &txt, &dir.path().join("bin"), &dir.path().join("txt"));
        assert_eq!(bin.source, dir.path().join("bin/sparse/0"));
        let names: Vec<&str> = bin.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a.png", "sub dir/b c.png"]);
        assert!(bin.frames[1].image_path.ends_with("images/sub dir/b c.png"));
        assert_eq!(bin.frames[0].distortion, Distortion::None);
        assert!(matches!(
            bin.frames[1].distortion,
            Distortion::OpenCv { .. }
        ));
        assert_eq!(bin.frames[1].world_to_camera[2][3], 3.0);
        let points = bin.points.as_ref().unwrap();
        assert_eq!(points.positions, [[0.5, -2.0, 7.25], [0.2, -2.0, 7.25]]);
        assert_eq!(points.colors, [[5, 128, 255], [2, 128, 255]]);
    }

    #[test]
    fn binary_model_is_preferred_over_text_in_the_same_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (cams, imgs, pts) = small_model();
        write_binary(dir.path(), &cams, &imgs, &pts);
        let mut stale = cams.clone();
        stale[1].params[0] = 99.0;
        write_text(dir.path(), &stale, &imgs, &pts);
        image_file(&dir.path().join("images/a.png"));
        let capture = read_colmap(dir.path()).unwrap();
        assert_eq!(capture.frames[0].name, "a.png");
        assert_eq!(capture.frames[0].intrinsics.fx, 50.0);
        assert_eq!(capture.skipped, ["sub dir/b c.png"]);
    }

    #[test]
    fn binary_model_without_points_file_has_no_points() {
        let dir = tempfile::tempdir().unwrap();
        let (cams, imgs, pts) = small_model();
        write_binary(dir.path(), &cams, &imgs, &pts);
        std::fs::remove_file(dir.path().join("points3D.bin")).unwrap();
        image_file(&dir.path().join("images/a.png"));
        let capture = read_colmap(dir.path()).unwrap();
        assert_eq!(capture.points, None);
    }

    #[test]
    fn binary_truncated_at_every_byte_is_corrupt_naming_offset() {
        let (cams, imgs, pts) = small_model();
        let files = [
            ("cameras.bin", encode_cameras(&cams)),
            ("images.bin", encode_images(&imgs)),
            ("points3D.bin", encode_points(&pts)),
        ];
        for (name, bytes) in &files {
            let path = PathBuf::from("/model").join(name);
            let parse = |b: &[u8]| -> Result<()> {
                match *name {
                    "cameras.bin" => parse_cameras(&path, b, true).map(drop),
                    "images.bin" => parse_images(&path, b).map(drop),
                    _ => parse_points(&path, b).map(drop),
                }
            };
            parse(bytes).unwrap();
            for len in 0..bytes.len() {
                let err = parse(&bytes[..len]).unwrap_err();
                let msg = err.to_string();
                assert!(
                    matches!(err, Error::Corrupt { .. }),
                    "{name}[..{len}]: {msg}"
                );
                assert!(
                    msg.contains(name) && msg.contains("at byte"),
                    "{name}[..{len}]: {msg}"
                );
                // Either the record count cannot fit in what is left, or a record is cut short.
                let count_check = msg.contains("count") && msg.contains("remain");
                assert!(
                    count_check
                        || (msg.contains("truncated") && (len < 8 || msg.contains("record"))),
                    "{name}[..{len}]: {msg}"
                );
            }
            let mut longer = bytes.clone();
            longer.push(0);
            let msg = parse(&longer).unwrap_err().to_string();
            assert!(msg.contains("after the last record"), "{msg}");
        }
        // One case through read_colmap: the message names the field and its offset.
        let dir = tempfile::tempdir().unwrap();
        write_binary(dir.path(), &cams, &imgs, &pts);
        let bytes = encode_images(&imgs);
        // Record 1 is 136 bytes (name `sub dir/b c.png`, 2 observations); record 2's NAME starts
        // at 8 + 136 + 4 + 56 + 4 = 208.
        std::fs::write(dir.path().join("images.bin"), &bytes[..210]).unwrap();
        let msg = read_colmap(dir.path()).unwrap_err().to_string();
        assert!(
            msg.contains("images.bin record 2 of 2 (IMAGE_ID 3) NAME at byte 208")
                && msg.contains("truncated"),
            "{msg}"
        );
    }

    #[test]
    fn binary_huge_counts_are_corrupt_before_allocating() {
        let path = Path::new("/model/x.bin");
        let huge = u64::MAX.to_le_bytes();
        let err = parse_cameras(path, &huge, true).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("num_cameras"), "{err}");
        let err = parse_images(path, &huge).unwrap_err();
        assert!(err.to_string().contains("num_reg_images"), "{err}");
        let err = parse_points(path, &huge).unwrap_err();
        assert!(err.to_string().contains("num_points"), "{err}");

        let mut image = img(1, 1, "a.png");
        image.points2d.clear();
        let mut bytes = encode_images(&[image]);
        let n = bytes.len();
        bytes[n - 8..].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        let err = parse_images(path, &bytes).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("num_points2D"), "{err}");

        let mut bytes = encode_points(&[pt(1, 0.5, vec![])]);
        let n = bytes.len();
        bytes[n - 8..].copy_from_slice(&(1_u64 << 61).to_le_bytes());
        let err = parse_points(path, &bytes).unwrap_err();
        assert!(err.to_string().contains("TRACK_LENGTH"), "{err}");
    }

    #[test]
    fn binary_bad_values_are_invalid_naming_record_field_and_byte() {
        let (cams, imgs, pts) = small_model();
        // A model with one bad value, and the location the error must name.
        type Case = (Vec<Cam>, Vec<Img>, Vec<Pt>, &'static str);
        let cases: Vec<Case> = vec![
            (
                {
                    let mut c = cams.clone();
                    c[1].params[1] = f64::NAN;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "cameras.bin record 2 of 2 (CAMERA_ID 1) fy at byte",
            ),
            (
                {
                    let mut c = cams.clone();
                    c[1].params[0] = -1.0;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "(CAMERA_ID 1) fx at byte",
            ),
            (
                {
                    let mut c = cams.clone();
                    c[1].id = 2;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "record 2 of 2 (CAMERA_ID 2) CAMERA_ID at byte",
            ),
            (
                {
                    let mut c = cams.clone();
                    c[0].model_id = 11;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "(CAMERA_ID 2) MODEL_ID at byte 12",
            ),
            (
                {
                    let mut c = cams.clone();
                    c[0].model_id = -1;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "MODEL_ID at byte 12",
            ),
            (
                {
                    let mut c = cams.clone();
                    c[0].width = 0;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "WIDTH at byte 16",
            ),
            (
                {
                    let mut c = cams.clone();
                    c[0].height = 1 << 32;
                    c
                },
                imgs.clone(),
                pts.clone(),
                "HEIGHT at byte 24",
            ),
            (
                cams.clone(),
                {
                    let mut i = imgs.clone();
                    i[1].id = 7;
                    i
                },
                pts.clone(),
                "(IMAGE_ID 7) IMAGE_ID at byte",
            ),
            (
                cams.clone(),
                {
                    let mut i = imgs.clone();
                    i[0].name = b"a\xffb.png".to_vec();
                    i
                },
                pts.clone(),
                "(IMAGE_ID 7) NAME at byte 72",
            ),
            (
                cams.clone(),
                {
                    let mut i = imgs.clone();
                    i[0].name.clear();
                    i
                },
                pts.clone(),
                "(IMAGE_ID 7) NAME at byte 72",
            ),
            (
                cams.clone(),
                imgs.clone(),
                {
                    let mut p = pts.clone();
                    p[1].id = 5;
                    p
                },
                "points3D.bin record 2 of 2 (POINT3D_ID 5) POINT3D_ID at byte",
            ),
            (
                cams.clone(),
                imgs.clone(),
                {
                    let mut p = pts.clone();
                    p[0].xyz[2] = f64::NAN;
                    p
                },
                "points3D.bin record 1 of 2 (POINT3D_ID 5) Z at byte 32",
            ),
            (
                cams.clone(),
                imgs.clone(),
                {
                    let mut p = pts.clone();
                    p[0].error = -2.0;
                    p
                },
                "(POINT3D_ID 5) ERROR at byte 43",
            ),
        ];
        for (cams, imgs, pts, want) in cases {
            let dir = tempfile::tempdir().unwrap();
            write_binary(dir.path(), &cams, &imgs, &pts);
            image_file(&dir.path().join("images/a.png"));
            let err = read_colmap(dir.path()).unwrap_err();
            let msg = err.to_string();
            // A camera that cannot be used skips its images (here all: one error naming them).
            let fatal_or_skipped = matches!(err, Error::Invalid { .. } | Error::Empty { .. });
            assert!(fatal_or_skipped, "{msg}");
            assert!(msg.contains(want), "want `{want}`: {msg}");
        }
    }

    #[test]
    fn binary_unusable_poses_skip_their_image_naming_it() {
        // Both images present; one at a time gets a zero quaternion or an infinite translation.
        for (index, damage) in [(1usize, "zero q"), (0, "infinite t")] {
            let dir = tempfile::tempdir().unwrap();
            let (cams, mut imgs, pts) = small_model();
            match damage {
                "zero q" => imgs[index].q = [0.0; 4],
                _ => imgs[index].t[1] = f64::INFINITY,
            }
            write_binary(dir.path(), &cams, &imgs, &pts);
            image_file(&dir.path().join("images/a.png"));
            image_file(&dir.path().join("images/sub dir/b c.png"));
            let capture = read_colmap(dir.path()).unwrap();
            let name = std::str::from_utf8(&imgs[index].name).unwrap();
            assert_eq!(capture.skipped, [name], "{damage}");
            assert_eq!(capture.frames.len(), 1, "{damage}");
        }
    }

    #[test]
    fn binary_unknown_or_invalid_camera_skips_its_images_naming_them() {
        for damage in ["unknown id", "fx zero"] {
            let dir = tempfile::tempdir().unwrap();
            let (mut cams, mut imgs, pts) = small_model();
            let index = 1;
            match damage {
                "unknown id" => imgs[index].camera_id = 8,
                _ => {
                    let id = imgs[index].camera_id;
                    let cam = cams.iter_mut().find(|c| c.id == id).unwrap();
                    cam.params[0] = 0.0;
                }
            }
            write_binary(dir.path(), &cams, &imgs, &pts);
            image_file(&dir.path().join("images/a.png"));
            image_file(&dir.path().join("images/sub dir/b c.png"));
            let capture = read_colmap(dir.path()).unwrap_or_else(|e| panic!("{damage}: {e}"));
            let name = std::str::from_utf8(&imgs[index].name).unwrap();
            assert_eq!(capture.skipped, [name], "{damage}");
            assert_eq!(capture.frames.len(), 1, "{damage}");
        }
    }

    #[test]
    fn model_stats_count_and_use_colmaps_mean_error() {
        let dir = tempfile::tempdir().unwrap();
        let (cams, imgs, mut pts) = small_model();
        pts.push(pt(9, NO_ERROR, vec![(3, 1)]));
        write_binary(dir.path(), &cams, &imgs, &pts);
        let stats = read_colmap_model_stats(dir.path()).unwrap();
        assert_eq!(
            stats,
            ColmapModelStats {
                cameras: 2,
                registered_images: 2,
                image_names: vec!["a.png".into(), "sub dir/b c.png".into()],
                points: 3,
                observations: 4,
                // (0.5 + 1.5) / 2: unweighted by track length, the -1 point left out.
                mean_reprojection_error_px: 1.0,
            }
        );
        write_binary(dir.path(), &cams, &imgs, &[]);
        let stats = read_colmap_model_stats(dir.path()).unwrap();
        assert_eq!((stats.points, stats.observations), (0, 0));
        assert_eq!(stats.mean_reprojection_error_px, 0.0);
        std::fs::remove_file(dir.path().join("points3D.bin")).unwrap();
        let err = read_colmap_model_stats(dir.path()).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
    }

    /// A COLMAP text model parsed into the binary records (test-only; no validation).
    fn text_to_records(model_dir: &Path) -> (Vec<Cam>, Vec<Img>, Vec<Pt>) {
        let read = |f: &str| std::fs::read_to_string(model_dir.join(f)).unwrap();
        let data = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        let num = |s: &str| -> f64 { s.parse().unwrap() };
        let mut cams = Vec::new();
        for line in data(&read("cameras.txt")) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.is_empty() {
                continue;
            }
            cams.push(Cam {
                id: f[0].parse().unwrap(),
                model_id: CAMERA_MODELS.iter().position(|(m, _)| *m == f[1]).unwrap() as i32,
                width: f[2].parse().unwrap(),
                height: f[3].parse().unwrap(),
                params: f[4..].iter().map(|s| num(s)).collect(),
            });
        }
        let mut imgs = Vec::new();
        let lines = data(&read("images.txt"));
        for pair in lines.chunks(2) {
            let f: Vec<&str> = pair[0].split_whitespace().collect();
            let obs: Vec<&str> = pair
                .get(1)
                .map_or(vec![], |l| l.split_whitespace().collect());
            imgs.push(Img {
                id: f[0].parse().unwrap(),
                q: [num(f[1]), num(f[2]), num(f[3]), num(f[4])],
                t: [num(f[5]), num(f[6]), num(f[7])],
                camera_id: f[8].parse().unwrap(),
                name: f[9..].join(" ").into_bytes(),
                points2d: obs
                    .chunks(3)
                    .map(|o| {
                        let id = if o[2] == "-1" {
                            u64::MAX
                        } else {
                            o[2].parse().unwrap()
                        };
                        (num(o[0]), num(o[1]), id)
                    })
                    .collect(),
            });
        }
        let mut pts = Vec::new();
        for line in data(&read("points3D.txt")) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.is_empty() {
                continue;
            }
            pts.push(Pt {
                id: f[0].parse().unwrap(),
                xyz: [num(f[1]), num(f[2]), num(f[3])],
                rgb: [
                    f[4].parse().unwrap(),
                    f[5].parse().unwrap(),
                    f[6].parse().unwrap(),
                ],
                error: num(f[7]),
                track: f[8..]
                    .chunks(2)
                    .map(|t| (t[0].parse().unwrap(), t[1].parse().unwrap()))
                    .collect(),
            });
        }
        (cams, imgs, pts)
    }

    #[test]
    fn maupertuis_binary_conversion_reads_identical_capture() {
        let dataset = test_dataset("capture-maupertuis-colmap");
        let text = read_colmap(&dataset).unwrap();
        let (cams, imgs, pts) = text_to_records(&text.source);
        assert_eq!((cams.len(), imgs.len(), pts.len()), (1, 4, 1039));

        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("colmap/reconstruction");
        write_binary(&model, &cams, &imgs, &pts);
        let images = dir.path().join("colmap/images");
        std::fs::create_dir_all(&images).unwrap();
        for frame in &text.frames {
            std::fs::copy(&frame.image_path, images.join(&frame.name)).unwrap();
        }
        let binary = read_colmap(dir.path()).unwrap();
        assert_eq!(binary.source, model);
        assert_same_capture(&binary, &text, dir.path(), &dataset);

        let stats = read_colmap_model_stats(&model).unwrap();
        assert_eq!(stats.image_names, ["00.jpg", "01.jpg", "02.jpg", "03.jpg"]);
        assert_eq!((stats.cameras, stats.points), (1, 1039));
        // points3D.txt header: "mean track length: 3.22907" over 1039 points.
        assert_eq!(stats.observations, 3355);
        let mean: f64 = pts.iter().map(|p| p.error).sum::<f64>() / pts.len() as f64;
        assert!((stats.mean_reprojection_error_px - mean).abs() < 1e-12);
    }
}
