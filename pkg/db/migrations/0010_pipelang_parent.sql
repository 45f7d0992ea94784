-- A pipeline set by a job's set_pipeline step remembers the job and build
-- that set it (Concourse's parent_job_id/parent_build_id): fly warns before
-- overwriting it, and an older build never overwrites what a newer one set.
-- A save through the API clears them.
ALTER TABLE pipelines
    ADD COLUMN parent_job_id   bigint REFERENCES jobs (id) ON DELETE SET NULL,
    ADD COLUMN parent_build_id bigint REFERENCES builds (id) ON DELETE SET NULL;
