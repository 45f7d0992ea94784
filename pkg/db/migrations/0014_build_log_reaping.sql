-- Build log retention (a job's build_log_retention, the server's
-- --default/--max-build-logs-to-retain): the collector deletes the logs of a
-- job's older builds and marks them reaped. The build row stays (fly builds,
-- versions, passed constraints need it); its events are gone.
ALTER TABLE builds ADD COLUMN reap_time timestamptz;

-- The collector walks a job's finished, unreaped builds newest first.
CREATE INDEX builds_job_unreaped_idx ON builds (job_id, id DESC) WHERE reap_time IS NULL AND end_time IS NOT NULL;
