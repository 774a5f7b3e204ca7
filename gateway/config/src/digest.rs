//! A digest of who may use a gateway and how: fleet members compare theirs before one hands
//! another a client's request, since each member applies its own `[gateway.auth]` and
//! `[gateway.http]`.

use sha2::{Digest, Sha256};

use super::GatewaySettings;

impl GatewaySettings {
    /// SHA-256, in hex, of `[gateway.auth]` and `[gateway.http]` as this gateway applies
    /// them: equal for members that admit the same clients with the same grants and limits.
    /// Tokens enter it only as their own SHA-256, so the digest shows none of them.
    pub fn access_digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(format!("{:?}\n", self.http));
        for client in &self.auth.clients {
            let token = hex(&Sha256::digest(client.token.expose()));
            hasher.update(format!(
                "client {:?} {token} {:?}\n",
                client.name, client.grant
            ));
        }
        hasher.update(format!("{:?}\n", self.auth.oauth));
        hex(&hasher.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn digest(toml: &str) -> String {
        let config = Config::parse(
            std::path::Path::new("wardgate.toml"),
            &format!("{toml}\n[servers.s]\ncommand = \"true\"\n"),
            &|name: &str| (name == "TOKEN").then(|| "a-token-value-0123456789".to_owned()),
        )
        .unwrap();
        config.gateway.access_digest()
    }

    #[test]
    fn members_with_other_clients_grants_or_limits_differ() {
        let open = digest("");
        let with_client = "[gateway.auth.clients.a]\ntoken = \"${TOKEN}\"\n";
        let granted = "[gateway.auth.clients.a]\ntoken = \"${TOKEN}\"\nallow = [\"s\"]\n";
        let limited = "[gateway.http]\nrate_limit = 7\n";
        let all = [
            open.clone(),
            digest(with_client),
            digest(granted),
            digest(limited),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(digest(with_client), digest(with_client));
        assert!(!digest(with_client).contains("a-token-value-0123456789"));
    }
}
