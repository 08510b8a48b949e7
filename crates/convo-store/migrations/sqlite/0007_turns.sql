-- Each node's turn number (the invokes from its session's first node to it,
-- inclusive), stored with its context so a page of a long timeline need not
-- count the turns before it. Existing nodes are numbered down their trees.
ALTER TABLE nodes ADD COLUMN ctx_turn INTEGER NOT NULL DEFAULT 0;
CREATE INDEX nodes_by_parent_once ON nodes (parent);
CREATE TEMP TABLE turns_once (hash BLOB PRIMARY KEY, turn INTEGER NOT NULL);
INSERT OR IGNORE INTO turns_once
WITH RECURSIVE t(hash, turn) AS (
    SELECT hash, kind = 1 FROM nodes WHERE parent IS NULL
    UNION ALL
    SELECT n.hash, t.turn + (n.kind = 1) FROM t JOIN nodes n ON n.parent = t.hash
)
SELECT hash, turn FROM t WHERE turn <> 0;
UPDATE nodes SET ctx_turn = (SELECT turn FROM turns_once o WHERE o.hash = nodes.hash)
WHERE hash IN (SELECT hash FROM turns_once);
DROP TABLE turns_once;
DROP INDEX nodes_by_parent_once;
