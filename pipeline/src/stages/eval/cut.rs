//! Which tiles a 3D Tiles client shows from a camera: the screen-space-error cut (CesiumJS's
//! rule) and the splat-budget cut (Spark's rule).
//!
//! Sources: OGC 3D Tiles 1.1 (22-025r4) §"Geometric error" and §"Refinement" (REPLACE);
//! CesiumJS 1.145 `Cesium3DTile.getScreenSpaceError` — SSE = geometricError · height /
//! (2 · distance · tan(fovy / 2)), distance from the camera to the tile's bounding volume (clamped
//! above 0) — and `Cesium3DTilesetBaseTraversal` (a tile refines while its SSE exceeds
//! `maximumScreenSpaceError` τ; tiles outside the view frustum are culled; ancestors of what is
//! shown are loaded on the way down, so their bytes count as fetched). For a pinhole camera
//! height / (2 tan(fovy / 2)) = fy, so SSE = geometricError · fy / distance.
//! Budget cut: refine the visible tile of largest SSE while the splats shown stay within the
//! budget (Spark 2 `lodSplatCount`, shared/research/splat-delivery.md §2.1).
//!
//! Not modelled: CesiumJS's `dynamicScreenSpaceError` and foveated SSE (both lower detail only
//! towards the horizon of street-level views), and partially loaded states (the steady state a
//! client reaches once everything it asked for has arrived is what is scored).

use kiln_kernels::Camera;

use super::tileset::{LoadedTileset, OrientedBox};
use crate::Result;

/// Smallest camera-to-volume distance (metres) in the SSE formula, as CesiumJS clamps it
/// (`CesiumMath.EPSILON7`), so a camera inside a tile's volume refines it.
const MIN_DISTANCE_M: f64 = 1e-7;

/// The near plane used for culling (metres): the rasterizer's.
const NEAR_M: f64 = kiln_kernels::consts::NEAR_PLANE as f64;

/// A cut: the tiles shown, and every tile whose content a client downloads to show them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cut {
    /// Tiles rendered, depth-first order.
    pub shown: Vec<usize>,
    /// Tiles fetched: `shown` plus the refined ancestors on the way down, sorted.
    pub fetched: Vec<usize>,
}

/// A camera's frustum and centre in the capture frame.
#[derive(Debug, Clone, Copy)]
pub struct ViewFrustum {
    /// Camera centre, capture frame.
    pub center: [f64; 3],
    /// `world_to_camera` rows (rotation | translation), f64.
    rows: [[f64; 4]; 3],
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
    width: f64,
    height: f64,
}

impl ViewFrustum {
    /// The frustum of a pinhole `camera` (OpenCV frame, `world_to_camera`).
    #[must_use]
    pub fn of(camera: &Camera) -> Self {
        let w = camera.world_to_camera.map(|r| r.map(f64::from));
        let rows = [w[0], w[1], w[2]];
        // Centre = −Rᵀ·t.
        let center = std::array::from_fn(|a| -(0..3).map(|k| w[k][a] * w[k][3]).sum::<f64>());
        Self {
            center,
            rows,
            fx: f64::from(camera.fx),
            fy: f64::from(camera.fy),
            cx: f64::from(camera.cx),
            cy: f64::from(camera.cy),
            width: f64::from(camera.width),
            height: f64::from(camera.height),
        }
    }

    fn camera_point(&self, p: [f64; 3]) -> [f64; 3] {
        std::array::from_fn(|r| {
            self.rows[r][0] * p[0]
                + self.rows[r][1] * p[1]
                + self.rows[r][2] * p[2]
                + self.rows[r][3]
        })
    }

    /// Whether any part of `b` may be inside the frustum (conservative: a box outside one of
    /// the five planes — near, left, right, top, bottom — is culled).
    #[must_use]
    pub fn sees(&self, b: &OrientedBox) -> bool {
        let corners = b.corners().map(|c| self.camera_point(c));
        // Each plane as a function that is ≥ 0 inside: z − near; u ≥ 0; u ≤ W; v ≥ 0; v ≤ H
        // written without dividing by z (valid for points behind the camera too).
        let inside = |p: &[f64; 3], plane: usize| -> f64 {
            match plane {
                0 => p[2] - NEAR_M,
                1 => self.fx * p[0] + self.cx * p[2],
                2 => -(self.fx * p[0] + (self.cx - self.width) * p[2]),
                3 => self.fy * p[1] + self.cy * p[2],
                _ => -(self.fy * p[1] + (self.cy - self.height) * p[2]),
            }
        };
        (0..5).all(|plane| corners.iter().any(|c| inside(c, plane) >= 0.0))
    }

    /// Screen-space error in pixels of a tile with `geometric_error_m` and volume `b`.
    #[must_use]
    pub fn sse(&self, geometric_error_m: f64, b: &OrientedBox) -> f64 {
        geometric_error_m * self.fy / b.distance_to(self.center).max(MIN_DISTANCE_M)
    }
}

/// The cut a CesiumJS client shows at maximum screen-space error `tau_px`: from the root, a visible
/// tile with children refines (REPLACE) while its SSE exceeds `tau_px`, otherwise it is shown;
/// invisible tiles are skipped. τ = 0 shows every visible leaf.
#[must_use]
pub fn sse_cut(ts: &LoadedTileset, view: &ViewFrustum, tau_px: f64) -> Cut {
    let mut cut = Cut::default();
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        let t = &ts.tiles[i];
        if !view.sees(&t.bounds) {
            continue;
        }
        if !t.children.is_empty() && view.sse(t.geometric_error, &t.bounds) > tau_px {
            if t.content.is_some() {
                cut.fetched.push(i);
            }
            stack.extend(t.children.iter().rev());
        } else {
            cut.shown.push(i);
            if t.content.is_some() {
                cut.fetched.push(i);
            }
        }
    }
    cut.fetched.sort_unstable();
    cut
}

/// The cut under a splat budget: start from the root (if visible) and repeatedly refine the shown
/// tile of largest SSE whose visible children fit, i.e. while the splats shown stay ≤ `budget`;
/// a tile whose children do not fit stays shown and the next one is tried.
///
/// # Errors
/// As [`LoadedTileset::content`] (splat counts need the content).
pub fn budget_cut(ts: &LoadedTileset, view: &ViewFrustum, budget: usize) -> Result<Cut> {
    let mut cut = Cut::default();
    if !view.sees(&ts.tiles[0].bounds) {
        return Ok(cut);
    }
    let mut shown: Vec<usize> = vec![0];
    let mut total = ts.splat_count(0)?;
    let mut ancestors = Vec::new();
    let mut tried = std::collections::HashSet::new();
    loop {
        let next = shown
            .iter()
            .enumerate()
            .filter(|&(_, &i)| !ts.tiles[i].children.is_empty() && !tried.contains(&i))
            .map(|(pos, &i)| {
                (
                    pos,
                    i,
                    view.sse(ts.tiles[i].geometric_error, &ts.tiles[i].bounds),
                )
            })
            .max_by(|a, b| a.2.total_cmp(&b.2));
        let Some((pos, i, _)) = next else { break };
        tried.insert(i);
        let visible: Vec<usize> = ts.tiles[i]
            .children
            .iter()
            .copied()
            .filter(|&c| view.sees(&ts.tiles[c].bounds))
            .collect();
        let mut added = 0;
        for &c in &visible {
            added += ts.splat_count(c)?;
        }
        let own = ts.splat_count(i)?;
        if total - own + added > budget {
            continue;
        }
        total = total - own + added;
        shown.swap_remove(pos);
        shown.extend(visible);
        ancestors.push(i);
    }
    shown.sort_unstable();
    cut.fetched = shown
        .iter()
        .chain(&ancestors)
        .copied()
        .filter(|&i| ts.tiles[i].content.is_some())
        .collect();
    cut.fetched.sort_unstable();
    cut.shown = shown;
    Ok(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn camera_at_origin_looking_down_z() -> Camera {
        Camera {
            width: 100,
            height: 100,
            fx: 100.0,
            fy: 100.0,
            cx: 50.0,
            cy: 50.0,
            world_to_camera: [
                [1.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 0.0, 0.0],
                [0.0, 0.0, 1.0, 0.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        }
    }

    fn cube(center: [f64; 3], half: f64) -> OrientedBox {
        OrientedBox {
            center,
            half_axes: [[half, 0.0, 0.0], [0.0, half, 0.0], [0.0, 0.0, half]],
        }
    }

    #[test]
    fn boxes_behind_or_beside_the_camera_are_culled() {
        let v = ViewFrustum::of(&camera_at_origin_looking_down_z());
        assert!(v.sees(&cube([0.0, 0.0, 5.0], 1.0)));
        assert!(!v.sees(&cube([0.0, 0.0, -5.0], 1.0)));
        // Half field of view is atan(0.5): at z = 6 (the box's far face) the frustum spans
        // x ∈ [−3, 3], and this box starts at x = 3.5.
        assert!(!v.sees(&cube([4.5, 0.0, 5.0], 1.0)));
        assert!(v.sees(&cube([3.0, 0.0, 5.0], 1.0)));
        // Straddling the camera: visible.
        assert!(v.sees(&cube([0.0, 0.0, 0.0], 1.0)));
    }

    #[test]
    fn sse_is_error_times_focal_over_distance() {
        let v = ViewFrustum::of(&camera_at_origin_looking_down_z());
        // Box face at z = 9: distance 9 m; 0.9 m error · 100 px / 9 m = 10 px.
        let b = cube([0.0, 0.0, 10.0], 1.0);
        assert!((v.sse(0.9, &b) - 10.0).abs() < 1e-9);
        // A camera inside the volume refines it whatever its error.
        assert!(v.sse(1e-3, &cube([0.0; 3], 1.0)) > 1e3);
    }
}
