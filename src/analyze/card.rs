//! Assembling one [`Card`](super::Card) from run summaries.
