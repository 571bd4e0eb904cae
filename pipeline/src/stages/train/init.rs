//! Initial splats: from SfM points, or random points inside the camera frustums; and the scene
//! extent that scales learning rates and densification thresholds.
//!
//! Sources: INRIA `scene/gaussian_model.py::create_from_pcd` (SH DC = (c − 0.5)/C0, scale = √(mean
//! squared distance to the 3 nearest neighbours) via `distCUDA2`, opacity 0.1, identity rotation)
//! and `scene/dataset_readers.py::getNerfppNorm` (extent = 1.1 × max distance of the camera centres
//! from their mean). Random frustum init follows Brush PR #372 (sample a camera, a pixel and a depth).

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::Camera;

/// Zeroth-order real SH basis constant, 1/(2√π). Colour = C0·dc + 0.5 (INRIA `RGB2SH`).
pub const SH_C0: f32 = 0.282_094_8;
/// Initial opacity of every splat (INRIA `inverse_sigmoid(0.1)`).
pub const INIT_OPACITY: f32 = 0.1;
/// Neighbours averaged for the initial scale (INRIA `distCUDA2`: 3).
pub const KNN_K: usize = 3;
/// Floor of the mean squared neighbour distance, m² (INRIA `clamp_min(..., 1e-7)`).
pub const MIN_KNN_DIST2: f32 = 1e-7;
/// Random init depth range as fractions of the subject distance d₀ (see [`subject_distance`]): a
/// depth uniform in [0.25, 1.75]·d₀. Centred on the subject so that most initial splats land on or
/// around it and behind it (backgrounds), not as floaters right in front of the lenses; forward-facing
/// phone captures (fox: cameras ~6.4 units from the subject, extent 4.4) need the far end past d₀.
pub const RANDOM_DEPTH_RANGE: (f32, f32) = (0.25, 1.75);
/// SfM points closer to a camera centre than this fraction of the scene extent are dropped before
/// initialisation: a point on a lens gives a degenerate, near-zero-scale splat that fills the
/// view, a NaN loss, and in INRIA's CUDA rasterizer an illegal memory access (gaussian-splatting
/// #41, whose suggested fix this is; 1e-2 at the unit extent INRIA normalises scenes to).
pub const NEAR_CAMERA_FRACTION: f32 = 1e-2;
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

/// `points` without those that are not finite or lie within `min_dist` (metres) of a camera
/// centre of `cameras`, and the number dropped. Colours follow their points.
///
/// Use `min_dist` = [`NEAR_CAMERA_FRACTION`] × [`scene_extent`].
pub fn drop_points_near_cameras(
    points: &InitPoints,
    cameras: &[Camera],
    min_dist: f32,
) -> (InitPoints, usize) {
    let centres: Vec<[f32; 3]> = cameras.iter().map(camera_centre).collect();
    let min_d2 = min_dist * min_dist;
    let mut kept = InitPoints::default();
    for (p, c) in points.positions.iter().zip(&points.colors) {
        let finite = p.iter().all(|v| v.is_finite());
        if finite && centres.iter().all(|k| dist2(p, k) >= min_d2) {
            kept.positions.push(*p);
            kept.colors.push(*c);
        }
    }
    let dropped = points.positions.len() - kept.positions.len();
    (kept, dropped)
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
    // Flat or collinear sets (a sparse model of a table top, points along an edge) would give
    // cells far smaller than their spacing, and shells without end: each side counts as at least
    // 1 % of the longest in the volume the cell size comes from.
    let longest = span.iter().copied().fold(0.0f32, f32::max);
    let volume: f32 = span.iter().map(|s| s.max(1e-2 * longest)).product();
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
// channel ch indexes the point colour and names the SH coefficient.
#[allow(clippy::needless_range_loop)]
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

/// Median distance, metres, from the camera centres to the point nearest all optical axes (the
/// least-squares intersection of the +z camera axes: Σ(I − dᵢdᵢᵀ)·p = Σ(I − dᵢdᵢᵀ)·cᵢ). `None` when the
/// axes are (nearly) parallel or the point lies behind most cameras (then the caller falls back to the
/// scene extent).
pub fn subject_distance(cameras: &[Camera]) -> Option<f32> {
    if cameras.len() < 2 {
        return None;
    }
    let mut a = [[0.0f64; 3]; 3];
    let mut b = [0.0f64; 3];
    let mut axes = Vec::with_capacity(cameras.len());
    for cam in cameras {
        let c = camera_centre(cam).map(f64::from);
        // Camera +z in world = third row of R (world_to_camera rotation).
        let d = [0, 1, 2].map(|j| f64::from(cam.world_to_camera[2][j]));
        let n = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        if n.is_nan() || n <= 0.0 {
            return None;
        }
        let d = d.map(|v| v / n);
        for i in 0..3 {
            for j in 0..3 {
                let p = if i == j { 1.0 } else { 0.0 } - d[i] * d[j];
                a[i][j] += p;
                b[i] += p * c[j];
            }
        }
        axes.push((c, d));
    }
    let p = solve3(a, b)?;
    let mut dists: Vec<f32> = axes
        .iter()
        .filter_map(|(c, d)| {
            let v = [p[0] - c[0], p[1] - c[1], p[2] - c[2]];
            let along = v[0] * d[0] + v[1] * d[1] + v[2] * d[2];
            (along > 0.0).then_some(along as f32)
        })
        .collect();
    if dists.len() * 2 < cameras.len() {
        return None;
    }
    dists.sort_by(f32::total_cmp);
    let d0 = dists[dists.len() / 2];
    (d0.is_finite() && d0 > 1e-6).then_some(d0)
}

/// Solve the 3×3 system `a·x = b` by Cramer's rule; `None` when it is (nearly) singular.
fn solve3(a: [[f64; 3]; 3], b: [f64; 3]) -> Option<[f64; 3]> {
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(&a);
    let scale: f64 = a.iter().flatten().map(|v| v.abs()).sum::<f64>().max(1e-300);
    if d.abs() < 1e-9 * scale * scale * scale {
        return None;
    }
    Some(std::array::from_fn(|k| {
        let mut m = a;
        for i in 0..3 {
            m[i][k] = b[i];
        }
        det(&m) / d
    }))
}

/// `count` random points inside the camera frustums: pick a camera, a pixel and a depth uniform in
/// [`RANDOM_DEPTH_RANGE`]·d₀, unproject; d₀ is [`subject_distance`], or `scene_extent` when the
/// cameras do not converge. Colours are INRIA's random-init colours:
/// SH DC uniform in [0, 1/255) (so colours ≈ 0.5 grey), to keep random floaters neutral.
pub fn random_points_in_frustums(
    cameras: &[Camera],
    count: usize,
    scene_extent: f32,
    rng: &mut impl rand::Rng,
) -> InitPoints {
    let mut pts = InitPoints::default();
    if cameras.is_empty() {
        return pts;
    }
    let d0 = subject_distance(cameras).unwrap_or(scene_extent);
    let (near, far) = (RANDOM_DEPTH_RANGE.0 * d0, RANDOM_DEPTH_RANGE.1 * d0);
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
    use rand::Rng;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn subject_distance_of_cameras_looking_at_a_point_is_their_distance() {
        // Two cameras 5 m from the origin, on +z and +x, both looking at the origin.
        let cam = |w2c: [[f32; 4]; 4]| Camera {
            width: 8,
            height: 8,
            fx: 8.0,
            fy: 8.0,
            cx: 4.0,
            cy: 4.0,
            world_to_camera: w2c,
        };
        // Camera at (0,0,5) looking down −z: rows x=(1,0,0), y=(0,−1,0), z=(0,0,−1); t = −R·c = (0,0,5).
        let a = cam([
            [1.0, 0.0, 0.0, 0.0],
            [0.0, -1.0, 0.0, 0.0],
            [0.0, 0.0, -1.0, 5.0],
            [0.0, 0.0, 0.0, 1.0],
        ]);
        // Camera at (5,0,0) looking down −x: z row = (−1,0,0), x row = (0,0,1), y row = (0,−1,0); t = (0,0,5).
        let b = cam([
            [0.0, 0.0, 1.0, 0.0],
            [0.0, -1.0, 0.0, 0.0],
            [-1.0, 0.0, 0.0, 5.0],
            [0.0, 0.0, 0.0, 1.0],
        ]);
        let d = subject_distance(&[a, b]).unwrap();
        assert!((d - 5.0).abs() < 1e-5, "{d}");
        // Parallel axes do not converge.
        assert_eq!(subject_distance(&[a, a]), None);
    }

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

    /// gaussian-splatting #41: points on (or within 1e-2·extent of) a camera centre, and
    /// non-finite points, are dropped; the rest keep their colours and order.
    #[test]
    fn points_on_camera_centres_and_non_finite_points_are_dropped() {
        let cams = [
            look_at_origin([0.0, 0.0, 5.0]),
            look_at_origin([5.0, 0.0, 0.0]),
        ];
        let points = InitPoints {
            positions: vec![
                [0.0, 0.0, 0.0],
                [0.0, 0.0, 5.0],   // on camera 0
                [5.0, 0.004, 0.0], // 4 mm from camera 1
                [5.0, 0.02, 0.0],  // 2 cm from camera 1: kept
                [f32::NAN, 0.0, 0.0],
                [1.0, 1.0, 1.0],
            ],
            colors: (0..6).map(|i| [i as f32 / 10.0; 3]).collect(),
        };
        let (kept, dropped) = drop_points_near_cameras(&points, &cams, 0.01);
        assert_eq!(dropped, 3);
        assert_eq!(
            kept.positions,
            vec![[0.0, 0.0, 0.0], [5.0, 0.02, 0.0], [1.0, 1.0, 1.0]]
        );
        assert_eq!(kept.colors, vec![[0.0; 3], [0.3; 3], [0.5; 3]]);
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

    /// Collinear points 0.1 apart (a degenerate set that once made the grid search endless):
    /// the 3 nearest of an inner point are at 0.1, 0.1 and 0.2, mean squared distance
    /// (0.01 + 0.01 + 0.04) / 3 = 0.02.
    #[test]
    fn knn_of_collinear_points_finishes_with_the_hand_computed_distances() {
        let points: Vec<[f32; 3]> = (0..2000).map(|i| [0.1 * i as f32, 1.0, -2.0]).collect();
        let d = knn_mean_dist2(&points);
        assert!((d[1000] - 0.02).abs() < 1e-4, "{}", d[1000]);
        // The end point's nearest are 0.1, 0.2, 0.3 away: (0.01 + 0.04 + 0.09) / 3.
        assert!((d[0] - 0.14 / 3.0).abs() < 1e-4, "{}", d[0]);
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
        // One camera: no convergence point, so d₀ = scene extent 3 and depths lie in [0.75, 5.25].
        let cams = [look_at_origin([0.0, 0.0, 3.0])];
        let mut rng = SmallRng::seed_from_u64(5);
        let p = random_points_in_frustums(&cams, 100, 3.0, &mut rng);
        assert_eq!(p.positions.len(), 100);
        assert!(
            p.positions
                .iter()
                .all(|q| q[2] < 3.0 - 0.74 && q[2] > 3.0 - 5.26)
        );
    }
}
