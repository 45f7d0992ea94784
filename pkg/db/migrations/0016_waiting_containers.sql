-- A task's pod declared ahead of its turn (gated, waiting for the server's
-- go-ahead) is recorded as a container in state 'waiting': the garbage
-- collector knows its pod, and workers' loads do not count it as a step
-- that runs.

ALTER TABLE containers
    DROP CONSTRAINT containers_state_check,
    ADD CONSTRAINT containers_state_check CHECK (state IN ('creating', 'created', 'destroying', 'waiting'));
