//! Every CUDA kernel file compiles with NVRTC (no GPU needed), as issue 4 asks of CI: each file as
//! its own translation unit (prelude + common.cuh + the files it depends on), then the whole
//! module, whose PTX must define every kernel the host code launches and target the PTX ISA the
//! driver backend expects. NVRTC comes from pip's `nvidia-cuda-nvrtc-cu12` on `LD_LIBRARY_PATH`
//! (`.ci/run` installs it); without it the test is skipped, except under `CI=true` where it fails.

use kiln_kernels::cuda::driver::{PTX_ARCH, compile_ptx, max_ptx_isa, ptx_with_isa};
use kiln_kernels::cuda::source::{KERNEL_FILES, KERNEL_NAMES, module_source, unit_up_to};

fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen libnvrtc.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    if !present {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true but libnvrtc is not loadable: install nvidia-cuda-nvrtc-cu12 and put its lib/ on LD_LIBRARY_PATH"
        );
        eprintln!(
            "skipped: libnvrtc not loadable (set LD_LIBRARY_PATH to pip's nvidia/cuda_nvrtc/lib)"
        );
    }
    present
}

#[test]
fn every_cuda_file_compiles_with_nvrtc() {
    if !nvrtc_present() {
        return;
    }
    for (file, _) in KERNEL_FILES {
        let unit = unit_up_to(file).unwrap();
        let started = std::time::Instant::now();
        let ptx = compile_ptx(&unit).unwrap_or_else(|e| panic!("{file}: {e}"));
        eprintln!(
            "{file}: {} bytes of PTX in {:?}",
            ptx.len(),
            started.elapsed()
        );
        assert!(ptx.contains(".visible .entry"), "{file} produced no kernel");
    }
}

#[test]
fn the_module_ptx_defines_every_launched_kernel_for_the_expected_arch() {
    if !nvrtc_present() {
        return;
    }
    let ptx = compile_ptx(&module_source()).unwrap();
    let target = PTX_ARCH.replace("compute_", "sm_");
    assert!(
        ptx.contains(&format!(".target {target}")),
        "PTX targets another arch"
    );
    for name in KERNEL_NAMES {
        assert!(
            ptx.contains(&format!(".entry {name}(")),
            "{name} missing from the PTX"
        );
    }
    // NVRTC 12.x emits PTX ISA 8.x; a newer ISA would be rejected by 12.x drivers
    // (shared/research/rust-stack.md §1).
    let version = ptx
        .lines()
        .find_map(|l| l.strip_prefix(".version "))
        .expect("PTX has a .version line");
    let major: u32 = version.split('.').next().unwrap().trim().parse().unwrap();
    assert!(
        major <= 8,
        "PTX ISA {version} is newer than CUDA 12 drivers accept"
    );
}

/// On a driver older than the NVRTC that built the PTX, the loader retries the same text under the
/// driver's newest ISA header (`driver::ptx_with_isa`). This assembles that text with ptxas from
/// CUDA 12.4 (`KILN_PTXAS`, which `.ci/run` installs from PyPI) for Volta and Hopper, at the ISA of
/// the oldest 12.x driver (8.0), of CUDA 12.4 (8.4) and of CUDA 11.8 (7.8).
#[test]
fn the_module_ptx_assembles_under_the_older_isa_headers_the_loader_retries_with() {
    if !nvrtc_present() {
        return;
    }
    let Some(ptxas) = std::env::var_os("KILN_PTXAS") else {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true but KILN_PTXAS is not set (.ci/run installs ptxas 12.4)"
        );
        return eprintln!("skipped: KILN_PTXAS (a CUDA 12.4 ptxas) not set");
    };
    let ptx = compile_ptx(&module_source()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for driver in [12000, 12040, 11080] {
        let isa = max_ptx_isa(driver).unwrap();
        let lowered = ptx_with_isa(&ptx, isa).expect("NVRTC 12.9 writes a newer ISA");
        assert!(lowered.contains(&format!(".version {}.{}", isa.0, isa.1)));
        let file = dir.path().join(format!("isa-{}.{}.ptx", isa.0, isa.1));
        std::fs::write(&file, &lowered).unwrap();
        for arch in ["sm_70", "sm_90"] {
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(&file)
                .arg("-o")
                .arg(dir.path().join("out.cubin"))
                .output()
                .expect("run ptxas");
            assert!(
                out.status.success(),
                "ptxas {arch} rejected the PTX at ISA {isa:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
