//! Compute-device selection: parsing `auto | cpu | cuda | cuda:N` and resolving it against what the
//! machine has.
//!
//! CUDA is probed through cudarc's dynamically loaded driver (`is_culib_present`), never by creating
//! a context first: cudarc panics when libcuda is missing. The CUDA kernels arrive in a later issue,
//! so for now every CUDA request resolves to [`Error::Device`] and `auto` resolves to the CPU.

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
    /// The best available device (today always [`Device::Cpu`]).
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
    /// Resolves a request to a usable device.
    ///
    /// `Auto` → [`Device::Cpu`] (the CUDA kernels are not built yet; once they are, `Auto` will pick
    /// `cuda:0` when [`cuda_available`]). `cpu` → [`Device::Cpu`].
    ///
    /// # Errors
    /// [`Error::Device`] for any CUDA request: either no CUDA driver was found, or (driver present)
    /// the CUDA rasterizer path is not built yet. Use `cpu` or `auto` instead.
    pub fn resolve(request: DeviceRequest) -> Result<Device, Error> {
        match request {
            DeviceRequest::Auto | DeviceRequest::Exact(Device::Cpu) => Ok(Device::Cpu),
            DeviceRequest::Exact(d @ Device::Cuda(_)) => {
                let reason = if cuda_available() {
                    "the CUDA rasterizer is not built yet (CPU only in this version); use --device cpu or auto"
                } else {
                    "no CUDA driver found (libcuda could not be loaded); install the NVIDIA driver or use --device cpu"
                };
                Err(Error::Device {
                    device: d.to_string(),
                    reason: reason.into(),
                })
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
    fn auto_resolves_to_cpu_and_cuda_is_a_device_error() {
        assert_eq!(Device::resolve(DeviceRequest::Auto).unwrap(), Device::Cpu);
        assert_eq!(
            Device::resolve(DeviceRequest::Exact(Device::Cpu)).unwrap(),
            Device::Cpu
        );
        let err = Device::resolve(DeviceRequest::Exact(Device::Cuda(0))).unwrap_err();
        assert!(
            matches!(err, Error::Device { ref device, .. } if device == "cuda:0"),
            "{err}"
        );
    }
}
