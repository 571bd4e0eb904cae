//! The public error type of kiln-formats: every variant names the file and, where it applies, the
//! field and what was expected, so the message tells the user what to fix.

use std::path::PathBuf;

/// Result alias for kiln-formats.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors from reading or writing Kiln's file formats.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not there.
    #[error("{path}: file not found ({what}); check the path")]
    NotFound { path: PathBuf, what: &'static str },
    /// The file parsed, but a field holds a value Kiln cannot use.
    #[error("{path}: field `{field}`: expected {expected}, found {found}")]
    Invalid {
        path: PathBuf,
        field: String,
        expected: String,
        found: String,
    },
    /// The file is syntactically broken (bad JSON, truncated binary, wrong magic).
    #[error("{path}: {what} (at {location}); the file is corrupt or not this format")]
    Corrupt {
        path: PathBuf,
        location: String,
        what: String,
    },
    /// A valid file using a feature Kiln does not support yet.
    #[error("{path}: field `{field}`: {found} is not supported; supported: {supported}")]
    Unsupported {
        path: PathBuf,
        field: String,
        found: String,
        supported: String,
    },
    /// An image could not be decoded.
    #[error("{path}: cannot decode image: {source}; re-export it as JPEG or PNG")]
    Image {
        path: PathBuf,
        #[source]
        source: image::ImageError,
    },
    /// Nothing usable remained after skipping bad entries.
    #[error("{path}: no usable {what} remain: {reason}")]
    Empty {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
    /// A line of a text file (e.g. a COLMAP `cameras.txt`) holds a value Kiln cannot use.
    /// `line` is 1-based; `field` is the column name as the format's own header spells it.
    #[error(
        "{path}:{line}: field `{field}`: expected {expected}, found {found}; fix or remove that line"
    )]
    InvalidLine {
        path: PathBuf,
        line: usize,
        field: String,
        expected: String,
        found: String,
    },
    /// An output format cannot store the splat positions to within
    /// [`crate::splats::placed::POSITION_TOLERANCE_M`] (its f32 or fixed-point positions are too
    /// coarse for coordinates this large); nothing was written. `capacity` states the format's
    /// range and precision, `largest_m` the largest |coordinate| found and `location` where it
    /// is (splat and axis), `fix` what to write instead.
    #[error(
        "{path}: {format} cannot store these splat positions to within {tolerance_m} m: {capacity}; \
         the largest |coordinate| is {largest_m:.3} m ({location}); {fix}",
        tolerance_m = crate::splats::placed::POSITION_TOLERANCE_M
    )]
    PositionRange {
        path: PathBuf,
        format: &'static str,
        capacity: String,
        largest_m: f64,
        location: String,
        fix: &'static str,
    },
    /// A file of the input names a file outside the input (absolute, `..` out of it, or through
    /// a symbolic link leading out): `path` is the naming file, `field` the key or statement,
    /// `found` the name as written, `root` the input folder ([`crate::confined`]).
    #[error(
        "{path}: field `{field}`: `{found}` {why}, which leaves the input folder {root_shown}; a job \
         may read only files inside its input: write a relative path to a file inside that folder \
         (copy the file in if it lives elsewhere)",
        root_shown = .root.display()
    )]
    OutsideInput {
        path: PathBuf,
        field: String,
        found: String,
        why: Box<crate::confined::Escape>,
        root: PathBuf,
    },
    /// In-memory data handed to a writer or encoder is inconsistent (array length, SH degree,
    /// non-finite or out-of-range value); `context` names the writer, `field` the array and index.
    #[error("{context}: field `{field}`: expected {expected}, found {found}")]
    InvalidInput {
        context: &'static str,
        field: String,
        expected: String,
        found: String,
    },
}

impl Error {
    /// Wrap an `io::Error` with the path it concerns; `NotFound` becomes [`Error::NotFound`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound {
                path,
                what: "no such file",
            }
        } else {
            Error::Io { path, source }
        }
    }
    /// This error with every path and message text passed through `rename` (e.g. a job's
    /// work-directory copy of an input replaced by the path or URL the user gave); variants
    /// without a path are returned unchanged.
    #[must_use]
    pub fn renamed(self, rename: &dyn Fn(&str) -> String) -> Self {
        let p = |path: PathBuf| PathBuf::from(rename(&path.to_string_lossy()));
        match self {
            Error::Io { path, source } => Error::Io {
                path: p(path),
                source,
            },
            Error::NotFound { path, what } => Error::NotFound {
                path: p(path),
                what,
            },
            Error::Invalid {
                path,
                field,
                expected,
                found,
            } => Error::Invalid {
                path: p(path),
                field,
                expected: rename(&expected),
                found: rename(&found),
            },
            Error::Corrupt {
                path,
                location,
                what,
            } => Error::Corrupt {
                path: p(path),
                location,
                what: rename(&what),
            },
            Error::Unsupported {
                path,
                field,
                found,
                supported,
            } => Error::Unsupported {
                path: p(path),
                field,
                found: rename(&found),
                supported: rename(&supported),
            },
            Error::Image { path, source } => Error::Image {
                path: p(path),
                source,
            },
            Error::Empty { path, what, reason } => Error::Empty {
                path: p(path),
                what,
                reason: rename(&reason),
            },
            Error::InvalidLine {
                path,
                line,
                field,
                expected,
                found,
            } => Error::InvalidLine {
                path: p(path),
                line,
                field,
                expected: rename(&expected),
                found: rename(&found),
            },
            Error::OutsideInput {
                path,
                field,
                found,
                why,
                root,
            } => Error::OutsideInput {
                path: p(path),
                field,
                found: rename(&found),
                why,
                root: p(root),
            },
            other => other,
        }
    }
}
