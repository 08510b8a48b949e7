//! Conversations into the store, and timelines back out.
//!
//! # Import
//!
//! [`import_all`] writes any number of conversations in **one**
//! [`Store::transaction`]: all of them or none. Each becomes a session
//! whose id is [`SessionId::derived`] from the format name and the
//! conversation's own identity (its id in the source, or a hash of its
//! content), so importing the same file twice finds the sessions already
//! there and creates nothing ([`Outcome::Existing`]).
//!
//! Messages become nodes:
//!
//! | message | node | from → to |
//! |---|---|---|
//! | a human's turn ([`Role::User`]) | `invoke` | speaker → agent |
//! | a system prompt ([`Role::System`]) | `invoke`, diagnostics `role: system` | speaker → agent |
//! | a generative participant's turn ([`Role::Assistant`]) | `complete`, model in diagnostics | speaker → caller |
//! | a tool call ([`Role::ToolCall`]) | `request` | speaker → tool |
//! | a tool's answer ([`Role::Tool`]) | `response` | tool → agent |
//!
//! The store only lets a `complete`, `request` or `response` join an open
//! submission (one started by an `invoke`). Where the source has none (it
//! opens with the assistant, or two answers follow each other), an empty
//! `invoke` from `platform` marked `"synthetic": true` is recorded first,
//! and a response with no request before it gets an empty synthetic
//! request; exports skip synthetic nodes.
//!
//! Diagnostics of every node: `role`, `model` when known, `extra` (the
//! format-specific fields that let an export give them back) and, on the
//! session's first node, `conversation` (the conversation-level metadata:
//! CONVO's participants, type, time and unknown keys; clog's header…) and
//! `import` (`{"format": …, "id": …}`: where it came from). `created_at` comes from the file's times when it has them.
//!
//! Timelines: `main` is appended first; every other timeline is a
//! [`Ledger::fork`] at the last node it shares with those already written,
//! then appends. When two timelines share no message at all, the session
//! starts with a synthetic anchor node they fork from.
//!
//! # Export
//!
//! [`export`] reads one timeline back as a linear [`Conversation`], the
//! inverse of the table above, for any [`convo_formats::Writer`].

use convo_core::{BranchName, Diagnostics, HashPrefix, Kind, Millis, NodeHash, SessionId};
use convo_formats::loader::Loader;
use convo_formats::model::{Conversation, Message, Role};
use convo_formats::model::{derived_title, title_of_text};
use convo_formats::records::DETACHED_FROM;
use convo_formats::records::Skeleton;
use convo_store::{Draft, Ledger, SessionRow, Store, StoreError};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// What importing one conversation did.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// A new session.
    Created {
        /// Its id.
        id: SessionId,
        /// Its title.
        title: Option<String>,
        /// Nodes written (fork nodes included).
        nodes: usize,
        /// Timelines written (`main` included).
        branches: usize,
    },
    /// The session was imported before; nothing was written.
    Existing {
        /// Its id.
        id: SessionId,
    },
    /// The session was imported before from a shorter version of the same
    /// file: only the messages whose key was not stored yet were added.
    Updated {
        /// Its id.
        id: SessionId,
        /// Nodes written (fork nodes included).
        nodes: usize,
        /// Timelines created.
        branches: usize,
        /// Source records read but not stored yet: lines written after the
        /// last stored message with no new message to carry them (they go
        /// with the next one).
        pending: usize,
    },
}

impl Outcome {
    /// The session id.
    pub fn id(&self) -> SessionId {
        match self {
            Outcome::Created { id, .. }
            | Outcome::Existing { id }
            | Outcome::Updated { id, .. } => *id,
        }
    }
}

/// The session id a conversation imported as `format` gets.
pub fn session_id(format: &str, conv: &Conversation) -> SessionId {
    let identity = match &conv.id {
        Some(id) => id.clone(),
        None => content_identity(conv),
    };
    session_id_of(format, &identity)
}

/// The session id of a conversation imported as `format` whose own id
/// is `identity`.
pub fn session_id_of(format: &str, identity: &str) -> SessionId {
    SessionId::derived(format!("{format}:{identity}").as_bytes())
}

/// A hash of what a conversation says, for sources without ids.
fn content_identity(conv: &Conversation) -> String {
    let mut buf = Vec::new();
    let mut put = |b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
        buf.extend_from_slice(b);
    };
    put(conv.title.as_deref().unwrap_or("").as_bytes());
    for m in &conv.messages {
        put(&(m.parent.map_or(u64::MAX, |p| p as u64)).to_le_bytes());
        put(m.role.as_str().as_bytes());
        put(m.speaker.as_bytes());
        put(m.text.as_bytes());
    }
    format!("sha256:{}", convo_core::sha256(&buf).to_hex())
}

/// Imports `convs` (each with its format name) in one transaction.
pub fn import_all(
    store: &mut Store,
    convs: &[(&str, &Conversation)],
    agent: Option<&str>,
    now: Millis,
) -> Result<Vec<Outcome>, StoreError> {
    import_all_with_progress(store, convs, agent, now, &mut |_| {})
}

/// [`import_all`], telling `progress` how many conversations are done.
pub fn import_all_with_progress(
    store: &mut Store,
    convs: &[(&str, &Conversation)],
    agent: Option<&str>,
    now: Millis,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Outcome>, StoreError> {
    store.transaction(|l| {
        let mut out = Vec::with_capacity(convs.len());
        let mut seen = HashSet::new();
        for (format, conv) in convs {
            let id = session_id(format, conv);
            if !seen.insert(id) {
                out.push(Outcome::Existing { id });
            } else {
                out.push(import_one(l, format, conv, agent, now)?);
            }
            progress(out.len());
        }
        Ok(out)
    })
}

/// A message a loader could not read again, as the store's error: the
/// error's first line (the loader keeps the whole error for the importer).
fn load_failed(e: convo_formats::Error) -> StoreError {
    let msg = e.render().lines().next().unwrap_or_default().to_owned();
    StoreError::Invalid(msg.into())
}

/// A conversation held whole is its own loader.
struct Whole<'a>(&'a Conversation);

impl Loader for Whole<'_> {
    fn load(&mut self, i: usize, _: &Message) -> convo_formats::Result<Message> {
        Ok(self.0.messages[i].clone())
    }

    fn record_ids(&self, i: usize) -> Vec<(String, u64)> {
        message_records(&self.0.messages[i].extra)
            .iter()
            .map(record_id)
            .collect()
    }
}

/// Imports one conversation inside an open transaction.
pub fn import_one(
    l: &mut Ledger<'_>,
    format: &str,
    conv: &Conversation,
    agent: Option<&str>,
    now: Millis,
) -> Result<Outcome, StoreError> {
    import_lazy(l, format, conv, &mut Whole(conv), agent, now)
}

/// The messages of a conversation being imported, as the ledger places
/// them: a conversation's own messages, or a first pass's compact
/// [`Skeleton`] (which makes each skeleton message when it is asked for).
pub trait Tree {
    /// How many messages.
    fn count(&self) -> usize;
    /// Message `i`'s parent.
    fn parent(&self, i: usize) -> Option<usize>;
    /// Message `i`'s key.
    fn key(&self, i: usize) -> Option<Cow<'_, str>>;
    /// Whether message `i` has a key.
    fn has_key(&self, i: usize) -> bool {
        self.key(i).is_some()
    }
    /// Message `i` (a skeleton: no text).
    fn message(&self, i: usize) -> Cow<'_, Message>;
    /// Message `i`'s role.
    fn role(&self, i: usize) -> Role;
    /// Message `i`'s time.
    fn time(&self, i: usize) -> Option<Millis>;
    /// Orders messages `i` and `j` as their keys' texts.
    fn key_cmp(&self, i: usize, j: usize) -> std::cmp::Ordering {
        self.key(i).cmp(&self.key(j))
    }
}

impl Tree for Vec<Message> {
    fn count(&self) -> usize {
        self.len()
    }
    fn parent(&self, i: usize) -> Option<usize> {
        self[i].parent
    }
    fn key(&self, i: usize) -> Option<Cow<'_, str>> {
        self[i].key.as_deref().map(Cow::Borrowed)
    }
    fn message(&self, i: usize) -> Cow<'_, Message> {
        Cow::Borrowed(&self[i])
    }
    fn role(&self, i: usize) -> Role {
        self[i].role
    }
    fn time(&self, i: usize) -> Option<Millis> {
        self[i].time
    }
}

impl Tree for Skeleton {
    fn count(&self) -> usize {
        self.len()
    }
    fn parent(&self, i: usize) -> Option<usize> {
        Skeleton::parent(self, i)
    }
    fn key(&self, i: usize) -> Option<Cow<'_, str>> {
        Skeleton::key(self, i)
    }
    fn has_key(&self, i: usize) -> bool {
        !self.id(i).is_none()
    }
    fn message(&self, i: usize) -> Cow<'_, Message> {
        Cow::Owned(Skeleton::message(self, i))
    }
    fn role(&self, i: usize) -> Role {
        Skeleton::role(self, i)
    }
    fn time(&self, i: usize) -> Option<Millis> {
        Skeleton::time(self, i)
    }
    fn key_cmp(&self, i: usize, j: usize) -> std::cmp::Ordering {
        self.id(i).cmp_text(&self.id(j), &self.names)
    }
}

/// The messages from a root to `leaf`, in order ([`Conversation::path_to`]
/// over a [`Tree`]).
fn path_in(tree: &dyn Tree, leaf: Option<usize>) -> Vec<usize> {
    let n = tree.count();
    let mut out = Vec::new();
    let mut cur = leaf;
    while let Some(i) = cur {
        if i >= n || out.len() > n {
            break;
        }
        out.push(i);
        cur = tree.parent(i);
    }
    out.reverse();
    out
}

/// The root above `leaf` (the first of [`path_in`]).
fn root_in(tree: &dyn Tree, leaf: Option<usize>) -> Option<usize> {
    let n = tree.count();
    let (mut cur, mut steps, mut root) = (leaf, 0, None);
    while let Some(i) = cur {
        if i >= n || steps > n {
            break;
        }
        root = Some(i);
        cur = tree.parent(i);
        steps += 1;
    }
    root
}

/// Runs `f` over the loader's compact skeleton when it has one (given
/// back after), else over the conversation's messages.
fn with_tree<R>(
    conv: &Conversation,
    loader: &mut dyn Loader,
    f: impl FnOnce(&dyn Tree, &mut dyn Loader) -> R,
) -> R {
    match loader.take_tree() {
        Some(t) => {
            let r = f(&t, loader);
            loader.put_tree(t);
            r
        }
        None => f(&conv.messages, loader),
    }
}

/// Imports one conversation inside an open transaction, loading each
/// message from `loader` just before its node is written and dropping it
/// after: `skeleton` holds the tree (see [`Loader`]; or the loader holds it
/// compact, [`Loader::take_tree`]), so memory follows the largest message,
/// not the conversation. Nodes are written in batches of at most
/// [`BATCH_NODES`] nodes or [`BATCH_BYTES`] bytes. What is kept for the
/// whole session while it is written: per message a flag (written or not)
/// and, for a message with a key, its node's hash (for the import index);
/// the hashes of the messages where timelines part.
pub fn import_lazy(
    l: &mut Ledger<'_>,
    format: &str,
    skeleton: &Conversation,
    loader: &mut dyn Loader,
    agent: Option<&str>,
    now: Millis,
) -> Result<Outcome, StoreError> {
    with_tree(skeleton, loader, |tree, loader| {
        lazy_in(l, format, skeleton, tree, loader, agent, now)
    })
}

fn lazy_in(
    l: &mut Ledger<'_>,
    format: &str,
    conv: &Conversation,
    tree: &dyn Tree,
    loader: &mut dyn Loader,
    agent: Option<&str>,
    now: Millis,
) -> Result<Outcome, StoreError> {
    let id = session_id(format, conv);
    let n = tree.count();
    let keyed = (0..n).any(|i| tree.has_key(i));
    if l.tx().session(&id)?.is_some() {
        if keyed {
            return import_more(l, &id, conv, tree, loader, now, false);
        }
        return Ok(Outcome::Existing { id });
    }
    let (agent, created, title) = create_session_of(l, id, format, conv, tree, agent, now)?;
    let leaves: Vec<Option<usize>> = conv.timelines.iter().map(|t| t.leaf).collect();
    let main_root = leaves.first().and_then(|&leaf| root_in(tree, leaf));
    let anchored = leaves
        .iter()
        .skip(1)
        .any(|&leaf| root_in(tree, leaf).is_some_and(|r| Some(r) != main_root));
    let mut outcome_title = conv.title.clone();
    if outcome_title.is_none() && keyed {
        outcome_title = title.clone();
    }
    let mut w = Lazy {
        id: &id,
        tree,
        agent: &agent,
        created,
        anchored,
        placed: Placed {
            written: vec![false; n],
            at_parting: HashMap::new(),
            keys: Vec::with_capacity((0..n).filter(|&i| tree.has_key(i)).count()),
            parting: parting(tree, &leaves),
        },
        anchor: None,
        names: HashSet::new(),
    };
    let mut nodes = 0;
    let mut branches = 0;
    for (t, leaf) in leaves.iter().enumerate() {
        let path = path_in(tree, *leaf);
        let written = if t == 0 {
            Some(w.main(l, format, conv, &path, loader)?)
        } else {
            w.timeline(l, &conv.timelines[t].name, &path, loader)?
        };
        if let Some(k) = written {
            nodes += k;
            branches += 1;
        }
    }
    let all = w.placed.keys.len() == n;
    write_index_of(l, &id, tree, loader, w.placed.keys, all)?;
    Ok(Outcome::Created {
        id,
        title: outcome_title,
        nodes,
        branches,
    })
}

/// Drafts written before a timeline's messages (none of them a message's).
type Lead = Vec<(Option<usize>, Draft)>;

/// A new session being written from a skeleton ([`lazy_in`]): what is
/// written so far, where a timeline of another root is anchored (the
/// node of the `invoke` that starts `main`, when `anchored`), the branch
/// names taken.
struct Lazy<'a> {
    id: &'a SessionId,
    tree: &'a dyn Tree,
    agent: &'a str,
    created: Millis,
    anchored: bool,
    placed: Placed,
    anchor: Option<NodeHash>,
    names: HashSet<String>,
}

impl Lazy<'_> {
    /// A timeline's start: its cursor, and an `invoke` first when
    /// timelines start from other roots.
    fn start(&self) -> Result<(Cursor, Lead), StoreError> {
        let mut cur = Cursor::start(self.created);
        let mut lead = Vec::new();
        if self.anchored {
            lead.push((
                None,
                synthetic(Kind::Invoke, "platform", self.agent, cur.time)?,
            ));
            cur.open = true;
        }
        Ok((cur, lead))
    }

    /// Writes `main` (the messages of `path`), the conversation's
    /// metadata and source on its first node. The nodes written.
    fn main(
        &mut self,
        l: &mut Ledger<'_>,
        format: &str,
        conv: &Conversation,
        path: &[usize],
        loader: &mut dyn Loader,
    ) -> Result<usize, StoreError> {
        let (cur, lead) = self.start()?;
        let source = json!({"format": format, "id": conv.id});
        let mut meta = Some(&conv.meta);
        let mut first = |d: &mut Draft| {
            if let Some(meta) = meta.take() {
                d.diagnostics = with_conversation(&d.diagnostics, meta, &source)?;
            }
            Ok(())
        };
        self.names.insert("main".into());
        let w = Writing {
            branch: BranchName::main(),
            fork: None,
        };
        let (tree, anchored) = (self.tree, self.anchored);
        let (placed, anchor) = (&mut self.placed, &mut self.anchor);
        w.write(
            l,
            self.id,
            tree,
            self.agent,
            cur,
            lead,
            path,
            loader,
            &mut first,
            &mut |m, s| match m {
                Some(i) => placed.note(tree, i, s.hash),
                None if anchor.is_none() && anchored => *anchor = Some(s.hash),
                None => {}
            },
        )
    }

    /// Writes another timeline (`name`, the messages of `path`) from the
    /// deepest message of it already written (else from the anchor). The
    /// nodes written; `None` when it has nowhere to start.
    fn timeline(
        &mut self,
        l: &mut Ledger<'_>,
        name: &str,
        path: &[usize],
        loader: &mut dyn Loader,
    ) -> Result<Option<usize>, StoreError> {
        let tree = self.tree;
        let (mut cur, _) = self.start()?;
        // The deepest message of this path already in the store.
        let shared = path.iter().rposition(|&i| self.placed.written[i]);
        let (point, rest) = match shared {
            Some(k) => {
                // Where the timeline stands after it, from the skeleton.
                for &i in &path[..=k] {
                    step(self.agent, &mut cur, i, &tree.message(i), &mut Vec::new())?;
                }
                let point = *self.placed.at_parting.get(&path[k]).ok_or_else(|| {
                    StoreError::Invalid("a timeline parts where no hash was kept".into())
                })?;
                (point, &path[k + 1..])
            }
            None => match self.anchor {
                Some(a) => (a, path),
                None => return Ok(None),
            },
        };
        let name = branch_name(name, &mut self.names);
        let w = Writing {
            branch: name,
            fork: Some((point, self.created)),
        };
        let placed = &mut self.placed;
        let nodes = w.write(
            l,
            self.id,
            tree,
            self.agent,
            cur,
            Vec::new(),
            rest,
            loader,
            &mut |_| Ok(()),
            &mut |m, s| {
                if let Some(i) = m {
                    placed.note(tree, i, s.hash);
                }
            },
        )?;
        Ok(Some(nodes))
    }
}

/// Creates the session a conversation is imported into: its agent (the
/// one given, the conversation's, else the format's), when it was created
/// (the conversation's time, its first message's, else `now`) and its
/// title (the conversation's, else its first user message's).
fn create_session_of(
    l: &mut Ledger<'_>,
    id: SessionId,
    format: &str,
    conv: &Conversation,
    tree: &dyn Tree,
    agent: Option<&str>,
    now: Millis,
) -> Result<(String, Millis, Option<String>), StoreError> {
    let n = tree.count();
    let agent = agent
        .map(str::to_owned)
        .or_else(|| conv.agent.clone())
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| format.to_owned());
    let created = conv
        .created_at
        .or_else(|| (0..n).find_map(|i| tree.time(i)))
        .unwrap_or(now);
    let title = conv.title.clone().or_else(|| {
        let first = (0..n).find(|&i| tree.role(i) == Role::User)?;
        title_of_text(&tree.message(first).text)
    });
    l.create_session(id, &agent, title.as_deref(), created)?;
    Ok((agent, created, title))
}

/// Where a later timeline can part from those written: a message with
/// two children or more, or a timeline's last. Only their hashes are
/// kept by message; the others' only with their keys, for the index.
fn parting(tree: &dyn Tree, leaves: &[Option<usize>]) -> HashSet<usize> {
    let n = tree.count();
    let mut children = vec![0u8; n];
    for i in 0..n {
        if let Some(p) = tree.parent(i).filter(|&p| p < n) {
            children[p] = children[p].saturating_add(1);
        }
    }
    let mut set: HashSet<usize> = (0..n).filter(|&i| children[i] >= 2).collect();
    set.extend(leaves.iter().flatten().copied().filter(|&i| i < n));
    set
}

/// What [`import_lazy`] keeps of the nodes it wrote.
struct Placed {
    /// Per message: whether its node is written.
    written: Vec<bool>,
    /// The messages where a later timeline may part from those written.
    parting: HashSet<usize>,
    /// Their nodes.
    at_parting: HashMap<usize, NodeHash>,
    /// The node of every message with a key, for the import index.
    keys: Vec<(u32, NodeHash)>,
}

impl Placed {
    fn note(&mut self, tree: &dyn Tree, m: usize, h: NodeHash) {
        self.written[m] = true;
        if self.parting.contains(&m) {
            self.at_parting.insert(m, h);
        }
        if tree.has_key(m) {
            self.keys.push((m as u32, h));
        }
    }
}

/// At most this many nodes are built before they are written.
pub const BATCH_NODES: usize = 256;
/// At most this many payload and diagnostics bytes are built before they
/// are written (one larger message is written alone).
pub const BATCH_BYTES: usize = 4 << 20;

/// Where [`Writing::write`] appends: a branch, forked first from a node
/// (at the time of its first draft, else the given time) when `fork` is set.
struct Writing {
    branch: BranchName,
    fork: Option<(NodeHash, Millis)>,
}

impl Writing {
    /// Appends `lead`, then the messages of `path` loaded one at a time,
    /// in bounded batches; `first` sees the first draft before it is
    /// written, `done` every node written with the message it records.
    /// Returns the nodes written (the fork included).
    #[allow(clippy::too_many_arguments)]
    fn write(
        mut self,
        l: &mut Ledger<'_>,
        id: &SessionId,
        tree: &dyn Tree,
        agent: &str,
        mut cur: Cursor,
        lead: Vec<(Option<usize>, Draft)>,
        path: &[usize],
        loader: &mut dyn Loader,
        first: &mut dyn FnMut(&mut Draft) -> Result<(), StoreError>,
        done: &mut dyn FnMut(Option<usize>, &convo_store::StoredNode),
    ) -> Result<usize, StoreError> {
        let mut batch: Vec<(Option<usize>, Draft)> = lead;
        // Records stored as payloads of their own, before the batch.
        let mut detached: Vec<Vec<u8>> = Vec::new();
        let mut bytes = 0;
        let mut nodes = 0;
        let mut started = false;
        let mut flush = |this: &mut Self,
                         l: &mut Ledger<'_>,
                         loader: &mut dyn Loader,
                         batch: &mut Vec<(Option<usize>, Draft)>,
                         detached: &mut Vec<Vec<u8>>,
                         started: &mut bool|
         -> Result<(), StoreError> {
            for raw in detached.drain(..) {
                l.put_payload(&raw)?;
            }
            if !*started {
                if let Some((_, d)) = batch.first_mut() {
                    first(d)?;
                }
                *started = true;
            }
            if let Some((point, time)) = this.fork.take() {
                let at = batch.first().map_or(time, |(_, d)| d.created_at);
                let prefix = HashPrefix::parse(&point.to_hex()).map_err(StoreError::invalid)?;
                l.fork(id, &prefix, &this.branch, at)?;
                nodes += 1;
            }
            if batch.is_empty() {
                return Ok(());
            }
            let (msgs, drafts): (Vec<Option<usize>>, Vec<Draft>) = batch.drain(..).unzip();
            let stored = l.append_drafts(id, &this.branch, drafts)?;
            // The huge records left for after their nodes, once their
            // messages' texts are written and dropped.
            while let Some(raw) = loader.next_deferred() {
                l.put_payload(raw.map_err(load_failed)?.as_bytes())?;
            }
            for (m, s) in msgs.into_iter().zip(&stored) {
                done(m, s);
            }
            nodes += stored.len();
            Ok(())
        };
        for &i in path {
            let m = loader.load(i, &tree.message(i)).map_err(load_failed)?;
            let before = (batch.len(), detached.len());
            step_owned(agent, &mut cur, i, m, &mut batch, Some(&mut detached))?;
            bytes += batch[before.0..]
                .iter()
                .map(|(_, d)| d.payload.len() + d.diagnostics.as_str().len())
                .sum::<usize>()
                + detached[before.1..].iter().map(Vec::len).sum::<usize>();
            if batch.len() >= BATCH_NODES || bytes >= BATCH_BYTES {
                flush(
                    &mut self,
                    l,
                    loader,
                    &mut batch,
                    &mut detached,
                    &mut started,
                )?;
                bytes = 0;
            }
        }
        flush(
            &mut self,
            l,
            loader,
            &mut batch,
            &mut detached,
            &mut started,
        )?;
        Ok(nodes)
    }
}

/// The `records` a message carries (see [`convo_formats::records`]): the source
/// lines it was read from, each `{line, raw}` (and `file` for a record of
/// another file of the session).
fn message_records(extra: &Map<String, Value>) -> &[Value] {
    extra
        .get("records")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A record's identity in its session: which file, which line.
fn record_id(r: &Value) -> (String, u64) {
    (
        r.get("file")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        r.get("line").and_then(Value::as_u64).unwrap_or(0),
    )
}

/// Adds to an already imported session the messages of `conv` whose key is
/// not stored yet: each timeline's new part is appended to the branch whose
/// head is the last stored message it shares, or forked from that message
/// (`alt-N`) when no branch ends there. Records the stored messages carry
/// now but did not then (lines written after the last import) go with the
/// first new message.
///
/// With `tail`, `conv` holds only what was written after the lines an
/// earlier import stored ([`import_tail`]): the stored messages are found
/// by key in the import index, not by reading the session's nodes.
/// A stored message's node, context and time, by its import key.
type StoredKeys = HashMap<String, (NodeHash, convo_core::timeline::Context, Millis)>;

/// The stored messages [`import_more`] may go on from, by key, and the
/// record ids stored. With `tail`, only the messages `tree` names (the
/// lines read are all new); else every node of the session, one at a
/// time: of each, only its key, place and record ids are kept (not its
/// diagnostics, as large as the records).
fn stored_keys(
    l: &mut Ledger<'_>,
    id: &SessionId,
    tree: &dyn Tree,
    tail: bool,
) -> Result<(StoredKeys, HashSet<(String, u64)>), StoreError> {
    let mut stored: StoredKeys = HashMap::new();
    let mut have: HashSet<(String, u64)> = HashSet::new();
    if tail {
        for i in 0..tree.count() {
            let Some(k) = tree.key(i) else { continue };
            if stored.contains_key(k.as_ref()) {
                continue;
            }
            if let Some(h) = l.tx().import_key(id, &k)? {
                let n = l.tx().node(&h)?.ok_or_else(|| {
                    StoreError::corrupt(format!("the import index names node {h}, not stored"))
                })?;
                stored.insert(k.into_owned(), (h, n.ctx, n.node.created_at));
            }
        }
    } else {
        l.tx().each_session_node(id, &mut |n| {
            let (key, ids) = stored_ids(n.node.diagnostics.as_str());
            if let Some(k) = key {
                stored.insert(k, (n.hash, n.ctx, n.node.created_at));
            }
            have.extend(ids);
            Ok(())
        })?;
    }
    Ok((stored, have))
}

/// A session's open timelines by the message they go on from (a promoted
/// or forked branch: the message before its promote or fork node), every
/// branch name, and the holder node of bookkeeping records, if any (a
/// session whose first import saw only bookkeeping records keeps them in
/// one holder node, a root; the messages written since start at the root
/// too, sharing no key with it: they go on from it).
#[allow(clippy::type_complexity)]
fn open_heads(
    l: &mut Ledger<'_>,
    id: &SessionId,
) -> Result<
    (
        HashMap<NodeHash, BranchName>,
        HashSet<String>,
        Option<(NodeHash, convo_core::timeline::Context, Millis)>,
    ),
    StoreError,
> {
    let mut heads: HashMap<NodeHash, BranchName> = HashMap::new();
    let mut names: HashSet<String> = HashSet::new();
    for b in l.tx().branches(Some(id))? {
        names.insert(b.name.as_str().to_owned());
        if let (Some(h), false) = (b.head, b.sealed) {
            let head = match l.tx().node(&h)? {
                Some(n) if matches!(n.node.kind, Kind::Promote | Kind::Fork) => {
                    n.node.parent.unwrap_or(h)
                }
                _ => h,
            };
            heads.insert(head, b.name);
        }
    }
    let mut holder = None;
    for h in heads.keys() {
        if let Some(n) = l.tx().node(h)?
            && n.node.parent.is_none()
            && n.node.diagnostics.to_value().pointer("/extra/holder") == Some(&Value::Bool(true))
        {
            holder = Some((*h, n.ctx, n.node.created_at));
            break;
        }
    }
    Ok((heads, names, holder))
}

/// The records of stored messages that are not stored yet (only those
/// messages are read again).
fn orphan_records(
    tree: &dyn Tree,
    loader: &mut dyn Loader,
    stored: &StoredKeys,
    have: &HashSet<(String, u64)>,
) -> Result<Vec<Value>, StoreError> {
    let mut orphans: Vec<Value> = Vec::new();
    for i in 0..tree.count() {
        if tree.key(i).is_some_and(|k| stored.contains_key(k.as_ref()))
            && loader.record_ids(i).iter().any(|r| !have.contains(r))
        {
            let full = loader.load(i, &tree.message(i)).map_err(load_failed)?;
            orphans.extend(
                message_records(&full.extra)
                    .iter()
                    .filter(|r| !have.contains(&record_id(r)))
                    .cloned(),
            );
        }
    }
    Ok(orphans)
}

fn import_more(
    l: &mut Ledger<'_>,
    id: &SessionId,
    conv: &Conversation,
    tree: &dyn Tree,
    loader: &mut dyn Loader,
    now: Millis,
    tail: bool,
) -> Result<Outcome, StoreError> {
    let session = l
        .tx()
        .session(id)?
        .ok_or_else(|| StoreError::Invalid(format!("session {id} vanished").into()))?;
    let (stored, have) = stored_keys(l, id, tree, tail)?;
    let (heads, names, holder) = open_heads(l, id)?;
    // Records of stored messages that are not stored yet (only those
    // messages are read again).
    let orphans = orphan_records(tree, loader, &stored, &have)?;
    let mut more = More {
        id,
        tree,
        agent: &session.agent,
        stored,
        have,
        heads,
        names,
        holder,
        orphans,
        nodes: 0,
        branches: 0,
    };
    let mut active: Option<BranchName> = None;
    for (t, timeline) in conv.timelines.iter().enumerate() {
        let branch = more.timeline(l, loader, timeline.leaf)?;
        if t == 0 {
            active = branch;
        }
    }
    let More {
        stored,
        orphans,
        mut nodes,
        branches,
        ..
    } = more;
    // The transcript's active branch is `main`: a rewind made a new one.
    if let Some(b) = active.filter(|b| !b.is_main()) {
        l.promote(id, &b, now)?;
        nodes += 1;
    }
    if nodes > 0 || !tail {
        let hashes = stored.into_iter().map(|(k, (h, _, _))| (k, h)).collect();
        write_index(l, id, tree, loader, hashes, orphans.is_empty())?;
    }
    if nodes == 0 && orphans.is_empty() {
        return Ok(Outcome::Existing { id: *id });
    }
    Ok(Outcome::Updated {
        id: *id,
        nodes,
        branches,
        pending: orphans.len(),
    })
}

/// A stored message (a timeline's place, its context and time).
type Place = (NodeHash, convo_core::timeline::Context, Millis);

/// What [`import_more`] goes on from: the stored messages by key (those
/// it writes added), the record ids stored, the heads of the open
/// branches, their names, the holder of a session with no message yet,
/// the records of stored messages not stored yet (written with the first
/// new message); what it wrote so far.
struct More<'a> {
    id: &'a SessionId,
    tree: &'a dyn Tree,
    agent: &'a str,
    stored: StoredKeys,
    have: HashSet<(String, u64)>,
    heads: HashMap<NodeHash, BranchName>,
    names: HashSet<String>,
    holder: Option<Place>,
    orphans: Vec<Value>,
    nodes: usize,
    branches: usize,
}

impl More<'_> {
    /// Writes the messages of the timeline to `leaf` after the deepest
    /// one stored (or, in a session with no message yet, after its
    /// holder): onto the branch whose head that is, else a new `alt-N`.
    /// The branch written, `None` when the timeline shares nothing with
    /// what is stored (left for a full re-import) or has nothing new.
    fn timeline(
        &mut self,
        l: &mut Ledger<'_>,
        loader: &mut dyn Loader,
        leaf: Option<usize>,
    ) -> Result<Option<BranchName>, StoreError> {
        let tree = self.tree;
        let key_of = |i: usize| tree.key(i).map(Cow::into_owned);
        let path = path_in(tree, leaf);
        let shared = path
            .iter()
            .rposition(|&i| key_of(i).is_some_and(|k| self.stored.contains_key(&k)));
        let (rest, (point, pctx, ptime)) = match (shared, &self.holder) {
            (Some(k), _) => {
                let Some(point_key) = key_of(path[k]) else {
                    return Ok(None);
                };
                (&path[k + 1..], self.stored[&point_key])
            }
            (None, Some(h)) if path.first().is_some_and(|&i| tree.parent(i).is_none()) => {
                (&path[..], *h)
            }
            // Shares nothing with what is stored: left for a full re-import.
            (None, _) => return Ok(None),
        };
        if rest.is_empty() {
            return Ok(None);
        }
        let start = Cursor::after(&pctx, ptime);
        let (branch, fork) = match self.heads.remove(&point) {
            Some(b) => (b, None),
            None => {
                let name = branch_name(&format!("alt-{}", self.names.len()), &mut self.names);
                self.branches += 1;
                (name, Some((point, ptime)))
            }
        };
        let w = Writing {
            branch: branch.clone(),
            fork,
        };
        let (have, orphans, stored) = (&self.have, &mut self.orphans, &mut self.stored);
        let mut first = |d: &mut Draft| {
            // Records stored already (a holder's, now riding with the first
            // message after them) are not stored twice.
            if shared.is_none() {
                d.diagnostics = without_records(&d.diagnostics, have)?;
            }
            if !orphans.is_empty() {
                d.diagnostics = with_records(&d.diagnostics, std::mem::take(orphans))?;
            }
            Ok(())
        };
        let mut last = None;
        self.nodes += w.write(
            l,
            self.id,
            tree,
            self.agent,
            start,
            Vec::new(),
            rest,
            loader,
            &mut first,
            &mut |m, s| {
                // Later timelines branching from these new nodes need
                // their contexts.
                if let Some(k) = m.and_then(key_of) {
                    stored.insert(k, (s.hash, s.ctx, s.node.created_at));
                }
                last = Some(s.hash);
            },
        )?;
        if let Some(last) = last {
            self.heads.insert(last, branch.clone());
        }
        Ok(Some(branch))
    }
}

/// Imports what was written to a session's files after the lines an
/// earlier import stored: `skeleton` holds the new messages and, as
/// messages whose key is stored, the stored ones they continue from (the
/// reader's [`convo_formats::records::Tail`] says where to start). The session must
/// exist. Reads the import index, not the session's nodes, so its cost
/// follows what is new.
pub fn import_tail(
    l: &mut Ledger<'_>,
    format: &str,
    skeleton: &Conversation,
    loader: &mut dyn Loader,
    now: Millis,
) -> Result<Outcome, StoreError> {
    let id = session_id(format, skeleton);
    with_tree(skeleton, loader, |tree, loader| {
        if tree.count() == 0 {
            return Ok(Outcome::Existing { id });
        }
        import_more(l, &id, skeleton, tree, loader, now, true)
    })
}

/// Writes the import index of a session after an import (for a loader
/// that has a [`Loader::tail`]): `hashes` maps message keys to their
/// nodes (those written, and those stored), the loader's aliases join
/// them, and the tail is kept when every message is stored and
/// `complete` (no line left pending).
fn write_index(
    l: &mut Ledger<'_>,
    id: &SessionId,
    tree: &dyn Tree,
    loader: &dyn Loader,
    hashes: HashMap<String, NodeHash>,
    complete: bool,
) -> Result<(), StoreError> {
    let Some(tail) = loader.tail() else {
        return Ok(());
    };
    let all = complete
        && (0..tree.count()).all(|i| tree.key(i).is_some_and(|k| hashes.contains_key(k.as_ref())));
    let mut keys: Vec<(String, NodeHash)> = loader
        .aliases()
        .into_iter()
        .filter_map(|(a, i)| {
            let h = hashes.get(tree.key(i)?.as_ref())?;
            Some((a, *h))
        })
        .collect();
    keys.extend(hashes);
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    l.tx().put_import_keys(id, &keys)?;
    if all {
        l.tx().set_import_tail(id, &tail)?;
    }
    Ok(())
}

/// How many import keys are made into text and written at a time.
const KEYS_AT_ONCE: usize = 4096;

/// [`write_index`] of a session just written: `keys` are its messages
/// with a key and their nodes (each message once), `all` whether every
/// message is among them. The keys are written in their texts' order (the
/// index's), made into text a few thousand at a time.
fn write_index_of(
    l: &mut Ledger<'_>,
    id: &SessionId,
    tree: &dyn Tree,
    loader: &dyn Loader,
    mut keys: Vec<(u32, NodeHash)>,
    all: bool,
) -> Result<(), StoreError> {
    let Some(tail) = loader.tail() else {
        return Ok(());
    };
    // The aliases' messages' nodes, by message.
    keys.sort_unstable_by_key(|k| k.0);
    let mut aliases: Vec<(String, NodeHash)> = loader
        .aliases()
        .into_iter()
        .filter_map(|(a, i)| {
            let k = keys.binary_search_by_key(&(i as u32), |k| k.0).ok()?;
            Some((a, keys[k].1))
        })
        .collect();
    // A key used twice: the later message's node, as a map by key has.
    keys.sort_unstable_by(|a, b| tree.key_cmp(a.0 as usize, b.0 as usize).then(a.0.cmp(&b.0)));
    for chunk in keys.chunks(KEYS_AT_ONCE) {
        let texts: Vec<(String, NodeHash)> = chunk
            .iter()
            .filter_map(|(i, h)| Some((tree.key(*i as usize)?.into_owned(), *h)))
            .collect();
        l.tx().put_import_keys(id, &texts)?;
    }
    drop(keys);
    aliases.sort_by(|a, b| a.0.cmp(&b.0));
    for chunk in aliases.chunks(KEYS_AT_ONCE) {
        l.tx().put_import_keys(id, chunk)?;
    }
    if all {
        l.tx().set_import_tail(id, &tail)?;
    }
    Ok(())
}

/// A stored node's message key and the `(file, line)` of the records it
/// carries, read without building the records' text (a typed parse that
/// skips `raw`; the value parse when the shape is unexpected).
fn stored_ids(diagnostics: &str) -> (Option<String>, Vec<(String, u64)>) {
    #[derive(serde::Deserialize)]
    struct Diag {
        key: Option<String>,
        extra: Option<Extra>,
    }
    #[derive(serde::Deserialize)]
    struct Extra {
        #[serde(default)]
        records: Vec<Rec>,
    }
    #[derive(serde::Deserialize)]
    struct Rec {
        #[serde(default)]
        file: String,
        #[serde(default)]
        line: u64,
    }
    match serde_json::from_str::<Diag>(diagnostics) {
        Ok(d) => (
            d.key,
            d.extra
                .map(|e| e.records.into_iter().map(|r| (r.file, r.line)).collect())
                .unwrap_or_default(),
        ),
        Err(_) => {
            let diag: Value = serde_json::from_str(diagnostics).unwrap_or(Value::Null);
            let key = diag.get("key").and_then(Value::as_str).map(str::to_owned);
            let ids = match diag.get("extra") {
                Some(Value::Object(extra)) => {
                    message_records(extra).iter().map(record_id).collect()
                }
                _ => Vec::new(),
            };
            (key, ids)
        }
    }
}

/// Adds `records` to a draft's `extra.records`, in line order.
/// `d` without the records whose ids are in `have`.
fn without_records(
    d: &Diagnostics,
    have: &HashSet<(String, u64)>,
) -> Result<Diagnostics, StoreError> {
    let mut v = d.to_value();
    let Some(Value::Array(all)) = v.pointer_mut("/extra/records") else {
        return Ok(d.clone());
    };
    let before = all.len();
    all.retain(|r| !have.contains(&record_id(r)));
    if all.len() == before {
        return Ok(d.clone());
    }
    Diagnostics::from_value(&v).map_err(StoreError::invalid)
}

fn with_records(d: &Diagnostics, mut records: Vec<Value>) -> Result<Diagnostics, StoreError> {
    let mut v = d.to_value();
    if let Some(o) = v.as_object_mut() {
        let extra = o
            .entry("extra")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(e) = extra.as_object_mut() {
            let mut all: Vec<Value> = message_records(e).to_vec();
            all.append(&mut records);
            all.sort_by_key(|r| {
                let (f, l) = record_id(r);
                (f, l)
            });
            e.insert("records".into(), Value::Array(all));
        }
    }
    Diagnostics::from_value(&v).map_err(StoreError::invalid)
}

/// Every source record stored for a session (what its messages carry
/// under `records`), once each, ordered by file and line: an imported
/// transcript's lines, for an export that gives the file back.
pub fn session_records(
    store: &mut Store,
    session: &SessionId,
) -> Result<Vec<(String, u64, String)>, StoreError> {
    store.read(|tx| {
        let nodes = tx.session_nodes(session, false)?;
        let mut out: Vec<(String, u64, String)> = Vec::new();
        let mut seen = HashSet::new();
        for (n, _) in nodes {
            let diag = n.node.diagnostics.to_value();
            if let Some(Value::Object(extra)) = diag.get("extra") {
                for r in message_records(extra) {
                    let (f, l) = record_id(r);
                    if seen.insert((f.clone(), l)) {
                        out.push((f, l, record_raw(tx, r)?));
                    }
                }
            }
        }
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        Ok(out)
    })
}

/// A valid, unused branch name for a timeline.
fn branch_name(want: &str, taken: &mut HashSet<String>) -> BranchName {
    let cleaned: String = want
        .chars()
        .map(|c| {
            if c.is_control() || " ~^:?*[\\/".contains(c) {
                '-'
            } else {
                c
            }
        })
        .collect();
    let mut base = cleaned.trim_matches(['-', '.']).replace("..", "-");
    if base.ends_with(".lock") {
        base.push_str("-1");
    }
    if BranchName::new(&base).is_err() {
        base = "branch".into();
    }
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) || BranchName::new(&name).is_err() {
        name = format!("{base}-{n}");
        n += 1;
    }
    taken.insert(name.clone());
    BranchName::new(&name).unwrap_or_else(|_| BranchName::main())
}

fn with_conversation(
    d: &Diagnostics,
    meta: &Map<String, Value>,
    source: &Value,
) -> Result<Diagnostics, StoreError> {
    let mut v = d.to_value();
    if let Some(o) = v.as_object_mut() {
        if !meta.is_empty() {
            o.insert("conversation".into(), Value::Object(meta.clone()));
        }
        o.insert("import".into(), source.clone());
    }
    Diagnostics::from_value(&v).map_err(StoreError::invalid)
}

/// Where a timeline stands, for mapping more messages onto its end: whether
/// its submission is open, how many requests it made, who invoked it.
#[derive(Clone, Debug)]
pub struct Cursor {
    /// The timeline's submission awaits its `complete`.
    pub open: bool,
    /// Requests recorded in that submission.
    pub requests: u32,
    /// Who the next `complete` answers.
    pub caller: String,
    /// The time a message without one gets.
    pub time: Millis,
}

impl Cursor {
    /// An empty timeline.
    pub fn start(time: Millis) -> Self {
        Cursor {
            open: false,
            requests: 0,
            caller: "user".into(),
            time,
        }
    }

    /// The end of a timeline whose head has context `ctx`.
    pub fn after(ctx: &convo_core::timeline::Context, time: Millis) -> Self {
        Cursor {
            open: ctx.open,
            requests: ctx.last_sequence,
            caller: "user".into(),
            time,
        }
    }
}

/// The drafts that record `messages` at the end of a timeline standing at
/// `cur` (the table in the module docs, synthetic nodes where the store's
/// rules need them), each with the index in `messages` of the message it
/// records. The one mapping from [`Message`]s to nodes: imports and
/// telemetry ([`crate::otel`]) both go through it.
pub fn message_drafts(
    agent: &str,
    cur: &mut Cursor,
    messages: &[&Message],
) -> Result<Vec<(Option<usize>, Draft)>, StoreError> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    for (i, m) in messages.iter().enumerate() {
        step(agent, cur, i, m, &mut out)?;
    }
    Ok(out)
}

fn step(
    agent: &str,
    cur: &mut Cursor,
    i: usize,
    m: &Message,
    out: &mut Vec<(Option<usize>, Draft)>,
) -> Result<(), StoreError> {
    step_owned(agent, cur, i, m.clone(), out, None)
}

/// [`step`], moving the message's text and extra into the draft instead
/// of copying them. With `detached`, the records of [`DETACHED_FROM`]
/// bytes or more move there instead of into the diagnostics
/// ([`detach_records`]): the caller stores them before the draft.
fn step_owned(
    agent: &str,
    cur: &mut Cursor,
    i: usize,
    mut m: Message,
    out: &mut Vec<(Option<usize>, Draft)>,
    detached: Option<&mut Vec<Vec<u8>>>,
) -> Result<(), StoreError> {
    if let Some(sink) = detached {
        detach_records(&mut m.extra, sink);
    }
    cur.time = m.time.unwrap_or(cur.time);
    let time = cur.time;
    let (kind, from, to) = match m.role {
        Role::User | Role::System => {
            cur.open = true;
            cur.requests = 0;
            if m.role == Role::User {
                cur.caller = m.speaker.clone();
            }
            (Kind::Invoke, m.speaker.clone(), agent.to_owned())
        }
        Role::Assistant => {
            if !cur.open {
                out.push((None, synthetic(Kind::Invoke, "platform", agent, time)?));
            }
            cur.open = false;
            (Kind::Complete, m.speaker.clone(), cur.caller.clone())
        }
        Role::ToolCall => {
            if !cur.open {
                out.push((None, synthetic(Kind::Invoke, "platform", agent, time)?));
                cur.open = true;
                cur.requests = 0;
            }
            cur.requests += 1;
            let to = m.to.clone().unwrap_or_else(|| "tool".into());
            (Kind::Request, m.speaker.clone(), to)
        }
        Role::Tool => {
            if !cur.open {
                out.push((None, synthetic(Kind::Invoke, "platform", agent, time)?));
                cur.open = true;
                cur.requests = 0;
            }
            if cur.requests == 0 {
                out.push((None, synthetic(Kind::Request, agent, &m.speaker, time)?));
                cur.requests = 1;
            }
            (Kind::Response, m.speaker.clone(), agent.to_owned())
        }
    };
    let mut diag = Map::new();
    diag.insert("role".into(), json!(m.role.as_str()));
    if let Some(model) = m.model {
        diag.insert("model".into(), json!(model));
    }
    if !m.extra.is_empty() {
        diag.insert("extra".into(), Value::Object(m.extra));
    }
    if let Some(key) = m.key {
        diag.insert("key".into(), json!(key));
    }
    let diagnostics = canonical(Value::Object(diag))?;
    out.push((
        Some(i),
        Draft {
            kind,
            from,
            to,
            payload: m.text.into_bytes(),
            diagnostics,
            state: None,
            sequence: None,
            created_at: time,
        },
    ));
    Ok(())
}

/// Moves the raw bytes of each record in `extra.records` of
/// [`DETACHED_FROM`] bytes or more into `blobs`, leaving their hash and
/// length ([`record_raw`] reads them back).
fn detach_records(extra: &mut Map<String, Value>, blobs: &mut Vec<Vec<u8>>) {
    let Some(Value::Array(recs)) = extra.get_mut("records") else {
        return;
    };
    for r in recs {
        let Some(o) = r.as_object_mut() else {
            continue;
        };
        let large = o
            .get("raw")
            .and_then(Value::as_str)
            .is_some_and(|raw| raw.len() >= DETACHED_FROM);
        if !large {
            continue;
        }
        if let Some(Value::String(raw)) = o.remove("raw") {
            let h = convo_core::hash::content_hash(raw.as_bytes());
            o.insert("blob".into(), json!(h.to_hex()));
            o.insert("bytes".into(), json!(raw.len()));
            blobs.push(raw.into_bytes());
        }
    }
}

/// A stored record's raw bytes: its `raw`, or the payload its `blob` names
/// ([`DETACHED_FROM`]), read in `tx`. A named payload that is missing or
/// not UTF-8 is an error naming the record.
fn record_raw(tx: &mut dyn convo_store::Tx, r: &Value) -> Result<String, StoreError> {
    if let Some(raw) = r.get("raw").and_then(Value::as_str) {
        return Ok(raw.to_owned());
    }
    let Some(hex) = r.get("blob").and_then(Value::as_str) else {
        return Ok(String::new());
    };
    let (file, line) = record_id(r);
    let what = || format!("record {file}:{line} (payload {hex})");
    let h = convo_core::ContentHash::from_hex(hex)
        .map_err(|e| StoreError::corrupt(format!("{}: {e}", what())))?;
    let bytes = tx
        .blob(&h)?
        .ok_or_else(|| StoreError::corrupt(format!("{}: not stored", what())))?;
    String::from_utf8(bytes).map_err(|_| StoreError::corrupt(format!("{}: not UTF-8", what())))
}

/// [`Diagnostics::from_value`] (the same canonical text), dropping the
/// value before the text is kept and keeping the text no larger than it
/// is: a message's diagnostics carry its source records, as large as the
/// message.
fn canonical(v: Value) -> Result<Diagnostics, StoreError> {
    let mut text = convo_core::json::canonical(&v).map_err(StoreError::invalid)?;
    drop(v);
    text.shrink_to_fit();
    Ok(Diagnostics::from_stored(text))
}

fn synthetic(kind: Kind, from: &str, to: &str, at: Millis) -> Result<Draft, StoreError> {
    Ok(Draft {
        kind,
        from: from.to_owned(),
        to: to.to_owned(),
        payload: Vec::new(),
        diagnostics: Diagnostics::from_value(&json!({"synthetic": true}))
            .map_err(StoreError::invalid)?,
        state: None,
        sequence: None,
        created_at: at,
    })
}

/// The message a node records, read back (the inverse of
/// [`message_drafts`]); `None` for a fork, a promote or a synthetic node.
pub fn node_message(node: &convo_core::Node, payload: &[u8]) -> Option<Message> {
    if matches!(node.kind, Kind::Fork | Kind::Promote) {
        return None;
    }
    let diag = node.diagnostics.to_value();
    if diag.get("synthetic") == Some(&Value::Bool(true)) {
        return None;
    }
    let role = match node.kind {
        Kind::Invoke if diag.get("role").and_then(Value::as_str) == Some("system") => Role::System,
        Kind::Invoke => Role::User,
        Kind::Complete => Role::Assistant,
        Kind::Request => Role::ToolCall,
        _ => Role::Tool,
    };
    let mut m = Message::new(role, node.from.clone(), String::from_utf8_lossy(payload))
        .at(Some(node.created_at))
        .with_model(diag.get("model").and_then(Value::as_str).map(str::to_owned));
    if role == Role::ToolCall {
        m.to = Some(node.to.clone());
    }
    if let Some(Value::Object(extra)) = diag.get("extra") {
        m.extra = extra.clone();
    }
    m.key = diag.get("key").and_then(Value::as_str).map(str::to_owned);
    Some(m)
}

/// Reads one timeline of a session back as a linear conversation.
pub fn export(
    store: &mut Store,
    session: &SessionRow,
    branch: &BranchName,
) -> Result<Conversation, StoreError> {
    let nodes = store.timeline(&session.id, branch)?;
    // A call received as telemetry leaves its details to the kept export
    // body: the message carries them whole, read back from it.
    let refs: Vec<_> = nodes
        .iter()
        .map(|n| (&n.stored, n.payload.as_slice()))
        .collect();
    let otel = crate::otel::ingest::resolve_kept(store, &refs)?;
    let mut messages = Vec::with_capacity(nodes.len());
    let mut meta: Option<Map<String, Value>> = None;
    for (n, o) in nodes.iter().zip(otel) {
        let node = &n.stored.node;
        if meta.is_none()
            && !matches!(node.kind, Kind::Fork | Kind::Promote)
            && let Some(Value::Object(c)) = node.diagnostics.to_value().get("conversation")
        {
            meta = Some(c.clone());
        }
        if let Some(mut m) = node_message(node, &n.payload) {
            if let Some(o) = o
                && m.extra
                    .get("otel")
                    .is_none_or(crate::otel::ingest::left_to_body)
            {
                m.extra.insert("otel".into(), o);
            }
            messages.push(m);
        }
    }
    let mut conv = Conversation::linear(messages);
    conv.id = Some(session.id.to_string());
    // A title the import derived from the first user message (the file had
    // none) is not written back, so an export stays the file imported.
    conv.title = session
        .title
        .clone()
        .filter(|t| Some(t) != derived_title(&conv).as_ref());
    conv.agent = Some(session.agent.clone());
    conv.created_at = Some(session.created_at);
    if let Some(m) = meta {
        conv.meta = m;
    }
    Ok(conv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_diagnostics_are_the_canonical_text() {
        let v = json!({"cost": 0.1, "b": [1, "x\n"], "a": {}});
        assert_eq!(
            canonical(v.clone()).expect("canonical").as_str(),
            Diagnostics::from_value(&v).expect("canonical").as_str()
        );
    }

    #[test]
    fn branch_names_are_made_valid_and_unique() {
        let mut taken = HashSet::new();
        taken.insert("main".to_owned());
        assert_eq!(branch_name("alt-1", &mut taken).as_str(), "alt-1");
        assert_eq!(branch_name("alt-1", &mut taken).as_str(), "alt-1-2");
        assert_eq!(
            branch_name("my thread/x", &mut taken).as_str(),
            "my-thread-x"
        );
        assert_eq!(branch_name("..", &mut taken).as_str(), "branch");
        assert_eq!(branch_name("main", &mut taken).as_str(), "main-2");
    }
}

/// A transcript's stored session and where its stored lines end
/// ([`stored_tail`]).
#[derive(Debug)]
pub struct StoredTail {
    /// The agent's own id of the session (the conversation's `id`).
    pub identity: String,
    /// The convo session it was imported as.
    pub session: convo_core::SessionId,
    /// Where its stored lines end, and the reader's state there.
    pub tail: convo_formats::records::Tail,
}

/// The stored session a transcript continues and where its stored lines
/// end (its import tail, `ImportTx::import_tail`), when the store has
/// both: what a re-import reads from, with `convo_formats::open_tail`.
pub fn stored_tail(
    tx: &mut dyn convo_store::Tx,
    format: &str,
    path: &std::path::Path,
) -> std::result::Result<Option<StoredTail>, convo_store::StoreError> {
    let Some(identity) = convo_formats::session_identity(format, path) else {
        return Ok(None);
    };
    let session = session_id_of(format, &identity);
    Ok(tx
        .import_tail(&session)?
        .and_then(|t| convo_formats::records::Tail::parse(format, &t))
        .map(|tail| StoredTail {
            identity,
            session,
            tail,
        }))
}
