//! The journal: one JSON line per event of a run, appended and flushed as it
//! happens, so a crash or Ctrl-C keeps everything measured so far.
//!
//! Times are milliseconds since the run's start instant `t0` (the start of
//! warmup). The first line is a [`RunHeader`], then [`RequestRecord`]s and
//! [`TaskRecord`]s in completion order, and a [`RunFooter`] if the run ended
//! (cleanly or interrupted).

use serde::{Deserialize, Serialize};

use crate::plan::RunPlan;

/// One line of `runs/<run-id>.jsonl`.
// One header per journal against thousands of records: the lines are built
// and written one at a time, never stored in bulk as this enum.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum JournalLine {
    Run(RunHeader),
    Request(RequestRecord),
    Task(TaskRecord),
    End(RunFooter),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    pub run: RunPlan,
    /// Wall-clock start, RFC 3339 UTC.
    pub started_at: String,
    /// Model id actually sent.
    pub model: String,
    /// End of warmup (ms since t0): measurement starts here.
    pub measure_from_ms: f64,
    /// The content nonce prompts were drawn with: seed + nonce reproduce
    /// the exact request stream (`capcard run --nonce`).
    #[serde(default)]
    pub content_nonce: u64,
    /// How prompt lengths were matched to the plan (token ids, tokenizer,
    /// words), as the card states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_sizing: Option<String>,
    /// How the server's prefix cache was emptied before the run
    /// (`POST /reset_prefix_cache`); `None`: the server offers no way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_reset: Option<String>,
    /// Why no telemetry was scraped during the run (refused, not offered, off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_off: Option<String>,
    /// Set when the run was not measured in real time: it says which clock
    /// ("virtual time: ..."), and the card repeats it. `None`: wall clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// The target's context window as known at the start (sim preset,
    /// `max-context`, or the server's report); `None`: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<crate::plan::context::ContextWindow>,
    /// A shard's journal: which part of the run it sent and how its start
    /// was agreed; `None`: one process sent the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardClock>,
    /// A merged journal: every shard's, in shard order (`capcard merge`, or
    /// the coordinator); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardClock>,
    /// How the preflight settled the request body with this server (see
    /// [`crate::exec::preflight`]); `None`: no preflight (virtual time, or
    /// a journal older than it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<Dialect>,
}

/// The request dialect a target was found to accept, as every call of the
/// run sent it: settled by the preflight, never silently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dialect {
    /// The body field that carries the output length:
    /// `max_completion_tokens` (chat) or `max_tokens`.
    pub length_field: String,
    /// `stream_options.include_usage` was sent (the server reports usage in
    /// the stream).
    pub stream_usage: bool,
    /// `ignore_eos` and `min_tokens` were sent to force the planned length.
    pub force_length: bool,
    /// Where output tokens are counted from: `usage` (the server's),
    /// `tokenizer` (the target's, on the streamed text) or `chunks` (one
    /// token per streamed content event, an approximation).
    pub output_tokens_from: TokenSource,
    /// What the preflight changed and why, one sentence each, quoting the
    /// server; empty when the first body was accepted as it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settled: Vec<String>,
    /// Calls the preflight sent (one, plus one per dialect it settled).
    pub preflight_calls: u32,
}

/// How one shard's part of a run was started, for the merge to judge
/// whether the shards really ran as one load generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardClock {
    pub index: u32,
    pub count: u32,
    /// How the shards agreed on the start: `coordinator <url>` or
    /// `timetable from --start-at`.
    pub agreed_by: String,
    /// The agreed start (the run's t0), RFC 3339 UTC on the reference clock
    /// (the coordinator's, or this host's for a timetable).
    pub start_at: String,
    /// Reference clock minus this host's clock, in ms, measured against the
    /// coordinator (the sample with the shortest round trip); `None` for a
    /// timetable, which trusts the host clocks (NTP) as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<f64>,
    /// Half that sample's round trip: how far off the offset can be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_uncertainty_ms: Option<f64>,
    /// How late this shard's t0 was taken after the agreed instant, on its
    /// own clock (≥ 0). Latencies are still measured from the agreed
    /// schedule; the lag shows as schedule lag too.
    pub start_lag_ms: f64,
}

/// One LLM call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Task index in the run's stream.
    pub task: u64,
    /// Call index within the task (0 for single requests).
    pub call: u32,
    /// When the call should have started (open loop: the scheduled arrival
    /// for a task's first call). Latencies are measured from here.
    pub scheduled_ms: f64,
    /// When the request was actually handed to the HTTP client.
    pub sent_ms: f64,
    /// `sent_ms − scheduled_ms` (≥ 0; 0 in closed loop).
    pub schedule_lag_ms: f64,
    /// When the last byte arrived or the call failed.
    pub completed_ms: f64,
    /// Time to the first generated token of any kind (reasoning, content
    /// or a tool call), from `scheduled_ms`.
    pub ttft_ms: Option<f64>,
    /// Time to the first *output* token (content or a tool call, after any
    /// reasoning), from `scheduled_ms`: when the answer starts. Equal to
    /// `ttft_ms` for a model that does not reason; `None` when no output
    /// came (a failure, or an answer that was all reasoning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfo_ms: Option<f64>,
    /// Start → end of stream, from `scheduled_ms`; `None` on error.
    pub e2e_ms: Option<f64>,
    /// Gaps between consecutive content chunks.
    pub itl_ms: Vec<f32>,
    pub prompt_tokens_requested: u32,
    /// From the server's `usage`, when it sends one.
    pub prompt_tokens_reported: Option<u32>,
    /// Of the prompt, the tokens the server served from its prefix cache:
    /// `usage.prompt_tokens_details.cached_tokens` (the Responses API's
    /// `usage.input_tokens_details.cached_tokens`). `None`: the server did
    /// not report it, which is not 0 (vLLM reports it only with
    /// `--enable-prompt-tokens-details`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    pub output_tokens_requested: u32,
    /// Output tokens counted (from `usage` when given, else content chunks),
    /// reasoning included: what the server generated.
    pub output_tokens: u32,
    pub output_tokens_source: TokenSource,
    /// Of `output_tokens`, those the model spent reasoning before its
    /// answer (`usage.completion_tokens_details.reasoning_tokens`, else the
    /// reasoning deltas counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens_source: Option<TokenSource>,
    /// Tool calls the answer made (`delta.tool_calls`, or the Responses
    /// API's `function_call` items).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u32,
    pub finish_reason: Option<String>,
    /// `None` = success.
    pub error: Option<ErrorClass>,
    /// The server's message or the client's description of the failure.
    pub error_detail: Option<String>,
    pub http_status: Option<u16>,
    /// Times the call found its kept-alive connection already closed by the
    /// server (before any response byte) and was sent again on a fresh one.
    /// The server never read the first send: not an error, not a second request.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reconnects: u32,
    /// The mix class of the call's task; `None` outside a mix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// A refusal's `Retry-After` (HTTP 429, 503, 529), in ms:
    /// what the server asked the client to wait before its next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<f64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RequestRecord {
    /// A call built by hand (tests, examples, a tool that writes journals):
    /// sent on schedule, its first token `ttft_ms` after `scheduled_ms`,
    /// then one token after each gap of `itl_ms`. 100 prompt tokens, the
    /// counts from `usage`, finished by length with HTTP 200. Set what else
    /// matters with struct update syntax.
    pub fn succeeded(
        task: u64,
        scheduled_ms: f64,
        ttft_ms: f64,
        itl_ms: Vec<f32>,
    ) -> RequestRecord {
        let e2e_ms = ttft_ms + itl_ms.iter().map(|&gap| f64::from(gap)).sum::<f64>();
        let output_tokens = u32::try_from(itl_ms.len() + 1).unwrap_or(u32::MAX);
        RequestRecord {
            task,
            call: 0,
            scheduled_ms,
            sent_ms: scheduled_ms,
            schedule_lag_ms: 0.0,
            completed_ms: scheduled_ms + e2e_ms,
            ttft_ms: Some(ttft_ms),
            ttfo_ms: None,
            e2e_ms: Some(e2e_ms),
            itl_ms,
            prompt_tokens_requested: 100,
            prompt_tokens_reported: Some(100),
            cached_tokens: None,
            output_tokens_requested: output_tokens,
            output_tokens,
            output_tokens_source: TokenSource::Usage,
            reasoning_tokens: 0,
            reasoning_tokens_source: None,
            tool_calls: 0,
            finish_reason: Some("length".into()),
            error: None,
            error_detail: None,
            http_status: Some(200),
            reconnects: 0,
            class: None,
            retry_after_ms: None,
        }
    }

    /// A call built by hand that failed with `class` at `completed_ms`,
    /// before any token came.
    pub fn failed(
        task: u64,
        scheduled_ms: f64,
        completed_ms: f64,
        class: ErrorClass,
    ) -> RequestRecord {
        RequestRecord {
            completed_ms,
            ttft_ms: None,
            e2e_ms: None,
            output_tokens: 0,
            finish_reason: None,
            error: Some(class),
            http_status: None,
            ..RequestRecord::succeeded(task, scheduled_ms, 0.0, vec![])
        }
    }

    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// Whether the endpoint failed the call: any error but `cancelled`
    /// (the client stopped it, not the endpoint) and `context-length` (the
    /// call could never fit the model's window: the workload's fault, so it
    /// must not read as the replica's capacity).
    pub fn is_failure(&self) -> bool {
        self.error
            .is_some_and(|e| e != ErrorClass::Cancelled && e != ErrorClass::ContextLength)
    }

    /// Whether the server refused the call because prompt + output exceed
    /// the model's context window.
    pub fn is_context_rejection(&self) -> bool {
        self.error == Some(ErrorClass::ContextLength)
    }

    /// Time to the first output token ([`RequestRecord::ttfo_ms`]); a
    /// journal written before it was recorded had no reasoning, so its
    /// TTFT is its TTFO.
    pub fn ttfo(&self) -> Option<f64> {
        match self.ttfo_ms {
            Some(t) => Some(t),
            None if self.reasoning_tokens_source.is_none() => self.ttft_ms,
            None => None,
        }
    }

    /// Streamed events that carried generated tokens (the first, then one
    /// per inter-event gap).
    pub fn token_events(&self) -> u32 {
        if self.ttft_ms.is_some() {
            self.itl_ms.len() as u32 + 1
        } else {
            0
        }
    }

    /// Time per output token after the first, (E2E − TTFT) / (output − 1),
    /// of a successful call; `None` below 2 output tokens.
    pub fn tpot_ms(&self) -> Option<f64> {
        if !self.is_ok() || self.output_tokens < 2 {
            return None;
        }
        let (ttft, e2e) = (self.ttft_ms?, self.e2e_ms?);
        Some((e2e - ttft).max(0.0) / f64::from(self.output_tokens - 1))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TokenSource {
    /// The server's `usage.completion_tokens`.
    Usage,
    /// No usage: the number of streamed content chunks (≈ tokens on most servers).
    Chunks,
    /// No usage: the streamed text encoded with the target's `tokenizer`.
    Tokenizer,
}

/// Why a call failed. Every failure is counted by class, none aborts a run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorClass {
    /// TCP connect refused / DNS / TLS.
    Connect,
    /// No completion within the target's timeout.
    Timeout,
    /// Non-2xx HTTP status.
    HttpStatus,
    /// The server refused the call for a quota (HTTP 429; an error
    /// `code`/`type` that names a rate limit, such as `rate_limit_exceeded`,
    /// whatever the status): the provider's limit, not the replica's
    /// capacity.
    RateLimited,
    /// The server refused the call as overloaded (HTTP 503 or 529; an error
    /// `code`/`type` that names an overload, such as Anthropic's
    /// `overloaded_error` or TGI's `overloaded` with its 429; an error event
    /// that says so mid-stream): the replica failed under load. A failure
    /// like any other, beyond every latency bound; not a quota. Not to be
    /// confused with an overloaded *run* (`RunState::Overloaded`), a run
    /// that could not keep up with its arrivals.
    Overloaded,
    /// The server refused the call because its prompt plus the output asked
    /// for exceed the model's context window (vLLM's "maximum context
    /// length", llama.cpp's `exceed_context_size_error`, ...). A mismatch of
    /// workload and target: counted and shown, never judged as capacity.
    ContextLength,
    /// Connection closed before `[DONE]` / a finish reason.
    BrokenStream,
    /// An event that is not valid JSON or lacks the expected fields.
    MalformedEvent,
    /// Stream completed without any content token.
    EmptyOutput,
    /// Still in flight when the run was interrupted (Ctrl-C).
    Cancelled,
    /// The client itself ran out of resources (file descriptors, ephemeral
    /// ports, memory) before the request reached the server: never the
    /// server's failure.
    ClientLimit,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Connect => "connect",
            ErrorClass::Timeout => "timeout",
            ErrorClass::HttpStatus => "http-status",
            ErrorClass::RateLimited => "rate-limited",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::ContextLength => "context-length",
            ErrorClass::BrokenStream => "broken-stream",
            ErrorClass::MalformedEvent => "malformed-event",
            ErrorClass::EmptyOutput => "empty-output",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::ClientLimit => "client-limit",
        }
    }
}

/// A whole task (conversation / agent task); single-call workloads write none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task: u64,
    pub scheduled_ms: f64,
    pub completed_ms: f64,
    /// Whole task, from `scheduled_ms`; `None` if any call failed.
    pub e2e_ms: Option<f64>,
    pub calls: u32,
    /// Calls that failed, `context-length` rejections included.
    pub failed_calls: u32,
    /// Of `failed_calls`, those refused for context length: a task whose
    /// only failures are these is no sample of any SLO.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_rejected_calls: u32,
    /// The mix class of the task; `None` outside a mix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFooter {
    /// Measured window [from, to] in ms since t0 (after warmup).
    pub measured_window_ms: [f64; 2],
    /// Open loop: arrivals scheduled inside the measured window.
    pub offered: Option<u64>,
    /// Samples of (ms since t0, calls in flight), about every 100 ms:
    /// shows a growing backlog in open loop.
    pub inflight_samples: Vec<(f64, u32)>,
    /// The generator fell behind its own schedule (lag p99 above threshold).
    pub generator_lagging: bool,
    pub interrupted: bool,
    pub finished_at: String,
    /// HTTP/1.1 connections the run opened (`None`: HTTP/2, or an older journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_opened: Option<u64>,
    /// The run stopped before its planned end because its first calls all
    /// failed alike ([`EarlyStop::RULE`]); `None`: it ran its course.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<EarlyStop>,
    /// The run stopped before its planned end because it was already
    /// decisively beyond every SLO it was judged against; its window ends
    /// at the stop. `None`: it ran its course.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<DecisiveStop>,
    /// What an ideal, unlimited prefix cache would have served of the
    /// measured calls' prompts, the run's calls fed to it in the order they
    /// were sent ([`crate::workload::reuse`]); `None`: not computed (an
    /// older journal, a merged shard's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_potential: Option<crate::workload::reuse::ReuseTally>,
}

/// Why an open run was ended once it was decisively beyond its SLOs (a
/// sequential one-sided binomial test, [`crate::stats::sequential`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DecisiveStop {
    /// When starting stopped, ms since t0.
    pub at_ms: f64,
    /// The chance, at most, that a run within its SLOs is stopped at all.
    pub alpha: f64,
    /// Per SLO, the clause that decided.
    pub clauses: Vec<DecisiveClause>,
}

/// One clause a run was decisively beyond, as the deciding look saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DecisiveClause {
    pub slo: String,
    /// `"ttft p90 ≤ 250ms"`.
    pub clause: String,
    /// Samples seen so far and those beyond the bound.
    pub samples: u64,
    pub beyond: u64,
    /// The fraction the clause allows beyond its bound.
    pub allowed: f64,
    /// The batch-means variance inflation the look used.
    pub inflation: f64,
    /// The bound on the chance of so many beyond, were the run within.
    pub p_bound: f64,
}

/// Told of every record of a run as it completes (calls and tasks alike,
/// in the order the journal gets them); it may end the run: `Some` stops
/// starting new arrivals, and the run's window ends then. Implemented
/// where the SLOs are known ([`crate::analyze::decisive`]); the runners
/// only call it.
pub trait RunWatch: Send {
    fn observe(&mut self, line: &JournalLine, now_ms: f64) -> Option<DecisiveStop>;

    /// An open-loop arrival (a task) scheduled at `scheduled_ms`, told as
    /// it is dispatched (`now_ms`); it may end the run as `observe` does.
    /// Calls pile up unanswered far beyond capacity, and only arrivals
    /// then say how many calls are waiting.
    fn arrived(&mut self, _scheduled_ms: f64, _now_ms: f64) -> Option<DecisiveStop> {
        None
    }
}

/// Why a run that could only measure a failure was ended early.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EarlyStop {
    /// The rule, as the card states it.
    pub rule: String,
    /// The calls that all failed alike.
    pub calls: u32,
    pub class: ErrorClass,
    pub http_status: Option<u16>,
    /// The first of those calls' `error_detail`: the server's own words.
    pub detail: Option<String>,
    /// When starting stopped, ms since t0.
    pub at_ms: f64,
}

impl EarlyStop {
    /// Completed calls after which a run whose calls all failed with the
    /// same class and status is stopped.
    pub const CALLS: u32 = 20;
    /// The rule in words, journaled with every early stop.
    pub const RULE: &'static str = "a run stops once its first 20 completed calls (warmup included) all failed with the same class and HTTP status: it can measure nothing but that failure";
}

/// A journal read back from disk: what a run measured, complete or not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Journal {
    pub header: Option<RunHeader>,
    pub requests: Vec<RequestRecord>,
    pub tasks: Vec<TaskRecord>,
    /// Missing when the process died mid-run.
    pub footer: Option<RunFooter>,
}
