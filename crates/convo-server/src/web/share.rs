//! `convo share` and the session page's "Share": one self-contained HTML
//! file a colleague can open from `file://`, offline, and check.
//!
//! The file carries each node's hash encoding (`docs/HASHING.md`,
//! `node_v1`) as bytes (base64) with the hash the store gave it, and,
//! with content, each distinct payload's bytes once. Its one inline script
//! (assets/share.js) parses every encoding as HASHING.md lays it out,
//! recomputes its SHA-256 with WebCrypto, checks each parent link, each
//! payload against the digest and length its node commits to and each
//! timeline's head, and only then draws the timelines from what it
//! verified: what the page shows is what was hashed. Any changed byte in
//! the data names the node that fails (a badge, and `data-verified` on
//! `<body>` for scripts).
//!
//! Metadata only (the default) keeps every encoding (a node commits to its
//! payload through the payload's SHA-256 and length, so the hashes still
//! verify) and leaves out the payload bytes. A payload holding a
//! credential (`--redact-secrets`, gitleaks' rules in
//! [`convo_core::secrets`]) is shown with the secret replaced and marked as
//! text the hashes do not cover; a payload redacted in the store shows its
//! tombstone, likewise marked.
//!
//! Every string from the store goes through maud's escaping (the data as
//! the text of a hidden element the script reads back); a
//! Content-Security-Policy in the file allows only its own script and
//! style (by SHA-256), so nothing injected into it could run.

use super::*;
use base64::Engine as _;
use convo_core::ContentHash;
use convo_core::secrets::Rules;
use convo_store::TimelineNode;
use std::collections::{HashMap, HashSet};

const SHARE_JS: &str = include_str!("../../assets/share.js");
const SHARE_CSS: &str = include_str!("../../assets/share.css");

/// What to put in the file.
#[derive(Clone, Debug, Default)]
pub struct ShareOptions {
    /// One timeline (`None`: every timeline of the session).
    pub branch: Option<BranchName>,
    /// Carry the payloads' bytes (else metadata only).
    pub content: bool,
    /// Replace credentials found in payloads (gitleaks' rules).
    pub redact_secrets: bool,
}

/// The file and what went into it.
#[derive(Debug)]
pub struct Shared {
    /// The HTML document.
    pub html: String,
    /// The session's id (`ses-…`).
    pub session: String,
    /// Nodes carried.
    pub nodes: usize,
    /// Distinct payloads whose bytes are in the file.
    pub payloads: usize,
    /// Payloads shown with secrets replaced (their bytes left out).
    pub secrets: usize,
    /// Nodes whose hashed fields (diagnostics, ends, names) hold what looks
    /// like a credential: it stays, since the node's hash needs it.
    pub secrets_in_metadata: Vec<String>,
    /// The session's distinct bytes: every node encoding carried plus each
    /// distinct payload's length.
    pub distinct_bytes: u64,
}

/// How a node's payload appears in the file.
enum Carried {
    /// Metadata only: digest and length (in the encoding), no bytes.
    Absent,
    /// Index into the payload list.
    Bytes(usize),
    /// Redacted in the store: its tombstone.
    Tombstone(String),
    /// Secrets replaced: the text shown, and the rules that found them.
    Redacted(String, Vec<&'static str>),
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The `'sha256-…'` source a Content-Security-Policy allows an inline
/// script or style by.
fn csp_hash(text: &str) -> String {
    format!("'sha256-{}'", b64(&convo_core::sha256(text.as_bytes()).0))
}

/// The policy the file carries (and the server sends with it).
pub(super) fn policy() -> String {
    format!(
        "default-src 'none'; script-src {}; style-src {}; img-src data:; base-uri 'none'; form-action 'none'",
        csp_hash(SHARE_JS),
        csp_hash(&style()),
    )
}

fn style() -> String {
    format!("{APP_CSS}\n{VIEWER_CSS}\n{SHARE_CSS}")
}

/// The nodes of the timelines chosen, each once, in the order they were
/// written.
fn gather(
    s: &mut Store,
    row: &SessionRow,
    branch: Option<&BranchName>,
) -> convo_store::Result<(Vec<BranchRow>, Vec<TimelineNode>)> {
    let branches = match branch {
        Some(b) => vec![s.branch(&row.id, b)?],
        None => s.branches(&row.id)?,
    };
    let mut seen = HashSet::new();
    let mut nodes = Vec::new();
    for b in &branches {
        if b.head.is_none() {
            continue;
        }
        for n in s.timeline(&row.id, &b.name)? {
            if seen.insert(n.stored.hash) {
                nodes.push(n);
            }
        }
    }
    nodes.sort_by_key(|n| n.stored.seq);
    Ok((branches, nodes))
}

/// The share file of session `q` (id, prefix or title).
pub fn share(s: &mut Store, q: &str, o: &ShareOptions) -> convo_store::Result<Shared> {
    let row = s.find_session(q)?;
    let (branches, nodes) = gather(s, &row, o.branch.as_ref())?;
    let rules = o.redact_secrets.then(Rules::get);
    let mut payloads: Vec<String> = Vec::new();
    let mut index: HashMap<ContentHash, usize> = HashMap::new();
    let mut lens: HashMap<ContentHash, u64> = HashMap::new();
    let mut records = Vec::with_capacity(nodes.len());
    let mut shared = Shared {
        html: String::new(),
        session: row.id.to_string(),
        nodes: nodes.len(),
        payloads: 0,
        secrets: 0,
        secrets_in_metadata: Vec::new(),
        distinct_bytes: 0,
    };
    for n in &nodes {
        let node = &n.stored.node;
        let enc = convo_core::hash::encode_node(node);
        shared.distinct_bytes += enc.len() as u64;
        lens.insert(node.payload, node.payload_len);
        if let Some(r) = rules {
            let meta = [
                node.from.as_str(),
                node.to.as_str(),
                node.diagnostics.as_str(),
            ];
            if meta.iter().any(|t| !r.find(t).is_empty()) {
                shared.secrets_in_metadata.push(n.stored.hash.to_hex());
            }
        }
        let carried = carry(n, o.content, rules, &mut payloads, &mut index);
        if matches!(carried, Carried::Redacted(..)) {
            shared.secrets += 1;
        }
        let p = match carried {
            Carried::Absent => serde_json::Value::Null,
            Carried::Bytes(i) => i.into(),
            Carried::Tombstone(t) => serde_json::json!({ "t": t }),
            Carried::Redacted(t, r) => serde_json::json!({ "r": t, "rules": r }),
        };
        records.push(serde_json::json!([n.stored.hash.to_hex(), b64(&enc), p]));
    }
    shared.distinct_bytes += lens.values().sum::<u64>();
    shared.payloads = payloads.len();
    let data = serde_json::json!({
        "v": 1,
        "session": row.id.to_string(),
        "content": o.content,
        "branch": o.branch.as_ref().map(BranchName::as_str),
        "branches": branches.iter().map(|b| serde_json::json!({
            "name": b.name.as_str(),
            "head": b.head.map(|h| h.to_hex()),
            "sealed": b.sealed,
        })).collect::<Vec<_>>(),
        "nodes": records,
        "payloads": payloads,
    });
    shared.html = document(&row, o, &data.to_string()).into_string();
    Ok(shared)
}

/// Decides how node `n`'s payload travels, adding its bytes to `payloads`
/// once per distinct content.
fn carry(
    n: &TimelineNode,
    content: bool,
    rules: Option<&Rules>,
    payloads: &mut Vec<String>,
    index: &mut HashMap<ContentHash, usize>,
) -> Carried {
    let node = &n.stored.node;
    if !content {
        return Carried::Absent;
    }
    // The store gives a redacted payload's tombstone instead of its bytes.
    if convo_core::hash::content_hash(&n.payload) != node.payload {
        return Carried::Tombstone(String::from_utf8_lossy(&n.payload).into_owned());
    }
    if let (Some(r), Ok(text)) = (rules, std::str::from_utf8(&n.payload)) {
        let (shown, found) = r.redact(text, "REDACTED");
        if !found.is_empty() {
            return Carried::Redacted(shown, found);
        }
    }
    let at = *index.entry(node.payload).or_insert_with(|| {
        payloads.push(b64(&n.payload));
        payloads.len() - 1
    });
    Carried::Bytes(at)
}

/// The HTML document: the static frame (escaped by maud), the data for the
/// script, the script.
fn document(row: &SessionRow, o: &ShareOptions, data: &str) -> Markup {
    let title = row.title.clone().unwrap_or_else(|| "(untitled)".into());
    let what = match (o.content, o.redact_secrets) {
        (false, _) => {
            "Metadata only: every node's hashes, ends, diagnostics and times, and each payload's SHA-256 and length; no message text."
        }
        (true, false) => {
            "With content: every payload's bytes, checked against the digest its node commits to."
        }
        (true, true) => {
            "With content, credentials replaced: a payload holding one is shown with it replaced, marked as text the hashes do not cover."
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(policy());
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { "\u{2068}" (title) "\u{2069} · convo share" }
                style { (PreEscaped(style())) }
            }
            body {
                a.skip href="#turns" { "Skip to the conversation" }
                header.top {
                    span.brand { "convo" }
                    span #badge .badge-v.pending role="status" { "Verifying…" }
                    button #theme type="button" title="Dark or light theme" { "◐" }
                }
                main {
                    section.session #session {
                        h1 { bdi { (title) } }
                        p.sub {
                            "agent " b { bdi { (row.agent) } } " · " span.mono { (row.id.to_string()) }
                            " · created " (convo_api::time(row.created_at))
                        }
                        p.notice.scope { (what) " The title and agent are labels outside the hashes." }
                        noscript { p.notice { "Checking this file needs JavaScript: nothing here is verified without it." } }
                        div #problems {}
                        nav.timelines #timelines {}
                        p.count #count {}
                        div.turns #turns tabindex="-1" {}
                    }
                }
                footer { "Written by convo share. Each node's hash is recomputed here from the bytes this file carries (docs/HASHING.md)." }
                pre #convo-data hidden { (data) }
                script { (PreEscaped(SHARE_JS)) }
            }
        }
    }
}

/// Which share file the session page's "Share" links ask for.
#[derive(Debug, Deserialize)]
pub(super) struct ShareQuery {
    branch: Option<String>,
    /// `1`: every timeline.
    all: Option<String>,
    /// `1`: with the payloads' bytes.
    content: Option<String>,
    /// `1`: credentials replaced.
    redact: Option<String>,
    /// `1`: as a file to save.
    download: Option<String>,
}

/// `/sessions/{id}/share`: the file `convo share` writes, served with the
/// policy it carries.
pub(super) async fn share_page(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(sq): Query<ShareQuery>,
) -> Response {
    let on = |v: &Option<String>| v.as_deref() == Some("1");
    let branch = if on(&sq.all) {
        None
    } else {
        match BranchName::new(jump::given(&sq.branch).unwrap_or("main")) {
            Ok(b) => Some(b),
            Err(e) => return error_page(StoreError::invalid(e)),
        }
    };
    let o = ShareOptions {
        branch,
        content: on(&sq.content),
        redact_secrets: on(&sq.redact),
    };
    let download = on(&sq.download);
    let shared = match run(&st, move |s| share(s, &q, &o)).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let mut r = html_response(PreEscaped(shared.html));
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("{}; frame-ancestors 'none'", policy())) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    let disposition = format!(
        "{}; filename=\"{}.html\"",
        if download { "attachment" } else { "inline" },
        shared.session
    );
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}
