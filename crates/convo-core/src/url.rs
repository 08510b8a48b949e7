//! Credentials out of URLs: the one redactor every crate uses before a URL
//! is shown, logged or recorded (store URLs in errors and logs, upstream
//! URLs in the proxy's records).
//!
//! [`redact`] keeps the URL readable and says where a secret was
//! (`postgres://u:***@h/db?password=***`); [`public`] keeps only what
//! names the place (`https://host/v1`): no user, no password, no query.

/// The parts of `scheme://userinfo@host/path?query#fragment` (each piece
/// borrowed; a URL without `://` is all path).
struct Parts<'a> {
    scheme: Option<&'a str>,
    user: Option<&'a str>,
    password: bool,
    host: &'a str,
    path: &'a str,
    query: Option<&'a str>,
}

fn split(url: &str) -> Parts<'_> {
    let (rest, query) = match url.split_once(['?', '#']) {
        Some((r, q)) => (r, Some(q)),
        None => (url, None),
    };
    let Some((scheme, rest)) = rest.split_once("://") else {
        return Parts {
            scheme: None,
            user: None,
            password: false,
            host: "",
            path: rest,
            query,
        };
    };
    // The user information ends at the last `@` (a password may hold `@`
    // or `/`), unless that `@` is in the path of a URL without one.
    let (info, rest) = match rest.rsplit_once('@') {
        Some((info, host))
            if !info.contains('/') || info.split('/').next().is_some_and(|a| a.contains(':')) =>
        {
            (Some(info), host)
        }
        _ => (None, rest),
    };
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (user, password) = match info {
        Some(info) => match info.split_once(':') {
            Some((u, _)) => (Some(u), true),
            None => (Some(info), false),
        },
        None => (None, false),
    };
    Parts {
        scheme: Some(scheme),
        user,
        password,
        host,
        path,
        query,
    }
}

/// `url` with its password and the values of credential query parameters
/// ([`crate::credential::is_credential`]: `password`, `key`, `token`,
/// `secret`, …, or a value that looks like a key) replaced by `***`;
/// everything else as given.
///
/// ```
/// use convo_core::url::redact;
/// assert_eq!(redact("postgres://u:pw@h:5432/db"), "postgres://u:***@h:5432/db");
/// assert_eq!(redact("postgres://h/db?user=u&password=pw"), "postgres://h/db?user=u&password=***");
/// assert_eq!(redact("sqlite:///tmp/convo.db"), "sqlite:///tmp/convo.db");
/// ```
pub fn redact(url: &str) -> String {
    let p = split(url);
    let mut out = String::with_capacity(url.len());
    if let Some(scheme) = p.scheme {
        out.push_str(scheme);
        out.push_str("://");
        if let Some(user) = p.user {
            out.push_str(user);
            if p.password {
                out.push_str(":***");
            }
            out.push('@');
        }
        out.push_str(p.host);
    }
    out.push_str(p.path);
    if let Some(rest) = p.query {
        // What follows the path: `?query#fragment`, or `#fragment`.
        let (query, fragment) = if url[..url.len() - rest.len()].ends_with('?') {
            match rest.split_once('#') {
                Some((q, f)) => (Some(q), Some(f)),
                None => (Some(rest), None),
            }
        } else {
            (None, Some(rest))
        };
        if let Some(q) = query {
            out.push('?');
            out.push_str(&crate::credential::redact_query(q, "***"));
        }
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
    }
    out
}

/// Where `url` points and nothing more: scheme, host and path, without
/// user, password, query or fragment (what a record keeps of an upstream).
///
/// ```
/// use convo_core::url::public;
/// assert_eq!(public("https://user:pw@api.example.com/v1?key=1"), "https://api.example.com/v1");
/// ```
pub fn public(url: &str) -> String {
    let p = split(url);
    match p.scheme {
        Some(scheme) => format!("{scheme}://{}{}", p.host, p.path),
        None => p.path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_secret_survives() {
        for (url, want) in [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
            ("postgres://u:a/secret@h/db", "postgres://u:***@h/db"),
            (
                "postgres://h/db?sslmode=require&password=secret",
                "postgres://h/db?sslmode=require&password=***",
            ),
            (
                "https://h/v1?api_key=secret#x",
                "https://h/v1?api_key=***#x",
            ),
            ("/tmp/convo.db", "/tmp/convo.db"),
        ] {
            assert_eq!(redact(url), want);
            assert!(!redact(url).contains("secret"));
        }
        assert_eq!(
            public("https://u:secret@h:1/v1?key=secret"),
            "https://h:1/v1"
        );
        assert_eq!(public("http://h"), "http://h");
        assert_eq!(public("not a url"), "not a url");
    }
}
