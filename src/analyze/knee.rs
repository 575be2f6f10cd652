//! Cr_closed (SPEC §3): the knee of output tokens/s vs concurrency.

use crate::config::KneeSpec;

use super::{CrClosed, RunSummary};

pub fn cr_closed(closed: &[RunSummary], spec: &KneeSpec) -> Option<CrClosed> {
    let _ = (closed, spec);
    todo!("analyze helper")
}
