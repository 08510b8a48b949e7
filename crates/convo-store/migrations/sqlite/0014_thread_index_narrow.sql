-- convo SQLite schema: the thread indexes (0009) hold only the completes
-- that carry the key they index.
--
-- Indexed on every complete, they cost each complete written three more
-- index entries (NULL for all but the recording proxy's), a fifth of bulk
-- ingest's time. Diagnostics are canonical JSON (RFC 8785: no whitespace),
-- so a complete that carries the key holds `"KEY":`; `instr` is checked
-- before the JSON is parsed. A lookup names the same condition, so it
-- still reads the index (convo-store sqlite `complete_by_thread`).
DROP INDEX IF EXISTS nodes_by_thread;
DROP INDEX IF EXISTS nodes_by_thread_response;
DROP INDEX IF EXISTS nodes_by_thread_conversation;
CREATE INDEX nodes_by_thread ON nodes (CASE WHEN json_valid(diagnostics) THEN json_extract(diagnostics, '$.thread') END) WHERE kind = 4 AND instr(diagnostics, '"thread":') > 0;
CREATE INDEX nodes_by_thread_response ON nodes (CASE WHEN json_valid(diagnostics) THEN json_extract(diagnostics, '$.thread_response') END) WHERE kind = 4 AND instr(diagnostics, '"thread_response":') > 0;
CREATE INDEX nodes_by_thread_conversation ON nodes (CASE WHEN json_valid(diagnostics) THEN json_extract(diagnostics, '$.thread_conversation') END) WHERE kind = 4 AND instr(diagnostics, '"thread_conversation":') > 0;
