//! The recording format (`--format recording`): one session, every
//! timeline, node for node with its hash, as JSON Lines a reviewer can
//! read and diff. `convo export SESSION --format recording` writes it,
//! `convo import FILE --format recording` reads it back hash-exact (and
//! the pytest plugin keeps each test's calls in one).
//!
//! ```text
//! {"format":"convo.recording.v1","session":{"id":"ses-…","agent":"app","title":"t","created_at":"…"},"branches":[{"name":"main","head":"…","state":null,"sealed":false,"created_at":"…"}]}
//! {"hash":"…","parent":null,"kind":"invoke","submission":"…","sequence":null,"from":"cli","to":"app","created_at":"…","diagnostics":{},"state":null,"event":null,"payload_encoding":"utf8","payload":"hello"}
//! {"state_node":"…","body":"base64…"}
//! {"value":"…","payload_encoding":"utf8","payload":"…"}
//! ```
//!
//! The first line names the format, the session and its branches (by
//! name, each with its head, working state root, seal and creation time).
//! Then one line per node in the order they were appended: the fields of
//! `convo ingest`'s line (`kind`, `from`, `to`, `payload`,
//! `payload_encoding`, `diagnostics`, `state`, `sequence`) plus what an
//! append decides (`hash`, `parent`, `submission`, `created_at`) and, for
//! fork and promote nodes, `event` (`branch`, `sealed_as`, `nonce` in hex).
//! Payloads are text when they are UTF-8, base64 otherwise. Last come the
//! state trie nodes and state values the session's state roots reach, so
//! a state read after an import gives what it gave before.
//!
//! Reading checks every line before anything is written: each node's
//! hash is recomputed from its fields and payload, each state node and
//! value against its address; a line that does not match is refused,
//! naming the line. Writing into a store then checks that every node
//! sits where an append would have put it ([`convo_store::Ledger::insert_exact`]).

use convo_api::{PayloadEncoding, decode_payload, encode_payload, time};
use convo_core::hash::content_hash;
use convo_core::state::{self, MapNode};
use convo_core::{
    BranchName, ContentHash, Diagnostics, Digest, Kind, Millis, Node, NodeHash, SessionId,
    StateRoot, SubmissionId, TimelineEvent,
};
use convo_formats::Error;
use convo_store::backend::{BranchRow, SessionRow, TxNodes};
use convo_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// The first line's `format`.
pub const FORMAT: &str = "convo.recording.v1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    session: SessionLine,
    branches: Vec<BranchLine>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionLine {
    id: String,
    agent: String,
    title: Option<String>,
    created_at: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BranchLine {
    name: String,
    head: Option<String>,
    state: Option<String>,
    sealed: bool,
    created_at: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeLine {
    hash: String,
    parent: Option<String>,
    kind: String,
    submission: Option<String>,
    sequence: Option<u32>,
    from: String,
    to: String,
    created_at: String,
    diagnostics: Value,
    state: Option<String>,
    event: Option<EventLine>,
    payload_encoding: PayloadEncoding,
    payload: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventLine {
    branch: String,
    sealed_as: Option<String>,
    nonce: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateNodeLine {
    state_node: String,
    body: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ValueLine {
    value: String,
    payload_encoding: PayloadEncoding,
    payload: String,
}

/// A recording read and checked, ready to be written into a store.
#[derive(Debug)]
pub struct Recording {
    /// The session.
    pub session: SessionRow,
    /// Its branches, as recorded.
    pub branches: Vec<BranchRow>,
    /// Its nodes in append order, each with its payload.
    pub nodes: Vec<(NodeHash, Node, Vec<u8>)>,
    /// The line of the file each node was read from (from 1).
    pub node_lines: Vec<usize>,
    /// State trie nodes (address, body).
    pub state_nodes: Vec<(Digest, Vec<u8>)>,
    /// State values (address, bytes).
    pub values: Vec<(ContentHash, Vec<u8>)>,
}

/// What [`load`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// The session was written, with this many nodes and branches.
    Created {
        /// Nodes written.
        nodes: usize,
        /// Branches written.
        branches: usize,
    },
    /// The store already held the session with every one of its nodes.
    Existing,
}

/// Writes session `s` (every timeline) as a recording.
pub fn write(store: &mut Store, s: &SessionRow) -> Result<Vec<u8>, StoreError> {
    let branches = store.branches(&s.id)?;
    let nodes = store.read(|tx| tx.session_nodes(&s.id, true))?;
    let mut out = Vec::new();
    let header = Header {
        format: FORMAT.into(),
        session: SessionLine {
            id: s.id.to_string(),
            agent: s.agent.clone(),
            title: s.title.clone(),
            created_at: time(s.created_at),
        },
        branches: branches
            .iter()
            .map(|b| BranchLine {
                name: b.name.as_str().to_owned(),
                head: b.head.map(|h| h.to_hex()),
                state: b.state.map(|r| r.to_hex()),
                sealed: b.sealed,
                created_at: time(b.created_at),
            })
            .collect(),
    };
    push_line(&mut out, &header)?;
    let mut roots: BTreeSet<StateRoot> = branches.iter().filter_map(|b| b.state).collect();
    for (n, payload) in &nodes {
        let payload = payload.as_deref().ok_or_else(|| {
            StoreError::Invalid(
                format!("node {}: its payload is not stored (redacted?); a recording holds every payload", n.hash).into(),
            )
        })?;
        if content_hash(payload) != n.node.payload {
            return Err(StoreError::Invalid(
                format!("node {}: its payload was redacted; a recording holds every payload as recorded", n.hash).into(),
            ));
        }
        roots.extend(n.node.state);
        push_line(&mut out, &node_line(&n.hash, &n.node, payload))?;
    }
    write_state(store, &roots, &mut out)?;
    Ok(out)
}

fn node_line(hash: &NodeHash, n: &Node, payload: &[u8]) -> NodeLine {
    let (text, enc) = encode_payload(payload);
    NodeLine {
        hash: hash.to_hex(),
        parent: n.parent.map(|p| p.to_hex()),
        kind: n.kind.as_str().to_owned(),
        submission: n.submission.map(|s| s.to_hex()),
        sequence: n.sequence,
        from: n.from.clone(),
        to: n.to.clone(),
        created_at: time(n.created_at),
        diagnostics: serde_json::from_str(n.diagnostics.as_str())
            .unwrap_or_else(|_| Value::String(n.diagnostics.as_str().to_owned())),
        state: n.state.map(|r| r.to_hex()),
        event: n.event.as_ref().map(|e| EventLine {
            branch: e.branch.as_str().to_owned(),
            sealed_as: e.sealed_as.as_ref().map(|b| b.as_str().to_owned()),
            nonce: hex::encode(e.nonce),
        }),
        payload_encoding: enc,
        payload: text,
    }
}

/// The state trie nodes and values every root reaches, sorted by address.
fn write_state(
    store: &mut Store,
    roots: &BTreeSet<StateRoot>,
    out: &mut Vec<u8>,
) -> Result<(), StoreError> {
    let mut seen = HashSet::new();
    let mut values = BTreeSet::new();
    store.read(|tx| {
        for root in roots {
            state::verify(&mut TxNodes(tx), root, &mut seen, &mut |v| {
                values.insert(*v);
            })
            .map_err(|e| StoreError::corrupt(format!("state {root}: {e}")))?;
        }
        Ok(())
    })?;
    let empty = state::empty_root().0;
    let mut nodes: Vec<Digest> = seen.into_iter().filter(|h| *h != empty).collect();
    nodes.sort();
    for h in nodes {
        let body = store
            .read(|tx| tx.state_node(&h))?
            .ok_or_else(|| StoreError::corrupt(format!("state node {} is missing", h.to_hex())))?;
        let line = StateNodeLine {
            state_node: h.to_hex(),
            body: base64_encode(&body),
        };
        push_line(out, &line)?;
    }
    for v in values {
        let bytes = store
            .blob(&v)?
            .ok_or_else(|| StoreError::corrupt(format!("state value {v} is missing")))?;
        let (text, enc) = encode_payload(&bytes);
        let line = ValueLine {
            value: v.to_hex(),
            payload_encoding: enc,
            payload: text,
        };
        push_line(out, &line)?;
    }
    Ok(())
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn push_line<T: Serialize>(out: &mut Vec<u8>, line: &T) -> Result<(), StoreError> {
    serde_json::to_writer(&mut *out, line).map_err(StoreError::invalid)?;
    out.push(b'\n');
    Ok(())
}

/// Reads a recording and checks every line (hashes included) without
/// touching a store. `file` names the source in errors.
pub fn read(file: &str, bytes: &[u8]) -> Result<Recording, Error> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::new(file, "encoding", format!("a recording is UTF-8 text: {e}")))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines
        .next()
        .ok_or_else(|| Error::new(file, "empty", "the recording is empty"))?;
    let at =
        |n: usize, rule: &'static str, msg: String| Error::new(file, rule, msg).at_line(n + 1, 1);
    let header: Header = serde_json::from_str(first).map_err(|e| {
        at(
            0,
            "recording-header",
            format!("line 1: not a recording's header: {e}"),
        )
    })?;
    if header.format != FORMAT {
        return Err(at(
            0,
            "recording-header",
            format!(
                "line 1: format `{}`; this convo reads `{FORMAT}`",
                header.format
            ),
        ));
    }
    let session = session_row(&header.session)
        .map_err(|m| at(0, "recording-header", format!("line 1: {m}")))?;
    let mut rec = Recording {
        session,
        branches: Vec::new(),
        nodes: Vec::new(),
        node_lines: Vec::new(),
        state_nodes: Vec::new(),
        values: Vec::new(),
    };
    for (n, line) in lines {
        read_line(&mut rec, line, n + 1)
            .map_err(|m| at(n, "recording-line", format!("line {}: {m}", n + 1)))?;
    }
    for b in &header.branches {
        let row = branch_row(rec.session.id, b).map_err(|m| {
            at(
                0,
                "recording-header",
                format!("line 1: branch `{}`: {m}", b.name),
            )
        })?;
        rec.branches.push(row);
    }
    Ok(rec)
}

fn read_line(rec: &mut Recording, line: &str, number: usize) -> Result<(), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let has = |k: &str| v.get(k).is_some();
    if has("hash") {
        let l: NodeLine = serde_json::from_value(v).map_err(|e| format!("not a node line: {e}"))?;
        let (hash, node, payload) = node_of(&l, &rec.session)?;
        rec.nodes.push((hash, node, payload));
        rec.node_lines.push(number);
    } else if has("state_node") {
        let l: StateNodeLine =
            serde_json::from_value(v).map_err(|e| format!("not a state node line: {e}"))?;
        let h = Digest::from_hex(&l.state_node).map_err(|e| format!("`state_node`: {e}"))?;
        let body = decode_payload(&l.body, PayloadEncoding::Base64)?;
        let ok = MapNode::decode(&body).is_some_and(|m| m.encode() == body && m.hash() == h);
        if !ok {
            return Err(format!(
                "state node {}: the body does not hash to its address (edited?)",
                l.state_node
            ));
        }
        rec.state_nodes.push((h, body));
    } else if has("value") {
        let l: ValueLine =
            serde_json::from_value(v).map_err(|e| format!("not a state value line: {e}"))?;
        let h = ContentHash::from_hex(&l.value).map_err(|e| format!("`value`: {e}"))?;
        let bytes = decode_payload(&l.payload, l.payload_encoding)?;
        if content_hash(&bytes) != h {
            return Err(format!(
                "state value {}: the bytes do not hash to its address (edited?)",
                l.value
            ));
        }
        rec.values.push((h, bytes));
    } else {
        return Err(
            "neither a node (`hash`), a state node (`state_node`) nor a state value (`value`)"
                .into(),
        );
    }
    Ok(())
}

fn node_of(l: &NodeLine, s: &SessionRow) -> Result<(NodeHash, Node, Vec<u8>), String> {
    let hex = |what: &str, v: &str| -> Result<Digest, String> {
        Digest::from_hex(v).map_err(|e| format!("`{what}`: {e}"))
    };
    let payload = decode_payload(&l.payload, l.payload_encoding)?;
    let event = l
        .event
        .as_ref()
        .map(|e| -> Result<TimelineEvent, String> {
            let nonce: [u8; 16] = hex::decode(&e.nonce)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or("`event.nonce` is not 32 hex digits")?;
            Ok(TimelineEvent {
                branch: branch_name(&e.branch)?,
                sealed_as: e.sealed_as.as_deref().map(branch_name).transpose()?,
                nonce,
            })
        })
        .transpose()?;
    let diagnostics = Diagnostics::from_value(&l.diagnostics).map_err(|e| e.to_string())?;
    let node = Node {
        parent: l
            .parent
            .as_deref()
            .map(|p| hex("parent", p).map(NodeHash))
            .transpose()?,
        kind: l.kind.parse::<Kind>().map_err(|e| format!("`kind`: {e}"))?,
        session: s.id,
        submission: l
            .submission
            .as_deref()
            .map(|v| hex("submission", v).map(SubmissionId))
            .transpose()?,
        sequence: l.sequence,
        from: l.from.clone(),
        to: l.to.clone(),
        payload: content_hash(&payload),
        payload_len: payload.len() as u64,
        diagnostics,
        state: l
            .state
            .as_deref()
            .map(|v| hex("state", v).map(StateRoot))
            .transpose()?,
        created_at: millis(&l.created_at)?,
        event,
    };
    let hash = node.hash();
    if hash.to_hex() != l.hash {
        return Err(format!(
            "node {}: its fields and payload hash to {hash}, not to the hash the line names (the line was edited)",
            l.hash
        ));
    }
    Ok((hash, node, payload))
}

fn session_row(s: &SessionLine) -> Result<SessionRow, String> {
    Ok(SessionRow {
        id: s
            .id
            .parse::<SessionId>()
            .map_err(|e| format!("session id: {e}"))?,
        agent: s.agent.clone(),
        title: s.title.clone(),
        created_at: millis(&s.created_at)?,
    })
}

fn branch_row(session: SessionId, b: &BranchLine) -> Result<BranchRow, String> {
    let digest = |v: &str| Digest::from_hex(v).map_err(|e| e.to_string());
    Ok(BranchRow {
        session,
        name: branch_name(&b.name)?,
        head: b
            .head
            .as_deref()
            .map(|h| digest(h).map(NodeHash))
            .transpose()?,
        state: b
            .state
            .as_deref()
            .map(|h| digest(h).map(StateRoot))
            .transpose()?,
        sealed: b.sealed,
        created_at: millis(&b.created_at)?,
    })
}

fn branch_name(s: &str) -> Result<BranchName, String> {
    BranchName::new(s).map_err(|e| format!("branch name `{s}`: {e}"))
}

/// A time as [`time`] writes it (RFC 3339 with milliseconds, or `{ms}ms`).
fn millis(s: &str) -> Result<Millis, String> {
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().map_err(|_| format!("`{s}` is not a time"));
    }
    s.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|e| format!("`{s}` is not an RFC 3339 time: {e}"))
}

/// Writes a recording into `store`, hash-exact, in one transaction. A
/// session the store already holds with every node is left as it is.
pub fn load(store: &mut Store, rec: &Recording) -> Result<Loaded, StoreError> {
    store.transaction(|l| {
        if l.tx().session(&rec.session.id)?.is_some() {
            for (h, _, _) in &rec.nodes {
                if l.tx().node(h)?.is_none() {
                    return Err(StoreError::Invalid(
                        format!("session {} is already in the store with other nodes (node {h} is not); import the recording into another store", rec.session.id).into(),
                    ));
                }
            }
            return Ok(Loaded::Existing);
        }
        l.restore_session(&rec.session)?;
        for (h, body) in &rec.state_nodes {
            l.tx().put_state_node(h, body)?;
        }
        for (h, bytes) in &rec.values {
            l.tx().put_blob(h, bytes)?;
        }
        for (i, (_, node, payload)) in rec.nodes.iter().enumerate() {
            l.insert_exact(node.clone(), payload).map_err(|e| {
                let line = rec.node_lines.get(i).copied().unwrap_or(i + 2);
                StoreError::Invalid(format!("line {line}: {e}").into())
            })?;
        }
        let known: BTreeMap<NodeHash, ()> = rec.nodes.iter().map(|(h, _, _)| (*h, ())).collect();
        for b in &rec.branches {
            if let Some(h) = &b.head
                && !known.contains_key(h)
            {
                return Err(StoreError::Invalid(
                    format!("branch `{}`: its head {h} is not a node of the recording", b.name).into(),
                ));
            }
            l.tx().insert_branch(b)?;
        }
        Ok(Loaded::Created {
            nodes: rec.nodes.len(),
            branches: rec.branches.len(),
        })
    })
}

/// Whether the file at `path` starts like a recording (its first line's
/// `format`), for `convo import --format auto`.
pub fn sniff(path: &std::path::Path) -> bool {
    use std::io::Read as _;
    let mut head = [0u8; 64];
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    let start = format!("{{\"format\":\"{FORMAT}\"");
    head[..n].starts_with(start.as_bytes())
}
