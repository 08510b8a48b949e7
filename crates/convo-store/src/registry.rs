//! Backends by URL scheme, as jj's `StoreFactories`: `Store::open` asks
//! the registry, which knows each backend only by the schemes it serves
//! and the function that opens it.

use crate::backend::Backend;
use crate::{Access, Result, StoreError};

/// Opens a backend at a URL with an access mode.
pub type Opener = fn(&str, Access) -> Result<Box<dyn Backend>>;

/// The backends a store URL can name. [`Backends::default`] has SQLite
/// (`sqlite://…`, `sqlite::memory:` and plain paths) and PostgreSQL
/// (`postgres://…`, `postgresql://…`).
#[derive(Clone)]
pub struct Backends {
    schemes: Vec<(&'static str, Opener)>,
    /// What a URL without `scheme://` (a path) opens.
    paths: Opener,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field(
                "schemes",
                &self.schemes.iter().map(|s| s.0).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn sqlite(url: &str, access: Access) -> Result<Box<dyn Backend>> {
    Ok(Box::new(crate::sqlite::Sqlite::open_url_as(url, access)?))
}

fn postgres(url: &str, access: Access) -> Result<Box<dyn Backend>> {
    Ok(Box::new(crate::postgres::Postgres::connect_as(
        url, access,
    )?))
}

impl Default for Backends {
    fn default() -> Self {
        Backends {
            schemes: vec![
                ("sqlite", sqlite as Opener),
                ("postgres", postgres),
                ("postgresql", postgres),
            ],
            paths: sqlite,
        }
    }
}

impl Backends {
    /// Adds (or replaces) the backend for `scheme`.
    pub fn register(&mut self, scheme: &'static str, open: Opener) -> &mut Self {
        self.schemes.retain(|(s, _)| *s != scheme);
        self.schemes.push((scheme, open));
        self
    }

    /// The schemes known, in registration order.
    pub fn schemes(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.schemes.iter().map(|(s, _)| *s)
    }

    /// Opens the backend `url`'s scheme names: a path (no `scheme://`)
    /// and `sqlite:…` forms open SQLite; an unknown scheme is
    /// [`StoreError::UnknownScheme`], never a file named like the URL.
    pub fn open(&self, url: &str, access: Access) -> Result<Box<dyn Backend>> {
        let Some((scheme, _)) = url.split_once("://") else {
            let open = match url.split_once(':') {
                // `sqlite::memory:` and `sqlite:path`.
                Some((s, _)) => self.opener(s).unwrap_or(self.paths),
                None => self.paths,
            };
            return open(url, access);
        };
        match self.opener(scheme) {
            Some(open) => open(url, access),
            None => Err(StoreError::UnknownScheme {
                scheme: scheme.to_owned(),
                url: convo_core::url::redact(url),
            }),
        }
    }

    fn opener(&self, scheme: &str) -> Option<Opener> {
        self.schemes
            .iter()
            .find(|(s, _)| *s == scheme)
            .map(|(_, o)| *o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_schemes_are_refused_with_the_url_redacted() {
        let e = Backends::default()
            .open("mysql://u:pw@h/db", Access::Read)
            .err()
            .unwrap();
        let s = e.to_string();
        assert!(s.contains("mysql"), "{s}");
        assert!(!s.contains("pw"), "{s}");
    }

    #[test]
    fn a_registered_scheme_opens_through_its_opener() {
        fn refuse(url: &str, _: Access) -> Result<Box<dyn Backend>> {
            Err(StoreError::Invalid(format!("opened {url}").into()))
        }
        let mut b = Backends::default();
        b.register("test", refuse);
        let e = b.open("test://x", Access::Read).err().unwrap();
        assert!(e.to_string().contains("opened test://x"), "{e}");
        assert!(b.schemes().any(|s| s == "test"));
        // A path is still SQLite.
        assert!(b.open("sqlite::memory:", Access::Write).is_ok());
    }
}
