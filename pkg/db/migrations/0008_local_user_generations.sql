-- A login token carries its user's generation; every authenticated request
-- compares it with the stored one, so logging out (which moves the
-- generation on) ends every earlier token at once. The values come from one
-- sequence, never reused: a local user removed from the flags and added back
-- later does not revive its old tokens.

CREATE SEQUENCE local_user_generation;

ALTER TABLE local_users
    ADD COLUMN generation bigint NOT NULL DEFAULT nextval('local_user_generation');
