//! Writing and reading journals (`runs/<run-id>.jsonl`).
//!
//! The hot path never touches the disk: calls hand their finished records to
//! an unbounded channel, and one blocking writer thread owns the file. The
//! writer drains whatever is queued, writes it, and flushes as soon as the
//! queue is empty — so a crash of the process loses at most the lines still in
//! the channel (the last few milliseconds), never a flushed line. There is no
//! `fsync`: an operating-system crash may lose what the page cache held.
//!
//! The writer also keeps the lines in memory, so the run returns its
//! [`Journal`] without reading the file back, and computes the footer from
//! the records it has seen ([`build_footer`], pure).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::ExecError;
use super::record::{Journal, JournalLine, RunFooter};
use super::request::RequestSource;

/// Lag p99 (ms) above which an open-loop run is flagged `generator_lagging`:
/// the client itself, not the endpoint, was late to send. 10 ms is well above
/// the timer granularity (1 ms) and scheduling noise of a healthy generator,
/// and well below any TTFT SLO worth measuring.
pub const GENERATOR_LAG_P99_LIMIT_MS: f64 = 10.0;

/// Where the measured window ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowEnd {
    /// A fixed instant (duration stop, or the interrupt).
    At(f64),
    /// The last completion of a measured call (request-count stop).
    LastMeasuredCompletion,
    /// Just after the last start of a measured call (a closed loop's
    /// request-count stop: the slots drain after it).
    LastMeasuredStart,
}

/// What the runner knows at the end that the records do not say.
#[derive(Debug, Clone, PartialEq)]
pub struct FooterPlan {
    pub measure_from_ms: f64,
    pub window_end: WindowEnd,
    /// Open loop: scheduled offsets (ms) of every dispatched arrival.
    pub arrivals_ms: Option<Vec<f64>>,
    pub inflight_samples: Vec<(f64, u32)>,
    pub interrupted: bool,
    pub finished_at: String,
    pub connections_opened: Option<u64>,
    /// The early-stop rule ended the run (its window then starts at 0).
    pub stopped_early: Option<super::record::EarlyStop>,
    /// The run's watch ended it, decisively beyond its SLOs.
    pub decided: Option<super::record::DecisiveStop>,
}

/// The writer thread; it returns the journal it wrote.
pub(crate) type WriterHandle = JoinHandle<Result<Journal, ExecError>>;

// Every message but the last is a `Line`: boxing it would allocate once
// per record to save bytes on the one `Finish`.
#[allow(clippy::large_enum_variant)]
pub(crate) enum WriterMsg {
    Line(JournalLine),
    Finish(FooterPlan),
}

/// The footer of a run from its records (pure).
///
/// Measured calls are those scheduled inside the window. For the open loop,
/// `offered` counts the arrivals scheduled inside it and `generator_lagging`
/// compares the measured calls' schedule-lag p99 with
/// [`GENERATOR_LAG_P99_LIMIT_MS`]. Closed loops have neither.
pub fn build_footer(journal: &Journal, plan: FooterPlan) -> RunFooter {
    let timings: Vec<CallTiming> = journal.requests.iter().map(CallTiming::of).collect();
    build_footer_from(&timings, plan)
}

/// What the footer needs of one call: a few dozen bytes instead of the
/// whole record, so a writer that does not keep records stays small however
/// long the run.
#[derive(Debug, Clone, Copy)]
pub struct CallTiming {
    pub scheduled_ms: f64,
    pub completed_ms: f64,
    pub schedule_lag_ms: f32,
    /// Which call it was, for the reuse potential (the calls in the order
    /// they were sent: `scheduled_ms + schedule_lag_ms`).
    pub task: u64,
    pub call: u32,
    /// The call succeeded.
    pub ok: bool,
    /// When the first token came, ms after `scheduled_ms` (the prompt was
    /// prefilled then); NaN when none came.
    pub ttft_ms: f32,
}

impl CallTiming {
    pub fn of(r: &super::record::RequestRecord) -> Self {
        CallTiming {
            scheduled_ms: r.scheduled_ms,
            completed_ms: r.completed_ms,
            schedule_lag_ms: r.schedule_lag_ms as f32,
            task: r.task,
            call: r.call,
            ok: r.is_ok(),
            ttft_ms: r.ttft_ms.map_or(f32::NAN, |t| t as f32),
        }
    }
}

/// The reuse potential of a run ([`crate::workload::reuse`]): its calls in
/// the order they were sent (ties by task, then call), each regenerated with
/// `task` (the run's request source, random access by index), fed to an
/// ideal prefix cache. Every call whose prompt the server prefilled fills
/// the cache, warmup included, from the instant its first token came (for
/// the timely hits); the tally counts the successful calls scheduled inside
/// the footer's measured window, as the summary does.
/// Runs after the run, in the journal's writer thread: never on the timing
/// path.
pub fn reuse_potential(
    timings: &[CallTiming],
    window_ms: [f64; 2],
    task: &dyn Fn(u64) -> crate::workload::Task,
) -> crate::workload::reuse::ReuseTally {
    use std::collections::HashMap;
    let sent = |t: &CallTiming| t.scheduled_ms + f64::from(t.schedule_lag_ms);
    let mut order: Vec<&CallTiming> = timings
        .iter()
        .filter(|t| t.ttft_ms.is_finite() || t.ok)
        .collect();
    order.sort_by(|a, b| {
        sent(a)
            .total_cmp(&sent(b))
            .then(a.task.cmp(&b.task))
            .then(a.call.cmp(&b.call))
    });
    // A task's calls are regenerated once and dropped after its last call,
    // so memory follows the tasks in flight (a task whose last call was
    // never served stays: at most one per such call).
    let mut tasks: HashMap<u64, Vec<crate::workload::CallSpec>> = HashMap::new();
    let mut acc = crate::workload::reuse::ReuseAccumulator::new();
    let [from, to] = window_ms;
    for t in order {
        let calls = tasks.entry(t.task).or_insert_with(|| {
            let mut generated = task(t.task);
            generated
                .spec
                .calls_mut()
                .into_iter()
                .map(|c| c.clone())
                .collect()
        });
        if let Some(spec) = calls.get(t.call as usize) {
            let counted = t.ok && t.scheduled_ms >= from && t.scheduled_ms < to;
            // A call that succeeded without a first token (no output) was
            // prefilled by the time it ended.
            let prefilled = if t.ttft_ms.is_finite() {
                t.scheduled_ms + f64::from(t.ttft_ms)
            } else {
                t.completed_ms
            };
            acc.call_at(spec, counted, sent(t), prefilled);
        }
        if t.call as usize + 1 >= calls.len() {
            tasks.remove(&t.task);
        }
    }
    acc.tally()
}

/// [`build_footer`] from the calls' timings alone.
pub fn build_footer_from(timings: &[CallTiming], plan: FooterPlan) -> RunFooter {
    let from = plan.measure_from_ms;
    let to = match plan.window_end {
        WindowEnd::At(ms) => ms.max(from),
        WindowEnd::LastMeasuredCompletion => timings
            .iter()
            .filter(|r| r.scheduled_ms >= from)
            .map(|r| r.completed_ms)
            .fold(from, f64::max),
        // The window is `[from, to)` by start: one microsecond (the
        // journal's resolution) past the last start keeps that call in it.
        WindowEnd::LastMeasuredStart => {
            timings
                .iter()
                .filter(|r| r.scheduled_ms >= from)
                .map(|r| r.scheduled_ms)
                .fold(from, f64::max)
                + 0.001
        }
    };
    let in_window = |t: f64| match plan.window_end {
        WindowEnd::At(_) | WindowEnd::LastMeasuredStart => t >= from && t < to,
        WindowEnd::LastMeasuredCompletion => t >= from,
    };
    let open_loop = plan.arrivals_ms.is_some();
    let offered = plan
        .arrivals_ms
        .as_ref()
        .map(|a| a.iter().filter(|&&t| in_window(t)).count() as u64);
    let generator_lagging = open_loop && {
        let mut lags = crate::stats::StatsAccumulator::default();
        for r in timings.iter().filter(|r| in_window(r.scheduled_ms)) {
            lags.push(f64::from(r.schedule_lag_ms));
        }
        lags.percentile(99.0)
            .is_some_and(|p99| p99 > GENERATOR_LAG_P99_LIMIT_MS)
    };
    RunFooter {
        measured_window_ms: [from, to],
        offered,
        inflight_samples: plan.inflight_samples,
        generator_lagging,
        interrupted: plan.interrupted,
        finished_at: plan.finished_at,
        connections_opened: plan.connections_opened,
        stopped_early: plan.stopped_early,
        decided: plan.decided,
        reuse_potential: None,
    }
}

/// Create (truncate) the journal file and start its writer thread.
/// The writer thread for `path`. With `keep_records` the journal it returns
/// holds every line; without, only the header and the footer (the records
/// are on disk), so a long run's memory does not grow with its calls.
///
/// With `source` (the run's requests), the footer gets the run's reuse
/// potential ([`reuse_potential`]), computed once the run has ended.
pub(crate) fn spawn_writer(
    path: &Path,
    keep_records: bool,
    source: Option<Arc<dyn RequestSource>>,
) -> Result<(mpsc::UnboundedSender<WriterMsg>, WriterHandle), ExecError> {
    let journal_error = |source| ExecError::Journal {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(journal_error)?;
    }
    let file = File::create(path).map_err(journal_error)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let path = path.to_path_buf();
    let handle =
        tokio::task::spawn_blocking(move || write_loop(file, rx, path, keep_records, source));
    Ok((tx, handle))
}

fn write_loop(
    file: File,
    mut rx: mpsc::UnboundedReceiver<WriterMsg>,
    path: PathBuf,
    keep_records: bool,
    source: Option<Arc<dyn RequestSource>>,
) -> Result<Journal, ExecError> {
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    let mut journal = Journal::default();
    let mut timings: Vec<CallTiming> = Vec::new();
    let mut failed: Option<io::Error> = None;
    let mut finished = false;
    while !finished && let Some(msg) = rx.blocking_recv() {
        let mut next = Some(msg);
        while let Some(msg) = next {
            let line = match msg {
                WriterMsg::Line(line) => line,
                WriterMsg::Finish(plan) => {
                    // The footer is the last line, even if a straggler
                    // still held a sender.
                    finished = true;
                    let mut footer = build_footer_from(&timings, plan);
                    if let Some(source) = &source {
                        footer.reuse_potential =
                            Some(reuse_potential(&timings, footer.measured_window_ms, &|i| {
                                source.task(i)
                            }));
                    }
                    JournalLine::End(footer)
                }
            };
            if failed.is_none()
                && let Err(e) = write_line(&mut out, &line)
            {
                failed = Some(e);
            }
            if let JournalLine::Request(r) = &line {
                timings.push(CallTiming::of(r));
            }
            match line {
                JournalLine::Request(_) | JournalLine::Task(_) if !keep_records => {}
                line => add_line(&mut journal, line),
            }
            next = if finished { None } else { rx.try_recv().ok() };
        }
        if failed.is_none()
            && let Err(e) = out.flush()
        {
            failed = Some(e);
        }
    }
    match failed {
        Some(source) => Err(ExecError::Journal { path, source }),
        None => Ok(journal),
    }
}

fn write_line(out: &mut impl Write, line: &JournalLine) -> io::Result<()> {
    serde_json::to_writer(&mut *out, line).map_err(io::Error::other)?;
    out.write_all(b"\n")
}

fn add_line(journal: &mut Journal, line: JournalLine) {
    match line {
        JournalLine::Run(header) => journal.header = Some(header),
        JournalLine::Request(record) => journal.requests.push(record),
        JournalLine::Task(task) => journal.tasks.push(task),
        JournalLine::End(footer) => journal.footer = Some(footer),
    }
}

/// Read a journal back. A last line that does not parse (the process died
/// while writing it) is dropped; a bad line anywhere else is an error. A
/// missing footer is normal for a run that did not end.
pub fn read_journal(path: &Path) -> Result<Journal, ExecError> {
    let bytes = std::fs::read(path).map_err(|source| ExecError::Journal {
        path: path.to_path_buf(),
        source,
    })?;
    parse_journal(&bytes).map_err(|(line, source)| ExecError::JournalParse {
        path: path.to_path_buf(),
        line,
        source,
    })
}

/// Call `f` with every line of the journal at `path`, in order, reading it
/// piece by piece (memory does not grow with the journal). Bad lines are
/// treated as in [`read_journal`]: a last line that does not parse is
/// dropped, any other is an error.
pub fn stream_journal(path: &Path, mut f: impl FnMut(JournalLine)) -> Result<(), ExecError> {
    use std::io::BufRead;
    let io_error = |source| ExecError::Journal {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let mut reader = io::BufReader::with_capacity(256 * 1024, file);
    let mut buf = Vec::new();
    let mut pending: Option<(usize, serde_json::Error)> = None;
    let mut number = 0;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io_error)? == 0 {
            return Ok(());
        }
        number += 1;
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some((line, source)) = pending.take() {
            return Err(ExecError::JournalParse {
                path: path.to_path_buf(),
                line,
                source,
            });
        }
        match parse_line(&buf) {
            Ok(line) => f(line),
            Err(e) => pending = Some((number, e)),
        }
    }
}

/// The header and footer of the journal at `path` (no records), streamed;
/// and the latest completion of any line, which stands in for the window's
/// end when the footer is missing (0 when there is a footer).
///
/// Record lines are not parsed when there is a footer: a journal line is
/// tagged first (`{"kind":"request",...`), so records are told apart by
/// their first bytes, which keeps a million-line journal's ends cheap.
pub fn read_journal_ends(path: &Path) -> Result<(Journal, f64), ExecError> {
    use std::io::BufRead;
    let io_error = |source| ExecError::Journal {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let mut reader = io::BufReader::with_capacity(256 * 1024, file);
    let mut ends = Journal::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io_error)? == 0 {
            break;
        }
        if buf.starts_with(br#"{"kind":"request""#) || buf.starts_with(br#"{"kind":"task""#) {
            continue;
        }
        // A torn last line, or anything unexpected: read_journal's rules
        // apply in the full pass below when there is no footer.
        match parse_line(&buf) {
            Ok(JournalLine::Run(header)) => ends.header = Some(header),
            Ok(JournalLine::End(footer)) => ends.footer = Some(footer),
            _ => {}
        }
    }
    if ends.footer.is_some() {
        return Ok((ends, 0.0));
    }
    let mut last_completed_ms: f64 = 0.0;
    stream_journal(path, |line| match line {
        JournalLine::Request(r) => last_completed_ms = last_completed_ms.max(r.completed_ms),
        JournalLine::Task(t) => last_completed_ms = last_completed_ms.max(t.completed_ms),
        JournalLine::Run(_) | JournalLine::End(_) => {}
    })?;
    Ok((ends, last_completed_ms))
}

/// [`read_journal`] on bytes; the error carries the 1-based line number.
pub fn parse_journal(bytes: &[u8]) -> Result<Journal, (usize, serde_json::Error)> {
    let lines: Vec<(usize, &[u8])> = bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| l.iter().any(|b| !b.is_ascii_whitespace()))
        .collect();
    let mut journal = Journal::default();
    for (k, (index, line)) in lines.iter().enumerate() {
        match parse_line(line) {
            Ok(line) => add_line(&mut journal, line),
            Err(_) if k + 1 == lines.len() => break,
            Err(e) => return Err((index + 1, e)),
        }
    }
    Ok(journal)
}

/// One journal line. Records, nearly every line, are written tag first
/// (`{"kind":"request",...`) and parsed straight into their struct (the
/// tag is an unknown field there, ignored): the tagged enum would buffer
/// each line into serde's generic content first, several times slower on
/// the ITL arrays. Anything else goes through the enum.
pub fn parse_line(bytes: &[u8]) -> Result<JournalLine, serde_json::Error> {
    if bytes.starts_with(br#"{"kind":"request""#) {
        return serde_json::from_slice(bytes).map(JournalLine::Request);
    }
    if bytes.starts_with(br#"{"kind":"task""#) {
        return serde_json::from_slice(bytes).map(JournalLine::Task);
    }
    serde_json::from_slice::<JournalLine>(bytes)
}

/// The journal's timestamps are the time leaf's; kept at this path for callers.
pub use crate::time::rfc3339_utc;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::record::{ErrorClass, RequestRecord};

    #[test]
    fn reuse_potential_feeds_calls_in_send_order_and_counts_the_window() {
        use crate::workload::{CallSpec, Message, Role, Segment, Task, TaskSpec};
        let task = |i: u64| Task {
            index: i,
            spec: TaskSpec::Single(CallSpec {
                messages: vec![
                    Message {
                        role: Role::System,
                        segments: vec![Segment::Prefix {
                            group: 0,
                            tokens: 100,
                        }],
                    },
                    Message {
                        role: Role::User,
                        segments: vec![Segment::Unique { key: i, tokens: 10 }],
                    },
                ],
                input_tokens: 110,
                output_tokens: 4,
                tools: None,
                answer_in_words: false,
            }),
            class: None,
        };
        // Sent late by `lag`: the order is by send, not by schedule.
        let call = |task: u64, scheduled_ms: f64, lag: f64| RequestRecord {
            sent_ms: scheduled_ms + lag,
            schedule_lag_ms: lag,
            ..RequestRecord::succeeded(task, scheduled_ms, 5.0, vec![1.0])
        };
        // In completion order; sent: task 2 (warmup), 0, 1 (failed before
        // any token: the server never prefilled it), 3.
        let records = [
            call(3, 1030.0, 0.0),
            RequestRecord::failed(1, 1020.0, 1021.0, ErrorClass::Connect),
            // Scheduled after task 3, sent before it.
            call(0, 1025.0, 1.0),
            call(2, 500.0, 0.0),
        ];
        let timings: Vec<CallTiming> = records.iter().map(CallTiming::of).collect();
        let tally = reuse_potential(&timings, [1000.0, 2000.0], &task);
        // The warmup call filled the cache; the two measured calls hit its
        // prefix; the failed one neither counts nor fills.
        assert_eq!(tally.calls, 2);
        assert_eq!(tally.prompt_tokens, 220);
        assert_eq!(tally.potential_hit_tokens, 200);
        // The warmup call's first token came at 505 ms, long before: timely.
        assert_eq!(tally.timely_hit_tokens, Some(200));
    }

    #[test]
    fn parse_line_reads_records_as_the_tagged_enum_does() {
        let mut request = record(1.0, 0.5, 9.0);
        request.itl_ms = vec![1.5, 2.25, 3.0];
        request.error = Some(ErrorClass::ContextLength);
        let task = crate::exec::record::TaskRecord {
            task: 3,
            scheduled_ms: 1.0,
            completed_ms: 20.0,
            e2e_ms: None,
            calls: 4,
            failed_calls: 1,
            context_rejected_calls: 1,
            class: Some("chat".into()),
        };
        for line in [JournalLine::Request(request), JournalLine::Task(task)] {
            let text = serde_json::to_vec(&line).unwrap();
            assert_eq!(parse_line(&text).unwrap(), line);
            assert_eq!(serde_json::from_slice::<JournalLine>(&text).unwrap(), line);
        }
        assert!(parse_line(br#"{"kind":"request","task":1"#).is_err());
        assert!(parse_line(br#"{"kind":"nonsense"}"#).is_err());
    }

    fn record(scheduled_ms: f64, lag: f64, completed_ms: f64) -> RequestRecord {
        RequestRecord {
            sent_ms: scheduled_ms + lag,
            schedule_lag_ms: lag,
            completed_ms,
            e2e_ms: Some(completed_ms - scheduled_ms),
            ..RequestRecord::succeeded(0, scheduled_ms, 1.0, vec![])
        }
    }

    fn plan(window_end: WindowEnd, arrivals_ms: Option<Vec<f64>>) -> FooterPlan {
        FooterPlan {
            measure_from_ms: 100.0,
            window_end,
            arrivals_ms,
            inflight_samples: vec![(0.0, 1)],
            interrupted: false,
            finished_at: "x".into(),
            connections_opened: None,
            stopped_early: None,
            decided: None,
        }
    }

    #[test]
    fn footer_of_an_open_run() {
        let journal = Journal {
            requests: vec![
                record(50.0, 30.0, 60.0),
                record(150.0, 0.5, 200.0),
                record(250.0, 1.0, 400.0),
            ],
            ..Journal::default()
        };
        let footer = build_footer(
            &journal,
            plan(
                WindowEnd::At(300.0),
                Some(vec![50.0, 100.0, 150.0, 250.0, 300.0]),
            ),
        );
        assert_eq!(footer.measured_window_ms, [100.0, 300.0]);
        assert_eq!(
            footer.offered,
            Some(3),
            "100, 150 and 250 are in [100, 300)"
        );
        assert!(!footer.generator_lagging, "the 30 ms lag was during warmup");
        assert_eq!(footer.inflight_samples, vec![(0.0, 1)]);
    }

    #[test]
    fn lag_above_the_limit_flags_the_generator() {
        let mut requests: Vec<_> = (0..99)
            .map(|i| record(100.0 + f64::from(i), 0.2, 500.0))
            .collect();
        requests.push(record(250.0, GENERATOR_LAG_P99_LIMIT_MS + 5.0, 500.0));
        requests.push(record(251.0, GENERATOR_LAG_P99_LIMIT_MS + 5.0, 500.0));
        let journal = Journal {
            requests,
            ..Journal::default()
        };
        assert!(
            build_footer(&journal, plan(WindowEnd::At(1000.0), Some(vec![]))).generator_lagging
        );
        assert!(
            !build_footer(&journal, plan(WindowEnd::At(1000.0), None)).generator_lagging,
            "closed loop"
        );
    }

    #[test]
    fn request_count_window_ends_at_last_measured_completion() {
        let mut failed = record(120.0, 0.0, 900.0);
        failed.error = Some(ErrorClass::Timeout);
        let journal = Journal {
            requests: vec![record(10.0, 0.0, 1500.0), record(110.0, 0.0, 700.0), failed],
            ..Journal::default()
        };
        let footer = build_footer(
            &journal,
            plan(
                WindowEnd::LastMeasuredCompletion,
                Some(vec![10.0, 110.0, 120.0]),
            ),
        );
        assert_eq!(
            footer.measured_window_ms,
            [100.0, 900.0],
            "the warmup call ending at 1500 is not measured"
        );
        assert_eq!(footer.offered, Some(2));
        assert_eq!(footer.offered, Some(2));
    }

    #[test]
    fn window_never_ends_before_it_starts() {
        let footer = build_footer(&Journal::default(), plan(WindowEnd::At(40.0), None));
        assert_eq!(footer.measured_window_ms, [100.0, 100.0]);
        assert_eq!(footer.offered, None);
    }

    #[test]
    fn parse_tolerates_only_a_truncated_last_line() {
        let request = serde_json::to_string(&JournalLine::Request(record(1.0, 0.0, 2.0))).unwrap();
        let good = format!("{request}\n{request}\n");
        assert_eq!(parse_journal(good.as_bytes()).unwrap().requests.len(), 2);
        let truncated = format!("{request}\n{}", &request[..request.len() / 2]);
        assert_eq!(
            parse_journal(truncated.as_bytes()).unwrap().requests.len(),
            1
        );
        let corrupt_middle = format!("{request}\n{{oops\n{request}\n");
        assert_eq!(parse_journal(corrupt_middle.as_bytes()).unwrap_err().0, 2);
    }
}
