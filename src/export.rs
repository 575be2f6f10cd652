//! `capcard export`: reads a results folder and writes it in the formats of
//! [`crate::report::export`] (the I/O edge; the converters are pure).

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::exec;
use crate::exec::record::{JournalLine, RequestRecord};
use crate::folder::{self, FolderError, ResultsFolder};
use crate::report::export::{ExportFormat, RunLabel, csv, jsonl, llmd};

#[derive(Debug, Error, miette::Diagnostic)]
pub enum ExportError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Folder(#[from] FolderError),
    #[error("{}: {source}", path.display())]
    #[diagnostic(code(capcard::io))]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("journal {}: {message}", path.display())]
    #[diagnostic(code(capcard::journal))]
    Journal { path: PathBuf, message: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The folder `--out` defaults to: `DIR/export`.
pub fn default_out(dir: &Path) -> PathBuf {
    dir.join("export")
}

/// Export the results folder `dir` as `format` into the folder `out`
/// (created if need be; default [`default_out`]); returns the files written.
pub fn export_folder(
    dir: &Path,
    format: ExportFormat,
    out: Option<&Path>,
) -> Result<Vec<PathBuf>, ExportError> {
    let results = ResultsFolder::new(dir);
    let report = folder::load_report(&results)?;
    let out = out.map_or_else(|| default_out(dir), Path::to_path_buf);
    fs::create_dir_all(&out).map_err(io_err(&out))?;
    let mut written = Vec::new();
    match format {
        ExportFormat::Llmd => {
            for card in &report.cards {
                for run in card.closed.iter().chain(&card.open) {
                    let journal_path = results.journal(&run.run_id);
                    let ends = if journal_path.is_file() {
                        Some(
                            exec::read_journal_ends(&journal_path)
                                .map_err(|e| ExportError::Journal {
                                    path: journal_path.clone(),
                                    message: e.to_string(),
                                })?
                                .0,
                        )
                    } else {
                        None
                    };
                    let document = llmd::benchmark_report(&report, card, run, ends.as_ref());
                    let path = out.join(llmd::file_name(&run.run_id));
                    let mut text = serde_json::to_string_pretty(&document)
                        .map_err(|e| io_err(&path)(io::Error::other(e)))?;
                    text.push('\n');
                    fs::write(&path, text).map_err(io_err(&path))?;
                    written.push(path);
                }
            }
        }
        ExportFormat::Csv => {
            let path = out.join(csv::RUNS_FILE);
            write_file(&path, |w| csv::write_runs(&report, w))?;
            written.push(path);
            let path = out.join(csv::REQUESTS_FILE);
            write_file(&path, csv::write_requests_header)?;
            append_requests(&results, &path, |label, record, w| {
                csv::write_request(label, record, w)
            })?;
            written.push(path);
        }
        ExportFormat::Jsonl => {
            let path = out.join(jsonl::REQUESTS_FILE);
            write_file(&path, |_| Ok(()))?;
            append_requests(&results, &path, jsonl::write_request)?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Create `path` (truncating it) and write it with `f`.
fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<fs::File>) -> io::Result<()>,
) -> Result<(), ExportError> {
    let file = fs::File::create(path).map_err(io_err(path))?;
    let mut w = BufWriter::new(file);
    f(&mut w).map_err(io_err(path))?;
    w.flush().map_err(io_err(path))
}

/// Append every call of every journal in the folder to `path`, a journal
/// at a time and a record at a time: memory does not grow with the folder
/// (a million-call folder exports in a few MB). A journal cut short by a
/// crash gives the calls it holds.
fn append_requests(
    results: &ResultsFolder,
    path: &Path,
    mut write: impl FnMut(&RunLabel, &RequestRecord, &mut BufWriter<fs::File>) -> io::Result<()>,
) -> Result<(), ExportError> {
    let file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(io_err(path))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    for journal_path in results.journal_paths()? {
        let mut label: Option<RunLabel> = None;
        let mut failed: Option<io::Error> = None;
        exec::stream_journal(&journal_path, |line| {
            if failed.is_some() {
                return;
            }
            match line {
                JournalLine::Run(header) => label = Some(RunLabel::of(&header)),
                JournalLine::Request(record) => {
                    // Every journal starts with its header; one that does
                    // not is not a run of this folder's.
                    if let Some(label) = &label
                        && let Err(e) = write(label, &record, &mut w)
                    {
                        failed = Some(e);
                    }
                }
                JournalLine::Task(_) | JournalLine::End(_) => {}
            }
        })
        .map_err(|e| ExportError::Journal {
            path: journal_path.clone(),
            message: e.to_string(),
        })?;
        if let Some(e) = failed {
            return Err(io_err(path)(e));
        }
    }
    w.flush().map_err(io_err(path))
}
