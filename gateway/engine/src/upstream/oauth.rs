//! Servers that sign in with OAuth (`[servers.NAME.oauth]`): where their tokens live, and
//! the HTTP client that sends, refreshes and — once per rejection — renews them.
//!
//! Why this file is long: the token file, the refreshing HTTP client and the metadata
//! fallback share one lock discipline and one file format, and are tested together.
//!
//! rmcp's `auth` module does the protocol: discovery from the server's 401 (Protected
//! Resource Metadata, then the authorization server's metadata), dynamic client
//! registration, the authorization code flow with PKCE and the `resource` indicator, and
//! refresh. What it does not do is used here instead of its `AuthClient`:
//! - **one refresh for many callers.** `AuthClient` refreshes once per 401, so N calls that
//!   meet a rejected token refresh N times. [`SignedIn::renew`] refreshes only when the
//!   token that was rejected is still the stored one; the others take the new token.
//! - **tokens on disk** ([`TokenFile`]): one JSON file per server, mode 0600, in a 0700
//!   directory under the state directory, written by rename so a reader never sees half.
//! - **the gateway's words.** A refresh the authorization server refuses fails the call with
//!   a reason that names the server and its sign-in command (`wardgate --config FILE auth
//!   login NAME`).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, CredentialStore, OAuthClientConfig,
    StoredCredentials,
};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde::{Deserialize, Serialize};

use crate::config::OAuthClient;

pub mod sign_in;

/// A URL's origin only: its path or query may carry a `${VAR}` the config expanded.
fn url_origin(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|url| url.origin().ascii_serialization())
        .unwrap_or_else(|_| "(an unreadable URL)".to_owned())
}

/// Where a server's tokens are kept: `STATE/oauth/NAME.json`.
pub fn token_dir() -> PathBuf {
    crate::state_dir().join("oauth")
}

/// One server's tokens on disk, for the URL they were obtained for.
#[derive(Debug, Clone)]
pub struct TokenFile {
    pub path: PathBuf,
    url: String,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    server: String,
    /// The server's URL at sign-in: tokens are bound to it (their audience).
    url: String,
    credentials: StoredCredentials,
}

impl TokenFile {
    pub fn new(server: &str, url: &str) -> TokenFile {
        TokenFile {
            path: token_dir().join(format!("{server}.json")),
            url: url.to_owned(),
        }
    }

    /// The stored credentials, when there are any for this URL.
    pub fn read(&self) -> Option<StoredCredentials> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let stored: OnDisk = serde_json::from_str(&text).ok()?;
        (stored.url == self.url).then_some(stored.credentials)
    }

    /// The access token stored now.
    pub fn access_token(&self) -> Option<String> {
        use oauth2::TokenResponse;
        let credentials = self.read()?;
        Some(
            credentials
                .token_response?
                .access_token()
                .secret()
                .to_owned(),
        )
    }

    /// What signing out revokes (RFC 7009): the refresh token, or the access token when
    /// there is none, with its `token_type_hint`.
    pub fn revocable(credentials: &StoredCredentials) -> Option<(String, &'static str)> {
        use oauth2::TokenResponse;
        let response = credentials.token_response.as_ref()?;
        Some(match response.refresh_token() {
            Some(refresh) => (refresh.secret().to_owned(), "refresh_token"),
            None => (response.access_token().secret().to_owned(), "access_token"),
        })
    }

    /// When the stored access token expires (as the token response said), and its scopes.
    pub fn expiry(&self) -> Option<(Option<SystemTime>, Vec<String>)> {
        use oauth2::TokenResponse;
        let credentials = self.read()?;
        let response = credentials.token_response.as_ref()?;
        let expires = match (response.expires_in(), credentials.token_received_at) {
            (Some(lifetime), Some(at)) => {
                Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(at) + lifetime)
            }
            _ => None,
        };
        Some((expires, credentials.granted_scopes.clone()))
    }

    fn write(&self, credentials: StoredCredentials) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let server = self
            .path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = serde_json::to_vec_pretty(&OnDisk {
            server,
            url: self.url.clone(),
            credentials,
        })?;
        let temporary = self
            .path
            .with_extension(format!("json.{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &self.path)
    }

    /// Where the scopes a server asked for beyond the token's (a 403 `insufficient_scope`
    /// challenge) wait for the next sign-in.
    fn wanted_path(&self) -> PathBuf {
        self.path.with_extension("wanted-scope")
    }

    /// Remember the scopes a server's `insufficient_scope` challenge named, for the next
    /// sign-in to ask for.
    pub fn want_scope(&self, scope: &str) {
        let scope = scope.split_whitespace().collect::<Vec<_>>().join(" ");
        if scope.is_empty() || self.wanted().join(" ") == scope {
            return;
        }
        tracing::warn!(
            "the server at {} asks for the OAuth scope \"{scope}\" (insufficient_scope); the next sign-in asks for it",
            url_origin(&self.url)
        );
        let written = std::fs::create_dir_all(token_dir())
            .and_then(|()| std::fs::write(self.wanted_path(), &scope));
        if let Err(error) = written {
            tracing::warn!("could not remember the scope a server asked for: {error}");
        }
    }

    /// The scopes a server's last `insufficient_scope` challenge named, not yet signed in with.
    pub fn wanted(&self) -> Vec<String> {
        std::fs::read_to_string(self.wanted_path())
            .map(|text| text.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The wider scopes were signed in with.
    pub fn forget_wanted(&self) {
        let _ = std::fs::remove_file(self.wanted_path());
    }

    /// Forget the tokens; whether there were any.
    pub fn remove(&self) -> std::io::Result<bool> {
        self.forget_wanted();
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.read())
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.write(credentials).map_err(|error| {
            AuthError::InternalError(format!(
                "could not write the tokens to {}: {error}",
                self.path.display()
            ))
        })
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remove().map(|_| ()).map_err(|error| {
            AuthError::InternalError(format!("could not remove {}: {error}", self.path.display()))
        })
    }
}

/// A manager for the server at `url`, the way both sign-in and the gateway make one:
/// metadata may name a private address (a company's authorization server); loopback only
/// when the server itself is on loopback.
pub async fn manager(url: &str) -> Result<AuthorizationManager, AuthError> {
    AuthorizationManager::new_allowing_private_addresses(url).await
}

/// The authorization server's metadata of the server at `url`, as rmcp resolves it; for a
/// server laid out the 2025-03-26 way (no Protected Resource Metadata, its authorization
/// server's metadata at its own origin, naming an issuer under another path), that
/// metadata as published, which rmcp refuses for the issuer (RFC 8414 came to MCP
/// later). Only then, and only from the server's own origin.
pub async fn resolve(
    manager: &AuthorizationManager,
    url: &str,
    challenge: Option<&str>,
) -> Result<AuthorizationMetadata, AuthError> {
    match manager.resolve_metadata_from_challenge(challenge).await {
        Ok(resolution) => Ok(resolution.metadata),
        Err(refused @ AuthError::AuthorizationServerMismatch { .. }) => {
            match legacy_metadata(url).await {
                Some(metadata) => {
                    tracing::warn!(
                        "the server at {} publishes its OAuth metadata the 2025-03-26 way, at its own origin, naming the issuer {:?}; using it as published",
                        url_origin(url),
                        metadata.issuer.as_deref().unwrap_or("(none)")
                    );
                    Ok(metadata)
                }
                None => Err(refused),
            }
        }
        Err(other) => Err(other),
    }
}

/// `ORIGIN/.well-known/oauth-authorization-server` of the server at `url`, when it names
/// both endpoints.
async fn legacy_metadata(url: &str) -> Option<AuthorizationMetadata> {
    let mut at = reqwest::Url::parse(url).ok()?;
    at.set_path("/.well-known/oauth-authorization-server");
    at.set_query(None);
    let answer = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .ok()?
        .get(at)
        .send()
        .await
        .ok()?;
    if !answer.status().is_success() {
        return None;
    }
    let metadata: AuthorizationMetadata = answer.json().await.ok()?;
    (!metadata.authorization_endpoint.is_empty() && !metadata.token_endpoint.is_empty())
        .then_some(metadata)
}

/// Why no token could be had.
enum Missing {
    /// Only signing in again helps: the reason, naming the server and the command.
    SignIn(String),
    /// The authorization server could not be asked now (network, its own error): retry.
    Unavailable(String),
}

impl Missing {
    fn into_error(self) -> StreamableHttpError<reqwest::Error> {
        StreamableHttpError::Auth(match self {
            Missing::SignIn(reason) => AuthError::AuthorizationFailed(reason),
            Missing::Unavailable(reason) => AuthError::TokenRefreshFailed(reason),
        })
    }
}

/// A signed-in server's tokens, shared by its connections for the life of the gateway.
pub struct SignedIn {
    server: String,
    url: String,
    client: OAuthClient,
    file: TokenFile,
    /// Built on first use from the file; rebuilt when the file changes (a new sign-in).
    manager: tokio::sync::Mutex<Option<Ready>>,
    /// The client credentials grant's token and when it expires (kept in memory only: the
    /// gateway can get another at any time).
    machine: tokio::sync::Mutex<Option<(String, Option<tokio::time::Instant>)>>,
}

/// rmcp's manager for a server, built from its token file.
struct Ready {
    manager: AuthorizationManager,
    /// The token file's modification time when this was built.
    built: Option<SystemTime>,
    /// The token last handed out: a different one now means rmcp refreshed it.
    last: Option<String>,
}

impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("server", &self.server)
            .finish()
    }
}

impl SignedIn {
    pub fn new(server: &str, url: &str, client: &OAuthClient) -> SignedIn {
        SignedIn {
            server: server.to_owned(),
            url: url.to_owned(),
            client: client.clone(),
            file: TokenFile::new(server, url),
            manager: tokio::sync::Mutex::new(None),
            machine: tokio::sync::Mutex::new(None),
        }
    }

    /// The client credentials grant (`grant = "client_credentials"`): the token in hand
    /// while it has more than 30 s left, else a new one from the authorization server's
    /// token endpoint, found from the server's metadata. `rejected`: the server refused this
    /// token, so get another whatever its expiry says.
    async fn machine_token(&self, rejected: Option<&str>) -> Result<String, Missing> {
        use oauth2::TokenResponse;
        use rmcp::transport::auth::ClientCredentialsConfig;
        let mut held = self.machine.lock().await;
        if let Some((token, expires)) = held.as_ref() {
            let fresh = expires.is_none_or(|at| {
                at.saturating_duration_since(tokio::time::Instant::now())
                    > std::time::Duration::from_secs(30)
            });
            // Another call already replaced the token the server refused.
            let replaced = rejected.is_some_and(|rejected| rejected != token);
            if replaced || (rejected.is_none() && fresh) {
                return Ok(token.clone());
            }
        }
        if let Some(idp) = &self.client.enterprise {
            let (token, expires) = self.enterprise_token(idp).await?;
            *held = Some((token.clone(), expires));
            return Ok(token);
        }
        let unavailable = |error: AuthError| {
            Missing::Unavailable(format!(
                "could not get an OAuth token for \"{}\" by the client credentials grant: {error}",
                self.server
            ))
        };
        let Some(client_id) = &self.client.client_id else {
            return Err(self.sign_in("the client credentials grant needs `client_id`"));
        };
        let config = match (&self.client.client_secret, &self.client.client_key) {
            (Some(secret), _) => ClientCredentialsConfig::ClientSecret {
                client_id: client_id.clone(),
                client_secret: secret.expose().to_owned(),
                scopes: self.client.scopes.clone(),
                resource: Some(self.url.clone()),
            },
            // private_key_jwt: a signed assertion instead of a secret (RFC 7523).
            (None, Some(key)) => ClientCredentialsConfig::PrivateKeyJwt {
                client_id: client_id.clone(),
                signing_key: key.pem.expose().as_bytes().to_vec(),
                signing_algorithm: signing_algorithm(key.algorithm),
                token_endpoint_audience: None,
                scopes: self.client.scopes.clone(),
                resource: Some(self.url.clone()),
            },
            (None, None) => {
                return Err(self.sign_in(
                    "the client credentials grant needs `client_secret` or `client_key_file`",
                ))
            }
        };
        // rmcp 3.11's exchange future is not `Send` (`on_a_runtime_of_its_own`).
        let url = self.url.clone();
        let exchanged = on_a_runtime_of_its_own(move || exchange_client_credentials(url, config))
            .await
            .unwrap_or_else(|error| Err(Exchange::Setup(AuthError::InternalError(error))));
        let response = match exchanged {
            Ok(response) => Ok(response),
            Err(Exchange::Setup(error)) => return Err(unavailable(error)),
            Err(Exchange::Other(error)) => Err(error),
        };
        let response = match response {
            Ok(response) => response,
            // The authorization server refused the client: only a config change helps.
            Err(AuthError::TokenExchangeFailed(reason) | AuthError::ClientCredentialsError(reason)) => {
                return Err(Missing::SignIn(format!(
                    "server \"{}\": its authorization server refused the client credentials of `client_id` {:?}: {reason}; check `client_id` and `client_secret` (or `client_key_file`) in its [oauth] table",
                    self.server,
                    self.client.shown_client_id.as_deref().unwrap_or(client_id)
                )))
            }
            Err(error) => return Err(unavailable(error)),
        };
        let token = response.access_token().secret().to_owned();
        let expires = response
            .expires_in()
            .map(|lifetime| tokio::time::Instant::now() + lifetime);
        tracing::info!(server = %self.server, "got an OAuth access token for server \"{}\" by the client credentials grant", self.server);
        *held = Some((token.clone(), expires));
        Ok(token)
    }

    /// `grant = "enterprise_managed"` (SEP-990): the user's ID token, read from its file,
    /// exchanged at the enterprise IdP for an identity assertion (ID-JAG) for this server's
    /// authorization server, and that there for an access token (rmcp's `enterprise`).
    async fn enterprise_token(
        &self,
        idp: &crate::config::EnterpriseIdp,
    ) -> Result<(String, Option<tokio::time::Instant>), Missing> {
        use rmcp::transport::auth::enterprise::{
            EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest,
        };
        let server = self.server.clone();
        let unavailable = |why: String| {
            Missing::Unavailable(format!(
                "could not get an OAuth token for \"{server}\" from its enterprise IdP: {why}"
            ))
        };
        // Every failure here leaves the server down and retried on the reconnect schedule,
        // not waiting for an operator: `auth login` has nothing to do for this grant, and an
        // expired ID token comes back by itself once whatever keeps the user's SSO session
        // renews the file (`wardgate reconnect NAME` retries at once).
        let id_token = std::fs::read_to_string(&idp.id_token_file).map_err(|error| {
            unavailable(format!(
                "cannot read the ID token in {} ({error}); sign in to the IdP ({}) so its ID token is written there",
                idp.id_token_file.display(),
                idp.issuer
            ))
        })?;
        let id_token = id_token.trim().to_owned();
        let manager = manager(&self.url)
            .await
            .map_err(|error| unavailable(error.to_string()))?;
        let metadata = manager
            .resolve_metadata()
            .await
            .map_err(|error| unavailable(format!("its authorization server's metadata: {error}")))?
            .metadata;
        let Some(issuer) = metadata.issuer.clone() else {
            return Err(unavailable(
                "its authorization server's metadata names no issuer, which the identity assertion must be for".into(),
            ));
        };
        let secret = |secret: &Option<crate::config::Secret>| match secret {
            Some(secret) => EmaClientAuthentication::ClientSecretBasic(oauth2::ClientSecret::new(
                secret.expose().to_owned(),
            )),
            None => EmaClientAuthentication::None,
        };
        let idp_server = EmaAuthorizationServer::new(
            idp.issuer.clone(),
            idp.token_endpoint.clone(),
            idp.client_id.clone(),
        )
        .with_client_authentication(secret(&idp.client_secret));
        let client_id = self.client.client_id.clone().unwrap_or_default();
        let resource_server =
            EmaAuthorizationServer::new(issuer, metadata.token_endpoint, client_id)
                .with_client_authentication(secret(&self.client.client_secret));
        let (url, scopes) = (self.url.clone(), self.client.scopes.clone());
        let exchanged = on_a_runtime_of_its_own(move || async move {
            let http = rmcp::transport::auth::default_oauth_http_client()
                .map_err(|error| error.to_string())?;
            EmaExchangeRequest::new_with_id_token(idp_server, resource_server, &url, &id_token)
                .with_scopes(scopes)
                .exchange(&http, &http)
                .await
                .map_err(|error| error.to_string())
        })
        .await
        .map_err(&unavailable)?
        .map_err(|error| {
            unavailable(format!(
                "the exchange failed ({error}); check the ID token in {} (renew it at the IdP if it expired) and the idp_* and client settings in the server's [oauth] table",
                idp.id_token_file.display()
            ))
        })?;
        tracing::info!(server = %self.server, "got an OAuth access token for server \"{}\" from its enterprise IdP", self.server);
        let expires = exchanged
            .expires_in
            .map(|lifetime| tokio::time::Instant::now() + lifetime);
        Ok((exchanged.access_token.secret().to_owned(), expires))
    }

    /// Whether this is the sign-in of `url` with `client` (a changed config needs another).
    pub fn is_for(&self, url: &str, client: &OAuthClient) -> bool {
        self.url == url && self.client == *client
    }

    fn sign_in(&self, why: &str) -> Missing {
        Missing::SignIn(format!(
            "server \"{}\" needs an OAuth sign-in: {why}; run `{}`",
            self.server, self.client.login
        ))
    }

    fn modified(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.file.path)
            .and_then(|meta| meta.modified())
            .ok()
    }

    /// The manager, (re)built when the token file is new or changed.
    async fn ready<'a>(&self, slot: &'a mut Option<Ready>) -> Result<&'a mut Ready, Missing> {
        let modified = self.modified();
        let stale = !matches!(slot, Some(ready) if ready.built == modified);
        if stale {
            *slot = None;
            if self.file.read().is_none() {
                return Err(self.sign_in("no sign-in is stored for it"));
            }
            let mut manager = manager(&self.url).await.map_err(|error| {
                Missing::Unavailable(format!(
                    "could not reach the authorization server of \"{}\": {error}",
                    self.server
                ))
            })?;
            manager.set_credential_store(self.file.clone());
            // Resolved here so that a 2025-03-26 layout is found as the sign-in found it.
            let metadata = resolve(&manager, &self.url, None).await.map_err(|error| {
                Missing::Unavailable(format!(
                    "could not read the authorization server's metadata for \"{}\": {error}",
                    self.server
                ))
            })?;
            manager.set_metadata(metadata);
            match manager.initialize_from_store().await {
                Ok(true) => {}
                Ok(false) => {
                    return Err(
                        self.sign_in("the stored sign-in was for another authorization server")
                    )
                }
                Err(error) => {
                    return Err(Missing::Unavailable(format!(
                        "could not read the authorization server's metadata for \"{}\": {error}",
                        self.server
                    )))
                }
            }
            if let (Some(id), Some(stored)) = (&self.client.client_id, self.file.read()) {
                if stored.client_id == *id {
                    let mut config =
                        OAuthClientConfig::new(id.clone(), "http://127.0.0.1/callback");
                    if let Some(secret) = &self.client.client_secret {
                        config = config.with_client_secret(secret.expose());
                    }
                    manager
                        .configure_client(config)
                        .map_err(|error| Missing::Unavailable(error.to_string()))?;
                }
            }
            *slot = Some(Ready {
                manager,
                built: modified,
                last: None,
            });
        }
        Ok(slot.as_mut().expect("just built"))
    }

    /// A token to send: the stored one, refreshed first when it expires soon (rmcp: within
    /// 30 s, or half its lifetime when that is shorter). Callers wait on one lock, so one
    /// refresh serves all of them.
    async fn token(&self) -> Result<String, Missing> {
        if self.client.machine() {
            return self.machine_token(None).await;
        }
        let mut slot = self.manager.lock().await;
        let ready = self.ready(&mut slot).await?;
        match ready.manager.get_access_token().await {
            Ok(token) => {
                if ready.last.as_ref().is_some_and(|last| *last != token) {
                    self.refreshed();
                }
                ready.last = Some(token.clone());
                Ok(token)
            }
            Err(error) => Err(self.refusal(error)),
        }
    }

    /// The server refused `rejected`: refresh once, unless another call already did (then
    /// its token is used).
    async fn renew(&self, rejected: &str) -> Result<String, Missing> {
        use oauth2::TokenResponse;
        if self.client.machine() {
            return self.machine_token(Some(rejected)).await;
        }
        let mut slot = self.manager.lock().await;
        if let Some(current) = self.file.access_token() {
            if current != rejected {
                return Ok(current);
            }
        }
        let ready = self.ready(&mut slot).await?;
        match ready.manager.refresh_token().await {
            Ok(response) => {
                self.refreshed();
                let token = response.access_token().secret().to_owned();
                ready.last = Some(token.clone());
                Ok(token)
            }
            Err(error) => Err(self.refusal(error)),
        }
    }

    fn refreshed(&self) {
        tracing::info!(server = %self.server, "refreshed the OAuth access token of server \"{}\"", self.server);
    }

    fn refusal(&self, error: AuthError) -> Missing {
        match error {
            AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_) => self.sign_in(
                "its authorization server refused to refresh the token (it was revoked or expired)",
            ),
            other => Missing::Unavailable(format!(
                "could not refresh the OAuth token of \"{}\": {other}",
                self.server
            )),
        }
    }
}

/// rmcp's reqwest client, with the server's token on every request: refreshed before it
/// expires, and once when the server answers 401.
#[derive(Clone)]
pub struct OAuthHttp {
    pub inner: super::tool_tasks::http::Listing,
    pub tokens: Arc<SignedIn>,
}

type HttpError = StreamableHttpError<reqwest::Error>;

impl OAuthHttp {
    async fn with_token<T, F, Fut>(&self, call: F) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: std::future::Future<Output = Result<T, HttpError>>,
    {
        let token = self.tokens.token().await.map_err(Missing::into_error)?;
        match call(Some(token.clone())).await {
            Err(StreamableHttpError::AuthRequired(_)) => {
                let fresh = self
                    .tokens
                    .renew(&token)
                    .await
                    .map_err(Missing::into_error)?;
                match call(Some(fresh)).await {
                    Err(StreamableHttpError::AuthRequired(_)) => Err(self
                        .tokens
                        .sign_in("the server refused a freshly refreshed token")
                        .into_error()),
                    other => other,
                }
            }
            Err(StreamableHttpError::InsufficientScope(refused)) => {
                // Step-up (the authorization spec's scope challenge): the next sign-in asks
                // for what the server named.
                if let Some(scope) = &refused.required_scope {
                    self.tokens.file.want_scope(scope);
                }
                Err(StreamableHttpError::InsufficientScope(refused))
            }
            other => other,
        }
    }
}

impl StreamableHttpClient for OAuthHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.with_token(|token| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>, HttpError> {
        self.with_token(|token| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>, HttpError> {
        self.with_token(|token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}

/// rmcp's name for a client key's algorithm.
fn signing_algorithm(
    algorithm: crate::config::KeyAlgorithm,
) -> rmcp::transport::auth::JwtSigningAlgorithm {
    use crate::config::KeyAlgorithm as K;
    use rmcp::transport::auth::JwtSigningAlgorithm as J;
    match algorithm {
        K::Rs256 => J::RS256,
        K::Rs384 => J::RS384,
        K::Rs512 => J::RS512,
        K::Es256 => J::ES256,
        K::Es384 => J::ES384,
    }
}

/// Why a client credentials exchange failed: before the token request (metadata, or the
/// metadata not allowing the client's method), or at it.
enum Exchange {
    Setup(AuthError),
    Other(AuthError),
}

/// The client credentials grant at the token endpoint of the server at `url`, found from
/// its metadata.
async fn exchange_client_credentials(
    url: String,
    config: rmcp::transport::auth::ClientCredentialsConfig,
) -> Result<rmcp::transport::auth::OAuthTokenResponse, Exchange> {
    let mut manager = manager(&url).await.map_err(Exchange::Setup)?;
    let resolution = manager.resolve_metadata().await.map_err(Exchange::Setup)?;
    manager.set_metadata(resolution.metadata);
    manager
        .validate_client_credentials_metadata(&config)
        .map_err(Exchange::Setup)?;
    manager
        .configure_client_credentials(&config)
        .map_err(Exchange::Setup)?;
    manager
        .exchange_client_credentials(&config)
        .await
        .map_err(Exchange::Other)
}

/// Runs the future `make` builds on a current-thread runtime of its own, on a blocking
/// thread: for rmcp 3.11's token exchanges, whose futures are not `Send` (a form
/// serializer held across an await). A token lasts an hour or so; this is not a call's path.
async fn on_a_runtime_of_its_own<T, F, Fut>(make: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| error.to_string())?;
        Ok(runtime.block_on(make()))
    })
    .await
    .map_err(|error| error.to_string())?
}
