//! Realized reuse on the card: in virtual time, a workload with a shared
//! prefix offers reuse (potential > 0); the simulator's prefix cache
//! realizes close to it, by its vLLM counters and by `usage.cached_tokens`,
//! and with prefix caching off realizes nothing, which the card explains.

use crate::support::{capcard, experiment_file, read_report, results_text};

const EXPERIMENT: &str = r#"
experiment "reuse" {
    seed 11
}
target "cached" {
    sim tiny {
        virtual #true
        prompt-tokens-details #true
    }
}
target "uncached" {
    sim tiny {
        virtual #true
        prefix-caching #false
    }
}
workload "support" {
    input-tokens fixed 320
    output-tokens fixed 16
    shared-prefix tokens=256 groups=2
}
closed {
    concurrency 2 4
    requests 80
    warmup "500ms"
}
"#;

#[test]
fn a_shared_prefix_shows_potential_and_the_simulator_realizes_it() {
    let (tmp, file) = experiment_file("reuse.kdl", EXPERIMENT);
    let dir = tmp.path().join("out");
    capcard()
        .args(["run", "--quiet", "--nonce", "5", "--out"])
        .arg(&dir)
        .arg(&file)
        .assert()
        .success();
    let report = read_report(&dir);
    let card = |target: &str| {
        report
            .cards
            .iter()
            .find(|c| c.target == target)
            .unwrap_or_else(|| panic!("a card for {target}"))
    };

    let cached = card("cached");
    for run in &cached.closed {
        let reuse = run.reuse.as_ref().expect("every run has its reuse");
        let potential = reuse.potential.expect("the potential is computed");
        // 256 of 320 tokens are one of two prefixes: all but the first
        // call of each group hit.
        assert!(potential > 0.7 && potential <= 0.8, "{reuse:?}");
        let server = reuse.realized_server.expect("vLLM counters");
        assert_eq!(reuse.server_source.as_deref(), Some("vLLM counters"));
        let usage = reuse.realized_usage.expect("cached_tokens reported");
        assert!(reuse.usage_calls > 0);
        for realized in [server, usage] {
            assert!(
                (potential - realized).abs() < 0.10,
                "realized {realized} vs potential {potential}: {reuse:?}"
            );
        }
        assert!(reuse.reasons.is_empty(), "{reuse:?}");
    }
    let totals = cached.reuse.as_ref().expect("the card's reuse");
    assert!(totals.potential.is_some_and(|p| p > 0.7));
    assert!(totals.short_runs.is_empty());

    let uncached = card("uncached");
    for run in &uncached.closed {
        let reuse = run.reuse.as_ref().expect("every run has its reuse");
        assert!(reuse.potential.is_some_and(|p| p > 0.7), "{reuse:?}");
        // vLLM without prefix caching leaves its counters at 0 and reports
        // no cached_tokens: not reported, not 0.
        assert_eq!(reuse.realized_usage, None, "{reuse:?}");
        assert!(
            reuse
                .reasons
                .iter()
                .any(|r| r.contains("prefix caching off")),
            "{reuse:?}"
        );
    }

    // results.json keeps "not reported" apart from 0.
    let json: serde_json::Value = serde_json::from_str(&results_text(&dir)).unwrap();
    let uncached_run = json["cards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == "uncached")
        .unwrap()["closed"][0]
        .clone();
    assert!(uncached_run["reuse"]["realized_usage"].is_null());
    assert!(uncached_run["reuse_potential"]["potential_hit_tokens"].as_u64() > Some(0));

    let text = std::fs::read_to_string(dir.join("cached--support.md")).unwrap();
    assert!(text.contains("## Prefix reuse"), "{text}");
    // The summary sets the cards side by side.
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        summary.contains(
            "| `uncached` | `support` | 80% | 80% | 0% (vLLM counters) | not reported | 2 |"
        ),
        "{summary}"
    );
    let text = std::fs::read_to_string(dir.join("uncached--support.md")).unwrap();
    let start = text.find("## Prefix reuse").expect("the reuse section");
    let end = start + text[start..].find("## Sizing").expect("sizing follows");
    insta::assert_snapshot!("uncached_reuse_section", &text[start..end]);
}
