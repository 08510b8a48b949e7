//! Markdown rendered safely for the web view: raw HTML in a payload is
//! shown as text, link targets other than http(s), mailto and in-page
//! anchors are dropped, images become links (the page loads nothing from
//! elsewhere). pulldown-cmark escapes all text itself.

use pulldown_cmark::{CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd, html};

fn safe_url(u: &str) -> bool {
    let lower: String = u
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .collect::<String>()
        .to_ascii_lowercase();
    lower.starts_with("http://")
        || lower.starts_with("https://")
        || lower.starts_with("mailto:")
        || lower.starts_with('#')
}

/// `text` as an HTML fragment with no markup the text did not ask for in
/// Markdown, and no script, handler or foreign URL.
pub fn render(text: &str) -> String {
    let mut opts = Options::empty();
    opts.insert(Options::ENABLE_TABLES);
    opts.insert(Options::ENABLE_STRIKETHROUGH);
    opts.insert(Options::ENABLE_TASKLISTS);
    let parser = Parser::new_ext(text, opts).map(|ev| match ev {
        Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        })
        | Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: if safe_url(&dest_url) {
                dest_url
            } else {
                CowStr::from("#")
            },
            title,
            id,
        }),
        Event::End(TagEnd::Image) => Event::End(TagEnd::Link),
        other => other,
    });
    // Code blocks highlighted (escaped spans, see `web::json::highlight`).
    let mut code: Option<(String, String)> = None;
    let parser = parser.filter_map(move |ev| match ev {
        Event::Start(Tag::CodeBlock(k)) => {
            let lang = match k {
                CodeBlockKind::Fenced(l) => l
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase(),
                CodeBlockKind::Indented => String::new(),
            };
            code = Some((lang, String::new()));
            None
        }
        Event::Text(t) if code.is_some() => {
            if let Some((_, c)) = code.as_mut() {
                c.push_str(&t);
            }
            None
        }
        Event::End(TagEnd::CodeBlock) => {
            let (lang, text) = code.take()?;
            Some(Event::Html(CowStr::from(
                crate::web::json::highlight(&lang, &text).into_string(),
            )))
        }
        other => Some(other),
    });
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    html::push_html(&mut out, parser);
    out
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn raw_html_and_script_urls_are_inert() {
        let out = render(
            "<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n[x](javascript:alert(1)) [y]( JaVaScRiPt:alert(2)) ![i](https://e.com/i.png)",
        );
        assert!(!out.contains("<script"), "{out}");
        assert!(!out.contains("<img"), "{out}");
        assert!(
            !out.to_ascii_lowercase().contains("href=\"javascript"),
            "{out}"
        );
        assert!(out.contains("&lt;script&gt;"), "{out}");
        assert!(out.contains("href=\"https://e.com/i.png\""), "{out}");
    }

    #[test]
    fn markdown_still_renders() {
        let out = render("# Title\n\n**bold** and `code`\n\n- a\n- b");
        assert!(out.contains("<h1>Title</h1>"));
        assert!(out.contains("<strong>bold</strong>"));
        assert!(out.contains("<li>a</li>"));
        let out = render("```python\nx = \"</pre><script>\"  # 1\n```\n");
        assert!(
            out.contains("<span class=\"hs\">&quot;&lt;/pre&gt;&lt;script&gt;&quot;</span>"),
            "{out}"
        );
        assert!(!out.contains("<script"), "{out}");
    }
}
