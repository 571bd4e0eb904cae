//! The cleanup report of a mesh: faults a content team fixes in its modelling tool before they
//! show as shading seams, z-fighting or holes in a viewer, counted (not repaired) at ingest.
//!
//! Triangles are compared by *position*, not by vertex index: readers split a vertex wherever
//! its normal, UV or material differs (glTF primitives, OBJ `v/vt/vn` triples), so two triangles
//! on the same three points are duplicates even when they index different vertices. Positions
//! are equal when their f32 bits are (after node transforms; `-0.0` and `0.0` are one point).
//!
//! Definitions (as MeshLab's "Compute Topological Measures" and Blender's 3D-Print toolbox):
//! - degenerate: two of the three corners at the same point, or a zero cross product (all
//!   three on one line), so the triangle has no area and no normal;
//! - duplicate: a non-degenerate triangle on the same three points as an earlier one, in either
//!   winding (a back-to-back copy is how some exporters fake double-sidedness and z-fights);
//! - non-manifold edge: an edge shared by more than two non-degenerate, non-duplicate triangles;
//! - boundary edge: an edge of exactly one such triangle (an open border: a hole, or a sheet
//!   such as a leaf or a terrain skirt, which renders with holes unless `doubleSided`).

use std::collections::HashMap;

use super::Mesh;

/// What [`survey`] counted. Serialised into the ingest stage's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeshCleanup {
    /// Triangles with no area (module docs).
    pub degenerate_triangles: usize,
    /// Triangles on the same three points as an earlier triangle.
    pub duplicate_triangles: usize,
    /// Edges shared by more than two triangles.
    pub non_manifold_edges: usize,
    /// Edges of exactly one triangle.
    pub boundary_edges: usize,
}

impl MeshCleanup {
    /// True when nothing a user would fix was found (boundary edges are not faults by themselves).
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.degenerate_triangles == 0
            && self.duplicate_triangles == 0
            && self.non_manifold_edges == 0
    }
}

/// Count the faults of `mesh` (module docs). `O(F)` time and memory (hash maps of points,
/// triangles and edges).
#[must_use]
pub fn survey(mesh: &Mesh) -> MeshCleanup {
    let point = point_ids(&mesh.positions);
    let mut out = MeshCleanup::default();
    let mut seen_triangles: HashMap<[u32; 3], ()> = HashMap::with_capacity(mesh.indices.len() / 3);
    let mut edge_uses: HashMap<[u32; 2], u32> = HashMap::with_capacity(mesh.indices.len());
    for t in mesh.indices.chunks_exact(3) {
        let p = [
            point[t[0] as usize],
            point[t[1] as usize],
            point[t[2] as usize],
        ];
        if p[0] == p[1] || p[1] == p[2] || p[0] == p[2] || zero_area(mesh, t) {
            out.degenerate_triangles += 1;
            continue;
        }
        let mut key = p;
        key.sort_unstable();
        if seen_triangles.insert(key, ()).is_some() {
            out.duplicate_triangles += 1;
            continue;
        }
        for (a, b) in [(key[0], key[1]), (key[1], key[2]), (key[0], key[2])] {
            *edge_uses.entry([a, b]).or_default() += 1;
        }
    }
    for &uses in edge_uses.values() {
        match uses {
            1 => out.boundary_edges += 1,
            2 => {}
            _ => out.non_manifold_edges += 1,
        }
    }
    out
}

/// One id per distinct position (by f32 bits, `-0.0` folded into `0.0`), per vertex.
fn point_ids(positions: &[[f32; 3]]) -> Vec<u32> {
    let mut ids: HashMap<[u32; 3], u32> = HashMap::with_capacity(positions.len());
    positions
        .iter()
        .map(|p| {
            let key = p.map(|c| (c + 0.0).to_bits());
            let next = ids.len() as u32;
            *ids.entry(key).or_insert(next)
        })
        .collect()
}

/// Whether triangle `t`'s corners lie on one line (cross product exactly zero, in f64).
fn zero_area(mesh: &Mesh, t: &[u32]) -> bool {
    let p = |k: usize| mesh.positions[t[k] as usize].map(f64::from);
    let (a, b, c) = (p(0), p(1), p(2));
    let u = [b[0] - a[0], b[1] - a[1], b[2] - a[2]];
    let v = [c[0] - a[0], c[1] - a[1], c[2] - a[2]];
    let n = [
        u[1] * v[2] - u[2] * v[1],
        u[2] * v[0] - u[0] * v[2],
        u[0] * v[1] - u[1] * v[0],
    ];
    n == [0.0; 3]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(positions: Vec<[f32; 3]>, indices: Vec<u32>) -> Mesh {
        Mesh::plain(positions, indices)
    }

    /// A closed tetrahedron: 4 faces, 6 edges each shared by two faces, no faults.
    #[test]
    fn a_closed_tetrahedron_is_clean_and_has_no_border() {
        let p = vec![
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ];
        let m = mesh(p, vec![0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3]);
        assert_eq!(survey(&m), MeshCleanup::default());
        assert!(survey(&m).is_clean());
    }

    /// Hand-counted faults: a square of two triangles (4 boundary edges), plus a collapsed
    /// triangle, a collinear one, a back-to-back copy of the first triangle on split vertices,
    /// and a third and fourth triangle hanging on the diagonal (non-manifold: 4 uses).
    #[test]
    fn faults_are_counted_by_position_not_by_vertex_index() {
        let mut p = vec![
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [1.0, 1.0, 0.0],
            [0.0, 1.0, 0.0],
        ];
        let mut idx = vec![0, 1, 2, 0, 2, 3];
        idx.extend([0, 0, 1]); // degenerate: repeated corner
        p.push([2.0, 0.0, 0.0]); // 4: on the line through 0 and 1
        idx.extend([0, 1, 4]); // degenerate: collinear
        // Split copies of 0, 1, 2 (another UV seam), back to back with triangle 0.
        p.extend([[-0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]);
        idx.extend([5, 7, 6]); // duplicate of (0, 1, 2), reversed winding, -0.0 for 0.0
        p.push([0.5, 0.5, 1.0]); // 8
        p.push([0.5, 0.5, -1.0]); // 9
        idx.extend([0, 2, 8, 2, 0, 9]); // fins on the diagonal 0–2
        let c = survey(&mesh(p, idx));
        assert_eq!(c.degenerate_triangles, 2);
        assert_eq!(c.duplicate_triangles, 1);
        // Diagonal 0–2: used by both square triangles and both fins.
        assert_eq!(c.non_manifold_edges, 1);
        // Square border (4) + each fin's two outer edges (4).
        assert_eq!(c.boundary_edges, 8);
        assert!(!c.is_clean());
    }

    /// Negative zero and zero are one point: the split copy at (-0, 1, 0) joins (0, 1, 0).
    #[test]
    fn negative_zero_is_the_same_point() {
        let p = vec![[0.0, 1.0, 0.0], [-0.0, 1.0, 0.0], [1.0, 0.0, 0.0]];
        assert_eq!(point_ids(&p), vec![0, 0, 1]);
    }
}
