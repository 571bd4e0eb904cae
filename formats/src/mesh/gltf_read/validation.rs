//! Checks around the `gltf` crate's parse and schema validation, and its errors in Kiln's
//! words: the required extensions this reader implements itself (which the crate would
//! reject), a POSITION index the crate's validation would index unchecked, the schema errors
//! tolerated (missing POSITION bounds, accessors without a buffer view), and every other
//! crate error turned into an [`Error`] naming the file and the field.
//!
//! Source: glTF 2.0 §5 (schema: accessor `min`/`max` required for POSITION) and
//! §3.6.2.1 (an accessor without `bufferView` holds zeros), `KHR_draco_mesh_compression` (its
//! accessors carry no `bufferView`).

use std::path::Path;

use gltf::Semantic;

use crate::mesh::{KHR_MESH_QUANTIZATION, draco, meshopt_read};
use crate::{Error, Result};

/// Required extensions this reader implements, though the `gltf` crate's validation does not
/// (it rejects every required extension it does not implement itself).
pub(super) const READ_HERE: [&str; 3] = [
    draco::EXTENSION,
    meshopt_read::EXTENSION,
    KHR_MESH_QUANTIZATION,
];

/// Reject a POSITION attribute that names a missing accessor before validation: gltf-json 1.4.1's
/// primitive validation hook indexes `root.accessors[POSITION]` unchecked and panics (found by
/// `mutated_glb_bytes_never_panic`). Runs on the parsed `Root` itself, because serde skips unknown
/// keys leniently (e.g. invalid UTF-8 inside them), so a separate `serde_json::Value` parse can
/// disagree with what the crate sees.
pub(super) fn check_position_accessor_indices(path: &Path, root: &gltf::json::Root) -> Result<()> {
    let positions = gltf::json::validation::Checked::Valid(Semantic::Positions);
    for (m, mesh) in root.meshes.iter().enumerate() {
        for (p, primitive) in mesh.primitives.iter().enumerate() {
            if let Some(index) = primitive.attributes.get(&positions)
                && index.value() >= root.accessors.len()
            {
                return Err(Error::Invalid {
                    path: path.to_path_buf(),
                    field: format!("meshes[{m}].primitives[{p}].attributes.POSITION"),
                    expected: format!("an accessor index < {}", root.accessors.len()),
                    found: index.value().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Is this schema error "accessors[i].bufferView is missing"? The `gltf` crate reports it for
/// every accessor without `bufferView` or `sparse`, but glTF 2.0 §3.6.2.1 allows one: its
/// elements are zeros (and `KHR_draco_mesh_compression` forbids a view when only compressed data
/// is stored). Such accessors are read as zeros when used and ignored when not.
pub(super) fn is_accessor_without_view(field: &str, e: &gltf::json::validation::Error) -> bool {
    matches!(e, gltf::json::validation::Error::Missing)
        && field
            .strip_prefix("accessors[")
            .and_then(|rest| rest.strip_suffix("].bufferView"))
            .is_some_and(|i| i.parse::<usize>().is_ok())
}

/// Schema errors the reader tolerates: accessors without a view, and missing POSITION bounds.
pub(super) fn is_tolerated(field: &str, e: &gltf::json::validation::Error) -> bool {
    is_accessor_without_view(field, e) || is_missing_position_bounds(field, e)
}

/// Is this schema error "POSITION accessor lacks min or max"?
pub(super) fn is_missing_position_bounds(field: &str, e: &gltf::json::validation::Error) -> bool {
    matches!(e, gltf::json::validation::Error::Missing)
        && field.contains("[\"POSITION\"]")
        && (field.ends_with(".min") || field.ends_with(".max"))
}

/// Turn a `gltf` crate error from parsing into ours, with the file and field named.
pub(super) fn convert_gltf_error(path: &Path, required: &[String], e: gltf::Error) -> Error {
    match e {
        gltf::Error::Validation(errors) => {
            // An unsupported required extension is actionable on its own: name it.
            let unsupported = errors.iter().find(|(p, err)| {
                p.as_str().starts_with("extensionsRequired")
                    && matches!(err, gltf::json::validation::Error::Unsupported)
            });
            if let Some((field, _)) = unsupported {
                let names = required.join(", ");
                return Error::Unsupported {
                    path: path.to_path_buf(),
                    field: field.as_str().to_string(),
                    found: format!("required extension(s) {names}"),
                    supported: format!(
                        "glTF 2.0 core and {} (decode other extensions first, e.g. with glTF-Transform)",
                        READ_HERE.join(", ")
                    ),
                };
            }
            // Name a real fault, not a tolerated one listed before it (an unused accessor
            // without bufferView is valid glTF).
            let errors: Vec<_> = errors
                .into_iter()
                .filter(|(p, e)| !is_tolerated(p.as_str(), e))
                .collect();
            let (field, first) = errors
                .first()
                .map(|(p, e)| (p.as_str().to_string(), e.to_string()))
                .unwrap_or_default();
            Error::Invalid {
                path: path.to_path_buf(),
                field,
                expected: "a value valid under the glTF 2.0 schema".into(),
                found: format!("{first} ({} schema error(s) in total)", errors.len()),
            }
        }
        gltf::Error::Deserialize(json) => Error::Corrupt {
            path: path.to_path_buf(),
            location: format!("JSON line {} column {}", json.line(), json.column()),
            what: format!("invalid glTF JSON: {json}"),
        },
        gltf::Error::Binary(bin) => Error::Corrupt {
            path: path.to_path_buf(),
            location: "GLB header/chunks".into(),
            what: glb_fault(&bin),
        },
        other => Error::Corrupt {
            path: path.to_path_buf(),
            location: "file".into(),
            what: other.to_string(),
        },
    }
}

/// What is wrong with a GLB's container, in words (truncation is the usual cause: a download or
/// copy that stopped early).
fn glb_fault(e: &gltf::binary::Error) -> String {
    use gltf::binary::Error as Glb;
    match e {
        Glb::Length {
            length,
            length_read,
        } => format!(
            "the GLB header says the file is {length} bytes but it holds {length_read}: it is \
             truncated; download or export it again"
        ),
        Glb::ChunkLength {
            ty,
            length,
            length_read,
        } => format!(
            "the GLB's {ty:?} chunk says {length} bytes but {length_read} remain: the file is \
             truncated; download or export it again"
        ),
        Glb::Magic(m) => format!(
            "the file starts with {:?}, not a GLB's \"glTF\"",
            String::from_utf8_lossy(m)
        ),
        Glb::Version(v) => format!("GLB version {v}; only version 2 (glTF 2.0) is read"),
        other => format!("invalid GLB: {other}"),
    }
}
