//! Team bearer tokens of the HTTP API: minting, parsing, hashing, and the `api_tokens` table.
//!
//! A token is `kiln_` followed by 64 lowercase hex digits (32 bytes from the operating system's
//! CSPRNG). Only its BLAKE3 hash (hex) is stored. A fast, unsalted hash is the right choice here —
//! unlike passwords, a token has 256 bits of entropy, so nobody can guess inputs to a leaked hash,
//! fast or slow; a slow KDF would only make every request slower. The token is shown once, by
//! `kiln token create`; after that only the hash exists, and `kiln token revoke` takes a prefix of
//! the hash.

use serde::Serialize;
use sqlx::Row;

use crate::db::Db;
use crate::queue::now_ms;

/// Every token starts with this, so leaked tokens are easy to find with secret scanners.
pub const TOKEN_PREFIX: &str = "kiln_";

/// Random bytes per token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// Shortest hash prefix `revoke` accepts: 8 hex digits (32 bits), so a typo cannot match widely.
pub const MIN_REVOKE_PREFIX: usize = 8;

/// Token and token-table errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The string is not `kiln_` + 64 hex digits.
    #[error("malformed token: expected `kiln_` followed by 64 hex digits")]
    Malformed,
    /// The team name is empty.
    #[error("the team name is empty; pass --team NAME")]
    EmptyTeam,
    /// The OS random source failed.
    #[error("cannot read random bytes from the operating system: {source}")]
    Random {
        /// The OS error.
        #[source]
        source: getrandom::Error,
    },
    /// The revoke prefix is too short or not hex.
    #[error(
        "hash prefix `{prefix}`: expected at least {MIN_REVOKE_PREFIX} hex digits from `kiln token list`"
    )]
    BadPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// No active token's hash starts with the prefix.
    #[error("no active token's hash starts with `{prefix}`; `kiln token list` shows the hashes")]
    NoMatch {
        /// The prefix given.
        prefix: String,
    },
    /// More than one active token's hash starts with the prefix.
    #[error("{matches} active tokens' hashes start with `{prefix}`; give more digits")]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// How many tokens match.
        matches: usize,
    },
    /// The database failed.
    #[error(transparent)]
    Db(#[from] crate::Error),
}

/// A freshly minted token: the secret (show it once) and the hash that is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewToken {
    /// `kiln_<64 hex>`; never stored.
    pub token: String,
    /// BLAKE3 hex of `token`, 64 hex digits.
    pub hash: String,
}

/// One row of `api_tokens` (no secret in it). Times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenInfo {
    /// BLAKE3 hex of the token.
    pub token_hash: String,
    /// The team the token acts for.
    pub team: String,
    /// A free-form note (who or what uses it).
    pub label: Option<String>,
    /// When it was created, Unix ms.
    pub created_at: i64,
    /// When it was revoked, Unix ms; `None` while valid.
    pub revoked_at: Option<i64>,
}

/// Mint a token from 32 OS-random bytes.
///
/// # Errors
/// [`TokenError::Random`] when the OS random source fails.
pub fn generate() -> Result<NewToken, TokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|source| TokenError::Random { source })?;
    let token = format!("{TOKEN_PREFIX}{}", hex(&bytes));
    let hash = hash(&token);
    Ok(NewToken { token, hash })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// BLAKE3 hex (64 digits) of `token`, as stored in `api_tokens.token_hash`.
pub fn hash(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

/// Check the shape of a presented token (`kiln_` + 64 hex digits, either case) and return its
/// hash. Cheap, so malformed tokens are refused before any database query.
///
/// # Errors
/// [`TokenError::Malformed`].
pub fn parse(presented: &str) -> Result<String, TokenError> {
    let digits = presented
        .strip_prefix(TOKEN_PREFIX)
        .ok_or(TokenError::Malformed)?;
    if digits.len() != 2 * TOKEN_BYTES || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TokenError::Malformed);
    }
    Ok(hash(&format!(
        "{TOKEN_PREFIX}{}",
        digits.to_ascii_lowercase()
    )))
}

/// Create a token for `team` with an optional `label`, store its hash, and return it.
///
/// # Errors
/// [`TokenError::EmptyTeam`]; [`TokenError::Random`]; [`TokenError::Db`].
pub async fn create(db: &Db, team: &str, label: Option<&str>) -> Result<NewToken, TokenError> {
    if team.trim().is_empty() {
        return Err(TokenError::EmptyTeam);
    }
    let t = generate()?;
    sqlx::query(
        "INSERT INTO api_tokens (token_hash, team, label, created_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(&t.hash)
    .bind(team)
    .bind(label)
    .bind(now_ms())
    .execute(&db.pool)
    .await
    .map_err(db.err())?;
    Ok(t)
}

/// Every token, newest first, revoked ones included.
///
/// # Errors
/// [`TokenError::Db`].
pub async fn list(db: &Db) -> Result<Vec<TokenInfo>, TokenError> {
    let rows = sqlx::query(
        "SELECT token_hash, team, label, created_at, revoked_at FROM api_tokens ORDER BY created_at DESC, token_hash",
    )
    .fetch_all(&db.pool)
    .await
    .map_err(db.err())?;
    Ok(rows
        .iter()
        .map(|r| TokenInfo {
            token_hash: r.get("token_hash"),
            team: r.get("team"),
            label: r.get("label"),
            created_at: r.get("created_at"),
            revoked_at: r.get("revoked_at"),
        })
        .collect())
}

/// Revoke the one active token whose hash starts with `prefix` (≥ 8 hex digits); returns it.
///
/// # Errors
/// [`TokenError::BadPrefix`], [`TokenError::NoMatch`], [`TokenError::Ambiguous`] (nothing is
/// revoked then); [`TokenError::Db`].
pub async fn revoke(db: &Db, prefix: &str) -> Result<TokenInfo, TokenError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if prefix.len() < MIN_REVOKE_PREFIX || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TokenError::BadPrefix { prefix });
    }
    let matches: Vec<TokenInfo> = list(db)
        .await?
        .into_iter()
        .filter(|t| t.revoked_at.is_none() && t.token_hash.starts_with(&prefix))
        .collect();
    let mut one = match matches.len() {
        0 => return Err(TokenError::NoMatch { prefix }),
        1 => matches.into_iter().next().ok_or(TokenError::NoMatch {
            prefix: prefix.clone(),
        })?,
        n => return Err(TokenError::Ambiguous { prefix, matches: n }),
    };
    let now = now_ms();
    sqlx::query("UPDATE api_tokens SET revoked_at = $2 WHERE token_hash = $1")
        .bind(&one.token_hash)
        .bind(now)
        .execute(&db.pool)
        .await
        .map_err(db.err())?;
    one.revoked_at = Some(now);
    Ok(one)
}

/// The team of the active token with hash `token_hash`, or `None` (unknown or revoked).
///
/// # Errors
/// [`TokenError::Db`].
pub async fn team_for(db: &Db, token_hash: &str) -> Result<Option<String>, TokenError> {
    Ok(sqlx::query_scalar(
        "SELECT team FROM api_tokens WHERE token_hash = $1 AND revoked_at IS NULL",
    )
    .bind(token_hash)
    .fetch_optional(&db.pool)
    .await
    .map_err(db.err())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_prefixed_hex_and_parse_to_their_hash() {
        let t = generate().unwrap();
        assert!(t.token.starts_with("kiln_"));
        assert_eq!(t.token.len(), 5 + 64);
        assert_eq!(parse(&t.token).unwrap(), t.hash);
        assert_eq!(t.hash.len(), 64);
        assert_ne!(generate().unwrap().token, t.token);
    }

    #[test]
    fn the_stored_hash_is_blake3_hex_of_the_whole_token() {
        let token = format!("kiln_{}", "ab".repeat(32));
        assert_eq!(
            hash(&token),
            blake3::hash(token.as_bytes()).to_hex().to_string()
        );
    }

    #[test]
    fn upper_case_hex_is_the_same_token() {
        let t = generate().unwrap();
        let upper = format!("kiln_{}", t.token[5..].to_ascii_uppercase());
        assert_eq!(parse(&upper).unwrap(), t.hash);
    }

    #[test]
    fn parse_rejects_wrong_prefix_length_and_digits() {
        let digits = "0".repeat(64);
        for bad in [
            String::new(),
            digits.clone(),
            format!("kiln{digits}"),
            format!("kiln_{}", &digits[1..]),
            format!("kiln_{digits}0"),
            format!("kiln_{}g", &digits[1..]),
            format!("kiln_{}", "é".repeat(32)),
        ] {
            assert!(matches!(parse(&bad), Err(TokenError::Malformed)), "{bad}");
        }
    }

    async fn db() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_sqlite(&dir.path().join("q.sqlite")).await.unwrap();
        (dir, db)
    }

    #[tokio::test]
    async fn created_tokens_resolve_to_their_team_until_revoked() {
        let (_d, db) = db().await;
        let t = create(&db, "art", Some("ci")).await.unwrap();
        assert_eq!(
            team_for(&db, &t.hash).await.unwrap().as_deref(),
            Some("art")
        );
        let listed = list(&db).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].label.as_deref(), Some("ci"));
        let revoked = revoke(&db, &t.hash[..8]).await.unwrap();
        assert_eq!(revoked.team, "art");
        assert_eq!(team_for(&db, &t.hash).await.unwrap(), None);
        assert!(matches!(
            revoke(&db, &t.hash[..8]).await,
            Err(TokenError::NoMatch { .. })
        ));
    }

    #[tokio::test]
    async fn revoke_refuses_short_or_non_hex_prefixes() {
        let (_d, db) = db().await;
        for p in ["abc", "zzzzzzzzzz", ""] {
            assert!(
                matches!(revoke(&db, p).await, Err(TokenError::BadPrefix { .. })),
                "{p}"
            );
        }
    }

    #[tokio::test]
    async fn tokens_need_a_team() {
        let (_d, db) = db().await;
        assert!(matches!(
            create(&db, " ", None).await,
            Err(TokenError::EmptyTeam)
        ));
    }
}
