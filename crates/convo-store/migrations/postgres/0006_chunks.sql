-- convo PostgreSQL schema: payloads stored in content-defined chunks.
-- Same meaning as migrations/sqlite/0008_chunks.sql.
ALTER TABLE blobs ADD COLUMN chunked BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE chunks (
    id   BIGSERIAL PRIMARY KEY,
    hash BYTEA NOT NULL UNIQUE,
    data BYTEA NOT NULL
);
