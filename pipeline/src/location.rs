//! Locations a job names — its input, its output, a worker's stage cache — parsed once, by one
//! parser, for the CLI, the HTTP API and the workers.
//!
//! Accepted forms:
//! - a plain path (absolute or relative to the current directory) or `file:///abs/path`;
//! - `s3://BUCKET[/PREFIX]` (AWS S3 or any S3-compatible server through `AWS_ENDPOINT`);
//! - `dataset://NAME[/PATH]`, a built-in sample, resolved on the machine that reads it (a worker,
//!   not the server that accepted the job); the path may only name something inside the dataset;
//! - `memory://PREFIX`, an in-process store for tests (never valid across processes).
//!
//! Everything else that looks like a URL is refused with a message that says what to write:
//! upper-case schemes (`S3://`), schemes this build has no store for (`gs://`, `az://`,
//! `http(s)://`), an empty bucket (`s3:///x`), and `.`/`..`/empty components in an object key.

use std::path::PathBuf;

/// A parsed location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A filesystem path on the machine that reads or writes it (plain path or `file://`).
    Local(PathBuf),
    /// An S3 (or S3-compatible) bucket and the key prefix inside it (no leading or trailing `/`).
    S3 { bucket: String, key: String },
    /// A built-in sample dataset.
    Dataset(kiln_datasets::DatasetUrl),
    /// An in-process store (tests only).
    Memory(String),
}

/// Why a location was refused: the location as written and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{location}`: {problem}")]
pub struct LocationError {
    pub location: String,
    pub problem: String,
}

/// Schemes people reasonably try that this build has no object store for.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("gs", "Google Cloud Storage"),
    ("gcs", "Google Cloud Storage"),
    ("az", "Azure Blob Storage"),
    ("azure", "Azure Blob Storage"),
    ("abfs", "Azure Data Lake"),
    ("abfss", "Azure Data Lake"),
    ("http", "HTTP"),
    ("https", "HTTP"),
];

impl Location {
    /// Parse `text`. Does no I/O (a `dataset://` URL is resolved by [`Location::resolve_dataset`]).
    ///
    /// # Errors
    /// [`LocationError`] naming the location, what is wrong and the form to use.
    pub fn parse(text: &str) -> Result<Location, LocationError> {
        let refuse = |problem: String| LocationError {
            location: text.into(),
            problem,
        };
        if text.is_empty() {
            return Err(refuse("the location is empty; give a path or a URL".into()));
        }
        if text.trim() != text {
            return Err(refuse(
                "the location starts or ends with white space; remove it".into(),
            ));
        }
        let Some((scheme, rest)) = split_scheme(text) else {
            return Ok(Location::Local(PathBuf::from(text)));
        };
        if scheme != scheme.to_ascii_lowercase() {
            return Err(refuse(format!(
                "URL schemes are lower case here; write `{}://{rest}`",
                scheme.to_ascii_lowercase()
            )));
        }
        match scheme {
            "file" => parse_file(rest).map_err(refuse),
            "s3" => parse_s3(rest).map_err(refuse),
            "memory" => Ok(Location::Memory(rest.trim_matches('/').to_string())),
            "dataset" => match kiln_datasets::parse_url(text) {
                Ok(Some(url)) => Ok(Location::Dataset(url)),
                Ok(None) => unreachable!("the scheme is dataset"),
                Err(e) => Err(LocationError {
                    location: text.into(),
                    problem: match e {
                        kiln_datasets::Error::Escape { problem, .. } => problem,
                        other => other.to_string(),
                    },
                }),
            },
            other => Err(refuse(
                match UNSUPPORTED.iter().find(|(s, _)| *s == other) {
                    Some((_, what)) => format!(
                        "{what} (`{other}://`) is not supported by this build of Kiln; use \
                     s3://BUCKET/PREFIX (any S3-compatible endpoint through AWS_ENDPOINT), a \
                     path, or dataset://NAME"
                    ),
                    None => format!(
                        "unknown scheme `{other}://`; use a path, file:///abs/path, \
                     s3://BUCKET/PREFIX or dataset://NAME"
                    ),
                },
            )),
        }
    }

    /// The location in its canonical form (what a queue stores).
    pub fn to_url(&self) -> String {
        match self {
            Location::Local(p) => p.display().to_string(),
            Location::S3 { bucket, key } if key.is_empty() => format!("s3://{bucket}"),
            Location::S3 { bucket, key } => format!("s3://{bucket}/{key}"),
            Location::Dataset(url) => url.to_url(),
            Location::Memory(prefix) => format!("memory://{prefix}"),
        }
    }

    /// Whether this names a file or folder on the reading machine's own disk.
    pub fn is_local(&self) -> bool {
        matches!(self, Location::Local(_))
    }
}

/// `scheme` and the text after `scheme://`, when `text` is URL-shaped (a scheme of letters,
/// digits, `+`, `-`, `.` followed by `://`); `file:/x` counts as `file` too.
fn split_scheme(text: &str) -> Option<(&str, &str)> {
    if text.len() >= 5 && text[..5].eq_ignore_ascii_case("file:") && !text[5..].starts_with("//") {
        return Some((&text[..4], &text[5..]));
    }
    let (scheme, rest) = text.split_once("://")?;
    let shaped = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    shaped.then_some((scheme, rest))
}

fn parse_file(rest: &str) -> Result<Location, String> {
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return Err(
            "a file: URL takes an absolute path (file:///abs/path); for a relative path write \
             the path alone"
                .into(),
        );
    }
    Ok(Location::Local(PathBuf::from(path)))
}

fn parse_s3(rest: &str) -> Result<Location, String> {
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    // Lenient on length (S3 wants 3–63; some S3-compatible servers take shorter names).
    let bucket_ok = bucket.len() <= 63
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric());
    if !bucket_ok {
        return Err(format!(
            "`{bucket}` is not a bucket name (lower-case letters, digits, `-` and `.`); \
             write s3://BUCKET/PREFIX"
        ));
    }
    let key = key.strip_suffix('/').unwrap_or(key);
    for part in key.split('/').filter(|_| !key.is_empty()) {
        if part.is_empty() || part == "." || part == ".." {
            return Err(format!(
                "the key `{key}` has an empty, `.` or `..` component; object keys here are \
                 plain folder/file names"
            ));
        }
    }
    Ok(Location::S3 {
        bucket: bucket.into(),
        key: key.into(),
    })
}

impl Location {
    /// For a dataset, its local path on this machine (symlinks checked to stay inside it);
    /// anything else unchanged.
    ///
    /// # Errors
    /// [`LocationError`] when the dataset is unknown, missing here, or has no such path.
    pub fn resolve_dataset(self) -> Result<Location, LocationError> {
        match self {
            Location::Dataset(url) => {
                let text = url.to_url();
                kiln_datasets::resolve_location(&text)
                    .map(|p| Location::Local(PathBuf::from(p)))
                    .map_err(|e| LocationError {
                        location: text,
                        problem: e.to_string(),
                    })
            }
            other => Ok(other),
        }
    }
}

/// What a capture job stages for its input (issue 44, rule 1: any file of a capture names the
/// capture): the capture's folder, and the file the user named inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureInput {
    /// The location fetched into the work folder: the capture's folder when the input named a file
    /// of it (its transforms*.json, poses_bounds.npy, COLMAP model file or folder, a photo), else
    /// the input as given.
    pub stage: String,
    /// The named file, `/`-separated and relative to `stage`; empty when the folder is read.
    pub entry: String,
}

/// The capture `input` (a job's input location, as written) names: one rule for `kiln plan`,
/// `kiln run` and a queue worker's staging, so all three read the same capture. A local path is
/// checked on disk ([`kiln_formats::capture::name_capture`]); an object key or dataset path is
/// mapped by names alone ([`kiln_formats::capture::capture_root_of_key`]). A location that does
/// not parse is returned as is (the fetch reports it).
///
/// # Errors
/// [`crate::Error::Input`] naming the path as the user wrote it when a local path does not
/// exist: a mistyped file name inside a capture folder must not quietly stage the whole folder.
pub fn capture_input(input: &str) -> crate::Result<CaptureInput> {
    let unchanged = || CaptureInput {
        stage: input.to_string(),
        entry: String::new(),
    };
    Ok(match Location::parse(input) {
        Ok(Location::Local(path)) => {
            if std::fs::symlink_metadata(&path).is_err() {
                return Err(local_not_found(input, &path));
            }
            let named = kiln_formats::capture::name_capture(&path);
            let root = named.root.display().to_string();
            CaptureInput {
                stage: if root.is_empty() { ".".into() } else { root },
                entry: named.entry,
            }
        }
        Ok(_) => remote_capture_input(input).unwrap_or_else(unchanged),
        Err(_) => unchanged(),
    })
}

/// The error for a local input `path` (written `input`) that does not exist, saying whether the
/// folder it names a file in exists (then the file name is what to check).
fn local_not_found(input: &str, path: &std::path::Path) -> crate::Error {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && p.is_dir());
    let problem = match folder {
        Some(dir) => format!(
            "not found: no such file in {} (check the file name, or name the folder)",
            dir.display()
        ),
        None => "not found: no such file or folder".to_string(),
    };
    crate::Error::Input {
        path: PathBuf::from(input),
        field: "input".into(),
        problem,
    }
}

/// [`capture_input`] for `scheme://AUTHORITY/KEY`: the key mapped by names, never above the
/// authority (the bucket, the dataset).
fn remote_capture_input(url: &str) -> Option<CaptureInput> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, key) = rest.split_once('/')?;
    let (root, entry) = kiln_formats::capture::capture_root_of_key(key)?;
    let stage = match root.is_empty() {
        true => format!("{scheme}://{authority}"),
        false => format!("{scheme}://{authority}/{root}"),
    };
    Some(CaptureInput { stage, entry })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accepted_forms_parse_to_their_canonical_urls() {
        for (text, canonical) in [
            ("s3://bucket/a/b/", "s3://bucket/a/b"),
            ("s3://my.bucket-1", "s3://my.bucket-1"),
            ("file:///abs/x", "/abs/x"),
            ("file://localhost/abs/x", "/abs/x"),
            ("file:/abs/x", "/abs/x"),
            ("out/fox", "out/fox"),
            ("/abs/out", "/abs/out"),
            (
                "dataset://capture-fox-instantngp",
                "dataset://capture-fox-instantngp",
            ),
            (
                "dataset://mesh-khronos-gltf-samples/Avocado/",
                "dataset://mesh-khronos-gltf-samples/Avocado",
            ),
            ("memory://t", "memory://t"),
        ] {
            assert_eq!(Location::parse(text).unwrap().to_url(), canonical, "{text}");
        }
    }

    #[test]
    fn forms_that_can_never_work_are_refused_saying_what_to_write() {
        for (text, says) in [
            ("S3://b/x", "s3://b/x"),
            ("s3:///x", "bucket name"),
            ("s3://b/../etc", "`..`"),
            ("s3://bucket//x", "empty"),
            ("s3://Bucket/x", "bucket name"),
            ("gs://b/x", "Google Cloud Storage"),
            ("az://c/x", "Azure"),
            ("http://example.com/x.ply", "HTTP"),
            ("https://example.com/x.ply", "HTTP"),
            ("ftp://h/x", "unknown scheme"),
            ("file://relative/x", "absolute path"),
            ("dataset://fox//etc/passwd", "absolute"),
            ("dataset://fox/../x", "`..`"),
            ("", "empty"),
            (" s3://b/x", "white space"),
        ] {
            let e = Location::parse(text).unwrap_err();
            assert_eq!(e.location, text);
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_missing_local_file_is_not_found_naming_the_users_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("fox/images")).unwrap();
        std::fs::write(dir.path().join("fox/transforms.json"), "{}").unwrap();
        for typo in [
            "fox/transform.json",
            "fox/images/9999.jpg",
            "no_such_folder",
        ] {
            let input = dir.path().join(typo).display().to_string();
            for written in [input.clone(), format!("file://{input}")] {
                let err = capture_input(&written).unwrap_err().to_string();
                assert!(err.contains(&input) && err.contains("not found"), "{err}");
            }
        }
        let fine = dir.path().join("fox/transforms.json").display().to_string();
        assert_eq!(capture_input(&fine).unwrap().entry, "transforms.json");
    }

    #[test]
    fn a_file_of_a_remote_capture_stages_the_capture_folder() {
        for (input, stage, entry) in [
            (
                "s3://team/fox/transforms.json",
                "s3://team/fox",
                "transforms.json",
            ),
            (
                "s3://team/scene/sparse/0/cameras.bin",
                "s3://team/scene",
                "sparse/0/cameras.bin",
            ),
            ("s3://team/scene/images/a.jpg", "s3://team/scene", ""),
            ("s3://team/transforms.json", "s3://team", "transforms.json"),
            (
                "dataset://capture-fox-instantngp/transforms.json",
                "dataset://capture-fox-instantngp",
                "transforms.json",
            ),
            ("s3://team/fox", "s3://team/fox", ""),
            ("s3://team/clip.mp4", "s3://team/clip.mp4", ""),
        ] {
            let got = capture_input(input).unwrap();
            assert_eq!(
                (got.stage.as_str(), got.entry.as_str()),
                (stage, entry),
                "{input}"
            );
        }
    }

    #[test]
    fn datasets_resolve_on_the_reading_machine() {
        let l = Location::parse("dataset://capture-fox-instantngp/transforms.json").unwrap();
        let Location::Local(p) = l.resolve_dataset().unwrap() else {
            panic!("a dataset resolves to a local path")
        };
        assert!(p.is_file(), "{}", p.display());
        let e = Location::parse("dataset://capture-fox-instantngp/nope")
            .unwrap()
            .resolve_dataset()
            .unwrap_err();
        assert!(e.problem.contains("no `nope`"), "{e}");
    }
}
