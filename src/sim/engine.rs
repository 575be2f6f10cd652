//! The deterministic engine core: a vLLM-style continuous-batching scheduler
//! stepping in virtual time.
//!
//! No I/O and no clock: the caller says what time it is (`submit(.., now)`,
//! `step(now)`) and the engine says how long the step takes. The real-time
//! server ([`super::http`]) sleeps through that duration; tests just add it
//! up, so saturation, queueing and caching are tested in milliseconds.
//!
//! One step follows vLLM V1's scheduler:
//! 1. running sequences first, in admission order, each asking for all its
//!    uncomputed tokens (1 for a decode, the rest of the prompt for a prefill)
//!    capped by the step's token budget (`max-num-batched-tokens`: chunked
//!    prefill). If its next KV block cannot be allocated, the youngest running
//!    sequence is preempted (blocks freed, recomputed later from scratch, put
//!    back at the head of the queue) until it can;
//! 2. then, if nothing was preempted, waiting requests in queue order —
//!    by priority (lower first, vLLM's `--scheduling-policy priority`;
//!    all 0 unless a request sets `priority`), FIFO within one — while
//!    there is budget and fewer than `max-num-seqs` run: each first reuses
//!    the cached blocks of its longest cached prefix, then needs blocks for
//!    the chunk it computes; the first that does not fit stops admission
//!    (no overtaking);
//! 3. the step's time comes from the roofline ([`super::cost`]); every
//!    sequence whose context becomes fully computed samples one token.
//!
//! Two of the preset's switches change this, as vLLM's flags do:
//! - `prefix_caching` off (`--no-enable-prefix-caching`): no lookups, no
//!   hits, no block registered, so every prompt (and every preempted
//!   sequence) is computed in full; the prefix-cache counters stay at 0, as
//!   vLLM records none when caching is disabled;
//! - `chunked_prefill` off: a prefill is never split. A waiting request is
//!   admitted only with its whole remaining prompt (after cache hits) in
//!   what is left of the step's token budget; the first that does not fit
//!   stops admission. So that it is not held back by the running decodes
//!   for as long as they run (or forever, when the prompt is longer than the
//!   whole budget: vLLM refuses to start without chunking unless
//!   `max-num-batched-tokens ≥ max-model-len`), the head of the queue whose
//!   prompt does not fit beside the running sequences' tokens gets a step
//!   of its own, as soon as a seat is free and its blocks can be had
//!   without preempting: that step is its whole prefill alone, and the
//!   running sequences wait behind it (one long inter-token gap: vLLM V0's
//!   prefill-first behaviour, which chunked prefill exists to avoid).
//!
//! Everything a step decides is applied at once and its tokens are stamped
//! at the step's end (`now + duration`). Generated tokens are seeded by
//! (engine seed, request id, position), so the same seed and the same
//! submissions give the same token timeline.
//!
//! Without `ignore_eos`, each token after `min_tokens` ends the request with
//! probability [`STOP_PROBABILITY_PER_TOKEN`] (a seeded draw standing in for
//! the model emitting end-of-sequence); with it, exactly `max_tokens` come out.

use std::collections::VecDeque;
use std::time::Duration;

use super::cost::{StepCost, StepShape, step_cost};
use super::kv::{BlockId, BlockPool, block_hash, block_hashes};
use super::metrics::EngineMetrics;
use super::presets::Preset;
use super::queue::QueueState;
use crate::hash::mix;

/// Chance that a token is the last one when `ignore_eos` is off: a mean
/// natural answer of 200 tokens.
pub const STOP_PROBABILITY_PER_TOKEN: f64 = 1.0 / 200.0;

const STOP_SALT: u64 = 0x570_0000_0000_0001;

/// Identifies a request inside the engine (chosen by the caller, unique).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// A request as the engine sees it: token ids and stopping rules.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineRequest {
    pub id: RequestId,
    pub prompt: Vec<u32>,
    /// Most tokens to generate (≥ 1).
    pub max_tokens: u32,
    /// No seeded stop before this many tokens.
    pub min_tokens: u32,
    /// Generate exactly `max_tokens`.
    pub ignore_eos: bool,
    /// Scheduling priority, vLLM's: lower is served first (0 by default).
    pub priority: i32,
}

/// Why a request stopped, as in OpenAI's `finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The (simulated) model ended its answer.
    Stop,
    /// `max_tokens` or the context length was reached.
    Length,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// A token produced by a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emitted {
    pub id: RequestId,
    pub token: u32,
    /// 0-based position among the request's output tokens.
    pub index: u32,
    /// Set on the request's last token.
    pub finish: Option<FinishReason>,
    pub prompt_tokens: u32,
    /// Of the prompt, the tokens found in the prefix cache when the request
    /// was first scheduled (vLLM's `num_cached_tokens`, what it reports as
    /// `usage.prompt_tokens_details.cached_tokens`); 0 with caching off.
    pub cached_tokens: u32,
}

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutput {
    pub started_at: Duration,
    pub duration: Duration,
    /// One token per sequence that completed its context in this step; all
    /// stamped at `started_at + duration`.
    pub emitted: Vec<Emitted>,
    /// Sequences in the batch.
    pub batch_seqs: u32,
    /// Tokens computed in the batch (decodes + prefill chunks).
    pub batch_tokens: u64,
    /// Sequences preempted while building this batch.
    pub preempted: u32,
    pub cost: StepCost,
}

impl StepOutput {
    pub fn ends_at(&self) -> Duration {
        self.started_at + self.duration
    }
}

/// Why a request was refused at submission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    #[error(
        "This model's maximum context length is {max_model_len} tokens. However, you requested \
         {total} tokens ({prompt} in the messages, {max_tokens} in the completion). Please reduce \
         the length of the messages or completion."
    )]
    TooLong {
        prompt: u32,
        max_tokens: u32,
        total: u64,
        max_model_len: u32,
    },
    #[error("token id {token} is out of vocabulary (vocab size {vocab})")]
    TokenOutOfVocab { token: u32, vocab: u32 },
    #[error("request id {0} is already in the engine")]
    DuplicateId(u64),
}

#[derive(Debug, Clone)]
struct Seq {
    id: RequestId,
    /// Prompt then generated tokens.
    tokens: Vec<u32>,
    prompt_len: u32,
    max_tokens: u32,
    min_tokens: u32,
    ignore_eos: bool,
    /// Tokens whose KV is in the cache.
    computed: u32,
    blocks: Vec<BlockId>,
    /// Chained hashes of the full blocks of `tokens`.
    hashes: Vec<u64>,
    /// Leading blocks already registered in the prefix cache.
    registered: usize,
    rng: u64,
    arrival: Duration,
    priority: i32,
    last_token_at: Option<Duration>,
    /// Set by the step that emits its last token (removed at the step's end).
    finished: bool,
    /// Prompt tokens served from the prefix cache at the first admission
    /// (a preempted request readmitted keeps it, as vLLM does).
    cached_tokens: Option<u32>,
}

impl Seq {
    fn output_len(&self) -> u32 {
        self.tokens.len() as u32 - self.prompt_len
    }
}

/// The continuous-batching engine.
#[derive(Debug, Clone)]
pub struct Engine {
    preset: Preset,
    seed: u64,
    max_model_len: u32,
    pool: BlockPool,
    waiting: VecDeque<Seq>,
    /// Admission order: the back is the youngest (preempted first).
    running: Vec<Seq>,
    metrics: EngineMetrics,
    steps: u64,
    /// `sim queue`: a FIFO queue of slots instead of the batching
    /// scheduler (see [`super::queue`]).
    queue: Option<QueueState>,
    /// A queue call's arrival and how its answer ends, by request id.
    queue_arrivals: std::collections::HashMap<u64, (Duration, FinishReason)>,
}

impl Engine {
    pub fn new(preset: &Preset, seed: u64) -> Self {
        Engine {
            preset: preset.clone(),
            seed,
            max_model_len: preset.max_model_len(),
            pool: BlockPool::new(preset.kv_capacity_blocks()),
            waiting: VecDeque::new(),
            running: Vec::new(),
            metrics: EngineMetrics::default(),
            steps: 0,
            queue: preset.queue.map(QueueState::new),
            queue_arrivals: std::collections::HashMap::new(),
        }
    }

    /// Whether this engine is a queue (`sim queue`): its steps take no
    /// time, and [`Engine::next_due`] says when to step again.
    pub fn is_queue(&self) -> bool {
        self.queue.is_some()
    }

    /// A queue's next instant with something due (a token, a slot freed);
    /// `None` for the batching engine, whose steps have a length.
    pub fn next_due(&self) -> Option<Duration> {
        self.queue.as_ref().and_then(QueueState::next_due)
    }

    pub fn preset(&self) -> &Preset {
        &self.preset
    }

    pub fn max_model_len(&self) -> u32 {
        self.max_model_len
    }

    /// Checks a request without queueing it (what `submit` would refuse).
    pub fn validate(&self, req: &EngineRequest) -> Result<(), SubmitError> {
        validate_request(&self.preset, req)
    }

    /// Queues a request that arrived at `now`.
    pub fn submit(&mut self, req: EngineRequest, now: Duration) -> Result<(), SubmitError> {
        self.validate(&req)?;
        if self.contains(req.id) {
            return Err(SubmitError::DuplicateId(req.id.0));
        }
        if let Some(queue) = self.queue.as_mut() {
            let rng = mix(self.seed, req.id.0);
            let prompt_len = req.prompt.len() as u32;
            let room = self.max_model_len.saturating_sub(prompt_len).max(1);
            let (tokens, finish) = queue_output_tokens(&req, rng, room);
            queue.submit(req.id.0, tokens, prompt_len, rng);
            self.queue_arrivals.insert(req.id.0, (now, finish));
            self.metrics.prompt_tokens += u64::from(prompt_len);
            return Ok(());
        }
        let block_size = self.preset.block_size as usize;
        let hashes = if self.preset.prefix_caching {
            block_hashes(&req.prompt, block_size)
        } else {
            Vec::new()
        };
        let prompt_len = req.prompt.len() as u32;
        let mut tokens = req.prompt;
        tokens.reserve(req.max_tokens as usize);
        self.enqueue(Seq {
            id: req.id,
            tokens,
            prompt_len,
            max_tokens: req.max_tokens,
            min_tokens: req.min_tokens,
            ignore_eos: req.ignore_eos,
            computed: 0,
            blocks: Vec::new(),
            hashes,
            registered: 0,
            rng: mix(self.seed, req.id.0),
            arrival: now,
            priority: req.priority,
            last_token_at: None,
            finished: false,
            cached_tokens: None,
        });
        Ok(())
    }

    fn contains(&self, id: RequestId) -> bool {
        if let Some(queue) = &self.queue {
            return queue.contains(id.0);
        }
        self.running
            .iter()
            .chain(self.waiting.iter())
            .any(|s| s.id == id)
    }

    /// Removes a request (client gone); frees its blocks. `false` if it was
    /// not in the engine (already finished).
    pub fn abort(&mut self, id: RequestId) -> bool {
        if let Some(queue) = self.queue.as_mut() {
            let found = queue.abort(id.0);
            if found {
                self.queue_arrivals.remove(&id.0);
                self.metrics.finished_abort += 1;
            }
            return found;
        }
        let seq = if let Some(i) = self.running.iter().position(|s| s.id == id) {
            self.running.remove(i)
        } else if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            match self.waiting.remove(i) {
                Some(s) => s,
                None => return false,
            }
        } else {
            return false;
        };
        self.pool.release(&seq.blocks);
        self.metrics.finished_abort += 1;
        true
    }

    /// Whether a step would do anything.
    pub fn has_work(&self) -> bool {
        if let Some(queue) = &self.queue {
            return queue.has_work();
        }
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.queue
            .as_ref()
            .map_or(self.running.len(), QueueState::num_running)
    }

    pub fn num_waiting(&self) -> usize {
        self.queue
            .as_ref()
            .map_or(self.waiting.len(), QueueState::num_waiting)
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Requests in the engine, running and waiting (what a least-loaded
    /// router compares).
    pub fn load(&self) -> usize {
        self.num_running() + self.num_waiting()
    }

    /// Tokens of the longest cached prefix of `prompt`: what admitting it
    /// now would reuse (whole blocks, leaving at least one token to
    /// compute). Read-only; 0 with prefix caching off.
    pub fn cached_prefix_tokens(&self, prompt: &[u32]) -> u32 {
        if !self.preset.prefix_caching || prompt.is_empty() {
            return 0;
        }
        let block_size = self.preset.block_size.max(1);
        let cacheable = (prompt.len() - 1) / block_size as usize;
        let hashes = block_hashes(
            &prompt[..cacheable * block_size as usize],
            block_size as usize,
        );
        self.pool.lookup(&hashes).len() as u32 * block_size
    }

    /// Counters, histograms and current gauges.
    pub fn metrics(&self) -> EngineMetrics {
        let mut m = self.metrics.clone();
        m.requests_running = self.num_running() as u64;
        m.requests_waiting = self.num_waiting() as u64;
        m.kv_cache_usage = self.pool.usage();
        m
    }

    fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.preset.block_size)
    }

    /// Frees the youngest running sequence and requeues it at the head.
    /// A new request joins the queue behind every request of its priority
    /// or a better (lower) one: FIFO within a priority, as vLLM's priority
    /// policy orders its waiting queue by (priority, arrival).
    fn enqueue(&mut self, seq: Seq) {
        let at = self
            .waiting
            .iter()
            .position(|w| w.priority > seq.priority)
            .unwrap_or(self.waiting.len());
        self.waiting.insert(at, seq);
    }

    /// A preempted request goes back ahead of every waiting request of its
    /// priority (it arrived before them), behind better ones.
    fn requeue(&mut self, seq: Seq) {
        let at = self
            .waiting
            .iter()
            .position(|w| w.priority >= seq.priority)
            .unwrap_or(self.waiting.len());
        self.waiting.insert(at, seq);
    }

    fn preempt_youngest(&mut self) -> Option<RequestId> {
        let mut seq = self.running.pop()?;
        self.pool.release(&seq.blocks);
        seq.blocks.clear();
        seq.computed = 0;
        seq.registered = 0;
        let id = seq.id;
        self.requeue(seq);
        self.metrics.preemptions += 1;
        Some(id)
    }

    /// The cached blocks admitting `seq` now would reuse (none with prefix
    /// caching off); at least one token is left to compute, to sample from.
    fn cache_hits(&self, seq: &Seq) -> Vec<BlockId> {
        if !self.preset.prefix_caching {
            return Vec::new();
        }
        let len = seq.tokens.len() as u32;
        let cacheable = ((len - 1) / self.preset.block_size) as usize;
        self.pool
            .lookup(&seq.hashes[..cacheable.min(seq.hashes.len())])
    }

    /// Moves the head of the queue to `running`, sharing `hits` and
    /// allocating blocks for `n` more tokens, if those can be had without
    /// preempting; returns its index in `running`.
    fn admit_head(&mut self, hits: Vec<BlockId>, n: u32) -> Option<usize> {
        let len = self.waiting.front()?.tokens.len() as u32;
        let computed = hits.len() as u32 * self.preset.block_size;
        let need = self.blocks_for(computed + n) - hits.len() as u32;
        let free_after_share = self.pool.num_free() - self.pool.count_unowned(&hits);
        if need > free_after_share {
            return None;
        }
        let mut seq = self.waiting.pop_front()?;
        self.pool.share(&hits);
        let Some(new) = self.pool.allocate(need) else {
            // Unreachable given the check above; undo and stop admitting.
            self.pool.release(&hits);
            self.waiting.push_front(seq);
            return None;
        };
        if self.preset.prefix_caching {
            self.metrics.prefix_cache_queries += u64::from(len);
            self.metrics.prefix_cache_hits += u64::from(computed);
        }
        seq.registered = hits.len();
        seq.cached_tokens.get_or_insert(computed);
        seq.blocks = hits;
        seq.blocks.extend(new);
        seq.computed = computed;
        self.running.push(seq);
        Some(self.running.len() - 1)
    }

    /// Runs one step starting at `now`. With no work it returns an empty,
    /// zero-length step.
    pub fn step(&mut self, now: Duration) -> StepOutput {
        if self.queue.is_some() {
            return self.queue_step(now);
        }
        let max_seqs = self.preset.max_num_seqs as usize;
        let chunked = self.preset.chunked_prefill;
        let mut budget = self.preset.max_num_batched_tokens;
        // (index into running, tokens to compute) for this batch.
        let mut plan: Vec<(usize, u32)> = Vec::with_capacity(self.running.len() + 8);
        let mut preempted = 0u32;

        // 0. Without chunked prefill, a head of the queue whose whole prompt
        //    does not fit beside the running sequences' tokens is a step of
        //    its own (see the module docs); the running sequences wait.
        if !chunked && self.running.len() < max_seqs {
            if let Some(seq) = self.waiting.front() {
                let hits = self.cache_hits(seq);
                let remaining =
                    seq.tokens.len() as u32 - hits.len() as u32 * self.preset.block_size;
                let demand: u64 = self
                    .running
                    .iter()
                    .map(|s| u64::from(s.tokens.len() as u32 - s.computed))
                    .sum();
                if u64::from(remaining) + demand > u64::from(budget) {
                    if let Some(i) = self.admit_head(hits, remaining) {
                        plan.push((i, remaining));
                        budget = 0;
                    }
                }
            }
        }

        // 1. Running sequences, oldest first.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let seq = &self.running[i];
            let want = seq.tokens.len() as u32 - seq.computed;
            if !chunked && want > budget {
                // Never split without chunking: it waits for a step with room.
                i += 1;
                continue;
            }
            let n = want.min(budget);
            let mut scheduled = true;
            loop {
                let seq = &self.running[i];
                let need = self
                    .blocks_for(seq.computed + n)
                    .saturating_sub(seq.blocks.len() as u32);
                if let Some(new) = self.pool.allocate(need) {
                    self.running[i].blocks.extend(new);
                    break;
                }
                let victim_was_self = self.running.len() - 1 == i;
                if self.preempt_youngest().is_some() {
                    preempted += 1;
                }
                if victim_was_self {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            plan.push((i, n));
            budget -= n;
            i += 1;
        }

        // 2. Waiting requests in queue order, unless this step had to preempt.
        if preempted == 0 {
            while budget > 0 && self.running.len() < max_seqs {
                let Some(seq) = self.waiting.front() else {
                    break;
                };
                let hits = self.cache_hits(seq);
                let remaining =
                    seq.tokens.len() as u32 - hits.len() as u32 * self.preset.block_size;
                let n = if chunked {
                    remaining.min(budget)
                } else if remaining <= budget {
                    remaining
                } else {
                    break; // the whole prompt or nothing, and no overtaking
                };
                let Some(i) = self.admit_head(hits, n) else {
                    break;
                };
                plan.push((i, n));
                budget -= n;
            }
        }

        // 3. Cost of the batch.
        let mut shape = StepShape::default();
        for &(i, n) in &plan {
            shape.add_seq(self.running[i].computed, n);
        }
        let cost = step_cost(&self.preset, &shape);
        let duration = if plan.is_empty() {
            Duration::ZERO
        } else {
            cost.total()
        };
        let end = now + duration;

        // 4. Apply: compute KV, register full blocks, sample tokens.
        let mut emitted = Vec::with_capacity(plan.len());
        let mut finished_any = false;
        let block_size = self.preset.block_size as usize;
        let caching = self.preset.prefix_caching;
        for &(i, n) in &plan {
            let seq = &mut self.running[i];
            seq.computed += n;
            let full_blocks = if caching {
                seq.computed as usize / block_size
            } else {
                0
            };
            while seq.registered < full_blocks {
                let k = seq.registered;
                if k >= seq.hashes.len() {
                    let parent = k.checked_sub(1).map(|p| seq.hashes[p]);
                    let h = block_hash(parent, &seq.tokens[k * block_size..(k + 1) * block_size]);
                    seq.hashes.push(h);
                }
                self.pool.register(seq.blocks[k], seq.hashes[k]);
                seq.registered += 1;
            }
            if seq.computed as usize != seq.tokens.len() {
                continue; // mid-prefill chunk
            }
            let index = seq.output_len();
            let token =
                (mix(seq.rng, u64::from(index)) % u64::from(self.preset.model.vocab)) as u32;
            seq.tokens.push(token);
            let out_len = index + 1;
            let finish = if out_len >= seq.max_tokens
                || seq.tokens.len() as u32 >= self.max_model_len
            {
                Some(FinishReason::Length)
            } else if !seq.ignore_eos && out_len >= seq.min_tokens && stop_draw(seq.rng, index) {
                Some(FinishReason::Stop)
            } else {
                None
            };
            match seq.last_token_at {
                None => {
                    self.metrics
                        .ttft_s
                        .observe((end - seq.arrival).as_secs_f64());
                    self.metrics.prompt_tokens += u64::from(seq.prompt_len);
                }
                Some(prev) => self.metrics.itl_s.observe((end - prev).as_secs_f64()),
            }
            seq.last_token_at = Some(end);
            self.metrics.generation_tokens += 1;
            if let Some(reason) = finish {
                finished_any = true;
                seq.finished = true;
                self.metrics
                    .e2e_s
                    .observe((end - seq.arrival).as_secs_f64());
                match reason {
                    FinishReason::Stop => self.metrics.finished_stop += 1,
                    FinishReason::Length => self.metrics.finished_length += 1,
                }
            }
            emitted.push(Emitted {
                id: seq.id,
                token,
                index,
                finish,
                prompt_tokens: seq.prompt_len,
                cached_tokens: seq.cached_tokens.unwrap_or(0),
            });
        }
        if finished_any {
            let mut to_free = Vec::new();
            self.running.retain_mut(|s| {
                if s.finished {
                    to_free.push(std::mem::take(&mut s.blocks));
                    false
                } else {
                    true
                }
            });
            for blocks in to_free {
                self.pool.release(&blocks);
            }
        }
        if !plan.is_empty() {
            self.steps += 1;
        }
        StepOutput {
            started_at: now,
            duration,
            emitted,
            batch_seqs: shape.seqs,
            batch_tokens: shape.new_tokens,
            preempted,
            cost,
        }
    }
}

impl Engine {
    /// A queue's step: everything due at `now`, sent at once (no length).
    fn queue_step(&mut self, now: Duration) -> StepOutput {
        let mut due = Vec::new();
        if let Some(queue) = self.queue.as_mut() {
            queue.advance(now, &mut due);
        }
        let vocab = u64::from(self.preset.model.vocab.max(1));
        let mut emitted = Vec::with_capacity(due.len());
        for t in due {
            let (arrival, reason) = self
                .queue_arrivals
                .get(&t.id)
                .copied()
                .unwrap_or((now, FinishReason::Length));
            if t.index == 0 {
                self.metrics
                    .ttft_s
                    .observe(now.saturating_sub(arrival).as_secs_f64());
            }
            self.metrics.generation_tokens += 1;
            let finish = t.last.then_some(reason);
            if t.last {
                self.queue_arrivals.remove(&t.id);
                self.metrics
                    .e2e_s
                    .observe(now.saturating_sub(arrival).as_secs_f64());
                match reason {
                    FinishReason::Stop => self.metrics.finished_stop += 1,
                    FinishReason::Length => self.metrics.finished_length += 1,
                }
            }
            emitted.push(Emitted {
                id: RequestId(t.id),
                token: (mix(t.rng, u64::from(t.index)) % vocab) as u32,
                index: t.index,
                finish,
                prompt_tokens: t.prompt_tokens,
                cached_tokens: 0,
            });
        }
        if !emitted.is_empty() {
            self.steps += 1;
        }
        StepOutput {
            started_at: now,
            duration: Duration::ZERO,
            batch_seqs: emitted.len() as u32,
            batch_tokens: emitted.len() as u64,
            emitted,
            preempted: 0,
            cost: StepCost::default(),
        }
    }
}

/// How many tokens a queue call sends: its `max_tokens` when it ignores
/// EOS, else where the engine's seeded stop draw ends it (as a batching
/// engine's answer would), within `room` tokens of context.
fn queue_output_tokens(req: &EngineRequest, rng: u64, room: u32) -> (u32, FinishReason) {
    let cap = req.max_tokens.min(room).max(1);
    if req.ignore_eos {
        return (cap, FinishReason::Length);
    }
    (1..cap)
        .find(|&out_len| out_len >= req.min_tokens && stop_draw(rng, out_len - 1))
        .map_or((cap, FinishReason::Length), |n| (n, FinishReason::Stop))
}

/// The checks `submit` makes, usable without an engine (the HTTP layer
/// answers 400 before queueing anything).
pub fn validate_request(preset: &Preset, req: &EngineRequest) -> Result<(), SubmitError> {
    if req.prompt.is_empty() {
        return Err(SubmitError::EmptyPrompt);
    }
    if req.max_tokens == 0 {
        return Err(SubmitError::ZeroMaxTokens);
    }
    let vocab = preset.model.vocab;
    if let Some(&token) = req.prompt.iter().find(|&&t| t >= vocab) {
        return Err(SubmitError::TokenOutOfVocab { token, vocab });
    }
    let max_model_len = preset.max_model_len();
    let prompt = u32::try_from(req.prompt.len()).unwrap_or(u32::MAX);
    let total = u64::from(prompt) + u64::from(req.max_tokens);
    if total > u64::from(max_model_len) {
        return Err(SubmitError::TooLong {
            prompt,
            max_tokens: req.max_tokens,
            total,
            max_model_len,
        });
    }
    Ok(())
}

fn stop_draw(rng: u64, index: u32) -> bool {
    let bits = mix(rng ^ STOP_SALT, u64::from(index)) >> 11;
    (bits as f64 / (1u64 << 53) as f64) < STOP_PROBABILITY_PER_TOKEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::presets::find;
    use std::collections::HashMap;

    fn tiny() -> &'static Preset {
        find("tiny").unwrap()
    }

    fn req(id: u64, prompt: Vec<u32>, max_tokens: u32) -> EngineRequest {
        EngineRequest {
            id: RequestId(id),
            prompt,
            max_tokens,
            min_tokens: 0,
            ignore_eos: true,
            priority: 0,
        }
    }

    /// Distinct prompt tokens per request, so nothing is shared by accident.
    fn unique_prompt(id: u64, len: u32) -> Vec<u32> {
        (0..len)
            .map(|i| (mix(id + 1_000_000, u64::from(i)) % 32_000) as u32)
            .collect()
    }

    /// Per-request timeline, virtual seconds.
    #[derive(Debug, Default, Clone, PartialEq)]
    struct Timeline {
        arrival: f64,
        tokens: Vec<(u32, f64)>,
        finish: Option<FinishReason>,
    }

    impl Timeline {
        fn ttft(&self) -> f64 {
            self.tokens[0].1 - self.arrival
        }
        fn e2e(&self) -> f64 {
            self.tokens.last().unwrap().1 - self.arrival
        }
    }

    /// Runs the engine until idle, recording every token's time.
    fn run_to_idle(engine: &mut Engine, now: &mut Duration, tl: &mut HashMap<u64, Timeline>) {
        while engine.has_work() {
            let out = engine.step(*now);
            *now = out.ends_at();
            for e in &out.emitted {
                let t = tl.entry(e.id.0).or_default();
                t.tokens.push((e.token, now.as_secs_f64()));
                t.finish = e.finish;
            }
        }
    }

    /// Closed loop in virtual time: `concurrency` slots, each refilled the
    /// moment its request finishes; returns (output tokens/s, mean TTFT s).
    fn closed_loop(
        preset: &Preset,
        concurrency: u64,
        input: u32,
        output: u32,
        total: u64,
    ) -> (f64, f64) {
        let mut engine = Engine::new(preset, 1);
        let mut now = Duration::ZERO;
        let mut next_id = 0u64;
        let mut arrivals = HashMap::new();
        let mut ttfts = Vec::new();
        let mut tokens = 0u64;
        let start_measure_after = total / 4;
        let mut measure_start: Option<Duration> = None;
        let mut measured_tokens = 0u64;
        for _ in 0..concurrency {
            engine
                .submit(req(next_id, unique_prompt(next_id, input), output), now)
                .unwrap();
            arrivals.insert(next_id, now);
            next_id += 1;
        }
        let mut finished = 0u64;
        while finished < total {
            let out = engine.step(now);
            now = out.ends_at();
            for e in &out.emitted {
                tokens += 1;
                if measure_start.is_some() {
                    measured_tokens += 1;
                }
                if e.index == 0 && e.id.0 >= start_measure_after {
                    ttfts.push((now - arrivals[&e.id.0]).as_secs_f64());
                }
                if e.finish.is_some() {
                    finished += 1;
                    if finished == start_measure_after {
                        measure_start = Some(now);
                    }
                    engine
                        .submit(req(next_id, unique_prompt(next_id, input), output), now)
                        .unwrap();
                    arrivals.insert(next_id, now);
                    next_id += 1;
                }
            }
        }
        let _ = tokens;
        let window = (now - measure_start.unwrap()).as_secs_f64();
        let mean_ttft = ttfts.iter().sum::<f64>() / ttfts.len() as f64;
        (measured_tokens as f64 / window, mean_ttft)
    }

    #[test]
    fn waiting_requests_are_admitted_by_priority_then_arrival() {
        // Fill every seat, then queue: three at priority 5, then one at 0
        // and one at 5. The priority-0 request overtakes the queue; within
        // a priority, arrival order stands.
        let preset = tiny();
        let seats = preset.max_num_seqs as u64;
        let mut engine = Engine::new(preset, 1);
        let now = Duration::ZERO;
        for id in 0..seats {
            engine
                .submit(req(id, unique_prompt(id, 16), 32), now)
                .unwrap();
        }
        let queued = [(100, 5), (101, 5), (102, 5), (103, 0), (104, 5)];
        for (id, priority) in queued {
            let r = EngineRequest {
                priority,
                ..req(id, unique_prompt(id, 16), 32)
            };
            engine.submit(r, now).unwrap();
        }
        let mut first_token: Vec<u64> = Vec::new();
        let mut t = now;
        while engine.has_work() {
            let out = engine.step(t);
            t = out.ends_at();
            for e in &out.emitted {
                if e.index == 0 && e.id.0 >= 100 {
                    first_token.push(e.id.0);
                }
            }
        }
        assert_eq!(first_token, vec![103, 100, 101, 102, 104]);
    }

    #[test]
    fn single_request_produces_exactly_max_tokens_and_times_add_up() {
        let mut engine = Engine::new(tiny(), 7);
        engine
            .submit(req(1, unique_prompt(1, 64), 64), Duration::ZERO)
            .unwrap();
        let mut now = Duration::ZERO;
        let mut tl = HashMap::new();
        run_to_idle(&mut engine, &mut now, &mut tl);
        let t = &tl[&1];
        assert_eq!(t.tokens.len(), 64);
        assert_eq!(t.finish, Some(FinishReason::Length));
        // The target for `tiny`: a 64-token request in ~100–200 ms.
        assert!((0.1..0.2).contains(&t.e2e()), "e2e {}", t.e2e());
        assert_eq!(engine.num_running(), 0);
        let m = engine.metrics();
        assert_eq!(m.generation_tokens, 64);
        assert_eq!(m.prompt_tokens, 64);
        assert_eq!(m.finished_length, 1);
        assert_eq!(m.kv_cache_usage, 0.0, "blocks freed at the end");
        assert_eq!(m.ttft_s.count(), 1);
        assert_eq!(m.itl_s.count(), 63);
    }

    #[test]
    fn throughput_rises_with_concurrency_then_saturates() {
        let levels = [1u64, 2, 4, 8, 16, 32, 64];
        let xs: Vec<f64> = levels
            .iter()
            .map(|&c| closed_loop(tiny(), c, 64, 64, 8 * c.max(8)).0)
            .collect();
        // Nearly linear at first: batching amortises the weight reads.
        assert!(xs[1] > 1.8 * xs[0], "{xs:?}");
        assert!(xs[3] > 5.0 * xs[0], "{xs:?}");
        // Then it flattens: 32 → 64 adds little (max-num-seqs is 32 on tiny).
        assert!(xs[6] < 1.1 * xs[5], "{xs:?}");
        assert!(xs[5] < 1.6 * xs[4], "{xs:?}");
    }

    #[test]
    fn ttft_grows_once_the_batch_is_full() {
        let (_, ttft_8) = closed_loop(tiny(), 8, 64, 64, 64);
        let (_, ttft_32) = closed_loop(tiny(), 32, 64, 64, 128);
        let (_, ttft_128) = closed_loop(tiny(), 128, 64, 64, 512);
        // Beyond max-num-seqs (32) requests queue: TTFT jumps by far more
        // than the growth of the step time.
        assert!(ttft_32 < 5.0 * ttft_8, "{ttft_8} {ttft_32}");
        assert!(ttft_128 > 5.0 * ttft_32, "{ttft_32} {ttft_128}");
    }

    #[test]
    fn shared_prefix_lowers_ttft_on_repeat() {
        let mut engine = Engine::new(tiny(), 3);
        let prefix = unique_prompt(42, 512);
        let mut prompt_a = prefix.clone();
        prompt_a.extend(unique_prompt(1, 16));
        let mut prompt_b = prefix.clone();
        prompt_b.extend(unique_prompt(2, 16));
        let mut now = Duration::ZERO;
        let mut tl = HashMap::new();
        engine.submit(req(1, prompt_a, 4), now).unwrap();
        run_to_idle(&mut engine, &mut now, &mut tl);
        let first = tl[&1].ttft();
        let arrival = now;
        engine.submit(req(2, prompt_b, 4), now).unwrap();
        run_to_idle(&mut engine, &mut now, &mut tl);
        let mut second = tl[&2].clone();
        second.arrival = arrival.as_secs_f64();
        assert!(second.ttft() < first / 4.0, "{first} {}", second.ttft());
        let m = engine.metrics();
        assert_eq!(m.prefix_cache_queries, 2 * 528);
        assert_eq!(m.prefix_cache_hits, 512, "the 32 full prefix blocks");
    }

    #[test]
    fn each_token_carries_the_cached_prompt_tokens_of_its_request() {
        let mut engine = Engine::new(tiny(), 3);
        let prefix = unique_prompt(42, 512);
        let mut prompt_b = prefix.clone();
        prompt_b.extend(unique_prompt(2, 20));
        let mut now = Duration::ZERO;
        let mut cached: HashMap<u64, Vec<u32>> = HashMap::new();
        let mut run = |engine: &mut Engine, now: &mut Duration| {
            while engine.has_work() {
                let out = engine.step(*now);
                *now = out.ends_at();
                for e in &out.emitted {
                    cached.entry(e.id.0).or_default().push(e.cached_tokens);
                }
            }
        };
        engine.submit(req(1, prefix.clone(), 3), now).unwrap();
        run(&mut engine, &mut now);
        engine.submit(req(2, prompt_b, 3), now).unwrap();
        run(&mut engine, &mut now);
        assert_eq!(cached[&1], vec![0, 0, 0], "a cold cache");
        // 512 prefix tokens are 32 whole blocks.
        assert_eq!(cached[&2], vec![512, 512, 512]);

        let mut off = tiny().clone();
        off.prefix_caching = false;
        let mut engine = Engine::new(&off, 3);
        let mut cached: Vec<u32> = Vec::new();
        for id in [1, 2] {
            engine.submit(req(id, prefix.clone(), 2), now).unwrap();
            while engine.has_work() {
                let out = engine.step(now);
                now = out.ends_at();
                cached.extend(out.emitted.iter().map(|e| e.cached_tokens));
            }
        }
        assert!(cached.iter().all(|&n| n == 0), "{cached:?}");
    }

    #[test]
    fn kv_exhaustion_queues_and_preempts() {
        let p = tiny();
        let capacity = p.kv_capacity_tokens();
        let mut engine = Engine::new(p, 5);
        // Each request grows to 1,000 + 1,000 tokens; 8 of them need ~16k
        // tokens of KV, twice tiny's capacity.
        for id in 0..8 {
            engine
                .submit(req(id, unique_prompt(id, 1000), 1000), Duration::ZERO)
                .unwrap();
        }
        let mut now = Duration::ZERO;
        let mut saw_waiting_with_free_seats = false;
        let mut max_usage: f64 = 0.0;
        let mut tl: HashMap<u64, Timeline> = HashMap::new();
        while engine.has_work() {
            let out = engine.step(now);
            now = out.ends_at();
            let m = engine.metrics();
            max_usage = max_usage.max(m.kv_cache_usage);
            if m.requests_waiting > 0 && m.requests_running < u64::from(p.max_num_seqs) {
                saw_waiting_with_free_seats = true;
            }
            for e in &out.emitted {
                tl.entry(e.id.0)
                    .or_default()
                    .tokens
                    .push((e.token, now.as_secs_f64()));
            }
        }
        let m = engine.metrics();
        assert!(capacity < 16_000);
        assert!(
            saw_waiting_with_free_seats,
            "requests queued for KV, not for seats"
        );
        assert!(m.preemptions > 0);
        assert!(max_usage > 0.95, "{max_usage}");
        // Preempted requests are recomputed and still finish completely.
        assert_eq!(m.finished_length, 8);
        for t in tl.values() {
            assert_eq!(t.tokens.len(), 1000);
        }
        assert_eq!(m.kv_cache_usage, 0.0);
    }

    #[test]
    fn same_seed_same_timeline_other_seed_other_tokens() {
        let run = |seed: u64| {
            let mut engine = Engine::new(tiny(), seed);
            for id in 0..20 {
                let r = EngineRequest {
                    id: RequestId(id),
                    prompt: unique_prompt(id, 100 + 37 * id as u32),
                    max_tokens: 300,
                    min_tokens: 5,
                    ignore_eos: false,
                    priority: 0,
                };
                engine.submit(r, Duration::from_millis(3 * id)).unwrap();
            }
            let mut now = Duration::from_millis(60);
            let mut tl = HashMap::new();
            run_to_idle(&mut engine, &mut now, &mut tl);
            let mut v: Vec<_> = tl.into_iter().collect();
            v.sort_by_key(|(id, _)| *id);
            v
        };
        let a = run(11);
        assert_eq!(a, run(11));
        let b = run(12);
        assert_ne!(a, b);
        // Without ignore_eos some answers stop early, none before min_tokens.
        assert!(a.iter().any(|(_, t)| t.finish == Some(FinishReason::Stop)));
        assert!(a.iter().all(|(_, t)| t.tokens.len() >= 5));
    }

    #[test]
    fn abort_frees_the_request_and_its_blocks() {
        let mut engine = Engine::new(tiny(), 1);
        engine
            .submit(req(1, unique_prompt(1, 300), 100), Duration::ZERO)
            .unwrap();
        engine
            .submit(req(2, unique_prompt(2, 300), 100), Duration::ZERO)
            .unwrap();
        let out = engine.step(Duration::ZERO);
        assert!(engine.metrics().kv_cache_usage > 0.0);
        assert!(engine.abort(RequestId(1)));
        assert!(engine.abort(RequestId(2)));
        assert!(!engine.abort(RequestId(2)));
        assert!(!engine.has_work());
        assert_eq!(engine.metrics().kv_cache_usage, 0.0);
        assert_eq!(engine.metrics().finished_abort, 2);
        assert!(out.duration > Duration::ZERO);
    }

    #[test]
    fn chunked_prefill_respects_the_token_budget() {
        let mut engine = Engine::new(tiny(), 1);
        engine
            .submit(req(1, unique_prompt(1, 1500), 2), Duration::ZERO)
            .unwrap();
        let mut now = Duration::ZERO;
        let mut chunks = Vec::new();
        while engine.has_work() {
            let out = engine.step(now);
            now = out.ends_at();
            chunks.push(out.batch_tokens);
        }
        // 1500 prompt tokens in 512-token chunks, then one decode.
        assert_eq!(chunks, vec![512, 512, 476, 1]);
    }

    /// Virtual time from `submit` at `at` to request `id`'s first token,
    /// stepping `engine` until idle.
    fn first_token_after(engine: &mut Engine, id: u64, prompt: Vec<u32>, at: Duration) -> Duration {
        engine.submit(req(id, prompt, 4), at).unwrap();
        let mut now = at;
        let mut first = None;
        while engine.has_work() {
            let out = engine.step(now);
            now = out.ends_at();
            if out.emitted.iter().any(|e| e.id.0 == id && e.index == 0) {
                first.get_or_insert(now - at);
            }
        }
        first.unwrap()
    }

    #[test]
    fn prefix_caching_off_recomputes_a_repeated_prompt() {
        let prompt = unique_prompt(42, 528);
        let mut off = tiny().clone();
        off.prefix_caching = false;
        let mut engine = Engine::new(&off, 3);
        let first = first_token_after(&mut engine, 1, prompt.clone(), Duration::ZERO);
        assert_eq!(engine.cached_prefix_tokens(&prompt), 0);
        let second = first_token_after(&mut engine, 2, prompt.clone(), Duration::from_secs(1));
        assert_eq!(first, second, "the repeat is computed in full");
        let m = engine.metrics();
        assert_eq!((m.prefix_cache_queries, m.prefix_cache_hits), (0, 0));
        // The same two requests with caching on: 512 tokens reused.
        let mut engine = Engine::new(tiny(), 3);
        let first_on = first_token_after(&mut engine, 1, prompt.clone(), Duration::ZERO);
        assert_eq!(first_on, first);
        assert_eq!(engine.cached_prefix_tokens(&prompt), 512);
        let second_on = first_token_after(&mut engine, 2, prompt, Duration::from_secs(1));
        assert!(second_on * 4 < first, "{second_on:?} {first:?}");
        assert_eq!(engine.metrics().prefix_cache_hits, 512);
    }

    #[test]
    fn cached_prefix_tokens_and_load_are_read_only() {
        let mut engine = Engine::new(tiny(), 1);
        let prompt = unique_prompt(7, 528);
        assert_eq!(engine.cached_prefix_tokens(&prompt), 0);
        engine
            .submit(req(1, prompt.clone(), 8), Duration::ZERO)
            .unwrap();
        engine
            .submit(req(2, unique_prompt(8, 40), 8), Duration::ZERO)
            .unwrap();
        assert_eq!(engine.load(), 2);
        let out = engine.step(Duration::ZERO);
        // 512 of request 1's tokens computed: 32 full blocks cached so far.
        assert_eq!(engine.cached_prefix_tokens(&prompt), 512);
        assert_eq!(engine.load(), 2);
        let mut now = out.ends_at();
        let mut tl = HashMap::new();
        run_to_idle(&mut engine, &mut now, &mut tl);
        assert_eq!(engine.load(), 0);
        let before = engine.metrics();
        // At least one token is left to compute: 527 → 32 blocks.
        assert_eq!(engine.cached_prefix_tokens(&prompt), 512);
        let mut longer = prompt.clone();
        longer.extend(unique_prompt(9, 100));
        assert_eq!(engine.cached_prefix_tokens(&longer), 528);
        assert_eq!(engine.cached_prefix_tokens(&prompt[..100]), 96);
        assert_eq!(engine.cached_prefix_tokens(&unique_prompt(10, 600)), 0);
        assert_eq!(engine.cached_prefix_tokens(&[]), 0);
        assert_eq!(engine.metrics(), before, "lookups count no queries");
    }

    /// Four decoding requests, then a `long`-token prompt; returns the
    /// steps from its arrival to its first token as (seqs, tokens) and the
    /// longest gap between two tokens of a decoding request.
    fn prompt_behind_decodes(preset: &Preset, long: u32) -> (Vec<(u32, u64)>, Duration) {
        let mut engine = Engine::new(preset, 1);
        for id in 0..4 {
            engine
                .submit(req(id, unique_prompt(id, 16), 100), Duration::ZERO)
                .unwrap();
        }
        let mut now = Duration::ZERO;
        for _ in 0..5 {
            now = engine.step(now).ends_at();
        }
        engine
            .submit(req(99, unique_prompt(99, long), 2), now)
            .unwrap();
        let mut steps = Vec::new();
        let mut last = now;
        let mut gap = Duration::ZERO;
        let mut prefilled = false;
        loop {
            let out = engine.step(now);
            now = out.ends_at();
            if !prefilled {
                steps.push((out.batch_seqs, out.batch_tokens));
                prefilled = out.emitted.iter().any(|e| e.id.0 == 99);
            }
            if out.emitted.iter().any(|e| e.id.0 == 0) {
                gap = gap.max(now - last);
                last = now;
                if prefilled {
                    return (steps, gap);
                }
            }
        }
    }

    #[test]
    fn chunked_prefill_off_prefills_whole_and_decodes_wait_behind_it() {
        let mut off = tiny().clone();
        off.chunked_prefill = false;
        // Alone: the 1,500-token prompt (budget 512) in one step.
        let mut engine = Engine::new(&off, 1);
        engine
            .submit(req(1, unique_prompt(1, 1500), 2), Duration::ZERO)
            .unwrap();
        let mut now = Duration::ZERO;
        let mut chunks = Vec::new();
        while engine.has_work() {
            let out = engine.step(now);
            now = out.ends_at();
            chunks.push(out.batch_tokens);
        }
        assert_eq!(chunks, vec![1500, 1]);

        // Behind 4 decodes. Chunked: 508-token chunks beside the decodes.
        let (on_steps, on_gap) = prompt_behind_decodes(tiny(), 1500);
        assert_eq!(on_steps, vec![(5, 512), (5, 512), (5, 488)]);
        // Not chunked: a step of its own; the decodes skip it.
        let (off_steps, off_gap) = prompt_behind_decodes(&off, 1500);
        assert_eq!(off_steps, vec![(1, 1500)]);
        assert!(off_gap > 2 * on_gap, "{off_gap:?} vs {on_gap:?}");
        // A prompt that fits beside the decodes joins their step whole.
        let (fits, _) = prompt_behind_decodes(&off, 500);
        assert_eq!(fits, vec![(5, 504)]);
        // One that fits the budget but not beside them goes alone.
        let (alone, _) = prompt_behind_decodes(&off, 510);
        assert_eq!(alone, vec![(1, 510)]);
    }

    #[test]
    fn invalid_requests_are_refused() {
        let mut engine = Engine::new(tiny(), 1);
        assert_eq!(
            engine.submit(req(1, vec![], 4), Duration::ZERO),
            Err(SubmitError::EmptyPrompt)
        );
        assert_eq!(
            engine.submit(req(1, vec![1], 0), Duration::ZERO),
            Err(SubmitError::ZeroMaxTokens)
        );
        assert!(matches!(
            engine.submit(req(1, vec![1; 2000], 100), Duration::ZERO),
            Err(SubmitError::TooLong {
                total: 2100,
                max_model_len: 2048,
                ..
            })
        ));
        assert_eq!(
            engine.submit(req(1, vec![32_000], 1), Duration::ZERO),
            Err(SubmitError::TokenOutOfVocab {
                token: 32_000,
                vocab: 32_000
            })
        );
        engine.submit(req(1, vec![1], 1), Duration::ZERO).unwrap();
        assert_eq!(
            engine.submit(req(1, vec![1], 1), Duration::ZERO),
            Err(SubmitError::DuplicateId(1))
        );
    }

    /// The sanity figures of the issue note: single-stream decode and
    /// saturated throughput of h100-llama3-8b against published runs, held
    /// to ±25% as every preset's are (`presets::PUBLISHED`, whose sources
    /// are cited there): a single Llama-3-8B bf16 stream decodes at about
    /// 111 tok/s on one H100, and saturated output throughput is reported
    /// around 12,500 tok/s (morphllm.com "vLLM Benchmarks"), less with long
    /// prompts. Run with `--nocapture` to see them.
    #[test]
    fn h100_llama3_8b_is_near_published_vllm_figures() {
        let p = find("h100-llama3-8b").unwrap();
        let (single, ttft) = closed_loop(p, 1, 1024, 128, 4);
        eprintln!(
            "h100-llama3-8b single stream: {single:.0} tok/s, TTFT(1024) {:.1} ms",
            ttft * 1e3
        );
        assert!(
            (111.0 * 0.75..111.0 * 1.25).contains(&single),
            "single stream {single} tok/s"
        );
        let (prefill_heavy, _) = closed_loop(p, 256, 1024, 128, 1024);
        eprintln!("h100-llama3-8b c=256, 1024 in/128 out: {prefill_heavy:.0} output tok/s");
        assert!(
            (2_000.0..8_000.0).contains(&prefill_heavy),
            "{prefill_heavy} tok/s"
        );
        let (decode_heavy, _) = closed_loop(p, 1024, 128, 512, 3072);
        eprintln!("h100-llama3-8b c=1024, 128 in/512 out: {decode_heavy:.0} output tok/s");
        assert!(
            (12_500.0 * 0.75..12_500.0 * 1.25).contains(&decode_heavy),
            "{decode_heavy} tok/s"
        );
        // Same shape as the A100 sweep cited above (1024 in/128 out): c=1 75
        // tok/s and ×6.6 at c=8 on an A100-40GB; the 80GB preset is close.
        let a100 = find("a100-llama3-8b").unwrap();
        let (a1, _) = closed_loop(a100, 1, 1024, 128, 4);
        let (a8, _) = closed_loop(a100, 8, 1024, 128, 64);
        eprintln!("a100-llama3-8b 1024/128: c=1 {a1:.0} tok/s, c=8 {a8:.0} tok/s");
        assert!(
            (60.0..110.0).contains(&a1) && (350.0..650.0).contains(&a8),
            "{a1} {a8}"
        );
    }
}
