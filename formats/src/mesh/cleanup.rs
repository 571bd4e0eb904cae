//! The cleanup report of a mesh: faults a content team fixes in its modelling tool before they
//! show as shading seams, z-fighting or holes in a viewer, counted at ingest ([`survey`]); and the
//! repair ingest applies by default ([`repair`]): degenerate and duplicate triangles removed.
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

/// What [`repair`] removed and kept. Serialised into the ingest stage's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeshRepair {
    /// Degenerate triangles removed (no area, no normal: nothing to draw).
    pub removed_degenerate: usize,
    /// Duplicates removed: a copy in the same winding, or a back-to-back copy whose material is
    /// double-sided (it draws nothing the original does not, and z-fights with it).
    pub removed_duplicate: usize,
    /// Back-to-back copies kept: on a single-sided material the copy draws the back face, so
    /// removing it would open a hole seen from behind.
    pub kept_back_to_back: usize,
    /// Vertices no triangle used any more, removed with them.
    pub removed_vertices: usize,
}

/// Remove `mesh`'s degenerate and duplicate triangles (module docs; duplicates by position, so
/// split vertices do not hide them) and the vertices only they used; the first of a set of
/// duplicates is kept, so the result does not depend on anything but the triangle order.
/// `O(F + V)` time and memory.
pub fn repair(mesh: &mut Mesh) -> MeshRepair {
    let point = point_ids(&mesh.positions);
    let mut out = MeshRepair::default();
    // Cyclic order of the points, smallest first: one key per winding.
    let mut seen: HashMap<[u32; 3], ()> = HashMap::with_capacity(mesh.indices.len() / 3);
    let mut keep = vec![false; mesh.indices.len() / 3];
    for (f, t) in mesh.indices.chunks_exact(3).enumerate() {
        let Some(p) = drawable_points(mesh, &point, t) else {
            out.removed_degenerate += 1;
            continue;
        };
        let winding = cyclic_key(p);
        if seen.contains_key(&winding) {
            out.removed_duplicate += 1;
            continue;
        }
        let reversed = cyclic_key([p[0], p[2], p[1]]);
        if seen.contains_key(&reversed) {
            let material = mesh.triangle_materials.get(f).copied().unwrap_or(0) as usize;
            if mesh.materials.get(material).is_some_and(|m| m.double_sided) {
                out.removed_duplicate += 1;
                continue;
            }
            out.kept_back_to_back += 1;
        }
        seen.insert(winding, ());
        keep[f] = true;
    }
    if keep.iter().all(|&k| k) {
        return out;
    }
    drop_triangles(mesh, &keep);
    out.removed_vertices = drop_unused_vertices(mesh);
    out
}

/// The points of a triangle rotated so that the smallest comes first (winding kept).
fn cyclic_key(p: [u32; 3]) -> [u32; 3] {
    let i = (0..3).min_by_key(|&i| p[i]).unwrap_or(0);
    [p[i], p[(i + 1) % 3], p[(i + 2) % 3]]
}

/// Keep the triangles `keep` marks (indices and their materials).
fn drop_triangles(mesh: &mut Mesh, keep: &[bool]) {
    let mut indices = Vec::with_capacity(mesh.indices.len());
    let mut materials = Vec::with_capacity(keep.len());
    for (f, t) in mesh.indices.chunks_exact(3).enumerate() {
        if keep[f] {
            indices.extend_from_slice(t);
            materials.push(mesh.triangle_materials.get(f).copied().unwrap_or(0));
        }
    }
    mesh.indices = indices;
    if !mesh.triangle_materials.is_empty() {
        mesh.triangle_materials = materials;
    }
}

/// Remove the vertices no triangle uses (every per-vertex attribute alike); returns how many.
fn drop_unused_vertices(mesh: &mut Mesh) -> usize {
    let mut new_index = vec![u32::MAX; mesh.positions.len()];
    let mut kept = 0u32;
    for &i in &mesh.indices {
        if new_index[i as usize] == u32::MAX {
            new_index[i as usize] = kept;
            kept += 1;
        }
    }
    let removed = mesh.positions.len() - kept as usize;
    if removed == 0 {
        return 0;
    }
    // The order of first use; attributes follow their vertex.
    let mut order = vec![0usize; kept as usize];
    for (old, &new) in new_index.iter().enumerate() {
        if new != u32::MAX {
            order[new as usize] = old;
        }
    }
    fn pick<T: Copy>(v: &[T], order: &[usize]) -> Vec<T> {
        order.iter().map(|&o| v[o]).collect()
    }
    mesh.positions = pick(&mesh.positions, &order);
    mesh.normals = mesh.normals.as_deref().map(|v| pick(v, &order));
    mesh.uvs = mesh.uvs.as_deref().map(|v| pick(v, &order));
    mesh.uvs1 = mesh.uvs1.as_deref().map(|v| pick(v, &order));
    mesh.colors = mesh.colors.as_deref().map(|v| pick(v, &order));
    for i in &mut mesh.indices {
        *i = new_index[*i as usize];
    }
    removed
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
        let Some(p) = drawable_points(mesh, &point, t) else {
            out.degenerate_triangles += 1;
            continue;
        };
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

/// Triangle `t`'s point ids (`point`: one id per distinct position), or `None` when it is
/// degenerate (module docs): the one test [`survey`] and [`repair`] share.
fn drawable_points(mesh: &Mesh, point: &[u32], t: &[u32]) -> Option<[u32; 3]> {
    let p = [
        point[t[0] as usize],
        point[t[1] as usize],
        point[t[2] as usize],
    ];
    let degenerate = p[0] == p[1] || p[1] == p[2] || p[0] == p[2] || zero_area(mesh, t);
    (!degenerate).then_some(p)
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

    /// The hand-counted faults of `faults_are_counted_by_position_not_by_vertex_index`, repaired:
    /// both degenerate triangles go; the back-to-back copy stays on a single-sided material (it
    /// draws the back face) and goes on a double-sided one; a same-winding copy always goes; the
    /// fins stay (non-manifold is reported, not guessed at); the survey after finds no
    /// degenerate triangle left.
    #[test]
    fn repair_removes_degenerate_and_redundant_duplicates_and_keeps_the_back_faces() {
        let square = || {
            let p = vec![
                [0.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [1.0, 1.0, 0.0],
                [0.0, 1.0, 0.0],
                [2.0, 0.0, 0.0],
                [-0.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [1.0, 1.0, 0.0],
            ];
            // 2 good, 2 degenerate, 1 reversed copy of (0,1,2) on split vertices, 1 same-winding
            // copy of (0,2,3) rotated.
            let idx = vec![0, 1, 2, 0, 2, 3, 0, 0, 1, 0, 1, 4, 5, 7, 6, 2, 3, 0];
            mesh(p, idx)
        };
        let mut m = square();
        let r = repair(&mut m);
        assert_eq!(
            r,
            MeshRepair {
                removed_degenerate: 2,
                removed_duplicate: 1,
                kept_back_to_back: 1,
                removed_vertices: 1, // vertex 4, used only by the collinear triangle
            }
        );
        assert_eq!(m.indices.len() / 3, 3);
        assert_eq!(m.triangle_materials.len(), 3);
        assert_eq!(m.positions.len(), 7);
        assert_eq!(survey(&m).degenerate_triangles, 0);
        assert_eq!(survey(&m).duplicate_triangles, 1, "the kept back face");

        let mut m = square();
        m.materials[0].double_sided = true;
        let r = repair(&mut m);
        assert_eq!((r.removed_duplicate, r.kept_back_to_back), (2, 0));
        assert_eq!(
            survey(&m),
            MeshCleanup {
                boundary_edges: 4,
                ..Default::default()
            }
        );

        // A clean mesh is left exactly as it was.
        let p = vec![
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ];
        let mut m = mesh(p, vec![0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3]);
        let before = m.clone();
        assert_eq!(repair(&mut m), MeshRepair::default());
        assert_eq!(m, before);
    }

    /// Property: over generated soups of triangles with random faults, the repaired mesh has no
    /// degenerate triangle and no same-winding duplicate, every index is in range, and the
    /// counts add up to the triangles read.
    #[test]
    fn repair_leaves_no_degenerate_or_same_winding_duplicate_on_generated_meshes() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..200 {
            let v = 3 + next(12) as usize;
            let positions: Vec<[f32; 3]> = (0..v)
                .map(|_| [next(3) as f32, next(3) as f32, next(2) as f32])
                .collect();
            let f = 1 + next(30) as usize;
            let indices: Vec<u32> = (0..3 * f).map(|_| next(v as u64) as u32).collect();
            let mut m = mesh(positions, indices);
            let r = repair(&mut m);
            let left = m.indices.len() / 3;
            assert_eq!(left + r.removed_degenerate + r.removed_duplicate, f);
            assert!(m.indices.iter().all(|&i| (i as usize) < m.positions.len()));
            let after = survey(&m);
            assert_eq!(after.degenerate_triangles, 0);
            assert_eq!(after.duplicate_triangles, r.kept_back_to_back);
        }
    }
}
