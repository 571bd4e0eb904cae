//! The public error type of kiln-pipeline. Lower crates' errors convert in with `From`; stage
//! errors carry the stage, the file or parameter, and what to do.

use std::path::PathBuf;

/// Result alias for kiln-pipeline.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors from running a job's stages.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file format error (names the file and field).
    #[error(transparent)]
    Format(#[from] kiln_formats::Error),
    /// The rasterizer rejected its inputs or the device. (Not a `#[source]`: the message already
    /// carries the whole cause, and a chain would print it twice.)
    #[error("rasterizer: {0}")]
    Kernel(kiln_kernels::Error),
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A job or stage parameter is out of range or inconsistent.
    #[error("stage `{stage}`: parameter `{field}`: expected {expected}, found {found}")]
    Param {
        stage: &'static str,
        field: String,
        expected: String,
        found: String,
    },
    /// The input data cannot be processed (e.g. a mesh with an out-of-range index).
    #[error("{path}: {field}: {problem}")]
    Input {
        path: PathBuf,
        field: String,
        problem: String,
    },
    /// Object storage failed for `url`.
    #[error("object store {url}: {source}")]
    Storage {
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// A numeric failure during training (e.g. loss became NaN).
    #[error("stage `{stage}`: {problem} at step {step}")]
    Numeric {
        stage: &'static str,
        step: usize,
        problem: String,
    },
    /// A queue attempt lost its lease, or the store refused its write because a later attempt
    /// wrote the output first: it stopped. `problem` says why and what the attempt had changed.
    #[error("fenced: attempt with token {token} may no longer write: {problem}")]
    Fenced { token: i64, problem: String },
    /// Stopped by SIGINT/SIGTERM ([`crate::interrupt`]): `at` says where (e.g. "after step 51",
    /// "before it started"), `resume` how to go on (the checkpoint written, or what is kept).
    #[error("stage `{stage}`: stopped by a signal {at}; {resume}")]
    Interrupted {
        stage: &'static str,
        at: String,
        resume: String,
    },
}

impl From<kiln_kernels::Error> for Error {
    fn from(e: kiln_kernels::Error) -> Self {
        Error::Kernel(e)
    }
}

impl Error {
    /// Wrap an `io::Error` with its path.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
    /// This error naming `user` (the path or URL the user gave) wherever it names `copy` (the
    /// job's work-directory copy of that input) or a file under it, so the user can find the file.
    #[must_use]
    pub fn naming_user_input(self, copy: &std::path::Path, user: &str) -> Self {
        let copy = copy.to_string_lossy().into_owned();
        let user = user.trim_end_matches('/').to_string();
        self.renamed(&move |text: &str| text.replace(&copy, &user))
    }

    /// This error in the user's terms: every registered work-directory copy of an input
    /// ([`crate::input_alias`]) replaced by the location the user gave.
    #[must_use]
    pub fn in_user_terms(self) -> Self {
        self.renamed(&|text: &str| crate::input_alias::in_user_terms(text).into_owned())
    }

    /// This error with `rename` applied to the paths and texts it holds.
    fn renamed(self, rename: &dyn Fn(&str) -> String) -> Self {
        match self {
            Error::Format(e) => Error::Format(e.renamed(&rename)),
            Error::Io { path, source } => Error::Io {
                path: PathBuf::from(rename(&path.to_string_lossy())),
                source,
            },
            Error::Input {
                path,
                field,
                problem,
            } => Error::Input {
                path: PathBuf::from(rename(&path.to_string_lossy())),
                field,
                problem: rename(&problem),
            },
            other => other,
        }
    }
}
