//! The test kit: what the topic modules of this binary share. The built
//! binary ([`capcard`], [`binary`]), an experiment written to a temporary
//! folder ([`experiment_file`]), a run that must succeed ([`run_ok`]) and
//! the results it leaves ([`read_report`]); the simulated engine on a port
//! ([`tiny_sim`], [`serve_tiny`]), or `capcard sim` as a child process on
//! a free port ([`SimChild`], [`free_port`]); journals built by hand
//! ([`build`]); and a small HTTP client ([`web`]).

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use capcard::analyze::CapacityReport;
use capcard::config::{ConfigError, SimFaults};
use capcard::sim::{SimConfig, SimServer, presets, start};
use serde_json::json;

/// The `capcard` binary under test, as a command to give arguments to.
pub fn capcard() -> Command {
    Command::cargo_bin("capcard").expect("binary built")
}

/// The path of the binary under test, for a child process a test drives
/// itself (signals, pipes, several at once).
pub fn binary() -> PathBuf {
    assert_cmd::cargo::cargo_bin("capcard")
}

/// A new temporary folder holding the experiment `text` as `name`: the
/// folder (removed when dropped; results go beside the file) and the
/// file's path.
pub fn experiment_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join(name);
    std::fs::write(&file, text).expect("the experiment written");
    (dir, file)
}

/// `capcard run --quiet ARGS --out OUT FILE`, however it ends; the
/// results.json it leaves, if any, must be valid under the schema.
pub fn run(file: &Path, out: &Path, args: &[&str]) -> std::process::Output {
    let output = capcard()
        .args(["run", "--quiet"])
        .args(args)
        .arg("--out")
        .arg(out)
        .arg(file)
        .output()
        .expect("capcard runs");
    if out.join("results.json").is_file() {
        results_text(out);
    }
    output
}

/// [`run`], which must exit 0: its log (stderr). `&["--virtual"]` runs on
/// the engine's own clock.
pub fn run_ok(file: &Path, out: &Path, args: &[&str]) -> String {
    let output = run(file, out, args);
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "capcard run {args:?} {} exited {:?}:\n{}\n{log}",
        file.display(),
        output.status.code(),
        String::from_utf8_lossy(&output.stdout)
    );
    log
}

/// The results.json of a results folder, parsed, after checking it against
/// the published schema ([`results_text`]).
pub fn read_report(dir: &Path) -> CapacityReport {
    capcard::report::parse_results_json(&results_text(dir)).expect("results.json parses")
}

/// The text of a results folder's results.json, which must be valid under
/// `docs/results.schema.json` (a panic lists every violation): every test
/// that reads a folder it wrote checks the schema on the way.
pub fn results_text(dir: &Path) -> String {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path).expect("results.json written");
    assert_valid_results(&path, &text);
    text
}

/// `text` (read from `path`) is a results.json of the version this capcard
/// writes, by the schema the types generate.
pub fn assert_valid_results(path: &Path, text: &str) {
    let document: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
    let violations = capcard::report::schema::validate_results(&document);
    assert!(
        violations.is_empty(),
        "{} breaks {} ({}):\n{}",
        path.display(),
        capcard::report::schema::SCHEMA_PATH,
        capcard::report::RESULTS_SCHEMA,
        violations
            .iter()
            .map(|v| format!("  {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The `tiny` engine on an ephemeral loopback port, on a runtime of its
/// own that lives as long as the returned runtime (for tests that are not
/// async themselves): the runtime and the server's `/v1` URL.
pub fn serve_tiny() -> (tokio::runtime::Runtime, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = runtime.block_on(tiny_sim(SimFaults::default()));
    let url = format!("http://{}/v1", server.addr);
    // The server runs until the runtime is dropped.
    std::mem::forget(server);
    (runtime, url)
}

/// A loopback port that was free a moment ago: bound, noted, released.
/// Nothing listens there until someone binds it.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("an ephemeral loopback port")
        .port()
}

/// `capcard sim <args> --listen 127.0.0.1:<free port>` as a child process,
/// answering before [`SimChild::start`] returns; killed when dropped, a
/// failed assertion included.
pub struct SimChild {
    pub addr: std::net::SocketAddr,
    pub child: std::process::Child,
}

impl SimChild {
    /// Its standard error is discarded.
    pub fn start(args: &[&str]) -> SimChild {
        SimChild::spawn(args, std::process::Stdio::null())
    }

    /// Its standard error is piped, for the test to read what it said.
    pub fn start_logged(args: &[&str]) -> SimChild {
        SimChild::spawn(args, std::process::Stdio::piped())
    }

    fn spawn(args: &[&str], stderr: std::process::Stdio) -> SimChild {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = std::process::Command::new(binary())
            .arg("sim")
            .args(args)
            .arg("--listen")
            .arg(addr.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("capcard sim starts");
        let sim = SimChild { addr, child };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while sim.get("/health").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "capcard sim never answered"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        sim
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The raw HTTP/1.1 answer to `GET path`, or `None` when nothing
    /// answered.
    pub fn get(&self, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.addr).ok()?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        (!text.is_empty()).then_some(text)
    }
}

impl Drop for SimChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Renders a config error the way `capcard check` shows it, without colour
/// and at a fixed width so snapshots are stable.
pub fn render(err: &ConfigError) -> String {
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .with_width(100)
        .render_report(&mut out, err)
        .expect("rendering into a String cannot fail");
    out
}

/// The `tiny` simulated engine on an ephemeral loopback port.
pub async fn tiny_sim(faults: SimFaults) -> SimServer {
    let preset = presets::find("tiny").expect("tiny preset");
    let config = SimConfig::new(preset).with_faults(faults).with_seed(3);
    start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("sim starts")
}

/// `n` distinct words (one token each on the simulator), tagged by `tag`.
pub fn words(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 48 long streams on the tiny engine's 32 seats: 16 of them must wait.
/// The responses are returned open; dropping them disconnects.
pub async fn overload_tiny(
    client: &crate::support::web::Client,
    server: &SimServer,
) -> Vec<crate::support::web::Response> {
    let mut streams = Vec::new();
    for i in 0..48 {
        let resp = client
            .post(format!("{}/completions", server.base_url()))
            .json(&json!({"prompt": words(32, &format!("r{i}-")), "max_tokens": 1500, "ignore_eos": true, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        streams.push(resp);
    }
    streams
}

/// The few HTTP verbs the tests speak to servers, on capcard's own client
/// (the one every probe and scrape uses), in the builder style tests read
/// easily.
/// A Cr_open search driven as `capcard run` drives it: each rate it asks
/// for, while `cost_s` of the run still fits the budget, becomes the
/// `visit`-th run at that rate (1-based) through `run`, recorded with its
/// evidence; the runs, in order.
pub fn drive_search(
    search: &mut capcard::analyze::Search,
    cost_s: impl Fn(f64) -> f64,
    mut run: impl FnMut(f64, u32) -> capcard::analyze::RunSummary,
) -> Vec<capcard::analyze::RunSummary> {
    let mut runs = Vec::new();
    drive_search_on_evidence(search, cost_s, |rate, visit| {
        let summary = run(rate, visit);
        let evidence = capcard::analyze::cr_open::evidence_of(&summary).expect("an open run");
        runs.push(summary);
        evidence
    });
    runs
}

/// [`drive_search`] on evidence made directly (no journal, no summary).
pub fn drive_search_on_evidence(
    search: &mut capcard::analyze::Search,
    cost_s: impl Fn(f64) -> f64,
    mut run: impl FnMut(f64, u32) -> capcard::analyze::cr_open::RunEvidence,
) {
    drive_search_with_costs(search, &cost_s, |rate, visit| {
        (run(rate, visit), cost_s(rate))
    });
}

/// [`drive_search_on_evidence`] where each run says what it cost (a run
/// stopped early costs less than planned); `planned_s` is what the search
/// checks it can afford before the run.
pub fn drive_search_with_costs(
    search: &mut capcard::analyze::Search,
    planned_s: impl Fn(f64) -> f64,
    mut run: impl FnMut(f64, u32) -> (capcard::analyze::cr_open::RunEvidence, f64),
) {
    let mut visits: Vec<(f64, u32)> = Vec::new();
    while let Some(rate) = search.next_rate() {
        if !search.affords(planned_s(rate)) {
            break;
        }
        let visit = match visits.iter_mut().find(|v| v.0 == rate) {
            Some(v) => {
                v.1 += 1;
                v.1
            }
            None => {
                visits.push((rate, 1));
                1
            }
        };
        let (evidence, cost) = run(rate, visit);
        search.record(evidence, cost);
        assert!(search.runs().len() <= 200, "the search does not end");
    }
}

pub mod web {
    use bytes::Bytes;
    use capcard::exec::{HttpClient, HttpError, Streaming};
    use std::time::Duration;

    #[derive(Clone)]
    pub struct Client {
        inner: HttpClient,
    }

    impl Client {
        pub fn new() -> Client {
            Client {
                inner: HttpClient::new(Duration::from_secs(60)),
            }
        }

        /// capcard's client underneath.
        pub fn inner(&self) -> HttpClient {
            self.inner.clone()
        }

        pub fn get(&self, url: impl AsRef<str>) -> RequestBuilder {
            self.request(http::Method::GET, url)
        }

        pub fn post(&self, url: impl AsRef<str>) -> RequestBuilder {
            self.request(http::Method::POST, url)
        }

        fn request(&self, method: http::Method, url: impl AsRef<str>) -> RequestBuilder {
            RequestBuilder {
                client: self.inner.clone(),
                method,
                url: url.as_ref().to_string(),
                headers: Vec::new(),
                body: Bytes::new(),
            }
        }
    }

    /// `GET url` on a client of its own.
    pub async fn get(url: impl AsRef<str>) -> Result<Response, HttpError> {
        Client::new().get(url).send().await
    }

    pub struct RequestBuilder {
        client: HttpClient,
        method: http::Method,
        url: String,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        body: Bytes,
    }

    impl RequestBuilder {
        pub fn json(self, value: &impl serde::Serialize) -> Self {
            let body = serde_json::to_vec(value).expect("a JSON value");
            self.header("content-type", "application/json").body(body)
        }

        pub fn header(mut self, name: &str, value: &str) -> Self {
            self.headers.push((
                http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
                http::HeaderValue::from_str(value).expect("a header value"),
            ));
            self
        }

        pub fn body(mut self, body: impl Into<Bytes>) -> Self {
            self.body = body.into();
            self
        }

        pub async fn send(self) -> Result<Response, HttpError> {
            self.client
                .open(self.method, &self.url, &self.headers, self.body)
                .await
                .map(|streaming| Response { streaming })
        }
    }

    pub struct Response {
        streaming: Streaming,
    }

    impl Response {
        pub fn status(&self) -> http::StatusCode {
            http::StatusCode::from_u16(self.streaming.status()).expect("a status code")
        }

        pub fn headers(&self) -> &http::HeaderMap {
            self.streaming.headers()
        }

        pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
            self.streaming.chunk().await
        }

        pub async fn bytes(self) -> Result<Bytes, HttpError> {
            self.streaming.bytes().await
        }

        pub async fn text(self) -> Result<String, HttpError> {
            self.bytes()
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        }

        pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, HttpError> {
            let bytes = self.bytes().await?;
            serde_json::from_slice(&bytes).map_err(|e| HttpError::Body(e.to_string()))
        }
    }
}

/// Runs and journals built by hand, for the analysis of known queues.
pub mod build {
    use std::time::Duration;

    use capcard::config::StopRule;
    use capcard::exec::record::{Journal, RequestRecord, RunFooter, RunHeader};
    use capcard::plan::RunPlan;

    /// A call of 16 prompt tokens and 4 output tokens that succeeded: its
    /// first token `ttft_ms` after it was sent (at `scheduled_ms`), its last
    /// `service_ms` later, the three gaps between its tokens equal.
    pub fn record(task: u64, scheduled_ms: f64, ttft_ms: f64, service_ms: f64) -> RequestRecord {
        RequestRecord {
            prompt_tokens_requested: 16,
            prompt_tokens_reported: Some(16),
            ..RequestRecord::succeeded(
                task,
                scheduled_ms,
                ttft_ms,
                vec![(service_ms / 3.0) as f32; 3],
            )
        }
    }

    /// Calls in flight (sent, not completed) every `every_ms` up to `to_ms`.
    pub fn inflight(requests: &[RequestRecord], every_ms: f64, to_ms: f64) -> Vec<(f64, u32)> {
        let mut sent: Vec<f64> = requests.iter().map(|r| r.sent_ms).collect();
        let mut done: Vec<f64> = requests.iter().map(|r| r.completed_ms).collect();
        sent.sort_by(f64::total_cmp);
        done.sort_by(f64::total_cmp);
        let (mut s, mut d) = (0, 0);
        let mut samples = Vec::new();
        let mut at = every_ms;
        while at <= to_ms {
            while s < sent.len() && sent[s] <= at {
                s += 1;
            }
            while d < done.len() && done[d] <= at {
                d += 1;
            }
            samples.push((at, (s - d) as u32));
            at += every_ms;
        }
        samples
    }

    /// The journal `capcard run` writes of an open run of `requests` whose
    /// measured window is `window_ms` (after a warmup up to its start): the
    /// arrivals offered in the window counted, and the calls in flight
    /// sampled every 100 ms.
    pub fn open_journal(
        run: &RunPlan,
        model: &str,
        window_ms: [f64; 2],
        requests: Vec<RequestRecord>,
    ) -> Journal {
        let [from_ms, to_ms] = window_ms;
        let offered = requests
            .iter()
            .filter(|r| r.scheduled_ms >= from_ms && r.scheduled_ms < to_ms)
            .count() as u64;
        let inflight_samples = inflight(&requests, 100.0, to_ms);
        let run = RunPlan {
            warmup: Duration::from_secs_f64(from_ms / 1000.0),
            stop: StopRule::Duration(Duration::from_secs_f64((to_ms - from_ms) / 1000.0)),
            ..run.clone()
        };
        Journal {
            header: Some(RunHeader {
                run,
                started_at: "2026-01-01T00:00:00Z".into(),
                model: model.into(),
                measure_from_ms: from_ms,
                content_nonce: 0,
                prompt_sizing: None,
                prefix_cache_reset: None,
                telemetry_off: None,
                clock: None,
                context_window: None,
                shard: None,
                shards: Vec::new(),
                dialect: None,
            }),
            requests,
            tasks: vec![],
            footer: Some(RunFooter {
                measured_window_ms: [from_ms, to_ms],
                offered: Some(offered),
                inflight_samples,
                generator_lagging: false,
                interrupted: false,
                finished_at: "2026-01-01T01:00:00Z".into(),
                connections_opened: None,
                stopped_early: None,
                decided: None,
                reuse_potential: None,
            }),
        }
    }
}
