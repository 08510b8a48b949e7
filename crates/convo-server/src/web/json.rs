//! A JSON viewer that never lies: a small lossless tokenizer over the
//! stored text and a renderer to escaped HTML (maud). Numbers, strings and
//! keys are shown as the bytes spell them (`12345678901234567890123`
//! stays that, `"\u00e9"` stays escaped), key order is kept and a key that
//! appears twice in an object is shown twice and marked. Objects and
//! arrays are `<details>` (collapsed by default past [`OPEN_MAX`] bytes),
//! long strings are folded, and each tree has a copy button (the script
//! copies the text of the tree without the viewer's own labels).
//!
//! Nothing here produces script: every token is text in a `<span>`.

use maud::{Markup, html};

/// A container whose text is longer than this starts collapsed.
pub(super) const OPEN_MAX: usize = 8 * 1024;
/// A string longer than this (in bytes, quotes included) is folded.
const FOLD_STR: usize = 400;
/// How much of a folded string the closed fold shows.
const FOLD_HEAD: usize = 160;
/// Deeper nesting is shown as plain text (no stack to overflow).
const MAX_DEPTH: usize = 200;

/// One value, as slices of the source text.
#[derive(Debug, PartialEq)]
pub(super) enum J<'a> {
    /// An object: its text and its members in source order (raw keys,
    /// quotes included).
    Obj(&'a str, Vec<(&'a str, J<'a>)>),
    /// An array: its text and its items.
    Arr(&'a str, Vec<J<'a>>),
    /// A string, quotes and escapes included.
    Str(&'a str),
    /// A number as written.
    Num(&'a str),
    /// `true`, `false` or `null`.
    Lit(&'a str),
}

struct P<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> P<'a> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<J<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        let start = self.i;
        match *self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Some(J::Obj(&self.s[start..self.i], items));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.ws();
                    (self.b.get(self.i)? == &b':').then_some(())?;
                    self.i += 1;
                    let v = self.value(depth + 1)?;
                    items.push((k, v));
                    self.ws();
                    match self.b.get(self.i)? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(J::Obj(&self.s[start..self.i], items));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Some(J::Arr(&self.s[start..self.i], items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.b.get(self.i)? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(J::Arr(&self.s[start..self.i], items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => self.string().map(J::Str),
            b't' | b'f' | b'n' => {
                for lit in ["true", "false", "null"] {
                    if self.s[self.i..].starts_with(lit) {
                        self.i += lit.len();
                        return Some(J::Lit(&self.s[start..self.i]));
                    }
                }
                None
            }
            b'-' | b'0'..=b'9' => self.number().map(J::Num),
            _ => None,
        }
    }

    fn string(&mut self) -> Option<&'a str> {
        let start = self.i;
        (self.b.get(self.i)? == &b'"').then_some(())?;
        self.i += 1;
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(&self.s[start..self.i]);
                }
                b'\\' => match *self.b.get(self.i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                    b'u' => {
                        let hex = self.b.get(self.i + 2..self.i + 6)?;
                        hex.iter().all(u8::is_ascii_hexdigit).then_some(())?;
                        self.i += 6;
                    }
                    _ => return None,
                },
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }

    fn number(&mut self) -> Option<&'a str> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let from = p.i;
            while p.b.get(p.i).is_some_and(u8::is_ascii_digit) {
                p.i += 1;
            }
            p.i > from
        };
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        if self.b.get(self.i) == Some(&b'0') {
            self.i += 1;
        } else if !digits(self) {
            return None;
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            digits(self).then_some(())?;
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            digits(self).then_some(())?;
        }
        Some(&self.s[start..self.i])
    }
}

/// The value `text` holds (one JSON document, surrounding whitespace
/// allowed), or `None` when it is not JSON.
pub(super) fn parse(text: &str) -> Option<J<'_>> {
    let mut p = P {
        s: text,
        b: text.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.ws();
    (p.i == p.b.len()).then_some(v)
}

/// `text` as a tree when it is a JSON object or array; `None` otherwise
/// (the caller shows it as text).
pub(super) fn view(text: &str) -> Option<Markup> {
    let v = parse(text)?;
    if !matches!(v, J::Obj(..) | J::Arr(..)) {
        return None;
    }
    Some(tree(&v))
}

/// A parsed value as a tree, with a copy button.
pub(super) fn tree(v: &J<'_>) -> Markup {
    html! {
        div.jv {
            button.copy.jv-ui type="button" title="copy this JSON" { "copy" }
            pre.jv-body { (node(v, true)) }
        }
    }
}

fn size(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MB", n as f64 / 1024.0 / 1024.0)
    }
}

fn node(v: &J<'_>, last: bool) -> Markup {
    let comma = if last { "" } else { "," };
    match v {
        J::Obj(raw, items) if items.is_empty() => {
            let _ = raw;
            html! { span.jp { "{}" } (comma) }
        }
        J::Arr(_, items) if items.is_empty() => html! { span.jp { "[]" } (comma) },
        J::Obj(raw, items) => {
            let mut seen = std::collections::HashSet::new();
            let n = items.len();
            html! {
                details.jv-c open[raw.len() <= OPEN_MAX] {
                    summary { span.jp { "{" } span.jv-ui.jv-n { (n) @if n == 1 { " key" } @else { " keys" } " · " (size(raw.len())) } }
                    div.jv-in {
                        @for (i, (k, val)) in items.iter().enumerate() {
                            @let dup = !seen.insert(*k);
                            div class=(if dup { "jv-l dup" } else { "jv-l" }) {
                                span.jk { (k) } span.jp { ": " }
                                (node(val, i + 1 == n))
                                @if dup { " " span.jv-ui.badge title="this key appears earlier in the same object: JSON parsers disagree on which one wins" { "duplicate key" } }
                            }
                        }
                    }
                }
                span.jp { "}" } (comma)
            }
        }
        J::Arr(raw, items) => {
            let n = items.len();
            html! {
                details.jv-c open[raw.len() <= OPEN_MAX] {
                    summary { span.jp { "[" } span.jv-ui.jv-n { (n) @if n == 1 { " item" } @else { " items" } " · " (size(raw.len())) } }
                    div.jv-in {
                        @for (i, val) in items.iter().enumerate() {
                            div.jv-l { (node(val, i + 1 == n)) }
                        }
                    }
                }
                span.jp { "]" } (comma)
            }
        }
        J::Str(s) if s.len() > FOLD_STR => {
            let mut head = FOLD_HEAD;
            while !s.is_char_boundary(head) {
                head -= 1;
            }
            html! {
                details.jv-s {
                    summary { span.js.jv-ui { (&s[..head]) "…" } span.jv-ui.jv-n { " " (size(s.len())) " — show all" } }
                    span.js { (s) }
                }
                (comma)
            }
        }
        J::Str(s) => html! { span.js { (s) } (comma) },
        J::Num(s) => html! { span.jn { (s) } (comma) },
        J::Lit(s) => html! { span.jb { (s) } (comma) },
    }
}

/// Highlights a code block's text: strings, numbers, comments and a few
/// keywords common to the languages models write (a small hand-written
/// scanner, no script). JSON goes through the lossless tree instead.
pub(crate) fn highlight(lang: &str, code: &str) -> Markup {
    if matches!(lang, "json" | "jsonc")
        && let Some(v) = parse(code)
    {
        return html! { pre.code { (node(&v, true)) } };
    }
    let hash_comments = matches!(
        lang,
        "python" | "py" | "sh" | "bash" | "shell" | "ruby" | "rb" | "yaml" | "toml"
    );
    // Plain text between the stretches, as ("", text).
    let parts = stretches(code, hash_comments);
    let mut segs: Vec<(&str, &str)> = Vec::with_capacity(parts.len() * 2 + 1);
    let mut at = 0;
    for (cls, from, to) in parts {
        segs.push(("", &code[at..from]));
        segs.push((cls, &code[from..to]));
        at = to;
    }
    segs.push(("", &code[at..]));
    html! {
        pre.code {
            @for (cls, t) in segs {
                @if cls.is_empty() { (t) } @else { span class=(cls) { (t) } }
            }
        }
    }
}

/// The keywords of the languages a code block is commonly in.
const KEYWORDS: &str = "fn let mut pub use impl struct enum match if else for while loop \
    return def class import from as in not and or const var function async await true \
    false null None True False self new try except catch with yield export type \
    interface package func go select case switch";

/// (class, start, end) of each highlighted stretch of `code`, in order:
/// comments `hc`, strings `hs`, numbers `hn`, keywords `hk`.
fn stretches(code: &str, hash_comments: bool) -> Vec<(&'static str, usize, usize)> {
    let b = code.as_bytes();
    let mut parts: Vec<(&'static str, usize, usize)> = Vec::new();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if (c == b'/' && b.get(i + 1) == Some(&b'/')) || (c == b'#' && hash_comments) {
            i = code[i..].find('\n').map_or(b.len(), |e| i + e);
            parts.push(("hc", start, i));
        } else if c == b'"' || c == b'\'' || c == b'`' {
            let mut j = i + 1;
            while j < b.len() && b[j] != c && b[j] != b'\n' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            i = (j + 1).min(b.len());
            parts.push(("hs", start, i));
        } else if c.is_ascii_digit() && (i == 0 || !word(b[i - 1])) {
            while i < b.len() && (word(b[i]) || b[i] == b'.') {
                i += 1;
            }
            parts.push(("hn", start, i));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            if KEYWORDS
                .split_ascii_whitespace()
                .any(|k| k == &code[start..i])
            {
                parts.push(("hk", start, i));
            }
        } else {
            // Step over a whole character (multi-byte UTF-8 included).
            i += code[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_the_source_text() {
        let src = r#" {"n": 12345678901234567890123, "d": 0.1000000000000000055511151231257827,
            "e": "caf\u00e9", "a": [1, -0.5e+10, true, null], "n": {}} "#;
        let J::Obj(_, items) = parse(src).unwrap() else {
            panic!()
        };
        let keys: Vec<&str> = items.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [r#""n""#, r#""d""#, r#""e""#, r#""a""#, r#""n""#]);
        assert_eq!(items[0].1, J::Num("12345678901234567890123"));
        assert_eq!(items[1].1, J::Num("0.1000000000000000055511151231257827"));
        assert_eq!(items[2].1, J::Str(r#""caf\u00e9""#));
        let J::Arr(raw, a) = &items[3].1 else {
            panic!()
        };
        assert_eq!(*raw, "[1, -0.5e+10, true, null]");
        assert_eq!(a[1], J::Num("-0.5e+10"));
    }

    #[test]
    fn not_json_is_refused() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01",
            "1.",
            "-",
            "\"\\x\"",
            "\"a\nb\"",
            "{} x",
            "[1] [2]",
            "tru",
            "{\"a\":1,}",
            "\"\\u12g4\"",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
        let deep = "[".repeat(100_000);
        assert!(parse(&deep).is_none());
    }

    #[test]
    fn view_marks_duplicates_escapes_text_and_collapses_big_trees() {
        let html = view(r#"{"a":1,"<b>":"</pre><script>x</script>","a":2}"#)
            .unwrap()
            .into_string();
        assert!(html.contains("duplicate key"));
        assert_eq!(html.matches("class=\"jv-l dup\"").count(), 1);
        assert!(!html.contains("<script>"));
        assert!(html.contains("&lt;/pre&gt;&lt;script&gt;"));
        assert!(html.contains("<details class=\"jv-c\" open>"));
        let big = format!("[{}]", vec!["\"xxxxxxxxxx\""; 4000].join(","));
        let html = view(&big).unwrap().into_string();
        assert!(html.starts_with("<div class=\"jv\">"));
        assert!(!html.contains(" open>"), "a 48 KB array starts collapsed");
        assert!(html.contains("4000 items · 50.8 KB"));
        let long = format!("{{\"s\":\"{}\"}}", "y".repeat(5000));
        let html = view(&long).unwrap().into_string();
        assert!(html.contains("<details class=\"jv-s\">"));
        assert!(view("\"just a string\"").is_none());
        assert!(view("12").is_none());
    }

    #[test]
    fn highlighted_code_is_escaped_text() {
        let h = highlight("python", "def f(x):  # <b>\n    return \"</pre>\" + 42\n").into_string();
        assert!(h.contains("<span class=\"hk\">def</span>"));
        assert!(h.contains("<span class=\"hc\"># &lt;b&gt;</span>"));
        assert!(h.contains("<span class=\"hs\">&quot;&lt;/pre&gt;&quot;</span>"));
        assert!(h.contains("<span class=\"hn\">42</span>"));
        let h = highlight("json", "{\"big\": 12345678901234567890123}").into_string();
        assert!(h.contains("<span class=\"jn\">12345678901234567890123</span>"));
        // Unterminated strings and multi-byte text do not panic.
        highlight("js", "let s = \"é\\");
        highlight("rust", "é1 'a");
    }
}
