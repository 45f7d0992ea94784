-- Containers (step pods) and artifacts (blobstore objects known to the API).

CREATE TABLE containers (
    handle            text PRIMARY KEY DEFAULT gen_random_uuid()::text,
    -- NULL: no team or no build (e.g. a check's pod).
    team_id           integer REFERENCES teams (id),
    build_id          bigint REFERENCES builds (id) ON DELETE CASCADE,
    build_name        text NOT NULL DEFAULT '',
    plan_id           text NOT NULL DEFAULT '',
    step_name         text NOT NULL DEFAULT '',
    type              text NOT NULL CHECK (type IN ('task', 'get', 'put', 'check')),
    worker_name       text NOT NULL DEFAULT '',
    namespace         text NOT NULL DEFAULT '',
    pod_name          text NOT NULL DEFAULT '',
    step_id           text NOT NULL DEFAULT '',
    state             text NOT NULL CHECK (state IN ('creating', 'created', 'destroying')),
    working_directory text NOT NULL DEFAULT '',
    "user"            text NOT NULL DEFAULT '',
    create_time       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX containers_team_id_idx ON containers (team_id);
CREATE INDEX containers_build_id_idx ON containers (build_id);

CREATE TABLE artifacts (
    id          bigserial PRIMARY KEY,
    team_id     integer NOT NULL REFERENCES teams (id),
    -- The artifact outlives its build's row; GC decides when the object goes.
    build_id    bigint REFERENCES builds (id) ON DELETE SET NULL,
    name        text NOT NULL DEFAULT '',
    key         text NOT NULL,
    digest      text NOT NULL DEFAULT '',
    size        bigint NOT NULL DEFAULT 0,
    create_time timestamptz NOT NULL DEFAULT now(),
    worker_name text NOT NULL DEFAULT ''
);

CREATE INDEX artifacts_team_id_idx ON artifacts (team_id, id);
CREATE INDEX artifacts_build_id_idx ON artifacts (build_id);
