//! Hostile input and user mistakes through the real binary: opening stores
//! (schemes, foreign files, reads that never create, read-only files),
//! escaped human output, payload limits, PostgreSQL restarts under `watch`.

use crate::common::TestEnv;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = if e.path().is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn read_commands_on_a_missing_store_say_no_store_and_create_nothing() {
    let t = TestEnv::new();
    let reads: [&[&str]; 7] = [
        &["session", "list"],
        &["session", "get", "x"],
        &["log", "x"],
        &["show", "abcd"],
        &["verify"],
        &["branch", "list", "x"],
        &["state", "list", "x"],
    ];
    for args in reads {
        let r = t.run(args);
        assert_eq!(r.code(), 3, "{args:?}: a missing store is not found");
        assert!(
            r.stderr()
                .contains(&format!("no store at {}", t.db().display())),
            "{args:?}: {}",
            r.stderr()
        );
    }
    assert!(
        files(t.home()).is_empty(),
        "a read created {:?}",
        files(t.home())
    );
    // A mistyped CONVO_HOME: an error, and the directory is not made.
    let typo = t.home().join("typo");
    let r = t
        .cmd()
        .env("CONVO_HOME", &typo)
        .args(["session", "list"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(3));
    assert!(!typo.exists());
    // `init` and writes create it.
    t.run(&["init"]).ok();
    assert!(t.db().exists());
    assert_eq!(
        t.run(&["session", "list", "--json"]).json(),
        serde_json::json!([])
    );
}

#[test]
fn unknown_store_schemes_are_errors_naming_the_supported_ones() {
    let t = TestEnv::new();
    for url in ["postgress://u@h/db", "mysql://x/y"] {
        let r = t
            .cmd()
            .current_dir(t.home())
            .env("CONVO_STORE", url)
            .args(["session", "new", "--agent", "a"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr).into_owned();
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert!(err.contains("unknown store URL scheme"), "{err}");
        assert!(
            err.contains("postgres://") && err.contains("sqlite://"),
            "{err}"
        );
    }
    assert!(files(t.home()).is_empty(), "{:?}", files(t.home()));
}

#[test]
fn a_sqlite_file_that_is_not_a_convo_store_is_refused_untouched() {
    let t = TestEnv::new();
    let theirs = t.home().join("theirs.db");
    rusqlite::Connection::open(&theirs)
        .unwrap()
        .execute_batch("CREATE TABLE invoices (n INTEGER); INSERT INTO invoices VALUES (1);")
        .unwrap();
    let before = files(t.home());
    let url = format!("sqlite://{}", theirs.display());
    for args in [
        &["--store", &url, "init"][..],
        &["--store", &url, "session", "list"],
    ] {
        let r = t.run(args);
        assert_eq!(r.code(), 4, "refused");
        assert!(
            r.stderr().contains("is not a convo store"),
            "{}",
            r.stderr()
        );
        assert!(r.stderr().contains("invoices"), "{}", r.stderr());
    }
    assert_eq!(files(t.home()), before, "the foreign database was touched");
}

#[test]
fn explicit_home_and_store_flags_beat_the_environment() {
    let t = TestEnv::new();
    let env_db = t.home().join("env").join("convo.db");
    let flag_home = t.home().join("flag");
    let cmd = |args: &[&str]| {
        let o = t
            .cmd()
            .env("CONVO_STORE", format!("sqlite://{}", env_db.display()))
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    cmd(&[
        "--home",
        flag_home.to_str().unwrap(),
        "session",
        "new",
        "--agent",
        "a",
    ]);
    assert!(
        flag_home.join("convo.db").exists(),
        "--home beats CONVO_STORE"
    );
    assert!(!env_db.exists());
    let flag_db = t.home().join("store.db");
    cmd(&[
        "--home",
        flag_home.to_str().unwrap(),
        "--store",
        &format!("sqlite://{}", flag_db.display()),
        "session",
        "new",
        "--agent",
        "a",
    ]);
    assert!(flag_db.exists(), "--store beats --home");
    cmd(&["session", "new", "--agent", "a"]);
    assert!(env_db.exists(), "CONVO_STORE beats CONVO_HOME");
}

/// Runs `convo` as `nobody` when the tests run as root (root ignores file
/// modes, so a read-only store would prove nothing).
fn run_unprivileged(t: &TestEnv, args: &[&str]) -> std::process::Output {
    let root = running_as_root();
    let mut c = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_convo"));
        c
    } else {
        std::process::Command::new(env!("CARGO_BIN_EXE_convo"))
    };
    c.env_clear()
        .env("CONVO_HOME", t.home())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(args)
        .output()
        .unwrap()
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn a_store_in_a_read_only_file_and_directory_can_be_read() {
    let t = TestEnv::new();
    let s = t.session("reader");
    t.run(&["say", &s, "--user", "hi", "--agent", "hello"]).ok();
    let home = t.home();
    std::fs::set_permissions(
        home.join("convo.db"),
        std::fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o555)).unwrap();
    let before = files(home);
    let reads: [&[&str]; 4] = [
        &["session", "list", "--json"],
        &["session", "get", &s, "--json"],
        &["log", &s],
        &["verify"],
    ];
    for args in reads {
        let o = run_unprivileged(&t, args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // `say` leaves SQLite's write-ahead log for a later checkpoint (no
    // fsync at exit): its node is read from the log all the same.
    assert!(
        home.join("convo.db-wal").metadata().unwrap().len() > 0,
        "the log was folded in at exit"
    );
    let o = run_unprivileged(&t, &["log", &s]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hello"),
        "the node in the log is read: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = run_unprivileged(&t, &["say", &s, "--user", "x", "--agent", "y"]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "a write to a read-only store fails"
    );
    assert_eq!(files(home), before, "the read-only store changed");
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Without its `-shm` file, a log in a read-only directory cannot be read
/// (SQLite would have to create the file); the read refuses, naming the
/// log, instead of opening the database file alone and missing commits.
#[test]
fn a_read_only_store_whose_log_cannot_be_read_is_refused_not_shown_stale() {
    let t = TestEnv::new();
    let s = t.session("reader");
    t.run(&["say", &s, "--user", "hi", "--agent", "hello"]).ok();
    let home = t.home();
    std::fs::remove_file(home.join("convo.db-shm")).unwrap();
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o555)).unwrap();
    let o = run_unprivileged(&t, &["log", &s]);
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("write-ahead log"), "{err}");
    // Where it can be written, the same store reads back whole.
    assert!(t.run(&["log", &s]).ok().contains("hello"));
}

#[test]
fn duplicate_keys_in_diagnostics_and_ingest_lines_are_errors() {
    let t = TestEnv::new();
    let s = t.session("a");
    let r = t.run(&[
        "record",
        &s,
        "invoke",
        "--payload",
        "x",
        "--diagnostics",
        r#"{"a":1,"a":2}"#,
    ]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(r.stderr().contains("duplicate key \"a\""), "{}", r.stderr());
    let r = t.run_stdin(
        &["ingest", &s],
        br#"{"kind":"invoke","payload":"x","payload":"y"}"#,
    );
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(r.stderr().contains("duplicate key"), "{}", r.stderr());
    assert_eq!(t.run(&["log", &s, "--json"]).json(), serde_json::json!([]));
}

#[test]
fn payloads_over_the_limit_are_refused_before_being_read() {
    let t = TestEnv::new();
    let s = t.session("a");
    // A 4 GiB sparse file: refused from its size, never read.
    let big = t.home().join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let r = t.run(&[
        "record",
        &s,
        "invoke",
        "--payload-file",
        big.to_str().unwrap(),
    ]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr()
            .contains("4294967296 bytes, more than the payload limit of 67108864 bytes"),
        "{}",
        r.stderr()
    );
    // Stdin is cut off at the limit (here lowered by the environment).
    let r = {
        use std::io::Write;
        let mut c = t.cmd();
        c.env("CONVO_MAX_PAYLOAD", "1000")
            .args(["record", &s, "invoke"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(&[b'x'; 5000]);
        child.wait_with_output().unwrap()
    };
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("limit of 1000 bytes"));
    // The flag beats the environment; at the limit is fine.
    let ok = t.run(&[
        "record",
        &s,
        "invoke",
        "--max-payload",
        "3",
        "--payload",
        "abc",
    ]);
    ok.ok();
    let r = t.run(&[
        "record",
        &s,
        "invoke",
        "--max-payload",
        "3",
        "--payload",
        "abcd",
    ]);
    assert_eq!(r.code(), 2);
    assert_eq!(
        t.run(&["log", &s, "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn titles_and_payloads_with_escape_sequences_are_shown_not_sent_to_the_terminal() {
    let t = TestEnv::new();
    let s = t
        .run(&[
            "session",
            "new",
            "--agent",
            "a\x1b]0;x\x07",
            "--title",
            "two\nlines\x1b[2J",
        ])
        .ok();
    let h = t
        .run(&[
            "record",
            &s,
            "invoke",
            "--payload",
            "\x1b[31mred\r\x1b[Kfake\nsecond",
        ])
        .ok();
    for args in [
        vec!["session", "list"],
        vec!["session", "get", &s],
        vec!["show", &h],
        vec!["log", &s],
        vec!["session", "get", "no\x1b[31msuch"],
    ] {
        let r = t.run(&args);
        let all = format!("{}{}", r.stdout(), r.stderr());
        assert!(
            !all.contains('\x1b') && !all.contains('\r') && !all.contains('\x07'),
            "{args:?}: {all:?}"
        );
    }
    let listed = t.run(&["session", "list"]).stdout();
    assert!(listed.contains("two\\nlines\\x1b[2J"), "{listed}");
    let shown = t.run(&["show", &h]).stdout();
    assert!(
        shown.contains("\\x1b[31mred\\r\\x1b[Kfake\nsecond"),
        "{shown}"
    );
}

/// A PostgreSQL server of a test's own (it is stopped and restarted).
pub struct OwnPg {
    dir: tempfile::TempDir,
    bin: String,
    port: String,
}

impl OwnPg {
    /// A new cluster (`scripts/pg-cluster start`) and its URL; `None` when
    /// PostgreSQL tests are skipped (the suite's PostgreSQL is missing
    /// outside CI: the binaries come with it).
    pub fn start_new() -> Option<(OwnPg, String)> {
        convo_testutil::pg_database()?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/pg-cluster");
        let out = std::process::Command::new(&script)
            .arg("start")
            .arg(dir.path().join("pg"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let bin = std::process::Command::new("sh")
            .args([
                "-c",
                "ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1",
            ])
            .output()
            .unwrap();
        let pg = OwnPg {
            bin: String::from_utf8(bin.stdout).unwrap().trim().to_owned(),
            port: url
                .rsplit(':')
                .next()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_owned(),
            dir,
        };
        Some((pg, url))
    }

    /// `pg_ctl restart -m MODE` (`fast`: clients are disconnected and the
    /// server shuts down cleanly; `immediate`: a crash, recovered from
    /// the WAL), waiting until the server accepts connections again.
    pub fn restart(&self, mode: &str) {
        let data = self.dir.path().join("pg");
        self.pg_ctl(&format!(
            "-m {mode} -w -l '{}/log' -o \"-p {} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200\" restart",
            data.display(),
            self.port,
            data.display()
        ));
    }

    fn pg_ctl(&self, args: &str) {
        let data = self.dir.path().join("pg");
        let cmd = format!("'{}/pg_ctl' -D '{}/data' {args}", self.bin, data.display());
        let st = if running_as_root() {
            std::process::Command::new("su")
                .args(["postgres", "-s", "/bin/sh", "-c", &cmd])
                .status()
        } else {
            std::process::Command::new("sh").args(["-c", &cmd]).status()
        };
        assert!(st.unwrap().success(), "pg_ctl {args}");
    }
    fn start(&self) {
        let data = self.dir.path().join("pg");
        self.pg_ctl(&format!(
            "-l '{}/log' -w -o \"-p {} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=off\" start",
            data.display(),
            self.port,
            data.display()
        ));
    }
}

impl Drop for OwnPg {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.pg_ctl("-m immediate stop")
        }));
    }
}

#[test]
fn watch_on_postgres_reconnects_after_a_restart_with_no_gap_and_no_repeat() {
    // Needs PostgreSQL's binaries, which the PostgreSQL suite has.
    let Some((pg, url)) = OwnPg::start_new() else {
        return;
    };
    let mut t = TestEnv::new();
    t.store = Some(url);
    let s = t.session("w");
    let record = |p: &str| t.run(&["record", &s, "invoke", "--payload", p]).ok();
    record("one");
    let mut watch = t
        .cmd()
        .args(["watch", "--json", "--after", "0", "--limit", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let first = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
    pg.pg_ctl("-m immediate stop");
    pg.start();
    record("two");
    record("three");
    record("four");
    let mut lines = vec![first];
    while lines.len() < 4 {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = watch.kill();
                let o = watch.wait_with_output().unwrap();
                panic!(
                    "watch stopped after {lines:?}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
    let o = watch.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<(u64, String)> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["cursor"].as_u64().unwrap(),
                v["payload"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let cursors: Vec<u64> = got.iter().map(|g| g.0).collect();
    let payloads: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(cursors, [1, 2, 3, 4], "no gap, no repeat");
    assert_eq!(payloads, ["one", "two", "three", "four"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("reconnected"));
}

/// `convo import DIR` of a Claude Code project folder holding, beside a
/// real transcript, a FIFO named `*.jsonl`, a link to `/dev/zero` and a
/// 3 GB line with no newline (a sparse file): the FIFO and the link are
/// skipped, named on stderr (it used to block forever on the FIFO and read
/// `/dev/zero` until killed), and the long line is refused after reading at
/// most the 64 MiB record limit (it used to be held whole: here the
/// process runs with 2 GB of address space).
#[test]
fn import_skips_what_is_not_a_file_and_never_holds_more_than_a_record() {
    let t = TestEnv::new();
    let dir = t.home().join("project");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("0-good.jsonl"),
        crate::test_backends::claude_turns(0, 2),
    )
    .unwrap();
    let fifo = dir.join("1-fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", dir.join("2-zero.jsonl")).unwrap();
    let huge = std::fs::File::create(dir.join("3-huge.jsonl")).unwrap();
    huge.set_len(3 << 30).unwrap();
    drop(huge);
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_convo"))
        .args(["import", dir.to_str().unwrap(), "--json"])
        .env("CONVO_HOME", t.home())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A guard, not a measure: an import blocked on the FIFO never ends.
    let pid = child.id();
    let guard = std::thread::spawn(move || {
        for _ in 0..600 {
            std::thread::sleep(std::time::Duration::from_secs(1));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return false;
            }
        }
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        true
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        !guard.join().unwrap(),
        "the import blocked (killed after 10 minutes)"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {err} {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["created"].as_array().map(Vec::len), Some(1), "{v} {err}");
    assert!(
        err.contains("1-fifo.jsonl: a FIFO, not a regular file; skipped"),
        "{err}"
    );
    assert!(
        err.contains("2-zero.jsonl: a device, not a regular file; skipped"),
        "{err}"
    );
    let failed = v["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{v}");
    assert!(
        failed[0]["file"]
            .as_str()
            .unwrap()
            .ends_with("3-huge.jsonl"),
        "{v}"
    );
    assert!(
        failed[0]["error"].as_str().unwrap().contains("64 MiB"),
        "{v}"
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
}

/// Every listener (`serve`, `proxy`, `otel`) closes a connection whose
/// request head never ends (a header-read timeout, here 1 s), and caps the
/// connections it serves at once (here 4): 24 connections that send
/// nothing neither exhaust it nor keep a normal request from an answer.
/// Nothing is timed: the half-sent head is closed (not answered), and the
/// request gets its answer.
#[test]
fn listeners_close_half_sent_heads_and_idle_connections_do_not_block_a_request() {
    use std::io::{Read, Write};
    let t = TestEnv::new();
    let env = [
        ("CONVO_HEADER_TIMEOUT_SECS", "1"),
        ("CONVO_MAX_CONNECTIONS", "4"),
    ];
    let listeners: [&[&str]; 3] = [
        &["serve", "--listen", "127.0.0.1:0", "--quiet"],
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--upstream",
            "http://127.0.0.1:9",
        ],
        &["otel", "--listen", "127.0.0.1:0", "--quiet"],
    ];
    for args in listeners {
        let srv = crate::serve_util::Server::launch_with(&t, args, &env);
        let what = args[0];
        let mut half = std::net::TcpStream::connect(&srv.addr).unwrap();
        half.set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .unwrap();
        half.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .unwrap();
        let mut got = Vec::new();
        let closed = half.read_to_end(&mut got);
        let reset = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ConnectionReset;
        assert!(
            closed.as_ref().map_or_else(reset, |_| true),
            "{what}: the half-sent head is closed: {closed:?}"
        );
        assert!(
            !String::from_utf8_lossy(&got).contains("200 OK"),
            "{what}: a half head is not answered: {}",
            String::from_utf8_lossy(&got)
        );
        let idle: Vec<std::net::TcpStream> = (0..24)
            .map(|_| std::net::TcpStream::connect(&srv.addr).unwrap())
            .collect();
        let r = srv.get("/api/v1/health");
        assert!(r.status >= 200, "{what}: answered: {r:?}");
        if what != "proxy" {
            assert_eq!(r.status, 200, "{what}: {}", r.text());
        }
        drop(idle);
    }
}
