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
    let o = run_unprivileged(&t, &["say", &s, "--user", "x", "--agent", "y"]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "a write to a read-only store fails"
    );
    assert_eq!(files(home), before, "the read-only store changed");
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).unwrap();
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
