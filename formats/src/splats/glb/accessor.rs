//! Decoding of the accessors behind `KHR_gaussian_splatting` attributes, in every component
//! type the specification allows.
//!
//! Sources: `KHR_gaussian_splatting` README, section "Attributes" (the table of accessor and
//! component types per semantic: ROTATION float or normalized signed byte/short; SCALE float,
//! signed byte/short, normalized or not; OPACITY float or normalized unsigned byte/short;
//! `SH_DEGREE_l_COEF_n` float only); `KHR_mesh_quantization` (POSITION in any 8/16-bit type,
//! normalized or not, dequantized by the node transform, which [`super::node_transforms`]
//! applies to every splat primitive); glTF 2.0 §3.11 "Animations" → "normalized integers" (the
//! formulas of [`Component::decode`]) and §3.6.2.4 (element stride and alignment).

use std::path::Path;

use serde_json::Value;

use crate::{Error, Result};

/// One glTF accessor `componentType` with its `normalized` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Component {
    /// `accessor.componentType` (5120 i8, 5121 u8, 5122 i16, 5123 u16, 5126 f32).
    kind: u32,
    /// `accessor.normalized`.
    normalized: bool,
}

const F32: Component = Component::new(5126, false);
const I8: Component = Component::new(5120, false);
const I8_NORM: Component = Component::new(5120, true);
const U8: Component = Component::new(5121, false);
const U8_NORM: Component = Component::new(5121, true);
const I16: Component = Component::new(5122, false);
const I16_NORM: Component = Component::new(5122, true);
const U16: Component = Component::new(5123, false);
const U16_NORM: Component = Component::new(5123, true);

impl Component {
    const fn new(kind: u32, normalized: bool) -> Self {
        Self { kind, normalized }
    }

    /// Bytes per component, `None` for a componentType glTF does not define for attributes.
    fn size(self) -> Option<usize> {
        match self.kind {
            5120 | 5121 => Some(1),
            5122 | 5123 => Some(2),
            5126 => Some(4),
            _ => None,
        }
    }

    /// Value of the component at the start of `b` (little-endian). Normalized integers follow
    /// glTF 2.0 §3.11: i8 → max(c / 127, −1), u8 → c / 255, i16 → max(c / 32767, −1),
    /// u16 → c / 65535; unnormalized integers are their value (KHR_mesh_quantization).
    fn decode(self, b: &[u8]) -> f32 {
        let (value, max) = match self.kind {
            5120 => (f32::from(b[0] as i8), 127.0),
            5121 => (f32::from(b[0]), 255.0),
            5122 => (f32::from(i16::from_le_bytes([b[0], b[1]])), 32767.0),
            5123 => (f32::from(u16::from_le_bytes([b[0], b[1]])), 65535.0),
            _ => return f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        };
        if self.normalized {
            (value / max).max(-1.0)
        } else {
            value
        }
    }

    /// How a message names the type: "normalized signed short (5122)".
    fn describe(self) -> String {
        let name = match self.kind {
            5120 => "signed byte",
            5121 => "unsigned byte",
            5122 => "signed short",
            5123 => "unsigned short",
            5126 => "float",
            _ => "unknown componentType",
        };
        let norm = if self.normalized && self.kind != 5126 {
            "normalized "
        } else {
            ""
        };
        format!("{norm}{name} ({})", self.kind)
    }
}

/// The component types `semantic` may use, from the extension's Attributes table
/// (POSITION: glTF core float plus every type `KHR_mesh_quantization` adds).
fn allowed(semantic: &str) -> &'static [Component] {
    let name = semantic.rsplit(':').next().unwrap_or(semantic);
    match name {
        "POSITION" => &[F32, I8, I8_NORM, U8, U8_NORM, I16, I16_NORM, U16, U16_NORM],
        "ROTATION" => &[F32, I8_NORM, I16_NORM],
        "SCALE" => &[F32, I8, I8_NORM, I16, I16_NORM],
        "OPACITY" => &[F32, U8_NORM, U16_NORM],
        _ => &[F32],
    }
}

/// Where an accessor's elements lie in the BIN chunk.
struct Layout {
    start: usize,
    stride: usize,
    count: usize,
}

/// Read attribute `semantic` from accessor `index`: `count` × `width` values as f32, decoded
/// from any component type the specification allows for that semantic ([`allowed`]). An
/// accessor without `bufferView` reads as zeros (glTF 2.0 §3.6.2.1).
///
/// # Errors
/// [`Error::Unsupported`] naming the attribute and the accessor when its type or component
/// type is not one the specification allows for the semantic, or its buffer is external;
/// [`Error::Corrupt`] naming both when its elements run past the bufferView or BIN chunk.
pub(super) fn read_attribute(
    doc: &Value,
    bin: &[u8],
    semantic: &str,
    index: u64,
    width: usize,
    path: &Path,
) -> Result<Vec<f32>> {
    let acc = &doc["accessors"][index as usize];
    let field = format!("attributes.{semantic} (accessors[{index}])");
    let component = check_type(acc, semantic, width, &field, path)?;
    let count = acc["count"].as_u64().unwrap_or(0) as usize;
    let Some(view_index) = acc["bufferView"].as_u64() else {
        // Valid, but all zeros is rarely meant: every splat at the origin, or transparent.
        tracing::warn!(
            file = %path.display(),
            "{field} has no bufferView: every element reads as zero (glTF 2.0 §3.6.2.1){}",
            if semantic.ends_with("OPACITY") {
                ", so every splat is transparent and nothing will be visible"
            } else {
                ""
            }
        );
        return Ok(vec![0.0; count * width]);
    };
    let layout = locate(doc, bin, acc, view_index, component, width, &field, path)?;
    let size = component.size().unwrap_or(4);
    let mut out = Vec::with_capacity(count * width);
    for i in 0..layout.count {
        let at = layout.start + i * layout.stride;
        out.extend((0..width).map(|c| component.decode(&bin[at + c * size..])));
    }
    Ok(out)
}

/// The accessor's component type, when its `type` and `componentType` are allowed for
/// `semantic`; else an error naming the attribute, the accessor and what is allowed.
fn check_type(
    acc: &Value,
    semantic: &str,
    width: usize,
    field: &str,
    path: &Path,
) -> Result<Component> {
    let kind = acc["type"].as_str().unwrap_or("?");
    let expected_kind = ["SCALAR", "VEC2", "VEC3", "VEC4"][width - 1];
    let component = Component::new(
        acc["componentType"].as_u64().unwrap_or(0) as u32,
        acc["normalized"].as_bool().unwrap_or(false),
    );
    let allowed = allowed(semantic);
    if kind == expected_kind && allowed.contains(&component) {
        return Ok(component);
    }
    let names: Vec<String> = allowed.iter().map(|c| c.describe()).collect();
    Err(Error::Unsupported {
        path: path.to_path_buf(),
        field: field.to_string(),
        found: format!("type {kind} of {}", component.describe()),
        supported: format!(
            "{semantic} as {expected_kind} of {} (KHR_gaussian_splatting, Attributes; \
             KHR_mesh_quantization for POSITION)",
            names.join(", ")
        ),
    })
}

/// Start, stride and count of the accessor's elements, checked to lie inside its bufferView
/// and the BIN chunk. Without `byteStride` elements are tightly packed (glTF 2.0 §3.6.2.4).
#[allow(clippy::too_many_arguments)]
fn locate(
    doc: &Value,
    bin: &[u8],
    acc: &Value,
    view_index: u64,
    component: Component,
    width: usize,
    field: &str,
    path: &Path,
) -> Result<Layout> {
    let view = &doc["bufferViews"][view_index as usize];
    if view["buffer"].as_u64() != Some(0) || doc["buffers"][0].get("uri").is_some() {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            field: format!("{field} → bufferViews[{view_index}]"),
            found: "an external buffer".into(),
            supported: "buffer 0 = the GLB BIN chunk".into(),
        });
    }
    let element = width * component.size().unwrap_or(4);
    let count = acc["count"].as_u64().unwrap_or(0) as usize;
    let view_start = view["byteOffset"].as_u64().unwrap_or(0) as usize;
    let start = view_start + acc["byteOffset"].as_u64().unwrap_or(0) as usize;
    let stride = view["byteStride"].as_u64().map_or(element, |s| s as usize);
    let view_end = view_start + view["byteLength"].as_u64().unwrap_or(0) as usize;
    let end = match count {
        0 => start,
        _ => start + stride * (count - 1) + element,
    };
    if stride < element || end > view_end || end > bin.len() {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            location: field.to_string(),
            what: format!(
                "{count} elements of {element} bytes at byte {start} (stride {stride}) run past \
                 bufferViews[{view_index}] or the BIN chunk"
            ),
        });
    }
    Ok(Layout {
        start,
        stride,
        count,
    })
}

#[cfg(test)]
mod tests {
    //! Quantized twins: the same splats written once with float accessors and once with the
    //! integer types the specification allows, read back within one quantisation step.

    use super::super::{SplatGlbOptions, decode, frame_glb, parse_glb};
    use super::*;
    use crate::splats::GaussianSplats;
    use crate::splats::test_data::random_splats;
    use serde_json::json;

    const EXT: &str = "KHR_gaussian_splatting";

    fn float_glb(splats: &GaussianSplats) -> Vec<u8> {
        let options = SplatGlbOptions {
            spz: None,
            ..SplatGlbOptions::default()
        };
        super::super::encode(splats, &options).unwrap()
    }

    /// Integer code of `v` in `component`: normalized types scale by the type's maximum,
    /// unnormalized ones round `v` itself (already in quantized units).
    fn quantize(component: Component, v: f32) -> Vec<u8> {
        let max = [
            (5120, 127.0),
            (5121, 255.0),
            (5122, 32767.0),
            (5123, 65535.0),
        ]
        .iter()
        .find(|(k, _)| *k == component.kind)
        .map_or(1.0, |(_, m)| *m);
        let q = if component.normalized {
            (v * max).round()
        } else {
            v.round()
        };
        match component.kind {
            5120 => vec![q as i8 as u8],
            5121 => vec![q as u8],
            5122 => (q as i16).to_le_bytes().to_vec(),
            5123 => (q as u16).to_le_bytes().to_vec(),
            _ => v.to_le_bytes().to_vec(),
        }
    }

    /// Replace attribute `semantic` by a new accessor holding `values` (`width` per element)
    /// in `component`, each element padded to 4 bytes as glTF 2.0 §3.6.2.4 requires.
    fn requantize(
        doc: &mut Value,
        bin: &mut Vec<u8>,
        semantic: &str,
        component: Component,
        width: usize,
        values: &[f32],
    ) {
        let element = width * component.size().unwrap();
        let stride = element.div_ceil(4) * 4;
        while !bin.len().is_multiple_of(4) {
            bin.push(0);
        }
        let start = bin.len();
        for e in values.chunks_exact(width) {
            e.iter().for_each(|&v| bin.extend(quantize(component, v)));
            bin.extend(vec![0u8; stride - element]);
        }
        let views = doc["bufferViews"].as_array_mut().unwrap();
        views.push(json!({ "buffer": 0, "byteOffset": start,
            "byteLength": bin.len() - start, "byteStride": stride }));
        let view = views.len() - 1;
        let kind = ["SCALAR", "VEC2", "VEC3", "VEC4"][width - 1];
        let accessors = doc["accessors"].as_array_mut().unwrap();
        accessors.push(json!({ "bufferView": view, "componentType": component.kind,
            "normalized": component.normalized, "count": values.len() / width, "type": kind }));
        let index = accessors.len() - 1;
        doc["meshes"][0]["primitives"][0]["attributes"][semantic] = json!(index);
        doc["buffers"][0]["byteLength"] = json!(bin.len());
    }

    /// The float GLB of `splats` with the attributes in `edits` requantized.
    fn quantized_glb(
        splats: &GaussianSplats,
        edits: &[(&str, Component, usize, Vec<f32>)],
        node_scale: Option<f32>,
    ) -> Vec<u8> {
        let glb = float_glb(splats);
        let (mut doc, bin) = parse_glb(&glb, Path::new("t")).unwrap();
        let mut bin = bin.to_vec();
        for (semantic, component, width, values) in edits {
            requantize(&mut doc, &mut bin, semantic, *component, *width, values);
        }
        if let Some(s) = node_scale {
            doc["nodes"][0]["scale"] = json!([s, s, s]);
        }
        frame_glb(&serde_json::to_vec(&doc).unwrap(), &bin)
    }

    /// Rotations as the file stores them: xyzw.
    fn xyzw(s: &GaussianSplats) -> Vec<f32> {
        s.rotations
            .chunks_exact(4)
            .flat_map(|q| [q[1], q[2], q[3], q[0]])
            .collect()
    }

    fn linear_scales(s: &GaussianSplats) -> Vec<f32> {
        s.log_scales.iter().map(|v| v.exp()).collect()
    }

    fn opacities(s: &GaussianSplats) -> Vec<f32> {
        s.logit_opacities
            .iter()
            .map(|l| 1.0 / (1.0 + (-l).exp()))
            .collect()
    }

    fn assert_within(found: &[f32], expected: &[f32], step: f32, what: &str) {
        assert_eq!(found.len(), expected.len(), "{what}: length");
        for (i, (f, e)) in found.iter().zip(expected).enumerate() {
            // One quantisation step, plus f32 rounding of the float twin.
            let tolerance = step + 1e-5 * e.abs().max(1.0);
            assert!(
                (f - e).abs() <= tolerance,
                "{what}[{i}]: {f} vs {e} (step {step})"
            );
        }
    }

    #[test]
    fn int16_positions_under_a_node_scale_read_within_one_step_of_the_float_twin() {
        let splats = random_splats(40, 1, 2.0, 7);
        let twin = decode(&float_glb(&splats)).unwrap().splats;
        // KHR_mesh_quantization: integer positions, the node scale dequantizes. Scales live in
        // the node's frame too, so they are stored divided by the node scale (as i16 counts).
        let s = 2.0 / 32767.0;
        let q_means: Vec<f32> = splats.means.iter().map(|m| m / s).collect();
        let q_scales: Vec<f32> = linear_scales(&splats).iter().map(|v| v / s).collect();
        let glb = quantized_glb(
            &splats,
            &[
                ("POSITION", I16, 3, q_means),
                (&format!("{EXT}:SCALE"), I16, 3, q_scales),
                (&format!("{EXT}:ROTATION"), I16_NORM, 4, xyzw(&splats)),
                (&format!("{EXT}:OPACITY"), U16_NORM, 1, opacities(&splats)),
            ],
            Some(s),
        );
        let read = decode(&glb).unwrap().splats;
        assert_within(&read.means, &twin.means, s, "POSITION");
        assert_within(&linear_scales(&read), &linear_scales(&twin), s, "SCALE");
        assert_within(&read.rotations, &twin.rotations, 1.0 / 32767.0, "ROTATION");
        assert_within(
            &opacities(&read),
            &opacities(&twin),
            1.0 / 65535.0,
            "OPACITY",
        );
        assert_eq!(read.sh_coeffs, twin.sh_coeffs, "SH stays float");
    }

    #[test]
    fn int8_normalized_attributes_read_within_one_step_of_the_float_twin() {
        let mut splats = random_splats(40, 0, 1.0, 11);
        // Scales of at least 2.5 steps, so none rounds to a zero scale (a value-domain matter,
        // not an accessor one).
        splats
            .log_scales
            .iter_mut()
            .for_each(|l| *l = l.max(0.02f32.ln()));
        let twin = decode(&float_glb(&splats)).unwrap().splats;
        let glb = quantized_glb(
            &splats,
            &[
                ("POSITION", I16_NORM, 3, splats.means.clone()),
                (&format!("{EXT}:SCALE"), I8_NORM, 3, linear_scales(&splats)),
                (&format!("{EXT}:ROTATION"), I8_NORM, 4, xyzw(&splats)),
                (&format!("{EXT}:OPACITY"), U8_NORM, 1, opacities(&splats)),
            ],
            None,
        );
        let read = decode(&glb).unwrap().splats;
        assert_within(&read.means, &twin.means, 1.0 / 32767.0, "POSITION");
        assert_within(
            &linear_scales(&read),
            &linear_scales(&twin),
            1.0 / 127.0,
            "SCALE",
        );
        assert_within(&read.rotations, &twin.rotations, 1.0 / 127.0, "ROTATION");
        assert_within(&opacities(&read), &opacities(&twin), 1.0 / 255.0, "OPACITY");
    }

    #[test]
    fn normalized_integers_decode_by_the_gltf_formulas() {
        assert_eq!(I8_NORM.decode(&[0x80]), -1.0, "i8 −128 clamps to −1");
        assert_eq!(I8_NORM.decode(&[127]), 1.0);
        assert_eq!(U8_NORM.decode(&[255]), 1.0);
        assert_eq!(I16_NORM.decode(&i16::MIN.to_le_bytes()), -1.0);
        assert_eq!(
            I16_NORM.decode(&(-16384i16).to_le_bytes()),
            -16384.0 / 32767.0
        );
        assert_eq!(U16_NORM.decode(&65535u16.to_le_bytes()), 1.0);
        assert_eq!(I16.decode(&(-300i16).to_le_bytes()), -300.0);
        assert_eq!(U8.decode(&[200]), 200.0);
    }

    #[test]
    fn a_type_the_spec_does_not_allow_is_refused_naming_attribute_and_accessor() {
        let splats = random_splats(4, 1, 1.0, 3);
        let sh = format!("{EXT}:SH_DEGREE_1_COEF_0");
        let values = vec![0.1; 12];
        let glb = quantized_glb(&splats, &[(&sh, I8_NORM, 3, values)], None);
        let e = decode(&glb).unwrap_err().to_string();
        assert!(e.contains(&format!("attributes.{sh} (accessors[")), "{e}");
        assert!(e.contains("normalized signed byte (5120)"), "{e}");
        assert!(e.contains("float (5126)"), "{e}");
        // ROTATION may be normalized signed, never unsigned.
        let rotation = format!("{EXT}:ROTATION");
        let glb = quantized_glb(&splats, &[(&rotation, U8_NORM, 4, xyzw(&splats))], None);
        let e = decode(&glb).unwrap_err().to_string();
        assert!(
            e.contains(&format!("attributes.{rotation} (accessors[")),
            "{e}"
        );
        assert!(e.contains("normalized unsigned byte (5121)"), "{e}");
        // An accessor whose elements run past its bufferView is named with its attribute.
        let glb = quantized_glb(&splats, &[(&rotation, I16_NORM, 4, xyzw(&splats))], None);
        let (mut doc, bin) = parse_glb(&glb, Path::new("t")).unwrap();
        let last = doc["accessors"].as_array().unwrap().len() - 1;
        doc["accessors"][last]["count"] = json!(400);
        let glb = frame_glb(&serde_json::to_vec(&doc).unwrap(), bin);
        let e = decode(&glb).unwrap_err().to_string();
        assert!(
            e.contains(&format!("attributes.{rotation} (accessors[{last}])")),
            "{e}"
        );
    }
}
