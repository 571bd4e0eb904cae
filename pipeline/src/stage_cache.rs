//! The shared stage cache: finished stage outputs stored under their content key in an object
//! store (`s3://BUCKET/PREFIX`, a local folder, …), so that another worker, another machine or
//! another job with the same inputs reuses them instead of running the stage again.
//!
//! Layout: `CACHE/<stage>/<key>/<files…>`, with the stage's `.kiln-stage.json` marker written
//! last. The marker is the commit point: an entry without it (an upload cut short) is ignored
//! and overwritten by the next upload. Entries are immutable: same key, same bytes (stages are
//! deterministic for a key on the same hardware), so concurrent uploads of one key are harmless.

use std::path::Path;

use object_store::ObjectStoreExt;

use crate::dag::StageKind;
use crate::storage;
use crate::{Error, Result};

/// The stage marker's file name (see [`crate::run`]).
pub(crate) const MARKER: &str = ".kiln-stage.json";

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
    let files = crate::file_tree::files_under(final_dir)?;
    let mut bytes = 0;
    let marker = Path::new(MARKER);
    for rel in files.iter().filter(|r| r.as_path() != marker) {
        let name = rel.to_string_lossy().replace('\\', "/");
        bytes += store.put_file(&final_dir.join(rel), &name).await?;
    }
    bytes += store.put_file(&final_dir.join(MARKER), MARKER).await?;
    tracing::info!(stage = %kind, key = &key[..key.len().min(12)], bytes, cache = %cache, "stage output stored in the cache");
    Ok(bytes)
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
            restore(cache, StageKind::Tile, &key, &out).await.unwrap(),
            None
        );
        let written = store(cache, StageKind::Tile, &key, &out).await.unwrap();
        // 9 bytes of GLB and the 25-byte marker.
        assert_eq!(written, 9 + 25);
        // Storing again is a no-op.
        assert_eq!(store(cache, StageKind::Tile, &key, &out).await.unwrap(), 0);

        let other = d.path().join("other/tile");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("stale"), b"x").unwrap();
        let read = restore(cache, StageKind::Tile, &key, &other).await.unwrap();
        assert_eq!(read, Some(34));
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
            restore(cache, StageKind::Tile, &"b".repeat(64), &other)
                .await
                .unwrap(),
            None
        );
    }
}
