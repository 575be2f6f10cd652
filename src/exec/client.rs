//! The HTTP side of one call: send a prepared body, read the SSE stream with a
//! timestamp per network chunk, and turn every way it can end into a
//! [`RequestRecord`] — never an `Err`.
//!
//! One [`Transport`] per run: HTTP/1.1 with one kept-alive connection per
//! call in flight (so a closed loop at `c` reuses `c` connections), or
//! HTTP/2 where the target asks for it. Nothing is retried, because a
//! retried request would hide an error and distort latency — with one
//! exception that is not a second request: a call whose *reused* connection
//! turns out to be dead before any response byte (the server closed it after
//! its previous answer and never read this one) is sent once more on a fresh
//! connection, and its record counts the reconnect.
//!
//! The per-request timeout runs from the send to the end of the stream, so a
//! timeout is always classified as such, even in the middle of a stream.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use http::header::AUTHORIZATION;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ExecError;
use super::progress::Live;
use super::record::{ErrorClass, RequestRecord};
use super::sse::SseDecoder;
use super::stream::{
    CallId, CallTimes, EventVerdict, StreamEnd, StreamObserver, error_message, ms_since,
    truncate_detail,
};
use super::timer::PreciseTimer;
use super::transport::{HttpClient, Response, Transport, Url};
use crate::workload::prompt::TokenIdRange;

/// Largest error body read from a non-2xx response.
const MAX_ERROR_BODY_BYTES: usize = 4096;
/// How long the rest of a finished response (after `[DONE]`) may take to
/// arrive before its connection is given up rather than reused.
const DRAIN_LIMIT: Duration = Duration::from_millis(250);

/// Where and how calls are sent.
#[derive(Debug, Clone)]
pub(crate) struct HttpTarget {
    pub transport: Transport,
    pub timeout: Duration,
    /// Counts output tokens when the server reports no usage.
    pub tokenizer: Option<std::sync::Arc<crate::data::tokenizer::PromptTokenizer>>,
    /// The stream's format (chunks, or the Responses API's events).
    pub wire: super::stream::Wire,
}

/// The transport for a run's calls to `url`, sending `auth` and `headers`
/// with each (built into the transport once).
pub(crate) fn build_transport(
    url: &Url,
    http2: bool,
    auth: Option<&HeaderValue>,
    headers: &[(http::HeaderName, HeaderValue)],
) -> Result<Transport, ExecError> {
    let mut fixed: Vec<_> = auth
        .map(|a| (AUTHORIZATION, a.clone()))
        .into_iter()
        .collect();
    fixed.extend(headers.iter().cloned());
    Transport::new(url, http2, fixed)
}

/// A one-shot client sending the target's key and `headers`.
pub(crate) fn probe_client(
    api_key: Option<&str>,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<HttpClient, ExecError> {
    let mut all: Vec<_> = bearer(api_key)?
        .map(|a| (AUTHORIZATION, a))
        .into_iter()
        .collect();
    all.extend(parse_headers(headers)?);
    Ok(HttpClient::new(timeout).with_headers(all))
}

/// `base_url` + `/` + `path`, checked.
pub(crate) fn endpoint_url(base_url: &str, path: &str) -> Result<Url, ExecError> {
    Url::join(base_url, path).map_err(|reason| ExecError::BadUrl {
        url: base_url.to_string(),
        reason,
    })
}

/// The target's extra headers, checked.
pub(crate) fn parse_headers(
    headers: &[(String, String)],
) -> Result<Vec<(http::HeaderName, HeaderValue)>, ExecError> {
    headers
        .iter()
        .map(|(name, value)| {
            let bad = || ExecError::BadHeader { name: name.clone() };
            let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// `Bearer <key>`, marked sensitive so it is never printed in debug output.
pub(crate) fn bearer(api_key: Option<&str>) -> Result<Option<HeaderValue>, ExecError> {
    api_key
        .map(|key| {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| ExecError::BadApiKey)?;
            value.set_sensitive(true);
            Ok(value)
        })
        .transpose()
}

/// What every call of a run shares.
pub(crate) struct CallEnv<'a> {
    pub target: &'a HttpTarget,
    /// The run's start: times are ms since it.
    pub t0: Instant,
    /// Cancelled to abort in-flight calls (Ctrl-C, drain deadline) ...
    pub abort: &'a CancellationToken,
    /// ... for this reason.
    pub abort_detail: &'a (dyn Fn() -> String + Sync),
    pub live: &'a Live,
    pub timer: &'a PreciseTimer,
}

/// Send one prepared call at `scheduled` (waiting for it if it is in the
/// future; `None` = now, and the send instant is the scheduled one) and
/// record what happened. `None` if the run was aborted before
/// the call was sent: an unsent call is not a request.
pub(crate) async fn perform_call(
    env: &CallEnv<'_>,
    body: Bytes,
    id: CallId,
    scheduled: Option<Instant>,
) -> Option<SentCall> {
    let CallEnv {
        target,
        t0,
        abort,
        abort_detail,
        live,
        timer,
    } = *env;
    if let Some(scheduled) = scheduled
        && scheduled > Instant::now()
    {
        tokio::select! {
            biased;
            _ = abort.cancelled() => return None,
            _ = timer.sleep_until(scheduled) => {}
        }
    }
    if abort.is_cancelled() {
        return None;
    }
    let ms = |t: Instant| ms_since(t0, t);
    let sent = Instant::now();
    let scheduled = scheduled.unwrap_or(sent);
    live.inflight.fetch_add(1, Ordering::Relaxed);
    let mut observer = if target.tokenizer.is_some() {
        StreamObserver::keeping_text_of(target.wire)
    } else {
        StreamObserver::for_wire(target.wire)
    };
    let mut progress = CallProgress::default();
    let mut leftover = None;
    let (end, completed) = tokio::select! {
        biased;
        _ = abort.cancelled() => {
            (StreamEnd::Failed(ErrorClass::Cancelled, abort_detail()), Instant::now())
        }
        _ = tokio::time::sleep_until(sent + target.timeout) => {
            let detail = format!(
                "no complete response within the {:.3} s timeout ({} content chunks received)",
                target.timeout.as_secs_f64(),
                observer.content_chunks()
            );
            (StreamEnd::Failed(ErrorClass::Timeout, detail), Instant::now())
        }
        result = stream_call(target, body, t0, &mut observer, &mut progress, live) => {
            let (end, at, response) = result;
            leftover = response;
            (end, at)
        }
    };
    live.inflight.fetch_sub(1, Ordering::Relaxed);
    // A resend on a fresh connection is timed from its own send; the lag
    // (sent − scheduled) shows what the dead connection cost.
    let sent = progress.resent_at.unwrap_or(sent);
    let times = CallTimes {
        scheduled_ms: ms(scheduled),
        sent_ms: ms(sent),
        completed_ms: ms(completed),
        http_status: progress.http_status,
    };
    if let Some(tokenizer) = &target.tokenizer {
        observer.count_output_with(tokenizer);
    }
    let mut record = observer.into_record(id, times, end);
    record.reconnects = progress.reconnects;
    record.retry_after_ms = progress
        .retry_after
        .map(|d| super::stream::round_us(d.as_secs_f64() * 1e3));
    if let Some(mut response) = leftover {
        // Read the end of the chunked body so the connection goes back to the
        // pool; outside the measured time.
        let _ = tokio::time::timeout(DRAIN_LIMIT, async {
            while let Ok(Some(_)) = response.chunk().await {}
        })
        .await;
    }
    Some(SentCall {
        record,
        scheduled,
        completed,
    })
}

/// A call that was sent, its record and its instants.
pub(crate) struct SentCall {
    pub record: RequestRecord,
    pub scheduled: Instant,
    pub completed: Instant,
}

/// What is known of a call while it runs, kept when a timeout or abort ends it.
#[derive(Debug, Default)]
struct CallProgress {
    http_status: Option<u16>,
    /// A refusal's `Retry-After`.
    retry_after: Option<Duration>,
    reconnects: u32,
    /// When the request was sent again on a fresh connection.
    resent_at: Option<Instant>,
}

/// The request and its stream. Returns how it ended, when, and, after a
/// clean `[DONE]`, the response so its remaining bytes can be drained.
async fn stream_call(
    target: &HttpTarget,
    body: Bytes,
    t0: Instant,
    observer: &mut StreamObserver,
    progress: &mut CallProgress,
    live: &Live,
) -> (StreamEnd, Instant, Option<Response>) {
    let ms = |t: Instant| ms_since(t0, t);
    let mut response = match target.transport.send(body).await {
        Ok(sent) => {
            progress.reconnects = sent.reconnects;
            progress.resent_at = sent.resent_at;
            sent.response
        }
        Err(failure) => {
            return (
                StreamEnd::Failed(failure.class, truncate_detail(&failure.detail)),
                Instant::now(),
                None,
            );
        }
    };
    let status = response.status();
    progress.http_status = Some(status);
    if !(200..300).contains(&status) {
        progress.retry_after = response.retry_after();
        let body = read_capped(&mut response, MAX_ERROR_BODY_BYTES).await;
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| error_message(&v))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        let detail = truncate_detail(&format!("HTTP {}: {message}", status_text(status)));
        let class = super::stream::http_error_class(status, &String::from_utf8_lossy(&body));
        return (StreamEnd::Failed(class, detail), Instant::now(), None);
    }
    let mut decoder = SseDecoder::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let at = Instant::now();
                let before = observer.content_chunks();
                observer.on_bytes(chunk.len());
                decoder.push(&chunk);
                let mut verdict = EventVerdict::Continue;
                while let Some(event) = decoder.next_event() {
                    verdict = observer.on_event(&event, ms(at));
                    if verdict != EventVerdict::Continue {
                        break;
                    }
                }
                let new_chunks = observer.content_chunks() - before;
                live.content_chunks
                    .fetch_add(u64::from(new_chunks), Ordering::Relaxed);
                match verdict {
                    EventVerdict::Continue => {}
                    EventVerdict::Done => return (StreamEnd::Done, at, Some(response)),
                    EventVerdict::Fail(class, detail) => {
                        return (StreamEnd::Failed(class, detail), at, None);
                    }
                }
            }
            Ok(None) => {
                let at = Instant::now();
                while let Some(event) = decoder.finish() {
                    match observer.on_event(&event, ms(at)) {
                        EventVerdict::Continue => {}
                        EventVerdict::Done => break,
                        EventVerdict::Fail(class, detail) => {
                            return (StreamEnd::Failed(class, detail), at, None);
                        }
                    }
                }
                return (StreamEnd::Eof, at, None);
            }
            Err(e) => {
                let detail = truncate_detail(&format!("stream broke: {e}"));
                return (
                    StreamEnd::Failed(ErrorClass::BrokenStream, detail),
                    Instant::now(),
                    None,
                );
            }
        }
    }
}

/// `429 Too Many Requests`.
fn status_text(status: u16) -> String {
    match http::StatusCode::from_u16(status) {
        // Not in the registry: Anthropic's (and Cloudflare's) overload.
        _ if status == 529 => "529 Overloaded".to_string(),
        Ok(code) => code.to_string(),
        Err(_) => status.to_string(),
    }
}

async fn read_capped(response: &mut Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(cap - body.len())]),
            _ => break,
        }
    }
    body
}

/// `GET {base_url}/models` → the model ids.
pub async fn probe_models(
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<Vec<String>, ExecError> {
    probe_models_with(base_url, api_key, &[], timeout)
        .await
        .map(|list| list.ids)
}

/// What `GET /models` says: the ids, and each model's context window where
/// the server reports one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelList {
    pub ids: Vec<String>,
    /// `(id, tokens, field)`: vLLM's and SGLang's `max_model_len`,
    /// llama.cpp's `meta.n_ctx` (one slot's context).
    pub windows: Vec<(String, u32, &'static str)>,
}

impl ModelList {
    /// The window of model `id`, with the field it was read from.
    pub fn window_of(&self, id: &str) -> Option<(u32, &'static str)> {
        self.windows
            .iter()
            .find(|(model, _, _)| model == id)
            .map(|(_, tokens, field)| (*tokens, *field))
    }
}

/// [`probe_models`], also sending the target's own `headers`.
pub async fn probe_models_with(
    base_url: &str,
    api_key: Option<&str>,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<ModelList, ExecError> {
    let url = endpoint_url(base_url, "models")?;
    let unreachable = |reason: String| ExecError::Unreachable {
        url: url.to_string(),
        reason,
    };
    let client = probe_client(api_key, headers, timeout)?;
    let reply = client.get(url.as_str()).await.map_err(|e| match e {
        super::transport::HttpError::Timeout(_) => {
            unreachable(format!("no answer within {:.3} s", timeout.as_secs_f64()))
        }
        other => unreachable(truncate_detail(&other.to_string())),
    })?;
    let status = http::StatusCode::from_u16(reply.status).unwrap_or(http::StatusCode::OK);
    let body = reply.body;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| error_message(&v))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        return Err(unreachable(truncate_detail(&format!(
            "HTTP {status}: {message}"
        ))));
    }
    let ids = parse_model_ids(&body).ok_or_else(|| {
        unreachable(truncate_detail(&format!(
            "the answer is not an OpenAI model list: {}",
            String::from_utf8_lossy(&body)
        )))
    })?;
    Ok(ModelList {
        ids,
        windows: parse_model_windows(&body),
    })
}

/// The context windows a model list reports: `max_model_len` (vLLM,
/// SGLang) or llama.cpp's `meta.n_ctx`, per id. Models without one are
/// left out.
pub(crate) fn parse_model_windows(body: &[u8]) -> Vec<(String, u32, &'static str)> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let Some(models) = value.get("data").and_then(|d| d.as_array()) else {
        return Vec::new();
    };
    let tokens = |v: Option<&serde_json::Value>| {
        v.and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n > 0)
    };
    models
        .iter()
        .filter_map(|m| {
            let id = m.get("id")?.as_str()?.to_string();
            if let Some(n) = tokens(m.get("max_model_len")) {
                return Some((id, n, "max_model_len"));
            }
            let n = tokens(m.get("meta").and_then(|meta| meta.get("n_ctx")))?;
            Some((id, n, "meta.n_ctx"))
        })
        .collect()
}

/// TGI's window: `GET {root}/info` → `max_total_tokens` (prompt + output),
/// for servers whose model list reports none. `None` when there is no such
/// route or field.
pub async fn probe_info_window(
    base_url: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Option<u32> {
    let root = base_url.trim_end_matches('/').trim_end_matches("/v1");
    let client = probe_client(api_key, &[], timeout).ok()?;
    let reply = client.get(&format!("{root}/info")).await.ok()?;
    if !reply.is_success() {
        return None;
    }
    let value: serde_json::Value = reply.json().ok()?;
    value
        .get("max_total_tokens")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// `{"data": [{"id": ...}, ...]}` → ids; `None` if it is not that shape.
pub(crate) fn parse_model_ids(body: &[u8]) -> Option<Vec<String>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value
        .get("data")?
        .as_array()?
        .iter()
        .map(|m| m.get("id").and_then(|id| id.as_str()).map(str::to_string))
        .collect()
}

/// The ways engines offer to empty their prefix cache: vLLM (with
/// `VLLM_SERVER_DEV_MODE=1`) and SGLang.
pub const PREFIX_CACHE_RESETS: [&str; 2] = ["reset_prefix_cache", "flush_cache"];

/// `POST {root}/{path}` (root = `base_url` without `/v1`); whether it
/// answered 2xx. Used to find and to use a server's prefix-cache reset.
pub async fn post_admin(base_url: &str, path: &str, api_key: Option<&str>) -> bool {
    let root = base_url.trim_end_matches('/').trim_end_matches("/v1");
    let Ok(client) = probe_client(api_key, &[], Duration::from_secs(10)) else {
        return false;
    };
    client
        .post(&format!("{root}/{path}"), "application/json", "")
        .await
        .is_ok_and(|r| r.is_success())
}

/// What the token-id probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenIdSupport {
    /// Token-id prompts work with ids drawn from this range.
    Accepted(TokenIdRange),
    /// They do not; text prompts are sent. The reason is shown to the user.
    Refused(String),
}

/// Whether a `completions` endpoint accepts `prompt: [token ids]`, and with
/// which ids. Each probe is a streamed one-token completion read to its end:
/// an error status, an error event inside a 200 stream (vLLM's answer to an
/// id outside the vocabulary) or an answer without content all mean no.
/// When the default range is refused but low ids work, the vocabulary's size
/// is found by bisection (about 15 probes) and the range fitted to it.
/// `Err` only if the endpoint cannot be reached at all.
pub async fn probe_token_ids(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<TokenIdSupport, ExecError> {
    let probe = TokenIdProbe::new(base_url, model, api_key, timeout)?;
    let default = TokenIdRange::DEFAULT;
    let low = [
        default.min,
        default.min + 1,
        default.min + 2,
        default.min + 3,
    ];
    if let Err(reason) = probe.accepts(&low).await? {
        return Ok(TokenIdSupport::Refused(reason));
    }
    if probe
        .accepts(&[default.min, default.max - 1, default.max])
        .await?
        .is_ok()
    {
        return Ok(TokenIdSupport::Accepted(default));
    }
    // Largest accepted id, between an accepted `lo` and a refused `hi`.
    let (mut lo, mut hi) = (default.min + 3, default.max);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if probe.accepts(&[default.min, mid]).await?.is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(match TokenIdRange::for_vocabulary(lo + 1) {
        Some(range) => TokenIdSupport::Accepted(range),
        None => TokenIdSupport::Refused(format!(
            "the vocabulary ends at id {lo}: too small for token-id prompts"
        )),
    })
}

struct TokenIdProbe {
    client: HttpClient,
    url: Url,
    model: String,
}

impl TokenIdProbe {
    fn new(
        base_url: &str,
        model: &str,
        api_key: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, ExecError> {
        Ok(TokenIdProbe {
            client: probe_client(api_key, &[], timeout)?,
            url: endpoint_url(
                base_url,
                super::request::api_path(crate::config::Api::Completions),
            )?,
            model: model.to_string(),
        })
    }

    /// `Ok(Ok(()))` if a streamed completion of `ids` produced content,
    /// `Ok(Err(why))` if the server said no in any way.
    async fn accepts(&self, ids: &[u32]) -> Result<Result<(), String>, ExecError> {
        let body = super::request::build_body(
            crate::config::Api::Completions,
            &self.model,
            &super::request::Prompt::TokenIds(ids.to_vec()),
            1,
        );
        let reply = self
            .client
            .post(self.url.as_str(), "application/json", body)
            .await
            .map_err(|e| ExecError::Unreachable {
                url: self.url.to_string(),
                reason: truncate_detail(&e.to_string()),
            })?;
        let status = http::StatusCode::from_u16(reply.status).unwrap_or(http::StatusCode::OK);
        let bytes = reply.body;
        if status.is_server_error() && !status_says_invalid(&bytes) {
            return Err(ExecError::Unreachable {
                url: self.url.to_string(),
                reason: format!("HTTP {status} to a token-id prompt"),
            });
        }
        Ok(judge_probe_answer(status.as_u16(), &bytes))
    }
}

/// A 5xx whose message says the prompt was invalid (llama.cpp answers some
/// bad token ids with 500) is a "no", not an unreachable server.
fn status_says_invalid(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    text.contains("token") && (text.contains("invalid") || text.contains("vocab"))
}

/// The probe's verdict on a whole answer (pure): yes only for a 2xx stream
/// with content and no error event.
pub(crate) fn judge_probe_answer(status: u16, body: &[u8]) -> Result<(), String> {
    let message = || {
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| error_message(&v))
            .unwrap_or_else(|| truncate_detail(&String::from_utf8_lossy(body)))
    };
    if !(200..300).contains(&status) {
        return Err(format!("HTTP {}: {}", status_text(status), message()));
    }
    let mut observer = StreamObserver::new();
    let end = observer.read_all(body);
    let id = CallId {
        task: 0,
        call: 0,
        prompt_tokens_requested: 0,
        output_tokens_requested: 1,
    };
    let times = CallTimes {
        scheduled_ms: 0.0,
        sent_ms: 0.0,
        completed_ms: 0.0,
        http_status: Some(status),
    };
    let record = observer.into_record(id, times, end);
    match record.error {
        None => Ok(()),
        Some(class) => Err(format!(
            "{}: {}",
            class.as_str(),
            record.error_detail.unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_joined_and_checked() {
        let url = endpoint_url("http://127.0.0.1:8000/v1/", "chat/completions").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:8000/v1/chat/completions");
        let url = endpoint_url("https://api.example.com/v1", "models").unwrap();
        assert_eq!(url.as_str(), "https://api.example.com/v1/models");
        assert!(matches!(
            endpoint_url("127.0.0.1:8000", "models"),
            Err(ExecError::BadUrl { .. })
        ));
        assert!(matches!(
            endpoint_url("ftp://host/v1", "models"),
            Err(ExecError::BadUrl { .. })
        ));
        assert!(matches!(
            endpoint_url("not a url", "models"),
            Err(ExecError::BadUrl { .. })
        ));
    }

    #[test]
    fn probe_answers_are_judged_by_their_stream() {
        let ok = b"data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
        assert_eq!(judge_probe_answer(200, ok), Ok(()));
        // vLLM: an id outside the vocabulary is a 200 with one error event.
        let oov = b"data: {\"error\": {\"object\": \"error\", \"message\": \"Token id 29985 is out of vocabulary\", \"type\": \"BadRequestError\", \"code\": 400}}\n\ndata: [DONE]\n\n";
        let verdict = judge_probe_answer(200, oov).unwrap_err();
        assert!(verdict.contains("out of vocabulary"), "{verdict}");
        let empty = b"data: [DONE]\n\n";
        assert!(judge_probe_answer(200, empty).is_err());
        let refused = br#"{"error":{"message":"prompt must be a string"}}"#;
        let verdict = judge_probe_answer(400, refused).unwrap_err();
        assert!(
            verdict.contains("400") && verdict.contains("prompt must be"),
            "{verdict}"
        );
    }

    #[test]
    fn model_lists() {
        let ids =
            parse_model_ids(br#"{"object":"list","data":[{"id":"a"},{"id":"b","owned_by":"x"}]}"#);
        assert_eq!(ids, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(parse_model_ids(br#"{"data":[{"name":"a"}]}"#), None);
        // vLLM and SGLang report max_model_len, llama.cpp meta.n_ctx.
        let vllm = br#"{"object":"list","data":[{"id":"tiny-llama","object":"model","max_model_len":2048,"root":"/m"}]}"#;
        assert_eq!(
            parse_model_windows(vllm),
            [("tiny-llama".to_string(), 2048, "max_model_len")]
        );
        let llama_cpp = br#"{"models":[{"name":"tiny-llama"}],"object":"list","data":[{"id":"tiny-llama","object":"model","owned_by":"llamacpp","meta":{"n_vocab":8448,"n_ctx":2048,"n_ctx_train":4096}}]}"#;
        assert_eq!(
            parse_model_windows(llama_cpp),
            [("tiny-llama".to_string(), 2048, "meta.n_ctx")]
        );
        assert!(parse_model_windows(br#"{"data":[{"id":"gpt-4o"}]}"#).is_empty());
        assert!(parse_model_windows(b"<html>").is_empty());
        assert_eq!(parse_model_ids(b"<html>"), None);
    }

    #[test]
    fn bearer_header_is_sensitive_and_rejects_control_characters() {
        let value = bearer(Some("sk-123")).unwrap().unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), "Bearer sk-123");
        assert_eq!(format!("{value:?}"), "Sensitive");
        assert!(matches!(bearer(Some("a\nb")), Err(ExecError::BadApiKey)));
        assert!(bearer(None).unwrap().is_none());
    }
}
