-- The turn a harness (`convo run`, `chat`, `replay`) has open on a
-- timeline, from its invoke to its complete: written in the invoke's
-- transaction and removed in the complete's, so every writer of the
-- timeline (the CLI, `convo serve`, on any machine sharing the store)
-- sees it inside its own write transaction. `turn` is the open turn as
-- JSON (submission, number, agent, holder, host): not a node, not hashed.
CREATE TABLE open_turns (
    session TEXT NOT NULL,
    branch  TEXT NOT NULL,
    turn    TEXT NOT NULL,
    PRIMARY KEY (session, branch)
);
