//! `bin`: each visible splat → one (key, splat id) pair per 16×16 tile its bounding square touches.
//!
//! Key layout (gsplat `IntersectTile.cu`, single camera): `tile_id << 32 | depth.to_bits()`, with
//! `tile_id = ty · tiles_x + tx`. Depth is > NEAR_PLANE > 0, and the bit pattern of a positive finite
//! `f32` increases with its value, so sorting keys sorts by tile, then front to back.
//! Culled splats (empty tile box) emit nothing; `project` guarantees every emitted depth is finite.

use super::project::ProjectedSplat;
use super::scalar::Scalar;

/// Number of tiles a projected splat touches (0 when culled).
#[inline]
pub fn tile_count<T>(s: &ProjectedSplat<T>) -> usize {
    (s.tile_max[0].saturating_sub(s.tile_min[0]) as usize)
        * (s.tile_max[1].saturating_sub(s.tile_min[1]) as usize)
}

/// Emits the unsorted intersection list: `keys [I]` (`tile_id << 32 | depth bits`) and `ids [I]`
/// (splat index), splats in input order, each splat's tiles in row-major order.
pub fn bin<T: Scalar>(projected: &[ProjectedSplat<T>], tiles_x: u32) -> (Vec<u64>, Vec<u32>) {
    let total: usize = projected.iter().map(tile_count).sum();
    let mut keys = Vec::with_capacity(total);
    let mut ids = Vec::with_capacity(total);
    for (i, s) in projected.iter().enumerate() {
        if tile_count(s) == 0 {
            continue;
        }
        let depth_bits = u64::from(s.depth.to_f32().to_bits());
        for ty in s.tile_min[1]..s.tile_max[1] {
            for tx in s.tile_min[0]..s.tile_max[0] {
                let tile = u64::from(ty) * u64::from(tiles_x) + u64::from(tx);
                keys.push((tile << 32) | depth_bits);
                ids.push(i as u32);
            }
        }
    }
    (keys, ids)
}
