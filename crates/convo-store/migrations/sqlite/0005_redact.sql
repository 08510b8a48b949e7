-- convo SQLite schema: redaction (`convo redact`).
--
-- A redacted payload's row leaves `blobs`; its redaction is a fact in the
-- journal (type 4, docs/HASHING.md). This table indexes those facts by
-- digest so a reader finds the tombstone without scanning the journal;
-- verify checks it against the journal.
CREATE TABLE redactions (
    hash BLOB PRIMARY KEY,                -- SHA-256 of the erased bytes
    fact INTEGER NOT NULL                 -- facts.seq of the redaction fact
);
