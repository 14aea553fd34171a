//! API keys: a file of `KEY ROLE` lines (`read` for queries, `admin` for
//! set management too) and the same entries in `LOCUS_API_KEYS` (comma-
//! or newline-separated; both together are their union), checked on every route but the probes. Clients
//! send `Authorization: Bearer KEY`; a missing or unknown key is 401, a
//! read key on an admin route 403. A presented key is compared with every
//! configured key in time that does not depend on where they differ.
//!
//! Imports: `super::app`.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::app::Failure;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Queries, the set list, the metrics.
    Read,
    /// Also `PUT` and `DELETE /v1/sets/{name}`.
    Admin,
}

/// The configured keys (none: no authentication).
#[derive(Debug, Default, Clone)]
pub struct Keys(Vec<(Vec<u8>, Role)>);

/// Shortest key accepted (bytes).
const MIN_KEY: usize = 16;

impl Keys {
    /// Parses a keys file's text: one `KEY ROLE` per line; blank lines
    /// and `#` comments skipped.
    pub fn parse(text: &str) -> Result<Keys, String> {
        Keys::parse_entries(text.lines(), "line")
    }

    /// Parses `LOCUS_API_KEYS`: `KEY ROLE` entries separated by commas
    /// or newlines (so a key given there holds no comma).
    pub fn parse_env(text: &str) -> Result<Keys, String> {
        Keys::parse_entries(text.split([',', '\n']), "entry")
    }

    /// `KEY ROLE` entries (`#` comments, blank ones skipped); `unit`
    /// names an entry in errors.
    fn parse_entries<'a>(
        entries: impl Iterator<Item = &'a str>,
        unit: &str,
    ) -> Result<Keys, String> {
        let mut keys = Keys::default();
        for (i, line) in entries.enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |m: String| format!("{unit} {}: {m}", i + 1);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [key, role] = fields.as_slice() else {
                return Err(at("write `KEY ROLE` (ROLE: read or admin)".into()));
            };
            let role = match *role {
                "read" => Role::Read,
                "admin" => Role::Admin,
                r => return Err(at(format!("role {r:?}: read or admin"))),
            };
            if key.len() < MIN_KEY || !key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(at(format!(
                    "a key is at least {MIN_KEY} printable characters without spaces"
                )));
            }
            keys.add(key.as_bytes(), role).map_err(at)?;
        }
        if keys.0.is_empty() {
            return Err(format!("no key (no `KEY ROLE` {unit})"));
        }
        Ok(keys)
    }

    /// Adds a key; a key listed twice is an error (even with one role).
    fn add(&mut self, key: &[u8], role: Role) -> Result<(), String> {
        if self.0.iter().any(|(k, _)| k == key) {
            return Err("this key is listed twice".into());
        }
        self.0.push((key.to_vec(), role));
        Ok(())
    }

    /// The keys of both: a key in both is an error, whatever its roles.
    pub fn union(mut self, other: Keys) -> Result<Keys, String> {
        for (k, role) in other.0 {
            self.add(&k, role).map_err(|_| {
                "a key is listed both in the file and in LOCUS_API_KEYS".to_string()
            })?;
        }
        Ok(self)
    }

    /// The keys of `--api-keys FILE` and of `LOCUS_API_KEYS` (its value
    /// `env`), together. `LOCUS_API_KEYS` set but holding no key is an
    /// error, not a service without keys.
    pub fn configured(file: Option<&Path>, env: Option<&str>) -> Result<Keys, String> {
        let from_file = match file {
            Some(p) => Keys::load(p).map_err(|e| format!("--api-keys {e}"))?,
            None => Keys::default(),
        };
        let Some(env) = env else {
            return Ok(from_file);
        };
        let from_env = Keys::parse_env(env).map_err(|e| format!("LOCUS_API_KEYS: {e}"))?;
        from_file.union(from_env)
    }

    /// Reads a keys file.
    pub fn load(path: &Path) -> Result<Keys, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Keys::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether any key is configured.
    pub fn enabled(&self) -> bool {
        !self.0.is_empty()
    }

    /// The role of `presented`, comparing it with every key (no early exit).
    pub fn role(&self, presented: &[u8]) -> Option<Role> {
        let mut found = None;
        for (k, role) in &self.0 {
            if constant_time_eq(k, presented) {
                found = Some(*role);
            }
        }
        found
    }
}

/// Equality whose time depends on the lengths only, not on the contents.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// The role a request needs: none for the probes, admin to change sets.
fn needed(method: &Method, path: &str) -> Option<Role> {
    if matches!(path, "/livez" | "/readyz" | "/openapi.json") {
        return None;
    }
    if is_set_route(path) && matches!(*method, Method::PUT | Method::DELETE) {
        Some(Role::Admin)
    } else {
        Some(Role::Read)
    }
}

/// Whether `path` names one set (`/v1/sets/{name}`): the route uploads go to.
pub fn is_set_route(path: &str) -> bool {
    path.strip_prefix("/v1/sets/")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// The key of an `Authorization: Bearer KEY` value (the scheme in any case).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, key) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(key.trim())
}

/// The layer that checks the key of every request (before its body is read).
pub async fn require(State(keys): State<Arc<Keys>>, req: Request, next: Next) -> Response {
    if !keys.enabled() {
        return next.run(req).await;
    }
    let Some(need) = needed(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let role = presented.and_then(|k| keys.role(k.as_bytes()));
    // A refused request's body is never read: the connection is closed
    // after the answer, and the answer says so.
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    let mut refusal = match role {
        Some(r) if r >= need => return next.run(req).await,
        Some(_) => Failure(
            StatusCode::FORBIDDEN,
            "this key may only query: changing sets needs an admin key".into(),
        )
        .into_response(),
        None => {
            let msg = if presented.is_some() {
                "unknown API key"
            } else {
                "missing API key: send Authorization: Bearer KEY"
            };
            let mut r = Failure(StatusCode::UNAUTHORIZED, msg.into()).into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
    };
    if has_body {
        refusal
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    refusal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_parse_and_roles_are_checked() {
        let k =
            Keys::parse("# keys\nreader-key-0123456789 read\n\nadmin-key-0123456789 admin # ops\n")
                .unwrap();
        assert_eq!(k.role(b"reader-key-0123456789"), Some(Role::Read));
        assert_eq!(k.role(b"admin-key-0123456789"), Some(Role::Admin));
        assert_eq!(k.role(b"admin-key-012345678"), None);
        assert_eq!(k.role(b""), None);
        for bad in [
            "",
            "short read",
            "reader-key-0123456789 write",
            "a-long-enough-key-1 read extra",
            "reader-key-0123456789 read\nreader-key-0123456789 admin",
        ] {
            assert!(Keys::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_from_the_environment_join_those_of_the_file() {
        let k =
            Keys::parse_env("reader-key-0123456789 read, admin-key-0123456789 admin\n").unwrap();
        assert_eq!(k.role(b"reader-key-0123456789"), Some(Role::Read));
        assert_eq!(k.role(b"admin-key-0123456789"), Some(Role::Admin));
        for bad in ["", " , \n", "reader-key-0123456789", "short read, x admin"] {
            assert!(Keys::parse_env(bad).is_err(), "{bad:?}");
        }
        let file = Keys::parse("file-key-0123456789 admin").unwrap();
        let both = file.clone().union(k).unwrap();
        assert_eq!(both.role(b"file-key-0123456789"), Some(Role::Admin));
        assert_eq!(both.role(b"reader-key-0123456789"), Some(Role::Read));
        let twice = Keys::parse_env("file-key-0123456789 read").unwrap();
        assert!(file.union(twice).is_err());
        let e = Keys::configured(None, Some("")).unwrap_err();
        assert!(e.starts_with("LOCUS_API_KEYS"), "{e}");
        assert!(!Keys::configured(None, None).unwrap().enabled());
    }

    #[test]
    fn admin_routes_are_the_set_changes() {
        assert_eq!(needed(&Method::PUT, "/v1/sets/a"), Some(Role::Admin));
        assert_eq!(needed(&Method::DELETE, "/v1/sets/a"), Some(Role::Admin));
        assert_eq!(needed(&Method::GET, "/v1/sets/a"), Some(Role::Read));
        assert_eq!(needed(&Method::POST, "/v1/sets/a/knn"), Some(Role::Read));
        assert_eq!(needed(&Method::GET, "/metrics"), Some(Role::Read));
        assert_eq!(needed(&Method::GET, "/readyz"), None);
        assert_eq!(needed(&Method::GET, "/openapi.json"), None);
        assert!(constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert_eq!(bearer("bearer k"), Some("k"));
        assert_eq!(bearer("Basic k"), None);
    }
}
