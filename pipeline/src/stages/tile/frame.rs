//! Which way a tileset stands: the rigid transform from the capture's (training) frame to the
//! glTF content frame of the tiles, recorded in `tileset.json` so that evaluation and viewers can
//! place the capture's cameras in the tileset.
//!
//! Why: capture formats do not say which way is up (COLMAP worlds are arbitrary, instant-ngp's
//! are +Z up), and glTF content must be +Y up (3D Tiles 1.1 §"glTF transforms": clients rotate
//! Y-up content to Z-up). The train stage estimates the capture's up direction from its cameras
//! (`frame.json`); the tile stage rotates the splats so that direction becomes glTF +Y, and
//! writes the rotation here. Splats jobs are rotated at ingest (`[ingest] up_axis`), so their
//! transform is the identity.
//!
//! Frames, all right-handed, metres (or capture units):
//! - capture `C`: the frame of `splats.ply` and of the capture's `world_to_camera` poses;
//! - content `G`: glTF Y-up, `G = content_from_capture · C` (a rotation, plus a translation when
//!   `splats.ply` kept its positions around an f64 origin: then `C` is the frame of its f32
//!   means relative to that origin, and the translation, rotated into `G`, is the origin the
//!   tile stage puts in the root `transform`);
//! - tileset `T`: 3D Tiles Z-up, `T = Y_UP_TO_Z_UP · G`; tile transforms and bounding volumes are
//!   in `T`;
//! - world: where the root's `transform` maps to: `T` itself, or ECEF when georeferenced
//!   (`world = georef · T`).
//!
//! Stored as `asset.extras.kiln.frame` = `{"content_from_capture": [16], "capture_up_axis":
//! "+z", "georef": [16]}` (column-major 4×4s; `georef` only when present). A tileset without it
//! (not written by Kiln) reads as the identity with no georeference.

use kiln_formats::splats::transform::{UpAxis, up_axis_rotation};
use kiln_formats::tiles::tileset::{Tileset, Y_UP_TO_Z_UP};
use kiln_formats::tiles::transform::{self, IDENTITY, Mat4};
use serde::{Deserialize, Serialize};

use crate::stages::train::FrameInfo;

/// Below this angle (degrees) between the cameras' mean up direction and the nearest world axis,
/// the axis itself is taken as up: capture frames are usually axis-aligned (instant-ngp +Z,
/// Blender +Z), and the cameras' mean up is biased by how they tilt (a forward-facing capture
/// looking slightly down tilts it by that angle).
pub const SNAP_TO_AXIS_DEG: f64 = 15.0;

/// How a tileset's frames relate (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TilesetFrame {
    /// Column-major 4×4, capture frame → glTF content frame: a proper rotation, and a
    /// translation (metres, f64) when the splats are kept relative to an origin
    /// ([`Self::placed_at`]).
    pub content_from_capture: Mat4,
    /// The capture's up axis as the train stage estimated it (`"+z"`), when the rotation came
    /// from it; `None` for splats jobs (rotated at ingest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_up_axis: Option<String>,
    /// Column-major 4×4 east-north-up → ECEF in front of the root, when georeferenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub georef: Option<Mat4>,
}

impl Default for TilesetFrame {
    fn default() -> Self {
        Self {
            content_from_capture: IDENTITY,
            capture_up_axis: None,
            georef: None,
        }
    }
}

impl TilesetFrame {
    /// The frame of a capture whose cameras' up estimate is `info` (`frame.json`): a rotation
    /// that carries the up direction onto glTF +Y — the nearest axis's quarter or half turn when
    /// the estimate is within [`SNAP_TO_AXIS_DEG`] of it, else the smallest rotation taking the
    /// estimated vector to +Y. An unknown up (no cameras) keeps the identity.
    #[must_use]
    pub fn upright(info: &FrameInfo) -> Self {
        let r = if info.cameras == 0 {
            [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        } else if info.up_axis_angle_deg <= SNAP_TO_AXIS_DEG {
            match info.up_axis.parse::<UpAxis>() {
                Ok(axis) => up_axis_rotation(axis, UpAxis::Y),
                Err(_) => rotation_between(info.up_vector, [0.0, 1.0, 0.0]),
            }
        } else {
            rotation_between(info.up_vector, [0.0, 1.0, 0.0])
        };
        Self {
            content_from_capture: transform::from_rotation_translation(r, [0.0; 3]),
            capture_up_axis: Some(info.up_axis.to_string()),
            georef: None,
        }
    }

    /// This frame for splats kept relative to `origin_m` (metres, in the capture frame `C` as
    /// read, before the rotation): `content_from_capture` becomes [R | R·origin], so a tile's
    /// content in `C` is relative to the origin and the tileset places it at R·(origin + mean).
    #[must_use]
    pub fn placed_at(mut self, origin_m: [f64; 3]) -> Self {
        if origin_m == [0.0; 3] {
            return self;
        }
        let r = self.rotation();
        let t = std::array::from_fn(|i| (0..3).map(|k| r[i][k] * origin_m[k]).sum());
        self.content_from_capture = transform::from_rotation_translation(r, t);
        self
    }

    /// The rotation part of [`Self::content_from_capture`] (row-major, p′ = R·p).
    #[must_use]
    pub fn rotation(&self) -> [[f64; 3]; 3] {
        transform::linear_part(&self.content_from_capture)
    }

    /// Column-major 4×4 from the tileset's world frame (what the root's `transform` maps to) to
    /// the capture frame: `content_from_capture⁻¹ · Y_UP_TO_Z_UP⁻¹ · georef⁻¹`.
    #[must_use]
    pub fn capture_from_world(&self) -> Mat4 {
        let capture_from_tileset = transform::mul(
            &transform::rigid_inverse(&self.content_from_capture),
            &transform::rigid_inverse(&Y_UP_TO_Z_UP),
        );
        match &self.georef {
            Some(g) => transform::mul(&capture_from_tileset, &affine_inverse(g)),
            None => capture_from_tileset,
        }
    }

    /// Column-major 4×4 from the capture frame to the tileset frame `T` (before any georeference).
    #[must_use]
    pub fn tileset_from_capture(&self) -> Mat4 {
        transform::mul(&Y_UP_TO_Z_UP, &self.content_from_capture)
    }

    /// The frame recorded in `tileset`'s `asset.extras.kiln.frame`, or the default (identity) when
    /// there is none or it cannot be read.
    #[must_use]
    pub fn of_tileset(tileset: &Tileset) -> Self {
        tileset
            .asset
            .extras
            .as_ref()
            .and_then(|e| e.get("kiln"))
            .and_then(|k| k.get("frame"))
            .and_then(|f| serde_json::from_value(f.clone()).ok())
            .unwrap_or_default()
    }

    /// Record this frame in `tileset`'s `asset.extras.kiln.frame` (other extras are kept).
    pub fn record_in(&self, tileset: &mut Tileset) {
        let extras = tileset
            .asset
            .extras
            .get_or_insert_with(|| serde_json::json!({}));
        if !extras.is_object() {
            *extras = serde_json::json!({});
        }
        let kiln = extras
            .as_object_mut()
            .expect("an object")
            .entry("kiln")
            .or_insert_with(|| serde_json::json!({}));
        if !kiln.is_object() {
            *kiln = serde_json::json!({});
        }
        kiln.as_object_mut().expect("an object").insert(
            "frame".into(),
            serde_json::to_value(self).expect("serialises"),
        );
    }
}

/// The smallest rotation (row-major) carrying unit vector `from` onto unit vector `to`
/// (Rodrigues' formula); a half turn about an axis perpendicular to `from` when they are opposite.
#[must_use]
pub fn rotation_between(from: [f64; 3], to: [f64; 3]) -> [[f64; 3]; 3] {
    let norm = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let f = from.map(|x| x / norm(from).max(1e-300));
    let t = to.map(|x| x / norm(to).max(1e-300));
    let v = [
        f[1] * t[2] - f[2] * t[1],
        f[2] * t[0] - f[0] * t[2],
        f[0] * t[1] - f[1] * t[0],
    ];
    let c = f[0] * t[0] + f[1] * t[1] + f[2] * t[2];
    if c < -1.0 + 1e-12 {
        // Opposite: turn by π about any axis perpendicular to `from`.
        let helper = if f[0].abs() < 0.9 {
            [1.0, 0.0, 0.0]
        } else {
            [0.0, 1.0, 0.0]
        };
        let a = [
            f[1] * helper[2] - f[2] * helper[1],
            f[2] * helper[0] - f[0] * helper[2],
            f[0] * helper[1] - f[1] * helper[0],
        ];
        let a = a.map(|x| x / norm(a));
        return std::array::from_fn(|i| {
            std::array::from_fn(|j| 2.0 * a[i] * a[j] - if i == j { 1.0 } else { 0.0 })
        });
    }
    let k = 1.0 / (1.0 + c);
    let vx = [[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]];
    std::array::from_fn(|i| {
        std::array::from_fn(|j| {
            let vx2: f64 = (0..3).map(|m| vx[i][m] * vx[m][j]).sum();
            (if i == j { 1.0 } else { 0.0 }) + vx[i][j] + k * vx2
        })
    })
}

/// Inverse of an affine 4×4 (column-major) whose linear part is invertible (a georeference is a
/// rotation + translation, but inverting it generally keeps this safe for any scale).
fn affine_inverse(m: &Mat4) -> Mat4 {
    let a = transform::linear_part(m);
    let det = a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
        - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
        + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
    let inv_det = 1.0 / det;
    let cof =
        |r0: usize, r1: usize, c0: usize, c1: usize| a[r0][c0] * a[r1][c1] - a[r0][c1] * a[r1][c0];
    let inv: [[f64; 3]; 3] = [
        [cof(1, 2, 1, 2), -cof(0, 2, 1, 2), cof(0, 1, 1, 2)],
        [-cof(1, 2, 0, 2), cof(0, 2, 0, 2), -cof(0, 1, 0, 2)],
        [cof(1, 2, 0, 1), -cof(0, 2, 0, 1), cof(0, 1, 0, 1)],
    ]
    .map(|row| row.map(|v| v * inv_det));
    let t = transform::translation_part(m);
    let ti = std::array::from_fn(|i| -(0..3).map(|k| inv[i][k] * t[k]).sum::<f64>());
    transform::from_rotation_translation(inv, ti)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(up_axis: &str, up_vector: [f64; 3], angle: f64) -> FrameInfo {
        FrameInfo {
            frame: "input".into(),
            units: "capture units".into(),
            to_input_frame: [[0.0; 4]; 4],
            up_axis: up_axis.into(),
            up_vector,
            up_axis_angle_deg: angle,
            cameras: 10,
        }
    }

    fn rot(r: &[[f64; 3]; 3], v: [f64; 3]) -> [f64; 3] {
        std::array::from_fn(|i| (0..3).map(|k| r[i][k] * v[k]).sum())
    }

    #[test]
    fn a_z_up_capture_is_turned_so_its_up_is_gltf_plus_y() {
        let f = TilesetFrame::upright(&info("+z", [0.05, 0.0, 0.9987], 3.0));
        let up = rot(&f.rotation(), [0.0, 0.0, 1.0]);
        assert!((up[1] - 1.0).abs() < 1e-12, "{up:?}");
        // And in the tileset's Z-up frame, the capture's +z is +z again.
        let t = f.tileset_from_capture();
        let z = transform::apply_vector(&t, [0.0, 0.0, 1.0]);
        assert!((z[2] - 1.0).abs() < 1e-12, "{z:?}");
    }

    #[test]
    fn a_tilted_up_estimate_uses_the_vector_itself() {
        let v = [0.5f64, 0.0, 0.866_025_403_784_438_6];
        let f = TilesetFrame::upright(&info("+z", v, 30.0));
        let up = rot(&f.rotation(), v);
        assert!((up[1] - 1.0).abs() < 1e-9, "{up:?}");
    }

    #[test]
    fn rotation_between_opposite_vectors_is_a_half_turn() {
        let r = rotation_between([0.0, -1.0, 0.0], [0.0, 1.0, 0.0]);
        let up = rot(&r, [0.0, -1.0, 0.0]);
        assert!((up[1] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn capture_from_world_undoes_the_georeference_and_the_rotations() {
        let mut f = TilesetFrame::upright(&info("-y", [0.0, -1.0, 0.0], 0.0));
        let mut g = transform::from_rotation_translation(
            [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
            [4_000_000.0, 1_000_000.0, 4_700_000.0],
        );
        g[0] *= 1.0; // rigid
        f.georef = Some(g);
        let p = [0.3, -1.2, 2.5];
        let world = transform::apply(&g, transform::apply(&f.tileset_from_capture(), p));
        let back = transform::apply(&f.capture_from_world(), world);
        for a in 0..3 {
            assert!((back[a] - p[a]).abs() < 1e-6, "{back:?}");
        }
    }

    #[test]
    fn the_frame_round_trips_through_tileset_extras() {
        let f = TilesetFrame::upright(&info("+z", [0.0, 0.0, 1.0], 0.0));
        let mut ts: Tileset = serde_json::from_value(serde_json::json!({
            "asset": {"version": "1.1", "extras": {"other": 1}},
            "geometricError": 1.0,
            "root": {"boundingVolume": {"sphere": [0, 0, 0, 1]}, "geometricError": 0.0}
        }))
        .unwrap();
        assert_eq!(TilesetFrame::of_tileset(&ts), TilesetFrame::default());
        f.record_in(&mut ts);
        assert_eq!(TilesetFrame::of_tileset(&ts), f);
        assert_eq!(ts.asset.extras.as_ref().unwrap()["other"], 1);
    }
}
