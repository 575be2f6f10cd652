//! Live counters of a run and the optional progress bar that shows them.
//!
//! Calls only bump atomics (and push their TTFT into a small ring under a
//! mutex held for a few nanoseconds); a ticker reads them every 200 ms to
//! redraw the bar. Nothing on the hot path formats text or touches the
//! terminal, so the bar costs the same at 1 and at 2,000 requests/s.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::record::RequestRecord;

/// How many recent TTFTs the live p50 is computed over.
const RECENT_TTFT: usize = 256;
/// Window of the live output-token rate.
const RATE_WINDOW: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(200);

/// Counters shared by every call of a run.
#[derive(Debug, Default)]
pub struct Live {
    /// Calls sent and not yet finished.
    pub inflight: AtomicU32,
    /// Calls finished without error.
    pub ok: AtomicU64,
    /// Calls finished with an error (any class).
    pub errors: AtomicU64,
    /// Content chunks received so far (≈ output tokens, live).
    pub content_chunks: AtomicU64,
    /// Measured calls started (request-count stop progress).
    pub measured_started: AtomicU64,
    recent_ttft_ms: Mutex<VecDeque<f32>>,
}

impl Live {
    pub fn on_record(&self, record: &RequestRecord) {
        if record.is_ok() {
            self.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(ttft) = record.ttft_ms
            && let Ok(mut recent) = self.recent_ttft_ms.lock()
        {
            if recent.len() == RECENT_TTFT {
                recent.pop_front();
            }
            recent.push_back(ttft as f32);
        }
    }

    /// Median of the recent TTFTs, ms.
    pub fn recent_ttft_p50_ms(&self) -> Option<f32> {
        let mut values: Vec<f32> = self.recent_ttft_ms.lock().ok()?.iter().copied().collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f32::total_cmp);
        crate::stats::median_of_sorted(&values).copied()
    }
}

/// What the bar counts towards.
#[derive(Debug, Clone, Copy)]
pub enum ProgressTotal {
    /// Warmup + measured duration.
    Time(Duration),
    /// Measured calls to start (after warmup).
    Requests(u64),
}

/// Start the ticker that redraws a bar until `done` fires.
pub fn spawn_progress(
    run_id: &str,
    total: ProgressTotal,
    live: std::sync::Arc<Live>,
    t0: Instant,
    done: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let length = match total {
        ProgressTotal::Time(d) => d.as_millis() as u64,
        ProgressTotal::Requests(n) => n,
    };
    let bar = ProgressBar::new(length.max(1));
    let style = ProgressStyle::with_template("{prefix} {wide_bar:.cyan/blue} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(run_id.to_string());
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut history: VecDeque<(Instant, u64)> = VecDeque::new();
        loop {
            tokio::select! {
                _ = done.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let now = Instant::now();
            let chunks = live.content_chunks.load(Ordering::Relaxed);
            history.push_back((now, chunks));
            while history.len() > 2 && now - history[0].0 > RATE_WINDOW {
                history.pop_front();
            }
            let rate = match history.front() {
                Some(&(then, before)) if now > then => {
                    (chunks - before) as f64 / (now - then).as_secs_f64()
                }
                _ => 0.0,
            };
            let elapsed = now - t0;
            let (position, head) = match total {
                ProgressTotal::Time(d) => (
                    elapsed.as_millis() as u64,
                    format!("{:.0}/{:.0} s", elapsed.as_secs_f64(), d.as_secs_f64()),
                ),
                ProgressTotal::Requests(n) => {
                    let started = live.measured_started.load(Ordering::Relaxed);
                    (
                        started,
                        format!("{started}/{n} req · {:.0} s", elapsed.as_secs_f64()),
                    )
                }
            };
            bar.set_position(position.min(length));
            let ttft = live
                .recent_ttft_p50_ms()
                .map_or_else(|| "–".to_string(), |t| format!("{t:.0} ms"));
            bar.set_message(format!(
                "{head} · in flight {} · ok {} · err {} · {rate:.0} tok/s · TTFT p50 {ttft}",
                live.inflight.load(Ordering::Relaxed),
                live.ok.load(Ordering::Relaxed),
                live.errors.load(Ordering::Relaxed),
            ));
        }
        bar.finish_and_clear();
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::record::ErrorClass;

    fn record(ttft: Option<f64>, error: Option<ErrorClass>) -> RequestRecord {
        RequestRecord {
            ttft_ms: ttft,
            error,
            ..RequestRecord::succeeded(0, 0.0, 1.0, vec![])
        }
    }

    #[test]
    fn counts_and_recent_median() {
        let live = Live::default();
        assert_eq!(live.recent_ttft_p50_ms(), None);
        for t in [30.0, 10.0, 20.0] {
            live.on_record(&record(Some(t), None));
        }
        live.on_record(&record(None, Some(ErrorClass::Connect)));
        assert_eq!(live.ok.load(Ordering::Relaxed), 3);
        assert_eq!(live.errors.load(Ordering::Relaxed), 1);
        assert_eq!(live.recent_ttft_p50_ms(), Some(20.0));
    }

    #[test]
    fn recent_window_forgets_old_values() {
        let live = Live::default();
        for _ in 0..RECENT_TTFT {
            live.on_record(&record(Some(1000.0), None));
        }
        for _ in 0..RECENT_TTFT / 2 + 1 {
            live.on_record(&record(Some(5.0), None));
        }
        assert_eq!(live.recent_ttft_p50_ms(), Some(5.0));
    }
}
