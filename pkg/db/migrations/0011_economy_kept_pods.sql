-- Pod economy: what intercept did to a container (Concourse's last_hijack),
-- and why GC keeps its pod (shown by the containers API).

ALTER TABLE containers
    -- Open intercept sessions (fly intercept) and when one last opened or
    -- closed: an intercepted pod stays while a session is open and for
    -- the hijack grace period after.
    ADD COLUMN intercept_sessions integer NOT NULL DEFAULT 0,
    ADD COLUMN last_intercept     timestamptz,
    -- Why the garbage collector keeps the finished step's pod ('' while
    -- the step runs or before the first pass).
    ADD COLUMN kept_reason        text NOT NULL DEFAULT '';

CREATE INDEX containers_worker_idx ON containers (worker_name);
-- The latest finished build of a job.
CREATE INDEX builds_job_finished_idx ON builds (job_id, id DESC) WHERE status NOT IN ('pending', 'started');
-- The latest finished check of a resource.
CREATE INDEX builds_resource_finished_idx ON builds (resource_id, id DESC) WHERE status NOT IN ('pending', 'started');
