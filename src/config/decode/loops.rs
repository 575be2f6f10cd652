//! The `closed` and `open` blocks: how each run is loaded (concurrency
//! levels; arrival process or trace, searched or listed rates), how long it is
//! measured, and the analysis options of each loop.

use std::path::PathBuf;
use std::time::Duration;

use kdl::KdlNode;

use super::{Decoder, Once, OneOf, children, span_of_name, value_span};
use crate::config::model::{
    Arrival, ClosedSpec, CrossPSpec, Fraction, KneeSpec, LatencyMetric, OpenSpec, RatePerS,
    RateSelection, StopRule, TraceSpec,
};
use crate::config::units;
use crate::config::validate as rules;

const CLOSED_CHILDREN: &[&str] = &[
    "concurrency",
    "duration",
    "requests",
    "warmup",
    "crossp",
    "knee",
    "repeat",
];
const OPEN_CHILDREN: &[&str] = &[
    "arrival",
    "search",
    "rates",
    "duration",
    "requests",
    "warmup",
    "confidence",
    "budget",
    "repeat",
    "frontier",
];
const METRICS: &[&str] = &["ttft", "ttfo", "itl", "tpot", "e2e", "task-e2e"];
const ARRIVALS: &[&str] = &["constant", "poisson", "gamma", "trace", "recorded"];

/// `arrival trace "file"`: the first argument is the word `trace`.
pub(super) fn is_trace(node: &KdlNode) -> bool {
    node.entries()
        .iter()
        .find(|e| e.name().is_none())
        .is_some_and(|e| e.value().as_string() == Some("trace"))
}

impl Decoder {
    /// `duration "60s"` or `requests 400` inside `closed`/`open`.
    fn stop_rule(&mut self, node: &KdlNode) -> Option<StopRule> {
        let stop = if node.name().value() == "duration" {
            let usage = "duration \"60s\"";
            self.single(node, usage)
                .and_then(|e| self.duration(e, "duration"))
                .map(StopRule::Duration)
        } else {
            let usage = "requests 400";
            self.single(node, usage)
                .and_then(|e| self.whole(e, "requests", usage, u64::MAX))
                .map(StopRule::Requests)
        }?;
        self.issues(node, rules::check_stop(&stop)).then_some(stop)
    }

    fn missing_stop(&mut self, node: &KdlNode, example: &str) {
        if self.near_miss(node, "duration") || self.near_miss(node, "requests") {
            return;
        }
        self.error(
            span_of_name(node),
            "duration or requests missing",
            format!(
                "`{}` needs `duration` or `requests` to say how long each run is measured",
                node.name().value()
            ),
            Some(format!(
                "add e.g. `duration \"{example}\"` (measured time per run) or `requests 400`"
            )),
        );
    }

    fn warmup(&mut self, node: &KdlNode) -> Option<Duration> {
        self.single(node, "warmup \"10s\"")
            .and_then(|e| self.duration(e, "warmup"))
    }

    pub(super) fn closed(&mut self, node: &KdlNode) -> Option<ClosedSpec> {
        self.entries(
            node,
            0,
            &[],
            "closed { concurrency 1 2 4 8; duration \"60s\" }",
        );
        let mut once = Once::default();
        let mut stop_group = OneOf::default();
        let stop_help =
            "each run stops after a measured `duration` or after a number of `requests`; keep one";
        let (mut levels, mut stop) = (None, None);
        let mut warmup = Duration::ZERO;
        let mut crossp = CrossPSpec::default();
        let mut knee = KneeSpec::default();
        let mut repeat = 1;
        let mut ok = true;
        for child in children(node) {
            let child_name = child.name().value();
            if CLOSED_CHILDREN.contains(&child_name) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let done = match child_name {
                "concurrency" => self.levels(child).map(|l| levels = Some(l)),
                "duration" | "requests" => {
                    if !self.one_of(&mut stop_group, child, stop_help) {
                        ok = false;
                        continue;
                    }
                    self.stop_rule(child).map(|s| stop = Some(s))
                }
                "warmup" => self.warmup(child).map(|w| warmup = w),
                "crossp" => self.crossp(child).map(|c| crossp = c),
                "knee" => self.knee(child).map(|k| knee = k),
                "repeat" => self.repeat(child).map(|r| repeat = r),
                _ => {
                    self.unknown_node(child, Some(node), CLOSED_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if !once.seen.contains_key("concurrency") {
            ok = false;
        }
        if !once.seen.contains_key("concurrency") && !self.near_miss(node, "concurrency") {
            self.error(
                span_of_name(node),
                "concurrency missing",
                "`closed` needs `concurrency` levels to sweep",
                Some("add e.g. `concurrency 1 2 4 8 16 32`".to_string()),
            );
            ok = false;
        }
        if stop_group.given.is_none() {
            self.missing_stop(node, "60s");
            ok = false;
        }
        let (Some(levels), Some(stop), true) = (levels, stop, ok) else {
            return None;
        };
        Some(ClosedSpec {
            levels,
            stop,
            warmup,
            crossp,
            knee,
            repeat,
        })
    }

    /// `repeat 3`: run each level or rate this many times (1 to 100).
    fn repeat(&mut self, node: &KdlNode) -> Option<u32> {
        let usage = "repeat 3";
        let entry = self.single(node, usage)?;
        let n = self.whole(entry, "repeat", usage, 100)?;
        if n == 0 {
            self.error(
                value_span(entry),
                "zero repetitions",
                "`repeat` must be at least 1, found 0",
                Some(
                    "1 runs each level or rate once (the default); 3 shows the spread".to_string(),
                ),
            );
            return None;
        }
        Some(n as u32)
    }

    fn levels(&mut self, node: &KdlNode) -> Option<Vec<u32>> {
        let usage = "concurrency 1 2 4 8 16 32";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut levels = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.whole(entry, "concurrency", usage, u32::MAX as u64) {
                Some(level) => levels.push(level as u32),
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_levels(&levels))).then_some(levels)
    }

    fn crossp(&mut self, node: &KdlNode) -> Option<CrossPSpec> {
        let usage = "crossp metric=ttft stat=p50";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["metric", "stat"], usage);
        let mut spec = CrossPSpec::default();
        let mut ok = true;
        if let Some(entry) = entries.prop("metric") {
            match self.choice(entry, "metric", METRICS) {
                Some(m) => spec.metric = metric_from_name(m),
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("stat") {
            match self
                .string(entry, "stat", usage)
                .map(|s| units::parse_stat(&s))
            {
                Some(Ok(stat)) => spec.stat = stat,
                Some(Err(e)) => {
                    self.error(
                        value_span(entry),
                        "invalid statistic",
                        e.message,
                        Some(e.help),
                    );
                    ok = false;
                }
                None => ok = false,
            }
        }
        ok.then_some(spec)
    }

    fn knee(&mut self, node: &KdlNode) -> Option<KneeSpec> {
        let usage = "knee fraction=0.9 upper=0.97";
        self.no_children(node, usage);
        let entries = self.entries(node, 0, &["fraction", "upper"], usage);
        let mut knee = KneeSpec::default();
        let mut ok = true;
        if let Some(entry) = entries.prop("fraction") {
            match self.fraction(entry, "knee fraction") {
                Some(f) => knee.lower = f.0,
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("upper") {
            match self.fraction(entry, "knee upper") {
                Some(f) => knee.upper = f.0,
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_knee(&knee))).then_some(knee)
    }

    pub(super) fn open(&mut self, node: &KdlNode) -> Option<OpenSpec> {
        self.entries(
            node,
            0,
            &[],
            "open { arrival poisson; search min=0.5 max=64; duration \"120s\" }",
        );
        let mut once = Once::default();
        let mut stop_group = OneOf::default();
        let mut rates_group = OneOf::default();
        let stop_help =
            "each run stops after a measured `duration` or after a number of `requests`; keep one";
        let rates_help = "either `search` for Cr_open between two rates, or an explicit grid of `rates`; keep one";
        let (mut rates, mut stop) = (None, None);
        let mut arrival = Arrival::Poisson;
        let mut trace: Option<TraceSpec> = None;
        let mut warmup = Duration::ZERO;
        let mut confidence = Fraction(crate::stats::interval::DEFAULT_CONFIDENCE);
        let mut budget = None;
        let mut repeat = 1;
        let mut frontier = Vec::new();
        let mut frontier_node: Option<&KdlNode> = None;
        let mut ok = true;
        for child in children(node) {
            let child_name = child.name().value();
            if OPEN_CHILDREN.contains(&child_name) && !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let done = match child_name {
                "arrival" if is_trace(child) => self.trace(child).map(|t| {
                    arrival = Arrival::Trace;
                    trace = Some(t);
                }),
                "arrival" => self.arrival(child).map(|a| arrival = a),
                "search" | "rates" => {
                    if !self.one_of(&mut rates_group, child, rates_help) {
                        ok = false;
                        continue;
                    }
                    let selection = if child_name == "search" {
                        self.search(child)
                    } else {
                        self.rate_grid(child)
                    };
                    selection.map(|r| rates = Some(r))
                }
                "duration" | "requests" => {
                    if !self.one_of(&mut stop_group, child, stop_help) {
                        ok = false;
                        continue;
                    }
                    self.stop_rule(child).map(|s| stop = Some(s))
                }
                "warmup" => self.warmup(child).map(|w| warmup = w),
                "confidence" => self.confidence(child).map(|c| confidence = c),
                "repeat" => self.repeat(child).map(|r| repeat = r),
                "budget" => self
                    .single(child, "budget \"20m\"")
                    .and_then(|e| self.duration(e, "budget"))
                    .map(|b| budget = Some(b)),
                "frontier" => {
                    frontier_node = Some(child);
                    self.frontier(child).map(|f| frontier = f)
                }
                _ => {
                    self.unknown_node(child, Some(node), OPEN_CHILDREN);
                    None
                }
            };
            ok &= done.is_some();
        }
        if let Some(spec) = &trace {
            match (&rates_group.given, spec.speedup_span) {
                // The trace's own rate × speedup is the one run (filled in
                // with the trace's mean rate when the file is loaded).
                (None, _) => rates = Some(RateSelection::Grid { rates: Vec::new() }),
                (Some(_), Some(span)) => {
                    self.error(
                        span,
                        "speedup and rates",
                        "`speedup=` and `search`/`rates` both set the replay speed",
                        Some("keep `speedup=` for one replay, or `search`/`rates` (rates in requests/s = trace mean rate × speedup)".to_string()),
                    );
                    ok = false;
                }
                (Some(_), None) => {}
            }
        }
        // The frontier phase asks a search for extra rates; a grid (or a
        // single trace replay) runs only the rates it lists.
        let grid = match &rates_group.given {
            Some((name, _)) => name == "rates",
            None => trace.is_some(),
        };
        if let (Some(child), true) = (frontier_node, grid) {
            ok &= self.issues(child, vec![rules::frontier_needs_search()]);
        }
        if rates_group.given.is_none() && trace.is_none() {
            ok = false;
        }
        let rates_near_miss = self.near_miss(node, "search") || self.near_miss(node, "rates");
        if rates_group.given.is_none() && trace.is_none() && !rates_near_miss {
            self.error(
                span_of_name(node),
                "rates missing",
                "`open` needs `search` or `rates` to say which arrival rates to run",
                Some(
                    "add e.g. `search min=0.5 max=64 precision=\"5%\"` or `rates 1 2 4 8`"
                        .to_string(),
                ),
            );
            ok = false;
        }
        // A trace knows its own length: without `duration`, a replay lasts it.
        if stop_group.given.is_none() && trace.is_some() {
            stop = Some(StopRule::TraceEnd);
        } else if stop_group.given.is_none() {
            self.missing_stop(node, "120s");
            ok = false;
        }
        let (Some(rates), Some(stop), true) = (rates, stop, ok) else {
            return None;
        };
        Some(OpenSpec {
            arrival,
            rates,
            stop,
            warmup,
            trace,
            confidence,
            budget,
            repeat,
            frontier,
        })
    }

    /// `frontier 0.5 1.5 2`: multipliers of each latency clause's bound
    /// where the search adds rates (see [`rules::check_frontier`]).
    fn frontier(&mut self, node: &KdlNode) -> Option<Vec<f64>> {
        let usage = "frontier 0.5 0.75 1.5 2";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut multipliers = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.number(entry, "frontier", usage) {
                Some(m) => multipliers.push(m),
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_frontier(&multipliers))).then_some(multipliers)
    }

    /// `confidence "95%"`: of every verdict's intervals, strictly between 50% and 100%.
    fn confidence(&mut self, node: &KdlNode) -> Option<Fraction> {
        let usage = "confidence \"95%\"";
        let entry = self.single(node, usage)?;
        let f = self.fraction(entry, "confidence")?;
        if f.0 < 0.5 || f.0 >= 1.0 {
            self.error(
                value_span(entry),
                "confidence out of range",
                format!(
                    "`confidence` must be at least 50% and below 100%, got {}%",
                    f.0 * 100.0
                ),
                Some("95% is the usual choice; 99% asks for more samples per verdict".to_string()),
            );
            return None;
        }
        Some(f)
    }

    fn trace(&mut self, node: &KdlNode) -> Option<TraceSpec> {
        let usage = "arrival trace \"data/trace.jsonl\" speedup=1.0 block-tokens=512";
        self.no_children(node, usage);
        let entries = self.entries(node, 2, &["speedup", "block-tokens"], usage);
        let Some(path_entry) = entries.args.get(1) else {
            self.error(
                span_of_name(node),
                "no trace file",
                "`arrival trace` needs the path of the trace file",
                Some(format!("usage: {usage}")),
            );
            return None;
        };
        let path = self.string(path_entry, "arrival trace", usage)?;
        let (speedup, speedup_span) = match entries.prop("speedup") {
            Some(entry) => {
                let speedup = self.number(entry, "speedup", usage)?;
                if speedup <= 0.0 {
                    self.error(
                        value_span(entry),
                        "not positive",
                        format!("`speedup` must be greater than 0, got {speedup}"),
                        Some("1 replays the trace as recorded, 2 twice as fast".to_string()),
                    );
                    return None;
                }
                (Some(speedup), Some(value_span(entry)))
            }
            None => (None, None),
        };
        let block_tokens = match entries.prop("block-tokens") {
            Some(entry) => {
                let n = self.whole(entry, "block-tokens", usage, u32::MAX as u64)?;
                if n == 0 {
                    self.error(
                        value_span(entry),
                        "zero",
                        "`block-tokens` must be at least 1",
                        Some(format!("usage: {usage}")),
                    );
                    return None;
                }
                n as u32
            }
            None => crate::data::trace::DEFAULT_BLOCK_TOKENS,
        };
        Some(TraceSpec {
            path: PathBuf::from(path),
            span: Some(value_span(path_entry)),
            speedup,
            speedup_span,
            block_tokens,
            data: None,
        })
    }

    fn arrival(&mut self, node: &KdlNode) -> Option<Arrival> {
        let usage =
            "arrival poisson   // or: constant, gamma cv=2.0, recorded (sessions workloads)";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["cv"], usage);
        let Some(entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let process = self.choice(entry, "arrival process", ARRIVALS)?;
        let cv = entries.prop("cv");
        let arrival = match (process, cv) {
            ("gamma", Some(cv)) => Arrival::Gamma {
                cv: self.number(cv, "cv", usage)?,
            },
            ("gamma", None) => {
                self.missing_prop(node, "arrival gamma", "cv", usage);
                return None;
            }
            (_, Some(cv)) => {
                self.error(
                    cv.span(),
                    "not for this process",
                    format!("`cv=` only applies to `arrival gamma`, not `{process}`"),
                    Some("poisson has cv 1 and constant has cv 0 by definition; for another cv use `arrival gamma cv=2.0`".to_string()),
                );
                return None;
            }
            ("constant", None) => Arrival::Constant,
            ("recorded", None) => Arrival::Recorded,
            _ => Arrival::Poisson,
        };
        self.issues(node, rules::check_arrival(&arrival))
            .then_some(arrival)
    }

    fn search(&mut self, node: &KdlNode) -> Option<RateSelection> {
        let usage = "search min=0.5 max=64 precision=\"5%\" confidence=\"90%\" early-stop=#true";
        self.no_children(node, usage);
        let entries = self.entries(
            node,
            0,
            &["min", "max", "precision", "confidence", "early-stop"],
            usage,
        );
        let bound = |decoder: &mut Decoder, name: &str| match entries.prop(name) {
            Some(entry) => decoder.number(entry, name, usage),
            None => {
                decoder.missing_prop(node, "search", name, usage);
                None
            }
        };
        let min = bound(self, "min");
        let max = bound(self, "max");
        let precision = match entries.prop("precision") {
            Some(entry) => self.fraction(entry, "precision"),
            None => Some(Fraction(0.05)),
        };
        let confidence = match entries.prop("confidence") {
            Some(entry) => self.fraction(entry, "confidence"),
            None => Some(crate::config::model::default_range_confidence()),
        };
        let early_stop = match entries.prop("early-stop") {
            Some(entry) => self.boolean(entry, "early-stop", usage),
            None => Some(true),
        };
        let (min, max) = (RatePerS(min?), RatePerS(max?));
        // Check the bounds even when `precision` was malformed (already reported).
        let checked_precision = precision.unwrap_or(Fraction(0.05));
        let checked_confidence =
            confidence.unwrap_or(crate::config::model::default_range_confidence());
        let bounds_ok = self.issues(
            node,
            rules::check_search(min, max, checked_precision, checked_confidence),
        );
        let (precision, confidence, early_stop) = (precision?, confidence?, early_stop?);
        bounds_ok.then_some(RateSelection::Search {
            min,
            max,
            precision,
            confidence,
            early_stop,
        })
    }

    fn rate_grid(&mut self, node: &KdlNode) -> Option<RateSelection> {
        let usage = "rates 1 2 4 8";
        self.no_children(node, usage);
        let entries = self.entries(node, usize::MAX, &[], usage);
        let mut rates = Vec::new();
        let mut ok = true;
        for entry in &entries.args {
            match self.number(entry, "rates", usage) {
                Some(rate) => rates.push(RatePerS(rate)),
                None => ok = false,
            }
        }
        (ok && self.issues(node, rules::check_rate_grid(&rates)))
            .then_some(RateSelection::Grid { rates })
    }
}

fn metric_from_name(name: &str) -> LatencyMetric {
    match name {
        "ttfo" => LatencyMetric::Ttfo,
        "itl" => LatencyMetric::Itl,
        "tpot" => LatencyMetric::Tpot,
        "e2e" => LatencyMetric::E2e,
        "task-e2e" => LatencyMetric::TaskE2e,
        _ => LatencyMetric::Ttft,
    }
}
