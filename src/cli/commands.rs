//! What each `capcard` command does once its arguments are parsed: one
//! function a command, taking a typed request and returning an [`Exit`].
//! The binary only parses, calls [`execute`] and exits with its status.
//!
//! Every command writes its results on the `out` it is given (stdout for
//! the binary) and its diagnostics on stderr. A write to `out` that fails
//! ends the command with that error: [`execute`] treats a closed pipe
//! (`capcard plan x.kdl | head -1`) as the reader having read enough.

use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::{Cli, Command, OnlyMode};
use crate::{
    calibrate, config, diff, folder, init, k8s, plan, profile, report, runner, shard, sim,
};

/// The exit status of `capcard`, one meaning a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// 0: done.
    Success = 0,
    /// 1: invalid input or usage (a bad file, flag or folder).
    Invalid = 1,
    /// 2: a run (or a probe, a write) could not be carried out, or was
    /// interrupted.
    NotCarriedOut = 2,
    /// 3: `diff --fail-on-regression` found one.
    Regression = 3,
    /// 4: `run` measured, but at least one run was invalid.
    InvalidRuns = 4,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The status of a library exit code (as [`runner::RunError::exit_code`]
    /// gives): anything unknown is a run not carried out.
    pub fn from_code(code: i32) -> Exit {
        match code {
            0 => Exit::Success,
            1 => Exit::Invalid,
            3 => Exit::Regression,
            4 => Exit::InvalidRuns,
            _ => Exit::NotCarriedOut,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

/// What a command's writes to `out` came to: `Err` only when `out` itself
/// failed; the command's own failures are an [`Exit`].
pub type Outcome = io::Result<Exit>;

/// Runs the parsed command line, its results on stdout. A closed stdout is
/// no failure: the command stops and exits 0, as `head` asked.
pub fn execute(cli: Cli) -> Exit {
    let mut stdout = io::stdout();
    match dispatch(cli.command, &mut stdout).and_then(|exit| stdout.flush().map(|()| exit)) {
        Ok(exit) => exit,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Exit::Success,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            Exit::NotCarriedOut
        }
    }
}

/// One command, its results on `out`.
pub fn dispatch(command: Command, out: &mut dyn Write) -> Outcome {
    match command {
        Command::Check { files, probe } => check(&CheckRequest { files, probe }, out),
        Command::Plan { file, json } => plan(&PlanRequest { file, json }, out),
        Command::Init {
            url,
            api_key_env,
            model,
            out: file,
        } => init(
            &InitRequest {
                url,
                api_key_env,
                model,
                out: file,
            },
            out,
        ),
        Command::Run {
            file,
            out: dir,
            only,
            target,
            workload,
            resume,
            quiet,
            nonce,
            virtual_time,
            shard,
            start_at,
            coordinator,
            coordinate,
            listen,
            lost_after,
            start_lead,
        } => {
            let shard = match (shard, start_at, coordinator, coordinate) {
                (Some(part), Some(start_at), None, None) => {
                    Some(runner::ShardMode::Timetable { part, start_at })
                }
                (Some(part), None, Some(coordinator), None) => {
                    Some(runner::ShardMode::Worker { part, coordinator })
                }
                (None, None, None, Some(count)) => Some(runner::ShardMode::Coordinator {
                    count,
                    listen,
                    timing: crate::shard::coordinator::Timing {
                        lost_after,
                        start_lead,
                    },
                }),
                (Some(_), None, None, _) => {
                    eprintln!(
                        "error: --shard needs --start-at T (a timetable, merged with `capcard merge`) \
                         or --coordinator URL (runs handed out by `capcard run --coordinate N`)"
                    );
                    return Ok(Exit::Invalid);
                }
                _ => None,
            };
            let request = runner::RunRequest {
                experiment_path: file,
                source: None,
                out: dir,
                only: only.map(|o| match o {
                    OnlyMode::Closed => plan::Mode::Closed,
                    OnlyMode::Open => plan::Mode::Open,
                }),
                target,
                workload,
                resume,
                show_progress: !quiet && io::stderr().is_terminal(),
                nonce,
                virtual_time,
                shard,
            };
            Ok(run(request, out))
        }
        Command::Merge { dirs, out: dir } => merge(&MergeRequest { dirs, out: dir }, out),
        Command::Report {
            dir,
            template,
            out: file,
            html,
            audit,
        } => report(
            &ReportRequest {
                dir,
                template,
                out: file,
                html,
                audit,
            },
            out,
        ),
        Command::Export {
            dir,
            format,
            out: folder,
        } => export(&dir, format.into(), folder.as_deref(), out),
        Command::Diff {
            a,
            b,
            out: file,
            fail_on_regression,
        } => diff(
            &DiffRequest {
                a,
                b,
                out: file,
                fail_on_regression,
            },
            out,
        ),
        Command::Profile {
            logs,
            out: file,
            json,
            report,
            name,
            block_tokens,
            time_unit,
        } => profile(
            &ProfileCommand {
                request: profile::load::ProfileRequest {
                    logs,
                    block_tokens,
                    name,
                    time_unit: time_unit.map(Into::into),
                },
                out: file,
                json,
                report,
            },
            out,
        ),
        Command::Audit {
            file,
            target,
            workload,
            seeds,
            first_seed,
            reference_calls,
            reference_runs,
            keep,
            json,
        } => audit(
            &crate::audit::AuditRequest {
                experiment_path: file,
                target,
                workload,
                seeds,
                first_seed,
                reference_calls,
                reference_runs,
                keep,
            },
            json,
            out,
        ),
        Command::Calibrate {
            dir,
            preset,
            out: file,
            max_num_seqs,
            card,
            max_evaluations,
        } => calibrate(
            &CalibrateCommand {
                request: calibrate::CalibrateRequest {
                    dir,
                    preset,
                    max_num_seqs,
                    card,
                    max_evaluations,
                },
                out: file,
            },
            out,
        ),
        Command::K8s {
            file,
            shards,
            image,
            namespace,
            name,
            storage,
            cpu,
            out: yaml,
        } => k8s(
            &K8sRequest {
                file,
                options: k8s::K8sOptions {
                    shards,
                    image,
                    namespace,
                    name,
                    storage,
                    cpu,
                },
                out: yaml,
            },
            out,
        ),
        Command::Sim {
            preset,
            listen,
            list,
            fail_rate,
            cut_rate,
            stall,
            seed,
            adapters,
            max_num_seqs,
            max_batched_tokens,
            kv_cache_tokens,
            tensor_parallel,
            gpu_memory_utilization,
            prefix_caching,
            chunked_prefill,
            max_model_len,
            replicas,
            router,
            strict,
            refused_fields,
            ignored_fields,
            rate_limit,
            reasoning_tokens,
            tokens_per_event,
            prompt_tokens_details,
        } => sim(
            SimRequest {
                preset,
                listen,
                list,
                fail_rate,
                cut_rate,
                stall,
                seed,
                adapters,
                serving: sim::SimServing {
                    max_num_seqs,
                    max_batched_tokens,
                    kv_cache_tokens,
                    gpu_memory_utilization,
                    prefix_caching,
                    chunked_prefill,
                    tensor_parallel,
                    reasoning_tokens: reasoning_tokens.map(|n| config::Dist::fixed(f64::from(n))),
                    tokens_per_event,
                    prompt_tokens_details: prompt_tokens_details.then_some(true),
                    replicas,
                    router,
                    max_context: max_model_len,
                    ..sim::SimServing::default()
                },
                dialect: sim::SimDialect {
                    strict,
                    refused_fields,
                    ignored_fields,
                    rate_limit,
                },
            },
            out,
        ),
    }
}

/// `capcard check FILE... [--probe]`.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    pub files: Vec<PathBuf>,
    pub probe: bool,
}

/// `capcard check`: each file validated (exit 1 on any error), then, with
/// `--probe`, its targets probed.
pub fn check(request: &CheckRequest, out: &mut dyn Write) -> Outcome {
    let mut failed = false;
    for file in &request.files {
        match config::load(file) {
            Ok(experiment) => {
                writeln!(out, "{}", config::summary_line(file, &experiment))?;
                // Warnings point into the file the experiment was just read from.
                let text = std::fs::read_to_string(file).unwrap_or_default();
                let source = config::source_for(file, &text);
                for warning in plan::context::warnings(&experiment, Some(&source)) {
                    eprintln!("{:?}", miette::Report::new(warning));
                }
            }
            Err(e) => {
                failed = true;
                eprintln!("{:?}", miette::Report::new(e));
            }
        }
    }
    if failed {
        return Ok(Exit::Invalid);
    }
    if request.probe {
        return probe(&request.files, out);
    }
    Ok(Exit::Success)
}

/// `capcard check --probe`: each file's targets prepared and preflighted as
/// `capcard run` would, what each accepts printed on `out`.
fn probe(files: &[PathBuf], out: &mut dyn Write) -> Outcome {
    with_runtime(async move {
        let mut refused = false;
        let mut log = io::stderr();
        for file in files {
            let reports = match runner::probe(file, &mut log).await {
                Ok(reports) => reports,
                Err(e) => {
                    let exit = Exit::from_code(e.exit_code());
                    return Ok(fail(e, exit));
                }
            };
            for report in reports {
                match report.outcome {
                    runner::ProbeOutcome::NotProbed(why) => {
                        writeln!(out, "target {}: not probed ({why})", report.target)?;
                    }
                    runner::ProbeOutcome::Accepted(found) => {
                        writeln!(
                            out,
                            "target {}: {} (model {})",
                            report.target, found.base_url, found.model
                        )?;
                        if !found.listed_models.is_empty() {
                            writeln!(out, "  models listed: {}", found.listed_models.join(", "))?;
                        }
                        writeln!(
                            out,
                            "  context window: {}",
                            found.context_window.as_deref().unwrap_or("not reported")
                        )?;
                        writeln!(out, "  telemetry: {}", found.telemetry)?;
                        writeln!(out, "  prompts: {}", found.prompts)?;
                        if let Some(d) = &found.dialect {
                            writeln!(out, "  request dialect: {}", report::describe::dialect(d))?;
                            for line in &d.settled {
                                writeln!(out, "    {line}")?;
                            }
                        }
                    }
                    runner::ProbeOutcome::Refused(e) => {
                        refused = true;
                        writeln!(out, "target {}: cannot be measured as it is", report.target)?;
                        eprintln!("{:?}", miette::Report::new(e));
                    }
                }
            }
        }
        Ok(if refused {
            Exit::NotCarriedOut
        } else {
            Exit::Success
        })
    })
}

/// `capcard plan FILE [--json]`.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    pub file: PathBuf,
    pub json: bool,
}

/// `capcard plan`: the runs an experiment expands into, as a table or JSON.
pub fn plan(request: &PlanRequest, out: &mut dyn Write) -> Outcome {
    let experiment = match config::load(&request.file) {
        Ok(e) => e,
        Err(e) => return Ok(fail(e, Exit::Invalid)),
    };
    let plan = plan::build(&experiment);
    if request.json {
        match serde_json::to_string_pretty(&plan) {
            Ok(text) => writeln!(out, "{text}")?,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(Exit::NotCarriedOut);
            }
        }
    } else {
        write!(out, "{}", plan::render_table(&plan, &experiment))?;
    }
    Ok(Exit::Success)
}

/// `capcard init URL [--api-key-env NAME] [--model M] [--out FILE]`.
#[derive(Debug, Clone)]
pub struct InitRequest {
    pub url: String,
    pub api_key_env: Option<String>,
    pub model: Option<String>,
    pub out: Option<PathBuf>,
}

/// `capcard init`: probe the endpoint, write the experiment (on `out`
/// without `--out`).
pub fn init(request: &InitRequest, out: &mut dyn Write) -> Outcome {
    let file = request.out.as_deref();
    if let Some(path) = file
        && path.exists()
    {
        eprintln!(
            "error: {} exists; capcard init never overwrites a file",
            path.display()
        );
        return Ok(Exit::Invalid);
    }
    with_runtime(async move {
        let findings = match init::probe(
            &request.url,
            request.api_key_env.as_deref(),
            request.model.as_deref(),
        )
        .await
        {
            Ok(f) => f,
            Err(e) => {
                let exit = match e {
                    init::InitError::MissingKey(_) => Exit::Invalid,
                    _ => Exit::NotCarriedOut,
                };
                return Ok(fail(e, exit));
            }
        };
        let text = init::experiment(&findings);
        // What init writes, check accepts: parsed back first.
        if let Err(e) = config::parse(&text, file.unwrap_or(Path::new("init.kdl"))) {
            eprintln!("error: capcard init wrote a file it cannot read back (a bug):");
            return Ok(fail(e, Exit::NotCarriedOut));
        }
        match file {
            None => {
                write!(out, "{text}")?;
                Ok(Exit::Success)
            }
            Some(path) => match std::fs::write(path, &text) {
                Ok(()) => {
                    eprintln!(
                        "wrote {}: {} at {} ({}); next: capcard run {}",
                        path.display(),
                        findings.model,
                        findings.base_url,
                        report::describe::dialect(&findings.dialect),
                        path.display()
                    );
                    Ok(Exit::Success)
                }
                Err(e) => {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    Ok(Exit::NotCarriedOut)
                }
            },
        }
    })
}

/// `capcard run`: the experiment executed; the summary's and the cards'
/// paths on `out`. Ctrl-C stops it keeping what was measured (exit 2); a
/// second Ctrl-C aborts. The paths are printed as far as `out` takes them:
/// the exit status is the run's.
pub fn run(request: runner::RunRequest, out: &mut dyn Write) -> Exit {
    let run = async move {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "\ninterrupted: stopping, keeping what was measured (Ctrl-C again to abort)"
                );
                on_signal.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    // No engine outlives an abort either.
                    #[cfg(unix)]
                    crate::launch::kill_all();
                    std::process::exit(130);
                }
            }
        });
        let mut log = io::stderr();
        let exit = match runner::run(&request, cancel, &mut log).await {
            Ok(outcome) => {
                for path in outcome
                    .written
                    .summary
                    .iter()
                    .chain(outcome.written.cards.iter())
                {
                    let _ = writeln!(out, "{}", path.display());
                }
                if !outcome.invalid_runs.is_empty() {
                    eprintln!(
                        "warning: {} run(s) invalid (most calls failed, see the card's Status): {}{}",
                        outcome.invalid_runs.len(),
                        outcome.invalid_runs.join(", "),
                        outcome
                            .top_failure
                            .as_ref()
                            .map(|q| format!("; most frequent: {q}"))
                            .unwrap_or_default()
                    );
                }
                if !outcome.rate_limited_runs.is_empty() {
                    eprintln!(
                        "warning: {} run(s) rate limited: the provider's quota, not the replica, set their figures (see the card's Status): {}",
                        outcome.rate_limited_runs.len(),
                        outcome.rate_limited_runs.join(", ")
                    );
                }
                Exit::from_code(outcome.exit_code())
            }
            Err(e) => {
                let exit = Exit::from_code(e.exit_code());
                fail(e, exit)
            }
        };
        Ok(exit)
    };
    with_runtime(run).unwrap_or(Exit::NotCarriedOut)
}

/// `capcard merge DIR... --out DIR`.
#[derive(Debug, Clone)]
pub struct MergeRequest {
    pub dirs: Vec<PathBuf>,
    pub out: PathBuf,
}

/// `capcard merge`: the shards' folders merged; the written paths on `out`.
pub fn merge(request: &MergeRequest, out: &mut dyn Write) -> Outcome {
    let merged = match shard::merge_folders(&request.dirs, &request.out) {
        Ok(merged) => merged,
        Err(e) => return Ok(fail(e, Exit::Invalid)),
    };
    for run in &merged.runs {
        eprintln!(
            "{}: {} calls and tasks from {} shards{}",
            run.run_id,
            run.lines,
            run.shards.len(),
            if run.complete {
                ""
            } else {
                " (incomplete: a shard is missing or did not finish)"
            }
        );
    }
    for path in merged
        .written
        .summary
        .iter()
        .chain(merged.written.cards.iter())
    {
        writeln!(out, "{}", path.display())?;
    }
    Ok(Exit::Success)
}

/// `capcard report DIR [--template FILE] [--out FILE] [--html]`.
#[derive(Debug, Clone)]
pub struct ReportRequest {
    pub dir: PathBuf,
    pub template: Option<PathBuf>,
    pub out: Option<PathBuf>,
    /// One self-contained HTML page instead of the markdown cards.
    pub html: bool,
    /// An audit to attach to the folder first (`--audit`).
    pub audit: Option<PathBuf>,
}

/// `capcard report`: the folder's cards rendered again (or, with `--html`,
/// as one page); the paths written on `out`.
pub fn report(request: &ReportRequest, out: &mut dyn Write) -> Outcome {
    if let Some(audit) = &request.audit {
        match folder::attach_audit(&request.dir, audit) {
            Ok(rows) => eprintln!(
                "attached {} ({rows} row{} of this experiment's settings)",
                audit.display(),
                if rows == 1 { "" } else { "s" }
            ),
            Err(e) => return Ok(fail(e, Exit::Invalid)),
        }
    }
    if request.html {
        // The page is recomputed from the journals; results.json stays.
        let older = folder::older_results_note(&request.dir, false);
        return match folder::write_html(
            &request.dir,
            request.template.as_deref(),
            request.out.as_deref(),
        ) {
            Ok(path) => {
                if let Some(note) = older {
                    eprintln!("{note}");
                }
                writeln!(out, "{}", path.display())?;
                Ok(Exit::Success)
            }
            Err(e) => Ok(fail(e, Exit::Invalid)),
        };
    }
    // Read before rerendering, which rewrites results.json.
    let older = folder::older_results_note(&request.dir, request.out.is_none());
    match folder::rerender(
        &request.dir,
        request.template.as_deref(),
        request.out.as_deref(),
    ) {
        Ok(written) => {
            if let Some(note) = older {
                eprintln!("{note}");
            }
            for path in written.cards.iter().chain(written.summary.iter()) {
                writeln!(out, "{}", path.display())?;
            }
            Ok(Exit::Success)
        }
        Err(e) => Ok(fail(e, Exit::Invalid)),
    }
}

/// `capcard export DIR --format F [--out DIR]`: the files written, one a line.
pub fn export(
    dir: &std::path::Path,
    format: crate::report::export::ExportFormat,
    folder: Option<&std::path::Path>,
    out: &mut dyn Write,
) -> Outcome {
    match crate::export::export_folder(dir, format, folder) {
        Ok(written) => {
            for path in written {
                writeln!(out, "{}", path.display())?;
            }
            Ok(Exit::Success)
        }
        Err(e) => Ok(fail(e, Exit::Invalid)),
    }
}

/// `capcard diff A B [--out FILE] [--fail-on-regression PCT]`.
#[derive(Debug, Clone)]
pub struct DiffRequest {
    pub a: PathBuf,
    pub b: PathBuf,
    pub out: Option<PathBuf>,
    pub fail_on_regression: Option<f64>,
}

/// `capcard diff`: the comparison on `out` (or its path, with `--out`);
/// exit 3 on a regression beyond `--fail-on-regression`.
pub fn diff(request: &DiffRequest, out: &mut dyn Write) -> Outcome {
    let compared = match diff::diff_folders(&request.a, &request.b, request.fail_on_regression) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(Exit::Invalid);
        }
    };
    let text = diff::render_diff(&compared);
    match &request.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!("error: {}: {e}", path.display());
                return Ok(Exit::Invalid);
            }
            writeln!(out, "{}", path.display())?;
        }
        None => write!(out, "{text}")?,
    }
    if request.fail_on_regression.is_some() && compared.regression {
        eprintln!(
            "regression beyond {}%: see the comparison",
            request.fail_on_regression.unwrap_or(0.0)
        );
        return Ok(Exit::Regression);
    }
    Ok(Exit::Success)
}

/// `capcard profile LOG... [--out FILE] [--json] [--report DIR]`.
#[derive(Debug, Clone)]
pub struct ProfileCommand {
    pub request: profile::load::ProfileRequest,
    pub out: Option<PathBuf>,
    pub json: bool,
    pub report: Option<PathBuf>,
}

/// `capcard profile`: the fitted experiment (on `out` unless `--out`), the
/// profile as JSON with `--json`, a markdown report with `--report`.
pub fn profile(command: &ProfileCommand, out: &mut dyn Write) -> Outcome {
    use profile::load;
    let output = match load::run(&command.request) {
        Ok(output) => output,
        Err(e) => return Ok(fail(e, Exit::Invalid)),
    };
    // On screen whatever goes to stdout: a misread unit scales every rate.
    for source in &output.profile.sources {
        if let profile::SourceFormat::Agent(format) = source.format {
            eprintln!(
                "agent trace: {}: {} ({} calls)",
                source.path,
                format.label(),
                source.requests
            );
        }
        if let Some(times) = source.times_statement() {
            eprintln!("times: {}: {times}", source.path);
        }
    }
    for warning in output.profile.warnings() {
        eprintln!("warning: {warning}");
    }
    if let Some(path) = &command.out {
        if let Err(e) = load::write(path, &output.experiment) {
            return Ok(fail(e, Exit::Invalid));
        }
        eprintln!("experiment: {}", path.display());
    }
    if let Some(dir) = &command.report {
        match load::write_report(&output, dir) {
            Ok(markdown) => eprintln!("report: {}", markdown.display()),
            Err(e) => return Ok(fail(e, Exit::Invalid)),
        }
    }
    if command.json {
        match serde_json::to_string_pretty(&output.profile.to_json()) {
            Ok(text) => writeln!(out, "{text}")?,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(Exit::Invalid);
            }
        }
    } else if command.out.is_none() {
        write!(out, "{}", output.experiment)?;
    }
    Ok(Exit::Success)
}

/// `capcard calibrate DIR [--out FILE] ...`.
#[derive(Debug, Clone)]
pub struct CalibrateCommand {
    pub request: calibrate::CalibrateRequest,
    pub out: Option<PathBuf>,
}

/// `capcard calibrate`: the comparison table on stderr, the target block on
/// `out` or in `--out`.
pub fn calibrate(command: &CalibrateCommand, out: &mut dyn Write) -> Outcome {
    let calibration = match calibrate::calibrate(&command.request) {
        Ok(calibration) => calibration,
        Err(e) => {
            let exit = match &e {
                calibrate::CalibrateError::Replay { .. } => Exit::NotCarriedOut,
                _ => Exit::Invalid,
            };
            return Ok(fail(e, exit));
        }
    };
    eprint!("{}", calibration.table());
    let kdl = calibration.target_kdl();
    match &command.out {
        Some(path) => match calibrate::write_kdl(path, &kdl) {
            Ok(()) => {
                eprintln!("\nwrote {}", path.display());
                Ok(Exit::Success)
            }
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", path.display());
                Ok(Exit::NotCarriedOut)
            }
        },
        None => {
            write!(out, "{kdl}")?;
            Ok(Exit::Success)
        }
    }
}

/// `capcard audit`: progress on stderr, the table (or JSON) on `out`.
/// Ctrl-C stops it with the seeds done so far.
pub fn audit(request: &crate::audit::AuditRequest, json: bool, out: &mut dyn Write) -> Outcome {
    with_runtime(async move {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\ninterrupted: stopping after the seed under way");
                on_signal.cancel();
            }
        });
        let mut log = io::stderr();
        match crate::audit::audit(request, cancel, &mut log).await {
            Ok(rows) => {
                if json {
                    let value: Vec<serde_json::Value> = rows
                        .iter()
                        .map(|r| {
                            serde_json::json!({
                                "row": r,
                                "summary": r.summary(),
                            })
                        })
                        .collect();
                    writeln!(
                        out,
                        "{}",
                        serde_json::to_string_pretty(&value).unwrap_or_default()
                    )?;
                } else {
                    write!(out, "{}", crate::audit::render(&rows))?;
                }
                Ok(Exit::Success)
            }
            Err(e) => {
                let exit = match &e {
                    crate::audit::AuditError::Usage(..) => Exit::Invalid,
                    crate::audit::AuditError::Run(r) => Exit::from_code(r.exit_code()),
                    _ => Exit::NotCarriedOut,
                };
                Ok(fail(e, exit))
            }
        }
    })
}

/// `capcard k8s FILE --shards N --image I ...`.
#[derive(Debug, Clone)]
pub struct K8sRequest {
    pub file: PathBuf,
    pub options: k8s::K8sOptions,
    pub out: Option<PathBuf>,
}

/// `capcard k8s`: the experiment validated as by `capcard check`, then its
/// manifests on `out` or in `--out`.
pub fn k8s(request: &K8sRequest, out: &mut dyn Write) -> Outcome {
    let file = &request.file;
    if let Err(e) = config::load(file) {
        return Ok(fail(e, Exit::Invalid));
    }
    let source = match std::fs::read_to_string(file) {
        Ok(source) => source,
        Err(source) => {
            let path = file.to_path_buf();
            return Ok(fail(
                config::ConfigError::Read { path, source },
                Exit::Invalid,
            ));
        }
    };
    let yaml =
        match k8s::for_experiment(&source, file, &request.options).and_then(|m| k8s::to_yaml(&m)) {
            Ok(yaml) => yaml,
            Err(e) => return Ok(fail(e, Exit::Invalid)),
        };
    match &request.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &yaml) {
                eprintln!("error: {}: {e}", path.display());
                return Ok(Exit::Invalid);
            }
            writeln!(out, "{}", path.display())?;
        }
        None => write!(out, "{yaml}")?,
    }
    Ok(Exit::Success)
}

/// `capcard sim [--preset P] [--listen ADDR] [--max-num-seqs N] ...`: the
/// flags as they were given (checked here, not by clap, so the messages
/// name the flag, or the knob, as a `sim { }` block would).
#[derive(Debug, Clone)]
pub struct SimRequest {
    pub preset: String,
    pub listen: SocketAddr,
    pub list: bool,
    pub fail_rate: f64,
    pub cut_rate: f64,
    pub stall: Option<String>,
    pub seed: u64,
    pub adapters: Vec<String>,
    /// The serving knobs given as flags (`--max-num-seqs`, `--replicas`,
    /// `--reasoning-tokens`, ...); unset ones keep the preset's value.
    pub serving: sim::SimServing,
    pub dialect: sim::SimDialect,
}

/// `capcard sim`: the presets listed on `out`, or the simulated engine
/// served until Ctrl-C or SIGTERM (how a launcher stops it), then exit 0.
pub fn sim(request: SimRequest, out: &mut dyn Write) -> Outcome {
    if request.list {
        write!(out, "{}", sim::presets::describe_all())?;
        return Ok(Exit::Success);
    }
    let config = match sim_config(&request) {
        Ok(c) => c,
        Err(problems) => {
            for problem in problems {
                eprintln!("error: {problem}");
            }
            return Ok(Exit::Invalid);
        }
    };
    let changed = sim::presets::find(&request.preset)
        .map(|base| sim::knobs::differences(base, &config.preset))
        .unwrap_or_default();
    let mut settings = changed;
    if config.replicas > 1 {
        settings.push(format!(
            "replicas {} router={}",
            config.replicas,
            config.router.as_str()
        ));
    }
    let (preset, listen) = (request.preset, request.listen);
    with_runtime(async move {
        // Registered before the server binds: a launcher that sees the
        // port open may send SIGTERM at once.
        let stop = match StopSignals::register() {
            Ok(stop) => stop,
            Err(e) => {
                eprintln!("error: cannot listen for Ctrl-C and SIGTERM: {e}");
                return Ok(Exit::NotCarriedOut);
            }
        };
        let settings = if settings.is_empty() {
            String::new()
        } else {
            format!(" with {}", settings.join(", "))
        };
        eprintln!(
            "capcard sim: {preset}{settings} on http://{listen}/v1 (Ctrl-C or SIGTERM stops)"
        );
        let shutdown = async move {
            let signal = stop.next().await;
            eprintln!("capcard sim: {signal}, stopping");
        };
        match sim::serve(config, listen, shutdown).await {
            Ok(()) => Ok(Exit::Success),
            Err(e) => {
                eprintln!("error: {e}");
                Ok(Exit::NotCarriedOut)
            }
        }
    })
}

/// Ctrl-C and SIGTERM, listened for from the moment they are registered
/// (a signal before that would end the process with no clean stop).
struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Within a runtime.
    fn register() -> io::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// The first of them to come, by name.
    async fn next(mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "Ctrl-C",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// The `capcard sim` flags as a simulator configuration: the knobs checked
/// by the `sim { }` block's rules, then applied to the preset by the one
/// resolution every `sim` target goes through.
fn sim_config(request: &SimRequest) -> Result<sim::SimConfig, Vec<String>> {
    let mut problems = Vec::new();
    for (flag, value) in [
        ("--fail-rate", request.fail_rate),
        ("--cut-rate", request.cut_rate),
    ] {
        if !(0.0..=1.0).contains(&value) {
            problems.push(format!(
                "{flag} must be a fraction between 0 and 1, got {value}"
            ));
        }
    }
    let stall = match request.stall.as_deref().map(|text| {
        config::units::parse_duration(text)
            .map_err(|e| format!("--stall {text}: {}; {}", e.message, e.help))
    }) {
        Some(Ok(stall)) => Some(stall),
        Some(Err(problem)) => {
            problems.push(problem);
            None
        }
        None => None,
    };
    problems.extend(config::check_sim_knobs(&request.serving));
    if !problems.is_empty() {
        return Err(problems);
    }
    let faults = config::SimFaults {
        fail_rate: config::Fraction(request.fail_rate),
        cut_rate: config::Fraction(request.cut_rate),
        stall,
    };
    Ok(
        sim::SimConfig::for_target(&request.preset, &request.serving)
            .map_err(|e| vec![e.to_string()])?
            .with_faults(faults)
            .with_seed(request.seed)
            .with_adapters(request.adapters.clone())
            .with_dialect(request.dialect.clone()),
    )
}

/// `future` on a multi-threaded runtime of its own (exit 2 if none starts).
fn with_runtime(future: impl std::future::Future<Output = Outcome>) -> Outcome {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(future),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            Ok(Exit::NotCarriedOut)
        }
    }
}

/// `error` reported on stderr as miette renders it; `exit` returned.
fn fail(error: impl miette::Diagnostic + Send + Sync + 'static, exit: Exit) -> Exit {
    eprintln!("{:?}", miette::Report::new(error));
    exit
}
