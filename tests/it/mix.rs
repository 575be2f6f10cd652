//! Mixed traffic against a queue whose answer is known, without a server or
//! a clock: the short class fails first, at the rate Pollaczek–Khinchine
//! gives.
//!
//! The server is one FIFO slot (an M/G/1 queue): a `short` call takes
//! 50 ms, a `long` one 500 ms, and 20% of arrivals are long. Arrivals are
//! Poisson at the rate the search asks for, and each arrival's class is
//! capcard's own seeded draw (the mix's [`ClassedGenerator`], as a run of
//! the mix uses it). Each call's TTFT is its wait plus 1 ms. FIFO makes
//! every class wait alike, so the mean wait is the same for both,
//! W = λ·E[S²] / (2·(1 − λ·E[S])). The short class's SLO is tight
//! (`ttft mean ≤ 200 ms`), the long one's loose (`e2e mean ≤ 5 s`): the mix
//! must fail on the short class, at W = 199 ms, i.e. λ = 3.69 rps — while
//! the short class alone (M/D/1, 50 ms) would hold up to 17.8 rps. The
//! journals go through capcard's pipeline: the mix summariser judges each
//! class on its own SLO, the search bisects on the mix's verdict, and the
//! mix card names what limits it.

use capcard::analyze::card::build_mix_card;
use capcard::analyze::summary::summarize_judged;
use capcard::analyze::{RunSummary, Search, Verdict};
use capcard::config::{Experiment, RatePerS, Workload};
use capcard::exec::record::{Journal, RequestRecord};
use capcard::plan::{self, Load, OpenPlan, RunPlan};
use capcard::workload::ClassedGenerator;
use capcard::workload::classes::ClassStream;

use crate::support::{build, drive_search};

const SHORT_MS: f64 = 50.0;
const LONG_MS: f64 = 500.0;
const LONG_SHARE: f64 = 0.2;
const OVERHEAD_MS: f64 = 1.0;
const SHORT_TTFT_MEAN_MS: f64 = 200.0;
/// Measured arrivals per rate, after a warmup of many relaxation times.
const ARRIVALS: u64 = 40_000;
const WARMUP_S: f64 = 60.0;

const EXPERIMENT: &str = r#"
experiment "mg1-mix" { seed 5; }
target "queue" { sim tiny; }
workload "short" { input-tokens fixed 16; output-tokens fixed 4; }
workload "long" { input-tokens fixed 1600; output-tokens fixed 40; }
slo "tight" { ttft mean="200ms"; }
slo "loose" { e2e mean="5s"; }
mix "two" {
    class "short" workload="short" slo="tight" weight=80
    class "long" workload="long" slo="loose" weight=20
}
open { search min=1 max=16 precision="2%"; duration "60s"; warmup "10s"; }
"#;

/// The mean wait of the M/G/1 queue at `rate` (s), and the largest rate at
/// which it stays within `bound_s`.
fn pk_max_rate(bound_s: f64) -> f64 {
    let (s, l) = (SHORT_MS / 1000.0, LONG_MS / 1000.0);
    let mean = (1.0 - LONG_SHARE) * s + LONG_SHARE * l;
    let second = (1.0 - LONG_SHARE) * s * s + LONG_SHARE * l * l;
    2.0 * bound_s / (second + 2.0 * bound_s * mean)
}

struct SplitMix64(u64);

impl SplitMix64 {
    fn exponential(&mut self, mean: f64) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let unit = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -mean * unit.ln()
    }
}

fn workload<'a>(experiment: &'a Experiment, name: &str) -> &'a Workload {
    experiment.workload(name).expect("workload")
}

/// The class draw a run of the mix makes (the runner's own, from the plan).
fn classes(experiment: &Experiment, run: &RunPlan) -> ClassedGenerator {
    let mix = run.mix.as_ref().expect("a mix run");
    let streams: Vec<ClassStream<'_>> = mix
        .classes
        .iter()
        .map(|c| ClassStream {
            class: capcard::workload::TaskClass {
                name: c.name.as_str().into(),
                model: None,
                priority: None,
            },
            workload: workload(experiment, &c.workload),
            weight: c.share,
        })
        .collect();
    ClassedGenerator::new(&streams, run.seed)
}

/// One open run of the mix on the M/G/1 queue, as `capcard run` journals it.
fn simulate(experiment: &Experiment, run: &RunPlan) -> Journal {
    let Load::Rate { rate, .. } = run.load else {
        panic!("an open run");
    };
    let draw = classes(experiment, run);
    let mut rng = SplitMix64(run.seed);
    let from_ms = WARMUP_S * 1000.0;
    let to_ms = from_ms + ARRIVALS as f64 / rate.0 * 1000.0;
    let mut free = 0.0f64;
    let mut requests = Vec::new();
    let mut t = rng.exponential(1000.0 / rate.0);
    let mut index = 0u64;
    while t < to_ms {
        let task = draw.task(index);
        let class = task.class.as_ref().expect("a class").name.to_string();
        let service = if class == "long" { LONG_MS } else { SHORT_MS };
        let start = t.max(free);
        free = start + service;
        requests.push(RequestRecord {
            class: Some(class),
            ..build::record(index, t, start - t + OVERHEAD_MS, service)
        });
        index += 1;
        t += rng.exponential(1000.0 / rate.0);
    }
    build::open_journal(run, "mg1", [from_ms, to_ms], requests)
}

fn experiment() -> Experiment {
    capcard::config::parse(EXPERIMENT, std::path::Path::new("mg1-mix.kdl")).expect("valid")
}

/// The search on the mix's verdict, as the runner drives it.
fn search(experiment: &Experiment) -> (plan::MixPlan, Vec<RunSummary>) {
    let plan = plan::build(experiment);
    let card = &plan.cards[0];
    let mix = card.mix.clone().expect("a mix card");
    assert_eq!(
        card.slos,
        ["two"],
        "a mix card is judged on its own verdict"
    );
    let OpenPlan::Search { template, .. } = &card.open else {
        panic!("the mix searches");
    };
    let confidence = experiment.open.as_ref().expect("open").confidence.0;
    let mut search = Search::new(1.0, 16.0, 0.05, 0.9, Some(4.0), card.slos.clone(), None);
    let runs = drive_search(
        &mut search,
        |_| 0.0,
        |rate, visit| {
            let run = plan::run_at_rate_of(template, RatePerS(rate), experiment).visit_of(visit);
            let journal = simulate(experiment, &run);
            summarize_judged(&journal, &experiment.slos, &[], confidence, &[])
        },
    );
    (mix, runs)
}

fn describe(runs: &[RunSummary]) -> String {
    runs.iter()
        .map(|s| {
            let classes: Vec<String> = s
                .classes
                .iter()
                .map(|c| {
                    format!(
                        "{} {} (ttft mean {:.1} ms)",
                        c.class,
                        c.verdict.as_ref().map_or("-", |v| v.verdict.as_str()),
                        c.ttft_ms.mean
                    )
                })
                .collect();
            format!(
                "{:.3} rps: {} [{}]",
                s.rate_rps.unwrap_or(0.0),
                s.verdicts[0].verdict.as_str(),
                classes.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n  ")
}

#[test]
fn the_short_class_limits_the_mix_at_the_rate_pollaczek_khinchine_gives() {
    let experiment = experiment();
    let truth = pk_max_rate((SHORT_TTFT_MEAN_MS - OVERHEAD_MS) / 1000.0);
    assert!((truth - 3.69).abs() < 0.01, "P-K: {truth}");
    let (mix, runs) = search(&experiment);
    let trail = describe(&runs);
    let target = experiment.target("queue").expect("target");
    let card = build_mix_card(&experiment, target, &mix, None, vec![], runs.clone());
    let got = &card.cr_open[0];
    assert_eq!(got.slo, "two");
    let point = got
        .rps
        .unwrap_or_else(|| panic!("no Cr_open: {got:?}\n  {trail}"));
    assert!(
        (point - truth).abs() <= 0.05 * truth,
        "Cr_open {point} is not within 5% of P-K's {truth:.3}\n  {trail}"
    );
    let [Some(lo), Some(hi)] = got.range else {
        panic!("open range: {got:?}\n  {trail}");
    };
    assert!(
        lo <= truth && truth <= hi,
        "[{lo}, {hi}] misses {truth:.3}\n  {trail}"
    );
    let limit = got.limited_by.as_ref().expect("limited_by");
    assert_eq!(
        (
            limit.class.as_str(),
            limit.slo.as_deref(),
            limit.clause.as_str()
        ),
        ("short", Some("tight"), "ttft mean"),
        "{trail}"
    );
    // At the first failing rate the short class fails and the long one,
    // whose bound is loose, passes.
    let failed = runs
        .iter()
        .find(|r| Some(&r.run_id) == got.failed_run_id.as_ref())
        .expect("the failing run");
    let verdict = |class: &str| {
        failed
            .classes
            .iter()
            .find(|c| c.class == class)
            .and_then(|c| c.verdict.as_ref())
            .map(|v| v.verdict)
    };
    assert_eq!(verdict("short"), Some(Verdict::Fail), "{trail}");
    assert_eq!(verdict("long"), Some(Verdict::Pass), "{trail}");
    // Each class's share and rate are what the draw gave.
    let long = failed.classes.iter().find(|c| c.class == "long").unwrap();
    let rate = failed.rate_rps.unwrap();
    assert!(
        (long.rate_rps.unwrap() / rate - LONG_SHARE).abs() < 0.01,
        "{long:?}"
    );
    // Inside the mix, the long class holds to a higher rate than the mix.
    let mix_card = card.mix.as_ref().expect("mix");
    let long_cr = mix_card
        .class_cr_open
        .iter()
        .find(|c| c.slo == "long")
        .expect("long's own Cr_open");
    assert!(
        long_cr.rps.is_some_and(|r| r > point),
        "{long_cr:?}\n  {trail}"
    );
}

#[test]
fn the_class_draw_is_seeded_and_reproducible() {
    let experiment = experiment();
    let plan = plan::build(&experiment);
    let OpenPlan::Search { template, .. } = &plan.cards[0].open else {
        panic!("search");
    };
    let at = |rate: f64| plan::run_at_rate_of(template, RatePerS(rate), &experiment);
    let names = |run: &RunPlan| -> Vec<String> {
        let draw = classes(&experiment, run);
        (0..2000)
            .map(|i| draw.task(i).class.unwrap().name.to_string())
            .collect()
    };
    // Reproducible: the same run draws the same classes, and the same tasks.
    assert_eq!(names(&at(4.0)), names(&at(4.0)));
    let (a, b) = (
        classes(&experiment, &at(4.0)),
        classes(&experiment, &at(4.0)),
    );
    assert!((0..200).all(|i| a.task(i) == b.task(i)));
    // Another rate is another stream (a server's prefix cache never serves
    // one rate's prompts to the next), with the same shares.
    let other = names(&at(8.0));
    assert_ne!(names(&at(4.0)), other);
    let long = other.iter().filter(|n| *n == "long").count() as f64 / 2000.0;
    assert!((long - LONG_SHARE).abs() < 0.03, "{long}");
}
