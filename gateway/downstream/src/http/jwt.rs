//! OAuth 2.1 access tokens as the MCP authorization spec has a resource server check them:
//! JWTs signed with one of the issuer's published keys (JWKS), for this gateway's resource
//! (`aud`), from the configured issuer (`iss`), not expired. The keys are fetched once and
//! again when a token names a key the gateway has not seen (the issuer rotated its keys),
//! at most once a second, one fetch at a time.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use tokio::time::Instant;

use wardgate_engine::config::OAuthSettings;
use wardgate_engine::lock::{read, write};

/// The least time between two fetches of the keys.
const REFETCH_AFTER: Duration = Duration::from_secs(1);
/// Keys older than this are fetched again in the background, so a key the issuer withdrew
/// stops being trusted (and tokens it verified are checked again) within this time.
const KEYS_MAX_AGE: Duration = Duration::from_secs(600);
/// A fetch of metadata or keys that takes longer fails.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 30;
/// Signature algorithms accepted; never `none` or a shared-secret HMAC.
const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Tokens already verified, kept until they expire: a client sends the same token with
/// every request, and a signature check costs more than the rest of a small call. At most
/// this many; when full, the cache starts over.
const VERIFIED_CAPACITY: usize = 4096;

/// What a valid token says about its client.
#[derive(Debug, Clone)]
pub struct Claims {
    pub holder: Holder,
    pub scopes: Vec<String>,
}

/// Whom a token speaks for. Issuers differ on client-credentials tokens: some name the
/// client in `sub`, some leave `sub` out or empty; such a token is its client's, under a
/// kind of its own, so it is never taken for a user whose `sub` happens to be that client's
/// id, and tokens without `sub` of different clients are never one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A non-empty `sub` (a user, or a client the issuer names there), through `client`
    /// when the token names one.
    Subject {
        issuer: String,
        subject: String,
        client: Option<String>,
    },
    /// No `sub`, or an empty one: the client on its own behalf.
    Client { issuer: String, client: String },
}

impl Holder {
    /// From a token's claims (absent and empty are alike); `None` when it names neither a
    /// subject nor a client, so nothing tells whose it is.
    fn new(issuer: &str, subject: Option<&str>, client: Option<&str>) -> Option<Holder> {
        let issuer = issuer.trim_end_matches('/').to_owned();
        let subject = subject.filter(|subject| !subject.is_empty());
        let client = client
            .filter(|client| !client.is_empty())
            .map(str::to_owned);
        match (subject, client) {
            (Some(subject), client) => Some(Holder::Subject {
                issuer,
                subject: subject.to_owned(),
                client,
            }),
            (None, Some(client)) => Some(Holder::Client { issuer, client }),
            (None, None) => None,
        }
    }

    /// What the gateway calls it: the client, else the subject.
    pub fn name(&self) -> &str {
        match self {
            Holder::Subject {
                client: Some(client),
                ..
            }
            | Holder::Client { client, .. } => client,
            Holder::Subject { subject, .. } => subject,
        }
    }

    /// Its `Identity::key`: `oauth:["ISSUER","SUB","CLIENT"]` (`null` for no client) or
    /// `oauth-client:["ISSUER","CLIENT"]`. The parts are JSON strings, so no claim's text can
    /// pass for a separator and make two holders one.
    pub fn key(&self) -> String {
        match self {
            Holder::Subject {
                issuer,
                subject,
                client,
            } => format!("oauth:{}", serde_json::json!([issuer, subject, client])),
            Holder::Client { issuer, client } => {
                format!("oauth-client:{}", serde_json::json!([issuer, client]))
            }
        }
    }
}

#[derive(Debug)]
pub enum JwtError {
    /// The token is not acceptable (401): the reason, never the token.
    Invalid(String),
    /// The issuer's keys cannot be had (503).
    Unavailable(String),
}

pub struct JwtVerifier {
    inner: Arc<Inner>,
}

struct Inner {
    settings: OAuthSettings,
    http: reqwest::Client,
    keys: RwLock<Keys>,
    /// Token → its claims and `exp` (seconds since the epoch); emptied when the keys change.
    verified: std::sync::Mutex<HashMap<Box<str>, (Claims, u64)>>,
    /// One fetch at a time; a request that waited for another's fetch looks again first.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Keys {
    by_id: HashMap<String, (DecodingKey, Option<Algorithm>)>,
    /// A key without `kid`, usable when it is the only one.
    unnamed: Vec<(DecodingKey, Option<Algorithm>)>,
    fetched_at: Option<Instant>,
    /// The last fetch tried, and how it went.
    attempt: Option<(Instant, Result<(), String>)>,
    /// From the config, or found in the issuer's metadata.
    jwks_url: Option<String>,
}

impl JwtVerifier {
    pub fn new(settings: OAuthSettings) -> JwtVerifier {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(wardgate_engine::upstream::same_origin_redirects())
            .build()
            .unwrap_or_default();
        let keys = Keys {
            jwks_url: settings.jwks_url.clone(),
            ..Keys::default()
        };
        JwtVerifier {
            inner: Arc::new(Inner {
                settings,
                http,
                keys: RwLock::new(keys),
                verified: std::sync::Mutex::default(),
                fetching: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// A verifier that trusts the keys of `jwks` (a JWKS document) as if it had just
    /// fetched them. The gateway always fetches its keys; the fuzz targets
    /// (`wardgate_engine::fuzzing`) check tokens without a network.
    pub fn with_keys(settings: OAuthSettings, jwks: &[u8]) -> Result<JwtVerifier, String> {
        let set: JwkSet = serde_json::from_slice(jwks)
            .map_err(|error| format!("not a JWKS document: {error}"))?;
        let verifier = JwtVerifier::new(settings);
        let now = Instant::now();
        *write(&verifier.inner.keys) = Keys {
            jwks_url: verifier.inner.settings.jwks_url.clone(),
            fetched_at: Some(now),
            attempt: Some((now, Ok(()))),
            ..Keys::of(&set)
        };
        Ok(verifier)
    }

    /// Fetch the keys in the background.
    pub fn warm_up(&self) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            if let Err(error) = inner.fetch(None).await {
                tracing::warn!(issuer = %inner.settings.issuer, "could not fetch the issuer's keys yet: {error}");
            }
        });
    }

    pub async fn verify(&self, token: &str) -> Result<Claims, JwtError> {
        let fetched_at = read(&self.inner.keys).fetched_at;
        if fetched_at.is_some_and(|at| at.elapsed() > KEYS_MAX_AGE) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                if let Err(error) = inner.fetch(fetched_at).await {
                    tracing::warn!(issuer = %inner.settings.issuer, "could not fetch the issuer's keys again; keeping the ones it published before: {error}");
                }
            });
        }
        let now = jsonwebtoken::get_current_timestamp();
        if let Some((claims, exp)) = wardgate_engine::lock::lock(&self.inner.verified).get(token) {
            if now < *exp {
                return Ok(claims.clone());
            }
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| JwtError::Invalid("it is not a JWT".to_owned()))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(JwtError::Invalid(format!(
                "it is signed with {:?}, which this gateway does not accept (only public-key signatures)",
                header.alg
            )));
        }
        let kid = header.kid.as_deref();
        let key = match self.inner.key(kid) {
            Some(key) => key,
            None => {
                let seen = read(&self.inner.keys).fetched_at;
                self.inner
                    .fetch(seen)
                    .await
                    .map_err(JwtError::Unavailable)?;
                self.inner.key(kid).ok_or_else(|| {
                    JwtError::Invalid(match kid {
                        Some(kid) => format!(
                            "it is signed with a key the issuer does not publish (kid {:?})",
                            wardgate_engine::log_text::Untrusted(kid).to_string()
                        ),
                        None => "it names no key (kid) and the issuer publishes several".to_owned(),
                    })
                })?
            }
        };
        let (key, key_alg) = key;
        if key_alg.is_some_and(|alg| alg != header.alg) {
            return Err(JwtError::Invalid(
                "its algorithm is not the one its key is for".to_owned(),
            ));
        }
        let settings = &self.inner.settings;
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&[
            settings.issuer.as_str(),
            settings.issuer.trim_end_matches('/'),
        ]);
        validation.set_audience(&[settings.resource.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key,
            &validation,
        )
        .map_err(|error| JwtError::Invalid(reason(&error)))?;
        let text = |name: &str| {
            data.claims
                .get(name)
                .and_then(|value| value.as_str())
                .filter(|text| !text.is_empty())
        };
        let client = text(&settings.client_claim).or_else(|| text("azp"));
        let holder = Holder::new(&settings.issuer, text("sub"), client).ok_or_else(|| {
            JwtError::Invalid(format!(
                "it names neither a subject (\"sub\") nor a client ({:?} or \"azp\"), so whose it is cannot be told; issue it with one of them",
                settings.client_claim
            ))
        })?;
        // `scope` is a space-separated string (RFC 9068); some issuers send `scp`, a list.
        let scopes = match data.claims.get("scope").or_else(|| data.claims.get("scp")) {
            Some(serde_json::Value::String(scopes)) => {
                scopes.split_whitespace().map(str::to_owned).collect()
            }
            Some(serde_json::Value::Array(scopes)) => scopes
                .iter()
                .filter_map(|scope| scope.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        let claims = Claims { holder, scopes };
        if let Some(exp) = data.claims.get("exp").and_then(serde_json::Value::as_u64) {
            let mut verified = wardgate_engine::lock::lock(&self.inner.verified);
            if verified.len() >= VERIFIED_CAPACITY {
                verified.clear();
            }
            verified.insert(token.into(), (claims.clone(), exp));
        }
        Ok(claims)
    }
}

impl Keys {
    /// The keys of `set` this gateway can use; others (unknown kinds, bad encodings) are
    /// left out.
    fn of(set: &JwkSet) -> Keys {
        let mut keys = Keys::default();
        for jwk in &set.keys {
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|alg| Algorithm::try_from(alg).ok());
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_id.insert(kid.clone(), (key, alg));
                }
                None => keys.unnamed.push((key, alg)),
            }
        }
        keys
    }
}

impl Inner {
    fn key(&self, kid: Option<&str>) -> Option<(DecodingKey, Option<Algorithm>)> {
        let keys = read(&self.keys);
        match kid {
            Some(kid) => keys.by_id.get(kid).cloned(),
            None if keys.by_id.len() + keys.unnamed.len() == 1 => keys
                .unnamed
                .first()
                .or_else(|| keys.by_id.values().next())
                .cloned(),
            None => None,
        }
    }

    /// Fetch the keys, unless a fetch succeeded since `seen` (another request fetched them
    /// while this one waited) or one was tried less than [`REFETCH_AFTER`] ago (then its
    /// outcome is this one's): tokens naming unknown keys cannot make the gateway hammer
    /// the issuer, nor queue behind fetches of an issuer that is down.
    async fn fetch(&self, seen: Option<Instant>) -> Result<(), String> {
        let _one_at_a_time = self.fetching.lock().await;
        let (fetched_at, attempt, jwks_url) = {
            let keys = read(&self.keys);
            (keys.fetched_at, keys.attempt.clone(), keys.jwks_url.clone())
        };
        if fetched_at.is_some() && fetched_at != seen {
            return Ok(());
        }
        if let Some((at, outcome)) = attempt {
            if at.elapsed() < REFETCH_AFTER {
                return outcome;
            }
        }
        let outcome = self.fetch_now(jwks_url).await;
        let mut keys = write(&self.keys);
        match outcome {
            Ok(fresh) => {
                *keys = fresh;
                // A token checked with a key the issuer no longer publishes is checked again.
                wardgate_engine::lock::lock(&self.verified).clear();
                keys.attempt = Some((Instant::now(), Ok(())));
                Ok(())
            }
            Err(error) => {
                keys.attempt = Some((Instant::now(), Err(error.clone())));
                Err(error)
            }
        }
    }

    async fn fetch_now(&self, jwks_url: Option<String>) -> Result<Keys, String> {
        let jwks_url = match jwks_url {
            Some(url) => url,
            None => self.discover().await?,
        };
        let set: JwkSet = self.get_json(&jwks_url).await?;
        let fresh = Keys {
            jwks_url: Some(jwks_url),
            fetched_at: Some(Instant::now()),
            ..Keys::of(&set)
        };
        tracing::debug!(
            keys = fresh.by_id.len() + fresh.unnamed.len(),
            "fetched the issuer's keys"
        );
        Ok(fresh)
    }

    /// `jwks_uri` from the issuer's metadata: OAuth (RFC 8414), else OpenID Connect.
    async fn discover(&self) -> Result<String, String> {
        let issuer = self.settings.issuer.trim_end_matches('/');
        let (origin, path) = match reqwest::Url::parse(issuer) {
            Ok(url) => (
                url.origin().ascii_serialization(),
                url.path().trim_end_matches('/').to_owned(),
            ),
            Err(_) => (issuer.to_owned(), String::new()),
        };
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{issuer}/.well-known/openid-configuration"),
        ];
        let mut last = String::new();
        for url in &candidates {
            match self.get_json::<serde_json::Value>(url).await {
                Ok(metadata) => {
                    if let Some(jwks) = metadata.get("jwks_uri").and_then(|v| v.as_str()) {
                        return Ok(jwks.to_owned());
                    }
                    last = format!("the issuer's metadata at {url} names no jwks_uri");
                }
                Err(error) => last = error,
            }
        }
        Err(format!("{last}; set [gateway.auth.oauth] jwks_url"))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|error| {
                format!(
                    "could not fetch {url}: {}",
                    wardgate_engine::failure::error_chain_text(&error)
                )
            })?;
        if !response.status().is_success() {
            return Err(format!(
                "{url} answered HTTP {}",
                response.status().as_u16()
            ));
        }
        let body = response
            .bytes()
            .await
            .map_err(|error| format!("could not read {url}: {error}"))?;
        if body.len() > 1024 * 1024 {
            return Err(format!("{url} answered more than 1 MiB"));
        }
        serde_json::from_slice(&body).map_err(|error| {
            format!("{url} answered something other than the expected JSON: {error}")
        })
    }
}

/// Why a token was refused, in words a client's developer can act on.
fn reason(error: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match error.kind() {
        ErrorKind::ExpiredSignature => "it has expired; get a new one".to_owned(),
        ErrorKind::ImmatureSignature => "it is not valid yet (nbf)".to_owned(),
        ErrorKind::InvalidIssuer => "it was issued by another issuer than the one this gateway trusts".to_owned(),
        ErrorKind::InvalidAudience => {
            "it is meant for another resource (aud); request it with resource set to this gateway's /mcp URL".to_owned()
        }
        ErrorKind::InvalidSignature => "its signature does not verify".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("it has no {claim:?} claim"),
        ErrorKind::InvalidAlgorithm => "its algorithm is not the one its key is for".to_owned(),
        _ => "it is malformed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUER: &str = "https://auth.example";

    fn key(subject: Option<&str>, client: Option<&str>) -> Option<String> {
        Holder::new(ISSUER, subject, client).map(|holder| holder.key())
    }

    #[test]
    fn a_token_without_sub_is_its_clients_never_a_users_of_that_name() {
        let service = key(None, Some("service")).unwrap();
        assert_eq!(
            service,
            r#"oauth-client:["https://auth.example","service"]"#
        );
        assert_eq!(key(Some(""), Some("service")).unwrap(), service);
        // A user whose `sub` is the client's id, through any client or none, is another.
        assert_ne!(key(Some("service"), Some("portal")).unwrap(), service);
        assert_ne!(key(Some("service"), None).unwrap(), service);
        assert_ne!(key(Some("service"), Some("service")).unwrap(), service);
    }

    #[test]
    fn tokens_without_sub_of_different_clients_are_different() {
        assert_ne!(
            key(Some(""), Some("agent-a")),
            key(Some(""), Some("agent-b"))
        );
        assert_ne!(key(None, Some("agent-a")), key(None, Some("agent-b")));
    }

    #[test]
    fn issuer_subject_and_client_all_count_and_cannot_be_forged_by_separators() {
        let alice = key(Some("alice"), Some("app")).unwrap();
        assert_eq!(alice, r#"oauth:["https://auth.example","alice","app"]"#);
        assert_ne!(key(Some("alice"), Some("other-app")).unwrap(), alice);
        assert_ne!(key(Some("alice"), None).unwrap(), alice);
        let elsewhere = Holder::new("https://other.example", Some("alice"), Some("app")).unwrap();
        assert_ne!(elsewhere.key(), alice);
        // An issuer's trailing slash is the same issuer.
        let slashed = Holder::new("https://auth.example/", Some("alice"), Some("app")).unwrap();
        assert_eq!(slashed.key(), alice);
        // Separators inside claims stay inside their part.
        assert_ne!(
            key(Some(r#"a","b"#), Some("c")),
            key(Some("a"), Some(r#"b","c"#))
        );
        assert_ne!(key(Some("a\",\"b"), None), key(Some("a"), Some("b")));
    }

    #[test]
    fn a_token_naming_neither_subject_nor_client_has_no_holder() {
        assert_eq!(key(None, None), None);
        assert_eq!(key(Some(""), Some("")), None);
    }

    #[test]
    fn the_name_is_the_client_else_the_subject() {
        let name = |subject, client| {
            Holder::new(ISSUER, subject, client)
                .unwrap()
                .name()
                .to_owned()
        };
        assert_eq!(name(Some("alice"), Some("app")), "app");
        assert_eq!(name(Some("alice"), None), "alice");
        assert_eq!(name(None, Some("service")), "service");
    }
}
