//! The preflight: before anything is measured, one call built exactly as
//! the run's calls will be (the same body options, the same shape of
//! prompt and output), read to its end, so a server that refuses the body
//! costs one call instead of a run's worth.
//!
//! What the server says is judged here, purely ([`judge`]), from the
//! answer's status, `Retry-After` and body:
//!
//! - **Settled on its own**, recorded in every run's header
//!   ([`Dialect`]) and on the card, never silently:
//!   `stream_options` refused → sent without it (output tokens are then
//!   counted with the target's tokenizer, or by chunks, and the card says
//!   which); the length field refused → the other name
//!   (`max_completion_tokens` ↔ `max_tokens`); a length field the server
//!   ignores (the answer runs past the planned length) → the other name.
//! - **Refused**: the run stops before it starts (exit 2) with the server's
//!   status and words quoted, what capcard concludes, and the fix:
//!   `ignore_eos`/`min_tokens` → `force-length #false`; a field of
//!   `extra-body` → remove it; `temperature` → `extra-body { temperature 1 }`;
//!   a model the server does not know → the names it lists, with the
//!   closest; credentials → `api-key-env`.
//! - **Retried**: a quota (429, honouring `Retry-After` up to its cap), an
//!   overloaded server (503, 529, honouring `Retry-After` alike: it is busy
//!   with other traffic, or still loading) or a server error, a few times,
//!   then refused with the server's words.
//!
//! Which fields a refusal names is read from its words
//! ([`refused_fields`]), because servers word it differently: OpenAI
//! ("Unrecognized request argument supplied: a, b"; "Unsupported
//! parameter: 'max_tokens' … Use 'max_completion_tokens' instead"), serde
//! servers such as TGI ("unknown field `x`, expected one of `a`, `b`" —
//! the list after "expected" names *accepted* fields), pydantic (`loc`),
//! LiteLLM ("does not support parameters: ['a']").

use std::time::Duration;

use bytes::Bytes;

use super::Endpoint;
use super::record::{Dialect, ErrorClass, TokenSource};
use super::request::{BodyOptions, LengthField};
use super::sse::SseDecoder;
use super::stream::{StreamEnd, StreamObserver, error_message, http_error_class, truncate_detail};
use crate::config::Api;

/// The most calls one preflight sends: the first, one per dialect it can
/// settle (length field, usage), and a few retries of a quota, an
/// overload or a server error.
pub const MAX_CALLS: u32 = 6;
/// Retries of a 429, a 503/529 or a 5xx before the preflight gives up.
const MAX_RETRIES: u32 = 2;
/// The preflight stops reading an answer once it has this many times the
/// planned output (plus some): a server that ignores the length field
/// would otherwise stream to its context's end.
const RUNAWAY_FACTOR: u32 = 2;
const RUNAWAY_SLACK: u32 = 16;
/// Longest error body kept.
const MAX_ERROR_BODY: usize = 8 * 1024;

/// What one preflight call got back.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
    /// The error body, or the stream's bytes (possibly cut: `runaway`).
    pub body: Vec<u8>,
    /// Reading stopped because the output ran past the planned length.
    pub runaway: bool,
    /// The call failed before an answer (connect, timeout): the reason.
    pub transport_error: Option<String>,
}

/// What an accepted answer showed.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The server reported `usage` in the stream.
    pub usage_reported: bool,
    /// Output tokens: usage when reported, else content chunks.
    pub output_tokens: u32,
    pub finish_reason: Option<String>,
    /// Not a refusal of the body, but worth a sentence (context-length,
    /// an answer without content).
    pub note: Option<String>,
}

/// A change to the body the preflight can make on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    DropStreamUsage,
    UseLengthField(LengthField),
}

/// What a refusal is about, for callers that act on it (`capcard init`
/// writes `force-length #false` when the server refuses the extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// `ignore_eos` / `min_tokens`: fixed with `force-length #false`.
    ForceLength,
    /// A field of the target's `extra-body`.
    ExtraBody,
    /// `temperature 0`: fixed with `extra-body { temperature 1 }`.
    Temperature,
    /// Neither name of the length field works, or it is ignored.
    LengthField,
    Model,
    Credentials,
    Quota,
    /// The server refused the call as overloaded (503, 529): busy.
    Overloaded,
    /// A server error, a cut stream, no answer.
    Server,
    /// Words that name none of capcard's fields.
    Unknown,
}

/// Why the run cannot start, in the words the user reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// `HTTP 400 Bad Request: "..."`, quoted.
    pub quote: String,
    /// What capcard concludes.
    pub conclusion: String,
    /// The fix.
    pub help: String,
}

/// The verdict on one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    Accepted(Accepted),
    /// Send again with this change; the sentence says why (with the quote).
    Settle(Change, String),
    /// Send again after this wait (quota, overload, server error).
    Retry(Duration, String),
    Refused(Refusal),
}

/// What the judge needs to know of the call it judges.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub target: &'a str,
    pub api: Api,
    pub options: &'a BodyOptions,
    /// The output length the call asked for.
    pub requested_output: u32,
    /// The model sent, and the ids `GET /models` listed.
    pub model: &'a str,
    pub listed_models: &'a [String],
    /// Changes already made (a change is never made twice, and a settled
    /// field is never switched back).
    pub changed: &'a [Change],
    /// Retries already spent.
    pub retries: u32,
}

/// Judge one answer (pure).
pub fn judge(answer: &Answer, cx: &Context<'_>) -> Judgement {
    if let Some(reason) = &answer.transport_error {
        return retry_or_refuse(
            cx,
            (RefusalKind::Server, Duration::from_secs(1)),
            reason.clone(),
            format!(
                "the preflight call to target `{}` failed: {reason}",
                cx.target
            ),
            "check that the server is up and `endpoint` is right; nothing was measured".into(),
        );
    }
    if !(200..300).contains(&answer.status) {
        return judge_refusal(answer, cx);
    }
    let (observer, end) = read_stream(&answer.body, super::stream::Wire::of(cx.api));
    // A stream cut off by the preflight itself (it ran past the planned
    // length) is judged on its length, not on its missing end.
    let end = if answer.runaway { StreamEnd::Done } else { end };
    if let StreamEnd::Failed(class, detail) = &end {
        // An error inside a 200 stream: judged by its words like a status.
        if let Some(message) = detail.strip_prefix("server sent an error event: ") {
            if *class == ErrorClass::RateLimited {
                return retry_or_refuse(
                    cx,
                    (RefusalKind::Quota, Duration::from_secs(1)),
                    format!("HTTP 200 with an error event: \"{message}\""),
                    format!("target `{}` refuses calls for a quota", cx.target),
                    "wait for the quota to reset, or ask the provider for a higher limit".into(),
                );
            }
            if *class == ErrorClass::Overloaded {
                return retry_or_refuse(
                    cx,
                    (RefusalKind::Overloaded, Duration::from_secs(1)),
                    format!("HTTP 200 with an error event: \"{message}\""),
                    overloaded_conclusion(cx),
                    OVERLOADED_HELP.into(),
                );
            }
            return judge_words(
                cx,
                *class,
                format!("HTTP 200 with an error event: \"{message}\""),
                message,
                None,
            );
        }
        // A stream cut short or garbled: the server's trouble, retried.
        return retry_or_refuse(
            cx,
            (RefusalKind::Server, Duration::from_secs(1)),
            format!("{}: {detail}", class.as_str()),
            format!(
                "target `{}` did not stream a whole answer to the preflight call",
                cx.target
            ),
            "look at the server's log; nothing was measured".into(),
        );
    }
    let (output_tokens, source) = observer.output_tokens();
    let usage_reported = source == TokenSource::Usage;
    let length = cx.options.length_field_for(cx.api);
    if answer.runaway || output_tokens > cx.requested_output.saturating_add(1) {
        // The length field was ignored: try the other name once.
        let other = other_length_field(length);
        if cx.api == Api::Chat
            && !cx
                .changed
                .iter()
                .any(|c| matches!(c, Change::UseLengthField(_)))
        {
            return Judgement::Settle(
                Change::UseLengthField(other),
                format!(
                    "the server ignored `{}` (asked for {} output tokens, it sent {}{}): sent `{}` instead",
                    length.as_str(),
                    cx.requested_output,
                    if answer.runaway { "more than " } else { "" },
                    output_tokens,
                    other.as_str()
                ),
            );
        }
        return Judgement::Refused(Refusal {
            kind: RefusalKind::LengthField,
            quote: format!(
                "asked for {} output tokens with `{}`, the server sent {}{}",
                cx.requested_output,
                length.as_str(),
                if answer.runaway { "more than " } else { "" },
                output_tokens
            ),
            conclusion: format!(
                "target `{}` does not bound the output with `{}`: every call would run to the end of the model's window",
                cx.target,
                length.as_str()
            ),
            help: "name the server's own length field in the target's `extra-body` (for example `extra-body { max_new_tokens 256 }`), or use `api chat` / `api completions`, whichever the server bounds".into(),
        });
    }
    let mut notes = Vec::new();
    if observer.content_chunks() == 0 {
        notes.push(format!(
            "the preflight's answer had no content (finish reason {})",
            observer.finish_reason().unwrap_or("none")
        ));
    }
    Judgement::Accepted(Accepted {
        usage_reported,
        output_tokens,
        finish_reason: observer.finish_reason().map(str::to_string),
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    })
}

fn other_length_field(field: LengthField) -> LengthField {
    match field {
        LengthField::MaxTokens => LengthField::MaxCompletionTokens,
        LengthField::MaxCompletionTokens => LengthField::MaxTokens,
        // The Responses API has one name: it has no other.
        LengthField::MaxOutputTokens => LengthField::MaxOutputTokens,
    }
}

fn retry_or_refuse(
    cx: &Context<'_>,
    (kind, wait): (RefusalKind, Duration),
    why: String,
    conclusion: String,
    help: String,
) -> Judgement {
    if cx.retries < MAX_RETRIES {
        return Judgement::Retry(wait, why);
    }
    Judgement::Refused(Refusal {
        kind,
        quote: why,
        conclusion,
        help,
    })
}

/// What the preflight concludes when the server refused its call as
/// overloaded, after its retries.
fn overloaded_conclusion(cx: &Context<'_>) -> String {
    format!(
        "target `{}` refuses calls as overloaded before anything is measured: it is busy \
         (other traffic on it, or still starting or loading a model), so a run now would \
         measure that load, not the replica's capacity",
        cx.target
    )
}

const OVERLOADED_HELP: &str = "wait until the server is ready and serves no other traffic, \
     then run again; nothing was measured";

/// A non-2xx answer.
fn judge_refusal(answer: &Answer, cx: &Context<'_>) -> Judgement {
    let text = String::from_utf8_lossy(&answer.body);
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| error_message(&v))
        .unwrap_or_else(|| text.trim().to_string());
    let status = answer.status;
    let quote = format!(
        "HTTP {}: \"{}\"",
        status_text(status),
        truncate_detail(&message)
    );
    let class = http_error_class(status, &text);
    match class {
        ErrorClass::RateLimited => {
            let wait = answer.retry_after.unwrap_or(Duration::from_secs(1));
            return retry_or_refuse(
                cx,
                (RefusalKind::Quota, wait),
                quote.clone(),
                format!(
                    "target `{}` refuses calls for a quota before anything is measured: \
                     what a run would measure is the provider's rate limit, not the replica",
                    cx.target
                ),
                "wait for the quota to reset, ask the provider for a higher limit, or lower \
                 the load; capcard honours Retry-After in closed loop"
                    .into(),
            );
        }
        ErrorClass::Overloaded => {
            let wait = answer.retry_after.unwrap_or(Duration::from_secs(1));
            return retry_or_refuse(
                cx,
                (RefusalKind::Overloaded, wait),
                quote.clone(),
                overloaded_conclusion(cx),
                OVERLOADED_HELP.into(),
            );
        }
        ErrorClass::ContextLength => {
            return Judgement::Accepted(Accepted {
                usage_reported: cx.options.stream_usage,
                output_tokens: 0,
                finish_reason: None,
                note: Some(format!(
                    "the preflight's call was refused for the context window ({quote}); the body itself was not refused, and such calls are counted as context-length"
                )),
            });
        }
        _ => {}
    }
    if status >= 500 {
        return retry_or_refuse(
            cx,
            (RefusalKind::Server, Duration::from_secs(1)),
            quote.clone(),
            format!(
                "target `{}` failed the preflight call with a server error",
                cx.target
            ),
            "look at the server's log; nothing was measured".into(),
        );
    }
    if matches!(status, 401 | 403) {
        return Judgement::Refused(Refusal {
            kind: RefusalKind::Credentials,
            quote,
            conclusion: format!(
                "target `{}` refuses the credentials capcard sent",
                cx.target
            ),
            help: "set `api-key-env VAR` on the target and export the key in VAR (or a \
                   `header` the gateway expects)"
                .into(),
        });
    }
    judge_words(
        cx,
        class,
        quote,
        &String::from_utf8_lossy(&answer.body),
        Some(status),
    )
}

/// A refusal judged by the fields and names its words mention.
fn judge_words(
    cx: &Context<'_>,
    class: ErrorClass,
    quote: String,
    words: &str,
    status: Option<u16>,
) -> Judgement {
    let sent = cx.options.sent_fields(cx.api);
    let named = refused_fields(words, &sent);
    let has = |f: &str| named.iter().any(|n| n == f);
    if has("stream_options") && !cx.changed.contains(&Change::DropStreamUsage) {
        return Judgement::Settle(
            Change::DropStreamUsage,
            format!("the server refused `stream_options` ({quote}): sent without it"),
        );
    }
    let length = cx.options.length_field_for(cx.api);
    if has(length.as_str()) && !cx.options.extra.contains_key(length.as_str()) {
        let other = other_length_field(length);
        let switched = cx
            .changed
            .iter()
            .any(|c| matches!(c, Change::UseLengthField(_)));
        if cx.api == Api::Chat && !switched {
            return Judgement::Settle(
                Change::UseLengthField(other),
                format!(
                    "the server refused `{}` ({quote}): sent `{}` instead",
                    length.as_str(),
                    other.as_str()
                ),
            );
        }
        return refuse(
            RefusalKind::LengthField,
            quote,
            format!(
                "target `{}` refuses `{}`{}",
                cx.target,
                length.as_str(),
                if switched {
                    format!(" as well as `{}`", other.as_str())
                } else {
                    String::new()
                }
            ),
            match cx.api {
                Api::Completions => {
                    "the completions API has no other length field: try `api chat`".into()
                }
                Api::Responses => {
                    "the Responses API has no other length field: try `api chat`".into()
                }
                Api::Chat => "name the server's own length field in `extra-body`".into(),
            },
        );
    }
    let forcing: Vec<&str> = ["ignore_eos", "min_tokens"]
        .into_iter()
        .filter(|f| has(f) && !cx.options.extra.contains_key(*f))
        .collect();
    if !forcing.is_empty() {
        return refuse(
            RefusalKind::ForceLength,
            quote,
            format!("the server refuses {}", backticked(&forcing)),
            format!(
                "set `force-length #false` on target `{}` (outputs may then end early; the card counts them)",
                cx.target
            ),
        );
    }
    let extra: Vec<&str> = named
        .iter()
        .map(String::as_str)
        .filter(|f| cx.options.extra.contains_key(*f))
        .collect();
    if !extra.is_empty() {
        return refuse(
            RefusalKind::ExtraBody,
            quote,
            format!(
                "the server refuses {} from `extra-body`",
                backticked(&extra)
            ),
            format!("remove them from target `{}`'s `extra-body`", cx.target),
        );
    }
    if has("temperature") {
        return refuse(
            RefusalKind::Temperature,
            quote,
            "the server refuses `temperature 0` (reasoning models accept only their default)"
                .into(),
            format!(
                "set `extra-body {{ temperature 1 }}` on target `{}`: a field named there replaces capcard's",
                cx.target
            ),
        );
    }
    if status == Some(404) || says_unknown_model(words, cx.model) {
        return refuse(
            RefusalKind::Model,
            quote,
            format!("the server does not serve model `{}`", cx.model),
            model_help(cx),
        );
    }
    refuse(
        RefusalKind::Unknown,
        quote,
        format!(
            "target `{}` refused the preflight call ({}), and its words name none of the fields capcard sends ({})",
            cx.target,
            class.as_str(),
            sent.join(", ")
        ),
        "fix what the server says, or drop capcard's extensions with `force-length #false`; nothing was measured".into(),
    )
}

fn refuse(kind: RefusalKind, quote: String, conclusion: String, help: String) -> Judgement {
    Judgement::Refused(Refusal {
        kind,
        quote,
        conclusion,
        help,
    })
}

fn backticked(fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn says_unknown_model(words: &str, model: &str) -> bool {
    let lower = words.to_lowercase();
    lower.contains("model")
        && (lower.contains("does not exist")
            || lower.contains("not found")
            || lower.contains("unknown model")
            || lower.contains("invalid model")
            || lower.contains(&model.to_lowercase()))
}

fn model_help(cx: &Context<'_>) -> String {
    if cx.listed_models.is_empty() {
        return "set `model` on the target to a name the server serves".into();
    }
    let names: Vec<&str> = cx.listed_models.iter().map(String::as_str).collect();
    let listed = names
        .iter()
        .take(12)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match crate::config::did_you_mean(cx.model, &names) {
        Some(near) => format!("did you mean `{near}`? GET /models lists {listed}"),
        None => format!("set `model` to one GET /models lists: {listed}"),
    }
}

/// Which of `sent` (the body's top-level fields) a refusal's words name as
/// refused. A name counts only as a whole word (`max_tokens` is not in
/// `max_completion_tokens`), and only before the words that list what the
/// server *accepts* or suggests ("expected one of", "Use '…' instead",
/// "did you mean", "supported parameters are"). A pydantic body names its
/// refused fields in `detail[].loc`.
pub fn refused_fields(words: &str, sent: &[String]) -> Vec<String> {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(words)
        && let Some(details) = value.get("detail").and_then(|d| d.as_array())
    {
        let named: Vec<String> = details
            .iter()
            .filter_map(|d| {
                d.get("loc")?
                    .as_array()?
                    .last()?
                    .as_str()
                    .map(str::to_string)
            })
            .filter(|f| sent.contains(f))
            .collect();
        if !named.is_empty() {
            return named;
        }
    }
    let lower = words.to_lowercase();
    const ACCEPTED_FROM: [&str; 7] = [
        "expected one of",
        "expected ",
        "did you mean",
        " use '",
        " use `",
        " use \"",
        "supported parameters",
    ];
    let cut = ACCEPTED_FROM
        .iter()
        .filter_map(|marker| lower.find(marker))
        .min()
        .unwrap_or(lower.len());
    let refusal = &lower[..cut];
    // Fields that are also common words ("with this model") count only
    // when quoted.
    const WORDS: [&str; 4] = ["model", "messages", "prompt", "stream"];
    sent.iter()
        .filter(|f| {
            if WORDS.contains(&f.as_str()) {
                ['`', '\'', '"']
                    .iter()
                    .any(|q| refusal.contains(&format!("{q}{f}{q}")))
            } else {
                names_word(refusal, f)
            }
        })
        .cloned()
        .collect()
}

/// Whether `text` holds `word` with no identifier character on either side.
fn names_word(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The stream of a 2xx answer, read as a run reads it.
fn read_stream(body: &[u8], wire: super::stream::Wire) -> (StreamObserver, StreamEnd) {
    let mut observer = StreamObserver::for_wire(wire);
    observer.on_bytes(body.len());
    let end = observer.read_all(body);
    match observer.conclude(end.clone()) {
        // An empty output is judged above; a broken stream is a failure.
        Some((ErrorClass::EmptyOutput, _)) | None => (observer, end),
        Some((class, detail)) => (observer, StreamEnd::Failed(class, detail)),
    }
}

fn status_text(status: u16) -> String {
    match http::StatusCode::from_u16(status) {
        // Not in the registry: Anthropic's (and Cloudflare's) overload.
        _ if status == 529 => "529 Overloaded".to_string(),
        Ok(code) => code.to_string(),
        Err(_) => status.to_string(),
    }
}

/// How a preflight ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The dialect every call of the run will speak.
    Accepted {
        dialect: Dialect,
        options: BodyOptions,
    },
    Refused {
        refusal: Refusal,
        calls: u32,
    },
}

/// Run the preflight against `endpoint`: `render` builds the call's body
/// with the options under test (the runner's own body builder, so the
/// call is the run's), `requested_output` is its planned length. Sends at
/// most [`MAX_CALLS`] calls.
pub async fn run(
    endpoint: &Endpoint,
    target: &str,
    render: &(dyn Fn(&BodyOptions) -> Bytes + Sync),
    requested_output: u32,
    listed_models: &[String],
    has_tokenizer: bool,
) -> Result<Outcome, super::ExecError> {
    let url =
        super::client::endpoint_url(&endpoint.base_url, super::request::api_path(endpoint.api))?;
    let auth = super::client::bearer(endpoint.api_key.as_deref())?;
    let headers = super::client::parse_headers(&endpoint.headers)?;
    // The run's own transport: the same HTTP version, headers and key.
    let transport = super::client::build_transport(&url, endpoint.http2, auth.as_ref(), &headers)?;
    let mut options = endpoint.body.clone();
    let mut changed: Vec<Change> = Vec::new();
    let mut settled: Vec<String> = Vec::new();
    let mut retries = 0;
    let limit = requested_output
        .saturating_mul(RUNAWAY_FACTOR)
        .saturating_add(RUNAWAY_SLACK);
    for calls in 1..=MAX_CALLS {
        let answer = match tokio::time::timeout(
            endpoint.timeout,
            read_answer(
                &transport,
                render(&options),
                limit,
                super::stream::Wire::of(endpoint.api),
            ),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => Answer {
                status: 0,
                retry_after: None,
                body: Vec::new(),
                runaway: false,
                transport_error: Some(format!(
                    "no complete answer within the target's {:.3} s timeout",
                    endpoint.timeout.as_secs_f64()
                )),
            },
        };
        let cx = Context {
            target,
            api: endpoint.api,
            options: &options,
            requested_output,
            model: &endpoint.model,
            listed_models,
            changed: &changed,
            retries,
        };
        match judge(&answer, &cx) {
            Judgement::Accepted(accepted) => {
                if !listed_models.is_empty() && !listed_models.contains(&endpoint.model) {
                    settled.push(format!(
                        "model `{}` is not among those GET /models lists ({}), but the server answered it",
                        endpoint.model,
                        listed_models.join(", ")
                    ));
                }
                if options.stream_usage && !accepted.usage_reported && accepted.note.is_none() {
                    settled.push(
                        "the server sent no usage although `stream_options.include_usage` was asked"
                            .into(),
                    );
                }
                if let Some(note) = &accepted.note {
                    settled.push(note.clone());
                }
                let output_tokens_from = if accepted.usage_reported {
                    TokenSource::Usage
                } else if has_tokenizer {
                    TokenSource::Tokenizer
                } else {
                    TokenSource::Chunks
                };
                if output_tokens_from != TokenSource::Usage {
                    settled.push(format!(
                        "output tokens are counted {}",
                        match output_tokens_from {
                            TokenSource::Tokenizer => "with the target's tokenizer on the streamed text",
                            _ => "one per streamed content event (an approximation; a `tokenizer` on the target counts them exactly)",
                        }
                    ));
                }
                let dialect = Dialect {
                    length_field: options.length_field_for(endpoint.api).as_str().to_string(),
                    stream_usage: options.sends_stream_options(endpoint.api),
                    force_length: options.force_length,
                    output_tokens_from,
                    settled,
                    preflight_calls: calls,
                };
                return Ok(Outcome::Accepted { dialect, options });
            }
            Judgement::Settle(change, why) => {
                match change {
                    Change::DropStreamUsage => options.stream_usage = false,
                    Change::UseLengthField(field) => options.length_field = Some(field),
                }
                changed.push(change);
                settled.push(why);
            }
            Judgement::Retry(wait, _) => {
                retries += 1;
                tokio::time::sleep(wait.min(super::stream::RETRY_AFTER_CAP)).await;
            }
            Judgement::Refused(refusal) => return Ok(Outcome::Refused { refusal, calls }),
        }
    }
    Ok(Outcome::Refused {
        refusal: Refusal {
            kind: RefusalKind::Unknown,
            quote: settled.last().cloned().unwrap_or_default(),
            conclusion: format!(
                "target `{target}`: the preflight did not settle on a body in {MAX_CALLS} calls"
            ),
            help: "look at what the server says above; nothing was measured".into(),
        },
        calls: MAX_CALLS,
    })
}

/// Send `body` and read its answer: an error body whole (capped), a
/// stream until it ends or runs past `max_chunks` content chunks.
async fn read_answer(
    transport: &super::transport::Transport,
    body: Bytes,
    max_chunks: u32,
    wire: super::stream::Wire,
) -> Answer {
    let mut answer = Answer {
        status: 0,
        retry_after: None,
        body: Vec::new(),
        runaway: false,
        transport_error: None,
    };
    let mut response = match transport.send(body).await {
        Ok(sent) => sent.response,
        Err(failure) => {
            answer.transport_error = Some(truncate_detail(&failure.detail));
            return answer;
        }
    };
    answer.status = response.status();
    let success = (200..300).contains(&answer.status);
    answer.retry_after = response.retry_after();
    let mut decoder = SseDecoder::new();
    let mut observer = StreamObserver::for_wire(wire);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_ERROR_BODY.saturating_sub(answer.body.len());
                if !success {
                    answer
                        .body
                        .extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if room == 0 {
                        break;
                    }
                    continue;
                }
                answer.body.extend_from_slice(&chunk);
                decoder.push(&chunk);
                while let Some(event) = decoder.next_event() {
                    let _ = observer.on_event(&event, 0.0);
                }
                if observer.content_chunks() > max_chunks {
                    answer.runaway = true;
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                // What arrived is judged (a cut stream is a broken stream).
                if answer.body.is_empty() {
                    answer.transport_error = Some(truncate_detail(&e));
                }
                break;
            }
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(api: Api, options: &BodyOptions) -> Vec<String> {
        options.sent_fields(api)
    }

    fn cx<'a>(options: &'a BodyOptions, changed: &'a [Change]) -> Context<'a> {
        Context {
            target: "hosted",
            api: Api::Chat,
            options,
            requested_output: 8,
            model: "tiny-llama",
            listed_models: &[],
            changed,
            retries: 0,
        }
    }

    fn refusal(status: u16, body: &str) -> Answer {
        Answer {
            status,
            retry_after: None,
            body: body.as_bytes().to_vec(),
            runaway: false,
            transport_error: None,
        }
    }

    fn stream(tokens: u32, usage: bool) -> Answer {
        let mut body = String::new();
        for i in 0..tokens {
            body.push_str(&format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}\"}},\"finish_reason\":{}}}]}}\n\n",
                if i + 1 == tokens { "\"length\"" } else { "null" }
            ));
        }
        if usage {
            body.push_str(&format!(
                "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{tokens}}}}}\n\n"
            ));
        }
        body.push_str("data: [DONE]\n\n");
        Answer {
            status: 200,
            retry_after: None,
            body: body.into_bytes(),
            runaway: false,
            transport_error: None,
        }
    }

    #[test]
    fn refusals_of_every_wording_name_their_fields() {
        let options = BodyOptions::default();
        let fields = sent(Api::Chat, &options);
        let cases: [(&str, &[&str]); 7] = [
            // OpenAI, Azure.
            (
                r#"{"error":{"message":"Unrecognized request argument supplied: ignore_eos, min_tokens","type":"invalid_request_error"}}"#,
                &["min_tokens", "ignore_eos"],
            ),
            // OpenAI's reasoning models: the suggestion is not refused.
            (
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                &[],
            ),
            // serde (TGI and other Rust servers): the list after
            // "expected" names what it accepts.
            (
                "Failed to deserialize the JSON body into the target type: unknown field `stream_options`, expected one of `model`, `messages`, `max_tokens`, `temperature` at line 1 column 231",
                &["stream_options"],
            ),
            // pydantic with extra="forbid".
            (
                r#"{"detail":[{"type":"extra_forbidden","loc":["body","min_tokens"],"msg":"Extra inputs are not permitted","input":64}]}"#,
                &["min_tokens"],
            ),
            // LiteLLM.
            (
                "litellm.UnsupportedParamsError: openai does not support parameters: ['ignore_eos', 'min_tokens'], for model=gpt-4o. To drop these, set `litellm.drop_params=True`",
                &["min_tokens", "ignore_eos"],
            ),
            // A word inside another is not that word.
            ("unknown field `max_completion_tokens_x`", &[]),
            // The unknown model is judged by its own words, not as a field.
            ("The model `tiny` does not exist.", &[]),
        ];
        for (words, expected) in cases {
            assert_eq!(refused_fields(words, &fields), expected, "{words}");
        }
        let with_max_tokens = sent(
            Api::Chat,
            &BodyOptions {
                length_field: Some(LengthField::MaxTokens),
                ..BodyOptions::default()
            },
        );
        assert_eq!(
            refused_fields(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                &with_max_tokens
            ),
            ["max_tokens"]
        );
    }

    #[test]
    fn the_length_and_usage_fields_are_settled_and_the_extensions_refused() {
        let options = BodyOptions {
            length_field: Some(LengthField::MaxTokens),
            ..BodyOptions::default()
        };
        let reasoning = refusal(
            400,
            r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#,
        );
        match judge(&reasoning, &cx(&options, &[])) {
            Judgement::Settle(Change::UseLengthField(LengthField::MaxCompletionTokens), why) => {
                assert!(
                    why.contains("refused `max_tokens`") && why.contains("Unsupported parameter"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        let tgi = refusal(
            422,
            r#"{"error":"Failed to deserialize the JSON body into the target type: unknown field `stream_options`, expected one of `model`, `messages`","error_type":"validation"}"#,
        );
        let defaults = BodyOptions::default();
        assert!(matches!(
            judge(&tgi, &cx(&defaults, &[])),
            Judgement::Settle(Change::DropStreamUsage, _)
        ));
        let strict = refusal(
            400,
            r#"{"error":{"message":"Unrecognized request argument supplied: ignore_eos, min_tokens","type":"invalid_request_error","param":null,"code":null}}"#,
        );
        match judge(&strict, &cx(&defaults, &[])) {
            Judgement::Refused(r) => {
                assert_eq!(
                    r.quote,
                    "HTTP 400 Bad Request: \"Unrecognized request argument supplied: ignore_eos, min_tokens\""
                );
                assert_eq!(
                    r.conclusion,
                    "the server refuses `ignore_eos`, `min_tokens`"
                );
                assert!(
                    r.help
                        .contains("set `force-length #false` on target `hosted`"),
                    "{}",
                    r.help
                );
            }
            other => panic!("{other:?}"),
        }
        // A field of extra-body, and temperature.
        let mut with_extra = BodyOptions::default();
        with_extra.extra.insert("top_k".into(), 5.into());
        let words = refusal(
            400,
            r#"{"error":{"message":"Unrecognized request argument supplied: top_k"}}"#,
        );
        match judge(&words, &cx(&with_extra, &[])) {
            Judgement::Refused(r) => assert!(r.conclusion.contains("`top_k` from `extra-body`")),
            other => panic!("{other:?}"),
        }
        let temp = refusal(
            400,
            r#"{"error":{"message":"Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.","param":"temperature"}}"#,
        );
        match judge(&temp, &cx(&defaults, &[])) {
            Judgement::Refused(r) => assert!(r.help.contains("extra-body { temperature 1 }")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_model_gets_the_listed_names() {
        let options = BodyOptions::default();
        let listed = vec!["tiny-llama".to_string(), "other".to_string()];
        let cx = Context {
            model: "tiny-lama",
            listed_models: &listed,
            ..cx(&options, &[])
        };
        let answer = refusal(
            404,
            r#"{"error":{"message":"The model `tiny-lama` does not exist.","type":"NotFoundError","code":404}}"#,
        );
        match judge(&answer, &cx) {
            Judgement::Refused(r) => {
                assert_eq!(r.conclusion, "the server does not serve model `tiny-lama`");
                assert!(
                    r.help.starts_with("did you mean `tiny-llama`?"),
                    "{}",
                    r.help
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn quotas_and_server_errors_are_retried_a_few_times() {
        let options = BodyOptions::default();
        let mut answer = refusal(
            429,
            r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#,
        );
        answer.retry_after = Some(Duration::from_secs(3));
        assert_eq!(
            judge(&answer, &cx(&options, &[])),
            Judgement::Retry(
                Duration::from_secs(3),
                "HTTP 429 Too Many Requests: \"Rate limit reached\"".into()
            )
        );
        let spent = Context {
            retries: MAX_RETRIES,
            ..cx(&options, &[])
        };
        match judge(&answer, &spent) {
            Judgement::Refused(r) => assert!(r.conclusion.contains("quota"), "{}", r.conclusion),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge(&refusal(502, "bad gateway"), &cx(&options, &[])),
            Judgement::Retry(..)
        ));
        assert!(matches!(
            judge(&refusal(401, r#"{"error":{"message":"Incorrect API key provided"}}"#), &cx(&options, &[])),
            Judgement::Refused(Refusal { conclusion, .. }) if conclusion.contains("credentials")
        ));
    }

    #[test]
    fn an_overloaded_server_is_waited_for_then_quoted() {
        let options = BodyOptions::default();
        // A 503 that says when: waited for, as a quota's would be.
        let mut busy = refusal(
            503,
            r#"{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}"#,
        );
        busy.retry_after = Some(Duration::from_secs(4));
        assert_eq!(
            judge(&busy, &cx(&options, &[])),
            Judgement::Retry(
                Duration::from_secs(4),
                "HTTP 503 Service Unavailable: \"The server is overloaded or not ready yet.\""
                    .into()
            )
        );
        // A 529 without: a second.
        let anthropic = refusal(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(
            judge(&anthropic, &cx(&options, &[])),
            Judgement::Retry(
                Duration::from_secs(1),
                "HTTP 529 Overloaded: \"Overloaded\"".into()
            )
        );
        // Retries spent: refused, the server's words quoted, never a quota.
        let spent = Context {
            retries: MAX_RETRIES,
            ..cx(&options, &[])
        };
        match judge(&busy, &spent) {
            Judgement::Refused(r) => {
                assert_eq!(r.kind, RefusalKind::Overloaded);
                assert!(r.quote.contains("overloaded or not ready"), "{}", r.quote);
                assert!(r.conclusion.contains("as overloaded"), "{}", r.conclusion);
                assert!(!r.conclusion.contains("quota"), "{}", r.conclusion);
            }
            other => panic!("{other:?}"),
        }
        // A 503 that names a quota is one.
        let quota = refusal(
            503,
            r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#,
        );
        match judge(&quota, &spent) {
            Judgement::Refused(r) => assert_eq!(r.kind, RefusalKind::Quota),
            other => panic!("{other:?}"),
        }
        // An overload inside a 200 stream: retried, then refused alike.
        let mut event = stream(0, false);
        event.body = br#"event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}

"#
        .to_vec();
        assert_eq!(
            judge(&event, &cx(&options, &[])),
            Judgement::Retry(
                Duration::from_secs(1),
                "HTTP 200 with an error event: \"Overloaded\"".into()
            )
        );
        assert!(matches!(
            judge(&event, &spent),
            Judgement::Refused(Refusal {
                kind: RefusalKind::Overloaded,
                ..
            })
        ));
    }

    #[test]
    fn accepted_answers_say_what_the_server_reports() {
        let options = BodyOptions::default();
        match judge(&stream(8, true), &cx(&options, &[])) {
            Judgement::Accepted(a) => {
                assert!(a.usage_reported);
                assert_eq!(a.output_tokens, 8);
                assert_eq!(a.finish_reason.as_deref(), Some("length"));
            }
            other => panic!("{other:?}"),
        }
        match judge(&stream(8, false), &cx(&options, &[])) {
            Judgement::Accepted(a) => assert!(!a.usage_reported),
            other => panic!("{other:?}"),
        }
        // A length field the server ignores: the other name, once.
        let mut long = stream(30, true);
        long.runaway = true;
        assert!(matches!(
            judge(&long, &cx(&options, &[])),
            Judgement::Settle(Change::UseLengthField(LengthField::MaxTokens), _)
        ));
        let switched = [Change::UseLengthField(LengthField::MaxTokens)];
        assert!(matches!(
            judge(&long, &cx(&options, &switched)),
            Judgement::Refused(_)
        ));
        // An error event inside a 200 stream is judged by its words.
        let mut event = stream(0, false);
        event.body = br#"data: {"error":{"message":"Unrecognized request argument supplied: min_tokens","code":400}}

data: [DONE]

"#
        .to_vec();
        assert!(matches!(
            judge(&event, &cx(&options, &[])),
            Judgement::Refused(_)
        ));
    }
}
