-- The durable job queue (jobs/src/queue). Times are Unix milliseconds (UTC).
-- A queued job is one queue_jobs row and one queue_stages row per DAG stage; workers claim
-- stages, each claim an attempt holding a lease with a fencing token.
CREATE TABLE queue_jobs (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL,
    spec TEXT NOT NULL,
    priority BIGINT NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'dead')),
    max_attempts BIGINT NOT NULL,
    budget_usd REAL,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    submitted_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    error TEXT
);
CREATE INDEX queue_jobs_state ON queue_jobs(state, priority, submitted_at);
CREATE INDEX queue_jobs_team ON queue_jobs(team, submitted_at);
CREATE TABLE queue_stages (
    job_id TEXT NOT NULL REFERENCES queue_jobs(id),
    stage TEXT NOT NULL,
    position BIGINT NOT NULL,
    uses_gpu BIGINT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'dead')),
    attempts BIGINT NOT NULL DEFAULT 0,
    not_before BIGINT NOT NULL DEFAULT 0,
    lease_worker TEXT,
    lease_token BIGINT NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    stage_key TEXT,
    summary TEXT,
    error TEXT,
    PRIMARY KEY (job_id, stage)
);
CREATE INDEX queue_stages_claim ON queue_stages(state, not_before);
CREATE TABLE queue_attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES queue_jobs(id),
    stage TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    token BIGINT NOT NULL,
    worker TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'lost', 'released', 'cancelled', 'rejected')),
    started_at BIGINT NOT NULL,
    finished_at BIGINT,
    ledger_attempt_id BIGINT,
    error TEXT
);
CREATE INDEX queue_attempts_job ON queue_attempts(job_id, stage);
CREATE TABLE queue_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX queue_events_job ON queue_events(job_id, id);
CREATE TABLE queue_teams (
    team TEXT PRIMARY KEY,
    max_running BIGINT NOT NULL
);
CREATE TABLE queue_workers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    gpus BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    stopped_at BIGINT
);
