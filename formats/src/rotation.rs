//! Unit-quaternion ↔ rotation-matrix conversion shared by the capture readers, the splat
//! converters and the splat tiler (Kiln stores quaternions as Hamilton `[w, x, y, z]`).

/// Rotation matrix (row-major, p′ = R·p) of the Hamilton quaternion `[w, x, y, z]`, normalised
/// first; `None` for a zero or non-finite quaternion.
///
/// Source: the standard unit-quaternion formula (e.g. Eigen `Quaterniond::toRotationMatrix`, which
/// COLMAP uses for its image poses).
pub fn quaternion_to_rotation(q: [f64; 4]) -> Option<[[f64; 3]; 3]> {
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    if !(norm > 0.0 && norm.is_finite()) {
        return None;
    }
    let [w, x, y, z] = q.map(|v| v / norm);
    Some([
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - w * z),
            2.0 * (x * z + w * y),
        ],
        [
            2.0 * (x * y + w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - w * x),
        ],
        [
            2.0 * (x * z - w * y),
            2.0 * (y * z + w * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ])
}

/// Unit Hamilton quaternion `[w, x, y, z]` of a proper rotation matrix (row-major), the inverse
/// of [`quaternion_to_rotation`] up to sign.
///
/// Source: Shepperd's method (branch on the largest diagonal term for stability).
pub fn rotation_to_quaternion(r: [[f64; 3]; 3]) -> [f64; 4] {
    let trace = r[0][0] + r[1][1] + r[2][2];
    let q = if trace > 0.0 {
        let s = (trace + 1.0).sqrt() * 2.0;
        [
            0.25 * s,
            (r[2][1] - r[1][2]) / s,
            (r[0][2] - r[2][0]) / s,
            (r[1][0] - r[0][1]) / s,
        ]
    } else if r[0][0] > r[1][1] && r[0][0] > r[2][2] {
        let s = (1.0 + r[0][0] - r[1][1] - r[2][2]).sqrt() * 2.0;
        [
            (r[2][1] - r[1][2]) / s,
            0.25 * s,
            (r[0][1] + r[1][0]) / s,
            (r[0][2] + r[2][0]) / s,
        ]
    } else if r[1][1] > r[2][2] {
        let s = (1.0 + r[1][1] - r[0][0] - r[2][2]).sqrt() * 2.0;
        [
            (r[0][2] - r[2][0]) / s,
            (r[0][1] + r[1][0]) / s,
            0.25 * s,
            (r[1][2] + r[2][1]) / s,
        ]
    } else {
        let s = (1.0 + r[2][2] - r[0][0] - r[1][1]).sqrt() * 2.0;
        [
            (r[1][0] - r[0][1]) / s,
            (r[0][2] + r[2][0]) / s,
            (r[1][2] + r[2][1]) / s,
            0.25 * s,
        ]
    };
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    q.map(|v| v / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarter_turn_about_z_maps_x_to_y() {
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let r = quaternion_to_rotation([h, 0.0, 0.0, h]).unwrap();
        let x = [1.0, 0.0, 0.0];
        let rx: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|k| r[i][k] * x[k]).sum())
            .collect();
        for (a, b) in rx.iter().zip([0.0, 1.0, 0.0]) {
            assert!((a - b).abs() < 1e-12, "{rx:?}");
        }
        assert!(quaternion_to_rotation([0.0; 4]).is_none());
    }
}
