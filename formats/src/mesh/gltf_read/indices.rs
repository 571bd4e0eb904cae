//! `read_indices` and `to_triangle_list`, the middle of a primitive's path through [`super`]:
//! its indices as written (the indices accessor, the Draco stream's, or 0..V for a primitive
//! without one), checked against its mode and vertex count, then a triangle list (strips and
//! fans unrolled with the winding glTF defines).
//!
//! Source: glTF 2.0 §3.7.2.1 (Meshes: primitive modes, "Triangle Strips", "Triangle Fans";
//! no primitive restart).

use gltf::accessor::{DataType, Dimensions};
use gltf::mesh::Mode;

use super::Builder;
use super::attributes::Draco;
use crate::mesh::draco;
use crate::{Error, Result};

impl<'a> Builder<'a> {
    /// The indices of `primitive` (named `field` in errors) as written: the Draco stream's when
    /// `draco` is given (the indices accessor then only describes them), else the indices
    /// accessor's, else `0..vertex_count`. Checked before any conversion: a TRIANGLES list (and
    /// every Draco stream) needs a multiple of 3, a strip or fan at least 3, and every index
    /// must be < `vertex_count`.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the indices accessor's count differs from the Draco stream's
    /// index count, for a count the mode does not allow, or an index ≥ `vertex_count` (naming
    /// the element); the accessor checks' errors ([`Builder::check_accessor`]).
    pub(super) fn read_indices(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        mode: Mode,
        draco: Option<Draco>,
        vertex_count: usize,
    ) -> Result<Vec<u32>> {
        let is_draco = draco.is_some();
        let reader = primitive.reader(|b| self.buffers.get(b.index()).map(|d| d.as_slice()));
        let index_types = [DataType::U8, DataType::U16, DataType::U32];
        let indices: Vec<u32> = match (draco.map(|d| d.decoded), primitive.indices()) {
            (Some(d), acc) => {
                // The accessor only describes the decoded indices; its count must match them.
                if let Some(acc) = acc {
                    self.check_accessor_type(&acc, "indices", Dimensions::Scalar, &index_types)?;
                    if acc.count() != d.indices.len() {
                        return Err(Error::Invalid {
                            path: self.path.to_path_buf(),
                            field: format!("accessors[{}] (indices of {field}).count", acc.index()),
                            expected: format!(
                                "the {} indices the Draco stream ({}) decodes to",
                                d.indices.len(),
                                draco::EXTENSION
                            ),
                            found: acc.count().to_string(),
                        });
                    }
                }
                d.indices
            }
            (None, Some(acc)) => {
                self.check_accessor(&acc, "indices", Dimensions::Scalar, &index_types)?;
                let idx: Vec<u32> = if Self::needs_own_read(&acc) {
                    // Zeros without bufferView, or sparse: through f32, exact below 2^24.
                    let v = self.read_floats::<1>(&acc)?;
                    v.into_iter().map(|[i]| i as u32).collect()
                } else {
                    reader
                        .read_indices()
                        .map(|it| it.into_u32().collect())
                        .unwrap_or_default()
                };
                self.check_count(&acc, idx.len())?;
                idx
            }
            (None, None) => (0..vertex_count as u32).collect(),
        };
        // Strips and fans become lists in `to_triangle_list`, after the range check below has
        // seen the indices as written.
        let list_from = strip_or_fan(mode, is_draco);
        if list_from.is_some() && indices.len() < 3 {
            return Err(Error::Invalid {
                path: self.path.to_path_buf(),
                field: format!("{field}.indices"),
                expected: "3 or more indices (glTF 2.0 §3.7.2.1, strips and fans)".into(),
                found: format!("{} indices", indices.len()),
            });
        }
        if list_from.is_none() && !indices.len().is_multiple_of(3) {
            return Err(Error::Invalid {
                path: self.path.to_path_buf(),
                field: format!("{field}.indices"),
                expected: "a multiple of 3 indices (TRIANGLES)".into(),
                found: format!("{} indices", indices.len()),
            });
        }
        if let Some((i, &bad)) = indices
            .iter()
            .enumerate()
            .find(|&(_, &v)| v as usize >= vertex_count)
        {
            return Err(Error::Invalid {
                path: self.path.to_path_buf(),
                field: format!("{field}.indices, element {i} (IndexOutOfRange)"),
                expected: format!("an index < vertex count {vertex_count}"),
                found: format!("index {bad}"),
            });
        }
        Ok(indices)
    }
}

/// The mode of a primitive whose indices `to_triangle_list` unrolls: a strip or fan that is
/// not Draco-compressed (Draco streams always decode to triangle lists).
fn strip_or_fan(mode: Mode, is_draco: bool) -> Option<Mode> {
    match (mode, is_draco) {
        (Mode::TriangleStrip | Mode::TriangleFan, false) => Some(mode),
        _ => None,
    }
}

/// `indices` as checked by [`Builder::read_indices`] for a primitive of `mode` as a triangle
/// list `[F, 3]`: strips and fans unrolled ([`strip_to_list`], [`fan_to_list`]), lists and
/// Draco streams unchanged.
pub(super) fn to_triangle_list(indices: Vec<u32>, mode: Mode, is_draco: bool) -> Vec<u32> {
    match strip_or_fan(mode, is_draco) {
        Some(Mode::TriangleStrip) => strip_to_list(&indices),
        Some(_) => fan_to_list(&indices),
        None => indices,
    }
}

/// A `TRIANGLE_STRIP` index sequence as a triangle list, `[n] → [F, 3]` with F ≤ n − 2.
///
/// glTF 2.0 §3.7.2.1 (Meshes, Overview, "Triangle Strips"): triangle i is
/// `{v_i, v_{i+(1+i%2)}, v_{i+(2−i%2)}}`, i.e. `(i, i+1, i+2)` for even i and `(i, i+2, i+1)` for
/// odd i, which keeps every triangle counter-clockwise like the first. glTF has no primitive
/// restart (the maximum index value is forbidden), so the sequence is one strip. Triangles that
/// use one vertex twice (the zero-area joins of stitched strips; the spec says they SHOULD NOT
/// occur) are dropped. Fewer than 3 indices give no triangle.
pub(crate) fn strip_to_list(strip: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(strip.len().saturating_sub(2) * 3);
    for i in 0..strip.len().saturating_sub(2) {
        let odd = i % 2;
        push_unless_degenerate(&mut out, [strip[i], strip[i + 1 + odd], strip[i + 2 - odd]]);
    }
    out
}

/// A `TRIANGLE_FAN` index sequence as a triangle list, `[n] → [F, 3]` with F ≤ n − 2.
///
/// glTF 2.0 §3.7.2.1 ("Triangle Fans"): triangle i is `{v_{i+1}, v_{i+2}, v_0}`, the same winding
/// as `(v_0, v_{i+1}, v_{i+2})`, which is what is written. Degenerate triangles are dropped as in
/// [`strip_to_list`].
pub(crate) fn fan_to_list(fan: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(fan.len().saturating_sub(2) * 3);
    for i in 0..fan.len().saturating_sub(2) {
        push_unless_degenerate(&mut out, [fan[0], fan[i + 1], fan[i + 2]]);
    }
    out
}

fn push_unless_degenerate(out: &mut Vec<u32>, [a, b, c]: [u32; 3]) {
    if a != b && b != c && a != c {
        out.extend([a, b, c]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glTF 2.0 §3.7.2.1: strip triangle i = {v_i, v_{i+(1+i%2)}, v_{i+(2−i%2)}}, so for
    /// [a b c d e] → (a b c), (b d c), (c d e); fan triangle i = {v_{i+1}, v_{i+2}, v_0}, written
    /// as the same rotation (v_0, v_{i+1}, v_{i+2}).
    #[test]
    fn strips_and_fans_follow_the_spec_equations() {
        assert_eq!(
            strip_to_list(&[10, 11, 12, 13, 14]),
            [10, 11, 12, 11, 13, 12, 12, 13, 14]
        );
        assert_eq!(fan_to_list(&[7, 1, 2, 3]), [7, 1, 2, 7, 2, 3]);
        // Stitched strips repeat an index; those zero-area joins are dropped.
        assert_eq!(strip_to_list(&[0, 1, 2, 2, 3, 4]), [0, 1, 2, 2, 4, 3]);
        assert!(strip_to_list(&[0, 1]).is_empty());
    }
}
