//! Semantic rules of an experiment, written once over the typed model.
//!
//! Each check looks at the values of one KDL node (a distribution, a level
//! list, a `search` line) and returns [`Issue`]s that say *which part* of the
//! node is wrong ([`At`]), not where it is in a file. The decoder maps that to
//! a span; [`validate`] (for experiments built in code) prefixes the context
//! instead. So a file and an experiment built in Rust obey the same rules.
//!
//! The rules are filed by what they check: [`values`] (distributions, levels,
//! rates, fractions, names), [`sim`] (a `sim` target's preset and knobs),
//! [`target`] (endpoint, key, timeout), [`mixes`] (mixes and their classes),
//! and [`experiment`] (the whole experiment, for one built in code).

use crate::format::duration_literal;

mod experiment;
mod mixes;
mod sim;
mod target;
mod values;

pub(crate) use experiment::unknown_slo_issue;
pub use experiment::validate;
pub(crate) use mixes::*;
pub use sim::check_sim_knobs;
pub(crate) use sim::*;
pub(crate) use target::*;
pub(crate) use values::*;

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
    pub(crate) fn new(at: At, message: impl Into<String>) -> Self {
        Issue {
            message: message.into(),
            help: None,
            at,
        }
    }
    pub(crate) fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

pub(crate) fn prop(name: &str) -> At {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::*;
    use std::time::Duration;

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
        assert!(
            check_search(RatePerS(0.5), RatePerS(64.0), Fraction(0.05), Fraction(0.9)).is_empty()
        );
        let equal = check_search(RatePerS(8.0), RatePerS(8.0), Fraction(0.05), Fraction(0.9));
        assert_eq!(equal.len(), 1);
        assert_eq!(equal[0].at, prop("max"));
        let zero = check_search(RatePerS(0.0), RatePerS(8.0), Fraction(1.0), Fraction(0.2));
        assert_eq!(zero.len(), 3);
        assert_eq!(zero[2].at, prop("confidence"));
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
        // Knobs given as flags: the same rules, message and help in one line.
        let flags = SimServing {
            max_num_seqs: Some(0),
            gpu_memory_utilization: Some(90.0),
            max_context: Some(0),
            ..SimServing::default()
        };
        assert_eq!(
            check_sim_knobs(&flags),
            [
                "`max-num-seqs` must be at least 1, got 0; leave `max-num-seqs` out to keep the preset's value",
                "`gpu-memory-utilization` must be greater than 0 and at most 1, got 90; `gpu-memory-utilization` is the share of GPU memory the engine may take for weights and KV cache, a number up to 1: for 90% write 0.9",
                "`max-context` must be at least 1, got 0; leave `max-context` out to keep the preset's value",
            ]
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
                cr_open: crate::config::CrOpenUse::Promise,
            }),
            sweeps: Vec::new(),
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
