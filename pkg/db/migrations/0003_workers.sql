-- Workers: a Kubernetes API plus a namespace, heartbeated by the server.

CREATE TABLE workers (
    name              text PRIMARY KEY,
    platform          text NOT NULL DEFAULT 'linux',
    tags              text[] NOT NULL DEFAULT '{}',
    -- '' = a worker for every team.
    team              text NOT NULL DEFAULT '',
    state             text NOT NULL
        CHECK (state IN ('running', 'stalled', 'landing', 'landed', 'retiring')),
    namespace         text NOT NULL DEFAULT '',
    version           text NOT NULL DEFAULT '',
    start_time        timestamptz,
    heartbeat         timestamptz NOT NULL DEFAULT now(),
    active_containers integer NOT NULL DEFAULT 0
);
