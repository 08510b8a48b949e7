-- convo SQLite schema: payloads stored in content-defined chunks
-- (convo-store/src/chunk.rs).
--
-- A payload of 4 KiB or more is cut into chunks stored once each in
-- `chunks` under their SHA-256; its `blobs` row keeps the payload's
-- SHA-256 (what nodes commit to) and holds its manifest instead of its
-- bytes (`chunked` = 1). Rows written before stay whole (`chunked` = 0,
-- the default, which costs the old rows nothing) and read as before.
-- `chunks` has the layout of `blobs`: a rowid table (chunks run to 4 KiB)
-- found by `k`, the first 8 bytes of its hash (`convo verify` checks it).
ALTER TABLE blobs ADD COLUMN chunked INTEGER NOT NULL DEFAULT 0;
CREATE TABLE chunks (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL,                   -- SHA-256 of data
    k    BLOB NOT NULL,                   -- substr(hash, 1, 8): the lookup key
    data BLOB NOT NULL
);
CREATE INDEX chunks_by_key ON chunks (k);
