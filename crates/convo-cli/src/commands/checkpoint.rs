use super::{CmdResult, CommandError, Env, now};
use clap::Args;
use convo_store::Checkpoint;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Write a signed checkpoint of the store's state
///
/// A checkpoint states the follow cursor, the number of nodes, a hash chain
/// over every node, the fact journal's head and every branch head, signed
/// with an Ed25519 key (by default `$CONVO_HOME/checkpoint.key`, made on
/// first use). Keep checkpoints where the store's writer cannot reach them;
/// `convo verify --checkpoint FILE` then proves the store still extends
/// them and names what was rolled back, truncated or rewritten.
///
/// Examples:
///   convo checkpoint -o /mnt/offsite/convo-$(date +%F).checkpoint
///   convo verify --checkpoint /mnt/offsite/convo-2026-11-23.checkpoint
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CheckpointArgs {
    /// The signing key file (64 hex digits: the Ed25519 seed); made if missing
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Write the checkpoint to this file instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
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
    let mut store = env.open()?;
    let cp = store.checkpoint(&key, now())?;
    let text = serde_json::to_string_pretty(&cp)
        .map_err(|e| CommandError::user(format!("cannot write the checkpoint: {e}")))?;
    match args.out {
        None => println!("{text}"),
        Some(p) => {
            std::fs::write(&p, format!("{text}\n"))
                .map_err(|e| CommandError::user(format!("cannot write {}: {e}", p.display())))?;
            eprintln!(
                "checkpoint of {} nodes (cursor {}) written to {}",
                cp.nodes,
                cp.cursor,
                p.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
