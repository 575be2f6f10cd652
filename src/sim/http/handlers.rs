//! The HTTP handlers: parse and gate a call (rate limit, dialect, faults),
//! submit it to a replica, and answer in OpenAI's framing, whole or as SSE.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::mpsc;

use crate::sim::answer::AnswerPlan;
use crate::sim::dialect::{FieldRefusal, RateLimited};
use crate::sim::engine::RequestId;
use crate::sim::metrics::render;
use crate::sim::request::Api;
use crate::sim::request::{FaultPlan, Faulted, Refusal, fault_draw, parse_call};
use crate::sim::tokenize::token_text;
use crate::sim::wire::AnswerWriter;
use crate::sim::wire::Framer;

use super::*;

/// An OpenAI-style error body: `{"error": {"message", "type", "param", "code"}}`.
pub(super) fn error(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = json!({
        "error": {"message": message, "type": kind, "param": null, "code": status.as_u16()}
    });
    (status, axum::Json(body)).into_response()
}

/// vLLM's answer to a token id outside the vocabulary: on a streamed
/// request, HTTP 200 and a stream holding one error event (a client that
/// looks only at the status takes it for a success); else a 400.
pub(super) fn out_of_vocabulary(id: u32, stream: bool) -> Response {
    let message = format!("Token id {id} is out of vocabulary");
    if !stream {
        return bad_request(message);
    }
    let event = json!({
        "error": {"message": message, "type": "BadRequestError", "param": null, "code": 400}
    });
    let body = format!("data: {event}\n\ndata: [DONE]\n\n");
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        )],
        body,
    )
        .into_response()
}

pub(super) fn bad_request(message: impl AsRef<str>) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        message.as_ref(),
        "invalid_request_error",
    )
}

pub(super) async fn models(State(s): State<Arc<AppState>>) -> Response {
    let entry = |id: &str, parent: Option<&str>| {
        json!({
            "id": id,
            "object": "model",
            "created": s.created,
            "owned_by": "capcard-sim",
            "root": s.model,
            "parent": parent,
            "max_model_len": s.preset.max_model_len(),
        })
    };
    let mut data = vec![entry(&s.model, None)];
    data.extend(s.adapters.iter().map(|a| entry(a, Some(&s.model))));
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

pub(super) async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    let Some(all) = replica_metrics(s.replicas.iter().map(|r| &r.commands)).await else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine has stopped",
            "server_error",
        );
    };
    let text = match all.as_slice() {
        [one] => render(&s.model, one),
        _ => {
            let texts: Vec<String> = all.iter().map(|m| render(&s.model, m)).collect();
            merge_rendered(&texts)
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response()
}

pub(super) async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    generate(s, Api::Completions, &body).await
}

pub(super) async fn chat_completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    generate(s, Api::Chat, &body).await
}

pub(super) async fn responses(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    generate(s, Api::Responses, &body).await
}

pub(super) fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::OutOfVocabulary { id, stream } => out_of_vocabulary(id, stream),
        Refusal::UnknownModel(_) => error(
            StatusCode::NOT_FOUND,
            &refusal.message(),
            "invalid_request_error",
        ),
        Refusal::BadRequest(message) => bad_request(message),
    }
}

/// Counts a request as its replica's load while it lives; sends the
/// abort to the engine unless the request completed.
pub(super) struct AbortGuard {
    id: RequestId,
    state: Arc<AppState>,
    replica: usize,
    done: bool,
}

impl AbortGuard {
    fn new(state: Arc<AppState>, replica: usize, id: RequestId) -> Self {
        state.replicas[replica]
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        AbortGuard {
            id,
            state,
            replica,
            done: false,
        }
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        let replica = &self.state.replicas[self.replica];
        if !self.done {
            let _ = replica.commands.send(Command::Abort(self.id));
        }
        replica.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The dialect's refusals, in the order a gateway applies them: quota,
/// then fields. `None` lets the call through to the normal parse.
pub(super) fn dialect_gate(s: &AppState, api: Api, body: &[u8]) -> Option<Response> {
    s.calls.received.fetch_add(1, Ordering::Relaxed);
    if let Some(bucket) = &s.bucket {
        let now = s.started.elapsed();
        let taken = bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(now);
        if let Err(limited) = taken {
            s.calls.rate_limited.fetch_add(1, Ordering::Relaxed);
            return Some(rate_limited(&limited));
        }
    }
    s.calls.admitted.fetch_add(1, Ordering::Relaxed);
    if let Err(refusal) = s.dialect.check_fields(api, body) {
        s.calls.field_refused.fetch_add(1, Ordering::Relaxed);
        return Some(field_refused(&refusal));
    }
    None
}

pub(super) fn json_response(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

pub(super) fn field_refused(refusal: &FieldRefusal) -> Response {
    json_response(refusal.status(), refusal.body())
}

pub(super) fn rate_limited(limited: &RateLimited) -> Response {
    let mut response = json_response(limited.status(), limited.body());
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(limited.retry_after_s()),
    );
    response
}

pub(super) async fn generate(s: Arc<AppState>, api: Api, body: &[u8]) -> Response {
    if let Some(refused) = dialect_gate(&s, api, body) {
        return refused;
    }
    let body = s.dialect.strip_ignored(body);
    let call = match parse_call(api, &body, &s.preset, &s.served) {
        Ok(call) => call,
        Err(refusal) => return refused(refusal),
    };
    let id = RequestId(s.next_id.fetch_add(1, Ordering::Relaxed));
    let plan = match fault_draw(&s.faults, s.seed, id, call.max_tokens) {
        Faulted::Fail => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "injected failure (sim fail-rate)",
                "server_error",
            );
        }
        Faulted::Serve(plan) => plan,
    };
    let (stream, include_usage) = (call.stream, call.include_usage);
    let asked_model = call.model.clone();
    let answer = AnswerPlan::for_call(api, &s.preset.answers, s.seed, id, call.tool.clone());
    let replica = s.route(&call.prompt);
    let req = call.into_engine_request(id);

    let (tx, rx) = mpsc::unbounded_channel();
    let mut guard = AbortGuard::new(s.clone(), replica, id);
    if s.replicas[replica]
        .commands
        .send(Command::Submit { req, tx })
        .is_err()
    {
        guard.done = true;
        // A dead engine is a server error, not a busy one: a 503 would read
        // as `overloaded`, the replica refusing under load.
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the engine has stopped",
            "server_error",
        );
    }
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Answers name the model (or adapter) they were asked for, as vLLM's do.
    let framer = Framer::new(
        api,
        id.0,
        created,
        asked_model.as_deref().unwrap_or(&s.model),
    );
    let writer = AnswerWriter::new(framer, answer, stream, include_usage)
        .with_cached_tokens(s.preset.answers.prompt_tokens_details);
    if stream {
        stream_response(SseState {
            rx,
            guard,
            writer,
            plan,
            begun: false,
            done: false,
        })
    } else {
        full_response(rx, guard, writer, plan).await
    }
}

pub(super) fn cut_body() -> Body {
    let err = std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "injected stream cut (sim cut-rate)",
    );
    Body::from_stream(futures_util::stream::once(
        async move { Err::<Bytes, _>(err) },
    ))
}

pub(super) async fn full_response(
    mut rx: mpsc::UnboundedReceiver<StreamEvent>,
    mut guard: AbortGuard,
    mut writer: AnswerWriter,
    plan: FaultPlan,
) -> Response {
    loop {
        match rx.recv().await {
            Some(StreamEvent::Token(e)) => {
                if plan.cut_after == Some(e.index) {
                    // Dropping the guard aborts the request in the engine.
                    return (StatusCode::OK, cut_body()).into_response();
                }
                if let Some((at, pause)) = plan.stall {
                    if at == e.index {
                        tokio::time::sleep(pause).await;
                    }
                }
                let mut body = String::new();
                writer.set_cached_tokens(e.cached_tokens);
                writer.token(
                    &mut body,
                    e.index,
                    token_text(e.token),
                    e.finish,
                    e.prompt_tokens,
                );
                if e.finish.is_some() {
                    guard.done = true;
                    return (
                        [(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        )],
                        body,
                    )
                        .into_response();
                }
            }
            Some(StreamEvent::Failed(msg)) => {
                guard.done = true;
                return bad_request(msg);
            }
            None => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the engine stopped mid-request",
                    "server_error",
                );
            }
        }
    }
}

pub(super) struct SseState {
    rx: mpsc::UnboundedReceiver<StreamEvent>,
    guard: AbortGuard,
    writer: AnswerWriter,
    plan: FaultPlan,
    /// What goes before the first token was sent.
    begun: bool,
    done: bool,
}

/// The next piece of the body: whatever the tokens received complete (a
/// token buffered into a longer event sends nothing yet).
pub(super) async fn next_sse(
    mut st: SseState,
) -> Option<(Result<Bytes, std::io::Error>, SseState)> {
    if st.done {
        return None;
    }
    let mut out = String::new();
    if !st.begun {
        st.begun = true;
        st.writer.begin(&mut out);
        if !out.is_empty() {
            return Some((Ok(Bytes::from(out)), st));
        }
    }
    while out.is_empty() && !st.done {
        match st.rx.recv().await {
            Some(StreamEvent::Token(e)) => {
                // Tokens buffered for an event not yet sent are lost with the cut.
                if st.plan.cut_after == Some(e.index) {
                    st.done = true;
                    let err = std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "injected stream cut (sim cut-rate)",
                    );
                    return Some((Err(err), st));
                }
                if let Some((at, pause)) = st.plan.stall {
                    if at == e.index {
                        tokio::time::sleep(pause).await;
                    }
                }
                st.writer.set_cached_tokens(e.cached_tokens);
                st.writer.token(
                    &mut out,
                    e.index,
                    token_text(e.token),
                    e.finish,
                    e.prompt_tokens,
                );
                if e.finish.is_some() {
                    st.guard.done = true;
                    st.done = true;
                }
            }
            Some(StreamEvent::Failed(msg)) => {
                st.guard.done = true;
                st.done = true;
                st.writer.error(&mut out, &msg);
            }
            None => {
                // The engine stopped (server shutdown): end like a dropped connection.
                st.done = true;
                let err = std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "simulator shut down",
                );
                return Some((Err(err), st));
            }
        }
    }
    Some((Ok(Bytes::from(out)), st))
}

pub(super) fn stream_response(st: SseState) -> Response {
    let body = Body::from_stream(futures_util::stream::unfold(st, next_sse));
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}
