//! `convo mcp wrap`: a stdio MCP server run as a child, every line it
//! reads and writes relayed unchanged and handed to the recorder.
//!
//! Each line is noted before it is forwarded (a channel send), so a
//! response is never noted before its request; the store is written on
//! the recorder's thread. When the client closes its end, the server's
//! stdin is closed; a server still running [`GRACE`] later is killed, so
//! the wrapper exits before a client's own shutdown timeout. Told to stop
//! (the CLI does on SIGINT, SIGTERM or SIGHUP), it closes the server's
//! stdin at once and kills it [`STOP_GRACE`] later, so the recording is
//! closed before a client that signals its servers gives up on them.

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

/// The server's stdin, shared by the thread copying the client's lines
/// and the one that closes it when the relay stops.
type SharedStdin = Arc<Mutex<Option<ChildStdin>>>;

/// Copies the client's lines to the server's stdin until either ends.
fn to_server(input: impl Read, stdin: &SharedStdin, noter: Option<&Noter>) {
    let _ = pump(
        input,
        noter,
        Dir::ToServer,
        |_| true,
        |l| {
            let mut held = stdin
                .lock()
                .map_err(|_| std::io::Error::other("the stdin lock was poisoned"))?;
            let w = held
                .as_mut()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
            w.write_all(l)?;
            w.flush()
        },
    );
}

/// Why a relay is ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// The client closed its end.
    Client,
    /// The server closed its stdout.
    Server,
    /// The wrapper was told to stop ([`Stopper::stop`]).
    Stopped,
}

/// Stops a running [`relay`] from another thread (a signal's handler):
/// the server's stdin is closed, the server gets [`STOP_GRACE`] to exit,
/// then it is killed, and the relay returns.
#[derive(Clone, Debug)]
pub struct Stopper(mpsc::Sender<Ended>);

impl Stopper {
    /// Asks the relay to stop.
    pub fn stop(&self) {
        let _ = self.0.send(Ended::Stopped);
    }
}

/// How long a server may run on after the wrapper was told to stop: a
/// client stopping its servers by signal (Claude Code sends SIGINT, then
/// SIGTERM, then SIGKILL) does not wait long, and the recording must be
/// closed before it gives up.
pub const STOP_GRACE: Duration = Duration::from_millis(150);

/// Relays between the client (`input`, `out`) and the running `child`
/// until the server exits, the client has closed its end and [`GRACE`]
/// passed, or `stopper`'s [`Stopper`] is used; the server's exit code.
pub fn relay(
    mut child: Child,
    input: impl Read + Send + 'static,
    out: Out,
    noter: Option<Noter>,
    stopper: impl FnOnce(Stopper),
) -> Result<Option<i32>, McpError> {
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| McpError::Invalid("the server's stdin is not piped".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| McpError::Invalid("the server's stdout is not piped".into()))?;
    let stdin: SharedStdin = Arc::new(Mutex::new(Some(stdin)));
    let (done_tx, done) = mpsc::channel::<Ended>();
    stopper(Stopper(done_tx.clone()));
    let up_noter = noter.clone();
    let up_done = done_tx.clone();
    let up_stdin = stdin.clone();
    std::thread::spawn(move || {
        to_server(input, &up_stdin, up_noter.as_ref());
        let _ = up_done.send(Ended::Client);
    });
    std::thread::spawn(move || {
        let _ = pump(
            stdout,
            noter.as_ref(),
            Dir::ToClient,
            |_| true,
            |l| send(&out, l),
        );
        let _ = done_tx.send(Ended::Server);
    });
    let grace = match done.recv() {
        Ok(Ended::Client) => Some(GRACE),
        Ok(Ended::Stopped) => Some(STOP_GRACE),
        Ok(Ended::Server) | Err(_) => None,
    };
    if let Some(grace) = grace {
        // The server's stdin closed: it has `grace` to exit on its own.
        drop(stdin.lock().ok().and_then(|mut s| s.take()));
        if !server_ended(&done, grace) {
            let _ = child.kill();
        }
    }
    let status = child.wait()?;
    Ok(status.code())
}

/// Waits up to `grace` for the server's stdout to close.
fn server_ended(done: &mpsc::Receiver<Ended>, grace: Duration) -> bool {
    let mut deadline = std::time::Instant::now() + grace;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match done.recv_timeout(left) {
            Ok(Ended::Server) => return true,
            Ok(Ended::Stopped) => {
                deadline = deadline.min(std::time::Instant::now() + STOP_GRACE);
            }
            Ok(Ended::Client) => {}
            Err(_) => return false,
        }
    }
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
