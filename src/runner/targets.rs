//! The targets of a run made ready before anything is measured: a simulator
//! started (or its engine in virtual time), an endpoint probed (models,
//! window, telemetry, prefix-cache reset, token-id prompts, words), and the
//! preflight that settles the request dialect; `check --probe`; shutdown.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::*;
use crate::config::{self, Experiment, MetricsSource, Target, TargetKind};
use crate::exec::{self, Endpoint};
use crate::plan::{self, CardPlan, Plan};
use crate::sim;
use crate::workload::prompt::TokenIdRange;

/// A target made ready to receive requests (a sim started, a model resolved).
pub(super) struct LiveTarget {
    pub(super) endpoint: Endpoint,
    pub(super) sim: Option<sim::SimServer>,
    /// Prometheus URL scraped during every run, if any.
    pub(super) metrics_url: Option<String>,
    pub(super) scrape_client: exec::HttpClient,
    /// The target's `tokenizer`, loaded: prompts sized exactly with it.
    pub(super) tokenizer: Option<std::sync::Arc<crate::data::tokenizer::PromptTokenizer>>,
    /// A `completions` target that accepts token-id prompts gets them, with
    /// ids inside its vocabulary: exact prompt lengths without a tokenizer
    /// (SPEC §2, prompt lengths).
    pub(super) token_ids: Option<TokenIdRange>,
    /// Why a `completions` target gets text prompts after all.
    pub(super) token_id_refusal: Option<String>,
    /// Text prompts of words the server counts as one token each.
    pub(super) words: Option<std::sync::Arc<crate::workload::prompt::WordList>>,
    /// The server's prefix-cache reset (a path under its root), if it has one.
    pub(super) cache_reset: Option<&'static str>,
    /// Why no telemetry is scraped, for the card.
    pub(super) telemetry_off: Option<String>,
    /// Runs on the engine's own clock instead of over HTTP.
    pub(super) virtual_target: Option<exec::virtual_time::VirtualTarget>,
    /// The model's window: declared (sim preset, `max-context`) or reported
    /// by the server at the start.
    pub(super) context_window: Option<plan::context::ContextWindow>,
    /// What the preflight settled; `None` before it, or in virtual time.
    pub(super) dialect: Option<exec::Dialect>,
    /// The model ids `GET /models` listed (for the preflight's did-you-mean).
    pub(super) listed_models: Vec<String>,
}

/// What `capcard check --probe` found for one target.
#[derive(Debug)]
pub struct ProbeReport {
    pub target: String,
    pub outcome: ProbeOutcome,
}

/// One target's preflight: what it accepts, why it cannot be measured, or
/// why there was nothing to probe.
#[derive(Debug)]
pub enum ProbeOutcome {
    Accepted(ProbeFindings),
    Refused(RunError),
    /// A `sim` target in virtual time has no server: nothing to ask.
    NotProbed(String),
}

/// What a target accepts, as the preflight and the start-up probes found.
#[derive(Debug)]
pub struct ProbeFindings {
    pub base_url: String,
    pub model: String,
    pub listed_models: Vec<String>,
    pub context_window: Option<String>,
    pub telemetry: String,
    pub prompts: String,
    pub dialect: Option<exec::Dialect>,
}

/// `capcard check --probe`: every target of the file prepared and
/// preflighted exactly as `capcard run` would, and nothing measured.
/// Targets are probed one by one, each failure reported on its own.
pub async fn probe(
    path: &Path,
    log: &mut (dyn Write + Send),
) -> Result<Vec<ProbeReport>, RunError> {
    let (_, experiment) = load_source(path)?;
    let plan = plan::build(&experiment);
    let mut reports = Vec::new();
    for target in &experiment.targets {
        let Some(card) = plan.cards.iter().find(|c| c.target == target.name) else {
            continue;
        };
        if virtual_target(target, &experiment, false)?.is_some() {
            reports.push(ProbeReport {
                target: target.name.clone(),
                outcome: ProbeOutcome::NotProbed(
                    "runs in virtual time, in process: no server to probe".to_string(),
                ),
            });
            continue;
        }
        let outcome = async {
            let mut prepared = prepare_target(target, &experiment, log).await?;
            let nonce = crate::hash::mix(fresh_nonce(), PREFLIGHT_STREAM);
            let preflighted = preflight(&mut prepared, &experiment, card, nonce, log).await;
            let findings = ProbeFindings {
                base_url: prepared.endpoint.base_url.clone(),
                model: prepared.endpoint.model.clone(),
                listed_models: prepared.listed_models.clone(),
                context_window: prepared
                    .context_window
                    .as_ref()
                    .map(|w| format!("{} tokens ({})", w.tokens, w.source)),
                telemetry: match (&prepared.metrics_url, &prepared.telemetry_off) {
                    (Some(url), _) => format!("scraped from {url}"),
                    (None, Some(why)) => why.clone(),
                    (None, None) => "off".to_string(),
                },
                prompts: match (
                    &prepared.token_ids,
                    &prepared.token_id_refusal,
                    &prepared.words,
                ) {
                    (Some(r), _, _) => format!("token ids {}..={} (exact lengths)", r.min, r.max),
                    (None, Some(why), _) => format!("text (token-id prompts refused: {why})"),
                    (None, None, Some(words)) => format!(
                        "text of {} words the server's tokenizer counts as one token each",
                        words.len()
                    ),
                    (None, None, None) => "text sized by words (approximate)".to_string(),
                },
                dialect: prepared.dialect.clone(),
            };
            shut_down(BTreeMap::from([(target.name.clone(), prepared)])).await;
            preflighted.map(|()| findings)
        }
        .await;
        reports.push(ProbeReport {
            target: target.name.clone(),
            outcome: match outcome {
                Ok(findings) => ProbeOutcome::Accepted(findings),
                Err(refusal) => ProbeOutcome::Refused(refusal),
            },
        });
    }
    Ok(reports)
}

/// Stop the simulators among `live` (endpoints need nothing).
pub(super) async fn shut_down(live: BTreeMap<String, LiveTarget>) {
    for (_, target) in live {
        if let Some(server) = target.sim {
            server.shutdown().await;
        }
    }
}

/// Mixed into the content nonce for the preflight's prompt: shaped as the
/// runs' calls are, but never one of them, so the server's prefix cache
/// gives no run a head start.
pub(super) const PREFLIGHT_STREAM: u64 = 0x5052_4546_4C54; // "PREFLT"

/// The preflight of `target` with `card`'s first call, shaped as the runs
/// will send it: the target's body options are replaced by what the
/// preflight settled, and the dialect is kept for every run's header. A
/// refusal stops everything before a run starts.
pub(super) async fn preflight(
    target: &mut LiveTarget,
    experiment: &Experiment,
    card: &CardPlan,
    nonce: u64,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let Some(run) = card.first_run() else {
        return Ok(());
    };
    let mut classes = Vec::new();
    let Some(sends) = card_sends(experiment, card, &mut classes) else {
        return Ok(());
    };
    let inputs = run_inputs(
        &target.endpoint,
        (target.token_ids, target.words.clone()),
        target.tokenizer.clone(),
        sends,
        run,
        nonce,
    );
    let task = inputs.source.task(0);
    let Some(call) = task.spec.first_call() else {
        return Ok(());
    };
    let prompt = inputs.source.render(call);
    let class = task.class.as_deref();
    let model = class
        .and_then(|c| c.model.as_deref())
        .unwrap_or(&target.endpoint.model)
        .to_string();
    let api = target.endpoint.api;
    let output = call.output_tokens;
    let priority = class.and_then(|c| c.priority);
    let render = |options: &exec::BodyOptions| {
        exec::request::build_spec_body(api, &model, &prompt, call, options, priority)
    };
    let outcome = exec::preflight::run(
        &target.endpoint,
        &card.target,
        &render,
        output,
        &target.listed_models,
        target.tokenizer.is_some(),
    )
    .await
    .map_err(|e| RunError::Exec {
        run_id: format!("{} preflight", card.target),
        message: e.to_string(),
    })?;
    match outcome {
        exec::preflight::Outcome::Accepted { dialect, options } => {
            let _ = writeln!(
                log,
                "  preflight: {} call{}, {}",
                dialect.preflight_calls,
                if dialect.preflight_calls == 1 {
                    ""
                } else {
                    "s"
                },
                crate::report::describe::dialect(&dialect)
            );
            for line in &dialect.settled {
                let _ = writeln!(log, "    {line}");
            }
            target.endpoint.body = options;
            target.dialect = Some(dialect);
            Ok(())
        }
        exec::preflight::Outcome::Refused { refusal, calls } => Err(RunError::Refused {
            target: card.target.clone(),
            calls,
            quote: refusal.quote,
            conclusion: refusal.conclusion,
            help: refusal.help,
        }),
    }
}

pub(super) async fn prepare_target(
    target: &Target,
    experiment: &Experiment,
    log: &mut (dyn Write + Send),
) -> Result<LiveTarget, RunError> {
    let seed = experiment.seed;
    let api_key = match &target.api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(v) if !v.is_empty() => Some(v),
            _ => {
                return Err(RunError::Usage(
                    format!(
                        "target `{}`: environment variable {var} is not set",
                        target.name
                    ),
                    Some(format!(
                        "export {var}=... before running, or remove `api-key-env`"
                    )),
                ));
            }
        },
        None => None,
    };
    let headers = resolve_headers(target)?;
    let (base_url, server) = match &target.kind {
        TargetKind::Endpoint { base_url } => (base_url.trim_end_matches('/').to_string(), None),
        TargetKind::Sim {
            preset,
            faults,
            serving,
        } => {
            let config =
                sim::SimConfig::for_target(preset, serving).map_err(|e| RunError::Sim {
                    target: target.name.clone(),
                    message: e.to_string(),
                })?;
            let config = config
                .with_faults(faults.clone())
                .with_adapters(mix_adapters(experiment))
                .with_seed(seed);
            let server = sim::start(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .await
                .map_err(|e| RunError::Sim {
                    target: target.name.clone(),
                    message: e.to_string(),
                })?;
            (server.base_url(), Some(server))
        }
    };
    let models = exec::client::probe_models_with(
        &base_url,
        api_key.as_deref(),
        &headers,
        target.timeout.min(Duration::from_secs(30)),
    )
    .await
    .map_err(|e| RunError::Unreachable {
        target: target.name.clone(),
        url: base_url.clone(),
        message: e.to_string(),
    })?;
    let model = match &target.model {
        Some(m) => m.clone(),
        None => models
            .ids
            .first()
            .cloned()
            .ok_or_else(|| RunError::Unreachable {
                target: target.name.clone(),
                url: base_url.clone(),
                message: "GET /models listed no model; set `model` in the target".into(),
            })?,
    };
    // Scrapes carry the target's credentials and headers: a hosted
    // endpoint's /metrics is usually behind the same auth as its API.
    let scrape_client =
        exec::client::probe_client(api_key.as_deref(), &headers, Duration::from_secs(2)).map_err(
            |e| RunError::Sim {
                target: target.name.clone(),
                message: e.to_string(),
            },
        )?;
    let (metrics_url, telemetry_off) = match &target.metrics {
        MetricsSource::Off => (None, Some("off (`metrics #false`)".to_string())),
        MetricsSource::Url { url } => (Some(url.clone()), None),
        MetricsSource::Auto => {
            let url = format!("{}/metrics", base_url.trim_end_matches("/v1"));
            match answers_prometheus(&scrape_client, &url).await {
                Ok(()) => (Some(url), None),
                Err(why) => {
                    let _ = writeln!(log, "  telemetry off: {why}");
                    (None, Some(format!("off: {why}")))
                }
            }
        }
    };
    // A probe that fails for any reason means text: prompts still go out,
    // sized by the approximation and corrected by the server's usage.
    let (token_ids, token_id_refusal) = if target.api == config::Api::Completions {
        match exec::probe_token_ids(
            &base_url,
            &model,
            api_key.as_deref(),
            target.timeout.min(Duration::from_secs(30)),
        )
        .await
        {
            Ok(exec::TokenIdSupport::Accepted(range)) => (Some(range), None),
            Ok(exec::TokenIdSupport::Refused(why)) => (None, Some(why)),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    let context_window = match &target.kind {
        TargetKind::Sim { .. } => plan::context::declared_window(target),
        TargetKind::Endpoint { .. } => {
            server_window(target, &models, &model, &base_url, api_key.as_deref(), log).await
        }
    };
    let tokenizer = target.tokenizer.as_ref().and_then(|t| t.loaded.clone());
    // Text prompts without a local tokenizer: ask the server's own which
    // words are one token. The simulator counts words already.
    let needs_text = token_ids.is_none() && tokenizer.is_none();
    let words = if needs_text && matches!(target.kind, TargetKind::Endpoint { .. }) {
        calibrate_words(&base_url, &model, api_key.as_deref(), target.timeout, log).await
    } else {
        None
    };
    // Empty the server's prefix cache before every run where it offers a way,
    // so no run inherits another's cache; the content nonce covers the rest.
    let mut cache_reset = None;
    if matches!(target.kind, TargetKind::Endpoint { .. }) {
        for path in exec::client::PREFIX_CACHE_RESETS {
            if exec::client::post_admin(&base_url, path, api_key.as_deref()).await {
                cache_reset = Some(path);
                break;
            }
        }
    }
    let _ = writeln!(
        log,
        "  prefix cache: {}",
        match cache_reset {
            Some(path) => format!("reset before every run (POST /{path})"),
            None => "the server offers no reset (vLLM: VLLM_SERVER_DEV_MODE=1); the content nonce keeps prompts new".to_string(),
        }
    );
    Ok(LiveTarget {
        endpoint: Endpoint {
            base_url,
            api: target.api,
            model,
            api_key,
            timeout: target.timeout,
            http2: target.http2,
            headers,
            body: exec::BodyOptions::for_target(target),
        },
        sim: server,
        metrics_url,
        scrape_client,
        tokenizer,
        token_ids,
        token_id_refusal,
        words,
        cache_reset,
        telemetry_off,
        virtual_target: None,
        context_window,
        dialect: None,
        listed_models: models.ids.clone(),
    })
}

/// Before a card's first run: warn, with the numbers, when its workloads
/// (a mix's classes too) can exceed the target's window. The calls beyond it
/// will be refused and counted as `context-length`, never as capacity.
pub(super) fn warn_context_overflow(
    experiment: &Experiment,
    card: &CardPlan,
    target: &LiveTarget,
    log: &mut (dyn Write + Send),
) {
    let Some(window) = &target.context_window else {
        return;
    };
    for (name, fit) in plan::context::card_overflows(experiment, card, window) {
        let _ = writeln!(log, "  warning: {}", fit.describe(&name));
    }
}

/// An endpoint's window: what the server reports for `model` (its model
/// list, else TGI's `/info`), else the target's `max-context`. Where the
/// two disagree the server's is kept, since it is what refuses calls, and
/// the log says so.
pub(super) async fn server_window(
    target: &Target,
    models: &exec::client::ModelList,
    model: &str,
    base_url: &str,
    api_key: Option<&str>,
    log: &mut (dyn Write + Send),
) -> Option<plan::context::ContextWindow> {
    let reported = match models.window_of(model) {
        Some((tokens, field)) => Some((tokens, format!("server: GET /v1/models {field}"))),
        None => exec::client::probe_info_window(base_url, api_key, Duration::from_secs(5))
            .await
            .map(|tokens| (tokens, "server: GET /info max_total_tokens".to_string())),
    };
    match (reported, target.max_context) {
        (Some((tokens, source)), declared) => {
            if let Some(declared) = declared.filter(|&d| d != tokens) {
                let _ = writeln!(
                    log,
                    "  context window: the server reports {tokens} tokens, the target declares                      `max-context {declared}`; the server's is what refuses calls, so it is used"
                );
            }
            Some(plan::context::ContextWindow { tokens, source })
        }
        (None, Some(tokens)) => Some(plan::context::ContextWindow {
            tokens,
            source: "`max-context`".to_string(),
        }),
        (None, None) => None,
    }
}

/// `--virtual` drives only simulated engines: an endpoint among the
/// selected targets is a usage error before anything runs.
pub(super) fn refuse_endpoints_in_virtual_time(
    experiment: &Experiment,
    selected: &Plan,
) -> Result<(), RunError> {
    let endpoints: Vec<&str> = experiment
        .targets
        .iter()
        .filter(|t| selected.cards.iter().any(|c| c.target == t.name))
        .filter(|t| matches!(t.kind, TargetKind::Endpoint { .. }))
        .map(|t| t.name.as_str())
        .collect();
    if endpoints.is_empty() {
        return Ok(());
    }
    let sims: Vec<&str> = experiment
        .targets
        .iter()
        .filter(|t| matches!(t.kind, TargetKind::Sim { .. }))
        .map(|t| t.name.as_str())
        .collect();
    Err(RunError::Usage(
        format!(
            "--virtual runs the simulated engine on its own clock, but target{} {} {} a real endpoint",
            if endpoints.len() == 1 { "" } else { "s" },
            endpoints
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if endpoints.len() == 1 { "is" } else { "are" },
        ),
        Some(match sims.first() {
            Some(sim) => format!(
                "select the simulated targets (e.g. --target {sim}), or run without --virtual; \
                 `virtual #true` in a `sim` block makes only that target virtual"
            ),
            None => "run without --virtual: this file has no `sim` target".to_string(),
        }),
    ))
}

/// The virtual-time engine of a `sim` target that runs on its own clock
/// (`--virtual`, or `virtual #true` in its block), with its knobs applied.
pub(super) fn virtual_target(
    target: &Target,
    experiment: &Experiment,
    forced: bool,
) -> Result<Option<exec::virtual_time::VirtualTarget>, RunError> {
    let TargetKind::Sim {
        preset,
        faults,
        serving,
    } = &target.kind
    else {
        return Ok(None);
    };
    if !(forced || serving.virtual_time) {
        return Ok(None);
    }
    let sim_error = |message: String| RunError::Sim {
        target: target.name.clone(),
        message,
    };
    let preset = sim::resolve(preset, serving).map_err(|e| sim_error(e.to_string()))?;
    let base_model = preset.model.served_name.to_string();
    let served: Vec<String> = std::iter::once(base_model.clone())
        .chain(mix_adapters(experiment))
        .collect();
    Ok(Some(exec::virtual_time::VirtualTarget {
        model: target.model.clone().unwrap_or(base_model),
        served,
        replicas: serving.replicas.max(1),
        router: serving.router,
        faults: faults.clone(),
        seed: experiment.seed,
        api: target.api,
        body: exec::BodyOptions::for_target(target),
        timeout: target.timeout,
        network_overhead: serving.network_overhead,
        context_window: plan::context::declared_window(target),
        preset,
    }))
}

/// A mix class's `model` (a LoRA adapter's name, say) is served beside the
/// base model, as a real server with the adapter loaded would.
pub(super) fn mix_adapters(experiment: &Experiment) -> Vec<String> {
    let mut adapters: Vec<String> = experiment
        .mixes
        .iter()
        .flat_map(|m| &m.classes)
        .filter_map(|c| c.model.clone())
        .collect();
    adapters.sort();
    adapters.dedup();
    adapters
}

/// A virtual-time target: nothing to start or probe. Prompts go out as a
/// probe of the simulator would find (token ids inside its vocabulary for
/// `completions`, words it counts one token each for `chat`).
pub(super) fn prepare_virtual(
    target: &Target,
    virtual_target: exec::virtual_time::VirtualTarget,
) -> LiveTarget {
    let token_ids = (target.api == config::Api::Completions)
        .then(|| TokenIdRange::for_vocabulary(virtual_target.preset.model.vocab))
        .flatten();
    LiveTarget {
        endpoint: Endpoint {
            base_url: "virtual://".to_string(),
            api: target.api,
            model: virtual_target.model.clone(),
            api_key: None,
            timeout: target.timeout,
            http2: false,
            headers: Vec::new(),
            body: virtual_target.body.clone(),
        },
        sim: None,
        metrics_url: None,
        scrape_client: exec::HttpClient::new(Duration::from_secs(2)),
        tokenizer: target.tokenizer.as_ref().and_then(|t| t.loaded.clone()),
        token_ids,
        token_id_refusal: None,
        words: None,
        cache_reset: None,
        // The engine's own /metrics, read every second of virtual time.
        telemetry_off: None,
        context_window: virtual_target.context_window.clone(),
        virtual_target: Some(virtual_target),
        dialect: None,
        listed_models: Vec::new(),
    }
}

/// The target's `header` lines with their values (environment read now).
pub(super) fn resolve_headers(target: &Target) -> Result<Vec<(String, String)>, RunError> {
    target
        .headers
        .iter()
        .map(|h| match &h.value {
            config::HeaderValueSpec::Literal(v) => Ok((h.name.clone(), v.clone())),
            config::HeaderValueSpec::Env(var) => match std::env::var(var) {
                Ok(v) if !v.is_empty() => Ok((h.name.clone(), v)),
                _ => Err(RunError::Usage(
                    format!(
                        "target `{}`: header `{}` reads environment variable {var}, which is not set",
                        target.name, h.name
                    ),
                    Some(format!("export {var}=... before running")),
                )),
            },
        })
        .collect()
}

/// The server's single-token words, through its tokenize endpoint; `None`
/// (text sized by the built-in word list) when it has none or it fails.
pub(super) async fn calibrate_words(
    base_url: &str,
    model: &str,
    api_key: Option<&str>,
    timeout: Duration,
    log: &mut (dyn Write + Send),
) -> Option<std::sync::Arc<crate::workload::prompt::WordList>> {
    let timeout = timeout.min(Duration::from_secs(10));
    let endpoint = exec::tokenize::TokenizeEndpoint::find(base_url, model, api_key, timeout)
        .await
        .ok()
        .flatten()?;
    let Some(calibration) = endpoint.calibrate().await else {
        let _ = writeln!(
            log,
            "  the server's tokenize endpoint answered, but too few prompt words are one token \
             there: text prompts are sized by words (approximate)"
        );
        return None;
    };
    let samples: Vec<String> = calibration
        .samples
        .iter()
        .map(|(planned, counted)| format!("{planned}→{counted}"))
        .collect();
    let _ = writeln!(
        log,
        "  prompts: {} words are one token each by {} (samples planned→counted: {})",
        calibration.words.len(),
        calibration.endpoint,
        samples.join(", ")
    );
    Some(std::sync::Arc::new(calibration.words))
}

/// Whether `url` serves Prometheus text (for `metrics` left at its default).
pub(super) async fn answers_prometheus(client: &exec::HttpClient, url: &str) -> Result<(), String> {
    match client.get(url).await {
        Ok(reply) if reply.is_success() => {
            let body = reply.text();
            if body.contains("# TYPE") || body.contains("# HELP") {
                Ok(())
            } else {
                Err(format!(
                    "GET {url} answered, but not with Prometheus metrics"
                ))
            }
        }
        Ok(reply) => {
            let status = http::StatusCode::from_u16(reply.status)
                .map_or_else(|_| reply.status.to_string(), |s| s.to_string());
            Err(match reply.status {
                401 | 403 => format!(
                    "GET {url} was refused ({status}) with the target's key and headers; \
                     give the scrape its own URL with `metrics \"URL\"` or a `header`"
                ),
                _ => format!("GET {url} answered {status}: the server offers no metrics there"),
            })
        }
        Err(e) => Err(format!("GET {url} failed: {e}")),
    }
}
