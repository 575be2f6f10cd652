//! The `capcard` binary: parse arguments, call the library, map errors to
//! exit codes (0 success, 1 invalid input or usage, 2 a run could not be
//! carried out or was interrupted, 3 `diff --fail-on-regression` found one,
//! 4 `run` measured but at least one run was invalid).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use capcard::cli::{Cli, Command, OnlyMode};
use capcard::{config, folder, k8s, plan, report, runner, sim};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Check { files, probe } => {
            let checked = check(&files);
            if !probe || checked != ExitCode::SUCCESS {
                return checked;
            }
            probe_cmd(&files)
        }
        Command::Plan { file, json } => plan_cmd(&file, json),
        Command::Init {
            url,
            api_key_env,
            model,
            out,
        } => init_cmd(
            &url,
            api_key_env.as_deref(),
            model.as_deref(),
            out.as_deref(),
        ),
        Command::Run {
            file,
            out,
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
                    lost_after,
                }),
                (Some(_), None, None, _) => {
                    eprintln!(
                        "error: --shard needs --start-at T (a timetable, merged with `capcard merge`) \
                         or --coordinator URL (runs handed out by `capcard run --coordinate N`)"
                    );
                    return ExitCode::from(1);
                }
                _ => None,
            };
            let request = runner::RunRequest {
                experiment_path: file,
                out,
                only: only.map(|o| match o {
                    OnlyMode::Closed => plan::Mode::Closed,
                    OnlyMode::Open => plan::Mode::Open,
                }),
                target,
                workload,
                resume,
                show_progress: !quiet && std::io::stderr().is_terminal(),
                nonce,
                virtual_time,
                shard,
            };
            run_cmd(request)
        }
        Command::Merge { dirs, out } => match capcard::shard::merge_folders(&dirs, &out) {
            Ok(merged) => {
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
                    println!("{}", path.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(e, 1),
        },
        Command::Report { dir, template, out } => {
            match folder::rerender(&dir, template.as_deref(), out.as_deref()) {
                Ok(written) => {
                    for path in written.cards.iter().chain(written.summary.iter()) {
                        println!("{}", path.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e, 1),
            }
        }
        Command::Diff {
            a,
            b,
            out,
            fail_on_regression,
        } => diff_cmd(&a, &b, out.as_deref(), fail_on_regression),
        Command::Profile {
            logs,
            out,
            json,
            report,
            name,
            block_tokens,
            time_unit,
        } => profile_cmd(
            capcard::profile::load::ProfileRequest {
                logs,
                block_tokens,
                name,
                time_unit: time_unit.map(Into::into),
            },
            out.as_deref(),
            json,
            report.as_deref(),
        ),
        Command::Calibrate {
            dir,
            preset,
            out,
            max_num_seqs,
            card,
            max_evaluations,
        } => calibrate_cmd(
            &capcard::calibrate::CalibrateRequest {
                dir,
                preset,
                max_num_seqs,
                card,
                max_evaluations,
            },
            out.as_deref(),
        ),
        Command::K8s {
            file,
            shards,
            image,
            namespace,
            name,
            storage,
            cpu,
            out,
        } => k8s_cmd(
            &file,
            &k8s::K8sOptions {
                shards,
                image,
                namespace,
                name,
                storage,
                cpu,
            },
            out.as_deref(),
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
            replicas,
            router,
            strict,
            refused_fields,
            ignored_fields,
            rate_limit,
            reasoning_tokens,
            tokens_per_event,
        } => {
            if list {
                print!("{}", sim::presets::describe_all());
                return ExitCode::SUCCESS;
            }
            let config =
                match sim_config(&preset, fail_rate, cut_rate, stall.as_deref(), seed).map(|c| {
                    c.with_adapters(adapters)
                        .with_replicas(replicas)
                        .with_router(router)
                        .with_dialect(sim::SimDialect {
                            strict,
                            refused_fields,
                            ignored_fields,
                            rate_limit,
                        })
                        .with_answers(sim::Answers {
                            reasoning_tokens: reasoning_tokens
                                .map(|n| config::Dist::fixed(f64::from(n))),
                            tokens_per_event,
                        })
                }) {
                    Ok(c) => c,
                    Err(message) => {
                        eprintln!("error: {message}");
                        return ExitCode::from(1);
                    }
                };
            with_runtime(async move {
                eprintln!("capcard sim: {preset} on http://{listen}/v1 (Ctrl-C stops)");
                let shutdown = async {
                    let _ = tokio::signal::ctrl_c().await;
                };
                match sim::serve(config, listen, shutdown).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(2)
                    }
                }
            })
        }
    }
}

/// The `capcard sim` flags as a simulator configuration.
fn sim_config(
    preset: &str,
    fail_rate: f64,
    cut_rate: f64,
    stall: Option<&str>,
    seed: u64,
) -> Result<sim::SimConfig, String> {
    for (flag, value) in [("--fail-rate", fail_rate), ("--cut-rate", cut_rate)] {
        if !(0.0..=1.0).contains(&value) {
            return Err(format!(
                "{flag} must be a fraction between 0 and 1, got {value}"
            ));
        }
    }
    let stall = stall
        .map(|text| {
            config::units::parse_duration(text)
                .map_err(|e| format!("--stall {text}: {}; {}", e.message, e.help))
        })
        .transpose()?;
    let faults = config::SimFaults {
        fail_rate: config::Fraction(fail_rate),
        cut_rate: config::Fraction(cut_rate),
        stall,
    };
    Ok(sim::SimConfig::for_preset(preset)
        .map_err(|e| e.to_string())?
        .with_faults(faults)
        .with_seed(seed))
}

fn diff_cmd(
    a: &std::path::Path,
    b: &std::path::Path,
    out: Option<&std::path::Path>,
    fail_on_regression: Option<f64>,
) -> ExitCode {
    let report = match capcard::diff::diff_folders(a, b, fail_on_regression) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let text = capcard::diff::render_diff(&report);
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
            println!("{}", path.display());
        }
        None => print!("{text}"),
    }
    if fail_on_regression.is_some() && report.regression {
        eprintln!(
            "regression beyond {}%: see the comparison",
            fail_on_regression.unwrap_or(0.0)
        );
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

fn profile_cmd(
    request: capcard::profile::load::ProfileRequest,
    out: Option<&std::path::Path>,
    json: bool,
    report: Option<&std::path::Path>,
) -> ExitCode {
    use capcard::profile::load;
    let output = match load::run(&request) {
        Ok(output) => output,
        Err(e) => return fail(e, 1),
    };
    // On screen whatever goes to stdout: a misread unit scales every rate.
    for source in &output.profile.sources {
        if let Some(times) = source.times_statement() {
            eprintln!("times: {}: {times}", source.path);
        }
    }
    for warning in output.profile.warnings() {
        eprintln!("warning: {warning}");
    }
    if let Some(path) = out {
        if let Err(e) = load::write(path, &output.experiment) {
            return fail(e, 1);
        }
        eprintln!("experiment: {}", path.display());
    }
    if let Some(dir) = report {
        match load::write_report(&output, dir) {
            Ok(markdown) => eprintln!("report: {}", markdown.display()),
            Err(e) => return fail(e, 1),
        }
    }
    if json {
        match serde_json::to_string_pretty(&output.profile.to_json()) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    } else if out.is_none() {
        print!("{}", output.experiment);
    }
    ExitCode::SUCCESS
}

fn check(files: &[std::path::PathBuf]) -> ExitCode {
    let mut failed = false;
    for file in files {
        match config::load(file) {
            Ok(experiment) => {
                println!("{}", config::summary_line(file, &experiment));
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
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `capcard init`: probe the endpoint, write the experiment.
fn init_cmd(
    url: &str,
    api_key_env: Option<&str>,
    model: Option<&str>,
    out: Option<&std::path::Path>,
) -> ExitCode {
    if let Some(path) = out
        && path.exists()
    {
        eprintln!(
            "error: {} exists; capcard init never overwrites a file",
            path.display()
        );
        return ExitCode::from(1);
    }
    with_runtime(async move {
        let findings = match capcard::init::probe(url, api_key_env, model).await {
            Ok(f) => f,
            Err(e) => {
                let code = match e {
                    capcard::init::InitError::MissingKey(_) => 1,
                    _ => 2,
                };
                return fail(e, code);
            }
        };
        let text = capcard::init::experiment(&findings);
        // What init writes, check accepts: parsed back first.
        if let Err(e) = config::parse(&text, out.unwrap_or(std::path::Path::new("init.kdl"))) {
            eprintln!("error: capcard init wrote a file it cannot read back (a bug):");
            return fail(e, 2);
        }
        match out {
            None => {
                print!("{text}");
                ExitCode::SUCCESS
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
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    ExitCode::from(2)
                }
            },
        }
    })
}

/// `capcard check --probe`: each file's targets prepared and preflighted as
/// `capcard run` would, what each accepts printed on stdout.
fn probe_cmd(files: &[std::path::PathBuf]) -> ExitCode {
    with_runtime(async move {
        let mut refused = false;
        let mut log = std::io::stderr();
        for file in files {
            let reports = match runner::probe(file, &mut log).await {
                Ok(reports) => reports,
                Err(e) => {
                    let code = e.exit_code() as u8;
                    return fail(e, code);
                }
            };
            for report in reports {
                match report.outcome {
                    runner::ProbeOutcome::NotProbed(why) => {
                        println!("target {}: not probed ({why})", report.target);
                    }
                    runner::ProbeOutcome::Accepted(found) => {
                        println!(
                            "target {}: {} (model {})",
                            report.target, found.base_url, found.model
                        );
                        if !found.listed_models.is_empty() {
                            println!("  models listed: {}", found.listed_models.join(", "));
                        }
                        println!(
                            "  context window: {}",
                            found.context_window.as_deref().unwrap_or("not reported")
                        );
                        println!("  telemetry: {}", found.telemetry);
                        println!("  prompts: {}", found.prompts);
                        if let Some(d) = &found.dialect {
                            println!("  request dialect: {}", report::describe::dialect(d));
                            for line in &d.settled {
                                println!("    {line}");
                            }
                        }
                    }
                    runner::ProbeOutcome::Refused(e) => {
                        refused = true;
                        println!("target {}: cannot be measured as it is", report.target);
                        eprintln!("{:?}", miette::Report::new(e));
                    }
                }
            }
        }
        if refused {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// `capcard k8s`: the experiment validated as by `capcard check`, then its
/// manifests on stdout or in `--out`.
fn k8s_cmd(
    file: &std::path::Path,
    options: &k8s::K8sOptions,
    out: Option<&std::path::Path>,
) -> ExitCode {
    if let Err(e) = config::load(file) {
        return fail(e, 1);
    }
    let source = match std::fs::read_to_string(file) {
        Ok(source) => source,
        Err(source) => {
            let path = file.to_path_buf();
            return fail(config::ConfigError::Read { path, source }, 1);
        }
    };
    let yaml = match k8s::for_experiment(&source, file, options).and_then(|m| k8s::to_yaml(&m)) {
        Ok(yaml) => yaml,
        Err(e) => return fail(e, 1),
    };
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &yaml) {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
            println!("{}", path.display());
        }
        None => print!("{yaml}"),
    }
    ExitCode::SUCCESS
}

fn plan_cmd(file: &std::path::Path, json: bool) -> ExitCode {
    let experiment = match config::load(file) {
        Ok(e) => e,
        Err(e) => return fail(e, 1),
    };
    let plan = plan::build(&experiment);
    if json {
        match serde_json::to_string_pretty(&plan) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", plan::render_table(&plan, &experiment));
    }
    ExitCode::SUCCESS
}

fn run_cmd(request: runner::RunRequest) -> ExitCode {
    with_runtime(async move {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!(
                    "\ninterrupted: stopping, keeping what was measured (Ctrl-C again to abort)"
                );
                on_signal.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        let mut log = std::io::stderr();
        match runner::run(&request, cancel, &mut log).await {
            Ok(outcome) => {
                let mut out = std::io::stdout().lock();
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
                ExitCode::from(outcome.exit_code() as u8)
            }
            Err(e) => {
                let code = e.exit_code() as u8;
                fail(e, code)
            }
        }
    })
}

fn with_runtime(fut: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(fut),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(2)
        }
    }
}

fn fail(error: impl miette::Diagnostic + Send + Sync + 'static, code: u8) -> ExitCode {
    eprintln!("{:?}", miette::Report::new(error));
    ExitCode::from(code)
}

/// `capcard calibrate`: the comparison table on stderr, the target block on
/// stdout or in `--out`.
fn calibrate_cmd(
    request: &capcard::calibrate::CalibrateRequest,
    out: Option<&std::path::Path>,
) -> ExitCode {
    match capcard::calibrate::calibrate(request) {
        Ok(calibration) => {
            eprint!("{}", calibration.table());
            let kdl = calibration.target_kdl();
            match out {
                Some(path) => match capcard::calibrate::write_kdl(path, &kdl) {
                    Ok(()) => {
                        eprintln!("\nwrote {}", path.display());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: cannot write {}: {e}", path.display());
                        ExitCode::from(2)
                    }
                },
                None => {
                    print!("{kdl}");
                    ExitCode::SUCCESS
                }
            }
        }
        Err(e) => {
            let code = match &e {
                capcard::calibrate::CalibrateError::Replay { .. } => 2,
                _ => 1,
            };
            eprintln!("{:?}", miette::Report::new(e));
            ExitCode::from(code)
        }
    }
}
