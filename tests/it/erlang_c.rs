//! Cr_open against queueing theory, fast: the Erlang-C reproduction of
//! docs/erlang-c.md ("Reproducing an Erlang-C answer") without a server or a
//! clock.
//!
//! An M/M/4 FIFO queue (Poisson arrivals at the rate the search asks for,
//! service Exp(mean 400 ms)) is simulated in virtual time, seeded; each call's
//! TTFT is its waiting time W plus 1 ms, as on `examples/erlang_c`, which
//! sends the first token the moment service starts. Each simulated run
//! becomes a journal like the one `capcard run` writes, and the rest is
//! capcard's own pipeline: `summarize_judged` judges the SLO of
//! `examples/erlang_c/erlang-c.kdl` (TTFT p90 ≤ 250 ms) at its confidence
//! (95%), `Search` picks the rates (2–8 rps, 2%), `cr_open` gives the point
//! and the range. Erlang C, computed here, says the SLO holds up to
//! 5.922 rps; the point must be within ±5% of it and the range must contain
//! it.
//!
//! Not a lucky seed: over seeds 1–100 of this simulation, 97 searches pass
//! both checks (every point is within ±5%; 3 ranges miss by one wrong
//! verdict next to the answer — 2 passes at 5.94, 1 failure at 5.88 —
//! which is about what 95% intervals allow over the ~8 runs a search makes
//! there). The test uses seed 7.

use std::path::Path;

use capcard::analyze::search::verdicts_of;
use capcard::analyze::summary::summarize_judged;
use capcard::analyze::{RunSummary, Search, cr_open};
use capcard::config::{Experiment, LatencyMetric, RatePerS, Slo, SloClause, Stat};
use capcard::exec::record::Journal;
use capcard::plan::{self, Load, OpenPlan, RunPlan};

use crate::support::build;

/// The queue of `examples/erlang_c` with its defaults.
const SLOTS: usize = 4;
const SERVICE_MS: f64 = 400.0;
/// Loopback and framing: what a real client adds to W.
const OVERHEAD_MS: f64 = 1.0;
/// The search of the example (`search min=2 max=8 precision="2%"`; it
/// starts at their geometric mean).
const MIN_RPS: f64 = 2.0;
const MAX_RPS: f64 = 8.0;
const PRECISION: f64 = 0.02;
const START_RPS: f64 = 4.0;
/// Measured arrivals per rate (about 170 min of virtual time at 5.9 rps),
/// after a warmup of many relaxation times of the queue. Consecutive waits
/// are strongly correlated (the batch-means inflation is 6–20 near the
/// answer), so 60,000 calls are worth only a few thousand independent ones:
/// over 100 seeds, 97 searches pass both checks (30,000: about 92%).
const ARRIVALS: u64 = 60_000;
const WARMUP_S: f64 = 60.0;

// ------------------------------------------------------------ Erlang C

/// Probability that an arrival waits, for `c` servers at offered load `a`
/// (Erlangs, `a < c`).
fn erlang_c(c: usize, a: f64) -> f64 {
    if a >= c as f64 {
        return 1.0;
    }
    let (mut term, mut below) = (1.0, 0.0);
    for k in 0..c {
        if k > 0 {
            term *= a / k as f64;
        }
        below += term;
    }
    let top = term * a / c as f64 * c as f64 / (c as f64 - a);
    top / (below + top)
}

/// `P(W > t) = C(c, a)·exp(−(cμ − λ)t)` for M/M/c, `t` in seconds.
fn p_wait_exceeds(rate: f64, c: usize, mu: f64, t_s: f64) -> f64 {
    if rate >= c as f64 * mu {
        return 1.0;
    }
    erlang_c(c, rate / mu) * (-(c as f64 * mu - rate) * t_s).exp()
}

/// The largest rate at which `P(W > t) ≤ 1 − q` (bisection; the tail grows
/// with the rate).
fn erlang_c_max_rate(c: usize, mu: f64, t_s: f64, q: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, c as f64 * mu);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if p_wait_exceeds(mid, c, mu, t_s) <= 1.0 - q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[test]
fn erlang_c_formula_matches_known_values() {
    // One server: M/M/1 waits with probability ρ.
    assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
    // Two servers at a = 1: C = (1/2·2) / (1 + 1 + 1) = 1/3.
    assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
    // The issue's number, and W p90 = 110.7 ms at 5 rps (erlang_c_check.py).
    let mu = 1000.0 / SERVICE_MS;
    assert!((erlang_c_max_rate(SLOTS, mu, 0.25, 0.9) - 5.9221).abs() < 1e-4);
    let p90_at_5 = (erlang_c(SLOTS, 5.0 / mu) / 0.1).ln() / (SLOTS as f64 * mu - 5.0);
    assert!((p90_at_5 * 1000.0 - 110.7).abs() < 0.05, "{p90_at_5}");
}

// ------------------------------------------------------------ the queue

/// SplitMix64, as in `examples/erlang_c`.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        let unit = ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -mean * unit.ln()
    }
}

/// One open run at `rate` on the M/M/4 queue, as the journal `capcard run`
/// would write for `run` (the example's run at that rate): warmup, then a
/// window holding [`ARRIVALS`] arrivals on average, every arrival served to
/// its end (the drain).
fn simulate(run: &RunPlan, seed: u64) -> Journal {
    let Load::Rate { rate, .. } = run.load else {
        panic!("an open run: {run:?}");
    };
    let rate = rate.0;
    // Each rate its own stream (the run's seed depends on the rate).
    let mut rng = SplitMix64(run.seed ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let from_ms = WARMUP_S * 1000.0;
    let to_ms = from_ms + ARRIVALS as f64 / rate * 1000.0;
    let mean_gap_ms = 1000.0 / rate;
    // When each slot is next free (FIFO: the next in line takes the first).
    let mut free = [0.0f64; SLOTS];
    let mut requests = Vec::new();
    let mut t = rng.exponential(mean_gap_ms);
    while t < to_ms {
        let slot = (0..SLOTS)
            .min_by(|&a, &b| free[a].total_cmp(&free[b]))
            .expect("c slots");
        let start = t.max(free[slot]);
        let service = rng.exponential(SERVICE_MS);
        free[slot] = start + service;
        requests.push(build::record(
            requests.len() as u64,
            t,
            start - t + OVERHEAD_MS,
            service,
        ));
        t += rng.exponential(mean_gap_ms);
    }
    build::open_journal(run, "mmc", [from_ms, to_ms], requests)
}

// ------------------------------------------------------------ the search

/// The example experiment, its SLO, and the SLO's bound (s) and quantile.
fn example() -> (Experiment, Slo, f64, f64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/erlang_c/erlang-c.kdl");
    let experiment = capcard::config::load(&path).expect("erlang-c.kdl is valid");
    let slo = experiment
        .slos
        .iter()
        .find(|s| s.name == "erlang-c")
        .expect("slo \"erlang-c\"")
        .clone();
    let [
        SloClause::Latency {
            metric: LatencyMetric::Ttft,
            stat: Stat::Percentile(p),
            limit,
        },
    ] = slo.clauses[..]
    else {
        panic!("the erlang-c SLO is one TTFT percentile: {:?}", slo.clauses);
    };
    (experiment, slo, limit.as_secs_f64(), p / 100.0)
}

/// The example's open run at `rate`, as the runner makes it.
fn run_at(experiment: &Experiment, template: &RunPlan, rate: f64) -> RunPlan {
    plan::run_at_rate_of(template, RatePerS(rate), experiment)
}

/// One whole search on the simulated queue, judged at the example's
/// `confidence`: the runs, in order.
fn search(experiment: &Experiment, slo: &Slo, seed: u64) -> Vec<RunSummary> {
    let plan = plan::build(experiment);
    let OpenPlan::Search { template, .. } = &plan.cards[0].open else {
        panic!("erlang-c.kdl searches");
    };
    let mut search = Search::new(
        MIN_RPS,
        MAX_RPS,
        PRECISION,
        Some(START_RPS),
        vec![slo.name.clone()],
    );
    let confidence = experiment.open.as_ref().expect("open").confidence.0;
    let mut runs = Vec::new();
    while let Some(rate) = search.next_rate() {
        let journal = simulate(&run_at(experiment, template, rate), seed);
        let summary = summarize_judged(&journal, std::slice::from_ref(slo), &[], confidence);
        search.record(rate, &verdicts_of(&summary));
        runs.push(summary);
    }
    runs
}

fn describe(runs: &[RunSummary], slo: &str) -> String {
    runs.iter()
        .map(|s| {
            let v = s.verdict(slo).expect("judged");
            format!(
                "{} rps: {} ({}; p90 {:.1} ms, inflation {:.1})",
                s.rate_rps.unwrap(),
                v.verdict.as_str(),
                s.state.as_str(),
                s.ttft_ms.p90,
                v.clauses[0].inflation
            )
        })
        .collect::<Vec<_>>()
        .join("\n  ")
}

#[test]
fn erlang_c_cr_open_of_a_simulated_mm4_queue() {
    let (experiment, slo, t_s, q) = example();
    // The SLO is on TTFT = W + overhead: W may use what the overhead leaves.
    let truth = erlang_c_max_rate(SLOTS, 1000.0 / SERVICE_MS, t_s - OVERHEAD_MS / 1000.0, q);
    let issue = erlang_c_max_rate(SLOTS, 1000.0 / SERVICE_MS, t_s, q);
    assert!((issue - 5.922).abs() < 5e-4, "Erlang C: {issue}");
    let runs = search(&experiment, &slo, 7);
    let got = cr_open(&runs, &slo.name, Some(MAX_RPS), Some(PRECISION));
    let trail = describe(&runs, &slo.name);
    let point = got
        .rps
        .unwrap_or_else(|| panic!("no Cr_open: {got:?}\n  {trail}"));
    let [Some(lo), Some(hi)] = got.range else {
        panic!("open range {:?}: {got:?}\n  {trail}", got.range);
    };
    assert!(
        (point - issue).abs() <= 0.05 * issue,
        "Cr_open {point} rps is not within 5% of Erlang C's {issue:.3}\n  {trail}"
    );
    assert!(
        lo <= truth && truth <= hi && lo <= issue && issue <= hi,
        "range [{lo}, {hi}] misses Erlang C's {truth:.3} ({issue:.3} without the overhead)\n  {trail}"
    );
}
