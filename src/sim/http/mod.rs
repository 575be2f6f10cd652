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
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::routing::{get, post};
use tokio::sync::oneshot;

use super::cluster;
use super::dialect::{SimDialect, TokenBucket};
use super::engine::Engine;
use super::kv::block_hashes;
use super::metrics::EngineMetrics;
use super::presets::Preset;
pub use super::request::Api;
pub use super::wire::Framer;
use super::{SimConfig, SimError};

mod driver;
mod handlers;
mod merge;

pub use driver::LatenessSummary;
use driver::*;
use handlers::*;
pub(crate) use merge::merge_rendered;
use merge::*;

// ------------------------------------------------------------------ server

struct AppState {
    preset: Preset,
    model: String,
    adapters: Vec<String>,
    /// The base model then the adapters: the names a call may ask for.
    served: Vec<String>,
    faults: crate::sim::SimFaults,
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
    http: crate::serve::Background,
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
        self.http.stop(None).await;
        for driver in self.drivers {
            let _ = tokio::task::spawn_blocking(move || driver.join()).await;
        }
    }
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
        let driver = Driver::new(Engine::new(&config.preset, config.seed), t0);
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
        && config.router == crate::sim::SimRouter::PrefixAffinity
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
    let http = crate::serve::spawn(listener, router(state))
        .map_err(|source| SimError::Bind { addr, source })?;
    Ok(SimServer {
        addr: local,
        commands,
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

#[cfg(test)]
mod tests {
    use super::*;

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
