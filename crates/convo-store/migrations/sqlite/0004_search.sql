-- convo SQLite schema, version 4: the full-text search index (convo_store::search).
--
-- A contentless FTS5 table: the payloads stay in `blobs`, the index holds
-- only their words, keyed by the node's follow number (rowid = nodes.seq).
-- convo tokenizes in Rust and hands FTS5 the lowercased words joined by
-- spaces, so the `ascii` tokenizer only splits on those spaces and both
-- backends find the same nodes. The index is filled off the append path,
-- from `search_state.cursor` (the follow number of the last node it holds)
-- onwards; it starts empty and catches up on the first search.
CREATE VIRTUAL TABLE search_fts USING fts5 (
    words,
    content = '',
    contentless_delete = 1,
    tokenize = 'ascii'
);

CREATE TABLE search_state (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    cursor INTEGER NOT NULL
);
INSERT INTO search_state (id, cursor) VALUES (1, 0);
