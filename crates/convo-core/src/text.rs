//! The two functions every user-supplied string goes through before it
//! leaves convo as a name or as text for a human. String functions only:
//! no I/O.
//!
//! - [`component`]: a string that becomes a file name, a path component, a
//!   git ref component or the local part of an identity (`x@convo.invalid`).
//!   Whatever the input (`../../x`, `.git`, `a/b`, `NUL`, `x.lock`, control
//!   characters, 10 kB of text), the result is one safe component.
//! - [`visible`]: a string printed for a human (a terminal, a log line).
//!   Control characters and escape sequences are shown as `\x1b`, `\r`,
//!   `\u{202e}` … instead of being sent raw, so `ESC[31m` in a payload or a
//!   newline in a title cannot repaint or forge output.
//!
//! Machine output (JSON) needs neither: its encoder escapes what it must.
//! HTML has its own escaper (`convo_formats::html::escape`).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Longest [`component`], in bytes.
pub const COMPONENT_MAX: usize = 72;

/// A file-name-, path-component-, ref- and identity-safe rendering of `raw`.
///
/// The rules, in order:
///
/// - ASCII letters, digits, `-`, `_` and `.` are kept; every other character
///   (`/`, `\`, spaces, control characters, `:`, `@`, `{`, non-ASCII text)
///   becomes `_`;
/// - `..` anywhere becomes `_.` (no traversal, no git `..`);
/// - a leading `.` or `-` gets a `_` in front (no hidden files such as
///   `.git`, no option-like names such as `-rf`);
/// - a string that now obeys every rule ([`is_component`]) and equals the
///   input is returned as it is;
/// - otherwise at most `COMPONENT_MAX - 9` bytes are kept, an empty result
///   becomes `_`, a name reserved by Windows (`CON`, `NUL`, `COM1`,
///   `aux.txt` …, any case) gets a `_` in front, a trailing `.` or `.lock`
///   (git refs) a `_` after, and `-` plus 6 hex digits of the SHA-256 of
///   the original are appended, so two different inputs do not silently
///   land on the same name.
///
/// So the function is idempotent, and the result is never longer than
/// [`COMPONENT_MAX`] bytes.
///
/// ```
/// use convo_core::text::component;
/// assert_eq!(component("thread_abc123"), "thread_abc123");
/// assert!(!component("../../../../x").contains(['/', '\\']));
/// assert!(component(".git").starts_with("_.git-"));
/// ```
pub fn component(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("..") {
        out = out.replace("..", "_.");
    }
    if out.starts_with('.') || out.starts_with('-') {
        out.insert(0, '_');
    }
    if out == raw && is_component(&out) {
        return out;
    }
    // Changed: keep room for one `_` and the 7-byte suffix. All ASCII by
    // now, so any byte index is a char boundary.
    out.truncate(COMPONENT_MAX - 9);
    if out.is_empty() {
        out.push('_');
    }
    if windows_reserved(&out) {
        out.insert(0, '_');
    }
    if out.ends_with('.') || out.ends_with(".lock") {
        out.push('_');
    }
    out.push('-');
    out.push_str(&crate::sha256(raw.as_bytes()).to_hex()[..6]);
    out
}

/// Whether `name` (all ASCII) is a device name Windows reserves, with or
/// without an extension: `CON`, `PRN`, `AUX`, `NUL`, `COM0`–`COM9`,
/// `LPT0`–`LPT9`, in any case.
fn windows_reserved(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name).to_ascii_uppercase();
    match stem.len() {
        3 => matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL"),
        4 => {
            (stem.starts_with("COM") || stem.starts_with("LPT"))
                && stem.as_bytes()[3].is_ascii_digit()
        }
        _ => false,
    }
}

/// Whether `s` is a safe component: `component(s) == s` exactly when this
/// holds.
pub fn is_component(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= COMPONENT_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !s.contains("..")
        && !s.starts_with(['.', '-'])
        && !s.ends_with('.')
        && !s.ends_with(".lock")
        && !windows_reserved(s)
}

/// What [`visible`] does with line feeds and tabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Newlines {
    /// Keep `\n` and `\t` as they are: multi-line text such as a payload
    /// shown by `convo show`.
    Keep,
    /// Show `\n` and `\t` as escapes too: one-line fields such as a title in
    /// a listing or a name in an error message.
    Escape,
}

/// `s` made safe to print for a human: every control character (C0, DEL,
/// C1, which covers `ESC` and the 8-bit `CSI`), every bidirectional
/// override or isolate (`U+202A`–`U+202E`, `U+2066`–`U+2069`) and the
/// Unicode line and paragraph separators are shown as an escape
/// (`\r`, `\x1b`, `\u{202e}`), so no byte that moves the cursor, changes
/// colours, rewrites the window title or reorders text reaches a terminal.
/// `\n` and `\t` are kept or escaped as `newlines` says.
///
/// Backslashes are left alone (this is for reading, not for parsing back):
/// a path such as `C:\x1b` prints as it is.
///
/// Borrows when there is nothing to escape, which is the common case.
///
/// ```
/// use convo_core::text::{visible, Newlines};
/// assert_eq!(visible("\x1b[31mred", Newlines::Keep), "\\x1b[31mred");
/// assert_eq!(visible("a\nb", Newlines::Keep), "a\nb");
/// assert_eq!(visible("a\nb", Newlines::Escape), "a\\nb");
/// ```
pub fn visible(s: &str, newlines: Newlines) -> Cow<'_, str> {
    let hidden = |c: char| needs_escape(c, newlines);
    let Some(first) = s.find(hidden) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !hidden(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char, newlines: Newlines) -> bool {
    match c {
        '\n' | '\t' => newlines == Newlines::Escape,
        c if c.is_control() => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn regression_clog_thread_id_traversal_is_one_component() {
        let c = component("../../../../x");
        assert!(is_component(&c), "{c}");
        assert!(!c.contains('/') && !c.contains(".."), "{c}");
    }

    #[test]
    fn regression_dot_git_is_not_a_hidden_folder() {
        let c = component(".git");
        assert!(!c.starts_with('.'), "{c}");
        assert_ne!(c, ".git");
    }

    #[test]
    fn hostile_names_become_safe_and_distinct() {
        let long = "x".repeat(300);
        let inputs = [
            "a/b",
            "a\\b",
            "..",
            ".",
            "../../etc",
            " x",
            "-rf",
            ".git",
            "ünï",
            "a\nb",
            "",
            "a.lock",
            "x.",
            "NUL",
            "con.txt",
            "Com1",
            "a@{1}",
            long.as_str(),
        ];
        let mut seen = std::collections::HashSet::new();
        for raw in inputs {
            let c = component(raw);
            assert!(is_component(&c), "{raw:?} -> {c}");
            assert!(seen.insert(c), "collision for {raw:?}");
        }
        assert_eq!(component("researcher"), "researcher");
        assert_eq!(
            component("conversation-2026-03-26T01-32-20-418Z-thread_abc"),
            "conversation-2026-03-26T01-32-20-418Z-thread_abc"
        );
        assert_ne!(component("a/b"), component("a_b"));
        assert_eq!(component("console"), "console");
    }

    #[test]
    fn terminal_escapes_and_bidi_overrides_are_shown_not_sent() {
        assert_eq!(
            visible("\x1b]0;pwned\x07title\r", Newlines::Escape),
            "\\x1b]0;pwned\\x07title\\r"
        );
        assert_eq!(visible("a\u{9b}31m", Newlines::Keep), "a\\u{9b}31m");
        assert_eq!(visible("abc\u{202e}fed", Newlines::Keep), "abc\\u{202e}fed");
        assert_eq!(visible("tab\there", Newlines::Keep), "tab\there");
        assert_eq!(visible("del\x7f", Newlines::Keep), "del\\x7f");
        assert!(matches!(
            visible("plain ü", Newlines::Escape),
            Cow::Borrowed(_)
        ));
    }

    proptest! {
        #[test]
        fn component_is_always_safe_and_idempotent(raw in any::<String>()) {
            let c = component(&raw);
            prop_assert!(is_component(&c), "{raw:?} -> {c:?}");
            prop_assert_eq!(component(&c), c.clone());
            prop_assert_eq!(c == raw, is_component(&raw));
        }

        #[test]
        fn component_of_path_like_input_stays_one_component(
            parts in proptest::collection::vec("(\\.{1,3}|[a-z]{0,3}|\\.git|/|\\\\)", 0..8)
        ) {
            let raw = parts.concat();
            let c = component(&raw);
            prop_assert!(is_component(&c));
            prop_assert!(std::path::Path::new(&c).components().count() == 1);
        }

        #[test]
        fn visible_output_has_no_control_characters(s in any::<String>()) {
            let one = visible(&s, Newlines::Escape);
            prop_assert!(!one.chars().any(|c| needs_escape(c, Newlines::Escape)));
            let multi = visible(&s, Newlines::Keep);
            prop_assert!(!multi.chars().any(|c| needs_escape(c, Newlines::Keep)));
            prop_assert_eq!(multi.lines().count() <= s.split('\n').count(), true);
        }

        #[test]
        fn visible_changes_nothing_printable(s in "[ -~ü€中]*") {
            prop_assert_eq!(visible(&s, Newlines::Escape), s.as_str());
        }
    }
}
