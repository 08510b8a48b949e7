//! A store edited behind convo's back, on every backend.
//!
//! Each test builds the same busy store (several turns, state writes, a
//! fork and a promote) in a fresh SQLite file or a fresh PostgreSQL
//! database, checks that `verify` finds it clean, then edits one thing with
//! a separate connection, the way a user with the `sqlite3` or `psql` shell
//! or a buggy tool would, and checks that `verify` names the object that was
//! touched and says why. Rows that no longer decode must give an error or a
//! problem, never a panic.
//!
//! Each case is written once, as a function of the backend, and the
//! [`testing::for_each_backend!`] macro runs it as `tamper::sqlite::<case>` and
//! `tamper::postgres::<case>`. Its edits are written in the SQL both
//! backends share (`?N` placeholders, `x'…'` byte literals, `TRUE`), and
//! [`pg_sql`] spells them in PostgreSQL's dialect, so both backends get the
//! same edit. The few edits PostgreSQL's typed columns cannot express (a
//! value of another type than its column's: text in a byte or integer
//! column, a float in an integer one, bytes in a text one) are in
//! `tamper::sqlite_only`.
//!
//! The cases that make dozens of edits, one at a time, build the store once
//! and restore its rows before each edit (see [`Fx::restore`]).

use convo_core::hash::content_hash;
use convo_core::state::{Entry, MapNode};
use convo_core::{BranchName, Diagnostics, HashPrefix, Kind, NodeHash, SessionId, StateRoot};
use convo_store::{ProblemKind, Store, StoreError, VerifyReport};
use convo_testutil::{self as testing, draft, turn};
// `::`: the `postgres` modules `for_each_backend!` makes shadow the crate here.
use ::postgres as pg;
use std::path::PathBuf;

/// 2026-02-13, so the sealed timeline is `broken-2026-02-13`.
const DAY: i64 = 1_770_993_005_000;

/// The backend a case runs on (the tests' one selector).
use convo_testutil::Backend as Be;

testing::for_each_backend!(
    testing::when_available;
    a_flipped_payload_byte_names_the_blob_and_its_node,
    a_parent_moved_to_another_node_is_caught,
    a_timestamp_moved_by_one_millisecond_is_caught,
    a_changed_kind_is_caught,
    an_edited_state_value_is_caught,
    an_edited_state_root_node_is_caught,
    an_edited_inner_state_node_is_caught,
    a_branch_head_pointing_nowhere_is_caught,
    a_head_moved_to_another_sessions_node_is_caught,
    edited_diagnostics_are_caught,
    an_edited_depth_is_caught,
    an_edited_turn_number_is_caught,
    an_edited_state_in_effect_is_caught,
    an_edited_open_flag_or_sequence_is_caught,
    a_node_deleted_from_the_middle_of_a_chain_is_caught,
    a_deleted_head_node_is_caught,
    a_node_moved_after_its_child_in_the_follow_order_is_caught,
    a_deleted_payload_or_trie_node_is_caught,
    a_payload_length_edit_is_caught,
    a_working_state_pointing_nowhere_is_caught,
    undecodable_rows_give_errors_or_problems_never_panics,
    undecodable_integers_never_panic,
    an_out_of_range_integer_is_not_read_back_as_another_value,
    undecodable_branch_blob_and_trie_rows_give_errors_or_problems,
    a_deleted_session_row_is_caught,
    every_row_a_reader_relies_on_is_checked,
    a_whole_session_deleted_is_caught,
    an_edited_or_removed_fact_is_caught,
    bad_rows_are_report_entries_never_errors,
    a_store_from_before_the_journal_is_journalled_in_place,
    a_store_that_grew_extends_its_checkpoint,
    a_consistent_truncation_passes_verify_but_not_the_checkpoint,
    a_forged_tip_with_recomputed_hashes_is_caught_by_the_checkpoint,
    incremental_checkpoints_equal_full_ones_and_are_checked_in_one_pass,
    a_redaction_keeps_the_chain_and_no_byte_of_the_secret,
    a_redacted_state_value_leaves_no_byte_of_it,
    a_redacted_session_leaves_no_byte_of_it_but_what_another_shares,
    a_redaction_is_refused_without_bytes_or_reason,
    an_undone_or_unrecorded_redaction_is_caught,
    an_edited_or_deleted_payload_chunk_names_the_blob_and_its_node,
    an_edited_payload_is_refused_by_every_read_that_serves_it,
    a_store_from_before_chunking_reads_its_whole_payloads_and_chunks_new_ones,
    chunks_rolled_back_or_deleted_elsewhere_are_stored_again_by_the_next_payload,
);

/// Edits PostgreSQL's typed columns refuse (or silently convert into
/// another edit that the shared cases already make), so they run on SQLite,
/// whose columns take a value of any type, only.
mod sqlite_only {
    use super::*;

    #[test]
    fn undecodable_typeless_rows_give_errors_or_problems_never_panics() {
        check_node_edits(Be::Sqlite, UNDECODABLE_SQLITE_ONLY);
    }

    #[test]
    fn undecodable_typeless_branch_and_blob_rows_give_errors_or_problems() {
        let cases: Vec<(String, String)> = UNDECODABLE_OTHER_SQLITE_ONLY
            .iter()
            .map(|(w, s)| ((*w).to_owned(), (*s).to_owned()))
            .collect();
        check_other_edits(&Fx::new(Be::Sqlite), &cases);
    }

    /// SQLite lists a session's nodes in `session_runs`; a run deleted,
    /// shortened or given to another session would hide nodes from their
    /// timeline, so verify names every node it no longer covers.
    #[test]
    fn an_edited_session_index_is_caught() {
        let fx = Fx::new(Be::Sqlite);
        fx.save();
        let runs: i64 = fx.query_one("SELECT count(*) FROM session_runs", &[]);
        assert_eq!(runs, 1, "one session appended alone is one run");
        let cases: [(&str, &[Arg<'_>]); 3] = [
            ("DELETE FROM session_runs", &[]),
            ("UPDATE session_runs SET last = last - 2", &[]),
            (
                "UPDATE session_runs SET session = ?1",
                &[Text("ses-00000000-0000-4000-8000-000000000000")],
            ),
        ];
        for (sql, args) in cases {
            fx.edit(sql, args);
            let r = fx.verify_dirty();
            expect(
                &r,
                &node_obj(&fx.promote),
                &["session index does not list it"],
            );
            // The timeline never shows a node of another session, and
            // says nothing it should not: it only loses what is unlisted.
            if let Ok(t) = fx.store().timeline(&fx.ses, &main()) {
                assert!(t.iter().all(|n| n.stored.node.session == fx.ses));
            }
            fx.restore();
        }
        fx.edit(
            "INSERT INTO session_runs (first, last, session) VALUES (5, 6, ?1)",
            &[Text(&fx.ses.to_string())],
        );
        expect(&fx.verify_dirty(), "session index", &["overlap"]);
        fx.restore();
        fx.edit("UPDATE session_runs SET last = first - 1", &[]);
        expect(&fx.verify_dirty(), "session index", &["spans"]);
    }

    /// Nothing in the SQLite schema stops a second row with a node's hash
    /// (the index on its first 8 bytes is not UNIQUE): verify does.
    #[test]
    fn a_node_row_stored_twice_is_caught() {
        let fx = Fx::new(Be::Sqlite);
        fx.edit(
            "INSERT INTO nodes SELECT (SELECT max(seq) + 1 FROM nodes), hash, session, parent, \
             kind, submission, sequence, sender, recipient, payload, payload_len, diagnostics, \
             state, created_at, ev_branch, ev_sealed, ev_nonce, depth, ctx_sub, ctx_open, \
             ctx_seq, ctx_state, payload_id, ctx_turn FROM nodes WHERE hash = ?1",
            &[Bytes(fx.t1[0].as_bytes())],
        );
        expect(
            &fx.verify_dirty(),
            &node_obj(&fx.t1[0]),
            &["another node row holds the same hash"],
        );
    }

    /// The path of a SQLite fixture's database file, its WAL folded in.
    fn db_file(fx: &Fx) -> PathBuf {
        let Db::Sqlite { path, .. } = &fx.db else {
            panic!("a SQLite fixture")
        };
        rusqlite::Connection::open(path)
            .unwrap()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        path.clone()
    }

    /// After verify found the database damaged, a write is refused with
    /// a clear error (and a read-only verify still reports).
    fn assert_refuses_writes(fx: &Fx) {
        match Store::open(&fx.db.url()) {
            Err(e) => assert!(matches!(e, StoreError::Damaged(_)), "{e:?}"),
            Ok(mut s) => {
                let e = s
                    .transaction(|l| {
                        l.append(&fx.ses, &main(), &draft(Kind::Invoke, "after", DAY + 100))
                    })
                    .unwrap_err();
                assert!(matches!(e, StoreError::Damaged(_)), "{e:?}");
                assert!(e.to_string().contains("integrity check"), "{e}");
            }
        }
    }

    /// Verify on a damaged file: a report whose `database` entry says why,
    /// or (when SQLite cannot even read the header) a `Damaged` error,
    /// which `convo verify` turns into the same entry.
    fn verify_damaged(fx: &Fx) -> String {
        match Store::open(&fx.db.url()).and_then(|mut s| s.verify()) {
            Ok(r) => {
                let p = r
                    .problems
                    .iter()
                    .find(|p| p.object == "database")
                    .unwrap_or_else(|| panic!("no database problem: {:#?}", r.problems));
                p.reason.clone()
            }
            Err(e) => {
                assert!(
                    matches!(e, StoreError::Damaged(_) | StoreError::NotAStore { .. }),
                    "{e:?}"
                );
                e.to_string()
            }
        }
    }

    /// A page of garbage in the middle of the file: SQLite's integrity
    /// check finds it, verify reports it, and the store refuses writes
    /// (which used to land beside the garbage).
    #[test]
    fn a_garbage_page_is_reported_and_refuses_writes() {
        let fx = Fx::new(Be::Sqlite);
        let path = db_file(&fx);
        let mut bytes = std::fs::read(&path).unwrap();
        let pages = bytes.len() / 4096;
        assert!(pages > 4, "{pages} pages");
        let at = (pages - 2) * 4096;
        bytes[at..at + 4096].fill(0xa5);
        std::fs::write(&path, &bytes).unwrap();
        let why = verify_damaged(&fx);
        assert!(!why.is_empty());
        assert_refuses_writes(&fx);
    }

    /// A file cut in half, and one that is garbage from its first byte.
    #[test]
    fn a_truncated_or_garbage_file_is_reported_not_a_crash() {
        let fx = Fx::new(Be::Sqlite);
        let path = db_file(&fx);
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        verify_damaged(&fx);
        assert_refuses_writes(&fx);
        std::fs::write(&path, vec![0x5a; 8192]).unwrap();
        let why = verify_damaged(&fx);
        assert!(why.contains("not a SQLite database"), "{why}");
    }

    /// `PRAGMA user_version` set to another version than the tables are:
    /// migrating would run the wrong scripts, so the store refuses to open
    /// and says why.
    #[test]
    fn a_wrong_schema_version_is_reported() {
        let fx = Fx::new(Be::Sqlite);
        let path = db_file(&fx);
        for v in [0, 1, 2] {
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute_batch(&format!("PRAGMA user_version = {v};"))
                .unwrap();
            let why = verify_damaged(&fx);
            assert!(
                why.contains(&format!("user_version {v},"))
                    || why.contains(&format!("user_version) says {v}")),
                "{why}"
            );
        }
    }

    /// A blob row's lookup key (`blobs.k`, the start of its hash) changed:
    /// every lookup by hash misses the row, so verify names it.
    #[test]
    fn a_blob_row_whose_lookup_key_is_not_its_hash_is_reported() {
        let fx = Fx::new(Be::Sqlite);
        let payload = content_hash(b"three/invoke");
        fx.edit(
            "UPDATE blobs SET k = X'0000000000000000' WHERE hash = ?1",
            &[Bytes(payload.as_bytes())],
        );
        let r = fx.store().verify().unwrap();
        let all = format!("{:?}", r.problems);
        assert!(all.contains("lookup key"), "{all}");
        assert!(all.contains(&payload.to_hex()), "{all}");
    }

    /// A chunk row's lookup key (`chunks.k`) changed: every read misses
    /// the chunk, reading on in row order included, so verify names the
    /// payload that needs it (the chunk missing) and its node, and a read
    /// of the payload refuses it.
    #[test]
    fn a_chunk_row_whose_lookup_key_is_not_its_hash_is_missing_to_every_read() {
        let fx = Fx::new(Be::Sqlite);
        let (node, payload) = append_payload(&fx, testing::growing_request(40, ""));
        let (chunk, _) = chunk_holding(&fx, b"question 17:");
        fx.edit(
            "UPDATE chunks SET k = X'0000000000000000' WHERE hash = ?1",
            &[Bytes(&chunk)],
        );
        let r = fx.store().verify().unwrap();
        let blob = format!("blob {}", payload.to_hex());
        expect(&r, &blob, &[&hex::encode(&chunk), "missing"]);
        expect(&r, &node_obj(&node), &["payload", &payload.to_hex()]);
        let e = fx.store().blob(&payload).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    /// `CAST(data AS TEXT)` stores a BLOB column's bytes as TEXT; a BYTEA
    /// column cannot hold text.
    #[test]
    fn a_payload_stored_as_text_is_reported_or_still_readable() {
        let fx = Fx::new(Be::Sqlite);
        let node = fx.t3[0];
        let payload = content_hash(b"three/invoke");
        fx.edit(
            "UPDATE blobs SET data = CAST(data AS TEXT) WHERE hash = ?1",
            &[Bytes(payload.as_bytes())],
        );
        let r = fx.store().verify().unwrap();
        let read = fx.store().blob(&payload);
        let timeline = fx.store().timeline(&fx.ses, &fx.sealed);
        assert!(
            !r.is_clean() || (read.is_ok() && timeline.is_ok()),
            "verify is clean but reads fail: blob {read:?}, timeline {:?}",
            timeline.map(|t| t.len())
        );
        if let Ok(t) = fx.store().timeline(&fx.ses, &fx.sealed) {
            let n = t.iter().find(|n| n.stored.hash == node).unwrap();
            assert_eq!(n.payload, b"three/invoke");
        }
    }
}

/// A parameter of an edit or a query: bytes (BLOB/BYTEA) or text.
#[derive(Clone, Copy, Debug)]
enum Arg<'a> {
    Bytes(&'a [u8]),
    Text(&'a str),
}
use Arg::{Bytes, Text};

/// Spells SQL written in the dialect the edits share (SQLite's `?N`
/// placeholders and `x'…'` byte literals) in PostgreSQL's: `$N` and
/// `decode('…', 'hex')`; string literals are copied as they are. (`TRUE`,
/// `substr` on bytes, integer literals and arithmetic mean the same on both.)
fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    let mut prev = ' ';
    while let Some(c) = rest.chars().next() {
        let after = &rest[c.len_utf8()..];
        let word_start = !(prev.is_ascii_alphanumeric() || prev == '_');
        // A literal: its body, and whether it is a byte literal.
        let literal = match c {
            '\'' => Some((after, false)),
            'x' | 'X' if word_start && after.starts_with('\'') => Some((&after[1..], true)),
            _ => None,
        };
        if let Some((body, bytes)) = literal {
            let end = body.find('\'').expect("an unterminated literal in the SQL");
            let text = &body[..end];
            if bytes {
                assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "x'{text}'");
                out.push_str(&format!("decode('{text}', 'hex')"));
            } else {
                out.push_str(&format!("'{text}'"));
            }
            rest = &body[end + 1..];
            prev = '\'';
            continue;
        }
        if c == '?' && after.starts_with(|d: char| d.is_ascii_digit()) {
            out.push('$');
        } else {
            out.push(c);
        }
        prev = c;
        rest = after;
    }
    out
}

/// Where a fixture lives.
enum Db {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    Postgres(testing::PgDatabase),
}

impl Db {
    fn new(be: Be) -> Db {
        match be {
            Be::Sqlite | Be::SqliteMemory => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("convo.db");
                Db::Sqlite { _dir: dir, path }
            }
            Be::Postgres => {
                Db::Postgres(testing::pg_database().expect("CONVO_TEST_PG was set a moment ago"))
            }
        }
    }

    fn url(&self) -> String {
        match self {
            Db::Sqlite { path, .. } => format!("sqlite://{}", path.display()),
            Db::Postgres(db) => db.url.clone(),
        }
    }

    /// Runs one statement (shared dialect) on a separate connection and
    /// returns how many rows it changed.
    fn execute(&self, sql: &str, args: &[Arg<'_>]) -> u64 {
        match self {
            Db::Sqlite { path, .. } => {
                let c = rusqlite::Connection::open(path).unwrap();
                let n = c
                    .execute(sql, rusqlite::params_from_iter(args.iter().map(lite)))
                    .unwrap_or_else(|e| panic!("`{sql}`: {e}"));
                n as u64
            }
            Db::Postgres(db) => {
                let mut c = pg::Client::connect(&db.url, pg::NoTls).unwrap();
                let sql = pg_sql(sql);
                c.execute(&sql, &pg_args(args))
                    .unwrap_or_else(|e| panic!("`{sql}`: {e}"))
            }
        }
    }

    /// Runs statements (shared dialect, no parameters) on a separate connection.
    fn batch(&self, sql: &str) {
        match self {
            Db::Sqlite { path, .. } => rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(sql)
                .unwrap_or_else(|e| panic!("`{sql}`: {e}")),
            Db::Postgres(db) => pg::Client::connect(&db.url, pg::NoTls)
                .unwrap()
                .batch_execute(&pg_sql(sql))
                .unwrap_or_else(|e| panic!("`{sql}`: {e}")),
        }
    }

    /// The one value `sql` (shared dialect) selects.
    fn query_one<T>(&self, sql: &str, args: &[Arg<'_>]) -> T
    where
        T: rusqlite::types::FromSql + for<'r> pg::types::FromSql<'r>,
    {
        match self {
            Db::Sqlite { path, .. } => rusqlite::Connection::open(path)
                .unwrap()
                .query_row(
                    sql,
                    rusqlite::params_from_iter(args.iter().map(lite)),
                    |r| r.get(0),
                )
                .unwrap_or_else(|e| panic!("`{sql}`: {e}")),
            Db::Postgres(db) => {
                let mut c = pg::Client::connect(&db.url, pg::NoTls).unwrap();
                let sql = pg_sql(sql);
                c.query_one(&sql, &pg_args(args))
                    .unwrap_or_else(|e| panic!("`{sql}`: {e}"))
                    .get(0)
            }
        }
    }
}

fn lite(a: &Arg<'_>) -> rusqlite::types::Value {
    match *a {
        Bytes(b) => b.to_vec().into(),
        Text(t) => t.to_owned().into(),
    }
}

fn pg_args<'a>(args: &'a [Arg<'a>]) -> Vec<&'a (dyn pg::types::ToSql + Sync)> {
    args.iter()
        .map(|a| match a {
            Bytes(b) => b as &(dyn pg::types::ToSql + Sync),
            Text(t) => t as &(dyn pg::types::ToSql + Sync),
        })
        .collect()
}

/// Every table both backends' schemas have.
const TABLES: [&str; 7] = [
    "sessions",
    "blobs",
    "nodes",
    "branches",
    "state_nodes",
    "facts",
    "redactions",
];

/// The tables of `db`'s schema: SQLite indexes a session's nodes by runs
/// in one more.
fn tables(db: &Db) -> Vec<&'static str> {
    let mut t = TABLES.to_vec();
    if let Db::Sqlite { .. } = db {
        t.push("session_runs");
    }
    t
}

/// The store built by [`Fx::new`], and the names of what is in it.
struct Fx {
    db: Db,
    ses: SessionId,
    /// The three turns of the old `main` (invoke, request, response, complete).
    t1: Vec<NodeHash>,
    t2: Vec<NodeHash>,
    t3: Vec<NodeHash>,
    /// The fork node of `fix`, after `t2[3]`.
    fork: NodeHash,
    /// The turn appended to `fix`.
    tf: Vec<NodeHash>,
    /// The promote node, head of the new `main`.
    promote: NodeHash,
    /// The name the old `main` was sealed under.
    sealed: BranchName,
    /// The state carried by `t1[3]` (20 keys, so the trie has inner nodes).
    root1: StateRoot,
    /// The state carried by `t2[3]`.
    root2: StateRoot,
}

fn main() -> BranchName {
    BranchName::main()
}

fn prefix(h: &NodeHash) -> HashPrefix {
    HashPrefix::parse(&h.to_hex()).unwrap()
}

impl Fx {
    fn new(be: Be) -> Fx {
        let db = Db::new(be);
        let mut s = Store::open(&db.url()).unwrap();
        let ses = s
            .transaction(|l| l.new_session("agent", Some("tamper"), DAY))
            .unwrap()
            .id;
        for i in 0..20 {
            s.transaction(|l| {
                l.state_put(&ses, &main(), &format!("k{i}"), format!("v{i}").as_bytes())
            })
            .unwrap();
        }
        let t1 = turn(&mut s, &ses, &main(), "one", DAY + 10);
        s.transaction(|l| l.state_put(&ses, &main(), "k3", b"v3-changed"))
            .unwrap();
        assert!(
            s.transaction(|l| l.state_delete(&ses, &main(), "k4"))
                .unwrap()
                .1
        );

        // The second turn's response carries real diagnostics.
        let mut t2 = Vec::new();
        for (i, k) in [Kind::Invoke, Kind::Request, Kind::Response, Kind::Complete]
            .into_iter()
            .enumerate()
        {
            let mut d = draft(k, &format!("two/{k}"), DAY + 20 + i as i64);
            if k == Kind::Response {
                d.diagnostics = Diagnostics::parse(r#"{"status":200,"ms":12}"#).unwrap();
            }
            t2.push(s.transaction(|l| l.append(&ses, &main(), &d)).unwrap().hash);
        }
        let t3 = turn(&mut s, &ses, &main(), "three", DAY + 30);

        let fix = BranchName::new("fix").unwrap();
        let fork = s
            .transaction(|l| l.fork(&ses, &prefix(&t2[3]), &fix, DAY + 40))
            .unwrap()
            .hash;
        s.transaction(|l| l.state_put(&ses, &fix, "fix", b"yes"))
            .unwrap();
        let tf = turn(&mut s, &ses, &fix, "three-b", DAY + 50);
        let pr = s.transaction(|l| l.promote(&ses, &fix, DAY + 60)).unwrap();
        assert_eq!(pr.sealed_as.as_str(), "broken-2026-02-13");

        let root1 = s.node(&prefix(&t1[3])).unwrap().node.state.unwrap();
        let root2 = s.node(&prefix(&t2[3])).unwrap().node.state.unwrap();
        assert_ne!(root1, root2);

        let r = s.verify().unwrap();
        assert!(
            r.is_clean(),
            "the untouched store is clean: {:#?}",
            r.problems
        );
        assert_eq!(r.nodes, 12 + 1 + 4 + 1);
        assert_eq!(r.branches, 2);
        drop(s);
        Fx {
            db,
            ses,
            t1,
            t2,
            t3,
            fork,
            tf,
            promote: pr.node.hash,
            sealed: pr.sealed_as,
            root1,
            root2,
        }
    }

    /// Saves every row of the store in `saved_*` tables next to its own,
    /// for [`Fx::restore`].
    fn save(&self) {
        self.db.batch(
            &tables(&self.db)
                .iter()
                .map(|t| format!("CREATE TABLE saved_{t} AS SELECT * FROM {t};"))
                .collect::<String>(),
        );
    }

    /// Puts back the rows [`Fx::save`] saved, undoing every edit and write
    /// since, and checks that the store is clean again. For the cases that
    /// make many edits, each to the same store: restoring it is much faster
    /// than building a new one, above all on PostgreSQL.
    fn restore(&self) {
        let sql: String = tables(&self.db)
            .iter()
            .map(|t| format!("DELETE FROM {t}; INSERT INTO {t} SELECT * FROM saved_{t};"))
            .collect();
        self.db.batch(&format!("BEGIN; {sql} COMMIT;"));
        let r = self.store().verify().unwrap();
        assert!(r.is_clean(), "the restored store: {:#?}", r.problems);
        assert_eq!(r.nodes, 12 + 1 + 4 + 1);
    }

    fn store(&self) -> Store {
        Store::open(&self.db.url()).unwrap()
    }

    /// Runs one statement that must change exactly one row.
    fn edit(&self, sql: &str, args: &[Arg<'_>]) {
        let n = self.db.execute(sql, args);
        assert_eq!(n, 1, "`{sql}` changed {n} rows");
    }

    /// The one value `sql` selects.
    fn query_one<T>(&self, sql: &str, args: &[Arg<'_>]) -> T
    where
        T: rusqlite::types::FromSql + for<'r> pg::types::FromSql<'r>,
    {
        self.db.query_one(sql, args)
    }

    /// Re-opens the store and verifies it; it must not be clean.
    fn verify_dirty(&self) -> VerifyReport {
        let r = self.store().verify().unwrap();
        assert!(!r.is_clean(), "verify missed the edit");
        for p in &r.problems {
            assert!(
                !p.reason.trim().is_empty(),
                "a problem without a reason: {p:?}"
            );
        }
        r
    }
}

impl Fx {
    fn promote_hex(&self) -> String {
        self.promote.to_hex()
    }
}

fn node_obj(h: &NodeHash) -> String {
    format!("node {}", h.to_hex())
}

/// Asserts that some problem is about `object` and its reason mentions every
/// piece of `says`.
#[track_caller]
fn expect(r: &VerifyReport, object: &str, says: &[&str]) {
    assert!(
        r.problems
            .iter()
            .any(|p| p.object == object && says.iter().all(|s| p.reason.contains(s))),
        "expected a problem on `{object}` saying {says:?}, got {:#?}",
        r.problems
    );
}

/// Asserts that every problem is about one of `objects` (no innocent object is blamed).
#[track_caller]
fn only(r: &VerifyReport, objects: &[String]) {
    for p in &r.problems {
        assert!(
            objects.contains(&p.object),
            "an untouched object was blamed: {p:?} (expected only {objects:?})"
        );
    }
}

/// Asserts that a problem on the node says its fields no longer hash to it.
#[track_caller]
fn expect_rehash(r: &VerifyReport, h: &NodeHash) {
    expect(r, &node_obj(h), &["not to its stored hash"]);
}

#[test]
fn the_shared_dialect_is_spelled_for_postgres() {
    assert_eq!(
        pg_sql("UPDATE t SET a = x'0a0B', b = ?1, c = X'', d = 'x' WHERE ctx = ?12 AND e = 'a?1'"),
        "UPDATE t SET a = decode('0a0B', 'hex'), b = $1, c = decode('', 'hex'), d = 'x' \
         WHERE ctx = $12 AND e = 'a?1'"
    );
}

fn a_flipped_payload_byte_names_the_blob_and_its_node(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t2[0];
    let payload = fx.store().node(&prefix(&node)).unwrap().node.payload;
    let mut data: Vec<u8> = fx.query_one(
        "SELECT data FROM blobs WHERE hash = ?1",
        &[Bytes(payload.as_bytes())],
    );
    assert_eq!(data, b"two/invoke");
    data[3] ^= 0x01;
    fx.edit(
        "UPDATE blobs SET data = ?1 WHERE hash = ?2",
        &[Bytes(&data), Bytes(payload.as_bytes())],
    );
    let r = fx.verify_dirty();
    let blob = format!("blob {}", payload.to_hex());
    expect(&r, &blob, &["do not hash to its address"]);
    expect(&r, &node_obj(&node), &["payload", &payload.to_hex()]);
    only(&r, &[blob, node_obj(&node)]);
}

/// Appends an invoke holding `payload` to the fixture's `main`.
fn append_payload(fx: &Fx, payload: Vec<u8>) -> (NodeHash, convo_core::ContentHash) {
    let mut s = fx.store();
    let mut d = draft(Kind::Invoke, "", DAY + 1_000);
    d.payload = payload;
    let n = s.transaction(|l| l.append(&fx.ses, &main(), &d)).unwrap();
    (n.hash, n.node.payload)
}

/// The address and bytes of a stored chunk that holds `needle`.
fn chunk_holding(fx: &Fx, needle: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut found = None;
    fx.store()
        .read(|tx| {
            tx.scan_chunks(&mut |h, d| {
                if d.windows(needle.len()).any(|w| w == needle) {
                    found = Some((h.to_vec(), d.to_vec()));
                }
                Ok(())
            })
        })
        .unwrap();
    found.expect("a chunk holds the needle")
}

/// A payload stored in chunks (SQLite and PostgreSQL `chunks`): a chunk
/// edited behind convo's back, then deleted, fails verify on the payload
/// (naming the chunk) and on the node that commits to it, nothing else.
fn an_edited_or_deleted_payload_chunk_names_the_blob_and_its_node(be: Be) {
    let fx = Fx::new(be);
    let (node, payload) = append_payload(&fx, testing::growing_request(40, ""));
    assert!(fx.store().verify().unwrap().is_clean());
    let (chunk, mut data) = chunk_holding(&fx, b"question 17:");
    data[3] ^= 0x01;
    fx.edit(
        "UPDATE chunks SET data = ?1 WHERE hash = ?2",
        &[Bytes(&data), Bytes(&chunk)],
    );
    let blob = format!("blob {}", payload.to_hex());
    let r = fx.verify_dirty();
    expect(
        &r,
        &blob,
        &[&hex::encode(&chunk), "does not hash to its address"],
    );
    expect(&r, &node_obj(&node), &["payload", &payload.to_hex()]);
    only(&r, &[blob.clone(), node_obj(&node)]);
    fx.edit("DELETE FROM chunks WHERE hash = ?1", &[Bytes(&chunk)]);
    let r = fx.verify_dirty();
    expect(&r, &blob, &[&hex::encode(&chunk), "missing"]);
    expect(&r, &node_obj(&node), &["payload", &payload.to_hex()]);
    only(&r, &[blob, node_obj(&node)]);
}

/// Reads check what they serve: a payload whose bytes were changed behind
/// convo's back (stored whole, or one of its chunks) is an error on every
/// read that returns it whole (a node's payload, a timeline, the export
/// and replay built on them), never the edited bytes.
fn an_edited_payload_is_refused_by_every_read_that_serves_it(be: Be) {
    let fx = Fx::new(be);
    let (_, big) = append_payload(&fx, testing::growing_request(40, ""));
    let small = fx.store().node(&prefix(&fx.t2[0])).unwrap().node.payload;
    let refused = |what: &str, h: &convo_core::ContentHash| {
        let mut s = fx.store();
        let e = s.blob(h).expect_err(what);
        assert!(matches!(e, StoreError::Corrupt(_)), "{what}: {e}");
        assert!(e.to_string().contains(&h.to_hex()), "{what}: {e}");
        assert!(e.to_string().contains("does not hash"), "{what}: {e}");
        let e = s.timeline(&fx.ses, &main()).expect_err(what);
        assert!(matches!(e, StoreError::Corrupt(_)), "{what}: {e}");
    };
    // Whole: one byte flipped.
    let mut data: Vec<u8> = fx.query_one(
        "SELECT data FROM blobs WHERE hash = ?1",
        &[Bytes(small.as_bytes())],
    );
    data[3] ^= 0x01;
    fx.edit(
        "UPDATE blobs SET data = ?1 WHERE hash = ?2",
        &[Bytes(&data), Bytes(small.as_bytes())],
    );
    refused("a whole payload edited", &small);
    data[3] ^= 0x01;
    fx.edit(
        "UPDATE blobs SET data = ?1 WHERE hash = ?2",
        &[Bytes(&data), Bytes(small.as_bytes())],
    );
    assert_eq!(fx.store().blob(&small).unwrap().unwrap(), b"two/invoke");
    // Chunked: one chunk edited keeping its length.
    let (chunk, mut data) = chunk_holding(&fx, b"question 17:");
    data[3] ^= 0x01;
    fx.edit(
        "UPDATE chunks SET data = ?1 WHERE hash = ?2",
        &[Bytes(&data), Bytes(&chunk)],
    );
    refused("a chunk edited", &big);
}

/// A store written before payloads were chunked (SQLite schema 7,
/// PostgreSQL 5) holding a conversation's requests whole, each resending
/// the history: opening it migrates it in place. Every large payload is
/// chunked in its own row (same id, same address; more than one batch of
/// them), reads back byte for byte, verifies; the space is returned; a
/// payload whose bytes no longer hash is left whole for verify to report.
/// A migration killed between batches (some rows chunked, the work still
/// marked pending) goes on at the next open. New payloads are chunked.
fn a_store_from_before_chunking_reads_its_whole_payloads_and_chunks_new_ones(be: Be) {
    let fx = Fx::new(be);
    fx.db.batch(match be {
        Be::Sqlite | Be::SqliteMemory => {
            "DROP INDEX nodes_by_thread; DROP INDEX nodes_by_thread_response; \
             DROP INDEX nodes_by_thread_conversation; DROP TABLE pending_work; DROP TABLE otlp_exports; DROP TABLE import_keys; DROP TABLE import_tails; DROP TABLE import_files; \
             DROP TABLE chunks; ALTER TABLE blobs DROP COLUMN chunked; DROP TABLE open_turns; \
             PRAGMA user_version = 7;"
        }
        Be::Postgres => {
            "DROP INDEX nodes_by_thread; DROP INDEX nodes_by_thread_response; \
             DROP INDEX nodes_by_thread_conversation; DROP FUNCTION convo_diag_field; \
             DROP TABLE pending_work; DROP TABLE otlp_exports; DROP TABLE import_keys; DROP TABLE import_tails; DROP TABLE import_files; \
             DROP TABLE chunks; ALTER TABLE blobs DROP COLUMN chunked; DROP TABLE open_turns; \
             UPDATE convo_schema SET version = 5;"
        }
    });
    // What the previous release wrote for large payloads: whole rows.
    let insert = match be {
        Be::Sqlite | Be::SqliteMemory => {
            "INSERT INTO blobs (hash, k, data) VALUES (?1, substr(?1, 1, 8), ?2)"
        }
        Be::Postgres => "INSERT INTO blobs (hash, data) VALUES (?1, ?2)",
    };
    let olds: Vec<Vec<u8>> = (20..110).map(|n| testing::growing_request(n, "")).collect();
    for old in &olds {
        fx.edit(insert, &[Bytes(content_hash(old).as_bytes()), Bytes(old)]);
    }
    // One whose bytes were edited behind convo's back before the upgrade.
    let edited = testing::growing_request(7, "edited");
    let edited_h = content_hash(&edited);
    let mut bad = edited.clone();
    bad[100] ^= 1;
    fx.edit(insert, &[Bytes(edited_h.as_bytes()), Bytes(&bad)]);
    let size = |fx: &Fx| -> i64 {
        match be {
            Be::Postgres => fx.query_one(
                "SELECT pg_total_relation_size('blobs') + pg_total_relation_size('chunks')",
                &[],
            ),
            _ => fx.query_one(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
                &[],
            ),
        }
    };
    let ids = |fx: &Fx, h: &convo_core::ContentHash| -> (i64, bool) {
        let id: i64 = fx.query_one(
            "SELECT id FROM blobs WHERE hash = ?1",
            &[Bytes(h.as_bytes())],
        );
        let chunked: i64 = fx.query_one(
            "SELECT count(*) FROM blobs WHERE hash = ?1 AND chunked",
            &[Bytes(h.as_bytes())],
        );
        (id, chunked == 1)
    };
    let before_size = (be != Be::Postgres).then(|| size(&fx));
    let first = content_hash(&olds[0]);
    let first_id: i64 = fx.query_one(
        "SELECT id FROM blobs WHERE hash = ?1",
        &[Bytes(first.as_bytes())],
    );
    let mut s = fx.store();
    for old in &olds {
        let h = content_hash(old);
        assert_eq!(s.blob(&h).unwrap().unwrap(), *old);
        assert!(ids(&fx, &h).1, "a payload stored whole is chunked in place");
    }
    assert_eq!(ids(&fx, &first), (first_id, true), "the row keeps its id");
    assert!(!ids(&fx, &edited_h).1, "an edited payload is left whole");
    let pending: i64 = fx.query_one("SELECT count(*) FROM pending_work", &[]);
    assert_eq!(pending, 0);
    if let Some(before) = before_size {
        let after = size(&fx);
        assert!(
            after * 3 < before,
            "the space is returned: {before} -> {after} bytes"
        );
    }
    let r = s.verify().unwrap();
    expect(
        &r,
        &format!("blob {}", edited_h.to_hex()),
        &["do not hash to its address"],
    );
    only(&r, &[format!("blob {}", edited_h.to_hex())]);
    drop(s);
    // Killed between two batches: one row whole again, the work pending.
    let last = content_hash(olds.last().unwrap());
    fx.edit(
        match be {
            Be::Postgres => "UPDATE blobs SET data = ?1, chunked = FALSE WHERE hash = ?2",
            _ => "UPDATE blobs SET data = ?1, chunked = 0 WHERE hash = ?2",
        },
        &[Bytes(olds.last().unwrap()), Bytes(last.as_bytes())],
    );
    fx.edit(
        "INSERT INTO pending_work (work) VALUES (?1)",
        &[Text("rechunk")],
    );
    let mut s = fx.store();
    assert!(ids(&fx, &last).1, "the next open goes on");
    assert_eq!(s.blob(&last).unwrap().unwrap(), *olds.last().unwrap());
    // The same payload recorded again is not stored again; new ones are
    // chunked beside the old.
    let (_, stored) = append_payload(&fx, olds[5].clone());
    assert_eq!(stored, content_hash(&olds[5]));
    let new = testing::growing_request(131, "");
    let mut d = draft(Kind::Complete, "", DAY + 2_000);
    d.payload = new.clone();
    let n = s.transaction(|l| l.append(&fx.ses, &main(), &d)).unwrap();
    assert_eq!(s.blob(&n.node.payload).unwrap().unwrap(), new);
    let previews = s.timeline_previews(&fx.ses, &main(), None, 64).unwrap();
    let tail = &previews[previews.len() - 2..];
    assert_eq!(
        (tail[0].head.as_slice(), tail[0].len),
        (&olds[5][..64], olds[5].len() as u64)
    );
    assert_eq!(
        (tail[1].head.as_slice(), tail[1].len),
        (&new[..64], new.len() as u64)
    );
    let r = s.verify().unwrap();
    only(&r, &[format!("blob {}", edited_h.to_hex())]);
}

/// A connection remembers the payloads it stored lately and which chunks
/// it knows are stored, so the next call of a conversation is hashed, cut
/// and stored from where it differs (`chunk::Recent`, `chunk::Stored`).
/// Chunks that are not stored after all are stored again by the next
/// payload that needs them: those of a transaction that rolled back, and
/// those another connection deleted (here behind convo's back).
fn chunks_rolled_back_or_deleted_elsewhere_are_stored_again_by_the_next_payload(be: Be) {
    let fx = Fx::new(be);
    let mut s = fx.store();
    let append = |s: &mut Store, payload: &[u8], fail: bool| {
        s.transaction(|l| {
            let mut d = draft(Kind::Invoke, "", DAY + 1_000);
            d.payload = payload.to_vec();
            let n = l.append(&fx.ses, &main(), &d)?;
            if fail {
                return Err(StoreError::Invalid("rolled back".into()));
            }
            Ok(n.node.payload)
        })
    };
    let first = testing::growing_request(40, "");
    assert!(append(&mut s, &first, true).is_err());
    assert!(testing::stored_chunks(&mut s).is_empty());
    let second = testing::growing_request(41, "");
    let h2 = append(&mut s, &second, false).unwrap();
    assert_eq!(s.blob(&h2).unwrap().unwrap(), second);
    let third = testing::growing_request(42, "");
    let h3 = append(&mut s, &third, false).unwrap();
    assert_eq!(s.blob(&h3).unwrap().unwrap(), third);
    assert!(s.verify().unwrap().is_clean());
    // Another connection deletes every chunk; this one appends the next
    // call of the conversation, which shares most of them.
    fx.db.batch("DELETE FROM chunks");
    let fourth = testing::growing_request(43, "");
    let h4 = append(&mut s, &fourth, false).unwrap();
    drop(s);
    let mut s = fx.store();
    assert_eq!(s.blob(&h4).unwrap().unwrap(), fourth);
    let r = s.verify().unwrap();
    let h4 = format!("blob {}", h4.to_hex());
    assert!(
        !r.problems.iter().any(|p| p.object == h4),
        "{:#?}",
        r.problems
    );
}

fn a_parent_moved_to_another_node_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t3[0];
    fx.edit(
        "UPDATE nodes SET parent = ?1 WHERE hash = ?2",
        &[Bytes(fx.t1[3].as_bytes()), Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    // Its context no longer follows from the (new) parent either.
    expect(&r, &node_obj(&node), &["context"]);
    only(&r, &[node_obj(&node)]);
}

fn a_timestamp_moved_by_one_millisecond_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.tf[2];
    fx.edit(
        "UPDATE nodes SET created_at = created_at + 1 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    only(&r, &[node_obj(&node)]);
}

fn a_changed_kind_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t1[3];
    fx.edit(
        &format!(
            "UPDATE nodes SET kind = {} WHERE hash = ?1 AND kind = {}",
            Kind::Invoke.code(),
            Kind::Complete.code()
        ),
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    // As an invoke it would start another submission than the one stored.
    expect(&r, &node_obj(&node), &["submission or sequence"]);
    only(&r, &[node_obj(&node)]);

    // A fork node relabelled as a promote has the wrong shape as well.
    let fx = Fx::new(be);
    fx.edit(
        &format!(
            "UPDATE nodes SET kind = {} WHERE hash = ?1",
            Kind::Promote.code()
        ),
        &[Bytes(fx.fork.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &fx.fork);
    expect(&r, &node_obj(&fx.fork), &["promote", "sealed name"]);
}

fn an_edited_state_value_is_caught(be: Be) {
    let fx = Fx::new(be);
    let value = content_hash(b"v7");
    let mut s = fx.store();
    assert_eq!(
        s.state_get(&fx.root1, "k7").unwrap().as_deref(),
        Some(&b"v7"[..])
    );
    drop(s);
    fx.edit(
        "UPDATE blobs SET data = ?1 WHERE hash = ?2",
        &[Bytes(b"v8"), Bytes(value.as_bytes())],
    );
    let r = fx.verify_dirty();
    let blob = format!("blob {}", value.to_hex());
    expect(&r, &blob, &["do not hash to its address"]);
    // Every state version holding the value is reported, through the first one walked.
    assert!(
        r.problems.iter().any(|p| p.object.starts_with("state ")
            && p.reason.contains(&value.to_hex())
            && p.kind == ProblemKind::Missing),
        "no state names the edited value: {:#?}",
        r.problems
    );
    for p in &r.problems {
        assert!(p.object == blob || p.object.starts_with("state "), "{p:?}");
    }
}

fn an_edited_state_root_node_is_caught(be: Be) {
    let fx = Fx::new(be);
    let root = fx.root2;
    let mut body: Vec<u8> = fx.query_one(
        "SELECT body FROM state_nodes WHERE hash = ?1",
        &[Bytes(root.as_bytes())],
    );
    let last = body.len() - 1;
    body[last] ^= 0x80;
    fx.edit(
        "UPDATE state_nodes SET body = ?1 WHERE hash = ?2",
        &[Bytes(&body), Bytes(root.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(
        &r,
        &format!("state {}", root.to_hex()),
        &[&root.to_hex(), "do not hash to its address"],
    );
    only(&r, &[format!("state {}", root.to_hex())]);
}

fn an_edited_inner_state_node_is_caught(be: Be) {
    let fx = Fx::new(be);
    let body: Vec<u8> = fx.query_one(
        "SELECT body FROM state_nodes WHERE hash = ?1",
        &[Bytes(fx.root1.as_bytes())],
    );
    // 20 keys in 16 slots: at least one slot holds a subtree.
    let child = MapNode::decode(&body)
        .unwrap()
        .slots
        .into_iter()
        .flatten()
        .find_map(|e| match e {
            Entry::Child(c) => Some(c),
            Entry::Leaf(..) => None,
        })
        .expect("a root with 20 keys has an inner node");
    let mut inner: Vec<u8> = fx.query_one(
        "SELECT body FROM state_nodes WHERE hash = ?1",
        &[Bytes(&child.0)],
    );
    inner[2] ^= 0x01; // the first entry's tag: leaf <-> child
    fx.edit(
        "UPDATE state_nodes SET body = ?1 WHERE hash = ?2",
        &[Bytes(&inner), Bytes(&child.0)],
    );
    let r = fx.verify_dirty();
    assert!(
        r.problems.iter().any(|p| p.object.starts_with("state ")
            && p.reason.contains(&child.to_hex())
            && p.reason.contains("corrupt")),
        "no state names the edited trie node {child}: {:#?}",
        r.problems
    );
    for p in &r.problems {
        assert!(p.object.starts_with("state "), "{p:?}");
    }
}

fn a_branch_head_pointing_nowhere_is_caught(be: Be) {
    let fx = Fx::new(be);
    let nowhere = convo_core::sha256(b"no such node");
    fx.edit(
        "UPDATE branches SET head = ?1 WHERE session = ?2 AND name = 'main'",
        &[Bytes(&nowhere.0), Text(&fx.ses.to_string())],
    );
    let r = fx.verify_dirty();
    let obj = format!("branch {}/main", fx.ses);
    expect(&r, &obj, &[&nowhere.to_hex(), "not a stored node"]);
    only(&r, &[obj]);
    // Reading the timeline fails with a clear error, not a panic.
    let err = fx.store().timeline(&fx.ses, &main()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    // The sealed timeline is untouched and still readable.
    assert_eq!(
        fx.store()
            .timeline(&fx.ses, &fx.sealed)
            .unwrap()
            .last()
            .unwrap()
            .stored
            .hash,
        fx.t3[3]
    );
}

fn a_head_moved_to_another_sessions_node_is_caught(be: Be) {
    let fx = Fx::new(be);
    let mut s = fx.store();
    let other = s
        .transaction(|l| l.new_session("agent", None, DAY))
        .unwrap()
        .id;
    let theirs = turn(&mut s, &other, &main(), "theirs", DAY);
    drop(s);
    fx.edit(
        "UPDATE branches SET head = ?1 WHERE session = ?2 AND name = ?3",
        &[
            Bytes(theirs[3].as_bytes()),
            Text(&fx.ses.to_string()),
            Text(fx.sealed.as_str()),
        ],
    );
    let r = fx.verify_dirty();
    let obj = format!("branch {}/{}", fx.ses, fx.sealed);
    expect(&r, &obj, &[&theirs[3].to_hex(), &other.to_string()]);
    only(&r, &[obj]);
}

fn edited_diagnostics_are_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t2[2];
    let diag: String = fx.query_one(
        "SELECT diagnostics FROM nodes WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    assert_eq!(diag, r#"{"ms":12,"status":200}"#, "stored canonical");
    fx.edit(
        "UPDATE nodes SET diagnostics = ?1 WHERE hash = ?2",
        &[Text(r#"{"ms":12,"status":500}"#), Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    only(&r, &[node_obj(&node)]);

    // Same object, different text: the stored bytes are what is hashed.
    let fx = Fx::new(be);
    let node = fx.t2[2];
    fx.edit(
        "UPDATE nodes SET diagnostics = ?1 WHERE hash = ?2",
        &[Text(r#"{"status":200,"ms":12}"#), Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    only(&r, &[node_obj(&node)]);
}

fn an_edited_depth_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t2[1];
    fx.edit(
        "UPDATE nodes SET depth = depth + 1 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&node), &["context"]);
    // Its hash is untouched: the context is derived, not hashed.
    assert!(
        !r.problems.iter().any(|p| p.kind == ProblemKind::Hash),
        "{:#?}",
        r.problems
    );
    // Only it and its child (whose context is computed from the edited one) are blamed.
    only(&r, &[node_obj(&node), node_obj(&fx.t2[2])]);
}

fn an_edited_turn_number_is_caught(be: Be) {
    let fx = Fx::new(be);
    // The fork's timeline: its turn counts main's turns before the fork.
    let mut s = fx.store();
    assert_eq!(s.node(&prefix(&fx.t1[0])).unwrap().ctx.turn, 1);
    assert_eq!(s.node(&prefix(&fx.tf[3])).unwrap().ctx.turn, 3);
    assert_eq!(s.node(&prefix(&fx.promote)).unwrap().ctx.turn, 3);
    let page = s.timeline_tail(&fx.ses, &main(), 2).unwrap();
    assert_eq!(page.turns, 3);
    assert_eq!(
        page.nodes.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
        vec![3, 3]
    );
    drop(s);
    let node = fx.t2[1];
    fx.edit(
        "UPDATE nodes SET ctx_turn = ctx_turn + 1 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&node), &["context"]);
    // Only it and its child (whose context follows from the edited one).
    only(&r, &[node_obj(&node), node_obj(&fx.t2[2])]);
}

fn an_edited_state_in_effect_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t2[0];
    let mut s = fx.store();
    assert_eq!(s.node(&prefix(&node)).unwrap().ctx.state, Some(fx.root1));
    drop(s);
    // Claim the state in effect after t2's invoke is t2's (later) state.
    fx.edit(
        "UPDATE nodes SET ctx_state = ?1 WHERE hash = ?2",
        &[Bytes(fx.root2.as_bytes()), Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&node), &["context"]);
    only(&r, &[node_obj(&node), node_obj(&fx.t2[1])]);

    // Clearing it is caught as well.
    let fx = Fx::new(be);
    let node = fx.t3[0];
    fx.edit(
        "UPDATE nodes SET ctx_state = NULL WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&node), &["context"]);
    only(&r, &[node_obj(&node), node_obj(&fx.t3[1])]);
}

fn an_edited_open_flag_or_sequence_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t3[3];
    // SQLite stores `TRUE` as 1, as the store writes it.
    fx.edit(
        "UPDATE nodes SET ctx_open = TRUE WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&node), &["context"]);

    let fx = Fx::new(be);
    let node = fx.t3[2];
    fx.edit(
        "UPDATE nodes SET sequence = 2 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    expect(&r, &node_obj(&node), &["timeline rule"]);
}

fn a_node_deleted_from_the_middle_of_a_chain_is_caught(be: Be) {
    let fx = Fx::new(be);
    let gone = fx.t2[1];
    let child = fx.t2[2];
    fx.edit(
        "DELETE FROM nodes WHERE hash = ?1",
        &[Bytes(gone.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&child), &[&gone.to_hex(), "missing"]);
    // The follow numbers now jump over it too.
    expect(&r, "follow order", &["missing", "deleted"]);
    only(&r, &[node_obj(&child), "follow order".to_owned()]);
    // Every timeline through the hole fails to read, with a clear error.
    let mut s = fx.store();
    for b in [main(), fx.sealed.clone()] {
        let err = s.timeline(&fx.ses, &b).unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains(&gone.to_hex())),
            "{err}"
        );
    }
}

fn a_deleted_head_node_is_caught(be: Be) {
    let fx = Fx::new(be);
    fx.edit(
        "DELETE FROM nodes WHERE hash = ?1",
        &[Bytes(fx.promote.as_bytes())],
    );
    let r = fx.verify_dirty();
    let obj = format!("branch {}/main", fx.ses);
    expect(&r, &obj, &[&fx.promote.to_hex()]);
    only(&r, &[obj]);
}

fn a_node_moved_after_its_child_in_the_follow_order_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t2[0];
    fx.edit(
        "UPDATE nodes SET seq = 1000 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&fx.t2[1]), &[&node.to_hex(), "missing"]);
}

fn a_deleted_payload_or_trie_node_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t3[1];
    let payload = content_hash(b"three/request");
    fx.edit(
        "DELETE FROM blobs WHERE hash = ?1",
        &[Bytes(payload.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&node), &[&payload.to_hex(), "missing"]);
    only(&r, &[node_obj(&node)]);

    let fx = Fx::new(be);
    fx.edit(
        "DELETE FROM state_nodes WHERE hash = ?1",
        &[Bytes(fx.root2.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect(
        &r,
        &format!("state {}", fx.root2.to_hex()),
        &[&fx.root2.to_hex(), "missing"],
    );
}

fn a_payload_length_edit_is_caught(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t1[0];
    fx.edit(
        "UPDATE nodes SET payload_len = payload_len + 1 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let r = fx.verify_dirty();
    expect_rehash(&r, &node);
    expect(&r, &node_obj(&node), &["bytes, the node says"]);
}

fn a_working_state_pointing_nowhere_is_caught(be: Be) {
    let fx = Fx::new(be);
    let nowhere = convo_core::sha256(b"no such state");
    fx.edit(
        "UPDATE branches SET state = ?1 WHERE session = ?2 AND name = 'main'",
        &[Bytes(&nowhere.0), Text(&fx.ses.to_string())],
    );
    let r = fx.verify_dirty();
    expect(&r, &format!("state {}", nowhere.to_hex()), &["missing"]);
}

/// Edits after which a node row no longer decodes, or decodes into nonsense.
/// Each must make `verify` return an error or report a problem, and every
/// other read return (an error or data), never panic.
const UNDECODABLE: &[(&str, &str)] = &[
    ("unknown kind", "UPDATE nodes SET kind = 99 WHERE hash = ?1"),
    (
        "kind out of u8 range",
        "UPDATE nodes SET kind = 300 WHERE hash = ?1",
    ),
    (
        "hash of 5 bytes",
        "UPDATE nodes SET hash = x'0102030405' WHERE hash = ?1",
    ),
    (
        "parent of 5 bytes",
        "UPDATE nodes SET parent = x'0102030405' WHERE hash = ?1",
    ),
    (
        "payload of 31 bytes",
        "UPDATE nodes SET payload = substr(payload, 1, 31) WHERE hash = ?1",
    ),
    (
        "malformed session",
        "UPDATE nodes SET session = 'ses-nope' WHERE hash = ?1",
    ),
    (
        "negative sequence",
        "UPDATE nodes SET sequence = -1 WHERE hash = ?1",
    ),
    (
        "negative payload_len",
        "UPDATE nodes SET payload_len = -1 WHERE hash = ?1",
    ),
    (
        "diagnostics not JSON",
        "UPDATE nodes SET diagnostics = '{' WHERE hash = ?1",
    ),
    (
        "event on a message",
        "UPDATE nodes SET ev_branch = 'x', ev_nonce = x'00000000000000000000000000000000' \
         WHERE hash = ?1",
    ),
    (
        "invalid event branch",
        "UPDATE nodes SET ev_branch = 'a b' WHERE hash = ?1",
    ),
    (
        "nonce of 3 bytes",
        "UPDATE nodes SET ev_branch = 'x', ev_nonce = x'010203' WHERE hash = ?1",
    ),
    (
        "ctx_seq over u32",
        "UPDATE nodes SET ctx_seq = 99999999999 WHERE hash = ?1",
    ),
    (
        "ctx_sub of 5 bytes",
        "UPDATE nodes SET ctx_sub = x'0102030405' WHERE hash = ?1",
    ),
];

/// [`UNDECODABLE`] edits that put a value of another type in a column. On
/// PostgreSQL, `kind = 'complete'` (SMALLINT) and `diagnostics = x'00ff'`
/// (TEXT; bytes that are not UTF-8 cannot be stored in it at all) are
/// refused, `created_at = 1.5` is rounded to the integer 2 (the timestamp
/// edit the shared cases already make), and `hash = 'abc'` stores the three
/// bytes of `abc` (a short hash, as `hash of 5 bytes`).
const UNDECODABLE_SQLITE_ONLY: &[(&str, &str)] = &[
    (
        "kind as text",
        "UPDATE nodes SET kind = 'complete' WHERE hash = ?1",
    ),
    (
        "hash as text",
        "UPDATE nodes SET hash = 'abc' WHERE hash = ?1",
    ),
    (
        "created_at as real",
        "UPDATE nodes SET created_at = 1.5 WHERE hash = ?1",
    ),
    (
        "diagnostics as blob",
        "UPDATE nodes SET diagnostics = x'00ff' WHERE hash = ?1",
    ),
];

/// Edits that decode into integers at the edge of their type, so the next
/// `+ 1` on them overflows (see `undecodable_integers_never_panic`).
const OVERFLOWING: &[(&str, &str)] = &[
    (
        "negative depth",
        "UPDATE nodes SET depth = -1 WHERE hash = ?1",
    ),
    (
        "negative ctx_seq",
        "UPDATE nodes SET ctx_seq = -1 WHERE hash = ?1",
    ),
    (
        "ctx_seq of u32::MAX",
        "UPDATE nodes SET ctx_seq = 4294967295 WHERE hash = ?1",
    ),
];

/// Every read path over the edited store, for the never-panic checks.
fn read_everything(fx: &Fx) {
    let mut s = fx.store();
    let _ = s.follow(0, 1000);
    let _ = s.sessions();
    let _ = s.find_session("tamper");
    let _ = s.branches(&fx.ses);
    for b in [main(), fx.sealed.clone()] {
        let _ = s.branch(&fx.ses, &b);
        let _ = s.timeline(&fx.ses, &b);
        let _ = s.state_root(&fx.ses, &b, None);
    }
    for h in [fx.t2[0], fx.t3[3], fx.fork, fx.promote] {
        let _ = s.node(&prefix(&h));
        let _ = s.node(&HashPrefix::parse(&h.to_hex()[..8]).unwrap());
        let _ = s.state_root(&fx.ses, &main(), Some(&prefix(&h)));
    }
    let _ = s.state_list(&fx.root1);
    let _ = s.state_list(&fx.root2);
}

/// Edits one node at a time (a message with children, a complete on the
/// sealed timeline, a fork and the promote at the head of `main`), each on a
/// store restored to the fixture, and checks verify and the other reads.
fn check_node_edits(be: Be, edits: &[(&str, &str)]) {
    let fx = Fx::new(be);
    fx.save();
    for (what, sql) in edits {
        for i in 0..4 {
            fx.restore();
            let target = [fx.t2[0], fx.t3[3], fx.fork, fx.promote][i];
            let n = fx.db.execute(sql, &[Bytes(target.as_bytes())]);
            assert_eq!(n, 1, "{what}");
            // Bad data is a report entry: verify itself never stops on it.
            match fx.store().verify() {
                Err(e) => panic!("{what} on {target}: verify stopped with {e:?}"),
                Ok(r) => {
                    assert!(!r.is_clean(), "{what} on {target}: verify found nothing");
                }
            }
            read_everything(&fx);
            // A writer after the edit fails or succeeds, but does not panic either.
            let mut s = fx.store();
            let _ = s.transaction(|l| {
                l.append(&fx.ses, &main(), &draft(Kind::Invoke, "after", DAY + 100))
            });
            let _ = s.transaction(|l| {
                l.append(&fx.ses, &main(), &draft(Kind::Request, "after", DAY + 101))
            });
            let _ = s.transaction(|l| {
                l.fork(
                    &fx.ses,
                    &prefix(&target),
                    &BranchName::new("later").unwrap(),
                    DAY + 102,
                )
            });
        }
    }
}

fn undecodable_rows_give_errors_or_problems_never_panics(be: Be) {
    check_node_edits(be, UNDECODABLE);
}

fn undecodable_integers_never_panic(be: Be) {
    check_node_edits(be, OVERFLOWING);
}

fn an_out_of_range_integer_is_not_read_back_as_another_value(be: Be) {
    let fx = Fx::new(be);
    let node = fx.t2[1]; // a request with sequence 1
    fx.edit(
        "UPDATE nodes SET sequence = sequence + 4294967296 WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    let stored: i64 = fx.query_one(
        "SELECT sequence FROM nodes WHERE hash = ?1",
        &[Bytes(node.as_bytes())],
    );
    assert_eq!(stored, 4_294_967_297);
    match fx.store().node(&prefix(&node)) {
        Err(e) => assert!(matches!(e, StoreError::Corrupt(_)), "{e}"),
        Ok(n) => panic!("sequence {stored} read back as {:?}", n.node.sequence),
    }
    fx.verify_dirty();
}

/// Edits of one branch, blob or trie-node row, each on `fx` restored to the fixture: verify
/// must fail as corrupt data or report a problem, and the other reads must
/// not panic.
fn check_other_edits(fx: &Fx, cases: &[(String, String)]) {
    fx.save();
    for (what, sql) in cases {
        fx.restore();
        let n = fx.db.execute(sql, &[]);
        assert_eq!(n, 1, "{what}");
        match fx.store().verify() {
            Err(e) => panic!("{what}: verify stopped with {e:?}"),
            Ok(r) => assert!(!r.is_clean(), "{what}: verify found nothing"),
        }
        read_everything(fx);
    }
}

/// [`undecodable_branch_blob_and_trie_rows_give_errors_or_problems`] edits
/// that put text in a byte column: on PostgreSQL, `'main'` and `'abc'` in a
/// BYTEA column are the bytes of that text (a short hash, as the
/// `… of 5 bytes` edits).
const UNDECODABLE_OTHER_SQLITE_ONLY: &[(&str, &str)] = &[
    (
        "head as text",
        "UPDATE branches SET head = 'main' WHERE name = 'main'",
    ),
    (
        "blob address as text",
        "UPDATE blobs SET hash = 'abc' WHERE id = 1",
    ),
];

fn undecodable_branch_blob_and_trie_rows_give_errors_or_problems(be: Be) {
    let edits: &[(&str, &str)] = &[
        (
            "head of 5 bytes",
            "UPDATE branches SET head = x'0102030405' WHERE name = 'main'",
        ),
        (
            "state of 5 bytes",
            "UPDATE branches SET state = x'0102030405' WHERE name = 'main'",
        ),
        (
            "invalid branch name",
            "UPDATE branches SET name = 'a b' WHERE name = 'main'",
        ),
        (
            "malformed branch session",
            "UPDATE branches SET session = 'x' WHERE name = 'main'",
        ),
        (
            "blob address of 5 bytes",
            "UPDATE blobs SET hash = x'0102030405' WHERE id = 1",
        ),
    ];
    let mut cases: Vec<(String, String)> = edits
        .iter()
        .map(|(w, s)| ((*w).to_owned(), (*s).to_owned()))
        .collect();
    // Trie nodes that a live version uses: emptied, truncated, garbage.
    let fx = Fx::new(be);
    for (what, body) in [
        ("empty", "x''"),
        ("truncated", "substr(body, 1, 5)"),
        ("garbage", "x'ffff00'"),
    ] {
        for root in [fx.root1, fx.root2] {
            cases.push((
                format!("{what} trie node {root}"),
                format!(
                    "UPDATE state_nodes SET body = {body} WHERE hash = x'{}'",
                    root.to_hex()
                ),
            ));
        }
    }
    check_other_edits(&fx, &cases);
}

fn a_deleted_session_row_is_caught(be: Be) {
    let fx = Fx::new(be);
    fx.edit(
        "DELETE FROM sessions WHERE id = ?1",
        &[Text(&fx.ses.to_string())],
    );
    // The session is gone from every listing while its nodes remain.
    assert!(fx.store().sessions().unwrap().is_empty());
    assert!(fx.store().find_session(&fx.ses.to_string()).is_err());
    let r = fx.verify_dirty();
    assert!(
        r.problems
            .iter()
            .any(|p| p.reason.contains(&fx.ses.to_string())),
        "{:#?}",
        r.problems
    );
}

/// The edits `verify` used to miss (issue 11): each fact a reader relies on
/// that no node hash covered. Each is made alone on the restored fixture
/// and must be reported on the object it changed, with the reason.
fn every_row_a_reader_relies_on_is_checked(be: Be) {
    let fx = Fx::new(be);
    fx.save();
    let ses = fx.ses.to_string();
    let main_obj = format!("branch {ses}/main");
    let sealed_obj = format!("branch {ses}/{}", fx.sealed);
    let ses_obj = format!("session {ses}");
    let sealed = fx.sealed.as_str().to_owned();
    let first = fx.t1[0];
    let before_promote = fx.tf[3];
    let promote = fx.promote_hex();
    let day = DAY.to_string();
    let root1 = fx.root1.to_hex();
    /// What, the edit, its arguments, the object blamed, what it must say.
    type Case<'a> = (&'a str, String, Vec<Arg<'a>>, &'a str, Vec<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        (
            "main's head set to NULL",
            "UPDATE branches SET head = NULL WHERE name = 'main'".into(),
            vec![],
            &main_obj,
            vec!["its head is none", &promote],
        ),
        (
            "main's head moved back one node",
            "UPDATE branches SET head = ?1 WHERE name = 'main'".into(),
            vec![Bytes(before_promote.as_bytes())],
            &main_obj,
            vec!["rolled back", &promote],
        ),
        (
            "main's head moved back to the first node",
            "UPDATE branches SET head = ?1 WHERE name = 'main'".into(),
            vec![Bytes(first.as_bytes())],
            &main_obj,
            vec!["rolled back", &promote],
        ),
        (
            "a branch row deleted",
            format!("DELETE FROM branches WHERE name = '{sealed}'"),
            vec![],
            &sealed_obj,
            vec!["row is missing", "sealed"],
        ),
        (
            "a sealed branch unsealed",
            format!("UPDATE branches SET sealed = FALSE WHERE name = '{sealed}'"),
            vec![],
            &sealed_obj,
            vec!["open", "promote node sealed it"],
        ),
        (
            "main marked sealed",
            "UPDATE branches SET sealed = TRUE WHERE name = 'main'".into(),
            vec![],
            &main_obj,
            vec!["sealed", "no promote node sealed it"],
        ),
        (
            "the agent changed",
            "UPDATE sessions SET agent = 'mallory'".into(),
            vec![],
            &ses_obj,
            vec!["agent", "mallory", "`agent`"],
        ),
        (
            "the title changed",
            "UPDATE sessions SET title = 'other'".into(),
            vec![],
            &ses_obj,
            vec!["title", "`other`", "`tamper`"],
        ),
        (
            "the title removed",
            "UPDATE sessions SET title = NULL".into(),
            vec![],
            &ses_obj,
            vec!["title", "none", "`tamper`"],
        ),
        (
            "the creation time changed",
            "UPDATE sessions SET created_at = created_at - 1".into(),
            vec![],
            &ses_obj,
            vec!["creation time", &day],
        ),
        (
            "main's working state rolled back",
            "UPDATE branches SET state = ?1 WHERE name = 'main'".into(),
            vec![Bytes(fx.root1.as_bytes())],
            &main_obj,
            vec!["working state", &root1],
        ),
        (
            "a branch renamed",
            format!("UPDATE branches SET name = 'renamed' WHERE name = '{sealed}'"),
            vec![],
            &sealed_obj,
            vec!["row is missing"],
        ),
    ];
    for (what, sql, args, object, says) in &cases {
        fx.restore();
        let n = fx.db.execute(sql, args);
        assert!(n >= 1, "{what}: `{sql}` changed nothing");
        let r = fx.store().verify().unwrap();
        assert!(!r.is_clean(), "{what}: verify found nothing");
        expect(&r, object, says);
    }
}

/// A session deleted with everything that names it (its nodes, branches,
/// index runs and row): the fact journal still records it.
fn a_whole_session_deleted_is_caught(be: Be) {
    let fx = Fx::new(be);
    let ses = fx.ses.to_string();
    let mut sql = format!(
        "DELETE FROM nodes WHERE session = '{ses}'; DELETE FROM branches WHERE session = '{ses}'; \
         DELETE FROM sessions WHERE id = '{ses}';"
    );
    if be == Be::Sqlite {
        sql.push_str(&format!(
            "DELETE FROM session_runs WHERE session = '{ses}';"
        ));
    }
    fx.db.batch(&sql);
    let r = fx.verify_dirty();
    expect(
        &r,
        &format!("session {ses}"),
        &["row is missing", "fact 1", "`agent`"],
    );
}

/// The journal is one hash chain: an edited fact, a removed one, or one
/// whose hash was recomputed without relinking the chain, is caught.
fn an_edited_or_removed_fact_is_caught(be: Be) {
    let fx = Fx::new(be);
    fx.save();
    let facts: i64 = fx.query_one("SELECT count(*) FROM facts", &[]);
    assert!(
        facts > 3,
        "the fixture journals its session and state writes"
    );
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "a byte of a fact changed",
            "UPDATE facts SET body = (SELECT body FROM facts WHERE seq = 3) WHERE seq = 2",
            &["hash"],
        ),
        (
            "a fact removed",
            "DELETE FROM facts WHERE seq = 2",
            &["jumps from fact 1"],
        ),
        (
            "a fact cut short",
            "UPDATE facts SET body = substr(body, 1, 30) WHERE seq = 3",
            &["does not decode"],
        ),
        (
            "a fact's hash replaced",
            "UPDATE facts SET hash = x'00' WHERE seq = 3",
            &["not to its stored hash"],
        ),
    ];
    for (what, sql, says) in cases {
        fx.restore();
        assert_eq!(fx.db.execute(sql, &[]), 1, "{what}");
        let r = fx.verify_dirty();
        let object = if what == "a byte of a fact changed" {
            "fact 2"
        } else {
            "fact 3"
        };
        expect(&r, object, says);
    }
}

/// Rows that do not decode (a 31-byte head, a malformed session id, an
/// invalid branch name, a state of the wrong length) are entries of the
/// report: verify itself never fails on bad data.
fn bad_rows_are_report_entries_never_errors(be: Be) {
    let fx = Fx::new(be);
    fx.save();
    let h31 = "x'".to_owned() + &"ab".repeat(31) + "'";
    let cases = [
        (
            "a 31-byte head",
            format!("UPDATE branches SET head = {h31} WHERE name = 'main'"),
            "branch row",
        ),
        (
            "an invalid branch name",
            "UPDATE branches SET name = 'a b' WHERE name = 'main'".to_owned(),
            "branch row",
        ),
        (
            "a malformed branch session",
            "UPDATE branches SET session = 'x' WHERE name = 'main'".to_owned(),
            "branch row",
        ),
        (
            "a malformed session id",
            "UPDATE sessions SET id = 'ses-nope'".to_owned(),
            "session row",
        ),
        (
            "a 31-byte node hash",
            format!(
                "UPDATE nodes SET hash = {h31} WHERE hash = x'{}'",
                fx.t2[0].to_hex()
            ),
            "node row",
        ),
    ];
    for (what, sql, object) in cases {
        fx.restore();
        assert_eq!(fx.db.execute(&sql, &[]), 1, "{what}");
        let r = match fx.store().verify() {
            Ok(r) => r,
            Err(e) => panic!("{what}: verify stopped: {e}"),
        };
        assert!(
            r.problems
                .iter()
                .any(|p| p.object == object && p.kind == ProblemKind::Undecodable),
            "{what}: {:#?}",
            r.problems
        );
    }
}

/// A store written before the fact journal (SQLite schema 2, PostgreSQL
/// schema 1) is journalled when it is opened: it verifies clean, and the
/// edits the journal exists for are caught on it too.
fn a_store_from_before_the_journal_is_journalled_in_place(be: Be) {
    let fx = Fx::new(be);
    fx.db.batch(match be {
        Be::Sqlite | Be::SqliteMemory => {
            // Version 2's `blobs`, exactly as migration 0002 left it.
            "DROP TABLE facts; DROP TABLE search_fts; DROP TABLE search_state; DROP TABLE redactions; \
             DROP TABLE open_turns; DROP TABLE pending_work; DROP TABLE otlp_exports; DROP TABLE import_keys; DROP TABLE import_tails; DROP TABLE import_files; \
             DROP TABLE chunks; DROP INDEX nodes_by_thread; DROP INDEX nodes_by_thread_response; \
             DROP INDEX nodes_by_thread_conversation; \
             CREATE TABLE blobs_v2 (
    id   INTEGER PRIMARY KEY,
    hash BLOB NOT NULL,                   -- SHA-256 of data
    data BLOB NOT NULL
); \
             INSERT INTO blobs_v2 SELECT id, hash, data FROM blobs; DROP TABLE blobs; \
             ALTER TABLE blobs_v2 RENAME TO blobs; \
             CREATE INDEX blobs_by_hash ON blobs (substr(hash, 1, 8)); \
             ALTER TABLE nodes DROP COLUMN ctx_turn; PRAGMA user_version = 2;"
        }
        Be::Postgres => {
            "DROP TABLE facts, search_index, search_state, redactions, chunks, open_turns, pending_work, otlp_exports, import_keys, import_tails, import_files; \
             DROP INDEX nodes_by_thread, nodes_by_thread_response, nodes_by_thread_conversation; \
             DROP FUNCTION convo_diag_field; \
             ALTER TABLE blobs DROP COLUMN chunked; \
             ALTER TABLE nodes DROP COLUMN ctx_turn; UPDATE convo_schema SET version = 1;"
        }
    });
    // Opening migrates in place; turn numbers are computed down each tree
    // (verify checks every stored one against its chain).
    let mut s = fx.store();
    assert_eq!(s.node(&prefix(&fx.tf[0])).unwrap().ctx.turn, 3);
    assert_eq!(s.node(&prefix(&fx.fork)).unwrap().ctx.turn, 2);
    drop(s);
    let r = fx.store().verify().unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    // One session, and the working states of both branches.
    assert_eq!(r.facts, 3);
    fx.edit("UPDATE sessions SET agent = 'mallory'", &[]);
    expect(
        &fx.verify_dirty(),
        &format!("session {}", fx.ses),
        &["mallory"],
    );
}

fn key() -> ed25519_dalek::SigningKey {
    convo_store::checkpoint::signing_key(&[7; 32])
}

/// Undoes the fixture's promote the way a careful editor would: the
/// promote node removed, `fix` and the old `main` renamed back, every head
/// and index consistent, so that nothing inside the store shows it.
fn undo_the_promote(fx: &Fx) {
    let ses = fx.ses.to_string();
    let mut sql = format!(
        "DELETE FROM nodes WHERE hash = x'{p}'; \
         UPDATE branches SET name = 'fix', head = x'{tip}' WHERE session = '{ses}' AND name = 'main'; \
         UPDATE branches SET name = 'main', sealed = FALSE WHERE session = '{ses}' AND name = '{sealed}';",
        p = fx.promote.to_hex(),
        tip = fx.tf[3].to_hex(),
        sealed = fx.sealed,
    );
    if let Db::Sqlite { .. } = fx.db {
        sql.push_str("UPDATE session_runs SET last = last - 1;");
    }
    fx.db.batch(&sql);
}

fn a_store_that_grew_extends_its_checkpoint(be: Be) {
    let fx = Fx::new(be);
    let mut s = fx.store();
    let cp = s.checkpoint(&key(), DAY + 70).unwrap();
    cp.check_signature().unwrap();
    assert_eq!((cp.nodes, cp.cursor), (18, 18));
    assert!(s.check_checkpoint(&cp).unwrap().is_empty());
    // Appends, a fork, a state write and a promote after it: all forward.
    turn(&mut s, &fx.ses, &main(), "four", DAY + 80);
    let again = BranchName::new("again").unwrap();
    s.transaction(|l| l.fork(&fx.ses, &prefix(&fx.t1[3]), &again, DAY + 90))
        .unwrap();
    s.transaction(|l| l.state_put(&fx.ses, &again, "k", b"v"))
        .unwrap();
    turn(&mut s, &fx.ses, &again, "five", DAY + 95);
    s.transaction(|l| l.promote(&fx.ses, &again, DAY + 100))
        .unwrap();
    assert!(s.verify().unwrap().is_clean());
    let found = s.check_checkpoint(&cp).unwrap();
    assert!(found.is_empty(), "{found:#?}");
    // An altered checkpoint no longer verifies.
    let mut forged = cp.clone();
    forged.nodes -= 1;
    assert!(forged.check_signature().unwrap_err().contains("signature"));
}

fn a_consistent_truncation_passes_verify_but_not_the_checkpoint(be: Be) {
    let fx = Fx::new(be);
    let cp = fx.store().checkpoint(&key(), DAY + 70).unwrap();
    undo_the_promote(&fx);
    let r = fx.store().verify().unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    let found = fx.store().check_checkpoint(&cp).unwrap();
    let has = |object: &str, says: &str| {
        found
            .iter()
            .any(|p| p.object == object && p.reason.contains(says))
    };
    assert!(has("store", "truncated: it holds 17 nodes"), "{found:#?}");
    let main_obj = format!("branch {}/main", fx.ses);
    assert!(has(&main_obj, &fx.promote.to_hex()), "{found:#?}");
    // The old main rolled back to a sealed name's place: reported too.
    assert!(
        has(&format!("branch {}/{}", fx.ses, fx.sealed), "deleted"),
        "{found:#?}"
    );
}

fn a_forged_tip_with_recomputed_hashes_is_caught_by_the_checkpoint(be: Be) {
    let fx = Fx::new(be);
    let cp = fx.store().checkpoint(&key(), DAY + 70).unwrap();
    // Roll back, then let convo itself append a different tip: every hash
    // is recomputed, so the store is consistent again.
    undo_the_promote(&fx);
    let mut s = fx.store();
    s.transaction(|l| l.append(&fx.ses, &main(), &draft(Kind::Invoke, "forged", DAY + 61)))
        .unwrap();
    assert!(s.verify().unwrap().is_clean());
    let found = s.check_checkpoint(&cp).unwrap();
    assert!(
        found
            .iter()
            .any(|p| p.object == "store" && p.kind == ProblemKind::Rewritten),
        "{found:#?}"
    );
    let main_obj = format!("branch {}/main", fx.ses);
    assert!(
        found
            .iter()
            .any(|p| p.object == main_obj && p.kind == ProblemKind::Truncated),
        "{found:#?}"
    );
}

/// What the automatic checkpointer does: each checkpoint computed from the
/// previous one over the new nodes alone states exactly what a full one
/// does; `check_checkpoints` checks many at once, each on its own (a
/// truncation fails the newest, not the older ones it did not touch).
fn incremental_checkpoints_equal_full_ones_and_are_checked_in_one_pass(be: Be) {
    let fx = Fx::new(be);
    let mut s = fx.store();
    let first = s.checkpoint(&key(), DAY + 70).unwrap();
    let again = s.checkpoint_after(&key(), DAY + 70, Some(&first)).unwrap();
    assert_eq!(again, first, "nothing new: the same statement");
    turn(&mut s, &fx.ses, &main(), "four", DAY + 80);
    let inc = s.checkpoint_after(&key(), DAY + 81, Some(&first)).unwrap();
    let full = s.checkpoint(&key(), DAY + 81).unwrap();
    assert_eq!(inc, full);
    inc.check_signature().unwrap();
    turn(&mut s, &fx.ses, &main(), "five", DAY + 90);
    let last = s.checkpoint_after(&key(), DAY + 91, Some(&inc)).unwrap();
    assert_eq!(last, s.checkpoint(&key(), DAY + 91).unwrap());
    assert!(last.nodes > inc.nodes && inc.nodes > first.nodes);
    let all = [first.clone(), inc.clone(), last.clone()];
    let found = s.check_checkpoints(&all).unwrap();
    assert!(found.iter().all(Vec::is_empty), "{found:#?}");
    // Drop the last turn consistently: only the newest checkpoint saw it.
    let mut sql = format!("DELETE FROM nodes WHERE seq > {};", inc.cursor);
    sql.push_str(&format!(
        "UPDATE branches SET head = x'{}' WHERE session = '{}' AND name = 'main';",
        inc.heads
            .iter()
            .find(|h| h.session == fx.ses.to_string() && h.branch == "main")
            .and_then(|h| h.head.clone())
            .unwrap(),
        fx.ses
    ));
    if let Db::Sqlite { .. } = fx.db {
        sql.push_str(&format!(
            "UPDATE session_runs SET last = {} WHERE last > {0};",
            inc.cursor
        ));
    }
    drop(s);
    fx.db.batch(&sql);
    let mut s = fx.store();
    assert!(s.verify().unwrap().is_clean());
    let found = s.check_checkpoints(&all).unwrap();
    assert!(found[0].is_empty() && found[1].is_empty(), "{found:#?}");
    assert!(
        found[2]
            .iter()
            .any(|p| p.object == "store" && p.kind == ProblemKind::Truncated),
        "{found:#?}"
    );
    // The checkpointer refuses to go on from a checkpoint the store no
    // longer reaches.
    let err = s
        .checkpoint_after(&key(), DAY + 99, Some(&last))
        .unwrap_err();
    assert!(err.to_string().contains("truncated"), "{err}");
}

impl Db {
    /// Whether `needle` occurs in the database's files: every file of the
    /// SQLite store (the database, its WAL), or every relation file of the
    /// PostgreSQL database (read by the server after a CHECKPOINT, so what
    /// its buffers held is on disk).
    fn files_hold(&self, needle: &[u8]) -> bool {
        !testing::files_holding(&self.url(), needle).is_empty()
    }
}

/// A fixture with one more turn whose invoke holds a secret, then the
/// secret's payload redacted: (the secret, its digest, the invoke).
fn search_hits(s: &mut Store, word: &str) -> usize {
    let req = convo_store::search::SearchRequest {
        query: convo_store::search::Query::parse(word).unwrap(),
        session: None,
        branch: None,
        agent: None,
        filter: Default::default(),
        limit: 10,
        offset: 0,
    };
    s.search(&req).unwrap().hits.len()
}

fn redacted_fixture(fx: &Fx) -> (String, convo_core::ContentHash, NodeHash) {
    // Mixed case, so its upper, lower and indexed (lowercased word) forms
    // each differ from the bytes stored.
    let secret = format!(
        "sk-live-{}-PlutoniumQuokka{}-do-not-leak",
        fx.ses.0.simple(),
        fx.ses.0.as_u128() % 1_000_000
    );
    let mut s = fx.store();
    let h = s
        .transaction(|l| l.append(&fx.ses, &main(), &draft(Kind::Invoke, &secret, DAY + 70)))
        .unwrap()
        .hash;
    s.transaction(|l| l.append(&fx.ses, &main(), &draft(Kind::Complete, "noted", DAY + 71)))
        .unwrap();
    let payload = content_hash(secret.as_bytes());
    // The search index holds the secret's words too until the redaction.
    s.search_update(&mut |_, _| {}).unwrap();
    assert_eq!(search_hits(&mut s, &fx.ses.0.simple().to_string()), 1);
    if let Db::Postgres(_) = fx.db {
        // Column statistics sample stored values (pg_statistic) too.
        fx.db.batch("ANALYZE blobs");
    }
    assert!(fx.db.files_hold(secret.as_bytes()), "the secret is stored");
    // The index holds its words, lowercased: the files are searched for them.
    let word = format!("plutoniumquokka{}", fx.ses.0.as_u128() % 1_000_000);
    assert!(fx.db.files_hold(word.as_bytes()), "the index holds {word}");
    let done = s
        .redact(&payload, "alice", "a leaked API key", DAY + 80, false)
        .unwrap();
    assert_eq!(done.bytes, secret.len() as u64);
    assert!(done.erased);
    assert_eq!(done.warning, None);
    (secret, payload, h)
}

fn a_redaction_keeps_the_chain_and_no_byte_of_the_secret(be: Be) {
    let fx = Fx::new(be);
    let (secret, payload, h) = redacted_fixture(&fx);
    let mut s = fx.store();
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    assert_eq!((r.nodes, r.redacted), (20, 1));
    // The node keeps its hash; readers get the tombstone.
    let n = s.node(&prefix(&h)).unwrap();
    assert_eq!((n.hash, n.node.payload), (h, payload));
    assert_eq!(n.node.hash(), h);
    let tomb = "[redacted 2026-02-13T14:30:05Z by alice: a leaked API key]";
    assert_eq!(s.blob(&payload).unwrap().unwrap(), tomb.as_bytes());
    let tl = s.timeline(&fx.ses, &main()).unwrap();
    let shown = tl.iter().find(|n| n.stored.hash == h).unwrap();
    assert_eq!(shown.payload, tomb.as_bytes());
    let tv = s.turn(&fx.ses, &h.to_hex()).unwrap();
    assert_eq!(tv.nodes[0].payload, tomb.as_bytes());
    let page = s.timeline_tail(&fx.ses, &main(), 2).unwrap();
    assert_eq!(page.nodes[0].0.payload, tomb.as_bytes());
    let followed = s.follow_with_payloads(18, 10).unwrap();
    assert_eq!(followed[0].payload, tomb.as_bytes());
    // The redaction is recorded: which digest, when, by whom, why.
    let rd = s.redaction(&payload).unwrap().unwrap();
    assert_eq!(
        (rd.at, rd.by.as_str(), rd.reason.as_str(), rd.fact),
        (DAY + 80, "alice", "a leaked API key", r.facts)
    );
    assert_eq!(s.redactions().unwrap(), vec![rd]);
    // Nothing of it is left to search.
    s.search_update(&mut |_, _| {}).unwrap();
    assert_eq!(search_hits(&mut s, &fx.ses.0.simple().to_string()), 0);
    // A checkpoint taken before still holds: redaction rewrites no history.
    // On PostgreSQL, a transaction of a concurrent test (the horizon is the
    // cluster's) can keep the deleted row version through the rewrite;
    // rewriting again once it has ended erases it, as the docs tell users.
    for _ in 0..50 {
        if testing::secret_in_files(&fx.db.url(), &secret).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        s.erase_freed().unwrap();
    }
    drop(s);
    // Not as stored, upper- or lowercased, nor as the words the search
    // index held (SQLite's FTS5 segments, PostgreSQL's tsvectors).
    let left = testing::secret_in_files(&fx.db.url(), &secret);
    assert!(
        left.is_empty(),
        "no byte of the secret is left in the database's files: {left:?}"
    );
    // The store keeps working.
    let mut s = fx.store();
    turn(&mut s, &fx.ses, &main(), "after", DAY + 90);
    assert!(s.verify().unwrap().is_clean());
}

fn a_redacted_session_leaves_no_byte_of_it_but_what_another_shares(be: Be) {
    let fx = Fx::new(be);
    let n = fx.ses.0.as_u128() % 1_000_000;
    let secret = format!("QuokkaThread{n}-only-here");
    let shared = format!("WombatShared{n}-in-both");
    let mut s = fx.store();
    let (gone, kept) = s
        .transaction(|l| {
            let a = l
                .new_session("langgraph", Some(&format!("Thread{n}")), DAY + 70)?
                .id;
            let b = l.new_session("langgraph", Some("kept"), DAY + 70)?.id;
            l.retitle(&a, Some(&format!("Renamed{n}")))?;
            Ok((a, b))
        })
        .unwrap();
    for (ses, text) in [(&gone, &secret), (&gone, &shared), (&kept, &shared)] {
        let mut d = draft(Kind::Invoke, text, DAY + 71);
        if *ses == gone {
            let diag = format!(r#"{{"langgraph":{{"note":"Diag{n}"}},"status":200}}"#);
            d.diagnostics = Diagnostics::parse(&diag).unwrap();
        }
        s.transaction(|l| l.append(ses, &main(), &d)).unwrap();
    }
    s.search_update(&mut |_, _| {}).unwrap();
    assert!(fx.db.files_hold(secret.as_bytes()), "the secret is stored");
    let (done, warning) = s
        .redact_session(
            &gone,
            &|k| k == "status",
            "bob",
            "the user deleted it",
            DAY + 80,
        )
        .unwrap();
    assert_eq!(warning, None);
    assert_eq!((done.payloads, done.shared, done.diagnostics), (1, 1, 2));
    assert_eq!(done.bytes, secret.len() as u64);
    // Both titles it had are gone from the session and the journal.
    assert_eq!(done.title_facts, 2);
    assert_eq!(
        s.find_session(&gone.to_string()).unwrap().title.as_deref(),
        Some("[redacted]")
    );
    // Its nodes keep their hashes; the shared payload stays for the other.
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    assert_eq!(
        s.blob(&content_hash(shared.as_bytes())).unwrap().unwrap(),
        shared.as_bytes()
    );
    let tl = s.timeline(&gone, &main()).unwrap();
    let diag = tl.last().unwrap().stored.node.diagnostics.to_value();
    assert_eq!(diag["status"], 200);
    assert!(diag.get("langgraph").is_none(), "{diag}");
    // Nothing of it is left in the files (see the redaction test above
    // for PostgreSQL's horizon).
    for _ in 0..50 {
        let left: Vec<_> = [secret.as_str(), &format!("Thread{n}"), &format!("Diag{n}")]
            .iter()
            .flat_map(|w| testing::secret_in_files(&fx.db.url(), w))
            .collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        s.erase_rewritten().unwrap();
    }
    drop(s);
    for word in [
        secret.clone(),
        format!("Thread{n}"),
        format!("Renamed{n}"),
        format!("Diag{n}"),
    ] {
        let left = testing::secret_in_files(&fx.db.url(), &word);
        assert!(left.is_empty(), "{word} is left in {left:?}");
    }
    assert!(
        fx.db.files_hold(shared.as_bytes()),
        "the shared payload stays"
    );
}

fn a_redacted_state_value_leaves_no_byte_of_it(be: Be) {
    let fx = Fx::new(be);
    let secret = format!(
        "pw=Hunter2-ZebraCrossing{}-sk-proj-Ab9",
        fx.ses.0.as_u128() % 1_000_000
    );
    let mut s = fx.store();
    let root = s
        .transaction(|l| l.state_put(&fx.ses, &main(), "db", secret.as_bytes()))
        .unwrap();
    s.search_update(&mut |_, _| {}).unwrap();
    assert!(fx.db.files_hold(secret.as_bytes()), "the value is stored");
    let value = content_hash(secret.as_bytes());
    let done = s
        .redact(&value, "alice", "a password", DAY + 80, false)
        .unwrap();
    assert_eq!(done.warning, None);
    // Read back, the value is its tombstone; the state still verifies.
    let got = s.state_get(&root, "db").unwrap().unwrap();
    assert!(
        got.starts_with(b"[redacted "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    for _ in 0..50 {
        if testing::secret_in_files(&fx.db.url(), &secret).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        s.erase_freed().unwrap();
    }
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    drop(s);
    let left = testing::secret_in_files(&fx.db.url(), &secret);
    assert!(left.is_empty(), "no byte of the value is left: {left:?}");
}

fn a_redaction_is_refused_without_bytes_or_reason(be: Be) {
    let fx = Fx::new(be);
    let (_, payload, _) = redacted_fixture(&fx);
    let mut s = fx.store();
    let again = s.redact(&payload, "bob", "again", DAY + 90, true);
    assert!(
        matches!(&again, Err(StoreError::Invalid(m)) if m.contains("already redacted") && m.contains("alice")),
        "{again:?}"
    );
    let none = s.redact(&content_hash(b"never stored"), "bob", "x", DAY + 90, true);
    assert!(matches!(none, Err(StoreError::NoNode(_))), "{none:?}");
    let empty = s.redact(&content_hash(b""), "bob", "x", DAY + 90, true);
    assert!(matches!(empty, Err(StoreError::Invalid(_))), "{empty:?}");
    let other = content_hash(b"two/invoke");
    let why = s.redact(&other, "bob", "  ", DAY + 90, true);
    assert!(matches!(why, Err(StoreError::Invalid(_))), "{why:?}");
    // Nothing of those was written.
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    assert_eq!(r.redacted, 1);
    assert!(s.blob(&other).unwrap().is_some());
}

fn an_undone_or_unrecorded_redaction_is_caught(be: Be) {
    // The index row removed: readers would see the payload missing.
    let fx = Fx::new(be);
    let (secret, payload, h) = redacted_fixture(&fx);
    fx.edit(
        "DELETE FROM redactions WHERE hash = ?1",
        &[Bytes(payload.as_bytes())],
    );
    let r = fx.verify_dirty();
    let obj = format!("redaction {}", payload.to_hex());
    expect(&r, &obj, &["lacks it"]);
    only(&r, &[obj]);

    // The bytes put back: a redaction that did not erase.
    let fx = Fx::new(be);
    let (secret2, payload2, _) = redacted_fixture(&fx);
    fx.edit(
        match be {
            Be::Sqlite | Be::SqliteMemory => {
                "INSERT INTO blobs (hash, k, data) VALUES (?1, substr(?1, 1, 8), ?2)"
            }
            Be::Postgres => "INSERT INTO blobs (hash, data) VALUES (?1, ?2)",
        },
        &[Bytes(payload2.as_bytes()), Bytes(secret2.as_bytes())],
    );
    let r = fx.verify_dirty();
    let obj = format!("blob {}", payload2.to_hex());
    expect(&r, &obj, &["redacted it", "still stored"]);
    only(&r, &[obj]);

    // The redaction fact removed (the newest fact, so the chain before it
    // holds): the payload is missing without a recorded redaction, which is
    // tampering, and the index names a fact that does not redact it.
    let fx = Fx::new(be);
    let (_, payload3, h3) = redacted_fixture(&fx);
    let last: i64 = fx.query_one("SELECT max(seq) FROM facts", &[]);
    fx.edit(&format!("DELETE FROM facts WHERE seq = {last}"), &[]);
    let r = fx.verify_dirty();
    expect(&r, &node_obj(&h3), &[&payload3.to_hex(), "missing"]);
    expect(
        &r,
        &format!("redaction {}", payload3.to_hex()),
        &["no fact of the journal redacts it"],
    );
    let _ = (secret, h);
}
