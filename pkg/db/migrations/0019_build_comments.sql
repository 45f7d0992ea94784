-- A build's comment (Concourse's `fly`-less SetBuildComment, written from the
-- build page): plain text, '' when none.
ALTER TABLE builds ADD COLUMN comment text NOT NULL DEFAULT '';
