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
    /// A `dataset://` path that climbs out of the dataset with `..`.
    #[error("{location}: `..` is not allowed in a dataset:// path; name a file inside the dataset")]
    Escape { location: String },
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

/// Resolve a `dataset://NAME[/SUB/PATH]` URL to a local path; any other location is returned as is.
///
/// # Errors
/// As [`resolve`].
pub fn resolve_location(location: &str) -> Result<String, Error> {
    let Some(rest) = location.strip_prefix("dataset://") else {
        return Ok(location.to_string());
    };
    let (name, sub) = rest.split_once('/').unwrap_or((rest, ""));
    if sub.split('/').any(|part| part == "..") {
        return Err(Error::Escape {
            location: location.into(),
        });
    }
    let mut p = resolve(name)?;
    if !sub.is_empty() {
        p = p.join(sub);
    }
    Ok(p.display().to_string())
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
}
