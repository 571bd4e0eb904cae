//! The CUDA twin of the rasterizer: CUDA C kernels (`kernels/cuda/*.cu`) launched through cudarc's
//! driver API, with the same stages, constants and contract as the CPU twin (`crate::cpu`).
//!
//! - [`source`]: the embedded kernel text and the constants prelude generated from `consts.rs`;
//! - [`gpu`]: the device interface ([`gpu::GpuBackend`]), typed buffers, the allocation cap and
//!   peak-memory accounting;
//! - [`driver`]: that interface on a real GPU (CUDA driver API, PTX from the build or NVRTC);
//! - [`emulator`]: the same interface on the CPU, running the kernel text compiled as C++ — how CI,
//!   which has no GPU, checks the kernels and the launch code against the CPU twin;
//! - [`render`]: the forward and backward passes on either;
//! - [`train`]: a training state resident on the device (parameters, Adam moments, targets).
//!
//! Sources of the kernel design: gsplat (Ye et al. 2024) `IntersectTile.cu`,
//! `RasterizeToPixels3DGSFwd.cu` / `Bwd.cu` (one block per 16×16 tile, shared-memory batches);
//! INRIA 3DGS `forward.cu` / `backward.cu`. Kiln's backward differs on purpose: per-intersection
//! gradients summed per splat in a fixed order instead of float atomics, so a seeded run gives the
//! same gradients every time.

pub mod driver;
pub mod emulator;
pub mod gpu;
pub mod render;
pub mod source;
pub mod train;
