-- Whose fault a failed attempt was: 'infrastructure' (object store or database unreachable, lease
-- lost) attempts are retried on the worker's separate infrastructure budget; NULL = the stage's own.
ALTER TABLE queue_attempts ADD COLUMN fault TEXT;
