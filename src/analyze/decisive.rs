//! The watch that ends a search's open run early once it is decisively
//! beyond every SLO of its card (pure: it is told each record as it
//! completes and answers whether to stop; the runners act on it). The test
//! and why it keeps its level are in [`crate::stats::sequential`].
//!
//! The counts are the verdicts' own ([`SloEvidence`]): a failed call is
//! beyond every latency bound, ITL counts every gap, task E2E counts tasks
//! once any task has ended. Mean clauses are never decided early (the
//! batch means of a few batches say too little); an SLO whose clauses are
//! all means is never decisive, so its runs run their course.

use crate::config::{LatencyMetric, Slo, SloClause, Stat};
use crate::exec::record::{DecisiveClause, DecisiveStop, ErrorClass, JournalLine, RunWatch};
use crate::stats::interval::{BATCHES, BatchCounts, batch_of};
use crate::stats::sequential::{alpha_per_look, decisively_beyond, looks_passed};

use super::slo::{SloEvidence, clause_label};

/// The share of a run's error an early stop may spend, as a fraction of the
/// error the card's Cr_open range allows (`1 − confidence`): a run placed
/// at the crossing is stopped by mistake at most this often, and every
/// run of a search further from it far less.
pub const ALPHA_SHARE: f64 = 0.1;

/// The chance, at most, that a run within its SLOs is stopped early, for a
/// Cr_open range at `confidence`: 1% at 90%.
pub fn alpha_for(confidence: f64) -> f64 {
    ((1.0 - confidence) * ALPHA_SHARE).clamp(1e-6, 0.05)
}

/// One run's watch over the SLOs of its card.
#[derive(Debug)]
pub struct SloWatch {
    /// Per SLO, its counts in the window's batches, and in slices half a
    /// batch wide over the window's first half (for the early looks'
    /// inflation, [`decisively_beyond`]).
    slos: Vec<(Slo, SloEvidence, SloEvidence)>,
    from_ms: f64,
    to_ms: f64,
    alpha: f64,
    alpha_per_look: f64,
    looks_done: usize,
    has_tasks: bool,
    /// Open-loop arrivals per batch, and per finer slice of the first half.
    arrivals: BatchCounts,
    finer_arrivals: BatchCounts,
    /// A call after a task's first was seen: arrivals are tasks, not
    /// calls, and say nothing of the calls still waiting.
    multi_call: bool,
}

impl SloWatch {
    /// A watch over `slos` for a window `[from_ms, to_ms)` (ms since t0),
    /// stopping a run within them at most `alpha` of the time. `None` when
    /// no SLO has a count clause, or the window is empty.
    pub fn new(slos: &[Slo], from_ms: f64, to_ms: f64, alpha: f64) -> Option<Self> {
        let counted = |s: &Slo| s.clauses.iter().filter(|c| allowed(c).is_some()).count();
        if slos.is_empty() || slos.iter().any(|s| counted(s) == 0) || to_ms <= from_ms {
            return None;
        }
        let clauses = slos.iter().map(counted).sum();
        Some(SloWatch {
            slos: slos
                .iter()
                .map(|s| {
                    (
                        s.clone(),
                        SloEvidence::new(s, &[]),
                        SloEvidence::new(s, &[]),
                    )
                })
                .collect(),
            from_ms,
            to_ms,
            alpha,
            alpha_per_look: alpha_per_look(alpha, clauses),
            looks_done: 0,
            has_tasks: false,
            arrivals: BatchCounts::default(),
            finer_arrivals: BatchCounts::default(),
            multi_call: false,
        })
    }

    fn in_window(&self, scheduled_ms: f64) -> bool {
        scheduled_ms >= self.from_ms && scheduled_ms < self.to_ms
    }

    fn half_ms(&self) -> f64 {
        self.from_ms + (self.to_ms - self.from_ms) / 2.0
    }

    /// The batch and, in the window's first half, the finer slice of an
    /// instant.
    fn slices(&self, scheduled_ms: f64) -> (usize, Option<usize>) {
        let half = self.half_ms();
        (
            batch_of(scheduled_ms, self.from_ms, self.to_ms),
            (scheduled_ms < half).then(|| batch_of(scheduled_ms, self.from_ms, half)),
        )
    }

    /// The look due at `now_ms`, if one is: per SLO, its first count clause
    /// decisively beyond; `Some` only when every SLO has one.
    fn look(&mut self, now_ms: f64) -> Option<DecisiveStop> {
        let passed = looks_passed(now_ms - self.from_ms, self.to_ms - self.from_ms);
        if passed <= self.looks_done {
            return None;
        }
        self.looks_done = passed;
        // The finer slices cover the first half: a look up to there.
        let finer_holds = now_ms <= self.half_ms();
        let width_ms = (self.to_ms - self.from_ms) / BATCHES as f64;
        let mut clauses = Vec::with_capacity(self.slos.len());
        for (slo, evidence, finer) in &self.slos {
            let decided = slo.clauses.iter().enumerate().find_map(|(i, clause)| {
                let allowed = allowed(clause)?;
                let counts = evidence.beyond_counts(slo, i, self.has_tasks)?;
                let finer = finer
                    .beyond_counts(slo, i, self.has_tasks)
                    .filter(|_| finer_holds);
                // An E2E bound `b`: every call sent more than `b` ago has
                // either completed or is beyond it, still waiting.
                let waited = e2e_bound_ms(clause)
                    .filter(|_| !self.multi_call)
                    .map(|bound_ms| {
                        let horizon_ms = now_ms - bound_ms;
                        let closed = |from_ms: f64, width_ms: f64| {
                            ((horizon_ms - from_ms) / width_ms).floor().max(0.0) as usize
                        };
                        (
                            with_waiting(counts, &self.arrivals, closed(self.from_ms, width_ms)),
                            finer.map(|f| {
                                with_waiting(
                                    f,
                                    &self.finer_arrivals,
                                    closed(self.from_ms, width_ms / 2.0),
                                )
                            }),
                        )
                    })
                    .filter(|(closed, _)| closed.total() > 0);
                let beyond = match &waited {
                    Some((closed, finer)) => {
                        decisively_beyond(closed, finer.as_ref(), allowed, self.alpha_per_look)
                    }
                    None => decisively_beyond(counts, finer, allowed, self.alpha_per_look),
                }?;
                Some(DecisiveClause {
                    slo: slo.name.clone(),
                    clause: clause_label(clause),
                    samples: beyond.samples,
                    beyond: beyond.beyond,
                    allowed,
                    inflation: beyond.inflation,
                    p_bound: beyond.p_bound,
                })
            })?;
            clauses.push(decided);
        }
        Some(DecisiveStop {
            at_ms: now_ms,
            alpha: self.alpha,
            clauses,
        })
    }
}

/// The bound of a percentile clause on a call's or a task's E2E, in ms.
fn e2e_bound_ms(clause: &SloClause) -> Option<f64> {
    match clause {
        SloClause::Latency {
            metric: LatencyMetric::E2e | LatencyMetric::TaskE2e,
            stat: Stat::Percentile(_),
            limit,
        } => Some(limit.as_secs_f64() * 1e3),
        _ => None,
    }
}

/// The first `closed` batches of `counts`, each call that arrived in them
/// and has not completed counted beyond the bound: its wait already is.
fn with_waiting(counts: &BatchCounts, arrivals: &BatchCounts, closed: usize) -> BatchCounts {
    let mut out = BatchCounts::default();
    for j in 0..closed.min(BATCHES) {
        let waiting = arrivals.samples[j].saturating_sub(counts.samples[j]);
        out.samples[j] = counts.samples[j] + waiting;
        out.hits[j] = counts.hits[j] + waiting;
    }
    out
}

/// The fraction a count clause allows beyond its bound; `None` for a mean.
fn allowed(clause: &SloClause) -> Option<f64> {
    match clause {
        SloClause::Latency {
            stat: Stat::Percentile(p),
            ..
        } => Some(1.0 - p / 100.0),
        SloClause::Latency {
            stat: Stat::Mean, ..
        } => None,
        SloClause::ErrorRate { max } => Some(max.0),
    }
}

impl RunWatch for SloWatch {
    fn observe(&mut self, line: &JournalLine, now_ms: f64) -> Option<DecisiveStop> {
        match line {
            JournalLine::Request(r) => {
                self.multi_call |= r.call > 0;
                if r.error == Some(ErrorClass::Cancelled) || !self.in_window(r.scheduled_ms) {
                    return None;
                }
                let (batch, slice) = self.slices(r.scheduled_ms);
                for (_, evidence, finer) in &mut self.slos {
                    evidence.call(r, batch);
                    if let Some(slice) = slice {
                        finer.call(r, slice);
                    }
                }
            }
            JournalLine::Task(t) => {
                self.has_tasks = true;
                self.multi_call = true;
                if !self.in_window(t.scheduled_ms) {
                    return None;
                }
                let (batch, slice) = self.slices(t.scheduled_ms);
                for (_, evidence, finer) in &mut self.slos {
                    evidence.task(t, batch);
                    if let Some(slice) = slice {
                        finer.task(t, slice);
                    }
                }
            }
            _ => return None,
        }
        self.look(now_ms)
    }

    fn arrived(&mut self, scheduled_ms: f64, now_ms: f64) -> Option<DecisiveStop> {
        if self.in_window(scheduled_ms) {
            let (batch, slice) = self.slices(scheduled_ms);
            self.arrivals.push(batch, false);
            if let Some(slice) = slice {
                self.finer_arrivals.push(slice, false);
            }
        }
        self.look(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::analyze::summary::tests::{call, failed};
    use crate::config::{Fraction, LatencyMetric};

    fn p90(limit_ms: u64) -> SloClause {
        SloClause::Latency {
            metric: LatencyMetric::Ttft,
            stat: Stat::Percentile(90.0),
            limit: Duration::from_millis(limit_ms),
        }
    }

    fn slo(name: &str, clauses: Vec<SloClause>) -> Slo {
        Slo {
            name: name.into(),
            span: None,
            clauses,
        }
    }

    /// Calls every 10 ms over a 10 s window from 1 s, each completing 5 ms
    /// after it was sent, with TTFT `ttft(i)`; the stop, if any.
    fn drive(watch: &mut SloWatch, ttft: impl Fn(u64) -> f64) -> Option<DecisiveStop> {
        for i in 0..1000u64 {
            let scheduled = 1000.0 + i as f64 * 10.0;
            let record = call(i, scheduled, ttft(i), 4, 5.0);
            if let Some(stop) = watch.observe(&JournalLine::Request(record), scheduled + 5.0) {
                return Some(stop);
            }
        }
        None
    }

    #[test]
    fn a_run_far_beyond_stops_at_the_first_look_and_says_why() {
        let slos = [slo("s", vec![p90(100)])];
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        // Half the calls at 500 ms against a p90 bound of 100 ms.
        let stop = drive(&mut watch, |i| if i % 2 == 0 { 500.0 } else { 20.0 }).expect("stopped");
        // The first look is at the end of batch 3 of 20: 1.5 s into 10 s.
        assert!((2500.0..2600.0).contains(&stop.at_ms), "{stop:?}");
        let c = &stop.clauses[0];
        assert_eq!(c.clause, "ttft p90 ≤ 100ms");
        assert!((c.allowed - 0.1).abs() < 1e-12);
        assert!(
            c.beyond * 2 >= c.samples - 1 && c.p_bound < 0.01 / 6.0,
            "{c:?}"
        );
    }

    #[test]
    fn a_run_within_or_near_its_slo_runs_its_course() {
        let slos = [slo("s", vec![p90(100)])];
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        // 12% beyond against 10% allowed: beyond, but not decisively.
        assert_eq!(
            drive(&mut watch, |i| if i % 25 < 3 { 500.0 } else { 20.0 }),
            None
        );
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        assert_eq!(drive(&mut watch, |_| 20.0), None);
    }

    #[test]
    fn calls_still_waiting_past_an_e2e_bound_count_beyond_it() {
        // Far beyond capacity nothing completes: only arrivals are told.
        // Every call sent over 1 s ago and still waiting is beyond an E2E
        // p90 bound of 1 s, and the run is decisively beyond.
        let e2e = SloClause::Latency {
            metric: LatencyMetric::E2e,
            stat: Stat::Percentile(90.0),
            limit: Duration::from_secs(1),
        };
        let slos = [slo("s", vec![e2e])];
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        let stop = (0..1000u64)
            .find_map(|i| {
                let at = 1000.0 + i as f64 * 10.0;
                watch.arrived(at, at)
            })
            .expect("stopped");
        let c = &stop.clauses[0];
        assert_eq!(c.beyond, c.samples, "{c:?}");
        // Only calls sent a full second before the look count.
        assert!(
            stop.at_ms >= 2500.0 && c.samples as f64 <= (stop.at_ms - 2000.0) / 10.0 + 1.0,
            "{stop:?}"
        );
        // A TTFT bound says nothing of a call still waiting.
        let slos = [slo("s", vec![p90(100)])];
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        assert!((0..1000u64).all(|i| {
            let at = 1000.0 + i as f64 * 10.0;
            watch.arrived(at, at).is_none()
        }));
    }

    #[test]
    fn every_slo_of_the_card_must_be_decided() {
        // One SLO far beyond, the other within: the run is kept whole, as
        // the second SLO's fit needs it.
        let slos = [slo("tight", vec![p90(100)]), slo("loose", vec![p90(1000)])];
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        assert_eq!(drive(&mut watch, |_| 500.0), None);
        let slos = [slo("tight", vec![p90(100)]), slo("also", vec![p90(200)])];
        let mut watch = SloWatch::new(&slos, 1000.0, 11_000.0, 0.01).expect("a watch");
        let stop = drive(&mut watch, |_| 500.0).expect("stopped");
        assert_eq!(stop.clauses.len(), 2);
    }

    #[test]
    fn failed_calls_count_beyond_and_means_never_decide() {
        let errors = [slo(
            "s",
            vec![SloClause::ErrorRate {
                max: Fraction(0.01),
            }],
        )];
        let mut watch = SloWatch::new(&errors, 1000.0, 11_000.0, 0.01).expect("a watch");
        let mut stop = None;
        for i in 0..1000u64 {
            let at = 1000.0 + i as f64 * 10.0;
            let record = if i % 3 == 0 {
                failed(i, at, crate::exec::record::ErrorClass::Overloaded)
            } else {
                call(i, at, 10.0, 4, 5.0)
            };
            stop = watch.observe(&JournalLine::Request(record), at + 5.0);
            if stop.is_some() {
                break;
            }
        }
        assert!(stop.is_some());
        let mean_only = [slo(
            "m",
            vec![SloClause::Latency {
                metric: LatencyMetric::Ttft,
                stat: Stat::Mean,
                limit: Duration::from_millis(10),
            }],
        )];
        assert!(SloWatch::new(&mean_only, 1000.0, 11_000.0, 0.01).is_none());
        assert!(SloWatch::new(&errors, 1000.0, 1000.0, 0.01).is_none());
        assert!((alpha_for(0.9) - 0.01).abs() < 1e-12);
    }
}
