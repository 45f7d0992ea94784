-- Pipelines, jobs, resources and their versions; build inputs and outputs
-- (what `passed:` constraints read); resource caches.

CREATE TABLE pipelines (
    id             bigserial PRIMARY KEY,
    team_id        integer NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name           text NOT NULL,
    -- Concourse's pipeline config as JSON (what `fly get-pipeline` shows),
    -- with ((vars)) left for credential lookup at build time.
    config         jsonb NOT NULL,
    -- X-Concourse-Config-Version: bumped by every save, checked by the next.
    config_version bigint NOT NULL DEFAULT 1,
    paused         boolean NOT NULL DEFAULT false,
    paused_by      text NOT NULL DEFAULT '',
    paused_at      timestamptz,
    public         boolean NOT NULL DEFAULT false,
    ordering       integer NOT NULL DEFAULT 0,
    last_updated   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (team_id, name)
);

CREATE TABLE jobs (
    id                 bigserial PRIMARY KEY,
    pipeline_id        bigint NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    name               text NOT NULL,
    -- The job's config (Concourse's JobConfig as JSON).
    config             jsonb NOT NULL,
    -- false once the job is gone from the pipeline's config: its builds stay.
    active             boolean NOT NULL DEFAULT true,
    paused             boolean NOT NULL DEFAULT false,
    paused_by          text NOT NULL DEFAULT '',
    paused_at          timestamptz,
    -- Job build names are "1", "2", ...: the last one handed out.
    build_number_seq   integer NOT NULL DEFAULT 0,
    -- The scheduler looks at a job again when requested > last_scheduled.
    schedule_requested timestamptz NOT NULL DEFAULT now(),
    last_scheduled     timestamptz NOT NULL DEFAULT 'epoch',
    UNIQUE (pipeline_id, name)
);

CREATE TABLE resources (
    id                 bigserial PRIMARY KEY,
    pipeline_id        bigint NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    name               text NOT NULL,
    type               text NOT NULL,
    -- The resource's config (Concourse's ResourceConfig as JSON).
    config             jsonb NOT NULL,
    -- sha256 of the resource's type and source (after the pipeline's
    -- resource types are resolved, before credentials are): versions
    -- belong to one, so a new source starts from no versions.
    config_hash        text NOT NULL,
    active             boolean NOT NULL DEFAULT true,
    -- The last check.
    check_error        text NOT NULL DEFAULT '',
    last_check_start   timestamptz,
    last_check_end     timestamptz,
    last_check_build   bigint,
    -- When the next periodic check is due (check_every, jittered), and a
    -- request for an immediate one (`fly check-resource`).
    next_check         timestamptz NOT NULL DEFAULT now(),
    check_requested    boolean NOT NULL DEFAULT false,
    check_from_version jsonb,
    -- Pinned through the API (`fly pin-resource`); a version pinned in the
    -- config lives in config.
    api_pinned_version jsonb,
    pin_comment        text NOT NULL DEFAULT '',
    UNIQUE (pipeline_id, name)
);

CREATE TABLE resource_versions (
    id           bigserial PRIMARY KEY,
    resource_id  bigint NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    config_hash  text NOT NULL,
    version      jsonb NOT NULL,
    -- sha256 of the version's canonical JSON.
    version_hash text NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '[]',
    -- Higher is newer: the order check reported them in.
    check_order  bigint NOT NULL,
    enabled      boolean NOT NULL DEFAULT true,
    create_time  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (resource_id, config_hash, version_hash)
);

CREATE INDEX resource_versions_order_idx ON resource_versions (resource_id, config_hash, check_order DESC);

ALTER TABLE builds
    ADD COLUMN pipeline_id  bigint REFERENCES pipelines (id) ON DELETE CASCADE,
    ADD COLUMN job_id       bigint REFERENCES jobs (id) ON DELETE CASCADE,
    -- A check build (a resource's check shown like Concourse's).
    ADD COLUMN resource_id  bigint REFERENCES resources (id) ON DELETE CASCADE,
    ADD COLUMN rerun_of     bigint REFERENCES builds (id) ON DELETE SET NULL,
    ADD COLUMN rerun_number integer NOT NULL DEFAULT 0,
    -- true when a manual trigger or rerun made it, not the scheduler.
    ADD COLUMN manually_triggered boolean NOT NULL DEFAULT false,
    -- Whether the scheduler has chosen its inputs (pending job builds wait
    -- for inputs, then start).
    ADD COLUMN inputs_ready boolean NOT NULL DEFAULT false;

CREATE INDEX builds_job_id_idx ON builds (job_id, id DESC);

-- The versions a job build used (get steps) and produced (put steps).
CREATE TABLE build_resource_versions (
    build_id         bigint NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    job_id           bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- The input's or output's name in the plan.
    name             text NOT NULL,
    resource_id      bigint NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    version_id       bigint NOT NULL REFERENCES resource_versions (id) ON DELETE CASCADE,
    is_input         boolean NOT NULL,
    -- An input the job had never run with before (Concourse's "first occurrence").
    first_occurrence boolean NOT NULL DEFAULT false,
    PRIMARY KEY (build_id, is_input, name, version_id)
);

CREATE INDEX build_resource_versions_job_idx ON build_resource_versions (job_id, version_id);

-- A fetched version: a later get of the same (type, source, params,
-- version) uses this artifact instead of running again.
CREATE TABLE resource_caches (
    key         text PRIMARY KEY,
    team_id     integer NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    -- Which resource it belongs to (for `fly clear-resource-cache`); NULL for
    -- one-off builds and image fetches.
    resource_id bigint REFERENCES resources (id) ON DELETE CASCADE,
    artifact    text NOT NULL,
    digest      text NOT NULL,
    size        bigint NOT NULL DEFAULT 0,
    version     jsonb NOT NULL,
    metadata    jsonb NOT NULL DEFAULT '[]',
    create_time timestamptz NOT NULL DEFAULT now(),
    last_used   timestamptz NOT NULL DEFAULT now()
);
