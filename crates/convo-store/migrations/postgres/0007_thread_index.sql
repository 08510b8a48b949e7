-- The recording proxy's threading keys (see sqlite/0009_thread_index.sql):
-- completes only, newest last. `convo_diag_field` is NULL for diagnostics
-- that are not JSON (a cast would fail the write of a row edited behind
-- convo's back; verify reports such a row instead).
CREATE FUNCTION convo_diag_field(d TEXT, k TEXT) RETURNS TEXT
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN d::jsonb ->> k;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
CREATE INDEX nodes_by_thread ON nodes (convo_diag_field(diagnostics, 'thread'), seq) WHERE kind = 4;
CREATE INDEX nodes_by_thread_response ON nodes (convo_diag_field(diagnostics, 'thread_response'), seq) WHERE kind = 4;
CREATE INDEX nodes_by_thread_conversation ON nodes (convo_diag_field(diagnostics, 'thread_conversation'), seq) WHERE kind = 4;
