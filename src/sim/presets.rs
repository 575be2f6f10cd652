//! Simulated hardware × model presets, with the published figures they use.
//!
//! A preset is everything the cost model and the scheduler need, and nothing
//! else: the GPU's memory, HBM bandwidth and dense bf16 peak; the model's
//! shape (layers, hidden size, KV heads, head dim, parameter count); the
//! serving configuration (tensor parallelism, vLLM's scheduler limits and
//! memory utilisation); and the efficiencies that turn datasheet peaks into
//! achieved rates. Hardware and model figures are published numbers (sources
//! beside each constant); efficiencies and overheads are estimates,
//! documented as such, fitted so that the presets land within ±25% of the
//! published throughput figures of [`PUBLISHED`] (single stream, small batch
//! and saturated, each at its own workload), which
//! `every_preset_is_within_25_percent_of_its_published_figures` checks by
//! running the engine in virtual time.
//!
//! Memory sizes are the capacity the driver reports (`nvidia-smi`), in bytes,
//! because that is what vLLM's `--gpu-memory-utilization` is a fraction of.

use std::fmt::Write as _;

use super::answer::Answers;
use super::queue::{QueueModel, Service};

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
    /// Achieved / peak memory bandwidth for streaming the weights.
    pub memory: f64,
    /// Paged-attention KV reads as a fraction of the weight-streaming rate
    /// (`memory`): decode kernels gather 16-token blocks scattered over HBM
    /// and reach less of the bandwidth than a GEMM reading contiguous
    /// weights.
    pub kv_read: f64,
    /// Fraction of the attention phase hidden under the weight matmuls: 0
    /// when the two run one after the other (vLLM on a GPU), 1 for a single
    /// `max(all FLOPs, all bytes)` roofline (see [`super::cost`]).
    pub attention_overlap: f64,
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
    /// vLLM `--max-model-len` when set (the target's `max-context`): the
    /// window the engine accepts, instead of the model's own context.
    pub max_model_len_override: Option<u32>,
    pub efficiency: Efficiency,
    /// What the answers look like (reasoning, tokens per streamed event):
    /// [`Answers::PLAIN`] for every preset, set by a target's knobs.
    pub answers: Answers,
    /// `sim queue`: the engine is a FIFO queue of slots with a stated
    /// service time ([`super::queue`]) instead of a batching scheduler; the
    /// hardware, model and efficiencies then only bound the context.
    pub queue: Option<QueueModel>,
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

    /// Longest prompt + output accepted: `--max-model-len` when set, else
    /// the model's context capped so one request always fits in the KV cache
    /// on its own (vLLM refuses to start otherwise).
    pub fn max_model_len(&self) -> u32 {
        if let Some(len) = self.max_model_len_override {
            return len;
        }
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

/// Meta-Llama-3.1-8B(-Instruct) (`config.json`: the architecture of
/// Llama-3-8B, with RoPE scaling to a 131,072-token context), bf16. vLLM
/// serves it with `max_model_len` 131072 when the KV cache holds that many
/// tokens.
const LLAMA31_8B: Model = Model {
    served_name: "sim/llama-3.1-8b",
    max_context_tokens: 131_072,
    ..LLAMA3_8B
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

/// Efficiencies for datacenter GPUs running vLLM (V1, CUDA graphs). All are
/// estimates, fitted together to the figures of [`PUBLISHED`] (each within
/// ±25%: `every_preset_is_within_25_percent_of_its_published_figures`):
/// - `compute` 0.7: the achieved fraction of dense bf16 peak for large
///   prefill and batched-decode GEMMs (big bf16 GEMMs reach 70–80% of peak);
/// - `memory` 0.8: weight streaming, refined per architecture below (A100
///   0.85, H100/H200 0.75); the L4, with no figure, keeps 0.8;
/// - `kv_read` 0.75 of `memory` (60% of peak): paged-attention decode
///   kernels gather the cache in 16-token blocks scattered over HBM and reach
///   less of the bandwidth than a GEMM streaming contiguous weights; with
///   `attention_overlap` 0 (attention runs after the matmuls of its layer, on
///   the same stream, so the two phases add) this is what brings an H100
///   serving Llama-3-8B to 1,024 streams down from the ~18–20k output tok/s of
///   a single overlapped roofline to near the published ~12.5k;
/// - `step_overhead_s` 1.5 ms: the CPU side of a step that the GPU waits for
///   (scheduling, input preparation, sampling, kernel launches). vLLM's own
///   profile of Llama-3-8B on one H100 found the CPU, not the GPU, bounding a
///   step before v0.6 ("vLLM v0.6.0: 2.7x Throughput Improvement and 5x
///   Latency Reduction", https://blog.vllm.ai/2024/09/05/perf-update.html);
///   1.5 ms is what the single-stream and batch-8 figures leave once the
///   weights are streamed;
/// - `per_seq_overhead_s` 10 µs: per sequence in the step (sampling, output
///   processing);
/// - `allreduce_latency_s` 20 µs: one all-reduce of a decode step's
///   activations over NVLink, kernel and the group's barrier included: what
///   vLLM's TP4 latency test of Llama-3-70B on H200s leaves (16.2 ms per
///   step, of which the weights stream in 9.8 ms and 160 all-reduces take
///   the rest with the step overhead).
const DATACENTER_EFFICIENCY: Efficiency = Efficiency {
    compute: 0.7,
    memory: 0.8,
    kv_read: 0.75,
    attention_overlap: 0.0,
    step_overhead_s: 1.5e-3,
    per_seq_overhead_s: 10.0e-6,
    allreduce_latency_s: 20.0e-6,
};

/// Hopper (H100, H200): small-batch decode streams the weights at ~75% of the
/// HBM3 peak, below Ampere's fraction of HBM2 (an estimate fitted to the
/// single-stream and batch-8 figures of [`PUBLISHED`] measured on an H100
/// and an H200: 9.0 and 6.5 ms per step, where 80% of peak would give 7.5 and
/// 5.8 with the step overhead, and 75% gives 7.9 and 6.1).
const HOPPER_EFFICIENCY: Efficiency = Efficiency {
    memory: 0.75,
    ..DATACENTER_EFFICIENCY
};

/// Ampere (A100): weights stream at ~85% of the HBM2 peak: Musgrave's 75
/// tok/s on an A100-40GB is 77% of the ceiling *including* the per-step
/// overhead, so the streaming itself runs faster than that (an estimate).
const AMPERE_EFFICIENCY: Efficiency = Efficiency {
    memory: 0.85,
    ..DATACENTER_EFFICIENCY
};

/// vLLM's V1 defaults for the OpenAI server on GPUs with ≥ 70 GiB that are not
/// A100 (`EngineArgs.get_batch_defaults` in `vllm/engine/arg_utils.py`):
/// 8192 batched tokens, 1024 sequences. Other GPUs get 2048 and 256.
const LARGE_GPU_BATCHED_TOKENS: u32 = 8192;
const LARGE_GPU_MAX_SEQS: u32 = 1024;
const OTHER_GPU_BATCHED_TOKENS: u32 = 2048;
const OTHER_GPU_MAX_SEQS: u32 = 256;

/// NVIDIA H100 SXM5 datasheet: 80 GB HBM3 (nvidia-smi: 81559 MiB), 3.35 TB/s,
/// bf16 1,979 TFLOPS with sparsity = 989 TFLOPS dense, NVLink 900 GB/s (450
/// GB/s per direction).
pub const H100_SXM: Hardware = Hardware {
    name: "NVIDIA H100 SXM 80GB",
    memory_bytes: 81_559.0 * MIB,
    memory_bandwidth_bytes_per_s: 3.35e12,
    peak_bf16_flops_per_s: 989.0e12,
    interconnect_bytes_per_s: 450.0e9,
};

/// NVIDIA H200 SXM datasheet: 141 GB HBM3e (nvidia-smi: 143771 MiB), 4.8
/// TB/s, bf16 989 TFLOPS dense, NVLink 900 GB/s.
pub const H200_SXM: Hardware = Hardware {
    name: "NVIDIA H200 SXM 141GB",
    memory_bytes: 143_771.0 * MIB,
    memory_bandwidth_bytes_per_s: 4.8e12,
    peak_bf16_flops_per_s: 989.0e12,
    interconnect_bytes_per_s: 450.0e9,
};

/// NVIDIA A100 80GB SXM datasheet: 80 GB HBM2e (nvidia-smi: 81920 MiB),
/// 2,039 GB/s, bf16 312 TFLOPS dense, NVLink 600 GB/s.
pub const A100_SXM_80GB: Hardware = Hardware {
    name: "NVIDIA A100 SXM 80GB",
    memory_bytes: 81_920.0 * MIB,
    memory_bandwidth_bytes_per_s: 2.039e12,
    peak_bf16_flops_per_s: 312.0e12,
    interconnect_bytes_per_s: 300.0e9,
};

/// NVIDIA A100 40GB SXM datasheet: 40 GB HBM2 (nvidia-smi: 40960 MiB),
/// 1,555 GB/s, bf16 312 TFLOPS dense, NVLink 600 GB/s. No preset: the card
/// some of [`PUBLISHED`]'s A100 figures were measured on.
pub const A100_SXM_40GB: Hardware = Hardware {
    name: "NVIDIA A100 SXM 40GB",
    memory_bytes: 40_960.0 * MIB,
    memory_bandwidth_bytes_per_s: 1.555e12,
    peak_bf16_flops_per_s: 312.0e12,
    interconnect_bytes_per_s: 300.0e9,
};

/// NVIDIA L4 datasheet: 24 GB GDDR6 (nvidia-smi: 23034 MiB), 300 GB/s, bf16
/// 242 TFLOPS with sparsity = 121 TFLOPS dense, PCIe Gen4 x16 (32 GB/s per
/// direction, no NVLink).
pub const L4: Hardware = Hardware {
    name: "NVIDIA L4 24GB",
    memory_bytes: 23_034.0 * MIB,
    memory_bandwidth_bytes_per_s: 300.0e9,
    peak_bf16_flops_per_s: 121.0e12,
    interconnect_bytes_per_s: 32.0e9,
};

/// The made-up `tiny` accelerator's efficiencies (the `queue` preset
/// keeps them too: it never runs the cost model).
const TINY_EFFICIENCY: Efficiency = Efficiency {
    compute: 0.6,
    memory: 0.8,
    kv_read: 1.0,
    attention_overlap: 1.0,
    step_overhead_s: 0.3e-3,
    per_seq_overhead_s: 5.0e-6,
    allreduce_latency_s: 8.0e-6,
};

static PRESETS: [Preset; 8] = [
    // Published figures: PUBLISHED (single stream, batch 8, saturated).
    Preset {
        name: "h100-llama3-8b",
        hardware: H100_SXM,
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
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: HOPPER_EFFICIENCY,
    },
    // Two H200s, TP=2. Published figures: PUBLISHED (vLLM's batch-8 latency
    // test of Llama-3-70B, run on 4 H200s).
    Preset {
        name: "h200-llama3-70b-tp2",
        hardware: H200_SXM,
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
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: HOPPER_EFFICIENCY,
    },
    // Published figures: PUBLISHED (single stream and c=8, measured on the
    // 40GB card).
    Preset {
        name: "a100-llama3-8b",
        hardware: A100_SXM_80GB,
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
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: AMPERE_EFFICIENCY,
    },
    // Llama-3.1-8B: Llama-3-8B's weights and speed (the same PUBLISHED
    // figures hold) with its 128k context, for long prompts and agents.
    Preset {
        name: "h100-llama3.1-8b",
        hardware: H100_SXM,
        tensor_parallel: 1,
        model: LLAMA31_8B,
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 3.0 * GIB,
        max_num_seqs: LARGE_GPU_MAX_SEQS,
        max_num_batched_tokens: LARGE_GPU_BATCHED_TOKENS,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: HOPPER_EFFICIENCY,
    },
    Preset {
        name: "a100-llama3.1-8b",
        hardware: A100_SXM_80GB,
        tensor_parallel: 1,
        model: LLAMA31_8B,
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 2.0 * GIB,
        max_num_seqs: OTHER_GPU_MAX_SEQS,
        max_num_batched_tokens: OTHER_GPU_BATCHED_TOKENS,
        block_size: 16,
        prefix_caching: true,
        chunked_prefill: true,
        kv_cache_tokens_override: None,
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: AMPERE_EFFICIENCY,
    },
    // Llama-3-8B bf16 leaves only a few GB for the KV cache on an L4, which
    // is the point of this preset. No published vLLM bf16 figure found yet
    // (see PUBLISHED): its efficiencies are the datacenter ones.
    Preset {
        name: "l4-llama3-8b",
        hardware: L4,
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
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: DATACENTER_EFFICIENCY,
    },
    // Made up, for tests and demos: a ~0.1 B-parameter model on a slow
    // accelerator, so a 64-in/64-out request takes ~150 ms alone, throughput
    // saturates around 16 concurrent streams (the roofline crossover
    // weights / per-token compute) with a hard cap at 32, and the KV cache
    // holds ~8k tokens, so a handful of 1,000-token prompts preempt. It keeps
    // the single overlapped roofline (`kv_read` 1, `attention_overlap` 1), so
    // these figures, which many tests rely on, are those it was designed with.
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
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: None,
        efficiency: TINY_EFFICIENCY,
    },
    // Not an engine: a queue with a known answer (`sim queue`, see
    // [`super::queue`]), M/M/1 with a 100 ms mean until its knobs say
    // otherwise. Queueing theory, or a long run of the same queue, gives
    // where an SLO on it stops holding: what `capcard audit` checks the
    // Cr_open method against. The model only bounds the context.
    Preset {
        name: "queue",
        hardware: Hardware {
            name: "none: a simulated FIFO queue",
            memory_bytes: 288.0 * MIB,
            memory_bandwidth_bytes_per_s: 100.0e9,
            peak_bf16_flops_per_s: 2.0e12,
            interconnect_bytes_per_s: 32.0e9,
        },
        tensor_parallel: 1,
        model: Model {
            served_name: "sim/queue",
            layers: 1,
            hidden: 64,
            attention_heads: 1,
            kv_heads: 1,
            head_dim: 64,
            params: 1.0e6,
            vocab: 32_000,
            max_context_tokens: 32_768,
            bytes_per_value: 2.0,
        },
        gpu_memory_utilization: 0.9,
        activation_reserve_bytes: 4.0 * MIB,
        max_num_seqs: 1,
        max_num_batched_tokens: 32_768,
        block_size: 16,
        prefix_caching: false,
        chunked_prefill: true,
        kv_cache_tokens_override: Some(65_536),
        max_model_len_override: None,
        answers: Answers::PLAIN,
        queue: Some(QueueModel {
            slots: 1,
            service: Service::Exponential { mean_s: 0.1 },
            cliff: None,
        }),
        efficiency: TINY_EFFICIENCY,
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

/// A published output-throughput figure a preset is checked against, at the
/// figure's own workload: `concurrency` clients in a closed loop, each
/// sending `input_tokens`-token prompts for exactly `output_tokens` tokens
/// (as `vllm bench serve --max-concurrency` with `--ignore-eos` does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PublishedFigure {
    /// The preset whose model, serving configuration and efficiencies the
    /// figure checks.
    pub preset: &'static str,
    /// Which point of the curve: "single stream", "batch 8", "saturated", …
    pub point: &'static str,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub concurrency: u32,
    /// Output tokens per second across all streams.
    pub output_tok_per_s: f64,
    /// The card the figure was measured on when it is not the preset's (the
    /// check then runs the preset on that card).
    pub hardware: Option<&'static Hardware>,
    /// The tensor parallelism it was measured at when it is not the preset's.
    pub tensor_parallel: Option<u32>,
    /// Title and URL, and how the figure was read from it.
    pub source: &'static str,
}

impl PublishedFigure {
    /// The deployment the figure was measured on: the preset, on the
    /// figure's card and parallelism when they differ.
    pub fn deployment(&self) -> Option<Preset> {
        let mut p = find(self.preset)?.clone();
        if let Some(hw) = self.hardware {
            p.hardware = hw.clone();
        }
        if let Some(tp) = self.tensor_parallel {
            p.tensor_parallel = tp;
        }
        Some(p)
    }
}

/// Published figures for the presets (the `tiny` preset is made up and has
/// none; no bf16 vLLM figure for Llama-3-8B on an L4 has been found yet).
/// Llama-3 and Llama-3.1 8B/70B have the same shapes (Llama-3.1 only raises
/// the context length), so figures for either apply.
pub const PUBLISHED: &[PublishedFigure] = &[
    // SGLang `bench_latency`, Meta-Llama-3-8B bf16 on one H100 80GB, batch 1,
    // 128 prompt tokens, CUDA graphs: decode 9.0 ms per token, 110.9–111.1
    // token/s after warm-up (GitHub gist by jerryzh168, "baseline (no tp):
    // python3 -m sglang.bench_latency --model meta-llama/Meta-Llama-3-8B
    // --batch-size 1 --input 128 --output 8", 2024-09-26,
    // https://gist.github.com/jerryzh168/caa3f3a87f403091b238f85f7b22c20e).
    // SGLang, not vLLM, but batch-1 decode is the weight stream either way.
    // A decode rate: simulated with 128 output tokens, so the prefill is <2%
    // of the time.
    PublishedFigure {
        preset: "h100-llama3-8b",
        point: "single stream",
        input_tokens: 128,
        output_tokens: 128,
        concurrency: 1,
        output_tok_per_s: 111.0,
        hardware: None,
        tensor_parallel: None,
        source: "gist by jerryzh168, \"sglang.bench_latency --model meta-llama/Meta-Llama-3-8B \
                 --batch-size 1\" (SGLang), \
                 https://gist.github.com/jerryzh168/caa3f3a87f403091b238f85f7b22c20e",
    },
    // vLLM's nightly performance benchmark, latency test: Llama-3.1-8B bf16,
    // TP1, batch of 8, 32 prompt tokens, 128 output tokens, mean end-to-end
    // latency 833.4 ms on an H200, so 8 × 128 / 0.8334 s = 1,229 output tok/s
    // ("Performance Benchmark", vLLM Buildkite build 9515,
    // https://buildkite.com/vllm/performance-benchmark/builds/9515). Run on
    // the H200 card: it checks the Hopper step overhead and weight streaming
    // at a small batch.
    PublishedFigure {
        preset: "h100-llama3-8b",
        point: "batch 8 (on H200)",
        input_tokens: 32,
        output_tokens: 128,
        concurrency: 8,
        output_tok_per_s: 8.0 * 128.0 / 0.833_421,
        hardware: Some(&H200_SXM),
        tensor_parallel: None,
        source: "vLLM \"Performance Benchmark\", Buildkite build 9515, latency_llama8B_tp1 on H200, \
                 https://buildkite.com/vllm/performance-benchmark/builds/9515",
    },
    // "Llama 3.1 8B (BF16) | 1x H100 80GB | ~12,500 tok/s | FlashInfer, 0.8
    // GPU util" (morphllm.com, "vLLM Benchmarks: Throughput, Latency, and the
    // Production Stack That Handles 10K req/s", April 2026,
    // https://www.morphllm.com/vllm-benchmarks).
    // The page does not state the workload; this is the anchor,
    // checked at its point: 1,024 concurrent streams of 128 in / 512 out.
    PublishedFigure {
        preset: "h100-llama3-8b",
        point: "saturated",
        input_tokens: 128,
        output_tokens: 512,
        concurrency: 1024,
        output_tok_per_s: 12_500.0,
        hardware: None,
        tensor_parallel: None,
        source: "morphllm.com, \"vLLM Benchmarks: Throughput, Latency, and the Production Stack\" \
                 (workload not stated; assumed 128 in / 512 out at c=1024), \
                 https://www.morphllm.com/vllm-benchmarks",
    },
    // vLLM 0.23, Llama-3.1-8B-Instruct bf16 on one A100 40GB (Lambda), `vllm bench
    // serve` random 1024 in / 128 out, --ignore-eos, --max-concurrency C:
    // "decode at one request per time runs at about 75 tokens/sec"
    // (J. Musgrave, "vLLM throughput-latency sweep on NVIDIA A100",
    // https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on). Run on
    // the 40GB card.
    PublishedFigure {
        preset: "a100-llama3-8b",
        point: "single stream (on A100 40GB)",
        input_tokens: 1024,
        output_tokens: 128,
        concurrency: 1,
        output_tok_per_s: 75.0,
        hardware: Some(&A100_SXM_40GB),
        tensor_parallel: None,
        source: "J. Musgrave, \"vLLM throughput-latency sweep on NVIDIA A100\", \
                 https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on",
    },
    // Same sweep: "Batching buys throughput almost for free up to a
    // concurrency of 8, a 6.6x gain" over 75 tok/s, so ~495 tok/s at C=8,
    // the knee of the curve.
    PublishedFigure {
        preset: "a100-llama3-8b",
        point: "c=8, the knee (on A100 40GB)",
        input_tokens: 1024,
        output_tokens: 128,
        concurrency: 8,
        output_tok_per_s: 6.6 * 75.0,
        hardware: Some(&A100_SXM_40GB),
        tensor_parallel: None,
        source: "J. Musgrave, \"vLLM throughput-latency sweep on NVIDIA A100\" (6.6x of 75 tok/s \
                 at C=8), https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on",
    },
    // vLLM's nightly latency test for Llama-3-70B bf16: batch of 8, 32 prompt
    // tokens, 128 output tokens, TP4 on H200s, mean end-to-end latency
    // 2,077.5 ms, so 8 × 128 / 2.0775 s = 493 output tok/s (vLLM Buildkite
    // build 9515, as above). Run at TP4: it checks the 70B model, the H200
    // and the all-reduce cost at a small batch.
    PublishedFigure {
        preset: "h200-llama3-70b-tp2",
        point: "batch 8 (at TP4)",
        input_tokens: 32,
        output_tokens: 128,
        concurrency: 8,
        output_tok_per_s: 8.0 * 128.0 / 2.077_53,
        hardware: None,
        tensor_parallel: Some(4),
        source: "vLLM \"Performance Benchmark\", Buildkite build 9515, latency_llama70B_tp4 on H200, \
                 https://buildkite.com/vllm/performance-benchmark/builds/9515",
    },
];

/// The `capcard sim --list` table.
pub fn describe_all() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<26} {:<16} {:>8} {:>11} {:>11} {:>12} {:>12} {:>9}",
        "PRESET",
        "HARDWARE",
        "MODEL",
        "CONTEXT",
        "MEMORY",
        "BANDWIDTH",
        "BF16 PEAK",
        "KV TOKENS",
        "MAX SEQS"
    );
    for p in all() {
        let gpus = if p.tensor_parallel > 1 {
            format!("{}x {}", p.tensor_parallel, p.hardware.name)
        } else {
            p.hardware.name.to_string()
        };
        let _ = writeln!(
            out,
            "{:<20} {:<26} {:<16} {:>8} {:>7.1} GiB {:>6.2} TB/s {:>6.0} TF/s {:>12} {:>9}",
            p.name,
            gpus,
            p.model.served_name.trim_start_matches("sim/"),
            p.max_model_len(),
            p.hardware.memory_bytes / GIB,
            p.hardware.memory_bandwidth_bytes_per_s / 1e12,
            p.hardware.peak_bf16_flops_per_s / 1e12,
            p.kv_capacity_tokens(),
            p.max_num_seqs,
        );
    }
    out.push_str(
        "Context is the longest prompt + output the engine accepts (vLLM's max_model_len; a \
         target's `max-context` lowers it); memory, bandwidth and peak are per GPU; KV tokens is \
         the cache capacity of the replica.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_found_and_unique() {
        let names = names();
        assert_eq!(names.len(), 8);
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

    /// Closed loop in virtual time (as `vllm bench serve --max-concurrency`):
    /// `concurrency` requests of `input` distinct prompt tokens and exactly
    /// `output` tokens each, a new one submitted the moment one finishes;
    /// output tokens/s over the requests after the first quarter.
    pub(crate) fn closed_loop_tok_s(
        preset: &Preset,
        concurrency: u64,
        input: u32,
        output: u32,
        total: u64,
    ) -> f64 {
        use crate::hash::mix;
        use crate::sim::{Engine, EngineRequest, RequestId};
        use std::time::Duration;
        let request = |id: u64| EngineRequest {
            id: RequestId(id),
            prompt: (0..input)
                .map(|i| (mix(id + 1_000_000, u64::from(i)) % u64::from(preset.model.vocab)) as u32)
                .collect(),
            max_tokens: output,
            min_tokens: 0,
            ignore_eos: true,
            priority: 0,
        };
        let mut engine = Engine::new(preset, 1);
        let mut now = Duration::ZERO;
        let mut next_id = 0u64;
        for _ in 0..concurrency {
            engine.submit(request(next_id), now).unwrap();
            next_id += 1;
        }
        let warmup = (total / 4).max(1);
        let mut finished = 0u64;
        let mut start: Option<Duration> = None;
        let mut tokens = 0u64;
        while finished < total {
            let out = engine.step(now);
            now = out.ends_at();
            if start.is_some() {
                tokens += out.emitted.len() as u64;
            }
            for _ in out.emitted.iter().filter(|e| e.finish.is_some()) {
                finished += 1;
                engine.submit(request(next_id), now).unwrap();
                next_id += 1;
            }
            if start.is_none() && finished >= warmup {
                start = Some(now);
            }
        }
        tokens as f64 / (now - start.unwrap()).as_secs_f64()
    }

    /// Requests per closed-loop run: enough for a steady state after the
    /// first quarter (the warm-up), few enough to keep the test fast (the
    /// 1,024-stream point is two rounds of its streams).
    fn requests_for(concurrency: u32) -> u64 {
        (u64::from(concurrency) * 4).clamp(32, 2048)
    }

    /// The fidelity bound: every preset within ±25% of each figure
    /// it is checked against, in virtual time (fast, no clock). Run with
    /// `--nocapture` to see the table.
    #[test]
    fn every_preset_is_within_25_percent_of_its_published_figures() {
        let mut failures = Vec::new();
        for f in PUBLISHED {
            let p = f.deployment().expect("a known preset");
            let sim = closed_loop_tok_s(
                &p,
                u64::from(f.concurrency),
                f.input_tokens,
                f.output_tokens,
                requests_for(f.concurrency),
            );
            let ratio = sim / f.output_tok_per_s;
            eprintln!(
                "{:<20} {:<30} {:>4}/{:<4} c={:<5} published {:>8.0}  simulated {:>8.0} tok/s ({:+.0}%)",
                f.preset,
                f.point,
                f.input_tokens,
                f.output_tokens,
                f.concurrency,
                f.output_tok_per_s,
                sim,
                (ratio - 1.0) * 100.0
            );
            if !(0.75..=1.25).contains(&ratio) {
                failures.push(format!(
                    "{} {}: {sim:.0} vs {:.0}",
                    f.preset, f.point, f.output_tok_per_s
                ));
            }
        }
        assert!(failures.is_empty(), "{failures:?}");
    }

    #[test]
    fn published_figures_name_known_presets_and_sources() {
        for f in PUBLISHED {
            assert!(find(f.preset).is_some(), "{}", f.preset);
            assert!(f.source.contains("https://"), "{}", f.source);
            assert!(f.output_tok_per_s > 0.0 && f.concurrency >= 1);
        }
        // Every real preset has a figure except the L4 one (none found
        // yet) and the Llama-3.1 ones, which share Llama-3's weights, speed
        // and figures (only the window differs).
        for p in all() {
            let has = PUBLISHED.iter().any(|f| f.preset == p.name);
            let shares_figures = p.model.served_name == "sim/llama-3.1-8b";
            assert_eq!(
                has,
                !matches!(p.name, "tiny" | "queue" | "l4-llama3-8b") && !shares_figures,
                "{}",
                p.name
            );
            if shares_figures {
                let twin = find(&p.name.replace("llama3.1", "llama3")).unwrap();
                assert_eq!(twin.model.params, p.model.params);
                assert_eq!(twin.efficiency, p.efficiency);
                assert_eq!(twin.hardware, p.hardware);
            }
        }
    }
}
