//! `publish`: copy a job's outputs to the output URL so that no reader takes a half-published set
//! for a committed one, and so that an attempt that lost its lease can never damage what another
//! attempt committed — decided by the store, not by timing.
//!
//! Protocol. Every write to a name readers see is conditional on the version this attempt saw
//! (S3 `If-Match` / `If-None-Match`; see [`storage::Store::put_if`]), so when two attempts race,
//! the store lets exactly one write land and refuses the other:
//! 1. read `manifest.json` and its version; a manifest of the same job committed by a later
//!    attempt (a higher fencing token) ends this attempt;
//! 2. **claim**: replace it, conditional on that version, by a marker (`"publishing": true`, this
//!    attempt's token, the previous manifest's file list) — readers treat a marker as no manifest
//!    (the folder is in flux), and the next claimer inherits the list of files to clean up;
//! 3. write each file to its final name, conditional on the version the name had just after the
//!    claim;
//! 4. **commit**: replace the marker, conditional on the claim's version, by the manifest;
//! 5. remove the files the previous manifest listed and this one does not.
//!
//! Before each file write the attempt re-asserts its claim (rewrites its own marker,
//! conditional on the claim's version): S3's ETag is a hash of the content, so a later attempt
//! that rewrote a file with identical bytes leaves its version as it was and a file's version
//! alone cannot stop a stale write; the marker's bytes name the attempt, so its version never
//! comes back. After its commit the attempt lists the output once and writes again any of its
//! files whose version is not the one its own write left (a write of another attempt that was
//! already in flight when it claimed), while its commit is still the manifest in place.
//!
//! An attempt whose lease ran out, or whose claim another attempt replaced, finds its next
//! conditional write refused however late it arrives and stops with [`Error::Fenced`] saying
//! what it had changed; a queue worker records a stale attempt `rejected`. Under a queue worker
//! the attempt also checks its [`Fence`] (the lease file kept in date after each accepted
//! heartbeat) before each write, and its requests give up after a fifth of the lease TTL
//! ([`storage::open_capped`]). Local `kiln run` has no fence but the same conditional writes, so
//! two runs publishing to one folder cannot interleave their files either.
//!
//! What the store cannot decide: (a) one file write already in flight when another attempt
//! claimed (it passed its claim check just before) lands if it arrives before the later attempt
//! writes that name (which then overwrites it) or, where the later attempt wrote identical
//! bytes, at any time; the later attempt's check after its commit rewrites it only if it landed
//! by then. (b) `object_store` has no conditional delete, so step 5's deletes (files only the
//! previous manifest listed, after this commit) are unconditional.

mod stage;
pub use stage::{Publish, PublishSummary};

use std::collections::HashMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use object_store::ObjectStoreExt;

use crate::storage;
use crate::warnings::StageWarning;
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
    /// A claim, not a commit: an attempt is publishing (`files` lists the previous commit's
    /// files, still to be cleaned up). Readers treat the output as having no manifest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub publishing: bool,
    /// What the job's stages warned about (a missing texture, a skipped camera, a clamped
    /// value), in stage order; absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<StageWarning>,
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
    /// The lease's TTL in milliseconds: the attempt's requests give up after a fifth of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
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

    /// How long one store request of this attempt may take, retries included: a fifth of the
    /// lease TTL its lease file states (below the quarter the lease file's margin allows).
    fn request_cap(&self) -> Option<std::time::Duration> {
        let bytes = std::fs::read(&self.lease_file).ok()?;
        let lease: LeaseFile = serde_json::from_slice(&bytes).ok()?;
        lease
            .ttl_ms
            .map(|ttl| std::time::Duration::from_millis((ttl / 5).max(100)))
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
/// As [`publish`]; [`Error::Fenced`] when the attempt lost its lease or the store refused one of
/// its writes because another attempt wrote the output first (the message says what this
/// attempt had changed).
pub async fn publish_keyed(
    files: &[PublishFile],
    output: &str,
    job_id: &str,
    stage_key: Option<&str>,
    fence: Option<&Fence>,
) -> Result<PublishReport> {
    publish_with_warnings(files, output, job_id, stage_key, &[], fence).await
}

/// [`publish_keyed`], listing the job's `warnings` in the manifest (what the `publish` stage
/// does: a team reading only the output sees that a texture was missing).
///
/// # Errors
/// As [`publish_keyed`].
pub async fn publish_with_warnings(
    files: &[PublishFile],
    output: &str,
    job_id: &str,
    stage_key: Option<&str>,
    warnings: &[StageWarning],
    fence: Option<&Fence>,
) -> Result<PublishReport> {
    check_sources(files)?;
    let store = match fence.and_then(Fence::request_cap) {
        Some(cap) => storage::open_capped(output, cap)?,
        None => storage::open(output)?,
    };
    publish_to(store, files, job_id, stage_key, warnings, fence).await
}

/// [`publish_keyed`] into an opened store.
async fn publish_to(
    store: storage::Store,
    files: &[PublishFile],
    job_id: &str,
    stage_key: Option<&str>,
    warnings: &[StageWarning],
    fence: Option<&Fence>,
) -> Result<PublishReport> {
    remove_dead_staging(&store, job_id, fence.map(|f| f.token)).await;
    let mut attempt = Attempt {
        store,
        fence,
        job_id,
        claimed: false,
        written: 0,
        marker: Vec::new(),
        landed: HashMap::new(),
    };
    let (seen, previous) = attempt.read_committed().await?;
    let mut claim = attempt.claim(seen.as_ref(), &previous).await?;
    let (entries, mut bytes_written) = attempt.write_files(files, &mut claim).await?;
    let manifest = Manifest {
        job_id: job_id.into(),
        kiln_version: env!("CARGO_PKG_VERSION").into(),
        stage_key: stage_key.map(String::from),
        fence_token: fence.map(|f| f.token),
        files: entries,
        publishing: false,
        warnings: warnings.to_vec(),
    };
    let (commit, manifest_bytes) = attempt.commit(&manifest, &claim).await?;
    bytes_written += manifest_bytes;
    attempt.verify(files, &commit).await?;
    attempt.remove_leftovers(&previous, files).await?;
    Ok(PublishReport {
        manifest,
        bytes_written,
    })
}

/// Refuse duplicate or reserved names and unreadable sources before anything is written.
fn check_sources(files: &[PublishFile]) -> Result<()> {
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
        std::fs::metadata(&f.local).map_err(|e| Error::io(&f.local, e))?;
    }
    Ok(())
}

/// One attempt's way through the protocol, and what it has changed so far (for a truthful
/// account when it is fenced).
struct Attempt<'a> {
    store: storage::Store,
    fence: Option<&'a Fence>,
    job_id: &'a str,
    /// Whether this attempt's marker replaced the manifest.
    claimed: bool,
    /// Files written to their final names.
    written: usize,
    /// The marker this attempt claimed the output with: unique to the attempt (it names the job
    /// and token), so its version changes whenever anyone else writes `manifest.json`.
    marker: Vec<u8>,
    /// The ETag each file write of this attempt left, to find later writes of others.
    landed: HashMap<String, Option<String>>,
}

/// How often a file write refused while this attempt still holds its claim is tried again: each
/// refusal is one late write of a stale attempt, and a stale attempt has at most one request in
/// flight after its lease file runs out.
const REFUSED_WRITE_TRIES: usize = 3;

impl Attempt<'_> {
    /// Step 1: the manifest now, its version, and the files a claim must clean up.
    async fn read_committed(&self) -> Result<(Option<storage::UpdateVersion>, Vec<String>)> {
        self.lease()?;
        let Some((version, m)) = read_versioned_manifest(&self.store).await? else {
            return Ok((None, Vec::new()));
        };
        if let (Some(fence), Some(m)) = (self.fence, &m)
            && m.job_id == self.job_id
            && !m.publishing
            && m.fence_token.is_some_and(|t| t > fence.token)
        {
            return Err(self.fenced(format!(
                "a later attempt (token {}) already committed this output",
                m.fence_token.unwrap_or_default()
            )));
        }
        let previous = m
            .map(|m| m.files.into_iter().map(|f| f.path).collect())
            .unwrap_or_default();
        Ok((Some(version), previous))
    }

    /// Step 2: replace what was read by this attempt's marker, if nobody changed it since.
    async fn claim(
        &mut self,
        seen: Option<&storage::UpdateVersion>,
        previous: &[String],
    ) -> Result<storage::UpdateVersion> {
        self.lease()?;
        let marker = Manifest {
            job_id: self.job_id.into(),
            kiln_version: env!("CARGO_PKG_VERSION").into(),
            files: previous
                .iter()
                .map(|p| ManifestEntry {
                    path: p.clone(),
                    bytes: 0,
                    blake3: String::new(),
                })
                .collect(),
            stage_key: None,
            fence_token: self.fence.map(|f| f.token),
            publishing: true,
            warnings: Vec::new(),
        };
        self.marker = serde_json::to_vec_pretty(&marker).expect("manifest serialises");
        match self
            .store
            .put_if(MANIFEST_JSON, self.marker.clone(), seen)
            .await?
        {
            storage::Conditional::Written(v) => {
                self.claimed = true;
                Ok(v)
            }
            storage::Conditional::Refused => Err(self.refused("claim of manifest.json").await),
        }
    }

    /// Step 3: every file to its final name, each write conditional on the name's version now.
    async fn write_files(
        &mut self,
        files: &[PublishFile],
        claim: &mut storage::UpdateVersion,
    ) -> Result<(Vec<ManifestEntry>, u64)> {
        let total = files.iter().map(|f| crate::stage::file_len(&f.local)).sum();
        let bar = crate::progress::bytes_bar(total, "publish");
        // Listed once, after the claim: a stale attempt's write that lands from now on changes a
        // version, and this attempt's write of that name is refused rather than replacing it.
        let mut versions = self.store.versions().await?;
        let mut entries = Vec::with_capacity(files.len());
        let mut bytes = 0;
        for f in files {
            let data = tokio::fs::read(&f.local)
                .await
                .map_err(|e| Error::io(&f.local, e))?;
            entries.push(ManifestEntry {
                path: f.relative.clone(),
                bytes: data.len() as u64,
                blake3: blake3::hash(&data).to_hex().to_string(),
            });
            bytes += data.len() as u64;
            let seen = versions.remove(&f.relative).map(|(v, _)| v);
            self.write_one(&f.relative, data, seen, claim).await?;
            bar.inc(entries.last().map_or(0, |e| e.bytes));
        }
        bar.finish_and_clear();
        Ok((entries, bytes))
    }

    /// One conditional write. A refusal while this attempt's claim still stands (re-asserted by
    /// a conditional rewrite of the marker) was a stale attempt's late write: read the name's
    /// version again and retry; otherwise another attempt claimed the output, and this one stops.
    async fn write_one(
        &mut self,
        relative: &str,
        data: Vec<u8>,
        mut seen: Option<storage::UpdateVersion>,
        claim: &mut storage::UpdateVersion,
    ) -> Result<()> {
        for _ in 0..REFUSED_WRITE_TRIES {
            self.lease()?;
            // Content-addressed ETags (S3's is the MD5 of the bytes) cannot tell a later
            // attempt's identical rewrite from no write, so a name's version alone does not fence
            // it: the claim is re-asserted first, and a later claimer's marker (other bytes,
            // another version) stops this attempt before it writes.
            *claim = self.reassert(claim).await?;
            match self
                .store
                .put_if(relative, data.clone(), seen.as_ref())
                .await?
            {
                storage::Conditional::Written(v) => {
                    self.written += 1;
                    self.landed.insert(relative.to_string(), v.e_tag);
                    return Ok(());
                }
                storage::Conditional::Refused => {
                    seen = self.store.version(relative).await?;
                }
            }
        }
        Err(self.refused(&format!("write of `{relative}`")).await)
    }

    /// Rewrite this attempt's marker conditional on the claim's version: whether this attempt
    /// still holds the output.
    async fn reassert(&self, claim: &storage::UpdateVersion) -> Result<storage::UpdateVersion> {
        match self
            .store
            .put_if(MANIFEST_JSON, self.marker.clone(), Some(claim))
            .await?
        {
            storage::Conditional::Written(v) => Ok(v),
            storage::Conditional::Refused => Err(self.refused("claim of manifest.json").await),
        }
    }

    /// Step 4: the manifest replaces this attempt's marker, if nobody replaced the marker since.
    async fn commit(
        &mut self,
        manifest: &Manifest,
        claim: &storage::UpdateVersion,
    ) -> Result<(storage::UpdateVersion, u64)> {
        self.lease()?;
        let json = serde_json::to_vec_pretty(manifest).expect("manifest serialises");
        let n = json.len() as u64;
        match self.store.put_if(MANIFEST_JSON, json, Some(claim)).await? {
            storage::Conditional::Written(v) => Ok((v, n)),
            storage::Conditional::Refused => Err(self.refused("commit of manifest.json").await),
        }
    }

    /// After the commit: a write of another attempt that was already in flight when this one
    /// claimed (it had passed its own claim check just before) may have landed on one of this
    /// attempt's files. One listing finds them (their ETag is not the one this attempt's write
    /// left); each is written again, conditional on what is there, while this commit is still
    /// the manifest in place.
    async fn verify(
        &mut self,
        files: &[PublishFile],
        commit: &storage::UpdateVersion,
    ) -> Result<()> {
        for _ in 0..REFUSED_WRITE_TRIES {
            let now = self.store.versions().await?;
            let overwritten: Vec<&PublishFile> = files
                .iter()
                .filter(|f| {
                    now.get(&f.relative).map(|(v, _)| &v.e_tag) != self.landed.get(&f.relative)
                })
                .collect();
            if overwritten.is_empty() {
                return Ok(());
            }
            for f in overwritten {
                let manifest_now = self.store.version(MANIFEST_JSON).await?;
                if manifest_now.map(|v| v.e_tag) != Some(commit.e_tag.clone()) {
                    // Another publish claimed the output since: its files are its own to write.
                    return Ok(());
                }
                tracing::warn!(
                    file = %f.relative,
                    output = %self.store.url,
                    "another attempt's write landed on a file this publish had written; writing it again"
                );
                let data = tokio::fs::read(&f.local)
                    .await
                    .map_err(|e| Error::io(&f.local, e))?;
                let seen = now.get(&f.relative).map(|(v, _)| v.clone());
                if let storage::Conditional::Written(v) =
                    self.store.put_if(&f.relative, data, seen.as_ref()).await?
                {
                    self.landed.insert(f.relative.clone(), v.e_tag);
                }
            }
        }
        Ok(())
    }

    /// Step 5: files the previous manifest listed that this one does not.
    async fn remove_leftovers(&self, previous: &[String], files: &[PublishFile]) -> Result<()> {
        let now: std::collections::BTreeSet<&str> =
            files.iter().map(|f| f.relative.as_str()).collect();
        for old in previous.iter().filter(|p| !now.contains(p.as_str())) {
            match self.store.store.delete(&self.store.child(old)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(source) => {
                    return Err(Error::Storage {
                        url: self.store.url.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// The lease check before each write, with this attempt's account appended.
    fn lease(&self) -> Result<()> {
        match self.fence.map(Fence::check) {
            Some(Err(Error::Fenced { problem, .. })) => Err(self.fenced(problem)),
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// [`Error::Fenced`] saying `why` and what this attempt had changed at the output.
    fn fenced(&self, why: String) -> Error {
        let changed = if !self.claimed {
            "this attempt changed nothing at the output".to_string()
        } else {
            format!(
                "this attempt had marked the output as being published and written {} of its \
                 files there before another attempt claimed it (no manifest of its own; the \
                 later attempt writes its own files over them)",
                self.written
            )
        };
        Error::Fenced {
            token: self.fence.map_or(0, |f| f.token),
            problem: format!("{why}; {changed}"),
        }
    }

    /// The store refused `what`: name who holds the output now.
    async fn refused(&self, what: &str) -> Error {
        let holder = match read_versioned_manifest(&self.store).await {
            Ok(Some((_, Some(m)))) => format!(
                "{} by job {}{}",
                if m.publishing {
                    "being published"
                } else {
                    "committed"
                },
                m.job_id,
                m.fence_token
                    .map(|t| format!(", attempt token {t}"))
                    .unwrap_or_default()
            ),
            _ => "changed".into(),
        };
        self.fenced(format!(
            "the store refused its {what}: another attempt wrote the output after this one read \
             it (manifest.json is now {holder})"
        ))
    }
}

/// Remove staging prefixes that earlier versions' attempts of `job_id` left at the output root
/// (`.staging-<job>` and `.staging-<job>-<t>` for tokens below this attempt's). Best effort.
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
                .is_some_and(|t| token.is_none_or(|mine| t < mine));
        if dead {
            let _ = store.delete_prefix(name).await;
        }
    }
}

/// `manifest.json`'s version and content (`None` inside when it is not a readable manifest);
/// `None` when there is none.
async fn read_versioned_manifest(
    store: &storage::Store,
) -> Result<Option<(storage::UpdateVersion, Option<Manifest>)>> {
    let got = match store.store.get(&store.child(MANIFEST_JSON)).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(source) => {
            return Err(Error::Storage {
                url: store.url.clone(),
                source,
            });
        }
    };
    let version = storage::UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let bytes = got.bytes().await.map_err(|source| Error::Storage {
        url: store.url.clone(),
        source,
    })?;
    Ok(Some((version, serde_json::from_slice(&bytes).ok())))
}

/// Whether every file `m` lists is at `output` with the size it records (one listing): a
/// rerun of the same publish key skips writing only then, so an output damaged after its
/// commit is written again.
pub async fn committed_files_present(output: &str, m: &Manifest) -> bool {
    let Ok(store) = storage::open(output) else {
        return false;
    };
    let Ok(now) = store.versions().await else {
        return false;
    };
    m.files
        .iter()
        .all(|f| now.get(&f.path).is_some_and(|(_, size)| *size == f.bytes))
}

/// The manifest committed at `output`, if there is a readable one (a publish in flight has
/// none).
pub async fn read_manifest(output: &str) -> Option<Manifest> {
    let store = storage::open(output).ok()?;
    let (_, m) = read_versioned_manifest(&store).await.ok()??;
    m.filter(|m| !m.publishing)
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
            ttl_ms: None,
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

    /// A store that holds the `nth` put to `name` until released, as a network stall would:
    /// the request, with the condition its attempt chose, reaches the store only then.
    #[derive(Debug)]
    struct Holding {
        inner: std::sync::Arc<dyn object_store::ObjectStore>,
        name: &'static str,
        nth: usize,
        seen: std::sync::atomic::AtomicUsize,
        held: tokio::sync::Notify,
        release: tokio::sync::Notify,
        /// What the store answered to the held request once it went through.
        answer: std::sync::Mutex<Option<String>>,
    }

    impl std::fmt::Display for Holding {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Holding({})", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl object_store::ObjectStore for Holding {
        async fn put_opts(
            &self,
            location: &object_store::path::Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            let hold = location.filename() == Some(self.name)
                && self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == self.nth;
            if !hold {
                return self.inner.put_opts(location, payload, opts).await;
            }
            self.held.notify_one();
            self.release.notified().await;
            let r = self.inner.put_opts(location, payload, opts).await;
            *self.answer.lock().unwrap() = Some(match &r {
                Ok(_) => "written".into(),
                Err(e) => format!("refused: {e}"),
            });
            r
        }
        async fn put_multipart_opts(
            &self,
            location: &object_store::path::Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &object_store::path::Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<
                'static,
                object_store::Result<object_store::path::Path>,
            >,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>
        {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&object_store::path::Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&object_store::path::Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &object_store::path::Path,
            to: &object_store::path::Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// An in-memory store whose ETags are a hash of the content, as S3's (MD5) are: an
    /// identical rewrite leaves the ETag unchanged. Conditional puts are checked against it.
    #[derive(Debug, Default)]
    struct ContentEtags {
        inner: object_store::memory::InMemory,
    }

    impl std::fmt::Display for ContentEtags {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "ContentEtags")
        }
    }

    fn content_etag(bytes: &[u8]) -> String {
        format!("\"{}\"", blake3::hash(bytes).to_hex())
    }

    #[async_trait::async_trait]
    impl object_store::ObjectStore for ContentEtags {
        async fn put_opts(
            &self,
            location: &object_store::path::Path,
            payload: object_store::PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            let now = match self.inner.get(location).await {
                Ok(got) => Some(content_etag(&got.bytes().await?)),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            let refused = match &opts.mode {
                object_store::PutMode::Overwrite => false,
                object_store::PutMode::Create => now.is_some(),
                object_store::PutMode::Update(v) => v.e_tag != now,
            };
            if refused {
                return Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: "ETag mismatch".into(),
                });
            }
            let bytes: Vec<u8> = payload.iter().flat_map(|b| b.to_vec()).collect();
            let e_tag = Some(content_etag(&bytes));
            self.inner.put(location, bytes.into()).await?;
            Ok(object_store::PutResult {
                e_tag,
                version: None,
                extensions: Default::default(),
            })
        }
        async fn put_multipart_opts(
            &self,
            location: &object_store::path::Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &object_store::path::Path,
            _options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            let got = self.inner.get(location).await?;
            let mut meta = got.meta.clone();
            let bytes = got.bytes().await?;
            meta.e_tag = Some(content_etag(&bytes));
            let len = bytes.len() as u64;
            Ok(object_store::GetResult {
                payload: object_store::GetResultPayload::Stream(Box::pin(futures::stream::once(
                    async move { Ok(bytes) },
                ))),
                meta,
                range: 0..len,
                attributes: Default::default(),
                extensions: Default::default(),
            })
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<
                'static,
                object_store::Result<object_store::path::Path>,
            >,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>
        {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&object_store::path::Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            use futures::StreamExt;
            let inner = self.inner.clone();
            self.inner
                .list(prefix)
                .then(move |m| {
                    let inner = inner.clone();
                    async move {
                        let mut m = m?;
                        let bytes = inner.get(&m.location).await?.bytes().await?;
                        m.e_tag = Some(content_etag(&bytes));
                        Ok(m)
                    }
                })
                .boxed()
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&object_store::path::Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &object_store::path::Path,
            to: &object_store::path::Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// ETags that are content hashes (S3's) cannot fence a file on their own: a later publish of
    /// identical bytes leaves them as they were. Attempt 1 of job J4 claims the output and is
    /// paused before its first file write (its claim re-assertion held); job J5 publishes the
    /// same bytes the output already had and commits. Attempt 1's re-assertion is refused, so it
    /// writes none of its files over J5's.
    #[tokio::test]
    async fn an_identical_rewrite_does_not_let_a_paused_attempt_s_next_write_through() {
        let src = tempfile::tempdir().unwrap();
        let file = |n: &str, body: &str| {
            let dir = src.path().join(body);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(n), body).unwrap();
            PublishFile {
                local: dir.join(n),
                relative: n.into(),
            }
        };
        let inner: std::sync::Arc<dyn object_store::ObjectStore> =
            std::sync::Arc::new(ContentEtags::default());
        let same = || [file("0.glb", "x"), file("tileset.json", "x")];
        publish_to(store_of(inner.clone()), &same(), "j1", None, &[], None)
            .await
            .unwrap();
        let holding = std::sync::Arc::new(Holding {
            inner: inner.clone(),
            name: MANIFEST_JSON,
            // The claim is the first write to manifest.json, the re-assertion before the first
            // file the second.
            nth: 2,
            seen: 0.into(),
            held: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
            answer: std::sync::Mutex::new(None),
        });
        let j4_files = [file("0.glb", "j4"), file("tileset.json", "j4")];
        let j4_fence = fence(src.path(), 1, 60_000);
        let j4 = {
            let store = store_of(holding.clone());
            async move { publish_to(store, &j4_files, "j4", None, &[], Some(&j4_fence)).await }
        };
        let j5 = async {
            holding.held.notified().await;
            let r = publish_to(store_of(inner.clone()), &same(), "j5", None, &[], None).await;
            holding.release.notify_one();
            r
        };
        let (j4, j5) = tokio::join!(j4, j5);
        let j5 = j5.unwrap();
        let e = j4.unwrap_err();
        assert!(e.to_string().contains("the store refused its claim"), "{e}");
        let store = store_of(inner);
        let committed: Manifest =
            serde_json::from_slice(&read(&store, MANIFEST_JSON).await).unwrap();
        assert_eq!(committed, j5.manifest);
        assert_eq!(read(&store, "0.glb").await, b"x");
        assert_eq!(read(&store, "tileset.json").await, b"x");
    }

    fn store_of(inner: std::sync::Arc<dyn object_store::ObjectStore>) -> storage::Store {
        storage::Store {
            store: inner,
            prefix: object_store::path::Path::from("out"),
            url: "memory:///out".into(),
            local: None,
        }
    }

    async fn read(store: &storage::Store, rel: &str) -> Vec<u8> {
        let got = store.store.get(&store.child(rel)).await.unwrap();
        got.bytes().await.unwrap().to_vec()
    }

    /// Attempt 1 (stale) has one request held in the network while attempt 2 — granted the
    /// stage after attempt 1's lease ran out — publishes and commits; then the held request
    /// reaches the store. Whichever request it is (the claim, a file, the commit), the store
    /// refuses it and attempt 2's commit stands.
    #[tokio::test]
    async fn a_stale_attempt_s_request_held_past_a_later_commit_is_refused_by_the_store() {
        for (name, nth, what) in [
            (MANIFEST_JSON, 1, "claim"),
            ("tileset.json", 1, "write of `tileset.json`"),
            (MANIFEST_JSON, 2, "commit"),
        ] {
            let src = tempfile::tempdir().unwrap();
            let file = |n: &str, body: &str| {
                let dir = src.path().join(body);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(n), body).unwrap();
                PublishFile {
                    local: dir.join(n),
                    relative: n.into(),
                }
            };
            let inner: std::sync::Arc<dyn object_store::ObjectStore> =
                std::sync::Arc::new(object_store::memory::InMemory::new());
            // An earlier job's commit is in place.
            publish_to(
                store_of(inner.clone()),
                &[file("tileset.json", "old")],
                "j0",
                None,
                &[],
                None,
            )
            .await
            .unwrap();
            let holding = std::sync::Arc::new(Holding {
                inner: inner.clone(),
                name,
                nth,
                seen: 0.into(),
                held: tokio::sync::Notify::new(),
                release: tokio::sync::Notify::new(),
                answer: std::sync::Mutex::new(None),
            });
            let stale_files = [file("tileset.json", "stale"), file("0.glb", "stale")];
            let stale_fence = fence(src.path(), 1, 60_000);
            let stale = {
                let store = store_of(holding.clone());
                async move {
                    publish_to(
                        store,
                        &stale_files,
                        "job",
                        Some("k1"),
                        &[],
                        Some(&stale_fence),
                    )
                    .await
                }
            };
            let live = async {
                holding.held.notified().await;
                let r = publish_to(
                    store_of(inner.clone()),
                    &[file("tileset.json", "live"), file("0.glb", "live")],
                    "job",
                    Some("k2"),
                    &[],
                    Some(&fence(src.path(), 2, 60_000)),
                )
                .await;
                holding.release.notify_one();
                r
            };
            let (stale, live) = tokio::join!(stale, live);
            let live = live.unwrap();
            let e = stale.unwrap_err();
            assert!(
                matches!(e, Error::Fenced { token: 1, .. })
                    && e.to_string().contains("the store refused")
                    && e.to_string()
                        .contains("committed by job job, attempt token 2"),
                "{what}: {e}"
            );
            assert!(
                holding
                    .answer
                    .lock()
                    .unwrap()
                    .as_deref()
                    .unwrap()
                    .starts_with("refused"),
                "{what}: the held request went through"
            );
            let store = store_of(inner.clone());
            let committed: Manifest =
                serde_json::from_slice(&read(&store, MANIFEST_JSON).await).unwrap();
            assert_eq!(committed, live.manifest, "{what}");
            assert_eq!(read(&store, "tileset.json").await, b"live", "{what}");
            assert_eq!(read(&store, "0.glb").await, b"live", "{what}");
            // The stale attempt says what it changed, truthfully.
            let claimed = what != "claim";
            assert_eq!(
                e.to_string().contains("changed nothing"),
                !claimed,
                "{what}: {e}"
            );
        }
    }

    /// A local folder has no conditional request: the check and the write run under a lock of
    /// the folder, with the same outcomes as a store's.
    #[tokio::test]
    async fn a_local_conditional_write_is_refused_unless_the_version_is_the_one_seen() {
        let out = tempfile::tempdir().unwrap();
        let store = storage::open(out.path().to_str().unwrap()).unwrap();
        let storage::Conditional::Written(v1) =
            store.put_if("a", b"1".to_vec(), None).await.unwrap()
        else {
            panic!("creating a new file is refused")
        };
        assert_eq!(
            store.put_if("a", b"x".to_vec(), None).await.unwrap(),
            storage::Conditional::Refused
        );
        let storage::Conditional::Written(v2) =
            store.put_if("a", b"2".to_vec(), Some(&v1)).await.unwrap()
        else {
            panic!("the version seen is refused")
        };
        assert_ne!(v1, v2);
        assert_eq!(
            store
                .put_if("a", b"stale".to_vec(), Some(&v1))
                .await
                .unwrap(),
            storage::Conditional::Refused
        );
        assert_eq!(std::fs::read(out.path().join("a")).unwrap(), b"2");
    }
}
