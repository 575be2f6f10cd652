//! `capcard init URL`: from an endpoint to a ready-to-run experiment, the
//! way GuideLLM and `vllm bench serve` start from a URL, but written down.
//!
//! The server is asked what it is before anything is written: the models
//! it lists, the context window it reports, whether it offers Prometheus
//! metrics and under which engine's names, and — through the preflight
//! ([`crate::exec::preflight`]), one call shaped as a run's — which request
//! dialect it accepts. What it refuses that a setting fixes
//! (`force-length #false`, `temperature`) is set in the file with the
//! server's words beside it. The file is then written ([`experiment`],
//! pure): a chat workload sized to the window, a draft SLO marked as a
//! draft, a short closed sweep and an open search. It is parsed back before
//! it is written, so what `init` writes `capcard check` accepts.

use std::fmt::Write as _;
use std::time::Duration;

use crate::config::{Api, write::string as kdl};
use crate::exec::preflight::{self, Outcome, RefusalKind};
use crate::exec::{self, BodyOptions, ChatMessage, Dialect, Endpoint, Prompt};

/// What the probes found.
#[derive(Debug, Clone, PartialEq)]
pub struct Findings {
    /// The URL as given.
    pub url: String,
    /// The OpenAI base URL that answered (`…/v1`).
    pub base_url: String,
    pub api_key_env: Option<String>,
    pub models: Vec<String>,
    pub model: String,
    /// Tokens and where they were read.
    pub window: Option<(u32, String)>,
    pub api: Api,
    /// `force-length #false`, and the refusal that made it so.
    pub force_length_refused: Option<String>,
    /// `extra-body { temperature 1 }`, and the refusal that made it so.
    pub temperature_refused: Option<String>,
    pub dialect: Dialect,
    /// The metrics URL and whose names it serves (`vLLM`, `SGLang`, …).
    pub metrics: Option<(String, String)>,
    /// When it was probed (RFC 3339).
    pub probed_at: String,
}

/// Why `init` could not write a file.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum InitError {
    #[error("{url} does not answer as an OpenAI-compatible server: {reason}")]
    #[diagnostic(
        code(capcard::init),
        help(
            "give the server's base URL, e.g. http://127.0.0.1:8000/v1 (GET /v1/models must answer)"
        )
    )]
    Unreachable { url: String, reason: String },
    #[error("environment variable {0} is not set")]
    #[diagnostic(
        code(capcard::init),
        help("export {0}=... first; the key is never written")
    )]
    MissingKey(String),
    #[error("the server lists no model")]
    #[diagnostic(code(capcard::init), help("name one with --model"))]
    NoModel,
    #[error("{url} refused capcard's first call: {conclusion}\n  the server said: {quote}")]
    #[diagnostic(code(capcard::init), help("{help}"))]
    Refused {
        url: String,
        quote: String,
        conclusion: String,
        help: String,
    },
    #[error(transparent)]
    Exec(#[from] exec::ExecError),
}

/// The output length of the preflight's call: short, but long enough to
/// tell a length field the server ignores.
const PROBE_OUTPUT_TOKENS: u32 = 16;

/// Probe `url` (a base URL, with or without `/v1`).
pub async fn probe(
    url: &str,
    api_key_env: Option<&str>,
    model: Option<&str>,
) -> Result<Findings, InitError> {
    let api_key = match api_key_env {
        Some(var) => Some(
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| InitError::MissingKey(var.to_string()))?,
        ),
        None => None,
    };
    let trimmed = url.trim_end_matches('/');
    let candidates: Vec<String> = if trimmed.ends_with("/v1") {
        vec![trimmed.to_string()]
    } else {
        vec![format!("{trimmed}/v1"), trimmed.to_string()]
    };
    let timeout = Duration::from_secs(15);
    let mut last_error = String::new();
    let mut found = None;
    for base in &candidates {
        match exec::client::probe_models_with(base, api_key.as_deref(), &[], timeout).await {
            Ok(list) => {
                found = Some((base.clone(), list));
                break;
            }
            Err(e) => last_error = e.to_string(),
        }
    }
    let Some((base_url, list)) = found else {
        return Err(InitError::Unreachable {
            url: url.to_string(),
            reason: last_error,
        });
    };
    let model = match model {
        Some(m) => m.to_string(),
        None => list.ids.first().cloned().ok_or(InitError::NoModel)?,
    };
    let window = match list.window_of(&model) {
        Some((tokens, field)) => Some((tokens, format!("GET /v1/models {field}"))),
        None => exec::client::probe_info_window(&base_url, api_key.as_deref(), timeout)
            .await
            .map(|t| (t, "GET /info max_total_tokens".to_string())),
    };
    let metrics = probe_metrics(&base_url, api_key.as_deref()).await;

    let mut endpoint = Endpoint {
        base_url: base_url.clone(),
        api: Api::Chat,
        model: model.clone(),
        api_key,
        timeout: Duration::from_secs(120),
        http2: false,
        headers: Vec::new(),
        body: BodyOptions::default(),
    };
    let mut force_length_refused = None;
    let mut temperature_refused = None;
    // Chat first (what users serve), completions if the server has no chat.
    let dialect = loop {
        match dialect_of(&endpoint, &list.ids).await? {
            Outcome::Accepted { dialect, .. } => break dialect,
            Outcome::Refused { refusal, .. } => {
                let quote = refusal.quote.clone();
                match refusal.kind {
                    RefusalKind::ForceLength if endpoint.body.force_length => {
                        endpoint.body.force_length = false;
                        force_length_refused = Some(quote);
                    }
                    RefusalKind::Temperature
                        if !endpoint.body.extra.contains_key("temperature") =>
                    {
                        endpoint.body.extra.insert("temperature".into(), 1.into());
                        temperature_refused = Some(quote);
                    }
                    _ if endpoint.api == Api::Chat && quote.contains("404") => {
                        endpoint.api = Api::Completions;
                    }
                    _ => {
                        return Err(InitError::Refused {
                            url: base_url,
                            quote: refusal.quote,
                            conclusion: refusal.conclusion,
                            help: refusal.help,
                        });
                    }
                }
            }
        }
    };
    Ok(Findings {
        url: url.to_string(),
        base_url,
        api_key_env: api_key_env.map(str::to_string),
        models: list.ids,
        model,
        window,
        api: endpoint.api,
        force_length_refused,
        temperature_refused,
        dialect,
        metrics,
        probed_at: crate::time::rfc3339_utc(std::time::SystemTime::now()),
    })
}

/// The preflight with a short call of `endpoint`'s API.
async fn dialect_of(endpoint: &Endpoint, models: &[String]) -> Result<Outcome, InitError> {
    let text = "Write one sentence about the sea, then stop.";
    let prompt = match endpoint.api {
        Api::Chat | Api::Responses => Prompt::Chat(vec![ChatMessage::text("user", text)]),
        Api::Completions => Prompt::Text(text.to_string()),
    };
    let (api, model) = (endpoint.api, endpoint.model.clone());
    let render = move |options: &BodyOptions| {
        exec::request::build_body_with(api, &model, &prompt, PROBE_OUTPUT_TOKENS, options)
    };
    Ok(preflight::run(
        endpoint,
        "init",
        &render,
        PROBE_OUTPUT_TOKENS,
        models,
        false,
    )
    .await?)
}

/// `GET {root}/metrics`, and whose names it serves.
async fn probe_metrics(base_url: &str, api_key: Option<&str>) -> Option<(String, String)> {
    let url = format!(
        "{}/metrics",
        base_url.trim_end_matches('/').trim_end_matches("/v1")
    );
    let client = exec::client::probe_client(api_key, &[], Duration::from_secs(5)).ok()?;
    let reply = client.get(&url).await.ok()?;
    if !reply.is_success() {
        return None;
    }
    let body = reply.text();
    let engine = metrics_engine(&body)?;
    Some((url, engine.to_string()))
}

/// Whose Prometheus names a `/metrics` body holds (pure); `None` when it
/// is not Prometheus text.
pub fn metrics_engine(body: &str) -> Option<&'static str> {
    if !(body.contains("# TYPE") || body.contains("# HELP")) {
        return None;
    }
    let engines = [
        ("vllm:", "vLLM"),
        ("sglang:", "SGLang"),
        ("llamacpp:", "llama.cpp"),
        ("tgi_", "TGI"),
        ("lmdeploy", "LMDeploy"),
        ("nv_inference", "Triton"),
    ];
    Some(
        engines
            .iter()
            .find(|(prefix, _)| body.contains(prefix))
            .map_or("an unrecognised engine", |(_, name)| name),
    )
}

/// A workload sized to the window: (input median, input max, output mean,
/// output max), so the largest call fits with room to spare.
pub fn sized_to(window: Option<u32>) -> (u32, u32, u32, u32) {
    let w = window.unwrap_or(8192).max(256);
    let output_mean = (w / 16).clamp(16, 256);
    let output_max = (output_mean * 4).min(w / 4);
    let input_median = (w / 8).clamp(32, 1024);
    let input_max = (w / 2).max(input_median);
    (input_median, input_max, output_mean, output_max)
}

/// The experiment file for what was found (pure).
pub fn experiment(f: &Findings) -> String {
    let mut out = String::new();
    let name = name_of(&f.model);
    let _ = writeln!(
        out,
        "// Written by `capcard init {}` on {}, from what the server said:",
        f.url, f.probed_at
    );
    let _ = writeln!(
        out,
        "//   models listed: {} (GET /v1/models)",
        f.models.join(", ")
    );
    let _ = writeln!(
        out,
        "//   context window: {}",
        match &f.window {
            Some((tokens, source)) => format!("{tokens} tokens, prompt + output ({source})"),
            None => "not reported: the lengths below assume 8,192 tokens; set `max-context`".into(),
        }
    );
    let _ = writeln!(
        out,
        "//   telemetry: {}",
        match &f.metrics {
            Some((url, engine)) =>
                format!("{engine}'s Prometheus metrics at {url}, scraped during every run"),
            None => "no Prometheus metrics at /metrics".into(),
        }
    );
    let _ = writeln!(
        out,
        "//   request dialect: {}",
        crate::report::describe::dialect(&f.dialect)
    );
    for line in &f.dialect.settled {
        let _ = writeln!(out, "//     {line}");
    }
    out.push_str(
        "// Review the draft SLO and the sizing targets below, then:\n\
         //   capcard plan THIS-FILE    (what it runs and how long it takes)\n\
         //   capcard run THIS-FILE     (the capacity card)\n\n",
    );
    let _ = writeln!(out, "experiment {} {{", kdl(&name));
    let _ = writeln!(
        out,
        "    description {}",
        kdl(&format!(
            "{} at {}, as `capcard init` found it",
            f.model, f.base_url
        ))
    );
    out.push_str("    seed 1\n}\n\n");

    let _ = writeln!(out, "target {} {{", kdl(&name));
    let _ = writeln!(out, "    endpoint {}", kdl(&f.base_url));
    let _ = writeln!(
        out,
        "    api {}",
        match f.api {
            Api::Chat => "chat",
            Api::Completions => "completions            // the server has no chat endpoint",
            Api::Responses => "responses",
        }
    );
    let _ = writeln!(out, "    model {}", kdl(&f.model));
    if let Some(var) = &f.api_key_env {
        let _ = writeln!(
            out,
            "    api-key-env {var}      // the variable's name; the key is never written"
        );
    }
    if let Some(quote) = &f.force_length_refused {
        let _ = writeln!(
            out,
            "    // The server refuses `ignore_eos`/`min_tokens`: {}",
            one_line(quote)
        );
        out.push_str("    // Outputs may end before their planned length; the card counts them.\n");
        out.push_str("    force-length #false\n");
    }
    if let Some(quote) = &f.temperature_refused {
        let _ = writeln!(
            out,
            "    // The server refuses `temperature 0`: {}",
            one_line(quote)
        );
        out.push_str("    extra-body {\n        temperature 1\n    }\n");
    }
    if f.window.is_none() {
        out.push_str(
            "    // max-context 8192       // the model's window, if the server reports none\n",
        );
    }
    match &f.metrics {
        Some((engine_url, engine)) => {
            let _ = writeln!(
                out,
                "    runtime {}",
                kdl(&format!("{engine} (from its /metrics)"))
            );
            let default = format!("{}/metrics", f.base_url.trim_end_matches("/v1"));
            if *engine_url != default {
                let _ = writeln!(out, "    metrics {}", kdl(engine_url));
            }
        }
        None => {
            out.push_str("    metrics #false            // the server offers none at /metrics\n")
        }
    }
    out.push_str(
        "    // hardware \"1x H100 SXM 80GB\"           // fill in: the card states it\n\
         \x20   // cost-per-hour 2.49 currency=USD       // fill in: the sizing table prices it\n}\n\n",
    );

    let (input_median, input_max, output_mean, output_max) =
        sized_to(f.window.as_ref().map(|w| w.0));
    out.push_str("// Chat traffic sized to the model's window: prompts right-skewed, answers around a\n// typical length. Replace with your own (`capcard profile LOG` fits them from a log).\n");
    out.push_str("workload \"chat\" {\n");
    let _ = writeln!(
        out,
        "    input-tokens lognormal median={input_median} sigma=0.6 min=16 max={input_max}"
    );
    let _ = writeln!(
        out,
        "    output-tokens normal mean={output_mean} stddev={} min=8 max={output_max}",
        (output_mean / 4).max(1)
    );
    out.push_str("}\n\n");
    out.push_str(
        "// A DRAFT SLO: capcard cannot know what you promise your users. These bounds are a\n\
         // common start for interactive chat; replace them with yours before reading Cr_open.\n\
         slo \"draft-interactive\" {\n\
         \x20   ttft p95=\"2s\"\n\
         \x20   itl p95=\"100ms\"\n\
         \x20   e2e p95=\"30s\"\n\
         \x20   error-rate max=\"1%\"\n\
         }\n\n",
    );
    out.push_str(
        "// A short closed sweep: CrossP and Cr_closed.\n\
         closed {\n\
         \x20   concurrency 1 2 4 8 16 32\n\
         \x20   duration \"30s\"\n\
         \x20   warmup \"5s\"\n\
         }\n\n\
         // The open search: Cr_open within the draft SLO, to within 10%.\n\
         open {\n\
         \x20   arrival poisson\n\
         \x20   search min=0.1 max=64 precision=\"10%\"\n\
         \x20   duration \"60s\"\n\
         \x20   warmup \"10s\"\n\
         \x20   budget \"5m\"\n\
         }\n\n\
         // Replicas for a demand of 10 requests/s, with 30% of capacity in reserve.\n\
         sizing {\n\
         \x20   target rps=10 slo=draft-interactive\n\
         \x20   headroom \"30%\"\n\
         \x20   spares 1\n\
         }\n",
    );
    out
}

/// A name for the experiment and target: the model's last path segment,
/// in the characters a results folder's name keeps.
fn name_of(model: &str) -> String {
    let last = model.rsplit('/').next().unwrap_or(model);
    let name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.trim_matches('-').is_empty() {
        "server".to_string()
    } else {
        name
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn findings() -> Findings {
        Findings {
            url: "http://127.0.0.1:8000".into(),
            base_url: "http://127.0.0.1:8000/v1".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            models: vec!["meta-llama/Llama-3.1-8B-Instruct".into()],
            model: "meta-llama/Llama-3.1-8B-Instruct".into(),
            window: Some((4096, "GET /v1/models max_model_len".into())),
            api: Api::Chat,
            force_length_refused: Some("HTTP 400 Bad Request: \"Unrecognized request argument supplied: min_tokens, ignore_eos\"".into()),
            temperature_refused: None,
            dialect: Dialect {
                length_field: "max_completion_tokens".into(),
                stream_usage: true,
                force_length: false,
                output_tokens_from: exec::TokenSource::Usage,
                settled: Vec::new(),
                preflight_calls: 1,
            },
            metrics: Some(("http://127.0.0.1:8000/metrics".into(), "vLLM".into())),
            probed_at: "2026-12-02T20:00:00.000Z".into(),
        }
    }

    #[test]
    fn the_written_file_is_a_valid_experiment_that_says_what_was_found() {
        let text = experiment(&findings());
        let parsed = crate::config::parse(&text, std::path::Path::new("init.kdl"))
            .expect("init writes what check accepts");
        let target = &parsed.targets[0];
        assert_eq!(target.name, "Llama-3.1-8B-Instruct");
        assert!(!target.force_length);
        assert_eq!(target.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(target.runtime.as_deref(), Some("vLLM (from its /metrics)"));
        assert!(text.contains("// The server refuses `ignore_eos`/`min_tokens`: HTTP 400"));
        assert!(text.contains("A DRAFT SLO"));
        // The workload fits the window with room.
        let window = crate::plan::context::ContextWindow {
            tokens: 4096,
            source: "test".into(),
        };
        let fit = crate::plan::context::fit(&parsed.workloads[0], None, 1, window);
        assert!(!fit.can_overflow(), "{fit:?}");
    }

    #[test]
    fn lengths_follow_the_window() {
        assert_eq!(sized_to(Some(4096)), (512, 2048, 256, 1024));
        assert_eq!(sized_to(Some(131_072)), (1024, 65_536, 256, 1024));
        assert_eq!(sized_to(Some(2048)), (256, 1024, 128, 512));
        assert_eq!(sized_to(None), (1024, 4096, 256, 1024));
    }

    #[test]
    fn engines_are_named_from_their_metrics() {
        assert_eq!(
            metrics_engine("# TYPE vllm:num_requests_running gauge"),
            Some("vLLM")
        );
        assert_eq!(
            metrics_engine("# HELP llamacpp:tokens_predicted_total x"),
            Some("llama.cpp")
        );
        assert_eq!(
            metrics_engine("# TYPE up gauge"),
            Some("an unrecognised engine")
        );
        assert_eq!(metrics_engine("<html>"), None);
    }
}
