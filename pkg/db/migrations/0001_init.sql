-- Teams, local users and builds with their event chunk index.

CREATE TABLE teams (
    id   serial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    -- role -> {"users": [...], "groups": [...]}
    auth jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE local_users (
    name          text PRIMARY KEY,
    password_hash text NOT NULL,
    update_time   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE builds (
    id              bigserial PRIMARY KEY,
    team_id         integer NOT NULL REFERENCES teams (id),
    name            text NOT NULL,
    status          text NOT NULL
        CHECK (status IN ('pending', 'started', 'succeeded', 'failed', 'errored', 'aborted')),
    plan            jsonb,
    state           jsonb,
    created_by      text NOT NULL DEFAULT '',
    create_time     timestamptz NOT NULL DEFAULT now(),
    start_time      timestamptz,
    end_time        timestamptz,
    server          text NOT NULL DEFAULT '',
    abort_requested boolean NOT NULL DEFAULT false
);

CREATE INDEX builds_team_id_idx ON builds (team_id, id DESC);
-- Running builds are few: partial indexes keep "running" and resume lookups cheap.
CREATE INDEX builds_running_idx ON builds (id DESC) WHERE status IN ('pending', 'started');
CREATE INDEX builds_server_unfinished_idx ON builds (server) WHERE status IN ('pending', 'started');

CREATE TABLE build_event_chunks (
    build_id bigint NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    first_id bigint NOT NULL,
    last_id  bigint NOT NULL CHECK (last_id >= first_id),
    key      text NOT NULL,
    PRIMARY KEY (build_id, first_id)
);
