-- The GPU slot a stage attempt ran on when it was part of a GPU (a MIG profile such as
-- `H100:1g.10gb`, or a fraction such as `0.5`); NULL = a whole GPU, or the CPU. Its `gpu_s` is
-- then already GPU-equivalent seconds (slot seconds × the slot's fraction of the GPU).
ALTER TABLE stage_attempts ADD COLUMN gpu_slot TEXT;
-- The estimate `kiln plan` would have printed, recorded when the job was run or submitted (JSON:
-- catalog version and per-stage reference seconds with their basis); NULL for jobs recorded
-- before estimates were kept. `kiln report --estimate-error` compares it with the bill.
ALTER TABLE jobs ADD COLUMN estimate TEXT;
