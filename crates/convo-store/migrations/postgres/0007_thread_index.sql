-- The recording proxy's threading keys (see sqlite/0009_thread_index.sql):
-- completes only, newest last.
CREATE INDEX nodes_by_thread ON nodes (((diagnostics::jsonb) ->> 'thread'), seq) WHERE kind = 4;
CREATE INDEX nodes_by_thread_response ON nodes (((diagnostics::jsonb) ->> 'thread_response'), seq) WHERE kind = 4;
CREATE INDEX nodes_by_thread_conversation ON nodes (((diagnostics::jsonb) ->> 'thread_conversation'), seq) WHERE kind = 4;
