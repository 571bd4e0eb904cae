//! The cameras `kiln eval` renders from: a capture's held-out photos, or an orbit around the
//! scene for splats without photos.

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::Camera;

use crate::stages::train::TrainView;

/// One camera to evaluate from.
#[derive(Debug, Clone)]
pub struct EvalView {
    /// Unique name (the photo's, or `orbit-2x-03`).
    pub name: String,
    /// Pinhole camera in the capture frame (OpenCV, `world_to_camera`).
    pub camera: Camera,
    /// The photo taken from it (held-out views), or `None` (orbits: compared with the full splats
    /// only).
    pub photo: Option<TrainView>,
    /// `"held-out"` or `"orbit"`.
    pub kind: &'static str,
}

impl EvalView {
    /// A held-out photo.
    #[must_use]
    pub fn photo(view: TrainView) -> Self {
        Self {
            name: view.name.clone(),
            camera: view.camera,
            photo: Some(view),
            kind: "held-out",
        }
    }
}

/// Where an orbit looks: a robust centre and radius of a splat set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SceneSphere {
    /// Per-axis median of the means, capture frame.
    pub center: [f64; 3],
    /// 90th percentile of the means' distances from `center` (metres): floaters far out do not
    /// push the orbit away from the subject.
    pub radius: f64,
}

/// Share of the splats inside the radius of [`scene_sphere`].
pub const RADIUS_QUANTILE: f64 = 0.9;

/// The [`SceneSphere`] of `splats` (N ≥ 1); a 1 m sphere at the origin for an empty set.
#[must_use]
pub fn scene_sphere(splats: &GaussianSplats) -> SceneSphere {
    let n = splats.len();
    if n == 0 {
        return SceneSphere {
            center: [0.0; 3],
            radius: 1.0,
        };
    }
    let median = |a: usize| {
        let mut v: Vec<f32> = splats.means.iter().skip(a).step_by(3).copied().collect();
        let mid = v.len() / 2;
        *v.select_nth_unstable_by(mid, f32::total_cmp).1 as f64
    };
    let center = [median(0), median(1), median(2)];
    let mut d: Vec<f64> = splats
        .means
        .chunks_exact(3)
        .map(|p| {
            (0..3)
                .map(|a| (p[a] as f64 - center[a]).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let k = (((n - 1) as f64) * RADIUS_QUANTILE).round() as usize;
    let radius = *d.select_nth_unstable_by(k, f64::total_cmp).1;
    SceneSphere {
        center,
        radius: radius.max(1e-3),
    }
}

/// Elevation of orbit cameras above the plane perpendicular to `up`, degrees.
pub const ORBIT_ELEVATION_DEG: f64 = 20.0;
/// Vertical field of view of orbit cameras, degrees.
pub const ORBIT_FOV_DEG: f64 = 50.0;

/// `views` cameras per radius factor, evenly spaced in azimuth around `up` (unit vector, capture
/// frame) at [`ORBIT_ELEVATION_DEG`], each `size_px` × `size_px` with a [`ORBIT_FOV_DEG`] field of
/// view, looking at the sphere's centre from `factor · radius`. Named `orbit-<factor>x-<i>`.
#[must_use]
pub fn orbit_views(
    sphere: &SceneSphere,
    up: [f64; 3],
    factors: &[f64],
    views: usize,
    size_px: u32,
) -> Vec<EvalView> {
    let up = normalize(up);
    // Two horizontal axes perpendicular to `up`.
    let helper = if up[0].abs() < 0.9 {
        [1.0, 0.0, 0.0]
    } else {
        [0.0, 0.0, 1.0]
    };
    let a = normalize(cross(up, helper));
    let b = cross(up, a);
    let focal = (f64::from(size_px) / 2.0) / (ORBIT_FOV_DEG.to_radians() / 2.0).tan();
    let (se, ce) = ORBIT_ELEVATION_DEG.to_radians().sin_cos();
    let mut out = Vec::new();
    for &factor in factors {
        let distance = factor * sphere.radius;
        for i in 0..views {
            let phi = std::f64::consts::TAU * i as f64 / views as f64;
            let dir: [f64; 3] =
                std::array::from_fn(|k| ce * (phi.cos() * a[k] + phi.sin() * b[k]) + se * up[k]);
            let eye = std::array::from_fn(|k| sphere.center[k] + distance * dir[k]);
            out.push(EvalView {
                name: format!("orbit-{factor}x-{i:02}"),
                camera: look_at(eye, sphere.center, up, size_px, size_px, focal),
                photo: None,
                kind: "orbit",
            });
        }
    }
    out
}

/// A pinhole camera at `eye` looking at `target` with `up` pointing up in the image (OpenCV:
/// x right, y down, z forward), principal point at the image centre.
#[must_use]
pub fn look_at(
    eye: [f64; 3],
    target: [f64; 3],
    up: [f64; 3],
    width: u32,
    height: u32,
    focal_px: f64,
) -> Camera {
    let z = normalize(std::array::from_fn(|k| target[k] - eye[k]));
    let x = normalize(cross(z, up));
    let y = cross(z, x);
    let rows = [x, y, z];
    let t: [f64; 3] = std::array::from_fn(|r| -(0..3).map(|k| rows[r][k] * eye[k]).sum::<f64>());
    let mut w = [[0.0f32; 4]; 4];
    for r in 0..3 {
        for c in 0..3 {
            w[r][c] = rows[r][c] as f32;
        }
        w[r][3] = t[r] as f32;
    }
    w[3][3] = 1.0;
    Camera {
        width,
        height,
        fx: focal_px as f32,
        fy: focal_px as f32,
        cx: width as f32 / 2.0,
        cy: height as f32 / 2.0,
        world_to_camera: w,
    }
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn normalize(v: [f64; 3]) -> [f64; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt().max(1e-300);
    v.map(|x| x / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_at_puts_the_target_at_the_image_centre_with_up_pointing_up() {
        let c = look_at([0.0, 0.0, -5.0], [0.0; 3], [0.0, 1.0, 0.0], 100, 80, 50.0);
        let w = c.world_to_camera;
        let project = |p: [f32; 3]| {
            let q: [f32; 3] =
                std::array::from_fn(|r| (0..3).map(|k| w[r][k] * p[k]).sum::<f32>() + w[r][3]);
            (c.fx * q[0] / q[2] + c.cx, c.fy * q[1] / q[2] + c.cy)
        };
        let (u, v) = project([0.0, 0.0, 0.0]);
        assert!((u - 50.0).abs() < 1e-4 && (v - 40.0).abs() < 1e-4);
        // A point above the target (world +y) is higher in the image (smaller v).
        let (_, v_up) = project([0.0, 1.0, 0.0]);
        assert!(v_up < 40.0);
    }

    #[test]
    fn scene_sphere_ignores_far_floaters() {
        let mut s = GaussianSplats {
            sh_degree: 0,
            ..Default::default()
        };
        for i in 0..100 {
            let x = if i < 95 {
                (i % 10) as f32 * 0.1
            } else {
                1000.0
            };
            s.means.extend([x, 0.0, 0.0]);
            s.log_scales.extend([0.0; 3]);
            s.rotations.extend([1.0, 0.0, 0.0, 0.0]);
            s.logit_opacities.push(0.0);
            s.sh_coeffs.extend([0.0; 3]);
        }
        let sphere = scene_sphere(&s);
        assert!(sphere.radius < 1.0, "{sphere:?}");
        let views = orbit_views(&sphere, [0.0, 1.0, 0.0], &[1.0, 2.0], 4, 64);
        assert_eq!(views.len(), 8);
        assert_eq!(views[5].name, "orbit-2x-01");
    }
}
