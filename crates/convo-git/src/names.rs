//! Names that are safe in a git tree, a ref or an identity, whatever a
//! sender, agent or title contains.
//!
//! A component keeps ASCII letters, digits, `-`, `_` and `.`; anything else
//! (`/`, spaces, control characters, non-ASCII text, `..` sequences) becomes
//! `_`. When that changed the text, 6 hex digits of the SHA-256 of the
//! original are appended, so two different names never map to the same
//! component silently. A leading `.` or `-` is prefixed with `_`.

use convo_core::sha256;

/// A file-name- and ref-safe rendering of `raw`, at most ~70 bytes.
pub fn component(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("..") {
        out = out.replace("..", "_.");
    }
    let mut changed = out != raw;
    if out.starts_with('.') || out.starts_with('-') {
        out.insert(0, '_');
        changed = true;
    }
    if out.len() > 64 {
        out.truncate(64);
        changed = true;
    }
    if out.is_empty() {
        out.push('_');
        changed = true;
    }
    if out.ends_with(".lock") || out.ends_with('.') {
        out.push('_');
        changed = true;
    }
    if changed {
        out.push('-');
        out.push_str(&sha256(raw.as_bytes()).to_hex()[..6]);
    }
    out
}

/// One line of text for a commit subject: control characters become spaces.
pub fn one_line(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A name usable in a git identity (no `<`, `>`, newline; not empty).
pub fn ident_name(raw: &str) -> String {
    let s: String = raw
        .chars()
        .map(|c| {
            if c.is_control() || c == '<' || c == '>' {
                ' '
            } else {
                c
            }
        })
        .collect();
    let t = s.trim_matches(|c: char| c.is_whitespace() || ".,:;\"'".contains(c));
    if t.is_empty() {
        "unknown".to_owned()
    } else {
        t.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_become_safe_and_distinct() {
        let long = "x".repeat(300);
        let inputs = [
            "a/b",
            "..",
            "../../etc",
            " x",
            "-rf",
            ".git",
            "ünï",
            "a\nb",
            "",
            "a.lock",
            long.as_str(),
        ];
        let mut seen = std::collections::HashSet::new();
        for raw in inputs {
            let c = component(raw);
            assert!(
                !c.contains('/') && !c.contains("..") && !c.starts_with('.') && !c.starts_with('-'),
                "{c}"
            );
            assert!(c.bytes().all(|b| b.is_ascii_graphic()), "{c}");
            assert!(c.len() <= 71, "{c}");
            assert!(seen.insert(c), "collision for {raw:?}");
        }
        assert_eq!(component("researcher"), "researcher");
        assert_ne!(component("a/b"), component("a_b"));
        assert_eq!(ident_name("<evil>\n"), "evil");
        assert_eq!(ident_name("  "), "unknown");
    }
}
