-- convo SQLite schema: payloads stored whole before schema 8 are chunked
-- in place (convo-store/src/chunk.rs `rechunk`, run by `Store::open`).
--
-- A store made before payloads were chunked keeps every request whole,
-- the history it resends included (292x its distinct bytes). Once this
-- version is reached, the first writer that opens the store re-stores those
-- payloads in chunks, oldest first, a batch per transaction (a kill loses
-- nothing; the next open goes on from the rows still whole), then returns
-- the space (VACUUM). The row keeps its id and address: nodes still commit
-- to the same SHA-256 and read the same bytes. `pending_work` says that
-- work is left; it is emptied when done.
CREATE TABLE pending_work (work TEXT PRIMARY KEY);
INSERT INTO pending_work SELECT 'rechunk'
    WHERE EXISTS (SELECT 1 FROM blobs WHERE chunked = 0 AND length(data) >= 4096);
