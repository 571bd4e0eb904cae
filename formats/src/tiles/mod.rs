//! OGC 3D Tiles 1.1: the `tileset.json` document model ([`tileset`]).

pub mod tileset;

pub use tileset::{Asset, BoundingVolume, Content, Refine, Tile, Tileset};
