//! Opening a store: schemes, foreign files, read-only opens that never
//! create anything, and PostgreSQL errors that say what the server said.

use convo_store::{Access, Store, StoreError};
use convo_testutil as testing;
use std::path::Path;

fn url(p: &Path) -> String {
    format!("sqlite://{}", p.display())
}

/// Every file in `dir` with its bytes, to show nothing was touched.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn unknown_url_schemes_are_errors_listing_the_supported_ones() {
    for u in ["postgress://u:secret@h/db", "mysql://x/y", "file:///x"] {
        let e = Store::open(u).unwrap_err();
        assert!(matches!(e, StoreError::UnknownScheme { .. }), "{u}: {e}");
        let m = e.to_string();
        assert!(m.contains("sqlite://") && m.contains("postgres://"), "{m}");
        assert!(!m.contains("secret"), "password shown: {m}");
    }
    for made in ["postgress:", "mysql:", "file:"] {
        assert!(!Path::new(made).exists(), "{made} was created");
    }
}

#[test]
fn a_foreign_sqlite_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("theirs.db");
    {
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch("CREATE TABLE accounts (id INTEGER); INSERT INTO accounts VALUES (7);")
            .unwrap();
    }
    let before = snapshot(dir.path());
    for access in [Access::Write, Access::Read] {
        let e = Store::open_as(&url(&p), access).unwrap_err();
        assert!(matches!(e, StoreError::NotAStore { .. }), "{e}");
        assert!(e.to_string().contains("accounts"), "{e}");
        assert!(e.to_string().contains("theirs.db"), "{e}");
    }
    assert_eq!(snapshot(dir.path()), before, "the foreign database changed");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "x".repeat(5000)).unwrap();
    let e = Store::open(&url(&text)).unwrap_err();
    assert!(e.to_string().contains("not a SQLite database"), "{e}");
    assert_eq!(std::fs::read(&text).unwrap(), "x".repeat(5000).into_bytes());

    let e = Store::open(&url(dir.path())).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
}

#[test]
fn reads_never_create_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sub").join("convo.db");
    let e = Store::open_as(&url(&p), Access::Read).unwrap_err();
    assert!(matches!(e, StoreError::NoStore(_)), "{e}");
    assert_eq!(e.to_string(), format!("no store at {}", p.display()));
    assert!(snapshot(dir.path()).is_empty(), "something was created");
    // An empty file is no store either, and stays empty.
    std::fs::write(dir.path().join("empty.db"), b"").unwrap();
    let e = Store::open_as(&url(&dir.path().join("empty.db")), Access::Read).unwrap_err();
    assert!(matches!(e, StoreError::NoStore(_)), "{e}");
    // A write creates it, after which a read opens it.
    Store::open_as(&url(&p), Access::Write).unwrap();
    let mut s = Store::open_as(&url(&p), Access::Read).unwrap();
    assert!(s.sessions().unwrap().is_empty());
}

#[test]
fn a_read_only_open_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("convo.db");
    let mut w = Store::open(&url(&p)).unwrap();
    w.transaction(|l| l.new_session("ses", None, 1)).unwrap();
    drop(w);
    let mut r = Store::open_as(&url(&p), Access::Read).unwrap();
    assert_eq!(r.sessions().unwrap().len(), 1);
    let e = r
        .transaction(|l| l.new_session("ses", None, 2))
        .unwrap_err();
    assert!(e.to_string().contains("readonly"), "{e}");
}

#[test]
fn postgres_reads_never_create_a_store() {
    let Some(db) = testing::pg_database() else {
        return;
    };
    let e = Store::open_as(&db.url, Access::Read).unwrap_err();
    assert!(matches!(e, StoreError::NoStore(_)), "{e}");
    Store::open_as(&db.url, Access::Write).unwrap();
    let mut s = Store::open_as(&db.url, Access::Read).unwrap();
    assert!(s.sessions().unwrap().is_empty());
}

#[test]
fn postgres_connection_errors_show_the_server_message_and_sqlstate() {
    let Some(db) = testing::pg_database() else {
        return;
    };
    let (base, _) = db.url.rsplit_once('/').unwrap();
    let missing = format!("{base}/convo_no_such_database");
    let e = Store::open(&missing).unwrap_err().to_string();
    assert!(
        e.contains("does not exist") && e.contains("3D000"),
        "missing database: {e}"
    );
    let (scheme_user, host) = base.split_once('@').unwrap();
    let (scheme, _) = scheme_user.split_once("://").unwrap();
    let role = format!("{scheme}://convo_no_such_role:pw@{host}/postgres");
    let e = Store::open(&role).unwrap_err().to_string();
    assert!(
        e.contains("convo_no_such_role") && e.contains("28000"),
        "wrong role: {e}"
    );
    assert!(!e.contains(":pw@"), "password shown: {e}");
    // A port nobody listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let e = Store::open(&format!("postgres://u@127.0.0.1:{port}/db"))
        .unwrap_err()
        .to_string();
    assert!(e.to_lowercase().contains("refused"), "refused: {e}");
}

/// A writer whose checkpoints are deferred never checkpoints in its own
/// commits; the work it hands back copies the WAL into the database file
/// on its own connection, keeps the WAL bounded, and ends when the writer's
/// connection closes.
#[test]
fn deferred_checkpoints_run_on_their_own_thread_and_end_with_the_writer() {
    use convo_core::{BranchName, Kind};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("convo.db");
    let mut s = Store::open(&url(&db)).unwrap();
    let work = s
        .defer_checkpoints()
        .unwrap()
        .expect("a SQLite file store defers its checkpoints");
    let ses = s.transaction(|l| l.new_session("a", None, 0)).unwrap();
    let main = BranchName::main();
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let wal = dir.path().join("convo.db-wal");
    let db_before = size(&db);
    // About 1,500 pages of WAL (the inline fallback is at 4,000), none
    // checkpointed by these commits.
    let big = "x".repeat(3000);
    let mut last = None;
    for i in 0.. {
        if size(&wal) > 6 << 20 {
            break;
        }
        let kind = if i % 2 == 0 {
            Kind::Invoke
        } else {
            Kind::Complete
        };
        let d = testing::draft(kind, &format!("{i} {big}"), i);
        last = Some(
            s.transaction(|l| l.append(&ses.id, &main, &d))
                .unwrap()
                .hash,
        );
    }
    assert_eq!(size(&db), db_before, "a commit checkpointed");
    let ran = std::thread::spawn(move || work.run());
    // The database file grows as the checkpoints copy the WAL into it.
    let mut grew = false;
    for _ in 0..500 {
        // A commit after the first checkpoint asks for the next.
        let d = testing::draft(Kind::Invoke, "more", 0);
        let _ = s.transaction(|l| l.append(&ses.id, &main, &d));
        if size(&db) > db_before + (256 << 10) {
            grew = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(grew, "no checkpoint ran: {} bytes", size(&db));
    assert!(
        size(&wal) < 40 << 20,
        "the WAL grew to {} bytes",
        size(&wal)
    );
    drop(s);
    ran.join().unwrap(); // ends once the writer is closed
    let mut s = Store::open(&url(&db)).unwrap();
    let report = s.verify().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let last = convo_core::HashPrefix::parse(&last.unwrap().to_hex()).unwrap();
    assert!(s.node(&last).is_ok());
}
