//! `convo mcp wrap`: a stdio MCP server run as a child, every line it
//! reads and writes relayed unchanged and handed to the recorder.
//!
//! Each line is noted before it is forwarded (a channel send), so a
//! response is never noted before its request; the store is written on
//! the recorder's thread. When the client closes its end, the server's
//! stdin is closed; a server still running [`GRACE`] later is killed, so
//! the wrapper exits before a client's own shutdown timeout.

use crate::McpError;
use crate::message::Dir;
use crate::record::Noter;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// How long a server may run on after its client closed stdin.
pub const GRACE: Duration = Duration::from_millis(1500);

/// Where lines to the client go (shared by the relay and a replay).
pub type Out = Arc<Mutex<Box<dyn Write + Send>>>;

/// This process's stdout as an [`Out`].
pub fn stdout_out() -> Out {
    Arc::new(Mutex::new(Box::new(std::io::stdout())))
}

/// Writes one line to the client and flushes it.
pub fn send(out: &Out, line: &[u8]) -> std::io::Result<()> {
    let mut w = out
        .lock()
        .map_err(|_| std::io::Error::other("the output lock was poisoned"))?;
    w.write_all(line)?;
    w.flush()
}

/// Starts `argv` with piped stdin and stdout (stderr is the wrapper's).
pub fn spawn(argv: &[String]) -> Result<Child, McpError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| McpError::Invalid("no MCP server command given (after --)".into()))?;
    Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| McpError::Spawn {
            program: program.clone(),
            source,
        })
}

/// Reads lines from `from` until it ends, each noted (when `keep` says
/// so) and written by `write`.
pub fn pump(
    from: impl Read,
    noter: Option<&Noter>,
    dir: Dir,
    mut keep: impl FnMut(&[u8]) -> bool,
    mut write: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(64 << 10, from);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        if !keep(&line) {
            continue;
        }
        if let Some(n) = noter {
            n.note(dir, &line);
        }
        write(&line)?;
    }
}

/// Copies the client's lines to the server's stdin until either ends.
pub fn to_server(input: impl Read, mut stdin: ChildStdin, noter: Option<&Noter>) {
    let _ = pump(
        input,
        noter,
        Dir::ToServer,
        |_| true,
        |l| {
            stdin.write_all(l)?;
            stdin.flush()
        },
    );
}

/// Relays between the client (`input`, `out`) and the running `child`
/// until the server exits; its exit code.
pub fn relay(
    mut child: Child,
    input: impl Read + Send + 'static,
    out: Out,
    noter: Option<Noter>,
) -> Result<Option<i32>, McpError> {
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| McpError::Invalid("the server's stdin is not piped".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| McpError::Invalid("the server's stdout is not piped".into()))?;
    let (done_tx, done) = mpsc::channel::<Dir>();
    let up_noter = noter.clone();
    let up_done = done_tx.clone();
    std::thread::spawn(move || {
        to_server(input, stdin, up_noter.as_ref());
        let _ = up_done.send(Dir::ToServer);
    });
    std::thread::spawn(move || {
        let _ = pump(
            stdout,
            noter.as_ref(),
            Dir::ToClient,
            |_| true,
            |l| send(&out, l),
        );
        let _ = done_tx.send(Dir::ToClient);
    });
    // The client closing its end first: the server gets GRACE to exit.
    if done.recv() == Ok(Dir::ToServer)
        && done.recv_timeout(GRACE) == Err(mpsc::RecvTimeoutError::Timeout)
    {
        let _ = child.kill();
    }
    let status = child.wait()?;
    Ok(status.code())
}

/// The id of the `initialize` a replay sends a server it starts live.
pub const LIVE_INIT_ID: &str = "convo-replay-initialize";

/// A server started in the middle of a replay (`--on-miss live`) for the
/// requests the recording does not answer: initialized with the client's
/// own `initialize` (its answer is not relayed: the client had the
/// recorded one), then sent every such request, every notification and
/// every answer of the client from then on.
#[derive(Debug)]
pub struct Live {
    child: Child,
    stdin: ChildStdin,
    noter: Option<Noter>,
}

impl Live {
    /// Starts `argv` and initializes it with `initialize` (the client's
    /// request, its id replaced), waiting up to 30 s for its answer.
    pub fn start(
        argv: &[String],
        initialize: &serde_json::Value,
        out: Out,
        noter: Option<Noter>,
    ) -> Result<Live, McpError> {
        let mut child = spawn(argv)?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| McpError::Invalid("the server's stdin is not piped".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| McpError::Invalid("the server's stdout is not piped".into()))?;
        let (ready_tx, ready) = mpsc::channel::<()>();
        let pump_noter = noter.clone();
        std::thread::spawn(move || {
            let init_id = serde_json::json!(LIVE_INIT_ID).to_string();
            let keep = |l: &[u8]| {
                let m = crate::message::Message::read(l);
                let ours = matches!(&m.shape, crate::message::Shape::Response { id, .. } if *id == init_id);
                if ours {
                    let _ = ready_tx.send(());
                }
                !ours
            };
            let _ = pump(stdout, pump_noter.as_ref(), Dir::ToClient, keep, |l| {
                send(&out, l)
            });
        });
        let mut init = initialize.clone();
        if let Some(o) = init.as_object_mut() {
            o.insert("id".into(), serde_json::json!(LIVE_INIT_ID));
        }
        let mut line = serde_json::to_vec(&init).map_err(|e| McpError::Invalid(e.to_string()))?;
        line.push(b'\n');
        stdin.write_all(&line)?;
        stdin.flush()?;
        if ready.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            return Err(McpError::Invalid(
                "the MCP server started for a replay miss did not answer `initialize` within 30 s"
                    .into(),
            ));
        }
        stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
        stdin.flush()?;
        Ok(Live {
            child,
            stdin,
            noter,
        })
    }

    /// Sends one line from the client to the live server.
    pub fn forward(&mut self, line: &[u8]) -> std::io::Result<()> {
        if let Some(n) = &self.noter {
            n.note(Dir::ToServer, line);
        }
        self.stdin.write_all(line)?;
        self.stdin.flush()
    }

    /// Closes the server's stdin and waits for it ([`GRACE`], then kills
    /// it); its exit code.
    pub fn stop(self) -> Option<i32> {
        let Live {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let deadline = std::time::Instant::now() + GRACE;
        loop {
            match child.try_wait() {
                Ok(Some(s)) => return s.code(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    return child.wait().ok().and_then(|s| s.code());
                }
            }
        }
    }
}
