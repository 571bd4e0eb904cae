//! `sort`: orders the intersection list by key (tile, then depth front to back) and finds each tile's
//! contiguous range in it.
//!
//! The CPU buckets the intersections by tile (a stable counting sort on the key's high half), then
//! sorts each tile's bucket by `(depth bits, splat id)` packed into one `u64`, tiles in parallel.
//! The packed values are all distinct, so the order is one total order whatever the thread count,
//! identical to sorting the `(key, splat id)` pairs (equal depths within a tile fall back to splat
//! index, as a stable sort of gsplat's keys would).

use rayon::prelude::*;

/// Sorts the intersections and returns `sorted_ids [I]` (splat index per intersection, grouped by tile,
/// front to back) and `tile_ranges [T]` (`[start, end)` into `sorted_ids` per tile id).
///
/// Every key's tile (`key >> 32`) must be below `n_tiles`.
pub fn sort(keys: Vec<u64>, ids: Vec<u32>, n_tiles: usize) -> (Vec<u32>, Vec<[u32; 2]>) {
    let mut counts = vec![0u32; n_tiles];
    for &k in &keys {
        counts[(k >> 32) as usize] += 1;
    }
    // Ranges tile `[0, I)` contiguously in tile order, empty tiles included (the backward pass
    // splits its buffer along them).
    let mut ranges = Vec::with_capacity(n_tiles);
    let mut cursor = 0u32;
    for &c in &counts {
        ranges.push([cursor, cursor + c]);
        cursor += c;
    }
    // Bucket by tile, keeping `depth bits << 32 | id` (the key's low half is the depth).
    let mut next: Vec<u32> = ranges.iter().map(|r| r[0]).collect();
    let mut packed = vec![0u64; keys.len()];
    for (&k, &id) in keys.iter().zip(&ids) {
        let slot = &mut next[(k >> 32) as usize];
        packed[*slot as usize] = (k << 32) | u64::from(id);
        *slot += 1;
    }
    drop((keys, ids));
    let mut buckets: Vec<&mut [u64]> = Vec::with_capacity(n_tiles);
    let mut rest: &mut [u64] = &mut packed;
    for r in &ranges {
        let (head, tail) = rest.split_at_mut((r[1] - r[0]) as usize);
        if head.len() > 1 {
            buckets.push(head);
        }
        rest = tail;
    }
    buckets.into_par_iter().for_each(|b| b.sort_unstable());
    (packed.par_iter().map(|&p| p as u32).collect(), ranges)
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
