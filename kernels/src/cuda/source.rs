//! The CUDA C sources (`kernels/cuda/*.cu`), embedded at build time, and the prelude that gives them
//! the CPU twin's constants.
//!
//! NVRTC gets one translation unit: [`prelude`] (generated from [`crate::consts`] and the SH
//! constants of [`crate::cpu::sh`]) + `common.cuh` + every kernel file in [`KERNEL_FILES`] order.
//! The host-side emulator (`emulator.rs`) compiles the same text with a C++ compiler.

use crate::consts::{
    ALPHA_THRESHOLD, COMPENSATION_GRAD_EPS, EPS2D, FRUSTUM_CLAMP_MARGIN, GAUSSIAN_EXTENT,
    MAX_ALPHA, NEAR_PLANE, TILE_SIZE, TRANSMITTANCE_THRESHOLD,
};
use crate::cpu::sh_constants::{SH_C0, SH_C1, SH_C2, SH_C3};

/// Device helpers every kernel file uses (camera struct, projection geometry, SH, warp sum).
pub const COMMON: &str = include_str!("../../cuda/common.cuh");

/// The kernel files, `(file name, source)`, in dependency order (each may use the ones before).
pub const KERNEL_FILES: &[(&str, &str)] = &[
    ("project.cu", include_str!("../../cuda/project.cu")),
    ("bin.cu", include_str!("../../cuda/bin.cu")),
    ("scan.cu", include_str!("../../cuda/scan.cu")),
    ("sort.cu", include_str!("../../cuda/sort.cu")),
    (
        "rasterize_forward.cu",
        include_str!("../../cuda/rasterize_forward.cu"),
    ),
    (
        "rasterize_backward.cu",
        include_str!("../../cuda/rasterize_backward.cu"),
    ),
    (
        "project_backward.cu",
        include_str!("../../cuda/project_backward.cu"),
    ),
    ("loss.cu", include_str!("../../cuda/loss.cu")),
    ("adam.cu", include_str!("../../cuda/adam.cu")),
];

/// Every `extern "C" __global__` entry point the host code launches.
pub const KERNEL_NAMES: &[&str] = &[
    "kiln_project_forward",
    "kiln_bin_emit",
    "kiln_band_counts",
    "kiln_gather_ids",
    "kiln_tile_ranges",
    "kiln_scan_chunk_sums",
    "kiln_scan_chunk_offsets",
    "kiln_scan_apply",
    "kiln_radix_histogram",
    "kiln_radix_scatter",
    "kiln_rasterize_forward",
    "kiln_rasterize_backward",
    "kiln_sum_isect_grads",
    "kiln_sum_isect_abs",
    "kiln_project_backward",
    "kiln_ssim_products",
    "kiln_blur_pass",
    "kiln_ssim_terms",
    "kiln_loss_grad",
    "kiln_block_sums",
    "kiln_adam_step",
];

/// An `f32` as a C float literal that parses back to exactly the same value (Rust's shortest
/// round-trip form with an `f` suffix, e.g. `3.9215687e-3f`).
fn float_literal(v: f32) -> String {
    format!("{v:e}f")
}

/// `#define`s of every constant the kernels share with the CPU twin.
///
/// The SH constants are the `f64` values of [`crate::cpu::sh_constants`] rounded to `f32` in Rust, exactly as
/// the CPU twin's `f32` path rounds them (`T::of`), so both twins multiply by the same floats.
pub fn prelude() -> String {
    let mut s = String::from("// Generated from kernels/src/consts.rs and cpu/sh.rs.\n");
    let mut def = |name: &str, value: String| s.push_str(&format!("#define {name} {value}\n"));
    def("KILN_TILE_SIZE", format!("{TILE_SIZE}u"));
    def("KILN_ALPHA_THRESHOLD", float_literal(ALPHA_THRESHOLD));
    def("KILN_MAX_ALPHA", float_literal(MAX_ALPHA));
    def(
        "KILN_TRANSMITTANCE_THRESHOLD",
        float_literal(TRANSMITTANCE_THRESHOLD),
    );
    def("KILN_EPS2D", float_literal(EPS2D));
    def(
        "KILN_COMPENSATION_GRAD_EPS",
        float_literal(COMPENSATION_GRAD_EPS),
    );
    def("KILN_NEAR_PLANE", float_literal(NEAR_PLANE));
    def("KILN_GAUSSIAN_EXTENT", float_literal(GAUSSIAN_EXTENT));
    def(
        "KILN_FRUSTUM_CLAMP_MARGIN",
        float_literal(FRUSTUM_CLAMP_MARGIN),
    );
    def("KILN_SH_C0", float_literal(SH_C0 as f32));
    def("KILN_SH_C1", float_literal(SH_C1 as f32));
    for (k, v) in SH_C2.iter().enumerate() {
        def(&format!("KILN_SH_C2_{k}"), float_literal(*v as f32));
    }
    for (k, v) in SH_C3.iter().enumerate() {
        def(&format!("KILN_SH_C3_{k}"), float_literal(*v as f32));
    }
    s
}

/// The translation unit of one kernel file: prelude + common + the files before it + the file
/// (what the per-file compile test feeds NVRTC).
pub fn unit_up_to(file: &str) -> Option<String> {
    let end = KERNEL_FILES.iter().position(|(name, _)| *name == file)?;
    let mut s = prelude();
    s.push_str(COMMON);
    for (name, src) in &KERNEL_FILES[..=end] {
        s.push_str(&format!("\n// ---- {name} ----\n"));
        s.push_str(src);
    }
    Some(s)
}

/// The whole module: prelude + common + every kernel file.
pub fn module_source() -> String {
    unit_up_to(KERNEL_FILES[KERNEL_FILES.len() - 1].0).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_literals_round_trip_exactly() {
        for v in [
            ALPHA_THRESHOLD,
            MAX_ALPHA,
            EPS2D,
            SH_C0 as f32,
            SH_C3[1] as f32,
        ] {
            let lit = float_literal(v);
            let parsed: f32 = lit.trim_end_matches('f').parse().unwrap();
            assert_eq!(parsed.to_bits(), v.to_bits(), "{lit}");
        }
    }

    #[test]
    fn every_launched_kernel_is_defined_exactly_once_in_the_sources() {
        let src = module_source();
        for name in KERNEL_NAMES {
            let defs = src
                .matches(&format!("extern \"C\" __global__ void {name}("))
                .count();
            assert_eq!(defs, 1, "{name}");
        }
        let all = src.matches("extern \"C\" __global__ void ").count();
        assert_eq!(
            all,
            KERNEL_NAMES.len(),
            "a kernel is missing from KERNEL_NAMES"
        );
    }
}
