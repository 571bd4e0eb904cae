//! kiln-kernels: the differentiable 3D Gaussian splat tile rasterizer.
//!
//! One op set, two implementations that share [`consts`]: the CPU twin (rayon, the correctness
//! reference, `cpu/`) and the CUDA kernels (`cuda/*.cu`, launched through cudarc; [`cuda`]).
//! Stages, in order: `project` (EWA splatting, SH → colour) → `bin` (16×16 tiles, key = tile | depth)
//! → `sort` → `rasterize_forward` → `rasterize_backward` → `project_backward`.
//!
//! The public entry points are [`Renderer::forward`] and [`Renderer::backward`] (a renderer per
//! device: CPU, CUDA, or the CUDA kernels on the host emulator), and the CPU shorthands
//! [`render_forward`] / [`render_backward`]; the trainer (kiln-pipeline) wraps them in one burn
//! autodiff op.
//!
//! Conventions (ARCHITECTURE.md): camera frame OpenCV (x right, y down, z forward), poses as
//! `world_to_camera`; quaternions wxyz (need not be normalised); scales as natural logs; opacities as
//! logits; SH real, Condon–Shortley, coefficient-major `[N, K, 3]`. Pixel centres sit at `x + 0.5`.
//!
//! Source of the math: Kerbl et al., "3D Gaussian Splatting for Real-Time Radiance Field Rendering",
//! SIGGRAPH 2023; Zwicker et al., "EWA Splatting", 2002; gsplat's documented conventions
//! (Ye et al., "gsplat: An Open-Source Library for Gaussian Splatting", 2024).

pub mod camera;
pub mod consts;
pub mod cpu;
pub mod cuda;
pub mod device;
pub mod error;
pub mod render;
pub mod selftest;
pub mod types;

pub use camera::Camera;
pub use error::Error;
pub use render::{ForwardOutput, Renderer, Saved, render_backward, render_forward};
pub use types::{KernelTimings, RenderOptions, SplatGradients, SplatsRef};
