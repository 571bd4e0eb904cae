//! Write a [`Mesh`] as one self-contained GLB (glTF 2.0 binary): one node, one mesh, one
//! triangle primitive, one PBR material whose base-colour image is embedded in the BIN chunk.
//!
//! Source: glTF 2.0 specification §4.4 (GLB file format: 12-byte header, JSON chunk padded with
//! spaces, BIN chunk padded with zeros, 4-byte alignment), §3.6.2 (accessor alignment, `min`/`max`
//! required on POSITION), §3.7.2.1 (NORMAL must be unit length), §3.8 (materials). The JSON is
//! built with `serde_json` and framed by `gltf::binary::Glb`; it is checked by the Khronos
//! glTF-Validator in tests (`.ci/validate_gltf.mjs`).

use std::borrow::Cow;

use serde_json::{Value, json};

use super::Mesh;
use crate::{Error, Result};

/// glTF `bufferView.target` for vertex attributes (ARRAY_BUFFER).
const TARGET_ARRAY_BUFFER: u32 = 34962;
/// glTF `bufferView.target` for indices (ELEMENT_ARRAY_BUFFER).
const TARGET_ELEMENT_ARRAY_BUFFER: u32 = 34963;
/// glTF component types.
const FLOAT: u32 = 5126;
const UNSIGNED_SHORT: u32 = 5123;
const UNSIGNED_INT: u32 = 5125;

/// Encode `mesh` as GLB bytes.
///
/// Layout of the BIN chunk (each part 4-byte aligned): POSITION `[V, 3]` f32 (with exact `min` /
/// `max`), NORMAL `[V, 3]` f32 if present, TEXCOORD_0 `[V, 2]` f32 if present, indices `[F, 3]` as
/// u16 when V ≤ 65,536 else u32, then the base-colour image if present (bufferView + mimeType). The
/// material is metallic 0, roughness 1 with the mesh's base-colour factor and texture (the texture
/// is written only when the mesh has UVs). Normals that are not unit length are renormalised; zero
/// or non-finite normals become +Y. Unused vertices are kept (callers compact first).
///
/// Not guaranteed: byte-identical output across kiln versions (the generator string changes).
///
/// # Errors
/// * [`Error::Empty`] — no triangles.
/// * [`Error::Invalid`] — an index ≥ V, a non-finite position, `indices.len()` not a multiple of 3,
///   or `normals` / `uvs` whose length differs from V. The `path` is `<in-memory mesh>`.
///
/// # Panics
/// Never.
pub fn write_glb(mesh: &Mesh) -> Result<Vec<u8>> {
    check_write_glb_inputs(mesh)?;
    let v = mesh.positions.len();
    let mut bin: Vec<u8> = Vec::new();
    let mut views: Vec<Value> = Vec::new();
    let mut accessors: Vec<Value> = Vec::new();
    let mut push_view = |bin: &mut Vec<u8>, bytes: &[u8], target: Option<u32>| -> usize {
        let offset = bin.len();
        bin.extend_from_slice(bytes);
        while !bin.len().is_multiple_of(4) {
            bin.push(0);
        }
        let mut view = json!({"buffer": 0, "byteOffset": offset, "byteLength": bytes.len()});
        if let Some(t) = target {
            view["target"] = json!(t);
        }
        views.push(view);
        views.len() - 1
    };

    let mut attributes = serde_json::Map::new();
    let mut min = [f32::INFINITY; 3];
    let mut max = [f32::NEG_INFINITY; 3];
    for p in &mesh.positions {
        for i in 0..3 {
            min[i] = min[i].min(p[i]);
            max[i] = max[i].max(p[i]);
        }
    }
    let view = push_view(
        &mut bin,
        bytemuck::cast_slice(&mesh.positions),
        Some(TARGET_ARRAY_BUFFER),
    );
    accessors.push(json!({"bufferView": view, "componentType": FLOAT, "count": v, "type": "VEC3", "min": min, "max": max}));
    attributes.insert("POSITION".into(), json!(accessors.len() - 1));

    if let Some(normals) = &mesh.normals {
        let unit: Vec<[f32; 3]> = normals.iter().map(unit_normal).collect();
        let view = push_view(
            &mut bin,
            bytemuck::cast_slice(&unit),
            Some(TARGET_ARRAY_BUFFER),
        );
        accessors
            .push(json!({"bufferView": view, "componentType": FLOAT, "count": v, "type": "VEC3"}));
        attributes.insert("NORMAL".into(), json!(accessors.len() - 1));
    }
    if let Some(uvs) = &mesh.uvs {
        let view = push_view(
            &mut bin,
            bytemuck::cast_slice(uvs),
            Some(TARGET_ARRAY_BUFFER),
        );
        accessors
            .push(json!({"bufferView": view, "componentType": FLOAT, "count": v, "type": "VEC2"}));
        attributes.insert("TEXCOORD_0".into(), json!(accessors.len() - 1));
    }

    let (index_bytes, component): (Vec<u8>, u32) = if v <= usize::from(u16::MAX) + 1 {
        let narrow: Vec<u16> = mesh.indices.iter().map(|&i| i as u16).collect();
        (bytemuck::cast_slice(&narrow).to_vec(), UNSIGNED_SHORT)
    } else {
        (bytemuck::cast_slice(&mesh.indices).to_vec(), UNSIGNED_INT)
    };
    let view = push_view(&mut bin, &index_bytes, Some(TARGET_ELEMENT_ARRAY_BUFFER));
    accessors.push(json!({"bufferView": view, "componentType": component, "count": mesh.indices.len(), "type": "SCALAR"}));
    let indices_accessor = accessors.len() - 1;

    let mut pbr = json!({"baseColorFactor": mesh.base_color_factor, "metallicFactor": 0.0, "roughnessFactor": 1.0});
    let mut root = json!({
        "asset": {"version": "2.0", "generator": concat!("kiln ", env!("CARGO_PKG_VERSION"))},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"primitives": [{"attributes": attributes, "indices": indices_accessor, "material": 0, "mode": 4}]}],
    });
    if let (Some(image), Some(_)) = (&mesh.base_color_texture, &mesh.uvs) {
        let view = push_view(&mut bin, &image.bytes, None);
        pbr["baseColorTexture"] = json!({"index": 0});
        root["images"] = json!([{"bufferView": view, "mimeType": image.mime}]);
        // LINEAR_MIPMAP_LINEAR / LINEAR, REPEAT: the glTF defaults made explicit.
        root["samplers"] =
            json!([{"magFilter": 9729, "minFilter": 9987, "wrapS": 10497, "wrapT": 10497}]);
        root["textures"] = json!([{"sampler": 0, "source": 0}]);
    }
    root["materials"] = json!([{"pbrMetallicRoughness": pbr, "doubleSided": false}]);
    root["bufferViews"] = json!(views);
    root["accessors"] = json!(accessors);
    root["buffers"] = json!([{"byteLength": bin.len()}]);

    let json_bytes = serde_json::to_vec(&root).map_err(|e| Error::Invalid {
        path: IN_MEMORY.into(),
        field: "glTF JSON".into(),
        expected: "serialisable JSON".into(),
        found: e.to_string(),
    })?;
    let glb = gltf::binary::Glb {
        header: gltf::binary::Header {
            magic: *b"glTF",
            version: 2,
            length: 0,
        },
        json: Cow::Owned(json_bytes),
        bin: Some(Cow::Owned(bin)),
    };
    glb.to_vec().map_err(|e| Error::Invalid {
        path: IN_MEMORY.into(),
        field: "GLB".into(),
        expected: "a GLB under 4 GiB".into(),
        found: e.to_string(),
    })
}

/// The `path` reported for errors about a mesh that is not (yet) a file.
const IN_MEMORY: &str = "<in-memory mesh>";

/// The checks [`write_glb`] runs before encoding anything.
fn check_write_glb_inputs(mesh: &Mesh) -> Result<()> {
    let v = mesh.positions.len();
    let invalid = |field: &str, expected: String, found: String| Error::Invalid {
        path: IN_MEMORY.into(),
        field: field.into(),
        expected,
        found,
    };
    if mesh.indices.is_empty() {
        return Err(Error::Empty {
            path: IN_MEMORY.into(),
            what: "triangles",
            reason: "the mesh has no indices".into(),
        });
    }
    if !mesh.indices.len().is_multiple_of(3) {
        return Err(invalid(
            "indices",
            "a multiple of 3".into(),
            format!("{} indices", mesh.indices.len()),
        ));
    }
    if let Some((i, &bad)) = mesh
        .indices
        .iter()
        .enumerate()
        .find(|&(_, &x)| x as usize >= v)
    {
        return Err(invalid(
            "indices",
            format!("indices < vertex count {v}"),
            format!("index {bad} at element {i}"),
        ));
    }
    if let Some(i) = mesh
        .positions
        .iter()
        .position(|p| !p.iter().all(|c| c.is_finite()))
    {
        return Err(invalid(
            "positions",
            "finite coordinates".into(),
            format!("{:?} at vertex {i}", mesh.positions[i]),
        ));
    }
    if let Some(n) = mesh.normals.as_ref().filter(|n| n.len() != v) {
        return Err(invalid(
            "normals",
            format!("{v} normals (one per vertex)"),
            format!("{}", n.len()),
        ));
    }
    if let Some(t) = mesh.uvs.as_ref().filter(|t| t.len() != v) {
        return Err(invalid(
            "uvs",
            format!("{v} UVs (one per vertex)"),
            format!("{}", t.len()),
        ));
    }
    if let Some(i) = mesh
        .uvs
        .iter()
        .flatten()
        .position(|t| !t.iter().all(|c| c.is_finite()))
    {
        return Err(invalid(
            "uvs",
            "finite texture coordinates".into(),
            format!("non-finite at vertex {i}"),
        ));
    }
    Ok(())
}

/// Unit-length normal (validator tolerance is 4e-4 on |n|−1); degenerate ones become +Y.
fn unit_normal(n: &[f32; 3]) -> [f32; 3] {
    let len = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
    if len.is_finite() && len > 1e-12 {
        [n[0] / len, n[1] / len, n[2] / len]
    } else {
        [0.0, 1.0, 0.0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{EmbeddedImage, read_gltf};
    use std::path::{Path, PathBuf};

    fn quad() -> Mesh {
        Mesh {
            positions: vec![
                [0.0, 0.0, 0.0],
                [1.0, 0.0, 0.0],
                [1.0, 0.0, -1.0],
                [0.0, 0.0, -1.0],
            ],
            normals: Some(vec![[0.0, 2.0, 0.0]; 4]),
            uvs: Some(vec![[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]),
            indices: vec![0, 1, 2, 0, 2, 3],
            base_color_texture: None,
            base_color_factor: [0.5, 0.5, 0.5, 1.0],
        }
    }

    /// Run `.ci/validate_gltf.mjs` on `files`; `None` (with the reason printed) when node or the
    /// validator module is missing locally. Under CI (`CI` set) a missing validator fails the test
    /// (STYLE.md rule 15); `.ci/run` installs it with `npm install -g gltf-validator`.
    pub(crate) fn khronos_validate(files: &[&Path]) -> Option<bool> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/validate_gltf.mjs");
        let skip = |why: String| {
            assert!(
                std::env::var_os("CI").is_none(),
                "Khronos glTF validation unavailable under CI: {why}"
            );
            eprintln!(
                "SKIPPED Khronos glTF validation: {why}; install nodejs + `npm install -g gltf-validator`"
            );
            None
        };
        match std::process::Command::new("node")
            .arg(&script)
            .args(files)
            .output()
        {
            Err(e) => skip(format!("cannot run node ({e})")),
            Ok(o) if o.status.code() == Some(2) => {
                skip(String::from_utf8_lossy(&o.stderr).into_owned())
            }
            Ok(o) => {
                eprintln!("{}", String::from_utf8_lossy(&o.stdout));
                eprintln!("{}", String::from_utf8_lossy(&o.stderr));
                Some(o.status.success())
            }
        }
    }

    fn round_trip(mesh: &Mesh, dir: &Path, name: &str) -> (Mesh, PathBuf) {
        let bytes = write_glb(mesh).unwrap();
        let p = dir.join(name);
        crate::atomic_write::write_atomic(&p, &bytes).unwrap();
        (read_gltf(&p).unwrap(), p)
    }

    #[test]
    fn written_glb_round_trips_geometry_and_material() {
        let dir = tempfile::tempdir().unwrap();
        let mut mesh = quad();
        mesh.base_color_texture = Some(EmbeddedImage {
            mime: "image/png".into(),
            bytes: tiny_png(),
        });
        let (back, p) = round_trip(&mesh, dir.path(), "quad.glb");
        assert_eq!(back.positions, mesh.positions);
        assert_eq!(back.indices, mesh.indices);
        assert_eq!(back.uvs, mesh.uvs);
        assert_eq!(back.normals, Some(vec![[0.0, 1.0, 0.0]; 4]));
        assert_eq!(back.base_color_factor, mesh.base_color_factor);
        assert_eq!(back.base_color_texture, mesh.base_color_texture);
        if let Some(ok) = khronos_validate(&[&p]) {
            assert!(
                ok,
                "Khronos glTF-Validator reported errors for {}",
                p.display()
            );
        }
    }

    #[test]
    fn avocado_rewritten_as_glb_validates_with_zero_errors() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/datasets/mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf");
        let mesh = read_gltf(&src).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (back, p) = round_trip(&mesh, dir.path(), "avocado.glb");
        assert_eq!(back.triangle_count(), mesh.triangle_count());
        assert_eq!(back.positions, mesh.positions);
        assert!(back.base_color_texture.is_some());
        if let Some(ok) = khronos_validate(&[&p]) {
            assert!(
                ok,
                "Khronos glTF-Validator reported errors for {}",
                p.display()
            );
        }
    }

    #[test]
    fn large_meshes_use_u32_indices() {
        let n = 70_000u32;
        let mesh = Mesh {
            positions: (0..n).map(|i| [i as f32, (i % 2) as f32, 0.0]).collect(),
            normals: None,
            uvs: None,
            indices: (0..n - 2).flat_map(|i| [i, i + 1, i + 2]).collect(),
            base_color_texture: None,
            base_color_factor: [1.0; 4],
        };
        let dir = tempfile::tempdir().unwrap();
        let (back, _) = round_trip(&mesh, dir.path(), "big.glb");
        assert_eq!(back.indices, mesh.indices);
    }

    #[test]
    fn write_rejects_out_of_range_index_and_nan() {
        let mut m = quad();
        m.indices[4] = 9;
        assert!(matches!(write_glb(&m), Err(Error::Invalid { .. })));
        let mut m = quad();
        m.positions[1][0] = f32::NAN;
        assert!(matches!(write_glb(&m), Err(Error::Invalid { .. })));
        let mut m = quad();
        m.indices.clear();
        assert!(matches!(write_glb(&m), Err(Error::Empty { .. })));
        let mut m = quad();
        m.uvs = Some(vec![[0.0; 2]; 3]);
        assert!(matches!(write_glb(&m), Err(Error::Invalid { .. })));
    }

    /// A valid 1×1 RGBA PNG, encoded with the `image` crate.
    fn tiny_png() -> Vec<u8> {
        let img = image::RgbaImage::from_pixel(1, 1, image::Rgba([200, 100, 50, 255]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        out.into_inner()
    }
}
