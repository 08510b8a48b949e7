-- The recording proxy threads a call by the key the `complete` of the
-- conversation's last turn carries in its diagnostics (convo-proxy
-- thread.rs: `thread`, `thread_response`, `thread_conversation`). Indexed
-- (completes only), so a lookup is one index probe whatever the number of
-- sessions: no reading of every session after a restart. Entries end in
-- the rowid (`seq`), so the newest is the last.
CREATE INDEX nodes_by_thread ON nodes (json_extract(diagnostics, '$.thread')) WHERE kind = 4;
CREATE INDEX nodes_by_thread_response ON nodes (json_extract(diagnostics, '$.thread_response')) WHERE kind = 4;
CREATE INDEX nodes_by_thread_conversation ON nodes (json_extract(diagnostics, '$.thread_conversation')) WHERE kind = 4;
