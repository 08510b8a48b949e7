-- Each node's turn number (the invokes from its session's first node to it,
-- inclusive), stored with its context so a page of a long timeline need not
-- count the turns before it. Existing nodes are numbered down their trees.
ALTER TABLE nodes ADD COLUMN ctx_turn BIGINT NOT NULL DEFAULT 0;
CREATE INDEX nodes_by_parent_once ON nodes (parent);
WITH RECURSIVE t(hash, turn) AS (
    SELECT hash, CASE WHEN kind = 1 THEN 1::bigint ELSE 0 END FROM nodes WHERE parent IS NULL
    UNION ALL
    SELECT n.hash, t.turn + CASE WHEN n.kind = 1 THEN 1 ELSE 0 END FROM t JOIN nodes n ON n.parent = t.hash
)
UPDATE nodes SET ctx_turn = t.turn FROM t WHERE nodes.hash = t.hash AND t.turn <> 0;
DROP INDEX nodes_by_parent_once;
