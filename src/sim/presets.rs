//! Simulated hardware × model presets, with the published figures they use.
//!
//! A preset is everything the cost model and the scheduler need, and nothing
//! else: the GPU's memory, HBM bandwidth and dense bf16 peak; the model's
//! shape (layers, hidden size, KV heads, head dim, parameter count); the
//! serving configuration (tensor parallelism, vLLM's scheduler limits and
//! memory utilisation); and the efficiencies that turn datasheet peaks into
//! achieved rates. Hardware and model figures are published numbers (sources
//! beside each preset); efficiencies and overheads are estimates, documented
//! as such, calibrated so the single-stream decode speed of the presets lands
//! near what vLLM users report (see `h100_llama3_8b_is_near_published_vllm_figures`).
//!
//! Memory sizes are the capacity the driver reports (`nvidia-smi`), in bytes,
//! because that is what vLLM's `--gpu-memory-utilization` is a fraction of.

use std::fmt::Write as _;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

/// One accelerator (all GPUs of a tensor-parallel group are alike).
#[derive(Debug, Clone, PartialEq)]
pub struct Hardware {
    /// Marketing name, for the card and `capcard sim --list`.
    pub name: &'static str,
    /// Device memory as reported by the driver, bytes.
    pub memory_bytes: f64,
    /// Peak HBM (or GDDR) bandwidth, bytes/s.
    pub memory_bandwidth_bytes_per_s: f64,
    /// Dense (no sparsity) bf16 tensor-core peak, FLOP/s.
    pub peak_bf16_flops_per_s: f64,
    /// GPU-to-GPU bandwidth per direction (NVLink, else PCIe), bytes/s; used
    /// only by tensor parallelism.
    pub interconnect_bytes_per_s: f64,
}

/// A dense decoder-only transformer (Llama-style, grouped-query attention).
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The id served by `GET /v1/models`.
    pub served_name: &'static str,
    pub layers: u32,
    pub hidden: u32,
    pub attention_heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Total parameters (all of them are active: dense model).
    pub params: f64,
    pub vocab: u32,
    /// Longest context the model supports, tokens.
    pub max_context_tokens: u32,
    /// Bytes per weight and per KV element (2 for bf16).
    pub bytes_per_value: f64,
}

/// How far real kernels stay from the datasheet, and the fixed costs.
/// These are estimates, not published figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    /// Achieved / peak FLOP/s for the step's matmuls and attention.
    pub compute: f64,
    /// Achieved / peak memory bandwidth for weight and KV reads.
    pub memory: f64,
    /// Fixed cost of one engine step (scheduling, kernel launches, sampling
    /// set-up), seconds.
    pub step_overhead_s: f64,
    /// Cost per sequence in the step (sampling, detokenising, output
    /// processing on the CPU), seconds.
    pub per_seq_overhead_s: f64,
    /// Latency of one all-reduce across the tensor-parallel group, seconds
    /// (only used when `tensor_parallel > 1`).
    pub allreduce_latency_s: f64,
}

/// A simulated deployment: one replica of `model` on `tensor_parallel` GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// The name used by `sim PRESET` and `capcard sim --preset`.
    pub name: &'static str,
    pub hardware: Hardware,
    pub tensor_parallel: u32,
    pub model: Model,
    /// vLLM `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: f64,
    /// Memory per GPU kept for activations, CUDA graphs and the runtime,
    /// bytes (vLLM measures it with a profiling run; this is an estimate).
    pub activation_reserve_bytes: f64,
    /// vLLM `--max-num-seqs`: most sequences in one step.
    pub max_num_seqs: u32,
    /// vLLM `--max-num-batched-tokens`: token budget of one step (chunked prefill).
    pub max_num_batched_tokens: u32,
    /// KV-cache block size in tokens (vLLM's default, 16).
    pub block_size: u32,
    /// Automatic prefix caching (vLLM's default: on).
    pub prefix_caching: bool,
    /// Chunked prefill (vLLM V1's default: on). Off, a prompt is prefilled
    /// whole in one step.
    pub chunked_prefill: bool,
    /// KV-cache capacity in tokens when set, instead of the one derived
    /// from memory (a `kv-cache-tokens` knob, or a calibrated CPU engine).
    pub kv_cache_tokens_override: Option<u64>,
    pub efficiency: Efficiency,
}

impl Preset {
    /// Weight bytes held by each GPU.
    pub fn weight_bytes_per_gpu(&self) -> f64 {
        self.model.params * self.model.bytes_per_value / f64::from(self.tensor_parallel)
    }

    /// KV-cache bytes one token occupies on each GPU (K and V, every layer,
    /// this GPU's share of the KV heads).
    pub fn kv_bytes_per_token_per_gpu(&self) -> f64 {
        let m = &self.model;
        2.0 * f64::from(m.layers)
            * f64::from(m.kv_heads)
            * f64::from(m.head_dim)
            * m.bytes_per_value
            / f64::from(self.tensor_parallel)
    }

    /// KV-cache blocks: (memory × utilisation − weights − reserve) / block
    /// bytes, or the override's tokens in whole blocks.
    pub fn kv_capacity_blocks(&self) -> u32 {
        if let Some(tokens) = self.kv_cache_tokens_override {
            return (tokens / u64::from(self.block_size.max(1))).min(u64::from(u32::MAX)) as u32;
        }
        let free = self.hardware.memory_bytes * self.gpu_memory_utilization
            - self.weight_bytes_per_gpu()
            - self.activation_reserve_bytes;
        let block_bytes = self.kv_bytes_per_token_per_gpu() * f64::from(self.block_size);
        if free <= 0.0 {
            return 0;
        }
        // Truncation is the point: a partial block does not exist.
        (free / block_bytes).floor().min(f64::from(u32::MAX)) as u32
    }

    /// KV-cache capacity in tokens (whole blocks).
    pub fn kv_capacity_tokens(&self) -> u64 {
        u64::from(self.kv_capacity_blocks()) * u64::from(self.block_size)
    }

    /// Longest prompt + output accepted: the model's context, capped so one
    /// request always fits in the KV cache on its own (vLLM refuses to start
    /// otherwise).
    pub fn max_model_len(&self) -> u32 {
        let cap = u32::try_from(self.kv_capacity_tokens()).unwrap_or(u32::MAX);
        self.model.max_context_tokens.min(cap)
    }
}

/// Meta-Llama-3-8B (`config.json` on the Hugging Face model page: 32 layers,
/// hidden 4096, 32 heads, 8 KV heads, head dim 128, vocab 128256, context
/// 8192; 8.03 B parameters per the model card), bf16.
const LLAMA3_8B: Model = Model {
    served_name: "sim/llama-3-8b",
    layers: 32,
    hidden: 4096,
    attention_heads: 32,
    kv_heads: 8,
    head_dim: 128,
    params: 8.03e9,
    vocab: 128_256,
    max_context_tokens: 8192,
    bytes_per_value: 2.0,
};

/// Meta-Llama-3-70B (`config.json`: 80 layers, hidden 8192, 64 heads, 8 KV
/// heads, head dim 128, vocab 128256, context 8192; 70.6 B parameters per the
/// model card), bf16.
const LLAMA3_70B: Model = Model {
    served_name: "sim/llama-3-70b",
    layers: 80,
    hidden: 8192,
    attention_heads: 64,
    kv_heads: 8,
    head_dim: 128,
    params: 70.6e9,
    vocab: 128_256,
    max_context_tokens: 8192,
    bytes_per_value: 2.0,
};

/// Efficiencies for datacenter GPUs running vLLM with CUDA graphs.
/// Memory 0.8: a single A100-40GB stream of Llama-3.1-8B decodes at ~75 tok/s,
/// "roughly 77% of the GPU's memory-bandwidth ceiling" (J. Musgrave, "vLLM
/// throughput-latency sweep on NVIDIA A100", vLLM 0.23). Compute 0.6: a
/// typical achieved fraction of dense bf16 peak for large prefill GEMMs.
/// Overheads: ~1 ms per step and ~10 µs per sequence of scheduler, sampling
/// and output processing (estimates).
const DATACENTER_EFFICIENCY: Efficiency = Efficiency {
    compute: 0.6,
    memory: 0.8,
    step_overhead_s: 1.0e-3,
    per_seq_overhead_s: 10.0e-6,
    allreduce_latency_s: 8.0e-6,
};

/// vLLM's V1 defaults for the OpenAI server on GPUs with ≥ 70 GiB that are not
/// A100 (`EngineArgs.get_batch_defaults` in `vllm/engine/arg_utils.py`):
/// 8192 batched tokens, 1024 sequences. Other GPUs get 2048 and 256.
const LARGE_GPU_BATCHED_TOKENS: u32 = 8192;
const LARGE_GPU_MAX_SEQS: u32 = 1024;
const OTHER_GPU_BATCHED_TOKENS: u32 = 2048;
const OTHER_GPU_MAX_SEQS: u32 = 256;

static PRESETS: [Preset; 5] = [
    // NVIDIA H100 SXM5 datasheet: 80 GB HBM3 (nvidia-smi: 81559 MiB),
    // 3.35 TB/s, bf16 1,979 TFLOPS with sparsity = 989 TFLOPS dense,
    // NVLink 900 GB/s (450 GB/s per direction).
    Preset {
        name: "h100-llama3-8b",
        hardware: Hardware {
            name: "NVIDIA H100 SXM 80GB",
            memory_bytes: 81_559.0 * MIB,
            memory_bandwidth_bytes_per_s: 3.35e12,
            peak_bf16_flops_per_s: 989.0e12,
            interconnect_bytes_per_s: 450.0e9,
        },
        tensor_parallel: 1,
        model: LLAMA3_8B,
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 3.0 * GIB,
        max_num_seqs: LARGE_GPU_MAX_SEQS,
        max_num_batched_tokens: LARGE_GPU_BATCHED_TOKENS,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        efficiency: DATACENTER_EFFICIENCY,
    },
    // NVIDIA H200 SXM datasheet: 141 GB HBM3e (nvidia-smi: 143771 MiB),
    // 4.8 TB/s, bf16 989 TFLOPS dense, NVLink 900 GB/s. Two GPUs, TP=2.
    Preset {
        name: "h200-llama3-70b-tp2",
        hardware: Hardware {
            name: "NVIDIA H200 SXM 141GB",
            memory_bytes: 143_771.0 * MIB,
            memory_bandwidth_bytes_per_s: 4.8e12,
            peak_bf16_flops_per_s: 989.0e12,
            interconnect_bytes_per_s: 450.0e9,
        },
        tensor_parallel: 2,
        model: LLAMA3_70B,
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 4.0 * GIB,
        max_num_seqs: LARGE_GPU_MAX_SEQS,
        max_num_batched_tokens: LARGE_GPU_BATCHED_TOKENS,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        efficiency: DATACENTER_EFFICIENCY,
    },
    // NVIDIA A100 80GB SXM datasheet: 80 GB HBM2e (nvidia-smi: 81920 MiB),
    // 2,039 GB/s, bf16 312 TFLOPS dense, NVLink 600 GB/s.
    Preset {
        name: "a100-llama3-8b",
        hardware: Hardware {
            name: "NVIDIA A100 SXM 80GB",
            memory_bytes: 81_920.0 * MIB,
            memory_bandwidth_bytes_per_s: 2.039e12,
            peak_bf16_flops_per_s: 312.0e12,
            interconnect_bytes_per_s: 300.0e9,
        },
        tensor_parallel: 1,
        model: LLAMA3_8B,
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 2.0 * GIB,
        max_num_seqs: OTHER_GPU_MAX_SEQS,
        max_num_batched_tokens: OTHER_GPU_BATCHED_TOKENS,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        efficiency: DATACENTER_EFFICIENCY,
    },
    // NVIDIA L4 datasheet: 24 GB GDDR6 (nvidia-smi: 23034 MiB), 300 GB/s,
    // bf16 242 TFLOPS with sparsity = 121 TFLOPS dense, PCIe Gen4 x16
    // (32 GB/s per direction, no NVLink). Llama-3-8B bf16 leaves only a few
    // GB for the KV cache here, which is the point of this preset.
    Preset {
        name: "l4-llama3-8b",
        hardware: Hardware {
            name: "NVIDIA L4 24GB",
            memory_bytes: 23_034.0 * MIB,
            memory_bandwidth_bytes_per_s: 300.0e9,
            peak_bf16_flops_per_s: 121.0e12,
            interconnect_bytes_per_s: 32.0e9,
        },
        tensor_parallel: 1,
        model: LLAMA3_8B,
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 1.0 * GIB,
        max_num_seqs: OTHER_GPU_MAX_SEQS,
        max_num_batched_tokens: OTHER_GPU_BATCHED_TOKENS,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        efficiency: DATACENTER_EFFICIENCY,
    },
    // Made up, for tests and demos: a ~0.1 B-parameter model on a slow
    // accelerator, so a 64-in/64-out request takes ~150 ms alone, throughput
    // saturates around 16 concurrent streams (the roofline crossover
    // weights / per-token compute) with a hard cap at 32, and the KV cache
    // holds ~8k tokens, so a handful of 1,000-token prompts preempt.
    Preset {
        name: "tiny",
        hardware: Hardware {
            name: "simulated tiny accelerator",
            memory_bytes: 288.0 * MIB,
            memory_bandwidth_bytes_per_s: 100.0e9,
            peak_bf16_flops_per_s: 2.0e12,
            interconnect_bytes_per_s: 32.0e9,
        },
        tensor_parallel: 1,
        model: Model {
            served_name: "sim/tiny",
            layers: 8,
            hidden: 1024,
            attention_heads: 16,
            kv_heads: 4,
            head_dim: 64,
            params: 0.1e9,
            vocab: 32_000,
            max_context_tokens: 2048,
            bytes_per_value: 2.0,
        },
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 4.0 * MIB,
        max_num_seqs: 32,
        max_num_batched_tokens: 512,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        efficiency: Efficiency {
            compute: 0.6,
            memory: 0.8,
            step_overhead_s: 0.3e-3,
            per_seq_overhead_s: 5.0e-6,
            allreduce_latency_s: 8.0e-6,
        },
    },
];

/// Names accepted by `sim PRESET` and `capcard sim --preset`.
pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// All presets, in `--list` order.
pub fn all() -> &'static [Preset] {
    &PRESETS
}

/// The preset called `name`, if any.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The `capcard sim --list` table.
pub fn describe_all() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<26} {:<16} {:>11} {:>11} {:>12} {:>12} {:>9}",
        "PRESET", "HARDWARE", "MODEL", "MEMORY", "BANDWIDTH", "BF16 PEAK", "KV TOKENS", "MAX SEQS"
    );
    for p in all() {
        let gpus = if p.tensor_parallel > 1 {
            format!("{}x {}", p.tensor_parallel, p.hardware.name)
        } else {
            p.hardware.name.to_string()
        };
        let _ = writeln!(
            out,
            "{:<20} {:<26} {:<16} {:>7.1} GiB {:>6.2} TB/s {:>6.0} TF/s {:>12} {:>9}",
            p.name,
            gpus,
            p.model.served_name.trim_start_matches("sim/"),
            p.hardware.memory_bytes / GIB,
            p.hardware.memory_bandwidth_bytes_per_s / 1e12,
            p.hardware.peak_bf16_flops_per_s / 1e12,
            p.kv_capacity_tokens(),
            p.max_num_seqs,
        );
    }
    out.push_str(
        "Memory, bandwidth and peak are per GPU; KV tokens is the cache capacity of the replica.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_found_and_unique() {
        let names = names();
        assert_eq!(names.len(), 5);
        for n in &names {
            assert_eq!(find(n).map(|p| p.name), Some(*n));
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert!(find("h100").is_none());
    }

    #[test]
    fn llama3_8b_kv_bytes_per_token_is_128_kib() {
        let p = find("h100-llama3-8b").unwrap();
        assert_eq!(p.kv_bytes_per_token_per_gpu(), 131_072.0);
        // TP2 halves the KV heads per GPU: 70B has 80 layers × 4 heads × 128 × 2 × 2.
        let p = find("h200-llama3-70b-tp2").unwrap();
        assert_eq!(p.kv_bytes_per_token_per_gpu(), 163_840.0);
    }

    #[test]
    fn kv_capacities_are_in_the_published_range() {
        // vLLM logs ~400-470k KV tokens for Llama-3-8B bf16 on an 80 GB GPU at 0.9.
        let h100 = find("h100-llama3-8b").unwrap().kv_capacity_tokens();
        assert!((380_000..=470_000).contains(&h100), "{h100}");
        // An L4 holds the 16 GB of weights and only a few GB of cache.
        let l4 = find("l4-llama3-8b").unwrap().kv_capacity_tokens();
        assert!((15_000..=50_000).contains(&l4), "{l4}");
        let tiny = find("tiny").unwrap();
        assert!((6_000..=10_000).contains(&tiny.kv_capacity_tokens()));
        assert_eq!(tiny.max_model_len(), 2048);
        for p in all() {
            assert!(p.max_model_len() >= 2048, "{}", p.name);
            assert!(u64::from(p.max_model_len()) <= p.kv_capacity_tokens());
        }
    }

    #[test]
    fn list_has_one_line_per_preset() {
        let table = describe_all();
        for p in all() {
            assert!(table.contains(p.name));
        }
        assert!(table.contains("2x NVIDIA H200"));
        assert_eq!(table.lines().count(), all().len() + 2);
    }
}
