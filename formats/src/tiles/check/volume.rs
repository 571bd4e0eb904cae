//! Bounding volumes and tile transforms for the tileset checker: parsing `box` / `region` /
//! `sphere`, column-major 4×4 arithmetic, and how far a point lies outside a volume (metres).
//!
//! Sources: OGC 3D Tiles 1.1 (22-025r4) §"Bounding volumes" (box = centre + three half-axis
//! vectors in the tile frame; region = west, south, east, north in radians (EPSG:4979) + heights in
//! metres, not affected by `transform`; sphere = centre + radius) and §"Tile transforms"
//! (column-major, local → parent). WGS84 constants from NIMA TR8350.2 §3.

use serde_json::Value;

pub(super) use crate::tiles::transform::{IDENTITY, Mat4, apply, mul, scale_range, translation};

/// Translation · rotation (unit quaternion xyzw) · scale, as glTF nodes compose TRS.
pub(super) fn trs(t: [f64; 3], q: [f64; 4], s: [f64; 3]) -> Mat4 {
    let [x, y, z, w] = q;
    let r = [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y + z * w),
            2.0 * (x * z - y * w),
        ],
        [
            2.0 * (x * y - z * w),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z + x * w),
        ],
        [
            2.0 * (x * z + y * w),
            2.0 * (y * z - x * w),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ];
    let mut m = IDENTITY;
    for c in 0..3 {
        for row in 0..3 {
            m[4 * c + row] = r[c][row] * s[c];
        }
    }
    m[12..15].copy_from_slice(&t);
    m
}

/// Read `n` finite numbers from a JSON array, or say what is wrong.
pub(super) fn numbers<const N: usize>(v: &Value) -> Result<[f64; N], String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("expected an array of {N} numbers, found {v}"))?;
    if arr.len() != N {
        return Err(format!(
            "expected {N} numbers, found {} elements",
            arr.len()
        ));
    }
    let mut out = [0.0; N];
    for (i, x) in arr.iter().enumerate() {
        match x.as_f64() {
            Some(f) if f.is_finite() => out[i] = f,
            _ => return Err(format!("element {i} is {x}, expected a finite number")),
        }
    }
    Ok(out)
}

/// A parsed, well-formed bounding volume.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Volume {
    /// Centre and half-axis vectors (columns), metres, in the tile frame.
    Box {
        center: [f64; 3],
        axes: [[f64; 3]; 3],
    },
    /// West, south, east, north (radians), minimum and maximum height (metres, WGS84).
    Region([f64; 6]),
    /// Centre (tile frame, metres) and radius (metres, > 0).
    Sphere { center: [f64; 3], radius: f64 },
}

/// What makes a bounding volume unusable, and whether it is still checkable.
#[derive(Debug)]
pub(super) struct VolumeProblem {
    pub message: String,
    /// A degenerate but finite volume (e.g. a flat box) that containment can still use.
    pub usable: Option<Box<Volume>>,
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Parse a `boundingVolume` object (exactly one of `box`, `region`, `sphere` is read, in that
/// order of preference; extensions such as `3DTILES_bounding_volume_S2` are reported as
/// unsupported by the caller when none of the three is present).
///
/// # Errors
/// A [`VolumeProblem`] naming the field and what is wrong: not an object, no known volume, wrong
/// count or non-finite numbers, a box with a zero or collinear half-axis, a region with
/// out-of-range angles or min > max, a sphere with radius ≤ 0.
pub(super) fn parse_volume(v: &Value) -> Result<Volume, VolumeProblem> {
    let fail = |message: String| VolumeProblem {
        message,
        usable: None,
    };
    let obj = v
        .as_object()
        .ok_or_else(|| fail(format!("boundingVolume is {v}, expected an object")))?;
    if let Some(b) = obj.get("box") {
        let n: [f64; 12] = numbers(b).map_err(|e| fail(format!("boundingVolume.box: {e}")))?;
        let center = [n[0], n[1], n[2]];
        let axes = [[n[3], n[4], n[5]], [n[6], n[7], n[8]], [n[9], n[10], n[11]]];
        let lens = axes.map(norm);
        let longest = lens.iter().copied().fold(0.0, f64::max);
        if longest == 0.0 {
            return Err(fail(
                "boundingVolume.box: all three half-axes are zero (a point)".into(),
            ));
        }
        let volume = Volume::Box { center, axes };
        let det = dot(axes[0], cross(axes[1], axes[2]));
        if lens.contains(&0.0) || det.abs() <= 1e-12 * lens.iter().product::<f64>() {
            let zero: Vec<String> = (0..3)
                .filter(|&i| lens[i] <= 1e-9 * longest)
                .map(|i| ["x", "y", "z"][i].to_string())
                .collect();
            let flat = flatten_box(center, axes);
            return Err(VolumeProblem {
                message: if zero.is_empty() {
                    "boundingVolume.box: half-axes are coplanar (the box is flat)".into()
                } else {
                    format!(
                        "boundingVolume.box: the {} half-axis has zero length (the box is flat)",
                        zero.join(" and ")
                    )
                },
                usable: flat,
            });
        }
        return Ok(volume);
    }
    if let Some(r) = obj.get("region") {
        let n: [f64; 6] = numbers(r).map_err(|e| fail(format!("boundingVolume.region: {e}")))?;
        use std::f64::consts::{FRAC_PI_2, PI};
        let [w, s, e, no, h0, h1] = n;
        let bad = if !(-PI..=PI).contains(&w) || !(-PI..=PI).contains(&e) {
            Some("west/east must be radians in [−π, π] (degrees given?)")
        } else if !(-FRAC_PI_2..=FRAC_PI_2).contains(&s) || !(-FRAC_PI_2..=FRAC_PI_2).contains(&no)
        {
            Some("south/north must be radians in [−π/2, π/2] (degrees given?)")
        } else if s > no {
            Some("south > north")
        } else if h0 > h1 {
            Some("minimum height > maximum height")
        } else {
            None
        };
        return match bad {
            Some(why) => Err(fail(format!("boundingVolume.region {n:?}: {why}"))),
            None => Ok(Volume::Region(n)),
        };
    }
    if let Some(sp) = obj.get("sphere") {
        let n: [f64; 4] = numbers(sp).map_err(|e| fail(format!("boundingVolume.sphere: {e}")))?;
        if n[3] <= 0.0 {
            return Err(fail(format!(
                "boundingVolume.sphere: radius {} must be > 0",
                n[3]
            )));
        }
        return Ok(Volume::Sphere {
            center: [n[0], n[1], n[2]],
            radius: n[3],
        });
    }
    Err(fail(format!(
        "boundingVolume has none of box, region, sphere (keys: {})",
        obj.keys().cloned().collect::<Vec<_>>().join(", ")
    )))
}

/// A flat box made solid by giving its missing axis a 1 µm thickness, so content lying in its plane
/// can still be checked.
fn flatten_box(center: [f64; 3], axes: [[f64; 3]; 3]) -> Option<Box<Volume>> {
    let lens = axes.map(norm);
    let mut axes = axes;
    let mut order = [0usize, 1, 2];
    order.sort_by(|&a, &b| lens[b].total_cmp(&lens[a]));
    let (a, b, c) = (order[0], order[1], order[2]);
    if lens[b] == 0.0 {
        return None;
    }
    let n = cross(axes[a], axes[b]);
    let nl = norm(n);
    if nl == 0.0 {
        return None;
    }
    axes[c] = n.map(|x| x / nl * 1e-6);
    Some(Box::new(Volume::Box { center, axes }))
}

/// WGS84 semi-major axis (metres) and flattening.
const WGS84_A_M: f64 = 6_378_137.0;
const WGS84_F: f64 = 1.0 / 298.257_223_563;

/// ECEF (metres) → (longitude, latitude) radians and ellipsoidal height (metres), by the iterative
/// method (converges to < 1 mm in a few steps away from the centre of the Earth).
fn ecef_to_geodetic(p: [f64; 3]) -> [f64; 3] {
    let e2 = WGS84_F * (2.0 - WGS84_F);
    let lon = p[1].atan2(p[0]);
    let rho = (p[0] * p[0] + p[1] * p[1]).sqrt();
    let mut lat = p[2].atan2(rho * (1.0 - e2));
    let mut h = 0.0;
    for _ in 0..8 {
        let n = WGS84_A_M / (1.0 - e2 * lat.sin().powi(2)).sqrt();
        h = if lat.cos().abs() > 1e-9 {
            rho / lat.cos() - n
        } else {
            p[2].abs() - n * (1.0 - e2)
        };
        lat = p[2].atan2(rho * (1.0 - e2 * n / (n + h)));
    }
    [lon, lat, h]
}

impl Volume {
    /// How far (metres) the point lies outside the volume; 0 when inside. `in_frame` is the point
    /// in the volume's tile frame (for box and sphere), `in_world` the same point after every tile
    /// transform (ECEF, for region).
    pub(super) fn excess_m(&self, in_frame: [f64; 3], in_world: [f64; 3]) -> f64 {
        match self {
            Volume::Box { center, axes } => {
                let d = [
                    in_frame[0] - center[0],
                    in_frame[1] - center[1],
                    in_frame[2] - center[2],
                ];
                // Solve d = Σ t_i axes[i] by Cramer's rule (the axes need not be orthogonal).
                let det = dot(axes[0], cross(axes[1], axes[2]));
                let t = [
                    dot(d, cross(axes[1], axes[2])) / det,
                    dot(axes[0], cross(d, axes[2])) / det,
                    dot(axes[0], cross(axes[1], d)) / det,
                ];
                (0..3)
                    .map(|i| (t[i].abs() - 1.0) * norm(axes[i]))
                    .fold(0.0, f64::max)
            }
            Volume::Sphere { center, radius } => {
                let d = [
                    in_frame[0] - center[0],
                    in_frame[1] - center[1],
                    in_frame[2] - center[2],
                ];
                (norm(d) - radius).max(0.0)
            }
            Volume::Region([w, s, e, n, h0, h1]) => {
                let [lon, lat, h] = ecef_to_geodetic(in_world);
                let lon_excess = if w <= e {
                    (w - lon).max(lon - e).max(0.0)
                } else if lon >= *w || lon <= *e {
                    0.0 // crosses the antimeridian
                } else {
                    (lon - e).min(w - lon)
                };
                let lat_excess = (s - lat).max(lat - n).max(0.0);
                let radius = WGS84_A_M + h.max(0.0);
                (lon_excess * radius * lat.cos())
                    .max(lat_excess * radius)
                    .max((h0 - h).max(h - h1))
                    .max(0.0)
            }
        }
    }

    /// Size of the volume (metres): largest half-axis, radius, or region half-extent.
    pub(super) fn size_m(&self) -> f64 {
        match self {
            Volume::Box { axes, .. } => axes.map(norm).iter().copied().fold(0.0, f64::max),
            Volume::Sphere { radius, .. } => *radius,
            // Angles to metres on the equator; heights in metres.
            Volume::Region([w, s, e, n, h0, h1]) => ((e - w).abs().max(n - s) * WGS84_A_M / 2.0)
                .max((h1 - h0) / 2.0)
                .max(1.0),
        }
    }

    /// Tolerance (metres) for containment: 10⁻⁴ of the volume's size plus 1 µm, so float32
    /// content rounding never fails a correct tileset.
    pub(super) fn tolerance_m(&self) -> f64 {
        1e-4 * self.size_m() + 1e-6
    }

    /// Whether testing the 8 corners of a content box is exact for this volume (convex with flat
    /// faces in the tile frame) — for spheres and regions a box corner may stick out while the
    /// geometry inside the box does not.
    pub(super) fn corners_are_exact(&self) -> bool {
        matches!(self, Volume::Box { .. })
    }

    /// Short description for messages, e.g. `box centre [0, 0, 1] half-axes 2×3×1 m`.
    pub(super) fn describe(&self) -> String {
        match self {
            Volume::Box { center, axes } => {
                let l = axes.map(norm);
                format!(
                    "box centre [{:.4}, {:.4}, {:.4}] half-axes {:.4}×{:.4}×{:.4} m",
                    center[0], center[1], center[2], l[0], l[1], l[2]
                )
            }
            Volume::Sphere { center, radius } => format!(
                "sphere centre [{:.4}, {:.4}, {:.4}] radius {radius:.4} m",
                center[0], center[1], center[2]
            ),
            Volume::Region(r) => format!("region {r:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn box_excess_is_distance_outside_along_each_axis() {
        let v = parse_volume(&json!({"box": [0,0,0, 1,0,0, 0,2,0, 0,0,3]})).unwrap();
        assert_eq!(v.excess_m([0.5, 1.9, -2.9], [0.0; 3]), 0.0);
        assert!((v.excess_m([1.5, 0.0, 0.0], [0.0; 3]) - 0.5).abs() < 1e-12);
        assert!((v.excess_m([0.0, 0.0, -3.25], [0.0; 3]) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn rotated_box_uses_its_own_axes() {
        // Half-axes along the diagonals.
        let v = parse_volume(&json!({"box": [0,0,0, 1,1,0, -1,1,0, 0,0,1]})).unwrap();
        assert_eq!(v.excess_m([0.0, 1.9, 0.0], [0.0; 3]), 0.0);
        assert!(v.excess_m([1.9, 0.5, 0.0], [0.0; 3]) > 0.0);
    }

    #[test]
    fn box_with_eleven_numbers_is_rejected() {
        let e = parse_volume(&json!({"box": [0,0,0, 1,0,0, 0,1,0, 0,0]})).unwrap_err();
        assert!(e.message.contains("expected 12 numbers"), "{}", e.message);
    }

    #[test]
    fn flat_box_is_reported_but_still_usable() {
        let e = parse_volume(&json!({"box": [0,0,0, 1,0,0, 0,1,0, 0,0,0]})).unwrap_err();
        assert!(
            e.message.contains("z half-axis has zero length"),
            "{}",
            e.message
        );
        let v = e.usable.unwrap();
        assert_eq!(v.excess_m([0.5, 0.5, 0.0], [0.0; 3]), 0.0);
    }

    #[test]
    fn sphere_radius_must_be_positive_and_region_in_radians() {
        assert!(parse_volume(&json!({"sphere": [0,0,0,0]})).is_err());
        let e = parse_volume(&json!({"region": [-75.0, 40.0, -74.0, 41.0, 0, 10]})).unwrap_err();
        assert!(e.message.contains("radians"), "{}", e.message);
    }

    #[test]
    fn region_contains_its_own_centre_and_not_a_point_far_above() {
        let r = Volume::Region([-1.3, 0.69, -1.29, 0.70, 0.0, 100.0]);
        let (lon, lat, h) = (-1.295f64, 0.695f64, 50.0);
        let e2 = WGS84_F * (2.0 - WGS84_F);
        let n = WGS84_A_M / (1.0 - e2 * lat.sin().powi(2)).sqrt();
        let p = [
            (n + h) * lat.cos() * lon.cos(),
            (n + h) * lat.cos() * lon.sin(),
            (n * (1.0 - e2) + h) * lat.sin(),
        ];
        assert!(r.excess_m([0.0; 3], p) < 1e-3);
        let up = p.map(|x| x * (1.0 + 1000.0 / 6.4e6));
        assert!(r.excess_m([0.0; 3], up) > 500.0);
    }

    #[test]
    fn trs_matches_matrix_product() {
        let s = std::f64::consts::FRAC_1_SQRT_2;
        // 90° about Z: x → y.
        let m = trs([1.0, 2.0, 3.0], [0.0, 0.0, s, s], [2.0, 2.0, 2.0]);
        let p = apply(&m, [1.0, 0.0, 0.0]);
        assert!((p[0] - 1.0).abs() < 1e-12 && (p[1] - 4.0).abs() < 1e-12);
        let t = mul(&translation([1.0, 0.0, 0.0]), &translation([0.0, 1.0, 0.0]));
        assert_eq!(apply(&t, [0.0; 3]), [1.0, 1.0, 0.0]);
    }
}
