//! Sub-millisecond wake-ups for scheduled sends.
//!
//! tokio's timer wheel has a 1 ms resolution and rounds deadlines up, so a
//! call that sleeps until its scheduled instant is sent 0.5–1 ms late on
//! average: small next to a TTFT, but it is the generator's own error and it
//! shows in every open-loop lag percentile. One thread per run instead keeps
//! the pending deadlines in a heap and fires each one with the operating
//! system's timed wait (tens of microseconds late), waking the waiting task
//! through a oneshot channel. The thread only sleeps and signals, so it keeps
//! up at any request rate the rest of the generator can sustain.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant as StdInstant;

use tokio::sync::oneshot;
use tokio::time::Instant;

struct Pending {
    at: StdInstant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed: the heap's top is the earliest deadline.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A handle to the timer thread; the thread ends when the handle is dropped
/// and no deadline is pending.
#[derive(Debug)]
pub(crate) struct PreciseTimer {
    tx: Option<mpsc::Sender<(StdInstant, oneshot::Sender<()>)>>,
}

impl PreciseTimer {
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("capcard-timer".into())
            .spawn(move || run(rx));
        // Without the thread (cannot happen short of resource exhaustion),
        // `sleep_until` falls back to tokio's timer.
        PreciseTimer {
            tx: spawned.ok().map(|_| tx),
        }
    }

    /// Wait until `at` (returns at once if it has passed).
    pub async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        match &self.tx {
            Some(tx) if tx.send((at.into_std(), wake)).is_ok() => {
                if woken.await.is_err() {
                    // The thread is gone: fall back rather than send early.
                    tokio::time::sleep_until(at).await;
                }
            }
            _ => tokio::time::sleep_until(at).await,
        }
    }
}

fn run(rx: mpsc::Receiver<(StdInstant, oneshot::Sender<()>)>) {
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    let mut connected = true;
    loop {
        let now = StdInstant::now();
        while heap.peek().is_some_and(|p: &Pending| p.at <= now) {
            if let Some(due) = heap.pop() {
                // The waiter may have been cancelled; nothing to do then.
                let _ = due.wake.send(());
            }
        }
        let next = heap.peek().map(|p| p.at);
        let received = match (next, connected) {
            (Some(at), true) => rx.recv_timeout(at.saturating_duration_since(now)),
            (None, true) => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            (Some(at), false) => {
                std::thread::sleep(at.saturating_duration_since(now));
                continue;
            }
            (None, false) => return,
        };
        match received {
            Ok((at, wake)) => {
                seq += 1;
                heap.push(Pending { at, seq, wake });
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => connected = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_in_deadline_order_and_never_early() {
        let timer = std::sync::Arc::new(PreciseTimer::start());
        let start = Instant::now();
        let mut handles = Vec::new();
        for offset_ms in [30u64, 10, 20, 0] {
            let timer = std::sync::Arc::clone(&timer);
            handles.push(tokio::spawn(async move {
                let at = start + Duration::from_millis(offset_ms);
                timer.sleep_until(at).await;
                (offset_ms, Instant::now() >= at)
            }));
        }
        for handle in handles {
            let (offset_ms, on_time_or_late) = handle.await.unwrap();
            assert!(on_time_or_late, "woke before its {offset_ms} ms deadline");
        }
    }

    #[test]
    fn heap_top_is_the_earliest_deadline() {
        let now = StdInstant::now();
        let mut heap = BinaryHeap::new();
        for (k, ms) in [5u64, 1, 3].into_iter().enumerate() {
            let (wake, _) = oneshot::channel();
            heap.push(Pending {
                at: now + std::time::Duration::from_millis(ms),
                seq: k as u64,
                wake,
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|p| p.seq)).collect();
        assert_eq!(order, vec![1, 2, 0]);
    }
}
