//! The simulator's OpenAI-compatible HTTP server, replaying the engine in
//! real time.
//!
//! One engine driver owns the [`Engine`] and runs on its own OS thread: it
//! takes a step, sleeps until the step's scheduled end, then hands each
//! produced token to its request's channel. Step `i` is due at
//! `t0 + Σ durations` (not "now + duration"), so lateness never accumulates
//! into drift; when the engine idles, virtual time jumps to the real time of
//! the next arrival. A dedicated thread (not a tokio task) because tokio's
//! timer has millisecond granularity, while a blocking `recv_timeout` wakes
//! within tens of microseconds, and the issue asks for sub-millisecond step
//! fidelity under 1,000 streams.
//!
//! With several replicas ([`SimConfig::replicas`]) each engine has its own
//! driver thread, and every submission is routed by a
//! [`cluster::Router`](super::cluster::Router). The router cannot read
//! engines that live on other threads at submit time, so the HTTP layer
//! keeps its own figures: a replica's load is the requests it was sent and
//! that have not finished (running and waiting, like [`Engine::load`]);
//! for prefix affinity, a replica's cache is approximated by the prompts
//! routed to it (an LRU of their block hashes, as many blocks as the
//! replica's KV cache holds), as llm-d's router tracks what it routed
//! rather than asking the engines. Request ids are drawn from one counter,
//! so they are unique across replicas; every replica has the same seed, so
//! a request's tokens do not depend on where it ran. `/metrics` sums the
//! replicas (counters, histograms and the running/waiting gauges) and
//! averages their KV-cache usage.
//!
//! HTTP handlers (axum, on the caller's tokio runtime) parse and validate
//! requests, apply the injected faults, submit to the driver and stream the
//! tokens back as SSE. A request whose client goes away is aborted in the
//! engine (a guard in the response body sends the abort when dropped), so a
//! cancelled load test leaves no ghost work behind.
//!
//! Endpoints, as vLLM serves them: `GET /v1/models`, `GET /health`,
//! `GET /metrics`, `POST /v1/completions` (prompt as text or token ids),
//! `POST /v1/chat/completions` and `POST /v1/responses` (the Responses
//! API: `input` as text or message items, its typed event stream, no
//! `[DONE]`), streaming or not. A preset's answers ([`super::answer`]) may
//! reason first (`delta.reasoning` on chat, a `reasoning` item on
//! responses, counted in `usage`), call a tool when the call offers
//! `tools` (`delta.tool_calls`, a `function_call` item), and group tokens
//! into events of `tokens-per-event`; the framing is [`super::wire`]'s.
//!
//! Dialects ([`SimConfig::dialect`], `capcard sim --strict`,
//! `--refuse-field`, `--ignore-field`, `--rate-limit`): by default the
//! server accepts and ignores unknown fields as vLLM does; it can instead
//! play a stricter server (hosted APIs, gateways, TGI, Ollama), so that a
//! client negotiating the request dialect can be tested without one. On
//! the `POST` endpoints, before the engine sees a call: first the rate
//! limit, a token bucket answering HTTP 429 with `Retry-After` (whole
//! seconds, at least 1) and OpenAI's `rate_limit_exceeded` body; then the
//! fields, refused in the wording of the family known to refuse them
//! (OpenAI's 400 "Unrecognized request argument supplied: …" for fields it
//! does not define, TGI's axum/serde 422 for `stream_options`, OpenAI's
//! reasoning-model 400 for `max_tokens`), and ignored fields dropped
//! unread; then the normal parse. [`SimServer`] counts the calls received,
//! let through and refused either way, so a test can assert how many calls
//! a client sent. The bodies are built in [`super::dialect`].

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::answer::AnswerPlan;
use super::cluster;
use super::dialect::{FieldRefusal, RateLimited, SimDialect, TokenBucket};
use super::engine::{Emitted, Engine, EngineRequest, RequestId};
use super::kv::block_hashes;
use super::metrics::{EngineMetrics, render};
use super::presets::Preset;
pub use super::request::Api;
use super::request::{FaultPlan, Faulted, Refusal, fault_draw, parse_call};
use super::tokenize::token_text;
use super::wire::AnswerWriter;
pub use super::wire::Framer;
use super::{SimConfig, SimError};

// ------------------------------------------------------------------ driver

/// What flows from the driver to one request.
#[derive(Debug)]
enum StreamEvent {
    Token(Emitted),
    Failed(String),
}

enum Command {
    Submit {
        req: EngineRequest,
        tx: mpsc::UnboundedSender<StreamEvent>,
    },
    Abort(RequestId),
    Metrics(oneshot::Sender<EngineMetrics>),
    Lateness(oneshot::Sender<hdrhistogram::Histogram<u64>>),
    Shutdown,
}

/// How late the driver woke for each step's scheduled end (real-time
/// fidelity of the simulation).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatenessSummary {
    /// Steps measured.
    pub steps: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

fn summarise(h: &hdrhistogram::Histogram<u64>) -> LatenessSummary {
    LatenessSummary {
        steps: h.len(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
        mean_us: h.mean(),
    }
}

struct Driver {
    engine: Engine,
    t0: Instant,
    senders: HashMap<RequestId, mpsc::UnboundedSender<StreamEvent>>,
    /// Wake-up lateness per step, microseconds.
    lateness_us: hdrhistogram::Histogram<u64>,
}

impl Driver {
    /// Applies one command; `false` means stop.
    fn handle(&mut self, cmd: Command, now: Duration) -> bool {
        match cmd {
            Command::Submit { req, tx } => {
                let id = req.id;
                match self.engine.submit(req, now) {
                    Ok(()) => {
                        self.senders.insert(id, tx);
                    }
                    Err(e) => {
                        let _ = tx.send(StreamEvent::Failed(e.to_string()));
                    }
                }
            }
            Command::Abort(id) => {
                self.engine.abort(id);
                self.senders.remove(&id);
            }
            Command::Metrics(reply) => {
                let _ = reply.send(self.engine.metrics());
            }
            Command::Lateness(reply) => {
                let _ = reply.send(self.lateness_us.clone());
            }
            Command::Shutdown => return false,
        }
        true
    }

    fn run(mut self, rx: std_mpsc::Receiver<Command>) {
        // Virtual time at which the next step may start.
        let mut vnow = Duration::ZERO;
        loop {
            if !self.engine.has_work() {
                let Ok(cmd) = rx.recv() else { return };
                if !self.handle(cmd, self.t0.elapsed()) {
                    return;
                }
                while let Ok(cmd) = rx.try_recv() {
                    if !self.handle(cmd, self.t0.elapsed()) {
                        return;
                    }
                }
                vnow = vnow.max(self.t0.elapsed());
                continue;
            }
            let out = self.engine.step(vnow);
            if out.batch_seqs == 0 {
                // Nothing schedulable (cannot happen with valid presets):
                // wait for a command rather than spin.
                let Ok(cmd) = rx.recv() else { return };
                if !self.handle(cmd, self.t0.elapsed()) {
                    return;
                }
                vnow = vnow.max(self.t0.elapsed());
                continue;
            }
            let end = out.ends_at();
            loop {
                let now = self.t0.elapsed();
                if now >= end {
                    break;
                }
                match rx.recv_timeout(end - now) {
                    // Arrivals during a step join the queue for the next one.
                    Ok(cmd) => {
                        let at = self.t0.elapsed().min(end);
                        if !self.handle(cmd, at) {
                            return;
                        }
                    }
                    Err(std_mpsc::RecvTimeoutError::Timeout) => break,
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
            let late = self.t0.elapsed().saturating_sub(end);
            let _ = self
                .lateness_us
                .record(late.as_micros().min(u128::from(u64::MAX)) as u64);
            for e in out.emitted {
                let id = e.id;
                let last = e.finish.is_some();
                let delivered = match self.senders.get(&id) {
                    Some(tx) => tx.send(StreamEvent::Token(e)).is_ok(),
                    None => false,
                };
                if !delivered {
                    // Receiver gone without an abort yet: free the work now.
                    if !last {
                        self.engine.abort(id);
                    }
                    self.senders.remove(&id);
                } else if last {
                    self.senders.remove(&id);
                }
            }
            vnow = end;
        }
    }
}

// ------------------------------------------------------------------ server

struct AppState {
    preset: Preset,
    model: String,
    adapters: Vec<String>,
    /// The base model then the adapters: the names a call may ask for.
    served: Vec<String>,
    faults: super::SimFaults,
    dialect: SimDialect,
    /// The dialect's rate limit, if any, on the clock of `started`.
    bucket: Option<Mutex<TokenBucket>>,
    started: Instant,
    calls: Arc<CallCounters>,
    seed: u64,
    replicas: Vec<Replica>,
    routing: Mutex<Routing>,
    /// Request ids, unique across replicas.
    next_id: AtomicU64,
    created: u64,
}

/// The generation calls (`POST /v1/completions`, `/v1/chat/completions`,
/// `/v1/responses`)
/// and what the dialect did with them, for tests that count a client's
/// calls.
#[derive(Debug, Default)]
struct CallCounters {
    received: AtomicU64,
    rate_limited: AtomicU64,
    /// Let through by the rate limit (they may still be refused after).
    admitted: AtomicU64,
    field_refused: AtomicU64,
}

/// One engine as the HTTP layer sees it.
struct Replica {
    commands: std_mpsc::Sender<Command>,
    /// Requests sent to it that have not finished: the router's load.
    in_flight: AtomicUsize,
}

/// The router and what it knows of the replicas' caches.
struct Routing {
    router: cluster::Router,
    /// Per replica, for prefix affinity (empty otherwise).
    prefixes: Vec<PrefixLru>,
}

/// The block hashes of the prompts routed to one replica, least recently
/// routed first out, at most as many as the replica's KV cache has blocks:
/// the router's estimate of that replica's prefix cache.
#[derive(Debug, Default)]
struct PrefixLru {
    capacity: usize,
    stamps: HashMap<u64, u64>,
    order: BTreeMap<u64, u64>,
    next: u64,
}

impl PrefixLru {
    fn new(capacity: usize) -> Self {
        PrefixLru {
            capacity,
            ..PrefixLru::default()
        }
    }

    /// How many leading `hashes` it holds.
    fn leading_hits(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.stamps.contains_key(h))
            .count()
    }

    /// Marks `hashes` as just routed here, evicting the oldest over
    /// capacity. The last block is marked first, so a prompt's tail goes
    /// before its prefix, as the engine's pool evicts.
    fn touch(&mut self, hashes: &[u64]) {
        for &h in hashes.iter().rev() {
            if let Some(old) = self.stamps.insert(h, self.next) {
                self.order.remove(&old);
            }
            self.order.insert(self.next, h);
            self.next += 1;
        }
        while self.stamps.len() > self.capacity {
            let Some((_, h)) = self.order.pop_first() else {
                break;
            };
            self.stamps.remove(&h);
        }
    }
}

impl AppState {
    /// The replica that serves `prompt` (see the module docs).
    fn route(&self, prompt: &[u32]) -> usize {
        let n = self.replicas.len();
        if n <= 1 {
            return 0;
        }
        let mut routing = self.routing.lock().unwrap_or_else(PoisonError::into_inner);
        let Routing { router, prefixes } = &mut *routing;
        let block_size = self.preset.block_size.max(1) as usize;
        let hashes = if prefixes.is_empty() {
            Vec::new()
        } else {
            block_hashes(prompt, block_size)
        };
        // As the engine does, leave at least one token to compute.
        let cacheable = (prompt.len().saturating_sub(1) / block_size).min(hashes.len());
        let i = router.pick_by(
            n,
            |i| self.replicas[i].in_flight.load(Ordering::Relaxed),
            |i| (prefixes[i].leading_hits(&hashes[..cacheable]) * block_size) as u32,
        );
        if let Some(lru) = prefixes.get_mut(i) {
            lru.touch(&hashes);
        }
        i
    }
}

/// A running simulator (from [`start`]). Prefer [`SimServer::shutdown`]:
/// dropping it only stops accepting connections; streams in flight run to
/// their end, then the engine thread exits on its own.
pub struct SimServer {
    pub addr: SocketAddr,
    /// One per replica.
    commands: Vec<std_mpsc::Sender<Command>>,
    stop_http: oneshot::Sender<()>,
    http: tokio::task::JoinHandle<Result<(), std::io::Error>>,
    drivers: Vec<std::thread::JoinHandle<()>>,
    calls: Arc<CallCounters>,
}

impl SimServer {
    /// The OpenAI base URL, e.g. `http://127.0.0.1:41234/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Generation calls received so far (`POST /v1/completions`,
    /// `/v1/chat/completions` and `/v1/responses`), whatever their outcome: rate-limited,
    /// refused for their fields or by the normal parse, failed or served.
    pub fn calls_received(&self) -> u64 {
        self.calls.received.load(Ordering::Relaxed)
    }

    /// Calls answered HTTP 429 by the dialect's rate limit.
    pub fn rate_limited_calls(&self) -> u64 {
        self.calls.rate_limited.load(Ordering::Relaxed)
    }

    /// Calls the rate limit let through (all of them without one); they
    /// may still be refused for their fields or by the normal parse.
    pub fn calls_admitted(&self) -> u64 {
        self.calls.admitted.load(Ordering::Relaxed)
    }

    /// Calls refused by the dialect for their fields (`strict`,
    /// `refused_fields`), before the normal parse.
    pub fn field_refused_calls(&self) -> u64 {
        self.calls.field_refused.load(Ordering::Relaxed)
    }

    /// Step-lateness statistics so far, over every replica's steps (`None`
    /// if an engine has stopped).
    pub async fn step_lateness(&self) -> Option<LatenessSummary> {
        let mut all: Option<hdrhistogram::Histogram<u64>> = None;
        for commands in &self.commands {
            let (tx, rx) = oneshot::channel();
            commands.send(Command::Lateness(tx)).ok()?;
            let h = rx.await.ok()?;
            match &mut all {
                None => all = Some(h),
                Some(a) => a.add(&h).ok()?,
            }
        }
        all.as_ref().map(summarise)
    }

    /// Each replica's metrics now (`None` if an engine has stopped).
    pub async fn replica_metrics(&self) -> Option<Vec<EngineMetrics>> {
        replica_metrics(self.commands.iter()).await
    }

    /// The engine's metrics now (`None` if an engine has stopped). With
    /// several replicas: counters and the running/waiting gauges summed, KV
    /// usage averaged, and the histograms are the first replica's (the
    /// summed histograms are on `GET /metrics`; each replica's in
    /// [`replica_metrics`](Self::replica_metrics)).
    pub async fn metrics(&self) -> Option<EngineMetrics> {
        let all = self.replica_metrics().await?;
        Some(sum_metrics(&all))
    }

    /// Stops the engines (open streams end without `[DONE]`), then the
    /// HTTP server, and waits for them.
    pub async fn shutdown(self) {
        for commands in &self.commands {
            let _ = commands.send(Command::Shutdown);
        }
        let _ = self.stop_http.send(());
        let _ = self.http.await;
        for driver in self.drivers {
            let _ = tokio::task::spawn_blocking(move || driver.join()).await;
        }
    }
}

async fn replica_metrics<'a>(
    commands: impl Iterator<Item = &'a std_mpsc::Sender<Command>>,
) -> Option<Vec<EngineMetrics>> {
    let mut replies = Vec::new();
    for c in commands {
        let (tx, rx) = oneshot::channel();
        c.send(Command::Metrics(tx)).ok()?;
        replies.push(rx);
    }
    let mut out = Vec::with_capacity(replies.len());
    for rx in replies {
        out.push(rx.await.ok()?);
    }
    Some(out)
}

/// Counters and gauges summed, KV usage averaged; histograms of the first
/// (`EngineMetrics` offers no way to add histograms: [`merge_rendered`]
/// sums them in the exposition text).
fn sum_metrics(all: &[EngineMetrics]) -> EngineMetrics {
    let Some((first, rest)) = all.split_first() else {
        return EngineMetrics::default();
    };
    let mut m = first.clone();
    for r in rest {
        m.requests_running += r.requests_running;
        m.requests_waiting += r.requests_waiting;
        m.kv_cache_usage += r.kv_cache_usage;
        m.prefix_cache_queries += r.prefix_cache_queries;
        m.prefix_cache_hits += r.prefix_cache_hits;
        m.preemptions += r.preemptions;
        m.prompt_tokens += r.prompt_tokens;
        m.generation_tokens += r.generation_tokens;
        m.finished_stop += r.finished_stop;
        m.finished_length += r.finished_length;
        m.finished_abort += r.finished_abort;
    }
    m.kv_cache_usage /= all.len() as f64;
    m
}

/// Gauges averaged rather than summed across replicas.
const AVERAGED: [&str; 2] = ["vllm:kv_cache_usage_perc{", "vllm:gpu_cache_usage_perc{"];

/// The replicas' expositions (each from [`render`], so line for line alike)
/// as one: every sample summed, histogram buckets included, except the KV
/// usage gauges, averaged.
pub(crate) fn merge_rendered(texts: &[String]) -> String {
    let Some(first) = texts.first() else {
        return String::new();
    };
    let mut lines: Vec<std::str::Lines<'_>> = texts[1..].iter().map(|t| t.lines()).collect();
    let mut out = String::with_capacity(first.len());
    for line in first.lines() {
        let others: Vec<&str> = lines.iter_mut().filter_map(Iterator::next).collect();
        let sample = line
            .rsplit_once(' ')
            .filter(|_| !line.starts_with('#'))
            .and_then(|(key, v)| Some((key, v.parse::<f64>().ok()?)));
        let Some((key, value)) = sample else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let mut total = value;
        for other in &others {
            if let Some((k, v)) = other.rsplit_once(' ') {
                if k == key {
                    total += v.parse::<f64>().unwrap_or(0.0);
                }
            }
        }
        if AVERAGED.iter().any(|a| key.starts_with(a)) {
            total /= texts.len() as f64;
        }
        out.push_str(key);
        out.push(' ');
        out.push_str(&total.to_string());
        out.push('\n');
    }
    out
}

/// Binds `addr` (`127.0.0.1:0` for an ephemeral port) and serves in the
/// background on the current tokio runtime.
pub async fn start(config: SimConfig, addr: SocketAddr) -> Result<SimServer, SimError> {
    if let Some(limit) = &config.dialect.rate_limit {
        limit.check()?;
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| SimError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| SimError::Bind { addr, source })?;

    let replicas = config.replicas.max(1) as usize;
    let t0 = Instant::now();
    let mut commands = Vec::with_capacity(replicas);
    let mut drivers = Vec::with_capacity(replicas);
    for i in 0..replicas {
        let (cmd_tx, cmd_rx) = std_mpsc::channel();
        let driver = Driver {
            engine: Engine::new(&config.preset, config.seed),
            t0,
            senders: HashMap::new(),
            lateness_us: hdrhistogram::Histogram::new(3)
                .unwrap_or_else(|_| unreachable!("3 significant figures is a valid precision")),
        };
        let name = if replicas == 1 {
            "capcard-sim-engine".to_string()
        } else {
            format!("capcard-sim-engine-{i}")
        };
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || driver.run(cmd_rx));
        match spawned {
            Ok(handle) => {
                commands.push(cmd_tx);
                drivers.push(handle);
            }
            Err(e) => {
                for c in &commands {
                    let _ = c.send(Command::Shutdown);
                }
                return Err(SimError::EngineThread(e));
            }
        }
    }

    let prefixes = if replicas > 1
        && config.router == super::SimRouter::PrefixAffinity
        && config.preset.prefix_caching
    {
        let blocks = config.preset.kv_capacity_blocks() as usize;
        (0..replicas).map(|_| PrefixLru::new(blocks)).collect()
    } else {
        Vec::new()
    };
    let served_name = config.preset.model.served_name.to_string();
    let calls = Arc::new(CallCounters::default());
    let state = Arc::new(AppState {
        model: served_name.clone(),
        adapters: config.adapters.clone(),
        served: std::iter::once(served_name)
            .chain(config.adapters.iter().cloned())
            .collect(),
        preset: config.preset,
        faults: config.faults,
        bucket: config
            .dialect
            .rate_limit
            .map(|limit| Mutex::new(TokenBucket::new(limit))),
        dialect: config.dialect,
        started: Instant::now(),
        calls: calls.clone(),
        seed: config.seed,
        replicas: commands
            .iter()
            .map(|c| Replica {
                commands: c.clone(),
                in_flight: AtomicUsize::new(0),
            })
            .collect(),
        routing: Mutex::new(Routing {
            router: cluster::Router::new(config.router),
            prefixes,
        }),
        next_id: AtomicU64::new(0),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    let app = router(state);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let http = tokio::spawn(async move {
        // Nagle's algorithm would hold each small SSE chunk until the
        // client's delayed ACK (tens of ms): every TTFT would carry it.
        // vLLM's uvicorn sets TCP_NODELAY too.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .await
    });
    Ok(SimServer {
        addr: local,
        commands,
        stop_http: stop_tx,
        http,
        drivers,
        calls,
    })
}

/// Serves until `shutdown` resolves (`capcard sim` passes Ctrl-C).
pub async fn serve(
    config: SimConfig,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SimError> {
    let server = start(config, addr).await?;
    shutdown.await;
    server.shutdown().await;
    Ok(())
}

fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new()
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Not Found", "invalid_request_error") })
        .with_state(state)
}

// ------------------------------------------------------------------ handlers

/// An OpenAI-style error body: `{"error": {"message", "type", "param", "code"}}`.
fn error(status: StatusCode, message: &str, kind: &str) -> Response {
    let body = json!({
        "error": {"message": message, "type": kind, "param": null, "code": status.as_u16()}
    });
    (status, axum::Json(body)).into_response()
}

/// vLLM's answer to a token id outside the vocabulary: on a streamed
/// request, HTTP 200 and a stream holding one error event (a client that
/// looks only at the status takes it for a success); else a 400.
fn out_of_vocabulary(id: u32, stream: bool) -> Response {
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

fn bad_request(message: impl AsRef<str>) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        message.as_ref(),
        "invalid_request_error",
    )
}

async fn models(State(s): State<Arc<AppState>>) -> Response {
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

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
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

async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    generate(s, Api::Completions, &body).await
}

async fn chat_completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    generate(s, Api::Chat, &body).await
}

async fn responses(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    generate(s, Api::Responses, &body).await
}

fn refused(refusal: Refusal) -> Response {
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
struct AbortGuard {
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
fn dialect_gate(s: &AppState, api: Api, body: &[u8]) -> Option<Response> {
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

fn json_response(status: u16, body: String) -> Response {
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

fn field_refused(refusal: &FieldRefusal) -> Response {
    json_response(refusal.status(), refusal.body())
}

fn rate_limited(limited: &RateLimited) -> Response {
    let mut response = json_response(limited.status(), limited.body());
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(limited.retry_after_s()),
    );
    response
}

async fn generate(s: Arc<AppState>, api: Api, body: &[u8]) -> Response {
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
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
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
    let writer = AnswerWriter::new(framer, answer, stream, include_usage);
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

fn cut_body() -> Body {
    let err = std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "injected stream cut (sim cut-rate)",
    );
    Body::from_stream(futures_util::stream::once(
        async move { Err::<Bytes, _>(err) },
    ))
}

async fn full_response(
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
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the engine stopped mid-request",
                    "server_error",
                );
            }
        }
    }
}

struct SseState {
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
async fn next_sse(mut st: SseState) -> Option<(Result<Bytes, std::io::Error>, SseState)> {
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

fn stream_response(st: SseState) -> Response {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_metrics_sum_samples_and_average_kv_usage() {
        let mut a = EngineMetrics {
            requests_running: 3,
            kv_cache_usage: 0.5,
            generation_tokens: 100,
            finished_length: 2,
            ..EngineMetrics::default()
        };
        a.ttft_s.observe(0.003);
        let mut b = EngineMetrics {
            requests_running: 1,
            kv_cache_usage: 0.25,
            generation_tokens: 50,
            finished_length: 1,
            ..EngineMetrics::default()
        };
        b.ttft_s.observe(0.2);
        b.ttft_s.observe(0.3);
        let text = merge_rendered(&[render("m", &a), render("m", &b)]);
        use super::super::metrics::sample;
        assert_eq!(sample(&text, "vllm:num_requests_running"), Some(4.0));
        assert_eq!(sample(&text, "vllm:kv_cache_usage_perc"), Some(0.375));
        assert_eq!(sample(&text, "vllm:gpu_cache_usage_perc"), Some(0.375));
        assert_eq!(sample(&text, "vllm:generation_tokens_total"), Some(150.0));
        assert_eq!(
            sample(&text, "vllm:time_to_first_token_seconds_count"),
            Some(3.0)
        );
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.005\"} 1\n"
        ));
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"} 3\n"
            )
        );
        assert!(text.contains(
            "vllm:request_success_total{model_name=\"m\",finished_reason=\"length\"} 3\n"
        ));
        // One exposition merges to itself.
        assert_eq!(merge_rendered(&[render("m", &a)]), render("m", &a));
        let summed = sum_metrics(&[a, b]);
        assert_eq!(summed.generation_tokens, 150);
        assert_eq!(summed.kv_cache_usage, 0.375);
    }

    #[test]
    fn prefix_lru_keeps_the_most_recently_routed_blocks() {
        let mut lru = PrefixLru::new(3);
        lru.touch(&[1, 2, 3]);
        assert_eq!(lru.leading_hits(&[1, 2, 3, 4]), 3);
        lru.touch(&[1, 9]); // the tail, 3, is now the oldest, and goes
        assert_eq!(lru.leading_hits(&[1, 2, 3]), 2);
        assert_eq!(lru.leading_hits(&[9]), 1);
        assert_eq!(lru.leading_hits(&[3]), 0);
        assert_eq!(lru.stamps.len(), 3);
        assert_eq!(lru.order.len(), 3);
    }
}
