-- convo PostgreSQL schema: redaction.
-- Same table and meaning as migrations/sqlite/0005_redact.sql.
CREATE TABLE redactions (
    hash BYTEA PRIMARY KEY,
    fact BIGINT NOT NULL
);
