//! HTML export: one self-contained page per session.
//!
//! # Wire format
//!
//! A single HTML5 document with its style sheet inline and no scripts,
//! images, fonts or links to anything outside it, so it opens the same
//! from a mail attachment, a file share or an archive. Each turn is an
//! `<article class="turn {role}">` with a header (speaker, model, time) and
//! the text in a `<div class="text">` shown with its line breaks
//! (`white-space: pre-wrap`). Every piece of text from the conversation —
//! titles, names, turns, attachments — is escaped (`& < > " '`), so a turn
//! holding `<script>` shows the characters and runs nothing.

use crate::Writer;
use crate::error::Result;
use crate::markdown::{human_time, label, side_texts};
use crate::model::{Conversation, Role};

/// The HTML writer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Html;

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;max-width:50rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;background:#fafafa}\
h1{font-size:1.4rem}.info{color:#666}\
.turn{border:1px solid #ddd;border-radius:8px;margin:1rem 0;padding:.6rem .9rem;background:#fff}\
.turn header{font-size:.85rem;color:#555;margin-bottom:.3rem}\
.user{border-left:4px solid #3b82f6}.assistant{border-left:4px solid #10b981}\
.system{border-left:4px solid #a3a3a3;background:#f4f4f4}.tool_call,.tool{border-left:4px solid #f59e0b;font-family:ui-monospace,monospace;font-size:.85rem}\
.text{white-space:pre-wrap;overflow-wrap:anywhere}\
details{margin-top:.5rem}summary{cursor:pointer;color:#555;font-size:.85rem}";

impl Writer for Html {
    fn name(&self) -> &'static str {
        "html"
    }
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>> {
        let turns = conv.turns();
        let title = conv.title.as_deref().unwrap_or("Conversation");
        let mut s = String::with_capacity(
            4096 + turns.iter().map(|m| m.text.len() * 11 / 10).sum::<usize>(),
        );
        s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
        s.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n");
        s.push_str(&format!(
            "<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
            escape(title)
        ));
        s.push_str(&format!("<h1>{}</h1>\n<p class=\"info\">", escape(title)));
        let mut info = Vec::new();
        if let Some(a) = &conv.agent {
            info.push(escape(a));
        }
        if let Some(t) = conv.first_time() {
            info.push(escape(&human_time(t)));
        }
        info.push(format!("{} messages", turns.len()));
        s.push_str(&info.join(" · "));
        s.push_str("</p>\n");
        for m in turns {
            let class = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::ToolCall => "tool_call",
                Role::Tool => "tool",
            };
            s.push_str(&format!(
                "<article class=\"turn {class}\">\n<header>{}</header>\n<div class=\"text\">{}</div>\n",
                escape(&label(m)),
                escape(&m.text)
            ));
            for (what, text) in side_texts(m) {
                s.push_str(&format!(
                    "<details><summary>{}</summary><div class=\"text\">{}</div></details>\n",
                    escape(&what),
                    escape(&text)
                ));
            }
            s.push_str("</article>\n");
        }
        s.push_str("</body>\n</html>\n");
        Ok(s.into_bytes())
    }
}
