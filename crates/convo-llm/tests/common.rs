use convo_formats::{Conversation, Read};
use std::path::PathBuf;

/// A test file: the OTLP exports are this crate's (`tests/fixtures/otel`),
/// the conversation files and transcripts convo-formats'.
pub fn fixture(name: &str) -> PathBuf {
    let root = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"));
    let own = root.join("tests/fixtures").join(name);
    if own.exists() {
        return own;
    }
    root.join("../convo-formats/tests/fixtures").join(name)
}

pub fn read(format: &str, name: &str) -> Read {
    convo_formats::reader(format)
        .unwrap()
        .read_path(&fixture(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn one(format: &str, name: &str) -> Conversation {
    let mut r = read(format, name);
    assert_eq!(r.conversations.len(), 1, "{name}");
    r.conversations.remove(0)
}

pub fn texts(c: &Conversation) -> Vec<String> {
    c.turns().iter().map(|m| m.text.clone()).collect()
}
