-- How each transcript file looked when its import committed (see
-- sqlite/0015_import_files.sql).
CREATE TABLE import_files (
    path TEXT PRIMARY KEY,
    look TEXT NOT NULL
);
