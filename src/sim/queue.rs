//! A queue with a known answer (pure): `sim queue`, the engine as `slots`
//! servers taking calls first come first served, each held for a service
//! time drawn from a stated distribution, the first token sent the moment
//! service starts. TTFT is then the wait for a slot, so queueing theory (or
//! a long run of the same queue, [`reference`](super::reference)) says
//! where an SLO on it stops holding: the audit of the Cr_open method
//! (`capcard audit`) runs capcard's whole pipeline against it.
//!
//! A call of `n` output tokens sends its first at service start and the
//! rest evenly until its service ends (E2E = wait + service); with one
//! token, the slot is still held for the whole service. An optional
//! *cliff* slows every call that starts service while more than `above`
//! calls are in service by `slowdown`: a capacity that drops under load,
//! as a KV-cache wall or preemption does on a real engine.
//!
//! Service times come from a seeded draw per request id, so a request
//! stream replays to the same waits.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::hash::mix;

/// A queue: its slots, its service-time distribution, and a cliff.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct QueueModel {
    /// Servers (calls in service at once), at least 1.
    pub slots: u32,
    pub service: Service,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cliff: Option<Cliff>,
}

/// A service-time distribution (times in seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "dist", rename_all = "kebab-case")]
pub enum Service {
    /// Exp(mean): the M/M/c queue of Erlang C.
    Exponential { mean_s: f64 },
    /// Every call takes the mean: M/D/c.
    Deterministic { mean_s: f64 },
    /// Lognormal with this mean and σ of the log (σ = 1: a heavy tail,
    /// the p99 about 6× the median).
    Lognormal { mean_s: f64, sigma: f64 },
    /// `short_s`, or `long_s` with probability `long_share`.
    TwoPoint {
        short_s: f64,
        long_s: f64,
        long_share: f64,
    },
}

/// Service slows once the queue holds more than `above` calls in service.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Cliff {
    pub above: u32,
    /// The factor a call's service is multiplied by (> 1).
    pub slowdown: f64,
}

impl Service {
    /// The mean service time, s.
    pub fn mean_s(&self) -> f64 {
        match *self {
            Service::Exponential { mean_s }
            | Service::Deterministic { mean_s }
            | Service::Lognormal { mean_s, .. } => mean_s,
            Service::TwoPoint {
                short_s,
                long_s,
                long_share,
            } => short_s * (1.0 - long_share) + long_s * long_share,
        }
    }

    /// A draw from two independent uniforms in (0, 1).
    pub fn sample_s(&self, u1: f64, u2: f64) -> f64 {
        match *self {
            Service::Exponential { mean_s } => -mean_s * u1.ln(),
            Service::Deterministic { mean_s } => mean_s,
            Service::Lognormal { mean_s, sigma } => {
                // Box–Muller: one standard normal from two uniforms.
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mean_s.ln() - sigma * sigma / 2.0 + sigma * z).exp()
            }
            Service::TwoPoint {
                short_s,
                long_s,
                long_share,
            } => {
                if u1 < long_share {
                    long_s
                } else {
                    short_s
                }
            }
        }
    }

    /// The words of its `service` line: `"lognormal" mean="500ms" sigma=1`.
    pub fn kdl_words(&self) -> String {
        let d = |s: f64| format!("\"{}\"", crate::format::duration_literal(s));
        match *self {
            Service::Exponential { mean_s } => format!("\"exponential\" mean={}", d(mean_s)),
            Service::Deterministic { mean_s } => format!("\"deterministic\" mean={}", d(mean_s)),
            Service::Lognormal { mean_s, sigma } => {
                format!("\"lognormal\" mean={} sigma={sigma}", d(mean_s))
            }
            Service::TwoPoint {
                short_s,
                long_s,
                long_share,
            } => format!(
                "\"two-point\" short={} long={} long-share=\"{}%\"",
                d(short_s),
                d(long_s),
                crate::format::significant(long_share * 100.0)
            ),
        }
    }

    /// How the card and the docs name it.
    pub fn describe(&self) -> String {
        let ms = |s: f64| crate::format::ms_compact(s * 1000.0);
        match *self {
            Service::Exponential { mean_s } => format!("exponential, mean {}", ms(mean_s)),
            Service::Deterministic { mean_s } => format!("deterministic {}", ms(mean_s)),
            Service::Lognormal { mean_s, sigma } => {
                format!("lognormal, mean {}, σ {sigma}", ms(mean_s))
            }
            Service::TwoPoint {
                short_s,
                long_s,
                long_share,
            } => format!(
                "{} or {} ({}% long)",
                ms(short_s),
                ms(long_s),
                crate::format::significant(long_share * 100.0)
            ),
        }
    }
}

impl Cliff {
    /// The words of its `cliff` line: `above=8 slowdown=4`.
    pub fn kdl_words(&self) -> String {
        format!(
            "above={} slowdown={}",
            self.above,
            crate::format::significant(self.slowdown)
        )
    }
}

impl QueueModel {
    /// What a call that starts service now holds its slot for, s: its draw
    /// `base_s`, slowed by the cliff when more than `above` calls (itself
    /// included) are then in service.
    pub fn service_s(&self, base_s: f64, in_service_with_it: usize) -> f64 {
        match self.cliff {
            Some(c) if in_service_with_it > c.above as usize => base_s * c.slowdown,
            _ => base_s,
        }
    }

    /// The queue's capacity below any cliff, calls/s: `slots / mean`.
    pub fn capacity_per_s(&self) -> f64 {
        f64::from(self.slots) / self.service.mean_s()
    }

    /// One line for the card: "4 slots FIFO, exponential, mean 100 ms".
    pub fn describe(&self) -> String {
        let cliff = self
            .cliff
            .map(|c| {
                format!(
                    "; service ×{} beyond {} in service",
                    crate::format::significant(c.slowdown),
                    c.above
                )
            })
            .unwrap_or_default();
        format!(
            "{} slot{} FIFO, {}{cliff}",
            self.slots,
            if self.slots == 1 { "" } else { "s" },
            self.service.describe()
        )
    }
}

/// A uniform in (0, 1) from a seed and a stream index.
pub fn unit(seed: u64, index: u64) -> f64 {
    ((mix(seed, index) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// The base service draw (s) of the call whose stream seed is `rng`.
pub fn base_service_s(service: &Service, rng: u64) -> f64 {
    service.sample_s(unit(rng, SERVICE_U1), unit(rng, SERVICE_U2))
}

const SERVICE_U1: u64 = 0x5E7_0001;
const SERVICE_U2: u64 = 0x5E7_0002;

/// A call waiting for a slot.
#[derive(Debug, Clone)]
struct Waiting {
    id: u64,
    tokens: u32,
    prompt_tokens: u32,
    rng: u64,
}

/// A call in service.
#[derive(Debug, Clone)]
struct InService {
    id: u64,
    start: Duration,
    service: Duration,
    tokens: u32,
    sent: u32,
    prompt_tokens: u32,
    rng: u64,
}

impl InService {
    /// When its `index`th token is due.
    fn due(&self, index: u32) -> Duration {
        if index == 0 || self.tokens < 2 {
            return self.start;
        }
        self.start
            + self
                .service
                .mul_f64(f64::from(index) / f64::from(self.tokens - 1))
    }

    fn slot_free_at(&self) -> Duration {
        self.start + self.service
    }

    /// Its tokens due at or before `now`, in order.
    fn send_due(&mut self, now: Duration, out: &mut Vec<QueueToken>) {
        while self.sent < self.tokens && self.due(self.sent) <= now {
            out.push(QueueToken {
                id: self.id,
                index: self.sent,
                last: self.sent + 1 == self.tokens,
                prompt_tokens: self.prompt_tokens,
                rng: self.rng,
            });
            self.sent += 1;
        }
    }
}

/// One token the queue sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueToken {
    pub id: u64,
    pub index: u32,
    pub last: bool,
    pub prompt_tokens: u32,
    /// Seeds the token's id.
    pub rng: u64,
}

/// The queue's state: calls waiting, calls in service.
#[derive(Debug, Clone)]
pub struct QueueState {
    model: QueueModel,
    waiting: VecDeque<Waiting>,
    serving: Vec<InService>,
}

impl QueueState {
    pub fn new(model: QueueModel) -> QueueState {
        QueueState {
            model,
            waiting: VecDeque::new(),
            serving: Vec::new(),
        }
    }

    pub fn model(&self) -> &QueueModel {
        &self.model
    }

    /// A call of `tokens` output tokens joins the line (`rng`: its stream).
    pub fn submit(&mut self, id: u64, tokens: u32, prompt_tokens: u32, rng: u64) {
        self.waiting.push_back(Waiting {
            id,
            tokens: tokens.max(1),
            prompt_tokens,
            rng,
        });
    }

    /// Whether `id` is waiting or in service.
    pub fn contains(&self, id: u64) -> bool {
        self.waiting.iter().any(|w| w.id == id) || self.serving.iter().any(|s| s.id == id)
    }

    /// The client is gone: it leaves the line, or frees its slot.
    pub fn abort(&mut self, id: u64) -> bool {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            self.waiting.remove(i);
            return true;
        }
        if let Some(i) = self.serving.iter().position(|s| s.id == id) {
            self.serving.swap_remove(i);
            return true;
        }
        false
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.serving.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.serving.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Everything due at or before `now`: tokens of the calls in service,
    /// slots freed, and calls that start service now (each sending its
    /// first token at once). Instantaneous: the queue has no steps.
    pub fn advance(&mut self, now: Duration, out: &mut Vec<QueueToken>) {
        // Tokens due, and slots whose service has ended.
        for s in &mut self.serving {
            s.send_due(now, out);
        }
        self.serving
            .retain(|s| s.sent < s.tokens || s.slot_free_at() > now);
        // Free slots take the head of the line.
        while self.serving.len() < self.model.slots as usize {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            let base = base_service_s(&self.model.service, w.rng);
            let service_s = self.model.service_s(base, self.serving.len() + 1);
            let mut s = InService {
                id: w.id,
                start: now,
                service: Duration::from_secs_f64(service_s.max(0.0)),
                tokens: w.tokens,
                sent: 0,
                prompt_tokens: w.prompt_tokens,
                rng: w.rng,
            };
            s.send_due(now, out);
            if s.sent < s.tokens || s.slot_free_at() > now {
                self.serving.push(s);
            }
        }
    }

    /// When something is next due (a token, a slot freed), if anything is
    /// in service.
    pub fn next_due(&self) -> Option<Duration> {
        self.serving
            .iter()
            .map(|s| {
                if s.sent < s.tokens {
                    s.due(s.sent)
                } else {
                    s.slot_free_at()
                }
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn deterministic(slots: u32, mean_ms: f64) -> QueueModel {
        QueueModel {
            slots,
            service: Service::Deterministic {
                mean_s: mean_ms / 1000.0,
            },
            cliff: None,
        }
    }

    /// Drives the queue through its own due times and arrivals, returning
    /// each token's (id, index, at).
    fn drive(q: &mut QueueState, arrivals: &[(u64, u64, u32)]) -> Vec<(u64, u32, Duration)> {
        let mut seen = vec![];
        let mut pending: VecDeque<(u64, u64, u32)> = arrivals.iter().copied().collect();
        let mut now = Duration::ZERO;
        loop {
            while let Some(&(at, id, tokens)) = pending.front() {
                if ms(at) > now {
                    break;
                }
                q.submit(id, tokens, 8, id);
                pending.pop_front();
            }
            let mut out = vec![];
            q.advance(now, &mut out);
            seen.extend(out.iter().map(|t| (t.id, t.index, now)));
            let next = [q.next_due(), pending.front().map(|a| ms(a.0))]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) => now = t,
                None => break,
            }
        }
        seen
    }

    #[test]
    fn the_first_token_leaves_at_service_start_and_the_last_at_its_end() {
        let mut q = QueueState::new(deterministic(1, 100.0));
        let seen = drive(&mut q, &[(0, 1, 3), (10, 2, 3)]);
        // Call 1: 0, 50, 100 ms. Call 2 waits until 100 ms, then 150, 200.
        assert_eq!(
            seen,
            vec![
                (1, 0, ms(0)),
                (1, 1, ms(50)),
                (1, 2, ms(100)),
                (2, 0, ms(100)),
                (2, 1, ms(150)),
                (2, 2, ms(200)),
            ]
        );
        assert!(!q.has_work());
    }

    #[test]
    fn one_token_still_holds_its_slot_for_the_whole_service() {
        let mut q = QueueState::new(deterministic(1, 100.0));
        let seen = drive(&mut q, &[(0, 1, 1), (10, 2, 1)]);
        assert_eq!(seen, vec![(1, 0, ms(0)), (2, 0, ms(100))]);
    }

    #[test]
    fn slots_serve_in_parallel_first_come_first_served() {
        let mut q = QueueState::new(deterministic(2, 100.0));
        let seen = drive(&mut q, &[(0, 1, 1), (0, 2, 1), (0, 3, 1), (1, 4, 1)]);
        assert_eq!(
            seen,
            vec![
                (1, 0, ms(0)),
                (2, 0, ms(0)),
                (3, 0, ms(100)),
                (4, 0, ms(100))
            ]
        );
    }

    #[test]
    fn an_abort_frees_the_slot() {
        let mut q = QueueState::new(deterministic(1, 100.0));
        q.submit(1, 2, 8, 1);
        q.submit(2, 2, 8, 2);
        let mut out = vec![];
        q.advance(ms(0), &mut out);
        assert_eq!(out.len(), 1);
        assert!(q.abort(1));
        out.clear();
        q.advance(ms(20), &mut out);
        assert_eq!(out[0].id, 2);
        assert!(!q.abort(7));
    }

    #[test]
    fn the_cliff_slows_calls_beyond_its_threshold() {
        let model = QueueModel {
            slots: 4,
            service: Service::Deterministic { mean_s: 0.1 },
            cliff: Some(Cliff {
                above: 2,
                slowdown: 3.0,
            }),
        };
        let mut q = QueueState::new(model);
        let seen = drive(&mut q, &[(0, 1, 2), (0, 2, 2), (0, 3, 2)]);
        // The third in service at once takes 300 ms.
        let last = |id| seen.iter().filter(|t| t.0 == id).map(|t| t.2).max();
        assert_eq!(last(1), Some(ms(100)));
        assert_eq!(last(3), Some(ms(300)));
    }

    #[test]
    fn draws_have_the_stated_means() {
        let n = 200_000u64;
        for service in [
            Service::Exponential { mean_s: 0.2 },
            Service::Lognormal {
                mean_s: 0.2,
                sigma: 1.0,
            },
            Service::TwoPoint {
                short_s: 0.1,
                long_s: 1.0,
                long_share: 0.1,
            },
        ] {
            let mean = (0..n)
                .map(|i| base_service_s(&service, mix(3, i)))
                .sum::<f64>()
                / n as f64;
            assert!(
                (mean - service.mean_s()).abs() / service.mean_s() < 0.02,
                "{service:?}: {mean}"
            );
        }
        // The lognormal's median is mean·exp(−σ²/2).
        let service = Service::Lognormal {
            mean_s: 0.2,
            sigma: 1.0,
        };
        let mut draws: Vec<f64> = (0..n)
            .map(|i| base_service_s(&service, mix(5, i)))
            .collect();
        draws.sort_by(f64::total_cmp);
        let median = draws[draws.len() / 2];
        assert!((median - 0.2 * (-0.5f64).exp()).abs() < 0.004, "{median}");
    }
}
