//! The one database behind the ledger and the job queue: an SQLite file (the default, for one
//! machine) or PostgreSQL (a `postgres://` URL, for workers on many machines), through sqlx's
//! `Any` driver with runtime-checked queries, so no database is needed to build.
//!
//! Both backends get the same tables from the versioned migrations under `jobs/migrations/`
//! (one folder per backend, same version numbers; applied on open by sqlx's migrator, which takes
//! an advisory lock on PostgreSQL so workers starting together migrate once). Queries are written
//! once, with `$1` placeholders, which both backends accept.

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::SqlSafeStr;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::{Migration, MigrationType, Migrator};

use crate::{Error, Result};

/// Which database a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// An open, migrated database.
#[derive(Debug, Clone)]
pub struct Db {
    pub(crate) pool: AnyPool,
    backend: Backend,
    /// Where it is, for messages (a path, or the URL without its password).
    shown: String,
}

const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "ledger",
        include_str!("../migrations/sqlite/0001_ledger.sql"),
    ),
    (
        2,
        "queue",
        include_str!("../migrations/sqlite/0002_queue.sql"),
    ),
    (
        3,
        "api_tokens",
        include_str!("../migrations/sqlite/0003_api_tokens.sql"),
    ),
    (
        4,
        "key_recipe",
        include_str!("../migrations/sqlite/0004_key_recipe.sql"),
    ),
    (
        5,
        "attempt_fault",
        include_str!("../migrations/sqlite/0005_attempt_fault.sql"),
    ),
    (
        6,
        "idempotency_key",
        include_str!("../migrations/sqlite/0006_idempotency_key.sql"),
    ),
    (
        7,
        "gpu_slot_and_estimate",
        include_str!("../migrations/sqlite/0007_gpu_slot_and_estimate.sql"),
    ),
    (
        8,
        "cache_attestations",
        include_str!("../migrations/sqlite/0008_cache_attestations.sql"),
    ),
];
const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "ledger",
        include_str!("../migrations/postgres/0001_ledger.sql"),
    ),
    (
        2,
        "queue",
        include_str!("../migrations/postgres/0002_queue.sql"),
    ),
    (
        3,
        "api_tokens",
        include_str!("../migrations/postgres/0003_api_tokens.sql"),
    ),
    (
        4,
        "key_recipe",
        include_str!("../migrations/postgres/0004_key_recipe.sql"),
    ),
    (
        5,
        "attempt_fault",
        include_str!("../migrations/postgres/0005_attempt_fault.sql"),
    ),
    (
        6,
        "idempotency_key",
        include_str!("../migrations/postgres/0006_idempotency_key.sql"),
    ),
    (
        7,
        "gpu_slot_and_estimate",
        include_str!("../migrations/postgres/0007_gpu_slot_and_estimate.sql"),
    ),
    (
        8,
        "cache_attestations",
        include_str!("../migrations/postgres/0008_cache_attestations.sql"),
    ),
];

/// Columns added to SQLite ledgers after their first schema, before migrations existed:
/// `(name, ALTER statement)`, added on open when missing (SQLite has no `ADD COLUMN IF NOT EXISTS`).
const ADDED_STAGE_COLUMNS: &[(&str, &str)] = &[
    // Busy GPU-seconds from NVML sampling; NULL when not measured.
    (
        "gpu_busy_s",
        "ALTER TABLE stage_attempts ADD COLUMN gpu_busy_s REAL",
    ),
    // GPU name and total memory in bytes; NULL on the CPU.
    (
        "device_name",
        "ALTER TABLE stage_attempts ADD COLUMN device_name TEXT",
    ),
    (
        "device_memory_bytes",
        "ALTER TABLE stage_attempts ADD COLUMN device_memory_bytes INTEGER",
    ),
];

/// `url` with any password replaced by `***`, for messages and logs: the userinfo's
/// (`postgres://user:PASSWORD@host`, whatever the password holds, `/`, `?` and `@` included), a
/// `password=` / `sslpassword=` parameter's (URL query or libpq `key=value` form), and in
/// malformed URLs (`postgres//u:PW@h`) whatever sits between the last `:` and `@`.
pub fn redact(url: &str) -> String {
    let masked = mask_userinfo(url);
    mask_password_params(&masked)
}

/// `scheme://user:PASSWORD@host…` (or a typo of it) with the password masked: everything
/// between the first `:` after the user name and the last `@` before the host.
fn mask_userinfo(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    // The host follows the last `@`: a password may hold `/`, `?` and `@`.
    let Some(at) = rest.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    // The password follows the first `:` (in a typo like `postgres:/u:PW@` that hides the user
    // too, which is the safe side).
    let Some(colon) = userinfo.find(':') else {
        return url.to_string();
    };
    format!("{}{}:***{}", &url[..start], &userinfo[..colon], &rest[at..])
}

/// `password=…` / `sslpassword=…` (any case) in a URL query or a libpq `key=value` string masked.
fn mask_password_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = find_password_key(rest) {
        let (before, from_key) = rest.split_at(i);
        let eq = from_key.find('=').expect("the key ends with =") + 1;
        out.push_str(before);
        out.push_str(&from_key[..eq]);
        out.push_str("***");
        let value_end = from_key[eq..]
            .find(['&', ' ', '\t'])
            .map_or(from_key.len(), |j| eq + j);
        rest = &from_key[value_end..];
    }
    out.push_str(rest);
    out
}

/// Where the next `password=` or `sslpassword=` parameter starts (at a parameter boundary).
fn find_password_key(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    ["sslpassword=", "password="]
        .iter()
        .filter_map(|key| {
            lower
                .match_indices(key)
                .map(|(i, _)| i)
                .find(|&i| i == 0 || matches!(text.as_bytes()[i - 1], b'?' | b'&' | b' ' | b'\t'))
        })
        .min()
}

impl Db {
    /// Open `target`: a `postgres://` / `postgresql://` URL, an `sqlite://PATH` URL, or a plain file
    /// path (an SQLite file, created with its folder when missing). Applies pending migrations.
    ///
    /// # Errors
    /// [`Error::Ledger`] naming the database (password redacted) when it cannot be reached or
    /// created, or is not a Kiln database (a migration fails or was changed).
    pub async fn open(target: &str) -> Result<Db> {
        let bad = |problem: &str| {
            Err(Error::Database {
                target: redact(target),
                problem: problem.into(),
            })
        };
        if target.trim().is_empty() {
            return bad(
                "empty; give an SQLite file path or a postgres:// URL (or unset KILN_DB for the default)",
            );
        }
        if let Some((scheme, _)) = target.split_once("://")
            && !matches!(scheme, "postgres" | "postgresql" | "sqlite")
        {
            return bad(&format!(
                "`{scheme}://` is not supported; use an SQLite file path, sqlite://PATH or postgres://USER@HOST/DB"
            ));
        }
        if target.starts_with("postgres://") || target.starts_with("postgresql://") {
            Self::connect(target, Backend::Postgres, redact(target)).await
        } else {
            let path = target.strip_prefix("sqlite://").unwrap_or(target);
            Self::open_sqlite(Path::new(path)).await
        }
    }

    /// Open `target` like [`Db::open`], but never create an SQLite file: for commands that only
    /// read or change what is already there (`kiln jobs`, `cancel`, `report`, `why`).
    ///
    /// # Errors
    /// [`Error::Database`] when the SQLite file does not exist; otherwise as [`Db::open`].
    pub async fn open_existing(target: &str) -> Result<Db> {
        let is_url = target.contains("://") && !target.starts_with("sqlite://");
        let path = target.strip_prefix("sqlite://").unwrap_or(target);
        if !is_url && !target.trim().is_empty() && !Path::new(path).is_file() {
            return Err(Error::Database {
                target: redact(target),
                problem: "no such database file: nothing has been queued or run with this --db / KILN_DB yet".into(),
            });
        }
        Self::open(target).await
    }

    /// Open (creating if missing) the SQLite file at `path`.
    ///
    /// # Errors
    /// As [`Db::open`]; [`Error::Io`] when its folder cannot be created.
    pub async fn open_sqlite(path: &Path) -> Result<Db> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                path: dir.into(),
                source,
            })?;
        }
        let url = format!("sqlite://{}?mode=rwc", path.display());
        Self::connect(&url, Backend::Sqlite, path.display().to_string()).await
    }

    async fn connect(url: &str, backend: Backend, shown: String) -> Result<Db> {
        sqlx::any::install_default_drivers();
        let err = |source| Error::Ledger {
            path: shown.clone(),
            source,
        };
        let opts = AnyConnectOptions::from_str(url).map_err(err)?;
        let pool = match backend {
            // One writer at a time in a file: WAL lets readers in other processes (`kiln jobs`,
            // `kiln serve`) read while a worker writes, and the busy timeout makes writers from
            // other processes wait for the lock instead of failing.
            Backend::Sqlite => AnyPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(10))
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        use sqlx::Executor;
                        conn.execute("PRAGMA busy_timeout = 30000").await?;
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        Ok(())
                    })
                })
                .connect_with(opts)
                .await
                .map_err(err)?,
            Backend::Postgres => AnyPoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(opts)
                .await
                .map_err(err)?,
        };
        let db = Db {
            pool,
            backend,
            shown,
        };
        db.migrate().await?;
        Ok(db)
    }

    async fn migrate(&self) -> Result<()> {
        let list = match self.backend {
            Backend::Sqlite => SQLITE_MIGRATIONS,
            Backend::Postgres => POSTGRES_MIGRATIONS,
        };
        let migrations = list
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect();
        Migrator::with_migrations(migrations)
            .run(&self.pool)
            .await
            .map_err(|e| self.err()(sqlx::Error::Migrate(Box::new(e))))?;
        if self.backend == Backend::Sqlite {
            let existing: Vec<String> =
                sqlx::query_scalar("SELECT name FROM pragma_table_info('stage_attempts')")
                    .fetch_all(&self.pool)
                    .await
                    .map_err(self.err())?;
            for (name, alter) in ADDED_STAGE_COLUMNS {
                if !existing.iter().any(|c| c == name) {
                    sqlx::query(*alter)
                        .execute(&self.pool)
                        .await
                        .map_err(self.err())?;
                }
            }
        }
        Ok(())
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The database's path or URL (password redacted), for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Map a sqlx error to [`Error::Ledger`] naming this database.
    pub(crate) fn err(&self) -> impl Fn(sqlx::Error) -> Error + '_ {
        |source| Error::Ledger {
            path: self.shown.clone(),
            source,
        }
    }

    /// Close the pool (waits for connections to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact("postgres://kiln:s3cret@db.internal:5432/kiln"),
            "postgres://kiln:***@db.internal:5432/kiln"
        );
        assert_eq!(redact("postgres://kiln@db/kiln"), "postgres://kiln@db/kiln");
        assert_eq!(
            redact("postgres://db:5432/kiln?user=k&password=s3cret&sslmode=require"),
            "postgres://db:5432/kiln?user=k&password=***&sslmode=require"
        );
        assert_eq!(
            redact("postgres://u:p@db?sslpassword=x"),
            "postgres://u:***@db?sslpassword=***"
        );
        for (url, shown) in [
            (
                "postgres://u:SEC/RETPW@127.0.0.1:1/x",
                "postgres://u:***@127.0.0.1:1/x",
            ),
            ("postgres://u:SEC?RET@h/x", "postgres://u:***@h/x"),
            ("postgres://u:S@CRET@h/x", "postgres://u:***@h/x"),
            ("postgres//u:SECRETPW@h:1/x", "postgres//u:***@h:1/x"),
            ("postgres:/u:SECRETPW@h:1/x", "postgres:***@h:1/x"),
            (
                "host=h port=1 user=u password=SECRETPW dbname=x",
                "host=h port=1 user=u password=*** dbname=x",
            ),
            (
                "postgres://u@h/x?PASSWORD=SECRETPW",
                "postgres://u@h/x?PASSWORD=***",
            ),
            ("/var/lib/kiln.sqlite", "/var/lib/kiln.sqlite"),
            ("/data/my:file@2.sqlite", "/data/my:***@2.sqlite"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        assert_eq!(redact("/var/lib/kiln.sqlite"), "/var/lib/kiln.sqlite");
    }
}
