//! The router of a small virtual cluster: which replica serves a request
//! (pure).
//!
//! Three policies ([`SimRouter`]):
//! - round-robin: replicas in turn, whatever their state;
//! - least-loaded: the fewest requests running and waiting
//!   ([`Engine::load`]), ties to the lowest index;
//! - prefix-affinity: the longest cached prefix of the prompt
//!   ([`Engine::cached_prefix_tokens`]), ties to the least loaded, then the
//!   lowest index (so with nothing cached anywhere it is least-loaded), as
//!   llm-d's and SGLang's cache-aware routers score replicas.
//!
//! [`Router::pick`] reads engines directly (the virtual-time executor owns
//! them); [`Router::pick_by`] takes the same two figures from elsewhere (the
//! HTTP server, whose engines live on their own threads, keeps its own
//! estimates of them).

use super::SimRouter;
use super::engine::Engine;

/// Picks a replica per request; holds the round-robin position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    policy: SimRouter,
    next: usize,
}

impl Router {
    pub fn new(policy: SimRouter) -> Self {
        Router { policy, next: 0 }
    }

    pub fn policy(&self) -> SimRouter {
        self.policy
    }

    /// The index into `engines` that should serve `prompt` (0 if `engines`
    /// is empty).
    pub fn pick(&mut self, engines: &[Engine], prompt: &[u32]) -> usize {
        self.pick_by(
            engines.len(),
            |i| engines[i].load(),
            |i| engines[i].cached_prefix_tokens(prompt),
        )
    }

    /// [`pick`](Self::pick) among `replicas` replicas given each one's load
    /// and cached prefix tokens for the prompt (each asked only when the
    /// policy needs it).
    pub fn pick_by(
        &mut self,
        replicas: usize,
        load: impl Fn(usize) -> usize,
        cached_tokens: impl Fn(usize) -> u32,
    ) -> usize {
        if replicas <= 1 {
            return 0;
        }
        match self.policy {
            SimRouter::RoundRobin => {
                let i = self.next % replicas;
                self.next = (i + 1) % replicas;
                i
            }
            // `min_by_key` keeps the first of equal keys: the lowest index.
            SimRouter::LeastLoaded => (0..replicas).min_by_key(|&i| load(i)).unwrap_or(0),
            SimRouter::PrefixAffinity => (0..replicas)
                .min_by_key(|&i| (std::cmp::Reverse(cached_tokens(i)), load(i)))
                .unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sim::engine::{EngineRequest, RequestId};
    use crate::sim::presets::find;

    fn engines(n: usize) -> Vec<Engine> {
        let p = find("tiny").unwrap();
        (0..n).map(|i| Engine::new(p, i as u64)).collect()
    }

    fn prompt(tag: u32, len: u32) -> Vec<u32> {
        (0..len).map(|i| (tag * 7919 + i * 31) % 32_000).collect()
    }

    fn submit(engine: &mut Engine, id: u64, prompt: Vec<u32>) {
        let r = EngineRequest {
            id: RequestId(id),
            prompt,
            max_tokens: 4,
            min_tokens: 0,
            ignore_eos: true,
            priority: 0,
        };
        engine.submit(r, Duration::ZERO).unwrap();
    }

    fn run_to_idle(engine: &mut Engine) {
        let mut now = Duration::ZERO;
        while engine.has_work() {
            now = engine.step(now).ends_at();
        }
    }

    #[test]
    fn round_robin_takes_replicas_in_turn() {
        let mut es = engines(3);
        submit(&mut es[0], 1, prompt(1, 20));
        let mut r = Router::new(SimRouter::RoundRobin);
        let picks: Vec<usize> = (0..7).map(|_| r.pick(&es, &[1, 2, 3])).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(r.pick(&es[..1], &[1]), 0, "one replica");
    }

    #[test]
    fn least_loaded_takes_the_fewest_requests_then_the_lowest_index() {
        let mut es = engines(3);
        let mut r = Router::new(SimRouter::LeastLoaded);
        assert_eq!(r.pick(&es, &[1]), 0, "all idle: the first");
        submit(&mut es[0], 1, prompt(1, 20));
        submit(&mut es[0], 2, prompt(2, 20));
        submit(&mut es[1], 3, prompt(3, 20));
        assert_eq!(r.pick(&es, &[1]), 2);
        submit(&mut es[2], 4, prompt(4, 20));
        assert_eq!(r.pick(&es, &[1]), 1, "1 and 2 tie at one request");
        // Waiting requests count as load too.
        let p = find("tiny").unwrap();
        for id in 10..10 + u64::from(p.max_num_seqs) + 5 {
            submit(&mut es[1], id, prompt(id as u32, 20));
        }
        es[1].step(Duration::ZERO);
        assert!(es[1].num_waiting() > 0);
        assert_eq!(r.pick(&es, &[1]), 2);
    }

    #[test]
    fn prefix_affinity_takes_the_longest_cached_prefix_then_the_least_loaded() {
        let mut es = engines(3);
        let mut r = Router::new(SimRouter::PrefixAffinity);
        let shared = prompt(42, 256);
        // Nothing cached: least loaded.
        submit(&mut es[0], 1, prompt(1, 20));
        assert_eq!(r.pick(&es, &shared), 1);
        // Replica 2 has served the shared prefix; replica 1 half of it.
        submit(&mut es[2], 2, shared.clone());
        run_to_idle(&mut es[2]);
        submit(&mut es[1], 3, shared[..128].to_vec());
        run_to_idle(&mut es[1]);
        let mut ask = shared.clone();
        ask.extend(prompt(5, 40));
        assert_eq!(es[2].cached_prefix_tokens(&ask), 256);
        assert_eq!(es[1].cached_prefix_tokens(&ask), 128);
        // Busier, yet it holds the longest prefix.
        for id in 10..14 {
            submit(&mut es[2], id, prompt(id as u32, 20));
        }
        assert_eq!(r.pick(&es, &ask), 2);
        // Equal prefixes: the less loaded of the two.
        let short = shared[..100].to_vec();
        assert_eq!(es[1].cached_prefix_tokens(&short), 96);
        assert_eq!(es[2].cached_prefix_tokens(&short), 96);
        assert_eq!(r.pick(&es, &short), 1);
        // A prompt cached nowhere: least loaded, lowest index on ties.
        assert_eq!(r.pick(&es, &prompt(9, 300)), 1);
    }

    #[test]
    fn pick_by_asks_only_what_the_policy_needs() {
        let mut r = Router::new(SimRouter::LeastLoaded);
        let loads = [3, 1, 1];
        let i = r.pick_by(3, |i| loads[i], |_| panic!("least-loaded reads no cache"));
        assert_eq!(i, 1);
        let mut r = Router::new(SimRouter::PrefixAffinity);
        let cached = [0, 32, 32];
        assert_eq!(r.pick_by(3, |i| [0, 5, 2][i], |i| cached[i]), 2);
    }
}
