//! Two results → what changed (pure, plus one reader): CrossP, Cr_closed,
//! Cr_open per SLO and the metrics at matched levels and rates, each change
//! flagged when it exceeds the runs' own noise, and a regression verdict for
//! CI gates.
//!
//! Why this shape: results.json keeps distributions as percentiles, not raw
//! samples, so noise is estimated from what is stored (see [`NOISE_RULE`]).
//! Cr_open is stored as a range, [highest rate that passed, lowest that
//! failed]: the true capacity lies somewhere inside, so a change counts only
//! when the two ranges are apart, and a regression only when B's whole range
//! lies below A's by more than the threshold (see [`compare_ranges`]).
//! Overlapping ranges are within noise whatever their points say. Cr_closed
//! throughput uses the threshold on its point change, so a CI gate does what
//! it says.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::analyze::{CapacityReport, Card, CrOpen, LatencyStats, RunSummary};
use crate::format::{delta_pct, ms, rps, tokens_per_s};
use crate::report::{ReportError, parse_results_json};

/// Relative changes below this are never "beyond noise": run-to-run effects
/// that sampling error does not capture (seeds, warm caches, clocks).
pub const NOISE_FLOOR: f64 = 0.05;
/// Two open runs are at the same rate when their rates differ by at most this.
pub const RATE_MATCH: f64 = 0.05;

/// How "beyond noise" is decided, printed with every diff.
pub const NOISE_RULE: &str = "A change is beyond noise when it exceeds both 5% and twice the combined standard error of the two runs' estimates. Throughput: relative SE 1/√n over n completed calls (counting noise). A percentile q from n samples: SE ≈ √(q(1−q)/n) × the local spread of the distribution, estimated from the stored percentiles (p50: (p90−p50)/0.4; p99: (p99−p95)/0.04). Cr_open: each result gives a range [highest rate that passed, lowest that failed] (no pass: from 0; no failure: unbounded above); B is worse only when its whole range lies below A's by more than the threshold (B's upper end < A's lower end × (1 − pct/100)), better when above by more (B's lower end > A's upper end × (1 + pct/100)), with 0% when no threshold is given; overlapping ranges are within noise.";

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Results { path: PathBuf, source: ReportError },
}

/// One compared figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricChange {
    /// `"out tok/s"`, `"TTFT p50"`, ...
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// (b − a) / a, in percent.
    pub change_pct: Option<f64>,
    /// The noise threshold used, in percent of `a`.
    pub noise_pct: Option<f64>,
    pub beyond_noise: bool,
    /// `true` when larger is better (throughput), `false` for latencies.
    pub higher_is_better: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelDiff {
    /// Closed loop: the concurrency; open loop: A's and B's rates.
    pub concurrency: Option<u32>,
    pub rate_a: Option<f64>,
    pub rate_b: Option<f64>,
    pub metrics: Vec<MetricChange>,
}

/// How two Cr_open ranges compare (see [`compare_ranges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RangeVerdict {
    /// B's whole range lies below A's by more than the threshold.
    Regression,
    /// B's whole range lies above A's by more than the threshold.
    Improvement,
    /// The ranges overlap, or are apart by no more than the threshold.
    WithinNoise,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrOpenChange {
    pub slo: String,
    /// The points (`rps`, the range's lower end) of A and B.
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// `[highest pass, lowest failure]` of each side (see [`cr_open_range`]);
    /// `None` when that result has no Cr_open for this SLO.
    pub range_a: Option<[Option<f64>; 2]>,
    pub range_b: Option<[Option<f64>; 2]>,
    pub a_at_least: bool,
    pub b_at_least: bool,
    /// Between the points, in percent.
    pub change_pct: Option<f64>,
    /// The ranges compared with the threshold (0% without one); `None` when
    /// one side has no Cr_open for this SLO.
    pub verdict: Option<RangeVerdict>,
    /// `verdict` is a regression or an improvement.
    pub beyond_noise: bool,
    /// With a threshold: `verdict` is a regression, or A measured this SLO
    /// and B has no Cr_open for it at all.
    pub regression: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardDiff {
    /// `"target × workload"` of each side.
    pub a: String,
    pub b: String,
    pub crossp_a: Option<u32>,
    pub crossp_b: Option<u32>,
    pub cr_closed_range_a: Option<[u32; 2]>,
    pub cr_closed_range_b: Option<[u32; 2]>,
    /// Output tok/s at the upper end of Cr_closed.
    pub cr_closed_tokens_per_s: MetricChange,
    /// The unit of A's open-loop rates: `"req/s"`, `"conversations/s"`, `"tasks/s"`.
    pub open_unit: String,
    pub cr_open: Vec<CrOpenChange>,
    pub closed: Vec<LevelDiff>,
    pub open: Vec<LevelDiff>,
    /// Why this card counts as a regression, one line each.
    pub regressions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    pub experiment_a: String,
    pub experiment_b: String,
    pub cards: Vec<CardDiff>,
    /// Cards present on one side only.
    pub only_in_a: Vec<String>,
    pub only_in_b: Vec<String>,
    pub fail_on_regression_pct: Option<f64>,
    /// Some card's Cr_open range (any SLO) lies wholly below A's by more than
    /// `fail_on_regression_pct`, or its Cr_closed upper-end tok/s dropped by
    /// more than that; always `false` without a threshold.
    pub regression: bool,
    pub noise_rule: String,
}

fn card_name(card: &Card) -> String {
    format!("{} × {}", card.target, card.workload)
}

fn change_pct(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 && a.is_finite() && b.is_finite() => {
            Some((b - a) / a * 100.0)
        }
        _ => None,
    }
}

/// A value with its standard error (absolute), when one can be estimated.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    value: f64,
    se: Option<f64>,
}

fn compare(
    metric: &str,
    higher_is_better: bool,
    a: Option<Estimate>,
    b: Option<Estimate>,
) -> MetricChange {
    let change = change_pct(a.map(|e| e.value), b.map(|e| e.value));
    let (noise_pct, beyond_noise) = match (a, b, change) {
        (Some(a), Some(b), Some(change)) => {
            let combined = match (a.se, b.se) {
                (Some(x), Some(y)) => Some((x * x + y * y).sqrt()),
                _ => None,
            };
            let sampling_pct = combined.map(|se| 2.0 * se / a.value.abs() * 100.0);
            let noise = sampling_pct.unwrap_or(0.0).max(NOISE_FLOOR * 100.0);
            (Some(noise), change.abs() > noise)
        }
        _ => (None, false),
    };
    MetricChange {
        metric: metric.to_string(),
        a: a.map(|e| e.value),
        b: b.map(|e| e.value),
        change_pct: change,
        noise_pct,
        beyond_noise,
        higher_is_better,
    }
}

fn throughput(value: f64, completed: u64) -> Estimate {
    Estimate {
        value,
        se: (completed > 0).then(|| value / (completed as f64).sqrt()),
    }
}

/// A stored percentile with the SE of a sample quantile, its density taken
/// from the neighbouring stored percentiles.
fn percentile(stats: &LatencyStats, q: f64) -> Option<Estimate> {
    if stats.count == 0 {
        return None;
    }
    let (value, spread_per_q) = if q >= 0.99 {
        (stats.p99, (stats.p99 - stats.p95) / 0.04)
    } else {
        (stats.p50, (stats.p90 - stats.p50) / 0.4)
    };
    let n = stats.count as f64;
    Some(Estimate {
        value,
        se: Some((q * (1.0 - q) / n).sqrt() * spread_per_q.max(0.0)),
    })
}

fn run_metrics(a: &RunSummary, b: &RunSummary) -> Vec<MetricChange> {
    vec![
        compare(
            "out tok/s",
            true,
            Some(throughput(a.output_tokens_per_s, a.requests)),
            Some(throughput(b.output_tokens_per_s, b.requests)),
        ),
        compare(
            "TTFT p50",
            false,
            percentile(&a.ttft_ms, 0.5),
            percentile(&b.ttft_ms, 0.5),
        ),
        compare(
            "TTFT p99",
            false,
            percentile(&a.ttft_ms, 0.99),
            percentile(&b.ttft_ms, 0.99),
        ),
        compare(
            "E2E p99",
            false,
            percentile(&a.e2e_ms, 0.99),
            percentile(&b.e2e_ms, 0.99),
        ),
    ]
}

fn closed_levels(a: &Card, b: &Card) -> Vec<LevelDiff> {
    let mut levels: Vec<LevelDiff> = a
        .closed
        .iter()
        .filter_map(|ra| {
            let c = ra.concurrency?;
            let rb = b.closed.iter().find(|r| r.concurrency == Some(c))?;
            Some(LevelDiff {
                concurrency: Some(c),
                rate_a: None,
                rate_b: None,
                metrics: run_metrics(ra, rb),
            })
        })
        .collect();
    levels.sort_by_key(|l| l.concurrency);
    levels
}

fn open_rates(a: &Card, b: &Card) -> Vec<LevelDiff> {
    let mut rates: Vec<LevelDiff> = a
        .open
        .iter()
        .filter_map(|ra| {
            let rate = ra.rate_rps?;
            let rb = b
                .open
                .iter()
                .filter_map(|r| r.rate_rps.map(|x| (r, ((x - rate) / rate).abs())))
                .filter(|(_, rel)| *rel <= RATE_MATCH)
                .min_by(|x, y| x.1.total_cmp(&y.1))?
                .0;
            Some(LevelDiff {
                concurrency: None,
                rate_a: Some(rate),
                rate_b: rb.rate_rps,
                metrics: run_metrics(ra, rb),
            })
        })
        .collect();
    rates.sort_by(|x, y| x.rate_a.unwrap_or(0.0).total_cmp(&y.rate_a.unwrap_or(0.0)));
    rates
}

/// The range of a Cr_open: the fitted range at its confidence (before the
/// fit, `[highest conclusive pass, lowest conclusive failure]`).
/// Results written before `range` existed read it as `[null, null]`; they
/// fall back to `[rps, failed_at_rps]`, which is what they meant.
pub fn cr_open_range(cr: &CrOpen) -> [Option<f64>; 2] {
    if cr.range == [None, None] {
        [cr.rps, cr.failed_at_rps]
    } else {
        cr.range
    }
}

/// A range's ends as numbers: no pass starts at 0, no failure never ends.
fn ends(range: [Option<f64>; 2]) -> (f64, f64) {
    (range[0].unwrap_or(0.0), range[1].unwrap_or(f64::INFINITY))
}

/// Compares candidate B's Cr_open range with baseline A's: a regression
/// only when B's upper end is below A's lower end × (1 − pct/100) (B's
/// whole range lies below A's by more than `pct`), an improvement only when
/// B's lower end is above A's upper end × (1 + pct/100); anything else,
/// overlap included, is within noise.
pub fn compare_ranges(a: [Option<f64>; 2], b: [Option<f64>; 2], pct: f64) -> RangeVerdict {
    let ((a_lo, a_hi), (b_lo, b_hi)) = (ends(a), ends(b));
    let p = pct / 100.0;
    if b_hi < a_lo * (1.0 - p) {
        RangeVerdict::Regression
    } else if b_lo > a_hi * (1.0 + p) {
        RangeVerdict::Improvement
    } else {
        RangeVerdict::WithinNoise
    }
}

/// The two ranges share at least one rate (ends included).
fn ranges_overlap(a: [Option<f64>; 2], b: [Option<f64>; 2]) -> bool {
    let ((a_lo, a_hi), (b_lo, b_hi)) = (ends(a), ends(b));
    b_lo <= a_hi && a_lo <= b_hi
}

fn dropped_beyond(a: Option<f64>, b: Option<f64>, pct: Option<f64>) -> bool {
    match (a, b, pct) {
        (Some(a), Some(b), Some(pct)) => a > 0.0 && b < a * (1.0 - pct / 100.0),
        // Measured in A, nothing in B: a drop of 100%.
        (Some(a), None, Some(_)) => a > 0.0,
        _ => false,
    }
}

fn cr_open_changes(a: &Card, b: &Card, pct: Option<f64>) -> Vec<CrOpenChange> {
    let mut slos: Vec<&str> = a.cr_open.iter().map(|c| c.slo.as_str()).collect();
    for c in &b.cr_open {
        if !slos.contains(&c.slo.as_str()) {
            slos.push(&c.slo);
        }
    }
    slos.into_iter()
        .map(|slo| {
            let ca = a.cr_open.iter().find(|c| c.slo == slo);
            let cb = b.cr_open.iter().find(|c| c.slo == slo);
            let (va, vb) = (ca.and_then(|c| c.rps), cb.and_then(|c| c.rps));
            let (range_a, range_b) = (ca.map(cr_open_range), cb.map(cr_open_range));
            let verdict = match (range_a, range_b) {
                (Some(ra), Some(rb)) => Some(compare_ranges(ra, rb, pct.unwrap_or(0.0))),
                _ => None,
            };
            let regression = pct.is_some()
                && match (range_a, range_b) {
                    // An SLO B has no Cr_open for at all is a regression when
                    // A passed some rate of it: B promised nothing.
                    (Some(ra), None) => ra[0].is_some_and(|lo| lo > 0.0),
                    _ => verdict == Some(RangeVerdict::Regression),
                };
            CrOpenChange {
                slo: slo.to_string(),
                a: va,
                b: vb,
                range_a,
                range_b,
                a_at_least: ca.is_some_and(|c| c.at_least),
                b_at_least: cb.is_some_and(|c| c.at_least),
                change_pct: change_pct(va, vb),
                verdict,
                beyond_noise: verdict.is_some_and(|v| v != RangeVerdict::WithinNoise),
                regression,
            }
        })
        .collect()
}

fn upper_end_tokens(card: &Card) -> Option<Estimate> {
    let k = card.cr_closed.as_ref()?;
    let completed = card
        .closed
        .iter()
        .find(|r| r.concurrency == Some(k.range[1]))
        .map_or(0, |r| r.requests);
    Some(throughput(k.output_tokens_per_s[1], completed))
}

fn open_unit(card: &Card) -> &'static str {
    card.workload_profile.unit().per_s()
}

/// A Cr_open range as written in the diff: `4.00–4.40`, `≥ 8.00` (no rate
/// failed), `< 0.50` (none passed).
fn fmt_range(range: Option<[Option<f64>; 2]>) -> String {
    match range {
        None => "not measured".to_string(),
        Some([Some(lo), Some(hi)]) if lo == hi => rps(lo),
        Some([Some(lo), Some(hi)]) => format!("{}–{}", rps(lo), rps(hi)),
        Some([Some(lo), None]) => format!("≥ {}", rps(lo)),
        Some([None, Some(hi)]) => format!("< {}", rps(hi)),
        Some([None, None]) => "not reached".to_string(),
    }
}

fn card_diff(a: &Card, b: &Card, pct: Option<f64>) -> CardDiff {
    let cr_open = cr_open_changes(a, b, pct);
    let unit = open_unit(a);
    let tokens = compare(
        "out tok/s at Cr_closed upper end",
        true,
        upper_end_tokens(a),
        upper_end_tokens(b),
    );
    let mut regressions = Vec::new();
    if let Some(p) = pct {
        if dropped_beyond(tokens.a, tokens.b, Some(p)) {
            regressions.push(match tokens.change_pct {
                Some(c) => format!("Cr_closed output tok/s {} (threshold −{p}%)", delta_pct(c)),
                None => "Cr_closed not measured in B".to_string(),
            });
        }
        for c in cr_open.iter().filter(|c| c.regression) {
            regressions.push(match c.range_b {
                Some(_) => format!(
                    "Cr_open `{}` {} → {} {unit}: B's whole range is more than {p}% below A's",
                    c.slo,
                    fmt_range(c.range_a),
                    fmt_range(c.range_b)
                ),
                None => format!("Cr_open `{}` not measured in B", c.slo),
            });
        }
    }
    CardDiff {
        a: card_name(a),
        b: card_name(b),
        crossp_a: a.crossp.as_ref().map(|x| x.concurrency),
        crossp_b: b.crossp.as_ref().map(|x| x.concurrency),
        cr_closed_range_a: a.cr_closed.as_ref().map(|k| k.range),
        cr_closed_range_b: b.cr_closed.as_ref().map(|k| k.range),
        cr_closed_tokens_per_s: tokens,
        open_unit: unit.to_string(),
        cr_open,
        closed: closed_levels(a, b),
        open: open_rates(a, b),
        regressions,
    }
}

/// Compares B against A. Cards pair by (target, workload); when each side
/// has exactly one card they pair whatever their names (two presets, two
/// engines). `fail_on_regression_pct` (e.g. `5.0`) sets the CI threshold.
pub fn diff(
    a: &CapacityReport,
    b: &CapacityReport,
    fail_on_regression_pct: Option<f64>,
) -> DiffReport {
    let mut cards = Vec::new();
    let (mut only_in_a, mut only_in_b) = (Vec::new(), Vec::new());
    if a.cards.len() == 1 && b.cards.len() == 1 {
        cards.push(card_diff(&a.cards[0], &b.cards[0], fail_on_regression_pct));
    } else {
        for ca in &a.cards {
            match b
                .cards
                .iter()
                .find(|cb| cb.target == ca.target && cb.workload == ca.workload)
            {
                Some(cb) => cards.push(card_diff(ca, cb, fail_on_regression_pct)),
                None => only_in_a.push(card_name(ca)),
            }
        }
        only_in_b = b
            .cards
            .iter()
            .filter(|cb| {
                !a.cards
                    .iter()
                    .any(|ca| ca.target == cb.target && ca.workload == cb.workload)
            })
            .map(card_name)
            .collect();
    }
    let regression = cards.iter().any(|c| !c.regressions.is_empty());
    DiffReport {
        experiment_a: a.experiment.clone(),
        experiment_b: b.experiment.clone(),
        cards,
        only_in_a,
        only_in_b,
        fail_on_regression_pct,
        regression,
        noise_rule: NOISE_RULE.to_string(),
    }
}

fn read_folder(folder: &Path) -> Result<CapacityReport, DiffError> {
    let path = folder.join("results.json");
    let text = std::fs::read_to_string(&path).map_err(|source| DiffError::Read {
        path: path.clone(),
        source,
    })?;
    parse_results_json(&text).map_err(|source| DiffError::Results { path, source })
}

/// Reads `results.json` of two results folders and diffs them.
pub fn diff_folders(a: &Path, b: &Path, pct: Option<f64>) -> Result<DiffReport, DiffError> {
    Ok(diff(&read_folder(a)?, &read_folder(b)?, pct))
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "—".to_string(), f)
}

fn fmt_metric(m: &MetricChange) -> [String; 4] {
    let f: fn(f64) -> String = if m.higher_is_better { tokens_per_s } else { ms };
    let change = match m.change_pct {
        None => "—".to_string(),
        Some(c) => {
            let better = (c > 0.0) == m.higher_is_better;
            let flag = match (m.beyond_noise, better) {
                (false, _) => " (noise)",
                (true, true) => " **better**",
                (true, false) => " **worse**",
            };
            format!("{}{flag}", delta_pct(c))
        }
    };
    [
        opt(m.a, f),
        opt(m.b, f),
        change,
        opt(m.noise_pct, |n| format!("±{n:.1}%")),
    ]
}

fn range(r: Option<[u32; 2]>) -> String {
    match r {
        None => "—".to_string(),
        Some([lo, hi]) if lo == hi => format!("{lo}"),
        Some([lo, hi]) => format!("{lo}–{hi}"),
    }
}

fn level_table(out: &mut String, title: &str, levels: &[LevelDiff], open: bool) {
    let _ = writeln!(out, "### {title}\n");
    if levels.is_empty() {
        let _ = writeln!(
            out,
            "No matched {}.\n",
            if open { "rates" } else { "levels" }
        );
        return;
    }
    let head = if open {
        "rate A → B (/s)"
    } else {
        "concurrency"
    };
    let _ = writeln!(
        out,
        "| {head} | metric | A | B | change | noise |\n|---|---|---|---|---|---|"
    );
    for level in levels {
        let at = match (level.concurrency, level.rate_a, level.rate_b) {
            (Some(c), _, _) => c.to_string(),
            (None, Some(x), Some(y)) if x == y => rps(x),
            (None, x, y) => format!("{} → {}", opt(x, rps), opt(y, rps)),
        };
        for m in &level.metrics {
            let [a, b, change, noise] = fmt_metric(m);
            let _ = writeln!(
                out,
                "| {at} | {} | {a} | {b} | {change} | {noise} |",
                m.metric
            );
        }
    }
    out.push('\n');
}

/// The diff as markdown.
pub fn render_diff(report: &DiffReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Capacity diff: `{}` (A) → `{}` (B)\n",
        report.experiment_a, report.experiment_b
    );
    let verdict = match (report.fail_on_regression_pct, report.regression) {
        (None, _) => "No regression threshold given.".to_string(),
        (Some(p), false) => format!(
            "**No regression** beyond {p}%: no Cr_open range lies more than {p}% below A's, and Cr_closed did not drop by more than {p}%."
        ),
        (Some(p), true) => format!(
            "**Regression**: a Cr_open range lies more than {p}% below A's, or Cr_closed dropped by more than {p}%."
        ),
    };
    let _ = writeln!(out, "{verdict}\n");
    for card in &report.cards {
        if card.a == card.b {
            let _ = writeln!(out, "## `{}`\n", card.a);
        } else {
            let _ = writeln!(out, "## A `{}` vs B `{}`\n", card.a, card.b);
        }
        for r in &card.regressions {
            let _ = writeln!(out, "- ⚠ regression: {r}");
        }
        if !card.regressions.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "| quantity | A | B | change | beyond noise |\n|---|---|---|---|---|"
        );
        let _ = writeln!(
            out,
            "| CrossP (closed loop) | {} | {} | — | — |",
            card.crossp_a
                .map_or("not reached".into(), |c| c.to_string()),
            card.crossp_b
                .map_or("not reached".into(), |c| c.to_string())
        );
        let _ = writeln!(
            out,
            "| Cr_closed range (closed loop) | {} | {} | — | — |",
            range(card.cr_closed_range_a),
            range(card.cr_closed_range_b)
        );
        let [a, b, _, _] = fmt_metric(&card.cr_closed_tokens_per_s);
        let _ = writeln!(
            out,
            "| Cr_closed out tok/s, upper end (closed loop) | {a} | {b} | {} | {} |",
            opt(card.cr_closed_tokens_per_s.change_pct, delta_pct),
            if card.cr_closed_tokens_per_s.beyond_noise {
                "yes"
            } else {
                "no"
            }
        );
        let pct = report.fail_on_regression_pct.unwrap_or(0.0);
        for c in &card.cr_open {
            let noise = match (c.verdict, c.range_a, c.range_b) {
                (Some(RangeVerdict::Regression), ..) => "yes, **worse**".to_string(),
                (Some(RangeVerdict::Improvement), ..) => "yes, **better**".to_string(),
                (Some(RangeVerdict::WithinNoise), Some(ra), Some(rb)) if ranges_overlap(ra, rb) => {
                    "no: ranges overlap".to_string()
                }
                (Some(RangeVerdict::WithinNoise), ..) => {
                    format!("no: apart by {pct}% or less")
                }
                (None, ..) => "—".to_string(),
            };
            let _ = writeln!(
                out,
                "| Cr_open `{}` (open loop, {}) | {} | {} | {} | {noise} |",
                c.slo,
                card.open_unit,
                fmt_range(c.range_a),
                fmt_range(c.range_b),
                opt(c.change_pct, delta_pct),
            );
        }
        out.push('\n');
        level_table(
            &mut out,
            "Closed loop, matched concurrency",
            &card.closed,
            false,
        );
        level_table(
            &mut out,
            "Open loop, matched rates (within 5%)",
            &card.open,
            true,
        );
    }
    for (side, names) in [("A", &report.only_in_a), ("B", &report.only_in_b)] {
        for name in names {
            let _ = writeln!(out, "- Only in {side}: `{name}`");
        }
    }
    if !report.only_in_a.is_empty() || !report.only_in_b.is_empty() {
        out.push('\n');
    }
    let _ = writeln!(out, "Noise: {}", report.noise_rule);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(count: u64, p50: f64, p90: f64, p95: f64, p99: f64) -> LatencyStats {
        LatencyStats {
            count,
            p50,
            p90,
            p95,
            p99,
            ..LatencyStats::default()
        }
    }

    #[test]
    fn throughput_noise_shrinks_with_more_calls() {
        let few = compare(
            "x",
            true,
            Some(throughput(100.0, 25)),
            Some(throughput(112.0, 25)),
        );
        // 2 × √(20² + 22.4²) / 100 ≈ 60%: well within noise.
        assert!(!few.beyond_noise);
        assert!((few.noise_pct.unwrap() - 60.06).abs() < 0.1);
        let many = compare(
            "x",
            true,
            Some(throughput(100.0, 100_000)),
            Some(throughput(112.0, 100_000)),
        );
        assert_eq!(many.noise_pct, Some(5.0), "floor");
        assert!(many.beyond_noise);
        assert!((many.change_pct.unwrap() - 12.0).abs() < 1e-9);
    }

    #[test]
    fn percentile_noise_uses_the_stored_spread() {
        // p50 SE = √(0.25/100) × (140−100)/0.4 = 0.05 × 100 = 5 ms.
        let e = percentile(&stats(100, 100.0, 140.0, 150.0, 200.0), 0.5).unwrap();
        assert!((e.se.unwrap() - 5.0).abs() < 1e-9);
        assert!(percentile(&stats(0, 0.0, 0.0, 0.0, 0.0), 0.5).is_none());
    }

    fn cr(range: [Option<f64>; 2]) -> CrOpen {
        CrOpen {
            slo: "s".into(),
            rps: range[0],
            range,
            failed_at_rps: range[1],
            at_least: range[0].is_some() && range[1].is_none(),
            inconclusive_rps: vec![],
            precision_reached: None,
            note: None,
            run_id: None,
            failed_run_id: None,
            failed_clauses: vec![],
            limited_by: None,
            ..CrOpen::default()
        }
    }

    #[test]
    fn overlapping_ranges_are_within_noise() {
        use RangeVerdict::*;
        let a = [Some(4.0), Some(4.4)];
        // B's point is 10% lower, but its range reaches into A's.
        assert_eq!(compare_ranges(a, [Some(3.6), Some(4.2)], 5.0), WithinNoise);
        assert_eq!(compare_ranges(a, [Some(3.6), Some(4.2)], 0.0), WithinNoise);
        // Sharing an end (B failed where A passed) is not apart by more than 0%.
        assert_eq!(compare_ranges(a, [Some(3.6), Some(4.0)], 0.0), WithinNoise);
        assert_eq!(compare_ranges(a, [Some(4.4), Some(4.8)], 0.0), WithinNoise);
        assert!(ranges_overlap(a, [Some(4.4), Some(4.8)]));
        assert!(!ranges_overlap(a, [Some(3.1), Some(3.4)]));
    }

    #[test]
    fn ranges_apart_by_more_than_the_threshold_are_a_change() {
        use RangeVerdict::*;
        let a = [Some(4.0), Some(4.4)];
        // 3.4 < 4.0 × 0.9 = 3.6.
        assert_eq!(compare_ranges(a, [Some(3.1), Some(3.4)], 10.0), Regression);
        // 3.4 is 15% below 4.0: apart, but by less than 20%.
        assert_eq!(compare_ranges(a, [Some(3.1), Some(3.4)], 20.0), WithinNoise);
        assert_eq!(compare_ranges(a, [Some(3.1), Some(3.4)], 0.0), Regression);
        // Improvements mirror it: 5.0 > 4.4 × 1.1 = 4.84, but not > 4.4 × 1.2.
        assert_eq!(compare_ranges(a, [Some(5.0), Some(5.5)], 10.0), Improvement);
        assert_eq!(compare_ranges(a, [Some(5.0), Some(5.5)], 20.0), WithinNoise);
    }

    #[test]
    fn null_ends_are_zero_below_and_unbounded_above() {
        use RangeVerdict::*;
        // At least 8 (no rate failed): B's whole range below 7.2 regresses.
        let at_least = [Some(8.0), None];
        assert_eq!(
            compare_ranges(at_least, [Some(4.4), Some(4.8)], 10.0),
            Regression
        );
        assert_eq!(
            compare_ranges(at_least, [Some(7.5), Some(8.0)], 10.0),
            WithinNoise
        );
        // Nothing is above an unbounded range, and nothing below 0.
        assert_eq!(
            compare_ranges(at_least, [Some(100.0), None], 10.0),
            WithinNoise
        );
        assert_eq!(
            compare_ranges([None, Some(0.5)], [None, Some(0.1)], 10.0),
            WithinNoise
        );
        // B passed nothing and failed at 0.5: wholly below A.
        assert_eq!(
            compare_ranges(at_least, [None, Some(0.5)], 10.0),
            Regression
        );
        // B inconclusive everywhere: [0, ∞) overlaps anything.
        assert_eq!(compare_ranges(at_least, [None, None], 10.0), WithinNoise);
        assert_eq!(
            compare_ranges([None, None], [Some(1.0), Some(2.0)], 10.0),
            WithinNoise
        );
    }

    #[test]
    fn results_without_range_fall_back_to_rps_and_failed_at() {
        let mut old = cr([Some(10.0), Some(12.0)]);
        old.range = [None, None];
        assert_eq!(cr_open_range(&old), [Some(10.0), Some(12.0)]);
        let mut at_least = cr([Some(10.0), None]);
        at_least.range = [None, None];
        assert_eq!(cr_open_range(&at_least), [Some(10.0), None]);
        assert_eq!(
            cr_open_range(&cr([Some(9.0), Some(9.5)])),
            [Some(9.0), Some(9.5)]
        );
    }

    fn card_with(cr_open: Vec<CrOpen>) -> Card {
        let text = include_str!("../tests/data/diff-a/results.json");
        let mut card = crate::report::parse_results_json(text)
            .unwrap()
            .cards
            .remove(0);
        card.cr_open = cr_open;
        card
    }

    #[test]
    fn cr_open_regression_needs_a_threshold_and_ranges_apart() {
        let a = card_with(vec![cr([Some(4.0), Some(4.4)])]);
        let b = card_with(vec![cr([Some(3.1), Some(3.4)])]);
        let got = &cr_open_changes(&a, &b, Some(10.0))[0];
        assert_eq!(got.verdict, Some(RangeVerdict::Regression));
        assert!(got.regression && got.beyond_noise);
        let got = &cr_open_changes(&a, &b, None)[0];
        assert!(
            got.beyond_noise && !got.regression,
            "no threshold, no regression"
        );
        let got = &cr_open_changes(&a, &b, Some(20.0))[0];
        assert!(!got.beyond_noise && !got.regression);
        // An SLO B has no Cr_open for: a regression when A passed a rate of it.
        let got = &cr_open_changes(&a, &card_with(vec![]), Some(10.0))[0];
        assert_eq!((got.verdict, got.range_b), (None, None));
        assert!(got.regression && !got.beyond_noise);
        let none_passed = card_with(vec![cr([None, Some(0.5)])]);
        assert!(!cr_open_changes(&none_passed, &card_with(vec![]), Some(10.0))[0].regression);
    }

    #[test]
    fn ranges_are_written_with_their_open_ends() {
        assert_eq!(fmt_range(Some([Some(4.0), Some(4.4)])), "4.00–4.40");
        assert_eq!(fmt_range(Some([Some(8.0), None])), "≥ 8.00");
        assert_eq!(fmt_range(Some([None, Some(0.5)])), "< 0.50");
        assert_eq!(fmt_range(Some([None, None])), "not reached");
        assert_eq!(fmt_range(None), "not measured");
    }

    #[test]
    fn dropped_beyond_compares_points() {
        assert!(dropped_beyond(Some(10.0), Some(8.0), Some(10.0)));
        assert!(!dropped_beyond(Some(10.0), Some(9.5), Some(10.0)));
        assert!(dropped_beyond(Some(10.0), None, Some(10.0)));
        assert!(!dropped_beyond(Some(10.0), None, None));
    }
}
