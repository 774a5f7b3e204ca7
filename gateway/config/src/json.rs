//! JSON config files (Claude Desktop, Cursor, VS Code) read into the format-neutral tree.
//!
//! serde_json checks the syntax and decodes strings and numbers; the small walker here only
//! adds what serde_json cannot give: the line of every key, and duplicate-key detection.
//! VS Code's `mcp.json` is JSON with comments and trailing commas, so those are blanked out
//! first, byte for byte, which keeps every offset (and so every line number) unchanged.

use serde::de::IgnoredAny;

use super::error::{ConfigError, LineIndex};
use super::tree::{Entry, Node, Value};

pub(crate) fn parse(text: &str) -> Result<Node, ConfigError> {
    let text = blank_comments_and_trailing_commas(text);
    if let Err(error) = serde_json::from_str::<IgnoredAny>(&text) {
        let line = (error.line() > 0).then_some(error.line());
        let message = error.to_string();
        // serde_json appends " at line L column C"; the line has its own place in the error.
        let message = match message.rfind(" at line ") {
            Some(cut) => &message[..cut],
            None => &message,
        };
        return Err(ConfigError::at(
            "",
            line,
            format!("invalid JSON: {message}"),
            "correct the JSON syntax at that line",
        ));
    }
    let mut walker = Walker {
        text: &text,
        position: 0,
        lines: LineIndex::new(&text),
        depth: 0,
    };
    walker.value()
}

/// How deeply arrays and objects may nest. A config needs four or five levels; serde_json
/// skips over any depth when it only checks syntax, and the walker recurses per level, so
/// without a bound a file of nested `[` would overflow the stack and abort the gateway.
const MAX_DEPTH: usize = 64;

/// Walks text that serde_json has already accepted, so malformed input is not expected here;
/// it still yields an error rather than a panic if that assumption is ever wrong.
struct Walker<'t> {
    text: &'t str,
    position: usize,
    lines: LineIndex,
    /// Arrays and objects open around the current position.
    depth: usize,
}

impl Walker<'_> {
    fn value(&mut self) -> Result<Node, ConfigError> {
        self.skip_whitespace();
        let line = self.lines.line(self.position);
        let value =
            match self.peek() {
                Some(b'{' | b'[') if self.depth == MAX_DEPTH => return Err(ConfigError::at(
                    "",
                    Some(line),
                    format!("arrays and objects nest more than {MAX_DEPTH} levels deep here"),
                    "a config needs a few levels; check that brackets are closed where you meant",
                )),
                Some(b'{') => self.nested(Self::object)?,
                Some(b'[') => self.nested(Self::array)?,
                Some(b'"') => Value::String(self.string()?),
                Some(b't') => self.literal("true", Value::Boolean(true))?,
                Some(b'f') => self.literal("false", Value::Boolean(false))?,
                Some(b'n') => self.literal("null", Value::Other("null"))?,
                _ => self.number()?,
            };
        Ok(Node { line, value })
    }

    fn nested(
        &mut self,
        read: fn(&mut Self) -> Result<Value, ConfigError>,
    ) -> Result<Value, ConfigError> {
        self.depth += 1;
        let value = read(self);
        self.depth -= 1;
        value
    }

    fn object(&mut self) -> Result<Value, ConfigError> {
        self.position += 1;
        let mut entries: Vec<Entry> = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.position += 1;
            return Ok(Value::Table(entries));
        }
        loop {
            self.skip_whitespace();
            let line = self.lines.line(self.position);
            let key = self.string()?;
            if entries.iter().any(|entry| entry.key == key) {
                return Err(ConfigError::at(
                    "",
                    Some(line),
                    format!("duplicate key {key:?} in one object"),
                    "remove one of the two entries",
                ));
            }
            self.skip_whitespace();
            self.expect(b':')?;
            let node = self.value()?;
            entries.push(Entry { key, line, node });
            self.skip_whitespace();
            match self.next_byte() {
                Some(b',') => continue,
                Some(b'}') => return Ok(Value::Table(entries)),
                _ => return Err(self.malformed()),
            }
        }
    }

    fn array(&mut self) -> Result<Value, ConfigError> {
        self.position += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.position += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_whitespace();
            match self.next_byte() {
                Some(b',') => continue,
                Some(b']') => return Ok(Value::Array(items)),
                _ => return Err(self.malformed()),
            }
        }
    }

    fn string(&mut self) -> Result<String, ConfigError> {
        let start = self.position;
        self.expect(b'"')?;
        loop {
            match self.next_byte() {
                Some(b'\\') => self.position += 1,
                Some(b'"') => break,
                Some(_) => {}
                None => return Err(self.malformed()),
            }
        }
        let literal = self.text.get(start..self.position);
        literal
            .and_then(|literal| serde_json::from_str(literal).ok())
            .ok_or_else(|| self.malformed())
    }

    fn number(&mut self) -> Result<Value, ConfigError> {
        let start = self.position;
        while matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        ) {
            self.position += 1;
        }
        let number: serde_json::Number = self
            .text
            .get(start..self.position)
            .and_then(|literal| serde_json::from_str(literal).ok())
            .ok_or_else(|| self.malformed())?;
        Ok(match number.as_i64() {
            Some(integer) => Value::Integer(integer),
            None => Value::Float(number.as_f64().unwrap_or(f64::NAN)),
        })
    }

    fn literal(&mut self, word: &str, value: Value) -> Result<Value, ConfigError> {
        if !self.text[self.position..].starts_with(word) {
            return Err(self.malformed());
        }
        self.position += word.len();
        Ok(value)
    }

    fn expect(&mut self, byte: u8) -> Result<(), ConfigError> {
        match self.next_byte() {
            Some(found) if found == byte => Ok(()),
            _ => Err(self.malformed()),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.position).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let byte = self.peek();
        self.position += 1;
        byte
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.position += 1;
        }
    }

    fn malformed(&self) -> ConfigError {
        ConfigError::at(
            "",
            Some(self.lines.line(self.position)),
            "invalid JSON near this line",
            "correct the JSON syntax at that line",
        )
    }
}

/// Replaces `//` and `/* */` comments, and commas that only precede `}` or `]`, with spaces.
/// Newlines inside block comments stay, so line numbers are those of the original text.
fn blank_comments_and_trailing_commas(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let mut index = 0;
    let mut in_string = false;
    while index < bytes.len() {
        let byte = bytes[index];
        let next = bytes.get(index + 1).copied();
        if in_string {
            match byte {
                b'\\' => index += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else if byte == b'"' {
            in_string = true;
        } else if byte == b'/' && next == Some(b'/') {
            while index < bytes.len() && bytes[index] != b'\n' {
                bytes[index] = b' ';
                index += 1;
            }
            continue;
        } else if byte == b'/' && next == Some(b'*') {
            // An unclosed comment is left alone for serde_json to report.
            let Some(found) = text[index + 2..].find("*/") else {
                index += 1;
                continue;
            };
            let end = index + 2 + found + 2;
            for blanked in &mut bytes[index..end] {
                if *blanked != b'\n' {
                    *blanked = b' ';
                }
            }
            index = end;
            continue;
        }
        index += 1;
    }
    // Second pass on comment-free text: a trailing comma is one followed only by whitespace.
    let mut in_string = false;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' if in_string => index += 1,
            b'"' => in_string = !in_string,
            b',' if !in_string => {
                let rest = bytes[index + 1..].iter().find(|b| !b.is_ascii_whitespace());
                if matches!(rest, Some(b'}' | b']')) {
                    bytes[index] = b' ';
                }
            }
            _ => {}
        }
        index += 1;
    }
    // Only whole comments (all their bytes) were replaced, so the text is still UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_owned())
}
