-- convo SQLite schema: large payloads written in place.
--
-- SQLite's incremental blob I/O cannot write any column of a table that
-- has an index on an expression (it cannot tell which columns the
-- expression reads) or a generated column, and `blobs` was found through
-- an index on `substr(hash, 1, 8)`. The same key becomes a plain column,
-- written with the row, under an ordinary index: lookups cost the same.
-- `data` stays the last column, so a zeroblob inserted there is never
-- expanded in memory: a large payload is inserted as a zeroblob and then
-- written through a blob handle in chunks, instead of being copied whole
-- into a bound value and again into a record. Row ids are kept (nodes
-- point at them). `convo verify` checks every row's key.
CREATE TABLE blobs_v3 (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL,                   -- SHA-256 of data
    k    BLOB NOT NULL,                   -- substr(hash, 1, 8): the lookup key
    data BLOB NOT NULL                    -- last: see above
);
INSERT INTO blobs_v3 (id, hash, k, data) SELECT id, hash, substr(hash, 1, 8), data FROM blobs;
DROP TABLE blobs;
ALTER TABLE blobs_v3 RENAME TO blobs;
CREATE INDEX blobs_by_key ON blobs (k);
