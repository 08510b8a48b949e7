//! `convo test` with MCP servers: each server a test declares is answered
//! from the recording by `convo mcp wrap --replay` (never started), and
//! the program finds how to start those wrappers in an MCP configuration
//! file (`{"mcpServers": {NAME: {"command", "args", "env"}}}`, the format
//! Claude Code, Cursor and the SDKs read) named by $CONVO_MCP_CONFIG.

use super::test::{Command, TestSpec};
use super::{CmdResult, CommandError};
use convo_proxy::replay::ReplaySpec;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The variable naming the configuration file.
pub const ENV: &str = "CONVO_MCP_CONFIG";

/// The configuration file of one test, removed when dropped.
#[derive(Debug)]
pub struct ConfigFile(PathBuf);

impl ConfigFile {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A server's command: argv, or one string split at spaces.
fn argv(c: &Command) -> Vec<String> {
    match c {
        Command::Argv(a) => a.clone(),
        Command::Shell(s) => s.split_whitespace().map(str::to_owned).collect(),
    }
}

/// Writes the MCP configuration of test `t` (none when it declares no
/// server): every server replayed from the test's recording, in the
/// store at `store_url`.
pub fn config(t: &TestSpec, store_url: &str) -> CmdResult<Option<ConfigFile>> {
    if t.mcp.is_empty() {
        return Ok(None);
    }
    let spec = ReplaySpec::parse(&t.recording)
        .map_err(|e| CommandError::user(format!("test `{}`: {e}", t.name)))?;
    let convo = std::env::current_exe()
        .map_err(|e| CommandError::user(format!("cannot find convo's own program: {e}")))?;
    let mut servers = Map::new();
    for (name, cmd) in &t.mcp {
        let argv = argv(cmd);
        if argv.is_empty() {
            return Err(CommandError::user(format!(
                "test `{}`: MCP server `{name}` has an empty command",
                t.name
            )));
        }
        let mut args = vec![
            "mcp".to_owned(),
            "wrap".into(),
            "--session".into(),
            spec.session.clone(),
            "--branch".into(),
            spec.branch.to_string(),
            "--replay".into(),
            "--".into(),
        ];
        args.extend(argv);
        servers.insert(
            name.clone(),
            json!({"command": convo, "args": args, "env": {"CONVO_STORE": store_url}}),
        );
    }
    let doc = json!({"mcpServers": Value::Object(servers)});
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = std::env::temp_dir().join(format!(
        "convo-test-mcp-{}-{nanos}.json",
        std::process::id()
    ));
    write_private(&path, doc.to_string().as_bytes())
        .map_err(|e| CommandError::user(format!("cannot write {}: {e}", path.display())))?;
    Ok(Some(ConfigFile(path)))
}

/// Creates `path` readable by its owner only (it names the store).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)?.write_all(bytes)
}
