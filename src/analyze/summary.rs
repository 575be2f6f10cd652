//! Journal → [`RunSummary`]: HDR histograms over the measured window.

use crate::config::Slo;
use crate::exec::record::Journal;

use super::RunSummary;

/// Summarise one run. `slos` are evaluated for open runs (verdicts, goodput).
pub fn summarize(journal: &Journal, slos: &[Slo]) -> RunSummary {
    let _ = (journal, slos);
    todo!("analyze helper")
}
