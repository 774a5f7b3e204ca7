//! Loading policy modules: a book's first load, before its servers use it, and reloads on
//! demand. Every load runs off the async threads (it compiles and validates the module).

use crate::AppError;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Context;
use serde_json::{json, Value};
use wardgate_config::PolicyConfig;
use wardgate_wasm::{ManagedPolicy, Runtime};

use super::book::PolicyBook;

/// Load every policy in `definitions` into a new book. A module that fails to load is
/// reported, and `Builtin` decides for its servers until a reload succeeds. The book also
/// holds `builtin` and counts decisions.
pub async fn first_load(
    definitions: &BTreeMap<String, PolicyConfig>,
) -> Result<Arc<PolicyBook>, AppError> {
    if definitions.is_empty() {
        return Ok(PolicyBook::new(std::iter::empty()));
    }
    let runtime = Runtime::shared().context("could not start the WebAssembly policy runtime")?;
    let policies: BTreeMap<String, Arc<ManagedPolicy>> = definitions
        .iter()
        .map(|(name, policy)| {
            (
                name.clone(),
                ManagedPolicy::new(name, &policy.path, policy.params.clone(), runtime.clone()),
            )
        })
        .collect();
    let book = PolicyBook::new(policies.values());
    for policy in policies.values() {
        let policy = policy.clone();
        let name = policy.name().to_owned();
        let outcome = match tokio::task::spawn_blocking(move || policy.reload()).await {
            Ok(Ok(description)) => {
                tracing::info!(policy = %name, module = %description.name, version = %description.version, "policy loaded");
                Ok(())
            }
            Ok(Err(error)) => {
                tracing::error!(policy = %name, "{error}; the builtin policy decides until the module loads");
                Err(error.to_string())
            }
            Err(error) => {
                tracing::error!(policy = %name, "loading the policy failed: {error}");
                Err(error.to_string())
            }
        };
        book.observe_first_load(&name, outcome);
    }
    Ok(book)
}

/// Reload each of `policies` from its file: `{"reloaded": [{policy, module, version}, ...]}`,
/// or, when any module was rejected, why (the previous module keeps deciding for each).
pub async fn reload(policies: Vec<Arc<ManagedPolicy>>) -> Result<Value, String> {
    let mut reloaded = Vec::new();
    let mut rejected = Vec::new();
    for policy in policies {
        let name = policy.name().to_owned();
        match tokio::task::spawn_blocking(move || policy.reload()).await {
            Ok(Ok(description)) => reloaded.push(json!({
                "policy": name, "module": description.name, "version": description.version,
            })),
            Ok(Err(error)) => rejected.push(format!("policy \"{name}\": {error}")),
            Err(error) => rejected.push(format!("policy \"{name}\": the reload failed: {error}")),
        }
    }
    if rejected.is_empty() {
        Ok(json!({ "reloaded": reloaded }))
    } else {
        Err(format!(
            "{}; the previous module (or the builtin policy) keeps deciding; fix the module and run `wardgate policy reload`",
            rejected.join("; ")
        ))
    }
}
