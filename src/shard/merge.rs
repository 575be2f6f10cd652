//! Merging shards: N shard journals of one run into the journal one process
//! would have written, and N shard results folders into one.
//!
//! The merge is always of the exact journals, never of histograms: the
//! analysis needs every call (its scheduled instant decides whether it is
//! measured, goodput is judged call by call, a task's E2E spans its calls).
//! It streams: the shards' records are already in completion order, so a
//! k-way merge on `completed_ms` needs one line per shard in memory,
//! whatever the size of the journals.
//!
//! Shards share t0 (they start at the agreed instant), so their times add up
//! without shifting. What cannot be merged is refused: journals of
//! different runs, seeds or content nonces, or two journals of one shard.
//! A shard without a footer (it died mid-run) or a missing shard leaves the
//! merged journal without a footer: the run reads as incomplete, never as a
//! lighter load that passed.

use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::exec::journal::parse_line;
use crate::exec::record::{JournalLine, RunFooter, RunHeader, ShardClock};

/// Why shards cannot be merged.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum MergeError {
    #[error("{}: {source}", path.display())]
    #[diagnostic(code(capcard::merge::io))]
    Io { path: PathBuf, source: io::Error },
    #[error("{} line {line} is not a journal line: {source}", path.display())]
    #[diagnostic(code(capcard::merge::parse))]
    Parse {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{0}")]
    #[diagnostic(
        code(capcard::merge::mismatch),
        help(
            "merge the folders of one sharded run: the same experiment file, `--shard 0/N` to \
             `--shard N-1/N`, and the same --start-at"
        )
    )]
    Mismatch(String),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Folder(#[from] crate::folder::FolderError),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> MergeError + '_ {
    move |source| MergeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What merging one run gave.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedRun {
    pub run_id: String,
    /// Call and task lines written.
    pub lines: u64,
    /// Every shard's journal was there and ended: the merged journal has a
    /// footer.
    pub complete: bool,
    /// The shards' start clocks, in shard order.
    pub shards: Vec<ShardClock>,
}

/// The merged header: the shards' common header, without a shard of its
/// own, listing every shard's clock. Refuses headers of different runs.
pub fn merge_headers(headers: &[RunHeader], expected_shards: u32) -> Result<RunHeader, String> {
    // The lowest shard's header is the base (shard 0 scrapes telemetry in
    // a timetable, so its header says how).
    let first = headers
        .iter()
        .min_by_key(|h| h.shard.as_ref().map_or(0, |s| s.index))
        .ok_or("no journal to merge")?;
    let mut clocks: Vec<ShardClock> = Vec::with_capacity(headers.len());
    for header in headers {
        let clock = header.shard.clone().ok_or_else(|| {
            format!(
                "run {}: a journal written by one process (no `shard` in its header) is not a \
                 shard's",
                header.run.id
            )
        })?;
        if header.run != first.run {
            return Err(format!(
                "run {}: the shards' plans differ (seed {} against {}, or load, stop or warmup)",
                first.run.id, header.run.seed, first.run.seed
            ));
        }
        if header.content_nonce != first.content_nonce {
            return Err(format!(
                "run {}: shard {} drew prompts with content nonce {}, shard {} with {}: not one \
                 request stream (give every shard the same --nonce)",
                first.run.id,
                clock.index,
                header.content_nonce,
                first.shard.as_ref().map_or(0, |s| s.index),
                first.content_nonce
            ));
        }
        if clock.count != expected_shards {
            return Err(format!(
                "run {}: shard {} is one of {} shards, but {} folders were given",
                first.run.id, clock.index, clock.count, expected_shards
            ));
        }
        if clocks.iter().any(|c| c.index == clock.index) {
            return Err(format!(
                "run {}: two journals of shard {}/{}",
                first.run.id, clock.index, clock.count
            ));
        }
        clocks.push(clock);
    }
    clocks.sort_by_key(|c| c.index);
    let mut merged = first.clone();
    merged.shard = None;
    merged.shards = clocks;
    merged.started_at = headers
        .iter()
        .map(|h| h.started_at.as_str())
        .min()
        .unwrap_or(&first.started_at)
        .to_string();
    Ok(merged)
}

/// The merged footer: the shards' measured window (the same planned one,
/// or the latest end of an open-ended window), offered arrivals and
/// connections summed, calls in flight summed over shards at each sample
/// instant, lagging or interrupted if any shard was.
pub fn merge_footers(footers: &[RunFooter]) -> Option<RunFooter> {
    let first = footers.first()?;
    let from = footers
        .iter()
        .map(|f| f.measured_window_ms[0])
        .fold(f64::INFINITY, f64::min);
    let to = footers
        .iter()
        .map(|f| f.measured_window_ms[1])
        .fold(f64::NEG_INFINITY, f64::max);
    let offered = footers
        .iter()
        .any(|f| f.offered.is_some())
        .then(|| footers.iter().filter_map(|f| f.offered).sum());
    let connections_opened = footers
        .iter()
        .map(|f| f.connections_opened)
        .sum::<Option<u64>>();
    Some(RunFooter {
        measured_window_ms: [from, to.max(from)],
        offered,
        inflight_samples: sum_inflight(footers),
        generator_lagging: footers.iter().any(|f| f.generator_lagging),
        interrupted: footers.iter().any(|f| f.interrupted),
        finished_at: footers
            .iter()
            .map(|f| f.finished_at.as_str())
            .max()
            .unwrap_or(&first.finished_at)
            .to_string(),
        connections_opened,
        stopped_early: None,
        // Shards' runs run their course: a watch sees one shard's part.
        decided: None,
        // Each shard fed its own calls to its own ideal cache: their sum
        // is not the run's potential, and the merge has no request source.
        reuse_potential: None,
    })
}

/// Calls in flight across shards: at each instant of the shard with the
/// most samples, the sum of every shard's latest sample at or before it.
fn sum_inflight(footers: &[RunFooter]) -> Vec<(f64, u32)> {
    let Some(base) = footers.iter().max_by_key(|f| f.inflight_samples.len()) else {
        return Vec::new();
    };
    let mut cursors = vec![0usize; footers.len()];
    base.inflight_samples
        .iter()
        .map(|&(at, _)| {
            let mut sum = 0u32;
            for (footer, cursor) in footers.iter().zip(cursors.iter_mut()) {
                let samples = &footer.inflight_samples;
                while *cursor + 1 < samples.len() && samples[*cursor + 1].0 <= at {
                    *cursor += 1;
                }
                if let Some(&(t, n)) = samples.get(*cursor)
                    && t <= at
                {
                    sum += n;
                }
            }
            (at, sum)
        })
        .collect()
}

/// One shard journal read line by line.
struct LineReader {
    path: PathBuf,
    reader: BufReader<File>,
    buf: Vec<u8>,
    line: usize,
}

impl LineReader {
    fn open(path: &Path) -> Result<Self, MergeError> {
        let file = File::open(path).map_err(io_err(path))?;
        Ok(LineReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(256 * 1024, file),
            buf: Vec::new(),
            line: 0,
        })
    }

    /// The next line; `None` at the end. A last line that does not parse
    /// (the shard died while writing it) ends the journal, as when one
    /// journal is read.
    fn next_line(&mut self) -> Result<Option<JournalLine>, MergeError> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(io_err(&self.path))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let bytes = self.buf.trim_ascii();
            if bytes.is_empty() {
                continue;
            }
            return match parse_line(bytes) {
                Ok(line) => Ok(Some(line)),
                Err(source) => {
                    if self.buf.last() != Some(&b'\n') && self.at_end()? {
                        Ok(None)
                    } else {
                        Err(MergeError::Parse {
                            path: self.path.clone(),
                            line: self.line,
                            source,
                        })
                    }
                }
            };
        }
    }

    fn at_end(&mut self) -> Result<bool, MergeError> {
        Ok(self
            .reader
            .fill_buf()
            .map_err(io_err(&self.path))?
            .is_empty())
    }
}

/// A record line waiting in the k-way merge, ordered by completion.
struct Pending {
    completed_ms: f64,
    shard: usize,
    line: JournalLine,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    // Reversed: BinaryHeap is a max-heap and the earliest must come first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .completed_ms
            .total_cmp(&self.completed_ms)
            .then(other.shard.cmp(&self.shard))
    }
}

fn completed_ms(line: &JournalLine) -> Option<f64> {
    match line {
        JournalLine::Request(r) => Some(r.completed_ms),
        JournalLine::Task(t) => Some(t.completed_ms),
        JournalLine::Run(_) | JournalLine::End(_) => None,
    }
}

/// Merge the shard journals `parts` of one run into `out` (created or
/// replaced). `expected_shards` is how many shards the run had: fewer
/// parts merge the ones there are, without a footer.
pub fn merge_journal_files(
    parts: &[PathBuf],
    expected_shards: u32,
    out: &Path,
) -> Result<MergedRun, MergeError> {
    let mut readers = parts
        .iter()
        .map(|p| LineReader::open(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut headers = Vec::with_capacity(readers.len());
    for reader in &mut readers {
        match reader.next_line()? {
            Some(JournalLine::Run(header)) => headers.push(header),
            _ => {
                return Err(MergeError::Mismatch(format!(
                    "{} does not start with a run header",
                    reader.path.display()
                )));
            }
        }
    }
    let header = merge_headers(&headers, expected_shards).map_err(MergeError::Mismatch)?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let file = File::create(out).map_err(io_err(out))?;
    let mut writer = BufWriter::with_capacity(256 * 1024, file);
    let write = |writer: &mut BufWriter<File>, line: &JournalLine| -> Result<(), MergeError> {
        serde_json::to_writer(&mut *writer, line)
            .map_err(io::Error::other)
            .and_then(|()| writer.write_all(b"\n"))
            .map_err(io_err(out))
    };
    let shards = header.shards.clone();
    let run_id = header.run.id.clone();
    write(&mut writer, &JournalLine::Run(header))?;

    let mut footers: BTreeMap<usize, RunFooter> = BTreeMap::new();
    let mut heap = BinaryHeap::new();
    // The next record of shard `i`, or its footer at the end.
    let pull = |i: usize,
                readers: &mut [LineReader],
                heap: &mut BinaryHeap<Pending>,
                footers: &mut BTreeMap<usize, RunFooter>|
     -> Result<(), MergeError> {
        match readers[i].next_line()? {
            None => {}
            Some(JournalLine::End(footer)) => {
                footers.insert(i, footer);
            }
            Some(JournalLine::Run(_)) => {
                return Err(MergeError::Mismatch(format!(
                    "{} line {}: a second run header",
                    readers[i].path.display(),
                    readers[i].line
                )));
            }
            Some(line) => {
                let completed_ms = completed_ms(&line).unwrap_or(f64::INFINITY);
                heap.push(Pending {
                    completed_ms,
                    shard: i,
                    line,
                });
            }
        }
        Ok(())
    };
    for i in 0..readers.len() {
        pull(i, &mut readers, &mut heap, &mut footers)?;
    }
    let mut lines = 0u64;
    while let Some(next) = heap.pop() {
        write(&mut writer, &next.line)?;
        lines += 1;
        pull(next.shard, &mut readers, &mut heap, &mut footers)?;
    }
    let complete = footers.len() == readers.len() && readers.len() == expected_shards as usize;
    if complete {
        let footers: Vec<RunFooter> = footers.into_values().collect();
        if let Some(footer) = merge_footers(&footers) {
            write(&mut writer, &JournalLine::End(footer))?;
        }
    }
    writer.flush().map_err(io_err(out))?;
    Ok(MergedRun {
        run_id,
        lines,
        complete,
        shards,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::record::{ErrorClass, RequestRecord};
    use crate::plan::{Load, RunPlan};
    use std::time::Duration;

    fn plan() -> RunPlan {
        let load = Load::Rate {
            rate: crate::config::RatePerS(4.0),
            arrival: crate::config::Arrival::Poisson,
        };
        let stop = crate::config::StopRule::Duration(Duration::from_secs(10));
        RunPlan::new("t", "w", load, Duration::from_secs(1), stop, 7)
    }

    fn clock(index: u32, count: u32) -> ShardClock {
        ShardClock {
            index,
            count,
            agreed_by: "timetable from --start-at".into(),
            start_at: "2026-12-02T00:00:00.000000Z".into(),
            clock_offset_ms: None,
            clock_uncertainty_ms: None,
            start_lag_ms: 0.01,
        }
    }

    fn header(index: u32, count: u32) -> RunHeader {
        RunHeader {
            run: plan(),
            started_at: format!("2026-12-02T00:00:0{index}.000000Z"),
            model: "m".into(),
            measure_from_ms: 1000.0,
            content_nonce: 5,
            prompt_sizing: None,
            prefix_cache_reset: None,
            telemetry_off: None,
            clock: None,
            context_window: None,
            shard: Some(clock(index, count)),
            shards: Vec::new(),
            dialect: None,
        }
    }

    fn record(task: u64, completed_ms: f64) -> RequestRecord {
        RequestRecord {
            prompt_tokens_requested: 10,
            prompt_tokens_reported: Some(10),
            output_tokens_requested: 4,
            output_tokens: 4,
            error: (task == 3).then_some(ErrorClass::Timeout),
            http_status: None,
            ..RequestRecord::succeeded(task, completed_ms - 50.0, 10.0, vec![20.0; 2])
        }
    }

    fn footer(offered: u64, samples: Vec<(f64, u32)>, to: f64) -> RunFooter {
        RunFooter {
            measured_window_ms: [1000.0, to],
            offered: Some(offered),
            inflight_samples: samples,
            generator_lagging: false,
            interrupted: false,
            finished_at: format!("2026-12-02T00:00:{:02}.000000Z", to as u64 / 1000),
            connections_opened: Some(offered),
            stopped_early: None,
            decided: None,
            reuse_potential: None,
        }
    }

    fn write_journal(path: &Path, lines: &[JournalLine]) {
        let mut out = Vec::new();
        for line in lines {
            serde_json::to_writer(&mut out, line).unwrap();
            out.push(b'\n');
        }
        std::fs::write(path, out).unwrap();
    }

    #[test]
    fn footers_add_up() {
        let a = footer(10, vec![(100.0, 2), (200.0, 3), (300.0, 1)], 11_000.0);
        let mut b = footer(12, vec![(150.0, 5), (250.0, 4)], 11_000.0);
        b.generator_lagging = true;
        b.connections_opened = None;
        let merged = merge_footers(&[a, b]).unwrap();
        assert_eq!(merged.offered, Some(22));
        assert_eq!(merged.measured_window_ms, [1000.0, 11_000.0]);
        // At each instant of the longer series: 2+0, 3+5, 1+4.
        assert_eq!(
            merged.inflight_samples,
            vec![(100.0, 2), (200.0, 8), (300.0, 5)]
        );
        assert!(merged.generator_lagging, "one lagging shard flags the run");
        assert_eq!(merged.connections_opened, None, "unknown for one: unknown");
    }

    #[test]
    fn headers_of_other_runs_are_refused() {
        let ok = merge_headers(&[header(1, 2), header(0, 2)], 2).unwrap();
        assert_eq!(ok.shard, None);
        assert_eq!(
            ok.shards.iter().map(|c| c.index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(ok.started_at, "2026-12-02T00:00:00.000000Z");

        let mut other_seed = header(1, 2);
        other_seed.run.seed = 8;
        assert!(
            merge_headers(&[header(0, 2), other_seed], 2)
                .unwrap_err()
                .contains("plans differ")
        );
        let mut other_nonce = header(1, 2);
        other_nonce.content_nonce = 6;
        assert!(
            merge_headers(&[header(0, 2), other_nonce], 2)
                .unwrap_err()
                .contains("nonce")
        );
        assert!(
            merge_headers(&[header(0, 2), header(0, 2)], 2)
                .unwrap_err()
                .contains("two journals of shard 0/2")
        );
        assert!(
            merge_headers(&[header(0, 3), header(1, 3)], 2)
                .unwrap_err()
                .contains("one of 3 shards")
        );
        let mut single = header(0, 1);
        single.shard = None;
        assert!(
            merge_headers(&[single], 1)
                .unwrap_err()
                .contains("one process")
        );
    }

    #[test]
    fn journals_merge_in_completion_order_and_keep_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        write_journal(
            &a,
            &[
                JournalLine::Run(header(0, 2)),
                JournalLine::Request(record(0, 100.0)),
                JournalLine::Request(record(2, 300.0)),
                JournalLine::Request(record(4, 900.0)),
                JournalLine::End(footer(3, vec![(100.0, 1)], 11_000.0)),
            ],
        );
        write_journal(
            &b,
            &[
                JournalLine::Run(header(1, 2)),
                JournalLine::Request(record(1, 200.0)),
                JournalLine::Request(record(3, 250.0)),
                JournalLine::End(footer(2, vec![(100.0, 2)], 11_000.0)),
            ],
        );
        let out = dir.path().join("runs/merged.jsonl");
        let merged = merge_journal_files(&[a.clone(), b.clone()], 2, &out).unwrap();
        assert!(merged.complete);
        assert_eq!(merged.lines, 5);
        let journal = crate::exec::read_journal(&out).unwrap();
        let tasks: Vec<u64> = journal.requests.iter().map(|r| r.task).collect();
        assert_eq!(tasks, vec![0, 1, 3, 2, 4]);
        assert_eq!(journal.requests[2].error, Some(ErrorClass::Timeout));
        let footer = journal.footer.unwrap();
        assert_eq!(footer.offered, Some(5));
        assert_eq!(footer.inflight_samples, vec![(100.0, 3)]);
        assert_eq!(journal.header.unwrap().shards.len(), 2);

        // A shard that died mid-run (no footer, a torn last line): every
        // line it wrote is kept, and the merged run has no footer.
        let torn = dir.path().join("torn.jsonl");
        let mut bytes = std::fs::read(&b).unwrap();
        let cut = bytes.len() - 40;
        bytes.truncate(cut);
        std::fs::write(&torn, &bytes).unwrap();
        let merged = merge_journal_files(&[a.clone(), torn], 2, &out).unwrap();
        assert!(!merged.complete);
        assert_eq!(merged.lines, 5);
        assert!(crate::exec::read_journal(&out).unwrap().footer.is_none());

        // A missing shard: what there is, without a footer.
        let merged = merge_journal_files(&[a], 2, &out).unwrap();
        assert!(!merged.complete);
        assert_eq!(merged.lines, 3);
    }
}
