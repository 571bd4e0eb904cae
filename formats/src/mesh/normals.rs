//! Generated vertex normals for meshes whose source has none (a PLY scan without `nx ny nz`, an
//! OBJ without `vn`, a glTF primitive without `NORMAL`).
//!
//! Why: glTF 2.0 §3.7.2.1 says that "when normals are not specified, client implementations MUST
//! calculate flat normals", so a scan without normals draws faceted, and after simplification of
//! the coarse tiles as a few large flat facets; smooth normals computed once from the
//! full-resolution surface shade it as the scanner saw it and survive simplification as an
//! attribute.
//!
//! Method: the angle-weighted average of the incident faces' unit normals (G. Thürmer and
//! C. A. Wüthrich, "Computing vertex normals from polygonal facets", Journal of Graphics Tools
//! 3(1), 1998: each face counts with the interior angle of its corner at the vertex, which makes
//! the result independent of how a polygon is triangulated). Creases are kept: the faces around a
//! vertex are grouped so that every face's normal is within [`CREASE_ANGLE_DEG`] of its group's
//! first face's, and each group beyond the first gets its own copy of the vertex (same position,
//! UVs and colour), as smoothing groups split vertices in DCC tools. Faces of zero area count in no
//! average (their corner takes the vertex's first group).

use super::Mesh;

/// Faces whose normals differ by more than this angle (degrees) from a group's first face do not
/// share a vertex normal. 60° keeps the edges of boxes and CAD parts (90°) and of a tetrahedron
/// (109.5° between face normals) sharp, while the neighbouring facets of a scan (a few degrees,
/// tens on noise) and of a coarse cylinder of ≥ 7 segments (≤ 51.4°) stay smooth.
pub const CREASE_ANGLE_DEG: f64 = 60.0;

/// Normal given to a vertex no face with area uses (glTF +Y, up): any unit vector is valid there.
const FALLBACK_NORMAL: [f32; 3] = [0.0, 1.0, 0.0];

/// Fill in the normals of `mesh` that its source did not give (see the module docs for the method).
///
/// * `authored` — `None` when the mesh has no normals at all (`mesh.normals` is ignored and
///   replaced); else one flag per vertex, `true` where `mesh.normals` holds the source's normal
///   (kept as is), `false` where one is to be generated.
///
/// Vertices are appended (copies of a vertex's position, UVs and colour) where a crease splits a
/// generated normal, and the triangles on the far side of the crease are re-indexed to them; the
/// triangle count, order and materials do not change. Returns the number of vertices that received
/// a generated normal (copies included).
///
/// # Panics
/// Never for a mesh meeting the [`Mesh`] invariants; `authored` shorter than the vertex count
/// counts as `false` for the rest.
pub fn generate_missing_normals(mesh: &mut Mesh, authored: Option<&[bool]>) -> usize {
    let v_count = mesh.positions.len();
    let keep = |v: usize| authored.is_some_and(|a| a.get(v).copied().unwrap_or(false));
    let mut normals = match (authored, mesh.normals.take()) {
        (Some(_), Some(n)) if n.len() == v_count => n,
        _ => vec![[0.0; 3]; v_count],
    };
    let faces = FaceGeometry::of(mesh);
    let incident = Incidence::of(&mesh.indices, v_count);
    let cos_crease = CREASE_ANGLE_DEG.to_radians().cos();
    let mut generated = 0;
    for v in 0..v_count {
        if keep(v) {
            continue;
        }
        let groups = group_corners(incident.corners_of(v), &faces, cos_crease);
        for (g, group) in groups.iter().enumerate() {
            let target = if g == 0 {
                v
            } else {
                let copy = duplicate_vertex(mesh, v);
                for &corner in &group.corners {
                    mesh.indices[corner as usize] = copy as u32;
                }
                normals.push([0.0; 3]);
                copy
            };
            normals[target] = unit_or_fallback(group.sum);
            generated += 1;
        }
        if groups.is_empty() {
            normals[v] = FALLBACK_NORMAL;
            generated += 1;
        }
    }
    mesh.normals = Some(normals);
    generated
}

/// Per triangle: its unit normal (zero when degenerate) and the interior angle (radians) of each
/// of its three corners.
struct FaceGeometry {
    unit_normals: Vec<[f64; 3]>,
    corner_angles: Vec<[f64; 3]>,
}

impl FaceGeometry {
    fn of(mesh: &Mesh) -> Self {
        let p = |i: u32| mesh.positions[i as usize].map(f64::from);
        let mut unit_normals = Vec::with_capacity(mesh.indices.len() / 3);
        let mut corner_angles = Vec::with_capacity(mesh.indices.len() / 3);
        for t in mesh.indices.chunks_exact(3) {
            let (a, b, c) = (p(t[0]), p(t[1]), p(t[2]));
            let n = cross(sub(b, a), sub(c, a));
            let len = norm(n);
            if len > 0.0 && len.is_finite() {
                unit_normals.push(n.map(|x| x / len));
                corner_angles.push([
                    angle_between(sub(b, a), sub(c, a)),
                    angle_between(sub(c, b), sub(a, b)),
                    angle_between(sub(a, c), sub(b, c)),
                ]);
            } else {
                unit_normals.push([0.0; 3]);
                corner_angles.push([0.0; 3]);
            }
        }
        Self {
            unit_normals,
            corner_angles,
        }
    }
}

/// The corners (positions in `indices`) using each vertex, as one flat list with offsets
/// (compressed sparse rows), ascending by corner.
struct Incidence {
    offsets: Vec<usize>,
    corners: Vec<u32>,
}

impl Incidence {
    fn of(indices: &[u32], v_count: usize) -> Self {
        let mut offsets = vec![0usize; v_count + 1];
        for &i in indices {
            offsets[i as usize + 1] += 1;
        }
        for v in 0..v_count {
            offsets[v + 1] += offsets[v];
        }
        let mut next = offsets.clone();
        let mut corners = vec![0u32; indices.len()];
        for (corner, &i) in indices.iter().enumerate() {
            corners[next[i as usize]] = corner as u32;
            next[i as usize] += 1;
        }
        Self { offsets, corners }
    }

    fn corners_of(&self, v: usize) -> &[u32] {
        &self.corners[self.offsets[v]..self.offsets[v + 1]]
    }
}

/// Corners of one vertex that share a normal, and their angle-weighted sum of face normals.
struct Group {
    seed: [f64; 3],
    sum: [f64; 3],
    corners: Vec<u32>,
}

/// Group the `corners` of one vertex by face normal: a face joins the first group whose seed (its
/// first face's unit normal) is within the crease angle (`cos_crease` = its cosine), else starts a
/// new group; degenerate faces join the first group (or start one with a zero sum).
fn group_corners(corners: &[u32], faces: &FaceGeometry, cos_crease: f64) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut degenerate = Vec::new();
    for &corner in corners {
        let (f, k) = (corner as usize / 3, corner as usize % 3);
        let n = faces.unit_normals[f];
        if n == [0.0; 3] {
            degenerate.push(corner);
            continue;
        }
        let w = faces.corner_angles[f][k];
        let weighted = n.map(|x| x * w);
        match groups.iter_mut().find(|g| dot(g.seed, n) >= cos_crease) {
            Some(g) => {
                g.sum = add(g.sum, weighted);
                g.corners.push(corner);
            }
            None => groups.push(Group {
                seed: n,
                sum: weighted,
                corners: vec![corner],
            }),
        }
    }
    if !degenerate.is_empty() {
        match groups.first_mut() {
            Some(g) => g.corners.extend(degenerate),
            None => groups.push(Group {
                seed: [0.0; 3],
                sum: [0.0; 3],
                corners: degenerate,
            }),
        }
    }
    groups
}

/// Append a copy of vertex `v` (position and every per-vertex attribute but the normal, which the
/// caller sets); returns the copy's index.
fn duplicate_vertex(mesh: &mut Mesh, v: usize) -> usize {
    mesh.positions.push(mesh.positions[v]);
    for uvs in [&mut mesh.uvs, &mut mesh.uvs1].into_iter().flatten() {
        uvs.push(uvs[v]);
    }
    if let Some(c) = mesh.colors.as_mut() {
        c.push(c[v]);
    }
    mesh.positions.len() - 1
}

fn unit_or_fallback(n: [f64; 3]) -> [f32; 3] {
    let len = norm(n);
    if len > 0.0 && len.is_finite() {
        n.map(|x| (x / len) as f32)
    } else {
        FALLBACK_NORMAL
    }
}

/// Angle (radians, 0..=π) between two non-zero vectors; 0 when either is zero.
fn angle_between(a: [f64; 3], b: [f64; 3]) -> f64 {
    // atan2(|a × b|, a · b) stays accurate for nearly parallel edges, unlike acos of the cosine.
    let (s, c) = (norm(cross(a, b)), dot(a, b));
    if s == 0.0 && c == 0.0 {
        0.0
    } else {
        s.atan2(c)
    }
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn add(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn norm(a: [f64; 3]) -> f64 {
    dot(a, a).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(positions: Vec<[f32; 3]>, indices: Vec<u32>) -> Mesh {
        Mesh::plain(positions, indices)
    }

    fn close(a: [f32; 3], b: [f64; 3], tol: f64) -> bool {
        (0..3).all(|k| (f64::from(a[k]) - b[k]).abs() < tol)
    }

    /// Hand calculation: apex (0, h, 0), h = 0.25, over the square (±1, 0, ±1) cut into four
    /// triangles; the face normals are (0, 1, ±h)/√(1 + h²) and (±h, 1, 0)/√(1 + h²) (opposite
    /// faces 2·atan(h) = 28.1° apart, neighbours 19.7°: all below the crease angle, no split). By
    /// symmetry the four apex angles are equal, so the angle-weighted apex normal is +Y.
    #[test]
    fn a_shallow_pyramid_apex_gets_the_symmetric_normal_up() {
        let h = 0.25_f32;
        let mut m = mesh(
            vec![
                [0.0, h, 0.0],
                [-1.0, 0.0, -1.0],
                [1.0, 0.0, -1.0],
                [1.0, 0.0, 1.0],
                [-1.0, 0.0, 1.0],
            ],
            // Counter-clockwise seen from above (+Y).
            vec![0, 2, 1, 0, 3, 2, 0, 4, 3, 0, 1, 4],
        );
        assert_eq!(generate_missing_normals(&mut m, None), 5);
        let n = m.normals.as_ref().unwrap();
        assert!(close(n[0], [0.0, 1.0, 0.0], 1e-6), "{:?}", n[0]);
        // The base corner (1, 0, −1) is shared by the faces with normals (0, 1, −h)/√(1 + h²) and
        // (h, 1, 0)/√(1 + h²), whose corner angles there are equal (both have cosine
        // 1/√(2 + h²)), so its normal is their bisector (h, 2, −h)/√(2h² + 4).
        let h = f64::from(h);
        let l = (2.0 * h * h + 4.0).sqrt();
        assert!(close(n[2], [h / l, 2.0 / l, -h / l], 1e-6), "{:?}", n[2]);
        assert_eq!(m.positions.len(), 5, "no crease, no split");
    }

    /// A unit cube of 12 triangles on 8 shared corners: every corner joins three faces at 90°,
    /// above the crease angle, so each corner becomes three vertices with the three axis normals
    /// (hand calculation: the face normals themselves), 24 vertices in all.
    #[test]
    fn a_cube_keeps_its_edges_sharp_with_axis_normals() {
        let p = |i: u32| [(i & 1) as f32, ((i >> 1) & 1) as f32, ((i >> 2) & 1) as f32];
        let positions: Vec<[f32; 3]> = (0..8).map(p).collect();
        // Quads (counter-clockwise seen from outside) as two triangles each.
        let quads = [
            [0, 2, 3, 1], // z = 0, normal −Z
            [4, 5, 7, 6], // z = 1, +Z
            [0, 1, 5, 4], // y = 0, −Y
            [2, 6, 7, 3], // y = 1, +Y
            [0, 4, 6, 2], // x = 0, −X
            [1, 3, 7, 5], // x = 1, +X
        ];
        let indices: Vec<u32> = quads
            .iter()
            .flat_map(|q| [q[0], q[1], q[2], q[0], q[2], q[3]])
            .collect();
        let mut m = mesh(positions, indices);
        assert_eq!(generate_missing_normals(&mut m, None), 24);
        assert_eq!(m.positions.len(), 24);
        let n = m.normals.as_ref().unwrap();
        let expected = [
            [0.0, 0.0, -1.0],
            [0.0, 0.0, 1.0],
            [0.0, -1.0, 0.0],
            [0.0, 1.0, 0.0],
            [-1.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
        ];
        for (t, tri) in m.indices.chunks_exact(3).enumerate() {
            for &v in tri {
                assert!(
                    close(n[v as usize], expected[t / 2], 1e-6),
                    "triangle {t} vertex {v}: {:?}",
                    n[v as usize]
                );
            }
        }
    }

    /// Regular tetrahedron on alternate cube corners: face normals are 109.5° apart (above the
    /// crease angle), so each of the 4 vertices splits into 3, each with its face's normal
    /// (hand calculation: the face opposite corner c has normal −c/|c| for corners c = (±1, ±1, ±1)
    /// with an even number of minus signs).
    #[test]
    fn a_tetrahedron_gets_its_face_normals() {
        let c = [
            [1.0, 1.0, 1.0],
            [1.0, -1.0, -1.0],
            [-1.0, 1.0, -1.0],
            [-1.0, -1.0, 1.0],
        ];
        // Face opposite corner k, wound counter-clockwise seen from outside (e.g. face 3:
        // (c1 − c0) × (c2 − c0) = (4, 4, −4), along −c3).
        let indices = vec![1, 3, 2, 0, 2, 3, 0, 3, 1, 0, 1, 2];
        let mut m = mesh(c.to_vec(), indices);
        assert_eq!(generate_missing_normals(&mut m, None), 12);
        let n = m.normals.clone().unwrap();
        let s = 1.0 / 3f64.sqrt();
        for (face, tri) in m.indices.chunks_exact(3).enumerate() {
            let expected = c[face].map(|x| -f64::from(x) * s);
            for &v in tri {
                assert!(
                    close(n[v as usize], expected, 1e-6),
                    "{face}: {:?}",
                    n[v as usize]
                );
            }
        }
    }

    /// Authored normals are kept; only the flagged-missing vertices get one; UVs and colours follow
    /// a split vertex. Two triangles folded at 90° along the edge 0–1: its ends split.
    #[test]
    fn authored_normals_are_kept_and_split_copies_carry_attributes() {
        let mut m = mesh(
            vec![
                [0.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [0.0, 0.0, -1.0],
                [0.0, 1.0, 0.0],
            ],
            vec![0, 1, 2, 1, 0, 3],
        );
        m.uvs = Some(vec![[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]]);
        m.colors = Some(vec![[0.5; 4]; 4]);
        m.normals = Some(vec![[0.0; 3], [0.0; 3], [9.0; 3], [0.0; 3]]);
        let generated = generate_missing_normals(&mut m, Some(&[false, false, true, false]));
        // Vertices 0 and 1 split (2 + 2), vertex 3 once; vertex 2 kept.
        assert_eq!(generated, 5);
        assert_eq!(m.positions.len(), 6);
        let n = m.normals.as_ref().unwrap();
        assert_eq!(n[2], [9.0; 3]);
        let uvs = m.uvs.as_ref().unwrap();
        assert_eq!(uvs[4], uvs[0]);
        assert_eq!(uvs[5], uvs[1]);
        assert_eq!(m.colors.as_ref().unwrap().len(), 6);
        // Triangle 0 lies in y = 0 facing +Y ((1, 0, 0) × (0, 0, −1) = (0, 1, 0)); triangle 1 in
        // z = 0 facing −Z ((−1, 0, 0) × (−1, 1, 0) = (0, 0, −1)).
        for &v in &m.indices[0..3] {
            if v != 2 {
                assert!(close(n[v as usize], [0.0, 1.0, 0.0], 1e-6));
            }
        }
        for &v in &m.indices[3..6] {
            assert!(close(n[v as usize], [0.0, 0.0, -1.0], 1e-6));
        }
    }
}
