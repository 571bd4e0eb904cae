//! `to_world`, the last step of a primitive's path through [`super`]: node transforms composed
//! in f64 from the JSON text (the `gltf` crate keeps them in f32, which rounds an ECEF
//! translation to 0.25 m), vertices moved by the world matrix relative to the mesh's origin,
//! normals by its inverse transpose, and triangle winding flipped under mirroring transforms.
//!
//! Source: glTF 2.0 §3.5.2 (transformations: column-major matrices, T·R·S, quaternions
//! x, y, z, w) and §5.25 (node); normals transform by the inverse transpose of the linear part.

/// Column-major 4×4 identity.
pub(super) const IDENTITY: [f64; 16] = [
    1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0,
];

/// A column-major f64 matrix from the `gltf` crate's f32 columns.
pub(super) fn mat_from_cols(cols: &[[f32; 4]; 4]) -> [f64; 16] {
    let mut m = [0.0; 16];
    for (c, col) in cols.iter().enumerate() {
        for (r, v) in col.iter().enumerate() {
            m[c * 4 + r] = f64::from(*v);
        }
    }
    m
}

/// `a · b` for column-major 4×4 matrices.
pub(super) fn mat_mul(a: &[f64; 16], b: &[f64; 16]) -> [f64; 16] {
    let mut m = [0.0; 16];
    for c in 0..4 {
        for r in 0..4 {
            m[c * 4 + r] = (0..4).map(|k| a[k * 4 + r] * b[c * 4 + k]).sum();
        }
    }
    m
}

/// One primitive in the world frame: its vertices relative to the mesh's origin, its normals
/// (`None` when it had none) and its triangles with their winding flipped when the transform
/// mirrors, so front faces stay counter-clockwise.
pub(super) struct InWorld {
    /// `[V, 3]` metres, world − origin.
    pub(super) positions: Vec<[f32; 3]>,
    /// `[V, 3]` unit vectors (zero where a normal degenerates).
    pub(super) normals: Option<Vec<[f32; 3]>>,
    /// `[F, 3]` indices into `positions`.
    pub(super) triangles: Vec<u32>,
}

/// Move one primitive into the world frame by `world` (column-major 4×4, f64): positions to
/// `world · p − origin_m` ([`transform_point`]: exact for pure translations), normals by the
/// inverse transpose and renormalised, and `triangles` (`[F, 3]`) with their last two
/// corners swapped when `world` mirrors (negative determinant).
///
/// - `positions`: `[V, 3]` metres in the mesh's frame; `normals`: `[V, 3]` or `None`.
/// - `origin_m`: the mesh's origin ([`origin_for`] of its first primitive), metres.
pub(super) fn to_world(
    positions: &[[f32; 3]],
    normals: Option<&[[f32; 3]]>,
    mut triangles: Vec<u32>,
    world: &[f64; 16],
    origin_m: [f64; 3],
) -> InWorld {
    let normal_matrix = normal_matrix(world);
    let positions = positions
        .iter()
        .map(|v| transform_point(world, origin_m, v))
        .collect();
    let normals = normals.map(|n| {
        n.iter()
            .map(|v| transform_normal(&normal_matrix, v))
            .collect()
    });
    if determinant3(world) < 0.0 {
        for tri in triangles.chunks_exact_mut(3) {
            tri.swap(1, 2);
        }
    }
    InWorld {
        positions,
        normals,
        triangles,
    }
}

/// `m · p − origin` in f64, then rounded to f32. The origin is taken off the translation column
/// first (`(R·p) + (t − origin)`): `t − origin` is exact (Sterbenz: the two are within a factor of
/// 2, see [`origin_for`]), so small coordinates never pass through a sum with millions of metres
/// and a node that only translates gives back its vertex data bit for bit.
fn transform_point(m: &[f64; 16], origin: [f64; 3], p: &[f32; 3]) -> [f32; 3] {
    let (x, y, z) = (f64::from(p[0]), f64::from(p[1]), f64::from(p[2]));
    std::array::from_fn(|r| {
        let t = m[12 + r] - origin[r];
        (m[r] * x + m[4 + r] * y + m[8 + r] * z + t) as f32
    })
}

/// Node translations at least this far from 0 (metres, on any axis) move the mesh's
/// [`Mesh::origin_m`] there. f32 spacing at 1024 m is 2^-13 m = 0.12 mm (IEEE 754 binary32: 24
/// significant bits), so below it f32 world coordinates keep 0.06 mm; at an ECEF radius (2^22 m
/// ≈ 4,194 km) they would keep only 0.25 m / 2 = 12.5 cm.
pub(crate) const RECENTRE_FROM_M: f64 = 1024.0;

/// The origin the positions are kept relative to, from the world matrix of the first primitive:
/// its translation rounded to whole metres when some axis is ≥ [`RECENTRE_FROM_M`] (whole metres
/// so that writing the origin as a node translation and reading it back gives the same origin,
/// and positions back bit for bit), else 0.
pub(super) fn origin_for(world: &[f64; 16]) -> [f64; 3] {
    let t = [world[12], world[13], world[14]];
    if t.iter().any(|c| c.abs() >= RECENTRE_FROM_M) && t.iter().all(|c| c.is_finite()) {
        t.map(f64::round)
    } else {
        [0.0; 3]
    }
}

/// The local matrix (column-major) of every node, composed in f64 from the JSON text: the `gltf`
/// crate stores `matrix`/`translation` as f32, which rounds an ECEF translation to 0.25 m.
/// `matrix` when given, else `T · R · S` (glTF 2.0 §5.25: translation, rotation as the unit
/// quaternion `[x, y, z, w]`, scale). An entry is `None` (the caller then uses the crate's f32
/// value) when a field is not an array of numbers of the right length; the list is empty when
/// the file's JSON cannot be found again (it parsed once already, so never in practice).
pub(super) fn node_matrices_f64(bytes: &[u8], count: usize) -> Vec<Option<[f64; 16]>> {
    let Some(json) = json_text(bytes) else {
        return Vec::new();
    };
    let Ok(root) = serde_json::from_slice::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let Some(nodes) = root["nodes"].as_array() else {
        return Vec::new();
    };
    let mut out: Vec<Option<[f64; 16]>> = nodes.iter().map(node_matrix_f64).collect();
    out.resize(count, None);
    out
}

/// The JSON text of a `.gltf` file or of a GLB's first chunk (glTF 2.0 §4.4: 12-byte header,
/// then chunk length (u32 LE), chunk type `JSON`, chunk data).
fn json_text(bytes: &[u8]) -> Option<&[u8]> {
    if !bytes.starts_with(b"glTF") {
        return Some(bytes);
    }
    let len = u32::from_le_bytes(bytes.get(12..16)?.try_into().ok()?) as usize;
    if bytes.get(16..20)? != b"JSON" {
        return None;
    }
    bytes.get(20..20usize.checked_add(len)?)
}

fn node_matrix_f64(node: &serde_json::Value) -> Option<[f64; 16]> {
    let numbers = |v: &serde_json::Value, n: usize| -> Option<Vec<f64>> {
        let a = v.as_array()?;
        (a.len() == n)
            .then(|| {
                a.iter()
                    .map(serde_json::Value::as_f64)
                    .collect::<Option<Vec<f64>>>()
            })
            .flatten()
    };
    if !node["matrix"].is_null() {
        return numbers(&node["matrix"], 16)?.try_into().ok();
    }
    let or = |key: &str, n: usize, default: &[f64]| -> Option<Vec<f64>> {
        if node[key].is_null() {
            Some(default.to_vec())
        } else {
            numbers(&node[key], n)
        }
    };
    let t = or("translation", 3, &[0.0; 3])?;
    let q = or("rotation", 4, &[0.0, 0.0, 0.0, 1.0])?;
    let s = or("scale", 3, &[1.0; 3])?;
    Some(trs_matrix(
        [t[0], t[1], t[2]],
        [q[0], q[1], q[2], q[3]],
        [s[0], s[1], s[2]],
    ))
}

/// Column-major `T · R · S` for translation `t`, unit quaternion `q = [x, y, z, w]` (glTF's
/// order; the rotation matrix of [`crate::rotation::quaternion_to_rotation`], normalised first)
/// and scale `s`.
fn trs_matrix(t: [f64; 3], q: [f64; 4], s: [f64; 3]) -> [f64; 16] {
    let [x, y, z, w] = q;
    // Row-major r[row][col]; a zero quaternion (invalid glTF) reads as no rotation, as the
    // unnormalised formula gave.
    let r = crate::rotation::quaternion_to_rotation([w, x, y, z]).unwrap_or([
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
    ]);
    let mut m = [0.0; 16];
    for c in 0..3 {
        for row in 0..3 {
            m[c * 4 + row] = r[row][c] * s[c];
        }
    }
    m[12] = t[0];
    m[13] = t[1];
    m[14] = t[2];
    m[15] = 1.0;
    m
}

/// Upper 3×3 of `m` at (row, col).
fn m3(m: &[f64; 16], r: usize, c: usize) -> f64 {
    m[c * 4 + r]
}

fn determinant3(m: &[f64; 16]) -> f64 {
    m3(m, 0, 0) * (m3(m, 1, 1) * m3(m, 2, 2) - m3(m, 1, 2) * m3(m, 2, 1))
        - m3(m, 0, 1) * (m3(m, 1, 0) * m3(m, 2, 2) - m3(m, 1, 2) * m3(m, 2, 0))
        + m3(m, 0, 2) * (m3(m, 1, 0) * m3(m, 2, 1) - m3(m, 1, 1) * m3(m, 2, 0))
}

/// Row-major 3×3 inverse transpose of the upper 3×3 of `m` (the cofactor matrix; the missing
/// 1/det only scales, and normals are renormalised anyway — its sign is kept so normals of mirrored
/// nodes stay outward).
fn normal_matrix(m: &[f64; 16]) -> [[f64; 3]; 3] {
    let a = |r: usize, c: usize| m3(m, r % 3, c % 3);
    let sign = if determinant3(m) < 0.0 { -1.0 } else { 1.0 };
    std::array::from_fn(|r| {
        std::array::from_fn(|c| {
            sign * (a(r + 1, c + 1) * a(r + 2, c + 2) - a(r + 1, c + 2) * a(r + 2, c + 1))
        })
    })
}

fn transform_normal(n3: &[[f64; 3]; 3], v: &[f32; 3]) -> [f32; 3] {
    let w: [f64; 3] = std::array::from_fn(|r| (0..3).map(|c| n3[r][c] * f64::from(v[c])).sum());
    let len = (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]).sqrt();
    if len > 0.0 && len.is_finite() {
        std::array::from_fn(|i| (w[i] / len) as f32)
    } else {
        // A zero normal stays zero; the GLB writer replaces it with a valid unit vector.
        [0.0; 3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glTF 2.0 §5.25 node TRS by hand: a 90° turn about +Y (quaternion [0, sin 45°, 0, cos 45°])
    /// maps +X to −Z and +Z to +X; scale 2 doubles; the translation is kept to the last f64 bit
    /// (4,000,000.1234 m is 4,000,000.0 or 4,000,000.25 in f32).
    #[test]
    fn node_trs_is_composed_in_f64_from_the_json_text() {
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let node = serde_json::json!({
            "translation": [4_000_000.123_4, -1.5, 0.25],
            "rotation": [0.0, h, 0.0, h],
            "scale": [2.0, 2.0, 2.0]
        });
        let m = node_matrix_f64(&node).unwrap();
        let apply = |p: [f64; 3]| -> [f64; 3] {
            std::array::from_fn(|r| m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r])
        };
        let expect = |got: [f64; 3], want: [f64; 3]| {
            assert!(
                (0..3).all(|k| (got[k] - want[k]).abs() < 1e-9),
                "{got:?} vs {want:?}"
            );
        };
        expect(apply([0.0; 3]), [4_000_000.123_4, -1.5, 0.25]);
        expect(apply([1.0, 0.0, 0.0]), [4_000_000.123_4, -1.5, 0.25 - 2.0]);
        expect(apply([0.0, 0.0, 1.0]), [4_000_000.123_4 + 2.0, -1.5, 0.25]);
        expect(apply([0.0, 1.0, 0.0]), [4_000_000.123_4, 0.5, 0.25]);
        assert_eq!(m[12], 4_000_000.123_4);
        // `matrix` wins over TRS; a malformed field falls back (None) to the crate's value.
        let matrix: Vec<f64> = (0..16).map(f64::from).collect();
        assert_eq!(
            node_matrix_f64(&serde_json::json!({"matrix": matrix, "translation": [1, 2, 3]}))
                .unwrap()
                .to_vec(),
            matrix
        );
        assert!(node_matrix_f64(&serde_json::json!({"translation": [1, 2]})).is_none());
    }
}
