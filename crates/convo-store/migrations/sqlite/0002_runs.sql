-- convo SQLite schema, version 2: cheaper appends.
--
-- Version 1 kept three B-tree indexes on every node row (its hash, UNIQUE;
-- its session; its payload's hash in `blobs`, UNIQUE), and each of them cost
-- about as much as the row itself. Version 2:
--   * looks nodes, blobs and state trie nodes up by the first 8 bytes of
--     their hash (an expression index a quarter of the size, no uniqueness
--     probe); the full hash is compared on every lookup, and verify
--     reports a node hash stored twice;
--   * replaces the per-node session index with `session_runs`: one row per
--     run of consecutive follow numbers that belong to one session, so a
--     bulk append of 10,000 nodes writes one index row, not 10,000, and a
--     timeline is read as rowid ranges.

CREATE TABLE session_runs (
    first   INTEGER PRIMARY KEY,          -- nodes.seq of the run's first node
    last    INTEGER NOT NULL,             -- nodes.seq of its last node
    session TEXT NOT NULL
);
CREATE INDEX session_runs_by_session ON session_runs (session, first);

-- Runs of the existing nodes: within a session, consecutive follow numbers
-- keep `seq - row_number()` constant.
INSERT INTO session_runs (first, last, session)
SELECT min(seq), max(seq), session FROM (
    SELECT seq, session, seq - row_number() OVER (PARTITION BY session ORDER BY seq) AS grp
    FROM nodes
) GROUP BY session, grp;

CREATE TABLE nodes_v2 (
    seq         INTEGER PRIMARY KEY,
    hash        BLOB NOT NULL,
    session     TEXT NOT NULL,
    parent      BLOB,
    kind        INTEGER NOT NULL,
    submission  BLOB,
    sequence    INTEGER,
    sender      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    payload     BLOB NOT NULL,
    payload_len INTEGER NOT NULL,
    diagnostics TEXT NOT NULL,
    state       BLOB,
    created_at  INTEGER NOT NULL,
    ev_branch   TEXT,
    ev_sealed   TEXT,
    ev_nonce    BLOB,
    depth       INTEGER NOT NULL,
    ctx_sub     BLOB,
    ctx_open    INTEGER NOT NULL,
    ctx_seq     INTEGER NOT NULL,
    ctx_state   BLOB,
    payload_id  INTEGER
);
INSERT INTO nodes_v2 SELECT * FROM nodes;
DROP TABLE nodes;
ALTER TABLE nodes_v2 RENAME TO nodes;
CREATE INDEX nodes_by_hash ON nodes (substr(hash, 1, 8));

CREATE TABLE blobs_v2 (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL,                   -- SHA-256 of data
    data BLOB NOT NULL
);
INSERT INTO blobs_v2 SELECT * FROM blobs;
DROP TABLE blobs;
ALTER TABLE blobs_v2 RENAME TO blobs;
CREATE INDEX blobs_by_hash ON blobs (substr(hash, 1, 8));

CREATE TABLE state_nodes_v2 (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL,                   -- SHA-256 of body
    body BLOB NOT NULL
);
INSERT INTO state_nodes_v2 (hash, body) SELECT hash, body FROM state_nodes;
DROP TABLE state_nodes;
ALTER TABLE state_nodes_v2 RENAME TO state_nodes;
CREATE INDEX state_nodes_by_hash ON state_nodes (substr(hash, 1, 8));
