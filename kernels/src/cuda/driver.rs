//! [`GpuBackend`] on the CUDA driver API (cudarc, dynamically loaded): the primary context of one
//! device, the Kiln module loaded from PTX, and synchronous copies on the default stream.
//!
//! PTX comes from the build (`build.rs` runs NVRTC when it can load it, so a release binary needs
//! only the NVIDIA driver). A driver older than that NVRTC rejects its PTX ISA version; the loader
//! then retries the same text under the newest ISA header the driver accepts ([`max_ptx_isa`],
//! [`ptx_with_isa`]), and only then falls back to NVRTC at run time.
//! The PTX targets `compute_70` (Volta; `__match_any_sync` needs it), which every GPU Kiln rents
//! (T4, L4, A100, H100, H200) can JIT.
//!
//! cudarc panics (instead of returning an error) when libcuda cannot be loaded, so every entry here
//! is reached only after [`crate::device::cuda_available`] said yes.

use std::collections::HashMap;
use std::ffi::{CString, c_void};

use cudarc::driver::{result, sys};

use super::gpu::GpuBackend;
use super::source::{KERNEL_NAMES, module_source};
use crate::Error;

/// PTX compiled by `build.rs` (empty when NVRTC was not available at build time).
const BUILD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/kiln_kernels.ptx"));

/// The virtual architecture the PTX is compiled for.
pub const PTX_ARCH: &str = "compute_70";

/// Compiles the Kiln module to PTX with NVRTC (needs libnvrtc, not a GPU).
///
/// # Errors
/// [`Error::Device`] (device `nvrtc`) when libnvrtc cannot be loaded or the source does not compile
/// (the message carries NVRTC's log).
pub fn compile_ptx(source: &str) -> Result<String, Error> {
    // SAFETY: only tries to dlopen the library by name.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::Device {
            device: "nvrtc".into(),
            reason: "libnvrtc could not be loaded; install the NVRTC runtime (pip install \
                     nvidia-cuda-nvrtc-cu12) and put its lib/ folder on LD_LIBRARY_PATH"
                .into(),
        });
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(PTX_ARCH),
        name: Some("kiln_kernels.cu".into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts)
        .map(|ptx| ptx.to_src())
        .map_err(|e| Error::Device {
            device: "nvrtc".into(),
            reason: format!("compiling the CUDA kernels failed: {e:?}"),
        })
}

/// The newest PTX ISA version `(major, minor)` a driver of CUDA version `driver_version`
/// (`cuDriverGetVersion`'s encoding: 1000·major + 10·minor, e.g. 12040 for 12.4) can JIT, from
/// NVIDIA's PTX ISA release history (PTX ISA 8.x for CUDA 12.0–12.9, with 12.6 still at 8.5 and
/// 12.8 at 8.7; 7.x for 11.x; 9.x for 13.x). `None` for drivers older than CUDA 11.0.
pub fn max_ptx_isa(driver_version: i32) -> Option<(u32, u32)> {
    let (major, minor) = (driver_version / 1000, (driver_version % 1000) / 10);
    let minor = minor as u32;
    match major {
        11 => Some((7, minor.min(8))),
        12 => Some((
            8,
            match minor {
                0..=5 => minor,
                6 => 5,
                7 => 6,
                8 => 7,
                _ => 8,
            },
        )),
        m if m >= 13 => Some((9, if m == 13 { minor } else { 9 })),
        _ => None,
    }
}

/// `ptx` with its `.version` directive set to `isa` when that is older than the one it declares
/// (`None` when it already is at most `isa`, or has no `.version` line). The kernels use nothing
/// newer than PTX ISA 6.4 (sm_70 warp intrinsics), so NVRTC 12.9's text assembles unchanged under
/// an older header: checked with ptxas 12.4 for sm_70 and sm_90 down to ISA 6.4
/// (`tests/cuda_compile.rs`).
pub fn ptx_with_isa(ptx: &str, isa: (u32, u32)) -> Option<String> {
    let line = ptx.lines().find(|l| l.starts_with(".version "))?;
    let (maj, min) = line
        .trim_start_matches(".version ")
        .trim()
        .split_once('.')?;
    let declared = (maj.parse::<u32>().ok()?, min.parse::<u32>().ok()?);
    if declared <= isa {
        return None;
    }
    Some(ptx.replacen(line, &format!(".version {}.{}", isa.0, isa.1), 1))
}

/// CUDA version of the loaded driver (`cuDriverGetVersion`), e.g. 12040; `None` when the call
/// fails.
fn driver_version() -> Option<i32> {
    let mut v = 0;
    // SAFETY: writes one int; the driver library is loaded (callers checked `cuda_available`).
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
}

#[derive(Debug, Clone, Copy)]
struct Handle<T>(T);
// SAFETY: CUDA driver handles (context, module, function) may be used from any thread once the
// context is current there; every call below makes it current first.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl<T> Sync for Handle<T> {}

/// One CUDA device with the Kiln module loaded.
#[derive(Debug)]
pub struct CudaDriver {
    ordinal: usize,
    ctx: Handle<sys::CUcontext>,
    functions: HashMap<&'static str, Handle<sys::CUfunction>>,
    name: String,
    total_memory: usize,
    /// Where the loaded PTX came from (`build` or `nvrtc`), for logs and the selftest report.
    pub ptx_origin: &'static str,
}

fn driver_error(ordinal: usize, what: &str, e: result::DriverError) -> Error {
    Error::Device {
        device: format!("cuda:{ordinal}"),
        reason: format!("{what}: {e:?}"),
    }
}

impl CudaDriver {
    /// Opens device `ordinal` (primary context) and loads the kernels.
    ///
    /// # Errors
    /// [`Error::Device`] when the driver cannot be loaded or initialised, the ordinal does not exist,
    /// or neither the built-in PTX nor NVRTC gives a module the driver accepts.
    pub fn open(ordinal: usize) -> Result<Self, Error> {
        if !crate::device::cuda_available() {
            return Err(Error::Device {
                device: format!("cuda:{ordinal}"),
                reason: "no CUDA driver found (libcuda could not be loaded); install the NVIDIA \
                         driver or use --device cpu"
                    .into(),
            });
        }
        let err = |what: &'static str| move |e| driver_error(ordinal, what, e);
        result::init().map_err(err("cuInit"))?;
        let count = result::device::get_count().map_err(err("cuDeviceGetCount"))? as usize;
        if ordinal >= count {
            return Err(Error::Device {
                device: format!("cuda:{ordinal}"),
                reason: format!(
                    "this machine has {count} CUDA device(s) (cuda:0 … cuda:{}); pick one of them",
                    count.saturating_sub(1)
                ),
            });
        }
        let dev = result::device::get(ordinal as i32).map_err(err("cuDeviceGet"))?;
        let name = result::device::get_name(dev).map_err(err("cuDeviceGetName"))?;
        // SAFETY: `dev` is a valid device handle.
        let total_memory =
            unsafe { result::device::total_mem(dev) }.map_err(err("cuDeviceTotalMem"))?;
        // SAFETY: `dev` is valid; the primary context is retained for the process lifetime (the
        // same context burn's CUDA runtime uses).
        let ctx =
            unsafe { result::primary_ctx::retain(dev) }.map_err(err("cuDevicePrimaryCtxRetain"))?;
        // SAFETY: `ctx` was just retained.
        unsafe { result::ctx::set_current(ctx) }.map_err(err("cuCtxSetCurrent"))?;

        let load = |ptx: &str| -> Result<sys::CUmodule, Error> {
            let image = CString::new(ptx).map_err(|_| Error::Device {
                device: format!("cuda:{ordinal}"),
                reason: "PTX contains a NUL byte".into(),
            })?;
            // SAFETY: a NUL-terminated PTX text is a valid module image.
            unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
                .map_err(err("cuModuleLoadData"))
        };
        // The built PTX as is; then, for a driver older than the NVRTC that wrote it, the same text
        // under the newest ISA header that driver accepts; then NVRTC at run time (which a
        // driver-only machine lacks, hence the second try).
        let mut built = (!BUILD_PTX.is_empty()).then(|| load(BUILD_PTX));
        let mut origin = "build";
        if let Some(Err(e)) = &built {
            let version = driver_version();
            let lowered = version
                .and_then(max_ptx_isa)
                .and_then(|isa| ptx_with_isa(BUILD_PTX, isa));
            tracing::warn!(error = %e, driver_cuda_version = ?version, retry_with_older_isa = lowered.is_some(),
                "built-in PTX rejected by the driver");
            if let Some(ptx) = lowered {
                built = Some(load(&ptx));
                origin = "build (ISA lowered to the driver's)";
            }
        }
        let (module, ptx_origin) = match built {
            Some(Ok(m)) => (m, origin),
            built => {
                if let Some(Err(e)) = &built {
                    tracing::warn!(error = %e, "built-in PTX rejected by the driver; compiling with NVRTC");
                }
                (load(&compile_ptx(&module_source())?)?, "nvrtc")
            }
        };
        let mut functions = HashMap::new();
        for &kernel in KERNEL_NAMES {
            let cname = CString::new(kernel).unwrap_or_default();
            // SAFETY: `module` is loaded and not unloaded while the driver lives.
            let f = unsafe { result::module::get_function(module, cname) }
                .map_err(|e| driver_error(ordinal, &format!("cuModuleGetFunction({kernel})"), e))?;
            functions.insert(kernel, Handle(f));
        }
        Ok(Self {
            ordinal,
            ctx: Handle(ctx),
            functions,
            name,
            total_memory,
            ptx_origin,
        })
    }

    fn bind(&self) -> Result<(), Error> {
        // SAFETY: the primary context stays retained while `self` lives.
        unsafe { result::ctx::set_current(self.ctx.0) }
            .map_err(|e| driver_error(self.ordinal, "cuCtxSetCurrent", e))
    }

    fn check(&self, what: &str, r: Result<(), result::DriverError>) -> Result<(), Error> {
        r.map_err(|e| driver_error(self.ordinal, what, e))
    }
}

impl GpuBackend for CudaDriver {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn total_memory(&self) -> usize {
        self.total_memory
    }

    fn alloc(&self, bytes: usize) -> Result<u64, Error> {
        self.bind()?;
        // SAFETY: the context is current.
        unsafe { result::malloc_sync(bytes) }
            .map_err(|e| driver_error(self.ordinal, "cuMemAlloc", e))
    }

    unsafe fn free(&self, ptr: u64) {
        if self.bind().is_ok() {
            // SAFETY: the caller guarantees `ptr` came from `alloc` and is dead; a failure here
            // (e.g. during process teardown) leaks the allocation, which is harmless.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }

    unsafe fn upload(&self, dst: u64, src: &[u8]) -> Result<(), Error> {
        self.bind()?;
        // SAFETY: the caller guarantees the destination range.
        self.check("cuMemcpyHtoD", unsafe {
            result::memcpy_htod_sync(dst, src)
        })
    }

    unsafe fn download(&self, dst: &mut [u8], src: u64) -> Result<(), Error> {
        self.bind()?;
        // SAFETY: the caller guarantees the source range.
        self.check("cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(dst, src)
        })
    }

    unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), Error> {
        self.bind()?;
        // SAFETY: the caller guarantees the range.
        self.check("cuMemsetD8", unsafe {
            result::memset_d8_sync(dst, 0, bytes)
        })
    }

    unsafe fn launch(
        &self,
        name: &str,
        grid: [u32; 3],
        block: [u32; 3],
        args: &mut [*mut c_void],
    ) -> Result<(), Error> {
        self.bind()?;
        let f = self.functions.get(name).ok_or_else(|| Error::Device {
            device: format!("cuda:{}", self.ordinal),
            reason: format!("kernel {name} is not in the loaded module"),
        })?;
        // SAFETY: the caller guarantees the arguments; the default stream orders this launch
        // after earlier copies and launches.
        let r = unsafe {
            result::launch_kernel(
                f.0,
                (grid[0], grid[1], grid[2]),
                (block[0], block[1], block[2]),
                0,
                std::ptr::null_mut(),
                args,
            )
        };
        self.check(&format!("launching {name}"), r)
    }

    fn synchronize(&self) -> Result<(), Error> {
        self.bind()?;
        self.check("cuCtxSynchronize", result::ctx::synchronize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_cuda_versions_map_to_their_ptx_isa() {
        assert_eq!(max_ptx_isa(12090), Some((8, 8)));
        assert_eq!(max_ptx_isa(12080), Some((8, 7)));
        assert_eq!(max_ptx_isa(12060), Some((8, 5)));
        assert_eq!(max_ptx_isa(12040), Some((8, 4)));
        assert_eq!(max_ptx_isa(12000), Some((8, 0)));
        assert_eq!(max_ptx_isa(11080), Some((7, 8)));
        assert_eq!(max_ptx_isa(13000), Some((9, 0)));
        assert_eq!(max_ptx_isa(10020), None);
    }

    #[test]
    fn only_a_newer_isa_header_is_lowered() {
        let ptx = "//\n.version 8.8\n.target sm_70\n.address_size 64\n";
        let low = ptx_with_isa(ptx, (8, 4)).unwrap();
        assert_eq!(low, "//\n.version 8.4\n.target sm_70\n.address_size 64\n");
        assert_eq!(ptx_with_isa(ptx, (8, 8)), None);
        assert_eq!(ptx_with_isa(ptx, (9, 0)), None);
        assert_eq!(ptx_with_isa(".target sm_70\n", (8, 0)), None);
    }
}
