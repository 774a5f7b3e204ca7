//! Typed access to a tool call's arguments; a bad argument becomes invalid-params naming the field.

use rmcp::{model::JsonObject, ErrorData as McpError};
use serde_json::{Number, Value};

pub struct Arguments<'a> {
    tool: &'a str,
    values: Option<&'a JsonObject>,
}

impl<'a> Arguments<'a> {
    pub fn new(tool: &'a str, values: Option<&'a JsonObject>) -> Self {
        Self { tool, values }
    }

    /// An invalid-params error: `tool `echo`: argument `text` is required`.
    pub fn invalid(&self, field: &str, problem: &str) -> McpError {
        McpError::invalid_params(
            format!("tool `{}`: argument `{field}` {problem}", self.tool),
            None,
        )
    }

    fn get(&self, field: &str) -> Option<&'a Value> {
        self.values
            .and_then(|values| values.get(field))
            .filter(|value| !value.is_null())
    }

    pub fn optional_str(&self, field: &str) -> Result<Option<&'a str>, McpError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(self.invalid(field, "must be a string")),
        }
    }

    pub fn required_str(&self, field: &str) -> Result<&'a str, McpError> {
        self.optional_str(field)?
            .ok_or_else(|| self.invalid(field, "is required (a string)"))
    }

    pub fn required_number(&self, field: &str) -> Result<&'a Number, McpError> {
        match self.get(field) {
            None => Err(self.invalid(field, "is required (a number)")),
            Some(Value::Number(number)) => Ok(number),
            Some(_) => Err(self.invalid(field, "must be a number")),
        }
    }

    pub fn optional_u64(&self, field: &str) -> Result<Option<u64>, McpError> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.invalid(field, "must be a non-negative integer")),
        }
    }

    pub fn required_u64(&self, field: &str) -> Result<u64, McpError> {
        self.optional_u64(field)?
            .ok_or_else(|| self.invalid(field, "is required (a non-negative integer)"))
    }

    pub fn optional_i32(&self, field: &str) -> Result<Option<i32>, McpError> {
        match self.get(field) {
            None => Ok(None),
            Some(value) => value
                .as_i64()
                .and_then(|number| i32::try_from(number).ok())
                .map(Some)
                .ok_or_else(|| self.invalid(field, "must be a 32-bit integer")),
        }
    }
}
