//! Policies: `[policies.NAME]` tables, `policy = "NAME"` references and `params` tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{expand_with, Env};
use crate::error::ConfigError;
use crate::fields::{suggest, Located, StringMap};
use crate::raw::RawPolicy;
use crate::{PolicyConfig, BUILTIN_POLICY};

/// A `[policies.NAME]` table: the policy, and its `shadow` module's path if it has one.
pub(super) fn policy(
    raw: RawPolicy,
    base_dir: &Path,
    env: Env<'_>,
) -> Result<(PolicyConfig, Option<PathBuf>), ConfigError> {
    let name = &raw.name.value;
    if name == BUILTIN_POLICY {
        return Err(raw.name.error(
            "`builtin` is reserved: it names the native policy, which needs no module",
            "remove this table and write policy = \"builtin\" where you want the native \
             policy, or give your module another name",
        ));
    }
    let usable = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || !name.chars().all(usable) {
        let renamed: String = name
            .chars()
            .map(|c| if usable(c) { c } else { '-' })
            .collect();
        let fix = if renamed.is_empty() {
            "name the policy with letters, digits, '_' or '-'".to_owned()
        } else {
            format!("rename the policy, for example to {renamed:?}")
        };
        return Err(raw.name.error(
            format!("policy name {name:?} may contain only letters, digits, '_' and '-'"),
            fix,
        ));
    }
    let Some(path) = &raw.path else {
        return Err(raw.name.error(
            format!("policy {name:?} has no `path`"),
            format!("add path = \"policies/{name}.wasm\", the WebAssembly module to load"),
        ));
    };
    let expanded = expand_with(path, env, "")?;
    if expanded.value.is_empty() {
        return Err(path.error("the policy path is empty", "name the policy's .wasm file"));
    }
    let shadow = match &raw.shadow {
        Some(shadow) => {
            let expanded = expand_with(shadow, env, "")?;
            if expanded.value.is_empty() {
                return Err(shadow.error(
                    "the shadow path is empty",
                    "name the candidate module's .wasm file, or remove `shadow`",
                ));
            }
            Some(base_dir.join(&expanded.value).components().collect())
        }
        None => None,
    };
    Ok((
        PolicyConfig {
            name: name.clone(),
            // `components()` drops `.` parts, as for `cwd`.
            path: base_dir.join(&expanded.value).components().collect(),
            params: params(raw.params.as_ref())?,
        },
        shadow,
    ))
}

/// A `policy = "NAME"` must name `builtin` or a defined policy.
pub(super) fn check_reference(
    name: &Located<String>,
    policies: &BTreeMap<String, PolicyConfig>,
) -> Result<(), ConfigError> {
    if name.value == BUILTIN_POLICY || policies.contains_key(&name.value) {
        return Ok(());
    }
    let known: Vec<&str> = std::iter::once(BUILTIN_POLICY)
        .chain(policies.keys().map(String::as_str))
        .collect();
    let message = format!("policy {:?} is not defined", name.value);
    let defined = if policies.is_empty() {
        "no policies are defined".to_owned()
    } else {
        let names: Vec<&str> = policies.keys().map(String::as_str).collect();
        format!("the defined policies are: {}", names.join(", "))
    };
    Err(match suggest(&name.value, &known) {
        Some(close) => name.error(
            format!("{message}; did you mean {close:?}?"),
            format!("write {close:?} ({defined})"),
        ),
        None => name.error(
            format!("{message} ({defined})"),
            format!(
                "define it in [policies.{}] with a `path`, or use one of: {}",
                name.value,
                known.join(", ")
            ),
        ),
    })
}

/// Checks the names of a `params` table; values were made text by `Fields::scalar_map`.
pub(super) fn params(map: Option<&StringMap>) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut params = BTreeMap::new();
    for (name, value) in map.iter().flat_map(|map| &map.value) {
        let usable = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if name.is_empty() || !name.chars().all(usable) {
            let renamed: String = name
                .chars()
                .map(|c| if usable(c) { c } else { '_' })
                .collect();
            let fix = if renamed.is_empty() {
                "name the parameter with letters, digits and '_'".to_owned()
            } else {
                format!("rename it, for example to {renamed:?}")
            };
            return Err(value.error(
                format!("parameter name {name:?} may contain only letters, digits and '_'"),
                fix,
            ));
        }
        params.insert(name.clone(), value.value.clone());
    }
    Ok(params)
}
