//! The Cr_open search (pure state machine): bracket, then bisect, per SLO,
//! sharing runs across SLOs. The runner asks [`Search::next_rate`], runs it,
//! and feeds the verdicts back with [`Search::record`].

/// Search state for all SLOs of one card.
#[derive(Debug, Clone)]
pub struct Search {}

impl Search {
    /// Next rate to run, or `None` when every SLO's bracket is resolved.
    pub fn next_rate(&self) -> Option<f64> {
        todo!("analyze helper")
    }
}
