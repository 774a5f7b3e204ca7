//! Text from clients and servers, made safe for a log line: control characters escaped (a
//! newline cannot forge a line of its own) and the length capped (a 3 MiB name cannot flood).

use std::fmt;

/// How many characters of a peer-supplied string a log line keeps.
pub const MAX_CHARS: usize = 200;

/// Displays `text` escaped and cut to [`MAX_CHARS`], saying how much was cut.
pub struct Untrusted<'t>(pub &'t str);

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shown, (index, c)) in self.0.char_indices().enumerate() {
            if shown == MAX_CHARS {
                return write!(f, "… ({} more bytes)", self.0.len() - index);
            }
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_fmt(format_args!("{c}"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_are_escaped_and_long_text_is_cut() {
        assert_eq!(
            Untrusted("a\nINFO forged\r\u{1b}[31m").to_string(),
            "a\\nINFO forged\\r\\u{1b}[31m"
        );
        let long = "x".repeat(3 * 1024 * 1024);
        let shown = Untrusted(&long).to_string();
        assert!(shown.len() < MAX_CHARS + 40, "{}", shown.len());
        assert!(shown.ends_with(&format!("({} more bytes)", long.len() - MAX_CHARS)));
        assert_eq!(Untrusted("plain é").to_string(), "plain é");
    }
}
