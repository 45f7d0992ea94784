-- A pipeline set by a job's set_pipeline step remembers the job and build
-- that set it (Concourse's parent_job_id/parent_build_id): fly warns before
-- overwriting it, and an older build never overwrites what a newer one set.
-- A save through the API clears them.
ALTER TABLE pipelines
    ADD COLUMN parent_job_id   bigint REFERENCES jobs (id) ON DELETE SET NULL,
    ADD COLUMN parent_build_id bigint REFERENCES builds (id) ON DELETE SET NULL;

-- Instanced pipelines: pipelines of one name told apart by their instance
-- vars (fly set-pipeline -i k=v); '{}' for an ordinary pipeline. The
-- instances of a name share its place in the team's order and have their
-- own order within it.
ALTER TABLE pipelines
    ADD COLUMN instance_vars      jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN secondary_ordering integer NOT NULL DEFAULT 1,
    DROP CONSTRAINT pipelines_team_id_name_key,
    ADD CONSTRAINT pipelines_team_id_name_instance_vars_key UNIQUE (team_id, name, instance_vars);
