//! Cr_open against queueing theory, fast: the Erlang-C reproduction of
//! docs/erlang-c.md ("Reproducing an Erlang-C answer") without a server or a
//! clock.
//!
//! An M/M/4 FIFO queue (Poisson arrivals at the rate the search asks for,
//! service Exp(mean 400 ms)) is simulated in virtual time, seeded; each call's
//! TTFT is its waiting time W plus 1 ms, as on `examples/erlang_c`, which
//! sends the first token the moment service starts. Each simulated run is
//! the run `capcard run` makes of `examples/erlang_c/erlang-c.kdl` at that
//! rate (its warmup and length; a revisit of a rate its own stream), and
//! becomes a journal like the one `capcard run` writes; the rest is
//! capcard's own pipeline: `summarize_judged` judges the SLO (TTFT p90 ≤
//! 250 ms), `Search` picks the rates within the example's budget, and
//! `cr_open` fits the estimate and its 90% range. Erlang C, computed here,
//! says the SLO holds up to 5.922 rps; the estimate must be within ±5% of
//! it and the range must contain it. The coverage of the same method over
//! many seeds is `cr_open_coverage`'s.

use std::path::Path;

use capcard::analyze::summary::summarize_judged;
use capcard::analyze::{RunSummary, Search, cr_open};
use capcard::config::{
    Experiment, LatencyMetric, RatePerS, RateSelection, Slo, SloClause, Stat, StopRule,
};
use capcard::exec::record::Journal;
use capcard::plan::{self, Load, OpenPlan, RunPlan};

use crate::mmc::{SplitMix64, erlang_c_max_rate, simulate as simulate_queue};
use crate::support::{build, drive_search};

/// The queue of `examples/erlang_c` with its defaults.
const SLOTS: usize = 4;
const SERVICE_MS: f64 = 400.0;
/// Loopback and framing: what a real client adds to W.
const OVERHEAD_MS: f64 = 1.0;

// ------------------------------------------------------------ the queue

/// One open run at `rate` on the M/M/4 queue, as the journal `capcard run`
/// would write for `run` (the example's run at that rate): warmup, then a
/// window as long as the run's, every arrival served to
/// its end (the drain).
fn simulate(run: &RunPlan, seed: u64) -> Journal {
    let Load::Rate { rate, .. } = run.load else {
        panic!("an open run: {run:?}");
    };
    let StopRule::Duration(length) = run.stop else {
        panic!("a run of a duration: {run:?}");
    };
    // Each run its own stream (the run's seed depends on the rate and the visit).
    let mut rng = SplitMix64(run.seed ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let from_ms = run.warmup.as_secs_f64() * 1000.0;
    let to_ms = from_ms + length.as_secs_f64() * 1000.0;
    let requests = simulate_queue(SLOTS, SERVICE_MS, rate.0, to_ms, &mut rng)
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            build::record(
                i as u64,
                call.arrival_ms,
                call.wait_ms + OVERHEAD_MS,
                call.service_ms,
            )
        })
        .collect();
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

/// One whole search on the simulated queue, as the runner makes it: the
/// example's bounds, precision, confidence and budget; the runs, in order.
fn search(experiment: &Experiment, slo: &Slo, seed: u64) -> Vec<RunSummary> {
    let plan = plan::build(experiment);
    let open = &plan.cards[0].open;
    let OpenPlan::Search { template, .. } = open else {
        panic!("erlang-c.kdl searches");
    };
    let spec = experiment.open.as_ref().expect("open");
    let RateSelection::Search {
        min,
        max,
        precision,
        confidence,
        ..
    } = spec.rates
    else {
        panic!("erlang-c.kdl searches");
    };
    let mut search = Search::new(
        min.0,
        max.0,
        precision.0,
        confidence.0,
        None,
        vec![slo.name.clone()],
        Some(plan::search_budget(experiment, open).as_secs_f64()),
    );
    let run_at = |rate: f64| plan::run_at_rate_of(template, RatePerS(rate), experiment);
    drive_search(
        &mut search,
        |rate| plan::planned_run_seconds(&run_at(rate)),
        |rate, visit| {
            let journal = simulate(&run_at(rate).visit_of(visit), seed);
            summarize_judged(
                &journal,
                std::slice::from_ref(slo),
                &[],
                spec.confidence.0,
                &[],
            )
        },
    )
}

fn describe(runs: &[RunSummary], slo: &str) -> String {
    runs.iter()
        .map(|s| {
            let v = s.verdict(slo).expect("judged");
            format!(
                "{} rps ({}): {} ({}; p90 {:.1} ms, inflation {:.1})",
                s.rate_rps.unwrap(),
                s.run_id,
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
    let got = cr_open(&runs, &slo.name, Some(8.0), Some(0.05), 0.9);
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
