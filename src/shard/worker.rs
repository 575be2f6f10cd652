//! The shard's side of the coordinator protocol ([`super::coordinator`]):
//! measuring the clock offset, joining, long-polling for the next run,
//! watching for a cancel during it, and uploading its journal.

use std::path::Path;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::coordinator::{Assignment, ClockReading, Join, RunState, Welcome, unix_ms};

/// Clock readings taken to measure the offset; the one with the shortest
/// round trip is kept (its midpoint is the least uncertain).
pub const CLOCK_SAMPLES: usize = 16;
/// A journal of a million calls is about 600 MB: minutes on a slow link.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);
const CONFLICT: u16 = 409;
const NO_CONTENT: u16 = 204;

/// A shard's view of its coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorClient {
    base: String,
    http: crate::exec::HttpClient,
}

/// The offset between this host's clock and the coordinator's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockOffset {
    /// Coordinator clock minus this host's, ms.
    pub offset_ms: f64,
    /// Half the round trip of the sample it came from, ms.
    pub uncertainty_ms: f64,
}

impl ClockOffset {
    /// The coordinator's instant `coordinator_unix_ms` on this host's clock.
    pub fn to_local(&self, coordinator_unix_ms: f64) -> SystemTime {
        let local_ms = coordinator_unix_ms - self.offset_ms;
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64((local_ms / 1e3).max(0.0))
    }
}

/// The offset from samples of (sent, coordinator reading, received), all in
/// Unix ms (pure: NTP's midpoint rule on the sample of shortest round trip).
pub fn offset_from_samples(samples: &[(f64, f64, f64)]) -> Option<ClockOffset> {
    samples
        .iter()
        .filter(|(sent, _, received)| received >= sent)
        .min_by(|a, b| (a.2 - a.0).total_cmp(&(b.2 - b.0)))
        .map(|&(sent, remote, received)| ClockOffset {
            offset_ms: remote - (sent + received) / 2.0,
            uncertainty_ms: (received - sent) / 2.0,
        })
}

/// Why the coordinator could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("the coordinator at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the coordinator refused this shard: {0}")]
    Refused(String),
    #[error("the coordinator at {url} answered what is not its protocol: {reason}")]
    Protocol { url: String, reason: String },
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl CoordinatorClient {
    pub fn new(url: &str) -> Result<Self, WorkerError> {
        let base = url.trim_end_matches('/').to_string();
        if let Err(reason) = crate::exec::Url::parse(&base) {
            return Err(WorkerError::Unreachable { url: base, reason });
        }
        let http = crate::exec::HttpClient::new(Duration::from_secs(5));
        Ok(CoordinatorClient { base, http })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> WorkerError {
        WorkerError::Unreachable {
            url: self.base.clone(),
            reason: e.to_string(),
        }
    }

    fn protocol(&self, e: impl std::fmt::Display) -> WorkerError {
        WorkerError::Protocol {
            url: self.base.clone(),
            reason: e.to_string(),
        }
    }

    /// Measure the clock offset ([`CLOCK_SAMPLES`] readings).
    pub async fn clock_offset(&self) -> Result<ClockOffset, WorkerError> {
        let mut samples = Vec::with_capacity(CLOCK_SAMPLES);
        for _ in 0..CLOCK_SAMPLES {
            let sent = unix_ms(SystemTime::now());
            let reading: ClockReading = self
                .http
                .get(&format!("{}/v1/clock", self.base))
                .await
                .map_err(|e| self.unreachable(e))?
                .json()
                .map_err(|e| self.protocol(e))?;
            let received = unix_ms(SystemTime::now());
            samples.push((sent, reading.unix_ms, received));
        }
        offset_from_samples(&samples).ok_or_else(|| self.protocol("no usable clock reading"))
    }

    /// Join; retried for `patience` while the coordinator is not up yet
    /// (pods start in any order).
    pub async fn join(&self, join: &Join, patience: Duration) -> Result<Welcome, WorkerError> {
        let until = tokio::time::Instant::now() + patience;
        loop {
            let body = serde_json::to_value(join).map_err(|e| self.protocol(e))?;
            match self
                .http
                .with_timeout(Duration::from_secs(10))
                .post_json(&format!("{}/v1/join", self.base), &body)
                .await
            {
                Ok(reply) if reply.is_success() => {
                    return reply.json().map_err(|e| self.protocol(e));
                }
                Ok(reply) if reply.status == CONFLICT => {
                    return Err(WorkerError::Refused(reply.text()));
                }
                Ok(reply) => return Err(self.protocol(format!("HTTP {}", reply.status))),
                Err(e) if tokio::time::Instant::now() < until => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(self.unreachable(e)),
            }
        }
    }

    /// The next assignment after run `after`, waiting for it. A coordinator
    /// gone for longer than `patience` is an error.
    pub async fn next(
        &self,
        shard: u32,
        after: u64,
        patience: Duration,
        cancel: &CancellationToken,
    ) -> Result<Option<Assignment>, WorkerError> {
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            let http = self
                .http
                .with_timeout(super::coordinator::LONG_POLL + Duration::from_secs(10));
            let url = format!("{}/v1/next?shard={shard}&after={after}", self.base);
            let request = http.get(&url);
            let response = tokio::select! {
                _ = cancel.cancelled() => return Ok(None),
                r = request => r,
            };
            match response {
                Ok(r) if r.status == NO_CONTENT => failing_since = None,
                Ok(r) if r.is_success() => {
                    return r.json().map(Some).map_err(|e| self.protocol(e));
                }
                Ok(r) => return Err(self.protocol(format!("HTTP {}", r.status))),
                Err(e) => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() > patience {
                        return Err(self.unreachable(e));
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Poll run `seq`'s state every [`HEARTBEAT`](super::coordinator::HEARTBEAT)
    /// until `done`; cancels `run_cancel` when the coordinator cancels the
    /// run. An unreachable coordinator does not stop a run: what is
    /// measured is kept and uploaded afterwards.
    pub async fn watch(
        &self,
        shard: u32,
        seq: u64,
        run_cancel: CancellationToken,
        done: CancellationToken,
    ) {
        loop {
            tokio::select! {
                _ = done.cancelled() => return,
                _ = tokio::time::sleep(super::coordinator::HEARTBEAT) => {}
            }
            let state = self
                .http
                .get(&format!("{}/v1/state?shard={shard}&seq={seq}", self.base))
                .await;
            if let Ok(reply) = state
                && let Ok(state) = reply.json::<RunState>()
                && state.cancelled
            {
                run_cancel.cancel();
                return;
            }
        }
    }

    /// Upload the journal at `path` as shard `shard`'s part of run `seq`,
    /// retried a few times (a journal is the measurement: it is worth it).
    pub async fn upload(&self, shard: u32, seq: u64, path: &Path) -> Result<(), WorkerError> {
        let mut last_error = String::new();
        for attempt in 0..5u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
            }
            let body = tokio::fs::read(path)
                .await
                .map_err(|source| WorkerError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            match self
                .http
                .with_timeout(UPLOAD_TIMEOUT)
                .post(
                    &format!("{}/v1/journal?shard={shard}&seq={seq}", self.base),
                    "application/x-ndjson",
                    body,
                )
                .await
            {
                Ok(r) if r.is_success() => return Ok(()),
                Ok(r) if r.status == CONFLICT => return Err(WorkerError::Refused(r.text())),
                Ok(r) => last_error = format!("HTTP {}", r.status),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(self.unreachable(last_error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_comes_from_the_shortest_round_trip() {
        // The coordinator's clock is 250 ms ahead. A slow sample (40 ms
        // round trip, answered late) would say 265; the fast one says 250.
        let samples = [
            (1000.0, 1285.0, 1040.0),
            (2000.0, 2251.0, 2002.0),
            (3000.0, 3256.0, 3010.0),
        ];
        let offset = offset_from_samples(&samples).unwrap();
        assert!((offset.offset_ms - 250.0).abs() < 1e-9, "{offset:?}");
        assert!((offset.uncertainty_ms - 1.0).abs() < 1e-9);
        // The coordinator's instant 2251 is 2001 here.
        let local = offset.to_local(2251.0);
        assert!((unix_ms(local) - 2001.0).abs() < 1e-3);
        // A clock stepped backwards mid-sample gives no reading.
        assert_eq!(offset_from_samples(&[(10.0, 5.0, 9.0)]), None);
    }
}
