//! PostgreSQL pipelines a transaction's statements (see the module docs of
//! `convo_store::postgres`): these pin the round trips an append costs and
//! that a held-back write that fails takes the whole transaction with it.

use convo_core::hash::content_hash;
use convo_core::{BranchName, Kind, NodeHash};
use convo_store::postgres::Postgres;
use convo_store::{Store, StoreError};
use convo_testutil::{self as testing, draft};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn store() -> Option<(Store, Arc<AtomicU64>, testing::PgDatabase)> {
    let db = testing::pg_database()?;
    let pg = Postgres::connect(&db.url).unwrap();
    let trips = pg.round_trips();
    Some((Store::new(Box::new(pg)), trips, db))
}

fn counted(trips: &AtomicU64, f: impl FnOnce()) -> u64 {
    let before = trips.load(Ordering::SeqCst);
    f();
    trips.load(Ordering::SeqCst) - before
}

#[test]
fn a_postgres_append_costs_two_round_trips() {
    let Some((mut s, trips, _db)) = store() else {
        return;
    };
    let main = BranchName::main();
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    // The first append prepares its statements (once per connection).
    s.transaction(|l| l.append(&ses, &main, &draft(Kind::Invoke, "one", 1)))
        .unwrap();
    let one = counted(&trips, || {
        s.transaction(|l| l.append(&ses, &main, &draft(Kind::Complete, "done", 2)))
            .unwrap();
    });
    assert_eq!(
        one, 2,
        "the branch with its head, then the writes and COMMIT"
    );

    let batch: Vec<_> = (0..10)
        .map(|i| {
            let k = if i % 2 == 0 {
                Kind::Invoke
            } else {
                Kind::Complete
            };
            draft(k, &format!("b{i}"), 3 + i)
        })
        .collect();
    let many = counted(&trips, || {
        s.transaction(|l| l.append_many(&ses, &main, &batch))
            .unwrap();
    });
    assert_eq!(many, 2, "a batch reads once and writes once");

    // Group commit's shape: appends in one transaction, one read each.
    let turn = [Kind::Invoke, Kind::Request, Kind::Response, Kind::Complete];
    let grouped = counted(&trips, || {
        s.transaction(|l| {
            for (i, k) in turn.iter().enumerate() {
                l.append(&ses, &main, &draft(*k, &format!("t{i}"), 20))?;
            }
            Ok(())
        })
        .unwrap();
    });
    assert_eq!(grouped, 5);

    // The server's batches: requests on several branches read their
    // branches in one go, so a batch is two round trips however many.
    let others: Vec<_> = (0..4)
        .map(|i| {
            s.transaction(|l| l.new_session(&format!("o{i}"), None, 0))
                .unwrap()
                .id
        })
        .collect();
    let inv = [draft(Kind::Invoke, "o", 30)];
    let done = [draft(Kind::Complete, "c", 31)];
    let jobs: Vec<_> = others
        .iter()
        .map(|o| (*o, main.clone(), &inv[..]))
        .collect();
    // The first batch prepares its read (once per connection).
    s.transaction(|l| l.append_batch(&jobs)).unwrap();
    let jobs: Vec<_> = others
        .iter()
        .map(|o| (*o, main.clone(), &done[..]))
        .collect();
    let batched = counted(&trips, || {
        s.transaction(|l| l.append_batch(&jobs)).unwrap();
    });
    assert_eq!(
        batched, 2,
        "one read for the batch's branches, then the writes"
    );
    assert_eq!(s.timeline(&ses, &main).unwrap().len(), 2 + 10 + 4);
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn reads_see_the_writes_held_back_before_them() {
    let Some((mut s, _trips, _db)) = store() else {
        return;
    };
    let main = BranchName::main();
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    s.transaction(|l| {
        let a = l.append(&ses, &main, &draft(Kind::Invoke, "a", 1))?;
        assert_eq!(l.branch(&ses, &main)?.head, Some(a.hash));
        let b = l.append(&ses, &main, &draft(Kind::Complete, "b", 2))?;
        assert_eq!(b.node.parent, Some(a.hash));
        assert_eq!(b.seq, a.seq + 1);
        Ok(())
    })
    .unwrap();
    let follow: Vec<u64> = s.follow(0, 10).unwrap().iter().map(|n| n.seq).collect();
    assert_eq!(follow, vec![1, 2]);
}

#[test]
fn a_held_back_write_that_fails_aborts_its_transaction() {
    let Some((mut s, _trips, _db)) = store() else {
        return;
    };
    let main = BranchName::main();
    let ses = s
        .transaction(|l| l.new_session("agent", None, 0))
        .unwrap()
        .id;
    let first = s
        .transaction(|l| l.append(&ses, &main, &draft(Kind::Invoke, "a", 1)))
        .unwrap();
    // A compare-and-swap from a head that is not the branch's: the blob
    // written before it in the same pipeline must not be committed.
    let bytes = b"never committed".as_slice();
    let err = s
        .write(|tx| {
            tx.put_blob(&content_hash(bytes), bytes)?;
            tx.cas_head(
                &ses,
                &main,
                Some(&NodeHash(content_hash(b"x").0)),
                &first.hash,
            )?;
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert_eq!(s.blob(&content_hash(bytes)).unwrap(), None);
    assert_eq!(s.branch(&ses, &main).unwrap().head, Some(first.hash));

    // A node stored twice is refused as such, and nothing else commits.
    let again = s.node(&convo_core::HashPrefix::parse(&first.hash.to_hex()).unwrap());
    let again = again.unwrap();
    let bytes2 = b"not this either".as_slice();
    let err = s
        .write(|tx| {
            tx.put_blob(&content_hash(bytes2), bytes2)?;
            tx.insert_node(&again.hash, &again.node, &again.ctx)?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Invalid(m) if m.contains("already stored")),
        "{err}"
    );
    assert_eq!(s.blob(&content_hash(bytes2)).unwrap(), None);
    assert_eq!(s.end_cursor().unwrap(), 1);
    assert!(s.verify().unwrap().is_clean());
}
