-- convo SQLite schema, version 3: the fact journal (convo_core::fact).
--
-- Session metadata and working state roots change without a node; each
-- change is a fact in one store-wide hash chain, so verify can derive every
-- session and branch row from the journal and the nodes. `body` is the
-- fact's v1 encoding (docs/HASHING.md), `hash` its SHA-256. Existing
-- sessions and working states are journalled by the migration (in Rust,
-- right after this script, in the same transaction).
CREATE TABLE facts (
    seq  INTEGER PRIMARY KEY,             -- 1, 2, 3…: the chain's order
    hash BLOB NOT NULL,
    body BLOB NOT NULL
);
