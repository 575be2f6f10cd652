//! The reference Cr_open of a `sim queue` (pure): where an SLO on the
//! queue stops holding, found without capcard's search or fit, so the
//! audit (`capcard audit`) can say how often those hold it.
//!
//! Two ways, and the audit says which it used:
//! - **Closed form** (Erlang C), for exponential service with no cliff, no
//!   timeout and one TTFT percentile clause: `P(W > t) = C(c, a)·e^{−(cμ−λ)t}`,
//!   solved for λ by bisection to machine precision.
//! - **A long run** of the same queue for everything else (other service
//!   distributions, a cliff, E2E and mean clauses, several clauses, errors
//!   from a timeout): Poisson arrivals simulated for many calls at each
//!   rate, every clause read off the whole run, and λ found by bisection
//!   with common random numbers (the same uniforms at every rate, gaps
//!   scaled by 1/λ), so the clause is monotone in λ and bisection
//!   converges. Its own precision is stated: the batch-means standard
//!   error of the binding clause at the answer, turned into a rate through
//!   the local slope.
//!
//! The queue is the one [`super::queue`] serves: FIFO over `slots`, the
//! first token at service start (TTFT = the wait), the last at its end
//! (E2E = wait + service, or the wait alone for a one-token answer). A
//! call not answered within the timeout leaves: it never takes a slot if
//! it is still waiting, and frees its slot then if it is in service, as the
//! client's abort does; it counts beyond every bound and as an error.

use super::queue::{QueueModel, Service, base_service_s, unit};
use crate::hash::mix;

/// What a clause reads from each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    E2e,
}

/// One SLO clause as the reference judges it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clause {
    /// At most `allowed` of the calls beyond `bound_s` (a percentile
    /// q: `allowed = 1 − q`).
    Beyond {
        metric: Metric,
        bound_s: f64,
        allowed: f64,
    },
    /// The mean at most `bound_s` (a failed call counts at the timeout).
    Mean { metric: Metric, bound_s: f64 },
    /// At most `allowed` of the calls fail (time out).
    Errors { allowed: f64 },
}

/// The queue and its client, as the reference needs them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    pub model: QueueModel,
    /// Every call answers a single token (E2E is then the wait).
    pub single_token: bool,
    /// The client's timeout, s.
    pub timeout_s: Option<f64>,
}

/// How a reference was found.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// The largest rate at which every clause holds, calls/s.
    pub rate_per_s: f64,
    /// `"Erlang C (closed form)"` or `"a long run of N calls per rate"`.
    pub method: String,
    /// The reference's own relative standard error (0 for a closed form).
    pub relative_error: f64,
    /// The index of the clause that binds.
    pub binding: usize,
}

/// Probability that an arrival waits, for `c` servers at offered load `a`
/// (Erlangs; 1 at or beyond `c`).
pub fn erlang_c(c: u32, a: f64) -> f64 {
    if a >= f64::from(c) {
        return 1.0;
    }
    let (mut term, mut below) = (1.0, 0.0);
    for k in 0..c {
        if k > 0 {
            term *= a / f64::from(k);
        }
        below += term;
    }
    let top = term * a / f64::from(c) * f64::from(c) / (f64::from(c) - a);
    top / (below + top)
}

/// `P(W > t)` of M/M/c at `rate` (service rate `mu` per slot), `t` in s.
pub fn p_wait_exceeds(rate: f64, c: u32, mu: f64, t_s: f64) -> f64 {
    if rate >= f64::from(c) * mu {
        return 1.0;
    }
    erlang_c(c, rate / mu) * (-(f64::from(c) * mu - rate) * t_s).exp()
}

/// The largest rate of M/M/c at which `P(W > t) ≤ allowed`.
pub fn erlang_c_max_rate(c: u32, mu: f64, t_s: f64, allowed: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, f64::from(c) * mu);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if p_wait_exceeds(mid, c, mu, t_s) <= allowed {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The reference Cr_open of `clauses` on `setup`: closed form when there
/// is one, else a long run of `calls` calls per rate from `seed`.
pub fn reference(setup: &Setup, clauses: &[Clause], calls: u64, seed: u64) -> Option<Reference> {
    if clauses.is_empty() {
        return None;
    }
    if let (
        Service::Exponential { mean_s },
        None,
        None,
        [
            Clause::Beyond {
                metric: Metric::Ttft,
                bound_s,
                allowed,
            },
        ],
    ) = (
        setup.model.service,
        setup.model.cliff,
        setup.timeout_s,
        clauses,
    ) {
        return Some(Reference {
            rate_per_s: erlang_c_max_rate(setup.model.slots, 1.0 / mean_s, *bound_s, *allowed),
            method: "Erlang C (closed form)".to_string(),
            relative_error: 0.0,
            binding: 0,
        });
    }
    let draws = Draws::new(setup, calls, seed);
    let capacity = setup.model.capacity_per_s();
    let mut best: Option<(usize, f64)> = None;
    for (i, clause) in clauses.iter().enumerate() {
        let over = |rate: f64| {
            let run = draws.run(setup, rate);
            run.excess(clause)
        };
        // Bisection on the rate: the clause holds at lo, not at hi.
        let (mut lo, mut hi) = (capacity * 1e-4, capacity * 1.5);
        if over(lo) > 0.0 {
            best = Some((i, 0.0));
            continue;
        }
        for _ in 0..40 {
            let mid = (lo * hi).sqrt();
            if over(mid) > 0.0 {
                hi = mid;
            } else {
                lo = mid;
            }
            if hi / lo - 1.0 < 1e-5 {
                break;
            }
        }
        if best.is_none_or(|(_, r)| lo < r) {
            best = Some((i, lo));
        }
    }
    let (binding, rate) = best?;
    let relative_error = draws.relative_error(setup, &clauses[binding], rate);
    Some(Reference {
        rate_per_s: rate,
        method: format!(
            "a long run of {} calls per rate",
            crate::format::significant(calls as f64)
        ),
        relative_error,
        binding,
    })
}

/// The uniforms of a long run, drawn once and reused at every rate.
struct Draws {
    /// Exp(1) gaps between arrivals (scaled by 1/λ).
    gaps: Vec<f64>,
    /// Each call's base service, s.
    service_s: Vec<f64>,
}

/// What a long run showed: per call TTFT and E2E (s), or a failure.
struct Run {
    ttft_s: Vec<f64>,
    e2e_s: Vec<f64>,
    failed: Vec<bool>,
    /// The calls before this index are the warmup.
    warmup: usize,
}

impl Draws {
    fn new(setup: &Setup, calls: u64, seed: u64) -> Draws {
        let gaps = (0..calls).map(|i| -unit(seed, 2 * i).ln()).collect();
        let service_s = (0..calls)
            .map(|i| base_service_s(&setup.model.service, mix(seed, 2 * i + 1)))
            .collect();
        Draws { gaps, service_s }
    }

    fn run(&self, setup: &Setup, rate: f64) -> Run {
        let slots = setup.model.slots as usize;
        let mut free = vec![0.0f64; slots];
        let n = self.gaps.len();
        let (mut ttft_s, mut e2e_s, mut failed) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let timeout = setup.timeout_s.unwrap_or(f64::INFINITY);
        let mut t = 0.0;
        for i in 0..n {
            t += self.gaps[i] / rate;
            // FIFO over identical slots: the call takes the first to free.
            let (slot, &first_free) = free
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .unwrap_or((0, &0.0));
            let start = t.max(first_free);
            if start - t >= timeout {
                // Still waiting at the timeout: it leaves the line.
                ttft_s.push(timeout);
                e2e_s.push(timeout);
                failed.push(true);
                continue;
            }
            let in_service = free.iter().filter(|&&f| f > start).count() + 1;
            let service = setup.model.service_s(self.service_s[i], in_service);
            let end = start + service;
            let answered = if setup.single_token { start } else { end };
            if answered - t > timeout {
                free[slot] = t + timeout;
                ttft_s.push(start - t);
                e2e_s.push(timeout);
                failed.push(true);
            } else {
                free[slot] = end;
                ttft_s.push(start - t);
                e2e_s.push(answered - t);
                failed.push(false);
            }
        }
        Run {
            ttft_s,
            e2e_s,
            failed,
            warmup: n / 20,
        }
    }

    /// The relative standard error of the rate where `clause` crosses at
    /// `rate`: the batch-means error of the clause's value there, over the
    /// local change of that value with the rate.
    fn relative_error(&self, setup: &Setup, clause: &Clause, rate: f64) -> f64 {
        let run = self.run(setup, rate);
        let se = run.batch_error(clause);
        let step = 0.01;
        let (below, above) = (
            self.run(setup, rate * (1.0 - step)).value(clause),
            self.run(setup, rate * (1.0 + step)).value(clause),
        );
        let slope = (above - below) / (2.0 * step);
        if slope > 0.0 { se / slope } else { f64::NAN }
    }
}

impl Run {
    fn series(&self, metric: Metric) -> &[f64] {
        match metric {
            Metric::Ttft => &self.ttft_s,
            Metric::E2e => &self.e2e_s,
        }
    }

    /// Each measured call's contribution to the clause's value.
    fn contributions(&self, clause: &Clause) -> Vec<f64> {
        let range = self.warmup..self.failed.len();
        match *clause {
            Clause::Beyond {
                metric, bound_s, ..
            } => {
                let s = self.series(metric);
                range
                    .map(|i| f64::from(u8::from(self.failed[i] || s[i] > bound_s)))
                    .collect()
            }
            Clause::Mean { metric, .. } => {
                let s = self.series(metric);
                range.map(|i| s[i]).collect()
            }
            Clause::Errors { .. } => range.map(|i| f64::from(u8::from(self.failed[i]))).collect(),
        }
    }

    /// The clause's value: the fraction beyond, the mean, the error rate.
    fn value(&self, clause: &Clause) -> f64 {
        let c = self.contributions(clause);
        c.iter().sum::<f64>() / c.len().max(1) as f64
    }

    /// How far beyond what the clause allows (> 0: it fails).
    fn excess(&self, clause: &Clause) -> f64 {
        let v = self.value(clause);
        match *clause {
            Clause::Beyond { allowed, .. } | Clause::Errors { allowed } => v - allowed,
            Clause::Mean { bound_s, .. } => v - bound_s,
        }
    }

    /// The batch-means standard error of the value (100 batches).
    fn batch_error(&self, clause: &Clause) -> f64 {
        let c = self.contributions(clause);
        let batches = 100;
        let size = c.len() / batches;
        if size == 0 {
            return f64::NAN;
        }
        let means: Vec<f64> = c
            .chunks(size)
            .take(batches)
            .map(|b| b.iter().sum::<f64>() / b.len() as f64)
            .collect();
        let mean = means.iter().sum::<f64>() / means.len() as f64;
        let var = means.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (means.len() - 1) as f64;
        (var / means.len() as f64).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::queue::Cliff;

    fn mm(slots: u32, mean_s: f64) -> Setup {
        Setup {
            model: QueueModel {
                slots,
                service: Service::Exponential { mean_s },
                cliff: None,
            },
            single_token: false,
            timeout_s: None,
        }
    }

    #[test]
    fn erlang_c_matches_known_values() {
        assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        // docs/erlang-c.md's number.
        assert!((erlang_c_max_rate(4, 2.5, 0.25, 0.1) - 5.9221).abs() < 1e-4);
    }

    #[test]
    fn a_long_run_agrees_with_erlang_c() {
        // The same M/M/4 p90 as a long run (an E2E clause forces the long
        // run; here its bound is far, so the TTFT clause binds).
        let setup = mm(4, 0.1);
        let ttft = Clause::Beyond {
            metric: Metric::Ttft,
            bound_s: 0.0625,
            allowed: 0.1,
        };
        let far = Clause::Beyond {
            metric: Metric::E2e,
            bound_s: 100.0,
            allowed: 0.1,
        };
        let closed = reference(&setup, &[ttft], 0, 1).unwrap();
        assert_eq!(closed.method, "Erlang C (closed form)");
        let long = reference(&setup, &[ttft, far], 2_000_000, 1).unwrap();
        assert_eq!(long.binding, 0);
        let off = (long.rate_per_s - closed.rate_per_s).abs() / closed.rate_per_s;
        assert!(off < 0.01, "{long:?} vs {closed:?}");
        assert!(
            long.relative_error > 0.0 && long.relative_error < 0.01,
            "{long:?}"
        );
    }

    #[test]
    fn the_smallest_crossing_binds_and_a_cliff_lowers_it() {
        let mut setup = mm(8, 0.1);
        let ttft = Clause::Beyond {
            metric: Metric::Ttft,
            bound_s: 0.05,
            allowed: 0.5,
        };
        let mean_e2e = Clause::Mean {
            metric: Metric::E2e,
            bound_s: 0.11,
        };
        let r = reference(&setup, &[ttft, mean_e2e], 400_000, 3).unwrap();
        assert_eq!(r.binding, 1, "{r:?}");
        let smooth = reference(&setup, &[ttft], 400_000, 3).unwrap();
        setup.model.cliff = Some(Cliff {
            above: 4,
            slowdown: 3.0,
        });
        let cliff = reference(&setup, &[ttft], 400_000, 3).unwrap();
        assert!(
            cliff.rate_per_s < smooth.rate_per_s * 0.9,
            "{cliff:?} {smooth:?}"
        );
    }

    #[test]
    fn a_timeout_makes_errors_that_an_error_clause_bounds() {
        let mut setup = mm(2, 0.1);
        setup.timeout_s = Some(0.3);
        let errors = Clause::Errors { allowed: 0.01 };
        let r = reference(&setup, &[errors], 400_000, 5).unwrap();
        // Errors need E2E > 0.3 s: service alone exceeds it 5% of the time
        // (e^-3), so 1% is never met.
        assert!(r.rate_per_s < 0.01 * setup.model.capacity_per_s(), "{r:?}");
        setup.timeout_s = Some(1.0);
        let r = reference(&setup, &[errors], 400_000, 5).unwrap();
        assert!(r.rate_per_s > 5.0 && r.rate_per_s < 20.0, "{r:?}");
    }
}
