-- Build logs are written in segments: one object holds the chunks of many
-- builds, each at its own byte range, so a server writes one object per
-- group commit instead of one per running build. A chunk's range is
-- segment_offset and segment_length; a length of 0 is the whole object
-- (the per-build chunk objects written before).

ALTER TABLE build_event_chunks
    ADD COLUMN segment_offset bigint NOT NULL DEFAULT 0 CHECK (segment_offset >= 0),
    ADD COLUMN segment_length bigint NOT NULL DEFAULT 0 CHECK (segment_length >= 0);
