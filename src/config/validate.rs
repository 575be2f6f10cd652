//! Semantic rules of an experiment, written once over the typed model.
//!
//! Each check looks at the values of one KDL node (a distribution, a level
//! list, a `search` line) and returns [`Issue`]s that say *which part* of the
//! node is wrong ([`At`]), not where it is in a file. The decoder maps that to
//! a span; [`validate`] (for experiments built in code) prefixes the context
//! instead. So a file and an experiment built in Rust obey the same rules.

use std::collections::HashMap;
use std::time::Duration;

use super::diag::{ConfigDiagnostic, ConfigError, backticked, did_you_mean};
use super::model::*;
use crate::format::duration_literal;

/// Which part of the checked node a problem is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum At {
    /// The node as a whole (its name).
    Node,
    /// The node's last argument (the value of `fixed 3000`, `duration "60s"`).
    Value,
    /// The i-th argument.
    Arg(usize),
    /// The value of a property.
    Prop(String),
    /// The i-th child node: its argument (`None`) or one of its properties.
    Child(usize, Option<String>),
}

/// A broken rule: a message saying what was expected, a help line, and where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Issue {
    pub message: String,
    pub help: Option<String>,
    pub at: At,
}

impl Issue {
    fn new(at: At, message: impl Into<String>) -> Self {
        Issue {
            message: message.into(),
            help: None,
            at,
        }
    }
    fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

fn prop(name: &str) -> At {
    At::Prop(name.to_string())
}

/// What a distribution's values measure, for messages and for which values
/// carry a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quantity {
    /// Token counts (input, output, context growth).
    Tokens,
    /// Times, stored in seconds, written as durations.
    Seconds,
    /// Plain counts (turns, steps, fan-out).
    Count,
}

impl Quantity {
    pub(crate) fn show(self, value: f64) -> String {
        match self {
            Quantity::Seconds => format!("\"{}\"", duration_literal(value)),
            Quantity::Tokens | Quantity::Count => format!("{value}"),
        }
    }
}

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

/// `search min= max= precision=`: 0 < min < max, precision in (0, 1).
pub(crate) fn check_search(min: RatePerS, max: RatePerS, precision: Fraction) -> Vec<Issue> {
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
                .help("the search stops when the pass/fail bracket is this narrow relative to the rate, e.g. precision=\"5%\""),
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
            .help(super::units::PERCENT_HELP),
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
            Issue::new(at, format!("percentile {p} is outside (0, 100)"))
                .help(super::units::STAT_HELP),
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

/// `sim PRESET`: one of the built-in presets.
pub(crate) fn check_preset(preset: &str) -> Vec<Issue> {
    let names = crate::sim::presets::names();
    if names.contains(&preset) {
        return Vec::new();
    }
    let known = format!("known presets: {}", backticked(&names));
    let help = match did_you_mean(preset, &names) {
        Some(near) => format!("did you mean `{near}`? {known}"),
        None => known,
    };
    vec![Issue::new(At::Arg(0), format!("unknown sim preset `{preset}`")).help(help)]
}

// ------------------------------------------------------------ sim knobs

/// Most engines one `sim` target may run behind its endpoint.
pub(crate) const MAX_SIM_REPLICAS: u64 = 64;

/// A `sim` knob that counts sequences, tokens or GPUs: at least 1.
pub(crate) fn check_sim_count(knob: &str, value: u64) -> Vec<Issue> {
    if value >= 1 {
        return Vec::new();
    }
    vec![
        Issue::new(
            At::Value,
            format!("`{knob}` must be at least 1, got {value}"),
        )
        .help(format!("leave `{knob}` out to keep the preset's value")),
    ]
}

/// `replicas N`: 1 to [`MAX_SIM_REPLICAS`] engines.
pub(crate) fn check_sim_replicas(replicas: u64) -> Vec<Issue> {
    if replicas == 0 {
        vec![
            Issue::new(At::Value, "`replicas` must be at least 1, got 0").help(
                "a sim target is one engine unless told otherwise; leave `replicas` out for one",
            ),
        ]
    } else if replicas > MAX_SIM_REPLICAS {
        vec![
            Issue::new(
                At::Value,
                format!("`replicas` must be at most {MAX_SIM_REPLICAS}, got {replicas}"),
            )
            .help(format!("{MAX_SIM_REPLICAS} engines are plenty to see how a router spreads the load; for a fleet, measure one replica and let `sizing` count the replicas")),
        ]
    } else {
        Vec::new()
    }
}

/// `compute-efficiency`, `memory-efficiency`, `gpu-memory-utilization`:
/// shares in (0, 1].
pub(crate) fn check_sim_share(knob: &str, value: f64) -> Vec<Issue> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        return Vec::new();
    }
    let meaning = match knob {
        "compute-efficiency" => "the achieved share of the GPU's peak FLOP/s",
        "memory-efficiency" => "the achieved share of the GPU's peak memory bandwidth",
        _ => "the share of GPU memory the engine may take for weights and KV cache",
    };
    // 95 was meant as 95%; 1.5 is a share beyond the peak, not 1.5%.
    let help = if (5.0..=100.0).contains(&value) {
        format!(
            "`{knob}` is {meaning}, a number up to 1: for {value}% write {}",
            value / 100.0
        )
    } else if value > 1.0 {
        format!("`{knob}` is {meaning}: it cannot exceed 1")
    } else {
        format!("`{knob}` is {meaning}, a number up to 1, e.g. 0.5")
    };
    vec![
        Issue::new(
            At::Value,
            format!("`{knob}` must be greater than 0 and at most 1, got {value}"),
        )
        .help(help),
    ]
}

/// `router=NAME` of `replicas` naming no router.
pub(crate) fn unknown_router_issue(name: &str) -> Issue {
    let names = SimRouter::ALL.map(SimRouter::as_str);
    let known = format!("routers: {}", backticked(&names));
    let help = match did_you_mean(name, &names) {
        Some(near) => format!("did you mean `{near}`? {known}"),
        None => known,
    };
    Issue::new(prop("router"), format!("unknown router `{name}`")).help(help)
}

/// `network-overhead` on a sim that runs in real time.
pub(crate) fn network_overhead_without_virtual() -> Issue {
    Issue::new(At::Value, "`network-overhead` needs `virtual #true`").help(
        "it is added only on the engine's own clock; in real time the requests cross the real network; add `virtual #true` or remove the line",
    )
}

/// Every range of a [`SimServing`], for experiments built in code.
pub(crate) fn check_sim_serving(serving: &SimServing) -> Vec<Issue> {
    let mut issues = Vec::new();
    let counts = [
        ("max-num-seqs", serving.max_num_seqs.map(u64::from)),
        (
            "max-batched-tokens",
            serving.max_batched_tokens.map(u64::from),
        ),
        ("kv-cache-tokens", serving.kv_cache_tokens),
        ("tensor-parallel", serving.tensor_parallel.map(u64::from)),
        ("tokens-per-event", serving.tokens_per_event.map(u64::from)),
    ];
    for (knob, value) in counts {
        if let Some(value) = value {
            issues.extend(check_sim_count(knob, value));
        }
    }
    issues.extend(check_sim_replicas(u64::from(serving.replicas)));
    if let Some(dist) = &serving.reasoning_tokens {
        issues.extend(check_dist(dist, Quantity::Tokens));
    }
    let shares = [
        ("gpu-memory-utilization", serving.gpu_memory_utilization),
        ("compute-efficiency", serving.compute_efficiency),
        ("memory-efficiency", serving.memory_efficiency),
    ];
    for (knob, value) in shares {
        if let Some(value) = value {
            issues.extend(check_sim_share(knob, value));
        }
    }
    if !serving.virtual_time && !serving.network_overhead.is_zero() {
        issues.push(network_overhead_without_virtual());
    }
    issues
}

/// `endpoint`: an http(s) base URL with a host.
pub(crate) fn check_endpoint(url: &str) -> Vec<Issue> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let host_ok = rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty() && !host.contains(char::is_whitespace)
    });
    if host_ok {
        Vec::new()
    } else {
        vec![
            Issue::new(At::Arg(0), format!("`{url}` is not an http(s) URL"))
                .help("give the OpenAI-compatible base URL, e.g. \"http://127.0.0.1:8000/v1\""),
        ]
    }
}

/// `api-key-env`: the *name* of an environment variable, never a key.
pub(crate) fn check_api_key_env(name: &str) -> Vec<Issue> {
    const KEY_HELP: &str = "give the name of the environment variable, e.g. OPENAI_API_KEY; the key itself never belongs in an experiment file";
    const KEY_PREFIXES: &[&str] = &["sk-", "sk_", "hf_", "gsk_", "xai-", "Bearer "];
    let has_digit = name.chars().any(|c| c.is_ascii_digit());
    let has_lower = name.chars().any(|c| c.is_ascii_lowercase());
    // Variable names are words joined by `_` (OPENAI_API_KEY); a long run of
    // lowercase letters and digits without one looks like a token.
    let looks_random = name.len() >= 20 && has_digit && has_lower && !name.contains('_');
    if KEY_PREFIXES.iter().any(|p| name.starts_with(p)) || looks_random {
        return vec![
            Issue::new(
                At::Arg(0),
                "this looks like an API key, not the name of an environment variable",
            )
            .help(KEY_HELP),
        ];
    }
    let valid_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid_name {
        Vec::new()
    } else {
        vec![
            Issue::new(
                At::Arg(0),
                format!("`{name}` is not a valid environment variable name"),
            )
            .help(KEY_HELP),
        ]
    }
}

/// `timeout`: a per-request timeout of zero would fail every request.
pub(crate) fn check_timeout(timeout: Duration) -> Vec<Issue> {
    if timeout.is_zero() {
        vec![
            Issue::new(At::Value, "`timeout` must be greater than 0")
                .help("e.g. `timeout \"120s\"`"),
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

// ------------------------------------------------------------ mixes

const WEIGHT_HELP: &str = "weights are relative: a class's share of arrivals is its weight over the sum of the mix's weights (70 20 10 = 70%, 20%, 10%); leave a class out instead of giving it weight 0";

/// `workload=NAME` of a mix class naming no workload of the experiment.
pub(crate) fn unknown_workload_issue(name: &str, known: &[&str]) -> Issue {
    let help = if known.is_empty() {
        "this experiment defines no `workload`; a class draws its requests from one".to_string()
    } else {
        match did_you_mean(name, known) {
            Some(near) => format!(
                "did you mean `{near}`? workloads defined: {}",
                backticked(known)
            ),
            None => format!("workloads defined: {}", backticked(known)),
        }
    };
    Issue::new(
        prop("workload"),
        format!("there is no workload named `{name}`"),
    )
    .help(help)
}

/// `mix=NAME` of a sizing target naming no mix of the experiment.
pub(crate) fn unknown_mix_issue(name: &str, known: &[&str]) -> Issue {
    let help = if known.is_empty() {
        "this experiment defines no `mix`; add one, e.g. `mix \"production\" { class \"chat\" workload=\"chat\" slo=\"interactive\" weight=1 }`".to_string()
    } else {
        match did_you_mean(name, known) {
            Some(near) => format!(
                "did you mean `{near}`? mixes defined: {}",
                backticked(known)
            ),
            None => format!("mixes defined: {}", backticked(known)),
        }
    };
    Issue::new(prop("mix"), format!("there is no mix named `{name}`")).help(help)
}

/// A class's weight, on its `class` line or in a `weights` setting: > 0.
pub(crate) fn check_class_weight(at: At, weight: f64) -> Vec<Issue> {
    if weight.is_finite() && weight > 0.0 {
        Vec::new()
    } else {
        vec![
            Issue::new(at, format!("a class's weight must be > 0, got {weight}")).help(WEIGHT_HELP),
        ]
    }
}

/// `model="..."` of a class: the model id its calls send, never empty.
pub(crate) fn check_class_model(model: &str) -> Vec<Issue> {
    if model.trim().is_empty() {
        vec![
            Issue::new(prop("model"), "a class's `model` must not be empty")
                .help("give the model id its calls send, e.g. a LoRA adapter's name; leave `model=` out to send the target's model"),
        ]
    } else {
        Vec::new()
    }
}

/// One `class` line against the experiment's workloads and SLOs: its name,
/// the workload and SLO it names, its weight and model.
pub(crate) fn check_mix_class(class: &MixClass, workloads: &[&str], slos: &[&str]) -> Vec<Issue> {
    let mut issues = check_name("class", &class.name);
    if !workloads.contains(&class.workload.as_str()) {
        issues.push(unknown_workload_issue(&class.workload, workloads));
    }
    if let Some(slo) = &class.slo {
        if !slos.contains(&slo.as_str()) {
            issues.push(unknown_slo_issue(slo, slos));
        }
    }
    issues.extend(check_class_weight(prop("weight"), class.weight));
    if let Some(model) = &class.model {
        issues.extend(check_class_model(model));
    }
    issues
}

/// A `weights` line: exactly one number per class (in class order), each > 0.
pub(crate) fn check_weight_setting(weights: &[f64], classes: &[&str]) -> Vec<Issue> {
    let mut issues = Vec::new();
    if weights.len() != classes.len() {
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        issues.push(
            Issue::new(
                At::Node,
                format!(
                    "`weights` gives {} but the mix has {}",
                    count(weights.len(), "weight", "weights"),
                    count(classes.len(), "class", "classes"),
                ),
            )
            .help(format!(
                "a weight setting lists one weight per class, in class order: {}",
                backticked(classes)
            )),
        );
    }
    for (i, weight) in weights.iter().enumerate() {
        issues.extend(check_class_weight(At::Arg(i), *weight));
    }
    issues
}

/// A mix without a single `class`.
pub(crate) fn mix_without_classes(mix: &str) -> Issue {
    Issue::new(At::Node, format!("mix `{mix}` has no `class`")).help(
        "a mix serves its classes together; add at least one, e.g. `class \"chat\" workload=\"chat\" slo=\"interactive\" weight=70`",
    )
}

/// A mix named like a workload: both cards would write the same run ids.
pub(crate) fn mix_named_like_a_workload(mix: &str) -> Issue {
    Issue::new(
        At::Arg(0),
        format!("mix `{mix}` has the same name as a workload"),
    )
    .help(format!(
        "a mix's card and a workload's card share run ids (`<target>--{mix}--c0008`); give the mix its own name, e.g. `{mix}-mix`"
    ))
}

/// Why a class needs its own SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SloNeed<'a> {
    /// The experiment has an `open` block: Cr_open of the mix is measured.
    Open,
    /// A sizing target sizes this mix, from its Cr_open.
    Sizing { mix: &'a str },
}

/// A class without `slo=` where Cr_open of its mix is needed.
pub(crate) fn class_needs_slo(class: &str, need: SloNeed<'_>, slos: &[&str]) -> Issue {
    let message = match need {
        SloNeed::Open => {
            format!("class `{class}` has no `slo=`: Cr_open of a mix needs every class's own SLO")
        }
        SloNeed::Sizing { mix } => format!(
            "class `{class}` has no `slo=`: sizing with mix `{mix}` uses its Cr_open, which needs every class's own SLO"
        ),
    };
    let why = match need {
        SloNeed::Open => {
            "the `open` block measures the highest rate at which every class meets its SLO"
        }
        SloNeed::Sizing { .. } => {
            "a mix is sized from the highest rate at which every class meets its SLO"
        }
    };
    let help = if slos.is_empty() {
        format!("{why}; define an `slo` and name it with `slo=` on the class")
    } else {
        format!(
            "{why}; add `slo=` to the class, one of {}",
            backticked(slos)
        )
    };
    Issue::new(At::Arg(0), message).help(help)
}

/// A mix in an experiment whose `open` block replays an arrival trace.
pub(crate) fn mix_with_trace(mix: &str) -> Issue {
    Issue::new(
        At::Arg(0),
        format!("mix `{mix}` cannot be measured with `arrival trace`: a trace brings its own requests"),
    )
    .help("a mix draws each arrival's class from its weights, a trace replays recorded requests; use `arrival poisson` (or `constant`, `gamma cv=`) with the mix, or replay the trace in an experiment without mixes")
}

/// A mix in an experiment whose `open` block asks for the SLO frontier.
pub(crate) fn mix_with_frontier(mix: &str) -> Issue {
    Issue::new(
        At::Arg(0),
        format!("mix `{mix}` cannot be measured with `frontier` in `open`: the SLO frontier is not supported for mixes yet"),
    )
    .help("remove `frontier` from `open`, or measure the frontier of each workload in an experiment without mixes")
}

// ------------------------------------------------------------ whole experiments

/// Semantic validation of an experiment built in code (no spans): every rule
/// the parser applies to a file, reported all at once.
pub fn validate(experiment: &Experiment) -> Result<(), ConfigError> {
    let mut problems: Vec<ConfigDiagnostic> = Vec::new();
    let mut report = |context: String, issues: Vec<Issue>| {
        for issue in issues {
            problems.push(ConfigDiagnostic::detached(
                format!("{context}: {}", issue.message),
                issue.help,
            ));
        }
    };

    if experiment.targets.is_empty() {
        report(
            "experiment".into(),
            vec![
                Issue::new(At::Node, "no `target`: there is nothing to measure against")
                    .help("add a target with an `endpoint` or a `sim` preset"),
            ],
        );
    }
    if experiment.workloads.is_empty() {
        report(
            "experiment".into(),
            vec![
                Issue::new(At::Node, "no `workload`: there are no requests to send")
                    .help("add a workload with `input-tokens` and `output-tokens` distributions"),
            ],
        );
    }
    if experiment.closed.is_none() && experiment.open.is_none() {
        report(
            "experiment".into(),
            vec![
                Issue::new(
                    At::Node,
                    "neither `closed` nor `open`: there is nothing to measure",
                )
                .help("add a closed sweep (CrossP, Cr_closed) and/or open-loop runs (Cr_open)"),
            ],
        );
    }
    for (kind, names) in [
        (
            "target",
            experiment
                .targets
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
        ),
        (
            "workload",
            experiment
                .workloads
                .iter()
                .map(|w| w.name.as_str())
                .collect(),
        ),
        (
            "slo",
            experiment.slos.iter().map(|s| s.name.as_str()).collect(),
        ),
        (
            "mix",
            experiment.mixes.iter().map(|m| m.name.as_str()).collect(),
        ),
    ] {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for name in names {
            *seen.entry(name).or_default() += 1;
            if seen[name] == 2 {
                report(
                    format!("{kind} `{name}`"),
                    vec![
                        Issue::new(
                            At::Arg(0),
                            format!("there is more than one {kind} named `{name}`"),
                        )
                        .help(format!(
                            "every {kind} needs its own name; rename one of them"
                        )),
                    ],
                );
            }
            report(format!("{kind} `{name}`"), check_name(kind, name));
        }
    }

    for target in &experiment.targets {
        let cx = format!("target `{}`", target.name);
        match &target.kind {
            TargetKind::Endpoint { base_url } => report(cx.clone(), check_endpoint(base_url)),
            TargetKind::Sim {
                preset,
                faults,
                serving,
            } => {
                report(cx.clone(), check_preset(preset));
                report(
                    cx.clone(),
                    check_fraction(prop("fail-rate"), "`fail-rate`", faults.fail_rate),
                );
                report(
                    cx.clone(),
                    check_fraction(prop("cut-rate"), "`cut-rate`", faults.cut_rate),
                );
                report(format!("{cx}, sim"), check_sim_serving(serving));
            }
        }
        if let Some(env) = &target.api_key_env {
            report(format!("{cx}, api-key-env"), check_api_key_env(env));
        }
        report(cx.clone(), check_timeout(target.timeout));
        if let Some(cost) = &target.cost {
            if !(cost.per_hour.is_finite() && cost.per_hour >= 0.0) {
                report(
                    cx.clone(),
                    vec![
                        Issue::new(
                            At::Value,
                            format!("`cost-per-hour` must be 0 or more, got {}", cost.per_hour),
                        )
                        .help("the price of one replica per hour"),
                    ],
                );
            }
        }
    }

    for workload in &experiment.workloads {
        let cx = format!("workload `{}`", workload.name);
        report(
            format!("{cx}, input-tokens"),
            check_dist(&workload.input_tokens, Quantity::Tokens),
        );
        report(
            format!("{cx}, output-tokens"),
            check_dist(&workload.output_tokens, Quantity::Tokens),
        );
        if let Some(prefix) = &workload.shared_prefix {
            report(format!("{cx}, shared-prefix"), check_shared_prefix(prefix));
        }
        if let Some(conversation) = &workload.conversation {
            report(
                format!("{cx}, conversation turns"),
                check_dist(&conversation.turns, Quantity::Count),
            );
            report(
                format!("{cx}, conversation think-time"),
                check_dist(&conversation.think_time, Quantity::Seconds),
            );
        }
        if let Some(agent) = &workload.agent {
            report(
                format!("{cx}, agent steps"),
                check_dist(&agent.steps, Quantity::Count),
            );
            report(
                format!("{cx}, agent fan-out"),
                check_dist(&agent.fan_out, Quantity::Count),
            );
            report(
                format!("{cx}, agent tool-time"),
                check_dist(&agent.tool_time, Quantity::Seconds),
            );
            report(
                format!("{cx}, agent context-growth"),
                check_dist(&agent.context_growth, Quantity::Tokens),
            );
        }
        if workload.conversation.is_some() && workload.agent.is_some() {
            report(
                cx.clone(),
                vec![
                    Issue::new(
                        At::Node,
                        "a workload is either a `conversation` or an `agent`, not both",
                    )
                    .help("make two workloads to measure both"),
                ],
            );
        }
    }

    for slo in &experiment.slos {
        let cx = format!("slo `{}`", slo.name);
        if slo.clauses.is_empty() {
            report(
                cx.clone(),
                vec![
                    Issue::new(At::Node, "an SLO needs at least one clause")
                        .help("e.g. `ttft p99=\"1s\"`"),
                ],
            );
        }
        for clause in &slo.clauses {
            match clause {
                SloClause::Latency {
                    metric,
                    stat,
                    limit,
                } => {
                    let cx = format!("{cx}, {}", metric.as_str());
                    report(cx.clone(), check_stat(At::Node, *stat));
                    report(cx, check_latency_limit(At::Node, *limit));
                }
                SloClause::ErrorRate { max } => {
                    report(
                        cx.clone(),
                        check_fraction(prop("max"), "`error-rate max`", *max),
                    );
                }
            }
        }
    }

    let workload_names: Vec<&str> = experiment
        .workloads
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    let slo_names: Vec<&str> = experiment.slos.iter().map(|s| s.name.as_str()).collect();
    let sized_mixes: Vec<&str> = experiment
        .sizing
        .iter()
        .flat_map(|s| &s.targets)
        .filter_map(|t| match t {
            SizingTarget::MixRps { mix, .. } => Some(mix.as_str()),
            _ => None,
        })
        .collect();
    let open = experiment.open.as_ref();
    for mix in &experiment.mixes {
        let cx = format!("mix `{}`", mix.name);
        if workload_names.contains(&mix.name.as_str()) {
            report(cx.clone(), vec![mix_named_like_a_workload(&mix.name)]);
        }
        if mix.classes.is_empty() {
            report(cx.clone(), vec![mix_without_classes(&mix.name)]);
        }
        if open.is_some_and(|o| o.trace.is_some() || o.arrival == Arrival::Trace) {
            report(cx.clone(), vec![mix_with_trace(&mix.name)]);
        }
        if open.is_some_and(|o| !o.frontier.is_empty()) {
            report(cx.clone(), vec![mix_with_frontier(&mix.name)]);
        }
        let need = if open.is_some() {
            Some(SloNeed::Open)
        } else if sized_mixes.contains(&mix.name.as_str()) {
            Some(SloNeed::Sizing { mix: &mix.name })
        } else {
            None
        };
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for class in &mix.classes {
            let class_cx = format!("{cx}, class `{}`", class.name);
            *seen.entry(class.name.as_str()).or_default() += 1;
            if seen[class.name.as_str()] == 2 {
                report(
                    class_cx.clone(),
                    vec![
                        Issue::new(
                            At::Arg(0),
                            format!("there is more than one class named `{}`", class.name),
                        )
                        .help("every class of a mix needs its own name; rename one of them"),
                    ],
                );
            }
            report(
                class_cx.clone(),
                check_mix_class(class, &workload_names, &slo_names),
            );
            if let (None, Some(need)) = (&class.slo, need) {
                report(
                    class_cx,
                    vec![class_needs_slo(&class.name, need, &slo_names)],
                );
            }
        }
        let class_names: Vec<&str> = mix.classes.iter().map(|c| c.name.as_str()).collect();
        for (i, setting) in mix.weight_settings.iter().enumerate() {
            report(
                format!("{cx}, weights #{}", i + 1),
                check_weight_setting(setting, &class_names),
            );
        }
    }

    if let Some(closed) = &experiment.closed {
        report("closed, concurrency".into(), check_levels(&closed.levels));
        report("closed".into(), check_stop(&closed.stop));
        report(
            "closed, crossp".into(),
            check_stat(prop("stat"), closed.crossp.stat),
        );
        report("closed, knee".into(), check_knee(&closed.knee));
    }
    if let Some(open) = &experiment.open {
        report("open, arrival".into(), check_arrival(&open.arrival));
        match &open.rates {
            RateSelection::Search {
                min,
                max,
                precision,
            } => report("open, search".into(), check_search(*min, *max, *precision)),
            RateSelection::Grid { rates } => report("open, rates".into(), check_rate_grid(rates)),
        }
        report("open".into(), check_stop(&open.stop));
        if !open.frontier.is_empty() {
            report("open, frontier".into(), check_frontier(&open.frontier));
            if matches!(open.rates, RateSelection::Grid { .. }) {
                report("open, frontier".into(), vec![frontier_needs_search()]);
            }
        }
    }
    if let Some(sizing) = &experiment.sizing {
        if sizing.targets.is_empty() {
            report(
                "sizing".into(),
                vec![
                    Issue::new(At::Node, "`sizing` needs at least one `target`").help(
                        "e.g. a target of 150 requests/s under an SLO, or 500000 output tokens/s",
                    ),
                ],
            );
        }
        for target in &sizing.targets {
            match target {
                SizingTarget::Rps { rps, slo } => {
                    report(
                        "sizing, target".into(),
                        check_positive(prop("rps"), "`rps`", rps.0),
                    );
                    if experiment.slo(slo).is_none() {
                        let names: Vec<&str> =
                            experiment.slos.iter().map(|s| s.name.as_str()).collect();
                        report(
                            "sizing, target".into(),
                            vec![unknown_slo_issue(slo, &names)],
                        );
                    }
                }
                SizingTarget::MixRps { rps, mix } => {
                    report(
                        "sizing, target".into(),
                        check_positive(prop("rps"), "`rps`", rps.0),
                    );
                    if experiment.mix(mix).is_none() {
                        let names: Vec<&str> =
                            experiment.mixes.iter().map(|m| m.name.as_str()).collect();
                        report(
                            "sizing, target".into(),
                            vec![unknown_mix_issue(mix, &names)],
                        );
                    }
                }
                SizingTarget::OutputTokensPerS { tokens_per_s } => report(
                    "sizing, target".into(),
                    check_positive(
                        prop("output-tokens-per-s"),
                        "`output-tokens-per-s`",
                        *tokens_per_s,
                    ),
                ),
            }
        }
        report("sizing".into(), check_headroom(sizing.headroom));
    }

    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            origin: format!("experiment \"{}\"", experiment.name),
            diagnostics: problems,
        })
    }
}

/// `slo=NAME` naming no SLO of the experiment.
pub(crate) fn unknown_slo_issue(name: &str, known: &[&str]) -> Issue {
    let help = if known.is_empty() {
        "this experiment defines no `slo`; add one, e.g. `slo \"interactive\" { ttft p99=\"1s\" }`"
            .to_string()
    } else {
        match did_you_mean(name, known) {
            Some(near) => format!("did you mean `{near}`? SLOs defined: {}", backticked(known)),
            None => format!("SLOs defined: {}", backticked(known)),
        }
    };
    Issue::new(prop("slo"), format!("there is no SLO named `{name}`")).help(help)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(kind: DistKind) -> Dist {
        Dist {
            kind,
            min: None,
            max: None,
        }
    }

    #[test]
    fn distribution_parameters_out_of_domain() {
        let bad_sigma = check_dist(
            &dist(DistKind::LogNormal {
                median: 600.0,
                sigma: 0.0,
            }),
            Quantity::Tokens,
        );
        assert_eq!(bad_sigma.len(), 1);
        assert_eq!(bad_sigma[0].at, prop("sigma"));
        let bad_stddev = check_dist(
            &dist(DistKind::Normal {
                mean: 100.0,
                stddev: -1.0,
            }),
            Quantity::Tokens,
        );
        assert_eq!(bad_stddev[0].at, prop("stddev"));
        let reversed = check_dist(
            &dist(DistKind::Uniform {
                min: 10.0,
                max: 2.0,
            }),
            Quantity::Tokens,
        );
        assert_eq!(
            reversed[0].message,
            "uniform `max` (2) is less than `min` (10)"
        );
        let zero_mean = check_dist(
            &dist(DistKind::Exponential { mean: 0.0 }),
            Quantity::Seconds,
        );
        assert_eq!(
            zero_mean[0].message,
            "exponential `mean` must be greater than 0, got \"0s\""
        );
        let bad_weight = check_dist(
            &dist(DistKind::Empirical {
                points: vec![(1.0, 1.0), (2.0, 0.0)],
            }),
            Quantity::Tokens,
        );
        assert_eq!(bad_weight[0].at, At::Child(1, Some("weight".into())));
        let empty = check_dist(
            &dist(DistKind::Empirical { points: vec![] }),
            Quantity::Tokens,
        );
        assert_eq!(empty[0].at, At::Node);
    }

    #[test]
    fn clamps_must_be_ordered() {
        let d = Dist {
            kind: DistKind::Fixed { value: 5.0 },
            min: Some(10.0),
            max: Some(1.0),
        };
        let issues = check_dist(&d, Quantity::Tokens);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].at, prop("max"));
        let ok = Dist {
            kind: DistKind::Gamma {
                shape: 2.0,
                scale: 100.0,
            },
            min: Some(1.0),
            max: Some(900.0),
        };
        assert!(check_dist(&ok, Quantity::Tokens).is_empty());
    }

    #[test]
    fn levels_and_grids() {
        assert!(check_levels(&[1, 2, 4, 8]).is_empty());
        assert_eq!(check_levels(&[]).len(), 1);
        let dup = check_levels(&[1, 4, 4, 2]);
        assert_eq!(
            dup.iter().map(|i| i.at.clone()).collect::<Vec<_>>(),
            vec![At::Arg(2), At::Arg(3)]
        );
        assert_eq!(check_levels(&[0, 1])[0].at, At::Arg(0));
        assert!(check_rate_grid(&[RatePerS(0.5), RatePerS(1.0)]).is_empty());
        assert_eq!(
            check_rate_grid(&[RatePerS(2.0), RatePerS(1.0)])[0].at,
            At::Arg(1)
        );
    }

    #[test]
    fn search_bounds() {
        assert!(check_search(RatePerS(0.5), RatePerS(64.0), Fraction(0.05)).is_empty());
        let equal = check_search(RatePerS(8.0), RatePerS(8.0), Fraction(0.05));
        assert_eq!(equal.len(), 1);
        assert_eq!(equal[0].at, prop("max"));
        let zero = check_search(RatePerS(0.0), RatePerS(8.0), Fraction(1.0));
        assert_eq!(zero.len(), 2);
    }

    #[test]
    fn api_key_env_rejects_keys_and_accepts_names() {
        assert!(check_api_key_env("OPENAI_API_KEY").is_empty());
        assert!(check_api_key_env("my_key").is_empty());
        let literal = check_api_key_env("sk-proj-abc123");
        assert!(literal[0].message.contains("looks like an API key"));
        assert!(
            literal[0]
                .help
                .as_deref()
                .unwrap()
                .contains("OPENAI_API_KEY")
        );
        assert!(!check_api_key_env("aB3dE5gH7jK9mN1pQ3sT5vW7yZ").is_empty());
        assert!(!check_api_key_env("0f3a9c1e7b2d4f6a8c0e1b3d5f7a9c2e").is_empty());
        assert!(check_api_key_env("TOGETHER_API_KEY_2").is_empty());
        assert!(check_api_key_env("VLLM_KEY").is_empty());
        assert!(
            check_api_key_env("MY-KEY")[0]
                .message
                .contains("not a valid environment variable name")
        );
    }

    #[test]
    fn endpoints_and_presets() {
        assert!(check_endpoint("http://127.0.0.1:8000/v1").is_empty());
        assert!(check_endpoint("https://api.example.com/v1").is_empty());
        assert!(!check_endpoint("127.0.0.1:8000").is_empty());
        assert!(!check_endpoint("http:///v1").is_empty());
        assert!(check_preset("tiny").is_empty());
        let near = check_preset("h100-llama3-8").remove(0);
        assert!(
            near.help
                .unwrap()
                .starts_with("did you mean `h100-llama3-8b`?")
        );
    }

    #[test]
    fn sim_knob_ranges() {
        assert!(check_sim_serving(&SimServing::default()).is_empty());
        assert!(check_sim_count("max-num-seqs", 1).is_empty());
        assert_eq!(check_sim_count("max-num-seqs", 0)[0].at, At::Value);
        assert!(check_sim_replicas(64).is_empty());
        assert_eq!(check_sim_replicas(0).len(), 1);
        assert!(
            check_sim_replicas(65)[0]
                .help
                .as_deref()
                .unwrap()
                .contains("plenty")
        );
        assert!(check_sim_share("compute-efficiency", 1.0).is_empty());
        let help = |v: f64| {
            check_sim_share("compute-efficiency", v)[0]
                .help
                .clone()
                .unwrap()
        };
        assert!(help(55.0).ends_with("for 55% write 0.55"), "{}", help(55.0));
        assert!(help(1.5).ends_with("it cannot exceed 1"), "{}", help(1.5));
        assert!(help(0.0).ends_with("e.g. 0.5"), "{}", help(0.0));
        assert_eq!(check_sim_share("memory-efficiency", -0.1).len(), 1);
        assert_eq!(
            check_sim_share("gpu-memory-utilization", f64::INFINITY).len(),
            1
        );
        let virtual_overhead = SimServing {
            virtual_time: true,
            network_overhead: Duration::from_millis(1),
            ..SimServing::default()
        };
        assert!(check_sim_serving(&virtual_overhead).is_empty());
        let real_overhead = SimServing {
            virtual_time: false,
            ..virtual_overhead
        };
        assert_eq!(
            check_sim_serving(&real_overhead)[0].message,
            "`network-overhead` needs `virtual #true`"
        );
        assert!(
            unknown_router_issue("least")
                .help
                .unwrap()
                .starts_with("did you mean `least-loaded`?")
        );
    }

    #[test]
    fn mix_weights_and_classes() {
        assert!(check_weight_setting(&[60.0, 20.0, 20.0], &["a", "b", "c"]).is_empty());
        let short = check_weight_setting(&[60.0, 0.0], &["a", "b", "c"]);
        assert_eq!(
            short.iter().map(|i| i.at.clone()).collect::<Vec<_>>(),
            vec![At::Node, At::Arg(1)]
        );
        assert_eq!(
            short[0].message,
            "`weights` gives 2 weights but the mix has 3 classes"
        );
        assert!(short[0].help.as_deref().unwrap().ends_with("`a`, `b`, `c`"));
        assert_eq!(
            check_weight_setting(&[], &["a"])[0].message,
            "`weights` gives 0 weights but the mix has 1 class"
        );
        assert_eq!(check_class_weight(prop("weight"), f64::INFINITY).len(), 1);
        let class = MixClass {
            name: "c".into(),
            span: None,
            workload: "chta".into(),
            slo: Some("fats".into()),
            weight: -1.0,
            model: Some(String::new()),
            priority: Some(-5),
        };
        let issues = check_mix_class(&class, &["chat"], &["fast"]);
        assert_eq!(
            issues.iter().map(|i| i.at.clone()).collect::<Vec<_>>(),
            vec![prop("workload"), prop("slo"), prop("weight"), prop("model")]
        );
        assert!(
            issues[0]
                .help
                .as_deref()
                .unwrap()
                .starts_with("did you mean `chat`?")
        );
        assert!(
            issues[1]
                .help
                .as_deref()
                .unwrap()
                .starts_with("did you mean `fast`?")
        );
        assert_eq!(
            unknown_mix_issue("prod", &[]).help.unwrap(),
            "this experiment defines no `mix`; add one, e.g. `mix \"production\" { class \"chat\" workload=\"chat\" slo=\"interactive\" weight=1 }`"
        );
    }

    #[test]
    fn validate_reports_cross_item_problems() {
        let experiment = Experiment {
            name: "x".into(),
            description: None,
            seed: 0,
            targets: vec![],
            workloads: vec![],
            slos: vec![],
            mixes: vec![],
            closed: None,
            open: None,
            sizing: Some(SizingSpec {
                targets: vec![SizingTarget::Rps {
                    rps: RatePerS(10.0),
                    slo: "fast".into(),
                }],
                headroom: Fraction(1.0),
                spares: 0,
            }),
            base_dir: None,
        };
        let err = validate(&experiment).unwrap_err();
        let messages: Vec<&str> = err.diagnostics().iter().map(|d| d.message()).collect();
        assert_eq!(
            messages,
            vec![
                "experiment: no `target`: there is nothing to measure against",
                "experiment: no `workload`: there are no requests to send",
                "experiment: neither `closed` nor `open`: there is nothing to measure",
                "sizing, target: there is no SLO named `fast`",
                "sizing: `headroom` must be at least 0% and below 100%, got 1",
            ]
        );
        assert_eq!(err.to_string(), "5 errors in experiment \"x\"");
    }
}
