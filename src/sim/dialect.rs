//! Servers stricter than vLLM, played by the simulator's HTTP server (pure).
//!
//! vLLM accepts and ignores any field it does not know; hosted APIs,
//! gateways (LiteLLM, Azure), TGI and Ollama do not: they refuse fields,
//! silently drop others, and rate-limit. A client that negotiates the
//! request dialect of such a server (capcard's preflight) needs servers
//! that answer exactly as those do to be tested against, and a user may
//! want to rehearse against a strict gateway without one. [`SimDialect`]
//! says which of those behaviours the server plays; this module decides,
//! with no clock and no network, what such a server answers: the field
//! check ([`SimDialect::check_fields`]), the bodies of its refusals, and
//! the token bucket of its rate limit ([`TokenBucket`], driven by explicit
//! time stamps). [`super::http`] applies them before the engine sees a
//! call: rate limit first (a gateway checks quota before reading the
//! body), then the fields, then the normal parse.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserializer as _;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::request::Api;

/// The top-level fields of OpenAI's `POST /v1/chat/completions`.
pub const OPENAI_CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "seed",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "metadata",
    "store",
    "service_tier",
    "prediction",
    "modalities",
    "audio",
];

/// The top-level fields of OpenAI's `POST /v1/completions`.
pub const OPENAI_COMPLETION_FIELDS: &[&str] = &[
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "echo",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "best_of",
    "logit_bias",
    "user",
    "seed",
    "suffix",
];

/// The top-level fields of OpenAI's `POST /v1/responses`.
pub const OPENAI_RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "store",
    "metadata",
    "previous_response_id",
    "include",
    "user",
    "service_tier",
    "background",
    "prompt",
    "top_logprobs",
];

/// The fields OpenAI's API defines for `api`.
pub fn openai_fields(api: Api) -> &'static [&'static str] {
    match api {
        Api::Chat => OPENAI_CHAT_FIELDS,
        Api::Completions => OPENAI_COMPLETION_FIELDS,
        Api::Responses => OPENAI_RESPONSES_FIELDS,
    }
}

/// How the simulator's HTTP server treats request fields and call rates.
/// The default is vLLM's: every field accepted, unknown ones ignored, no
/// rate limit. Only the HTTP server plays a dialect; the virtual-time
/// executor ignores it.
///
/// A field both refused and ignored is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimDialect {
    /// Refuse any top-level body field that is not an OpenAI API field
    /// ([`OPENAI_CHAT_FIELDS`], [`OPENAI_COMPLETION_FIELDS`],
    /// [`OPENAI_RESPONSES_FIELDS`]): HTTP 400
    /// "Unrecognized request argument supplied: …", as OpenAI does.
    pub strict: bool,
    /// Refused even if OpenAI defines them, each in the wording of the
    /// server family known to refuse it: `stream_options` as TGI does (an
    /// axum/serde 422), `max_tokens` as OpenAI does for reasoning models
    /// (a 400 pointing to `max_completion_tokens`), any other field in the
    /// strict wording.
    pub refused_fields: Vec<String>,
    /// Accepted and silently dropped before the call is read, as by a
    /// server that does not know them: e.g. `max_completion_tokens`, so the
    /// output is not bounded by it and runs to the default length. Takes
    /// precedence over `strict`.
    pub ignored_fields: Vec<String>,
    /// A token bucket over the generation calls; an empty one answers
    /// HTTP 429 with `Retry-After`.
    pub rate_limit: Option<RateLimit>,
}

impl SimDialect {
    /// vLLM's: the default.
    pub fn vllm() -> Self {
        SimDialect::default()
    }

    /// Refuse the fields OpenAI does not define.
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    /// Also refuse `field`.
    pub fn refusing(mut self, field: &str) -> Self {
        self.refused_fields.push(field.to_string());
        self
    }

    /// Also drop `field` silently.
    pub fn ignoring(mut self, field: &str) -> Self {
        self.ignored_fields.push(field.to_string());
        self
    }

    pub fn with_rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }

    /// Whether the field check can refuse anything (if not, the body is
    /// not read for it: the default costs nothing).
    fn checks_fields(&self) -> bool {
        self.strict || !self.refused_fields.is_empty()
    }

    fn refuses(&self, api: Api, field: &str) -> bool {
        if self.refused_fields.iter().any(|f| f == field) {
            return true;
        }
        self.strict
            && !openai_fields(api).contains(&field)
            && !self.ignored_fields.iter().any(|f| f == field)
    }

    /// What a server of this dialect answers to `body` on `api` before
    /// reading it further: `Ok` to go on, or the refusal. The first refused
    /// field in body order picks the wording: if a family wording belongs
    /// to it (`stream_options`, `max_tokens` in `refused_fields`), that
    /// family's; else the strict wording, naming every refused field
    /// without a family wording, in body order. A body that is not a JSON
    /// object passes, for the normal parse to refuse.
    pub fn check_fields(&self, api: Api, body: &[u8]) -> Result<(), FieldRefusal> {
        if !self.checks_fields() {
            return Ok(());
        }
        let Some(keys) = top_level_keys(body) else {
            return Ok(());
        };
        let refused: Vec<&String> = keys.iter().filter(|k| self.refuses(api, k)).collect();
        let Some(first) = refused.first() else {
            return Ok(());
        };
        let family = |field: &str| {
            self.refused_fields.iter().any(|f| f == field)
                && matches!(field, "stream_options" | "max_tokens")
        };
        match first.as_str() {
            "stream_options" if family("stream_options") => {
                let (line, column) = key_position(body, "stream_options").unwrap_or((1, 1));
                Err(FieldRefusal::UnknownField {
                    api,
                    field: "stream_options".into(),
                    line,
                    column,
                })
            }
            "max_tokens" if family("max_tokens") => Err(FieldRefusal::MaxTokensUnsupported),
            _ => Err(FieldRefusal::Unrecognized(
                refused
                    .iter()
                    .filter(|k| !family(k))
                    .map(|k| k.to_string())
                    .collect(),
            )),
        }
    }

    /// `body` without the ignored top-level fields (borrowed when there is
    /// nothing to drop, or the body is not a JSON object).
    pub fn strip_ignored<'b>(&self, body: &'b [u8]) -> Cow<'b, [u8]> {
        if self.ignored_fields.is_empty() {
            return Cow::Borrowed(body);
        }
        let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else {
            return Cow::Borrowed(body);
        };
        let before = fields.len();
        fields.retain(|k, _| {
            // A refused field is never ignored: the check refused it already.
            !self.ignored_fields.contains(k) || self.refused_fields.contains(k)
        });
        if fields.len() == before {
            return Cow::Borrowed(body);
        }
        match serde_json::to_vec(&Value::Object(fields)) {
            Ok(stripped) => Cow::Owned(stripped),
            Err(_) => Cow::Borrowed(body),
        }
    }
}

/// Why a strict server refused a call's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldRefusal {
    /// OpenAI's 400 for fields it does not define, in body order.
    Unrecognized(Vec<String>),
    /// An axum/serde server's 422 for a field its body type does not
    /// have, as TGI answers `stream_options`; `line` and `column` are where
    /// serde_json stood when it read the key.
    UnknownField {
        api: Api,
        field: String,
        line: usize,
        column: usize,
    },
    /// OpenAI's 400 for `max_tokens` on its reasoning models.
    MaxTokensUnsupported,
}

/// The fields an axum/serde server's body type has, as it lists them after
/// "expected one of": the *accepted* fields, which a client parsing the
/// message must not take for refused ones.
fn serde_expected(api: Api) -> &'static str {
    match api {
        Api::Chat => "`model`, `messages`, `max_tokens`, `temperature`, `stream`",
        Api::Completions => "`model`, `prompt`, `max_tokens`, `temperature`, `stream`",
        Api::Responses => "`model`, `input`, `max_output_tokens`, `temperature`, `stream`",
    }
}

impl FieldRefusal {
    pub fn status(&self) -> u16 {
        match self {
            FieldRefusal::Unrecognized(_) | FieldRefusal::MaxTokensUnsupported => 400,
            FieldRefusal::UnknownField { .. } => 422,
        }
    }

    /// The JSON body, byte for byte as the family sends it (keys in its
    /// order).
    pub fn body(&self) -> String {
        match self {
            FieldRefusal::Unrecognized(fields) => {
                let message = format!(
                    "Unrecognized request argument supplied: {}",
                    fields.join(", ")
                );
                openai_error(&message, "invalid_request_error", None, None)
            }
            FieldRefusal::UnknownField {
                api,
                field,
                line,
                column,
            } => {
                let message = format!(
                    "Failed to deserialize the JSON body into the target type: unknown field `{field}`, expected one of {} at line {line} column {column}",
                    serde_expected(*api)
                );
                format!(
                    "{{\"error\":{},\"error_type\":\"validation\"}}",
                    Value::String(message)
                )
            }
            FieldRefusal::MaxTokensUnsupported => openai_error(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                "invalid_request_error",
                Some("max_tokens"),
                Some("unsupported_parameter"),
            ),
        }
    }
}

/// `{"error":{"message","type","param","code"}}` in OpenAI's key order
/// (serde_json's map would sort them).
fn openai_error(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> String {
    let text_or_null = |v: Option<&str>| v.map_or(Value::Null, |s| Value::String(s.into()));
    format!(
        "{{\"error\":{{\"message\":{},\"type\":{},\"param\":{},\"code\":{}}}}}",
        Value::String(message.into()),
        Value::String(kind.into()),
        text_or_null(param),
        text_or_null(code),
    )
}

/// The top-level keys of a JSON object, in body order (`None` if `body` is
/// not one). serde_json's own map would sort them.
fn top_level_keys(body: &[u8]) -> Option<Vec<String>> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let keys = de.deserialize_map(Keys).ok()?;
    de.end().ok()?;
    Some(keys)
}

/// Where serde_json stands right after reading top-level key `wanted`
/// (line, column), as it reports an unknown field there.
fn key_position(body: &[u8], wanted: &str) -> Option<(usize, usize)> {
    struct Find<'a> {
        wanted: &'a str,
        found: &'a Cell<bool>,
    }
    impl<'de> Visitor<'de> for Find<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == self.wanted {
                    self.found.set(true);
                    // serde_json stamps this error with its position.
                    return Err(de::Error::custom("found"));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    let found = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(body);
    let err = de
        .deserialize_map(Find {
            wanted,
            found: &found,
        })
        .err()?;
    found.get().then(|| (err.line(), err.column()))
}

// ------------------------------------------------------------ rate limit

/// At most `requests` calls per `per`, as a token bucket of capacity
/// `requests` refilled continuously at `requests / per` (so a burst of
/// `requests` passes at once, then one call per `per / requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub requests: u32,
    pub per: Duration,
}

/// Why a rate limit cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    #[error(
        "`{text}` is not a rate limit: expected REQUESTS/s or REQUESTS/min, e.g. 30/min or 5/s"
    )]
    Syntax { text: String },
    #[error("a rate limit of 0 requests would refuse every call: allow at least 1")]
    ZeroRequests,
    #[error("a rate limit's period must be longer than zero")]
    ZeroPeriod,
}

impl RateLimit {
    pub fn new(requests: u32, per: Duration) -> Result<Self, RateLimitError> {
        let limit = RateLimit { requests, per };
        limit.check()?;
        Ok(limit)
    }

    /// `requests` per minute.
    pub fn per_minute(requests: u32) -> Result<Self, RateLimitError> {
        RateLimit::new(requests, Duration::from_secs(60))
    }

    /// Refuses what no bucket can serve (the fields are public).
    pub fn check(&self) -> Result<(), RateLimitError> {
        if self.requests == 0 {
            return Err(RateLimitError::ZeroRequests);
        }
        if self.per.is_zero() {
            return Err(RateLimitError::ZeroPeriod);
        }
        Ok(())
    }

    /// Time for one token to come back.
    fn interval(&self) -> Duration {
        self.per / self.requests.max(1)
    }
}

impl FromStr for RateLimit {
    type Err = RateLimitError;

    /// `30/min`, `5/s` (also `/sec`, `/m`).
    fn from_str(text: &str) -> Result<Self, RateLimitError> {
        let syntax = || RateLimitError::Syntax {
            text: text.to_string(),
        };
        let (count, unit) = text.trim().split_once('/').ok_or_else(syntax)?;
        let requests: u32 = count.trim().parse().map_err(|_| syntax())?;
        let per = match unit.trim() {
            "s" | "sec" => Duration::from_secs(1),
            "min" | "m" => Duration::from_secs(60),
            _ => return Err(syntax()),
        };
        RateLimit::new(requests, per)
    }
}

/// A call that found the bucket empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    pub limit: RateLimit,
    /// Until the next token.
    pub wait: Duration,
}

impl RateLimited {
    /// HTTP 429.
    pub fn status(&self) -> u16 {
        429
    }

    /// The `Retry-After` header: whole seconds until the next token,
    /// rounded up and at least 1 (0 would invite an immediate retry).
    pub fn retry_after_s(&self) -> u64 {
        let whole = self.wait.as_secs() + u64::from(self.wait.subsec_nanos() > 0);
        whole.max(1)
    }

    /// OpenAI's body for an exhausted request quota.
    pub fn body(&self) -> String {
        let n = self.limit.requests;
        let message = format!(
            "Rate limit reached for {}: Limit {n}, Used {n}, Requested 1. Please try again in {}.",
            window_name(self.limit.per),
            go_duration(self.wait),
        );
        openai_error(&message, "requests", None, Some("rate_limit_exceeded"))
    }
}

/// "requests per min (RPM)" and the like, as OpenAI names its windows.
fn window_name(per: Duration) -> String {
    if per.subsec_nanos() == 0 {
        match per.as_secs() {
            1 => return "requests per sec (RPS)".into(),
            60 => return "requests per min (RPM)".into(),
            3600 => return "requests per hour (RPH)".into(),
            86_400 => return "requests per day (RPD)".into(),
            _ => {}
        }
    }
    format!("requests per {}", go_duration(per))
}

/// A wait as OpenAI writes it (Go's duration format, to the millisecond,
/// rounded up so a client never comes back too early): `6ms`, `1.2s`,
/// `7m12.5s`.
fn go_duration(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms < 1000 {
        return format!("{}ms", ms.max(1));
    }
    let (h, rest_ms) = (ms / 3_600_000, ms % 3_600_000);
    let (m, s_ms) = (rest_ms / 60_000, rest_ms % 60_000);
    let seconds = if s_ms % 1000 == 0 {
        format!("{}", s_ms / 1000)
    } else {
        let frac = format!("{:03}", s_ms % 1000);
        format!("{}.{}", s_ms / 1000, frac.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// A token bucket on an explicit clock: `now` is time since any fixed
/// origin, never decreasing. Kept as the instant the bucket is full again
/// (GCRA's "theoretical arrival time"): exact integer arithmetic, and no
/// refill loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    limit: RateLimit,
    full_at: Duration,
}

impl TokenBucket {
    /// Full at time zero.
    pub fn new(limit: RateLimit) -> Self {
        TokenBucket {
            limit,
            full_at: Duration::ZERO,
        }
    }

    /// Takes a token at `now`, or says how long until the next one.
    pub fn take(&mut self, now: Duration) -> Result<(), RateLimited> {
        let interval = self.limit.interval();
        // How far ahead of `now` the bucket may be full again and still
        // hold a token: all but one of its tokens missing.
        let slack = interval
            .checked_mul(self.limit.requests.max(1) - 1)
            .unwrap_or(Duration::MAX);
        let full_at = self.full_at.max(now);
        let ahead = full_at - now;
        if ahead > slack {
            return Err(RateLimited {
                limit: self.limit,
                wait: ahead - slack,
            });
        }
        self.full_at = full_at.saturating_add(interval);
        Ok(())
    }

    /// Tokens left at `now` (whole ones).
    pub fn available(&self, now: Duration) -> u32 {
        let interval = self.limit.interval();
        let ahead = self.full_at.saturating_sub(now);
        if interval.is_zero() {
            return self.limit.requests;
        }
        let missing = ahead.as_nanos().div_ceil(interval.as_nanos());
        let missing = u32::try_from(missing).unwrap_or(u32::MAX);
        self.limit.requests.saturating_sub(missing)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    #[test]
    fn the_default_accepts_everything_without_reading_the_body() {
        let vllm = SimDialect::vllm();
        assert_eq!(vllm.check_fields(Api::Chat, b"not even json"), Ok(()));
        let b = body(json!({"messages": [], "ignore_eos": true, "min_tokens": 3}));
        assert_eq!(vllm.check_fields(Api::Chat, &b), Ok(()));
        assert!(matches!(vllm.strip_ignored(&b), Cow::Borrowed(_)));
    }

    #[test]
    fn strict_names_every_unknown_field_in_body_order() {
        let strict = SimDialect::vllm().strict();
        // serde_json's json! sorts keys; write the body by hand for order.
        let b = br#"{"model":"m","messages":[],"min_tokens":2,"temperature":0,"ignore_eos":true,"priority":1}"#;
        let refusal = strict.check_fields(Api::Chat, b).unwrap_err();
        assert_eq!(
            refusal,
            FieldRefusal::Unrecognized(vec![
                "min_tokens".into(),
                "ignore_eos".into(),
                "priority".into()
            ])
        );
        assert_eq!(refusal.status(), 400);
        let b = br#"{"ignore_eos":true,"min_tokens":2}"#;
        assert_eq!(
            strict.check_fields(Api::Chat, b).unwrap_err().body(),
            r#"{"error":{"message":"Unrecognized request argument supplied: ignore_eos, min_tokens","type":"invalid_request_error","param":null,"code":null}}"#
        );
        let every_chat_field: serde_json::Map<String, Value> = OPENAI_CHAT_FIELDS
            .iter()
            .map(|f| (f.to_string(), Value::Null))
            .collect();
        let b = body(Value::Object(every_chat_field));
        assert_eq!(strict.check_fields(Api::Chat, &b), Ok(()));
        // Each endpoint has its own list.
        let b = body(json!({"prompt": "x", "max_completion_tokens": 3, "echo": false}));
        assert_eq!(
            strict.check_fields(Api::Completions, &b),
            Err(FieldRefusal::Unrecognized(vec![
                "max_completion_tokens".into()
            ]))
        );
        let b = body(json!({"messages": [], "echo": false}));
        assert!(strict.check_fields(Api::Chat, &b).is_err());
        let b = body(json!({"input": "x", "instructions": "be brief",
            "max_output_tokens": 3, "reasoning": {"effort": "low"}, "ignore_eos": true}));
        assert_eq!(
            strict.check_fields(Api::Responses, &b),
            Err(FieldRefusal::Unrecognized(vec!["ignore_eos".into()]))
        );
        let b = body(json!({"input": "x", "max_tokens": 3}));
        assert!(strict.check_fields(Api::Responses, &b).is_err());
        // Not an object: left to the normal parse.
        assert_eq!(strict.check_fields(Api::Chat, b"[1]"), Ok(()));
        assert_eq!(strict.check_fields(Api::Chat, b"{\"a\":"), Ok(()));
        // An ignored field is accepted even when strict.
        let lenient = strict.clone().ignoring("ignore_eos");
        let b = body(json!({"messages": [], "ignore_eos": true}));
        assert_eq!(lenient.check_fields(Api::Chat, &b), Ok(()));
    }

    #[test]
    fn stream_options_is_refused_as_an_axum_serde_server_does() {
        let tgi = SimDialect::vllm().refusing("stream_options");
        let b =
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
        let refusal = tgi.check_fields(Api::Chat, b).unwrap_err();
        // Right after the key's closing quote, 1-based, as serde_json says.
        let column = br#"{"model":"m","stream":true,"stream_options""#.len();
        assert_eq!(
            refusal,
            FieldRefusal::UnknownField {
                api: Api::Chat,
                field: "stream_options".into(),
                line: 1,
                column,
            }
        );
        assert_eq!(refusal.status(), 422);
        assert_eq!(
            refusal.body(),
            format!(
                "{{\"error\":\"Failed to deserialize the JSON body into the target type: unknown field `stream_options`, expected one of `model`, `messages`, `max_tokens`, `temperature`, `stream` at line 1 column {column}\",\"error_type\":\"validation\"}}"
            )
        );
        let parsed: Value = serde_json::from_str(&refusal.body()).unwrap();
        assert_eq!(parsed["error_type"], "validation");
        // Without the field, and for other fields, it passes: not strict.
        let b = body(json!({"messages": [], "stream": true, "ignore_eos": true}));
        assert_eq!(tgi.check_fields(Api::Chat, &b), Ok(()));
        // A content string that happens to read "stream_options" is no key.
        let b = br#"{"messages":[{"content":"stream_options"}],"stream_options":{}}"#;
        let Err(FieldRefusal::UnknownField { column, .. }) = tgi.check_fields(Api::Chat, b) else {
            panic!("refused")
        };
        assert_eq!(
            column,
            br#"{"messages":[{"content":"stream_options"}],"stream_options""#.len()
        );
    }

    #[test]
    fn max_tokens_is_refused_as_openai_does_for_reasoning_models() {
        let o1 = SimDialect::vllm().refusing("max_tokens");
        let b = body(json!({"messages": [], "max_tokens": 8}));
        let refusal = o1.check_fields(Api::Chat, &b).unwrap_err();
        assert_eq!(refusal, FieldRefusal::MaxTokensUnsupported);
        assert_eq!(refusal.status(), 400);
        assert_eq!(
            refusal.body(),
            r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#
        );
        let b = body(json!({"messages": [], "max_completion_tokens": 8}));
        assert_eq!(o1.check_fields(Api::Chat, &b), Ok(()));
    }

    #[test]
    fn other_refused_fields_take_the_strict_wording_and_the_first_decides() {
        let d = SimDialect::vllm()
            .strict()
            .refusing("seed")
            .refusing("max_tokens");
        let b = br#"{"seed":1,"max_tokens":3,"ignore_eos":true}"#;
        assert_eq!(
            d.check_fields(Api::Chat, b),
            Err(FieldRefusal::Unrecognized(vec![
                "seed".into(),
                "ignore_eos".into()
            ]))
        );
        let b = br#"{"max_tokens":3,"seed":1}"#;
        assert_eq!(
            d.check_fields(Api::Chat, b),
            Err(FieldRefusal::MaxTokensUnsupported)
        );
        // Refused wins over ignored.
        let both = SimDialect::vllm().refusing("seed").ignoring("seed");
        assert!(both.check_fields(Api::Chat, br#"{"seed":1}"#).is_err());
    }

    #[test]
    fn ignored_fields_are_dropped_before_the_parse() {
        let d = SimDialect::vllm().ignoring("max_completion_tokens");
        let b = body(json!({"messages": [], "max_completion_tokens": 4, "max_tokens": 9}));
        let stripped: Value = serde_json::from_slice(&d.strip_ignored(&b)).unwrap();
        assert_eq!(stripped, json!({"messages": [], "max_tokens": 9}));
        let untouched = body(json!({"messages": []}));
        assert!(matches!(d.strip_ignored(&untouched), Cow::Borrowed(_)));
        assert!(matches!(d.strip_ignored(b"[]"), Cow::Borrowed(_)));
    }

    #[test]
    fn rate_limits_parse_from_the_command_line_form() {
        assert_eq!(
            "30/min".parse(),
            Ok(RateLimit {
                requests: 30,
                per: Duration::from_secs(60)
            })
        );
        assert_eq!(
            " 5 / s ".parse(),
            Ok(RateLimit {
                requests: 5,
                per: Duration::from_secs(1)
            })
        );
        for bad in ["30", "30/hour", "x/min", "-1/s", "/s", ""] {
            assert!(
                matches!(bad.parse::<RateLimit>(), Err(RateLimitError::Syntax { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            "0/min".parse::<RateLimit>(),
            Err(RateLimitError::ZeroRequests)
        );
        assert_eq!(
            RateLimit::new(3, Duration::ZERO),
            Err(RateLimitError::ZeroPeriod)
        );
        let message = "30".parse::<RateLimit>().unwrap_err().to_string();
        assert!(message.contains("e.g. 30/min"), "{message}");
    }

    #[test]
    fn the_bucket_passes_a_burst_then_refills_continuously() {
        let limit = RateLimit::per_minute(30).unwrap();
        let mut bucket = TokenBucket::new(limit);
        let t0 = Duration::from_secs(100);
        assert_eq!(bucket.available(t0), 30);
        for _ in 0..30 {
            assert_eq!(bucket.take(t0), Ok(()));
        }
        assert_eq!(bucket.available(t0), 0);
        // One token every 2 s.
        let refused = bucket.take(t0).unwrap_err();
        assert_eq!(refused.wait, Duration::from_secs(2));
        assert_eq!(refused.retry_after_s(), 2);
        let later = t0 + Duration::from_millis(800);
        let refused = bucket.take(later).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(1200));
        assert_eq!(refused.retry_after_s(), 2);
        assert_eq!(
            refused.body(),
            r#"{"error":{"message":"Rate limit reached for requests per min (RPM): Limit 30, Used 30, Requested 1. Please try again in 1.2s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#
        );
        // A refusal takes nothing: the token is there at 2 s.
        assert_eq!(bucket.take(t0 + Duration::from_secs(2)), Ok(()));
        assert!(bucket.take(t0 + Duration::from_secs(2)).is_err());
        // A long pause fills it, but never past its capacity.
        let idle = t0 + Duration::from_secs(3600);
        assert_eq!(bucket.available(idle), 30);
        for _ in 0..30 {
            assert_eq!(bucket.take(idle), Ok(()));
        }
        assert!(bucket.take(idle).is_err());
    }

    #[test]
    fn retry_after_is_whole_seconds_and_at_least_one() {
        let limit = RateLimit::new(5, Duration::from_secs(1)).unwrap();
        let mut bucket = TokenBucket::new(limit);
        for _ in 0..5 {
            assert_eq!(bucket.take(Duration::ZERO), Ok(()));
        }
        let refused = bucket.take(Duration::ZERO).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(200));
        assert_eq!(refused.retry_after_s(), 1);
        assert!(
            refused
                .body()
                .contains("requests per sec (RPS): Limit 5, Used 5")
        );
        assert!(refused.body().contains("try again in 200ms."));
        let one = RateLimit::new(1, Duration::from_secs(60)).unwrap();
        let mut bucket = TokenBucket::new(one);
        assert_eq!(bucket.take(Duration::ZERO), Ok(()));
        let refused = bucket.take(Duration::from_millis(500)).unwrap_err();
        assert_eq!(refused.retry_after_s(), 60);
        assert!(refused.body().contains("try again in 59.5s."));
    }

    #[test]
    fn waits_read_as_go_durations() {
        assert_eq!(go_duration(Duration::from_micros(5_200)), "6ms");
        assert_eq!(go_duration(Duration::from_nanos(1)), "1ms");
        assert_eq!(go_duration(Duration::from_millis(1200)), "1.2s");
        assert_eq!(go_duration(Duration::from_secs(20)), "20s");
        assert_eq!(go_duration(Duration::from_millis(432_500)), "7m12.5s");
        assert_eq!(go_duration(Duration::from_secs(3_661)), "1h1m1s");
        assert_eq!(window_name(Duration::from_secs(90)), "requests per 1m30s");
    }
}
