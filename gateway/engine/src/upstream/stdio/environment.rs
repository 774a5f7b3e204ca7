//! What a stdio server's process starts with: a minimal part of the gateway's environment,
//! without the gateway's own settings or package managers' credentials, then its `env`.

use super::StdioCommand;

/// What a server process inherits from the gateway's environment without `inherit_env`:
/// what finding and running programs needs (`npx`, `uvx`, a shell script), the locale, and
/// how to reach the network (proxies, CA bundles). Secrets the gateway was given in its own
/// environment (an admin token, a database URL, other servers' tokens) stay with it.
const INHERITED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "TZ",
    "TERM",
    "LANG",
    "LANGUAGE",
    "SYSTEMROOT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "NVM_DIR",
    "VOLTA_HOME",
    "PNPM_HOME",
    "PYENV_ROOT",
    "CARGO_HOME",
    "RUSTUP_HOME",
];

/// Prefixes of inherited variables: the locale, XDG directories, npm's and uv's settings.
const INHERITED_PREFIXES: &[&str] = &["LC_", "XDG_", "npm_config_", "NPM_CONFIG_", "UV_"];

/// The gateway's own settings (`WARDGATE_ADMIN_TOKEN`, ...), never passed on, not even
/// with `inherit_env`.
const GATEWAY_PREFIX: &str = "WARDGATE_";

/// npm's tokens outside its config (`.npmrc` files read them as `${NPM_TOKEN}`).
const NPM_CREDENTIALS: &[&str] = &["NPM_TOKEN", "NODE_AUTH_TOKEN"];

/// Words that make a uv, pip or cargo setting a credential: `UV_PUBLISH_TOKEN`,
/// `UV_INDEX_{NAME}_PASSWORD`, `PIP_CLIENT_CERT`, `CARGO_REGISTRIES_{NAME}_TOKEN`,
/// `CARGO_REGISTRY_CREDENTIAL_PROVIDER`, ...
const CREDENTIAL_WORDS: &[&str] = &["TOKEN", "PASSWORD", "USERNAME", "CREDENTIAL", "CLIENT_CERT"];

/// npm settings (`npm_config_KEY`, in any case) that are credentials besides the private
/// `_KEY`s (`_auth`, `_authToken`, `_password`) and the per-registry `//HOST/:KEY`s.
const NPM_CREDENTIAL_KEYS: &[&str] = &[
    "username", "password", "otp", "cert", "certfile", "key", "keyfile",
];

/// Whether a variable is a credential of npm, uv, pip or cargo (the README lists them), or
/// a setting of theirs whose value is a URL with a user in it (an index or registry such
/// as `https://user:secret@pypi.example/simple`). Without `inherit_env` it is never
/// inherited; a server's `env` may still name it.
fn carries_credentials(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let credential_name = if let Some(key) = upper.strip_prefix("NPM_CONFIG_") {
        let key = key.to_ascii_lowercase();
        key.starts_with('_')
            || key.starts_with("//")
            || NPM_CREDENTIAL_KEYS.contains(&key.replace('_', "-").as_str())
    } else if ["UV_", "PIP_", "CARGO_"]
        .iter()
        .any(|prefix| upper.starts_with(prefix))
    {
        CREDENTIAL_WORDS.iter().any(|word| upper.contains(word))
    } else {
        return NPM_CREDENTIALS.contains(&upper.as_str());
    };
    credential_name || has_url_user_info(value)
}

/// Whether any URL in `value` (which may hold several, as uv's `UV_INDEX` does) names a
/// user, with or without a password: `scheme://user:password@host/...`.
fn has_url_user_info(value: &str) -> bool {
    value.split("://").skip(1).any(|rest| {
        let authority = rest
            .split(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        authority.contains('@')
    })
}

/// The environment a server process starts with: the inherited part of `gateway_env`
/// (all of it with `inherit_env`, less the gateway's own settings), then the server's `env`.
pub fn child_env(
    gateway_env: impl Iterator<Item = (String, String)>,
    command: &StdioCommand,
) -> Vec<(String, String)> {
    let inherited = |name: &str, value: &str| {
        !name.starts_with(GATEWAY_PREFIX)
            && (command.inherit_env
                || (INHERITED.contains(&name)
                    || INHERITED_PREFIXES
                        .iter()
                        .any(|prefix| name.starts_with(prefix)))
                    && !carries_credentials(name, value))
    };
    let mut env: Vec<(String, String)> = gateway_env
        .filter(|(name, value)| inherited(name, value))
        .collect();
    env.extend(command.env.iter().cloned());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(inherit_env: bool, env: &[(&str, &str)]) -> StdioCommand {
        StdioCommand {
            command: "server".into(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            inherit_env,
            cwd: None,
        }
    }

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(name, _)| name.as_str()).collect()
    }

    const PACKAGE_MANAGER_CREDENTIALS: &[(&str, &str)] = &[
        ("npm_config__authToken", "npm-secret"),
        ("NPM_CONFIG__AUTH", "dXNlcjpwYXNz"),
        ("npm_config__password", "cGFzcw=="),
        ("npm_config_//registry.example/:_authToken", "npm-secret"),
        ("npm_config_username", "me"),
        ("npm_config_keyfile", "/home/me/client.key"),
        ("npm_config_registry", "https://me:secret@registry.example/"),
        ("NPM_TOKEN", "npm-secret"),
        ("NODE_AUTH_TOKEN", "npm-secret"),
        ("UV_PUBLISH_TOKEN", "pypi-secret"),
        ("UV_PUBLISH_PASSWORD", "secret"),
        ("UV_INDEX_PRIVATE_USERNAME", "me"),
        ("UV_INDEX_PRIVATE_PASSWORD", "secret"),
        ("UV_GITHUB_TOKEN", "ghp-secret"),
        ("UV_INDEX", "private=https://me:secret@pypi.example/simple"),
        ("UV_DEFAULT_INDEX", "https://token@pypi.example/simple"),
        ("PIP_INDEX_URL", "https://me:secret@pypi.example/simple"),
        ("PIP_CLIENT_CERT", "/home/me/client.pem"),
        ("CARGO_REGISTRY_TOKEN", "cargo-secret"),
        ("CARGO_REGISTRIES_PRIVATE_TOKEN", "cargo-secret"),
        (
            "CARGO_REGISTRIES_PRIVATE_CREDENTIAL_PROVIDER",
            "cargo:token",
        ),
    ];

    #[test]
    fn package_manager_credentials_are_not_inherited_but_their_settings_are() {
        let settings = [
            ("npm_config_registry", "https://registry.example/"),
            ("npm_config_cache", "/tmp/npm"),
            ("UV_INDEX", "private=https://pypi.example/simple"),
            ("UV_CACHE_DIR", "/tmp/uv"),
            ("CARGO_HOME", "/home/me/.cargo"),
        ];
        let gateway_env = || {
            PACKAGE_MANAGER_CREDENTIALS
                .iter()
                .chain(&settings)
                .map(|(name, value)| (name.to_string(), value.to_string()))
        };
        let minimal = child_env(gateway_env(), &command(false, &[]));
        let expected: Vec<&str> = settings.iter().map(|(name, _)| *name).collect();
        assert_eq!(names(&minimal), expected);

        let everything = child_env(gateway_env(), &command(true, &[]));
        assert_eq!(
            everything.len(),
            PACKAGE_MANAGER_CREDENTIALS.len() + settings.len()
        );

        let named = child_env(
            gateway_env(),
            &command(false, &[("UV_PUBLISH_TOKEN", "pypi-secret")]),
        );
        assert!(named.contains(&("UV_PUBLISH_TOKEN".into(), "pypi-secret".into())));
    }
}
