-- The import index of coding agents' transcripts (see sqlite/0013_import_index.sql).
CREATE TABLE import_keys (
    session TEXT  NOT NULL,
    key     TEXT  NOT NULL,
    node    BYTEA NOT NULL,
    PRIMARY KEY (session, key)
);
CREATE TABLE import_tails (
    session TEXT PRIMARY KEY,
    tail    TEXT NOT NULL
);
