-- What the rest of fly's commands need: archived pipelines, the wall,
-- pausable periodic components, users' last logins, opaque access tokens
-- (fly reads their expiry), and teams that can be destroyed.

ALTER TABLE pipelines ADD COLUMN archived boolean NOT NULL DEFAULT false;

-- At most one wall message (one row, keyed true).
CREATE TABLE wall (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    message    text NOT NULL,
    -- NULL: shown until cleared.
    expires_at timestamptz
);

-- The servers' periodic loops (`fly get-components`): one row each, shared
-- by every server, so pausing one pauses it everywhere.
CREATE TABLE components (
    name        text PRIMARY KEY,
    paused      boolean NOT NULL DEFAULT false,
    interval_ms bigint NOT NULL DEFAULT 0,
    last_ran    timestamptz
);
INSERT INTO components (name) VALUES ('scheduler'), ('scanner'), ('collector');

-- Who logged in when (`fly active-users`).
CREATE TABLE users (
    connector  text NOT NULL,
    name       text NOT NULL,
    last_login timestamptz NOT NULL,
    PRIMARY KEY (connector, name)
);

-- fly holds an opaque access token whose last 8 bytes are its expiry (what
-- `fly targets` shows); the server maps it to the signed token it stands for.
CREATE TABLE access_tokens (
    -- sha256 of the token fly holds: a leaked table holds no usable token.
    token_hash text PRIMARY KEY,
    jwt        text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX access_tokens_expires_idx ON access_tokens (expires_at);

-- A destroyed team takes its builds, containers and artifacts' records.
ALTER TABLE builds DROP CONSTRAINT builds_team_id_fkey,
    ADD CONSTRAINT builds_team_id_fkey FOREIGN KEY (team_id) REFERENCES teams (id) ON DELETE CASCADE;
ALTER TABLE containers DROP CONSTRAINT containers_team_id_fkey,
    ADD CONSTRAINT containers_team_id_fkey FOREIGN KEY (team_id) REFERENCES teams (id) ON DELETE CASCADE;
ALTER TABLE artifacts DROP CONSTRAINT artifacts_team_id_fkey,
    ADD CONSTRAINT artifacts_team_id_fkey FOREIGN KEY (team_id) REFERENCES teams (id) ON DELETE CASCADE;
