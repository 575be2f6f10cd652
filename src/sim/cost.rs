//! The roofline cost of one engine step (pure arithmetic).
//!
//! A step's time is `overhead + max(compute, memory) + communication`:
//! a step is bound either by the FLOPs of its tokens or by the bytes it must
//! stream from HBM (all weights once, plus the KV cache of every sequence in
//! the batch), whichever is slower, because the GPU overlaps the two. This is
//! why batching is nearly free at low concurrency (weight reads dominate and
//! are shared) and stops paying once per-token compute or KV reads catch up,
//! which is the regime change CrossP looks for.
//!
//! - compute = (2 × params × new tokens + attention FLOPs) / (TP × peak × efficiency),
//!   attention FLOPs = 4 × layers × heads × head_dim per (query, key) pair
//!   (QKᵀ and AV, one multiply-add each);
//! - memory = (weight bytes + KV bytes read) / (HBM bandwidth × efficiency), per GPU;
//! - communication (TP > 1) = 2 all-reduces per layer of the step's
//!   activations (ring: 2(TP−1)/TP of the payload per GPU) plus a fixed
//!   latency per all-reduce;
//! - overhead = fixed per step + per sequence (CPU-side scheduling and sampling).

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
    pub compute_s: f64,
    pub memory_s: f64,
    pub communication_s: f64,
    pub overhead_s: f64,
}

impl StepCost {
    pub fn total_s(&self) -> f64 {
        self.overhead_s + self.compute_s.max(self.memory_s) + self.communication_s
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

    let linear_flops = 2.0 * m.params * new_tokens;
    let attention_flops = 4.0
        * f64::from(m.layers)
        * f64::from(m.attention_heads)
        * f64::from(m.head_dim)
        * shape.attention_pairs;
    let compute_s =
        (linear_flops + attention_flops) / (tp * hw.peak_bf16_flops_per_s * eff.compute);

    let bytes_per_gpu =
        preset.weight_bytes_per_gpu() + preset.kv_bytes_per_token_per_gpu() * shape.kv_tokens_read;
    let memory_s = bytes_per_gpu / (hw.memory_bandwidth_bytes_per_s * eff.memory);

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
        // 16.06 GB of weights + (1000 + 1) × 128 KiB of KV at 0.8 × 3.35 TB/s.
        let expected = (16.06e9 + 1001.0 * 131_072.0) / (0.8 * 3.35e12);
        assert!((c.memory_s - expected).abs() < 1e-9, "{}", c.memory_s);
        // ≈ 7 ms per token → ≈ 140 tok/s single stream.
        let tok_per_s = 1.0 / c.total_s();
        assert!((120.0..160.0).contains(&tok_per_s), "{tok_per_s}");
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
        // 160 all-reduces at 8 µs dominate a single decode's traffic.
        assert!(
            (c.communication_s - 160.0 * 8.0e-6).abs() < 1e-4,
            "{}",
            c.communication_s
        );
        // Each GPU reads half the 141 GB of weights.
        assert!(c.memory_s > 70.6e9 / (0.8 * 4.8e12));
        let single = find("h100-llama3-8b").unwrap();
        assert_eq!(
            step_cost(single, &decode_batch(1, 1000)).communication_s,
            0.0
        );
    }
}
