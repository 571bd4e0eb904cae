//! OGC 3D Tiles 1.1: the `tileset.json` document model ([`tileset`]) and Kiln's tileset checker
//! ([`check`], behind `kiln check`).

pub mod check;
pub mod tileset;
pub mod transform;

pub use check::{CheckKind, CheckOptions, CheckReport, Finding, Severity, check_tileset};
pub use tileset::{Asset, BoundingVolume, Content, Refine, Tile, Tileset};
