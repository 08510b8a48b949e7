//! Test support for convo's crates (a dev-dependency, never published).
//!
//! The contract every backend must honour, as test functions taking a
//! fresh store, and the one way tests choose a backend: [`Backend`] and
//! [`for_each_backend!`], which makes one test per case and backend. A new
//! backend adds a variant there, not new tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use convo_core::state::empty_root;
use convo_core::{BranchName, Diagnostics, HashPrefix, Kind, NodeHash, SessionId};
use convo_store::{Draft, Store, StoreError};

/// A draft with sensible defaults, for tests and benchmarks.
pub fn draft(kind: Kind, payload: &str, t: i64) -> Draft {
    let (from, to) = match kind {
        Kind::Invoke => ("cli", "agent"),
        Kind::Request => ("agent", "infer"),
        Kind::Response => ("infer", "agent"),
        _ => ("agent", "cli"),
    };
    Draft {
        kind,
        from: from.into(),
        to: to.into(),
        payload: payload.as_bytes().to_vec(),
        diagnostics: Diagnostics::empty(),
        state: None,
        sequence: None,
        created_at: t,
    }
}

fn main() -> BranchName {
    BranchName::main()
}

fn b(n: &str) -> BranchName {
    BranchName::new(n).unwrap()
}

fn p(h: &NodeHash) -> HashPrefix {
    HashPrefix::parse(&h.to_hex()).unwrap()
}

/// Appends a full turn (invoke, request, response, complete) and returns the hashes.
pub fn turn(s: &mut Store, ses: &SessionId, br: &BranchName, text: &str, t: i64) -> Vec<NodeHash> {
    [Kind::Invoke, Kind::Request, Kind::Response, Kind::Complete]
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            s.transaction(|l| l.append(ses, br, &draft(k, &format!("{text}/{k}"), t + i as i64)))
                .unwrap()
                .hash
        })
        .collect()
}

pub fn sessions_are_found_by_id_prefix_and_title(s: &mut Store) {
    let a = s
        .transaction(|l| l.new_session("researcher", Some("Paris trip"), 1))
        .unwrap();
    let b2 = s
        .transaction(|l| l.new_session("researcher", None, 2))
        .unwrap();
    assert_eq!(s.find_session(&a.id.to_string()).unwrap(), a);
    assert_eq!(s.find_session(&a.id.0.to_string()[..8]).unwrap(), a);
    assert_eq!(
        s.find_session(&format!("ses-{}", &b2.id.0.to_string()[..8]))
            .unwrap(),
        b2
    );
    assert_eq!(s.find_session("Paris trip").unwrap(), a);
    assert!(matches!(
        s.find_session("nope"),
        Err(StoreError::NoSession(_))
    ));
    assert_eq!(s.sessions().unwrap().len(), 2);
    let br = s.branches(&a.id).unwrap();
    assert_eq!(br.len(), 1);
    assert!(br[0].name.is_main() && br[0].head.is_none());
}

pub fn a_turn_chains_numbers_and_submits(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let h = turn(s, &ses, &main(), "hello", 10);
    let tl = s.timeline(&ses, &main()).unwrap();
    assert_eq!(tl.iter().map(|n| n.stored.hash).collect::<Vec<_>>(), h);
    assert_eq!(tl[0].stored.node.parent, None);
    for w in tl.windows(2) {
        assert_eq!(w[1].stored.node.parent, Some(w[0].stored.hash));
    }
    let sub = tl[0]
        .stored
        .node
        .submission
        .expect("invoke has a submission");
    assert!(tl.iter().all(|n| n.stored.node.submission == Some(sub)));
    assert_eq!(tl[1].stored.node.sequence, Some(1));
    assert_eq!(tl[2].stored.node.sequence, Some(1));
    assert_eq!(tl[3].stored.node.sequence, None);
    assert_eq!(tl[0].payload, b"hello/invoke");
    // A second request is numbered 2, and the next invoke chains its submission.
    let h2 = turn(s, &ses, &main(), "again", 20);
    let n2 = s.node(&p(&h2[0])).unwrap();
    assert_ne!(n2.node.submission, Some(sub));
    assert_eq!(s.branch(&ses, &main()).unwrap().head, Some(h2[3]));
    assert_eq!(n2.ctx.depth, 5);
}

pub fn rule_violations_write_nothing(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let err = s
        .transaction(|l| l.append(&ses, &main(), &draft(Kind::Request, "x", 1)))
        .unwrap_err();
    assert!(matches!(err, StoreError::Rule(_)), "{err}");
    let err = s
        .transaction(|l| l.append(&ses, &main(), &draft(Kind::Fork, "x", 1)))
        .unwrap_err();
    assert!(matches!(err, StoreError::Rule(_)), "{err}");
    assert!(s.follow(0, 10).unwrap().is_empty());
    let err = s
        .transaction(|l| l.append(&ses, &b("nope"), &draft(Kind::Invoke, "x", 1)))
        .unwrap_err();
    assert!(matches!(err, StoreError::NoBranch { .. }), "{err}");
    // A batch with one bad draft in the middle writes none of it.
    let batch = [draft(Kind::Invoke, "a", 1), draft(Kind::Response, "b", 2)];
    assert!(
        s.transaction(|l| l.append_many(&ses, &main(), &batch))
            .is_err()
    );
    assert!(s.follow(0, 10).unwrap().is_empty());
    assert_eq!(s.branch(&ses, &main()).unwrap().head, None);
}

pub fn same_input_in_same_context_has_same_submission(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let first = turn(s, &ses, &main(), "one", 10);
    s.transaction(|l| l.fork(&ses, &p(&first[3]), &b("alt"), 20))
        .unwrap();
    let a = s
        .transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, "same", 30)))
        .unwrap();
    let c = s
        .transaction(|l| l.append(&ses, &b("alt"), &draft(Kind::Invoke, "same", 31)))
        .unwrap();
    assert_eq!(a.node.submission, c.node.submission);
    assert_ne!(a.hash, c.hash);
}

pub fn fork_shares_history_and_restores_state(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    s.transaction(|l| l.state_put(&ses, &main(), "todo", b"milk"))
        .unwrap();
    let t1 = turn(s, &ses, &main(), "one", 10);
    let root1 = s
        .node(&p(&t1[3]))
        .unwrap()
        .node
        .state
        .expect("complete carries the branch state");
    s.transaction(|l| l.state_put(&ses, &main(), "todo", b"eggs"))
        .unwrap();
    let t2 = turn(s, &ses, &main(), "two", 20);
    let root2 = s.node(&p(&t2[3])).unwrap().node.state.unwrap();
    assert_ne!(root1, root2);

    let prefix = HashPrefix::parse(&t1[3].to_hex()[..10]).unwrap();
    let fork = s
        .transaction(|l| l.fork(&ses, &prefix, &b("fix"), 30))
        .unwrap();
    assert_eq!(fork.node.kind, Kind::Fork);
    assert_eq!(fork.node.parent, Some(t1[3]));
    let fork_state = s.state_root(&ses, &b("fix"), None).unwrap();
    assert_eq!(
        fork_state, root1,
        "the fork starts from the fork point's state"
    );
    assert_eq!(
        s.state_get(&fork_state, "todo").unwrap().as_deref(),
        Some(&b"milk"[..])
    );
    let tl = s.timeline(&ses, &b("fix")).unwrap();
    assert_eq!(tl.len(), 5);
    assert_eq!(
        tl[..4].iter().map(|n| n.stored.hash).collect::<Vec<_>>(),
        t1
    );
    assert_eq!(
        s.timeline(&ses, &main()).unwrap().len(),
        8,
        "main is untouched"
    );
    // State read as of any node.
    let at = s.state_root(&ses, &main(), Some(&p(&t2[0]))).unwrap();
    assert_eq!(at, root1);
    assert_eq!(
        s.state_root(&ses, &main(), Some(&p(&t1[0]))).unwrap(),
        empty_root()
    );

    let err = s
        .transaction(|l| l.fork(&ses, &prefix, &b("fix"), 31))
        .unwrap_err();
    assert!(matches!(err, StoreError::BranchExists { .. }), "{err}");
    let err = s
        .transaction(|l| {
            l.fork(
                &ses,
                &HashPrefix::parse("0000000000000000").unwrap(),
                &b("x"),
                31,
            )
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::NoNode(_)), "{err}");
    let other = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let err = s
        .transaction(|l| l.fork(&other, &prefix, &b("x"), 31))
        .unwrap_err();
    assert!(matches!(err, StoreError::WrongSession { .. }), "{err}");
}

pub fn promote_seals_main_and_renames(s: &mut Store) {
    let day = 1_770_993_005_000; // 2026-02-13
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let t1 = turn(s, &ses, &main(), "one", day);
    let t2 = turn(s, &ses, &main(), "two", day + 10);
    s.transaction(|l| l.fork(&ses, &p(&t1[3]), &b("fix"), day + 20))
        .unwrap();
    let t3 = turn(s, &ses, &b("fix"), "two-b", day + 30);
    let pr = s
        .transaction(|l| l.promote(&ses, &b("fix"), day + 40))
        .unwrap();
    assert_eq!(pr.sealed_as.as_str(), "broken-2026-02-13");
    assert_eq!(pr.node.node.kind, Kind::Promote);
    assert_eq!(pr.node.node.parent, Some(t3[3]));
    let names: Vec<_> = s
        .branches(&ses)
        .unwrap()
        .into_iter()
        .map(|b| (b.name.to_string(), b.sealed))
        .collect();
    assert_eq!(
        names,
        vec![("broken-2026-02-13".into(), true), ("main".into(), false)]
    );
    let sealed = s.timeline(&ses, &b("broken-2026-02-13")).unwrap();
    assert_eq!(
        sealed.last().unwrap().stored.hash,
        t2[3],
        "the sealed timeline keeps its history"
    );
    let err = s
        .transaction(|l| {
            l.append(
                &ses,
                &b("broken-2026-02-13"),
                &draft(Kind::Invoke, "x", day + 50),
            )
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Sealed { .. }), "{err}");
    let err = s
        .transaction(|l| l.state_put(&ses, &b("broken-2026-02-13"), "k", b"v"))
        .unwrap_err();
    assert!(matches!(err, StoreError::Sealed { .. }), "{err}");
    assert!(matches!(
        s.transaction(|l| l.promote(&ses, &main(), day))
            .unwrap_err(),
        StoreError::PromoteMain
    ));
    // Main continues from the promote node.
    let next = s
        .transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, "three", day + 60)))
        .unwrap();
    assert_eq!(next.node.parent, Some(pr.node.hash));
    // A second promote on the same day gets a suffix.
    s.transaction(|l| l.fork(&ses, &p(&t1[0]), &b("again"), day + 70))
        .unwrap();
    let pr2 = s
        .transaction(|l| l.promote(&ses, &b("again"), day + 80))
        .unwrap();
    assert_eq!(pr2.sealed_as.as_str(), "broken-2026-02-13-2");
    assert!(s.verify().unwrap().is_clean());
}

pub fn fork_and_promote_events_never_share_a_hash(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let t = turn(s, &ses, &main(), "one", 10);
    let f1 = s
        .transaction(|l| l.fork(&ses, &p(&t[1]), &b("x"), 100))
        .unwrap();
    let p1 = s.transaction(|l| l.promote(&ses, &b("x"), 100)).unwrap();
    let f2 = s
        .transaction(|l| l.fork(&ses, &p(&t[1]), &b("x"), 100))
        .unwrap();
    let p2 = s.transaction(|l| l.promote(&ses, &b("x"), 100)).unwrap();
    assert_ne!(f1.hash, f2.hash);
    assert_ne!(p1.node.hash, p2.node.hash);
}

pub fn complete_carries_explicit_or_branch_state(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    s.transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, "a", 1)))
        .unwrap();
    let c = s
        .transaction(|l| l.append(&ses, &main(), &draft(Kind::Complete, "b", 2)))
        .unwrap();
    assert_eq!(c.node.state, None, "no state written yet: nothing to carry");
    let r1 = s
        .transaction(|l| l.state_put(&ses, &main(), "k", b"v1"))
        .unwrap();
    let r2 = s
        .transaction(|l| l.state_put(&ses, &main(), "k", b"v2"))
        .unwrap();
    let (r3, existed) = s
        .transaction(|l| l.state_delete(&ses, &main(), "k"))
        .unwrap();
    assert!(existed);
    assert_eq!(r3, empty_root());
    s.transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, "c", 3)))
        .unwrap();
    let mut d = draft(Kind::Complete, "d", 4);
    d.state = Some(r1);
    let c2 = s.transaction(|l| l.append(&ses, &main(), &d)).unwrap();
    assert_eq!(c2.node.state, Some(r1));
    assert_eq!(
        s.state_root(&ses, &main(), None).unwrap(),
        r1,
        "explicit state becomes the working state"
    );
    let list = s.state_list(&r2).unwrap();
    assert_eq!(list, vec![("k".to_owned(), b"v2".to_vec())]);
    let mut bad = draft(Kind::Invoke, "e", 5);
    bad.state = Some(r2);
    assert!(
        s.transaction(|l| l.append(&ses, &main(), &bad)).is_err(),
        "only a complete carries state"
    );
    let mut unknown = draft(Kind::Complete, "f", 6);
    unknown.state = Some(convo_core::StateRoot(convo_core::sha256(b"nothing")));
    s.transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, "g", 6)))
        .unwrap();
    assert!(matches!(
        s.transaction(|l| l.append(&ses, &main(), &unknown)),
        Err(StoreError::State(_))
    ));
}

pub fn follow_cursor_is_gap_free(s: &mut Store) {
    let a = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let c = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let mut all = Vec::new();
    for i in 0..5 {
        all.extend(turn(s, &a, &main(), &format!("a{i}"), i * 10));
        all.extend(turn(s, &c, &main(), &format!("c{i}"), i * 10));
    }
    let _ = s.transaction(|l| l.append(&a, &main(), &draft(Kind::Response, "bad", 1))); // rejected: no gap
    all.extend(
        s.transaction(|l| l.append_many(&a, &main(), &[draft(Kind::Invoke, "bulk", 99)]))
            .unwrap(),
    );
    let mut got = Vec::new();
    let mut cursor = 0;
    loop {
        let page = s.follow(cursor, 7).unwrap();
        if page.is_empty() {
            break;
        }
        for n in page {
            assert_eq!(n.seq, cursor + 1, "gap-free");
            cursor = n.seq;
            got.push(n.hash);
        }
    }
    assert_eq!(got, all);
}

pub fn bulk_append_matches_single_appends(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let drafts: Vec<_> = (0..50)
        .map(|i| {
            draft(
                if i % 2 == 0 {
                    Kind::Invoke
                } else {
                    Kind::Complete
                },
                &format!("m{i}"),
                i,
            )
        })
        .collect();
    let hashes = s
        .transaction(|l| l.append_many(&ses, &main(), &drafts))
        .unwrap();
    assert_eq!(hashes.len(), 50);
    let tl = s.timeline(&ses, &main()).unwrap();
    assert_eq!(tl.iter().map(|n| n.stored.hash).collect::<Vec<_>>(), hashes);
    assert!(s.verify().unwrap().is_clean());

    // Group commit's batch: two sessions, one of them twice, chained in order.
    let other = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let inv = [draft(Kind::Invoke, "x", 60)];
    let done = [draft(Kind::Complete, "y", 61)];
    let out = s
        .transaction(|l| {
            l.append_batch(&[
                (ses, main(), &inv[..]),
                (other, main(), &inv[..]),
                (ses, main(), &done[..]),
            ])
        })
        .unwrap();
    assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1, 1]);
    assert_eq!(out[2][0].node.parent, Some(out[0][0].hash));
    assert_eq!(out[0][0].node.parent, Some(hashes[49]));
    assert_eq!(s.branch(&ses, &main()).unwrap().head, Some(out[2][0].hash));
    assert_eq!(
        s.branch(&other, &main()).unwrap().head,
        Some(out[1][0].hash)
    );
    // A batch with a request at fault writes nothing.
    let end = s.end_cursor().unwrap();
    let bad = [draft(Kind::Response, "z", 62)];
    assert!(
        s.transaction(|l| l.append_batch(&[(other, main(), &done[..]), (ses, main(), &bad[..])]))
            .is_err()
    );
    assert_eq!(s.end_cursor().unwrap(), end);
    assert!(s.verify().unwrap().is_clean());

    // Drafts taken (their diagnostics moved, not copied) store the nodes
    // borrowed drafts do, and a session read a node at a time gives the
    // nodes read whole, in the same order.
    let owned: Vec<Draft> = (0..6)
        .map(|i| {
            let mut d = draft(Kind::Invoke, &format!("o{i}"), 70 + i);
            d.diagnostics = Diagnostics::parse(&format!("{{\"i\":{i}}}")).unwrap();
            if i % 2 == 1 {
                d.kind = Kind::Complete;
            }
            d
        })
        .collect();
    let third = |s: &mut Store| {
        s.transaction(|l| l.new_session("agent", None, 0))
            .unwrap()
            .id
    };
    let (a, b) = (third(s), third(s));
    let by_ref = s
        .transaction(|l| l.append_many_nodes(&a, &main(), &owned))
        .unwrap();
    let taken = s
        .transaction(|l| l.append_drafts(&b, &main(), owned.clone()))
        .unwrap();
    let fields = |v: &[convo_store::StoredNode]| {
        v.iter()
            .map(|n| (n.node.payload, n.node.diagnostics.clone(), n.ctx.depth))
            .collect::<Vec<_>>()
    };
    assert_eq!(fields(&by_ref), fields(&taken));
    let whole: Vec<NodeHash> = s
        .read(|tx| tx.session_nodes(&ses, false))
        .unwrap()
        .into_iter()
        .map(|(n, _)| n.hash)
        .collect();
    let mut each = Vec::new();
    s.read(|tx| {
        each.clear();
        tx.each_session_node(&ses, &mut |n| {
            each.push(n.hash);
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(each, whole);
    assert_eq!(whole.len(), 52);
}

pub fn verify_is_clean_on_a_busy_store(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    for i in 0..3 {
        s.transaction(|l| l.state_put(&ses, &main(), &format!("k{i}"), format!("v{i}").as_bytes()))
            .unwrap();
        turn(s, &ses, &main(), &format!("t{i}"), i * 10);
    }
    let head = s.branch(&ses, &main()).unwrap().head.unwrap();
    s.transaction(|l| l.fork(&ses, &p(&head), &b("f"), 100))
        .unwrap();
    turn(s, &ses, &b("f"), "f", 110);
    s.transaction(|l| l.promote(&ses, &b("f"), 120)).unwrap();
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert_eq!(r.nodes, 12 + 1 + 4 + 1);
    assert!(r.state_roots >= 3);
}

/// A conversation's `n`-th request as an agent sends it: a long system
/// prompt (over [`convo_store::chunk::CHUNKED_FROM`]), then every question and
/// answer so far, then the new question; `marker` goes into the newest
/// question only.
pub fn growing_request(n: usize, marker: &str) -> Vec<u8> {
    let mut s = format!(
        "{{\"model\":\"m\",\"messages\":[{{\"role\":\"system\",\"content\":\"{}\"}}",
        "You are a careful assistant. ".repeat(700)
    );
    for i in 0..n {
        s.push_str(&format!(
            ",{{\"role\":\"user\",\"content\":\"question {i}: {}\"}},\
             {{\"role\":\"assistant\",\"content\":\"answer {i}: {}\"}}",
            "why is that so? ".repeat(5 + i % 7),
            "because it is. ".repeat(8 + i % 5)
        ));
    }
    s.push_str(&format!(
        ",{{\"role\":\"user\",\"content\":\"question {n}{marker}\"}}],\"stream\":true}}"
    ));
    s.into_bytes()
}

/// Every stored chunk's bytes (index chunks included), in one snapshot.
pub fn stored_chunks(s: &mut Store) -> Vec<Vec<u8>> {
    s.read(|tx| {
        let mut out = Vec::new();
        tx.scan_chunks(&mut |_, d| {
            out.push(d.to_vec());
            Ok(())
        })?;
        Ok(out)
    })
    .unwrap()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

pub fn repeated_payloads_are_stored_once_and_read_back_whole(s: &mut Store) {
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let n = 60;
    let marker = |i: usize| match i {
        30 => " SECRET-MIDDLE-7f3a9c".to_owned(),
        i if i == n - 1 => " SECRET-LAST-c0ffee11".to_owned(),
        _ => String::new(),
    };
    let mut requests = Vec::new();
    let mut t = 10;
    for i in 0..n {
        let body = growing_request(i, &marker(i));
        s.transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, &format!("q{i}"), t)))
            .unwrap();
        let mut d = draft(Kind::Request, "", t + 1);
        d.payload = body.clone();
        let node = s.transaction(|l| l.append(&ses, &main(), &d)).unwrap();
        s.transaction(|l| {
            l.append(
                &ses,
                &main(),
                &draft(Kind::Response, &format!("a{i}"), t + 2),
            )
        })
        .unwrap();
        s.transaction(|l| {
            l.append(
                &ses,
                &main(),
                &draft(Kind::Complete, &format!("c{i}"), t + 3),
            )
        })
        .unwrap();
        requests.push((node.hash, node.node.payload, body));
        t += 10;
    }
    // Byte-identical through every read path: by digest, a timeline (the
    // session's rows joined with their payloads), follow, previews.
    for (_, h, body) in &requests {
        assert_eq!(s.blob(h).unwrap().as_ref(), Some(body));
    }
    let timeline = s.timeline(&ses, &main()).unwrap();
    let followed = s.follow_with_payloads(0, 10_000).unwrap();
    let previews = s.timeline_previews(&ses, &main(), None, 100).unwrap();
    for (i, (node, _, body)) in requests.iter().enumerate() {
        let at = |v: &[convo_store::TimelineNode]| {
            v.iter()
                .find(|x| x.stored.hash == *node)
                .map(|x| x.payload.clone())
        };
        assert_eq!(at(&timeline).as_ref(), Some(body), "request {i}");
        assert_eq!(at(&followed).as_ref(), Some(body), "request {i}");
        let p = previews.iter().find(|x| x.stored.hash == *node).unwrap();
        assert_eq!(
            (p.head.as_slice(), p.len),
            (&body[..100], body.len() as u64)
        );
    }
    // What repeats is stored once: the requests total ~1.9 MB, their
    // distinct bytes ~40 KB; each request costs the chunk around its new
    // message and its index, a few KB.
    let logical: usize = requests.iter().map(|r| r.2.len()).sum();
    let chunks = stored_chunks(s);
    let stored: usize = chunks.iter().map(Vec::len).sum();
    assert!(
        stored * 5 < logical,
        "{stored} bytes of chunks for {logical} bytes of requests"
    );
    // Each request is hashed and cut from where it differs from the one
    // before (`chunk::Recent`, on every backend), not whole.
    let (hashed, cut) = s.payload_work();
    assert!(
        hashed > 0 && cut > 0 && hashed * 4 < logical as u64 && cut * 4 < logical as u64,
        "{} backend: {hashed} bytes hashed and {cut} cut for {logical} bytes of requests",
        s.kind()
    );
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
    assert!(r.blob_bytes as usize >= logical);

    // Another backend gets the same payloads (chunked again there).
    let mut copy = Store::open("sqlite::memory:").unwrap();
    convo_store::migrate(s, &mut copy, &mut |_| {}).unwrap();
    for (_, h, body) in &requests {
        assert_eq!(copy.blob(h).unwrap().as_ref(), Some(body));
    }
    assert!(copy.verify().unwrap().is_clean());

    // Redacting the last request erases the chunks only it names: its
    // secret is gone from the store; every other request still reads back.
    let last = b"SECRET-LAST-c0ffee11";
    assert!(chunks.iter().any(|c| contains(c, last)));
    let (_, h_last, _) = &requests[n - 1];
    s.redact(h_last, "test", "a key was pasted", 1_000, false)
        .unwrap();
    assert!(!stored_chunks(s).iter().any(|c| contains(c, last)));
    // The middle one's secret is in every later request too: its chunks
    // stay for them, and they still read back whole.
    let (_, h_mid, _) = &requests[30];
    s.redact(h_mid, "test", "a key was pasted", 1_001, false)
        .unwrap();
    for (i, (_, h, body)) in requests.iter().enumerate() {
        let got = s.blob(h).unwrap().unwrap();
        if i == 30 || i == n - 1 {
            assert_ne!(&got, body);
        } else {
            assert_eq!(&got, body, "request {i}");
        }
    }
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

pub fn pages_match_the_whole_timeline_near_forks_and_seals(s: &mut Store) {
    let day = 1_770_993_005_000;
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let mut t1 = Vec::new();
    for i in 0..3 {
        t1 = turn(s, &ses, &main(), &format!("m{i}"), day + i);
    }
    // A turn left open, then a fork from inside the second turn.
    s.transaction(|l| l.append(&ses, &main(), &draft(Kind::Invoke, "open", day + 5)))
        .unwrap();
    s.transaction(|l| l.fork(&ses, &p(&t1[1]), &b("fix"), day + 6))
        .unwrap();
    turn(s, &ses, &b("fix"), "f", day + 7);
    s.transaction(|l| l.fork(&ses, &p(&t1[3]), &b("other"), day + 8))
        .unwrap();
    turn(s, &ses, &b("other"), "o", day + 9);
    let pr = s
        .transaction(|l| l.promote(&ses, &b("fix"), day + 10))
        .unwrap();
    turn(s, &ses, &main(), "after", day + 11);
    // A timeline with no history of its own, in the same session.
    s.transaction(|l| l.create_branch(&ses, &b("fresh"), day + 12))
        .unwrap();
    turn(s, &ses, &b("fresh"), "x", day + 13);
    let empty = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let page = s.timeline_tail(&empty, &main(), 5).unwrap();
    assert_eq!((page.total, page.turns, page.nodes.len()), (0, 0, 0));

    for name in [main(), pr.sealed_as.clone(), b("other"), b("fresh")] {
        let whole = s.timeline(&ses, &name).unwrap();
        let mut turn_no = 0u64;
        let numbered: Vec<(NodeHash, Vec<u8>, u64)> = whole
            .iter()
            .map(|n| {
                if n.stored.node.kind == Kind::Invoke {
                    turn_no += 1;
                }
                (n.stored.hash, n.payload.clone(), turn_no)
            })
            .collect();
        let total = numbered.len();
        for limit in [1, 3, 7, total + 2] {
            for offset in [0, 2, 5, 6, 7, total.saturating_sub(1), total, total + 3] {
                let page = s.timeline_page(&ses, &name, offset, limit).unwrap();
                assert_eq!((page.total, page.turns), (total, turn_no), "{name}");
                let got: Vec<_> = page
                    .nodes
                    .iter()
                    .map(|(n, t)| (n.stored.hash, n.payload.clone(), *t))
                    .collect();
                let end = (offset + limit).min(total);
                let want = numbered.get(offset.min(end)..end).unwrap_or(&[]);
                assert_eq!(got, want, "{name} offset {offset} limit {limit}");
                for ((n, _), w) in page.nodes.iter().zip(&whole[offset.min(end)..end]) {
                    assert_eq!(
                        n.stored, w.stored,
                        "{name}: the whole row, not only its hash"
                    );
                }
            }
            let tail = s.timeline_tail(&ses, &name, limit).unwrap();
            let from = total.saturating_sub(limit);
            assert_eq!(tail.offset, from, "{name}");
            let got: Vec<_> = tail
                .nodes
                .iter()
                .map(|(n, t)| (n.stored.hash, n.payload.clone(), *t))
                .collect();
            assert_eq!(got, numbered[from..], "{name} tail {limit}");
        }
    }
    let sealed = s.timeline_tail(&ses, &pr.sealed_as, 2).unwrap();
    assert_eq!(
        sealed.nodes.last().unwrap().0.stored.node.kind,
        Kind::Invoke,
        "the sealed timeline ends with its open turn"
    );
}

pub fn search_finds_ranks_and_places_hits(s: &mut Store) {
    use convo_store::filter::NodeFilter;
    use convo_store::search::{Query, SearchRequest};
    let a = s
        .transaction(|l| l.new_session("agent", Some("trip"), 0))
        .unwrap()
        .id;
    let other = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let say = |s: &mut Store, ses: &SessionId, br: &BranchName, q: &str, ans: &str, t: i64| {
        s.transaction(|l| l.append(ses, br, &draft(Kind::Invoke, q, t)))
            .unwrap();
        s.transaction(|l| l.append(ses, br, &draft(Kind::Complete, ans, t + 1)))
            .unwrap()
            .hash
    };
    say(
        s,
        &a,
        &main(),
        "What is the capital of France?",
        "Paris.",
        10,
    );
    let fork_at = say(
        s,
        &a,
        &main(),
        "And of Italy?",
        "Rome, capital of Italy.",
        20,
    );
    s.transaction(|l| l.fork(&a, &p(&fork_at), &b("alt"), 30))
        .unwrap();
    say(
        s,
        &a,
        &b("alt"),
        "capital capital capital",
        "Berlin is a capital too",
        40,
    );
    say(
        s,
        &other,
        &main(),
        "Capitalism in France",
        "A long story.",
        50,
    );
    let mut bin = draft(Kind::Invoke, "", 60);
    bin.payload = vec![0xff, b'c', b'a', b'p', b'i', b't', b'a', b'l'];
    s.transaction(|l| l.append(&other, &main(), &bin)).unwrap();

    let find = |s: &mut Store, text: &str, f: &dyn Fn(&mut SearchRequest)| {
        let mut req = SearchRequest {
            query: Query::parse(text).unwrap(),
            session: None,
            branch: None,
            agent: None,
            filter: NodeFilter::default(),
            limit: 50,
            offset: 0,
        };
        f(&mut req);
        s.search(&req).unwrap()
    };
    let payloads = |r: &convo_store::search::SearchResults| -> Vec<String> {
        r.hits
            .iter()
            .map(|h| String::from_utf8_lossy(&h.payload).into_owned())
            .collect()
    };

    // Nothing indexed yet: the whole store is the scanned tail, and found.
    let before = find(s, "capital", &|_| {});
    assert_eq!(before.indexed, 0);
    assert!(before.scanned >= 9);
    assert_eq!(before.hits.len(), 4, "{:?}", payloads(&before));

    let status = s.search_status().unwrap();
    assert_eq!(status.cursor, 0);
    assert!(status.behind() >= 9);
    let mut calls = 0;
    assert_eq!(s.search_update(&mut |_, _| calls += 1).unwrap(), status.end);
    assert!(calls >= 1);
    assert_eq!(s.search_status().unwrap().behind(), 0);

    // From the index: every term required, the most frequent first; the
    // binary payload and `capitalism` (another word) are not hits.
    let r = find(s, "capital", &|_| {});
    assert_eq!(r.scanned, 0);
    assert_eq!(r.indexed, status.end);
    let got = payloads(&r);
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0], "capital capital capital");
    let top = &r.hits[0];
    assert_eq!(top.branches, vec![b("alt")]);
    assert_eq!(top.turn, Some(3));
    assert_eq!(top.snippet.marks.len(), 3);
    let shared = r
        .hits
        .iter()
        .find(|h| h.payload == b"Rome, capital of Italy.")
        .unwrap();
    assert_eq!(shared.branches, vec![main(), b("alt")], "main first");
    assert_eq!(shared.turn, Some(2));
    assert_eq!(
        &shared.snippet.text[shared.snippet.marks[0].0..shared.snippet.marks[0].1],
        "capital"
    );

    // Prefixes, phrases, case.
    assert_eq!(find(s, "CAPITAL* france", &|_| {}).hits.len(), 2);
    assert_eq!(
        payloads(&find(s, "\"capital of italy\"", &|_| {})),
        ["Rome, capital of Italy."]
    );
    assert!(find(s, "\"italy of capital\"", &|_| {}).hits.is_empty());
    assert!(find(s, "capital nowhere", &|_| {}).hits.is_empty());

    // Filters: session, branch, kind, time, sender, limit.
    assert_eq!(
        find(s, "capit*", &|r| r.session = Some(other)).hits.len(),
        1
    );
    let on_main = find(s, "capital", &|r| {
        r.session = Some(a);
        r.branch = Some(main());
    });
    assert_eq!(
        payloads(&on_main),
        ["Rome, capital of Italy.", "What is the capital of France?"]
    );
    let completes = find(s, "capital", &|r| r.filter.kinds = vec![Kind::Complete]);
    assert_eq!(completes.hits.len(), 2);
    assert!(
        completes
            .hits
            .iter()
            .all(|h| h.node.node.kind == Kind::Complete)
    );
    assert_eq!(
        find(s, "capital", &|r| r.filter.since = Some(40))
            .hits
            .len(),
        2
    );
    assert_eq!(
        find(s, "capital", &|r| r.filter.until = Some(40))
            .hits
            .len(),
        2
    );
    assert_eq!(
        find(s, "capital", &|r| r.filter.from = Some("cli".into()))
            .hits
            .len(),
        2
    );
    assert_eq!(find(s, "capital", &|r| r.limit = 1).hits.len(), 1);
    assert!(matches!(
        s.search(&SearchRequest {
            query: Query::parse("x").unwrap(),
            session: Some(a),
            branch: Some(b("nope")),
            agent: None,
            filter: NodeFilter::default(),
            limit: 5,
            offset: 0,
        }),
        Err(StoreError::NoBranch { .. })
    ));

    // Appended after the index: found by the scan, then by the index.
    say(s, &a, &b("alt"), "one more capital", "ok", 70);
    let tail = find(s, "capital", &|_| {});
    assert_eq!(tail.scanned, 2);
    assert_eq!(tail.hits.len(), 5);
    s.search_update(&mut |_, _| {}).unwrap();
    let indexed = find(s, "capital", &|_| {});
    assert_eq!(indexed.scanned, 0);
    assert_eq!(payloads(&indexed).len(), 5);

    // A rebuild finds the same, in the same order; verify is unaffected.
    s.search_reindex(&mut |_, _| {}).unwrap();
    assert_eq!(payloads(&find(s, "capital", &|_| {})), payloads(&indexed));
    let v = s.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
}

/// Kept OTLP export bodies: numbered in the order kept, listed under each
/// of their sessions, rebuilt byte for byte from a residual against an
/// earlier body and the payloads of the nodes it names; a redaction takes
/// the bodies holding the bytes and those rebuilt from them.
pub fn otlp_bodies_are_kept_listed_and_rebuilt(s: &mut Store) {
    use convo_store::OtlpExportRow;
    use convo_store::otlp::{dictionary, encode};
    let a = s.transaction(|l| l.new_session("a", None, 0)).unwrap().id;
    let b = s.transaction(|l| l.new_session("b", None, 0)).unwrap().id;
    let secret = "a SECRET message é \"quoted\"";
    let nodes = s
        .transaction(|l| {
            l.append_many_nodes(
                &a,
                &BranchName::main(),
                &[
                    draft(Kind::Invoke, "hello there", 1),
                    draft(Kind::Invoke, secret, 2),
                ],
            )
        })
        .unwrap();
    let payloads: Vec<Vec<u8>> = vec![b"hello there".to_vec(), secret.as_bytes().to_vec()];
    let first = br#"{"spans":[{"id":"01","text":"hello there"}]}"#.to_vec();
    let esc = serde_json::to_string(secret).unwrap();
    let second =
        format!(r#"{{"spans":[{{"id":"01","text":"hello there"}},{{"id":"02","text":{esc}}}]}}"#)
            .into_bytes();
    let third = br#"{"spans":[{"id":"03","text":"hello there"}]}"#.to_vec();
    let row = |sessions: Vec<SessionId>,
               base: Option<(u64, &[u8])>,
               nodes: Option<(u64, u64)>,
               body: &[u8],
               dict_payloads: &[Vec<u8>]| {
        let dict = dictionary(
            base.map_or(&[][..], |b| b.1),
            dict_payloads.iter().map(Vec::as_slice),
        );
        OtlpExportRow {
            seq: 0,
            sessions,
            received_at: 7,
            media: "traces/json".into(),
            base: base.map(|b| b.0),
            nodes,
            body_len: body.len() as u64,
            residual: encode(&dict, body),
        }
    };
    let (s1, s2, s3) = s
        .transaction(|l| {
            let s1 = l.tx().insert_otlp_export(&row(
                vec![a],
                None,
                Some((nodes[0].seq, nodes[0].seq)),
                &first,
                &payloads[..1],
            ))?;
            let s2 = l.tx().insert_otlp_export(&row(
                vec![a, b],
                Some((s1, &first)),
                Some((nodes[0].seq, nodes[1].seq)),
                &second,
                &payloads,
            ))?;
            let s3 =
                l.tx()
                    .insert_otlp_export(&row(vec![b], Some((s2, &second)), None, &third, &[]))?;
            Ok((s1, s2, s3))
        })
        .unwrap();
    assert!(s1 < s2 && s2 < s3);
    let bodies = |s: &mut Store, id: Option<&SessionId>| -> Vec<Vec<u8>> {
        s.otlp_exports(id)
            .unwrap()
            .into_iter()
            .map(|e| e.body)
            .collect()
    };
    assert_eq!(bodies(s, Some(&a)), vec![first.clone(), second.clone()]);
    assert_eq!(bodies(s, Some(&b)), vec![second.clone(), third.clone()]);
    assert_eq!(bodies(s, None).len(), 3);
    let got = s.otlp_exports(Some(&b)).unwrap();
    assert_eq!(
        (
            got[0].sessions.clone(),
            got[0].received_at,
            got[0].media.as_str()
        ),
        (vec![a, b], 7, "traces/json")
    );
    // Another backend gets the same bodies, under the same numbers.
    let mut copy = Store::open("sqlite::memory:").unwrap();
    convo_store::migrate(s, &mut copy, &mut |_| {}).unwrap();
    assert_eq!(
        copy.otlp_exports(None).unwrap(),
        s.otlp_exports(None).unwrap()
    );
    // Redacting the secret takes the body holding it and the one rebuilt
    // from it; the first stays.
    s.redact(&nodes[1].node.payload, "t", "pii", 9, true)
        .unwrap();
    assert_eq!(bodies(s, None), vec![first.clone()]);
    let v = s.verify().unwrap();
    assert!(v.is_clean(), "{:?}", v.problems);
    // A body that no longer rebuilds (here: a later one naming a base that
    // is gone) is reported by verify.
    s.transaction(|l| {
        l.tx()
            .insert_otlp_export(&row(vec![b], Some((s2, &second)), None, &third, &[]))
    })
    .unwrap();
    let v = s.verify().unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.object.starts_with("otlp export")),
        "{:?}",
        v.problems
    );
    assert!(s.otlp_exports(Some(&b)).is_err());
}

/// A named contract case.
pub type Case = (&'static str, fn(&mut Store));

/// Every contract test, by name.
pub const ALL: &[Case] = &[
    (
        "sessions_are_found_by_id_prefix_and_title",
        sessions_are_found_by_id_prefix_and_title,
    ),
    (
        "a_turn_chains_numbers_and_submits",
        a_turn_chains_numbers_and_submits,
    ),
    (
        "rule_violations_write_nothing",
        rule_violations_write_nothing,
    ),
    (
        "same_input_in_same_context_has_same_submission",
        same_input_in_same_context_has_same_submission,
    ),
    (
        "fork_shares_history_and_restores_state",
        fork_shares_history_and_restores_state,
    ),
    (
        "promote_seals_main_and_renames",
        promote_seals_main_and_renames,
    ),
    (
        "fork_and_promote_events_never_share_a_hash",
        fork_and_promote_events_never_share_a_hash,
    ),
    (
        "complete_carries_explicit_or_branch_state",
        complete_carries_explicit_or_branch_state,
    ),
    ("follow_cursor_is_gap_free", follow_cursor_is_gap_free),
    (
        "bulk_append_matches_single_appends",
        bulk_append_matches_single_appends,
    ),
    (
        "verify_is_clean_on_a_busy_store",
        verify_is_clean_on_a_busy_store,
    ),
    (
        "pages_match_the_whole_timeline_near_forks_and_seals",
        pages_match_the_whole_timeline_near_forks_and_seals,
    ),
    (
        "search_finds_ranks_and_places_hits",
        search_finds_ranks_and_places_hits,
    ),
    (
        "repeated_payloads_are_stored_once_and_read_back_whole",
        repeated_payloads_are_stored_once_and_read_back_whole,
    ),
    (
        "search_filters_by_agent_model_status_and_failure",
        search_filters_by_agent_model_status_and_failure,
    ),
    (
        "search_counts_a_resent_message_once",
        search_counts_a_resent_message_once,
    ),
    (
        "otlp_bodies_are_kept_listed_and_rebuilt",
        otlp_bodies_are_kept_listed_and_rebuilt,
    ),
    (
        "search_folds_matches_across_many_sessions",
        search_folds_matches_across_many_sessions,
    ),
];

/// A conversation that resends its history with every request: each
/// message is one hit, where it first appeared; `OR` and `-word` work
/// from the index and from the scan; hits come a page at a time with
/// their total.
pub fn search_counts_a_resent_message_once(s: &mut Store) {
    use convo_store::filter::NodeFilter;
    use convo_store::search::{Query, SearchRequest};
    let ses = s
        .transaction(|l| l.new_session("proxy", Some("history"), 0))
        .unwrap()
        .id;
    let mut history: Vec<String> = Vec::new();
    let mut t = 10;
    for (ask, answer) in [
        (
            "Where is the zebra crossing?",
            "The zebra crossing is on Abbey Road.",
        ),
        ("And the giraffe house?", "Next to the zebra stables."),
        ("Anything else?", "A lion, near the gate."),
        ("Thanks!", "You are welcome."),
    ] {
        history.push(serde_json::json!({"role": "user", "content": ask}).to_string());
        let body = format!(
            r#"{{"model":"m-1","messages":[{{"role":"system","content":"You guide visitors."}},{}]}}"#,
            history.join(",")
        );
        let reply =
            serde_json::json!({"choices": [{"message": {"role": "assistant", "content": answer}}]});
        for (kind, payload) in [
            (Kind::Invoke, ask.to_owned()),
            (Kind::Request, body),
            (Kind::Response, reply.to_string()),
            (Kind::Complete, answer.to_owned()),
        ] {
            s.transaction(|l| l.append(&ses, &main(), &draft(kind, &payload, t)))
                .unwrap();
            t += 1;
        }
        history.push(serde_json::json!({"role": "assistant", "content": answer}).to_string());
    }
    let find = |s: &mut Store, text: &str, offset: usize, limit: usize| {
        s.search(&SearchRequest {
            query: Query::parse(text).unwrap(),
            session: None,
            branch: None,
            agent: None,
            filter: NodeFilter::default(),
            limit,
            offset,
        })
        .unwrap()
    };
    let kinds = |r: &convo_store::search::SearchResults| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = r
            .hits
            .iter()
            .map(|h| {
                let p = String::from_utf8_lossy(&h.payload).into_owned();
                (h.node.node.kind.to_string(), p)
            })
            .collect();
        v.sort();
        v
    };
    for indexed in [false, true] {
        if indexed {
            s.search_update(&mut |_, _| {}).unwrap();
        }
        // `giraffe`: the user's message once (its invoke), not again in
        // the three requests that carry it (one of them its own turn's).
        let g = find(s, "giraffe", 0, 50);
        assert_eq!(
            kinds(&g),
            [("invoke".to_owned(), "And the giraffe house?".to_owned())],
            "indexed: {indexed}"
        );
        assert_eq!((g.total, g.exact, g.resent), (1, true, 3));
        // `zebra`: a question and two answers, each once where it first
        // appeared (the answer's response, not its complete).
        let z = find(s, "zebra", 0, 50);
        let got: Vec<String> = kinds(&z).into_iter().map(|k| k.0).collect();
        assert_eq!(got, ["invoke", "response", "response"], "{:?}", kinds(&z));
        assert_eq!(z.total, 3);
        // Pages: the same three, two then one, nothing past the end.
        let (p1, p2) = (find(s, "zebra", 0, 2), find(s, "zebra", 2, 2));
        assert_eq!(
            (p1.hits.len(), p2.hits.len(), p1.total, p2.total),
            (2, 1, 3, 3)
        );
        let mut both: Vec<_> = p1
            .hits
            .iter()
            .chain(&p2.hits)
            .map(|h| h.node.hash)
            .collect();
        both.sort();
        both.dedup();
        assert_eq!(both.len(), 3, "pages do not overlap");
        assert!(find(s, "zebra", 3, 2).hits.is_empty());
        // OR and exclusion.
        assert_eq!(find(s, "lion OR giraffe", 0, 50).total, 2);
        assert_eq!(find(s, "zebra -crossing", 0, 50).total, 1);
        let stables = kinds(&find(s, "zebra -crossing", 0, 50));
        assert_eq!(stables[0].0, "response");
        assert!(stables[0].1.contains("zebra stables"), "{stables:?}");
        assert_eq!(find(s, "welcome OR nothing -abbey", 0, 50).total, 1);
        assert_eq!(find(s, "zebra OR lion -zebra", 0, 50).total, 1);
    }
    // The same words asked again on another timeline are a message of
    // their own: not a copy of one on a timeline it does not descend from.
    let first_answer = s
        .timeline(&ses, &main())
        .unwrap()
        .into_iter()
        .find(|n| n.stored.node.kind == Kind::Complete)
        .unwrap()
        .stored
        .hash;
    s.transaction(|l| l.fork(&ses, &p(&first_answer), &b("alt"), 100))
        .unwrap();
    s.transaction(|l| {
        l.append(
            &ses,
            &b("alt"),
            &draft(Kind::Invoke, "And the giraffe house?", 101),
        )
    })
    .unwrap();
    s.search_update(&mut |_, _| {}).unwrap();
    let g = find(s, "giraffe", 0, 50);
    assert_eq!((g.total, g.resent), (2, 3));
}

/// A conversation of `turns` (question, answer) recorded as an agent
/// does, each request resending the history, in one transaction.
fn resending(s: &mut Store, ses: &SessionId, turns: &[(String, String)], t: i64) {
    let mut history: Vec<String> = Vec::new();
    let mut drafts = Vec::new();
    for (k, (ask, answer)) in turns.iter().enumerate() {
        history.push(serde_json::json!({"role": "user", "content": ask}).to_string());
        let body = format!(r#"{{"model":"m-1","messages":[{}]}}"#, history.join(","));
        let reply =
            serde_json::json!({"choices": [{"message": {"role": "assistant", "content": answer}}]});
        let t = t + 4 * k as i64;
        drafts.push(draft(Kind::Invoke, ask, t));
        drafts.push(draft(Kind::Request, &body, t + 1));
        drafts.push(draft(Kind::Response, &reply.to_string(), t + 2));
        drafts.push(draft(Kind::Complete, answer, t + 3));
        history.push(serde_json::json!({"role": "assistant", "content": answer}).to_string());
    }
    s.transaction(|l| l.append_many(ses, &main(), &drafts))
        .unwrap();
}

/// A page of matches from many sessions (one with more matches than the
/// fold reads payloads of at once, some with a second timeline) folds as
/// each session alone does: every message once where it first appeared,
/// the same hits however the results are paged.
pub fn search_folds_matches_across_many_sessions(s: &mut Store) {
    use convo_store::filter::NodeFilter;
    use convo_store::search::{Query, SearchRequest, SearchResults};
    use std::collections::BTreeSet;
    let mut sessions = Vec::new();
    for i in 0..40 {
        let ses = s
            .transaction(|l| l.new_session("proxy", Some(&format!("s{i}")), 0))
            .unwrap()
            .id;
        let turns = [
            (
                format!("Where does the otter {i} sleep?"),
                "In the river.".into(),
            ),
            (
                "What does the otter eat?".into(),
                "The otter eats fish.".into(),
            ),
            ("Thanks".into(), "Bye".into()),
        ];
        resending(s, &ses, &turns, 1000 * i);
        if i % 4 == 0 {
            // The second question asked again on a timeline forked before
            // it: a message of its own there.
            let first = s.timeline(&ses, &main()).unwrap()[3].stored.hash;
            s.transaction(|l| l.fork(&ses, &p(&first), &b("alt"), 1000 * i + 500))
                .unwrap();
            let again = draft(Kind::Invoke, &turns[1].0, 1000 * i + 501);
            s.transaction(|l| l.append(&ses, &b("alt"), &again))
                .unwrap();
        }
        sessions.push(ses);
    }
    let long = s
        .transaction(|l| l.new_session("proxy", Some("long"), 0))
        .unwrap()
        .id;
    let turns: Vec<(String, String)> = (0..70)
        .map(|k| (format!("Otter question {k}"), format!("Answer {k}")))
        .collect();
    resending(s, &long, &turns, 100_000);
    sessions.push(long);
    let find = |s: &mut Store, session: Option<SessionId>, offset: usize, limit: usize| {
        s.search(&SearchRequest {
            query: Query::parse("otter").unwrap(),
            session,
            branch: None,
            agent: None,
            filter: NodeFilter::default(),
            limit,
            offset,
        })
        .unwrap()
    };
    let hashes =
        |r: &SearchResults| -> Vec<NodeHash> { r.hits.iter().map(|h| h.node.hash).collect() };
    for indexed in [false, true] {
        if indexed {
            s.search_update(&mut |_, _| {}).unwrap();
        }
        // Each short session: two questions and an answer (not its
        // complete, not the requests resending them), the second question
        // again on `alt`; the long one: its 70 questions, not its 70
        // requests.
        let all = find(s, None, 0, 1000);
        assert_eq!(
            (all.total, all.resent, all.exact, all.hits.len()),
            (40 * 3 + 10 + 70, 40 * 4 + 70, true, 200),
            "indexed: {indexed}"
        );
        let kinds: BTreeSet<String> = all
            .hits
            .iter()
            .map(|h| h.node.node.kind.to_string())
            .collect();
        assert_eq!(kinds, ["invoke", "response"].map(String::from).into());
        // The same hits as each session searched alone.
        let mut alone = BTreeSet::new();
        for ses in &sessions {
            alone.extend(hashes(&find(s, Some(*ses), 0, 1000)));
        }
        let every: BTreeSet<NodeHash> = hashes(&all).into_iter().collect();
        assert_eq!(every, alone, "indexed: {indexed}");
        // Pages of 7: the same hits in the same order, none twice.
        let mut paged = Vec::new();
        for page in 0..=200 / 7 {
            let r = find(s, None, page * 7, 7);
            assert_eq!((r.total, r.offset), (200, page * 7));
            paged.extend(hashes(&r));
        }
        assert_eq!(paged, hashes(&all), "indexed: {indexed}");
    }
}

/// The search filters on what a call's diagnostics say (model, status,
/// failure) and on the session's agent find the same nodes from the index
/// as from the scan of the nodes past it.
pub fn search_filters_by_agent_model_status_and_failure(s: &mut Store) {
    use convo_store::filter::NodeFilter;
    use convo_store::search::{Query, SearchRequest};
    let bot = s
        .transaction(|l| l.new_session("bot", Some("b"), 0))
        .unwrap()
        .id;
    let helper = s
        .transaction(|l| l.new_session("helper", Some("h"), 0))
        .unwrap()
        .id;
    let call = |s: &mut Store, ses: &SessionId, text: &str, diag: &str, t: i64| {
        let mut d = draft(Kind::Response, text, t);
        d.diagnostics = Diagnostics::parse(diag).unwrap();
        s.transaction(|l| l.append(ses, &main(), &draft(Kind::Invoke, "go", t)))
            .unwrap();
        s.transaction(|l| l.append(ses, &main(), &draft(Kind::Request, "ask", t)))
            .unwrap();
        s.transaction(|l| l.append(ses, &main(), &d)).unwrap();
        s.transaction(|l| l.append(ses, &main(), &draft(Kind::Complete, "done", t)))
            .unwrap();
    };
    call(
        s,
        &bot,
        "zebra one",
        r#"{"model":"gpt-x","status":200}"#,
        10,
    );
    call(
        s,
        &bot,
        "zebra two",
        r#"{"model":"gpt-y","status":429}"#,
        20,
    );
    call(
        s,
        &helper,
        "zebra three",
        r#"{"model":"gpt-x","status":200,"error":"cut"}"#,
        30,
    );
    call(
        s,
        &helper,
        "zebra four",
        r#"{"model":"gpt-x","status":"500"}"#,
        40,
    );
    call(
        s,
        &helper,
        "zebra five",
        r#"{"model":"gpt-x","status":200,"error":null}"#,
        50,
    );
    let find = |s: &mut Store, f: &dyn Fn(&mut SearchRequest)| -> Vec<String> {
        let mut req = SearchRequest {
            query: Query::parse("zebra").unwrap(),
            session: None,
            branch: None,
            agent: None,
            filter: NodeFilter::default(),
            limit: 50,
            offset: 0,
        };
        f(&mut req);
        let mut got: Vec<String> = s
            .search(&req)
            .unwrap()
            .hits
            .iter()
            .map(|h| String::from_utf8_lossy(&h.payload).into_owned())
            .collect();
        got.sort();
        got
    };
    type Check = (
        &'static str,
        fn(&mut SearchRequest),
        &'static [&'static str],
    );
    let cases: [Check; 7] = [
        (
            "none",
            |_| {},
            &[
                "zebra five",
                "zebra four",
                "zebra one",
                "zebra three",
                "zebra two",
            ],
        ),
        (
            "agent",
            |r| r.agent = Some("bot".into()),
            &["zebra one", "zebra two"],
        ),
        (
            "model",
            |r| r.filter.model = Some("gpt-x".into()),
            &["zebra five", "zebra four", "zebra one", "zebra three"],
        ),
        (
            "status",
            |r| r.filter.status = Some("200".into()),
            &["zebra five", "zebra one", "zebra three"],
        ),
        (
            "failed",
            |r| r.filter.failed = true,
            &["zebra four", "zebra three", "zebra two"],
        ),
        (
            "agent and failed",
            |r| {
                r.agent = Some("helper".into());
                r.filter.failed = true;
            },
            &["zebra four", "zebra three"],
        ),
        (
            "time and model",
            |r| {
                r.filter.model = Some("gpt-x".into());
                r.filter.since = Some(30);
                r.filter.until = Some(50);
            },
            &["zebra four", "zebra three"],
        ),
    ];
    // First from the scan (nothing indexed yet), then from the index.
    for phase in ["scan", "index"] {
        if phase == "index" {
            s.search_update(&mut |_, _| {}).unwrap();
        }
        for (name, f, want) in &cases {
            assert_eq!(find(s, f), *want, "{name} from the {phase}");
        }
        assert!(
            find(s, &|r| r.agent = Some("nobody".into())).is_empty(),
            "unknown agent from the {phase}"
        );
    }
}

/// A throwaway PostgreSQL database for one test, dropped when this guard is.
#[derive(Debug)]
pub struct PgDatabase {
    admin: String,
    name: String,
    /// URL of the new database.
    pub url: String,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// The admin URL of the PostgreSQL server `CONVO_TEST_PG` names.
///
/// Without `CONVO_TEST_PG`, returns `None` after saying loudly that the
/// PostgreSQL test was skipped; under CI (`CI` set) it panics instead,
/// because CI must run them (`.ci/run` starts a server).
pub fn pg_admin() -> Option<String> {
    if let Ok(admin) = std::env::var("CONVO_TEST_PG") {
        return Some(admin);
    }
    if std::env::var_os("CI").is_some() {
        panic!("CI is set but CONVO_TEST_PG is not: the PostgreSQL suite must run in CI");
    }
    // Straight to the stderr handle: libtest captures `eprintln!` of
    // passing tests, and a skip must be seen.
    use std::io::Write as _;
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: no PostgreSQL (set CONVO_TEST_PG=postgres://…, or run scripts/test)"
    );
    None
}

/// A fresh database on the server named by `CONVO_TEST_PG` (an admin URL),
/// or `None` when the test is skipped (see [`pg_admin`]).
pub fn pg_database() -> Option<PgDatabase> {
    let admin = pg_admin()?;
    let name = format!("convo_t_{}", uuid::Uuid::new_v4().simple());
    let mut c =
        postgres::Client::connect(&admin, postgres::NoTls).expect("connect to CONVO_TEST_PG");
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create a test database");
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    let url = format!("{base}/{name}");
    Some(PgDatabase { admin, name, url })
}

/// A transaction holding a transaction id on the server `CONVO_TEST_PG`
/// names, in its admin database (not the store's), for `hold`; then it
/// commits. A writer of another database on the same server, as a shared
/// server has: the snapshots every database takes meanwhile are no newer
/// than its id.
pub fn pg_writer_elsewhere(hold: std::time::Duration) -> Option<std::thread::JoinHandle<()>> {
    let admin = pg_admin()?;
    let mut c = postgres::Client::connect(&admin, postgres::NoTls).expect("connect");
    c.batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .expect("a transaction id");
    Some(std::thread::spawn(move || {
        std::thread::sleep(hold);
        c.batch_execute("COMMIT").expect("commit");
    }))
}

/// Runs SQL on a PostgreSQL store (a test making a store look older);
/// the first column of the last statement's first row, if it is a number.
pub fn pg_sql(store_url: &str, sql: &str) -> Option<i64> {
    let mut c = postgres::Client::connect(store_url, postgres::NoTls).expect("connect");
    let mut last = None;
    for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        last = c
            .query(stmt, &[])
            .expect(stmt)
            .first()
            .and_then(|r| r.try_get::<_, i64>(0).ok());
    }
    last
}

/// A store backend the tests run on: the one selector every suite uses,
/// usually through [`for_each_backend!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// An in-memory SQLite store.
    SqliteMemory,
    /// A fresh database on the PostgreSQL server `CONVO_TEST_PG` names
    /// (skipped loudly without it, required under CI).
    Postgres,
}

/// A fresh, empty store's location on one backend, and what must outlive
/// it (the temporary directory, the throwaway database).
#[derive(Debug)]
pub struct Fresh {
    /// The backend.
    pub backend: Backend,
    /// The store's URL (`CONVO_STORE`, `--store`, [`Store::open`]).
    pub url: String,
    /// The PostgreSQL database, dropped with this value.
    pub pg: Option<PgDatabase>,
    dir: Option<tempfile::TempDir>,
}

impl Fresh {
    /// Opens (creating) the store.
    pub fn open(&self) -> Store {
        Store::open(&self.url).unwrap()
    }

    /// The temporary directory holding a SQLite file store.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_ref().map(|d| d.path())
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::SqliteMemory => "sqlite (memory)",
            Backend::Postgres => "postgres",
        })
    }
}

impl Backend {
    /// The backend's name as convo reports it (`sqlite`, `postgres`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite | Backend::SqliteMemory => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// Whether the backend can run here; `false` (said loudly) for
    /// PostgreSQL without `CONVO_TEST_PG`.
    pub fn available(self) -> bool {
        self != Backend::Postgres || pg_admin().is_some()
    }

    /// A fresh store location on this backend; `None` when it cannot run
    /// here (see [`Backend::available`]).
    pub fn fresh(self) -> Option<Fresh> {
        Some(match self {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                Fresh {
                    backend: self,
                    url: format!("sqlite://{}", dir.path().join("convo.db").display()),
                    pg: None,
                    dir: Some(dir),
                }
            }
            Backend::SqliteMemory => Fresh {
                backend: self,
                url: "sqlite::memory:".to_owned(),
                pg: None,
                dir: None,
            },
            Backend::Postgres => {
                let db = pg_database()?;
                Fresh {
                    backend: self,
                    url: db.url.clone(),
                    pg: Some(db),
                    dir: None,
                }
            }
        })
    }
}

/// Runs `case` on a fresh store of `backend` (a [`for_each_backend!`]
/// runner for cases that take the store).
pub fn with_store(backend: Backend, case: fn(&mut Store)) {
    if let Some(fresh) = backend.fresh() {
        case(&mut fresh.open());
    }
}

/// Runs `case` with `backend` when it can run here (a [`for_each_backend!`]
/// runner for cases that make their own stores or environments).
pub fn when_available(backend: Backend, case: fn(Backend)) {
    if backend.available() {
        case(backend);
    }
}

/// Makes one test per case and backend: `for_each_backend!(RUNNER; a, b)`
/// defines `sqlite::a`, `postgres::a`, `sqlite::b`, … each calling
/// `RUNNER(Backend::…, super::case)` (RUNNER is [`with_store`],
/// [`when_available`] or the suite's own); name the backends with
/// `for_each_backend!(RUNNER; [sqlite = Sqlite, sqlite_memory = SqliteMemory,
/// postgres = Postgres]; (a, b))`.
#[macro_export]
macro_rules! for_each_backend {
    (@mod $be:ident $variant:ident $run:path; ($($name:ident),+ $(,)?)) => {
        mod $be {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $name() {
                    $run($crate::Backend::$variant, super::$name);
                }
            )+
        }
    };
    ($run:path; [$($be:ident = $variant:ident),+ $(,)?]; $names:tt) => {
        $( $crate::for_each_backend!(@mod $be $variant $run; $names); )+
    };
    ($run:path; $($name:ident),+ $(,)?) => {
        $crate::for_each_backend!($run; [sqlite = Sqlite, postgres = Postgres]; ($($name),+));
    };
}

/// Every file of the store at `store_url`, name and bytes: every file of
/// a SQLite store (the database and its `-wal`, `-shm`, `-journal`), or
/// every relation file (tables, indexes, TOAST, the catalogs) of a
/// PostgreSQL database, read by the server after a `CHECKPOINT` so what its
/// buffers held is on disk (which needs a superuser, as `CONVO_TEST_PG` is).
/// PostgreSQL's write-ahead log is not read: a redaction cannot reach it
/// (see `convo redact --help`).
pub fn store_files(store_url: &str) -> Vec<(String, Vec<u8>)> {
    if store_url.starts_with("postgres://") || store_url.starts_with("postgresql://") {
        let mut c = postgres::Client::connect(store_url, postgres::NoTls).unwrap();
        c.batch_execute("CHECKPOINT").unwrap();
        let rows = c
            .query(
                "SELECT pg_relation_filepath(oid), relname::text FROM pg_class \
                 WHERE relkind IN ('r', 't', 'i', 'm') AND relpersistence = 'p' \
                 AND reltablespace = 0 AND pg_relation_filepath(oid) IS NOT NULL",
                &[],
            )
            .unwrap();
        assert!(rows.len() > 10, "the relations were listed");
        return rows
            .into_iter()
            .map(|r| {
                let path: String = r.get(0);
                let name: String = r.get(1);
                let data: Vec<u8> = c
                    .query_one(
                        "SELECT pg_read_binary_file($1, 0, 100000000, true)",
                        &[&path],
                    )
                    .unwrap()
                    .get::<_, Option<Vec<u8>>>(0)
                    .unwrap_or_default();
                (format!("{path} ({name})"), data)
            })
            .collect();
    }
    let path = store_url.strip_prefix("sqlite://").unwrap_or(store_url);
    let path = std::path::Path::new(path.split('?').next().unwrap_or(path));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut out = Vec::new();
    for e in std::fs::read_dir(path.parent().unwrap()).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_string_lossy().into_owned();
        if file.starts_with(&name) && p.is_file() {
            out.push((file, std::fs::read(&p).unwrap()));
        }
    }
    assert!(!out.is_empty(), "no file of {} was found", path.display());
    out
}

/// The files of the store at `store_url` ([`store_files`]) that hold `needle`.
pub fn files_holding(store_url: &str, needle: &[u8]) -> Vec<String> {
    files_with(&store_files(store_url), needle)
}

fn files_with(files: &[(String, Vec<u8>)], needle: &[u8]) -> Vec<String> {
    files
        .iter()
        .filter(|(_, hay)| hay.windows(needle.len()).any(|w| w == needle))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Every form a secret can take in a store's files: as given, upper- and
/// lowercased, and each word the search index stores for it
/// ([`convo_store::search::document`]: lowercased runs of letters and digits)
/// that is long enough (8 bytes) to be the secret's own.
pub fn secret_forms(secret: &str) -> Vec<String> {
    let mut out = vec![
        secret.to_owned(),
        secret.to_uppercase(),
        secret.to_lowercase(),
    ];
    out.extend(
        convo_store::search::document(secret.as_bytes())
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w.len() >= 8),
    );
    out.sort();
    out.dedup();
    out
}

/// The forms of `secret` ([`secret_forms`]) found in the store's files,
/// each with the files holding it (empty when no byte of it is left).
pub fn secret_in_files(store_url: &str, secret: &str) -> Vec<(String, Vec<String>)> {
    let files = store_files(store_url);
    secret_forms(secret)
        .into_iter()
        .filter_map(|f| {
            let holding = files_with(&files, f.as_bytes());
            (!holding.is_empty()).then_some((f, holding))
        })
        .collect()
}

/// Runs the real `git --git-dir REPO ARGS…` and returns its stdout; panics
/// with git's stderr when it fails (the git projection's tests).
pub fn git(repo: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The directory of the package whose test runs, as cargo names it in the
/// test's environment (`built`, the test's `env!("CARGO_MANIFEST_DIR")`,
/// only outside cargo): cargo reuses a test binary built from the same
/// sources in another checkout, and the path compiled into it may be gone.
pub fn package_dir(built: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| built.into(), Into::into)
}
