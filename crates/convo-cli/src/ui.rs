//! The terminal: color, the pager, and a standard output that a closed
//! pipe ends quietly.
//!
//! * Color: `--color auto` (the default) colors only a terminal, and not
//!   when `NO_COLOR` is set to anything non-empty or `TERM=dumb`;
//!   `--color always` / `never` decide alone.
//! * Pager: listings that may be long ([`Out::paged`]) go through `$PAGER`
//!   (run by `sh -c`), or `less -FRX` when it is unset, only when standard
//!   output is a terminal and `--no-pager` was not given. `LESS=FRX` is set
//!   for the pager when `LESS` is unset, as git does, so short output is
//!   printed as is. An empty `PAGER` or `PAGER=cat` means no pager.
//! * A closed standard output (`convo log S | head -1`) ends the command
//!   with no message, with status 141 (128 + SIGPIPE: what a shell reports
//!   for a program killed by a closed pipe, like git or coreutils); quitting
//!   the pager before the end is not an error (status 0).

use std::io::{self, IsTerminal, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The exit status of a command whose standard output was closed.
pub const CLOSED_PIPE: u8 = 141;

#[derive(Debug, Clone, Copy)]
struct Settings {
    color: bool,
    pager: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();
/// Set when output went to a pager: a closed pipe then means "the user quit it".
static PAGED: AtomicBool = AtomicBool::new(false);

/// Reads `--color`, `--no-pager` and the environment once, at start.
pub fn init(color: &str, no_pager: bool) {
    let tty = io::stdout().is_terminal();
    let env_allows = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let color = match color {
        "always" => true,
        "never" => false,
        _ => tty && env_allows,
    };
    let _ = SETTINGS.set(Settings {
        color,
        pager: tty && !no_pager,
    });
}

fn settings() -> Settings {
    *SETTINGS.get().unwrap_or(&Settings {
        color: false,
        pager: false,
    })
}

/// Whether output is colored.
pub fn color() -> bool {
    settings().color
}

/// The exit status for a closed standard output.
pub fn closed_status() -> u8 {
    if PAGED.load(Ordering::Relaxed) {
        0
    } else {
        CLOSED_PIPE
    }
}

/// Whether an I/O error is a closed pipe.
pub fn is_closed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// A style: an SGR sequence.
#[derive(Debug, Clone, Copy)]
pub enum Style {
    /// Node hashes, like git's commit ids.
    Hash,
    /// Times and other secondary text.
    Dim,
    /// Header rows and titles.
    Bold,
    /// Added lines, open timelines.
    Green,
    /// Removed lines, sealed timelines, problems.
    Red,
    /// Turn numbers, branch names.
    Cyan,
    /// Kinds: invoke and complete stand out from requests and responses.
    Magenta,
}

impl Style {
    fn sgr(self) -> &'static str {
        match self {
            Style::Hash => "33",
            Style::Dim => "2",
            Style::Bold => "1",
            Style::Green => "32",
            Style::Red => "31",
            Style::Cyan => "36",
            Style::Magenta => "35",
        }
    }
}

/// `text` in `style` when color is on.
pub fn paint(style: Style, text: &str) -> String {
    if color() && !text.is_empty() {
        format!("\x1b[{}m{text}\x1b[0m", style.sgr())
    } else {
        text.to_owned()
    }
}

/// Where a command prints: standard output, or a pager.
#[derive(Debug)]
pub struct Out {
    sink: Sink,
}

#[derive(Debug)]
enum Sink {
    Stdout(io::StdoutLock<'static>),
    Pager(Child, Option<ChildStdin>),
}

impl Out {
    /// Standard output, never paged (for output meant for other programs).
    pub fn stdout() -> Out {
        Out {
            sink: Sink::Stdout(io::stdout().lock()),
        }
    }

    /// The pager when standard output is a terminal, else standard output.
    pub fn paged() -> Out {
        if settings().pager
            && let Some((child, stdin)) = spawn_pager()
        {
            PAGED.store(true, Ordering::Relaxed);
            return Out {
                sink: Sink::Pager(child, Some(stdin)),
            };
        }
        Out::stdout()
    }

    /// Flushes, and waits for the pager to be quit.
    pub fn finish(mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(s) => s.flush(),
            Sink::Pager(child, stdin) => {
                let flushed = stdin.as_mut().map_or(Ok(()), |s| s.flush());
                drop(stdin.take());
                child.wait()?;
                match flushed {
                    Err(e) if is_closed(&e) => Ok(()),
                    other => other,
                }
            }
        }
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        if let Sink::Pager(child, stdin) = &mut self.sink {
            drop(stdin.take());
            let _ = child.wait();
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Stdout(s) => s.write(buf),
            Sink::Pager(_, Some(s)) => s.write(buf),
            Sink::Pager(_, None) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(s) => s.write_all(buf),
            Sink::Pager(_, Some(s)) => s.write_all(buf),
            Sink::Pager(_, None) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(s) => s.flush(),
            Sink::Pager(_, Some(s)) => s.flush(),
            Sink::Pager(_, None) => Ok(()),
        }
    }
}

fn spawn_pager() -> Option<(Child, ChildStdin)> {
    let pager = std::env::var("PAGER").ok();
    let mut cmd = match pager.as_deref().map(str::trim) {
        Some("") | Some("cat") => return None,
        Some(p) => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(p);
            c
        }
        None => {
            let mut c = Command::new("less");
            c.arg("-FRX");
            c
        }
    };
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    let mut child = cmd.stdin(Stdio::piped()).spawn().ok()?;
    let stdin = child.stdin.take()?;
    Some((child, stdin))
}

/// Pads `cells` to the widths of their columns (counted in characters) and
/// joins them with two spaces; the last column is not padded.
pub fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; n];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(visible_width(c));
        }
    }
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(c);
                if i + 1 < r.len() {
                    line.extend(std::iter::repeat_n(' ', widths[i] - visible_width(c)));
                }
            }
            line
        })
        .collect()
}

/// The width of `s` on a terminal, not counting color sequences.
pub fn visible_width(s: &str) -> usize {
    let mut w = 0;
    let mut in_esc = false;
    for ch in s.chars() {
        if in_esc {
            if ch == 'm' {
                in_esc = false;
            }
        } else if ch == '\x1b' {
            in_esc = true;
        } else {
            w += 1;
        }
    }
    w
}

/// A progress bar on standard error for work that may take a while: drawn
/// only on a terminal, and only once the work has taken a second (quick
/// commands stay silent). `unit` names what is counted; `total` 0 means
/// unknown (a counter without a bar).
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    start: std::time::Instant,
    shown: bool,
}

impl Progress {
    pub fn new(total: u64, unit: &str) -> Progress {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let template = if total > 0 {
                format!("{{msg}} {{bar:40}} {{pos}}/{{len}} {unit}, ETA {{eta}}")
            } else {
                format!("{{msg}} {{pos}} {unit}")
            };
            let bar = indicatif::ProgressBar::with_draw_target(
                (total > 0).then_some(total),
                indicatif::ProgressDrawTarget::hidden(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(&template)
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Progress {
            bar,
            start: std::time::Instant::now(),
            shown: false,
        }
    }

    /// Whether a bar may be drawn (standard error is a terminal): callers
    /// skip composing messages otherwise.
    pub fn on_terminal(&self) -> bool {
        self.bar.is_some()
    }

    /// Moves the bar to `pos`, with `msg` (the phase) before it.
    pub fn set(&mut self, msg: &str, pos: u64) {
        if let Some(bar) = &self.bar {
            if !self.shown && self.start.elapsed() >= std::time::Duration::from_secs(1) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                self.shown = true;
            }
            if bar.message() != msg {
                bar.set_message(msg.to_owned());
            }
            bar.set_position(pos);
        }
    }

    /// Removes the bar.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
