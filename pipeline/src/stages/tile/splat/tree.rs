//! The tile tree of the splat tiler: a k-d tree with fan-out 4 over the splat means (see the
//! module docs of `tile/splat`).

use kiln_formats::splats::GaussianSplats;

use super::SplatTileParams;

/// One tree node.
#[derive(Debug)]
pub(super) struct Node {
    pub depth: u32,
    /// Indices of the original splats in this leaf (empty for parents).
    pub indices: Vec<u32>,
    /// Child node indices in the arena (always larger than this node's index).
    pub children: Vec<usize>,
    /// Tile file stem: "r" then one child digit (0–3) per level ("r" + "l" for the single leaf
    /// under a merged root of a small input).
    pub name: String,
}

impl Node {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}

/// The tree over `splats` (arena, root first, children after their parent): nodes holding more
/// than `max_splats_per_tile` are cut into `params.fanout` (2 or 4) at medians until `max_depth`; a single leaf gets
/// a root above it.
pub(super) fn build_tree(splats: &GaussianSplats, params: &SplatTileParams) -> Vec<Node> {
    let mut nodes = vec![Node {
        depth: 0,
        indices: (0..splats.len() as u32).collect(),
        children: Vec::new(),
        name: "r".into(),
    }];
    let mut i = 0;
    while i < nodes.len() {
        let n = nodes[i].indices.len();
        if n > params.max_splats_per_tile && nodes[i].depth < params.max_depth && n >= 2 {
            let indices = std::mem::take(&mut nodes[i].indices);
            let (a, b) = split_median(splats, indices);
            let parts: Vec<Vec<u32>> = if params.fanout == 2 {
                vec![a, b]
            } else {
                [a, b]
                    .into_iter()
                    .flat_map(|half| {
                        if half.len() >= 2 {
                            let (x, y) = split_median(splats, half);
                            [x, y]
                        } else {
                            [half, Vec::new()]
                        }
                    })
                    .collect()
            };
            for (k, q) in parts.into_iter().filter(|q| !q.is_empty()).enumerate() {
                let child = Node {
                    depth: nodes[i].depth + 1,
                    indices: q,
                    children: Vec::new(),
                    name: format!("{}{k}", nodes[i].name),
                };
                nodes.push(child);
                let c = nodes.len() - 1;
                nodes[i].children.push(c);
            }
        } else if n > params.max_splats_per_tile {
            tracing::warn!(
                tile = %nodes[i].name,
                splats = n,
                max_depth = params.max_depth,
                "leaf at max_depth holds more than max_splats_per_tile"
            );
        }
        i += 1;
    }
    // A small input is a single leaf: put a merged root above it.
    if nodes.len() == 1 {
        let leaf = Node {
            depth: 1,
            indices: std::mem::take(&mut nodes[0].indices),
            children: Vec::new(),
            name: "rl".into(),
        };
        nodes.push(leaf);
        nodes[0].children.push(1);
    }
    nodes
}

/// The depth at which [`build_tree`]'s leaves hold at most `budget` (≥ 1) of `n` splats: each
/// level cuts a node at medians into `fanout` (2 or 4) parts of ⌈half⌉ at most.
pub(super) fn required_depth(n: usize, budget: usize, fanout: u8) -> u32 {
    let mut depth = 0;
    let mut size = n;
    while size > budget.max(1) {
        size = largest_part(size, fanout);
        depth += 1;
    }
    depth
}

/// The most splats a leaf at `depth` holds when `n` splats are cut `fanout`-ways at medians.
pub(super) fn largest_leaf(n: usize, depth: u32, fanout: u8) -> usize {
    (0..depth).fold(n, |size, _| largest_part(size, fanout))
}

/// The larger part of one level's median cuts of `size` splats: one halving (fanout 2) or two.
fn largest_part(size: usize, fanout: u8) -> usize {
    let half = size.div_ceil(2);
    if fanout == 2 { half } else { half.div_ceil(2) }
}

/// Cut `indices` (≥ 2) at the median of the longest axis of their means' bounding box: two halves
/// whose sizes differ by at most one.
fn split_median(splats: &GaussianSplats, mut indices: Vec<u32>) -> (Vec<u32>, Vec<u32>) {
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for &s in &indices {
        let p = &splats.means[s as usize * 3..s as usize * 3 + 3];
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    let axis = (0..3)
        .max_by(|&a, &b| (hi[a] - lo[a]).total_cmp(&(hi[b] - lo[b])))
        .unwrap_or(0);
    let mid = indices.len() / 2;
    // Ties broken by index, so the cut is deterministic for coincident splats.
    indices.select_nth_unstable_by(mid, |&x, &y| {
        splats.means[x as usize * 3 + axis]
            .total_cmp(&splats.means[y as usize * 3 + axis])
            .then(x.cmp(&y))
    });
    let upper = indices.split_off(mid);
    (indices, upper)
}
