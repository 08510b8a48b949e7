-- convo SQLite schema, version 1. Never edit a released migration: add 0002_….sql.

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,          -- ses-{uuid}
    agent      TEXT NOT NULL,
    title      TEXT,
    created_at INTEGER NOT NULL           -- ms since the Unix epoch, UTC
);

-- Payloads and state values, stored once per distinct content.
CREATE TABLE blobs (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,            -- SHA-256 of data
    data BLOB NOT NULL
);

CREATE TABLE nodes (
    seq         INTEGER PRIMARY KEY,      -- follow cursor: store-wide, gap-free, append order
    hash        BLOB NOT NULL UNIQUE,
    session     TEXT NOT NULL,
    parent      BLOB,
    kind        INTEGER NOT NULL,
    submission  BLOB,
    sequence    INTEGER,
    sender      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    payload     BLOB NOT NULL,            -- blobs.hash
    payload_len INTEGER NOT NULL,
    diagnostics TEXT NOT NULL,            -- RFC 8785 canonical JSON
    state       BLOB,
    created_at  INTEGER NOT NULL,
    ev_branch   TEXT,                     -- fork / promote only
    ev_sealed   TEXT,
    ev_nonce    BLOB,
    -- Derived context (convo_core::timeline::Context); recomputed by verify.
    depth       INTEGER NOT NULL,
    ctx_sub     BLOB,
    ctx_open    INTEGER NOT NULL,
    ctx_seq     INTEGER NOT NULL,
    ctx_state   BLOB,
    -- Read shortcut: blobs.id of the payload, so a timeline joins its
    -- payloads by rowid. `payload` stays authoritative: readers check that
    -- the row found has that hash and fall back to a lookup by hash.
    payload_id  INTEGER
);
CREATE INDEX nodes_by_session ON nodes (session);

CREATE TABLE branches (
    session    TEXT NOT NULL,
    name       TEXT NOT NULL,
    head       BLOB,                      -- NULL until the first node
    state      BLOB,                      -- working state root
    sealed     INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session, name)
);

-- A rowid table, not WITHOUT ROWID: bodies run to ~0.9 KB, far above the
-- ~1/20 of a page SQLite advises for WITHOUT ROWID rows. This way bodies are
-- appended and only the index on the 32-byte hash takes random inserts.
CREATE TABLE state_nodes (
    hash BLOB NOT NULL PRIMARY KEY,
    body BLOB NOT NULL
);
