//! Compiles the CUDA kernels (`cuda/*.cu` + the constants prelude) to PTX with NVRTC when libnvrtc
//! can be loaded at build time (e.g. pip's `nvidia-cuda-nvrtc-cu12` on `LD_LIBRARY_PATH`, as
//! `.ci/run` sets up), and embeds it, so a release binary needs only the NVIDIA driver on the GPU
//! machine. Without NVRTC the embedded PTX is empty and `cuda::driver` compiles the kernels with
//! NVRTC at run time instead. `KILN_BUILD_PTX=0` skips the build-time compile.
//!
//! The prelude comes from the crate's own `consts.rs`, `cpu/sh_constants.rs` and
//! `cuda/source.rs` (included below by path), so build-time and run-time PTX are the same text.

use std::path::PathBuf;

#[allow(dead_code)]
#[path = "src/consts.rs"]
mod consts;

#[allow(dead_code)]
#[path = "src/cpu/sh_constants.rs"]
mod sh_constants;

mod cpu {
    pub(crate) use super::sh_constants;
}

#[allow(dead_code)]
#[path = "src/cuda/source.rs"]
mod source;

fn main() {
    for path in [
        "cuda",
        "src/consts.rs",
        "src/cpu/sh_constants.rs",
        "src/cuda/source.rs",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-env-changed=LD_LIBRARY_PATH");
    println!("cargo:rerun-if-env-changed=KILN_BUILD_PTX");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("kiln_kernels.ptx");
    let wanted = std::env::var("KILN_BUILD_PTX").map_or(true, |v| v != "0");
    // SAFETY: only tries to dlopen libnvrtc by its usual names.
    let present = wanted && unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let ptx = if present {
        let opts = cudarc::nvrtc::CompileOptions {
            arch: Some("compute_70"),
            name: Some("kiln_kernels.cu".into()),
            ..Default::default()
        };
        match cudarc::nvrtc::compile_ptx_with_opts(source::module_source(), opts) {
            Ok(ptx) => ptx.to_src(),
            Err(e) => {
                println!(
                    "cargo:warning=NVRTC could not compile the CUDA kernels ({e:?}); the binary will compile them at run time"
                );
                String::new()
            }
        }
    } else {
        String::new()
    };
    std::fs::write(&out, ptx).expect("writing the PTX into OUT_DIR");
}
