//! `sort`: orders the intersection list by key (tile, then depth front to back) and finds each tile's
//! contiguous range in it.
//!
//! The CPU sorts `(key, splat id)` pairs; the pairs are all distinct, so the unstable parallel sort
//! gives one deterministic order whatever the thread count (equal depths within a tile fall back to
//! splat index, as a stable sort of gsplat's keys would).

use rayon::prelude::*;

/// Sorts the intersections and returns `sorted_ids [I]` (splat index per intersection, grouped by tile,
/// front to back) and `tile_ranges [T]` (`[start, end)` into `sorted_ids` per tile id).
pub fn sort(keys: Vec<u64>, ids: Vec<u32>, n_tiles: usize) -> (Vec<u32>, Vec<[u32; 2]>) {
    let mut pairs: Vec<(u64, u32)> = keys.into_iter().zip(ids).collect();
    pairs.par_sort_unstable();
    let mut ranges = vec![[0u32; 2]; n_tiles];
    let mut start = 0usize;
    while start < pairs.len() {
        let tile = (pairs[start].0 >> 32) as usize;
        let mut end = start + 1;
        while end < pairs.len() && (pairs[end].0 >> 32) as usize == tile {
            end += 1;
        }
        ranges[tile] = [start as u32, end as u32];
        start = end;
    }
    // Empty tiles get an empty range at the position where they would sit, so the ranges tile
    // `[0, I)` contiguously in tile order (the backward pass splits its buffer along them).
    let mut cursor = 0u32;
    for r in &mut ranges {
        if r[1] > r[0] {
            cursor = r[1];
        } else {
            *r = [cursor, cursor];
        }
    }
    (pairs.into_iter().map(|(_, id)| id).collect(), ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_orders_by_tile_then_depth_and_ranges_are_contiguous() {
        let k = |tile: u64, d: f32| (tile << 32) | u64::from(d.to_bits());
        let keys = vec![k(2, 1.0), k(0, 3.0), k(2, 0.5), k(0, 0.1)];
        let (ids, ranges) = sort(keys, vec![0, 1, 2, 3], 4);
        assert_eq!(ids, vec![3, 1, 2, 0]);
        assert_eq!(ranges, vec![[0, 2], [2, 2], [2, 4], [4, 4]]);
    }
}
