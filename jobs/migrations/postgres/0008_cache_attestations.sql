-- The cache ledger (kiln_jobs::cache_ledger): for each entry of the shared stage cache and each
-- travelling checkpoint, the files the worker that stored it hashed, as JSON
-- ([{"path", "bytes", "blake3"}, …] sorted by path). Readers accept only bytes matching this
-- record, which teams cannot write (they can write the store). `entry` is the entry's path
-- below the cache root (`teams/art/tile/<key>`); the last record of an entry wins.
CREATE TABLE cache_attestations (
    entry TEXT PRIMARY KEY,
    files TEXT NOT NULL,
    recorded_at BIGINT NOT NULL
);
