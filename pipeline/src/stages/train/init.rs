//! Initial splats: from SfM points, or random points inside the camera frustums; and the scene
//! extent that scales learning rates and densification thresholds.
//!
//! Sources: INRIA `scene/gaussian_model.py::create_from_pcd` (SH DC = (c − 0.5)/C0, scale = √(mean
//! squared distance to the 3 nearest neighbours) via `distCUDA2`, opacity 0.1, identity rotation)
//! and `scene/dataset_readers.py::getNerfppNorm` (extent = 1.1 × max distance of the camera centres
//! from their mean). Random frustum init follows Brush PR #372 (sample a camera, a pixel and a depth).

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::Camera;
use rand::Rng;
use rand::rngs::SmallRng;

/// Zeroth-order real SH basis constant, 1/(2√π). Colour = C0·dc + 0.5 (INRIA `RGB2SH`).
pub const SH_C0: f32 = 0.282_094_8;
/// Initial opacity of every splat (INRIA `inverse_sigmoid(0.1)`).
pub const INIT_OPACITY: f32 = 0.1;
/// Neighbours averaged for the initial scale (INRIA `distCUDA2`: 3).
pub const KNN_K: usize = 3;
/// Floor of the mean squared neighbour distance, m² (INRIA `clamp_min(..., 1e-7)`).
pub const MIN_KNN_DIST2: f32 = 1e-7;
/// Random init depth range as fractions of the scene extent: a depth uniform in
/// [0.1, 1.5]·extent. With cameras on a sphere of radius r around the subject (extent = 1.1 r)
/// this covers the subject and the space between it and the camera, and reaches past the centre.
pub const RANDOM_DEPTH_RANGE: (f32, f32) = (0.1, 1.5);
/// Extent used when the cameras do not span a volume (one camera, or all at one point), metres.
pub const FALLBACK_EXTENT: f32 = 1.0;

/// Initial SfM point cloud: `positions` `[P, 3]` world metres, `colors` `[P, 3]` linear RGB in
/// [0, 1] (same length).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InitPoints {
    /// `[P, 3]` world positions, metres.
    pub positions: Vec<[f32; 3]>,
    /// `[P, 3]` RGB in [0, 1].
    pub colors: Vec<[f32; 3]>,
}

/// Camera centre in world coordinates, C = −Rᵀ·t of `world_to_camera`.
pub fn camera_centre(c: &Camera) -> [f32; 3] {
    let m = &c.world_to_camera;
    std::array::from_fn(|j| -(0..3).map(|i| m[i][j] * m[i][3]).sum::<f32>())
}

/// Scene extent in metres: 1.1 × the largest distance of a camera centre from the mean centre
/// (INRIA `getNerfppNorm` radius). [`FALLBACK_EXTENT`] when that is 0 or not finite.
pub fn scene_extent(cameras: &[Camera]) -> f32 {
    if cameras.is_empty() {
        return FALLBACK_EXTENT;
    }
    let centres: Vec<[f32; 3]> = cameras.iter().map(camera_centre).collect();
    let n = centres.len() as f32;
    let mean: [f32; 3] = std::array::from_fn(|a| centres.iter().map(|c| c[a]).sum::<f32>() / n);
    let max_d = centres
        .iter()
        .map(|c| dist2(c, &mean).sqrt())
        .fold(0.0f32, f32::max);
    let extent = 1.1 * max_d;
    if extent.is_finite() && extent > 1e-6 {
        extent
    } else {
        FALLBACK_EXTENT
    }
}

fn dist2(a: &[f32; 3], b: &[f32; 3]) -> f32 {
    (0..3).map(|i| (a[i] - b[i]) * (a[i] - b[i])).sum()
}

/// Mean squared distance of every point to its [`KNN_K`] nearest neighbours (fewer when there are
/// fewer points; [`MIN_KNN_DIST2`] floor; a lone point gets the floor).
///
/// Exact, on a uniform grid of ~2 points per cell searched in growing shells, so O(P) for
/// evenly spread points; fine for ≤ 1M points.
pub fn knn_mean_dist2(points: &[[f32; 3]]) -> Vec<f32> {
    let n = points.len();
    if n < 2 {
        return vec![MIN_KNN_DIST2; n];
    }
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for p in points {
        for a in 0..3 {
            if p[a].is_finite() {
                lo[a] = lo[a].min(p[a]);
                hi[a] = hi[a].max(p[a]);
            }
        }
    }
    if !lo.iter().chain(&hi).all(|v| v.is_finite()) {
        return vec![MIN_KNN_DIST2; n];
    }
    let span: [f32; 3] = std::array::from_fn(|a| (hi[a] - lo[a]).max(1e-6));
    let volume = span[0] * span[1] * span[2];
    let cell = (2.0 * volume / n as f32).cbrt().max(1e-6);
    let dims: [i64; 3] =
        std::array::from_fn(|a| ((span[a] / cell).ceil() as i64).clamp(1, 1 << 20));
    let cell_of = |p: &[f32; 3]| -> [i64; 3] {
        std::array::from_fn(|a| (((p[a] - lo[a]) / cell).floor() as i64).clamp(0, dims[a] - 1))
    };
    let mut grid: std::collections::HashMap<[i64; 3], Vec<u32>> = std::collections::HashMap::new();
    for (i, p) in points.iter().enumerate() {
        if p.iter().all(|v| v.is_finite()) {
            grid.entry(cell_of(p)).or_default().push(i as u32);
        }
    }
    let k = KNN_K.min(n - 1);
    let max_shell = dims.iter().copied().max().unwrap_or(1);
    points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if !p.iter().all(|v| v.is_finite()) {
                return MIN_KNN_DIST2;
            }
            let c = cell_of(p);
            let mut best: Vec<f32> = Vec::with_capacity(k + 1);
            let mut shell = 0i64;
            loop {
                for dx in -shell..=shell {
                    for dy in -shell..=shell {
                        for dz in -shell..=shell {
                            if dx.abs().max(dy.abs()).max(dz.abs()) != shell {
                                continue;
                            }
                            let Some(ids) = grid.get(&[c[0] + dx, c[1] + dy, c[2] + dz]) else {
                                continue;
                            };
                            for &j in ids {
                                if j as usize == i {
                                    continue;
                                }
                                let d = dist2(p, &points[j as usize]);
                                if best.len() < k || d < best[k - 1] {
                                    let pos = best.partition_point(|&b| b <= d);
                                    best.insert(pos, d);
                                    best.truncate(k);
                                }
                            }
                        }
                    }
                }
                // Every point outside the searched shells is at least `shell · cell` away.
                let reach = shell as f32 * cell;
                if (best.len() == k && best[k - 1] <= reach * reach) || shell > max_shell {
                    break;
                }
                shell += 1;
            }
            let mean = best.iter().sum::<f32>() / best.len().max(1) as f32;
            mean.max(MIN_KNN_DIST2)
        })
        .collect()
}

/// Splats from a point cloud (INRIA `create_from_pcd`): one per point, SH DC = (c − 0.5)/C0,
/// higher bands 0, isotropic scale √(mean squared 3-NN distance), opacity 0.1, identity rotation.
/// Points with non-finite coordinates are dropped.
///
/// - `sh_degree`: max degree (0..=3), sets K = (sh_degree + 1)².
pub fn splats_from_points(points: &InitPoints, sh_degree: u32) -> GaussianSplats {
    let k = ((sh_degree + 1) * (sh_degree + 1)) as usize;
    let keep: Vec<usize> = (0..points.positions.len().min(points.colors.len()))
        .filter(|&i| points.positions[i].iter().all(|v| v.is_finite()))
        .collect();
    let positions: Vec<[f32; 3]> = keep.iter().map(|&i| points.positions[i]).collect();
    let d2 = knn_mean_dist2(&positions);
    let logit = (INIT_OPACITY / (1.0 - INIT_OPACITY)).ln();
    let mut s = GaussianSplats {
        sh_degree,
        ..Default::default()
    };
    for (row, &i) in keep.iter().enumerate() {
        s.means.extend_from_slice(&positions[row]);
        let log_scale = 0.5 * d2[row].ln();
        s.log_scales.extend_from_slice(&[log_scale; 3]);
        s.rotations.extend_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        s.logit_opacities.push(logit);
        let c = points.colors[i];
        for ch in 0..3 {
            let v = if c[ch].is_finite() {
                c[ch].clamp(0.0, 1.0)
            } else {
                0.5
            };
            s.sh_coeffs.push((v - 0.5) / SH_C0);
        }
        s.sh_coeffs.extend(std::iter::repeat_n(0.0, 3 * (k - 1)));
    }
    s
}

/// `count` random points inside the camera frustums: pick a camera, a pixel and a depth uniform in
/// [`RANDOM_DEPTH_RANGE`]·`scene_extent`, unproject. Colours are INRIA's random-init colours:
/// SH DC uniform in [0, 1/255) (so colours ≈ 0.5 grey), to keep random floaters neutral.
pub fn random_points_in_frustums(
    cameras: &[Camera],
    count: usize,
    scene_extent: f32,
    rng: &mut SmallRng,
) -> InitPoints {
    let mut pts = InitPoints::default();
    if cameras.is_empty() {
        return pts;
    }
    let (near, far) = (
        RANDOM_DEPTH_RANGE.0 * scene_extent,
        RANDOM_DEPTH_RANGE.1 * scene_extent,
    );
    for _ in 0..count {
        let cam = &cameras[rng.random_range(0..cameras.len())];
        let u = rng.random::<f32>() * cam.width as f32;
        let v = rng.random::<f32>() * cam.height as f32;
        let d = near + rng.random::<f32>() * (far - near);
        let pc = [(u - cam.cx) / cam.fx * d, (v - cam.cy) / cam.fy * d, d];
        let m = &cam.world_to_camera;
        // p_world = Rᵀ (p_cam − t)
        let q: [f32; 3] = std::array::from_fn(|i| pc[i] - m[i][3]);
        let pw: [f32; 3] = std::array::from_fn(|j| (0..3).map(|i| m[i][j] * q[i]).sum());
        pts.positions.push(pw);
        let dc: [f32; 3] = std::array::from_fn(|_| rng.random::<f32>() / 255.0);
        pts.colors
            .push(std::array::from_fn(|c| SH_C0 * dc[c] + 0.5));
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn look_at_origin(centre: [f32; 3]) -> Camera {
        // Camera looking down −z_world from +z: R = diag(1, −1, −1) maps forward to +z.
        let r = [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0f32]];
        let t: [f32; 3] =
            std::array::from_fn(|i| -(0..3).map(|j| r[i][j] * centre[j]).sum::<f32>());
        Camera {
            width: 32,
            height: 32,
            fx: 30.0,
            fy: 30.0,
            cx: 16.0,
            cy: 16.0,
            world_to_camera: [
                [r[0][0], r[0][1], r[0][2], t[0]],
                [r[1][0], r[1][1], r[1][2], t[1]],
                [r[2][0], r[2][1], r[2][2], t[2]],
                [0.0, 0.0, 0.0, 1.0],
            ],
        }
    }

    #[test]
    fn camera_centre_inverts_the_pose() {
        let c = camera_centre(&look_at_origin([1.0, 2.0, 3.0]));
        assert!(dist2(&c, &[1.0, 2.0, 3.0]) < 1e-10);
    }

    #[test]
    fn extent_is_1_1_times_the_largest_centre_distance() {
        let cams = [
            look_at_origin([2.0, 0.0, 3.0]),
            look_at_origin([-2.0, 0.0, 3.0]),
        ];
        assert!((scene_extent(&cams) - 2.2).abs() < 1e-5);
        assert_eq!(scene_extent(&cams[..1]), FALLBACK_EXTENT);
    }

    #[test]
    fn knn_matches_brute_force() {
        let mut rng = SmallRng::seed_from_u64(3);
        let pts: Vec<[f32; 3]> = (0..500)
            .map(|_| std::array::from_fn(|_| rng.random::<f32>() * 2.0))
            .collect();
        let fast = knn_mean_dist2(&pts);
        for i in (0..500).step_by(37) {
            let mut d: Vec<f32> = (0..500)
                .filter(|&j| j != i)
                .map(|j| dist2(&pts[i], &pts[j]))
                .collect();
            d.sort_by(f32::total_cmp);
            let brute = (d[0] + d[1] + d[2]) / 3.0;
            assert!(
                (fast[i] - brute).abs() <= 1e-6 * brute.max(1.0),
                "{i}: {} vs {brute}",
                fast[i]
            );
        }
    }

    #[test]
    fn point_init_follows_inria() {
        let pts = InitPoints {
            positions: vec![
                [0.0; 3],
                [1.0, 0.0, 0.0],
                [0.0, 1.0, 0.0],
                [f32::NAN, 0.0, 0.0],
            ],
            colors: vec![[1.0, 0.5, 0.0]; 4],
        };
        let s = splats_from_points(&pts, 1);
        assert_eq!(s.len(), 3);
        assert_eq!(s.sh_coeffs.len(), 3 * 4 * 3);
        assert!((s.sh_coeffs[0] * SH_C0 + 0.5 - 1.0).abs() < 1e-6);
        assert!((1.0 / (1.0 + (-s.logit_opacities[0]).exp()) - 0.1).abs() < 1e-6);
        // Point 0's neighbours are at distances 1, 1 (only two others): mean d² = 1 → scale 1.
        assert!(s.log_scales[0].abs() < 1e-6);
    }

    #[test]
    fn random_points_lie_in_front_of_some_camera() {
        let cams = [look_at_origin([0.0, 0.0, 3.0])];
        let mut rng = SmallRng::seed_from_u64(5);
        let p = random_points_in_frustums(&cams, 100, 3.0, &mut rng);
        assert_eq!(p.positions.len(), 100);
        assert!(
            p.positions
                .iter()
                .all(|q| q[2] < 3.0 - 0.29 && q[2] > 3.0 - 4.51)
        );
    }
}
