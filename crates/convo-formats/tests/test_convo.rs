use crate::common::{fixture, one, texts};
use convo_formats::convo::{self, Convo};
use convo_formats::{Reader, Role, Writer};

#[test]
fn seed_example_reads_with_participants_and_zoned_time() {
    let c = one("convo", "seed_example.convo");
    let t = c.turns();
    assert_eq!(t.len(), 4);
    assert_eq!(t[0].speaker, "founder");
    assert_eq!(t[0].role, Role::User);
    assert_eq!(t[1].role, Role::Assistant);
    assert_eq!(t[1].model.as_deref(), Some("gemini-2.5-pro"));
    assert_eq!(t[0].text, "Hi who are you.");
    assert_eq!(t[3].text, "Sounds good.");
    assert_eq!(c.created_at, Some(1_761_238_800_000));
    assert_eq!(
        c.meta["time"], "2025-10-23T12:00:00-05:00[America/Chicago]",
        "kept verbatim"
    );
    assert_eq!(
        c.meta["participants"][1]["generative:interface"],
        "https://gemini.google.com/app"
    );
}

#[test]
fn seed_example_round_trips_byte_for_byte() {
    for name in ["seed_example.convo", "seed_example_languages.convo"] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let c = convo::parse(name, &bytes).unwrap();
        let w = Convo.write(&c).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&w),
            String::from_utf8_lossy(&bytes),
            "{name}: byte for byte"
        );
        let again = convo::parse("again", &w).unwrap();
        assert_eq!(texts(&c), texts(&again), "{name}");
        assert_eq!(c.meta, again.meta, "{name}");
        assert_eq!(c.title, again.title, "{name}");
        // Writing what was read back gives the same bytes: a fixpoint.
        assert_eq!(Convo.write(&again).unwrap(), w, "{name}");
    }
    let c = one("convo", "seed_example_languages.convo");
    assert_eq!(c.title.as_deref(), Some("Meeting Gem"));
    assert_eq!(c.meta["languages"][0], "cmn");
    assert_eq!(c.meta["x-archive"]["shelf"], 7, "unknown keys are kept");
}

#[test]
fn regression_seed_languages_meta_trailing_comma_is_a_metadata_json_error() {
    let bad = std::fs::read_to_string(fixture("seed_example_languages.convo"))
        .unwrap()
        .replace(
            "\"speculative\": [\"en\"]\n",
            "\"speculative\": [\"en\"],\n",
        );
    let e = convo::parse("seed.convo", bad.as_bytes()).unwrap_err();
    assert_eq!(e.rule, "metadata-json", "{e}");
    let l = e.location.unwrap();
    assert_eq!(l.line, 24, "{e}");
    assert!(e.render().contains("seed.convo:24:"), "{}", e.render());
}

#[test]
fn tricky_file_finds_exactly_two_turns() {
    let c = one("convo", "tricky.convo");
    let t = c.turns();
    assert_eq!(t.len(), 2, "{:?}", texts(&c));
    assert!(t[0].text.contains("```markdown\n### @bob\nnot a turn"));
    assert!(
        t[0].text.contains("\n### @bob is escaped"),
        "un-escaped on read"
    );
    assert!(t[0].text.contains("\n----\n"));
    assert_eq!(t[1].text, "Got it. ✓ Ünïcödé");
    let w = Convo.write(&c).unwrap();
    let again = convo::parse("w", &w).unwrap();
    assert_eq!(texts(&c), texts(&again));
    let s = String::from_utf8(w).unwrap();
    assert!(
        s.contains("\n\\#\\#\\# @bob is escaped"),
        "re-escaped on write:\n{s}"
    );
}

/// Each rule, with the line it must point at.
#[test]
fn every_rule_has_a_name_a_line_and_a_column() {
    let meta = "----\n{\"type\": \"dialog\", \"time\": \"2025-10-23\", \"participants\": [\"a\", \"b\"]}\n";
    let cases: Vec<(String, &str, u32)> = vec![
        (format!("hello\n\n### @a\nx\n\n### @b\ny\n\n{meta}"), "content-before-delimiter", 1),
        (format!("### @a\nx\n\n### @\ny\n\n{meta}"), "empty-name", 4),
        ("### @a\nx\n\n### @b\ny\n".to_owned(), "separator-missing", 6),
        (format!("### @a\nx\n\n### @b\ny\n{meta}"), "separator-blank-line", 6),
        ("### @a\nx\n\n### @b\ny\n\n----\n".to_owned(), "metadata-missing", 8),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"type\": \"dialog\",\n \"time\": }\n".to_owned(), "metadata-json", 9),
        ("### @a\nx\n\n### @b\ny\n\n----\n[1]\n".to_owned(), "metadata-json", 8),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"time\": \"2025-10-23\", \"participants\": [\"a\", \"b\"]}\n".to_owned(), "metadata-required", 8),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\n\"type\": 3, \"time\": \"2025-10-23\", \"participants\": [\"a\", \"b\"]}\n".to_owned(), "metadata-wrong-type", 9),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"type\": \"d\",\n\"time\": \"soon\", \"participants\": [\"a\", \"b\"]}\n".to_owned(), "time-invalid", 9),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23T12:00:00-06:00[America/Chicago]\", \"participants\": [\"a\", \"b\"]}\n".to_owned(), "time-offset-zone", 8),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\",\n\"participants\": [\"a\", {\"generative\": true}]}\n".to_owned(), "participant-name", 9),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\", \"participants\": [\"a\", \"b\", \"a\"]}\n".to_owned(), "participant-duplicate", 8),
        ("### @a\nx\n\n### @c\ny\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\", \"participants\": [\"a\", \"b\"]}\n".to_owned(), "names-mismatch", 4),
        ("### @a\nx\n\n### @b\ny\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\", \"participants\": [\"a\", \"b\"], \"languages\": \"en\"}\n".to_owned(), "metadata-wrong-type", 8),
    ];
    for (text, rule, line) in cases {
        let e = convo::parse("f.convo", text.as_bytes()).unwrap_err();
        assert_eq!(e.rule, rule, "{text:?}\n{e}");
        let l = e.location.unwrap_or_else(|| panic!("{rule}: no location"));
        assert_eq!(l.line, line, "{rule}: {e}");
        assert!(l.column >= 1);
        let r = e.render();
        assert!(r.starts_with(&format!("f.convo:{line}:")), "{r}");
        assert!(r.contains(&format!("error[{rule}]")), "{r}");
        assert!(r.contains(" | "), "an excerpt: {r}");
    }
    let e = convo::parse("bin", b"### @a\n\xff\xfe\n").unwrap_err();
    assert_eq!(e.rule, "encoding");
    assert_eq!(e.location.unwrap().line, 2);
}

#[test]
fn crlf_files_read_like_lf_files() {
    let lf = std::fs::read_to_string(fixture("seed_example.convo")).unwrap();
    let crlf = lf.replace('\n', "\r\n");
    let a = convo::parse("lf", lf.as_bytes()).unwrap();
    let b = convo::parse("crlf", crlf.as_bytes()).unwrap();
    assert_eq!(texts(&a), texts(&b));
}

#[test]
fn files_over_ten_mib_are_read_with_a_warning() {
    let mut s = String::from("### @a\n");
    let line = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n";
    while s.len() < 10 * 1024 * 1024 + 10 {
        s.push_str(line);
    }
    s.push_str(
        "\n----\n{\"type\": \"monologue\", \"time\": \"2025-10-23\", \"participants\": [\"a\"]}\n",
    );
    let r = Convo.read_bytes("big.convo", s.as_bytes()).unwrap();
    assert_eq!(r.conversations.len(), 1);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("10 MB"));
}

#[test]
fn writer_refuses_names_it_cannot_write() {
    let c = convo_formats::Conversation::linear(vec![convo_formats::Message::new(
        Role::User,
        "two\nlines",
        "x",
    )]);
    assert_eq!(Convo.write(&c).unwrap_err().rule, "unwritable-name");
}
