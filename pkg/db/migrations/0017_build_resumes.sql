-- A build that resumes a failed one (POST /api/v1/builds/N/resume) names
-- it: the steps that succeeded there are reused, not run again, and the
-- audit trail links the two builds.

ALTER TABLE builds ADD COLUMN resumed_from bigint REFERENCES builds (id) ON DELETE SET NULL;
