//! CrossP (SPEC §3): first sweep level where ΔT% > ΔX%.

use crate::config::CrossPSpec;

use super::{CrossP, RunSummary};

/// `closed` in increasing concurrency. `None` = not reached in the sweep.
pub fn crossp(closed: &[RunSummary], spec: &CrossPSpec) -> Option<CrossP> {
    let _ = (closed, spec);
    todo!("analyze helper")
}
