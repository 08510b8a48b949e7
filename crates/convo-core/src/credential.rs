//! Whether a name or a value is a credential: the one detector every
//! crate asks before it records, logs or shows a header, a query
//! parameter, a command-line argument, an environment variable or a JSON
//! key (the proxy's and the harness's records, MCP command lines, URL
//! redaction in [`crate::url`]).
//!
//! - [`is_credential_name`]: a name that says its value is a credential
//!   (`Authorization`, `x-api-key`, `api_key`, `--token`, `DB_PASSWORD`,
//!   `sig`, `Cookie`…);
//! - [`is_key_header`]: the headers an LLM client sends its key in;
//! - [`looks_secret`]: a value that is one whatever its name (a `Bearer`
//!   or `Basic` credential, a known key prefix, a long opaque token);
//! - [`redact_text`], [`redact_query`], [`redact_argv`]: a header value, a
//!   query string or a command line with each credential replaced.
//!
//! Free text (a transcript, a message) is searched by the gitleaks rules
//! in [`crate::secrets`] instead: these are cheap checks on one short
//! string, run on every recorded call.

/// What replaces a credential in a record.
pub const REDACTED: &str = "REDACTED";

/// Substrings of a name (lowercased) that say its value is a credential.
const NAME_PARTS: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "auth",
    "credential",
    "cookie",
    "sig",
];

/// Whole names (lowercased, leading dashes dropped) that do.
const NAMES: &[&str] = &["pass", "pwd"];

/// Headers that carry an API key to an LLM upstream (lowercase).
pub const KEY_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
];

/// Whether a header, query parameter, argument flag, environment variable
/// or JSON key named `name` holds a credential.
///
/// ```
/// use convo_core::credential::is_credential_name;
/// assert!(is_credential_name("Authorization"));
/// assert!(is_credential_name("OPENAI_API_KEY"));
/// assert!(is_credential_name("--pass"));
/// assert!(!is_credential_name("content-type"));
/// ```
pub fn is_credential_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let bare = n.trim_start_matches('-');
    NAME_PARTS.iter().any(|s| n.contains(s)) || NAMES.contains(&bare)
}

/// Whether `name` (any case) is a header an LLM client sends its key in.
pub fn is_key_header(name: &str) -> bool {
    KEY_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Whether a value looks like a credential whatever its name: a bearer or
/// basic scheme, a known key prefix, or a long opaque token.
pub fn looks_secret(v: &str) -> bool {
    let t = v.trim();
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("bearer ") || lower.starts_with("basic ") {
        return true;
    }
    if [
        "sk-", "sk_", "pk-", "rk-", "key-", "api-", "aiza", "ghp_", "xox",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
    {
        return true;
    }
    // A long run with no spaces, slashes or dots: a token, not a version.
    t.len() >= 32
        && !t.contains([' ', '/', '.', ','])
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '=')
}

/// Whether a `name` and its `value` hold a credential: the name says so,
/// or the value looks like one.
pub fn is_credential(name: &str, value: &str) -> bool {
    is_credential_name(name) || looks_secret(value)
}

/// A header value (or any short text) with every credential in it
/// replaced by [`REDACTED`]: split at spaces and punctuation
/// (`;,()=:&"'`), a part that [`looks_secret`], the part after an auth
/// scheme (`Bearer`, `Basic`, `Token`) and the value of a `name=value` or
/// `name: value` pair whose name [`is_credential_name`].
pub fn redact_text(v: &str) -> String {
    const SEPARATORS: &[char] = &[' ', '\t', ';', ',', '(', ')', '=', ':', '&', '"', '\''];
    let mut out = String::with_capacity(v.len());
    // The previous part, and the separators between it and this one.
    let mut prev = "";
    let mut between = String::new();
    let mut rest = v;
    while !rest.is_empty() {
        let end = rest.find(SEPARATORS).unwrap_or(rest.len());
        let (part, after) = rest.split_at(end);
        if part.is_empty() {
            let sep = after.chars().next().unwrap_or(' ');
            out.push(sep);
            between.push(sep);
            rest = &after[sep.len_utf8()..];
            continue;
        }
        let scheme = ["bearer", "basic", "token"]
            .iter()
            .any(|s| prev.eq_ignore_ascii_case(s))
            && between.trim().is_empty();
        let named = is_credential_name(prev) && (between.contains('=') || between.contains(':'));
        if looks_secret(part) || scheme || named {
            out.push_str(REDACTED);
        } else {
            out.push_str(part);
        }
        prev = part;
        between.clear();
        rest = after;
    }
    out
}

/// A query string with the value of each credential parameter
/// ([`is_credential`]) replaced by `mask`; empty parts dropped.
///
/// ```
/// use convo_core::credential::redact_query;
/// assert_eq!(redact_query("a=1&api_key=x&t=sk-1", "***"), "a=1&api_key=***&t=***");
/// ```
pub fn redact_query(q: &str, mask: &str) -> String {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if is_credential(k, v) => format!("{k}={mask}"),
            None if looks_secret(kv) => mask.to_owned(),
            _ => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A command line for the record: an argument that follows a credential
/// flag (`--token X`) or is one's value (`--api-key=X`) is [`REDACTED`],
/// and every other goes through [`redact_text`].
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut secret_next = false;
    for a in argv {
        let named = a.starts_with('-') && {
            let flag = a.split_once('=').map_or(a.as_str(), |(k, _)| k);
            is_credential_name(flag)
        };
        if secret_next {
            out.push(REDACTED.to_owned());
        } else if named && a.contains('=') {
            let (k, _) = a.split_once('=').unwrap_or((a, ""));
            out.push(format!("{k}={REDACTED}"));
        } else {
            out.push(redact_text(a));
        }
        secret_next = named && !a.contains('=');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names each former detector knew (the proxy's recorder, URL
    /// redaction, MCP command lines), and the ones added since.
    #[test]
    fn credential_names_are_the_union_of_every_former_list() {
        for name in [
            // headers
            "Authorization",
            "Proxy-Authorization",
            "x-api-key",
            "api-key",
            "x-goog-api-key",
            "Cookie",
            "set-cookie",
            "X-Auth-Token",
            // query parameters (URL redaction, proxy paths)
            "password",
            "passwd",
            "pass",
            "key",
            "api_key",
            "access_token",
            "client_secret",
            "sig",
            // flags and environment variables
            "--token",
            "--api-key",
            "--pass",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "GOOGLE_APPLICATION_CREDENTIALS",
            // JSON keys
            "apiKey",
            "refresh_token",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            "content-type",
            "accept",
            "user-agent",
            "anthropic-version",
            "x-request-id",
            "model",
            "sslmode",
            "user",
            "--verbose",
            "PATH",
            "HOME",
            "passthrough",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
        assert!(is_key_header("X-Api-Key") && is_key_header("authorization"));
        assert!(!is_key_header("content-type"));
    }

    #[test]
    fn secret_values_are_recognized_whatever_their_name() {
        for v in [
            "Bearer abc",
            "basic dXNlcjpwdw==",
            "sk-proj-abc",
            "sk_live_x",
            "sk-ant-api03-x",
            "AIzaSyXXXX",
            "ghp_0123",
            "xoxb-1-2",
            "0123456789abcdef0123456789abcdef",
        ] {
            assert!(looks_secret(v), "{v}");
        }
        for v in [
            "application/json",
            "2023-06-01",
            "OpenAI/Python 1.55.0",
            "gpt-4o-mini",
            "multipart/form-data; boundary=abc",
            "0123456789abcdef.0123456789abcdef0",
        ] {
            assert!(!looks_secret(v), "{v}");
        }
        assert!(is_credential("model", "sk-1") && is_credential("token", "x"));
        assert!(!is_credential("model", "gpt-4o"));
    }

    #[test]
    fn a_key_inside_a_value_is_replaced() {
        assert_eq!(
            redact_text("my-agent/1.0 (key sk-proj-abc123; Bearer t0k3n) python"),
            "my-agent/1.0 (key REDACTED; Bearer REDACTED) python"
        );
        assert_eq!(
            redact_text("application/json; token=hunter2"),
            "application/json; token=REDACTED"
        );
        assert_eq!(redact_text("OpenAI/Python 1.55.0"), "OpenAI/Python 1.55.0");
        assert_eq!(
            redact_query("a=1&key=AIzaXX&x=sk-1&&sk-bare", REDACTED),
            "a=1&key=REDACTED&x=REDACTED&REDACTED"
        );
        assert_eq!(
            redact_query("sslmode=require&password=pw", "***"),
            "sslmode=require&password=***"
        );
    }

    #[test]
    fn credentials_in_a_command_line_are_replaced() {
        let argv: Vec<String> = [
            "server",
            "--token",
            "hunter2",
            "--api-key=abc",
            "sk-proj-0123456789",
            "--pass",
            "pw",
            "--verbose",
            "/tmp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            redact_argv(&argv),
            [
                "server",
                "--token",
                "REDACTED",
                "--api-key=REDACTED",
                "REDACTED",
                "--pass",
                "REDACTED",
                "--verbose",
                "/tmp"
            ]
        );
    }
}
