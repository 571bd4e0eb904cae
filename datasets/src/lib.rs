//! kiln-datasets: the sample-dataset manifest (`datasets/manifest.toml`, compiled in) and the
//! resolver that finds each dataset on disk.
//!
//! Search order: `$KILN_DATASETS`, then `../shared/datasets` from the current directory, then
//! `../shared/datasets` next to the checkout this binary was built from. A missing dataset is an
//! error that says where to put it — never a silently skipped test.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The manifest text, compiled into the binary.
pub const MANIFEST_TOML: &str = include_str!("../manifest.toml");

/// One dataset of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    /// Unique name, used in `dataset://NAME` URLs.
    pub name: String,
    /// `capture`, `mesh`, `splat` or `tiles`.
    pub kind: String,
    /// Folder relative to the datasets root.
    pub path: String,
    /// Hex SHA-256 of the dataset's `SHA256SUMS` file.
    pub sha256: String,
    pub license: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    dataset: Vec<Dataset>,
}

/// Errors of the resolver.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name is not in the manifest.
    #[error("dataset `{name}` is not in datasets/manifest.toml; known: {known}")]
    Unknown { name: String, known: String },
    /// The dataset is not on this machine.
    #[error(
        "dataset `{name}` not found (looked in: {searched}); set KILN_DATASETS to the folder holding `{path}`, or place it at ../shared/datasets/{path}"
    )]
    Missing {
        name: String,
        path: String,
        searched: String,
    },
    /// The files on disk differ from the manifest.
    #[error(
        "dataset `{name}`: {file}: expected sha256 {expected}, found {found}; the copy is damaged or a different version — fetch it again"
    )]
    Checksum {
        name: String,
        file: String,
        expected: String,
        found: String,
    },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `dataset://` URL that is malformed or would leave its dataset (an absolute sub-path,
    /// `.` or `..` components, a symlink pointing outside).
    #[error("`{location}`: {problem}")]
    Escape { location: String, problem: String },
    /// A `dataset://NAME/PATH` whose PATH does not exist in the dataset.
    #[error("`{location}`: dataset `{name}` has no `{sub}`; name a file or folder inside it")]
    NoSuchPath {
        location: String,
        name: String,
        sub: String,
    },
    /// The compiled-in manifest does not parse (a build defect).
    #[error("datasets/manifest.toml: {0}")]
    Manifest(#[from] toml::de::Error),
}

/// All datasets of the manifest.
///
/// # Errors
/// [`Error::Manifest`] if the compiled-in manifest is malformed.
pub fn manifest() -> Result<Vec<Dataset>, Error> {
    Ok(toml::from_str::<Manifest>(MANIFEST_TOML)?.dataset)
}

/// The manifest entry named `name`.
///
/// # Errors
/// [`Error::Unknown`] listing the known names.
pub fn find(name: &str) -> Result<Dataset, Error> {
    let mut all = manifest()?;
    match all.iter().position(|d| d.name == name) {
        Some(i) => Ok(all.swap_remove(i)),
        None => Err(Error::Unknown {
            name: name.into(),
            known: all
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The folders searched for datasets, in order.
pub fn search_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(p) = std::env::var_os("KILN_DATASETS") {
        roots.push(PathBuf::from(p));
    }
    roots.push(PathBuf::from("../shared/datasets"));
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets"));
    roots
}

/// The local folder of dataset `name`.
///
/// # Errors
/// [`Error::Unknown`] for a name not in the manifest; [`Error::Missing`] naming every searched
/// folder when it is not on disk.
pub fn resolve(name: &str) -> Result<PathBuf, Error> {
    let ds = find(name)?;
    let roots = search_roots();
    for root in &roots {
        let p = root.join(&ds.path);
        if p.join("SHA256SUMS").is_file() || p.is_dir() {
            return Ok(std::fs::canonicalize(&p).unwrap_or(p));
        }
    }
    Err(Error::Missing {
        name: name.into(),
        path: ds.path.clone(),
        searched: roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// A parsed `dataset://NAME[/SUB/PATH]` URL: the dataset's name and the normalised sub-path
/// (`/`-separated components, empty for the whole dataset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetUrl {
    pub name: String,
    pub sub: String,
}

impl DatasetUrl {
    /// The canonical URL text (what a queue stores and a worker resolves).
    pub fn to_url(&self) -> String {
        if self.sub.is_empty() {
            format!("dataset://{}", self.name)
        } else {
            format!("dataset://{}/{}", self.name, self.sub)
        }
    }
}

/// Parse `location` as a `dataset://` URL; `Ok(None)` when it is some other location.
///
/// The sub-path may only name something inside the dataset: an empty component (`NAME//abs`, which
/// a path join would turn into an absolute path), `.`, `..`, a backslash or a NUL are refused. A
/// single trailing `/` is allowed. Does no I/O; [`resolve_location`] also checks symlinks.
///
/// # Errors
/// [`Error::Escape`] naming the location and the offending part.
pub fn parse_url(location: &str) -> Result<Option<DatasetUrl>, Error> {
    let Some(rest) = location.strip_prefix("dataset://") else {
        return Ok(None);
    };
    let escape = |problem: String| Error::Escape {
        location: location.into(),
        problem,
    };
    let (name, sub) = rest.split_once('/').unwrap_or((rest, ""));
    let name_ok = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(escape(format!(
            "`{name}` is not a dataset name (letters, digits, `-`, `_`, `.`); write dataset://NAME/PATH"
        )));
    }
    let sub = sub.strip_suffix('/').unwrap_or(sub);
    let mut parts = Vec::new();
    for part in sub.split('/').filter(|_| !sub.is_empty()) {
        let problem = match part {
            "" => Some("an empty path component (`//`) would make the path absolute".to_string()),
            "." | ".." => Some(format!("`{part}` components are not allowed")),
            p if p.contains('\\') || p.contains('\0') => {
                Some(format!("`{p}` holds a backslash or NUL"))
            }
            _ => None,
        };
        if let Some(problem) = problem {
            return Err(escape(format!(
                "{problem} in a dataset:// path; name a file inside the dataset, e.g. \
                 dataset://{name}/folder/file"
            )));
        }
        parts.push(part);
    }
    Ok(Some(DatasetUrl {
        name: name.into(),
        sub: parts.join("/"),
    }))
}

/// Resolve a `dataset://NAME[/SUB/PATH]` URL to a local path on this machine; any other location
/// is returned as is. The resolved path must exist, and after following symlinks it must still
/// lie inside the dataset's folder.
///
/// # Errors
/// [`parse_url`]'s errors; [`Error::NoSuchPath`]; [`Error::Escape`] for a symlink that leads out
/// of the dataset; [`resolve`]'s errors.
pub fn resolve_location(location: &str) -> Result<String, Error> {
    let Some(url) = parse_url(location)? else {
        return Ok(location.to_string());
    };
    let root = resolve(&url.name)?;
    Ok(resolve_inside(&root, &url, location)?.display().to_string())
}

/// `url`'s sub-path under the dataset folder `root`, symlinks followed and checked to stay inside.
fn resolve_inside(root: &Path, url: &DatasetUrl, location: &str) -> Result<PathBuf, Error> {
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if url.sub.is_empty() {
        return Ok(real_root);
    }
    let real = std::fs::canonicalize(real_root.join(&url.sub)).map_err(|_| Error::NoSuchPath {
        location: location.into(),
        name: url.name.clone(),
        sub: url.sub.clone(),
    })?;
    if !real.starts_with(&real_root) {
        return Err(Error::Escape {
            location: location.into(),
            problem: "it is a symlink that leads out of the dataset".into(),
        });
    }
    Ok(real)
}

/// Check dataset `name` against the manifest: the SHA256SUMS fingerprint, then every file listed in
/// it. Returns the number of files checked.
///
/// # Errors
/// [`Error::Checksum`] naming the first file that differs; [`Error::Io`]; resolver errors.
pub fn verify(name: &str) -> Result<usize, Error> {
    let ds = find(name)?;
    let root = resolve(name)?;
    let sums_path = root.join("SHA256SUMS");
    let sums = std::fs::read(&sums_path).map_err(|source| Error::Io {
        path: sums_path.clone(),
        source,
    })?;
    let found = hex(&Sha256::digest(&sums));
    if found != ds.sha256 {
        return Err(Error::Checksum {
            name: name.into(),
            file: "SHA256SUMS".into(),
            expected: ds.sha256.clone(),
            found,
        });
    }
    let mut n = 0;
    for line in String::from_utf8_lossy(&sums).lines() {
        let Some((want, file)) = line.split_once("  ") else {
            continue;
        };
        let path = root.join(file.trim_start_matches("./"));
        let bytes = std::fs::read(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let got = hex(&Sha256::digest(&bytes));
        if got != want {
            return Err(Error::Checksum {
                name: name.into(),
                file: file.into(),
                expected: want.into(),
                found: got,
            });
        }
        n += 1;
    }
    Ok(n)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_parses_and_names_are_unique() {
        let m = manifest().unwrap();
        assert!(m.len() >= 4);
        let mut names: Vec<_> = m.iter().map(|d| &d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), m.len());
    }

    #[test]
    fn unknown_dataset_lists_the_known_ones() {
        let e = resolve("nope").unwrap_err().to_string();
        assert!(e.contains("capture-fox-instantngp"), "{e}");
    }

    #[test]
    fn fox_resolves_and_verifies_against_its_checksums() {
        let p = resolve("capture-fox-instantngp").unwrap();
        assert!(p.join("transforms.json").is_file());
        assert!(verify("capture-fox-instantngp").unwrap() >= 51);
    }

    #[test]
    fn dataset_url_resolves_with_subpath_and_other_urls_pass_through() {
        let p = resolve_location("dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf")
            .unwrap();
        assert!(Path::new(&p).is_file(), "{p}");
        assert_eq!(resolve_location("s3://b/k").unwrap(), "s3://b/k");
        assert!(resolve_location("dataset://mesh-playcanvas-glb/../../etc/passwd").is_err());
    }

    #[test]
    fn dataset_paths_that_would_leave_the_dataset_are_refused() {
        for bad in [
            "dataset://capture-fox-instantngp//etc/passwd",
            "dataset://capture-fox-instantngp/../../etc/passwd",
            "dataset://capture-fox-instantngp/images/../../x",
            "dataset://capture-fox-instantngp/./transforms.json",
            "dataset://capture-fox-instantngp/a\\..\\b",
            "dataset:///etc/passwd",
            "dataset://../x",
            "dataset://",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(matches!(e, Error::Escape { .. }), "{bad}: {e}");
            assert!(e.to_string().contains(bad), "{e}");
            assert!(resolve_location(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dataset_urls_normalise_a_trailing_slash_and_name_missing_files() {
        let u = parse_url("dataset://capture-fox-instantngp/images/")
            .unwrap()
            .unwrap();
        assert_eq!(u.to_url(), "dataset://capture-fox-instantngp/images");
        assert_eq!(parse_url("s3://b/k").unwrap(), None);
        let e = resolve_location("dataset://capture-fox-instantngp/nope.json").unwrap_err();
        assert!(matches!(e, Error::NoSuchPath { .. }), "{e}");
    }

    #[test]
    fn a_symlink_inside_a_dataset_cannot_lead_out_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dir.path().join("ds");
        std::fs::create_dir_all(ds.join("inside")).unwrap();
        std::fs::write(ds.join("inside/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(dir.path(), ds.join("escape")).unwrap();
        std::os::unix::fs::symlink(ds.join("inside"), ds.join("alias")).unwrap();
        let url = |sub: &str| DatasetUrl {
            name: "ds".into(),
            sub: sub.into(),
        };
        let ok = resolve_inside(&ds, &url("alias/a.txt"), "dataset://ds/alias/a.txt").unwrap();
        assert!(ok.ends_with("inside/a.txt"), "{}", ok.display());
        let e = resolve_inside(&ds, &url("escape"), "dataset://ds/escape").unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }
}
