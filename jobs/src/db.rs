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

/// `target` with every password in it replaced by `***`, for messages and logs, in each spelling
/// sqlx and libpq accept (and the typos of them that [`Db::open`] refuses):
/// - URL userinfo, `postgres://user:PASSWORD@host` (whatever the password holds, `/`, `?` and `@`
///   included), and typos such as `postgres//u:PW@h` or `postgres:u:PW@h` (everything between the
///   first `:` of the userinfo and the last `@` before the host, which may hide the user too: the
///   safe side);
/// - a URL query's `password=` / `sslpassword=` (any case), up to the next `&` or `#`;
/// - libpq keyword/value strings, `host=h password=PW` or `password = 'P W\'s'`: the value up to
///   the next unquoted blank, or the whole single-quoted value with its `\'` and `\\` escapes.
pub fn redact(target: &str) -> String {
    let form = if is_keyword_value(target) {
        ParamForm::KeywordValue
    } else {
        ParamForm::UrlQuery
    };
    // Parameters first: a quoted keyword/value password may hold the `:` and `@` that the
    // userinfo rule looks for.
    mask_userinfo(&mask_password_params(target, form))
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

/// How parameters are written: where a password value ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamForm {
    /// `?a=1&password=PW#frag`: a value ends at `&` or `#` (a blank may be part of it: the URL
    /// parser is lenient and would send it).
    UrlQuery,
    /// `a=1 password='P W'`: a value ends at an unquoted blank; single quotes with `\` escapes.
    KeywordValue,
}

/// Keys whose values are secrets.
const PASSWORD_KEYS: [&str; 2] = ["sslpassword", "password"];

/// `password=…` / `sslpassword=…` (any case, blanks allowed around `=`) masked.
fn mask_password_params(text: &str, form: ParamForm) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((key_start, value_start)) = find_password_key(rest) {
        out.push_str(&rest[..key_start]);
        out.push_str(rest[key_start..value_start].trim_end());
        out.push_str("***");
        rest = &rest[value_start + value_len(&rest[value_start..], form)..];
    }
    out.push_str(rest);
    out
}

/// Where the next password parameter starts (at a parameter boundary) and where its value starts
/// (after `=` and any blanks).
fn find_password_key(text: &str) -> Option<(usize, usize)> {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    PASSWORD_KEYS
        .iter()
        .flat_map(|key| {
            lower.match_indices(key).filter_map(move |(i, _)| {
                let at_boundary = i == 0
                    || matches!(bytes[i - 1], b'?' | b'&' | b';')
                    || bytes[i - 1].is_ascii_whitespace();
                let after_key = &text[i + key.len()..];
                let eq = after_key.trim_start();
                let value = eq.strip_prefix('=')?.trim_start();
                at_boundary.then_some((i, text.len() - value.len()))
            })
        })
        .min()
}

/// Bytes of the value at the start of `text`.
fn value_len(text: &str, form: ParamForm) -> usize {
    match form {
        ParamForm::UrlQuery => text.find(['&', '#']).unwrap_or(text.len()),
        ParamForm::KeywordValue if text.starts_with('\'') => quoted_len(text),
        ParamForm::KeywordValue => text.find(|c: char| c.is_whitespace()).unwrap_or(text.len()),
    }
}

/// Bytes of the single-quoted libpq value at the start of `text`, quotes included (`\x` is `x`);
/// an unclosed quote runs to the end.
fn quoted_len(text: &str) -> usize {
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' => return i + 1,
            _ => {}
        }
    }
    text.len()
}

/// Whether `target` reads as a libpq keyword/value string (`host=h dbname=x …`): it starts with
/// a keyword and `=`.
fn is_keyword_value(target: &str) -> bool {
    let t = target.trim_start();
    let key_len = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(t.len());
    key_len > 0
        && t.as_bytes()[0].is_ascii_alphabetic()
        && t[key_len..].trim_start().starts_with('=')
}

/// What a `--db` / `KILN_DB` string names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target<'a> {
    /// A `postgres://` or `postgresql://` URL, as given.
    Postgres,
    /// An SQLite file: a plain path, or the path of an `sqlite://PATH` / `sqlite:PATH` URL.
    Sqlite(&'a str),
}

/// Sort `target` into a [`Target`], or say why it is neither a URL Kiln takes nor a plain path.
/// Refused strings are the ones that used to be taken for SQLite paths and created folders named
/// after them: libpq keyword/value strings, `postgres:` without `//`, other schemes.
fn classify(target: &str) -> std::result::Result<Target<'_>, String> {
    const FORMS: &str =
        "give an SQLite file path, sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB";
    if target.trim().is_empty() {
        return Err(format!("empty; {FORMS} (or unset KILN_DB for the default)"));
    }
    if target.starts_with("postgres://") || target.starts_with("postgresql://") {
        return Ok(Target::Postgres);
    }
    if let Some(path) = target
        .strip_prefix("sqlite://")
        .or_else(|| target.strip_prefix("sqlite:"))
    {
        return Ok(Target::Sqlite(path));
    }
    // `postgres//u:PW@h`: a URL missing its `:`, which as a path would make folders `postgres/u:PW@h/`.
    if ["postgres/", "postgresql/"]
        .iter()
        .any(|typo| target.to_ascii_lowercase().starts_with(typo))
    {
        return Err(format!(
            "looks like a postgres:// URL without its `:`; {FORMS} (a relative path: write ./{}…)",
            redact(target.split('/').next().unwrap_or_default())
        ));
    }
    if is_keyword_value(target) {
        return Err(format!(
            "a libpq keyword/value string is not supported; write it as a URL: {FORMS}"
        ));
    }
    let scheme_len = target
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .unwrap_or(0);
    let scheme = &target[..scheme_len];
    if scheme_len > 0
        && target.as_bytes()[0].is_ascii_alphabetic()
        && target[scheme_len..].starts_with(':')
    {
        let lower = scheme.to_ascii_lowercase();
        return Err(
            if matches!(lower.as_str(), "postgres" | "postgresql" | "sqlite") {
                format!(
                    "`{scheme}:` must be followed by `//` (a URL) or be written as a path; {FORMS}"
                )
            } else {
                format!(
                    "`{scheme}:` is not supported; {FORMS} (a relative path with `:` in its first \
                 folder name: write ./{scheme}:…)"
                )
            },
        );
    }
    if let Some((scheme, _)) = target.split_once("://") {
        return Err(format!("`{}://` is not supported; {FORMS}", redact(scheme)));
    }
    Ok(Target::Sqlite(target))
}

/// An optional `f64` as a statement parameter written `CAST($n AS DOUBLE PRECISION)`: the value
/// as text (Rust prints the shortest text that reads back as the same `f64`), `None` as NULL.
///
/// Why not bind the `Option<f64>`: sqlx's `Any` driver sends a NULL `f64` to PostgreSQL as a
/// `float4` parameter, and PostgreSQL keeps that type in the connection's prepared statement, so
/// the next execution with a number (8 bytes) fails ("incorrect binary data format in bind
/// parameter"). Text is text both ways, and the cast types the parameter on both backends.
pub(crate) fn nullable_f64(value: Option<f64>) -> Option<String> {
    value.map(|v| v.to_string())
}

impl Db {
    /// Open `target`: a `postgres://` / `postgresql://` URL, an `sqlite://PATH` URL, or a plain file
    /// path (an SQLite file, created with its folder when missing). Applies pending migrations.
    ///
    /// Anything else is refused before it is used, rather than taken for an SQLite path (which
    /// created folders named after it, password included): libpq keyword/value strings
    /// (`host=… password=…`), `postgres:` without `//`, other schemes.
    ///
    /// # Errors
    /// [`Error::Database`] (password redacted) for a string that is neither a URL Kiln takes nor
    /// a plain path, saying which forms to use; [`Error::Ledger`] naming the database (password
    /// redacted) when it cannot be reached or created, or is not a Kiln database (a migration
    /// fails or was changed).
    pub async fn open(target: &str) -> Result<Db> {
        match classify(target) {
            Ok(Target::Postgres) => Self::connect(target, Backend::Postgres, redact(target)).await,
            Ok(Target::Sqlite(path)) => Self::open_sqlite(Path::new(path)).await,
            Err(problem) => Err(Error::Database {
                target: redact(target),
                problem,
            }),
        }
    }

    /// Open `target` like [`Db::open`], but never create an SQLite file: for commands that only
    /// read or change what is already there (`kiln jobs`, `cancel`, `report`, `why`).
    ///
    /// # Errors
    /// [`Error::Database`] when the SQLite file does not exist; otherwise as [`Db::open`].
    pub async fn open_existing(target: &str) -> Result<Db> {
        if let Ok(Target::Sqlite(path)) = classify(target)
            && !Path::new(path).is_file()
        {
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
        Self::connect(&url, Backend::Sqlite, redact(&path.display().to_string())).await
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

    /// A password no message has any other reason to hold (14 characters).
    const SECRET: &str = "Zq7Xw9Kp2Vm4Jd";

    /// Every 4-character piece of `secret` that `text` holds.
    fn leaks(text: &str, secret: &str) -> Vec<String> {
        let chars: Vec<char> = secret.chars().collect();
        chars
            .windows(4)
            .map(|w| w.iter().collect::<String>())
            .filter(|piece| text.contains(piece.as_str()))
            .collect()
    }

    /// `(database string, the password it holds)` in every spelling sqlx and libpq take, and the
    /// typos of them: issue 41.
    fn spellings() -> Vec<(String, String)> {
        let s = SECRET;
        let spaced = "Zq7 Xw9'Kp2 Vm4\\Jd";
        let quoted = "Zq7 Xw9\\'Kp2 Vm4\\\\Jd";
        vec![
            (
                format!("postgres://kiln:{s}@db.internal:5432/kiln"),
                s.into(),
            ),
            (
                format!("postgresql://kiln:{s}@db/kiln?sslmode=require"),
                s.into(),
            ),
            (format!("postgres://db/kiln?password={s}"), s.into()),
            (
                format!("postgres://db/kiln?user=k&password={s}&sslmode=disable"),
                s.into(),
            ),
            (
                format!("postgres://db/kiln?sslmode=disable&PassWord={s}#x"),
                s.into(),
            ),
            (format!("postgres://db/kiln?password=ab@{s}:cd"), s.into()),
            (
                format!("postgres://db/kiln?password={s} with blanks&x=1"),
                s.into(),
            ),
            (format!("postgres:kiln:{s}@db/kiln"), s.into()),
            (format!("postgres:/kiln:{s}@db/kiln"), s.into()),
            (format!("postgres//kiln:{s}@db/kiln"), s.into()),
            (
                format!("host=db port=5432 user=kiln password={s} dbname=kiln"),
                s.into(),
            ),
            (format!("host=db password = {s} dbname=kiln"), s.into()),
            (format!("password={s}"), s.into()),
            (format!("host=db sslpassword={s}"), s.into()),
            (format!("host=db password='{s}' dbname=kiln"), s.into()),
            (
                format!("host=db password='{quoted}' dbname=kiln"),
                spaced.into(),
            ),
            (
                format!("host=db user=me@corp password='{quoted}'"),
                spaced.into(),
            ),
        ]
    }

    #[test]
    fn redaction_masks_the_password_in_every_spelling() {
        for (target, secret) in spellings() {
            let shown = redact(&target);
            assert_eq!(
                leaks(&shown, &secret),
                Vec::<String>::new(),
                "{target} → {shown}"
            );
        }
        // What is not a secret stays readable.
        assert_eq!(
            redact("host=db password='a b' dbname=kiln"),
            "host=db password=*** dbname=kiln"
        );
        assert_eq!(
            redact("postgres://db/k?password=x&sslmode=require"),
            "postgres://db/k?password=***&sslmode=require"
        );
    }

    #[test]
    fn strings_that_are_neither_urls_nor_paths_are_refused() {
        for target in [
            format!("host=db user=kiln password={SECRET} dbname=kiln"),
            format!("  dbname = kiln password='{SECRET}'"),
            format!("postgres:kiln:{SECRET}@db/kiln"),
            format!("postgres:/kiln:{SECRET}@db/kiln"),
            format!("postgresql:kiln:{SECRET}@db"),
            format!("postgres//kiln:{SECRET}@db/kiln"),
            format!("mysql://kiln:{SECRET}@db/kiln"),
            format!("redis:kiln:{SECRET}@db"),
        ] {
            let problem = classify(&target).unwrap_err();
            assert!(problem.contains("postgres://"), "{target}: {problem}");
            assert_eq!(leaks(&problem, SECRET), Vec::<String>::new(), "{problem}");
        }
        for (target, path) in [
            ("/var/lib/kiln.sqlite", "/var/lib/kiln.sqlite"),
            ("ledger.sqlite", "ledger.sqlite"),
            ("./a:b/ledger.sqlite", "./a:b/ledger.sqlite"),
            ("sqlite:///tmp/q.sqlite", "/tmp/q.sqlite"),
            ("sqlite:q.sqlite", "q.sqlite"),
        ] {
            assert_eq!(classify(target), Ok(Target::Sqlite(path)), "{target}");
        }
        assert_eq!(classify("postgres://u@h/d"), Ok(Target::Postgres));
    }

    #[tokio::test]
    async fn a_refused_database_string_creates_no_folder_and_hides_the_password() {
        let cwd = std::env::current_dir().unwrap();
        for (target, secret) in spellings()
            .into_iter()
            .filter(|(t, _)| !t.starts_with("postgres://") && !t.starts_with("postgresql://"))
        {
            let e = Db::open(&target).await.unwrap_err();
            let text = e.to_string();
            assert!(matches!(e, Error::Database { .. }), "{target}: {text}");
            assert_eq!(leaks(&text, &secret), Vec::<String>::new(), "{text}");
        }
        // Nothing named after them appeared where relative SQLite paths would go.
        let made: Vec<_> = std::fs::read_dir(&cwd)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("postgres") || n.starts_with("host=") || n.contains(SECRET))
            .collect();
        assert_eq!(made, Vec::<String>::new());
    }
}
