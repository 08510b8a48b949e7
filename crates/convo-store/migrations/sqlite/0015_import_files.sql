-- How each transcript file looked (size, modification time) when its
-- import committed (convo-cli's `import`): a file that still looks the
-- same is skipped after a `stat`. Kept in the store it describes, so a new
-- or restored store reads every file again and the store's keys decide
-- what is new. Derived, not hashed.
CREATE TABLE import_files (
    path TEXT PRIMARY KEY,
    look TEXT NOT NULL
) WITHOUT ROWID;
