//! The real SH basis constants (INRIA 3DGS `utils/sh_utils.py` `C0`…`C3`), in their own file so
//! that `build.rs` can share them with the CUDA prelude (`cuda/source.rs`).

/// Degree-0 constant, 1 / (2√π).
pub const SH_C0: f64 = 0.28209479177387814;
/// Degree-1 constant, √3 / (2√π).
pub const SH_C1: f64 = 0.4886025119029199;
/// Degree-2 constants (INRIA `C2`).
pub const SH_C2: [f64; 5] = [
    1.0925484305920792,
    -1.0925484305920792,
    0.31539156525252005,
    -1.0925484305920792,
    0.5462742152960396,
];
/// Degree-3 constants (INRIA `C3`).
pub const SH_C3: [f64; 7] = [
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
];
