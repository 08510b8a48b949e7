-- The turn a harness has open on a timeline (see sqlite/0010_open_turns.sql).
CREATE TABLE open_turns (
    session TEXT NOT NULL,
    branch  TEXT NOT NULL,
    turn    TEXT NOT NULL,
    PRIMARY KEY (session, branch)
);
