//! Which input and output locations a job submitted over the API may name.
//!
//! A job file names its input and output as URLs or paths, and the workers read and write them
//! with the server's (and the workers') credentials and file system. A plain path or a `file://`
//! URL submitted over the network would let any team read or overwrite any file those processes
//! can reach, so by default the API refuses them ([`LocalPaths::Refuse`]) and accepts only
//! object-store URLs (`s3://…`, and whatever other scheme the storage layer knows) and, for
//! inputs, `dataset://NAME` (the read-only built-in samples, resolved by the server).
//! `kiln serve --allow-local-paths` ([`LocalPaths::Allow`]) lifts this for single-user machines.
//! `kiln submit` (local, not over HTTP) is not affected.

use super::ApiError;

/// Whether submitted job files may name local paths on the server's machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalPaths {
    /// Refuse plain paths and `file://` URLs for input and output with 400 (the default).
    #[default]
    Refuse,
    /// Accept them (`kiln serve --allow-local-paths`; for single-user machines).
    Allow,
}

/// How a submitted location reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    /// A plain path (absolute or relative), or a `file:` URL: on the server's machine.
    Local,
    /// `dataset://NAME`: a built-in sample, read-only.
    Dataset,
    /// Any other `scheme://…` (object storage; the storage layer checks the scheme).
    Remote,
}

fn classify(location: &str) -> Location {
    let trimmed = location.trim();
    let lower = trimmed.to_ascii_lowercase();
    if lower.starts_with("file:") {
        return Location::Local;
    }
    match trimmed.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            if scheme.eq_ignore_ascii_case("dataset") {
                Location::Dataset
            } else {
                Location::Remote
            }
        }
        // Anything that is not `scheme://…` is a path (so `s3:/x` or `C:\x` are refused too).
        _ => Location::Local,
    }
}

/// Check a submission's `input` and effective `output` (the job file's, or the `output` option
/// that replaces it) against `policy`.
///
/// - input: `dataset://NAME` and remote URLs always pass; a plain path or `file:` URL passes only
///   under [`LocalPaths::Allow`];
/// - output: remote URLs always pass; a plain path or `file:` URL only under
///   [`LocalPaths::Allow`]; `dataset://` never (samples are read-only).
///
/// Does no I/O.
///
/// # Errors
/// [`ApiError::BadRequest`] naming the field, the value, why it is refused and what to use.
pub fn check_submitted_locations(
    input: &str,
    output: &str,
    policy: LocalPaths,
) -> Result<(), ApiError> {
    let local_refused = |field: &'static str, value: &str| ApiError::BadRequest {
        what: field,
        message: format!(
            "`{value}` is a path on the server's machine, and this server does not accept local \
             paths over the API (they would let a request read or write any file the server can \
             reach); use an object-store URL such as s3://bucket/prefix{}, or start kiln serve \
             with --allow-local-paths on a single-user machine",
            if field == "job file field `input`" {
                ", or dataset://NAME for a built-in sample"
            } else {
                ""
            }
        ),
    };
    match (classify(input), policy) {
        (Location::Local, LocalPaths::Refuse) => {
            return Err(local_refused("job file field `input`", input));
        }
        (Location::Local | Location::Dataset | Location::Remote, _) => {}
    }
    match (classify(output), policy) {
        (Location::Local, LocalPaths::Refuse) => {
            Err(local_refused("job file field `output`", output))
        }
        (Location::Dataset, _) => Err(ApiError::BadRequest {
            what: "job file field `output`",
            message: format!(
                "`{output}` names a built-in sample, which is read-only; write the output to an \
                 object-store URL such as s3://bucket/prefix"
            ),
        }),
        (Location::Local | Location::Remote, _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn plain_paths_and_file_urls_are_refused_by_default_naming_the_fix() {
        for local in [
            "/etc/passwd",
            "out/a",
            "./x",
            "../../x",
            "file:///etc/passwd",
            "FILE://localhost/x",
            "file:/etc/passwd",
            "s3:/missing-slash",
            "",
        ] {
            let e = check_submitted_locations(local, "s3://b/o", LocalPaths::Refuse).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{local}");
            let m = e.to_string();
            assert!(
                m.contains("`input`") && m.contains("s3://") && m.contains("dataset://NAME"),
                "{m}"
            );
            assert!(m.contains("--allow-local-paths"), "{m}");
            let e = check_submitted_locations("s3://b/i", local, LocalPaths::Refuse).unwrap_err();
            assert!(e.to_string().contains("`output`"), "{e}");
        }
    }

    #[test]
    fn remote_urls_and_datasets_pass_without_the_flag() {
        for input in [
            "s3://b/in",
            "dataset://mesh-khronos-gltf-samples",
            "gs://b/x",
        ] {
            check_submitted_locations(input, "s3://b/out", LocalPaths::Refuse).unwrap();
        }
    }

    #[test]
    fn allow_local_paths_accepts_paths_and_file_urls() {
        check_submitted_locations("/data/in", "out/a", LocalPaths::Allow).unwrap();
        check_submitted_locations("file:///in", "file:///out", LocalPaths::Allow).unwrap();
    }

    #[test]
    fn datasets_are_never_an_output() {
        for policy in [LocalPaths::Refuse, LocalPaths::Allow] {
            let e = check_submitted_locations("s3://b/i", "dataset://x", policy).unwrap_err();
            assert!(e.to_string().contains("read-only"), "{e}");
        }
    }
}
