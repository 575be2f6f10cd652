//! The roofline cost of one engine step (pure arithmetic).
//!
//! A step's time is `overhead + GPU time + communication`, and the GPU time
//! is two rooflines run one after the other, because that is how a layer
//! executes (one CUDA stream, kernels in sequence):
//!
//! 1. the **weight matmuls** (QKV, output projection, MLP, LM head), bound
//!    either by their FLOPs or by streaming all the weights once from HBM,
//!    whichever is slower, because a GEMM overlaps the two:
//!    `max(2 × params × new tokens / (TP × peak × compute),
//!         weight bytes / (bandwidth × memory))`;
//! 2. the **attention kernels**, bound either by their FLOPs (prefill) or by
//!    reading every sequence's KV cache (decode):
//!    `max(attention FLOPs / (TP × peak × compute),
//!         KV bytes read / (bandwidth × memory × kv_read))`,
//!    attention FLOPs = 4 × layers × heads × head_dim per (query, key) pair
//!    (QKᵀ and AV, one multiply-add each).
//!
//! At low concurrency the weights dominate and are shared by the whole
//! batch, so batching is nearly free; as the batch grows the matmuls turn
//! compute-bound while the KV reads, which are per sequence and grow with
//! every context token, add their own time after them. That is why
//! saturated throughput stops growing well before the matmuls alone would
//! say, which is the regime change CrossP looks for.
//!
//! Paged-attention decode kernels read the cache in 16-token blocks
//! scattered over HBM and reach a lower fraction of the bandwidth than a
//! weight GEMM streaming contiguous matrices: `kv_read` (< 1) is that ratio.
//! `attention_overlap` is the fraction of the attention phase hidden under
//! the matmuls: 0 for vLLM on a GPU (the two phases add), 1 for the single
//! roofline `max(all FLOPs, all bytes)` (the made-up `tiny` preset keeps it,
//! so its figures are those it was designed with); values between blend the
//! two linearly.
//!
//! - communication (TP > 1) = 2 all-reduces per layer of the step's
//!   activations (ring: 2(TP−1)/TP of the payload per GPU) plus a fixed
//!   latency per all-reduce;
//! - overhead = fixed per step + per sequence (CPU-side scheduling, input
//!   preparation, sampling and output processing, which in vLLM grow with
//!   the batch and are not hidden behind the GPU).
//!
//! Every efficiency and overhead is an estimate, documented beside its
//! preset in [`super::presets`], and checked against published figures by
//! `every_preset_is_within_25_percent_of_its_published_figures` there.

use std::time::Duration;

use super::presets::Preset;

/// What a step computes, aggregated over its sequences.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepShape {
    /// Sequences in the step (decodes and prefill chunks).
    pub seqs: u32,
    /// Tokens whose KV is computed in this step.
    pub new_tokens: u64,
    /// Σ over new tokens of the context each attends to (itself included).
    pub attention_pairs: f64,
    /// Σ over sequences of the tokens of KV read (cached context + new).
    pub kv_tokens_read: f64,
}

impl StepShape {
    /// Adds one sequence that had `context_before` tokens cached and
    /// computes `new_tokens` more in this step.
    pub fn add_seq(&mut self, context_before: u32, new_tokens: u32) {
        let c = f64::from(context_before);
        let n = f64::from(new_tokens);
        self.seqs += 1;
        self.new_tokens += u64::from(new_tokens);
        self.attention_pairs += n * c + n * (n + 1.0) / 2.0;
        self.kv_tokens_read += c + n;
    }
}

/// The terms of a step's time, seconds, for inspection and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCost {
    /// FLOP time of the whole step: weight matmuls and attention.
    pub compute_s: f64,
    /// Byte time of the whole step: weights and KV cache.
    pub memory_s: f64,
    /// The attention part of `compute_s`.
    pub attention_compute_s: f64,
    /// The KV-cache part of `memory_s` (at the paged-attention rate).
    pub kv_memory_s: f64,
    /// Fraction of the attention phase hidden under the matmuls (the
    /// preset's `attention_overlap`).
    pub attention_overlap: f64,
    pub communication_s: f64,
    pub overhead_s: f64,
}

impl StepCost {
    /// Weight-matmul phase: `max(matmul FLOPs, weight bytes)`.
    pub fn matmul_s(&self) -> f64 {
        (self.compute_s - self.attention_compute_s).max(self.memory_s - self.kv_memory_s)
    }

    /// Attention phase: `max(attention FLOPs, KV bytes)`.
    pub fn attention_s(&self) -> f64 {
        self.attention_compute_s.max(self.kv_memory_s)
    }

    /// GPU time: the two phases in sequence, blended with the single
    /// roofline by `attention_overlap`.
    pub fn gpu_s(&self) -> f64 {
        let serial = self.matmul_s() + self.attention_s();
        let overlapped = self.compute_s.max(self.memory_s);
        let o = self.attention_overlap.clamp(0.0, 1.0);
        (1.0 - o) * serial + o * overlapped
    }

    pub fn total_s(&self) -> f64 {
        self.overhead_s + self.gpu_s() + self.communication_s
    }

    pub fn total(&self) -> Duration {
        Duration::from_secs_f64(self.total_s())
    }

    /// Whether the step is limited by FLOPs rather than bytes.
    pub fn compute_bound(&self) -> bool {
        self.compute_s > self.memory_s
    }
}

/// The roofline time of a step of `shape` on `preset`.
pub fn step_cost(preset: &Preset, shape: &StepShape) -> StepCost {
    let m = &preset.model;
    let hw = &preset.hardware;
    let eff = &preset.efficiency;
    let tp = f64::from(preset.tensor_parallel.max(1));
    let new_tokens = shape.new_tokens as f64;

    let flops_per_s = tp * hw.peak_bf16_flops_per_s * eff.compute;
    let linear_flops = 2.0 * m.params * new_tokens;
    let attention_flops = 4.0
        * f64::from(m.layers)
        * f64::from(m.attention_heads)
        * f64::from(m.head_dim)
        * shape.attention_pairs;
    let attention_compute_s = attention_flops / flops_per_s;
    let compute_s = linear_flops / flops_per_s + attention_compute_s;

    let weight_bw = hw.memory_bandwidth_bytes_per_s * eff.memory;
    let kv_bw = weight_bw * eff.kv_read;
    let kv_memory_s = preset.kv_bytes_per_token_per_gpu() * shape.kv_tokens_read / kv_bw;
    let memory_s = preset.weight_bytes_per_gpu() / weight_bw + kv_memory_s;

    let communication_s = if preset.tensor_parallel > 1 {
        let allreduces = 2.0 * f64::from(m.layers);
        let payload = new_tokens * f64::from(m.hidden) * m.bytes_per_value;
        let ring_bytes = 2.0 * (tp - 1.0) / tp * payload;
        allreduces * (eff.allreduce_latency_s + ring_bytes / hw.interconnect_bytes_per_s)
    } else {
        0.0
    };

    let overhead_s = eff.step_overhead_s + eff.per_seq_overhead_s * f64::from(shape.seqs);
    StepCost {
        compute_s,
        memory_s,
        attention_compute_s,
        kv_memory_s,
        attention_overlap: eff.attention_overlap,
        communication_s,
        overhead_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::presets::{all, find};

    fn decode_batch(seqs: u32, context: u32) -> StepShape {
        let mut s = StepShape::default();
        for _ in 0..seqs {
            s.add_seq(context, 1);
        }
        s
    }

    #[test]
    fn single_decode_is_memory_bound_and_reads_the_weights() {
        let p = find("h100-llama3-8b").unwrap();
        let c = step_cost(p, &decode_batch(1, 1000));
        assert!(!c.compute_bound());
        // 16.06 GB of weights at 0.75 × 3.35 TB/s, plus (1000 + 1) × 128 KiB
        // of KV at the paged-attention rate, 0.75 of that.
        let weights = 16.06e9 / (0.75 * 3.35e12);
        let kv = 1001.0 * 131_072.0 / (0.75 * 0.75 * 3.35e12);
        assert!((c.memory_s - (weights + kv)).abs() < 1e-9, "{}", c.memory_s);
        assert!((c.kv_memory_s - kv).abs() < 1e-12, "{}", c.kv_memory_s);
        // ≈ 8 ms per token (6.4 of weights, 1.5 of step overhead) → ≈ 125
        // tok/s single stream.
        let tok_per_s = 1.0 / c.total_s();
        assert!((110.0..140.0).contains(&tok_per_s), "{tok_per_s}");
    }

    #[test]
    fn attention_runs_after_the_matmuls_on_a_gpu() {
        // 1,024 decodes at ~400 tokens of context on an H100: the matmuls
        // are compute-bound, the KV reads (51 GB) memory-bound, and the two
        // phases add instead of hiding one another.
        let p = find("h100-llama3-8b").unwrap();
        let c = step_cost(p, &decode_batch(1024, 400));
        assert_eq!(c.attention_overlap, 0.0);
        assert!(c.compute_s - c.attention_compute_s > c.memory_s - c.kv_memory_s);
        assert!(c.kv_memory_s > c.attention_compute_s);
        let gpu = c.matmul_s() + c.attention_s();
        assert!((c.gpu_s() - gpu).abs() < 1e-12);
        assert!(c.gpu_s() > 1.4 * c.compute_s.max(c.memory_s), "{c:?}");
        // ≈ 24 ms of matmuls + ≈ 29 ms of KV reads: ~64 ms with overheads,
        // so ~16k tok/s at this batch (the published ~12.5k includes the
        // prefills and preemptions of a closed loop).
        let tok_per_s = 1024.0 / c.total_s();
        assert!((14_000.0..21_000.0).contains(&tok_per_s), "{tok_per_s}");
    }

    #[test]
    fn full_overlap_is_the_single_roofline() {
        // `tiny` keeps attention_overlap 1 and kv_read 1: max(all FLOPs, all
        // bytes), the model it was designed with.
        let p = find("tiny").unwrap();
        for (seqs, context) in [(1, 64), (32, 128), (32, 1000)] {
            let c = step_cost(p, &decode_batch(seqs, context));
            assert_eq!(c.gpu_s(), c.compute_s.max(c.memory_s));
            let bytes = p.weight_bytes_per_gpu()
                + p.kv_bytes_per_token_per_gpu() * f64::from(seqs) * f64::from(context + 1);
            assert!((c.memory_s - bytes / (0.8 * 100.0e9)).abs() < 1e-12);
        }
        // Halfway blends the two linearly.
        let mut half = p.clone();
        half.efficiency.attention_overlap = 0.5;
        let c = step_cost(&half, &decode_batch(32, 1000));
        let serial = c.matmul_s() + c.attention_s();
        let overlapped = c.compute_s.max(c.memory_s);
        assert!((c.gpu_s() - (serial + overlapped) / 2.0).abs() < 1e-12);
        assert!(serial > overlapped);
    }

    #[test]
    fn long_prefill_is_compute_bound() {
        for p in all() {
            let mut s = StepShape::default();
            s.add_seq(0, p.max_num_batched_tokens);
            let c = step_cost(p, &s);
            assert!(c.compute_bound(), "{}: {c:?}", p.name);
        }
    }

    #[test]
    fn batching_amortises_weights_until_compute_catches_up() {
        let p = find("tiny").unwrap();
        let one = step_cost(p, &decode_batch(1, 128)).total_s();
        let eight = step_cost(p, &decode_batch(8, 128)).total_s();
        let sixty_four = step_cost(p, &decode_batch(64, 128)).total_s();
        // 8 sequences cost far less than 8 single steps …
        assert!(eight < 2.0 * one, "{one} {eight}");
        // … while 64 are compute-bound and cost much more than 8.
        assert!(sixty_four > 3.0 * eight, "{eight} {sixty_four}");
        assert!(step_cost(p, &decode_batch(64, 128)).compute_bound());
    }

    #[test]
    fn tensor_parallel_adds_communication() {
        let p = find("h200-llama3-70b-tp2").unwrap();
        let c = step_cost(p, &decode_batch(1, 1000));
        assert!(c.communication_s > 0.0);
        // 160 all-reduces at 20 µs dominate a single decode's traffic.
        assert!(
            (c.communication_s - 160.0 * 20.0e-6).abs() < 1e-4,
            "{}",
            c.communication_s
        );
        // Each GPU reads half the 141 GB of weights.
        assert!(c.memory_s > 70.6e9 / (0.75 * 4.8e12));
        let single = find("h100-llama3-8b").unwrap();
        assert_eq!(
            step_cost(single, &decode_batch(1, 1000)).communication_s,
            0.0
        );
    }
}
