-- convo PostgreSQL schema, version 3: the full-text search index (convo_store::search).
-- Same meaning as migrations/sqlite/0004_search.sql: one tsvector per node
-- whose payload holds words (built by convo, positions included, so the
-- server's text search configuration plays no part), a GIN index over
-- them, and the cursor the index has caught up to.
CREATE TABLE search_index (
    seq  BIGINT PRIMARY KEY,              -- nodes.seq
    doc  TSVECTOR NOT NULL
);
CREATE INDEX search_index_doc ON search_index USING GIN (doc);

CREATE TABLE search_state (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    cursor BIGINT NOT NULL
);
INSERT INTO search_state (id, cursor) VALUES (1, 0);
