//! Does Cr_open hold the truth? The search and the fit, run against M/M/c
//! queues in virtual time over many seeds, against Erlang C's answer.
//!
//! Each shape is a queue and one TTFT percentile bound (TTFT = the wait for
//! a slot, as on `examples/erlang_c`). Every run the search asks for is
//! simulated from an empty queue: a warmup, then a measured window whose
//! arrivals are cut into the 20 batches a real run's window is, counted
//! beyond the bound, and turned into the run's evidence by capcard's own
//! code (`crossing::count_observation`); a run that does not keep pace is
//! censored as `capcard run` would flag it overloaded. `Search` picks the
//! rates within the shape's budget and `Search::fit` gives the estimate and
//! its 90% range. Each run is told, call by call as they complete, to the
//! watch `capcard run` gives a search's runs, which ends a run decisively
//! beyond the SLO early (it is then censored). Over 100 seeds a shape, the
//! test asks:
//! - the estimate within ±5% of Erlang C in at least 90 seeds;
//! - the range holding the truth in at least 85 (it states 90%).
//!
//! `cargo test --release --test it cr_open_coverage_table -- --ignored
//! --nocapture` prints the table of BENCHMARKS.md over 400 seeds a shape.

use std::time::Duration;

use capcard::analyze::cr_open::{ClauseObservation, RunEvidence, Slices, SloFit, SloObservations};
use capcard::analyze::decisive::{SloWatch, alpha_for};
use capcard::analyze::search::Search;
use capcard::analyze::summary::completions_keep_pace;
use capcard::config::{LatencyMetric, Slo, SloClause};
use capcard::exec::record::{JournalLine, RunWatch};
use capcard::stats::Stat;
use capcard::stats::crossing::{self, Bound};
use capcard::stats::interval::{BatchCounts, batch_of};

use crate::mmc::{Call, SplitMix64, erlang_c_max_rate, simulate};
use crate::support::{build, drive_search_with_costs};

/// A queue, a bound, and the search's settings.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    pub slots: usize,
    pub service_ms: f64,
    pub bound_ms: f64,
    /// The percentile, as a fraction (0.9 for p90).
    pub q: f64,
    pub warmup_s: f64,
    pub window_s: f64,
    pub budget_s: f64,
    pub precision: f64,
}

impl Shape {
    fn mu(&self) -> f64 {
        1000.0 / self.service_ms
    }

    /// Erlang C's Cr_open.
    pub fn truth(&self) -> f64 {
        erlang_c_max_rate(self.slots, self.mu(), self.bound_ms / 1000.0, self.q)
    }

    /// The capacity cμ; the search looks between cμ/20 and 2cμ, from 0.8cμ
    /// (where a closed sweep's Little's-law estimate lands).
    fn capacity(&self) -> f64 {
        self.slots as f64 * self.mu()
    }
}

/// The three shapes of the coverage test: one server at its median, four at
/// p90 (the shape of CR_OPEN_NOTES.md) and sixteen at p99.
pub const SHAPES: [Shape; 3] = [
    Shape {
        name: "M/M/1, 100 ms, TTFT p50 ≤ 50 ms",
        slots: 1,
        service_ms: 100.0,
        bound_ms: 50.0,
        q: 0.5,
        warmup_s: 10.0,
        window_s: 60.0,
        budget_s: 1400.0,
        precision: 0.05,
    },
    Shape {
        name: "M/M/4, 100 ms, TTFT p90 ≤ 62.5 ms",
        slots: 4,
        service_ms: 100.0,
        bound_ms: 62.5,
        q: 0.9,
        warmup_s: 5.0,
        window_s: 30.0,
        budget_s: 600.0,
        precision: 0.05,
    },
    Shape {
        name: "M/M/16, 100 ms, TTFT p99 ≤ 50 ms",
        slots: 16,
        service_ms: 100.0,
        bound_ms: 50.0,
        q: 0.99,
        warmup_s: 5.0,
        window_s: 60.0,
        budget_s: 900.0,
        precision: 0.05,
    },
];

/// One simulated run at `rate` (its `visit`-th at that rate): the evidence
/// `capcard run` would keep, how many calls it measured, and what it cost
/// (s). With `early_stop`, the run's calls are told, in the order they
/// complete, to the watch `capcard run` gives a search's runs
/// (`analyze::decisive::SloWatch`); a run it stops ends its window there,
/// is censored, and costs that much less.
fn run(
    shape: &Shape,
    rate: f64,
    seed: u64,
    visit: u64,
    early_stop: bool,
) -> (RunEvidence, u64, f64) {
    let mut rng = SplitMix64(
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
            ^ rate.to_bits().rotate_left(17)
            ^ visit.wrapping_mul(0x9E37),
    );
    let (from_ms, planned_to_ms) = (
        shape.warmup_s * 1000.0,
        (shape.warmup_s + shape.window_s) * 1000.0,
    );
    let calls = simulate(shape.slots, shape.service_ms, rate, planned_to_ms, &mut rng);
    let decided_at_ms = if early_stop {
        decided_at(shape, &calls, from_ms, planned_to_ms)
    } else {
        None
    };
    let to_ms = decided_at_ms.unwrap_or(planned_to_ms);
    let window_s = (to_ms - from_ms) / 1000.0;
    let mut counts = BatchCounts::default();
    let mut completed = 0.0;
    for call in calls
        .iter()
        .filter(|c| c.arrival_ms >= from_ms && c.arrival_ms < to_ms)
    {
        counts.push(
            batch_of(call.arrival_ms, from_ms, to_ms),
            call.wait_ms > shape.bound_ms,
        );
        if call.arrival_ms + call.wait_ms + call.service_ms <= to_ms {
            completed += 1.0;
        }
    }
    let offered = counts.total();
    let censored = if decided_at_ms.is_some() {
        Some("decided early".to_string())
    } else {
        (!completions_keep_pace(offered, completed, None)).then(|| "overloaded".to_string())
    };
    let evidence = RunEvidence {
        run_id: format!("r{rate}-v{visit}"),
        rate_rps: rate,
        realized_rps: offered as f64 / window_s,
        censored,
        slos: vec![SloObservations {
            slo: "s".to_string(),
            clauses: vec![ClauseObservation {
                label: "ttft".to_string(),
                bound: Bound::Fraction(1.0 - shape.q),
                observation: crossing::count_observation(&counts.samples, &counts.hits),
                slices: Some(Slices {
                    samples: counts.samples.to_vec(),
                    values: counts.hits.iter().map(|&h| h as f64).collect(),
                }),
            }],
        }],
    };
    let cost_s = shape.warmup_s + window_s;
    (evidence, offered, cost_s)
}

/// When the search's watch would stop this run: its calls told in the
/// order they complete (TTFT is the wait; the record completes after its
/// service), each at its completion instant.
fn decided_at(shape: &Shape, calls: &[Call], from_ms: f64, to_ms: f64) -> Option<f64> {
    let slo = Slo {
        name: "s".to_string(),
        span: None,
        clauses: vec![SloClause::Latency {
            metric: LatencyMetric::Ttft,
            stat: Stat::Percentile(shape.q * 100.0),
            limit: Duration::from_secs_f64(shape.bound_ms / 1000.0),
        }],
    };
    let mut watch = SloWatch::new(&[slo], from_ms, to_ms, alpha_for(0.9))?;
    let mut by_completion: Vec<(f64, usize)> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.arrival_ms + c.wait_ms + c.service_ms, i))
        .collect();
    by_completion.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (done_ms, i) in by_completion {
        if done_ms >= to_ms {
            break;
        }
        let c = &calls[i];
        let record = build::record(i as u64, c.arrival_ms, c.wait_ms, c.service_ms);
        if let Some(stop) = watch.observe(&JournalLine::Request(record), done_ms) {
            return Some(stop.at_ms);
        }
    }
    None
}

/// One whole search: the fit at its end, the seconds and calls it spent.
pub fn search(shape: &Shape, seed: u64, early_stop: bool) -> (SloFit, f64, u64) {
    let capacity = shape.capacity();
    let mut search = Search::new(
        capacity / 20.0,
        capacity * 2.0,
        shape.precision,
        0.9,
        Some(capacity * 0.8),
        vec!["s".to_string()],
        Some(shape.budget_s),
    );
    let planned = shape.warmup_s + shape.window_s;
    let mut calls = 0;
    drive_search_with_costs(
        &mut search,
        |_| planned,
        |rate, visit| {
            let (evidence, n, cost) = run(shape, rate, seed, u64::from(visit), early_stop);
            calls += n;
            (evidence, cost)
        },
    );
    (search.fit("s"), search.spent_s(), calls)
}

/// What a shape gave over `seeds`.
pub struct Coverage {
    pub within_5pct: usize,
    pub covered: usize,
    pub seeds: usize,
    pub median_half_width: f64,
    /// (high − low) / low, the old search's measure of its range.
    pub median_width: f64,
    pub median_seconds: f64,
    pub median_calls: f64,
}

pub fn coverage(shape: &Shape, seeds: std::ops::Range<u64>, early_stop: bool) -> Coverage {
    let truth = shape.truth();
    let (mut within, mut covered) = (0, 0);
    let (mut widths, mut seconds, mut calls) = (vec![], vec![], vec![]);
    let mut full_widths = vec![];
    let n = seeds.end - seeds.start;
    for seed in seeds {
        let (fit, spent, n) = search(shape, seed, early_stop);
        if fit
            .estimate_rps
            .is_some_and(|e| (e - truth).abs() <= 0.05 * truth)
        {
            within += 1;
        }
        if let [Some(lo), Some(hi)] = fit.range
            && lo <= truth
            && truth <= hi
        {
            covered += 1;
        }
        widths.push(fit.half_width().unwrap_or(f64::INFINITY));
        full_widths.push(match fit.range {
            [Some(lo), Some(hi)] => (hi - lo) / lo,
            _ => f64::INFINITY,
        });
        seconds.push(spent);
        calls.push(n as f64);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Coverage {
        within_5pct: within,
        covered,
        seeds: n as usize,
        median_half_width: median(widths),
        median_width: median(full_widths),
        median_seconds: median(seconds),
        median_calls: median(calls),
    }
}

#[test]
fn cr_open_holds_erlang_c_over_100_seeds_in_three_shapes() {
    let mut failures = vec![];
    for shape in &SHAPES {
        let c = coverage(shape, 1..101, true);
        let line = format!(
            "{}: truth {:.2} rps; within ±5% in {}/100, range holds it in {}/100; median ±{:.1}%, {:.0} s, {:.0} calls",
            shape.name,
            shape.truth(),
            c.within_5pct,
            c.covered,
            c.median_half_width * 100.0,
            c.median_seconds,
            c.median_calls
        );
        eprintln!("{line}");
        if c.within_5pct < 90 || c.covered < 85 {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "prints the coverage table of BENCHMARKS.md (release build, a minute)"]
fn cr_open_coverage_table() {
    println!(
        "| shape | early stop | Erlang C | estimate within ±5% | range holds the truth | median half-width | median (high − low)/low | median seconds | median calls |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for shape in &SHAPES {
        for early_stop in [false, true] {
            let c = coverage(shape, 1..401, early_stop);
            println!(
                "| {} | {} | {:.2} rps | {:.1}% | {:.1}% | ±{:.1}% | {:.1}% | {:.0} s | {:.0} |",
                shape.name,
                if early_stop { "on" } else { "off" },
                shape.truth(),
                100.0 * c.within_5pct as f64 / c.seeds as f64,
                100.0 * c.covered as f64 / c.seeds as f64,
                c.median_half_width * 100.0,
                c.median_width * 100.0,
                c.median_seconds,
                c.median_calls
            );
        }
    }
}
