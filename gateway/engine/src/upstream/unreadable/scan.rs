//! A shallow look at one line a server wrote, without recursion: how deep it nests, its
//! top-level `id`, and whether it has a `method`. Enough to answer, in the server's place, a
//! request whose answer no JSON parser of the gateway will read.

/// serde_json's recursion limit: a document whose containers nest this deep is refused
/// whole (rmcp then drops the line, and the request it answered would wait for its timeout).
pub(crate) const UNREADABLE_DEPTH: u32 = 128;

/// The longest `id` text kept; a longer one is not an id the gateway sent.
const ID_MAX_BYTES: usize = 64;

/// Where the scan is in the line's top-level value.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Top {
    /// Before the top-level value.
    #[default]
    Before,
    /// In the top-level object, where a key comes next.
    Key,
    /// After a key, before its ':'.
    Colon,
    /// After ':', before the value.
    Value,
    /// In a top-level value: a string (`in_string`), a container (depth above 1) or a bare
    /// token (a number, `true`, `null`).
    InValue,
    /// After a value, before ',' or '}'.
    Next,
    /// The line is not an object: there is nothing to find.
    NotObject,
}

/// The state of one line's scan, fed as its bytes arrive.
#[derive(Debug, Default)]
pub(crate) struct LineScan {
    depth: u32,
    deepest: u32,
    in_string: bool,
    escaped: bool,
    top: Top,
    /// The top-level key read last (cut at a few bytes: only `id` and `method` matter).
    key: Vec<u8>,
    /// The text of the `id` value as it is read: a string with its quotes, or a number.
    id: Vec<u8>,
    /// The `id` value's text, once read whole (and short enough).
    id_read: Option<Vec<u8>>,
    method: bool,
}

/// An answer the gateway cannot read: the request it answers, and how deep it nests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unreadable {
    pub id: rmcp::model::RequestId,
    pub depth: u32,
}

impl LineScan {
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    /// The line ended: an answer (an `id`, no `method`) nested too deep to be read, if it
    /// was one. The scan starts over for the next line.
    pub(crate) fn finish(&mut self) -> Option<Unreadable> {
        let scan = std::mem::take(self);
        if scan.deepest < UNREADABLE_DEPTH || scan.method {
            return None;
        }
        // A number or a string, as a request id is; anything else answers nothing.
        let id = serde_json::from_slice(&scan.id_read?).ok()?;
        Some(Unreadable {
            id,
            depth: scan.deepest,
        })
    }

    fn byte(&mut self, byte: u8) {
        let top_level = self.depth == 1;
        let reading_id = top_level && self.top == Top::InValue && self.key == b"id";
        if self.in_string {
            if reading_id {
                self.keep_id(byte);
            } else if top_level
                && self.top == Top::Key
                && !self.escaped
                && byte != b'"'
                && self.key.len() < 8
            {
                self.key.push(byte);
            }
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                if top_level {
                    match self.top {
                        Top::Key => {
                            self.method |= self.key == b"method";
                            self.top = Top::Colon;
                        }
                        Top::InValue => self.end_value(),
                        _ => {}
                    }
                }
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if top_level {
                    match self.top {
                        Top::Key => self.key.clear(),
                        Top::Value => {
                            self.top = Top::InValue;
                            if self.key == b"id" {
                                self.keep_id(byte);
                            }
                        }
                        _ => {}
                    }
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.deepest = self.deepest.max(self.depth);
                if self.depth == 1 && self.top == Top::Before {
                    self.top = if byte == b'{' {
                        Top::Key
                    } else {
                        Top::NotObject
                    };
                } else if top_level && self.top == Top::Value {
                    // A container is no id.
                    self.top = Top::InValue;
                    self.id.clear();
                }
            }
            b'}' | b']' => {
                if top_level && self.top == Top::InValue && reading_id {
                    self.end_value();
                }
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 1 && self.top == Top::InValue {
                    self.top = Top::Next;
                }
            }
            b':' if top_level && self.top == Top::Colon => self.top = Top::Value,
            b',' if top_level => {
                if self.top == Top::InValue {
                    self.end_value();
                }
                self.top = Top::Key;
            }
            b' ' | b'\t' | b'\r' | b'\n' if top_level && self.top == Top::InValue => {
                self.end_value();
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ if top_level && matches!(self.top, Top::Value | Top::InValue) => {
                self.top = Top::InValue;
                if reading_id || self.key == b"id" {
                    self.keep_id(byte);
                }
            }
            _ => {}
        }
    }

    fn keep_id(&mut self, byte: u8) {
        if self.id.len() <= ID_MAX_BYTES {
            self.id.push(byte);
        }
    }

    /// A top-level value ended; if it was the `id`, it is read.
    fn end_value(&mut self) {
        if self.key == b"id" && !self.id.is_empty() && self.id.len() <= ID_MAX_BYTES {
            self.id_read = Some(std::mem::take(&mut self.id));
        }
        self.id.clear();
        self.top = Top::Next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(line: &str) -> Option<Unreadable> {
        let mut scan = LineScan::default();
        // Fed in pieces, as a pipe delivers it.
        for piece in line.as_bytes().chunks(7) {
            scan.feed(piece);
        }
        scan.finish()
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    /// An answer to request `id` whose result nests `depth` containers deep in all.
    fn answer(id: &str, depth: usize) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{{"deep":{}}}}}}}"#,
            nested(depth - 3)
        )
    }

    #[test]
    fn the_depth_limit_is_where_rmcp_stops_reading() {
        let read = |line: &str| serde_json::from_str::<rmcp::model::ServerJsonRpcMessage>(line);
        let deepest_read = answer("7", UNREADABLE_DEPTH as usize - 1);
        assert!(read(&deepest_read).is_ok());
        assert_eq!(scan(&deepest_read), None);
        let too_deep = answer("7", UNREADABLE_DEPTH as usize);
        assert!(read(&too_deep).is_err());
        assert_eq!(
            scan(&too_deep),
            Some(Unreadable {
                id: rmcp::model::RequestId::Number(7),
                depth: UNREADABLE_DEPTH
            })
        );
    }

    #[test]
    fn the_id_is_found_wherever_it_is_and_whatever_its_form() {
        let deep = nested(100_000);
        let found = |line: String| scan(&line).map(|unreadable| unreadable.id);
        assert_eq!(
            found(format!(r#"{{"result":{deep},"id":12,"jsonrpc":"2.0"}}"#)),
            Some(rmcp::model::RequestId::Number(12))
        );
        assert_eq!(
            found(format!(r#" {{ "id" : "a\"b" , "result" : {deep} }}"#)),
            Some(rmcp::model::RequestId::String("a\"b".into()))
        );
        assert_eq!(
            found(format!(r#"{{"error":{{"id":1,"x":{deep}}},"id":3}}"#)),
            Some(rmcp::model::RequestId::Number(3)),
            "only the top-level id counts"
        );
        assert_eq!(
            found(format!(r#"{{"jsonrpc":"2.0","id":4}}{deep}"#)),
            Some(rmcp::model::RequestId::Number(4))
        );
    }

    #[test]
    fn lines_that_answer_nothing_are_left_alone() {
        let deep = nested(1000);
        for line in [
            // A request or notification of the server's, not an answer.
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{deep}}}"#
            ),
            format!(r#"{{"method":"notifications/message","params":{deep}}}"#),
            // No id, or an id that is no request's.
            format!(r#"{{"jsonrpc":"2.0","result":{deep}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":{{"a":1}},"result":{deep}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":null,"result":{deep}}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":"{}","result":{deep}}}"#,
                "x".repeat(100)
            ),
            // Not an object; a key that only looks like one.
            deep.clone(),
            format!(r#"{{"x":"\"id\":5","result":{deep}}}"#),
            // Deep inside strings is not deep.
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":"{}"}}"#,
                "[".repeat(1000)
            ),
            // Readable answers.
            answer("1", 20),
        ] {
            assert_eq!(scan(&line), None, "{}", &line[..line.len().min(120)]);
        }
    }
}
