//! Where a job's output lives, as `kiln serve` sees it, and which request paths under it are safe.
//!
//! The ledger records the output exactly as the job file or `--output` gave it: a plain path
//! (older `kiln run`s recorded it relative to the directory they ran in), a `file://` URL, or a
//! remote URL (`s3://…`). Only local outputs can be served; everything else gets a clear note on
//! the page instead of a broken viewer.

use std::path::{Component, Path, PathBuf};

/// A job output resolved for serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputLocation {
    /// A local folder (absolute). It may not exist (yet, or any more); callers check.
    Local {
        /// The absolute folder.
        dir: PathBuf,
        /// True when the ledger held a relative path, resolved against the server's working
        /// directory (the directory the job ran in is not recorded).
        was_relative: bool,
    },
    /// An object-store URL (`s3://bucket/prefix`, …): not served.
    Remote {
        /// The URL as recorded.
        url: String,
    },
    /// Something `kiln serve` cannot interpret (empty, a `file://` URL on another host, an unknown
    /// scheme, bad percent-encoding).
    Unsupported {
        /// The value as recorded.
        recorded: String,
        /// Why it cannot be served.
        reason: &'static str,
    },
}

/// Resolve a ledger `output` value.
///
/// - an absolute path → [`OutputLocation::Local`];
/// - a relative path → joined onto `cwd` (the server's working directory), `was_relative: true`;
/// - `file:///abs/path` or `file://localhost/abs/path` (percent-decoded) → local;
/// - `s3://`, `gs://`, `az://`, `http(s)://`, … → [`OutputLocation::Remote`];
/// - `dataset://`, other hosts in `file://`, empty values → [`OutputLocation::Unsupported`].
///
/// Does no I/O. Never panics.
pub fn resolve_output(recorded: &str, cwd: &Path) -> OutputLocation {
    let unsupported = |reason| OutputLocation::Unsupported {
        recorded: recorded.to_string(),
        reason,
    };
    let trimmed = recorded.trim();
    if trimmed.is_empty() {
        return unsupported("the ledger records no output for this job");
    }
    if let Some(rest) = trimmed.strip_prefix("file://") {
        let path = if rest.starts_with('/') {
            rest
        } else if let Some(p) = rest.strip_prefix("localhost") {
            p
        } else {
            return unsupported("a file:// URL on another host cannot be served from here");
        };
        if !path.starts_with('/') {
            return unsupported("a file:// URL needs an absolute path (file:///abs/path)");
        }
        return match percent_decode(path) {
            Some(p) => OutputLocation::Local {
                dir: PathBuf::from(p),
                was_relative: false,
            },
            None => unsupported("the file:// URL has invalid percent-encoding"),
        };
    }
    if let Some((scheme, _)) = trimmed.split_once("://") {
        let is_scheme = !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if is_scheme {
            return match scheme.to_ascii_lowercase().as_str() {
                "dataset" => unsupported("dataset:// names a sample input, not a job output"),
                _ => OutputLocation::Remote {
                    url: trimmed.to_string(),
                },
            };
        }
    }
    let p = Path::new(trimmed);
    if p.is_absolute() {
        OutputLocation::Local {
            dir: p.to_path_buf(),
            was_relative: false,
        }
    } else {
        OutputLocation::Local {
            dir: cwd.join(p),
            was_relative: true,
        }
    }
}

/// Decode `%XX` escapes (UTF-8). `None` on a truncated or non-hex escape or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Why a requested file path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsafePath {
    /// Empty, or only slashes.
    Empty,
    /// Starts with `/` or `\`, or carries a Windows drive/prefix.
    Absolute,
    /// Has a `..` component (would leave the output folder).
    ParentDir,
    /// Has a backslash or NUL byte (ambiguous across platforms).
    BadCharacter,
}

impl std::fmt::Display for UnsafePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UnsafePath::Empty => "the path is empty",
            UnsafePath::Absolute => "absolute paths are not allowed",
            UnsafePath::ParentDir => "`..` is not allowed",
            UnsafePath::BadCharacter => "backslashes and NUL bytes are not allowed",
        })
    }
}

/// Check a request path (already percent-decoded by the router) that must stay inside a served
/// folder, and return it as a relative path with `.` components dropped.
///
/// # Errors
/// [`UnsafePath`] naming the rule the path breaks.
pub fn safe_relative_path(requested: &str) -> Result<PathBuf, UnsafePath> {
    if requested.contains('\\') || requested.contains('\0') {
        return Err(UnsafePath::BadCharacter);
    }
    if requested.starts_with('/') {
        return Err(UnsafePath::Absolute);
    }
    let mut out = PathBuf::new();
    for c in Path::new(requested).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(UnsafePath::ParentDir),
            Component::RootDir | Component::Prefix(_) => return Err(UnsafePath::Absolute),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(UnsafePath::Empty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_output_is_local_as_recorded() {
        let r = resolve_output("/data/out/avocado", Path::new("/srv"));
        assert_eq!(
            r,
            OutputLocation::Local {
                dir: "/data/out/avocado".into(),
                was_relative: false
            }
        );
    }

    #[test]
    fn relative_output_resolves_against_server_cwd() {
        let r = resolve_output("out/avocado", Path::new("/srv"));
        assert_eq!(
            r,
            OutputLocation::Local {
                dir: "/srv/out/avocado".into(),
                was_relative: true
            }
        );
    }

    #[test]
    fn file_url_output_is_percent_decoded() {
        for url in ["file:///data/my%20out", "file://localhost/data/my%20out"] {
            assert_eq!(
                resolve_output(url, Path::new("/srv")),
                OutputLocation::Local {
                    dir: "/data/my out".into(),
                    was_relative: false
                },
                "{url}"
            );
        }
    }

    #[test]
    fn s3_output_is_remote() {
        assert_eq!(
            resolve_output("s3://bucket/prefix", Path::new("/srv")),
            OutputLocation::Remote {
                url: "s3://bucket/prefix".into()
            }
        );
    }

    #[test]
    fn odd_outputs_are_unsupported_not_panics() {
        for bad in [
            "",
            "   ",
            "file://otherhost/x",
            "file://relative",
            "file:///bad%zz",
            "file:///trunc%2",
            "dataset://fox",
        ] {
            assert!(
                matches!(
                    resolve_output(bad, Path::new("/srv")),
                    OutputLocation::Unsupported { .. }
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn safe_path_accepts_nested_relative_paths() {
        assert_eq!(
            safe_relative_path("tiles/0/1.glb").unwrap(),
            PathBuf::from("tiles/0/1.glb")
        );
        assert_eq!(
            safe_relative_path("./report/./index.html").unwrap(),
            PathBuf::from("report/index.html")
        );
    }

    #[test]
    fn safe_path_rejects_parent_dir_components() {
        for p in [
            "..",
            "../x",
            "a/../../x",
            "a/..",
            "tiles/../../../etc/passwd",
        ] {
            assert_eq!(safe_relative_path(p), Err(UnsafePath::ParentDir), "{p}");
        }
    }

    #[test]
    fn safe_path_rejects_absolute_paths() {
        for p in ["/etc/passwd", "//x"] {
            assert_eq!(safe_relative_path(p), Err(UnsafePath::Absolute), "{p}");
        }
    }

    #[test]
    fn safe_path_rejects_backslashes_nul_and_empty() {
        assert_eq!(safe_relative_path("..\\x"), Err(UnsafePath::BadCharacter));
        assert_eq!(safe_relative_path("a\0b"), Err(UnsafePath::BadCharacter));
        assert_eq!(safe_relative_path(""), Err(UnsafePath::Empty));
        assert_eq!(safe_relative_path("./."), Err(UnsafePath::Empty));
    }
}
