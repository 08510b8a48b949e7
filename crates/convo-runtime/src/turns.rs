//! Turns nobody can break: what every writer of a timeline checks.
//!
//! A harness (`convo run`, `chat`, `replay`) keeps the turn it has open in
//! the store ([`OpenTurn`], written in the invoke's transaction, removed in
//! the complete's) and holds an OS file lock for it in its lock directory
//! (`$CONVO_HOME/locks`, [`turn_lock_path`]; the row names the file) from
//! invoke to complete.
//! Every other writer ([`guard`], inside its own write transaction) reads
//! the open turn of the timeline it writes:
//!
//! - none: it writes;
//! - one whose holder is gone (on this machine, and the lock file the row
//!   names is free: the kernel released it when the process died): the turn is
//!   closed as interrupted ([`convo_store::Ledger::close_interrupted`]),
//!   then it writes;
//! - otherwise (the holder lives, or runs on another machine sharing a
//!   PostgreSQL store, where its liveness cannot be seen): refused,
//!   [`StoreError::TurnOpen`] naming `BRANCH@TURN` (HTTP 409, exit 4).
//!
//! The row makes the lock visible to every writer of the store; the file
//! lock only tells a live holder from a killed one.

use convo_core::{BranchName, SessionId};
use convo_store::{Ledger, OpenTurn, Result, StoreError};
use std::path::{Path, PathBuf};

/// This machine's name (as an open turn records its holder's).
pub fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The file a harness locks while a turn of `branch` is open, inside the
/// lock directory: the session id and the branch name in hex (whatever a
/// name holds, the file name is safe).
pub fn turn_lock_path(dir: &Path, session: &SessionId, branch: &BranchName) -> PathBuf {
    let hexname: String = branch
        .as_str()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("{session}.{hexname}.turn"))
}

/// Whether the holder of an open turn is gone: it ran on this machine and
/// its turn lock file (named in the row) is not locked, or not there.
/// Unknown (another machine, no file named): not gone.
pub fn holder_gone(turn: &OpenTurn) -> bool {
    if turn.host != this_host() || turn.lock.is_empty() {
        return false;
    }
    let file = match std::fs::File::open(&turn.lock) {
        Ok(f) => f,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    match file.try_lock_shared() {
        Ok(()) => true,
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(_)) => false,
    }
}

/// The check every writer of a timeline makes inside its write
/// transaction (see the module docs): `Ok` to write (after closing a
/// killed holder's turn as interrupted), else [`StoreError::TurnOpen`].
pub fn guard(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    now: convo_core::Millis,
) -> Result<()> {
    let Some(turn) = l.open_turn(session, branch)? else {
        return Ok(());
    };
    if holder_gone(&turn) {
        l.close_interrupted(session, branch, &turn, now)?;
        return Ok(());
    }
    Err(turn_open(session, branch, &turn))
}

/// The refusal naming an open turn.
pub fn turn_open(session: &SessionId, branch: &BranchName, turn: &OpenTurn) -> StoreError {
    StoreError::TurnOpen {
        session: session.to_string(),
        branch: branch.to_string(),
        turn: format!("{branch}@{}", turn.turn),
        holder: if turn.host.is_empty() || turn.host == this_host() {
            turn.holder.clone()
        } else {
            format!("{} on {}", turn.holder, turn.host)
        },
    }
}

/// One write to a timeline's state, as a `kv` call records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateOp {
    /// Set a key to a value.
    Put(String, Vec<u8>),
    /// Remove a key.
    Delete(String),
}

impl StateOp {
    /// The `request` node's diagnostics and payload (the harness's `kv`
    /// calls record the same: `{"op", "key"}`, the value as payload).
    pub fn request(&self) -> (serde_json::Value, Vec<u8>) {
        match self {
            StateOp::Put(k, v) => (serde_json::json!({"op": "put", "key": k}), v.clone()),
            StateOp::Delete(k) => (serde_json::json!({"op": "delete", "key": k}), Vec::new()),
        }
    }

    /// Read back from a recorded `kv` request (`None`: a read, or not a
    /// state write).
    pub fn from_request(diag: &serde_json::Value, payload: &[u8]) -> Option<StateOp> {
        let key = diag.get("key")?.as_str()?.to_owned();
        match diag.get("op")?.as_str()? {
            "put" => Some(StateOp::Put(key, payload.to_vec())),
            "delete" => Some(StateOp::Delete(key)),
            _ => None,
        }
    }
}

/// The diagnostics field marking a turn that is a state write made
/// outside any agent turn ([`state_write`]): replay re-applies it instead
/// of sending its input to the agent.
pub const STATE_WRITE: &str = "state_write";

/// Whether a state write on `branch` is recorded as nodes
/// ([`state_write`]): on a fork (a timeline other than `main` that has
/// history), where a replay must find it. Elsewhere it only moves the
/// working state (the next `complete` carries it).
pub fn records_state_writes(branch: &BranchName, head: Option<convo_core::NodeHash>) -> bool {
    !branch.is_main() && head.is_some()
}

/// A state write made outside an agent's turn (`convo state put/delete`,
/// the API's `PUT/DELETE …/state/KEY`). On a fork it is recorded as the
/// harness records an agent's `kv` calls, so a replay of the fork restores
/// it: inside an open submission (a turn written by hand), a `request`
/// (`user` → `kv`, `{"op", "key"}`, the value) and its `response` (`kv` →
/// `user`, `{"status", "state"}`); otherwise a turn of its own: an
/// `invoke` (`user` → `kv`, payload `state put KEY`, diagnostics
/// `{"state_write": true}`), those two, and a `complete` carrying the new
/// state root. Returns the new root and, for a delete, whether the key
/// existed (`true` for a put).
pub fn state_write(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    ops: &[StateOp],
    now: convo_core::Millis,
) -> Result<(convo_core::StateRoot, bool)> {
    let b = l.branch(session, branch)?;
    if !records_state_writes(branch, b.head) {
        let mut out = (b.state.unwrap_or_else(convo_core::state::empty_root), false);
        for op in ops {
            out = apply(l, session, branch, op)?;
        }
        return Ok(out);
    }
    state_write_turn(l, session, branch, ops, now)
}

fn apply(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    op: &StateOp,
) -> Result<(convo_core::StateRoot, bool)> {
    match op {
        StateOp::Put(k, v) => Ok((l.state_put(session, branch, k, v)?, true)),
        StateOp::Delete(k) => l.state_delete(session, branch, k),
    }
}

/// [`state_write`] recorded as nodes on any timeline (a replay re-applies
/// a recorded state write with it).
pub fn state_write_turn(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    ops: &[StateOp],
    now: convo_core::Millis,
) -> Result<(convo_core::StateRoot, bool)> {
    use convo_core::{Diagnostics, Kind};
    use convo_store::Draft;
    let b = l.branch(session, branch)?;
    let head = b.head.and_then(|h| l.tx().node(&h).ok().flatten());
    let open = head.is_some_and(|h| h.ctx.open);
    let draft =
        |kind: Kind, from: &str, to: &str, payload: Vec<u8>, diag: serde_json::Value| Draft {
            kind,
            from: from.to_owned(),
            to: to.to_owned(),
            payload,
            diagnostics: Diagnostics::from_value(&diag).unwrap_or_else(|_| Diagnostics::empty()),
            state: None,
            sequence: None,
            created_at: now,
        };
    let mark = serde_json::json!({ STATE_WRITE: true });
    if !open {
        let what: Vec<String> = ops
            .iter()
            .map(|op| match op {
                StateOp::Put(k, _) => format!("state put {k}"),
                StateOp::Delete(k) => format!("state delete {k}"),
            })
            .collect();
        l.append(
            session,
            branch,
            &draft(
                Kind::Invoke,
                "user",
                "kv",
                what.join("\n").into_bytes(),
                mark.clone(),
            ),
        )?;
    }
    let mut out = (b.state.unwrap_or_else(convo_core::state::empty_root), false);
    for op in ops {
        let (diag, payload) = op.request();
        let req = l.append(
            session,
            branch,
            &draft(Kind::Request, "user", "kv", payload, diag),
        )?;
        out = apply(l, session, branch, op)?;
        let status = if out.1 { 204 } else { 404 };
        let mut resp = draft(
            Kind::Response,
            "kv",
            "user",
            Vec::new(),
            serde_json::json!({"status": status, "state": out.0.to_hex()}),
        );
        resp.sequence = req.node.sequence;
        l.append(session, branch, &resp)?;
    }
    if !open {
        l.append(
            session,
            branch,
            &draft(Kind::Complete, "kv", "user", Vec::new(), mark),
        )?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_gone_once_its_lock_file_is_free_and_alive_elsewhere() {
        let dir = std::env::temp_dir().join(format!("convo-turns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = SessionId::new_random();
        let b = BranchName::main();
        let path = turn_lock_path(&dir, &s, &b);
        let mut turn = OpenTurn {
            submission: "ab".repeat(32),
            turn: 2,
            agent: "bot".into(),
            holder: "convo run, pid 1".into(),
            host: this_host(),
            lock: path.to_string_lossy().into_owned(),
        };
        // No file: nobody holds it.
        assert!(holder_gone(&turn));
        let f = std::fs::File::create(&path).unwrap();
        f.lock().unwrap();
        assert!(!holder_gone(&turn), "locked: the holder lives");
        f.unlock().unwrap();
        assert!(holder_gone(&turn), "released: the holder died");
        turn.host = "another-machine".into();
        assert!(!holder_gone(&turn), "another machine's holder is not seen");
        let e = turn_open(&s, &b, &turn);
        assert!(e.to_string().contains("inside turn main@2"), "{e}");
        assert!(e.to_string().contains("on another-machine"), "{e}");
        turn.lock.clear();
        turn.host = this_host();
        assert!(!holder_gone(&turn), "no file named: unknown");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
