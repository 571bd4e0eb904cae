//! Compute-device selection: parsing `auto | cpu | cuda | cuda:N` and resolving it against what the
//! machine has.
//!
//! CUDA is probed through cudarc's dynamically loaded driver (`is_culib_present`), never by creating
//! a context first: cudarc panics when libcuda is missing. `auto` means `cuda:0` when a driver loads
//! and the device opens, else the CPU (one log line says why); an explicit `cuda` that cannot be
//! used is an [`Error::Device`] with the reason, never a silent fallback.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// A device the rasterizer runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    /// The rayon CPU twin (`crate::cpu`).
    Cpu,
    /// CUDA device with this ordinal.
    Cuda(usize),
}

/// A device as the user asked for it, before resolution: `auto`, `cpu`, `cuda` (= `cuda:0`) or
/// `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceRequest {
    /// The best available device: `cuda:0` when usable, else [`Device::Cpu`].
    #[default]
    Auto,
    /// Exactly this device.
    Exact(Device),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Auto => write!(f, "auto"),
            DeviceRequest::Exact(d) => d.fmt(f),
        }
    }
}

impl FromStr for DeviceRequest {
    type Err = Error;

    /// Parses `auto`, `cpu`, `cuda` or `cuda:N` (ASCII case-insensitive, surrounding spaces ignored).
    ///
    /// # Errors
    /// [`Error::Invalid`] (field `device`) for anything else, naming the accepted forms.
    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Exact(Device::Cpu)),
            "cuda" => Ok(DeviceRequest::Exact(Device::Cuda(0))),
            _ => match t.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceRequest::Exact(Device::Cuda(n))),
                _ if t == "emulator" => Err(Error::Invalid {
                    field: "device",
                    reason: "\"emulator\" (the CUDA kernels run on the CPU, very slowly) is for \
                             `kiln selftest` and `kiln bench train` only; train with cpu, or auto"
                        .into(),
                }),
                _ => Err(Error::Invalid {
                    field: "device",
                    reason: format!(
                        "{s:?} is not a device; use auto, cpu, cuda or cuda:N (N = 0, 1, …)"
                    ),
                }),
            },
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `cuda` or `cuda:N`; `auto` is rejected (parse a [`DeviceRequest`] and call
    /// [`Device::resolve`] for it).
    ///
    /// # Errors
    /// [`Error::Invalid`] (field `device`) for `auto` or an unknown name.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.parse::<DeviceRequest>()? {
            DeviceRequest::Exact(d) => Ok(d),
            DeviceRequest::Auto => Err(Error::Invalid {
                field: "device",
                reason: "\"auto\" names no single device; parse a DeviceRequest and call Device::resolve".into(),
            }),
        }
    }
}

/// Whether the CUDA driver library (libcuda / nvcuda) can be loaded on this machine.
///
/// Thread-safe; loads and drops the library, creates no context, never panics.
pub fn cuda_available() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by its candidate names and
    // drops the handle; it touches no CUDA state.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

impl Device {
    /// Resolves a request without opening the device: `Auto` → `cuda:0` when the CUDA driver
    /// loads, else [`Device::Cpu`]; `cpu` → [`Device::Cpu`]; `cuda:N` → itself when the driver
    /// loads. Whether device N exists and the kernels load is checked by
    /// [`crate::Renderer::open`]; [`renderer_for`] does both and handles `auto`'s fallback.
    ///
    /// # Errors
    /// [`Error::Device`] for a CUDA request on a machine without the CUDA driver.
    pub fn resolve(request: DeviceRequest) -> Result<Device, Error> {
        match request {
            DeviceRequest::Auto if cuda_available() => Ok(Device::Cuda(0)),
            DeviceRequest::Auto | DeviceRequest::Exact(Device::Cpu) => Ok(Device::Cpu),
            DeviceRequest::Exact(d @ Device::Cuda(_)) => {
                if cuda_available() {
                    Ok(d)
                } else {
                    Err(Error::Device {
                        device: d.to_string(),
                        reason: "no CUDA driver found (libcuda could not be loaded); install the \
                                 NVIDIA driver, or run with --device cpu (or auto, which falls \
                                 back to the CPU)"
                            .into(),
                    })
                }
            }
        }
    }
}

/// Opens the renderer a request asks for. `auto` tries `cuda:0` and falls back to the CPU with one
/// `tracing` line giving the reason (no driver, or the device/kernels failed to open); an explicit
/// device that cannot be opened is an error.
///
/// # Errors
/// [`Error::Device`] when an explicitly requested CUDA device cannot be used.
pub fn renderer_for(request: DeviceRequest) -> Result<crate::Renderer, Error> {
    match request {
        DeviceRequest::Exact(d) => {
            Device::resolve(request)?;
            crate::Renderer::open(d)
        }
        DeviceRequest::Auto => {
            if !cuda_available() {
                tracing::info!("device auto: no CUDA driver found, using the CPU");
                return Ok(crate::Renderer::Cpu);
            }
            match crate::Renderer::open(Device::Cuda(0)) {
                Ok(r) => Ok(r),
                // A bad setting (KILN_GPU_ALLOC_CAP) is the user's to fix, not a reason to train
                // quietly on the CPU.
                Err(e @ Error::Invalid { .. }) => Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "device auto: CUDA unusable, using the CPU");
                    Ok(crate::Renderer::Cpu)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_request_parses_every_documented_form() {
        assert_eq!(
            "auto".parse::<DeviceRequest>().unwrap(),
            DeviceRequest::Auto
        );
        assert_eq!(
            " CPU ".parse::<DeviceRequest>().unwrap(),
            DeviceRequest::Exact(Device::Cpu)
        );
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::Cuda(3));
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
    }

    #[test]
    fn device_parse_rejects_unknown_names_with_invalid() {
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", ""] {
            assert!(
                matches!(
                    bad.parse::<DeviceRequest>(),
                    Err(Error::Invalid {
                        field: "device",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            "auto".parse::<Device>(),
            Err(Error::Invalid { .. })
        ));
    }

    #[test]
    fn without_a_driver_auto_is_cpu_and_cuda_is_a_clear_device_error() {
        assert_eq!(
            Device::resolve(DeviceRequest::Exact(Device::Cpu)).unwrap(),
            Device::Cpu
        );
        if cuda_available() {
            eprintln!("skipped the no-driver half: this machine has a CUDA driver");
            return;
        }
        assert_eq!(Device::resolve(DeviceRequest::Auto).unwrap(), Device::Cpu);
        assert!(matches!(
            renderer_for(DeviceRequest::Auto).unwrap(),
            crate::Renderer::Cpu
        ));
        let err = renderer_for(DeviceRequest::Exact(Device::Cuda(0))).unwrap_err();
        assert!(
            matches!(err, Error::Device { ref device, ref reason } if device == "cuda:0" && reason.contains("no CUDA driver")),
            "{err}"
        );
    }
}
