-- convo PostgreSQL schema, version 2: the fact journal (convo_core::fact).
-- Same table and meaning as migrations/sqlite/0003_facts.sql.
CREATE TABLE facts (
    seq  BIGINT PRIMARY KEY,
    hash BYTEA NOT NULL,
    body BYTEA NOT NULL
);
