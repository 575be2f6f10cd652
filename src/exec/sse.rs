//! Server-sent-events framing (pure): bytes as they come off the network →
//! complete events.
//!
//! Network chunks do not respect event boundaries: one chunk may hold half an
//! event, or several events, or split a `\r\n` in two. The decoder therefore
//! keeps the unfinished line between calls and only emits an event once its
//! terminating blank line has arrived. It is a few dozen lines of our own
//! rather than a dependency so that it can be tested on byte fixtures split at
//! every offset, and so that a stream cut in the middle of a line is visibly
//! *not* an event (the caller classifies that as a broken stream, not as a
//! malformed one).
//!
//! Follows the WHATWG event-stream rules that matter for OpenAI-style
//! streams: `\n`, `\r\n` and `\r` line endings; `data:` lines joined with
//! `\n`; one optional space after the colon; `:` comment lines ignored;
//! `event:` kept; other fields (`id:`, `retry:`) ignored.

use std::collections::VecDeque;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server sent one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental decoder: [`push`](Self::push) bytes, then drain
/// [`next_event`](Self::next_event).
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a leading `\n` belongs to it.
    after_cr: bool,
    /// Fields of the event being assembled.
    data: String,
    has_data: bool,
    event: Option<String>,
    ready: VecDeque<SseEvent>,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next network chunk.
    pub fn push(&mut self, mut chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(pos) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&chunk[..pos]);
            let was_cr = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
            if was_cr {
                if chunk.is_empty() {
                    self.after_cr = true;
                } else if let Some(rest) = chunk.strip_prefix(b"\n") {
                    chunk = rest;
                }
            }
            let line = std::mem::take(&mut self.line);
            self.on_line(&line);
            // Reuse the allocation for the next line.
            self.line = line;
            self.line.clear();
        }
        self.line.extend_from_slice(chunk);
    }

    /// The next complete event, in arrival order.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    /// End of stream: an event whose lines were all complete but whose blank
    /// line never came is still delivered (some servers omit the last blank
    /// line); a partial line is discarded, since it may be half a JSON object.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.line.clear();
        if let Some(event) = self.ready.pop_front() {
            return Some(event);
        }
        self.take_event()
    }

    /// Bytes received but not yet part of a complete line (for diagnostics).
    pub fn pending_bytes(&self) -> usize {
        self.line.len()
    }

    fn on_line(&mut self, line: &[u8]) {
        if line.is_empty() {
            if let Some(event) = self.take_event() {
                self.ready.push_back(event);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            while let Some(e) = decoder.next_event() {
                out.push(e);
            }
        }
        while let Some(e) = decoder.finish() {
            out.push(e);
        }
        out
    }

    fn data(s: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: s.to_string(),
        }
    }

    const OPENAI_STREAM: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
: keep-alive comment\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\" th\xc3\xa9re\"}}]}\r\n\r\n\
event: message\rdata: line one\rdata:line two\r\r\
data: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            data("{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}"),
            data("{\"choices\":[{\"delta\":{\"content\":\" thére\"}}]}"),
            SseEvent {
                event: Some("message".into()),
                data: "line one\nline two".into(),
            },
            data("[DONE]"),
        ]
    }

    #[test]
    fn whole_stream_in_one_chunk() {
        assert_eq!(decode_chunks(&[OPENAI_STREAM]), expected());
    }

    #[test]
    fn split_at_every_offset_gives_the_same_events() {
        for cut in 0..=OPENAI_STREAM.len() {
            let (a, b) = OPENAI_STREAM.split_at(cut);
            assert_eq!(decode_chunks(&[a, b]), expected(), "split at byte {cut}");
        }
    }

    #[test]
    fn split_at_every_pair_of_offsets() {
        let n = OPENAI_STREAM.len();
        for i in 0..=n {
            for j in i..=n {
                let chunks = [
                    &OPENAI_STREAM[..i],
                    &OPENAI_STREAM[i..j],
                    &OPENAI_STREAM[j..],
                ];
                assert_eq!(decode_chunks(&chunks), expected(), "split at {i} and {j}");
            }
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let chunks: Vec<&[u8]> = OPENAI_STREAM.chunks(1).collect();
        assert_eq!(decode_chunks(&chunks), expected());
    }

    #[test]
    fn crlf_split_between_chunks_is_one_line_ending() {
        let events = decode_chunks(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(events, vec![data("a"), data("b")]);
    }

    #[test]
    fn partial_line_at_end_of_stream_is_not_an_event() {
        let events = decode_chunks(&[b"data: {\"a\":1}\n\ndata: {\"choi"]);
        assert_eq!(events, vec![data("{\"a\":1}")]);
    }

    #[test]
    fn complete_lines_without_final_blank_line_are_delivered() {
        let events = decode_chunks(&[b"data: x\n\ndata: [DONE]\n"]);
        assert_eq!(events, vec![data("x"), data("[DONE]")]);
    }

    #[test]
    fn data_field_without_colon_or_space() {
        let events = decode_chunks(&[b"data\n\ndata:x\n\n"]);
        assert_eq!(events, vec![data(""), data("x")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        let events = decode_chunks(&[b"event: ping\n\nid: 3\nretry: 10\n\ndata: y\n\n"]);
        assert_eq!(events, vec![data("y")]);
    }

    #[test]
    fn pending_bytes_reports_an_unterminated_line() {
        let mut decoder = SseDecoder::new();
        decoder.push(b"data: ab");
        assert_eq!(decoder.pending_bytes(), 8);
        decoder.push(b"\n");
        assert_eq!(decoder.pending_bytes(), 0);
    }
}
