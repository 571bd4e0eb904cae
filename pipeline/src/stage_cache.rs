//! The shared stage cache: finished stage outputs stored under their content key in an object
//! store (`s3://BUCKET/PREFIX`, a local folder, …), so that another worker, another machine or
//! another job with the same inputs reuses them instead of running the stage again.
//!
//! Layout: `CACHE[/NAMESPACE]/<stage>/<key>/<files…>`, then `.kiln-cache.json` (every file's
//! size and BLAKE3, for readers that only need sizes), then the stage's `.kiln-stage.json`
//! marker, written last; travelling checkpoints under `CACHE[/NAMESPACE]/checkpoints/`. The
//! namespace keeps users of one store apart (the queue gives each team its own,
//! `teams/<team>`), so nobody reuses or even finds another's entries.
//!
//! Nothing in the store is trusted because of where it is: the committing worker records each
//! entry's files with their BLAKE3 in a [`CacheLedger`] that readers of the store cannot write
//! (the queue database), and a reader accepts only bytes matching that record. An entry without
//! a record, or one whose files differ from it (a damaged copy, an upload cut short, or another
//! writer of the bucket who rewrote a file and its `.kiln-cache.json` together) is ignored with a
//! warning and the stage runs again; its new output replaces the entry. Checkpoints are checked
//! the same way before a stage resumes from one.

use std::path::Path;
use std::sync::Arc;

use object_store::ObjectStoreExt;

use crate::cache_ledger::{AttestedFile, CacheLedger};
use crate::storage;
use crate::{Error, Result};

/// The stage marker's file name (see [`crate::run`]).
pub(crate) const MARKER: &str = ".kiln-stage.json";

/// The entry's file list with sizes and hashes, written just before the marker. Informative
/// only (budgets read sizes from it): the ledger, not this file, decides what is accepted.
const CONTENTS: &str = ".kiln-cache.json";

/// A shared stage cache: where it is, the namespace this job's entries live in, and the ledger
/// that vouches for them.
#[derive(Debug, Clone)]
pub struct StageCache {
    /// The store's root URL or folder, without a trailing `/`.
    root: String,
    /// `/`-separated path below the root (`teams/art`); `None`: the root itself.
    namespace: Option<String>,
    ledger: Arc<dyn CacheLedger>,
}

impl StageCache {
    /// The cache at `root` (an object-store URL or a folder), this job's entries under
    /// `namespace` (`None`: shared by every user of `root`), vouched for by `ledger`.
    ///
    /// # Errors
    /// [`Error::Param`] when `namespace` is empty or has a component that is empty, `.`, `..` or
    /// holds a character other than ASCII letters, digits, `.`, `_` and `-`.
    pub fn new(
        root: &str,
        namespace: Option<&str>,
        ledger: Arc<dyn CacheLedger>,
    ) -> Result<StageCache> {
        if let Some(ns) = namespace {
            check_namespace(ns)?;
        }
        Ok(StageCache {
            root: root.trim_end_matches('/').to_string(),
            namespace: namespace.map(str::to_string),
            ledger,
        })
    }

    /// Where this cache's entries are: the root, then the namespace.
    #[must_use]
    pub fn url(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{ns}", self.root),
            None => self.root.clone(),
        }
    }

    /// An entry's path below the root: its URL's tail and its name in the ledger.
    fn entry_path(&self, tail: &str) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{tail}"),
            None => tail.to_string(),
        }
    }

    fn entry(&self, stage: &str, key: &str) -> String {
        self.entry_path(&format!("{}/{key}", stage))
    }

    fn entry_url(&self, entry: &str) -> String {
        format!("{}/{entry}", self.root)
    }

    /// The ledger's record of `entry`, or why there is none to trust.
    async fn attested(&self, entry: &str) -> std::result::Result<Vec<AttestedFile>, String> {
        match self.ledger.attested(entry).await {
            Ok(Some(files)) => Ok(files),
            Ok(None) => Err(
                "no worker recorded it in the cache ledger (stored by an older Kiln, cut short, or not by a worker)"
                    .into(),
            ),
            Err(e) => Err(format!("the cache ledger cannot be read: {e}")),
        }
    }

    /// Record `files` as `entry`'s; a failure leaves the entry unattested (readers then ignore
    /// it), so it is a warning, not an error.
    async fn record(&self, entry: &str, files: &[AttestedFile]) {
        if let Err(e) = self.ledger.record(entry, files).await {
            tracing::warn!(
                entry,
                "cache entry not recorded in the cache ledger, so no reader will use it: {e}"
            );
        }
    }
}

/// [`StageCache::new`]'s namespace check: components of ASCII letters, digits, `.`, `_`, `-`.
fn check_namespace(ns: &str) -> Result<()> {
    let fine = |c: &str| {
        !c.is_empty()
            && c != "."
            && c != ".."
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    if ns.split('/').all(fine) {
        return Ok(());
    }
    Err(Error::Param {
        stage: "cache",
        field: "namespace".into(),
        expected: "`/`-separated names of ASCII letters, digits, `.`, `_` and `-` (no `.` or `..`)"
            .into(),
        found: format!("`{ns}`"),
    })
}

/// Every file under `dir` (the marker included, the contents list not) with size and BLAKE3,
/// sorted by path.
fn list_files(dir: &Path) -> Result<Vec<AttestedFile>> {
    let mut out = Vec::new();
    for rel in crate::file_tree::files_under(dir)? {
        let name = rel.to_string_lossy().replace('\\', "/");
        if name == CONTENTS {
            continue;
        }
        let bytes = std::fs::read(dir.join(&rel)).map_err(|e| Error::io(dir.join(&rel), e))?;
        out.push(AttestedFile::of(&name, &bytes));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Whether the fetched entry in `dir` holds exactly the files `attested` names, byte for byte;
/// the reason when not.
fn verify_entry(dir: &Path, attested: &[AttestedFile]) -> std::result::Result<(), String> {
    let found = list_files(dir).map_err(|e| e.to_string())?;
    if found == attested {
        return Ok(());
    }
    let differing = found
        .iter()
        .filter(|f| !attested.contains(f))
        .chain(attested.iter().filter(|f| !found.contains(f)))
        .map(|f| f.path.as_str())
        .next()
        .unwrap_or("?");
    Err(format!(
        "`{differing}` differs from what the committing worker recorded"
    ))
}

fn short(key: &str) -> &str {
    &key[..key.len().min(12)]
}

/// Download the entry of (`stage`, `key`) from `cache` into `final_dir` (replacing it) when the
/// cache holds a complete one that matches the ledger's record. Returns the bytes read, or
/// `None` when there is no such entry (none at all, or one ignored with a warning).
///
/// # Errors
/// [`Error::Storage`] when the cache cannot be read (other than a missing entry);
/// [`Error::Io`] when the work directory cannot be written.
pub async fn restore(
    cache: &StageCache,
    stage: &str,
    key: &str,
    final_dir: &Path,
) -> Result<Option<u64>> {
    let entry = cache.entry(stage, key);
    let url = cache.entry_url(&entry);
    let store = storage::open(&url)?;
    match store.store.head(&store.child(MARKER)).await {
        Ok(_) => {}
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(source) => return Err(Error::Storage { url, source }),
    }
    let ignored = |why: &str| {
        tracing::warn!(stage, key = short(key), cache = %cache.url(), "stage cache entry ignored, the stage runs again: {why}");
    };
    // Asked before downloading: an entry nobody vouches for is not worth its transfer.
    let attested = match cache.attested(&entry).await {
        Ok(files) => files,
        Err(why) => {
            ignored(&why);
            return Ok(None);
        }
    };
    let tmp = final_dir.with_extension("from-cache");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    let fetched = storage::fetch(&url, &tmp, false).await?;
    if let Err(why) = verify_entry(&tmp, &attested) {
        ignored(&why);
        let _ = std::fs::remove_dir_all(&tmp);
        return Ok(None);
    }
    let _ = std::fs::remove_file(tmp.join(CONTENTS));
    if final_dir.exists() {
        std::fs::remove_dir_all(final_dir).map_err(|e| Error::io(final_dir, e))?;
    }
    std::fs::rename(&tmp, final_dir).map_err(|e| Error::io(final_dir, e))?;
    tracing::info!(stage, key = short(key), bytes = fetched.bytes, cache = %cache.url(), "stage cache hit: restored");
    Ok(Some(fetched.bytes))
}

/// When [`store`] uploads an output whose entry may exist already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upload {
    /// Upload and record it whatever is there: the stage was just computed because the entry
    /// was missing or was not trusted, and a bad entry must not outlive the rebuild.
    Always,
    /// Leave a complete entry alone when the ledger records exactly these files (an earlier
    /// output found in the work folder, checked for having reached the cache).
    UnlessRecorded,
}

/// Upload the finished stage output `final_dir` (holding its marker) as the entry of
/// (`stage`, `key`) in `cache`, marker last, then record its files in the ledger. Returns the
/// bytes written (0 when `upload` let a recorded entry stand).
///
/// The record is made from the local files this worker hashed, not from the store, so a copy
/// changed in the store meanwhile never matches it.
///
/// # Errors
/// [`Error::Storage`] when the cache cannot be written; [`Error::Io`] when a file cannot be read.
pub async fn store(
    cache: &StageCache,
    stage: &str,
    key: &str,
    final_dir: &Path,
    upload: Upload,
) -> Result<u64> {
    let entry = cache.entry(stage, key);
    let store = storage::open(&cache.entry_url(&entry))?;
    let files = list_files(final_dir)?;
    if upload == Upload::UnlessRecorded
        && store.store.head(&store.child(MARKER)).await.is_ok()
        && cache.attested(&entry).await.is_ok_and(|a| a == files)
    {
        return Ok(0);
    }
    let mut bytes = 0;
    for f in files.iter().filter(|f| f.path != MARKER) {
        bytes += store.put_file(&final_dir.join(&f.path), &f.path).await?;
    }
    let contents = serde_json::to_vec_pretty(&files).expect("contents serialise");
    bytes += store.put_bytes(CONTENTS, contents).await?;
    bytes += store.put_file(&final_dir.join(MARKER), MARKER).await?;
    cache.record(&entry, &files).await;
    tracing::info!(stage, key = short(key), bytes, cache = %cache.url(), "stage output stored in the cache");
    Ok(bytes)
}

/// A stage's travelling checkpoints' folder below the root: `[NAMESPACE/]checkpoints/<stage>/<key>`.
fn checkpoint_dir(cache: &StageCache, stage: &str, key: &str) -> String {
    cache.entry_path(&format!("checkpoints/{}/{key}", stage))
}

/// Fetch the checkpoint another worker stored for (`stage`, `key`) to `local`, unless a local
/// checkpoint exists already. A stored checkpoint whose bytes the ledger does not record (none,
/// or other bytes: changed in the store) is discarded with a warning, and the stage starts
/// over. Returns whether one was fetched.
///
/// # Errors
/// [`Error::Storage`] when the cache cannot be read (other than a missing checkpoint);
/// [`Error::Io`] when `local` cannot be written.
pub async fn restore_checkpoint(
    cache: &StageCache,
    stage: &str,
    key: &str,
    local: &Path,
) -> Result<bool> {
    if local.exists() {
        return Ok(false);
    }
    let Some(name) = local.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(false);
    };
    let dir = checkpoint_dir(cache, stage, key);
    let entry = format!("{dir}/{name}");
    let url = cache.entry_url(&dir);
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
    let found = AttestedFile::of(&name, &bytes);
    let why = match cache.attested(&entry).await {
        // The record names the latest upload and the one before it (see `upload_checkpoint`).
        Ok(files) if files.contains(&found) => None,
        Ok(_) => Some("its bytes differ from what the worker that stored it recorded".into()),
        Err(why) => Some(why),
    };
    if let Some(why) = why {
        tracing::warn!(stage, key = short(key), cache = %cache.url(), "checkpoint in the stage cache discarded, the stage starts over: {why}");
        return Ok(false);
    }
    kiln_formats::atomic_write::write_atomic(local, &bytes)?;
    tracing::info!(stage, key = short(key), bytes = bytes.len(), cache = %cache.url(), "checkpoint restored from the stage cache");
    Ok(true)
}

/// Uploads a running stage's checkpoint file to the stage cache whenever it changes, and records
/// each upload's BLAKE3 in the ledger, so that a stage whose worker dies resumes on another
/// worker from the last checkpoint instead of from the start. Stop it with
/// [`CheckpointUploader::finish`].
pub struct CheckpointUploader {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    cache: StageCache,
    dir: String,
    name: String,
}

impl CheckpointUploader {
    /// Watch `local` every `every` and upload each new version (one atomic object write).
    pub fn spawn(
        cache: &StageCache,
        stage: &str,
        key: &str,
        local: std::path::PathBuf,
        every: std::time::Duration,
    ) -> Result<CheckpointUploader> {
        let dir = checkpoint_dir(cache, stage, key);
        let store = storage::open(&cache.entry_url(&dir))?;
        let name = local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (task_cache, entry, object) = (cache.clone(), format!("{dir}/{name}"), name.clone());
        let stage = stage.to_owned();
        let task = tokio::spawn(async move {
            let mut uploaded = None;
            let mut previous = None;
            loop {
                let stopping = *stopped.borrow();
                let modified = std::fs::metadata(&local).and_then(|m| m.modified()).ok();
                if modified.is_some() && modified != uploaded {
                    let up = upload_checkpoint(
                        &store,
                        &task_cache,
                        (&local, &object, &entry),
                        previous.as_ref(),
                    );
                    match up.await {
                        Ok((bytes, record)) => {
                            previous = Some(record);
                            uploaded = modified;
                            tracing::info!(stage = %stage, bytes, "checkpoint stored in the stage cache");
                        }
                        // The next change (or the next stage attempt) tries again.
                        Err(e) => {
                            tracing::warn!(stage = %stage, "checkpoint not stored in the stage cache: {e}")
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
            cache: cache.clone(),
            dir,
            name,
        })
    }

    /// Stop watching. After a failed or interrupted stage the last checkpoint is uploaded first
    /// (a stage stopped by a signal writes one as it stops); after a finished stage the stored
    /// checkpoint is deleted, since the stage's output supersedes it.
    pub async fn finish(self, stage_finished: bool) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        if stage_finished && let Ok(store) = storage::open(&self.cache.entry_url(&self.dir)) {
            let _ = store.store.delete(&store.child(&self.name)).await;
        }
    }
}

/// Upload the checkpoint `local` as `object`, its bytes recorded as `entry` first, together
/// with `previous` (the upload before). The bytes are read once, so what is recorded is what is
/// uploaded even while the stage rewrites the file. Recording first means a checkpoint visible
/// in the store always has its record; keeping the previous one means a worker killed between
/// the record and the upload leaves a store whose (older) checkpoint still matches. Returns the
/// bytes written and this upload's record.
async fn upload_checkpoint(
    store: &storage::Store,
    cache: &StageCache,
    (local, object, entry): (&Path, &str, &str),
    previous: Option<&AttestedFile>,
) -> Result<(u64, AttestedFile)> {
    let bytes = tokio::fs::read(local)
        .await
        .map_err(|e| Error::io(local, e))?;
    let record = AttestedFile::of(object, &bytes);
    let attested: Vec<AttestedFile> = std::iter::once(record.clone())
        .chain(previous.cloned())
        .collect();
    cache.record(entry, &attested).await;
    let n = store.put_bytes(object, bytes).await?;
    Ok((n, record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_ledger::MemoryLedger;

    /// A cache in folder `root` with an in-memory ledger.
    fn cache_at(root: &Path, namespace: Option<&str>) -> StageCache {
        let ledger: Arc<dyn CacheLedger> = Arc::new(MemoryLedger::default());
        StageCache::new(root.to_str().unwrap(), namespace, ledger).unwrap()
    }

    #[tokio::test]
    async fn an_entry_round_trips_and_an_incomplete_one_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let cache = cache_at(&d.path().join("cache"), None);
        let root = cache.url();
        let out = d.path().join("work/tile");
        std::fs::create_dir_all(out.join("tiles")).unwrap();
        std::fs::write(out.join("tiles/0.glb"), b"glb bytes").unwrap();
        std::fs::write(out.join(MARKER), b"{\"key\":\"k1\",\"summary\":{}}").unwrap();

        let key = "a".repeat(64);
        assert_eq!(restore(&cache, "tile", &key, &out).await.unwrap(), None);
        let written = store(&cache, "tile", &key, &out, Upload::Always)
            .await
            .unwrap();
        // 9 bytes of GLB, the 25-byte marker and the contents list.
        let contents = std::fs::metadata(format!("{root}/tile/{key}/{CONTENTS}"))
            .unwrap()
            .len();
        assert_eq!(written, 9 + 25 + contents);
        // Storing a recorded entry again is a no-op unless asked to replace it.
        let again = store(&cache, "tile", &key, &out, Upload::UnlessRecorded);
        assert_eq!(again.await.unwrap(), 0);

        let other = d.path().join("other/tile");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("stale"), b"x").unwrap();
        let read = restore(&cache, "tile", &key, &other).await.unwrap();
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
        let half = format!("{root}/tile/{}", "b".repeat(64));
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(format!("{half}/part"), b"x").unwrap();
        assert_eq!(
            restore(&cache, "tile", &"b".repeat(64), &other)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn an_entry_changed_after_it_was_committed_is_ignored_even_with_its_contents_list() {
        let d = tempfile::tempdir().unwrap();
        let cache = cache_at(&d.path().join("cache"), None);
        let out = d.path().join("work/tile");
        std::fs::create_dir_all(out.join("tiles")).unwrap();
        std::fs::write(out.join("tiles/0.glb"), b"good tile").unwrap();
        std::fs::write(out.join(MARKER), b"{}").unwrap();
        let key = "c".repeat(64);
        store(&cache, "tile", &key, &out, Upload::Always)
            .await
            .unwrap();
        let entry = format!("{}/tile/{key}", cache.url());
        let restored = d.path().join("restored/tile");
        for (poison, what) in [("tiles/0.glb", "changed"), ("tiles/extra.glb", "added")] {
            std::fs::write(format!("{entry}/{poison}"), b"poisoned").unwrap();
            // The hostile writer also rewrites the contents list to match its files.
            let forged = serde_json::to_vec(&list_files(Path::new(&entry)).unwrap()).unwrap();
            std::fs::write(format!("{entry}/{CONTENTS}"), forged).unwrap();
            assert_eq!(
                restore(&cache, "tile", &key, &restored).await.unwrap(),
                None,
                "a {what} file was accepted"
            );
            assert!(!restored.exists());
            // A recorded entry is left alone when only checked for...
            let kept = store(&cache, "tile", &key, &out, Upload::UnlessRecorded);
            assert_eq!(kept.await.unwrap(), 0);
            // ...but the rebuild that follows a refused entry replaces it.
            store(&cache, "tile", &key, &out, Upload::Always)
                .await
                .unwrap();
            let _ = std::fs::remove_file(format!("{entry}/tiles/extra.glb"));
            assert_eq!(
                std::fs::read(format!("{entry}/tiles/0.glb")).unwrap(),
                b"good tile"
            );
        }
        // As committed, it restores.
        assert!(
            restore(&cache, "tile", &key, &restored)
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
    async fn an_entry_no_worker_recorded_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("cache");
        let out = d.path().join("work/tile");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("0.glb"), b"tile").unwrap();
        std::fs::write(out.join(MARKER), b"{}").unwrap();
        let key = "f".repeat(64);
        // Written with another ledger: complete in the store, unknown to this one.
        let writer = cache_at(&root, None);
        store(&writer, "tile", &key, &out, Upload::Always)
            .await
            .unwrap();
        let reader = cache_at(&root, None);
        let restored = d.path().join("restored/tile");
        let got = restore(&reader, "tile", &key, &restored);
        assert_eq!(got.await.unwrap(), None);
        assert!(
            restore(&writer, "tile", &key, &restored)
                .await
                .unwrap()
                .is_some()
        );
    }

    #[tokio::test]
    async fn namespaces_keep_entries_apart() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("cache");
        let ledger: Arc<dyn CacheLedger> = Arc::new(MemoryLedger::default());
        let art = StageCache::new(root.to_str().unwrap(), Some("teams/art"), ledger.clone());
        let geo = StageCache::new(root.to_str().unwrap(), Some("teams/geo"), ledger);
        let (art, geo) = (art.unwrap(), geo.unwrap());
        let out = d.path().join("work/tile");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join(MARKER), b"{}").unwrap();
        let key = "9".repeat(64);
        store(&art, "tile", &key, &out, Upload::Always)
            .await
            .unwrap();
        assert!(
            root.join("teams/art/tile")
                .join(&key)
                .join(MARKER)
                .is_file()
        );
        let restored = d.path().join("restored/tile");
        let got = restore(&geo, "tile", &key, &restored);
        assert_eq!(got.await.unwrap(), None);
        assert!(
            restore(&art, "tile", &key, &restored)
                .await
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn namespaces_that_could_leave_their_folder_are_refused() {
        let ledger: Arc<dyn CacheLedger> = Arc::new(MemoryLedger::default());
        for bad in [
            "",
            "teams/",
            "teams/..",
            "teams/a b",
            "../x",
            "teams//a",
            "é",
        ] {
            let e = StageCache::new("/c", Some(bad), ledger.clone()).unwrap_err();
            assert!(e.to_string().contains("namespace"), "{bad}: {e}");
        }
        let ok = StageCache::new("/c/", Some("teams/art-2.x_y"), ledger).unwrap();
        assert_eq!(ok.url(), "/c/teams/art-2.x_y");
    }

    #[tokio::test]
    async fn a_checkpoint_travels_through_the_cache_while_its_stage_runs() {
        let d = tempfile::tempdir().unwrap();
        let cache = cache_at(&d.path().join("cache"), None);
        let key = "d".repeat(64);
        let on_a = d.path().join("a/train.ckpt");
        std::fs::create_dir_all(on_a.parent().unwrap()).unwrap();
        let up = CheckpointUploader::spawn(
            &cache,
            "train",
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
            restore_checkpoint(&cache, "train", &key, &on_b)
                .await
                .unwrap()
        );
        assert_eq!(std::fs::read(&on_b).unwrap(), b"step 120");
        // A local checkpoint wins; another key has none.
        assert!(
            !restore_checkpoint(&cache, "train", &key, &on_b)
                .await
                .unwrap()
        );
        let on_c = d.path().join("b/other.ckpt");
        assert!(
            !restore_checkpoint(&cache, "train", &"e".repeat(64), &on_c)
                .await
                .unwrap()
        );
        // B finishes the stage: the stored checkpoint is removed.
        let up = CheckpointUploader::spawn(
            &cache,
            "train",
            &key,
            on_b,
            std::time::Duration::from_millis(20),
        )
        .unwrap();
        up.finish(true).await;
        assert!(!stored.exists());
    }

    #[tokio::test]
    async fn a_checkpoint_changed_in_the_store_or_never_recorded_is_discarded() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("cache");
        let cache = cache_at(&root, None);
        let key = "7".repeat(64);
        let on_a = d.path().join("a/train.ckpt");
        std::fs::create_dir_all(on_a.parent().unwrap()).unwrap();
        std::fs::write(&on_a, b"step 50, colours green").unwrap();
        let up = CheckpointUploader::spawn(
            &cache,
            "train",
            &key,
            on_a,
            std::time::Duration::from_secs(60),
        )
        .unwrap();
        up.finish(false).await;
        let stored = root.join(format!("checkpoints/train/{key}/train.ckpt"));
        // Rewritten in the store between the kill and the resume: well-formed, other colours.
        std::fs::write(&stored, b"step 50, colours magenta").unwrap();
        let on_b = d.path().join("b/train.ckpt");
        std::fs::create_dir_all(on_b.parent().unwrap()).unwrap();
        let got = restore_checkpoint(&cache, "train", &key, &on_b);
        assert!(!got.await.unwrap());
        assert!(!on_b.exists(), "a discarded checkpoint is not written");
        // Put back as recorded, it is taken; a reader with no record of it discards it.
        std::fs::write(&stored, b"step 50, colours green").unwrap();
        let stranger = cache_at(&root, None);
        let got = restore_checkpoint(&stranger, "train", &key, &on_b);
        assert!(!got.await.unwrap());
        let got = restore_checkpoint(&cache, "train", &key, &on_b);
        assert!(got.await.unwrap());
    }
}
