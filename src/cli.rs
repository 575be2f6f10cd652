//! Command-line arguments (clap derive), and what each command does with
//! them ([`commands`]: one function a command, a typed request in, an
//! [`Exit`] out). The arguments are only shaped and checked for syntax here;
//! meaning lives in the library.

pub mod commands;

pub use commands::{Exit, execute};

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "capcard",
    version,
    about = "Capacity cards for LLM inference: CrossP, Cr_closed and Cr_open from declarative experiments",
    long_about = "capcard measures how many users one LLM-inference replica serves well. \
                  It expands a KDL experiment into closed-loop and open-loop runs against an \
                  OpenAI-compatible endpoint (or the built-in simulated engine) and renders a \
                  capacity card and a sizing table from the results."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate experiment files; exit 1 with diagnostics on any error.
    Check {
        /// Experiment files (.kdl).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also start each target's probes and its preflight (one call
        /// shaped as the runs' calls), and print what the server accepts;
        /// nothing is measured. Exit 2 when a target refuses.
        #[arg(long)]
        probe: bool,
    },
    /// Probe an endpoint and write a commented, ready-to-run experiment for it:
    /// its models, window, request dialect and telemetry, a chat workload
    /// sized to the window, a draft SLO, a short sweep and an open search.
    Init {
        /// The server's base URL, e.g. http://127.0.0.1:8000/v1 (`/v1` is
        /// added when the bare URL does not answer).
        url: String,
        /// Name of the environment variable holding the API key (never the key).
        #[arg(long)]
        api_key_env: Option<String>,
        /// The model to measure (default: the first the server lists).
        #[arg(long)]
        model: Option<String>,
        /// Write the experiment here (default: stdout). An existing file is
        /// never overwritten.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Print the runs an experiment expands into, and an estimate of wall time.
    Plan {
        file: PathBuf,
        /// Print the plan as JSON (the plan.json of a results folder).
        #[arg(long)]
        json: bool,
    },
    /// Execute an experiment: write the results folder and the capacity cards.
    Run {
        file: PathBuf,
        /// Results folder (default: results/<experiment>-<UTC timestamp>).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Run only the closed sweep or only the open runs.
        #[arg(long, value_enum)]
        only: Option<OnlyMode>,
        /// Run only this target.
        #[arg(long)]
        target: Option<String>,
        /// Run only this workload.
        #[arg(long)]
        workload: Option<String>,
        /// Continue an interrupted results folder: completed runs are kept, the rest is run.
        #[arg(long, conflicts_with = "out")]
        resume: Option<PathBuf>,
        /// No progress display.
        #[arg(long, short)]
        quiet: bool,
        /// Draw prompt content with this nonce instead of a new one, to
        /// reproduce an earlier run's exact request stream (its card and
        /// results.json show the nonce). Only on a fresh server: a prefix
        /// cache that saw those prompts makes them faster.
        #[arg(long, conflicts_with = "resume")]
        nonce: Option<u64>,
        /// Run every `sim` target on the engine's own clock, in process,
        /// without HTTP or sleeping: seconds instead of minutes. Endpoint
        /// targets are refused (select the sims with --target).
        #[arg(long = "virtual")]
        virtual_time: bool,
        /// Be shard I of N (0-based): send only this process's part of
        /// every run (every Nth open-loop arrival, 1/N of the closed
        /// slots), with --start-at or --coordinator.
        #[arg(long, value_name = "I/N", value_parser = parse_shard, conflicts_with = "coordinate")]
        shard: Option<crate::plan::shard::ShardPart>,
        /// With --shard, no coordinator: run the closed sweep and open
        /// grid on a timetable from this instant (RFC 3339, e.g.
        /// 2026-12-02T10:00:00Z), the same on every shard; merge the
        /// shards' folders with `capcard merge`.
        #[arg(long, value_name = "RFC3339", requires = "shard", conflicts_with = "coordinator", value_parser = parse_instant)]
        start_at: Option<std::time::SystemTime>,
        /// With --shard: take every run from the coordinator at URL
        /// (`capcard run FILE --coordinate N`), which also runs the
        /// Cr_open search.
        #[arg(long, value_name = "URL", requires = "shard")]
        coordinator: Option<String>,
        /// Coordinate N shard processes: plan and judge every run (the
        /// search too), have the shards execute it, merge their journals
        /// into this results folder as they come.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        coordinate: Option<u32>,
        /// Where the coordinator listens for its shards.
        #[arg(long, default_value = "127.0.0.1:7300", requires = "coordinate")]
        listen: SocketAddr,
        /// A shard silent this long (no poll, no journal) is lost and the
        /// run incomplete; longer for pods that pause (e.g. "60s").
        #[arg(long, value_name = "DURATION", default_value = "15s", requires = "coordinate", value_parser = parse_lost_after)]
        lost_after: std::time::Duration,
        /// How far ahead of now each run's start is set, for every shard
        /// to hear of it and get ready: longer when the card says the
        /// shards started apart, shorter for shards on one host or LAN.
        #[arg(long, value_name = "DURATION", default_value = "3s", requires = "coordinate", value_parser = parse_start_lead)]
        start_lead: std::time::Duration,
    },
    /// Merge the results folders of the shards of one run (`capcard run
    /// --shard I/N --start-at T`) into one folder, and render its cards.
    Merge {
        /// The shards' results folders, one per shard.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// The merged results folder (must not exist yet).
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Re-render the cards of a results folder without touching any endpoint.
    Report {
        dir: PathBuf,
        /// A minijinja card template to use instead of the built-in one.
        #[arg(long)]
        template: Option<PathBuf>,
        /// Write the card(s) to this file instead of into the results folder
        /// (with --html: the page, instead of DIR/report.html).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Write one self-contained HTML page instead (DIR/report.html): the
        /// summary and every card, charts inline, nothing fetched; opens
        /// with a double-click and prints a card a page.
        #[arg(long)]
        html: bool,
        /// Attach an audit of this experiment (the JSON of `capcard audit
        /// FILE --json`, run on its `sim` twin with the same workload, SLO
        /// and open block): it is copied into the folder as audit.json, and
        /// each card quotes how often its ranges held the reference there.
        #[arg(long, value_name = "AUDIT_JSON")]
        audit: Option<PathBuf>,
    },
    /// Convert a results folder for the tools platform teams use: llm-d
    /// Benchmark Reports (one per run), CSV (runs and requests) or JSONL
    /// (requests). Reads only the folder; contacts no endpoint.
    Export {
        /// The results folder (`capcard run --out`), old ones included.
        dir: PathBuf,
        /// `llmd`: a Benchmark Report v0.2.1 per run; `csv`: runs.csv and
        /// requests.csv; `jsonl`: requests.jsonl.
        #[arg(long, value_enum)]
        format: ExportFormatArg,
        /// The folder to write into (default: DIR/export).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Compare two results folders: CrossP, Cr_closed, Cr_open and the
    /// metrics at matched levels and rates, flagged where beyond noise.
    Diff {
        /// The baseline results folder.
        a: PathBuf,
        /// The results folder compared with it.
        b: PathBuf,
        /// Write the comparison (markdown) to this file instead of stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Exit 3 when a Cr_open range (any SLO) lies wholly more than PCT percent below
        /// the baseline's, or Cr_closed dropped by more than PCT percent.
        #[arg(long, value_name = "PCT")]
        fail_on_regression: Option<f64>,
    },
    /// Fit a workload from recorded traffic: lengths, arrivals, prefix reuse
    /// and conversations, written as a ready-to-run experiment.
    ///
    /// Reads Mooncake JSONL, BurstGPT CSV, request logs (JSONL or a JSON
    /// array, one record per request), ShareGPT conversations and capcard's
    /// own journals, detected by content. No prompt text is copied out.
    Profile {
        /// Log files; several are pooled (each keeps its own time line).
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        /// Write the experiment (KDL) here instead of to stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Print the profile as JSON (schema capcard/profile/v1) to stdout.
        #[arg(long)]
        json: bool,
        /// Write a markdown report with histograms, fitted curves and the
        /// arrival rate over time into this folder.
        #[arg(long, value_name = "DIR")]
        report: Option<PathBuf>,
        /// Name of the experiment and workload written.
        #[arg(long, default_value = "profiled")]
        name: String,
        /// Tokens per hash-id block (Mooncake publishes 512).
        #[arg(long, default_value_t = 512)]
        block_tokens: u32,
        /// Read numeric timestamps in this unit instead of judging it (from
        /// the key, the format, an epoch's size or a relative clock's span;
        /// see docs/profile.md). RFC 3339 times and capcard journals say their own.
        #[arg(long, value_enum, value_name = "s|ms")]
        time_unit: Option<TimeUnitArg>,
    },
    /// Fit the simulator to a real results folder's closed sweep: prints
    /// measured against simulated figures level by level, and a `target`
    /// block whose `sim` reproduces the folder (in virtual time).
    Calibrate {
        /// A results folder with a closed sweep of two levels or more.
        dir: PathBuf,
        /// The preset whose model and hardware the fit starts from
        /// (default: the folder's own `sim` preset; required for endpoints).
        #[arg(long)]
        preset: Option<String>,
        /// Write the target block (KDL) here instead of to stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// The real engine's batch cap (vLLM --max-num-seqs), when its
        /// telemetry does not show it.
        #[arg(long)]
        max_num_seqs: Option<u32>,
        /// The card to fit, TARGET--WORKLOAD (default: the first with a sweep).
        #[arg(long)]
        card: Option<String>,
        /// Most simulations the fit may run.
        #[arg(long, default_value_t = 1000)]
        max_evaluations: usize,
    },
    /// How far to trust an experiment's Cr_open: its searches repeated on
    /// many seeds against a simulated engine in virtual time, by `capcard
    /// run` itself, each held to a reference Cr_open of that engine (see
    /// docs/audit.md). Prints a markdown table: how often the estimate is
    /// within the asked precision, how often the range holds the
    /// reference, the median width, time and calls.
    Audit {
        /// Experiment file (.kdl) with an open search and a `sim` target.
        file: PathBuf,
        /// Only this `sim` target (default: every `sim` target).
        #[arg(long)]
        target: Option<String>,
        /// Only this workload.
        #[arg(long)]
        workload: Option<String>,
        /// How many seeds to run.
        #[arg(long, default_value_t = 100)]
        seeds: u32,
        /// The first seed (seeds run from it upwards).
        #[arg(long, default_value_t = 1)]
        first_seed: u64,
        /// Calls per rate of a `sim queue`'s long-run reference.
        #[arg(long, default_value_t = 2_000_000)]
        reference_calls: u64,
        /// Long open runs through `capcard run` for the reference of an
        /// engine with no known answer (0: none, the table then gives the
        /// spread of the estimates alone).
        #[arg(long, default_value_t = 7)]
        reference_runs: u32,
        /// Keep each seed's results folder in this directory.
        #[arg(long)]
        keep: Option<PathBuf>,
        /// Print the seeds' results as JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Serve the built-in simulated engine (OpenAI-compatible) until Ctrl-C
    /// or SIGTERM.
    ///
    /// The serving knobs override the preset's as a `sim { }` block does
    /// (the same rules; unset, the preset's value), so that a launcher can
    /// start it as it would start vLLM: `capcard sim --preset tiny
    /// --max-num-seqs 64`.
    Sim {
        /// Preset (see --list).
        #[arg(long, default_value = "h100-llama3-8b")]
        preset: String,
        /// Address to listen on (loopback by default).
        #[arg(long, default_value = "127.0.0.1:8000")]
        listen: SocketAddr,
        /// List the presets and exit.
        #[arg(long)]
        list: bool,
        /// Fraction of requests answered with HTTP 500 (fault injection).
        #[arg(long, default_value_t = 0.0)]
        fail_rate: f64,
        /// Fraction of streams cut mid-way (fault injection).
        #[arg(long, default_value_t = 0.0)]
        cut_rate: f64,
        /// A pause inserted mid-stream in every response, e.g. "2s".
        #[arg(long)]
        stall: Option<String>,
        /// Seed of the engine's random choices (faults, EOS draws).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also serve this model name (as a LoRA adapter of the preset's
        /// model, listed by /v1/models); repeatable.
        #[arg(long = "adapter", value_name = "NAME")]
        adapters: Vec<String>,
        /// vLLM --max-num-seqs: most requests in one batch.
        #[arg(
            long,
            value_name = "N",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        max_num_seqs: Option<u32>,
        /// vLLM --max-num-batched-tokens: a step's token budget.
        #[arg(
            long,
            value_name = "N",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        max_batched_tokens: Option<u32>,
        /// KV-cache capacity in tokens (vLLM's "GPU KV cache size"),
        /// instead of the one derived from memory.
        #[arg(
            long,
            value_name = "N",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        kv_cache_tokens: Option<u64>,
        /// GPUs of the tensor-parallel group (it must divide the model's heads).
        #[arg(
            long,
            value_name = "N",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        tensor_parallel: Option<u32>,
        /// vLLM --gpu-memory-utilization, in (0, 1] (or a percentage, "90%").
        #[arg(long, value_name = "FRACTION", value_parser = parse_share, help_heading = "Serving knobs (default: the preset's)")]
        gpu_memory_utilization: Option<f64>,
        /// Automatic prefix caching.
        #[arg(
            long,
            value_name = "true|false",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        prefix_caching: Option<bool>,
        /// Chunked prefill; off, a prompt is prefilled whole in one step.
        #[arg(
            long,
            value_name = "true|false",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        chunked_prefill: Option<bool>,
        /// vLLM --max-model-len: the window in tokens (prompt + output), at
        /// most the model's own and what the KV cache holds (a target's
        /// `max-context`).
        #[arg(
            long,
            value_name = "N",
            visible_alias = "max-context",
            help_heading = "Serving knobs (default: the preset's)"
        )]
        max_model_len: Option<u32>,
        /// Engines behind the one endpoint (a small virtual cluster, at most 64).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        replicas: u32,
        /// How requests are spread over the replicas: round-robin,
        /// least-loaded or prefix-affinity.
        #[arg(long, default_value = "round-robin", value_name = "POLICY", value_parser = parse_router)]
        router: crate::config::SimRouter,
        /// Refuse body fields that OpenAI's API does not define (HTTP 400
        /// "Unrecognized request argument supplied"), as hosted APIs and
        /// strict gateways do; by default they are ignored, as vLLM does.
        #[arg(long)]
        strict: bool,
        /// Refuse this field even if OpenAI defines it, as the server
        /// family known to refuse it says so (`stream_options`: TGI's 422;
        /// `max_tokens`: OpenAI's reasoning-model 400); repeatable.
        #[arg(long = "refuse-field", value_name = "NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
        refused_fields: Vec<String>,
        /// Accept this field and silently drop it, as a server that does not
        /// know it (e.g. `max_completion_tokens`); repeatable.
        #[arg(long = "ignore-field", value_name = "NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
        ignored_fields: Vec<String>,
        /// Rate-limit the generation calls, N/s or N/min (e.g. 30/min): a
        /// token bucket of N, refilled continuously; an empty one answers
        /// HTTP 429 with Retry-After.
        #[arg(long, value_name = "N/s|N/min", value_parser = parse_rate_limit)]
        rate_limit: Option<crate::sim::RateLimit>,
        /// Reason N tokens before each answer, within its output budget
        /// (`delta.reasoning` on chat, a reasoning item on responses), as
        /// a model served with vLLM's --reasoning-parser does.
        #[arg(long, value_name = "N")]
        reasoning_tokens: Option<u32>,
        /// Send N tokens per streamed event, as hosted APIs buffer them
        /// (default 1).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        tokens_per_event: Option<u32>,
        /// Report the prompt tokens served from the prefix cache in
        /// `usage.prompt_tokens_details.cached_tokens`, as vLLM does with
        /// --enable-prompt-tokens-details.
        #[arg(long)]
        prompt_tokens_details: bool,
    },
    /// Write the Kubernetes objects that run an experiment sharded over
    /// pods, as YAML for `kubectl apply -f`.
    ///
    /// A ConfigMap with the experiment file, a volume for the results, and
    /// two Jobs: a coordinator that decides every run and writes the merged
    /// results folder and card on the volume, and N shards that all run at
    /// once, reaching it through a Service. The experiment is validated first.
    K8s {
        /// Experiment file (.kdl); it may name data files only by absolute
        /// path, as they must be in the image.
        file: PathBuf,
        /// Shard pods, all running at once (at most Kubernetes' 100000
        /// completions of an Indexed Job).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        shards: u32,
        /// Container image with `capcard` on its PATH (see the Dockerfile).
        #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
        image: String,
        /// Namespace of every object.
        #[arg(long, default_value = crate::k8s::DEFAULT_NAMESPACE, value_parser = parse_namespace)]
        namespace: String,
        /// Prefix of the objects' names (default: the experiment's name,
        /// made a DNS label of at most 40 characters).
        #[arg(long, value_parser = parse_k8s_name)]
        name: Option<String>,
        /// Size of the results volume (a Kubernetes quantity).
        #[arg(long, default_value = crate::k8s::DEFAULT_STORAGE, value_parser = parse_quantity)]
        storage: String,
        /// CPU request of each shard (a Kubernetes quantity: 2, 1500m); the
        /// load generator is sized for one process on 2 cores.
        #[arg(long, default_value = crate::k8s::DEFAULT_CPU, value_parser = parse_quantity)]
        cpu: String,
        /// Write the YAML to this file instead of stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

/// `--name` of `capcard k8s`: a DNS label that leaves room for suffixes.
fn parse_k8s_name(text: &str) -> Result<String, String> {
    crate::k8s::check_name(text).map(|()| text.to_string())
}

/// `--namespace`: a DNS label.
fn parse_namespace(text: &str) -> Result<String, String> {
    crate::k8s::check_namespace(text).map(|()| text.to_string())
}

/// `--storage`, `--cpu`: a Kubernetes quantity.
fn parse_quantity(text: &str) -> Result<String, String> {
    crate::k8s::check_quantity(text).map(|()| text.to_string())
}

/// `--lost-after`.
fn parse_lost_after(text: &str) -> Result<std::time::Duration, String> {
    duration_at_least(
        text,
        crate::shard::coordinator::MIN_LOST_AFTER,
        "a running shard is heard once a second",
    )
}

/// `--start-lead`.
fn parse_start_lead(text: &str) -> Result<std::time::Duration, String> {
    duration_at_least(
        text,
        crate::shard::coordinator::MIN_START_LEAD,
        "a shard measures its clock to the coordinator before each run",
    )
}

/// A duration flag with a floor, and why the floor is there.
fn duration_at_least(
    text: &str,
    min: std::time::Duration,
    why: &str,
) -> Result<std::time::Duration, String> {
    match crate::config::units::parse_duration(text) {
        Ok(d) if d >= min => Ok(d),
        Ok(_) => Err(format!(
            "at least {}: {why}",
            crate::format::duration_secs(min.as_secs_f64())
        )),
        Err(e) => Err(format!("{}; {}", e.message, e.help)),
    }
}

fn parse_shard(text: &str) -> Result<crate::plan::shard::ShardPart, String> {
    crate::plan::shard::ShardPart::parse(text)
}

/// `--start-at`: an RFC 3339 instant.
fn parse_instant(text: &str) -> Result<std::time::SystemTime, String> {
    crate::time::rfc3339_seconds(text)
        .map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(s.max(0.0)))
        .ok_or_else(|| format!("`{text}` is not an RFC 3339 instant (e.g. 2026-12-02T10:00:00Z)"))
}

/// `--rate-limit`: `30/min`, `5/s`.
fn parse_rate_limit(text: &str) -> Result<crate::sim::RateLimit, String> {
    text.parse()
        .map_err(|e: crate::sim::RateLimitError| e.to_string())
}

/// `--gpu-memory-utilization`: `0.9` or `90%`, as the `sim { }` block
/// takes it; its range is checked with the block's rule.
fn parse_share(text: &str) -> Result<f64, String> {
    if text.trim_end().ends_with('%') {
        return crate::config::units::parse_percent(text)
            .map_err(|e| format!("{}; {}", e.message, e.help));
    }
    text.trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number (a share such as 0.9, or 90%)"))
}

/// `--router`: a [`SimRouter`](crate::config::SimRouter) by its KDL name.
fn parse_router(text: &str) -> Result<crate::config::SimRouter, String> {
    use crate::config::SimRouter;
    SimRouter::from_name(text).ok_or_else(|| {
        let known: Vec<&str> = SimRouter::ALL.iter().map(|r| r.as_str()).collect();
        format!("unknown router `{text}` (known: {})", known.join(", "))
    })
}

/// `--time-unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimeUnitArg {
    S,
    Ms,
}

impl From<TimeUnitArg> for crate::profile::times::TimeUnit {
    fn from(arg: TimeUnitArg) -> Self {
        match arg {
            TimeUnitArg::S => Self::S,
            TimeUnitArg::Ms => Self::Ms,
        }
    }
}

/// `capcard export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormatArg {
    Llmd,
    Csv,
    Jsonl,
}

impl From<ExportFormatArg> for crate::report::export::ExportFormat {
    fn from(arg: ExportFormatArg) -> Self {
        use crate::report::export::ExportFormat;
        match arg {
            ExportFormatArg::Llmd => ExportFormat::Llmd,
            ExportFormatArg::Csv => ExportFormat::Csv,
            ExportFormatArg::Jsonl => ExportFormat::Jsonl,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnlyMode {
    Closed,
    Open,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::coordinator::{LOST_AFTER, START_LEAD};

    #[test]
    fn the_coordinators_flag_defaults_are_its_constants() {
        let cli = Cli::try_parse_from(["capcard", "run", "x.kdl", "--coordinate", "2"]).unwrap();
        let Command::Run {
            lost_after,
            start_lead,
            ..
        } = cli.command
        else {
            panic!("a run");
        };
        assert_eq!((lost_after, start_lead), (LOST_AFTER, START_LEAD));
    }
}
