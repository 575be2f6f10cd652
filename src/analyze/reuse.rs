//! Prefix reuse, potential against realized (pure).
//!
//! *Potential*: the share of a run's measured prompt tokens an ideal,
//! unlimited prefix cache would have served, its calls in send order
//! ([`crate::workload::reuse`], kept in the journal's footer). *Realized*:
//! what the server says it served, from either source it gives (both when
//! both):
//! - `usage.prompt_tokens_details.cached_tokens` per call, summed over the
//!   measured successful calls that reported it, over their prompt tokens;
//! - the server's own counters over the measured window: vLLM's
//!   `prefix_cache_hits` / `prefix_cache_queries` deltas, or SGLang's
//!   `cache_hit_rate` gauge, averaged.
//!
//! Nothing reported is `None`, never 0. When the realized share falls more
//! than [`SHORTFALL_POINTS`] below the potential, the run's reading says so
//! and suggests why from its telemetry: prefix caching off (realized ≈ 0),
//! the KV cache full or preempting (evicted under load, or too small for
//! the working set), several replicas behind the endpoint (routing).

use serde::{Deserialize, Serialize};

use super::RunSummary;
use crate::workload::reuse::ReuseTally;

/// Realized below potential by more than this many percentage points is a
/// shortfall the card explains.
pub const SHORTFALL_POINTS: f64 = 10.0;
/// A realized share below this is "nothing served from a cache".
const NOTHING: f64 = 0.02;
/// KV-cache usage from which the cache counts as full.
const KV_FULL: f64 = 0.9;

/// `usage.prompt_tokens_details.cached_tokens` over a run's measured calls.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct CachedTokens {
    /// Successful measured calls that reported it.
    pub calls: u64,
    /// Their prompt tokens (reported, else requested).
    pub prompt_tokens: u64,
    /// Of those, the tokens served from the prefix cache.
    pub cached_tokens: u64,
}

impl CachedTokens {
    pub fn fraction(&self) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }
}

/// The server's side of a run, as its telemetry reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRealized {
    pub fraction: f64,
    /// `"vLLM counters"`, `"SGLang cache_hit_rate"`, ...
    pub source: String,
}

/// One run's reuse: potential, realized, and why they differ.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct RunReuse {
    /// Share (0–1) of the measured prompt tokens an ideal prefix cache
    /// would have served; `None`: not computed (an older or merged journal).
    pub potential: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub potential_hit_tokens: Option<u64>,
    /// Of the potential, the share whose earlier call had finished its
    /// prefill when the call was sent: what any cache could have served at
    /// that timing; `None`: not computed.
    pub potential_in_time: Option<f64>,
    /// Realized by `usage.prompt_tokens_details.cached_tokens`; `None`: no
    /// call reported it.
    pub realized_usage: Option<f64>,
    /// Calls that reported `cached_tokens`.
    pub usage_calls: u64,
    /// Realized by the server's metrics over the window; `None`: not reported.
    pub realized_server: Option<f64>,
    /// Which metrics: `"vLLM counters"`, `"SGLang cache_hit_rate"`.
    pub server_source: Option<String>,
    /// The realized share compared with the potential: per-call usage when
    /// reported (it counts exactly the measured calls), else the server's.
    pub realized: Option<f64>,
    /// `(potential − realized) × 100`, when both are known.
    pub shortfall_points: Option<f64>,
    /// Why realized fell short (more than [`SHORTFALL_POINTS`]), or rose
    /// above the potential, read from the telemetry; empty otherwise.
    pub reasons: Vec<String>,
}

/// What a card's target says about replicas behind its one endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routing {
    /// Engines behind the endpoint, when known (a `sim` target's `replicas`).
    pub replicas: Option<u32>,
    /// How the endpoint picks one (`round-robin`, `least-loaded`, ...).
    pub router: Option<String>,
}

/// The server's realized share from its telemetry: vLLM's counters when
/// they moved, else the engine's hit-rate gauge.
pub fn server_realized(run: &RunSummary) -> Option<ServerRealized> {
    let signals = run.server.as_ref()?;
    if let (Some(hits), Some(queries)) = (
        signals.prefix_cache_hit_tokens,
        signals.prefix_cache_query_tokens,
    ) {
        // Counters exposed but never moved while calls were served: the
        // engine looked nothing up (vLLM with prefix caching off), which is
        // a reported 0, not a missing figure.
        if queries > 0.0 || run.requests > 0 {
            return Some(ServerRealized {
                fraction: if queries > 0.0 {
                    (hits / queries).clamp(0.0, 1.0)
                } else {
                    0.0
                },
                source: "vLLM counters".to_string(),
            });
        }
    }
    let rate = signals.prefix_cache_hit_rate?;
    let source = match signals.engine.as_deref() {
        Some("sglang") => "SGLang cache_hit_rate".to_string(),
        Some("vllm") => "vLLM hit-rate gauge".to_string(),
        Some(other) => format!("{other} hit-rate gauge"),
        None => "hit-rate gauge".to_string(),
    };
    Some(ServerRealized {
        fraction: rate.clamp(0.0, 1.0),
        source,
    })
}

fn pct(f: f64) -> String {
    crate::format::pct_of_fraction(f)
}

/// The reuse of one run (its summary's footer tally, per-call usage and
/// server signals), with the reasons for a shortfall.
pub fn run_reuse(run: &RunSummary, routing: &Routing) -> Option<RunReuse> {
    let tally: Option<ReuseTally> = run.reuse_potential;
    let server = server_realized(run);
    let usage = run.cached_tokens;
    if tally.is_none() && server.is_none() && usage.is_none() {
        return None;
    }
    let potential = tally.and_then(|t| t.fraction());
    let realized_usage = usage.and_then(|u| u.fraction());
    let realized_server = server.as_ref().map(|s| s.fraction);
    let realized = realized_usage.or(realized_server);
    let shortfall_points = match (potential, realized) {
        (Some(p), Some(r)) => Some((p - r) * 100.0),
        _ => None,
    };
    let mut out = RunReuse {
        potential,
        potential_in_time: tally.and_then(|t| t.timely_fraction()),
        prompt_tokens: tally.map(|t| t.prompt_tokens),
        potential_hit_tokens: tally.map(|t| t.potential_hit_tokens),
        realized_usage,
        usage_calls: usage.map_or(0, |u| u.calls),
        realized_server,
        server_source: server.map(|s| s.source),
        realized,
        shortfall_points,
        reasons: Vec::new(),
    };
    out.reasons = reasons(run, &out, routing);
    Some(out)
}

/// Why a run realized much less (or more) than its potential, from its
/// telemetry and the target's routing.
fn reasons(run: &RunSummary, reuse: &RunReuse, routing: &Routing) -> Vec<String> {
    let (Some(potential), Some(realized), Some(short)) =
        (reuse.potential, reuse.realized, reuse.shortfall_points)
    else {
        return Vec::new();
    };
    if short < -SHORTFALL_POINTS {
        return vec![format!(
            "realized {} is above the potential {}: the cache held these prompts before the run (an earlier run with the same nonce, other traffic, no cache reset), so its latencies are optimistic",
            pct(realized),
            pct(potential)
        )];
    }
    if short <= SHORTFALL_POINTS {
        return Vec::new();
    }
    let mut out = Vec::new();
    // Calls sent before an earlier one had prefilled their common prefix
    // (a fan-out's siblings, a burst): no cache could have served them.
    let timing = reuse
        .potential_in_time
        .filter(|in_time| (potential - in_time) * 100.0 > SHORTFALL_POINTS / 2.0);
    if let Some(in_time) = timing {
        let explained = (in_time - realized) * 100.0 <= SHORTFALL_POINTS;
        out.push(format!(
            "{} of the potential's {} were in calls sent before an earlier call with the same prefix had finished its prefill (the siblings of a fan-out sent together, calls in a burst): no cache could have served them yet; in time, the potential was {}{}",
            crate::format::num((potential - in_time) * 100.0, 1) + " points",
            pct(potential),
            pct(in_time),
            if explained {
                ", and the server realized about that"
            } else {
                ""
            }
        ));
        if explained {
            return out;
        }
    }
    if realized < NOTHING {
        out.push(
            "nothing was served from a prefix cache: is prefix caching off (vLLM `--no-enable-prefix-caching`, SGLang `--disable-radix-cache`)?"
                .to_string(),
        );
    }
    let signals = run.server.as_ref();
    let kv_max = signals.and_then(|s| s.kv_cache_usage_max);
    let preemptions = signals.and_then(|s| s.preemptions).unwrap_or(0.0);
    if kv_max.is_some_and(|k| k >= KV_FULL) || preemptions > 0.0 {
        let kv = kv_max.map_or(String::new(), |k| {
            format!("KV cache at {} at its peak", pct(k))
        });
        let pre = if preemptions > 0.0 {
            format!("{preemptions:.0} preemptions")
        } else {
            String::new()
        };
        let what = [kv, pre]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(", ");
        out.push(format!(
            "{what}: cached prefixes were evicted under load before they were reused (the KV cache is too small for this working set at this load)"
        ));
    }
    if let Some(n) = routing.replicas.filter(|&n| n > 1) {
        let router = routing
            .router
            .as_deref()
            .map_or(String::new(), |r| format!(", routed {r}"));
        out.push(format!(
            "{n} replicas behind one endpoint{router}: a prefix is cached only on the replica that served it, so calls routed to another one miss (prefix-aware or sticky routing realizes more)"
        ));
    }
    // Nothing in the telemetry beyond the timing (if that).
    if out.len() == usize::from(timing.is_some()) {
        out.push(
            "no KV pressure in the telemetry: if the endpoint spreads calls over several replicas (a gateway, a Kubernetes Service), routing splits the cache; otherwise the engine reuses whole KV blocks only, and short shared segments fall below a block"
                .to_string(),
        );
    }
    out
}

/// A card's reuse: every run's tallies added up (token-weighted), and the
/// runs whose realized share fell well short, with why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct CardReuse {
    pub potential: Option<f64>,
    /// The potential at the calls' timing ([`RunReuse::potential_in_time`]).
    pub potential_in_time: Option<f64>,
    pub realized_usage: Option<f64>,
    /// The server's metrics, each run's share weighted by its potential's
    /// prompt tokens (or equally when none).
    pub realized_server: Option<f64>,
    pub server_source: Option<String>,
    /// Runs with more than [`SHORTFALL_POINTS`] between potential and realized.
    pub short_runs: Vec<String>,
    /// The reasons those runs gave, each once, in order of first
    /// appearance, followed by the runs that gave it (`` — `run-id` ``).
    pub reasons: Vec<String>,
}

/// Sets each run's `reuse` and returns the card's, `None` when no run has
/// any reuse figure.
pub fn annotate_runs<'a>(
    runs: impl IntoIterator<Item = &'a mut RunSummary>,
    routing: &Routing,
) -> Option<CardReuse> {
    let mut card = CardReuse::default();
    let mut any = false;
    let (mut prompt, mut hits) = (0u64, 0u64);
    let mut in_time: Option<u64> = None;
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    let mut usage = CachedTokens::default();
    let (mut server_sum, mut server_weight) = (0.0, 0.0);
    for run in runs {
        run.reuse = run_reuse(run, routing);
        let Some(reuse) = &run.reuse else {
            continue;
        };
        any = true;
        if let Some(t) = run.reuse_potential {
            prompt += t.prompt_tokens;
            hits += t.potential_hit_tokens;
            if let Some(timely) = t.timely_hit_tokens {
                *in_time.get_or_insert(0) += timely;
            }
        }
        if let Some(u) = run.cached_tokens {
            usage.calls += u.calls;
            usage.prompt_tokens += u.prompt_tokens;
            usage.cached_tokens += u.cached_tokens;
        }
        if let Some(r) = reuse.realized_server {
            let w = reuse.prompt_tokens.map_or(1.0, |t| t.max(1) as f64);
            server_sum += r * w;
            server_weight += w;
            if card.server_source.is_none() {
                card.server_source.clone_from(&reuse.server_source);
            }
        }
        if reuse
            .shortfall_points
            .is_some_and(|s| s.abs() > SHORTFALL_POINTS)
        {
            card.short_runs.push(run.run_id.clone());
            for reason in &reuse.reasons {
                match reasons.iter_mut().find(|(r, _)| r == reason) {
                    Some((_, runs)) => runs.push(run.run_id.clone()),
                    None => reasons.push((reason.clone(), vec![run.run_id.clone()])),
                }
            }
        }
    }
    if !any {
        return None;
    }
    card.reasons = reasons
        .into_iter()
        .map(|(reason, runs)| {
            let runs: Vec<String> = runs.iter().map(|r| format!("`{r}`")).collect();
            format!("{reason} — {}", runs.join(", "))
        })
        .collect();
    card.potential = (prompt > 0).then(|| hits as f64 / prompt as f64);
    card.potential_in_time = in_time
        .filter(|_| prompt > 0)
        .map(|t| t as f64 / prompt as f64);
    card.realized_usage = usage.fraction();
    card.realized_server = (server_weight > 0.0).then(|| server_sum / server_weight);
    Some(card)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::telemetry::ServerSignals;

    fn run(potential: (u64, u64), server: Option<ServerSignals>) -> RunSummary {
        RunSummary {
            run_id: "r".into(),
            reuse_potential: Some(ReuseTally {
                calls: 10,
                prompt_tokens: potential.0,
                potential_hit_tokens: potential.1,
                timely_hit_tokens: None,
            }),
            server,
            ..Default::default()
        }
    }

    fn vllm(hits: f64, queries: f64) -> ServerSignals {
        ServerSignals {
            engine: Some("vllm".into()),
            scrapes: 10,
            prefix_cache_hit_tokens: Some(hits),
            prefix_cache_query_tokens: Some(queries),
            prefix_cache_hit_rate: Some(hits / queries),
            kv_cache_usage_max: Some(0.3),
            preemptions: Some(0.0),
            ..Default::default()
        }
    }

    #[test]
    fn close_to_potential_needs_no_reason() {
        let r = run_reuse(
            &run((1000, 600), Some(vllm(560.0, 1000.0))),
            &Routing::default(),
        )
        .unwrap();
        assert_eq!(r.potential, Some(0.6));
        assert_eq!(r.realized_server, Some(0.56));
        assert_eq!(r.server_source.as_deref(), Some("vLLM counters"));
        assert_eq!(r.realized_usage, None, "not reported is not 0");
        assert!((r.shortfall_points.unwrap() - 4.0).abs() < 1e-9);
        assert!(r.reasons.is_empty());
    }

    #[test]
    fn realized_near_zero_asks_whether_caching_is_off() {
        let r = run_reuse(
            &run((1000, 600), Some(vllm(0.0, 1000.0))),
            &Routing::default(),
        )
        .unwrap();
        assert_eq!(r.realized, Some(0.0));
        assert!(
            r.reasons[0].contains("prefix caching off"),
            "{:?}",
            r.reasons
        );
    }

    #[test]
    fn a_full_cache_and_replicas_are_named() {
        let mut signals = vllm(200.0, 1000.0);
        signals.kv_cache_usage_max = Some(0.97);
        signals.preemptions = Some(12.0);
        let routing = Routing {
            replicas: Some(4),
            router: Some("round-robin".into()),
        };
        let r = run_reuse(&run((1000, 600), Some(signals)), &routing).unwrap();
        assert_eq!(r.reasons.len(), 2, "{:?}", r.reasons);
        assert!(r.reasons[0].contains("97%") && r.reasons[0].contains("12 preemptions"));
        assert!(r.reasons[1].contains("4 replicas") && r.reasons[1].contains("round-robin"));
    }

    #[test]
    fn a_fan_out_sent_together_explains_the_gap_by_its_timing() {
        let mut summary = run((1000, 770), Some(vllm(600.0, 1000.0)));
        summary.reuse_potential.as_mut().unwrap().timely_hit_tokens = Some(620);
        let r = run_reuse(&summary, &Routing::default()).unwrap();
        assert_eq!(r.potential_in_time, Some(0.62));
        assert_eq!(r.reasons.len(), 1, "{:?}", r.reasons);
        assert!(
            r.reasons[0].contains("15.0 points") && r.reasons[0].contains("realized about that"),
            "{:?}",
            r.reasons
        );
        // Realized well below even the timely potential: the timing is one
        // reason, the telemetry's the rest.
        let mut summary = run((1000, 770), Some(vllm(100.0, 1000.0)));
        summary.reuse_potential.as_mut().unwrap().timely_hit_tokens = Some(620);
        let r = run_reuse(&summary, &Routing::default()).unwrap();
        assert_eq!(r.reasons.len(), 2, "{:?}", r.reasons);
        assert!(r.reasons[1].contains("no KV pressure"));
    }

    #[test]
    fn usage_is_preferred_and_an_sglang_gauge_is_read() {
        let mut summary = run(
            (1000, 500),
            Some(ServerSignals {
                engine: Some("sglang".into()),
                scrapes: 3,
                prefix_cache_hit_rate: Some(0.45),
                ..Default::default()
            }),
        );
        summary.cached_tokens = Some(CachedTokens {
            calls: 10,
            prompt_tokens: 1000,
            cached_tokens: 480,
        });
        let r = run_reuse(&summary, &Routing::default()).unwrap();
        assert_eq!(r.realized_usage, Some(0.48));
        assert_eq!(r.realized_server, Some(0.45));
        assert_eq!(r.server_source.as_deref(), Some("SGLang cache_hit_rate"));
        assert_eq!(r.realized, Some(0.48));
        assert_eq!(r.usage_calls, 10);
    }

    #[test]
    fn nothing_known_is_none_and_the_card_adds_tokens() {
        assert_eq!(run_reuse(&RunSummary::default(), &Routing::default()), None);
        let mut runs = [
            run((1000, 600), Some(vllm(100.0, 1000.0))),
            run((3000, 0), None),
            RunSummary::default(),
        ];
        runs[1].run_id = "unique".into();
        let card = annotate_runs(runs.iter_mut(), &Routing::default()).unwrap();
        assert_eq!(card.potential, Some(600.0 / 4000.0));
        assert_eq!(card.realized_server, Some(0.1));
        assert_eq!(card.realized_usage, None);
        assert_eq!(card.short_runs, vec!["r".to_string()]);
        assert_eq!(card.reasons.len(), 1);
        assert!(runs[2].reuse.is_none());
        assert_eq!(annotate_runs(std::iter::empty(), &Routing::default()), None);
    }
}
