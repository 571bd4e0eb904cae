//! kiln-formats: Kiln's domain data types and their file I/O.
//!
//! Captures (nerfstudio / instant-ngp `transforms.json`, COLMAP binary and text models) and their images;
//! Gaussian splats (INRIA 3DGS PLY, SPZ, glTF `KHR_gaussian_splatting`); meshes (glTF/GLB);
//! 3D Tiles 1.1 tilesets. No GPU, no async runtime, no training logic lives here.
//!
//! Conventions: camera frame OpenCV (x right, y down, z forward); poses stored as `world_to_camera`
//! (f64, row-major 4×4); quaternions wxyz; scales stored as natural logs and opacities as logits;
//! SH real, Condon–Shortley, degree ≤ 3, coefficient-major `[N, K, 3]`.

pub mod atomic_write;
pub mod capture;
pub mod confined;
pub mod error;
pub mod mesh;
mod ply_ascii;
pub mod rotation;
pub mod splats;
pub mod tiles;
pub mod uri;

pub use error::{Error, Result};
