//! What an audit of the experiment says of a card's Cr_open range (pure):
//! the rows `capcard audit --json` wrote, matched to a card's SLO by its
//! workload, SLO and the settings the method's coverage depends on, and
//! quoted on the card.
//!
//! A range states the model's confidence. How often it holds depends on
//! the queue and the settings (window, percentile, budget): on the judging
//! shapes of BENCHMARKS.md a 90% range held between 71% and 96% of the
//! time. The audit measures it for one experiment file on a simulated twin;
//! the card quotes that measurement beside the range, and where the share
//! held is below the stated confidence (its 95% interval's upper end below
//! it), says the range is not one of the stated confidence here, and how
//! often it held.

use serde::{Deserialize, Serialize};

use crate::config::Experiment;

/// An audit's measurement of the range, as the card quotes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditQuote {
    /// The `sim` target audited (the experiment's own, or a calibrated twin).
    pub target: String,
    /// That engine, in words.
    pub engine: String,
    /// How the reference Cr_open was found (closed form, or a long run).
    pub reference_method: String,
    /// Searches audited (one a seed).
    pub seeds: usize,
    /// Searches whose range held the reference.
    pub held: usize,
    /// A 95% (Wilson) interval on the share held.
    pub held_interval: [f64; 2],
    /// The confidence the ranges stated.
    pub stated: f64,
    /// Searches whose estimate was within ±`precision` of the reference.
    pub within_precision: usize,
    pub precision: f64,
    /// Median (high − low) / reference of the two-sided ranges.
    pub median_width: Option<f64>,
    /// The reference Cr_open of the audited engine.
    pub reference_rps: Option<f64>,
    /// Where the audited searches put Cr_open: the 5th and 95th
    /// percentiles of their estimates (`None` with fewer than 10).
    #[serde(default)]
    pub estimates_rps: Option<[f64; 2]>,
}

impl AuditQuote {
    /// Whether the audit describes a card whose range is `range`: the
    /// range meets the spread of the audited searches' estimates, widened
    /// by a quarter on either side. A range wholly outside it was measured
    /// on an engine the audited twin does not model (a twin calibrated on
    /// another machine, a server since reconfigured), and the audit's
    /// share says nothing of it.
    pub fn describes(&self, range: [Option<f64>; 2]) -> bool {
        let Some([low, high]) = self.estimates_rps else {
            return true;
        };
        let (low, high) = (low / 1.25, high * 1.25);
        range[1].is_none_or(|h| h >= low) && range[0].is_none_or(|l| l <= high)
    }

    /// The audit shows the range holds less often than it states: the
    /// upper end of the 95% interval on the share held is below the stated
    /// confidence.
    pub fn below_stated(&self) -> bool {
        self.held_interval[1] < self.stated
    }
}

/// One row of `capcard audit --json`: `{ "row": …, "summary": … }`. Fields
/// the card does not quote are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct AuditEntry {
    pub row: EntryRow,
    pub summary: EntrySummary,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EntryRow {
    pub target: String,
    pub workload: String,
    pub slo: String,
    pub precision: f64,
    pub confidence: f64,
    pub engine: String,
    pub reference_method: String,
    #[serde(default)]
    pub reference_rps: Option<f64>,
    #[serde(default)]
    pub seeds: Vec<EntrySeed>,
    /// The experiment's name; absent in audits written before 2026-12-08.
    #[serde(default)]
    pub experiment: Option<String>,
    /// [`settings_fingerprint`] of the audited workload, SLO and open
    /// block; absent in audits written before 2026-12-08.
    #[serde(default)]
    pub fingerprint: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EntrySeed {
    pub estimate_rps: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EntrySummary {
    pub seeds: usize,
    pub within_precision: usize,
    pub covered: usize,
    pub median_width: Option<f64>,
    /// `None` without a reference: then nothing about coverage is known.
    pub coverage_interval: Option<[f64; 2]>,
}

/// The audit file's rows, or what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<AuditEntry>, String> {
    serde_json::from_str(text).map_err(|e| {
        format!("not the JSON of `capcard audit --json` (a list of {{row, summary}}): {e}")
    })
}

/// The settings an audit's coverage depends on besides the engine: the
/// workload, the SLO and the `open` block (arrival, search, window,
/// warmup, budget, confidence), as a stable hash. The experiment's seed
/// and its targets are left out: the audit varies the one and runs on a
/// `sim` target in place of the others. `None` when the experiment has no
/// such workload, SLO or open block.
pub fn settings_fingerprint(experiment: &Experiment, workload: &str, slo: &str) -> Option<String> {
    let workload = experiment.workload(workload)?;
    let slo = experiment.slo(slo)?;
    let open = experiment.open.as_ref()?;
    let text = serde_json::to_string(&(workload, slo, open)).ok()?;
    Some(format!("{:016x}", crate::hash::hash_str(&text)))
}

/// Why an entry does not apply to `experiment`, or `None` when it does.
pub fn mismatch(entry: &AuditEntry, experiment: &Experiment) -> Option<String> {
    let row = &entry.row;
    let Some(fingerprint) = &row.fingerprint else {
        return Some(format!(
            "the row for workload `{}`, SLO `{}` has no settings fingerprint (an audit \
             written before 2026-12-08): run `capcard audit` again",
            row.workload, row.slo
        ));
    };
    match settings_fingerprint(experiment, &row.workload, &row.slo) {
        None => Some(format!(
            "this experiment has no workload `{}` with SLO `{}` and an open block",
            row.workload, row.slo
        )),
        Some(own) if &own != fingerprint => Some(format!(
            "the row for workload `{}`, SLO `{}` audited other settings (the workload, \
             the SLO or the open block differ from this experiment's)",
            row.workload, row.slo
        )),
        Some(_) => None,
    }
}

/// The quote for one card's SLO: the first entry of the same workload and
/// SLO whose settings are `experiment`'s and which had a reference.
pub fn quote(
    entries: &[AuditEntry],
    experiment: &Experiment,
    workload: &str,
    slo: &str,
) -> Option<AuditQuote> {
    entries
        .iter()
        .filter(|e| e.row.workload == workload && e.row.slo == slo)
        .filter(|e| mismatch(e, experiment).is_none())
        .find_map(|e| {
            Some(AuditQuote {
                target: e.row.target.clone(),
                engine: e.row.engine.clone(),
                reference_method: e.row.reference_method.clone(),
                seeds: e.summary.seeds,
                held: e.summary.covered,
                held_interval: e.summary.coverage_interval?,
                stated: e.row.confidence,
                within_precision: e.summary.within_precision,
                precision: e.row.precision,
                median_width: e.summary.median_width,
                reference_rps: e.row.reference_rps,
                estimates_rps: spread(&e.row.seeds),
            })
        })
}

/// The 5th and 95th percentiles (nearest rank) of the seeds' estimates;
/// `None` with fewer than 10.
fn spread(seeds: &[EntrySeed]) -> Option<[f64; 2]> {
    let mut estimates: Vec<f64> = seeds
        .iter()
        .filter_map(|s| s.estimate_rps)
        .filter(|e| e.is_finite())
        .collect();
    if estimates.len() < 10 {
        return None;
    }
    estimates.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        estimates[((q * estimates.len() as f64).ceil() as usize).clamp(1, estimates.len()) - 1]
    };
    Some([rank(0.05), rank(0.95)])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
experiment "q"
target "queue" {
    sim queue {
        slots 4
        service "exponential" mean="100ms"
        virtual #true
    }
    api completions
}
workload "short" {
    input-tokens fixed 16
    output-tokens fixed 4
}
slo "wait" {
    ttft p90="250ms"
}
open {
    arrival poisson
    search min=2 max=64 precision="5%"
    duration "30s"
    warmup "5s"
}
"#;

    fn experiment(source: &str) -> Experiment {
        crate::config::parse(source, std::path::Path::new("q.kdl"))
            .expect("the test experiment parses")
    }

    fn entry(fingerprint: Option<String>, covered: usize) -> String {
        let fingerprint = fingerprint.map_or("null".to_string(), |f| format!("\"{f}\""));
        // The 95% Wilson interval on covered / 100, near enough for the
        // two shares the tests use (77: 68–84%, 86: 78–91%).
        let interval = if covered < 80 {
            [0.68, 0.84]
        } else {
            [0.78, 0.91]
        };
        let seeds = (0..20)
            .map(|i| format!("{{\"estimate_rps\": {}}}", 9.0 + 0.1 * f64::from(i)))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            r#"[{{"row": {{"target": "queue", "workload": "short", "slo": "wait",
                "precision": 0.05, "confidence": 0.9, "engine": "sim queue: 4 slots",
                "reference_method": "Erlang C", "experiment": "q",
                "fingerprint": {fingerprint}, "reference_rps": 10.0,
                "seeds": [{seeds}]}},
              "summary": {{"seeds": 100, "within_precision": 60, "covered": {covered},
                "median_width": 0.12, "coverage_interval": [{}, {}],
                "two_sided": 100, "no_estimate": 0}}}}]"#,
            interval[0], interval[1]
        )
    }

    #[test]
    fn a_card_quotes_the_audit_of_its_own_settings_only() {
        let own = experiment(SOURCE);
        let fingerprint = settings_fingerprint(&own, "short", "wait");
        let entries = parse(&entry(fingerprint.clone(), 77)).expect("parses");
        let quote = quote(&entries, &own, "short", "wait").expect("quoted");
        assert_eq!((quote.held, quote.seeds, quote.stated), (77, 100, 0.9));
        assert!(quote.below_stated(), "77/100 is below 90%: {quote:?}");
        // The seeds' estimates, 9.0 to 10.9: their 5th and 95th percentiles.
        assert_eq!(quote.estimates_rps, Some([9.0, 10.8]));
        // A card whose range meets that spread (widened by a quarter) is
        // described by the audit; one far below it is not.
        assert!(quote.describes([Some(9.5), Some(10.5)]));
        assert!(quote.describes([None, Some(7.5)]));
        assert!(!quote.describes([None, Some(0.21)]));
        assert!(!quote.describes([Some(14.0), None]));
        // Another SLO, another workload: nothing.
        assert!(super::quote(&entries, &own, "short", "other").is_none());
        // The same names, another window: the audit measured other settings.
        let longer = experiment(&SOURCE.replace("duration \"30s\"", "duration \"60s\""));
        assert!(super::quote(&entries, &longer, "short", "wait").is_none());
        assert!(
            mismatch(&entries[0], &longer).is_some_and(|why| why.contains("other settings")),
            "{:?}",
            mismatch(&entries[0], &longer)
        );
        // The target is not part of it: the audit runs on a twin.
        let renamed = experiment(&SOURCE.replace("target \"queue\"", "target \"vllm\""));
        assert!(super::quote(&entries, &renamed, "short", "wait").is_some());
        // An audit from before fingerprints is refused with a reason.
        let old = parse(&entry(None, 77)).expect("parses");
        assert!(super::quote(&old, &own, "short", "wait").is_none());
        assert!(mismatch(&old[0], &own).is_some_and(|why| why.contains("again")));
    }

    #[test]
    fn a_share_held_within_its_interval_of_the_stated_confidence_is_not_below_it() {
        let own = experiment(SOURCE);
        let fingerprint = settings_fingerprint(&own, "short", "wait");
        let entries = parse(&entry(fingerprint, 86)).expect("parses");
        let quote = quote(&entries, &own, "short", "wait").expect("quoted");
        // 86 of 100: the 95% interval (78–91%) holds 90%.
        assert!(!quote.below_stated(), "{quote:?}");
        assert!(parse("{\"row\": 1}").is_err());
    }
}
