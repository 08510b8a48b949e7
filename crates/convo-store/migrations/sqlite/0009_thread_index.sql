-- The recording proxy threads a call by the key the `complete` of the
-- conversation's last turn carries in its diagnostics (convo-proxy
-- thread.rs: `thread`, `thread_response`, `thread_conversation`). Indexed
-- (completes only), so a lookup is one index probe whatever the number of
-- sessions: no reading of every session after a restart. Entries end in
-- the rowid (`seq`), so the newest is the last. The expression is NULL for
-- diagnostics that are not JSON, so a row edited behind convo's back is
-- still written and read (verify reports it) instead of failing the write.
CREATE INDEX nodes_by_thread ON nodes (CASE WHEN json_valid(diagnostics) THEN json_extract(diagnostics, '$.thread') END) WHERE kind = 4;
CREATE INDEX nodes_by_thread_response ON nodes (CASE WHEN json_valid(diagnostics) THEN json_extract(diagnostics, '$.thread_response') END) WHERE kind = 4;
CREATE INDEX nodes_by_thread_conversation ON nodes (CASE WHEN json_valid(diagnostics) THEN json_extract(diagnostics, '$.thread_conversation') END) WHERE kind = 4;
