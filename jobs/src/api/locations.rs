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

use kiln_pipeline::location::Location;

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

/// Check a submission's `input` and effective `output` (the job file's, or the `output` option
/// that replaces it) against `policy`, with the one location parser
/// ([`kiln_pipeline::location::Location`]):
///
/// - malformed locations and schemes this server has no store for (`S3://`, `gs://`, `http://`,
///   `s3:///x`, `s3://b/../x`, `dataset://NAME//abs`, …) are refused whatever the policy;
/// - `memory://` is refused (it lives inside one process; a worker would never see it);
/// - a plain path or `file:` URL passes only under [`LocalPaths::Allow`];
/// - `dataset://` only as an input (samples are read-only).
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
    check_one("job file field `input`", input, policy)?;
    check_one("job file field `output`", output, policy)
}

fn check_one(field: &'static str, value: &str, policy: LocalPaths) -> Result<(), ApiError> {
    let is_input = field.ends_with("`input`");
    let refuse = |message: String| ApiError::BadRequest {
        what: field,
        message,
    };
    let parsed = Location::parse(value).map_err(|e| refuse(e.to_string()))?;
    match parsed {
        Location::Local(_) if policy == LocalPaths::Refuse => Err(refuse(format!(
            "`{value}` is a path on the server's machine, and this server does not accept local \
             paths over the API (they would let a request read or write any file the server can \
             reach); use an object-store URL such as s3://bucket/prefix{}, or start kiln serve \
             with --allow-local-paths on a single-user machine",
            if is_input {
                ", or dataset://NAME for a built-in sample"
            } else {
                ""
            }
        ))),
        Location::Memory(_) => Err(refuse(format!(
            "`{value}` is an in-process store for tests; workers run in other processes and \
             would never see it; use s3://bucket/prefix"
        ))),
        Location::Dataset(_) if !is_input => Err(refuse(format!(
            "`{value}` names a built-in sample, which is read-only; write the output to an \
             object-store URL such as s3://bucket/prefix"
        ))),
        Location::Local(_) | Location::Dataset(_) | Location::S3 { .. } => Ok(()),
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
            "file:/etc/passwd",
            "s3:/missing-slash",
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
            "dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf",
        ] {
            check_submitted_locations(input, "s3://b/out", LocalPaths::Refuse).unwrap();
        }
    }

    #[test]
    fn locations_that_can_never_work_or_escape_are_refused_under_every_policy() {
        for policy in [LocalPaths::Refuse, LocalPaths::Allow] {
            for (bad, says) in [
                ("dataset://capture-fox-instantngp//etc/passwd", "absolute"),
                ("dataset://capture-fox-instantngp/../../etc", "`..`"),
                ("S3://b/x", "s3://b/x"),
                ("memory://x", "in-process"),
                ("http://example.com/a.ply", "HTTP"),
                ("gs://b/x", "Google Cloud Storage"),
                ("s3:///x", "bucket"),
                ("s3://b/../etc", "`..`"),
                ("", "empty"),
            ] {
                let e = check_submitted_locations(bad, "s3://b/o", policy).unwrap_err();
                assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{bad}");
                let m = e.to_string();
                assert!(m.contains("`input`") && m.contains(says), "{bad}: {m}");
                let e = check_submitted_locations("s3://b/i", bad, policy).unwrap_err();
                assert!(e.to_string().contains("`output`"), "{bad}: {e}");
            }
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
