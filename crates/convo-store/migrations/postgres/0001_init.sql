-- convo PostgreSQL schema, version 1. Never edit a released migration: add 0002_….sql.
-- Same tables and meaning as migrations/sqlite/0001_init.sql.

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    title      TEXT,
    created_at BIGINT NOT NULL
);

CREATE TABLE blobs (
    id   BIGSERIAL PRIMARY KEY,
    hash BYTEA NOT NULL UNIQUE,
    data BYTEA NOT NULL
);

CREATE TABLE nodes (
    seq         BIGINT PRIMARY KEY,       -- follow cursor: assigned max+1 under the writers' lock
    hash        BYTEA NOT NULL UNIQUE,
    session     TEXT NOT NULL,
    parent      BYTEA,
    kind        SMALLINT NOT NULL,
    submission  BYTEA,
    sequence    BIGINT,
    sender      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    payload     BYTEA NOT NULL,
    payload_len BIGINT NOT NULL,
    diagnostics TEXT NOT NULL,
    state       BYTEA,
    created_at  BIGINT NOT NULL,
    ev_branch   TEXT,
    ev_sealed   TEXT,
    ev_nonce    BYTEA,
    depth       BIGINT NOT NULL,
    ctx_sub     BYTEA,
    ctx_open    BOOLEAN NOT NULL,
    ctx_seq     BIGINT NOT NULL,
    ctx_state   BYTEA
);
CREATE INDEX nodes_by_session ON nodes (session);

CREATE TABLE branches (
    session    TEXT NOT NULL,
    name       TEXT NOT NULL,
    head       BYTEA,
    state      BYTEA,
    sealed     BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session, name)
);

CREATE TABLE state_nodes (
    hash BYTEA PRIMARY KEY,
    body BYTEA NOT NULL
);
