//! Build an experiment in Rust (no KDL), validate it and expand it into a
//! plan through the library API: capcard's stages are usable on their own.
//!
//! Run with `cargo run --example plan_in_code`.

use std::time::Duration;

use capcard::config::{
    ClosedSpec, Dist, DistKind, Experiment, Fraction, LatencyMetric, OpenSpec, RatePerS,
    RateSelection, SizingSpec, SizingTarget, Slo, SloClause, Stat, StopRule, Target, Workload,
};

fn main() -> miette::Result<()> {
    let experiment = Experiment {
        name: "in-code".into(),
        description: Some("An experiment built without a KDL file".into()),
        seed: 42,
        targets: vec![Target {
            timeout: Duration::from_secs(60),
            hardware: Some("simulated 1x H100 SXM".into()),
            ..Target::sim("sim-h100", "h100-llama3-8b")
        }],
        workloads: vec![Workload {
            name: "chat".into(),
            span: None,
            input_tokens: Dist::lognormal(600.0, 0.6, 16.0, 8192.0),
            output_tokens: Dist {
                kind: DistKind::Normal {
                    mean: 220.0,
                    stddev: 60.0,
                },
                min: Some(8.0),
                max: Some(1024.0),
            },
            shared_prefix: None,
            conversation: None,
            agent: None,
            dataset: None,
            tools: None,
            sessions: None,
        }],
        slos: vec![Slo {
            name: "interactive".into(),
            span: None,
            clauses: vec![
                SloClause::Latency {
                    metric: LatencyMetric::Ttft,
                    stat: Stat::Percentile(99.0),
                    limit: Duration::from_secs(1),
                },
                SloClause::ErrorRate {
                    max: Fraction(0.005),
                },
            ],
        }],
        mixes: vec![],
        closed: Some(ClosedSpec::new(
            vec![1, 2, 4, 8, 16, 32, 64],
            StopRule::Duration(Duration::from_secs(30)),
            Duration::from_secs(5),
        )),
        open: Some(OpenSpec::new(
            RateSelection::Search {
                min: RatePerS(0.5),
                max: RatePerS(64.0),
                precision: Fraction(0.05),
                confidence: Fraction(0.9),
                early_stop: true,
            },
            StopRule::Duration(Duration::from_secs(60)),
            Duration::from_secs(10),
        )),
        sizing: Some(SizingSpec {
            targets: vec![SizingTarget::Rps {
                rps: RatePerS(150.0),
                slo: "interactive".into(),
            }],
            headroom: Fraction(0.3),
            spares: 1,
            cr_open: capcard::config::CrOpenUse::Promise,
        }),
        sweeps: Vec::new(),
        base_dir: None,
    };

    // The same semantic checks `capcard check` applies to files.
    capcard::config::validate(&experiment)?;

    let plan = capcard::plan::build(&experiment);
    print!("{}", capcard::plan::render_table(&plan, &experiment));
    println!(
        "\n{} closed runs planned; plan.json is {} bytes",
        plan.cards.iter().map(|c| c.closed.len()).sum::<usize>(),
        serde_json::to_string(&plan).map(|s| s.len()).unwrap_or(0)
    );
    Ok(())
}
