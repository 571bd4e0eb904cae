//! Who vouches for the bytes in the shared stage cache: a [`CacheLedger`], a record kept apart
//! from the store, of each entry's and each travelling checkpoint's files with their BLAKE3.
//!
//! Why apart from the store: the store is shared (teams may be able to write the bucket, or an
//! operator may mount it on machines teams use), so nothing found there is trusted because of
//! where it is. A contents list stored beside the files proves nothing, since whoever can
//! rewrite a file can rewrite the list too. The ledger lives where teams cannot write — for the
//! queue's workers, the queue database (`kiln_jobs::cache_ledger`); this crate only defines the
//! hook, so it knows nothing of databases or teams. A reader accepts an entry only when its bytes
//! match the ledger's record; an entry with no record, or one that differs, is ignored and the
//! stage runs again — never a failure.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::BoxFuture;

/// One attested file: its `/`-separated path inside the entry, size in bytes and hex BLAKE3.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttestedFile {
    pub path: String,
    pub bytes: u64,
    pub blake3: String,
}

impl AttestedFile {
    /// The record of `bytes` stored as `path`.
    #[must_use]
    pub fn of(path: &str, bytes: &[u8]) -> AttestedFile {
        AttestedFile {
            path: path.to_string(),
            bytes: bytes.len() as u64,
            blake3: blake3::hash(bytes).to_hex().to_string(),
        }
    }
}

/// Why a ledger could not be read or written (a database error, say). Callers treat it as "no
/// record": the entry is ignored, or left unattested, and a warning names the cause.
pub type LedgerError = Box<dyn std::error::Error + Send + Sync>;

/// The record of which bytes the workers themselves stored under each cache entry.
///
/// `entry` is the entry's path below the cache root (`teams/art/tile/<key>`,
/// `checkpoints/train/<key>/train.ckpt`): unique per namespace, stage and key. Implementations
/// must be safe to call from several tasks and processes at once; the last record of an entry
/// wins.
pub trait CacheLedger: std::fmt::Debug + Send + Sync {
    /// Record that `entry` holds exactly `files` (sorted by path), replacing an earlier record.
    fn record<'a>(
        &'a self,
        entry: &'a str,
        files: &'a [AttestedFile],
    ) -> BoxFuture<'a, Result<(), LedgerError>>;

    /// The files recorded for `entry`; `None` when it was never recorded.
    fn attested<'a>(
        &'a self,
        entry: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<AttestedFile>>, LedgerError>>;
}

/// A ledger in this process's memory: for tests, and for a cache used by one process only.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    records: Mutex<HashMap<String, Vec<AttestedFile>>>,
}

impl CacheLedger for MemoryLedger {
    fn record<'a>(
        &'a self,
        entry: &'a str,
        files: &'a [AttestedFile],
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move {
            self.records
                .lock()
                .map_err(|_| "the in-memory cache ledger's lock is poisoned")?
                .insert(entry.to_string(), files.to_vec());
            Ok(())
        })
    }

    fn attested<'a>(
        &'a self,
        entry: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<AttestedFile>>, LedgerError>> {
        Box::pin(async move {
            Ok(self
                .records
                .lock()
                .map_err(|_| "the in-memory cache ledger's lock is poisoned")?
                .get(entry)
                .cloned())
        })
    }
}
