//! Reads one table's keys with their types, then rejects the keys nobody asked for.
//!
//! Every typed getter records its key as known, so the "did you mean" candidates are exactly
//! the keys the reader understands, and a new setting is one getter call.

use std::time::Duration;

use super::duration;
use super::error::{child_key, ConfigError};
use super::tree::{Entry, Node, Value};

/// A value read from the file, with its key path and line so later checks can point at it.
#[derive(Debug, Clone)]
pub(crate) struct Located<T> {
    pub value: T,
    pub key: String,
    pub line: usize,
}

impl<T> Located<T> {
    pub(crate) fn error(&self, message: impl Into<String>, fix: impl Into<String>) -> ConfigError {
        ConfigError::at(self.key.clone(), Some(self.line), message, fix)
    }
}

/// `args = [...]`: the list, and each item with its own location.
pub(crate) type StringList = Located<Vec<Located<String>>>;
/// `scopes = {...}`: names (in file order) with their lists.
pub(crate) type ListMap = Located<Vec<(String, StringList)>>;
/// `env = {...}`, `headers = {...}` or `params = {...}`: names (in file order) with their values.
pub(crate) type StringMap = Located<Vec<(String, Located<String>)>>;

pub(crate) struct Fields<'a> {
    entries: &'a [Entry],
    key: String,
    line: usize,
    known: Vec<&'static str>,
    /// What a table is called in this format's own words ("a table", "an object").
    table_word: &'static str,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(
        node: &'a Node,
        key: &str,
        table_word: &'static str,
    ) -> Result<Fields<'a>, ConfigError> {
        match &node.value {
            Value::Table(entries) => Ok(Fields {
                entries,
                key: key.to_owned(),
                line: node.line,
                known: Vec::new(),
                table_word,
            }),
            _ => Err(mismatch(key, node, table_word, table_word)),
        }
    }

    /// The table's own key path.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// What a table is called in this format's own words.
    pub(crate) fn table_word(&self) -> &'static str {
        self.table_word
    }

    pub(crate) fn entries(&self) -> &'a [Entry] {
        self.entries
    }

    pub(crate) fn located<T>(&self, value: T) -> Located<T> {
        Located {
            value,
            key: self.key.clone(),
            line: self.line,
        }
    }

    /// Marks keys as understood but unused (other clients' settings we deliberately skip).
    pub(crate) fn ignore(&mut self, keys: &[&'static str]) {
        self.known.extend_from_slice(keys);
    }

    fn get(&mut self, key: &'static str) -> Option<&'a Entry> {
        self.known.push(key);
        self.entries.iter().find(|entry| entry.key == key)
    }

    pub(crate) fn table(&mut self, key: &'static str) -> Result<Option<Fields<'a>>, ConfigError> {
        let table_word = self.table_word;
        let path = child_key(&self.key, key);
        self.get(key)
            .map(|entry| Fields::new(&entry.node, &path, table_word))
            .transpose()
    }

    pub(crate) fn string(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Located<String>>, ConfigError> {
        let path = child_key(&self.key, key);
        let table_word = self.table_word;
        self.get(key)
            .map(|entry| string_at(&path, &entry.node, table_word))
            .transpose()
    }

    pub(crate) fn boolean(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Located<bool>>, ConfigError> {
        let path = child_key(&self.key, key);
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        match entry.node.value {
            Value::Boolean(value) => Ok(Some(located(value, path, &entry.node))),
            _ => Err(mismatch(
                &path,
                &entry.node,
                "true or false",
                self.table_word,
            )),
        }
    }

    /// A whole number of at least zero.
    pub(crate) fn integer(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Located<u64>>, ConfigError> {
        let path = child_key(&self.key, key);
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        match entry.node.value {
            Value::Integer(value) if value >= 0 => {
                Ok(Some(located(value as u64, path, &entry.node)))
            }
            _ => Err(mismatch(
                &path,
                &entry.node,
                "a whole number of at least 0",
                self.table_word,
            )),
        }
    }

    /// A number, with or without a fraction.
    pub(crate) fn number(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Located<f64>>, ConfigError> {
        let path = child_key(&self.key, key);
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        match entry.node.value {
            Value::Float(value) if value.is_finite() => Ok(Some(located(value, path, &entry.node))),
            Value::Integer(value) => Ok(Some(located(value as f64, path, &entry.node))),
            _ => Err(mismatch(&path, &entry.node, "a number", self.table_word)),
        }
    }

    pub(crate) fn duration(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Located<Duration>>, ConfigError> {
        self.duration_with(key, duration::parse)
    }

    /// A duration where zero is allowed (it turns a wait off).
    pub(crate) fn duration_or_zero(
        &mut self,
        key: &'static str,
    ) -> Result<Option<Located<Duration>>, ConfigError> {
        self.duration_with(key, duration::parse_allowing_zero)
    }

    fn duration_with(
        &mut self,
        key: &'static str,
        parse: fn(&Value) -> Result<Duration, (String, String)>,
    ) -> Result<Option<Located<Duration>>, ConfigError> {
        let path = child_key(&self.key, key);
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        match parse(&entry.node.value) {
            Ok(value) => Ok(Some(located(value, path, &entry.node))),
            Err((message, fix)) => Err(ConfigError::at(path, Some(entry.node.line), message, fix)),
        }
    }

    pub(crate) fn string_list(
        &mut self,
        key: &'static str,
    ) -> Result<Option<StringList>, ConfigError> {
        let path = child_key(&self.key, key);
        let table_word = self.table_word;
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        list_at(&path, &entry.node, table_word).map(Some)
    }

    /// A table of names to lists of strings (`scopes = { "mcp:read" = ["files"] }`).
    pub(crate) fn list_map(&mut self, key: &'static str) -> Result<Option<ListMap>, ConfigError> {
        let path = child_key(&self.key, key);
        let table_word = self.table_word;
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        let Value::Table(entries) = &entry.node.value else {
            let expected = format!("{table_word} of names to arrays of strings");
            return Err(mismatch(&path, &entry.node, &expected, table_word));
        };
        let pairs = entries
            .iter()
            .map(|inner| {
                let list = list_at(&child_key(&path, &inner.key), &inner.node, table_word)?;
                Ok((inner.key.clone(), list))
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(Some(located(pairs, path, &entry.node)))
    }

    pub(crate) fn string_map(
        &mut self,
        key: &'static str,
    ) -> Result<Option<StringMap>, ConfigError> {
        self.map_of(key, "of names to strings", string_at)
    }

    /// `params = {...}`: names to strings, numbers or booleans, each kept as its text
    /// (`5`, `0.2`, `true`), which is how a policy receives them.
    pub(crate) fn scalar_map(
        &mut self,
        key: &'static str,
    ) -> Result<Option<StringMap>, ConfigError> {
        self.map_of(key, "of names to strings, numbers or booleans", scalar_at)
    }

    /// A table whose values `value_at` reads, keyed by name.
    fn map_of(
        &mut self,
        key: &'static str,
        expected: &str,
        value_at: fn(&str, &Node, &str) -> Result<Located<String>, ConfigError>,
    ) -> Result<Option<StringMap>, ConfigError> {
        let path = child_key(&self.key, key);
        let table_word = self.table_word;
        let Some(entry) = self.get(key) else {
            return Ok(None);
        };
        let Value::Table(entries) = &entry.node.value else {
            let expected = format!("{table_word} {expected}");
            return Err(mismatch(&path, &entry.node, &expected, table_word));
        };
        let pairs = entries
            .iter()
            .map(|inner| {
                let value = value_at(&child_key(&path, &inner.key), &inner.node, table_word)?;
                Ok((inner.key.clone(), value))
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(Some(located(pairs, path, &entry.node)))
    }

    /// Fails on the first key (in file order) that no getter asked for.
    pub(crate) fn finish(self) -> Result<(), ConfigError> {
        let Some(unknown) = self
            .entries
            .iter()
            .find(|entry| !self.known.contains(&entry.key.as_str()))
        else {
            return Ok(());
        };
        let path = child_key(&self.key, &unknown.key);
        let line = Some(unknown.line);
        let where_ = if self.key.is_empty() {
            "at the top level".to_owned()
        } else {
            format!("in `{}`", self.key)
        };
        Err(match suggest(&unknown.key, &self.known) {
            Some(close) => ConfigError::at(
                path,
                line,
                format!(
                    "unknown key `{}` {where_}; did you mean `{close}`?",
                    unknown.key
                ),
                format!("rename `{}` to `{close}`", unknown.key),
            ),
            None => ConfigError::at(
                path,
                line,
                format!("unknown key `{}` {where_}", unknown.key),
                format!(
                    "remove it; the keys known here are: {}",
                    self.known.join(", ")
                ),
            ),
        })
    }
}

/// The one known name closest to `unknown`, if it is close enough to be a likely typo.
pub(crate) fn suggest<'k>(unknown: &str, known: &[&'k str]) -> Option<&'k str> {
    let unknown = unknown.to_ascii_lowercase();
    known
        .iter()
        .map(|&candidate| {
            let score = strsim::jaro_winkler(&unknown, &candidate.to_ascii_lowercase());
            (score, candidate)
        })
        .filter(|&(score, _)| score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

fn list_at(path: &str, node: &Node, table_word: &str) -> Result<StringList, ConfigError> {
    let Value::Array(items) = &node.value else {
        return Err(mismatch(path, node, "an array of strings", table_word));
    };
    let items = items
        .iter()
        .enumerate()
        .map(|(index, item)| string_at(&format!("{path}[{index}]"), item, table_word))
        .collect::<Result<_, _>>()?;
    Ok(located(items, path.to_owned(), node))
}

fn string_at(path: &str, node: &Node, table_word: &str) -> Result<Located<String>, ConfigError> {
    match &node.value {
        Value::String(text) => Ok(located(text.clone(), path.to_owned(), node)),
        _ => Err(mismatch(path, node, "a string", table_word)),
    }
}

/// One parameter value as text. Floats print in Rust's shortest round-trip form, so `0.2`
/// stays `0.2` and `2.0` becomes `2`, which parses as an integer or a float alike.
fn scalar_at(path: &str, node: &Node, table_word: &str) -> Result<Located<String>, ConfigError> {
    let text = match &node.value {
        Value::String(text) => text.clone(),
        Value::Integer(integer) => integer.to_string(),
        Value::Float(float) if float.is_finite() => float.to_string(),
        Value::Float(_) => {
            return Err(ConfigError::at(
                path,
                Some(node.line),
                "expected a finite number, found infinity or NaN",
                "write a finite number",
            ))
        }
        Value::Boolean(boolean) => boolean.to_string(),
        Value::Array(_) | Value::Table(_) => {
            let found = match node.value {
                Value::Table(_) => table_word,
                _ => "an array",
            };
            return Err(ConfigError::at(
                path,
                Some(node.line),
                format!("a parameter holds one value, and this one is {found}"),
                "give it a single string, number or boolean, or split it into several \
                 parameters with their own names",
            ));
        }
        Value::Other(_) => {
            return Err(mismatch(
                path,
                node,
                "a string, a number or a boolean",
                table_word,
            ))
        }
    };
    Ok(located(text, path.to_owned(), node))
}

fn located<T>(value: T, key: String, node: &Node) -> Located<T> {
    Located {
        value,
        key,
        line: node.line,
    }
}

fn mismatch(path: &str, node: &Node, expected: &str, table_word: &str) -> ConfigError {
    let found = match &node.value {
        Value::Table(_) => table_word,
        other => other.type_name(),
    };
    let fix = match node.value {
        Value::Integer(_) | Value::Float(_) | Value::Boolean(_) if expected == "a string" => {
            "put the value in double quotes".to_owned()
        }
        _ => format!("change the value to {expected}"),
    };
    ConfigError::at(
        path,
        Some(node.line),
        format!("expected {expected}, found {found}"),
        fix,
    )
}
