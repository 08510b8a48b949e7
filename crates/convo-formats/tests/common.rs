use convo_formats::{Conversation, Read};
use std::path::PathBuf;

/// A test file of `tests/fixtures`, found where cargo says the package is
/// (not where the test was built: cargo reuses a test binary built from
/// the same sources in another checkout).
pub fn fixture(name: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
        .join("tests/fixtures")
        .join(name)
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

pub fn parse_err(format: &str, bytes: &[u8]) -> convo_formats::Error {
    match convo_formats::reader(format)
        .unwrap()
        .read_bytes("input", bytes)
    {
        Ok(r) => panic!(
            "{format}: expected an error, read {} conversations",
            r.conversations.len()
        ),
        Err(e) => e,
    }
}
