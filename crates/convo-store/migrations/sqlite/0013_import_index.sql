-- The import index of coding agents' transcripts (convo_formats::ledger):
-- what a re-import of a grown transcript (every `convo import --watch`
-- tick) needs without reading the session's nodes.
--
-- `import_keys`: a session's message keys (a Claude Code record's uuid, a
-- Codex line) and the uuids of the records that are not messages, each
-- with the node of the message it is (or leads to).
-- `import_tails`: per session, where its files' stored lines end (line,
-- byte offset, length and checksum of the last one, every line before it
-- stored) and the reader's state there (JSON, convo_formats::records::Tail):
-- a re-import reads only the lines after it.
-- Not nodes, not hashed: derived, rebuilt by the first re-import of a
-- session that has no row here (sessions imported before this version).
CREATE TABLE import_keys (
    session TEXT NOT NULL,
    key     TEXT NOT NULL,
    node    BLOB NOT NULL,
    PRIMARY KEY (session, key)
) WITHOUT ROWID;
CREATE TABLE import_tails (
    session TEXT PRIMARY KEY,
    tail    TEXT NOT NULL
);
