//! `publish`: copy a job's outputs to the output URL so that no reader sees a half-published set.
//!
//! Protocol: (1) upload every file under `.staging-<job id>/`; (2) delete the old `manifest.json`
//! (readers treat a folder without a manifest as in flux); (3) rename each staged file to its final
//! name; (4) write `manifest.json` last — its presence commits the set. Each single object write is
//! atomic in every `object_store` backend. A failure before (4) leaves no manifest and removes the
//! staging prefix.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use object_store::ObjectStoreExt;

use crate::storage;
use crate::{Error, Result};

/// One local file to publish under `relative` (forward slashes) in the output.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishFile {
    pub local: PathBuf,
    pub relative: String,
}

/// One entry of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Path relative to the output URL.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Hex BLAKE3 of the content.
    pub blake3: String,
}

/// `manifest.json`: the committed set of outputs of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub job_id: String,
    pub kiln_version: String,
    pub files: Vec<ManifestEntry>,
    /// The publish stage's content key (its inputs' keys and the output location): a job whose
    /// publish key matches an existing manifest's has nothing new to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_key: Option<String>,
}

/// Name of the manifest at the output root.
pub const MANIFEST_JSON: &str = "manifest.json";

/// What [`publish`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishReport {
    pub manifest: Manifest,
    /// Bytes uploaded, including the manifest.
    pub bytes_written: u64,
}

/// Publish `files` to `output` (URL or path) for job `job_id`.
///
/// # Errors
/// [`Error::Io`] when a local file cannot be read, [`Error::Storage`] when an upload or rename
/// fails, [`Error::Param`] when two files map to the same relative path.
pub async fn publish(files: &[PublishFile], output: &str, job_id: &str) -> Result<PublishReport> {
    publish_keyed(files, output, job_id, None).await
}

/// [`publish`], recording the publish stage's content key in the manifest.
///
/// # Errors
/// As [`publish`].
pub async fn publish_keyed(
    files: &[PublishFile],
    output: &str,
    job_id: &str,
    stage_key: Option<&str>,
) -> Result<PublishReport> {
    let mut seen = std::collections::BTreeSet::new();
    for f in files {
        if !seen.insert(f.relative.as_str()) || f.relative == MANIFEST_JSON {
            return Err(Error::Param {
                stage: "publish",
                field: "files".into(),
                expected: "unique relative paths, none named manifest.json".into(),
                found: f.relative.clone(),
            });
        }
    }
    let store = storage::open(output)?;
    let staging = format!(".staging-{job_id}");
    let mut entries = Vec::with_capacity(files.len());
    let mut bytes_written = 0;
    let bar = crate::progress::bytes_bar(
        files
            .iter()
            .map(|f| std::fs::metadata(&f.local).map(|m| m.len()).unwrap_or(0))
            .sum(),
        "publish",
    );
    let staged = async {
        for f in files {
            let data = tokio::fs::read(&f.local)
                .await
                .map_err(|e| Error::io(&f.local, e))?;
            entries.push(ManifestEntry {
                path: f.relative.clone(),
                bytes: data.len() as u64,
                blake3: blake3::hash(&data).to_hex().to_string(),
            });
            bytes_written += store
                .put_bytes(&format!("{staging}/{}", f.relative), data)
                .await?;
        }
        Ok::<_, Error>(())
    }
    .await;
    bar.finish_and_clear();
    if let Err(e) = staged {
        let _ = store.delete_prefix(&staging).await;
        return Err(e);
    }
    // Files of the previous publish that this one does not rewrite are removed after the renames,
    // so the output matches its new manifest.
    let previous: Vec<String> = match store.store.get(&store.child(MANIFEST_JSON)).await {
        Ok(r) => match r.bytes().await {
            Ok(b) => serde_json::from_slice::<Manifest>(&b)
                .map(|m| m.files.into_iter().map(|f| f.path).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        },
        Err(_) => Vec::new(),
    };
    match store.store.delete(&store.child(MANIFEST_JSON)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
        Err(source) => {
            return Err(Error::Storage {
                url: output.into(),
                source,
            });
        }
    }
    for f in files {
        store
            .rename(&format!("{staging}/{}", f.relative), &f.relative)
            .await?;
    }
    let _ = store.delete_prefix(&staging).await;
    for old in previous.iter().filter(|p| !seen.contains(p.as_str())) {
        match store.store.delete(&store.child(old)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(Error::Storage {
                    url: output.into(),
                    source,
                });
            }
        }
    }
    let manifest = Manifest {
        job_id: job_id.into(),
        kiln_version: env!("CARGO_PKG_VERSION").into(),
        stage_key: stage_key.map(String::from),
        files: entries,
    };
    let json = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
    bytes_written += store.put_bytes(MANIFEST_JSON, json).await?;
    Ok(PublishReport {
        manifest,
        bytes_written,
    })
}

/// The manifest committed at `output`, if there is a readable one.
pub async fn read_manifest(output: &str) -> Option<Manifest> {
    use object_store::ObjectStoreExt;
    let store = storage::open(output).ok()?;
    let got = store.store.get(&store.child(MANIFEST_JSON)).await.ok()?;
    let bytes = got.bytes().await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn publish_writes_files_and_a_manifest_with_blake3_and_no_staging_left() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), b"hello").unwrap();
        let out = tempfile::tempdir().unwrap();
        let files = vec![PublishFile {
            local: src.path().join("a.txt"),
            relative: "sub/a.txt".into(),
        }];
        let r = publish(&files, out.path().to_str().unwrap(), "job1")
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(out.path().join("sub/a.txt")).unwrap(),
            b"hello"
        );
        let m: Manifest =
            serde_json::from_slice(&std::fs::read(out.path().join(MANIFEST_JSON)).unwrap())
                .unwrap();
        assert_eq!(m, r.manifest);
        assert_eq!(m.files[0].bytes, 5);
        // BLAKE3("hello") from the reference implementation (b3sum).
        assert_eq!(
            m.files[0].blake3,
            "ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f"
        );
        let names: Vec<_> = std::fs::read_dir(out.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.to_string_lossy().starts_with(".staging")),
            "{names:?}"
        );
    }

    #[tokio::test]
    async fn republishing_removes_files_the_new_manifest_does_not_list() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a"), b"1").unwrap();
        std::fs::write(src.path().join("b"), b"2").unwrap();
        let out = tempfile::tempdir().unwrap();
        let o = out.path().to_str().unwrap();
        let f = |n: &str| PublishFile {
            local: src.path().join(n),
            relative: n.into(),
        };
        publish(&[f("a"), f("b")], o, "j1").await.unwrap();
        publish(&[f("a")], o, "j2").await.unwrap();
        assert!(out.path().join("a").exists());
        assert!(!out.path().join("b").exists(), "stale file left behind");
    }

    #[tokio::test]
    async fn missing_local_file_publishes_nothing() {
        let out = tempfile::tempdir().unwrap();
        let files = vec![PublishFile {
            local: "/no/such/file".into(),
            relative: "x".into(),
        }];
        assert!(
            publish(&files, out.path().to_str().unwrap(), "j")
                .await
                .is_err()
        );
        assert!(!out.path().join(MANIFEST_JSON).exists());
    }
}
