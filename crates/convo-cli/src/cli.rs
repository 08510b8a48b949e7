//! Arguments, parsed as given. Validation happens in the commands.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Record, fork, promote and verify AI-agent conversations in a
/// content-addressed Merkle DAG.
#[derive(Parser, Debug)]
#[command(name = "convo", version, propagate_version = true)]
pub struct Cli {
    /// Directory holding convo's data [env: CONVO_HOME] [default: ~/.convo]
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub home: Option<PathBuf>,

    /// Store URL: sqlite:///path/to/convo.db or postgres://user@host/db
    /// [env: CONVO_STORE] [default: HOME/convo.db]. A --home flag beats CONVO_STORE
    #[arg(
        long,
        global = true,
        value_name = "URL",
        help_heading = "Global options"
    )]
    pub store: Option<String>,

    /// When to color the output (NO_COLOR set means never, unless always)
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "always", "never"], help_heading = "Global options")]
    pub color: String,

    /// Print long output straight to the terminal instead of through $PAGER (less -FRX)
    #[arg(long, global = true, help_heading = "Global options")]
    pub no_pager: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create the store (commands that write also create it; reads never do)
    Init,
    /// Create, list, inspect, fork and promote sessions
    #[command(subcommand)]
    Session(SessionCmd),
    /// List a session's timelines
    #[command(subcommand)]
    Branch(BranchCmd),
    /// Append one message to a timeline and print its hash
    Record(crate::commands::record::RecordArgs),
    /// Record a user input and the agent's answer in one go
    Say(crate::commands::say::SayArgs),
    /// Show a timeline, newest message first
    Log(crate::commands::log::LogArgs),
    /// Show one node
    Show(crate::commands::show::ShowArgs),
    /// Print a whole turn: input, service calls with their diagnostics, answer
    Turn(crate::commands::turn::TurnArgs),
    /// Compare two timelines: the fork point, then what each side added, turn by turn
    Diff(crate::commands::diff::DiffArgs),
    /// Read and write the agent's versioned state
    #[command(subcommand)]
    State(StateCmd),
    /// Recompute every hash and check every link and row; exit 1 if anything is wrong
    Verify(crate::commands::verify::VerifyArgs),
    /// Write a signed checkpoint of the store's state (for `verify --checkpoint`)
    Checkpoint(crate::commands::checkpoint::CheckpointArgs),
    /// Erase a payload's bytes, keeping every hash verifiable; record who, when and why
    Redact(crate::commands::redact::RedactArgs),
    /// Append messages read as JSON lines from stdin, one transaction each
    Ingest(crate::commands::ingest::IngestArgs),
    /// Fill the store with a demo session: turns, a service call, a fork and a promote
    Demo(JsonFlag),
    /// Import conversation files (CONVO, clog, session JSON, ChatGPT, Claude, ShareGPT, OpenAI JSONL, llm) in one transaction
    Import(crate::commands::import::ImportArgs),
    /// Write a session's timeline as a conversation file (CONVO, clog, session JSON, OpenAI JSONL, Markdown, HTML)
    Export(crate::commands::export::ExportArgs),
    /// Validate CONVO files without importing them; exit 1 if any is invalid
    Check(crate::commands::check::CheckArgs),
    /// Project the store into a git repository, or check that projection
    #[command(subcommand)]
    Git(crate::commands::git::GitCmd),
    /// Print every new node as it is appended, by any process
    Watch(crate::commands::watch::WatchArgs),
    /// Copy a whole store to another backend
    Migrate(crate::commands::migrate::MigrateArgs),
    /// Serve the HTTP API, its OpenAPI document, the live event stream and the web view
    Serve(crate::commands::serve::ServeArgs),
    /// Run an agent on a timeline, one recorded turn per input (docs/AGENTS.md)
    Run(crate::commands::run::RunArgs),
    /// Talk to an agent interactively, every turn recorded; fork, switch and promote as you go
    Chat(crate::commands::chat::ChatArgs),
    /// Re-run a recorded timeline against an agent; exit 1 at the first divergence
    Replay(crate::commands::replay::ReplayArgs),
    /// Record every LLM call a program makes: an OpenAI/Anthropic-compatible proxy to an upstream
    Proxy(crate::commands::proxy::ProxyArgs),
}

#[derive(Args, Debug)]
pub struct JsonFlag {
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum SessionCmd {
    /// Start a session and print its id
    New {
        /// The agent the session talks to
        #[arg(long)]
        agent: String,
        /// A title to find the session by
        #[arg(long)]
        title: Option<String>,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
    },
    /// List sessions, oldest first
    List(crate::commands::session::ListArgs),
    /// Show a timeline's turns from the first message to the head
    Get(crate::commands::session::GetArgs),
    /// Set or clear a session's title
    #[command(alias = "edit")]
    Retitle {
        /// Session id, unique id prefix or title
        session: String,
        /// The new title
        #[arg(required_unless_present = "clear")]
        title: Option<String>,
        /// Remove the title instead
        #[arg(long, conflicts_with = "title")]
        clear: bool,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
    },
    /// Create a timeline from any past node
    Fork {
        /// Session id, unique id prefix or title
        session: String,
        /// The node to fork from: HASH (4+ hex digits), BRANCH, BRANCH~N or BRANCH@TURN
        #[arg(long, value_name = "REF")]
        from: String,
        /// Name of the new timeline
        #[arg(long)]
        branch: String,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
    },
    /// Make a timeline canonical: seal `main` as broken-YYYY-MM-DD and rename the branch to main
    Promote {
        /// Session id, unique id prefix or title
        session: String,
        /// The timeline to promote
        #[arg(long)]
        branch: String,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum BranchCmd {
    /// List a session's timelines with their heads
    List {
        /// Session id, unique id prefix or title
        session: String,
        /// Draw the timelines as a tree with their fork points
        #[arg(long)]
        graph: bool,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum StateCmd {
    /// Set a key on a timeline's working state and print the new root
    Put {
        /// Session id, unique id prefix or title
        session: String,
        /// The key
        key: String,
        /// The value
        value: String,
        /// Timeline
        #[arg(long, default_value = "main")]
        branch: String,
    },
    /// Print a key's value
    Get {
        /// Session id, unique id prefix or title
        session: String,
        /// The key
        key: String,
        /// Timeline whose working state to read
        #[arg(long, default_value = "main")]
        branch: String,
        /// Read the state as of this node instead (HASH, BRANCH, BRANCH~N, BRANCH@TURN)
        #[arg(long)]
        at: Option<String>,
    },
    /// List every key and value
    List {
        /// Session id, unique id prefix or title
        session: String,
        /// Timeline whose working state to read
        #[arg(long, default_value = "main")]
        branch: String,
        /// Read the state as of this node instead (HASH, BRANCH, BRANCH~N, BRANCH@TURN)
        #[arg(long)]
        at: Option<String>,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
    },
    /// Remove a key from a timeline's working state and print the new root
    Delete {
        /// Session id, unique id prefix or title
        session: String,
        /// The key
        key: String,
        /// Timeline
        #[arg(long, default_value = "main")]
        branch: String,
    },
}
