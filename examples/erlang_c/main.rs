//! A scripted M/M/c server behind an OpenAI-compatible streaming API, to
//! check capcard's open-loop search against queueing theory (Erlang C).
//!
//! ```text
//! cargo run --release --example erlang_c -- --port 8100 [--slots 4] [--service-ms 400] [--seed 12]
//! cargo run --release -- run examples/erlang_c/erlang-c.kdl --out /tmp/erlang-c-run
//! cargo test --test it erlang_c     # the same search on a simulated M/M/4, in seconds
//! ```
//!
//! The queue: exactly `--slots` requests are in service at once; the others
//! wait first come, first served, in order of arrival (when their body has
//! been read). A request's service time is drawn from Exp(mean
//! `--service-ms`) by a seeded RNG as it enters service. Its first content
//! token goes out the moment service starts, so TTFT is the waiting time W
//! (plus loopback overhead); the other `max_tokens − 1` tokens are spread
//! evenly over the service time, the last one at its end, then the `usage`
//! chunk (when `stream_options.include_usage` asks) and `data: [DONE]`. The
//! token count does not change the service time. With Poisson arrivals this
//! is M/M/c, so `P(W > t) = C(c, a)·exp(−(cμ − λ)t)`; with 4 slots and 400 ms
//! the SLO "TTFT p90 ≤ 250 ms" holds up to λ = 5.92 rps.
//!
//! Timing is exact in virtual time: a request that waited starts at the
//! *scheduled* end of the service it replaces, not whenever the timer of that
//! service fired (tokio's timer has 1 ms granularity), so timer lateness never
//! accumulates into the queue. A client that goes away (while waiting or
//! mid-stream) frees its place at once.
//!
//! Endpoints: `GET /v1/models` (one model, `mmc`), `POST /v1/completions`
//! (prompt as text, token ids, or a one-element batch of either) and
//! `POST /v1/chat/completions`, streamed or not; `GET /health`. Everything
//! else (`/metrics`, `/tokenize`, ...) is a 404. Binds 127.0.0.1 only.
//! Every 30 s it prints what it served in the window (rate, mean service
//! time, W p50/p90) to stderr.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use capcard::sim::http::{Api, Framer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

const MODEL: &str = "mmc";
const MAX_MODEL_LEN: u32 = 4096;
const DEFAULT_MAX_TOKENS: u32 = 16;
const REPORT_EVERY: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------ args

struct Args {
    port: u16,
    slots: usize,
    service_ms: f64,
    seed: u64,
}

const USAGE: &str = "\
usage: erlang_c [--port N] [--slots C] [--service-ms MS] [--seed S]

An M/M/c server behind an OpenAI-compatible streaming API, on 127.0.0.1.
  --port N          port to listen on (default 8100)
  --slots C         requests in service at once (default 4)
  --service-ms MS   mean of the exponential service time (default 400)
  --seed S          seed of the service-time draws (default 12: its first
                    20,000 draws average 400.1 ms)";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        port: 8100,
        slots: 4,
        service_ms: 400.0,
        // Seed 1's first 10,000 draws average 411.5 ms, 3% slow: enough
        // to move the answer. Seed 12's first 20,000 average 400.1 ms
        // (200,000: 401.1 ms).
        seed: 12,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let bad = |v: &str| format!("{name}: invalid value `{v}`");
        match name.as_str() {
            "--port" => {
                let v = value()?;
                args.port = v.parse().map_err(|_| bad(&v))?;
            }
            "--slots" => {
                let v = value()?;
                args.slots = v.parse().ok().filter(|&c| c >= 1).ok_or_else(|| bad(&v))?;
            }
            "--service-ms" => {
                let v = value()?;
                args.service_ms = v
                    .parse()
                    .ok()
                    .filter(|&m: &f64| m.is_finite() && m > 0.0)
                    .ok_or_else(|| bad(&v))?;
            }
            "--seed" => {
                let v = value()?;
                args.seed = v.parse().map_err(|_| bad(&v))?;
            }
            _ => return Err(format!("unknown argument `{arg}`")),
        }
    }
    Ok(args)
}

// ------------------------------------------------------------------ rng

/// SplitMix64: tiny, seeded, good enough for exponential draws.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on (0, 1), never 0 or 1.
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Exp(mean), by inversion.
    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
}

// ------------------------------------------------------------------ slots

/// `c` service slots and a FIFO of waiters. Invariant: `free > 0` only when
/// no live waiter is queued.
struct Slots {
    inner: Mutex<SlotsInner>,
}

struct SlotsInner {
    free: usize,
    waiting: VecDeque<oneshot::Sender<Permit>>,
    in_service: usize,
}

/// One slot in service. Dropping it hands the slot to the first waiter still
/// there (or frees it), at `ends` if the service ran to its scheduled end.
struct Permit {
    slots: Arc<Slots>,
    /// When the slot became this holder's (virtual time of service start for
    /// a waiter: the previous holder's scheduled end).
    granted: Instant,
    /// Scheduled end of the service, once known and reached.
    ends: Option<Instant>,
    armed: bool,
}

enum Ticket {
    Now(Permit),
    Later(oneshot::Receiver<Permit>),
}

impl Slots {
    fn new(c: usize) -> Arc<Slots> {
        Arc::new(Slots {
            inner: Mutex::new(SlotsInner {
                free: c,
                waiting: VecDeque::new(),
                in_service: 0,
            }),
        })
    }

    /// Called synchronously when a request arrives: its place in the queue.
    fn arrive(self: &Arc<Self>, now: Instant) -> Ticket {
        let mut inner = self.inner.lock().unwrap();
        if inner.free > 0 {
            inner.free -= 1;
            inner.in_service += 1;
            Ticket::Now(Permit {
                slots: Arc::clone(self),
                granted: now,
                ends: None,
                armed: true,
            })
        } else {
            let (tx, rx) = oneshot::channel();
            inner.waiting.push_back(tx);
            Ticket::Later(rx)
        }
    }

    /// (in service, waiting) now; waiting may count clients already gone.
    fn occupancy(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap();
        (inner.in_service, inner.waiting.len())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let now = Instant::now();
        // A service cut short (client gone) frees its slot now; one that ran
        // to its end hands over at the scheduled end, which is ≤ now.
        let at = self.ends.map_or(now, |e| e.min(now));
        let mut inner = self.slots.inner.lock().unwrap();
        while let Some(tx) = inner.waiting.pop_front() {
            let next = Permit {
                slots: Arc::clone(&self.slots),
                granted: at,
                ends: None,
                armed: true,
            };
            match tx.send(next) {
                Ok(()) => return,
                // The waiter's client went away: skip it (and do not recurse
                // into this drop while holding the lock).
                Err(mut unused) => unused.armed = false,
            }
        }
        inner.free += 1;
        inner.in_service -= 1;
    }
}

// ------------------------------------------------------------------ stats

#[derive(Default)]
struct Window {
    started: u64,
    service_s: f64,
    waits_ms: Vec<f64>,
    gone: u64,
}

// ------------------------------------------------------------------ server

struct App {
    slots: Arc<Slots>,
    rng: Mutex<SplitMix64>,
    mean_service_s: f64,
    window: Mutex<Window>,
    next_id: Mutex<u64>,
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            std::process::exit(1);
        }
    };
    let app = Arc::new(App {
        slots: Slots::new(args.slots),
        rng: Mutex::new(SplitMix64(args.seed)),
        mean_service_s: args.service_ms / 1000.0,
        window: Mutex::new(Window::default()),
        next_id: Mutex::new(0),
    });
    let router = Router::new()
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Not Found", "invalid_request_error") })
        .with_state(Arc::clone(&app));

    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot bind {addr}: {e}");
            std::process::exit(2);
        }
    };
    // Without TCP_NODELAY, Nagle + delayed ACKs can hold small SSE writes
    // back by tens of ms: the first token would not be on time.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let mu = 1000.0 / args.service_ms;
    eprintln!(
        "erlang_c: M/M/{} on http://{addr}/v1, model `{MODEL}`, exponential service of mean {} ms \
         (mu = {mu:.4}/s, capacity {:.3} rps), seed {}",
        args.slots,
        args.service_ms,
        mu * args.slots as f64,
        args.seed
    );
    tokio::spawn(report(Arc::clone(&app)));
    tokio::select! {
        r = axum::serve(listener, router) => {
            if let Err(e) = r {
                eprintln!("error: server: {e}");
                std::process::exit(2);
            }
        }
        _ = tokio::signal::ctrl_c() => eprintln!("erlang_c: interrupted, bye"),
    }
}

async fn report(app: Arc<App>) {
    let mut tick = tokio::time::interval_at(Instant::now() + REPORT_EVERY, REPORT_EVERY);
    loop {
        tick.tick().await;
        let mut w = std::mem::take(&mut *app.window.lock().unwrap());
        if w.started == 0 && w.gone == 0 {
            continue;
        }
        let (busy, queued) = app.slots.occupancy();
        w.waits_ms.sort_by(f64::total_cmp);
        let q = |p: f64| -> f64 {
            if w.waits_ms.is_empty() {
                return f64::NAN;
            }
            let i = ((p * w.waits_ms.len() as f64).ceil() as usize).clamp(1, w.waits_ms.len());
            w.waits_ms[i - 1]
        };
        eprintln!(
            "erlang_c: last {}s: {} started ({:.2}/s), mean service {:.1} ms, wait p50 {:.1} ms p90 {:.1} ms, \
             {} clients gone early; now {busy} in service, {queued} waiting",
            REPORT_EVERY.as_secs(),
            w.started,
            w.started as f64 / REPORT_EVERY.as_secs_f64(),
            if w.started > 0 {
                1000.0 * w.service_s / w.started as f64
            } else {
                f64::NAN
            },
            q(0.5),
            q(0.9),
            w.gone,
        );
    }
}

// ------------------------------------------------------------------ handlers

fn error(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = json!({
        "error": {"message": message, "type": kind, "param": null, "code": status.as_u16()}
    });
    (status, axum::Json(body)).into_response()
}

fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, message, "invalid_request_error")
}

async fn models() -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": MODEL,
            "object": "model",
            "created": unix_now(),
            "owned_by": "erlang_c",
            "root": MODEL,
            "max_model_len": MAX_MODEL_LEN,
        }]
    }))
    .into_response()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Whitespace-separated words: the prompt size reported in `usage`.
fn words(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

/// Prompt tokens of a completions `prompt`: words of a text, length of a
/// token-id array, or either inside a one-element batch (a longer batch:
/// the sum).
fn completion_prompt_tokens(prompt: &Value) -> Result<u32, String> {
    match prompt {
        Value::String(text) => Ok(words(text)),
        Value::Array(items) if items.is_empty() => Err("prompt must not be empty".into()),
        Value::Array(items) if items.iter().all(Value::is_number) => {
            if items.iter().all(|v| v.as_u64().is_some()) {
                Ok(items.len() as u32)
            } else {
                Err("prompt token ids must be non-negative integers".into())
            }
        }
        Value::Array(items) => items.iter().map(completion_prompt_tokens).sum(),
        _ => Err("prompt must be a string, an array of token ids, or an array of either".into()),
    }
}

/// Prompt tokens of chat `messages`: the words of every text content.
fn chat_prompt_tokens(messages: &Value) -> Result<u32, String> {
    let Some(messages) = messages.as_array().filter(|m| !m.is_empty()) else {
        return Err("messages must be a non-empty array".into());
    };
    let mut n = 0;
    for m in messages {
        match &m["content"] {
            Value::String(text) => n += words(text),
            Value::Array(parts) => {
                for part in parts {
                    n += part["text"].as_str().map_or(0, words);
                }
            }
            _ => {}
        }
    }
    Ok(n)
}

async fn completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&format!("invalid request body: {e}")),
    };
    let prompt = match completion_prompt_tokens(&body["prompt"]) {
        Ok(n) => n,
        Err(e) => return bad_request(&e),
    };
    generate(app, arrived, Api::Completions, prompt, &body).await
}

async fn chat_completions(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&format!("invalid request body: {e}")),
    };
    let prompt = match chat_prompt_tokens(&body["messages"]) {
        Ok(n) => n,
        Err(e) => return bad_request(&e),
    };
    generate(app, arrived, Api::Chat, prompt, &body).await
}

/// What the service task tells the response body.
enum Event {
    Token { index: u32, finish: bool },
    Done,
}

const WORDS: [&str; 8] = [
    " the", " queue", " is", " long", " and", " the", " wait", " grows",
];

async fn generate(
    app: Arc<App>,
    arrived: Instant,
    api: Api,
    prompt: u32,
    body: &Value,
) -> Response {
    if let Some(model) = body["model"].as_str() {
        if model != MODEL {
            return error(
                StatusCode::NOT_FOUND,
                &format!("The model `{model}` does not exist."),
                "NotFoundError",
            );
        }
    }
    if body["n"].as_u64().is_some_and(|n| n != 1) {
        return bad_request("n must be 1");
    }
    let max_tokens = match api {
        Api::Completions => body["max_tokens"].as_u64(),
        Api::Chat => body["max_completion_tokens"]
            .as_u64()
            .or(body["max_tokens"].as_u64()),
        Api::Responses => body["max_output_tokens"].as_u64(),
    }
    .unwrap_or(u64::from(DEFAULT_MAX_TOKENS))
    .clamp(1, u64::from(u32::MAX)) as u32;
    let stream = body["stream"].as_bool().unwrap_or(false);
    let include_usage = body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);

    // The place in the queue is taken here, synchronously, in arrival order.
    let ticket = app.slots.arrive(arrived);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(serve_one(Arc::clone(&app), ticket, arrived, max_tokens, tx));

    let id = {
        let mut n = app.next_id.lock().unwrap();
        *n += 1;
        *n
    };
    let framer = Framer::new(api, id, unix_now(), MODEL);
    if stream {
        stream_response(rx, framer, prompt, include_usage)
    } else {
        full_response(rx, framer, prompt).await
    }
}

/// Waits for a slot, then plays the service: first token at its start, the
/// rest evenly spread, the last at its end. Returns (freeing the slot) as
/// soon as the response body is gone.
async fn serve_one(
    app: Arc<App>,
    ticket: Ticket,
    arrived: Instant,
    max_tokens: u32,
    tx: mpsc::UnboundedSender<Event>,
) {
    let gone = |app: &App| app.window.lock().unwrap().gone += 1;
    let mut permit = match ticket {
        Ticket::Now(p) => p,
        Ticket::Later(rx) => tokio::select! {
            r = rx => match r {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = tx.closed() => {
                gone(&app);
                return;
            }
        },
    };
    // Virtual start: when the slot became ours (never before the arrival).
    let start = permit.granted.max(arrived);
    let service_s = app.rng.lock().unwrap().exponential(app.mean_service_s);
    let service = Duration::from_secs_f64(service_s);
    let end = start + service;
    {
        let mut w = app.window.lock().unwrap();
        w.started += 1;
        w.service_s += service_s;
        w.waits_ms.push((start - arrived).as_secs_f64() * 1e3);
    }
    let send = |e: Event| tx.send(e).is_ok();
    if !send(Event::Token {
        index: 0,
        finish: max_tokens == 1,
    }) {
        gone(&app);
        return;
    }
    let rest = max_tokens - 1;
    for k in 1..=rest {
        let at = start + service.mul_f64(f64::from(k) / f64::from(rest));
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = tx.closed() => {
                gone(&app);
                return;
            }
        }
        if !send(Event::Token {
            index: k,
            finish: k == rest,
        }) {
            gone(&app);
            return;
        }
    }
    if rest == 0 {
        // One token: it went out at the start; the slot stays busy until
        // the end of the service all the same.
        tokio::select! {
            _ = tokio::time::sleep_until(end) => {}
            _ = tx.closed() => {
                gone(&app);
                return;
            }
        }
    }
    let _ = send(Event::Done);
    permit.ends = Some(end);
    drop(permit);
}

struct Sse {
    rx: mpsc::UnboundedReceiver<Event>,
    framer: Framer,
    prompt: u32,
    include_usage: bool,
    sent: u32,
    done: bool,
}

async fn next_sse(mut st: Sse) -> Option<(Result<Bytes, std::io::Error>, Sse)> {
    if st.done {
        return None;
    }
    let mut out = String::new();
    match st.rx.recv().await? {
        Event::Token { index, finish } => {
            if st.framer.api() == Api::Chat && index == 0 {
                st.framer.role_event(&mut out);
            }
            st.framer.token_event(
                &mut out,
                WORDS[index as usize % WORDS.len()],
                finish.then_some("length"),
            );
            st.sent += 1;
        }
        Event::Done => {
            if st.include_usage {
                st.framer.usage_event(&mut out, st.prompt, st.sent);
            }
            out.push_str("data: [DONE]\n\n");
            st.done = true;
        }
    }
    Some((Ok(Bytes::from(out)), st))
}

fn stream_response(
    rx: mpsc::UnboundedReceiver<Event>,
    framer: Framer,
    prompt: u32,
    include_usage: bool,
) -> Response {
    let st = Sse {
        rx,
        framer,
        prompt,
        include_usage,
        sent: 0,
        done: false,
    };
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

async fn full_response(
    mut rx: mpsc::UnboundedReceiver<Event>,
    framer: Framer,
    prompt: u32,
) -> Response {
    let mut text = String::new();
    let mut completion = 0u32;
    while let Some(e) = rx.recv().await {
        match e {
            Event::Token { index, .. } => {
                text.push_str(WORDS[index as usize % WORDS.len()]);
                completion += 1;
            }
            Event::Done => {
                return (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    framer.full_response(&text, "length", prompt, completion),
                )
                    .into_response();
            }
        }
    }
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "service interrupted",
        "server_error",
    )
}
