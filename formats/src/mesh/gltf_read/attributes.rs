//! `read_attributes`, the first step of a primitive's path through [`super`]: its per-vertex
//! data (POSITION, NORMAL, TEXCOORD_0/1, COLOR_0) in its mesh's own frame, read from its
//! accessors or, for a `KHR_draco_mesh_compression` primitive, from the decoded Draco stream
//! (attributes the stream does not carry are read from their accessors as usual).
//!
//! Bad data: a missing or non-finite POSITION is an error naming the accessor and element; a
//! NORMAL, TEXCOORD or COLOR_0 that is non-finite or mis-sized is dropped with a warning
//! (normals are then generated, UVs read as (0, 0), colours as white).
//!
//! Source: glTF 2.0 §3.7.2.1 (attribute semantics and types), `KHR_mesh_quantization` (integer
//! POSITION, NORMAL, TEXCOORD), `KHR_draco_mesh_compression` (Conformance: attributes the
//! stream does not list come from their accessors).

use gltf::Semantic;
use gltf::accessor::{DataType, Dimensions};

use super::Builder;
use super::accessors::{QUANTIZED_NORMAL, QUANTIZED_POSITION, QUANTIZED_TEXCOORD};
use crate::mesh::draco;
use crate::{Error, Result};

/// A primitive's `KHR_draco_mesh_compression` extension and its decoded stream.
pub(super) struct Draco {
    pub(super) ext: draco::Extension,
    pub(super) decoded: draco::Decoded,
}

impl Draco {
    /// (Draco attribute id, decoded stream) of `semantic` when the stream carries it; other
    /// attributes are read from their accessors as usual (extension spec, Conformance).
    fn stream(&self, semantic: &str) -> Option<(usize, &draco::Decoded)> {
        self.ext.id_of(semantic).map(|id| (id, &self.decoded))
    }
}

/// The glTF path of attribute `semantic` inside primitive `field`'s Draco extension.
fn draco_field(field: &str, semantic: &str) -> String {
    format!(
        "{field}.extensions.{}.attributes.{semantic}",
        draco::EXTENSION
    )
}

/// One primitive's per-vertex data in its mesh's frame, V = `positions.len()` rows each;
/// `None` where the primitive has no usable attribute of that kind.
pub(super) struct Attributes {
    /// `[V, 3]` metres, finite.
    pub(super) positions: Vec<[f32; 3]>,
    /// `[V, 3]` unit vectors (quantized normals renormalised).
    pub(super) normals: Option<Vec<[f32; 3]>>,
    /// `[V, 2]` TEXCOORD_0.
    pub(super) uvs: Option<Vec<[f32; 2]>>,
    /// `[V, 2]` TEXCOORD_1, read only when the material samples set 1.
    pub(super) uvs1: Option<Vec<[f32; 2]>>,
    /// `[V, 4]` linear RGBA.
    pub(super) colors: Option<Vec<[f32; 4]>>,
}

impl<'a> Builder<'a> {
    /// The decoded Draco stream of `primitive` (named `field` in errors) when it carries
    /// `KHR_draco_mesh_compression`, with the POSITION, NORMAL and TEXCOORD_0/1 streams it
    /// lists; `None` otherwise.
    ///
    /// # Errors
    /// A malformed extension object ([`draco::Extension::parse`]); [`Error::Corrupt`] when its
    /// buffer view is missing or lies outside its buffer, or the stream does not decode
    /// ([`draco::decode`]).
    pub(super) fn decode_draco(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
    ) -> Result<Option<Draco>> {
        let Some(value) = primitive.extension_value(draco::EXTENSION) else {
            return Ok(None);
        };
        let ext = draco::Extension::parse(self.path, field, value)?;
        let wanted: Vec<usize> = ["POSITION", "NORMAL", "TEXCOORD_0", "TEXCOORD_1"]
            .iter()
            .filter_map(|s| ext.id_of(s))
            .collect();
        let location = format!(
            "{field}.extensions.{} (bufferViews[{}])",
            draco::EXTENSION,
            ext.buffer_view
        );
        let bytes = self
            .view_bytes(ext.buffer_view)
            .ok_or_else(|| Error::Corrupt {
                path: self.path.to_path_buf(),
                location: location.clone(),
                what: "the Draco buffer view is missing or lies outside its buffer".into(),
            })?;
        let decoded = draco::decode(self.path, &location, bytes, &wanted)?;
        Ok(Some(Draco { ext, decoded }))
    }

    /// The per-vertex data of `primitive` (named `field` in errors): POSITION, NORMAL,
    /// TEXCOORD_0, TEXCOORD_1 when `wants_uv1` (its material samples set 1) and COLOR_0, from
    /// `draco` where its stream carries them. Read in that order, so the first bad attribute is
    /// the one reported.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a missing POSITION or a non-finite position (naming the accessor
    /// and element); the accessor checks' errors ([`Builder::check_accessor`]); a Draco stream
    /// whose attribute cannot be read.
    pub(super) fn read_attributes(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        draco: Option<&Draco>,
        wants_uv1: bool,
    ) -> Result<Attributes> {
        let positions = self.read_positions(primitive, field, draco)?;
        let vertex_count = positions.len();
        let normals = self.read_normals(primitive, field, draco, vertex_count)?;
        let uvs = self.read_uv_set(primitive, field, draco, 0, vertex_count)?;
        let uvs1 = if wants_uv1 {
            self.read_uv_set(primitive, field, draco, 1, vertex_count)?
        } else {
            None
        };
        let colors = self.read_colors(primitive, field, vertex_count, draco.is_some())?;
        Ok(Attributes {
            positions,
            normals,
            uvs,
            uvs1,
            colors,
        })
    }

    /// POSITION of `primitive`: required, finite, from the Draco stream when it carries it (its
    /// vertex count may differ from the accessor's, with a warning: see [`super::read_gltf`]).
    fn read_positions(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        draco: Option<&Draco>,
    ) -> Result<Vec<[f32; 3]>> {
        let pos_acc = primitive
            .get(&Semantic::Positions)
            .ok_or_else(|| Error::Invalid {
                path: self.path.to_path_buf(),
                field: format!("{field}.attributes.POSITION"),
                expected: "a POSITION accessor".into(),
                found: "none".into(),
            })?;
        let reader = primitive.reader(|b| self.buffers.get(b.index()).map(|d| d.as_slice()));
        let positions: Vec<[f32; 3]> = match draco.and_then(|d| d.stream("POSITION")) {
            Some((id, d)) => {
                self.check_accessor_type(&pos_acc, "POSITION", Dimensions::Vec3, &[DataType::F32])?;
                let p = d.floats::<3>(self.path, &draco_field(field, "POSITION"), id)?;
                if p.len() != pos_acc.count() {
                    // Not an error: see `read_gltf` (decoders may split vertices differently).
                    tracing::warn!(
                        file = %self.path.display(),
                        "{field}: the Draco stream decodes to {} vertices, accessors[{}] (POSITION) says {}; using the decoded data",
                        p.len(),
                        pos_acc.index(),
                        pos_acc.count()
                    );
                }
                p
            }
            None => {
                self.check_accessor(&pos_acc, "POSITION", Dimensions::Vec3, &QUANTIZED_POSITION)?;
                let p: Vec<[f32; 3]> =
                    if pos_acc.data_type() == DataType::F32 && !Self::needs_own_read(&pos_acc) {
                        reader
                            .read_positions()
                            .map(|it| it.collect())
                            .unwrap_or_default()
                    } else {
                        self.read_floats(&pos_acc)?
                    };
                self.check_count(&pos_acc, p.len())?;
                p
            }
        };
        if let Some((i, v)) = positions
            .iter()
            .enumerate()
            .find(|(_, v)| !v.iter().all(|c| c.is_finite()))
        {
            return Err(Error::Invalid {
                path: self.path.to_path_buf(),
                field: format!(
                    "accessors[{}] (POSITION of {field}), element {i}",
                    pos_acc.index()
                ),
                expected: "finite coordinates".into(),
                found: format!("{v:?}"),
            });
        }
        Ok(positions)
    }

    /// NORMAL of `primitive`, `None` when it has none or it is non-finite or mis-sized
    /// (warned; normals are generated later). Quantized normals are renormalised.
    fn read_normals(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        draco: Option<&Draco>,
        vertex_count: usize,
    ) -> Result<Option<Vec<[f32; 3]>>> {
        let reader = primitive.reader(|b| self.buffers.get(b.index()).map(|d| d.as_slice()));
        let normals = match primitive.get(&Semantic::Normals) {
            Some(acc) => {
                let n: Vec<[f32; 3]> = match draco.and_then(|d| d.stream("NORMAL")) {
                    Some((id, d)) => {
                        self.check_accessor_type(
                            &acc,
                            "NORMAL",
                            Dimensions::Vec3,
                            &[DataType::F32],
                        )?;
                        d.floats::<3>(self.path, &draco_field(field, "NORMAL"), id)?
                    }
                    None => {
                        self.check_accessor(&acc, "NORMAL", Dimensions::Vec3, &QUANTIZED_NORMAL)?;
                        let n: Vec<[f32; 3]> =
                            if acc.data_type() == DataType::F32 && !Self::needs_own_read(&acc) {
                                reader
                                    .read_normals()
                                    .map(|it| it.collect())
                                    .unwrap_or_default()
                            } else {
                                // Quantized normals need not be unit length after rounding.
                                self.read_floats(&acc)?
                                    .into_iter()
                                    .map(unit_or_zero)
                                    .collect()
                            };
                        self.check_count(&acc, n.len())?;
                        n
                    }
                };
                // A Draco primitive's accessors have no bufferView by design: its normals came
                // from the compressed stream above.
                let from_draco = draco.and_then(|d| d.stream("NORMAL")).is_some();
                if !from_draco && acc.view().is_none() && acc.sparse().is_none() {
                    // Valid glTF (§3.6.2.1: all zeros), but a zero normal lights nothing.
                    tracing::warn!(
                        file = %self.path.display(),
                        "{field}: NORMAL (accessors[{}]) has no bufferView (all zeros); normals are generated instead",
                        acc.index()
                    );
                    None
                } else if n.len() != vertex_count
                    || n.iter().any(|v| !v.iter().all(|c| c.is_finite()))
                {
                    tracing::warn!(
                        file = %self.path.display(),
                        "{field}: NORMAL (accessors[{}]) is non-finite or mis-sized; normals are generated instead",
                        acc.index()
                    );
                    None
                } else {
                    Some(n)
                }
            }
            None => None,
        };
        Ok(normals)
    }

    /// TEXCOORD_`set` of `primitive`, `None` when it has none or it is non-finite or mis-sized
    /// (warned; read as (0, 0)).
    fn read_uv_set(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        draco: Option<&Draco>,
        set: u32,
        vertex_count: usize,
    ) -> Result<Option<Vec<[f32; 2]>>> {
        let reader = primitive.reader(|b| self.buffers.get(b.index()).map(|d| d.as_slice()));
        let Some(acc) = primitive.get(&Semantic::TexCoords(set)) else {
            return Ok(None);
        };
        let semantic = format!("TEXCOORD_{set}");
        let t: Vec<[f32; 2]> = match draco.and_then(|d| d.stream(&semantic)) {
            Some((id, d)) => {
                self.check_accessor_type(&acc, "TEXCOORD", Dimensions::Vec2, &QUANTIZED_TEXCOORD)?;
                d.tex_coords(self.path, &draco_field(field, &semantic), id)?
            }
            None => {
                self.check_accessor(&acc, "TEXCOORD", Dimensions::Vec2, &QUANTIZED_TEXCOORD)?;
                let t: Vec<[f32; 2]> =
                    if acc.data_type() == DataType::F32 && !Self::needs_own_read(&acc) {
                        reader
                            .read_tex_coords(set)
                            .map(|it| it.into_f32().collect())
                            .unwrap_or_default()
                    } else {
                        self.read_floats(&acc)?
                    };
                self.check_count(&acc, t.len())?;
                t
            }
        };
        if t.len() != vertex_count || t.iter().any(|v| !v.iter().all(|c| c.is_finite())) {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: {semantic} (accessors[{}]) is non-finite or mis-sized; read as (0, 0)",
                acc.index()
            );
            return Ok(None);
        }
        Ok(Some(t))
    }

    /// `COLOR_0` of `primitive` as linear RGBA (VEC3 gets alpha 1; normalized integers scaled to
    /// 0–1, glTF §3.7.2.1); `None` when absent. Draco-compressed colours are not decoded (warned).
    fn read_colors(
        &self,
        primitive: &gltf::Primitive<'a>,
        field: &str,
        vertex_count: usize,
        is_draco: bool,
    ) -> Result<Option<Vec<[f32; 4]>>> {
        let Some(acc) = primitive.get(&Semantic::Colors(0)) else {
            return Ok(None);
        };
        if is_draco {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: COLOR_0 of a Draco-compressed primitive is not decoded; vertex colours dropped"
            );
            return Ok(None);
        }
        let dims = if acc.dimensions() == Dimensions::Vec3 {
            Dimensions::Vec3
        } else {
            Dimensions::Vec4
        };
        self.check_accessor(
            &acc,
            "COLOR_0",
            dims,
            &[DataType::F32, DataType::U8, DataType::U16],
        )?;
        let c: Vec<[f32; 4]> = if Self::needs_own_read(&acc) {
            self.own_colors(&acc)?
        } else {
            let reader = primitive.reader(|b| self.buffers.get(b.index()).map(|d| d.as_slice()));
            reader
                .read_colors(0)
                .map(|it| it.into_rgba_f32().collect())
                .unwrap_or_default()
        };
        self.check_count(&acc, c.len())?;
        if c.len() != vertex_count || c.iter().any(|v| !v.iter().all(|x| x.is_finite())) {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: COLOR_0 (accessors[{}]) is non-finite or mis-sized; read as white",
                acc.index()
            );
            return Ok(None);
        }
        Ok(Some(c))
    }
}

impl Builder<'_> {
    /// COLOR_0 without bufferView (zeros) or sparse, as RGBA (alpha 1 for RGB colours).
    fn own_colors(&self, acc: &gltf::Accessor<'_>) -> Result<Vec<[f32; 4]>> {
        if acc.dimensions() == Dimensions::Vec4 {
            return self.read_floats::<4>(acc);
        }
        let rgb = self.read_floats::<3>(acc)?;
        Ok(rgb.into_iter().map(|[r, g, b]| [r, g, b, 1.0]).collect())
    }
}

/// `v` scaled to unit length; zero stays zero (and is then replaced like any unusable normal).
fn unit_or_zero(v: [f32; 3]) -> [f32; 3] {
    let len = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    if len > 0.0 { v.map(|c| c / len) } else { v }
}
