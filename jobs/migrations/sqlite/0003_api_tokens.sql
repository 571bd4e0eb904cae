-- Bearer tokens of the HTTP API (jobs/src/api/token.rs), one team each. Only the BLAKE3 hex of a
-- token is stored, never the token. Times are Unix milliseconds (UTC); revoked_at NULL = valid.
CREATE TABLE api_tokens (
    token_hash TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    label TEXT,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX api_tokens_team ON api_tokens(team);
