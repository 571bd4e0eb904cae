//! PLY point clouds handed beside a capture as its initial points: nerfstudio's `ply_file_path`
//! (`sparse_pc.ply`, written by `ns-process-data` from the COLMAP points, already in the frame of
//! the transforms' poses), or any PLY with `x y z` and optional `red green blue` vertices.
//!
//! Source: nerfstudio `process_data/colmap_utils.py` `create_ply_from_colmap` (binary PLY,
//! `float x y z`, `uchar red green blue`) and `nerfstudio_dataparser.py` `_load_3D_points`.

use std::path::Path;

use ply_rs_bw::parser::Parser;
use ply_rs_bw::ply::{DefaultElement, Property};

use super::model::SfmPoints;
use crate::{Error, Result};

/// Grey given to points whose PLY has no colour: the middle of the 8-bit range.
const NO_COLOR: [u8; 3] = [128, 128, 128];

/// Read the vertices of the PLY at `path` as SfM points.
///
/// - `path`: an ASCII or binary PLY whose `vertex` element has numeric `x`, `y`, `z` (any scalar
///   type; `double` is kept at f64) and optionally `red`, `green`, `blue` (integers 0–255 as
///   stored, or floats in [0, 1] scaled by 255 and rounded); without colours every point is grey
///   (128, 128, 128).
///
/// Returns `[N, 3]` positions in the file's frame (world units as stored) and colours; N may be 0.
///
/// # Errors
/// [`Error::NotFound`]/[`Error::Io`] reading the file; [`Error::Corrupt`] when the PLY does not
/// parse; [`Error::Invalid`] naming `element vertex` (missing) or `vertex[i].x` (missing, a list,
/// or not finite).
pub fn read_point_cloud_ply(path: &Path) -> Result<SfmPoints> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let parser = Parser::<DefaultElement>::new();
    let ply = parser
        .read_ply(&mut bytes.as_slice())
        .map_err(|e| Error::Corrupt {
            path: path.to_path_buf(),
            location: e.line().map_or("body".to_string(), |l| format!("line {l}")),
            what: format!("PLY parser: {e}"),
        })?;
    let Some(rows) = ply.payload.get("vertex") else {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            field: "element vertex".into(),
            expected: "an `element vertex N` holding the points".into(),
            found: "no vertex element".into(),
        });
    };
    let mut points = SfmPoints {
        positions: Vec::with_capacity(rows.len()),
        colors: Vec::with_capacity(rows.len()),
    };
    for (i, row) in rows.iter().enumerate() {
        points.positions.push(position(path, i, row)?);
        points.colors.push(color(row));
    }
    Ok(points)
}

/// `x y z` of vertex `i`, f64, finite.
fn position(path: &Path, i: usize, row: &DefaultElement) -> Result<[f64; 3]> {
    let mut p = [0.0; 3];
    for (axis, name) in p.iter_mut().zip(["x", "y", "z"]) {
        let value = row.get(name).and_then(scalar);
        *axis = match value {
            Some(v) if v.is_finite() => v,
            other => {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    field: format!("vertex[{i}].{name}"),
                    expected: "a finite number (every point needs x, y and z)".into(),
                    found: other.map_or("no such scalar property".into(), |v| v.to_string()),
                });
            }
        };
    }
    Ok(p)
}

/// `red green blue` of a vertex as 8-bit values, or [`NO_COLOR`] when any is missing.
fn color(row: &DefaultElement) -> [u8; 3] {
    let channel = |name: &str| -> Option<u8> {
        match row.get(name)? {
            Property::Float(v) => Some(unit_to_u8(f64::from(*v))),
            Property::Double(v) => Some(unit_to_u8(*v)),
            other => scalar(other).map(|v| v.clamp(0.0, 255.0) as u8),
        }
    };
    match (channel("red"), channel("green"), channel("blue")) {
        (Some(r), Some(g), Some(b)) => [r, g, b],
        _ => NO_COLOR,
    }
}

/// A colour in [0, 1] as 0–255, rounded (values outside are clamped: the PLY's own range).
fn unit_to_u8(v: f64) -> u8 {
    (v.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// A scalar property as f64 (exact for every PLY scalar type); `None` for lists.
fn scalar(p: &Property) -> Option<f64> {
    match p {
        Property::Double(v) => Some(*v),
        other => other.to_f32_lossy().map(f64::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_point_cloud_keeps_double_positions_and_colours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse_pc.ply");
        std::fs::write(
            &path,
            "ply\nformat ascii 1.0\nelement vertex 2\nproperty double x\nproperty double y\n\
             property double z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n\
             end_header\n500000.01 2.5 -3 255 0 7\n1 2 3 10 20 30\n",
        )
        .unwrap();
        let p = read_point_cloud_ply(&path).unwrap();
        assert_eq!(p.positions, vec![[500000.01, 2.5, -3.0], [1.0, 2.0, 3.0]]);
        assert_eq!(p.colors, vec![[255, 0, 7], [10, 20, 30]]);
    }

    #[test]
    fn point_cloud_without_colour_is_grey_and_missing_z_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pc.ply");
        std::fs::write(
            &path,
            "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
             property float z\nend_header\n0.5 1 2\n",
        )
        .unwrap();
        assert_eq!(read_point_cloud_ply(&path).unwrap().colors, vec![NO_COLOR]);
        std::fs::write(
            &path,
            "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
             end_header\n0.5 1\n",
        )
        .unwrap();
        let msg = read_point_cloud_ply(&path).unwrap_err().to_string();
        assert!(
            msg.contains("pc.ply") && msg.contains("vertex[0].z"),
            "{msg}"
        );
    }
}
