//! Names that are safe in a git tree, a ref or an identity, whatever a
//! sender, agent or title contains.
//!
//! Components (tree entries, ref components, the local part of an
//! identity) go through the one function every user string that becomes a
//! name goes through, [`convo_core::text::component`]; this module only
//! adds what git's own formats need on top: a one-line subject and an
//! identity name without `<`, `>` or control characters.

pub use convo_core::text::component;

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
