//! Signing in to a server that uses OAuth, and out again, beside the token store
//! ([`TokenFile`]) it fills: what `wardgate auth login|logout` runs.
//!
//! Login follows the MCP authorization spec for clients, through rmcp's `auth` module: the
//! server's 401 names its Protected Resource Metadata, which names the authorization server;
//! the gateway registers itself there (dynamic client registration) unless the config gives
//! a `client_id`; the person signs in in a browser (authorization code with PKCE S256 and
//! the server's URL as the `resource`); the browser comes back to a loopback port, served
//! here by hyper ([`Callback`]), and the tokens go to the server's 0600 file in the state
//! directory. A running gateway watches that directory and reconnects the server.
//!
//! Logout revokes the tokens at the authorization server when it offers revocation (RFC
//! 7009), then deletes the file.

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession,
    StoredCredentials,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::TokenFile;
use crate::config::OAuthClient;

/// Why signing in or out failed, in words that name the server and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SignInError(String);

fn failed(what: impl std::fmt::Display, cause: impl std::fmt::Display) -> SignInError {
    SignInError(format!("{what}: {cause}"))
}

/// What signing in to a server takes.
pub enum Start {
    /// Nothing: the gateway gets this server's tokens by itself (why, in words).
    Unneeded(String),
    /// A person signs in in a browser.
    Browser(Box<SignIn>),
}

/// A sign-in waiting for the browser: open [`SignIn::address`], then [`SignIn::finish`].
pub struct SignIn {
    server: String,
    login: String,
    address: String,
    widened: Option<Vec<String>>,
    session: AuthorizationSession,
    file: TokenFile,
    callback: Callback,
}

/// Begin signing in to `server` at `url`: find its authorization server, register there
/// when the config gives no `client_id`, and listen on a loopback port for the answer.
/// After a 403 `insufficient_scope` (step-up), the scope the server named is asked for
/// with those configured and granted before ([`SignIn::widened_scopes`]).
pub async fn start(server: &str, url: &str, client: &OAuthClient) -> Result<Start, SignInError> {
    if let Some(idp) = &client.enterprise {
        return Ok(Start::Unneeded(format!(
            "{server} gets its tokens from an enterprise IdP (`grant = \"enterprise_managed\"`): the gateway exchanges the ID token in {} for them itself; sign in to {} so that file holds a current ID token",
            idp.id_token_file.display(),
            idp.issuer
        )));
    }
    if client.client_credentials {
        return Ok(Start::Unneeded(format!(
            "{server} gets its tokens by the client credentials grant (`grant = \"client_credentials\"`): the gateway asks for them itself, and there is nothing to sign in"
        )));
    }
    let callback = Callback::listen().await?;
    let (mut manager, metadata) = discover(server, url).await?;
    let file = TokenFile::new(server, url);
    manager.set_credential_store(file.clone());
    manager.set_metadata(metadata);
    let mut request =
        AuthorizationRequest::new(callback.redirect.clone()).with_client_name("Wardgate");
    let wanted = file.wanted();
    let mut scopes = client.scopes.clone();
    let mut widened = None;
    if !wanted.is_empty() {
        let granted = file
            .expiry()
            .map(|(_, granted)| granted)
            .unwrap_or_default();
        for scope in granted.into_iter().chain(wanted) {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        widened = Some(scopes.clone());
    }
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.iter().cloned());
    }
    if let Some(id) = &client.client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &client.client_secret {
            request = request.with_client_secret(secret.expose());
        }
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, error)| match &client.client_id {
            Some(_) => failed(format!("could not start signing in to {server}"), error),
            None => failed(format!("could not register the gateway with the authorization server of {server} (if it offers no dynamic registration, register a client there and set `client_id` in [servers.{server}.oauth])"), error),
        })?;
    Ok(Start::Browser(Box::new(SignIn {
        server: server.to_owned(),
        login: client.login.clone(),
        address: session.get_authorization_url().to_owned(),
        widened,
        session,
        file,
        callback,
    })))
}

impl SignIn {
    /// The authorization server's page to open in a browser.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The scopes asked for because the server asked for a wider one, if it did.
    pub fn widened_scopes(&self) -> Option<&[String]> {
        self.widened.as_deref()
    }

    /// Wait up to `wait` for the browser's answer, then exchange it for tokens and store
    /// them. Returns the token file's path.
    pub async fn finish(mut self: Box<Self>, wait: Duration) -> Result<PathBuf, SignInError> {
        let server = self.server.clone();
        let answer = tokio::time::timeout(wait, self.callback.answer())
            .await
            .map_err(|_| {
                SignInError(format!(
                    "no answer from the browser within {} minutes; run `{}` again",
                    wait.as_secs() / 60,
                    self.login
                ))
            })??;
        self.session
            .handle_callback_url(&format!("http://127.0.0.1{answer}"))
            .await
            .map_err(|error| {
                failed(
                    format!("the authorization server did not give tokens for {server}"),
                    error,
                )
            })?;
        if self.file.read().is_none() {
            return Err(SignInError(format!(
                "the tokens for {server} were not stored in {}",
                self.file.path.display()
            )));
        }
        self.file.forget_wanted();
        Ok(self.file.path.clone())
    }
}

/// The loopback HTTP server the browser comes back to, at `/callback`, until dropped.
pub struct Callback {
    /// `http://127.0.0.1:PORT/callback`.
    pub redirect: String,
    answers: mpsc::Receiver<String>,
    stop: CancellationToken,
}

impl Callback {
    /// Listen on a loopback port of the system's choosing.
    pub async fn listen() -> Result<Callback, SignInError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| {
                failed(
                    "could not listen on a loopback port for the sign-in's answer",
                    error,
                )
            })?;
        let port = listener
            .local_addr()
            .map_err(|error| failed("could not read the sign-in's loopback port", error))?
            .port();
        let (sender, answers) = mpsc::channel(4);
        let stop = CancellationToken::new();
        tokio::spawn(serve_callback(listener, sender, stop.clone()));
        Ok(Callback {
            redirect: format!("http://127.0.0.1:{port}/callback"),
            answers,
            stop,
        })
    }

    /// The first answer's path and query (`/callback?code=…&state=…`), or the refusal the
    /// authorization server sent (`error`, `error_description`).
    pub async fn answer(&mut self) -> Result<String, SignInError> {
        let target = self
            .answers
            .recv()
            .await
            .ok_or_else(|| SignInError("the sign-in's loopback listener stopped".to_owned()))?;
        let query = target.split_once('?').map(|(_, query)| query).unwrap_or("");
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let find = |key: &str| {
            pairs
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.as_str())
        };
        if let Some(error) = find("error") {
            return Err(SignInError(format!(
                "the authorization server refused the sign-in: {error} {}",
                find("error_description").unwrap_or("")
            )));
        }
        Ok(target)
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve `/callback` (anything else is 404) until `stop`; each answer's path and query go
/// to `answers`.
async fn serve_callback(
    listener: tokio::net::TcpListener,
    answers: mpsc::Sender<String>,
    stop: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!("the sign-in's loopback listener: {error}");
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let answers = answers.clone();
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let answers = answers.clone();
            async move {
                let target = request
                    .uri()
                    .path_and_query()
                    .map(|target| target.as_str().to_owned())
                    .unwrap_or_default();
                let page = |status: u16, text: &'static str| {
                    hyper::Response::builder()
                        .status(status)
                        .header("content-type", "text/plain; charset=utf-8")
                        .header("cache-control", "no-store")
                        .body(Full::new(Bytes::from_static(text.as_bytes())))
                };
                let response = if request.uri().path() != "/callback" {
                    page(404, "Not found.")
                } else {
                    let refused = target.contains("error=");
                    let _ = answers.try_send(target);
                    if refused {
                        page(200, "Sign-in was refused; see the terminal.")
                    } else {
                        page(200, "Signed in. You can close this tab.")
                    }
                };
                Ok::<_, Infallible>(response.unwrap_or_default())
            }
        });
        let stop = stop.clone();
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                () = stop.cancelled() => {}
                () = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
        });
    }
}

/// The authorization server of the server at `url`, found as the spec has it: from the
/// server's own 401 (its Protected Resource Metadata), then that server's metadata.
async fn discover(
    server: &str,
    url: &str,
) -> Result<(AuthorizationManager, AuthorizationMetadata), SignInError> {
    let challenge = challenge(url).await;
    let manager = super::manager(url).await.map_err(|error| {
        failed(
            format!(
                "could not prepare sign-in for {server} ({})",
                super::url_origin(url)
            ),
            error,
        )
    })?;
    let metadata = super::resolve(&manager, url, challenge.as_deref())
        .await
        .map_err(|error| failed(format!("could not find the authorization server of {server}: it published no OAuth metadata (its 401's resource_metadata, /.well-known/oauth-protected-resource, or the authorization server's /.well-known documents)"), error))?;
    Ok((manager, metadata))
}

/// The `WWW-Authenticate` of the server's answer to a request without a token.
async fn challenge(url: &str) -> Option<String> {
    let answer = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    answer
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// What signing out did.
#[derive(Debug)]
pub enum SignedOut {
    /// There were no tokens.
    NotSignedIn,
    /// The authorization server revoked the tokens, and the file is gone.
    Revoked(PathBuf),
    /// The file is gone; the authorization server offers no revocation.
    NoRevocation(PathBuf),
    /// The file is gone; revoking failed (why), so the tokens may be honoured until they
    /// expire.
    RevocationFailed(PathBuf, String),
}

/// Forget `server`'s tokens: first revoke them at its authorization server when it offers
/// revocation (RFC 7009: the refresh token, which also ends the grant's access tokens at
/// most servers), then delete the file. A revocation that fails is said, and the file goes
/// all the same.
pub async fn sign_out(
    server: &str,
    url: &str,
    client: &OAuthClient,
) -> Result<SignedOut, SignInError> {
    let file = TokenFile::new(server, url);
    let revoked = match file.read() {
        Some(stored) => revoke(server, url, client, &stored).await,
        None => Ok(false),
    };
    let removed = file
        .remove()
        .map_err(|error| failed(format!("could not remove {}", file.path.display()), error))?;
    let path = file.path.clone();
    Ok(match (removed, revoked) {
        (false, _) => SignedOut::NotSignedIn,
        (true, Ok(true)) => SignedOut::Revoked(path),
        (true, Ok(false)) => SignedOut::NoRevocation(path),
        (true, Err(error)) => SignedOut::RevocationFailed(path, error.to_string()),
    })
}

/// RFC 7009 revocation of the stored refresh token (the access token when there is none);
/// `false` when the authorization server names no revocation endpoint.
async fn revoke(
    server: &str,
    url: &str,
    client: &OAuthClient,
    stored: &StoredCredentials,
) -> Result<bool, SignInError> {
    let Some((token, hint)) = TokenFile::revocable(stored) else {
        return Ok(false);
    };
    let (_, metadata) = discover(server, url).await?;
    let Some(endpoint) = metadata
        .additional_fields
        .get("revocation_endpoint")
        .and_then(|value| value.as_str())
    else {
        return Ok(false);
    };
    let mut form = vec![("token", token.as_str()), ("token_type_hint", hint)];
    let mut request = reqwest::Client::new()
        .post(endpoint)
        .timeout(Duration::from_secs(10));
    // The client that holds the grant authenticates as it does at the token endpoint: with
    // its secret when the config gives one for it, else (a public client) by its id.
    match (&client.client_id, &client.client_secret) {
        (Some(id), Some(secret)) if *id == stored.client_id => {
            request = request.basic_auth(id, Some(secret.expose()));
        }
        _ => form.push(("client_id", stored.client_id.as_str())),
    }
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let answer = request
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|error| failed(format!("{endpoint} did not answer"), error))?;
    let status = answer.status();
    if !status.is_success() {
        let text: String = answer
            .text()
            .await
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect();
        return Err(SignInError(format!("{endpoint} answered {status}: {text}")));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(url: &str) -> (u16, String) {
        let answer = reqwest::get(url).await.expect("the callback answers");
        let status = answer.status().as_u16();
        (status, answer.text().await.unwrap_or_default())
    }

    #[tokio::test]
    async fn the_callback_takes_the_browser_s_answer_and_nothing_else() {
        let mut callback = Callback::listen().await.expect("listen");
        let base = callback.redirect.trim_end_matches("/callback").to_owned();
        let (status, _) = get(&format!("{base}/favicon.ico")).await;
        assert_eq!(status, 404, "only /callback is served");
        let (status, text) = get(&format!("{}?code=abc&state=xyz", callback.redirect)).await;
        assert_eq!(status, 200);
        assert!(text.contains("Signed in"), "{text}");
        let answer = callback.answer().await.expect("an answer");
        assert_eq!(answer, "/callback?code=abc&state=xyz");
    }

    #[tokio::test]
    async fn a_refusal_is_an_error_in_the_authorization_server_s_words() {
        let mut callback = Callback::listen().await.expect("listen");
        let (status, text) = get(&format!(
            "{}?error=access_denied&error_description=the+user+said+no",
            callback.redirect
        ))
        .await;
        assert_eq!(status, 200);
        assert!(text.contains("refused"), "{text}");
        let error = callback.answer().await.expect_err("a refusal");
        assert_eq!(
            error.to_string(),
            "the authorization server refused the sign-in: access_denied the user said no"
        );
    }

    #[tokio::test]
    async fn a_dropped_callback_stops_listening() {
        let callback = Callback::listen().await.expect("listen");
        let redirect = callback.redirect.clone();
        drop(callback);
        // The accept loop ends at its next turn; a connection is then refused or closed
        // without an answer.
        let mut refused = false;
        for _ in 0..500 {
            if reqwest::get(&redirect).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            refused,
            "the loopback port still answers after the sign-in ended"
        );
    }
}
