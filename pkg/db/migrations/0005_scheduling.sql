-- What the scheduler needs beyond 0004.

ALTER TABLE jobs
    -- Why the job's next build cannot start (a pinned version that does
    -- not exist, no version satisfying `passed`), '' when nothing blocks it.
    ADD COLUMN waiting_reason text NOT NULL DEFAULT '';

-- Pending job builds are looked up by job, oldest first.
CREATE INDEX builds_job_pending_idx ON builds (job_id, id) WHERE status IN ('pending', 'started');
-- The scheduler reads a job's succeeded builds' versions by resource.
CREATE INDEX build_resource_versions_resource_idx ON build_resource_versions (job_id, resource_id);
