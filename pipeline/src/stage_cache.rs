//! The shared stage cache: finished stage outputs stored under their content key in an object
//! store (`s3://BUCKET/PREFIX`, a local folder, …), so that another worker, another machine or
//! another job with the same inputs reuses them instead of running the stage again.
//!
//! Layout: `CACHE/<stage>/<key>/<files…>`, then `.kiln-cache.json` (every file's size and
//! BLAKE3), then the stage's `.kiln-stage.json` marker, written last. The marker is the commit
//! point: an entry without it (an upload cut short) is ignored and overwritten by the next upload.
//! Entries are immutable: same key, same bytes (stages are deterministic for a key on the same
//! hardware), so concurrent uploads of one key are harmless, and a complete entry is never
//! replaced. A restored entry is verified against its `.kiln-cache.json`: a file that was changed,
//! added or removed after the entry was committed (a damaged copy, or another writer of the
//! bucket) makes the entry ignored, with a warning, and the stage runs again.

use std::path::Path;

use object_store::ObjectStoreExt;

use crate::stage::StageKind;
use crate::storage;
use crate::{Error, Result};

/// The stage marker's file name (see [`crate::run`]).
pub(crate) const MARKER: &str = ".kiln-stage.json";

/// The entry's file list with sizes and hashes, written just before the marker.
const CONTENTS: &str = ".kiln-cache.json";

/// One file of an entry: `/`-separated path, size, hex BLAKE3.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct EntryFile {
    path: String,
    bytes: u64,
    blake3: String,
}

/// Every file under `dir` (the marker and the contents list included) with size and BLAKE3.
fn list_files(dir: &Path) -> Result<Vec<EntryFile>> {
    let mut out = Vec::new();
    for rel in crate::file_tree::files_under(dir)? {
        let name = rel.to_string_lossy().replace('\\', "/");
        if name == CONTENTS {
            continue;
        }
        let bytes = std::fs::read(dir.join(&rel)).map_err(|e| Error::io(dir.join(&rel), e))?;
        out.push(EntryFile {
            path: name,
            bytes: bytes.len() as u64,
            blake3: blake3::hash(&bytes).to_hex().to_string(),
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Whether the fetched entry in `dir` holds exactly the files its contents list names, byte for
/// byte; the reason when not.
fn verify_entry(dir: &Path) -> std::result::Result<(), String> {
    let listed: Vec<EntryFile> = std::fs::read(dir.join(CONTENTS))
        .map_err(|_| format!("it has no {CONTENTS} (stored by an older Kiln, or damaged)"))
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("{CONTENTS}: {e}")))?;
    let found = list_files(dir).map_err(|e| e.to_string())?;
    if found == listed {
        return Ok(());
    }
    let differing = found
        .iter()
        .filter(|f| !listed.contains(f))
        .chain(listed.iter().filter(|f| !found.contains(f)))
        .map(|f| f.path.as_str())
        .next()
        .unwrap_or("?");
    Err(format!(
        "`{differing}` differs from what the entry committed"
    ))
}

fn entry_url(cache: &str, kind: StageKind, key: &str) -> String {
    format!("{}/{}/{key}", cache.trim_end_matches('/'), kind.name())
}

/// Download the entry of (`kind`, `key`) from `cache` into `final_dir` (replacing it) when the
/// cache holds a complete one. Returns the bytes read, or `None` when there is no entry.
///
/// # Errors
/// [`Error::Storage`] when the cache cannot be read (other than a missing entry);
/// [`Error::Io`] when the work directory cannot be written.
pub async fn restore(
    cache: &str,
    kind: StageKind,
    key: &str,
    final_dir: &Path,
) -> Result<Option<u64>> {
    let url = entry_url(cache, kind, key);
    let store = storage::open(&url)?;
    match store.store.head(&store.child(MARKER)).await {
        Ok(_) => {}
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(source) => return Err(Error::Storage { url, source }),
    }
    let tmp = final_dir.with_extension("from-cache");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    let fetched = storage::fetch(&url, &tmp, false).await?;
    if let Err(why) = verify_entry(&tmp) {
        tracing::warn!(stage = %kind, key = &key[..key.len().min(12)], cache = %cache, "stage cache entry ignored, the stage runs again: {why}");
        let _ = std::fs::remove_dir_all(&tmp);
        return Ok(None);
    }
    let _ = std::fs::remove_file(tmp.join(CONTENTS));
    if final_dir.exists() {
        std::fs::remove_dir_all(final_dir).map_err(|e| Error::io(final_dir, e))?;
    }
    std::fs::rename(&tmp, final_dir).map_err(|e| Error::io(final_dir, e))?;
    tracing::info!(stage = %kind, key = &key[..key.len().min(12)], bytes = fetched.bytes, cache = %cache, "stage cache hit: restored");
    Ok(Some(fetched.bytes))
}

/// Upload the finished stage output `final_dir` (holding its marker) as the entry of
/// (`kind`, `key`) in `cache`, marker last. Returns the bytes written; an entry that is already
/// complete is left as it is (0 bytes).
///
/// # Errors
/// [`Error::Storage`] when the cache cannot be written; [`Error::Io`] when a file cannot be read.
pub async fn store(cache: &str, kind: StageKind, key: &str, final_dir: &Path) -> Result<u64> {
    let url = entry_url(cache, kind, key);
    let store = storage::open(&url)?;
    if store.store.head(&store.child(MARKER)).await.is_ok() {
        return Ok(0);
    }
    let files = list_files(final_dir)?;
    let mut bytes = 0;
    for f in files.iter().filter(|f| f.path != MARKER) {
        bytes += store.put_file(&final_dir.join(&f.path), &f.path).await?;
    }
    let contents = serde_json::to_vec_pretty(&files).expect("contents serialise");
    bytes += store.put_bytes(CONTENTS, contents).await?;
    bytes += store.put_file(&final_dir.join(MARKER), MARKER).await?;
    tracing::info!(stage = %kind, key = &key[..key.len().min(12)], bytes, cache = %cache, "stage output stored in the cache");
    Ok(bytes)
}

/// The URL of a stage's travelling checkpoint: `CACHE/checkpoints/<stage>/<key>`.
fn checkpoint_url(cache: &str, kind: StageKind, key: &str) -> String {
    format!(
        "{}/checkpoints/{}/{key}",
        cache.trim_end_matches('/'),
        kind.name()
    )
}

/// Fetch the checkpoint another worker stored for (`kind`, `key`) to `local`, unless a local
/// checkpoint exists already. Returns whether one was fetched.
///
/// # Errors
/// [`Error::Storage`] when the cache cannot be read (other than a missing checkpoint);
/// [`Error::Io`] when `local` cannot be written.
pub async fn restore_checkpoint(
    cache: &str,
    kind: StageKind,
    key: &str,
    local: &Path,
) -> Result<bool> {
    if local.exists() {
        return Ok(false);
    }
    let Some(name) = local.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(false);
    };
    let url = checkpoint_url(cache, kind, key);
    let store = storage::open(&url)?;
    let got = match store.store.get(&store.child(&name)).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(false),
        Err(source) => return Err(Error::Storage { url, source }),
    };
    let bytes = got
        .bytes()
        .await
        .map_err(|source| Error::Storage { url, source })?;
    kiln_formats::atomic_write::write_atomic(local, &bytes)?;
    tracing::info!(stage = %kind, key = &key[..key.len().min(12)], bytes = bytes.len(), cache = %cache, "checkpoint restored from the stage cache");
    Ok(true)
}

/// Uploads a running stage's checkpoint file to the stage cache whenever it changes, so that a
/// stage whose worker dies resumes on another worker from the last checkpoint instead of from
/// the start. Stop it with [`CheckpointUploader::finish`].
pub struct CheckpointUploader {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    cache: String,
    kind: StageKind,
    key: String,
    name: String,
}

impl CheckpointUploader {
    /// Watch `local` every `every` and upload each new version (one atomic object write).
    pub fn spawn(
        cache: &str,
        kind: StageKind,
        key: &str,
        local: std::path::PathBuf,
        every: std::time::Duration,
    ) -> Result<CheckpointUploader> {
        let url = checkpoint_url(cache, kind, key);
        let store = storage::open(&url)?;
        let name = local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let object = name.clone();
        let task = tokio::spawn(async move {
            let mut uploaded = None;
            loop {
                let stopping = *stopped.borrow();
                let modified = std::fs::metadata(&local).and_then(|m| m.modified()).ok();
                if modified.is_some() && modified != uploaded {
                    match store.put_file(&local, &object).await {
                        Ok(bytes) => {
                            uploaded = modified;
                            tracing::info!(stage = %kind, bytes, "checkpoint stored in the stage cache");
                        }
                        // The next change (or the next stage attempt) tries again.
                        Err(e) => {
                            tracing::warn!(stage = %kind, "checkpoint not stored in the stage cache: {e}")
                        }
                    }
                }
                if stopping {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stopped.changed() => {}
                }
            }
        });
        Ok(CheckpointUploader {
            stop,
            task,
            cache: cache.into(),
            kind,
            key: key.into(),
            name,
        })
    }

    /// Stop watching. After a failed or interrupted stage the last checkpoint is uploaded first
    /// (a stage stopped by a signal writes one as it stops); after a finished stage the stored
    /// checkpoint is deleted, since the stage's output supersedes it.
    pub async fn finish(self, stage_finished: bool) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        if stage_finished {
            let url = checkpoint_url(&self.cache, self.kind, &self.key);
            if let Ok(store) = storage::open(&url) {
                let _ = store.store.delete(&store.child(&self.name)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_entry_round_trips_and_an_incomplete_one_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let cache = cache.to_str().unwrap();
        let out = d.path().join("work/tile");
        std::fs::create_dir_all(out.join("tiles")).unwrap();
        std::fs::write(out.join("tiles/0.glb"), b"glb bytes").unwrap();
        std::fs::write(out.join(MARKER), b"{\"key\":\"k1\",\"summary\":{}}").unwrap();

        let key = "a".repeat(64);
        assert_eq!(
            restore(cache, StageKind::TILE, &key, &out).await.unwrap(),
            None
        );
        let written = store(cache, StageKind::TILE, &key, &out).await.unwrap();
        // 9 bytes of GLB, the 25-byte marker and the contents list.
        let contents = std::fs::metadata(format!("{cache}/tile/{key}/{CONTENTS}"))
            .unwrap()
            .len();
        assert_eq!(written, 9 + 25 + contents);
        // Storing again is a no-op.
        assert_eq!(store(cache, StageKind::TILE, &key, &out).await.unwrap(), 0);

        let other = d.path().join("other/tile");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("stale"), b"x").unwrap();
        let read = restore(cache, StageKind::TILE, &key, &other).await.unwrap();
        assert_eq!(read, Some(34 + contents));
        assert!(
            !other.join(CONTENTS).exists(),
            "the contents list stays in the cache"
        );
        assert_eq!(
            std::fs::read(other.join("tiles/0.glb")).unwrap(),
            b"glb bytes"
        );
        assert!(!other.join("stale").exists(), "restore replaces the folder");

        // An upload cut short before its marker is not an entry.
        let half = format!("{cache}/tile/{}", "b".repeat(64));
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(format!("{half}/part"), b"x").unwrap();
        assert_eq!(
            restore(cache, StageKind::TILE, &"b".repeat(64), &other)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn an_entry_changed_after_it_was_committed_is_ignored_and_never_replaced() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let cache = cache.to_str().unwrap();
        let out = d.path().join("work/tile");
        std::fs::create_dir_all(out.join("tiles")).unwrap();
        std::fs::write(out.join("tiles/0.glb"), b"good tile").unwrap();
        std::fs::write(out.join(MARKER), b"{}").unwrap();
        let key = "c".repeat(64);
        store(cache, StageKind::TILE, &key, &out).await.unwrap();
        let entry = format!("{cache}/tile/{key}");
        let restored = d.path().join("restored/tile");
        for (poison, what) in [("tiles/0.glb", "changed"), ("tiles/extra.glb", "added")] {
            std::fs::write(format!("{entry}/{poison}"), b"poisoned").unwrap();
            assert_eq!(
                restore(cache, StageKind::TILE, &key, &restored)
                    .await
                    .unwrap(),
                None,
                "a {what} file was accepted"
            );
            assert!(!restored.exists());
            // Storing the same key again does not replace the committed entry.
            assert_eq!(store(cache, StageKind::TILE, &key, &out).await.unwrap(), 0);
            std::fs::write(format!("{entry}/tiles/0.glb"), b"good tile").unwrap();
            let _ = std::fs::remove_file(format!("{entry}/tiles/extra.glb"));
        }
        // Put back as committed, it restores.
        assert!(
            restore(cache, StageKind::TILE, &key, &restored)
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(
            std::fs::read(restored.join("tiles/0.glb")).unwrap(),
            b"good tile"
        );
    }

    #[tokio::test]
    async fn a_checkpoint_travels_through_the_cache_while_its_stage_runs() {
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("cache");
        let cache = cache.to_str().unwrap();
        let key = "d".repeat(64);
        let on_a = d.path().join("a/train.ckpt");
        std::fs::create_dir_all(on_a.parent().unwrap()).unwrap();
        let up = CheckpointUploader::spawn(
            cache,
            StageKind::TRAIN,
            &key,
            on_a.clone(),
            std::time::Duration::from_millis(20),
        )
        .unwrap();
        std::fs::write(&on_a, b"step 50").unwrap();
        let stored = d
            .path()
            .join(format!("cache/checkpoints/train/{key}/train.ckpt"));
        for _ in 0..200 {
            if std::fs::read(&stored).is_ok_and(|b| b == b"step 50") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(std::fs::read(&stored).unwrap(), b"step 50");
        // Worker A stops (the signal path writes a last checkpoint): it is uploaded on finish.
        std::fs::write(&on_a, b"step 120").unwrap();
        up.finish(false).await;
        assert_eq!(std::fs::read(&stored).unwrap(), b"step 120");
        // Worker B, another machine: no local checkpoint, so it takes the stored one.
        let on_b = d.path().join("b/train.ckpt");
        std::fs::create_dir_all(on_b.parent().unwrap()).unwrap();
        assert!(
            restore_checkpoint(cache, StageKind::TRAIN, &key, &on_b)
                .await
                .unwrap()
        );
        assert_eq!(std::fs::read(&on_b).unwrap(), b"step 120");
        // A local checkpoint wins; another key has none.
        assert!(
            !restore_checkpoint(cache, StageKind::TRAIN, &key, &on_b)
                .await
                .unwrap()
        );
        let on_c = d.path().join("b/other.ckpt");
        assert!(
            !restore_checkpoint(cache, StageKind::TRAIN, &"e".repeat(64), &on_c)
                .await
                .unwrap()
        );
        // B finishes the stage: the stored checkpoint is removed.
        let up = CheckpointUploader::spawn(
            cache,
            StageKind::TRAIN,
            &key,
            on_b,
            std::time::Duration::from_millis(20),
        )
        .unwrap();
        up.finish(true).await;
        assert!(!stored.exists());
    }
}
