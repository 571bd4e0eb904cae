//! The cache ledger over the queue database: the [`CacheLedger`] that vouches for the shared
//! stage cache's entries and travelling checkpoints (`kiln_pipeline::stage_cache`).
//!
//! Why the database: every worker already shares it, teams cannot write it (they reach the queue
//! only through `kiln serve`, which never writes this table), and it needs no new secret to hand
//! out to workers, as an HMAC key would. A stage's process (`kiln stage-exec`) records an entry
//! right after uploading it, from the bytes it hashed locally, before the worker commits the
//! stage: the record cannot be in the commit's transaction, since the process that uploads is
//! not the one that commits, but a record whose stage never commits only vouches for bytes a
//! worker really produced under that key. Checkpoints are recorded just before each upload, while
//! the stage still runs, so the next worker finds the record after a `kill -9`.
//!
//! The table is `cache_attestations` (`jobs/migrations/*/0008_cache_attestations.sql`).

use futures::future::BoxFuture;
use kiln_pipeline::cache_ledger::{AttestedFile, CacheLedger, LedgerError};
use sqlx::Row;

use crate::db::Db;

/// [`CacheLedger`] over the queue database (SQLite or PostgreSQL).
#[derive(Debug, Clone)]
pub struct DbCacheLedger {
    db: Db,
}

impl DbCacheLedger {
    /// The ledger in `db` (opened, so migrated).
    #[must_use]
    pub fn new(db: Db) -> DbCacheLedger {
        DbCacheLedger { db }
    }

    async fn upsert(&self, entry: &str, files: &[AttestedFile]) -> crate::Result<()> {
        let json = serde_json::to_string(files).expect("file records serialise");
        sqlx::query(
            "INSERT INTO cache_attestations (entry, files, recorded_at) VALUES ($1, $2, $3) \
             ON CONFLICT (entry) DO UPDATE SET files = excluded.files, recorded_at = excluded.recorded_at",
        )
        .bind(entry)
        .bind(json)
        .bind(crate::queue::now_ms())
        .execute(&self.db.pool)
        .await
        .map_err(self.db.err())?;
        Ok(())
    }

    async fn select(&self, entry: &str) -> crate::Result<Option<String>> {
        let row = sqlx::query("SELECT files FROM cache_attestations WHERE entry = $1")
            .bind(entry)
            .fetch_optional(&self.db.pool)
            .await
            .map_err(self.db.err())?;
        Ok(row.map(|r| r.get::<String, _>("files")))
    }
}

impl CacheLedger for DbCacheLedger {
    fn record<'a>(
        &'a self,
        entry: &'a str,
        files: &'a [AttestedFile],
    ) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(async move { Ok(self.upsert(entry, files).await?) })
    }

    fn attested<'a>(
        &'a self,
        entry: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<AttestedFile>>, LedgerError>> {
        Box::pin(async move {
            let Some(json) = self.select(entry).await? else {
                return Ok(None);
            };
            // A record that does not parse vouches for nothing (the entry is then rebuilt).
            Ok(serde_json::from_str(&json).ok())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary SQLite database, and a fresh PostgreSQL one when `KILN_TEST_POSTGRES_URL`
    /// names a server (required under `CI`).
    async fn backends() -> (Vec<Db>, tempfile::TempDir) {
        let d = tempfile::tempdir().unwrap();
        let mut out = vec![Db::open_sqlite(&d.path().join("q.sqlite")).await.unwrap()];
        match std::env::var("KILN_TEST_POSTGRES_URL") {
            Ok(url) => out.push(crate::queue::tests::fresh_postgres_db(&url).await),
            Err(_) if std::env::var_os("CI").is_some() => {
                panic!("CI is set but KILN_TEST_POSTGRES_URL is not: .ci/run starts PostgreSQL")
            }
            Err(_) => eprintln!("KILN_TEST_POSTGRES_URL unset: cache ledger tested on SQLite only"),
        }
        (out, d)
    }

    #[tokio::test]
    async fn records_are_read_back_and_the_last_one_wins_on_every_backend() {
        let (dbs, _dir) = backends().await;
        for db in dbs {
            let ledger = DbCacheLedger::new(db);
            assert_eq!(ledger.attested("teams/art/tile/k").await.unwrap(), None);
            let first = vec![AttestedFile::of("a.glb", b"one")];
            ledger.record("teams/art/tile/k", &first).await.unwrap();
            assert_eq!(
                ledger.attested("teams/art/tile/k").await.unwrap(),
                Some(first)
            );
            assert_eq!(ledger.attested("teams/geo/tile/k").await.unwrap(), None);
            let second = vec![
                AttestedFile::of(".kiln-stage.json", b"{}"),
                AttestedFile::of("a.glb", b"two"),
            ];
            ledger.record("teams/art/tile/k", &second).await.unwrap();
            assert_eq!(
                ledger.attested("teams/art/tile/k").await.unwrap(),
                Some(second)
            );
        }
    }
}
