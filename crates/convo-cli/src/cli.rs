//! Arguments, parsed as given. Validation happens in the commands.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Record, fork, promote and verify AI-agent conversations in a
/// content-addressed Merkle DAG.
///
/// Exit status: 0 success, 1 problems found (verify, check, replay) or no
/// match (search), 2 usage or invalid input, 3 not found, 4 refused
/// (sealed, conflict), 5 store unavailable or corrupt, 141 stdout closed.
///
/// Examples:
///   convo demo                            # a session to look at
///   convo session list
///   convo log Paris --graph
///   convo turn Paris main@-1
///   convo search 'capital "of france"'
#[derive(Parser, Debug)]
#[command(
    name = "convo",
    version,
    propagate_version = true,
    verbatim_doc_comment
)]
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

// A command whose arguments are a struct takes its help from that struct's
// doc comment: a doc comment on the variant would replace its long help
// (examples included), so those variants have none.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create the store (commands that write also create it; reads never do)
    ///
    /// Creates the home directory and the store (--store or CONVO_STORE
    /// choose another); an existing store is left as it is.
    ///
    /// Examples:
    ///   convo init
    ///   convo --home /tmp/scratch init
    ///   convo --store postgres://me@localhost/convo init
    ///   convo init --json
    #[command(verbatim_doc_comment)]
    Init(JsonFlag),
    /// Create, list, inspect, fork and promote sessions
    ///
    /// Examples:
    ///   convo session new --agent researcher --title Paris
    ///   convo session list
    ///   convo session get Paris --full
    ///   convo session fork Paris --from main@2 --branch retry
    #[command(verbatim_doc_comment)]
    #[command(subcommand)]
    Session(SessionCmd),
    /// List a session's timelines
    ///
    /// Examples:
    ///   convo branch list Paris
    ///   convo branch list Paris --graph
    #[command(verbatim_doc_comment)]
    #[command(subcommand)]
    Branch(BranchCmd),
    Record(crate::commands::record::RecordArgs),
    Say(crate::commands::say::SayArgs),
    Log(crate::commands::log::LogArgs),
    Show(crate::commands::show::ShowArgs),
    Turn(crate::commands::turn::TurnArgs),
    Diff(crate::commands::diff::DiffArgs),
    Search(crate::commands::search::SearchArgs),
    /// Read and write the agent's versioned state
    ///
    /// Examples:
    ///   convo state put Paris topic Paris
    ///   convo state get Paris topic --at main@1
    ///   convo state list Paris --json
    #[command(verbatim_doc_comment)]
    #[command(subcommand)]
    State(StateCmd),
    Verify(crate::commands::verify::VerifyArgs),
    Checkpoint(crate::commands::checkpoint::CheckpointArgs),
    Redact(crate::commands::redact::RedactArgs),
    Ingest(crate::commands::ingest::IngestArgs),
    /// Fill the store with a demo session: turns, a service call, a fork and a promote
    ///
    /// Writes one new session to the store and suggests commands to look at it.
    ///
    /// Examples:
    ///   convo demo
    ///   convo demo --json
    #[command(verbatim_doc_comment)]
    Demo(JsonFlag),
    Import(crate::commands::import::ImportArgs),
    Export(crate::commands::export::ExportArgs),
    Share(crate::commands::share::ShareArgs),
    Check(crate::commands::check::CheckArgs),
    /// Project the store into a git repository, or check that projection
    ///
    /// Examples:
    ///   convo git sync
    ///   git --git-dir ~/.convo/conversations log --stat
    ///   convo git verify
    #[command(verbatim_doc_comment)]
    #[command(subcommand)]
    Git(crate::commands::git::GitCmd),
    Watch(crate::commands::watch::WatchArgs),
    Migrate(crate::commands::migrate::MigrateArgs),
    Serve(crate::commands::serve::ServeArgs),
    Run(crate::commands::run::RunArgs),
    Chat(crate::commands::chat::ChatArgs),
    Replay(crate::commands::replay::ReplayArgs),
    Proxy(crate::commands::proxy::ProxyArgs),
    Mcp(crate::commands::mcp::McpArgs),
    Test(crate::commands::test::TestArgs),
    Otel(crate::commands::otel::OtelArgs),
    Completions(crate::commands::completions::CompletionsArgs),
    Man(crate::commands::completions::ManArgs),
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
    ///
    /// Examples:
    ///   convo session new --agent researcher
    ///   convo session new --agent researcher --title "Paris trip" --json
    #[command(verbatim_doc_comment)]
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
    List(crate::commands::session::ListArgs),
    Get(crate::commands::session::GetArgs),
    /// Set or clear a session's title
    ///
    /// The change is journaled (verify checks it). A title finds the
    /// session wherever a SESSION is taken.
    ///
    /// Examples:
    ///   convo session retitle ses-3fa9 "Paris trip"
    ///   convo session retitle "Paris trip" --clear
    #[command(verbatim_doc_comment)]
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
    ///
    /// The new timeline shares the history up to that node and gets the
    /// working state the node had.
    ///
    /// Examples:
    ///   convo session fork Paris --from main@2 --branch retry
    ///   convo session fork Paris --from 3fa9c1 --branch alt --json
    #[command(verbatim_doc_comment)]
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
        /// Wait for a turn `convo run`/`chat` has open on the timeline to end (without it: refused, exit 4)
        #[arg(long)]
        wait: bool,
    },
    /// Make a timeline canonical: seal `main` as broken-YYYY-MM-DD and rename the branch to main
    ///
    /// Examples:
    ///   convo session promote Paris --branch retry
    #[command(verbatim_doc_comment)]
    Promote {
        /// Session id, unique id prefix or title
        session: String,
        /// The timeline to promote
        #[arg(long)]
        branch: String,
        /// Print one JSON document
        #[arg(long)]
        json: bool,
        /// Wait for a turn `convo run`/`chat` has open on the timeline to end (without it: refused, exit 4)
        #[arg(long)]
        wait: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum BranchCmd {
    /// List a session's timelines with their heads
    ///
    /// Examples:
    ///   convo branch list Paris
    ///   convo branch list Paris --graph
    ///   convo branch list Paris --json
    #[command(verbatim_doc_comment)]
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
    ///
    /// Examples:
    ///   convo state put Paris topic Paris
    ///   convo state put Paris step 3 --branch retry
    ///   convo state put Paris notes --value-file notes.md
    ///   head -c 16 /dev/urandom | convo state put Paris nonce --value-file -
    #[command(verbatim_doc_comment)]
    Put {
        /// Session id, unique id prefix or title
        session: String,
        /// The key
        key: String,
        /// The value (or give --value-file)
        #[arg(required_unless_present = "value_file", conflicts_with = "value_file")]
        value: Option<String>,
        /// Read the value's bytes from this file (`-`: stdin); any bytes
        #[arg(long, value_name = "FILE")]
        value_file: Option<std::path::PathBuf>,
        /// Timeline
        #[arg(long, default_value = "main")]
        branch: String,
        /// Print the result as one JSON document
        #[arg(long)]
        json: bool,
        /// Wait for a turn `convo run`/`chat` has open on the timeline to end (without it: refused, exit 4)
        #[arg(long)]
        wait: bool,
    },
    /// Print a key's value
    ///
    /// Examples:
    ///   convo state get Paris topic
    ///   convo state get Paris topic --at main@1
    #[command(verbatim_doc_comment)]
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
        /// Print the result as one JSON document
        #[arg(long)]
        json: bool,
    },
    /// List every key and value
    ///
    /// Examples:
    ///   convo state list Paris
    ///   convo state list Paris --at retry~2 --json
    #[command(verbatim_doc_comment)]
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
    ///
    /// Examples:
    ///   convo state delete Paris topic
    #[command(verbatim_doc_comment)]
    Delete {
        /// Session id, unique id prefix or title
        session: String,
        /// The key
        key: String,
        /// Timeline
        #[arg(long, default_value = "main")]
        branch: String,
        /// Print the result as one JSON document
        #[arg(long)]
        json: bool,
        /// Wait for a turn `convo run`/`chat` has open on the timeline to end (without it: refused, exit 4)
        #[arg(long)]
        wait: bool,
    },
}
