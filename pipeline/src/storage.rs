//! Object storage for job inputs and outputs, through `object_store`.
//!
//! A location is a URL: `s3://bucket/prefix` (credentials and endpoint from the usual `AWS_*`
//! environment variables, e.g. `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`), `file:///abs/path`, `memory:///`
//! (tests), or a plain filesystem path (relative paths are taken from the current directory).
//! A location names either one object (a file) or a prefix (a folder): [`fetch`] copies either into a
//! local directory; [`Store::put_file`] uploads one file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ClientConfigKey;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};

/// The version of one object a store reports (ETag and, where kept, a version id): what a
/// conditional write names.
pub use object_store::UpdateVersion;

/// The outcome of [`Store::put_if`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conditional {
    /// Written; the object's new version.
    Written(UpdateVersion),
    /// The store refused: the object was not at the expected version.
    Refused,
}

use crate::location::Location;
use crate::{Error, Result};

/// An object store plus the prefix a location URL points at.
#[derive(Debug, Clone)]
pub struct Store {
    /// The backend (S3, local filesystem or in-memory).
    pub store: Arc<dyn ObjectStore>,
    /// The object or prefix inside `store` the URL names.
    pub prefix: ObjectPath,
    /// The URL as the user wrote it, for error messages.
    pub url: String,
    /// The filesystem folder of the prefix for local stores (object stores have no empty folders to
    /// clean up; a local disk does).
    pub local: Option<PathBuf>,
}

/// Parse a location (URL or plain path, see [`crate::location`]) into a [`Store`]; a
/// `dataset://` URL is resolved here, on the machine that reads it.
///
/// # Errors
/// [`Error::Param`] for a location [`Location::parse`] refuses or a dataset that is not on this
/// machine; [`Error::Storage`] when the S3 builder rejects its configuration.
pub fn open(location: &str) -> Result<Store> {
    open_with_retry(location, object_store::RetryConfig::default(), None)
}

/// [`open`] with every S3 request, and its retries together, given up after `cap` (a fenced
/// publish passes a fifth of its lease TTL, so no request of an attempt outlives its lease by
/// more than that). Local and memory stores are the same as [`open`].
///
/// # Errors
/// As [`open`].
pub fn open_capped(location: &str, cap: std::time::Duration) -> Result<Store> {
    let retry = object_store::RetryConfig {
        retry_timeout: cap,
        ..object_store::RetryConfig::default()
    };
    open_with_retry(location, retry, Some(cap))
}

/// [`open`] for a reachability check: an S3 request gives up after about
/// [`PROBE_PATIENCE`] instead of retrying for up to three minutes (object_store's default), so a
/// caller that waits for an outage can say so while it waits. Local and memory stores are the
/// same as [`open`].
///
/// # Errors
/// As [`open`].
pub fn open_for_probe(location: &str) -> Result<Store> {
    let retry = object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: PROBE_PATIENCE,
        ..object_store::RetryConfig::default()
    };
    open_with_retry(location, retry, None)
}

/// How long one probe request of [`open_for_probe`] keeps retrying.
pub const PROBE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

fn open_with_retry(
    location: &str,
    retry: object_store::RetryConfig,
    request_timeout: Option<std::time::Duration>,
) -> Result<Store> {
    let bad = |problem: String| Error::Param {
        stage: "storage",
        field: "url".into(),
        expected: "a path, file:///abs/path, s3://BUCKET/PREFIX or dataset://NAME/PATH".into(),
        found: problem,
    };
    let parsed = Location::parse(location)
        .and_then(Location::resolve_dataset)
        .map_err(|e| bad(e.to_string()))?;
    let fs_path = match parsed {
        Location::S3 { bucket, key } => {
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(&bucket)
                .with_retry(retry)
                // If-Match / If-None-Match writes: publish's commit is decided by the store
                // (S3, SeaweedFS and MinIO honour them).
                .with_conditional_put(S3ConditionalPut::ETagMatch);
            if let Some(cap) = request_timeout {
                // Set as config keys, not `with_client_options`, which would drop the options
                // `from_env` read (AWS_ALLOW_HTTP among them).
                let ms = format!("{}ms", cap.as_millis().max(1));
                builder = builder
                    .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), &ms)
                    .with_config(
                        AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                        &ms,
                    );
            }
            let store = builder.build().map_err(|source| Error::Storage {
                url: location.into(),
                source,
            })?;
            return Ok(Store {
                store: Arc::new(store),
                prefix: ObjectPath::from(key),
                url: location.into(),
                local: None,
            });
        }
        Location::Memory(prefix) => {
            return Ok(Store {
                store: Arc::new(InMemory::new()),
                prefix: ObjectPath::from(prefix),
                url: location.into(),
                local: None,
            });
        }
        Location::Local(path) => path,
        Location::Dataset(_) => unreachable!("resolved above"),
    };
    // Canonicalise when the path exists (object paths reject `..`); otherwise normalise lexically.
    let abs = match std::fs::canonicalize(&fs_path) {
        Ok(p) => p,
        Err(_) => {
            lexical_normalize(&std::path::absolute(&fs_path).map_err(|e| Error::io(&fs_path, e))?)
        }
    };
    let prefix = ObjectPath::from_absolute_path(&abs).map_err(|_| {
        bad(format!(
            "`{location}` holds characters a filesystem path cannot"
        ))
    })?;
    Ok(Store {
        store: Arc::new(LocalFileSystem::new()),
        prefix,
        url: location.into(),
        local: Some(abs),
    })
}

/// Whether a storage failure means the store did not answer (an outage, a dropped connection, a
/// server error: worth waiting for) rather than refused (credentials, permissions, a missing
/// bucket, a request it will never accept: waiting changes nothing).
pub fn is_unreachable(e: &Error) -> bool {
    use object_store::Error as S;
    let Error::Storage { source, .. } = e else {
        return false;
    };
    let text = source.to_string();
    !matches!(
        source,
        S::PermissionDenied { .. }
            | S::Unauthenticated { .. }
            | S::NotSupported { .. }
            | S::NotImplemented { .. }
            | S::UnknownConfigurationKey { .. }
            | S::NotFound { .. }
    ) && ![
        "NoSuchBucket",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
    ]
    .iter()
    .any(|code| text.contains(code))
        && !is_refused_request(e)
}

/// Whether the store refused the request itself: an HTTP 4xx answer other than 408 (Request
/// Timeout) and 429 (Too Many Requests), which object_store reports as a generic error (an S3 key
/// over 1024 bytes is a 400 `KeyTooLongError`), or a path object_store will not send. The job's
/// data is at fault (the keys come from its input and output): the same request gets the same
/// answer however long a worker waits, so it is not an infrastructure fault.
///
/// The named refusals (not found, permission, precondition, conflict) keep their own variants
/// and are not counted here.
pub fn is_refused_request(e: &Error) -> bool {
    use object_store::Error as S;
    match e {
        Error::Storage {
            source: S::InvalidPath { .. },
            ..
        } => true,
        Error::Storage {
            source: source @ S::Generic { .. },
            ..
        } => http_status(source)
            .is_some_and(|status| (400..500).contains(&status) && !matches!(status, 408 | 429)),
        _ => false,
    }
}

/// The HTTP status a storage failure carries, read from its message or a source's: object_store
/// keeps the status in a private type and prints it as `status code: 400 Bad Request`.
fn http_status(e: &object_store::Error) -> Option<u16> {
    const MARK: &str = "status code: ";
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if let Some(i) = text.find(MARK) {
            let digits: String = text[i + MARK.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(status) = digits.parse() {
                return Some(status);
            }
        }
        cur = err.source();
    }
    None
}

impl Store {
    /// The object path of `relative` under this store's prefix.
    pub fn child(&self, relative: &str) -> ObjectPath {
        let mut p = self.prefix.clone();
        for part in relative.split('/').filter(|s| !s.is_empty()) {
            p = p.clone().join(part);
        }
        p
    }

    fn storage_err(&self, source: object_store::Error) -> Error {
        Error::Storage {
            url: self.url.clone(),
            source,
        }
    }

    /// Upload local file `src` to `relative` under the prefix. Each object store write is atomic
    /// (no reader sees a partial object). Returns the bytes written.
    ///
    /// # Errors
    /// [`Error::Io`] when `src` cannot be read, [`Error::Storage`] when the upload fails.
    pub async fn put_file(&self, src: &Path, relative: &str) -> Result<u64> {
        let bytes = tokio::fs::read(src).await.map_err(|e| Error::io(src, e))?;
        let n = bytes.len() as u64;
        self.store
            .put(&self.child(relative), PutPayload::from(bytes))
            .await
            .map_err(|e| self.storage_err(e))?;
        Ok(n)
    }

    /// Upload `bytes` to `relative` under the prefix.
    ///
    /// # Errors
    /// [`Error::Storage`] when the upload fails.
    pub async fn put_bytes(&self, relative: &str, bytes: Vec<u8>) -> Result<u64> {
        let n = bytes.len() as u64;
        self.store
            .put(&self.child(relative), PutPayload::from(bytes))
            .await
            .map_err(|e| self.storage_err(e))?;
        Ok(n)
    }

    /// The version of `relative` now, `None` when there is no such object.
    ///
    /// # Errors
    /// [`Error::Storage`] for any failure but a missing object.
    pub async fn version(&self, relative: &str) -> Result<Option<UpdateVersion>> {
        match self.store.head(&self.child(relative)).await {
            Ok(meta) => Ok(Some(UpdateVersion {
                e_tag: meta.e_tag,
                version: meta.version,
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.storage_err(e)),
        }
    }

    /// The version and size of every object under the prefix, by its path relative to the
    /// prefix (one listing).
    ///
    /// # Errors
    /// [`Error::Storage`] when the listing fails.
    pub async fn versions(
        &self,
    ) -> Result<std::collections::HashMap<String, (UpdateVersion, u64)>> {
        let metas: Vec<_> = self
            .store
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .map_err(|e| self.storage_err(e))?;
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let rel = m.location.prefix_match(&self.prefix)?;
                let rel = rel
                    .map(|p| p.as_ref().to_string())
                    .collect::<Vec<_>>()
                    .join("/");
                Some((
                    rel,
                    (
                        UpdateVersion {
                            e_tag: m.e_tag,
                            version: m.version,
                        },
                        m.size,
                    ),
                ))
            })
            .collect())
    }

    /// Write `bytes` to `relative` only if the object is still at `expect` (`None`: only if
    /// there is none), decided by the store: S3 `If-Match` / `If-None-Match`, the in-memory
    /// store's own check. A local filesystem has no such request, so the check and the write
    /// run under an exclusive `flock` of the store's folder, which every Kiln writer takes.
    ///
    /// # Errors
    /// [`Error::Storage`] when the write fails for any other reason.
    pub async fn put_if(
        &self,
        relative: &str,
        bytes: Vec<u8>,
        expect: Option<&UpdateVersion>,
    ) -> Result<Conditional> {
        if let Some(root) = &self.local {
            return self.put_if_locked(root, relative, bytes, expect).await;
        }
        let mode = match expect {
            Some(v) => PutMode::Update(v.clone()),
            None => PutMode::Create,
        };
        let put = self
            .store
            .put_opts(&self.child(relative), PutPayload::from(bytes), mode.into())
            .await;
        match put {
            Ok(r) => Ok(Conditional::Written(r.into())),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => Ok(Conditional::Refused),
            Err(e) => Err(self.storage_err(e)),
        }
    }

    async fn put_if_locked(
        &self,
        root: &Path,
        relative: &str,
        bytes: Vec<u8>,
        expect: Option<&UpdateVersion>,
    ) -> Result<Conditional> {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        let dir = root.to_path_buf();
        // Taken on a blocking thread: another writer in this process may hold it across an
        // await, and must be able to finish.
        let _lock = tokio::task::spawn_blocking(move || {
            let f = std::fs::File::open(&dir)?;
            f.lock()?;
            Ok::<_, std::io::Error>(f)
        })
        .await
        .map_err(|e| Error::io(root, std::io::Error::other(e)))?
        .map_err(|e| Error::io(root, e))?;
        let now = self.version(relative).await?;
        if now.as_ref().map(|v| &v.e_tag) != expect.map(|v| &v.e_tag) {
            return Ok(Conditional::Refused);
        }
        let r = self
            .store
            .put(&self.child(relative), PutPayload::from(bytes))
            .await
            .map_err(|e| self.storage_err(e))?;
        Ok(Conditional::Written(r.into()))
    }

    /// Move `from` to `to` (both relative to the prefix): a rename on local disks, copy + delete on S3.
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.store
            .rename(&self.child(from), &self.child(to))
            .await
            .map_err(|e| self.storage_err(e))
    }

    /// Delete every object under `relative` (best effort listing, then deletes).
    ///
    /// # Errors
    /// [`Error::Storage`].
    pub async fn delete_prefix(&self, relative: &str) -> Result<()> {
        let prefix = self.child(relative);
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| self.storage_err(e))?;
        for m in metas {
            self.store
                .delete(&m.location)
                .await
                .map_err(|e| self.storage_err(e))?;
        }
        if let Some(root) = &self.local {
            let dir = root.join(relative);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(dir, e)),
            }
        }
        Ok(())
    }
}

/// What [`fetch`] copied.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    /// Local path of the fetched object (when the URL named one object) or of the folder holding the
    /// fetched prefix.
    pub local: PathBuf,
    /// Number of objects copied.
    pub objects: usize,
    /// Bytes read from the store.
    pub bytes: u64,
}

/// Copy the object or prefix named by `location` into `dest_dir`.
///
/// When `location` names one object, it lands at `dest_dir/<file name>`; if `with_references` is
/// set, the files a mesh names are fetched beside it, keeping their relative paths, and nothing
/// else in its folder is: a `.gltf`'s `buffers[].uri` and `images[].uri` (relative, not `data:`),
/// an `.obj`'s `mtllib` files and those MTLs' texture maps. Missing textures and MTLs are skipped
/// (the mesh reader lists them in one warning); a missing glTF buffer is an error. When
/// `location` names a prefix, all objects under it are copied keeping their relative paths.
/// Local-filesystem locations are copied too, so a stage never reads a file that may change
/// under it.
///
/// # Errors
/// [`Error::Input`] when nothing exists at `location` (no object, or an empty folder) or a glTF
/// buffer it references is missing; [`Error::Storage`] / [`Error::Io`] on I/O.
pub async fn fetch(location: &str, dest_dir: &Path, with_references: bool) -> Result<Fetched> {
    let store = open(location)?;
    std::fs::create_dir_all(dest_dir).map_err(|e| Error::io(dest_dir, e))?;
    if let Ok(meta) = store.store.head(&store.prefix).await {
        let name = meta.location.filename().unwrap_or("input").to_string();
        let local = dest_dir.join(&name);
        let mut bytes = download(&store, &meta.location, &local).await?;
        let mut objects = 1;
        if with_references {
            let parent = parent_of(&meta.location);
            let mut queue = sidecar_references(&name, &local, "")?;
            let mut seen = std::collections::HashSet::new();
            while let Some(r) = queue.pop() {
                if !seen.insert(r.rel.clone()) {
                    continue;
                }
                let mut from = parent.clone();
                for part in r.rel.split('/').filter(|p| !p.is_empty() && *p != ".") {
                    from = from.join(part);
                }
                let to = dest_dir.join(&r.rel);
                refuse_sidecar_link_out(&store, location, &from, &r)?;
                match download(&store, &from, &to).await {
                    Ok(n) => {
                        bytes += n;
                        objects += 1;
                    }
                    // Textures and material libraries may be missing: the mesh reader lists
                    // them all in one warning and keeps the materials' colours.
                    Err(e) if is_not_found(&e) && !r.required => continue,
                    Err(e) if is_not_found(&e) => {
                        return Err(Error::Input {
                            path: PathBuf::from(location),
                            field: r.field.into(),
                            problem: format!(
                                "the glTF references `{}`, which does not exist beside it; upload it next to the .gltf or use a .glb",
                                r.rel
                            ),
                        });
                    }
                    Err(e) => return Err(e),
                }
                let dir = r.rel.rsplit_once('/').map_or("", |(d, _)| d);
                queue.extend(sidecar_references(&r.rel, &to, dir)?);
            }
        }
        return Ok(Fetched {
            local,
            objects,
            bytes,
        });
    }
    if let Some(folder) = store.local.as_deref().filter(|f| f.is_dir()) {
        refuse_links_out(location, folder)?;
    }
    let list_prefix = store.prefix.clone();
    let metas: Vec<_> = store
        .store
        .list(Some(&list_prefix))
        .try_collect()
        .await
        .map_err(|e| store.storage_err(e))?;
    if metas.is_empty() {
        return Err(Error::Input {
            path: PathBuf::from(location),
            field: "input".into(),
            problem: "nothing found here (no file, or an empty folder); check the URL/path in the job file"
                .into(),
        });
    }
    let mut bytes = 0;
    for meta in &metas {
        let rel: Vec<_> = meta
            .location
            .prefix_match(&list_prefix)
            .map(|p| p.collect())
            .unwrap_or_default();
        let mut local = dest_dir.to_path_buf();
        for part in rel {
            local.push(part.as_ref());
        }
        bytes += download(&store, &meta.location, &local).await?;
    }
    Ok(Fetched {
        local: dest_dir.to_path_buf(),
        objects: metas.len(),
        bytes,
    })
}

/// The names of what `location` holds, without downloading: the file name when it names one
/// object, else every object's path relative to the prefix (`/`-separated). Empty when nothing is
/// there (the fetch then reports it).
///
/// # Errors
/// [`Error::Param`] for an unsupported URL; [`Error::Storage`] when listing fails.
pub async fn list_names(location: &str) -> Result<Vec<String>> {
    let store = open(location)?;
    if let Ok(meta) = store.store.head(&store.prefix).await {
        return Ok(vec![
            meta.location.filename().unwrap_or("input").to_string(),
        ]);
    }
    let metas: Vec<_> = store
        .store
        .list(Some(&store.prefix))
        .try_collect()
        .await
        .map_err(|e| store.storage_err(e))?;
    let mut names: Vec<String> = metas
        .iter()
        .map(|m| {
            m.location
                .prefix_match(&store.prefix)
                .map(|parts| {
                    parts
                        .map(|p| p.as_ref().to_string())
                        .collect::<Vec<_>>()
                        .join("/")
                })
                .unwrap_or_else(|| m.location.to_string())
        })
        .collect();
    names.sort();
    Ok(names)
}

/// A file that a fetched mesh file names, to be fetched from beside it.
struct Reference {
    /// `/`-separated path relative to the input's folder.
    rel: String,
    /// A glTF buffer (the geometry) is required; textures and MTL files are not (see `fetch`).
    required: bool,
    field: &'static str,
}

/// The files that `file` (fetched to `local`, at `dir` relative to the input's folder) names:
/// a `.gltf`'s buffers and images, an `.obj`'s `mtllib` files, an `.mtl`'s texture maps; nothing
/// for other files. Names that are absolute or climb out of the folder are errors for a glTF and
/// skipped for OBJ/MTL (exporters often write absolute texture paths; the reader reports them as
/// missing).
fn sidecar_references(file: &str, local: &Path, dir: &str) -> Result<Vec<Reference>> {
    let lower = file.to_ascii_lowercase();
    let join = |name: &str| {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    };
    if lower.ends_with(".gltf") {
        return Ok(gltf_external_uris(local)?
            .into_iter()
            .map(|(key, uri)| Reference {
                rel: join(&uri),
                required: key == "buffers",
                field: if key == "buffers" {
                    "buffers[].uri"
                } else {
                    "images[].uri"
                },
            })
            .collect());
    }
    let (names, field) = if lower.ends_with(".obj") {
        let text = std::fs::read(local).map_err(|e| Error::io(local, e))?;
        let text = String::from_utf8_lossy(&text);
        (kiln_formats::mesh::obj_material_libraries(&text), "mtllib")
    } else if lower.ends_with(".mtl") {
        let text = std::fs::read(local).map_err(|e| Error::io(local, e))?;
        let text = String::from_utf8_lossy(&text);
        (kiln_formats::mesh::mtl_texture_files(&text), "map_*")
    } else {
        return Ok(Vec::new());
    };
    Ok(names
        .into_iter()
        .filter(|n| !n.starts_with('/') && !n.contains(':') && !n.split('/').any(|p| p == ".."))
        .map(|n| Reference {
            rel: join(&n),
            required: false,
            field,
        })
        .collect())
}

/// Refuse a local input folder that holds a symbolic link leading outside it, at any depth: the
/// store's listing follows links, and staging would copy what they point at (another team's
/// files, anything on the worker) into the job's input (issue 41). Links that stay inside are
/// fine. Object stores have no links.
///
/// # Errors
/// [`Error::Input`] naming the link (relative to the folder), where it leads and the fix;
/// [`Error::Io`] when a folder cannot be listed.
fn refuse_links_out(location: &str, folder: &Path) -> Result<()> {
    let real = std::fs::canonicalize(folder).map_err(|e| Error::io(folder, e))?;
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_symlink() {
                check_link_inside(location, folder, &real, &path, "input")?;
            }
        }
    }
    Ok(())
}

/// A sidecar file of a local mesh input (`mtllib`, `map_*`, glTF `uri`) must not lead, through a
/// symbolic link, outside the mesh's folder (the names themselves are already relative and free
/// of `..`, see [`sidecar_references`]).
fn refuse_sidecar_link_out(
    store: &Store,
    location: &str,
    from: &ObjectPath,
    reference: &Reference,
) -> Result<()> {
    let Some(folder) = store.local.as_deref().and_then(Path::parent) else {
        return Ok(());
    };
    let source = Path::new("/").join(from.as_ref());
    if std::fs::symlink_metadata(&source).is_err() {
        return Ok(()); // missing: `fetch` reports it or skips it
    }
    let real = std::fs::canonicalize(folder).map_err(|e| Error::io(folder, e))?;
    check_link_inside(location, folder, &real, &source, reference.field)
}

/// [`Error::Input`] when `path` (under `folder`, whose real path is `real`) resolves outside it.
fn check_link_inside(
    location: &str,
    folder: &Path,
    real: &Path,
    path: &Path,
    field: &str,
) -> Result<()> {
    let target = std::fs::canonicalize(path).ok();
    if target.as_ref().is_some_and(|t| t.starts_with(real)) {
        return Ok(());
    }
    let shown = target
        .or_else(|| std::fs::read_link(path).ok())
        .unwrap_or_default();
    let rel = path.strip_prefix(folder).unwrap_or(path);
    Err(Error::Input {
        path: PathBuf::from(location),
        field: field.into(),
        problem: format!(
            "`{}` is a symbolic link to {}, outside the input folder; a job may read only files \
             inside its input: put the file itself there instead of a link",
            rel.display(),
            shown.display()
        ),
    })
}

/// Is `e` "no such object/file"?
fn is_not_found(e: &Error) -> bool {
    match e {
        Error::Storage {
            source: object_store::Error::NotFound { .. },
            ..
        } => true,
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// The relative external URIs of a `.gltf` (`buffers[].uri`, `images[].uri`), percent-decoded;
/// `data:` URIs are skipped. URIs that are absolute or climb out of the folder (`..`) are rejected.
fn gltf_external_uris(gltf: &Path) -> Result<Vec<(&'static str, String)>> {
    let bytes = std::fs::read(gltf).map_err(|e| Error::io(gltf, e))?;
    let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| Error::Input {
        path: gltf.to_path_buf(),
        field: "json".into(),
        problem: format!("not valid JSON ({e}); the file is corrupt or not a .gltf"),
    })?;
    let mut out = Vec::new();
    for key in ["buffers", "images"] {
        for item in json
            .get(key)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let Some(uri) = item.get("uri").and_then(|u| u.as_str()) else {
                continue;
            };
            if uri.starts_with("data:") {
                continue;
            }
            let decoded = percent_decode(uri);
            if decoded.starts_with('/')
                || decoded.contains("://")
                || decoded.split('/').any(|p| p == "..")
            {
                return Err(Error::Input {
                    path: gltf.to_path_buf(),
                    field: format!("{key}[].uri"),
                    problem: format!("`{uri}` is not a relative path inside the model's folder"),
                });
            }
            if !out.iter().any(|(_, u)| *u == decoded) {
                out.push((key, decoded));
            }
        }
    }
    Ok(out)
}

/// Decode `%XX` escapes (glTF URIs are RFC 3986 references); invalid escapes are kept as written.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(hi), Some(lo)) = (
                (b[i + 1] as char).to_digit(16),
                (b[i + 2] as char).to_digit(16),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Resolve `.` and `..` components without touching the filesystem.
fn lexical_normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn parent_of(p: &ObjectPath) -> ObjectPath {
    let parts: Vec<_> = p.parts().collect();
    if parts.len() <= 1 {
        ObjectPath::default()
    } else {
        ObjectPath::from_iter(parts[..parts.len() - 1].iter().cloned())
    }
}

async fn download(store: &Store, from: &ObjectPath, to: &Path) -> Result<u64> {
    if store.local.is_some() {
        // A local file is linked, not read into memory and written again (a 250 MB splat PLY
        // took seconds and its size in memory): see `link_or_copy`.
        let source = Path::new("/").join(from.as_ref());
        let target = to.to_path_buf();
        return tokio::task::spawn_blocking(move || link_or_copy(&source, &target))
            .await
            .map_err(|e| Error::io(to, std::io::Error::other(e)))?;
    }
    let data = store
        .store
        .get(from)
        .await
        .map_err(|e| store.storage_err(e))?
        .bytes()
        .await
        .map_err(|e| store.storage_err(e))?;
    let n = data.len() as u64;
    let target = to.to_path_buf();
    tokio::task::spawn_blocking(move || kiln_formats::atomic_write::write_atomic(&target, &data))
        .await
        .map_err(|e| Error::io(to, std::io::Error::other(e)))??;
    Ok(n)
}

/// Put the local file `source` at `target` without copying its bytes when the filesystem allows:
/// a hard link to the file itself (symlinks resolved first, so a relative link cannot dangle),
/// else a streamed copy (another device, or a filesystem without links). Returns the bytes.
///
/// A link shares the file: a tool that rewrites the input *in place* while the job runs would be
/// seen (editors and exporters write a new file and rename it, which a link does not follow).
fn link_or_copy(source: &Path, target: &Path) -> Result<u64> {
    let real = std::fs::canonicalize(source).map_err(|e| Error::io(source, e))?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    if target.exists() {
        std::fs::remove_file(target).map_err(|e| Error::io(target, e))?;
    }
    if std::fs::hard_link(&real, target).is_err() {
        std::fs::copy(&real, target).map_err(|e| Error::io(&real, e))?;
    }
    let len = std::fs::metadata(target)
        .map_err(|e| Error::io(target, e))?
        .len();
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local input is linked (same inode, no second copy of its bytes), through a symlink too.
    #[tokio::test]
    async fn fetch_links_local_files_instead_of_copying_them() {
        use std::os::unix::fs::MetadataExt;
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("scene.ply"), b"ply bytes").unwrap();
        std::os::unix::fs::symlink("scene.ply", src.path().join("alias.ply")).unwrap();
        let dst = tempfile::tempdir().unwrap();
        for name in ["scene.ply", "alias.ply"] {
            let input = src.path().join(name);
            let f = fetch(input.to_str().unwrap(), dst.path(), false)
                .await
                .unwrap();
            assert_eq!(f.bytes, 9);
            let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
            assert_eq!(ino(&f.local), ino(&src.path().join("scene.ply")), "{name}");
            assert_eq!(std::fs::read(&f.local).unwrap(), b"ply bytes");
        }
    }

    #[tokio::test]
    async fn fetch_copies_a_local_folder_keeping_relative_paths() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("images")).unwrap();
        std::fs::write(src.path().join("a.json"), b"{}").unwrap();
        std::fs::write(src.path().join("images/b.png"), b"12345").unwrap();
        let dst = tempfile::tempdir().unwrap();
        let f = fetch(src.path().to_str().unwrap(), dst.path(), false)
            .await
            .unwrap();
        assert_eq!(f.objects, 2);
        assert_eq!(f.bytes, 7);
        assert_eq!(
            std::fs::read(dst.path().join("images/b.png")).unwrap(),
            b"12345"
        );
    }

    /// Issue 41: a folder input's symbolic links are checked at every depth; one leading out of
    /// the folder refuses the fetch naming it, one staying inside is staged as its file.
    #[tokio::test]
    async fn fetch_of_a_folder_refuses_links_that_lead_out_at_any_depth() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.png"), b"other team").unwrap();
        let mut seed = 41u64;
        for depth in 0..4 {
            for to_folder in [false, true] {
                let src = tempfile::tempdir().unwrap();
                let mut dir = src.path().to_path_buf();
                for d in 0..depth {
                    dir = dir.join(format!("d{d}"));
                }
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(src.path().join("a.json"), b"{}").unwrap();
                std::os::unix::fs::symlink(src.path().join("a.json"), dir.join("in.json")).unwrap();
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                let name = format!("l{}", seed % 1000);
                let target = match to_folder {
                    true => outside.path().to_path_buf(),
                    false => outside.path().join("secret.png"),
                };
                std::os::unix::fs::symlink(&target, dir.join(&name)).unwrap();
                let dst = tempfile::tempdir().unwrap();
                let e = fetch(src.path().to_str().unwrap(), dst.path(), false)
                    .await
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.contains(&name) && e.contains("outside the input folder"),
                    "{e}"
                );
                assert!(!dst.path().join("secret.png").exists());
                // Without the link out, the link inside is staged as the file it names.
                std::fs::remove_file(dir.join(&name)).unwrap();
                fetch(src.path().to_str().unwrap(), dst.path(), false)
                    .await
                    .unwrap();
            }
        }
    }

    /// Issue 41: an MTL texture that is a link out of the OBJ's folder is refused while staging.
    #[tokio::test]
    async fn fetch_of_an_obj_refuses_a_texture_linked_from_outside() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.png"), b"png").unwrap();
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("m.obj"), "mtllib m.mtl\nv 0 0 0\n").unwrap();
        std::fs::write(src.path().join("m.mtl"), "newmtl a\nmap_Kd t.png\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.png"), src.path().join("t.png"))
            .unwrap();
        let dst = tempfile::tempdir().unwrap();
        let url = src.path().join("m.obj").display().to_string();
        let e = fetch(&url, dst.path(), true).await.unwrap_err().to_string();
        assert!(e.contains("map_*") && e.contains("t.png"), "{e}");
    }

    #[tokio::test]
    async fn fetch_of_a_gltf_brings_only_the_files_it_references() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("tex")).unwrap();
        let gltf =
            br#"{"buffers":[{"uri":"m.bin"},{"uri":"data:application/octet-stream;base64,AA=="}],
                        "images":[{"uri":"tex/a%20b.png"}]}"#;
        std::fs::write(src.path().join("m.gltf"), gltf).unwrap();
        std::fs::write(src.path().join("m.bin"), b"xx").unwrap();
        std::fs::write(src.path().join("tex/a b.png"), b"png").unwrap();
        std::fs::write(src.path().join("unrelated.bin"), b"big").unwrap();
        let dst = tempfile::tempdir().unwrap();
        let url = format!("file://{}", src.path().join("m.gltf").display());
        let f = fetch(&url, dst.path(), true).await.unwrap();
        assert_eq!(f.local, dst.path().join("m.gltf"));
        assert_eq!(f.objects, 3);
        assert!(dst.path().join("m.bin").exists());
        assert!(dst.path().join("tex/a b.png").exists());
        assert!(!dst.path().join("unrelated.bin").exists());
    }

    #[tokio::test]
    async fn fetch_of_a_glb_brings_nothing_else() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("m.glb"), b"glTF").unwrap();
        std::fs::write(src.path().join("other.bin"), b"xx").unwrap();
        let dst = tempfile::tempdir().unwrap();
        let f = fetch(src.path().join("m.glb").to_str().unwrap(), dst.path(), true)
            .await
            .unwrap();
        assert_eq!(f.objects, 1);
        assert!(!dst.path().join("other.bin").exists());
    }

    #[tokio::test]
    async fn gltf_referencing_a_missing_file_names_it() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(
            src.path().join("m.gltf"),
            br#"{"buffers":[{"uri":"gone.bin"}]}"#,
        )
        .unwrap();
        let dst = tempfile::tempdir().unwrap();
        let err = fetch(
            src.path().join("m.gltf").to_str().unwrap(),
            dst.path(),
            true,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("gone.bin"), "{err}");
    }

    /// An `.obj` brings its MTL (in a subfolder) and the textures that MTL names, relative to
    /// the MTL; missing textures are skipped, unrelated files stay behind.
    #[tokio::test]
    async fn fetch_of_an_obj_brings_its_mtl_and_the_textures_the_mtl_names() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("mat/tex")).unwrap();
        std::fs::write(
            src.path().join("m.obj"),
            "mtllib mat/m.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
        )
        .unwrap();
        std::fs::write(
            src.path().join("mat/m.mtl"),
            "newmtl a\nmap_Kd -s 1 1 1 tex\\a.png\nmap_Bump gone.png\n",
        )
        .unwrap();
        std::fs::write(src.path().join("mat/tex/a.png"), b"png").unwrap();
        std::fs::write(src.path().join("unrelated.bin"), b"big").unwrap();
        let dst = tempfile::tempdir().unwrap();
        let f = fetch(src.path().join("m.obj").to_str().unwrap(), dst.path(), true)
            .await
            .unwrap();
        assert_eq!(f.objects, 3);
        assert!(dst.path().join("mat/m.mtl").exists());
        assert!(dst.path().join("mat/tex/a.png").exists());
        assert!(!dst.path().join("unrelated.bin").exists());
    }

    /// Missing glTF images do not stop the fetch (the reader warns once for all of them).
    #[tokio::test]
    async fn fetch_of_a_gltf_skips_missing_images() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(
            src.path().join("m.gltf"),
            br#"{"buffers":[{"uri":"m.bin"}],"images":[{"uri":"a.png"},{"uri":"b.png"}]}"#,
        )
        .unwrap();
        std::fs::write(src.path().join("m.bin"), b"xx").unwrap();
        let dst = tempfile::tempdir().unwrap();
        let f = fetch(
            src.path().join("m.gltf").to_str().unwrap(),
            dst.path(),
            true,
        )
        .await
        .unwrap();
        assert_eq!(f.objects, 2);
    }

    #[tokio::test]
    async fn fetch_of_nothing_is_a_clear_error() {
        let dst = tempfile::tempdir().unwrap();
        let err = fetch("/definitely/not/here/kiln", dst.path(), false)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("nothing found here"), "{err}");
    }

    #[test]
    fn unknown_scheme_is_rejected_with_the_supported_list() {
        let err = open("ftp://x/y").unwrap_err();
        assert!(err.to_string().contains("s3://BUCKET/PREFIX"), "{err}");
    }
}
