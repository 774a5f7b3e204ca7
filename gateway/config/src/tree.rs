//! A format-neutral document tree with line numbers, and TOML read into it.
//!
//! Both formats land here so one reader (`raw.rs`) checks keys and types for both, and every
//! error can name the line of the key it is about.

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::error::{ConfigError, LineIndex};

/// A value and the line it starts on.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub line: usize,
    pub value: Value,
}

#[derive(Debug, Clone)]
pub(crate) enum Value {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Array(Vec<Node>),
    /// Entries in file order, so the first problem reported is the first one in the file.
    Table(Vec<Entry>),
    /// Anything the config never accepts (a TOML datetime, a JSON null), by its name.
    Other(&'static str),
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    /// The line of the key itself, which is where a reader looks for a misspelt key.
    pub line: usize,
    pub node: Node,
}

impl Value {
    /// The value's type as a message says it ("found an integer").
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a number with a fraction",
            Value::Boolean(_) => "a boolean",
            Value::Array(_) => "an array",
            Value::Table(_) => "a table",
            Value::Other(name) => name,
        }
    }
}

/// Parses a TOML document. Syntax errors (including duplicate keys) carry their line.
pub(crate) fn parse_toml(text: &str) -> Result<Node, ConfigError> {
    let lines = LineIndex::new(text);
    let document = DeTable::parse(text).map_err(|error| {
        ConfigError::at(
            "",
            error.span().map(|span| lines.line(span.start)),
            format!("invalid TOML: {}", error.message().trim_end()),
            "correct the TOML syntax at that line",
        )
    })?;
    Ok(Node {
        line: 1,
        value: table(document.get_ref(), &lines),
    })
}

fn table(table: &DeTable<'_>, lines: &LineIndex) -> Value {
    // DeTable keeps keys sorted; spans restore the order a reader sees in the file.
    let mut entries: Vec<(usize, Entry)> = table
        .iter()
        .map(|(key, value)| {
            let entry = Entry {
                key: key.get_ref().to_string(),
                line: lines.line(key.span().start),
                node: node(value, lines),
            };
            (key.span().start, entry)
        })
        .collect();
    entries.sort_by_key(|(offset, _)| *offset);
    Value::Table(entries.into_iter().map(|(_, entry)| entry).collect())
}

fn node(value: &Spanned<DeValue<'_>>, lines: &LineIndex) -> Node {
    let value_kind = match value.get_ref() {
        DeValue::String(text) => Value::String(text.to_string()),
        DeValue::Integer(integer) => i64::from_str_radix(integer.as_str(), integer.radix())
            .map(Value::Integer)
            .unwrap_or(Value::Other("an integer too large for 64 bits")),
        DeValue::Float(float) => Value::Float(float.as_str().parse().unwrap_or(f64::NAN)),
        DeValue::Boolean(boolean) => Value::Boolean(*boolean),
        DeValue::Datetime(_) => Value::Other("a date-time"),
        DeValue::Array(array) => Value::Array(array.iter().map(|item| node(item, lines)).collect()),
        DeValue::Table(inner) => table(inner, lines),
    };
    Node {
        line: lines.line(value.span().start),
        value: value_kind,
    }
}
