-- The job ledger: every job run and every stage attempt with its device and usage.
-- IF NOT EXISTS: ledgers written before migrations existed adopt this schema as they are.
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
    created_at TEXT NOT NULL,
    finished_at TEXT,
    error TEXT
);
CREATE TABLE IF NOT EXISTS stage_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    stage TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'cached')),
    device TEXT NOT NULL,
    stage_key TEXT,
    started_at TEXT NOT NULL,
    wall_s REAL NOT NULL DEFAULT 0,
    cpu_s REAL NOT NULL DEFAULT 0,
    gpu_s REAL NOT NULL DEFAULT 0,
    bytes_read INTEGER NOT NULL DEFAULT 0,
    bytes_written INTEGER NOT NULL DEFAULT 0,
    summary TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS stage_attempts_job ON stage_attempts(job_id);
