//! `publish`: copy a job's outputs to the output URL so that no reader sees a half-published set,
//! and so that an attempt that lost its lease can never damage what another attempt committed.
//!
//! Protocol: (1) upload every file under the attempt's own `.staging-<job id>-<fencing token>/`
//! (staging prefixes that dead attempts of the same job left are removed first); (2) delete the
//! old `manifest.json` (readers treat a folder without a manifest as in flux); (3) rename each
//! staged file to its final name; (4) write `manifest.json` last — its presence commits the set,
//! and it records the fencing token. Each single object write is atomic in every `object_store`
//! backend. A failure before (4) leaves no manifest and removes the attempt's staging prefix.
//!
//! **Fencing.** Under a queue worker every step from (2) on first checks the attempt's [`Fence`]:
//! the lease file the worker rewrites after each accepted heartbeat must still be in date, and no
//! manifest committed by a later attempt of the same job (a higher token) may be in place. An
//! attempt paused past its lease (or cut off from the database) therefore stops before touching
//! committed files; the worker records it `rejected`. Local `kiln run` has no fence.

mod stage;
pub use stage::{Publish, PublishSummary};

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
    /// The queue's fencing token of the attempt that committed it (absent from local runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_token: Option<i64>,
}

/// An attempt's right to write: its fencing token and the lease file its worker keeps in date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The queue's fencing token of this attempt (increments on every claim of the stage).
    pub token: i64,
    /// JSON `{"token": N, "valid_until_ms": T}` (Unix milliseconds), rewritten by the worker after
    /// each accepted heartbeat; the attempt may write while the clock is before `T`.
    pub lease_file: PathBuf,
}

/// What a worker writes to [`Fence::lease_file`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseFile {
    pub token: i64,
    pub valid_until_ms: u64,
}

impl LeaseFile {
    /// Write it atomically (temporary file, then rename), so a reader never sees half of it.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be written.
    pub fn write(&self, path: &std::path::Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        let json = serde_json::to_vec(self).expect("lease file serialises");
        std::fs::write(&tmp, json).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Fence {
    /// Whether this attempt still holds its lease.
    ///
    /// # Errors
    /// [`Error::Fenced`] when the lease file is missing, unreadable, names another token, or is
    /// out of date.
    pub fn check(&self) -> Result<()> {
        let lost = |why: String| Error::Fenced {
            token: self.token,
            problem: why,
        };
        let bytes = std::fs::read(&self.lease_file)
            .map_err(|e| lost(format!("its lease file {}: {e}", self.lease_file.display())))?;
        let lease: LeaseFile = serde_json::from_slice(&bytes)
            .map_err(|e| lost(format!("its lease file {}: {e}", self.lease_file.display())))?;
        if lease.token != self.token {
            return Err(lost(format!(
                "the lease file names token {}, not this attempt's",
                lease.token
            )));
        }
        let now = now_ms();
        if now >= lease.valid_until_ms {
            return Err(lost(format!(
                "its lease ran out {:.1} s ago (no heartbeat was accepted since)",
                (now - lease.valid_until_ms) as f64 / 1000.0
            )));
        }
        Ok(())
    }
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
    publish_keyed(files, output, job_id, None, None).await
}

/// [`publish`], recording the publish stage's content key in the manifest, under `fence` when
/// the attempt runs for a queue worker.
///
/// # Errors
/// As [`publish`]; [`Error::Fenced`] when the attempt lost its lease (nothing committed is
/// touched after that is seen).
pub async fn publish_keyed(
    files: &[PublishFile],
    output: &str,
    job_id: &str,
    stage_key: Option<&str>,
    fence: Option<&Fence>,
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
    let token = fence.map(|f| f.token);
    let staging = staging_of(job_id, token);
    remove_dead_staging(&store, job_id, token).await;
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
    // From here on committed files change: only while the attempt holds its lease.
    let staging_ref = staging.as_str();
    let fenced = |store: storage::Store| async move {
        let committed = read_store_manifest(&store).await;
        if let Err(e) = check_fence(fence, committed.as_ref(), job_id) {
            let _ = store.delete_prefix(staging_ref).await;
            return Err(e);
        }
        Ok(committed)
    };
    // Files of the previous publish that this one does not rewrite are removed after the renames,
    // so the output matches its new manifest.
    let previous: Vec<String> = fenced(store.clone())
        .await?
        .map(|m| m.files.into_iter().map(|f| f.path).collect())
        .unwrap_or_default();
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
        if let Some(fence) = fence
            && let Err(e) = fence.check()
        {
            let _ = store.delete_prefix(&staging).await;
            return Err(e);
        }
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
        fence_token: token,
        files: entries,
    };
    fenced(store.clone()).await?;
    let json = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
    bytes_written += store.put_bytes(MANIFEST_JSON, json).await?;
    Ok(PublishReport {
        manifest,
        bytes_written,
    })
}

fn staging_of(job_id: &str, token: Option<i64>) -> String {
    match token {
        Some(t) => format!(".staging-{job_id}-{t}"),
        None => format!(".staging-{job_id}"),
    }
}

/// The fence's verdict, given the manifest committed now: the lease must be in date, and a
/// manifest of the same job committed by a later attempt (a higher token) is never replaced.
fn check_fence(fence: Option<&Fence>, committed: Option<&Manifest>, job_id: &str) -> Result<()> {
    let Some(fence) = fence else { return Ok(()) };
    fence.check()?;
    if let Some(m) = committed
        && m.job_id == job_id
        && m.fence_token.is_some_and(|t| t > fence.token)
    {
        return Err(Error::Fenced {
            token: fence.token,
            problem: format!(
                "a later attempt (token {}) already committed this output",
                m.fence_token.unwrap_or_default()
            ),
        });
    }
    Ok(())
}

/// Remove staging prefixes that earlier (dead) attempts of `job_id` left at the output root:
/// `.staging-<job>` and `.staging-<job>-<t>` for tokens below this attempt's. Best effort.
async fn remove_dead_staging(store: &storage::Store, job_id: &str, token: Option<i64>) {
    let Ok(listing) = store.store.list_with_delimiter(Some(&store.prefix)).await else {
        return;
    };
    let legacy = format!(".staging-{job_id}");
    for dir in listing.common_prefixes {
        let Some(name) = dir.filename() else { continue };
        let dead = name == legacy
            || name
                .strip_prefix(&format!("{legacy}-"))
                .and_then(|t| t.parse::<i64>().ok())
                .is_some_and(|t| token.is_some_and(|mine| t < mine));
        if dead && name != staging_of(job_id, token) {
            let _ = store.delete_prefix(name).await;
        }
    }
}

async fn read_store_manifest(store: &storage::Store) -> Option<Manifest> {
    let got = store.store.get(&store.child(MANIFEST_JSON)).await.ok()?;
    let bytes = got.bytes().await.ok()?;
    serde_json::from_slice(&bytes).ok()
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

    fn fence(dir: &std::path::Path, token: i64, valid_for_ms: i64) -> Fence {
        let lease_file = dir.join(format!("lease-{token}.json"));
        LeaseFile {
            token,
            valid_until_ms: (now_ms() as i64 + valid_for_ms) as u64,
        }
        .write(&lease_file)
        .unwrap();
        Fence { token, lease_file }
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn an_attempt_whose_lease_ran_out_changes_nothing_committed() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a"), b"committed").unwrap();
        let out = tempfile::tempdir().unwrap();
        let o = out.path().to_str().unwrap();
        let f = |n: &str| PublishFile {
            local: src.path().join(n),
            relative: n.into(),
        };
        // Attempt 2 commits while holding its lease.
        let live = fence(src.path(), 2, 30_000);
        publish_keyed(&[f("a")], o, "job", None, Some(&live))
            .await
            .unwrap();
        let committed = std::fs::read(out.path().join(MANIFEST_JSON)).unwrap();
        assert_eq!(
            serde_json::from_slice::<Manifest>(&committed)
                .unwrap()
                .fence_token,
            Some(2)
        );
        // Attempt 1 was paused past its lease and resumes with other content.
        std::fs::write(src.path().join("a"), b"stale").unwrap();
        let stale = fence(src.path(), 1, -5_000);
        let e = publish_keyed(&[f("a")], o, "job", None, Some(&stale))
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::Fenced { token: 1, .. }) && e.to_string().contains("ran out"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(out.path().join(MANIFEST_JSON)).unwrap(),
            committed
        );
        assert_eq!(std::fs::read(out.path().join("a")).unwrap(), b"committed");
        assert_eq!(
            names(out.path()),
            ["a", MANIFEST_JSON],
            "staging left behind"
        );
    }

    #[tokio::test]
    async fn a_later_attempt_s_manifest_is_never_replaced_by_an_earlier_one() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a"), b"x").unwrap();
        let out = tempfile::tempdir().unwrap();
        let o = out.path().to_str().unwrap();
        let f = PublishFile {
            local: src.path().join("a"),
            relative: "a".into(),
        };
        publish_keyed(
            std::slice::from_ref(&f),
            o,
            "job",
            None,
            Some(&fence(src.path(), 7, 30_000)),
        )
        .await
        .unwrap();
        // Token 6 still believes it holds the lease (its file is in date): the manifest says
        // otherwise.
        let e = publish_keyed(
            std::slice::from_ref(&f),
            o,
            "job",
            None,
            Some(&fence(src.path(), 6, 30_000)),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("token 7"), "{e}");
        // Another job may republish the same output (a new result, not a stale attempt).
        publish_keyed(
            &[f],
            o,
            "other-job",
            None,
            Some(&fence(src.path(), 1, 30_000)),
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn staging_left_by_dead_attempts_of_the_job_is_removed() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a"), b"x").unwrap();
        let out = tempfile::tempdir().unwrap();
        for dead in [
            ".staging-job-3",
            ".staging-job",
            ".staging-other-1",
            ".staging-job-9",
        ] {
            std::fs::create_dir_all(out.path().join(dead)).unwrap();
            std::fs::write(out.path().join(dead).join("t.glb"), b"partial").unwrap();
        }
        let f = PublishFile {
            local: src.path().join("a"),
            relative: "a".into(),
        };
        publish_keyed(
            &[f],
            out.path().to_str().unwrap(),
            "job",
            None,
            Some(&fence(src.path(), 5, 30_000)),
        )
        .await
        .unwrap();
        // Token 9 may still be alive (a later claim); another job's staging is not ours.
        let left: Vec<String> = names(out.path())
            .into_iter()
            .filter(|n| n.starts_with(".staging"))
            .filter(|n| out.path().join(n).join("t.glb").exists())
            .collect();
        assert_eq!(left, [".staging-job-9", ".staging-other-1"]);
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
