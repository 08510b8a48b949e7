use super::{CmdResult, CommandError, Env, now};
use clap::Args;
use convo_runtime::Reconnecting;
use convo_store::{Checkpoint, Follower, StoreError};
use ed25519_dalek::SigningKey;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Write a signed checkpoint of the store's state, once or every N appends
///
/// A checkpoint states the follow cursor, the number of nodes, a hash chain
/// over every node, the fact journal's head and every branch head, signed
/// with an Ed25519 key (by default `$CONVO_HOME/checkpoint.key`, made on
/// first use). Keep checkpoints where the store's writer cannot reach them;
/// `convo verify --checkpoint FILE|DIR` then proves the store still extends
/// them and names what was rolled back, truncated or rewritten.
///
/// Where it goes: stdout (the default: pipe it into a transparency log),
/// a file (--out), a new file in a directory (--dir, named by cursor so
/// that names sort in order, never overwritten), and/or an annotated tag
/// `refs/tags/convo/checkpoint/CURSOR-TIME` in the conversations repository
/// (--git; `convo git verify` checks the store against every such tag,
/// `convo git sync` never removes them).
///
/// With --every-appends or --every-minutes (or --follow) it keeps running:
/// it follows the store's append cursor and writes a checkpoint after every
/// N appends, and every M minutes when anything changed (one line of JSON
/// each on stdout when no --dir or --git is given). It starts with one (unless
/// the newest in --dir or --git states the same), and on Ctrl-C or SIGTERM
/// writes a last one if anything changed since, then exits 0. Each is
/// computed from the previous one over the new nodes alone.
///
/// Examples:
///   convo checkpoint -o /mnt/offsite/convo-$(date +%F).checkpoint
///   convo checkpoint --git                    # a tag in $CONVO_HOME/conversations
///   convo checkpoint | tee -a /var/log/convo-transparency.jsonl
///   convo checkpoint --every-appends 1000 --every-minutes 10 --dir /mnt/offsite/convo
///   convo verify --checkpoint /mnt/offsite/convo
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CheckpointArgs {
    /// The signing key file (64 hex digits: the Ed25519 seed); made if missing
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Write the checkpoint to this file instead of stdout
    #[arg(long, short, value_name = "FILE", conflicts_with_all = ["every_appends", "every_minutes", "follow"])]
    pub out: Option<PathBuf>,
    /// Write each checkpoint as a new file in this directory (made if missing)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Publish each checkpoint as a tag in this conversations repository [default: $CONVO_HOME/conversations]
    #[arg(long, value_name = "REPO", num_args = 0..=1)]
    pub git: Option<Option<PathBuf>>,
    /// Keep running; write a checkpoint after every N appends
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub every_appends: Option<u64>,
    /// Keep running; write a checkpoint every M minutes if anything changed
    #[arg(long, value_name = "M")]
    pub every_minutes: Option<f64>,
    /// Keep running, with --every-appends 1000 --every-minutes 10 unless given
    #[arg(long)]
    pub follow: bool,
}

/// Where checkpoints go.
#[derive(Clone, Debug, Default)]
pub struct Sinks {
    /// One file (a single checkpoint).
    pub out: Option<PathBuf>,
    /// A new file each, in this directory.
    pub dir: Option<PathBuf>,
    /// A tag each, in this repository.
    pub git: Option<PathBuf>,
    /// Stdout, one compact line each (when following) instead of pretty.
    pub lines: bool,
}

impl Sinks {
    fn stdout(&self) -> bool {
        self.out.is_none() && self.dir.is_none() && self.git.is_none()
    }

    /// The newest checkpoint already in --dir or --git, if any.
    fn newest(&self) -> Option<Checkpoint> {
        let mut found: Vec<Checkpoint> = Vec::new();
        if let Some(d) = &self.dir
            && let Some(p) = checkpoint_files(d).ok().and_then(|f| f.into_iter().last())
            && let Ok(cp) = read_checkpoint(&p)
        {
            found.push(cp);
        }
        if let Some(r) = &self.git
            && let Ok(list) = convo_git::checkpoints::published(r)
            && let Some((_, Ok(bytes))) = list.into_iter().last()
            && let Ok(cp) = serde_json::from_slice::<Checkpoint>(&bytes)
        {
            found.push(cp);
        }
        found.into_iter().max_by_key(|c| (c.cursor, c.time))
    }

    /// Writes `cp` everywhere it goes; says where on stderr.
    pub fn write(&self, cp: &Checkpoint) -> CmdResult<()> {
        let text = serde_json::to_string_pretty(cp)
            .map_err(|e| CommandError::user(format!("cannot write the checkpoint: {e}")))?;
        let what = format!("checkpoint of {} nodes (cursor {})", cp.nodes, cp.cursor);
        if self.stdout() {
            if self.lines {
                let line = serde_json::to_string(cp)
                    .map_err(|e| CommandError::user(format!("cannot write the checkpoint: {e}")))?;
                let mut out = std::io::stdout().lock();
                writeln!(out, "{line}")?;
                out.flush()?;
            } else {
                println!("{text}");
            }
        }
        if let Some(p) = &self.out {
            std::fs::write(p, format!("{text}\n"))
                .map_err(|e| CommandError::user(format!("cannot write {}: {e}", p.display())))?;
            eprintln!("{what} written to {}", p.display());
        }
        if let Some(d) = &self.dir {
            let p = write_new(
                d,
                &convo_git::checkpoints::tag_name(cp.cursor, cp.time),
                &text,
            )?;
            eprintln!("{what} written to {}", p.display());
        }
        if let Some(r) = &self.git {
            let subject = format!(
                "convo checkpoint: cursor {}, {} nodes, {} facts",
                cp.cursor, cp.nodes, cp.facts
            );
            let name = convo_git::checkpoints::publish(
                r,
                &convo_git::checkpoints::tag_name(cp.cursor, cp.time),
                &subject,
                format!("{text}\n").as_bytes(),
                cp.time,
            )
            .map_err(|e| {
                let c = CommandError::user(format!(
                    "cannot publish the checkpoint in {}: {e}",
                    r.display()
                ));
                match e {
                    convo_git::Error::NotProjection(_) => {
                        c.with_hint("make the repository first with `convo git sync --repo REPO`")
                    }
                    _ => c,
                }
            })?;
            eprintln!("{what} published as {name} in {}", r.display());
        }
        Ok(())
    }
}

/// Writes `text` as `DIR/NAME.checkpoint`, never replacing a file: a name
/// taken gets `-2`, `-3`… The file appears whole (written aside, then
/// linked in).
fn write_new(dir: &Path, name: &str, text: &str) -> CmdResult<PathBuf> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CommandError::user(format!("cannot create {}: {e}", dir.display())))?;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{text}\n"))
        .map_err(|e| CommandError::user(format!("cannot write {}: {e}", tmp.display())))?;
    let mut k = 1;
    let result = loop {
        let file = if k == 1 {
            dir.join(format!("{name}.checkpoint"))
        } else {
            dir.join(format!("{name}-{k}.checkpoint"))
        };
        match std::fs::hard_link(&tmp, &file) {
            Ok(()) => break Ok(file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => k += 1,
            Err(e) => {
                break Err(CommandError::user(format!(
                    "cannot write {}: {e}",
                    file.display()
                )));
            }
        }
    };
    let _ = std::fs::remove_file(&tmp);
    result
}

/// The checkpoint files of a directory (`*.checkpoint`, `*.json`), sorted
/// by name (so by cursor, for those convo wrote).
pub fn checkpoint_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                && p.extension()
                    .is_some_and(|x| x == "checkpoint" || x == "json")
        })
        .collect();
    out.sort();
    Ok(out)
}

/// When automatic checkpoints are due.
#[derive(Clone, Copy, Debug)]
pub struct Every {
    /// After this many appends.
    pub appends: Option<u64>,
    /// After this long, if anything changed.
    pub period: Option<Duration>,
}

fn changed(a: &Checkpoint, b: &Checkpoint) -> bool {
    (a.cursor, a.facts, &a.heads_digest) != (b.cursor, b.facts, &b.heads_digest)
}

/// The automatic checkpointer: follows the store's append cursor and
/// writes a checkpoint into `sinks` whenever `every` says, until `stop`
/// is set, then a last one if anything changed. Returns how many it wrote.
///
/// The store may go away and come back (a PostgreSQL restart): the loop
/// waits for it on a new connection and goes on from the same cursor, so
/// the next checkpoint covers everything appended meanwhile.
pub fn follow_loop(
    conn: &mut Reconnecting,
    key: &SigningKey,
    sinks: &Sinks,
    every: Every,
    stop: &AtomicBool,
) -> CmdResult<u64> {
    let stopped = || stop.load(Ordering::SeqCst);
    let mut said = false;
    let mut lost = |e: &StoreError| {
        if !said {
            eprintln!(
                "convo: checkpoints: lost the store ({}); reconnecting",
                convo_core::text::visible(&e.to_string(), convo_core::text::Newlines::Escape)
            );
            said = true;
        }
    };
    let mut written = 0;
    let mut last = conn.retry(|s| s.checkpoint(key, now()), stopped, &mut lost)?;
    if sinks.newest().is_none_or(|n| changed(&n, &last)) {
        sinks.write(&last)?;
        written += 1;
    }
    let mut follower = Follower::after(last.cursor);
    let mut since = Instant::now();
    let take = |conn: &mut Reconnecting,
                last: &mut Checkpoint,
                lost: &mut dyn FnMut(&StoreError)|
     -> CmdResult<bool> {
        let prev = last.clone();
        let cp = conn.retry(
            |s| s.checkpoint_after(key, now(), Some(&prev)),
            stopped,
            lost,
        )?;
        if !changed(&cp, last) {
            return Ok(false);
        }
        sinks.write(&cp)?;
        *last = cp;
        Ok(true)
    };
    while !stopped() {
        conn.retry(
            |s| follower.next_nodes(s, Duration::from_millis(250)),
            stopped,
            &mut lost,
        )?;
        let pending = follower.cursor().saturating_sub(last.cursor);
        let by_count = every.appends.is_some_and(|n| pending >= n);
        let by_time = every.period.is_some_and(|p| since.elapsed() >= p);
        if by_count || by_time {
            if take(conn, &mut last, &mut lost)? {
                written += 1;
            }
            since = Instant::now();
        }
    }
    if take(conn, &mut last, &mut lost)? {
        written += 1;
    }
    Ok(written)
}

/// A flag set by Ctrl-C, SIGTERM or SIGHUP (see [`on_signal`]).
pub fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    on_signal(move || flag.store(true, Ordering::SeqCst));
    stop
}

/// Calls `then` (on a thread of its own) at the first Ctrl-C, SIGTERM or
/// SIGHUP; later ones are ignored, so a shutdown is not cut short by the
/// next signal. Returns once the handlers are in place, so that a signal
/// sent from then on is seen.
pub fn on_signal(then: impl FnOnce() + Send + 'static) {
    let (ready, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            let _ = ready.send(());
            return;
        };
        rt.block_on(async {
            #[cfg(unix)]
            {
                use tokio::signal::unix::{SignalKind, signal};
                let int = signal(SignalKind::interrupt()).ok();
                let term = signal(SignalKind::terminate()).ok();
                let hup = signal(SignalKind::hangup()).ok();
                let _ = ready.send(());
                let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                    match s {
                        Some(mut s) => {
                            s.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = wait(int) => {}
                    _ = wait(term) => {}
                    _ = wait(hup) => {}
                }
            }
            #[cfg(not(unix))]
            {
                let _ = ready.send(());
                let _ = tokio::signal::ctrl_c().await;
            }
        });
        then();
    });
    let _ = wait.recv();
}

/// The default key file.
pub fn default_key(env: &Env) -> PathBuf {
    env.home.join("checkpoint.key")
}

/// Reads the key at `path`, making a new one there if the file is missing.
pub fn load_or_make_key(path: &Path) -> CmdResult<ed25519_dalek::SigningKey> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let seed: [u8; 32] = hex::decode(text.trim())
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| {
                    CommandError::user(format!(
                        "{} is not a checkpoint key (64 hex digits)",
                        path.display()
                    ))
                })?;
            Ok(convo_store::checkpoint::signing_key(&seed))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed)
                .map_err(|e| CommandError::user(format!("no randomness for a new key: {e}")))?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(path).map_err(|e| {
                CommandError::user(format!("cannot create key {}: {e}", path.display()))
            })?;
            std::io::Write::write_all(&mut f, format!("{}\n", hex::encode(seed)).as_bytes())?;
            eprintln!("made a new checkpoint key: {}", path.display());
            Ok(convo_store::checkpoint::signing_key(&seed))
        }
        Err(e) => Err(CommandError::user(format!(
            "cannot read key {}: {e}",
            path.display()
        ))),
    }
}

/// Reads and parses a checkpoint file.
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("it is not a checkpoint: {e}"))
}

pub fn run(env: &Env, args: CheckpointArgs) -> CmdResult {
    let key = load_or_make_key(&args.key.unwrap_or_else(|| default_key(env)))?;
    let git = args
        .git
        .map(|p| p.unwrap_or_else(|| env.home.join("conversations")));
    let following = args.follow || args.every_appends.is_some() || args.every_minutes.is_some();
    let sinks = Sinks {
        out: args.out,
        dir: args.dir,
        git,
        lines: following,
    };
    let mut store = env.open()?;
    if !following {
        let cp = store.checkpoint(&key, now())?;
        sinks.write(&cp)?;
        return Ok(ExitCode::SUCCESS);
    }
    let period = match args.every_minutes {
        Some(m) if !(m.is_finite() && m > 0.0) => {
            return Err(CommandError::user(format!(
                "--every-minutes {m}: give a number of minutes above 0"
            )));
        }
        Some(m) => Some(Duration::from_secs_f64(m * 60.0)),
        None => args.follow.then_some(Duration::from_secs(600)),
    };
    let every = Every {
        appends: args.every_appends.or(args.follow.then_some(1000)),
        period,
    };
    let stop = stop_on_signal();
    let mut conn = Reconnecting::from_store(&env.store_url, env.access, store);
    let n = follow_loop(&mut conn, &key, &sinks, every, &stop)?;
    eprintln!("convo checkpoint: stopped; {n} checkpoint(s) written");
    Ok(ExitCode::SUCCESS)
}
