//! The engine driver: one OS thread per replica that takes a step, sleeps
//! until its scheduled end and hands each token to its request's channel.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::sim::engine::{Emitted, Engine, EngineRequest, RequestId};
use crate::sim::metrics::EngineMetrics;

/// What flows from the driver to one request.
#[derive(Debug)]
pub(super) enum StreamEvent {
    Token(Emitted),
    Failed(String),
}

pub(super) enum Command {
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

pub(super) fn summarise(h: &hdrhistogram::Histogram<u64>) -> LatenessSummary {
    LatenessSummary {
        steps: h.len(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
        mean_us: h.mean(),
    }
}

pub(super) struct Driver {
    engine: Engine,
    t0: Instant,
    senders: HashMap<RequestId, mpsc::UnboundedSender<StreamEvent>>,
    /// Wake-up lateness per step, microseconds.
    lateness_us: hdrhistogram::Histogram<u64>,
}

impl Driver {
    pub(super) fn new(engine: Engine, t0: Instant) -> Driver {
        Driver {
            engine,
            t0,
            senders: HashMap::new(),
            lateness_us: hdrhistogram::Histogram::new(3)
                .unwrap_or_else(|_| unreachable!("3 significant figures is a valid precision")),
        }
    }

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

    pub(super) fn run(mut self, rx: std_mpsc::Receiver<Command>) {
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
            if self.engine.is_queue() {
                // A queue's steps take no time: it steps at the clock.
                vnow = vnow.max(self.t0.elapsed());
            }
            let out = self.engine.step(vnow);
            if out.batch_seqs == 0
                && let Some(due) = self.engine.next_due()
            {
                // A queue with nothing due now: sleep until its next token
                // or freed slot, or until an arrival (which may take a
                // free slot at once).
                let wait = due.saturating_sub(self.t0.elapsed());
                if !wait.is_zero() {
                    match rx.recv_timeout(wait) {
                        Ok(cmd) => {
                            if !self.handle(cmd, self.t0.elapsed()) {
                                return;
                            }
                        }
                        Err(std_mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                continue;
            }
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
