-- What a build log chunk holds, so that reading a huge log by range (the
-- build page's pages, its search) reads only the chunks it needs: the plan
-- ids of the steps whose output it holds, and whether it holds any event but
-- output. NULL: not known (chunks written before), such chunks are read.
ALTER TABLE build_event_chunks ADD COLUMN log_origins text[], ADD COLUMN other_events boolean;
