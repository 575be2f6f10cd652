//! Benchmark (not a test) of the load generator's own cost and ceiling.
//!
//! ```text
//! cargo run --release --example bench_generator            # all scenarios
//! cargo run --release --example bench_generator -- quick   # shorter runs
//! ```
//!
//! A zero-latency OpenAI-style streaming endpoint runs in a *separate
//! process* (this binary with `serve`), so the client's CPU time can be read
//! on its own from `/proc/self/stat`. The client is the real executor
//! (`capcard::exec::execute_run_with`) on a 2-worker tokio runtime, writing
//! real journals. It reports:
//! - closed loop at c=64, 64-token streams: requests/s and streamed tokens/s
//!   achieved, client CPU per request and per token, and the projected
//!   ceiling of one process on 2 cores (2 CPU-seconds per second / cost);
//! - memory per in-flight stream: RSS delta with 1,000 streams held open;
//! - open loop, Poisson arrivals at 500 and 2,000 requests/s, 16-token
//!   streams: schedule lag p50 / p99 / max and whether the run was flagged.
//!
//! Linux only (reads `/proc`); CPU ticks are assumed to be 100 Hz
//! (`getconf CLK_TCK`).
//!
//! `-- memory [N]` instead runs `capcard run` itself (the library's runner,
//! in this process) for N requests (default 1,000,000) at c=64 with
//! 64-token streams against the same zero-latency server, then recomputes the
//! results folder as `capcard report` does, and prints the peak RSS of each
//! phase (VmHWM) and the time the report took. Then it exports that folder
//! as CSV (`capcard export --format csv`, in a child process so its peak
//! RSS is its own) and prints the export's time, peak RSS and size.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::response::Response;
use axum::routing::post;
use capcard::config::{Api, Arrival, RatePerS, StopRule};
use capcard::exec::{
    ChatMessage, Endpoint, Journal, Prompt, RequestSource, RunInputs, RunOptions, execute_run_with,
};
use capcard::plan::{Load, RunPlan};
use capcard::workload::{CallSpec, Message, Role, Segment, Task, TaskSpec};

const CLOCK_TICKS_PER_S: f64 = 100.0;
/// How long the `hold` scenario keeps a stream open after its first token.
const HOLD: Duration = Duration::from_secs(4);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => serve(),
        Some("export") => export_child(&args[2..]),
        Some("quick") => bench(true),
        Some("memory") => memory(
            args.get(2)
                .and_then(|n| n.parse().ok())
                .unwrap_or(1_000_000),
        ),
        _ => bench(false),
    }
}

// ------------------------------------------------------------------ server

fn serve() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Exit when the parent closes our stdin: never outlive the benchmark.
    std::thread::spawn(|| {
        let mut sink = String::new();
        while std::io::stdin()
            .read_line(&mut sink)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        std::process::exit(0);
    });
    runtime.block_on(async {
        let app = Router::new()
            .route("/{scenario}/v1/chat/completions", post(stream_tokens))
            .route(
                "/{scenario}/v1/models",
                axum::routing::get(|| async {
                    axum::Json(serde_json::json!({"object": "list", "data": [{"id": "bench"}]}))
                }),
            );
        let addr = capcard::serve::start(([127, 0, 0, 1], 0).into(), app)
            .await
            .expect("bind loopback")
            .detach();
        println!("{}", addr.port());
        std::io::stdout().flush().unwrap();
        // Serve until the parent closes stdin (the thread above exits).
        std::future::pending::<()>().await;
    });
}

async fn stream_tokens(Path(scenario): Path<String>, body: Bytes) -> Response {
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let tokens = request["max_completion_tokens"]
        .as_u64()
        .or(request["max_tokens"].as_u64())
        .unwrap_or(16);
    let hold = scenario == "hold";
    let stream = futures_util::stream::unfold(0u64, move |k| async move {
        let event = if k < tokens {
            if hold && k == 1 {
                tokio::time::sleep(HOLD).await;
            }
            let finish = if k + 1 == tokens {
                "\"length\""
            } else {
                "null"
            };
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{k} \"}},\"finish_reason\":{finish}}}]}}\n\n"
            )
        } else if k == tokens {
            format!(
                "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":100,\"completion_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n"
            )
        } else {
            return None;
        };
        // Let the connection flush each event on its own, as a real engine does.
        tokio::task::yield_now().await;
        Some((Ok::<_, std::io::Error>(Bytes::from(event)), k + 1))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

// ------------------------------------------------------------------ memory

/// Peak resident set of this process so far, MiB (`VmHWM`).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn memory(requests: u64) {
    let (mut server, port) = start_server();
    let dir = std::env::temp_dir().join(format!("capcard-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("memory.kdl");
    std::fs::write(
        &file,
        format!(
            r#"
experiment "memory" {{ seed 1 }}
target "instant" {{
    endpoint "http://127.0.0.1:{port}/fast/v1"
    metrics #false
}}
workload "w" {{
    input-tokens fixed 100
    output-tokens fixed 64
}}
closed {{
    concurrency 64
    requests {requests}
}}
"#
        ),
    )
    .unwrap();
    let out = dir.join("results");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let request = capcard::runner::RunRequest {
        experiment_path: file,
        source: None,
        out: Some(out.clone()),
        only: None,
        target: None,
        workload: None,
        resume: None,
        show_progress: false,
        nonce: Some(1),
        virtual_time: false,
        shard: None,
    };
    let before = peak_rss_mib();
    let started = std::time::Instant::now();
    let outcome = runtime
        .block_on(capcard::runner::run(
            &request,
            tokio_util::sync::CancellationToken::new(),
            &mut std::io::sink(),
        ))
        .unwrap();
    let run_s = started.elapsed().as_secs_f64();
    let after_run = peak_rss_mib();
    let report = {
        let folder = capcard::folder::ResultsFolder::new(&outcome.dir);
        let experiment = folder.load_experiment().unwrap();
        let plan = capcard::plan::build(&experiment);
        let t = std::time::Instant::now();
        let model = capcard::folder::recompute(&folder, &experiment, &plan, None).unwrap();
        capcard::folder::write_outputs(&folder, &model, &capcard::report::Templates::builtin())
            .unwrap();
        println!(
            "memory: report (recompute + render) of {requests} requests took {:.2} s",
            t.elapsed().as_secs_f64()
        );
        model
    };
    let run = &report.cards[0].closed[0];
    println!(
        "memory: {} requests at c=64 in {run_s:.1} s ({:.0} req/s), errors {}",
        run.requests,
        run.requests as f64 / run_s,
        run.errors
    );
    println!(
        "memory: peak RSS {before:.0} MiB before, {after_run:.0} MiB after the run, {:.0} MiB after the report",
        peak_rss_mib()
    );
    // The export in a process of its own: VmHWM never falls, so in this
    // one it would show the run's peak, not the export's.
    let status = Command::new(std::env::current_exe().unwrap())
        .arg("export")
        .arg(&outcome.dir)
        .arg(dir.join("export"))
        .status()
        .unwrap();
    assert!(status.success(), "the export child failed");
    let _ = std::fs::remove_dir_all(&dir);
    drop(server.stdin.take());
    let _ = server.wait();
}

/// `export DIR OUT`: `capcard export DIR --format csv --out OUT`, timed,
/// with this process's peak RSS.
fn export_child(args: &[String]) {
    let (dir, out) = (
        std::path::Path::new(&args[0]),
        std::path::Path::new(&args[1]),
    );
    let t = std::time::Instant::now();
    let written =
        capcard::export::export_folder(dir, capcard::report::export::ExportFormat::Csv, Some(out))
            .unwrap();
    let export_s = t.elapsed().as_secs_f64();
    let requests_csv = out.join("requests.csv");
    let bytes = std::fs::metadata(&requests_csv).map_or(0, |m| m.len());
    let rows = std::io::BufReader::new(std::fs::File::open(&requests_csv).unwrap())
        .lines()
        .count()
        .saturating_sub(1);
    println!(
        "export: csv of {rows} requests ({:.0} MB, {} files) in {export_s:.1} s, peak RSS {:.0} MiB",
        bytes as f64 / 1e6,
        written.len(),
        peak_rss_mib()
    );
}

/// The zero-latency server in a child process, and its port.
fn start_server() -> (std::process::Child, u16) {
    let exe = std::env::current_exe().unwrap();
    let mut server = Command::new(exe)
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    (server, port.trim().parse().unwrap())
}

// ------------------------------------------------------------------ client

struct BenchSource {
    output_tokens: u32,
    prompt: String,
}

impl RequestSource for BenchSource {
    fn task(&self, index: u64) -> Task {
        let call = CallSpec {
            messages: vec![Message {
                role: Role::User,
                segments: vec![Segment::Unique {
                    key: index,
                    tokens: 100,
                }],
            }],
            input_tokens: 100,
            output_tokens: self.output_tokens,
            tools: None,
            answer_in_words: false,
        };
        Task {
            index,
            spec: TaskSpec::Single(call),
            class: None,
        }
    }

    fn render(&self, _call: &CallSpec) -> Prompt {
        Prompt::Chat(vec![ChatMessage::text("user", self.prompt.clone())])
    }
}

fn plan(id: &str, load: Load, warmup_s: f64, duration_s: f64) -> RunPlan {
    let warmup = Duration::from_secs_f64(warmup_s);
    let stop = StopRule::Duration(Duration::from_secs_f64(duration_s));
    RunPlan {
        id: id.to_string(),
        ..RunPlan::new("bench", "bench", load, warmup, stop, 1)
    }
}

/// Client CPU seconds (user + system) so far.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / CLOCK_TICKS_PER_S
}

/// Resident set size, bytes.
fn rss_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0)
}

/// Poisson arrivals (exponential gaps) from a xorshift generator.
fn poisson(rate_per_s: f64, seed: u64) -> impl Iterator<Item = Duration> + Send {
    let mut state = seed | 1;
    let mut t = 0.0f64;
    std::iter::from_fn(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let u = ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        t += -u.ln() / rate_per_s;
        Some(Duration::from_secs_f64(t))
    })
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

struct Measured {
    journal: Journal,
    cpu_s: f64,
}

async fn run(
    endpoint: &Endpoint,
    plan: &RunPlan,
    source: Arc<dyn RequestSource>,
    arrivals: Option<Box<dyn Iterator<Item = Duration> + Send>>,
    dir: &std::path::Path,
) -> Measured {
    let cpu_before = cpu_s();
    let options = RunOptions::default();
    let path = dir.join(format!("{}.jsonl", plan.id));
    let journal = execute_run_with(
        endpoint,
        plan,
        RunInputs { source, arrivals },
        &path,
        &options,
    )
    .await
    .unwrap();
    Measured {
        journal,
        cpu_s: cpu_s() - cpu_before,
    }
}

/// Calls scheduled inside the measured window.
fn measured(journal: &Journal) -> Vec<&capcard::exec::RequestRecord> {
    let footer = journal.footer.as_ref().unwrap();
    let [from, to] = footer.measured_window_ms;
    journal
        .requests
        .iter()
        .filter(|r| r.scheduled_ms >= from && r.scheduled_ms < to)
        .collect()
}

fn bench(quick: bool) {
    let (mut server, port) = start_server();
    let dir = std::env::temp_dir().join(format!("capcard-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prompt = "lorem ipsum dolor sit amet ".repeat(20);
    let endpoint = |scenario: &str| Endpoint {
        base_url: format!("http://127.0.0.1:{port}/{scenario}/v1"),
        api: Api::Chat,
        model: "bench".into(),
        api_key: None,
        timeout: Duration::from_secs(30),
        http2: false,
        headers: Vec::new(),
        body: Default::default(),
    };
    let source = |output_tokens| -> Arc<dyn RequestSource> {
        Arc::new(BenchSource {
            output_tokens,
            prompt: prompt.clone(),
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seconds = if quick { 2.0 } else { 5.0 };
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine: {} cores, load average at start {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg.trim()
    );

    runtime.block_on(async {
        // Warm the process (allocator, runtime, connection code paths).
        let _ = run(&endpoint("zero"), &plan("warm", Load::Concurrency { concurrency: 8 }, 0.0, 0.5), source(16), None, &dir).await;

        // Memory per in-flight stream.
        let streams = 1000u32;
        let rss_before = rss_bytes();
        let sampler = tokio::spawn(async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            rss_bytes()
        });
        let hold = run(&endpoint("hold"), &plan("hold", Load::Concurrency { concurrency: streams }, 0.0, 1.0), source(4), None, &dir).await;
        let rss_during = sampler.await.unwrap();
        let open_at_sample = hold.journal.requests.iter().filter(|r| r.sent_ms < 2000.0 && r.completed_ms > 2000.0).count();
        println!(
            "\nmemory: {open_at_sample} streams in flight: RSS {:.1} MiB → {:.1} MiB, {:.1} KiB per in-flight stream",
            rss_before / 1048576.0,
            rss_during / 1048576.0,
            (rss_during - rss_before) / open_at_sample.max(1) as f64 / 1024.0
        );

        // Closed-loop throughput ceiling.
        let tokens = 64u32;
        let m = run(&endpoint("zero"), &plan("closed", Load::Concurrency { concurrency: 64 }, 1.0, seconds), source(tokens), None, &dir).await;
        let ok: Vec<_> = measured(&m.journal).into_iter().filter(|r| r.is_ok()).collect();
        let all_ok = m.journal.requests.iter().filter(|r| r.is_ok()).count() as f64;
        let all_tokens: f64 = m.journal.requests.iter().map(|r| f64::from(r.output_tokens)).sum();
        let errors = m.journal.requests.len() as f64 - all_ok;
        let rps = ok.len() as f64 / seconds;
        let tps = ok.iter().map(|r| f64::from(r.output_tokens)).sum::<f64>() / seconds;
        let gaps: Vec<f32> = ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect();
        let same_read = gaps.iter().filter(|&&g| g == 0.0).count() as f64 / gaps.len().max(1) as f64;
        let cpu_per_req = m.cpu_s / all_ok.max(1.0);
        let cpu_per_token = m.cpu_s / all_tokens.max(1.0);
        println!(
            "\nclosed c=64, {tokens}-token streams, {seconds} s: {rps:.0} req/s, {tps:.0} streamed tokens/s achieved ({errors} errors)\n  \
             client CPU {:.2} s for {all_ok} requests: {:.0} µs/request, {:.2} µs/token\n  \
             projected ceiling of one process on 2 cores: {:.0} req/s, {:.0} tokens/s\n  \
             {:.0}% of token gaps are 0 (events that arrived in the same network read)",
            m.cpu_s,
            cpu_per_req * 1e6,
            cpu_per_token * 1e6,
            2.0 / cpu_per_req,
            2.0 / cpu_per_token,
            same_read * 100.0
        );

        // Open-loop schedule lag.
        for rate in [500.0, 2000.0] {
            let load = Load::Rate { rate: RatePerS(rate), arrival: Arrival::Poisson };
            let p = plan(&format!("open-{rate}"), load, 1.0, seconds);
            let m = run(&endpoint("zero"), &p, source(16), Some(Box::new(poisson(rate, 42))), &dir).await;
            let calls = measured(&m.journal);
            let mut lags: Vec<f64> = calls.iter().map(|r| r.schedule_lag_ms).collect();
            let errors = calls.iter().filter(|r| !r.is_ok()).count();
            let footer = m.journal.footer.as_ref().unwrap();
            let max_inflight = footer.inflight_samples.iter().map(|s| s.1).max().unwrap_or(0);
            let mut ttft: Vec<f64> = calls.iter().filter_map(|r| r.ttft_ms).collect();
            println!(
                "\nopen poisson {rate} req/s, 16-token streams, {seconds} s: offered {} achieved {:.0} req/s ({errors} errors), max in flight {max_inflight}\n  \
                 schedule lag p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; generator_lagging = {}; TTFT p50 {:.2} ms p99 {:.2} ms\n  \
                 client CPU {:.2} s ({:.0}% of 2 cores)",
                footer.offered.unwrap_or(0),
                calls.len() as f64 / seconds,
                percentile(&mut lags, 50.0),
                percentile(&mut lags, 99.0),
                percentile(&mut lags, 100.0),
                footer.generator_lagging,
                percentile(&mut ttft, 50.0),
                percentile(&mut ttft, 99.0),
                m.cpu_s,
                m.cpu_s / (seconds + 1.0) / 2.0 * 100.0,
            );
        }
    });
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nload average at end {}", loadavg.trim());
    drop(server.stdin.take());
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
