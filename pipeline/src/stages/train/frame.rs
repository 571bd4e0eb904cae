//! `frame.json`: which coordinate frame the trained splats are in, and which way is up, beside
//! `splats.ply`.
//!
//! Why: trainers that normalise and rotate the scene for training export splats in that training
//! frame, and users lose their capture's orientation and scale (OpenSplat #34 / #53). Kiln trains
//! in the capture's own world frame — the poses exactly as the COLMAP model, transforms.json or
//! `poses_bounds.npy` give them, no recentring, rotation or scaling — so the transform back to the
//! input frame is the identity; this file says so, and records the up direction a viewer needs
//! (estimated from the cameras, since capture formats do not store one).

use kiln_kernels::Camera;
use serde::{Deserialize, Serialize};

/// File name of the sidecar inside the train stage's output folder.
pub const FRAME_JSON: &str = "frame.json";

/// The contents of `frame.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameInfo {
    /// Always `"input"`: the world frame of the capture's poses, unchanged.
    pub frame: String,
    /// Units of positions and scales: those of the capture (metres only if the capture is metric;
    /// COLMAP models have an arbitrary scale).
    pub units: String,
    /// Row-major 4×4 transform from the splats' frame to the input frame: the identity.
    pub to_input_frame: [[f64; 4]; 4],
    /// World axis closest to the cameras' mean up direction: `"+x"`, `"-x"`, `"+y"`, `"-y"`,
    /// `"+z"` or `"-z"`.
    pub up_axis: String,
    /// The cameras' mean up direction `[3]`, unit length, world frame (each camera's up is its
    /// image's upward direction, −y of the OpenCV camera frame).
    pub up_vector: [f64; 3],
    /// Angle in degrees between `up_vector` and `up_axis`: large values mean the capture is tilted
    /// with respect to its own axes (or the cameras disagree), so `up_axis` is only a guess.
    pub up_axis_angle_deg: f64,
    /// Cameras the estimate used.
    pub cameras: usize,
}

/// Read `frame.json` from a train stage's output folder `dir`.
///
/// # Errors
/// [`crate::Error::Input`] naming the file when it is missing or not a valid `frame.json`.
pub fn read_frame_info(dir: &std::path::Path) -> crate::Result<FrameInfo> {
    let path = dir.join(FRAME_JSON);
    let bytes = std::fs::read(&path).map_err(|e| crate::Error::io(&path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| crate::Error::Input {
        path: path.clone(),
        field: "frame.json".into(),
        problem: format!("not a Kiln frame.json ({e}); run the train stage again"),
    })
}

/// The frame description for splats trained from `cameras` in their world frame.
///
/// The up vector is the normalised mean of the cameras' up directions (−(row 1 of the rotation
/// of `world_to_camera`)). With no cameras, or cameras whose up directions cancel out, the up is
/// unknown: `+z` / `[0, 0, 1]` is reported with an angle of 90°.
#[must_use]
pub fn frame_info(cameras: &[Camera]) -> FrameInfo {
    let mut up = [0.0f64; 3];
    for c in cameras {
        for (a, u) in up.iter_mut().enumerate() {
            *u -= f64::from(c.world_to_camera[1][a]);
        }
    }
    let norm = up.iter().map(|v| v * v).sum::<f64>().sqrt();
    let identity = [
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    if !(norm > 1e-9 && norm.is_finite()) {
        return FrameInfo {
            frame: "input".into(),
            units: "capture units".into(),
            to_input_frame: identity,
            up_axis: "+z".into(),
            up_vector: [0.0, 0.0, 1.0],
            up_axis_angle_deg: 90.0,
            cameras: cameras.len(),
        };
    }
    let up = up.map(|v| v / norm);
    let (axis, _) = up
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .unwrap_or((2, &1.0));
    let names = [["+x", "-x"], ["+y", "-y"], ["+z", "-z"]];
    let up_axis = names[axis][usize::from(up[axis] < 0.0)];
    let angle = up[axis].abs().clamp(-1.0, 1.0).acos().to_degrees();
    FrameInfo {
        frame: "input".into(),
        units: "capture units".into(),
        to_input_frame: identity,
        up_axis: up_axis.into(),
        up_vector: up,
        up_axis_angle_deg: angle,
        cameras: cameras.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A camera at the origin whose rotation rows (camera axes in world coordinates) are `r`.
    fn camera(r: [[f32; 3]; 3]) -> Camera {
        Camera {
            width: 8,
            height: 8,
            fx: 8.0,
            fy: 8.0,
            cx: 4.0,
            cy: 4.0,
            world_to_camera: [
                [r[0][0], r[0][1], r[0][2], 0.0],
                [r[1][0], r[1][1], r[1][2], 0.0],
                [r[2][0], r[2][1], r[2][2], 0.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        }
    }

    #[test]
    fn z_up_cameras_looking_sideways_give_plus_z() {
        // Looking along +x with image down = world −z (OpenCV y = −z): up is +z.
        let c = camera([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]]);
        let f = frame_info(&[c, c]);
        assert_eq!(f.up_axis, "+z");
        assert_eq!(f.up_vector, [0.0, 0.0, 1.0]);
        assert!(f.up_axis_angle_deg.abs() < 1e-9);
        assert_eq!(f.frame, "input");
        assert_eq!(f.to_input_frame[0], [1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn y_down_opencv_world_gives_minus_y_and_tilt_is_measured() {
        // Identity rotation: the world is the OpenCV camera frame, image up = world −y.
        let id = camera([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]);
        assert_eq!(frame_info(&[id]).up_axis, "-y");
        // Rolled 30° about the viewing axis: up = (sin 30°, −cos 30°, 0), 30° from −y.
        let (s, c) = (30f32.to_radians().sin(), 30f32.to_radians().cos());
        let rolled = camera([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]]);
        let f = frame_info(&[rolled]);
        assert_eq!(f.up_axis, "-y");
        assert!(
            (f.up_axis_angle_deg - 30.0).abs() < 1e-4,
            "{}",
            f.up_axis_angle_deg
        );
    }

    #[test]
    fn no_cameras_report_an_unknown_up() {
        let f = frame_info(&[]);
        assert_eq!(f.up_axis_angle_deg, 90.0);
        assert_eq!(f.cameras, 0);
    }
}
