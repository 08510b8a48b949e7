//! Credentials in text, found by gitleaks' rule set and a few of convo's.
//!
//! The rules are gitleaks' default configuration, vendored unchanged as
//! `secrets/gitleaks.toml` ([`RULES_SOURCE`] says which version; MIT,
//! `secrets/LICENSE-gitleaks`): to update them, copy a newer
//! `config/gitleaks.toml` over it and change [`RULES_SOURCE`]. They are
//! applied as gitleaks applies them to a fragment of text with no file
//! path: a rule runs only when the lowercased text holds one of its
//! keywords; the secret is the capture group the rule names (or its first
//! non-empty one, or the whole match); it must have more Shannon entropy
//! than the rule asks; and neither the global nor the rule's allowlists
//! (regexes on the secret, the match or the line, stop words) may allow
//! it. Rules that only name file paths, and those gitleaks' Go regexes
//! this crate's engine reads differently, are left out
//! ([`Rules::skipped`]). convo's own rules (`secrets/convo.toml`, ids
//! `convo-…`: PEM blocks of any length, `.env`-style assignments to
//! credential-named variables, `Bearer`/`Basic` credentials, provider key
//! prefixes) are read after them, in the same format. Regexes are
//! compiled once, on first use.

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use std::sync::LazyLock;

/// Where the vendored rules come from.
pub const RULES_SOURCE: &str =
    "gitleaks config/gitleaks.toml, v8.30.0-27-gb58d3f10 (file of 2025-11-20, fetched 2026-11-25)";

const GITLEAKS_TOML: &str = include_str!("../secrets/gitleaks.toml");
const CONVO_TOML: &str = include_str!("../secrets/convo.toml");

/// One credential found: which rule, and where its secret is (byte
/// offsets into the text searched).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The gitleaks rule id (`github-pat`, `anthropic-api-key`…).
    pub rule: &'static str,
    /// Where the secret starts.
    pub start: usize,
    /// Where it ends.
    pub end: usize,
}

/// The compiled rule set.
#[derive(Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    global: Vec<Allow>,
    /// Every keyword of every rule, and which rules name it.
    keywords: aho_corasick::AhoCorasick,
    keyword_rules: Vec<Vec<usize>>,
    /// Rules that did not compile or only match file paths, with why.
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug)]
struct Rule {
    id: &'static str,
    regex: Regex,
    secret_group: usize,
    entropy: f64,
    keyworded: bool,
    allow: Vec<Allow>,
}

#[derive(Debug, Default)]
struct Allow {
    target: Target,
    regexes: Vec<Regex>,
    stopwords: Vec<String>,
    /// `condition = "AND"`: every kind listed must allow.
    all: bool,
}

#[derive(Debug, Default, Clone, Copy)]
enum Target {
    #[default]
    Secret,
    Match,
    Line,
}

#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    allowlist: Option<AllowToml>,
    #[serde(default)]
    rules: Vec<RuleToml>,
}

#[derive(Deserialize)]
struct RuleToml {
    id: String,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default, rename = "secretGroup")]
    secret_group: Option<usize>,
    #[serde(default)]
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    allowlists: Vec<AllowToml>,
}

#[derive(Deserialize, Default)]
struct AllowToml {
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default, rename = "regexTarget")]
    regex_target: Option<String>,
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    commits: Vec<String>,
}

/// Go's RE2 classes are ASCII (`\w`, `\s`, `\b`, `\d`); so are ours. The
/// lazy DFA gets room for the bounded repetitions gitleaks' generic rules
/// are made of (at the default 2 MiB its cache thrashed: 10× slower on
/// text dense in keywords).
fn compile(re: &str) -> Result<Regex, String> {
    RegexBuilder::new(&from_go(re))
        .unicode(false)
        .size_limit(64 << 20)
        .dfa_size_limit(32 << 20)
        .build()
        .map_err(|e| e.to_string())
}

/// A Go regex in this engine's syntax: Go reads a `{` that does not start
/// a repetition (`{2}`, `{2,}`, `{2,5}`) as a literal brace; here it must
/// be escaped.
fn from_go(re: &str) -> String {
    let b = re.as_bytes();
    let mut out = String::with_capacity(re.len() + 8);
    let mut i = 0;
    let mut class = false;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' && i + 1 < b.len() {
            // An escape: copy it whole (a multi-byte character after it too).
            let end = (i + 2..=b.len())
                .find(|&e| re.is_char_boundary(e))
                .unwrap_or(b.len());
            out.push_str(&re[i..end]);
            i = end;
            continue;
        }
        match c {
            b'[' if !class => class = true,
            b']' if class => class = false,
            b'{' if !class => {
                let rest = &re[i + 1..];
                let close = rest.find('}');
                let repetition = close.is_some_and(|e| {
                    let inner = &rest[..e];
                    let (lo, hi) = inner.split_once(',').unwrap_or((inner, "0"));
                    !lo.is_empty()
                        && lo.bytes().all(|d| d.is_ascii_digit())
                        && hi.bytes().all(|d| d.is_ascii_digit())
                });
                if !repetition {
                    out.push_str("\\{");
                    i += 1;
                    continue;
                }
            }
            _ => {}
        }
        let end = (i + 1..=b.len())
            .find(|&e| re.is_char_boundary(e))
            .unwrap_or(b.len());
        out.push_str(&re[i..end]);
        i = end;
    }
    out
}

impl Allow {
    fn from_toml(a: AllowToml) -> Result<Option<Allow>, String> {
        // A list that only names paths or commits never applies to text.
        if a.regexes.is_empty() && a.stopwords.is_empty() {
            return Ok(None);
        }
        let all = a
            .condition
            .as_deref()
            .is_some_and(|c| c.eq_ignore_ascii_case("and"));
        if all && (!a.paths.is_empty() || !a.commits.is_empty()) {
            // AND with a path or commit: text has neither, never allowed.
            return Ok(None);
        }
        Ok(Some(Allow {
            target: match a.regex_target.as_deref() {
                Some("match") => Target::Match,
                Some("line") => Target::Line,
                _ => Target::Secret,
            },
            regexes: a
                .regexes
                .iter()
                .map(|r| compile(r))
                .collect::<Result<_, _>>()?,
            stopwords: a.stopwords.iter().map(|s| s.to_ascii_lowercase()).collect(),
            all,
        }))
    }

    fn allows(&self, secret: &[u8], matched: &[u8], line: &[u8]) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        let by_regex = || self.regexes.iter().any(|r| r.is_match(target));
        let by_word = || {
            let lower = secret.to_ascii_lowercase();
            self.stopwords
                .iter()
                .any(|w| memchr::memmem::find(&lower, w.as_bytes()).is_some())
        };
        if self.all {
            (self.regexes.is_empty() || by_regex()) && (self.stopwords.is_empty() || by_word())
        } else {
            by_regex() || by_word()
        }
    }
}

/// Shannon entropy of `s` in bits per byte, as gitleaks counts it.
pub fn entropy(s: &[u8]) -> f64 {
    if s.is_empty() {
        return 0.0;
    }
    let mut counts = [0usize; 256];
    for &b in s {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

impl Rules {
    /// The vendored rule set, compiled once.
    pub fn get() -> &'static Rules {
        static RULES: LazyLock<Rules> = LazyLock::new(|| {
            // convo's rules hold only `[[rules]]`: they go on gitleaks'.
            let both = format!("{GITLEAKS_TOML}\n{CONVO_TOML}");
            Rules::parse(&both).unwrap_or_else(|why| Rules {
                rules: Vec::new(),
                global: Vec::new(),
                keywords: aho_corasick::AhoCorasick::new::<_, &str>([])
                    .unwrap_or_else(|_| unreachable!("an empty automaton builds")),
                keyword_rules: Vec::new(),
                skipped: vec![("*".into(), why)],
            })
        });
        &RULES
    }

    /// Compiles a gitleaks configuration.
    pub fn parse(toml_text: &str) -> Result<Rules, String> {
        let config: Config = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        let mut rules = Vec::new();
        let mut skipped = Vec::new();
        let mut words: Vec<String> = Vec::new();
        let mut keyword_rules: Vec<Vec<usize>> = Vec::new();
        for r in config.rules {
            let Some(re) = r.regex.as_deref() else {
                skipped.push((r.id, "matches file paths only".into()));
                continue;
            };
            if r.path.is_some() {
                skipped.push((r.id, "applies to some file paths only".into()));
                continue;
            }
            let built = compile(re).and_then(|regex| {
                let allow = r
                    .allowlists
                    .into_iter()
                    .filter_map(|a| Allow::from_toml(a).transpose())
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((regex, allow))
            });
            let (regex, allow) = match built {
                Ok(b) => b,
                Err(why) => {
                    skipped.push((r.id, why));
                    continue;
                }
            };
            let at = rules.len();
            for k in &r.keywords {
                let k = k.to_ascii_lowercase();
                match words.iter().position(|w| *w == k) {
                    Some(i) => keyword_rules[i].push(at),
                    None => {
                        words.push(k);
                        keyword_rules.push(vec![at]);
                    }
                }
            }
            rules.push(Rule {
                id: Box::leak(r.id.into_boxed_str()),
                regex,
                secret_group: r.secret_group.unwrap_or(0),
                entropy: r.entropy.unwrap_or(0.0),
                keyworded: !r.keywords.is_empty(),
                allow,
            });
        }
        let global = match config.allowlist {
            Some(a) => Allow::from_toml(a)?.into_iter().collect(),
            None => Vec::new(),
        };
        let keywords = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(&words)
            .map_err(|e| e.to_string())?;
        Ok(Rules {
            rules,
            global,
            keywords,
            keyword_rules,
            skipped,
        })
    }

    /// How many rules apply to text.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether no rule applies.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The credentials in `text`, by where their secrets start; where two
    /// overlap, a provider's rule wins over a generic one, then the first,
    /// then the longer.
    pub fn find(&self, text: &str) -> Vec<Finding> {
        let bytes = text.as_bytes();
        let mut on = vec![false; self.rules.len()];
        for m in self.keywords.find_overlapping_iter(bytes) {
            for &r in &self.keyword_rules[m.pattern().as_usize()] {
                on[r] = true;
            }
        }
        let mut found = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.keyworded && !on[i] {
                continue;
            }
            for caps in rule.regex.captures_iter(bytes) {
                let Some(whole) = caps.get(0) else { continue };
                // The match without the newlines it caught at its ends.
                let mut m = (whole.start(), whole.end());
                while m.0 < m.1 && bytes[m.0] == b'\n' {
                    m.0 += 1;
                }
                while m.1 > m.0 && bytes[m.1 - 1] == b'\n' {
                    m.1 -= 1;
                }
                let group = if rule.secret_group > 0 {
                    caps.get(rule.secret_group)
                } else {
                    (1..caps.len()).find_map(|g| caps.get(g).filter(|c| !c.is_empty()))
                };
                let secret = group.map_or(m, |g| (g.start(), g.end()));
                if secret.0 >= secret.1 {
                    continue;
                }
                let s = &bytes[secret.0..secret.1];
                if rule.entropy > 0.0 && entropy(s) <= rule.entropy {
                    continue;
                }
                let line_start = bytes[..m.0]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                let line_end = bytes[m.1..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |p| m.1 + p);
                let line = &bytes[line_start..line_end];
                let matched = &bytes[m.0..m.1];
                if self
                    .global
                    .iter()
                    .chain(&rule.allow)
                    .any(|a| a.allows(s, matched, line))
                {
                    continue;
                }
                // Offsets on character boundaries (the engine reads bytes).
                if !text.is_char_boundary(secret.0) || !text.is_char_boundary(secret.1) {
                    continue;
                }
                found.push(Finding {
                    rule: rule.id,
                    start: secret.0,
                    end: secret.1,
                });
            }
        }
        // A provider's rule names a secret better than a generic one.
        found.sort_by_key(|f| {
            (
                f.rule.starts_with("generic"),
                f.start,
                std::cmp::Reverse(f.end),
            )
        });
        let mut kept: Vec<Finding> = Vec::with_capacity(found.len());
        for f in found {
            if kept.iter().any(|k| f.start < k.end && k.start < f.end) {
                continue;
            }
            kept.push(f);
        }
        kept.sort_by_key(|f| f.start);
        kept
    }

    /// `text` with each secret [`Rules::find`] finds replaced by `with`,
    /// and the rules that found them (one entry per secret).
    pub fn redact(&self, text: &str, with: &str) -> (String, Vec<&'static str>) {
        let found = self.find(text);
        if found.is_empty() {
            return (text.to_owned(), Vec::new());
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut rules = Vec::with_capacity(found.len());
        for f in found {
            out.push_str(&text[at..f.start]);
            out.push_str(with);
            at = f.end;
            rules.push(f.rule);
        }
        out.push_str(&text[at..]);
        (out, rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_rules_compile_but_for_the_path_only_ones() {
        let r = Rules::get();
        assert!(
            r.len() >= 200,
            "{} rules; skipped: {:?}",
            r.len(),
            r.skipped
        );
        for (id, why) in &r.skipped {
            assert!(why.contains("path"), "{id} did not compile: {why}");
        }
    }

    #[test]
    fn provider_keys_are_found_and_named() {
        let r = Rules::get();
        // Built at run time so no scanner flags this file.
        let ghp = format!("ghp_{}", "Xb3kQ9zP2mL7vR4tW8yN1cF6hJ0sD5gA2eU7");
        let text = format!("export GITHUB_TOKEN={ghp}\nnothing here");
        let found = r.find(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, "github-pat");
        assert_eq!(&text[found[0].start..found[0].end], ghp);
        let (out, rules) = r.redact(&text, "REDACTED");
        assert_eq!(out, "export GITHUB_TOKEN=REDACTED\nnothing here");
        assert_eq!(rules, ["github-pat"]);
        let ant = format!(
            "sk-ant-api03-{}AA",
            "q8Zr4Lx2Wm9Tn3Vb7Kc1Hd5Fs0Gj6Pa".repeat(3)
        );
        let found = r.find(&format!("the key is {ant} ok"));
        assert_eq!(
            found.first().map(|f| f.rule),
            Some("anthropic-api-key"),
            "{found:?}"
        );
    }

    #[test]
    fn low_entropy_and_allowlisted_values_are_left() {
        let r = Rules::get();
        for text in [
            "password = aaaaaaaaaaaaaaaa",
            "api_version = 2024-01-01",
            "the key to success is practice",
            "token: ${GITHUB_TOKEN}",
        ] {
            assert_eq!(r.find(text), Vec::new(), "{text}");
        }
    }

    #[test]
    fn convos_rules_find_env_assignments_schemes_prefixes_and_pem_blocks() {
        let r = Rules::get();
        let secret_of = |text: &str| -> Vec<(&'static str, String)> {
            r.find(text)
                .into_iter()
                .map(|f| (f.rule, text[f.start..f.end].to_owned()))
                .collect()
        };
        assert_eq!(
            secret_of("DB_PASSWORD=hunter2 ./run"),
            [("convo-env-assignment", "hunter2".to_owned())]
        );
        assert_eq!(
            secret_of("TOKEN=abc123 make"),
            [("convo-env-assignment", "abc123".to_owned())]
        );
        assert_eq!(
            secret_of("export API_TOKEN=\"two words\""),
            [("convo-env-assignment", "two words".to_owned())]
        );
        let sk = format!("sk-proj-{}", "Abc123Def456Ghi789Jkl012");
        assert_eq!(
            secret_of(&format!("my key is {sk}, deploy please")),
            [("convo-provider-key", sk.clone())]
        );
        let bearer = format!("eyJhbGciOiJIUzI1NiJ9{}", "Xq7Pl9uto3nium");
        let found = secret_of(&format!("curl -H 'Authorization: Bearer {bearer}' x"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].1.contains(&bearer), "{found:?}");
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x+abc/def==\n-----END RSA PRIVATE KEY-----";
        let found = secret_of(&format!("deployed\n{pem}\ndone"));
        assert_eq!(found, [("convo-private-key-block", pem.to_owned())]);
        // Prose, references and identifiers stay.
        for text in [
            "the token error came from the auth layer; use a key-based lookup",
            "PASSWORD=$DB_PASSWORD and API_KEY=${KEY} and SECRET_KEY=REDACTED",
            "pip install scikit-learn; sk-learn is not a key",
            "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed it",
            "Bearer authentication is described in RFC 6750",
        ] {
            assert_eq!(secret_of(text), [], "{text}");
        }
    }

    #[test]
    fn go_braces_that_repeat_nothing_are_literal() {
        assert_eq!(from_go(r"^\$(?:\d+|{\d+})$"), r"^\$(?:\d+|\{\d+})$");
        assert_eq!(from_go(r"a{2}b{2,}c{2,5}[{]"), r"a{2}b{2,}c{2,5}[{]");
        assert_eq!(from_go(r"\{x}é{"), r"\{x}é\{");
    }

    #[test]
    fn entropy_counts_bits_per_byte() {
        assert_eq!(entropy(b""), 0.0);
        assert_eq!(entropy(b"aaaa"), 0.0);
        assert!((entropy(b"abcd") - 2.0).abs() < 1e-9);
    }
}
