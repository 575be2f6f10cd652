//! CSV: `runs.csv`, one row per run with every figure the card's tables
//! show, and `requests.csv`, one row per call, written as the journals are
//! streamed.
