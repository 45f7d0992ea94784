-- Build log objects lose their last index row when their builds go (a
-- pipeline or a team destroyed, cascading to its builds) or when a retried
-- chunk moves to another segment. A trigger notes each such key; the
-- collector deletes the object once no row names it, so destroying a
-- pipeline also frees its logs' storage.

CREATE TABLE unreferenced_event_objects (
    key      text PRIMARY KEY,
    noted_at timestamptz NOT NULL DEFAULT now()
);

-- No index on build_event_chunks (key): it would cost every log write,
-- while the collector's "does a row still name it" runs only in the passes
-- after a deletion, as one semi-join.

-- Destroying a pipeline deletes each build's rows in one cascaded statement:
-- a statement trigger notes each key once, however many of them named it.
CREATE FUNCTION note_deleted_event_objects() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO unreferenced_event_objects (key)
        SELECT DISTINCT key FROM gone ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER build_event_chunks_deleted AFTER DELETE ON build_event_chunks
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION note_deleted_event_objects();

-- A retried chunk moving to another segment (a row at a time; a trigger on
-- a column list cannot have a transition table).
CREATE FUNCTION note_moved_event_object() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO unreferenced_event_objects (key) VALUES (OLD.key) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER build_event_chunks_moved AFTER UPDATE OF key ON build_event_chunks
    FOR EACH ROW WHEN (OLD.key IS DISTINCT FROM NEW.key) EXECUTE FUNCTION note_moved_event_object();
