//! Caps the size of one SSE event before the parser buffers it.

/// Counts the bytes of the event being received (everything since the last blank line).
/// sse-stream buffers an unfinished line or event without limit, so the cap must sit in front of it.
pub(super) struct EventSizeLimit {
    max_bytes: usize,
    event_bytes: usize,
    line_bytes: usize,
    previous_was_cr: bool,
}

impl EventSizeLimit {
    pub(super) fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            event_bytes: 0,
            line_bytes: 0,
            previous_was_cr: false,
        }
    }

    pub(super) fn observe(&mut self, chunk: &[u8]) -> Result<(), std::io::Error> {
        for &byte in chunk {
            // CR LF is one line break, possibly split across chunks.
            let continues_crlf = self.previous_was_cr && byte == b'\n';
            self.previous_was_cr = byte == b'\r';
            if continues_crlf {
                continue;
            }
            if byte == b'\r' || byte == b'\n' {
                if self.line_bytes == 0 {
                    self.event_bytes = 0;
                }
                self.line_bytes = 0;
                continue;
            }
            self.line_bytes += 1;
            self.event_bytes += 1;
            if self.event_bytes > self.max_bytes {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("an SSE event exceeded {} bytes", self.max_bytes),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::EventSizeLimit;

    #[test]
    fn blank_line_resets_the_count_across_chunks_and_line_endings() {
        let mut limit = EventSizeLimit::new(10);
        limit.observe(b"data: 1234\r").unwrap();
        limit.observe(b"\n\r\ndata: 5678\n\n").unwrap();
        assert!(limit.observe(b"data: 1234\ndata").is_err());
    }
}
