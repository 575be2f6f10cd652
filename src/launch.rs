//! Starting and stopping an inference server per setting: spawn its
//! command line in a process group of its own with its output appended to a
//! log, wait until it answers, and stop the whole group again (SIGTERM, a
//! grace, SIGKILL) until its port is free for the next setting's server.
//!
//! It knows nothing of experiments: the caller fills a [`LaunchSpec`]. No
//! engine outlives its [`Launched`]: dropping one that was not stopped
//! (an early return, a panic) kills its group.
//!
//! Unix only: process groups and `killpg` are what let a server's workers
//! (vLLM's engine cores, a shell wrapper's children) be stopped with it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::format::duration_words;

/// How often readiness is asked.
const READY_POLL: Duration = Duration::from_millis(200);
/// One readiness probe (connect, or GET and status line) at most: a server
/// that accepts but never answers is asked again rather than waited on.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a stopped server's port is tried until it refuses.
const PORT_POLL: Duration = Duration::from_millis(100);
/// How long a stopped server's port may keep accepting (a worker still
/// closing its socket) before the stop reports it as still taken.
pub const PORT_RELEASE_PATIENCE: Duration = Duration::from_secs(30);
/// How long a SIGKILLed process may take to be reaped; only a process stuck
/// in the kernel (a hung GPU driver call) takes longer.
const REAP_PATIENCE: Duration = Duration::from_secs(10);
/// Lines of the log an error quotes.
const ERROR_TAIL_LINES: usize = 20;
/// The end of the log read for a tail: a server can log gigabytes.
const TAIL_BYTES: u64 = 64 * 1024;

/// How to start one server, every placeholder already filled.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchSpec {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Set on top of capcard's own environment.
    pub env: Vec<(String, String)>,
    /// Working directory (default: capcard's).
    pub dir: Option<PathBuf>,
    /// `http://host:port/path` asked with GET until it answers 2xx; `None`:
    /// ready once `port` accepts a TCP connection.
    pub ready_url: Option<String>,
    /// From the spawn to readiness at most.
    pub ready_timeout: Duration,
    /// Between SIGTERM and SIGKILL when stopping.
    pub grace: Duration,
    /// The server's address: refused if taken before the launch, waited
    /// free after the stop.
    pub port: SocketAddr,
}

/// Why a server was not launched, or not ready. Whenever it had been
/// spawned, its group has been killed by the time the error is returned.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LaunchError {
    #[error("something already answers on {port}: capcard will not launch a second server there")]
    #[diagnostic(
        code(capcard::launch),
        help(
            "stop the server that listens there, or measure it as it is with an `endpoint` target"
        )
    )]
    PortInUse { port: SocketAddr },
    #[error("cannot ask {url} for readiness: {reason}")]
    #[diagnostic(
        code(capcard::launch),
        help("write it as http://HOST:PORT/PATH, e.g. http://127.0.0.1:8000/health")
    )]
    ReadyUrl { url: String, reason: &'static str },
    #[error("cannot start `{program}`: {source}")]
    #[diagnostic(code(capcard::launch))]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the server {status} before it was ready; the end of its log:\n{log_tail}")]
    #[diagnostic(code(capcard::launch))]
    ExitedBeforeReady { status: String, log_tail: String },
    #[error(
        "the server was not ready after {} (it was stopped); the end of its log:\n{log_tail}",
        duration_words(after.as_secs_f64())
    )]
    #[diagnostic(
        code(capcard::launch),
        help(
            "a large model can take minutes to load: raise the ready timeout if the log shows it still loading"
        )
    )]
    NotReady { after: Duration, log_tail: String },
    #[error("interrupted before the server was ready (it was stopped)")]
    #[diagnostic(code(capcard::launch))]
    Cancelled,
    #[error("cannot write the server's log {path}: {source}")]
    #[diagnostic(code(capcard::launch))]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A server launched and ready, until [`Launched::stop`] (or drop, which
/// kills its group).
#[derive(Debug)]
pub struct Launched {
    /// The server's pid, which is also its process group's id.
    pid: u32,
    launched_at: Instant,
    ready_after: Duration,
    log_path: PathBuf,
    /// Where this launch's output starts in the log (it is appended to).
    log_from: u64,
    port: SocketAddr,
    grace: Duration,
    /// The exit, described, from the thread that waits for the process.
    exit_rx: oneshot::Receiver<String>,
    /// The exit once received: a oneshot answers once.
    exit: Option<String>,
    stopped: bool,
}

/// How a stop went.
#[derive(Debug, Clone, PartialEq)]
pub struct StopReport {
    /// How the server ended: "exited with status 0", "killed by SIGKILL".
    pub exit: String,
    /// It had exited on its own before it was stopped.
    pub had_exited: bool,
    /// It outlived the grace after SIGTERM and was SIGKILLed.
    pub killed: bool,
    /// The grace it was given.
    pub grace: Duration,
    /// From the stop to the process's exit.
    pub exited_after: Duration,
    /// From the stop until the port refused connections; `None` if it still
    /// accepted [`PORT_RELEASE_PATIENCE`] later.
    pub port_free_after: Option<Duration>,
    /// The server's address.
    pub port: SocketAddr,
}

impl std::fmt::Display for StopReport {
    /// One line for a run's log: "the server stopped 1.2 s after SIGTERM
    /// (exited with status 0)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.had_exited {
            write!(f, "the server had already {}", self.exit)?;
        } else if self.killed {
            write!(
                f,
                "the server outlived SIGTERM by {}: {}",
                duration_words(self.grace.as_secs_f64()),
                self.exit
            )?;
        } else {
            write!(
                f,
                "the server stopped {} after SIGTERM ({})",
                duration_words(self.exited_after.as_secs_f64()),
                self.exit
            )?;
        }
        if self.port_free_after.is_none() {
            write!(
                f,
                "; {} still accepted connections {} later",
                self.port,
                duration_words(PORT_RELEASE_PATIENCE.as_secs_f64())
            )?;
        }
        Ok(())
    }
}

/// Spawn `spec`'s server, its output appended to `log_path`, and wait until
/// it is ready. Refused if `spec.port` already accepts connections: that is
/// someone else's server, and measuring it instead would be a silent lie.
pub async fn launch(
    spec: &LaunchSpec,
    log_path: &Path,
    cancel: &CancellationToken,
) -> Result<Launched, LaunchError> {
    let ready_url = spec
        .ready_url
        .as_deref()
        .map(HttpTarget::parse)
        .transpose()?;
    if accepts(spec.port).await {
        return Err(LaunchError::PortInUse { port: spec.port });
    }
    let log_err = |source| LaunchError::Log {
        path: log_path.to_path_buf(),
        source,
    };
    if let Some(parent) = log_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(log_err)?;
    }
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(log_err)?;
    // A log shared by several settings: each launch says where it starts.
    writeln!(
        log,
        "# capcard launch {}: {}",
        crate::time::rfc3339_utc(SystemTime::now()),
        spec.argv.join(" ")
    )
    .map_err(log_err)?;
    let log_from = log.metadata().map_err(log_err)?.len();

    let program = spec.argv.first().cloned().unwrap_or_default();
    let spawn_err = |source| LaunchError::Spawn {
        program: program.clone(),
        source,
    };
    if program.is_empty() {
        return Err(spawn_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the command line is empty",
        )));
    }
    let stderr = log.try_clone().map_err(log_err)?;
    let mut command = Command::new(&program);
    command
        .args(&spec.argv[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        // A group of its own: the server's workers are signalled with it,
        // and a Ctrl-C at capcard's terminal does not reach them unasked.
        .process_group(0);
    if let Some(dir) = &spec.dir {
        command.current_dir(dir);
    }
    let launched_at = Instant::now();
    let mut child = command.spawn().map_err(spawn_err)?;
    let pid = child.id();

    // A thread of its own waits for the exit, so that `exited` is an
    // awaitable without tokio's `process` feature.
    let (exit_tx, exit_rx) = oneshot::channel();
    let waiter = std::thread::Builder::new()
        .name(format!("capcard-launch-{pid}"))
        .spawn(move || {
            let exit = match child.wait() {
                Ok(status) => describe_exit(status),
                Err(e) => format!("could not be waited for ({e})"),
            };
            let _ = exit_tx.send(exit);
        });
    if let Ok(mut groups) = LIVE_GROUPS.lock() {
        groups.push(pid);
    }
    let mut launched = Launched {
        pid,
        launched_at,
        ready_after: Duration::ZERO,
        log_path: log_path.to_path_buf(),
        log_from,
        port: spec.port,
        grace: spec.grace,
        exit_rx,
        exit: None,
        stopped: false,
    };
    if let Err(source) = waiter {
        // Dropping `launched` kills the group; the process stays a zombie.
        return Err(spawn_err(source));
    }

    let deadline = tokio::time::Instant::from_std(launched_at + spec.ready_timeout);
    enum Waited {
        Ready,
        Exited(String),
        TimedOut,
        Cancelled,
    }
    let waited = tokio::select! {
        biased;
        _ = cancel.cancelled() => Waited::Cancelled,
        exit = launched.exited() => Waited::Exited(exit),
        _ = tokio::time::sleep_until(deadline) => Waited::TimedOut,
        () = until_ready(spec.port, ready_url.as_ref()) => Waited::Ready,
    };
    let failure = match waited {
        Waited::Ready => {
            launched.ready_after = launched_at.elapsed();
            return Ok(launched);
        }
        Waited::Exited(status) => LaunchError::ExitedBeforeReady {
            status,
            log_tail: launched.log_tail(ERROR_TAIL_LINES),
        },
        Waited::TimedOut => LaunchError::NotReady {
            after: spec.ready_timeout,
            log_tail: launched.log_tail(ERROR_TAIL_LINES),
        },
        Waited::Cancelled => LaunchError::Cancelled,
    };
    // Killed, not asked: it is stuck, exited, or the user wants out. Its
    // port is still waited free, for the next setting's server.
    launched.shut(None).await;
    Err(failure)
}

impl Launched {
    /// The server's pid (its process group's id too).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// From the spawn until the server answered.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// When the server was spawned.
    pub fn launched_at(&self) -> Instant {
        self.launched_at
    }

    /// How the server exited (`exited with status 1`, `killed by SIGSEGV`),
    /// once it has; `None` while it runs.
    pub fn try_exited(&mut self) -> Option<String> {
        if self.exit.is_none() {
            self.exit = match self.exit_rx.try_recv() {
                Ok(exit) => Some(exit),
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => Some(WAITER_LOST.to_string()),
            };
        }
        self.exit.clone()
    }

    /// Resolves when the server exits, with how; for a `tokio::select!`
    /// racing a run (dropping the future loses nothing).
    pub async fn exited(&mut self) -> String {
        if let Some(exit) = &self.exit {
            return exit.clone();
        }
        let exit = (&mut self.exit_rx)
            .await
            .unwrap_or_else(|_| WAITER_LOST.to_string());
        self.exit = Some(exit.clone());
        exit
    }

    /// The last `lines` lines this launch wrote to its log (earlier
    /// launches into the same file excluded).
    pub fn log_tail(&self, lines: usize) -> String {
        match read_tail(&self.log_path, self.log_from, lines) {
            Ok(tail) => tail,
            Err(e) => format!("(cannot read {}: {e})", self.log_path.display()),
        }
    }

    /// SIGTERM to the whole group, `grace` to exit, then SIGKILL; then wait
    /// (at most [`PORT_RELEASE_PATIENCE`]) until the port refuses
    /// connections, so the next server can bind it.
    pub async fn stop(mut self) -> StopReport {
        let grace = self.grace;
        self.shut(Some(grace)).await
    }

    /// Stop the group: SIGTERM and `grace` first, or SIGKILL at once
    /// (`None`). Whatever of the group outlives the server itself (a
    /// worker it left behind) is killed with it.
    async fn shut(&mut self, grace: Option<Duration>) -> StopReport {
        let started = Instant::now();
        let had_exited = self.try_exited().is_some();
        let mut killed = false;
        if !had_exited {
            let polite = match grace {
                Some(grace) => {
                    signal_group(self.pid, libc::SIGTERM);
                    tokio::time::timeout(grace, self.exited()).await.is_ok()
                }
                None => false,
            };
            if !polite {
                signal_group(self.pid, libc::SIGKILL);
                killed = grace.is_some();
            }
        }
        let exit = match tokio::time::timeout(REAP_PATIENCE, self.exited()).await {
            Ok(exit) => exit,
            Err(_) => format!(
                "did not exit {} after SIGKILL",
                duration_words(REAP_PATIENCE.as_secs_f64())
            ),
        };
        let exited_after = started.elapsed();
        signal_group(self.pid, libc::SIGKILL);
        self.stopped = true;
        let port_free_after = until_port_free(self.port, PORT_RELEASE_PATIENCE)
            .await
            .then(|| started.elapsed());
        StopReport {
            exit,
            had_exited,
            killed,
            grace: grace.unwrap_or(Duration::ZERO),
            exited_after,
            port_free_after,
            port: self.port,
        }
    }
}

impl Drop for Launched {
    /// No engine outlives capcard's hold on it: an early return or a panic
    /// between launch and stop kills the group (the waiting thread reaps).
    fn drop(&mut self) {
        if !self.stopped {
            signal_group(self.pid, libc::SIGKILL);
        }
        if let Ok(mut groups) = LIVE_GROUPS.lock() {
            groups.retain(|&g| g != self.pid);
        }
    }
}

/// The groups launched and not yet dropped: what [`kill_all`] kills.
static LIVE_GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// SIGKILL every server this process launched and still holds: for a hard
/// abort (a second Ctrl-C), which exits at once and runs no destructor.
pub fn kill_all() {
    let groups = LIVE_GROUPS.lock().map(|g| g.clone()).unwrap_or_default();
    for pgid in groups {
        signal_group(pgid, libc::SIGKILL);
    }
}

/// The exit of a process whose waiting thread ended without saying it.
const WAITER_LOST: &str = "exited (how is unknown: its waiting thread ended)";

/// `signal` to the process group `pgid`. A group already gone (ESRCH) is
/// what was wanted; nothing else can fail for a group we started.
fn signal_group(pgid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    // SAFETY: killpg only sends a signal; `pgid` is the group this module
    // created with process_group(0), never 0 or 1 (which would be ours or
    // every process's).
    if pgid > 1 {
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// An exit status in words.
fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(signal) => format!("killed by {}", signal_name(signal)),
        None => format!("ended ({status})"),
    }
}

fn signal_name(signal: libc::c_int) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// The last `lines` lines of `path` from byte `from` on, out of its last
/// [`TAIL_BYTES`] at most.
fn read_tail(path: &Path, from: u64, lines: usize) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let start = from.max(len.saturating_sub(TAIL_BYTES)).min(len);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    Ok(all[all.len().saturating_sub(lines)..].join("\n"))
}

/// Whether `addr` accepts a TCP connection now.
async fn accepts(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// Resolves once the server answers: `url` with a 2xx, or without one,
/// `port` accepting a connection. Asked every [`READY_POLL`].
async fn until_ready(port: SocketAddr, url: Option<&HttpTarget>) {
    loop {
        let ready = match url {
            Some(url) => url.answers_2xx().await,
            None => accepts(port).await,
        };
        if ready {
            return;
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Whether `port` refused connections within `patience`.
async fn until_port_free(port: SocketAddr, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        if !accepts(port).await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(PORT_POLL).await;
    }
}

/// A readiness URL: plain HTTP, as a server on this machine is asked; no
/// TLS, so that this leaf needs no HTTP client.
#[derive(Debug, Clone, PartialEq)]
struct HttpTarget {
    /// `host:port` (a bracketed IPv6 host as written).
    authority: String,
    /// `/health`, with any query.
    path: String,
}

impl HttpTarget {
    fn parse(url: &str) -> Result<HttpTarget, LaunchError> {
        let refuse = |reason| LaunchError::ReadyUrl {
            url: url.to_string(),
            reason,
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| refuse("only http:// is asked (no TLS)"))?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        if authority.is_empty()
            || authority.contains('@')
            || authority.contains(char::is_whitespace)
        {
            return Err(refuse("no host (or user info, or a space) in it"));
        }
        // `host` alone is port 80; `[::1]` is a host, `[::1]:8000` has a port.
        let has_port = match authority.rfind(']') {
            Some(bracket) => authority[bracket..].contains(':'),
            None => authority.contains(':'),
        };
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        if path.contains(char::is_whitespace) {
            return Err(refuse("a space in its path"));
        }
        Ok(HttpTarget {
            authority,
            path: path.to_string(),
        })
    }

    /// One GET: whether the status line says 2xx within [`PROBE_TIMEOUT`].
    async fn answers_2xx(&self) -> bool {
        let ask = async {
            let mut stream = TcpStream::connect(&self.authority).await?;
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: capcard\r\nConnection: close\r\n\r\n",
                self.path, self.authority
            );
            stream.write_all(request.as_bytes()).await?;
            // The status line is all that is read: `HTTP/1.1 200 OK`.
            let mut head = Vec::with_capacity(64);
            let mut buf = [0u8; 64];
            while !head.contains(&b'\n') && head.len() < 1024 {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            Ok::<_, std::io::Error>(head)
        };
        let Ok(Ok(head)) = tokio::time::timeout(PROBE_TIMEOUT, ask).await else {
            return false;
        };
        let line = String::from_utf8_lossy(&head);
        let mut words = line.split_whitespace();
        matches!(
            (words.next(), words.next()),
            (Some(version), Some(code)) if version.starts_with("HTTP/") && code.len() == 3 && code.starts_with('2')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    /// A port nobody listens on (bound, then let go).
    fn free_port() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.local_addr().expect("an address")
    }

    /// A health endpoint on an ephemeral port: 503 to the first
    /// `not_ready` GETs, then 200.
    async fn health(not_ready: usize) -> (String, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            let mut asked = 0;
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let status = if asked < not_ready {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                asked += 1;
                let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        (format!("http://{addr}/health"), task)
    }

    /// `sh -c SCRIPT`, ready at `ready_url` (or when the free `port` accepts).
    fn spec(script: &str, ready_url: Option<String>) -> LaunchSpec {
        LaunchSpec {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: vec![("CAPCARD_TEST".into(), "launched".into())],
            dir: None,
            ready_url,
            ready_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(5),
            port: free_port(),
        }
    }

    /// Whether process `pid` runs (a zombie does not: it awaits only its
    /// reaper, which in a container may never come).
    fn alive(pid: u32) -> bool {
        let proc_stat = format!("/proc/{pid}/stat");
        if Path::new("/proc/self/stat").exists() {
            let Ok(stat) = std::fs::read_to_string(proc_stat) else {
                return false;
            };
            // `pid (comm) S ...`: the state follows the last `)`.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            return !matches!(state, Some('Z' | 'X') | None);
        }
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    /// Whether `pid` is gone within two seconds.
    async fn dies(pid: u32) -> bool {
        for _ in 0..200 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// The pid a script wrote into `path`, once it has.
    async fn pid_in(path: &Path) -> u32 {
        for _ in 0..200 {
            if let Ok(text) = std::fs::read_to_string(path)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no pid written to {}", path.display());
    }

    fn log_in(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("logs").join("server.log")
    }

    #[tokio::test]
    async fn ready_when_the_url_answers_2xx_then_stopped_by_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let (url, health) = health(2).await;
        let spec = spec("echo \"up as $CAPCARD_TEST\"; exec sleep 30", Some(url));
        let mut server = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect("ready");
        // Two 503s, one poll apart each.
        assert!(
            server.ready_after() >= 2 * READY_POLL,
            "{:?}",
            server.ready_after()
        );
        assert!(server.launched_at().elapsed() >= server.ready_after());
        assert_eq!(server.try_exited(), None);
        let pid = server.pid();
        assert!(alive(pid));
        for _ in 0..100 {
            if server.log_tail(1) == "up as launched" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(server.log_tail(1), "up as launched");
        let report = server.stop().await;
        assert_eq!(report.exit, "killed by SIGTERM");
        assert!(!report.killed && !report.had_exited, "{report:?}");
        assert!(report.exited_after < Duration::from_secs(2), "{report}");
        assert!(report.port_free_after.is_some());
        assert!(
            report.to_string().starts_with("the server stopped "),
            "{report}"
        );
        assert!(
            report
                .to_string()
                .ends_with(" after SIGTERM (killed by SIGTERM)"),
            "{report}"
        );
        assert!(dies(pid).await);
        health.abort();
    }

    #[tokio::test]
    async fn ready_when_the_port_accepts_and_the_stop_waits_for_it_to_close() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("started");
        let mut spec = spec("touch \"$0\"; exec sleep 30", None);
        spec.argv.push(marker.display().to_string());
        let port = spec.port;
        // The "server" binds its port once it runs (the launch checked the
        // port free before spawning it), and lets go of it 300 ms into the stop.
        let (release_tx, release_rx) = oneshot::channel::<()>();
        let listener = tokio::spawn(async move {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let listener = TcpListener::bind(port).await.expect("bind the port");
            let _ = release_rx.await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(listener);
        });
        let server = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect("ready");
        let _ = release_tx.send(());
        let report = server.stop().await;
        let free_after = report.port_free_after.expect("the port freed");
        assert!(free_after >= Duration::from_millis(250), "{report:?}");
        assert!(free_after < Duration::from_secs(3), "{report:?}");
        listener.await.unwrap();
    }

    #[tokio::test]
    async fn a_server_that_ignores_sigterm_is_killed_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let (url, health) = health(0).await;
        // Readiness comes from the test's own health server: wait for the
        // shell to have set its trap, or SIGTERM could still stop it.
        let trapped = dir.path().join("trapped");
        let script = format!("trap '' TERM; touch {}; exec sleep 30", trapped.display());
        let mut spec = spec(&script, Some(url));
        spec.grace = Duration::from_millis(300);
        let server = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect("ready");
        for _ in 0..500 {
            if trapped.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pid = server.pid();
        let report = server.stop().await;
        assert!(report.killed, "{report:?}");
        assert_eq!(report.exit, "killed by SIGKILL");
        assert!(
            report.exited_after >= Duration::from_millis(300),
            "{report:?}"
        );
        assert!(report.exited_after < Duration::from_secs(3), "{report:?}");
        assert!(
            report.to_string().contains("outlived SIGTERM by 300 ms"),
            "{report}"
        );
        assert!(dies(pid).await);
        health.abort();
    }

    #[tokio::test]
    async fn the_whole_group_dies_with_a_dropped_server() {
        let dir = tempfile::tempdir().unwrap();
        let child_pid = dir.path().join("child.pid");
        let (url, health) = health(0).await;
        // A worker of the server's own, as vLLM starts its engine core.
        let mut spec = spec("sleep 30 & echo $! > \"$0\"; exec sleep 30", Some(url));
        spec.argv.push(child_pid.display().to_string());
        let server = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect("ready");
        let (pid, worker) = (server.pid(), pid_in(&child_pid).await);
        assert!(alive(worker));
        drop(server);
        assert!(dies(pid).await, "the server outlived its drop");
        assert!(dies(worker).await, "its worker outlived the drop");
        health.abort();
    }

    #[tokio::test]
    async fn a_server_that_exits_first_fails_fast_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_in(&dir);
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, "an earlier setting's line\n").unwrap();
        let spec = spec("echo boom >&2; exit 3", None);
        let started = Instant::now();
        let err = launch(&spec, &log, &CancellationToken::new())
            .await
            .expect_err("it exits");
        assert!(started.elapsed() < Duration::from_secs(3));
        let LaunchError::ExitedBeforeReady { status, log_tail } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(status, "exited with status 3");
        assert_eq!(log_tail, "boom");
        assert!(
            err.to_string()
                .contains("exited with status 3 before it was ready"),
            "{err}"
        );
        // Appended, each launch headed.
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.starts_with("an earlier setting's line\n# capcard launch "),
            "{text}"
        );
    }

    #[tokio::test]
    async fn not_ready_in_time_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("server.pid");
        let mut spec = spec("echo $$ > \"$0\"; echo loading; exec sleep 30", None);
        spec.argv.push(pid_file.display().to_string());
        spec.ready_timeout = Duration::from_millis(500);
        let err = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect_err("never ready");
        let LaunchError::NotReady { after, log_tail } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*after, Duration::from_millis(500));
        assert_eq!(log_tail, "loading");
        assert!(err.to_string().contains("not ready after 500 ms"), "{err}");
        assert!(dies(pid_in(&pid_file).await).await);
    }

    #[tokio::test]
    async fn cancelled_while_waiting_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("server.pid");
        let mut spec = spec("echo $$ > \"$0\"; exec sleep 30", None);
        spec.argv.push(pid_file.display().to_string());
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            trigger.cancel();
        });
        let started = Instant::now();
        let err = launch(&spec, &log_in(&dir), &cancel)
            .await
            .expect_err("cancelled");
        assert!(matches!(err, LaunchError::Cancelled), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(dies(pid_in(&pid_file).await).await);
    }

    #[tokio::test]
    async fn a_port_already_taken_is_refused_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut spec = spec("touch \"$0\"", None);
        spec.argv.push(marker.display().to_string());
        spec.port = listener.local_addr().unwrap();
        let err = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect_err("taken");
        assert!(
            matches!(err, LaunchError::PortInUse { port } if port == spec.port),
            "{err:?}"
        );
        assert!(!marker.exists());
        assert!(
            !log_in(&dir).exists(),
            "nothing was launched, nothing logged"
        );
    }

    #[tokio::test]
    async fn exited_resolves_in_a_select_while_the_run_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (url, health) = health(0).await;
        let spec = spec("sleep 1; exit 7", Some(url));
        let mut server = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect("ready");
        let mut ticks = 0;
        let exit = loop {
            tokio::select! {
                exit = server.exited() => break exit,
                _ = tokio::time::sleep(Duration::from_millis(100)) => ticks += 1,
            }
            assert!(ticks < 100, "the server never exited");
        };
        assert!(ticks >= 2, "{ticks}");
        assert_eq!(exit, "exited with status 7");
        assert_eq!(server.try_exited().as_deref(), Some("exited with status 7"));
        assert_eq!(server.exited().await, "exited with status 7");
        let report = server.stop().await;
        assert!(report.had_exited && !report.killed, "{report:?}");
        assert_eq!(
            report.to_string(),
            "the server had already exited with status 7"
        );
        health.abort();
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = spec("", None);
        spec.argv = vec!["/nonexistent/capcard-engine".into(), "--port".into()];
        let err = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect_err("no such program");
        assert!(
            matches!(&err, LaunchError::Spawn { program, .. } if program == "/nonexistent/capcard-engine"),
            "{err:?}"
        );
        spec.argv.clear();
        let err = launch(&spec, &log_in(&dir), &CancellationToken::new())
            .await
            .expect_err("nothing to run");
        assert!(
            err.to_string().contains("the command line is empty"),
            "{err}"
        );
    }

    #[test]
    fn ready_urls_are_plain_http() {
        let parsed = HttpTarget::parse("http://127.0.0.1:8000/health?x=1").unwrap();
        assert_eq!(
            parsed,
            HttpTarget {
                authority: "127.0.0.1:8000".into(),
                path: "/health?x=1".into()
            }
        );
        assert_eq!(
            HttpTarget::parse("http://localhost").unwrap().authority,
            "localhost:80"
        );
        assert_eq!(
            HttpTarget::parse("http://[::1]").unwrap().authority,
            "[::1]:80"
        );
        assert_eq!(
            HttpTarget::parse("http://[::1]:9/v1/models").unwrap().path,
            "/v1/models"
        );
        for bad in [
            "https://h/health",
            "http:///x",
            "127.0.0.1:8000",
            "http://u@h/",
        ] {
            assert!(
                matches!(HttpTarget::parse(bad), Err(LaunchError::ReadyUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_tail_is_the_last_lines_of_this_launch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "old\none\ntwo\nthree\n").unwrap();
        assert_eq!(read_tail(&path, 4, 2).unwrap(), "two\nthree");
        assert_eq!(read_tail(&path, 4, 10).unwrap(), "one\ntwo\nthree");
        assert_eq!(read_tail(&path, 100, 10).unwrap(), "");
        assert_eq!(signal_name(libc::SIGSEGV), "SIGSEGV",);
    }
}
