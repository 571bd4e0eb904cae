//! `tileset.json` of OGC 3D Tiles 1.1 as serde types.
//!
//! Source: OGC 3D Tiles 1.1 (OGC 22-025r4), §"Tileset JSON" and §"Bounding volumes";
//! `3DTILES_content_gltf` extension spec. Only the fields Kiln writes or checks are modelled;
//! unknown fields of a read tileset are kept in `extras`-free `serde_json::Value` maps where noted.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A whole tileset: `asset`, the root-level `geometricError` (metres), the `root` tile and the
/// extensions used/required (e.g. `3DTILES_content_gltf`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tileset {
    pub asset: Asset,
    /// Metres of error if the whole tileset is not rendered; must be ≥ `root.geometric_error`.
    pub geometric_error: f64,
    pub root: Tile,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions_used: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions_required: Vec<String>,
    /// Tileset-level extension objects, e.g. `3DTILES_content_gltf` →
    /// `{"extensionsUsed": [...], "extensionsRequired": [...]}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, serde_json::Value>,
}

/// `asset`: the 3D Tiles version ("1.1") and the generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Asset {
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// Application data (3D Tiles `extras`). Kiln writes `{"kiln": {"frame": …}}` here: how the
    /// tileset frame relates to the capture's frame (see `kiln_pipeline::stages::tile::frame`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extras: Option<serde_json::Value>,
}

/// One tile. `transform` is a column-major 4×4 (as the spec stores it), applied to this tile's content
/// and children; `geometric_error` is in metres (leaves 0, parents ≥ children).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tile {
    pub bounding_volume: BoundingVolume,
    pub geometric_error: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refine: Option<Refine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transform: Option<[f64; 16]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Tile>,
}

/// Refinement: `REPLACE` (children replace the parent) or `ADD` (children add to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refine {
    #[serde(rename = "REPLACE")]
    Replace,
    #[serde(rename = "ADD")]
    Add,
}

/// Tile content: a URI relative to the tileset.json (GLB here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Content {
    pub uri: String,
}

/// Bounding volume. `box` is 12 numbers: centre (3) then the three half-axis vectors (3 × 3), in the
/// tile's frame (after its `transform`), metres. `sphere` is centre (3) + radius.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundingVolume {
    #[serde(rename = "box", default, skip_serializing_if = "Option::is_none")]
    pub box_: Option<[f64; 12]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sphere: Option<[f64; 4]>,
}

impl BoundingVolume {
    /// An axis-aligned box from its min and max corners (metres).
    pub fn from_aabb(min: [f64; 3], max: [f64; 3]) -> Self {
        let c = [
            (min[0] + max[0]) / 2.0,
            (min[1] + max[1]) / 2.0,
            (min[2] + max[2]) / 2.0,
        ];
        // A zero half-axis makes the box degenerate; keep a tiny positive extent so clients can cull.
        let h = |i: usize| ((max[i] - min[i]) / 2.0).max(1e-6);
        Self {
            box_: Some([
                c[0],
                c[1],
                c[2],
                h(0),
                0.0,
                0.0,
                0.0,
                h(1),
                0.0,
                0.0,
                0.0,
                h(2),
            ]),
            sphere: None,
        }
    }
}

/// The column-major 4×4 that turns glTF's Y-up content into 3D Tiles' Z-up frame
/// (rotation of +90° about X: y → z, z → −y). Source: 3D Tiles 1.1 §"glTF transforms" / "Y-up to Z-up".
pub const Y_UP_TO_Z_UP: [f64; 16] = [
    1.0, 0.0, 0.0, 0.0, //
    0.0, 0.0, 1.0, 0.0, //
    0.0, -1.0, 0.0, 0.0, //
    0.0, 0.0, 0.0, 1.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tileset_serialises_with_spec_field_names() {
        let ts = Tileset {
            asset: Asset {
                version: "1.1".into(),
                generator: None,
                extras: None,
            },
            geometric_error: 10.0,
            root: Tile {
                bounding_volume: BoundingVolume::from_aabb([0.0; 3], [2.0, 4.0, 6.0]),
                geometric_error: 5.0,
                refine: Some(Refine::Replace),
                transform: None,
                content: Some(Content {
                    uri: "a.glb".into(),
                }),
                children: vec![],
            },
            extensions_used: vec![],
            extensions_required: vec![],
            extensions: BTreeMap::new(),
        };
        let v = serde_json::to_value(&ts).unwrap();
        assert_eq!(v["geometricError"], 10.0);
        assert_eq!(v["root"]["refine"], "REPLACE");
        assert_eq!(v["root"]["boundingVolume"]["box"][0], 1.0);
        assert_eq!(v["root"]["boundingVolume"]["box"][3], 1.0);
        assert_eq!(v["root"]["boundingVolume"]["box"][7], 2.0);
        assert_eq!(v["root"]["boundingVolume"]["box"][11], 3.0);
        let back: Tileset = serde_json::from_value(v).unwrap();
        assert_eq!(back, ts);
    }

    #[test]
    fn y_up_to_z_up_maps_y_to_z() {
        // Column-major: column j is m[4j..4j+4]; image of +Y is column 1.
        let m = Y_UP_TO_Z_UP;
        assert_eq!(&m[4..7], &[0.0, 0.0, 1.0]);
        assert_eq!(&m[8..11], &[0.0, -1.0, 0.0]);
    }
}
