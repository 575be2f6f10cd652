//! The coordinator's side of a sharded run: a small HTTP server that tells N
//! shard processes which run to start and when, and takes their journals
//! back. The coordinator itself runs the experiment as `capcard run` does
//! (closed sweep, search, extensions, frontier): only the execution of each
//! run is handed to the shards, so an adaptive search sees merged results.
//!
//! Why a coordinator and not a Job re-launched per rate: the search, its
//! extensions and the frontier decide each next run from the last verdict,
//! and a run at a new rate must start within seconds, not after a pod
//! schedules. Plain HTTP on one port keeps it inspectable (`curl`) and
//! needs nothing in the cluster beyond a Service.
//!
//! The protocol (JSON, `/v1/…`):
//! - `GET clock`: the coordinator's clock, for the shards' offset.
//! - `POST join`: a shard says who it is, with a hash of its experiment
//!   file; a different file or shard count is refused (409).
//! - `GET next?shard=I&after=SEQ`: waits (up to [`LONG_POLL`]) for the run
//!   after `SEQ`: its plan and its start instant, or that the experiment is
//!   done. 204: nothing yet, ask again.
//! - `GET state?shard=I&seq=SEQ`: polled by a shard during a run, every
//!   [`HEARTBEAT`]: whether the run is cancelled (Ctrl-C at the
//!   coordinator). It is also the shard's heartbeat.
//! - `POST journal?shard=I&seq=SEQ`: the shard's journal of the run, the
//!   body streamed to `shards/<I>/<run-id>.jsonl` in the results folder.
//!
//! A shard that neither uploads nor polls for `--lost-after` (default
//! [`LOST_AFTER`]) is lost: the
//! run is merged from the others without a footer (incomplete), and the
//! experiment stops there, never carrying on with a lighter load.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::plan::RunPlan;
use crate::plan::shard::ShardPart;

/// How long `next` waits before answering 204.
pub const LONG_POLL: Duration = Duration::from_secs(20);
/// How often a running shard asks whether its run is cancelled.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// A shard silent this long (no poll, no upload in progress) is lost,
/// unless `--lost-after` says otherwise.
pub const LOST_AFTER: Duration = Duration::from_secs(15);
/// The shortest `--lost-after`: a running shard is heard every
/// [`HEARTBEAT`], and one late heartbeat is not a lost shard.
pub const MIN_LOST_AFTER: Duration = Duration::from_secs(3);
/// How far ahead of now a run's start instant is set, unless
/// `--start-lead` says otherwise: long enough for every shard's long poll
/// to return, its clock to be measured and its first bodies rendered.
pub const START_LEAD: Duration = Duration::from_secs(3);
/// The shortest `--start-lead`: a shard measures its clock offset (16
/// round trips) between hearing of a run and starting it.
pub const MIN_START_LEAD: Duration = Duration::from_millis(500);
/// After a cancel, how long the coordinator waits for the shards'
/// interrupted journals.
pub const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// The coordinator's two waits that depend on where the shards run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// A shard silent this long is lost (`--lost-after`).
    pub lost_after: Duration,
    /// How far ahead of now each run's start is set (`--start-lead`).
    pub start_lead: Duration,
}

/// A shard introducing itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Join {
    pub part: ShardPart,
    /// [`crate::hash::hash_str`] of the experiment file's text.
    pub experiment_hash: u64,
    pub version: String,
}

/// The coordinator's answer to a join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// Every shard draws prompts with the coordinator's nonce: one stream.
    pub content_nonce: u64,
}

/// What a shard is to do next.
// One assignment per run, sent once: boxing the plan would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Assignment {
    Run {
        seq: u64,
        run: RunPlan,
        /// The run's t0 on the coordinator's clock, ms since the Unix epoch.
        start_at_unix_ms: f64,
        /// How the coordinator emptied the server's prefix cache before it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix_cache_reset: Option<String>,
    },
    Done {
        status: String,
    },
}

/// The coordinator's clock reading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockReading {
    pub unix_ms: f64,
}

/// A running run's state, as a shard polls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub cancelled: bool,
}

/// Why the shards could not carry out a run.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Milliseconds since the Unix epoch of `t`.
pub fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

#[derive(Debug, Default)]
struct Current {
    seq: u64,
    assignment: Option<Assignment>,
    run_id: String,
    received: BTreeSet<u32>,
    uploading: BTreeSet<u32>,
    cancelled: bool,
}

#[derive(Debug)]
struct Inner {
    count: u32,
    experiment_hash: u64,
    content_nonce: u64,
    joined: BTreeSet<u32>,
    last_seen: BTreeMap<u32, Instant>,
    current: Current,
    done: Option<String>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
    shards_dir: PathBuf,
    timing: Timing,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A handler that panicked left the state as it was: still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What became of one run handed to the shards.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    /// The journals that arrived, in shard order.
    pub parts: Vec<PathBuf>,
    /// Shards that sent nothing (lost, or still silent after a cancel).
    pub missing: Vec<u32>,
    /// How long a shard had to be silent to be lost.
    pub lost_after: Duration,
}

/// The coordinator: its server and the shards' shared state.
pub struct Coordinator {
    shared: Arc<Shared>,
    pub addr: SocketAddr,
    /// `None` once finished.
    server: Option<crate::serve::Background>,
}

impl Coordinator {
    /// Listen on `addr` for `count` shards of the experiment whose text
    /// hashes to `experiment_hash`; journals go under `shards_dir`; a
    /// shard silent for `timing.lost_after` is lost.
    pub async fn start(
        addr: SocketAddr,
        count: u32,
        timing: Timing,
        experiment_hash: u64,
        content_nonce: u64,
        shards_dir: &Path,
    ) -> Result<Coordinator, CoordinatorError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| CoordinatorError::Listen { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| CoordinatorError::Listen { addr, source })?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                count,
                experiment_hash,
                content_nonce,
                joined: BTreeSet::new(),
                last_seen: BTreeMap::new(),
                current: Current::default(),
                done: None,
            }),
            changed: Notify::new(),
            shards_dir: shards_dir.to_path_buf(),
            timing,
        });
        let app = axum::Router::new()
            .route("/v1/clock", get(clock))
            .route("/v1/join", post(join))
            .route("/v1/next", get(next))
            .route("/v1/state", get(state))
            .route("/v1/journal", post(journal))
            .with_state(Arc::clone(&shared));
        let server = crate::serve::spawn(listener, app)
            .map_err(|source| CoordinatorError::Listen { addr, source })?;
        Ok(Coordinator {
            shared,
            addr,
            server: Some(server),
        })
    }

    /// Shards that have joined so far.
    pub fn joined(&self) -> BTreeSet<u32> {
        self.shared.lock().joined.clone()
    }

    /// Wait until every shard has joined (or `cancel`); `on_join` is told
    /// of each as it comes.
    pub async fn wait_for_shards(
        &self,
        cancel: &CancellationToken,
        mut on_join: impl FnMut(u32, u32),
    ) -> bool {
        let mut told = BTreeSet::new();
        loop {
            let notified = self.shared.changed.notified();
            let (joined, count) = {
                let inner = self.shared.lock();
                (inner.joined.clone(), inner.count)
            };
            for &i in joined.difference(&told) {
                on_join(i, count);
            }
            told = joined;
            if told.len() as u32 == count {
                return true;
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Hand `run` to the shards, starting at now + the start lead; returns
    /// its sequence number and start instant (coordinator clock).
    pub fn publish(&self, run: &RunPlan, prefix_cache_reset: Option<String>) -> (u64, SystemTime) {
        let start_at = SystemTime::now() + self.shared.timing.start_lead;
        let mut inner = self.shared.lock();
        let seq = inner.current.seq + 1;
        let now = Instant::now();
        // Every shard gets a fresh heartbeat clock for the new run.
        for i in 0..inner.count {
            inner.last_seen.insert(i, now);
        }
        inner.current = Current {
            seq,
            assignment: Some(Assignment::Run {
                seq,
                run: run.clone(),
                start_at_unix_ms: unix_ms(start_at),
                prefix_cache_reset,
            }),
            run_id: run.id.clone(),
            received: BTreeSet::new(),
            uploading: BTreeSet::new(),
            cancelled: false,
        };
        drop(inner);
        self.shared.changed.notify_waiters();
        (seq, start_at)
    }

    /// Wait for every shard's journal of run `seq`. On `cancel` the shards
    /// are told to stop, and their interrupted journals are awaited for
    /// [`CANCEL_GRACE`]; a shard silent for its `lost_after` is given up.
    pub async fn collect(&self, seq: u64, cancel: &CancellationToken) -> Collected {
        let mut cancel_deadline: Option<Instant> = None;
        loop {
            let notified = self.shared.changed.notified();
            let (count, received, lost, run_id) = {
                let mut inner = self.shared.lock();
                if inner.current.seq != seq {
                    return Collected {
                        parts: Vec::new(),
                        missing: (0..inner.count).collect(),
                        lost_after: self.shared.timing.lost_after,
                    };
                }
                if cancel.is_cancelled() && !inner.current.cancelled {
                    inner.current.cancelled = true;
                    cancel_deadline = Some(Instant::now() + CANCEL_GRACE);
                }
                let now = Instant::now();
                let lost: Vec<u32> = (0..inner.count)
                    .filter(|i| {
                        !inner.current.received.contains(i)
                            && !inner.current.uploading.contains(i)
                            && inner.last_seen.get(i).is_none_or(|t| {
                                now.duration_since(*t) > self.shared.timing.lost_after
                            })
                    })
                    .collect();
                (
                    inner.count,
                    inner.current.received.clone(),
                    lost,
                    inner.current.run_id.clone(),
                )
            };
            let timed_out = cancel_deadline.is_some_and(|d| Instant::now() >= d);
            // A lost shard ends the run, but the shards still heard from
            // finish it first: what they measured is kept.
            let accounted = received.len() + lost.len();
            if received.len() as u32 == count || accounted as u32 >= count || timed_out {
                let parts = received
                    .iter()
                    .map(|i| journal_path(&self.shared.shards_dir, *i, &run_id))
                    .collect();
                let missing = (0..count).filter(|i| !received.contains(i)).collect();
                return Collected {
                    parts,
                    missing,
                    lost_after: self.shared.timing.lost_after,
                };
            }
            tokio::select! {
                _ = notified => {}
                _ = cancel.cancelled(), if cancel_deadline.is_none() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// Tell the shards the experiment is over (`status`), give them a
    /// moment to hear it, and stop serving.
    pub async fn finish(mut self, status: &str) {
        self.shared.lock().done = Some(status.to_string());
        self.shared.changed.notify_waiters();
        // Long polls return at once on the notification; a shard between
        // two polls asks again within its retry pause.
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Some(server) = self.server.take() {
            server.stop(Some(Duration::from_secs(5))).await;
        }
    }
}

/// Where shard `index`'s journal of `run_id` is kept.
pub fn journal_path(shards_dir: &Path, index: u32, run_id: &str) -> PathBuf {
    shards_dir
        .join(index.to_string())
        .join(format!("{run_id}.jsonl"))
}

fn refuse(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}

async fn clock() -> Json<ClockReading> {
    Json(ClockReading {
        unix_ms: unix_ms(SystemTime::now()),
    })
}

async fn join(State(shared): State<Arc<Shared>>, Json(join): Json<Join>) -> Response {
    let mut inner = shared.lock();
    if join.part.count != inner.count {
        return refuse(
            StatusCode::CONFLICT,
            format!(
                "this coordinator runs {} shards, not {} (--shard I/{} against --coordinate {})",
                inner.count, join.part.count, join.part.count, inner.count
            ),
        );
    }
    if join.experiment_hash != inner.experiment_hash {
        return refuse(
            StatusCode::CONFLICT,
            "this shard's experiment file differs from the coordinator's: give every process \
             the same file"
                .into(),
        );
    }
    if join.version != crate::TOOL_VERSION {
        return refuse(
            StatusCode::CONFLICT,
            format!(
                "this shard is capcard {}, the coordinator {}: run one version",
                join.version,
                crate::TOOL_VERSION
            ),
        );
    }
    if inner.current.seq > 0 && !inner.joined.contains(&join.part.index) {
        return refuse(
            StatusCode::CONFLICT,
            "the experiment has started without this shard".into(),
        );
    }
    inner.joined.insert(join.part.index);
    inner.last_seen.insert(join.part.index, Instant::now());
    let welcome = Welcome {
        content_nonce: inner.content_nonce,
    };
    drop(inner);
    shared.changed.notify_waiters();
    Json(welcome).into_response()
}

#[derive(Debug, Deserialize)]
struct NextQuery {
    shard: u32,
    after: u64,
}

async fn next(State(shared): State<Arc<Shared>>, Query(q): Query<NextQuery>) -> Response {
    let deadline = Instant::now() + LONG_POLL;
    loop {
        let notified = shared.changed.notified();
        {
            let mut inner = shared.lock();
            inner.last_seen.insert(q.shard, Instant::now());
            if let Some(status) = &inner.done {
                return Json(Assignment::Done {
                    status: status.clone(),
                })
                .into_response();
            }
            if inner.current.seq > q.after
                && let Some(assignment) = &inner.current.assignment
            {
                return Json(assignment.clone()).into_response();
            }
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(deadline) => return StatusCode::NO_CONTENT.into_response(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct RunQuery {
    shard: u32,
    seq: u64,
}

async fn state(State(shared): State<Arc<Shared>>, Query(q): Query<RunQuery>) -> Json<RunState> {
    let mut inner = shared.lock();
    inner.last_seen.insert(q.shard, Instant::now());
    // A run other than the current one is over: stop it.
    let cancelled = inner.current.seq != q.seq || inner.current.cancelled;
    Json(RunState { cancelled })
}

async fn journal(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<RunQuery>,
    body: Body,
) -> Response {
    let run_id = {
        let mut inner = shared.lock();
        if q.seq != inner.current.seq || q.shard >= inner.count {
            return refuse(
                StatusCode::CONFLICT,
                format!("run {} is not the current run", q.seq),
            );
        }
        inner.current.uploading.insert(q.shard);
        inner.current.run_id.clone()
    };
    let path = journal_path(&shared.shards_dir, q.shard, &run_id);
    let result = store(&path, body).await;
    let mut inner = shared.lock();
    inner.current.uploading.remove(&q.shard);
    inner.last_seen.insert(q.shard, Instant::now());
    match result {
        Ok(()) => {
            inner.current.received.insert(q.shard);
            drop(inner);
            shared.changed.notify_waiters();
            StatusCode::OK.into_response()
        }
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Stream `body` into `path` (via a temporary file, so a broken upload
/// never leaves half a journal where a whole one is expected).
async fn store(path: &Path, body: Body) -> Result<(), CoordinatorError> {
    let io = |source| CoordinatorError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(io)?;
    }
    let tmp = path.with_extension("part~");
    let mut file = tokio::fs::File::create(&tmp).await.map_err(io)?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| io(std::io::Error::other(e)))?;
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.flush().await.map_err(io)?;
    drop(file);
    tokio::fs::rename(&tmp, path).await.map_err(io)
}
