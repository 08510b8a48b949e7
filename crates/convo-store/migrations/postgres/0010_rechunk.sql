-- Payloads stored whole before schema 6 are chunked in place (see
-- sqlite/0012_rechunk.sql): `pending_work` says that work is left.
CREATE TABLE pending_work (work TEXT PRIMARY KEY);
INSERT INTO pending_work SELECT 'rechunk'
    WHERE EXISTS (SELECT 1 FROM blobs WHERE NOT chunked AND octet_length(data) >= 4096);
