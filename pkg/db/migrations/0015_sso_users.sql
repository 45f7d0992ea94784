-- Users who logged in through a single sign-on connector (OIDC). They have no
-- password here: the identity provider vouches for them at each login, and
-- what it said then (the user's name and groups) is what their roles come
-- from until the next login. The generation works as local users' does
-- (0008): a logout moves it on and ends every earlier token.

CREATE TABLE sso_users (
    connector   text NOT NULL,
    user_id     text NOT NULL,
    user_name   text NOT NULL,
    groups      text[] NOT NULL DEFAULT '{}',
    generation  bigint NOT NULL DEFAULT nextval('local_user_generation'),
    update_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connector, user_id)
);
