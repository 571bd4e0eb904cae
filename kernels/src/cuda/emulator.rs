//! [`GpuBackend`] that runs the CUDA kernels on the CPU: the kernel sources are compiled as C++20
//! together with `cuda/host_emulator.h` (each block's threads run as cooperative fibers on one OS
//! thread; `__syncthreads`, warp shuffles and votes are scheduler barriers) into a shared library,
//! loaded with libloading. Device memory is host memory.
//!
//! Purpose: CI has no GPU. The emulator lets the tests run the real kernel text and the real host
//! launch code (`render.rs`: sizes, scans, radix-sort passes, argument order) and compare them with
//! the CPU twin, so a wrong index or a swapped argument is caught before a GPU ever sees it. Blocks
//! run in sequence and threads one at a time between barriers, so it suits small scenes (the
//! selftest's run in seconds). What it cannot check — real-GPU timing, races that a sequential
//! schedule hides (a missing `__syncthreads` between a shared-memory write and another thread's
//! read usually still "works" here), PTX/driver issues — is what `kiln selftest --device cuda` on a
//! GPU machine checks (`scripts/gpu-check.sh`).
//!
//! Needs a C++20 compiler: `$CXX`, else `c++`. The library is cached under the system temp folder
//! by a BLAKE3 hash of its source.

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use super::gpu::GpuBackend;
use super::source::{COMMON, KERNEL_FILES, KERNEL_NAMES, prelude};
use crate::Error;

const SHIM: &str = include_str!("../../cuda/host_emulator.h");

type LaunchFn = unsafe extern "C" fn(
    name: *const c_char,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    args: *mut *mut c_void,
) -> c_int;

fn emu_error(reason: String) -> Error {
    Error::Device {
        device: "emulator".into(),
        reason,
    }
}

/// The C++ translation unit: shim + prelude + kernels + a launch table over [`KERNEL_NAMES`].
pub fn emulator_source() -> String {
    let mut s = String::from(SHIM);
    s.push_str(&prelude());
    s.push_str(COMMON);
    for (name, src) in KERNEL_FILES {
        s.push_str(&format!("\n// ---- {name} ----\n{src}"));
    }
    s.push_str(
        "\nextern \"C\" int kiln_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz,\n\
         unsigned bx, unsigned by, unsigned bz, void** args) {\n\
         dim3 g{gx, gy, gz}, b{bx, by, bz};\n",
    );
    for name in KERNEL_NAMES {
        s.push_str(&format!(
            "if (!std::strcmp(name, \"{name}\")) {{ kiln_emu::run_grid(g, b, [&] {{ kiln_emu::call({name}, args); }}); return 0; }}\n"
        ));
    }
    s.push_str("return -1;\n}\n");
    s
}

/// Compiles (or reuses) the emulator library and returns its path.
fn build_library() -> Result<PathBuf, Error> {
    // One build at a time in this process: tests run on several threads, and each used to
    // compile to the same per-process temp name, so one thread's rename took the file from
    // under another's (a cold-cache CI failure).
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let src = emulator_source();
    let hash = blake3::hash(src.as_bytes()).to_hex();
    let dir = std::env::temp_dir().join("kiln-cuda-emulator");
    let lib = dir.join(format!("kiln_emu_{}.so", &hash[..16]));
    if lib.exists() {
        return Ok(lib);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| emu_error(format!("creating {}: {e}", dir.display())))?;
    // Per-process names for the source and the library, then a rename: concurrent processes
    // never compile a half-written source or load a half-written library.
    let unique = format!("{}.{}", &hash[..16], std::process::id());
    let cpp = dir.join(format!("kiln_emu_{unique}.cpp"));
    std::fs::write(&cpp, &src).map_err(|e| emu_error(format!("writing {}: {e}", cpp.display())))?;
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let tmp = dir.join(format!("kiln_emu_{unique}.tmp.so"));
    let out = Command::new(&cxx)
        .args([
            "-std=c++20",
            "-O2",
            "-fPIC",
            "-shared",
            "-pthread",
            "-ffp-contract=off",
            "-w",
        ])
        .arg("-o")
        .arg(&tmp)
        .arg(&cpp)
        .output()
        .map_err(|e| {
            emu_error(format!(
                "cannot run the C++ compiler {cxx:?}: {e}; install g++ (C++20) or set CXX"
            ))
        })?;
    if !out.status.success() {
        return Err(emu_error(format!(
            "{cxx} failed on {}:\n{}",
            cpp.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    std::fs::rename(&tmp, &lib).map_err(|e| {
        emu_error(format!(
            "renaming {} → {}: {e}",
            tmp.display(),
            lib.display()
        ))
    })?;
    let _ = std::fs::remove_file(&cpp);
    Ok(lib)
}

/// The emulator backend.
#[derive(Debug)]
pub struct Emulator {
    _lib: libloading::Library,
    launch: LaunchFn,
    /// Live allocations: address → layout (for `free`).
    allocations: Mutex<HashMap<u64, std::alloc::Layout>>,
}

impl Emulator {
    /// Builds (first time, a few seconds) and loads the emulator library.
    ///
    /// # Errors
    /// [`Error::Device`] (device `emulator`) when no C++20 compiler is found, the kernels do not
    /// compile as C++, or the library cannot be loaded.
    pub fn open() -> Result<Self, Error> {
        let path = build_library()?;
        // SAFETY: the library is ours, built just now from the kernel sources; loading runs no
        // initialisers beyond the C++ runtime's.
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|e| emu_error(format!("loading {}: {e}", path.display())))?;
        // SAFETY: `kiln_emu_launch` has exactly the `LaunchFn` signature (generated above).
        let launch = unsafe { lib.get::<LaunchFn>(b"kiln_emu_launch\0") }
            .map_err(|e| emu_error(format!("{}: {e}", path.display())))?;
        let launch = *launch;
        Ok(Self {
            _lib: lib,
            launch,
            allocations: Mutex::new(HashMap::new()),
        })
    }
}

impl GpuBackend for Emulator {
    fn name(&self) -> String {
        "host emulator".into()
    }

    fn total_memory(&self) -> usize {
        0
    }

    fn alloc(&self, bytes: usize) -> Result<u64, Error> {
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), 256)
            .map_err(|e| emu_error(format!("allocating {bytes} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(emu_error(format!(
                "out of host memory allocating {bytes} bytes"
            )));
        }
        self.allocations
            .lock()
            .map_err(|_| emu_error("allocation table poisoned".into()))?
            .insert(p as u64, layout);
        Ok(p as u64)
    }

    unsafe fn free(&self, ptr: u64) {
        let layout = self
            .allocations
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&ptr));
        if let Some(layout) = layout {
            // SAFETY: allocated in `alloc` with this layout and removed from the table just now.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<(), Error> {
        // SAFETY: the caller guarantees the destination range lies in a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<(), Error> {
        // SAFETY: the caller guarantees the source range lies in a live allocation.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), Error> {
        // SAFETY: the caller guarantees the range.
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0, bytes) };
        Ok(())
    }

    unsafe fn launch(
        &self,
        name: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &mut [*mut c_void],
    ) -> Result<(), Error> {
        let cname =
            CString::new(name).map_err(|_| emu_error(format!("bad kernel name {name:?}")))?;
        // SAFETY: the caller guarantees the arguments match the kernel; the emulator library
        // runs the kernel to completion before returning.
        let rc = unsafe {
            (self.launch)(
                cname.as_ptr(),
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                args.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(emu_error(format!(
                "kernel {name} is not in the emulator library"
            )));
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), Error> {
        Ok(())
    }
}
