//! Replaying a recorded trace (pure): the prompt of each row, its Mooncake
//! hash ids rendered as shared blocks. Reading the file is
//! [`crate::data::trace`]'s; its items are re-exported here.

pub use crate::data::trace::*;

use super::{CallSpec, Message, Role, Segment, Task, TaskSpec, mix};

/// Domain tag of block segments, so a block id never equals a task's unique key.
const BLOCK_STREAM: u64 = 0x0042_4C4F_434B; // "BLOCK"
/// Domain tag of a row's own (unshared) tail.
const ROW_STREAM: u64 = 0x0052_4F57_5441_494C; // "ROWTAIL"

/// The key stream of a run's blocks: equal hash ids render equal blocks
/// within a run (`seed`) and content nonce, different ones across them.
pub(crate) fn block_stream(seed: u64, content_nonce: u64) -> u64 {
    mix(mix(BLOCK_STREAM, seed), content_nonce)
}

/// A prompt of `input_tokens` as `hash_ids` blocks of `block_tokens`
/// (keyed in `block_stream`), the rest unique content keyed by `tail_key`.
pub(crate) fn block_segments(
    hash_ids: &[u64],
    input_tokens: u32,
    block_tokens: u32,
    block_stream: u64,
    tail_key: u64,
) -> Vec<Segment> {
    let block_tokens = block_tokens.max(1);
    let mut segments = Vec::with_capacity(hash_ids.len() + 1);
    let mut left = input_tokens;
    for &id in hash_ids {
        if left == 0 {
            break;
        }
        let tokens = left.min(block_tokens);
        segments.push(Segment::Unique {
            key: mix(block_stream, id),
            tokens,
        });
        left -= tokens;
    }
    if left > 0 {
        segments.push(Segment::Unique {
            key: tail_key,
            tokens: left,
        });
    }
    segments
}

impl Trace {
    /// Task `index` = row `index` (modulo the row count, for closed loops
    /// that outlast the trace): one call whose prompt is the row's blocks.
    /// Equal hash ids render equal blocks within a run (`seed`) and content
    /// nonce, and different ones across runs and invocations, so a replay
    /// reuses what the trace reuses and nothing an earlier replay left cached.
    pub fn task(&self, index: u64, seed: u64, block_tokens: u32, content_nonce: u64) -> Task {
        let row = &self.rows[(index % self.rows.len() as u64) as usize];
        let segments = block_segments(
            &row.hash_ids,
            row.input_tokens,
            block_tokens,
            block_stream(seed, content_nonce),
            mix(mix(mix(seed, content_nonce), ROW_STREAM), index),
        );
        Task {
            index,
            spec: TaskSpec::Single(CallSpec {
                tools: None,
                answer_in_words: false,
                messages: vec![Message {
                    role: Role::User,
                    segments,
                }],
                input_tokens: row.input_tokens,
                output_tokens: row.output_tokens,
            }),
            class: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::data::dataset::DatasetError;
    use crate::workload::prompt::render_text;

    const MOONCAKE: &str = r#"{"timestamp": 1000, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}
{"timestamp": 1250, "input_length": 20, "output_length": 7, "hash_ids": [1, 2]}
{"timestamp": 2000, "input_length": 70, "output_length": 0, "hash_ids": [9]}
"#;

    fn prompt(trace: &Trace, i: u64) -> String {
        match trace.task(i, 7, 16, 0).spec {
            TaskSpec::Single(call) => render_text(&call.messages[0].segments),
            _ => unreachable!(),
        }
    }

    #[test]
    fn mooncake_rows_offsets_and_rate() {
        let trace = parse_trace(MOONCAKE, "t.jsonl").unwrap();
        assert_eq!(trace.rows.len(), 3);
        assert_eq!(trace.rows[2].output_tokens, 1);
        assert!((trace.span_s() - 1.0).abs() < 1e-12);
        assert!((trace.mean_rate_per_s() - 2.0).abs() < 1e-12);
        let at1: Vec<_> = trace.offsets(1.0).collect();
        assert_eq!(at1, [0, 250, 1000].map(Duration::from_millis).to_vec());
        let at2: Vec<_> = trace.offsets(2.0).collect();
        assert_eq!(at2, [0, 125, 500].map(Duration::from_millis).to_vec());
        assert!((trace.speedup_for_rate(6.0) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn shared_hash_ids_render_identical_prefixes() {
        let trace = parse_trace(MOONCAKE, "t.jsonl").unwrap();
        let (a, b, c) = (prompt(&trace, 0), prompt(&trace, 1), prompt(&trace, 2));
        assert_eq!(a.split_whitespace().count(), 40);
        assert_eq!(b.split_whitespace().count(), 20);
        assert_eq!(c.split_whitespace().count(), 70);
        // Row 1 is blocks 1 and 2 (16 + 4 tokens): a prefix of row 0.
        assert!(a.starts_with(&b), "{a}\n{b}");
        assert_ne!(a.split_whitespace().next(), c.split_whitespace().next());
        let call = match trace.task(0, 7, 16, 0).spec {
            TaskSpec::Single(call) => call,
            _ => unreachable!(),
        };
        assert_eq!(call.input_tokens, 40);
        assert_eq!(call.messages[0].segments.len(), 3);
    }

    #[test]
    fn burstgpt_csv_with_lenient_header() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    5,ChatGPT,472,18,490,Conversation log\n\
                    5.5,GPT-4,1087,0,1087,Conversation log\n\
                    7,ChatGPT,100,250,350,API log\n";
        let trace = parse_trace(text, "b.csv").unwrap();
        assert_eq!(trace.rows.len(), 3);
        assert_eq!(trace.rows[1].input_tokens, 1087);
        assert_eq!(trace.rows[1].output_tokens, 1);
        assert_eq!(trace.rows[2].timestamp_ms, 7000.0);
        assert!((trace.mean_rate_per_s() - 1.0).abs() < 1e-12);
        let lowercase = "time_s,input_tokens,output_tokens\n0,10,2\n1,20,3\n";
        assert_eq!(
            parse_trace(lowercase, "x.csv").unwrap().rows[1].input_tokens,
            20
        );
    }

    #[test]
    fn bad_rows_are_reported_with_line_numbers() {
        let text = "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1}\n\
                    {\"timestamp\": 10, \"input_length\": \"x\", \"output_length\": 1}\n";
        let err = parse_trace(text, "t.jsonl").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.jsonl line 2: `input_length` must be a whole number of tokens, got \"x\""
        );
        let err = parse_trace("Timestamp,Request tokens\n1,2\n", "b.csv").unwrap_err();
        assert!(
            err.to_string()
                .contains("line 1: the CSV header has no response tokens")
        );
        let err = parse_trace(
            "Timestamp,Request tokens,Response tokens\n1,2,3\nx,2,3\n",
            "b.csv",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("b.csv line 3:"), "{err}");
        let one = "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1}\n";
        assert!(matches!(
            parse_trace(one, "t"),
            Err(DatasetError::Unusable { .. })
        ));
    }
}
