//! What the log must never show, and the masking every log line passes through.
//!
//! Every configured secret registers itself here as it is made: each [`Secret`] (a server's
//! `env` and `headers` values, client tokens, OAuth client secrets, the fleet's database
//! URL), each `${VAR}` value substituted into a server's URL or arguments, and the admin
//! token. The logging writer (the CLI's) passes every formatted line through [`mask`], which
//! replaces those values, and the credentials and query strings of any URL, with `***`:
//! whatever crate logs, at whatever level, in text or JSON.
//!
//! [`Secret`]: crate::Secret

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::{OnceLock, RwLock};

/// Values shorter than this are not masked: "1" or "true" would blot out ordinary text.
pub const SHORTEST: usize = 4;

/// At most this many values are kept (a config reloaded many times keeps the first ones).
const MOST: usize = 4096;

fn known() -> &'static RwLock<BTreeSet<String>> {
    static KNOWN: OnceLock<RwLock<BTreeSet<String>>> = OnceLock::new();
    KNOWN.get_or_init(RwLock::default)
}

/// Mask `value` in every log line from now on (and its JSON-escaped form).
pub fn remember(value: &str) {
    if value.len() < SHORTEST {
        return;
    }
    let escaped = serde_json::to_string(value).unwrap_or_default();
    let escaped = escaped
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_default();
    let mut known = wardgate_policy::lock::write(known());
    for form in [value, escaped] {
        if form.len() >= SHORTEST && known.len() < MOST && !known.contains(form) {
            known.insert(form.to_owned());
        }
    }
}

/// `text` with every remembered value, and each URL's credentials and query, as `***`.
pub fn mask(text: &str) -> Cow<'_, str> {
    let mut masked = Cow::Borrowed(text);
    {
        let known = wardgate_policy::lock::read(known());
        // Longest first, so a value that contains another is masked whole.
        let mut values: Vec<&String> = known
            .iter()
            .filter(|value| masked.contains(value.as_str()))
            .collect();
        values.sort_by_key(|value| std::cmp::Reverse(value.len()));
        for value in values {
            if masked.contains(value.as_str()) {
                masked = Cow::Owned(masked.replace(value.as_str(), "***"));
            }
        }
    }
    match mask_urls(&masked) {
        Cow::Borrowed(_) => masked,
        Cow::Owned(urls) => Cow::Owned(urls),
    }
}

/// Each `scheme://user:password@host/path?query` in `text` as `scheme://***@host/path?***`.
fn mask_urls(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        // The URL runs to the first character that cannot be in one unescaped.
        let end = after
            .find(|c: char| c.is_whitespace() || "\"'<>`\\{}|^)".contains(c))
            .unwrap_or(after.len());
        let url = &after[..end];
        let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let (authority, path) = url.split_at(authority_end);
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&authority[at..]);
                changed = true;
            }
            None => out.push_str(authority),
        }
        match path.find('?') {
            Some(query) => {
                out.push_str(&path[..query]);
                out.push_str("?***");
                changed = true;
            }
            None => out.push_str(path),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_and_queries_are_masked() {
        let line = r#"error sending request for url (https://api.example.com/mcp?api_key=sk-SECRET-123&x=1): connection refused"#;
        assert_eq!(
            mask(line),
            "error sending request for url (https://api.example.com/mcp?***): connection refused"
        );
        assert_eq!(
            mask("db at postgres://app:hunter2@db:5432/app?sslmode=require, retrying"),
            "db at postgres://***@db:5432/app?*** retrying"
        );
        assert_eq!(
            mask(r#"{"url":"http://u:p@h/x?t=1"}"#),
            r#"{"url":"http://***@h/x?***"}"#
        );
        let plain = "nothing here: http://127.0.0.1:8080/mcp and a://b";
        assert!(matches!(mask(plain), Cow::Borrowed(_)));
    }

    #[test]
    fn remembered_values_are_masked_longest_first_and_json_escaped_too() {
        remember("tok-\"quoted\"-SECRET");
        remember("abcdEFGH-1");
        remember("abcdEFGH-123456");
        remember("no");
        assert_eq!(mask("a abcdEFGH-123456 b"), "a *** b");
        assert_eq!(mask("a abcdEFGH-1 b"), "a *** b");
        assert_eq!(mask(r#"{"v":"tok-\"quoted\"-SECRET"}"#), r#"{"v":"***"}"#);
        assert_eq!(mask("no, not masked"), "no, not masked");
    }
}
