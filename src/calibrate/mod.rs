//! `capcard calibrate DIR`: fits the simulator's free parameters to a real
//! results folder's closed sweep (observe → replay → calibrate).
//!
//! The folder holds everything a replay needs: the experiment, and every
//! journal's run plan and content nonce. Each closed level is replayed in
//! virtual time ([`crate::exec::virtual_time`]) with the same request
//! stream on a preset whose efficiencies, per-step and per-sequence
//! overheads and client network overhead are the free parameters
//! ([`fit::Params`]); a Nelder–Mead search ([`fit`]) brings the replay's
//! TTFT p50, ITL p50 and output tok/s at every level as close as it can to
//! what was measured. The result is a `target` block with a `sim` whose
//! knobs reproduce the folder, stating its source and its error, so a
//! what-if runs on a simulator that has earned some trust.
//!
//! The engine's batch cap matters as much as its speed: it comes from
//! `--max-num-seqs`, else from the server's own telemetry (the most
//! requests it ever ran at once, when the sweep went beyond it), else the
//! preset's.

pub mod fit;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fit::{LevelFigures, Params};

use crate::analyze::{self, RunSummary};
use crate::config::{self, Experiment, Target, TargetKind};
use crate::exec::{self, JournalLine, RunInputs, virtual_time::VirtualTarget};
use crate::folder::ResultsFolder;
use crate::plan::{Load, RunPlan};
use crate::sim::{Preset, presets};
use crate::workload::prompt::TokenIdRange;

/// What `capcard calibrate` was asked.
#[derive(Debug, Clone, Default)]
pub struct CalibrateRequest {
    pub dir: PathBuf,
    /// The preset whose model and hardware the fit starts from (default:
    /// the folder's own `sim` preset).
    pub preset: Option<String>,
    /// The real engine's batch cap, when its telemetry does not tell.
    pub max_num_seqs: Option<u32>,
    /// `TARGET--WORKLOAD` of the card to fit (default: the first card with
    /// a closed sweep of two levels or more).
    pub card: Option<String>,
    /// Most simulations the search may run.
    pub max_evaluations: usize,
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum CalibrateError {
    #[error("{0}")]
    #[diagnostic(code(capcard::calibrate))]
    Usage(String, #[help] Option<String>),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Config(#[from] Box<config::ConfigError>),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Folder(#[from] crate::folder::FolderError),
    #[error("cannot replay run {run}: {message}")]
    #[diagnostic(code(capcard::calibrate))]
    Replay { run: String, message: String },
}

/// One closed level: what was measured and what the calibrated sim gives.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelComparison {
    pub real: LevelFigures,
    pub sim: Option<LevelFigures>,
}

/// The fitted simulator and how well it reproduces the folder.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The folder, as given.
    pub source: String,
    pub target: String,
    pub workload: String,
    pub preset: String,
    pub params: Params,
    pub max_num_seqs: u32,
    /// Where `max_num_seqs` came from, in words.
    pub max_num_seqs_from: String,
    pub levels: Vec<LevelComparison>,
    /// Cr_closed range measured, and replayed by the fitted sim.
    pub knee_real: Option<[u32; 2]>,
    pub knee_sim: Option<[u32; 2]>,
    pub evaluations: usize,
    /// The real target's API, timeout and force-length, kept for the block.
    pub api: config::Api,
    pub timeout: std::time::Duration,
    pub force_length: bool,
}

/// Everything one replay needs, built once.
struct Replay<'a> {
    base: Preset,
    target: &'a Target,
    experiment: &'a Experiment,
    runs: Vec<(RunPlan, Arc<dyn exec::RequestSource>)>,
    max_num_seqs: u32,
}

impl Replay<'_> {
    fn preset_with(&self, params: &Params) -> Preset {
        let mut preset = self.base.clone();
        preset.efficiency.compute = params.compute_efficiency;
        preset.efficiency.memory = params.memory_efficiency;
        preset.efficiency.step_overhead_s = params.step_overhead_s;
        preset.efficiency.per_seq_overhead_s = params.per_seq_overhead_s;
        preset.max_num_seqs = self.max_num_seqs;
        preset
    }

    /// Every level replayed with `params`, summarised like a real run.
    fn run(&self, params: &Params) -> Result<Vec<RunSummary>, CalibrateError> {
        let preset = self.preset_with(params);
        let model = preset.model.served_name.to_string();
        let target = VirtualTarget {
            served: vec![model.clone()],
            model,
            replicas: 1,
            router: Default::default(),
            faults: Default::default(),
            seed: self.experiment.seed,
            api: self.target.api,
            body: exec::BodyOptions::for_target(self.target),
            timeout: self.target.timeout,
            network_overhead: params.network_overhead(),
            context_window: None,
            preset,
        };
        self.runs
            .iter()
            .map(|(run, source)| {
                let mut journal = exec::Journal::default();
                let mut sink = |line: JournalLine| match line {
                    JournalLine::Run(h) => journal.header = Some(h),
                    JournalLine::Request(r) => journal.requests.push(r),
                    JournalLine::Task(t) => journal.tasks.push(t),
                    JournalLine::End(f) => journal.footer = Some(f),
                };
                let inputs = RunInputs::for_run(run, Arc::clone(source));
                let (footer, _telemetry) = exec::virtual_time::simulate(
                    &target,
                    run,
                    inputs,
                    (None, None),
                    &|| false,
                    &mut sink,
                    None,
                )
                .map_err(|e| CalibrateError::Replay {
                    run: run.id.clone(),
                    message: e.to_string(),
                })?;
                journal.footer = Some(exec::journal::build_footer(&journal, footer));
                Ok(analyze::summary::summarize(&journal, &[]))
            })
            .collect()
    }
}

fn figures(s: &RunSummary) -> Option<LevelFigures> {
    (s.ttft_ms.count > 0).then(|| LevelFigures {
        concurrency: s.concurrency.unwrap_or(0),
        ttft_p50_ms: s.ttft_ms.p50,
        itl_p50_ms: s.itl_ms.p50,
        output_tokens_per_s: s.output_tokens_per_s,
        ttft_mean_ms: s.ttft_ms.mean,
        itl_mean_ms: s.itl_ms.mean,
        e2e_mean_ms: s.e2e_ms.mean,
    })
}

/// Fits the simulator to the closed sweep of `request.dir`.
pub fn calibrate(request: &CalibrateRequest) -> Result<Calibration, CalibrateError> {
    let folder = ResultsFolder::new(&request.dir);
    let experiment_path = folder.experiment();
    let source = std::fs::read_to_string(&experiment_path).map_err(|_| {
        CalibrateError::Usage(
            format!("{} is not a results folder", request.dir.display()),
            Some("give the folder `capcard run` wrote (it holds experiment.kdl and runs/)".into()),
        )
    })?;
    let experiment = config::parse(&source, &experiment_path)
        .map_err(|e| CalibrateError::Config(Box::new(e)))?;
    let report =
        crate::folder::recompute(&folder, &experiment, &crate::plan::build(&experiment), None)?;

    let eligible = |c: &&analyze::Card| {
        c.mix.is_none() && c.closed.iter().filter(|s| figures(s).is_some()).count() >= 2
    };
    let card = match &request.card {
        Some(name) => report
            .cards
            .iter()
            .find(|c| format!("{}--{}", c.target, c.workload) == *name)
            .ok_or_else(|| {
                CalibrateError::Usage(
                    format!("{} has no card `{name}`", request.dir.display()),
                    Some(format!(
                        "cards: {}",
                        report
                            .cards
                            .iter()
                            .map(|c| format!("{}--{}", c.target, c.workload))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                )
            })?,
        None => report.cards.iter().find(eligible).ok_or_else(|| {
            CalibrateError::Usage(
                format!(
                    "{} has no closed sweep of two levels or more to fit",
                    request.dir.display()
                ),
                Some(
                    "calibration fits a closed sweep (e.g. `concurrency 1 2 4 8`): run one first"
                        .into(),
                ),
            )
        })?,
    };
    if !eligible(&card) {
        return Err(CalibrateError::Usage(
            format!(
                "card {}--{} has no closed sweep of two measured levels (or is a mix)",
                card.target, card.workload
            ),
            None,
        ));
    }
    let target = experiment.target(&card.target).ok_or_else(|| {
        CalibrateError::Usage(
            format!("the experiment has no target `{}`", card.target),
            None,
        )
    })?;
    let workload = experiment.workload(&card.workload).ok_or_else(|| {
        CalibrateError::Usage(
            format!("the experiment has no workload `{}`", card.workload),
            None,
        )
    })?;

    let preset_name = match (&request.preset, &target.kind) {
        (Some(p), _) => p.clone(),
        (None, TargetKind::Sim { preset, .. }) => preset.clone(),
        (None, TargetKind::Endpoint { .. }) => {
            return Err(CalibrateError::Usage(
                format!(
                    "target `{}` is a real endpoint: which model and hardware should the simulator start from?",
                    target.name
                ),
                Some(format!(
                    "pass --preset (known: {}); `tiny` suits small CPU-served models",
                    presets::names().join(", ")
                )),
            ));
        }
    };
    // The bare preset: calibration fits the knobs itself.
    let base = crate::sim::resolve(&preset_name, &Default::default()).map_err(|_| {
        CalibrateError::Usage(
            format!("unknown preset `{preset_name}`"),
            Some(format!("known presets: {}", presets::names().join(", "))),
        )
    })?;

    let mut measured: Vec<&RunSummary> = card
        .closed
        .iter()
        .filter(|s| figures(s).is_some())
        .collect();
    measured.sort_by_key(|s| s.concurrency);
    // The batch cap shows in telemetry as a plateau: the same most-running
    // at the sweep's two top levels, below the top concurrency (vLLM at
    // c=4 and c=8 with --max-num-seqs 4). Fewer running at the top level
    // alone can be KV pressure or calls in transit, not a cap.
    let running: Vec<(u32, f64)> = measured
        .iter()
        .filter_map(|s| {
            let max = s.server.as_ref().and_then(|t| t.requests_running_max)?;
            Some((s.concurrency?, max))
        })
        .collect();
    let plateau = match running.as_slice() {
        [.., (_, below), (c, top)] if (below - top).abs() < 0.5 && *top < f64::from(*c) => {
            Some((*c, top.round() as u32))
        }
        _ => None,
    };
    let (max_num_seqs, max_num_seqs_from) = match (request.max_num_seqs, plateau) {
        (Some(n), _) => (n, "--max-num-seqs".to_string()),
        (None, Some((c, cap))) => (
            cap,
            format!(
                "the server's telemetry: at most {cap} requests running at once at the top two levels (up to concurrency {c})"
            ),
        ),
        _ => (
            base.max_num_seqs,
            format!(
                "the preset `{}` (the server's telemetry shows no batch cap below the sweep; pass --max-num-seqs if it differs)",
                base.name
            ),
        ),
    };

    // Each level's run plan and request stream, from its journal.
    let token_ids = TokenIdRange::for_vocabulary(base.model.vocab);
    let mut runs = Vec::new();
    for summary in &measured {
        let path = folder.journal(&summary.run_id);
        let (journal, _) = exec::read_journal_ends(&path).map_err(|e| CalibrateError::Replay {
            run: summary.run_id.clone(),
            message: e.to_string(),
        })?;
        let Some(header) = journal.header else {
            continue;
        };
        if !matches!(header.run.load, Load::Concurrency { .. }) {
            continue;
        }
        let completions = match (target.api, token_ids) {
            (config::Api::Completions, Some(_)) => exec::CompletionsPrompt::TokenIds,
            _ => exec::CompletionsPrompt::Text,
        };
        let source = exec::WorkloadSource::new(workload, header.run.seed, target.api, completions)
            .with_token_id_range(token_ids.unwrap_or(TokenIdRange::DEFAULT))
            .with_content_nonce(header.content_nonce)
            .shared();
        runs.push((header.run, source));
    }
    let real: Vec<LevelFigures> = measured.iter().filter_map(|s| figures(s)).collect();
    let replay = Replay {
        base: base.clone(),
        target,
        experiment: &experiment,
        runs,
        max_num_seqs,
    };

    let start = Params {
        compute_efficiency: base.efficiency.compute,
        memory_efficiency: base.efficiency.memory,
        step_overhead_s: base.efficiency.step_overhead_s.max(1e-5),
        per_seq_overhead_s: base.efficiency.per_seq_overhead_s.max(1e-6),
        network_overhead_s: 2e-4,
    };
    let mut failure = None;
    let mut objective = |x: &[f64; 5]| {
        let params = Params::from_search(x);
        match replay.run(&params) {
            Ok(summaries) => {
                let sim: Vec<Option<LevelFigures>> = summaries.iter().map(figures).collect();
                fit::sweep_error(&real, &sim)
            }
            Err(e) => {
                failure.get_or_insert(e);
                f64::INFINITY
            }
        }
    };
    let budget = if request.max_evaluations == 0 {
        1000
    } else {
        request.max_evaluations
    };
    // A wide first simplex (×e per parameter) finds the basin; each
    // restart builds a fresh, smaller simplex around the best point so far,
    // which frees a simplex that collapsed along one parameter.
    let (mut x, mut value, mut evaluations) = fit::nelder_mead(
        &mut objective,
        start.to_search(),
        Params::search_steps(1.0),
        budget / 3,
    );
    for scale in [0.5, 0.25, 0.5, 0.1, 0.25, 0.05] {
        if evaluations + 10 >= budget {
            break;
        }
        let share = ((budget - evaluations) / 3).max(10);
        let (x2, v2, used) =
            fit::nelder_mead(&mut objective, x, Params::search_steps(scale), share);
        evaluations += used;
        if v2 <= value {
            (x, value) = (x2, v2);
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let params = Params::from_search(&x);
    let sim = replay.run(&params)?;
    let levels = real
        .iter()
        .zip(&sim)
        .map(|(r, s)| LevelComparison {
            real: *r,
            sim: figures(s),
        })
        .collect();
    let knee_spec = experiment
        .closed
        .as_ref()
        .map(|c| c.knee)
        .unwrap_or_default();
    let real_summaries: Vec<RunSummary> = measured.iter().map(|s| (*s).clone()).collect();
    Ok(Calibration {
        source: request.dir.display().to_string(),
        target: card.target.clone(),
        workload: card.workload.clone(),
        preset: base.name.to_string(),
        params,
        max_num_seqs,
        max_num_seqs_from,
        levels,
        knee_real: analyze::knee::cr_closed(&real_summaries, &knee_spec).map(|k| k.range),
        knee_sim: analyze::knee::cr_closed(&sim, &knee_spec).map(|k| k.range),
        evaluations,
        api: target.api,
        timeout: target.timeout,
        force_length: target.force_length,
    })
}

fn range(r: Option<[u32; 2]>) -> String {
    match r {
        Some([a, b]) if a == b => a.to_string(),
        Some([a, b]) => format!("{a}–{b}"),
        None => "not found".to_string(),
    }
}

impl Calibration {
    /// The largest |error| of each figure over the levels.
    pub fn worst_errors(&self) -> [Option<f64>; 3] {
        let worst = |f: fn(&LevelFigures) -> f64| {
            self.levels
                .iter()
                .filter_map(|l| {
                    l.sim
                        .as_ref()
                        .and_then(|s| fit::relative_error(f(s), f(&l.real)))
                })
                .map(f64::abs)
                .fold(None::<f64>, |m, e| Some(m.map_or(e, |m| m.max(e))))
        };
        [
            worst(|l| l.ttft_p50_ms),
            worst(|l| l.itl_p50_ms),
            worst(|l| l.output_tokens_per_s),
        ]
    }

    /// The calibration as the card states it (`calibrated "..."`).
    pub fn statement(&self) -> String {
        let [ttft, itl, tps] = self.worst_errors();
        let levels: Vec<String> = self
            .levels
            .iter()
            .map(|l| l.real.concurrency.to_string())
            .collect();
        let within = |e: Option<f64>| match e {
            Some(e) => format!("±{:.0}%", e * 100.0),
            None => "—".to_string(),
        };
        format!(
            "{} ({} × {}, closed {}): TTFT p50 {}, ITL p50 {}, output tok/s {} at worst; Cr_closed {} measured, {} simulated",
            self.source,
            self.target,
            self.workload,
            levels.join(" "),
            within(ttft),
            within(itl),
            within(tps),
            range(self.knee_real),
            range(self.knee_sim)
        )
    }

    /// Level by level, measured against simulated, for the terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "calibrated `{}` to {} ({} × {}) in {} simulations; max-num-seqs {} from {}",
            self.preset,
            self.source,
            self.target,
            self.workload,
            self.evaluations,
            self.max_num_seqs,
            self.max_num_seqs_from
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| c | TTFT p50 real | sim | error | ITL p50 real | sim | error | output tok/s real | sim | error |"
        );
        let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for l in &self.levels {
            let r = &l.real;
            match &l.sim {
                Some(s) => {
                    let _ = writeln!(
                        out,
                        "| {} | {:.1} ms | {:.1} ms | {} | {:.2} ms | {:.2} ms | {} | {:.1} | {:.1} | {} |",
                        r.concurrency,
                        r.ttft_p50_ms,
                        s.ttft_p50_ms,
                        crate::format::signed_pct_of_fraction(fit::relative_error(
                            s.ttft_p50_ms,
                            r.ttft_p50_ms
                        )),
                        r.itl_p50_ms,
                        s.itl_p50_ms,
                        crate::format::signed_pct_of_fraction(fit::relative_error(
                            s.itl_p50_ms,
                            r.itl_p50_ms
                        )),
                        r.output_tokens_per_s,
                        s.output_tokens_per_s,
                        crate::format::signed_pct_of_fraction(fit::relative_error(
                            s.output_tokens_per_s,
                            r.output_tokens_per_s
                        )),
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "| {} | {:.1} ms | — | — | {:.2} ms | — | — | {:.1} | — | — |",
                        r.concurrency, r.ttft_p50_ms, r.itl_p50_ms, r.output_tokens_per_s
                    );
                }
            }
        }
        let _ = writeln!(
            out,
            "\nCr_closed (the knee): {} measured, {} simulated.",
            range(self.knee_real),
            range(self.knee_sim)
        );
        out
    }

    /// A `target` block whose `sim` reproduces the folder, ready to paste
    /// into an experiment (`capcard calibrate --out FILE` writes it).
    pub fn target_kdl(&self) -> String {
        let p = &self.params;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "// Written by `capcard calibrate {}`: the simulator fitted to {} × {} ({} simulations).",
            self.source, self.target, self.workload, self.evaluations
        );
        let _ = writeln!(
            out,
            "// Efficiencies and overheads are fitted values, not measurements of the hardware."
        );
        let _ = writeln!(
            out,
            "target {} {{",
            crate::config::write::string(&format!("{}-sim", self.target))
        );
        let _ = writeln!(out, "    sim {} {{", self.preset);
        let _ = writeln!(out, "        max-num-seqs {}", self.max_num_seqs);
        let _ = writeln!(
            out,
            "        compute-efficiency {:.4}",
            p.compute_efficiency
        );
        let _ = writeln!(out, "        memory-efficiency {:.4}", p.memory_efficiency);
        let _ = writeln!(
            out,
            "        step-overhead \"{}\"",
            crate::format::duration_literal(p.step_overhead_s)
        );
        let _ = writeln!(
            out,
            "        per-seq-overhead \"{}\"",
            crate::format::duration_literal(p.per_seq_overhead_s)
        );
        let _ = writeln!(out, "        virtual #true");
        let _ = writeln!(
            out,
            "        network-overhead \"{}\"",
            crate::format::duration_literal(p.network_overhead_s)
        );
        let _ = writeln!(
            out,
            "        calibrated {}",
            kdl::KdlValue::String(self.statement())
        );
        let _ = writeln!(out, "    }}");
        if self.api == config::Api::Completions {
            let _ = writeln!(out, "    api completions");
        }
        let _ = writeln!(
            out,
            "    timeout \"{}\"",
            crate::format::duration_literal(self.timeout.as_secs_f64())
        );
        if !self.force_length {
            let _ = writeln!(out, "    force-length #false");
        }
        let _ = writeln!(out, "}}");
        out
    }
}

/// Writes `text` to `path` (the `--out` of `capcard calibrate`).
pub fn write_kdl(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}
