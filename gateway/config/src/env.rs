//! `${VAR}` expansion of config values from the environment.
//!
//! Accepted forms: `${NAME}`; `${env:NAME}` (VS Code and Cursor write it so); and
//! `${NAME:-default}` (Claude Code's `.mcp.json`), where the default is literal text used when
//! NAME is unset. `$${` is a literal `${`. Any other `${...}` is an error rather than being
//! left in place, so a value never reaches a server half-expanded.

/// An expanded value, and whether any of it came from the environment (then only the text
/// as written may be shown).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Expanded {
    pub value: String,
    pub from_env: bool,
    /// The values substituted from the environment (not defaults written in the config).
    pub substituted: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// `${NAME}` with NAME unset and no default.
    Missing { name: String },
    /// `${` with no closing `}`.
    Unclosed,
    /// `${...}` whose inside is not a variable name (`${input:token}`, `${ }`).
    NotAVariable { reference: String },
}

pub(crate) fn expand(
    template: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Expanded, ExpandError> {
    let mut value = String::with_capacity(template.len());
    let mut from_env = false;
    let mut substituted = Vec::new();
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        value.push_str(&rest[..dollar]);
        let after = &rest[dollar..];
        if let Some(escaped) = after.strip_prefix("$${") {
            value.push_str("${");
            rest = escaped;
        } else if let Some(reference) = after.strip_prefix("${") {
            let close = reference.find('}').ok_or(ExpandError::Unclosed)?;
            let inside = &reference[..close];
            let (found, from_environment) = lookup(inside, env)?;
            value.push_str(&found);
            if from_environment {
                substituted.push(found);
            }
            from_env = true;
            rest = &reference[close + 1..];
        } else {
            value.push('$');
            rest = &after[1..];
        }
    }
    value.push_str(rest);
    Ok(Expanded {
        value,
        from_env,
        substituted,
    })
}

/// The value of reference `inside`, and whether it came from the environment.
fn lookup(
    inside: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, bool), ExpandError> {
    let inside_without_prefix = inside.strip_prefix("env:").unwrap_or(inside);
    let (name, default) = match inside_without_prefix.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (inside_without_prefix, None),
    };
    if !is_variable_name(name) {
        return Err(ExpandError::NotAVariable {
            reference: format!("${{{inside}}}"),
        });
    }
    match (env(name), default) {
        (Some(found), _) => Ok((found, true)),
        (None, Some(default)) => Ok((default.to_owned(), false)),
        (None, None) => Err(ExpandError::Missing {
            name: name.to_owned(),
        }),
    }
}

/// POSIX shell variable names: what `export NAME=...` (the fix we suggest) accepts.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn value(template: &str) -> Result<String, ExpandError> {
        expand(template, &env).map(|expanded| expanded.value)
    }

    #[test]
    fn references_are_replaced_and_marked_as_from_env() {
        let expanded = expand("Bearer ${TOKEN}!", &env).unwrap();
        assert_eq!(expanded.value, "Bearer s3cret!");
        assert!(expanded.from_env);
        assert_eq!(value("${TOKEN}${TOKEN}"), Ok("s3crets3cret".to_owned()));
        assert_eq!(value("${env:TOKEN}"), Ok("s3cret".to_owned()));
        assert_eq!(value("[${EMPTY}]"), Ok("[]".to_owned()));
    }

    #[test]
    fn text_without_references_is_unchanged_and_not_from_env() {
        let expanded = expand("cost $5, $HOME, $$ and $", &env).unwrap();
        assert_eq!(expanded.value, "cost $5, $HOME, $$ and $");
        assert!(!expanded.from_env);
    }

    #[test]
    fn double_dollar_escapes_a_reference() {
        let expanded = expand("$${TOKEN} is ${TOKEN}", &env).unwrap();
        assert_eq!(expanded.value, "${TOKEN} is s3cret");
        assert_eq!(value("$${MISSING}"), Ok("${MISSING}".to_owned()));
        assert!(!expand("$${TOKEN}", &env).unwrap().from_env);
    }

    #[test]
    fn defaults_apply_only_when_the_variable_is_unset() {
        assert_eq!(value("${MISSING:-fallback}"), Ok("fallback".to_owned()));
        assert_eq!(value("${TOKEN:-fallback}"), Ok("s3cret".to_owned()));
        assert_eq!(value("${env:MISSING:-}"), Ok(String::new()));
    }

    #[test]
    fn bad_references_are_errors() {
        let missing = ExpandError::Missing {
            name: "MISSING".to_owned(),
        };
        assert_eq!(value("a ${MISSING} b"), Err(missing));
        assert_eq!(value("${TOKEN"), Err(ExpandError::Unclosed));
        assert_eq!(
            value("${input:api-key}"),
            Err(ExpandError::NotAVariable {
                reference: "${input:api-key}".to_owned()
            })
        );
        assert!(matches!(
            value("${}"),
            Err(ExpandError::NotAVariable { .. })
        ));
        assert!(matches!(
            value("${1X}"),
            Err(ExpandError::NotAVariable { .. })
        ));
    }
}
