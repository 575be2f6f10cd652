//! SLO verdicts for one run: every clause, sample sufficiency, kept-up.

use serde::{Deserialize, Serialize};

/// Whether a run met an SLO, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SloVerdict {
    pub pass: bool,
}
