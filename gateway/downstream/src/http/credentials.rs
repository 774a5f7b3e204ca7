//! Reading credentials and hosts from HTTP headers, shared by `/mcp` and the admin API.

use subtle::ConstantTimeEq;

/// The credentials of `Authorization: Bearer TOKEN`; the scheme is case-insensitive
/// (RFC 9110 §11.1).
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// Constant-time for equal lengths; a length mismatch fails early, which tells an attacker
/// the length at most.
pub fn same(presented: &str, token: &str) -> bool {
    presented.len() == token.len() && bool::from(presented.as_bytes().ct_eq(token.as_bytes()))
}

/// `host:port` → `host`, keeping IPv6 brackets.
pub fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_is_stripped_keeping_ipv6_brackets() {
        assert_eq!(strip_port("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(strip_port("localhost"), "localhost");
        assert_eq!(strip_port("[::1]:9"), "[::1]");
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(same("secret", "secret"));
        assert!(!same("secreT", "secret"));
        assert!(!same("secret2", "secret"));
    }
}
