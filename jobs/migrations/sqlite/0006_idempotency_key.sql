-- A client's Idempotency-Key for a submission: the same team and key name the same job, so a
-- retried HTTP submit (or kiln submit --idempotency-key) never queues (and pays for) it twice.
ALTER TABLE queue_jobs ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX queue_jobs_idempotency ON queue_jobs (team, idempotency_key);
