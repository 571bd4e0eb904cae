//! The public error type of kiln-kernels: one `#[non_exhaustive]` enum whose variants a caller can
//! act on (wrong shape, invalid value, device unavailable).

/// Errors returned by the rasterizer entry points and device resolution.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A slice has the wrong length for the shape its doc states.
    #[error(
        "{what}: expected {expected} elements, found {found}; pass slices whose lengths match the documented shape"
    )]
    Shape {
        /// Which input, with its shape, e.g. `"means [N, 3]"`.
        what: &'static str,
        /// Expected number of `f32` elements.
        expected: usize,
        /// Number of elements found.
        found: usize,
    },
    /// An input has a value outside its allowed range (camera size, intrinsics, SH degree).
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The offending field, e.g. `"camera.fx"`.
        field: &'static str,
        /// What is wrong and what to do about it.
        reason: String,
    },
    /// The requested compute device cannot be used.
    #[error("device {device}: {reason}")]
    Device {
        /// The device as requested, e.g. `"cuda:0"`.
        device: String,
        /// Why it cannot be used and what to do instead.
        reason: String,
    },
}
