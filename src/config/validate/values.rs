//! Rules on one node's values: distributions, concurrency levels, rate
//! grids, the search line, the frontier, the knee, stop rules, fractions,
//! names and the shared prefix.

use std::time::Duration;

use super::*;
use crate::config::model::*;
use crate::config::units;

/// Parameters of `dist`: each must be finite and in its domain, ranges ordered.
pub(crate) fn check_dist(dist: &Dist, quantity: Quantity) -> Vec<Issue> {
    let mut issues = Vec::new();
    let show = |v: f64| quantity.show(v);
    let at_least_zero = |at: At, what: &str, v: f64, issues: &mut Vec<Issue>| {
        if !v.is_finite() || v < 0.0 {
            issues.push(
                Issue::new(at, format!("{what} must be 0 or more, got {}", show(v)))
                    .help("token counts and times cannot be negative"),
            );
        }
    };
    let positive = |at: At, what: &str, v: f64, issues: &mut Vec<Issue>| {
        if !v.is_finite() || v <= 0.0 {
            issues.push(
                Issue::new(at, format!("{what} must be greater than 0, got {v}"))
                    .help("gamma needs a positive shape, e.g. `gamma shape=2 scale=100`"),
            );
        }
    };
    match &dist.kind {
        DistKind::Fixed { value } => {
            at_least_zero(At::Value, "the fixed value", *value, &mut issues)
        }
        DistKind::Uniform { min, max } => {
            at_least_zero(prop("min"), "uniform `min`", *min, &mut issues);
            if min > max {
                issues.push(
                    Issue::new(
                        prop("max"),
                        format!(
                            "uniform `max` ({}) is less than `min` ({})",
                            show(*max),
                            show(*min)
                        ),
                    )
                    .help("`min` must not exceed `max`"),
                );
            }
        }
        DistKind::Normal { mean, stddev } => {
            at_least_zero(prop("mean"), "normal `mean`", *mean, &mut issues);
            if !stddev.is_finite() || *stddev < 0.0 {
                issues.push(
                    Issue::new(
                        prop("stddev"),
                        format!("normal `stddev` must be 0 or more, got {}", show(*stddev)),
                    )
                    .help("a standard deviation measures spread and cannot be negative"),
                );
            }
        }
        DistKind::LogNormal { median, sigma } => {
            if !median.is_finite() || *median <= 0.0 {
                issues.push(
                    Issue::new(
                        prop("median"),
                        format!(
                            "lognormal `median` must be greater than 0, got {}",
                            show(*median)
                        ),
                    )
                    .help("the median is the middle value: half of the draws fall below it"),
                );
            }
            if !sigma.is_finite() || *sigma <= 0.0 {
                issues.push(
                    Issue::new(prop("sigma"), format!("lognormal `sigma` must be greater than 0, got {sigma}"))
                        .help("sigma is the spread of the log of the values, typically 0.3..1.5; for no spread use `fixed`"),
                );
            }
        }
        DistKind::Exponential { mean } => {
            if !mean.is_finite() || *mean <= 0.0 {
                issues.push(
                    Issue::new(
                        prop("mean"),
                        format!(
                            "exponential `mean` must be greater than 0, got {}",
                            show(*mean)
                        ),
                    )
                    .help("an exponential needs a positive mean; for a constant value use `fixed`"),
                );
            }
        }
        DistKind::Gamma { shape, scale } => {
            positive(prop("shape"), "gamma `shape`", *shape, &mut issues);
            if !scale.is_finite() || *scale <= 0.0 {
                issues.push(
                    Issue::new(
                        prop("scale"),
                        format!("gamma `scale` must be greater than 0, got {}", show(*scale)),
                    )
                    .help("gamma needs a positive scale, e.g. `gamma shape=2 scale=100`"),
                );
            }
        }
        DistKind::Empirical { points } => {
            if points.is_empty() {
                issues.push(
                    Issue::new(At::Node, "an empirical distribution needs at least one `value`")
                        .help("list the values in a block: `empirical { value 100 weight=3; value 400 weight=1 }`"),
                );
            }
            for (i, (value, weight)) in points.iter().enumerate() {
                at_least_zero(
                    At::Child(i, None),
                    "an empirical value",
                    *value,
                    &mut issues,
                );
                if !weight.is_finite() || *weight <= 0.0 {
                    issues.push(
                        Issue::new(
                            At::Child(i, Some("weight".into())),
                            format!("empirical `weight` must be greater than 0, got {weight}"),
                        )
                        .help("weights are relative frequencies; leave a value out instead of giving it weight 0"),
                    );
                }
            }
        }
    }
    if let Some(min) = dist.min {
        at_least_zero(prop("min"), "the clamp `min`", min, &mut issues);
    }
    if let Some(max) = dist.max {
        at_least_zero(prop("max"), "the clamp `max`", max, &mut issues);
    }
    if let (Some(min), Some(max)) = (dist.min, dist.max) {
        if min > max {
            issues.push(
                Issue::new(
                    prop("max"),
                    format!(
                        "clamp `max` ({}) is less than `min` ({})",
                        show(max),
                        show(min)
                    ),
                )
                .help("`min=` and `max=` clamp every draw; `min` must not exceed `max`"),
            );
        }
    }
    issues
}

/// A concurrency sweep: non-empty, every level ≥ 1, strictly increasing.
pub(crate) fn check_levels(levels: &[u32]) -> Vec<Issue> {
    let mut issues = Vec::new();
    if levels.is_empty() {
        issues.push(
            Issue::new(At::Node, "`concurrency` needs at least one level").help(
                "list the in-flight request counts to sweep, e.g. `concurrency 1 2 4 8 16 32`",
            ),
        );
    }
    for (i, level) in levels.iter().enumerate() {
        if *level == 0 {
            issues.push(
                Issue::new(At::Arg(i), "concurrency levels must be at least 1")
                    .help("a level is the number of requests kept in flight; start at 1"),
            );
        } else if i > 0 && levels[i - 1] >= *level {
            issues.push(
                Issue::new(
                    At::Arg(i),
                    format!(
                        "concurrency levels must be strictly increasing, but {level} follows {}",
                        levels[i - 1]
                    ),
                )
                .help("list each level once, smallest first, e.g. `concurrency 1 2 4 8 16`"),
            );
        }
    }
    issues
}

/// An explicit grid of open-loop rates: non-empty, positive, strictly increasing.
pub(crate) fn check_rate_grid(rates: &[RatePerS]) -> Vec<Issue> {
    let mut issues = Vec::new();
    if rates.is_empty() {
        issues.push(
            Issue::new(At::Node, "`rates` needs at least one arrival rate")
                .help("list rates in requests/s, e.g. `rates 1 2 4 8`"),
        );
    }
    for (i, rate) in rates.iter().enumerate() {
        if !rate.0.is_finite() || rate.0 <= 0.0 {
            issues.push(
                Issue::new(
                    At::Arg(i),
                    format!("arrival rates must be greater than 0, got {}", rate.0),
                )
                .help("rates are in requests/s (tasks/s for agents), e.g. `rates 0.5 1 2 4`"),
            );
        } else if i > 0 && rates[i - 1].0 >= rate.0 {
            issues.push(
                Issue::new(
                    At::Arg(i),
                    format!(
                        "rates must be strictly increasing, but {} follows {}",
                        rate.0,
                        rates[i - 1].0
                    ),
                )
                .help("list each rate once, smallest first, e.g. `rates 1 2 4 8`"),
            );
        }
    }
    issues
}

/// `search min= max= precision= confidence=`: 0 < min < max, precision in
/// (0, 1), confidence in [50%, 99.9%].
pub(crate) fn check_search(
    min: RatePerS,
    max: RatePerS,
    precision: Fraction,
    confidence: Fraction,
) -> Vec<Issue> {
    let mut issues = Vec::new();
    if !min.0.is_finite() || min.0 <= 0.0 {
        issues.push(Issue::new(
            prop("min"),
            format!(
                "search `min` must be greater than 0 requests/s, got {}",
                min.0
            ),
        ).help("the search looks for Cr_open between `min` and `max` requests/s, e.g. `search min=0.5 max=64`"));
    }
    if !max.0.is_finite() || max.0 <= min.0 {
        issues.push(
            Issue::new(prop("max"), format!("search `max` ({}) must be greater than `min` ({})", max.0, min.0))
                .help("the search looks for Cr_open between `min` and `max` requests/s, e.g. `search min=0.5 max=64`"),
        );
    }
    if !(precision.0 > 0.0 && precision.0 < 1.0) {
        issues.push(
            Issue::new(prop("precision"), format!("search `precision` must be between 0% and 100% (exclusive), got {}", precision.0))
                .help("the search stops when Cr_open's range is within this much of its estimate, e.g. precision=\"5%\""),
        );
    }
    if !(0.5..=0.999).contains(&confidence.0) {
        issues.push(
            Issue::new(
                prop("confidence"),
                format!(
                    "search `confidence` must be between 50% and 99.9%, got {}%",
                    crate::format::significant(confidence.0 * 100.0)
                ),
            )
            .help("the confidence of Cr_open's range, e.g. confidence=\"90%\" (the default)"),
        );
    }
    issues
}

/// The most multipliers `frontier` takes: each may cost a few runs per
/// latency clause, and a negotiation needs a handful of bounds, not a sweep.
pub(crate) const FRONTIER_MAX_MULTIPLIERS: usize = 8;

/// `frontier 0.5 1.5`: 1 to [`FRONTIER_MAX_MULTIPLIERS`] finite multipliers,
/// each greater than 0, none equal to 1 (the declared bound, which the
/// search brackets already), none twice.
pub(crate) fn check_frontier(multipliers: &[f64]) -> Vec<Issue> {
    let help = "each multiplier scales every latency clause's bound: `frontier 0.5 1.5` measures the frontier precisely at half and one and a half times each bound";
    let mut issues = Vec::new();
    if multipliers.is_empty() {
        issues.push(Issue::new(At::Node, "`frontier` needs at least one multiplier").help(help));
    }
    if multipliers.len() > FRONTIER_MAX_MULTIPLIERS {
        issues.push(
            Issue::new(
                At::Arg(FRONTIER_MAX_MULTIPLIERS),
                format!(
                    "`frontier` takes at most {FRONTIER_MAX_MULTIPLIERS} multipliers, got {}",
                    multipliers.len()
                ),
            )
            .help("each multiplier may cost several runs per latency clause; keep the bounds you would negotiate, e.g. `frontier 0.5 0.75 1.5 2`"),
        );
    }
    for (i, &m) in multipliers.iter().enumerate() {
        if !m.is_finite() || m <= 0.0 {
            issues.push(
                Issue::new(
                    At::Arg(i),
                    format!("frontier multipliers must be greater than 0, got {m}"),
                )
                .help(help),
            );
        } else if m == 1.0 {
            issues.push(
                Issue::new(
                    At::Arg(i),
                    "a multiplier of 1 is the declared bound itself, which the search already brackets",
                )
                .help("ask for bounds around it, e.g. `frontier 0.75 1.5`"),
            );
        } else if multipliers[..i].contains(&m) {
            issues.push(
                Issue::new(At::Arg(i), format!("the multiplier {m} is listed twice"))
                    .help("list each multiplier once"),
            );
        }
    }
    issues
}

/// `frontier` beside an explicit grid: the phase picks rates, a grid lists them.
pub(crate) fn frontier_needs_search() -> Issue {
    Issue::new(
        At::Node,
        "`frontier` adds rates to a `search`; a grid of `rates` runs only the rates it lists",
    )
    .help("frontier needs `search`; with a grid, add rates where you want the curve dense, e.g. `rates 1 2 3 4 6 8`")
}

/// `knee fraction= upper=`: 0 < fraction ≤ upper ≤ 1.
pub(crate) fn check_knee(knee: &KneeSpec) -> Vec<Issue> {
    let mut issues = Vec::new();
    let help = "Cr_closed spans the levels reaching `fraction` and `upper` of the peak throughput, e.g. `knee fraction=0.9 upper=0.97`";
    if !(knee.lower > 0.0 && knee.lower <= 1.0) {
        issues.push(
            Issue::new(
                prop("fraction"),
                format!("knee `fraction` must be in (0, 1], got {}", knee.lower),
            )
            .help(help),
        );
    }
    if !(knee.upper > 0.0 && knee.upper <= 1.0) {
        issues.push(
            Issue::new(
                prop("upper"),
                format!("knee `upper` must be in (0, 1], got {}", knee.upper),
            )
            .help(help),
        );
    } else if knee.upper < knee.lower {
        issues.push(
            Issue::new(
                prop("upper"),
                format!(
                    "knee `upper` ({}) is less than `fraction` ({})",
                    knee.upper, knee.lower
                ),
            )
            .help(help),
        );
    }
    issues
}

/// A measured-phase stop rule must measure something.
pub(crate) fn check_stop(stop: &StopRule) -> Vec<Issue> {
    match stop {
        StopRule::Duration(d) if d.is_zero() => {
            vec![
                Issue::new(At::Value, "the measured `duration` must be greater than 0")
                    .help("e.g. `duration \"60s\"`"),
            ]
        }
        StopRule::Requests(0) => {
            vec![Issue::new(At::Value, "`requests` must be at least 1").help("e.g. `requests 400`")]
        }
        _ => Vec::new(),
    }
}

/// `arrival gamma cv=`: a positive coefficient of variation.
pub(crate) fn check_arrival(arrival: &Arrival) -> Vec<Issue> {
    match arrival {
        Arrival::Gamma { cv } if !(cv.is_finite() && *cv > 0.0) => vec![
            Issue::new(prop("cv"), format!("gamma `cv` must be greater than 0, got {cv}"))
                .help("cv is the coefficient of variation of inter-arrival gaps: 1 is Poisson, >1 is bursty"),
        ],
        _ => Vec::new(),
    }
}

/// A fraction in [0, 1] (fault rates, error-rate bounds).
pub(crate) fn check_fraction(at: At, what: &str, value: Fraction) -> Vec<Issue> {
    if value.0.is_finite() && (0.0..=1.0).contains(&value.0) {
        Vec::new()
    } else {
        vec![
            Issue::new(
                at,
                format!("{what} must be between 0% and 100%, got {}", value.0),
            )
            .help(units::PERCENT_HELP),
        ]
    }
}

/// `headroom`: in [0, 1), since 100% headroom leaves no capacity to use.
pub(crate) fn check_headroom(headroom: Fraction) -> Vec<Issue> {
    if headroom.0.is_finite() && (0.0..1.0).contains(&headroom.0) {
        Vec::new()
    } else {
        vec![
            Issue::new(
                At::Value,
                format!(
                    "`headroom` must be at least 0% and below 100%, got {}",
                    headroom.0
                ),
            )
            .help("headroom is the share of Cr kept in reserve, e.g. \"30%\""),
        ]
    }
}

/// A throughput or rate target must be positive.
pub(crate) fn check_positive(at: At, what: &str, value: f64) -> Vec<Issue> {
    if value.is_finite() && value > 0.0 {
        Vec::new()
    } else {
        vec![
            Issue::new(at, format!("{what} must be greater than 0, got {value}"))
                .help("a target of 0 needs no replicas; give the demand to size for"),
        ]
    }
}

/// An SLO latency limit of zero can never hold.
pub(crate) fn check_latency_limit(at: At, limit: Duration) -> Vec<Issue> {
    if limit.is_zero() {
        vec![
            Issue::new(at, "a latency limit must be greater than 0").help("e.g. `ttft p99=\"1s\"`"),
        ]
    } else {
        Vec::new()
    }
}

/// A percentile in a model built in code (the parser enforces the same on keys).
pub(crate) fn check_stat(at: At, stat: Stat) -> Vec<Issue> {
    match stat {
        Stat::Percentile(p) if !(p > 0.0 && p < 100.0) => vec![
            Issue::new(at, format!("percentile {p} is outside (0, 100)")).help(units::STAT_HELP),
        ],
        _ => Vec::new(),
    }
}

/// Names become file names (`<target>--<workload>.md`) and run ids.
pub(crate) fn check_name(kind: &str, name: &str) -> Vec<Issue> {
    if name.trim().is_empty() {
        vec![
            Issue::new(At::Arg(0), format!("a {kind} name must not be empty"))
                .help("names label cards and runs, e.g. `target \"h100-vllm\"`"),
        ]
    } else if name.contains(['/', '\\']) || name.chars().any(char::is_control) {
        vec![
            Issue::new(At::Arg(0), format!("{kind} name `{name}` contains `/`, `\\` or a control character"))
                .help("names become file names of cards and run ids; use letters, digits, `-`, `_` and `.`"),
        ]
    } else {
        Vec::new()
    }
}

/// `shared-prefix tokens= groups=`: both at least 1.
pub(crate) fn check_shared_prefix(prefix: &SharedPrefix) -> Vec<Issue> {
    let mut issues = Vec::new();
    if prefix.tokens == 0 {
        issues.push(Issue::new(
            prop("tokens"),
            "shared-prefix `tokens` must be at least 1",
        ).help("`tokens` is the length of the common prefix; leave `shared-prefix` out if there is none"));
    }
    if prefix.groups == 0 {
        issues.push(
            Issue::new(prop("groups"), "shared-prefix `groups` must be at least 1")
                .help("`groups` is the number of distinct prefixes, e.g. one per system prompt"),
        );
    }
    issues
}
