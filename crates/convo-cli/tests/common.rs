use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A temporary `CONVO_HOME` and a way to run `convo` in it.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    /// `--store` for every command (`CONVO_STORE`); the home's SQLite file when `None`.
    pub store: Option<String>,
}

pub struct Run {
    pub out: Output,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    /// Asserts success and returns stdout, trimmed.
    pub fn ok(&self) -> String {
        assert!(
            self.out.status.success(),
            "convo failed ({}):\n{}",
            self.code(),
            self.stderr()
        );
        self.stdout().trim().to_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok()).expect("stdout is one JSON document")
    }
}

impl TestEnv {
    /// A test environment on `backend`: SQLite in its home, or a fresh
    /// PostgreSQL database (`None` when PostgreSQL tests are skipped
    /// outside CI).
    pub fn on(
        backend: convo_testutil::Backend,
    ) -> Option<(Self, Option<convo_testutil::PgDatabase>)> {
        let mut t = TestEnv::new();
        match backend {
            convo_testutil::Backend::Postgres => {
                let db = convo_testutil::pg_database()?;
                t.store = Some(db.url.clone());
                Some((t, Some(db)))
            }
            _ => Some((t, None)),
        }
    }

    pub fn new() -> Self {
        TestEnv {
            dir: tempfile::tempdir().unwrap(),
            store: None,
        }
    }
    pub fn home(&self) -> &Path {
        self.dir.path()
    }
    pub fn db(&self) -> PathBuf {
        self.home().join("convo.db")
    }
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_convo"));
        c.env_clear()
            .env("CONVO_HOME", self.home())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null());
        if let Some(url) = &self.store {
            c.env("CONVO_STORE", url);
        }
        c
    }
    pub fn run(&self, args: &[&str]) -> Run {
        Run {
            out: self.cmd().args(args).output().unwrap(),
        }
    }
    pub fn run_stdin(&self, args: &[&str], input: &[u8]) -> Run {
        use std::io::Write;
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        Run {
            out: child.wait_with_output().unwrap(),
        }
    }
    pub fn session(&self, agent: &str) -> String {
        self.run(&["session", "new", "--agent", agent]).ok()
    }
}

pub fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}
