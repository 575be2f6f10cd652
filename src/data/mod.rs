//! The data files an experiment names, read into memory (pure parsers, no
//! file I/O: the caller reads the bytes at the edge): datasets of prompts,
//! recorded arrival traces, and a model's tokenizer.
//!
//! A leaf below the configuration, which holds what these parse, and the
//! workload, which turns them into requests.

pub mod agent_trace;
pub mod dataset;
pub mod tokenizer;
pub mod trace;

/// Who speaks a message of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// An assistant turn that called a tool (call number `n` of the task);
    /// its segments are the call's arguments.
    ToolCall(u32),
    /// A tool's result for call number `n`.
    ToolResult(u32),
}
