//! A `sim` target's serving knobs applied to its preset (pure).
//!
//! A knob left unset keeps the preset's value. The result is refused
//! ([`KnobError`]) when vLLM would refuse to start with it: a tensor
//! parallelism that does not split the attention and KV heads evenly, or
//! weights that leave no room for a single KV-cache block at that
//! parallelism and memory utilisation.
//!
//! `kv-cache-tokens` replaces the capacity derived from memory (it is what
//! vLLM logs as "GPU KV cache size", measured on a real deployment), so with
//! it the memory check is skipped: the deployment it was measured on held
//! its weights. It still has to hold at least one whole block.
//!
//! `reasoning-tokens` and `tokens-per-event` change what the answers look
//! like, not the engine's speed: they go to the preset's
//! [`Answers`](super::answer::Answers).

use super::SimServing;
use super::presets::Preset;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Why a preset with these knobs cannot serve.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KnobError {
    #[error("`{knob}` must be {expected}, got {value}")]
    OutOfRange {
        knob: &'static str,
        expected: &'static str,
        value: String,
    },
    #[error(
        "tensor-parallel {tensor_parallel} does not divide {model}'s {attention_heads} attention \
         heads and {kv_heads} KV heads evenly (vLLM refuses to start); use a divisor of {kv_heads}"
    )]
    TensorParallel {
        model: &'static str,
        tensor_parallel: u32,
        attention_heads: u32,
        kv_heads: u32,
    },
    #[error(
        "{preset}: {weights_gib:.1} GiB of weights per GPU (tensor-parallel {tensor_parallel}) \
         and {reserve_gib:.1} GiB of activations leave no room for the KV cache in \
         {usable_gib:.1} GiB ({utilization} of {memory_gib:.1} GiB); raise tensor-parallel or \
         gpu-memory-utilization"
    )]
    WeightsDoNotFit {
        preset: &'static str,
        tensor_parallel: u32,
        weights_gib: f64,
        reserve_gib: f64,
        usable_gib: f64,
        memory_gib: f64,
        utilization: f64,
    },
    #[error(
        "`slots`, `service` and `cliff` are knobs of `sim queue`, not of `sim {preset}`; use \
         `sim queue {{ slots 4; service \"exponential\" mean=\"100ms\" }}` for a queue"
    )]
    QueueKnob { preset: &'static str },
    #[error("kv-cache-tokens {tokens} holds no whole KV-cache block of {block_size} tokens")]
    KvCacheTooSmall { tokens: u64, block_size: u32 },
    #[error(
        "max-context {tokens} is beyond {model}'s own context of {model_tokens} tokens (vLLM \
         refuses a max-model-len the model was not trained for); use at most {model_tokens}, or \
         a preset of a longer-context model (`capcard sim --list`)"
    )]
    ContextBeyondModel {
        tokens: u32,
        model: &'static str,
        model_tokens: u32,
    },
    #[error(
        "max-context {tokens} does not fit the KV cache of {cache_tokens} tokens (vLLM refuses to \
         start when one sequence of max-model-len cannot be held); lower it, or raise \
         gpu-memory-utilization or tensor-parallel"
    )]
    ContextBeyondCache { tokens: u32, cache_tokens: u64 },
}

fn fraction(knob: &'static str, value: f64) -> Result<f64, KnobError> {
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(KnobError::OutOfRange {
            knob,
            expected: "a fraction in (0, 1]",
            value: value.to_string(),
        })
    }
}

fn at_least_one(knob: &'static str, value: u32) -> Result<u32, KnobError> {
    if value >= 1 {
        Ok(value)
    } else {
        Err(KnobError::OutOfRange {
            knob,
            expected: "at least 1",
            value: value.to_string(),
        })
    }
}

/// `preset` with every knob `serving` sets, or why it cannot serve.
/// (`replicas`, `router` and the executor's settings are not the preset's:
/// [`super::SimConfig::for_target`] reads them.)
pub fn apply(preset: &Preset, serving: &SimServing) -> Result<Preset, KnobError> {
    let mut p = preset.clone();
    if let Some(v) = serving.compute_efficiency {
        p.efficiency.compute = fraction("compute-efficiency", v)?;
    }
    if let Some(v) = serving.memory_efficiency {
        p.efficiency.memory = fraction("memory-efficiency", v)?;
    }
    if let Some(d) = serving.step_overhead {
        p.efficiency.step_overhead_s = d.as_secs_f64();
    }
    if let Some(d) = serving.per_seq_overhead {
        p.efficiency.per_seq_overhead_s = d.as_secs_f64();
    }
    if let Some(v) = serving.gpu_memory_utilization {
        p.gpu_memory_utilization = fraction("gpu-memory-utilization", v)?;
    }
    if let Some(v) = serving.max_num_seqs {
        p.max_num_seqs = at_least_one("max-num-seqs", v)?;
    }
    if let Some(v) = serving.max_batched_tokens {
        p.max_num_batched_tokens = at_least_one("max-batched-tokens", v)?;
    }
    if let Some(v) = serving.prefix_caching {
        p.prefix_caching = v;
    }
    if let Some(v) = serving.chunked_prefill {
        p.chunked_prefill = v;
    }
    if let Some(tokens) = serving.kv_cache_tokens {
        p.kv_cache_tokens_override = Some(tokens);
    }
    if let Some(dist) = &serving.reasoning_tokens {
        p.answers.reasoning_tokens = Some(dist.clone());
    }
    if let Some(n) = serving.tokens_per_event {
        p.answers.tokens_per_event = at_least_one("tokens-per-event", n)?;
    }
    if let Some(b) = serving.prompt_tokens_details {
        p.answers.prompt_tokens_details = b;
    }
    if let Some(tp) = serving.tensor_parallel {
        let tp = at_least_one("tensor-parallel", tp)?;
        let m = &p.model;
        if m.kv_heads % tp != 0 || m.attention_heads % tp != 0 {
            return Err(KnobError::TensorParallel {
                model: m.served_name,
                tensor_parallel: tp,
                attention_heads: m.attention_heads,
                kv_heads: m.kv_heads,
            });
        }
        p.tensor_parallel = tp;
    }
    if p.kv_capacity_blocks() == 0 {
        return Err(match p.kv_cache_tokens_override {
            Some(tokens) => KnobError::KvCacheTooSmall {
                tokens,
                block_size: p.block_size,
            },
            None => KnobError::WeightsDoNotFit {
                preset: p.name,
                tensor_parallel: p.tensor_parallel,
                weights_gib: p.weight_bytes_per_gpu() / GIB,
                reserve_gib: p.activation_reserve_bytes / GIB,
                usable_gib: p.hardware.memory_bytes * p.gpu_memory_utilization / GIB,
                memory_gib: p.hardware.memory_bytes / GIB,
                utilization: p.gpu_memory_utilization,
            },
        });
    }
    if serving.slots.is_some() || serving.service.is_some() || serving.cliff.is_some() {
        let Some(queue) = p.queue.as_mut() else {
            return Err(KnobError::QueueKnob { preset: p.name });
        };
        if let Some(n) = serving.slots {
            queue.slots = at_least_one("slots", n)?;
        }
        if let Some(service) = serving.service {
            queue.service = service;
        }
        if serving.cliff.is_some() {
            queue.cliff = serving.cliff;
        }
    }
    if let Some(tokens) = serving.max_context {
        let tokens = at_least_one("max-context", tokens)?;
        if tokens > p.model.max_context_tokens {
            return Err(KnobError::ContextBeyondModel {
                tokens,
                model: p.model.served_name,
                model_tokens: p.model.max_context_tokens,
            });
        }
        if u64::from(tokens) > p.kv_capacity_tokens() {
            return Err(KnobError::ContextBeyondCache {
                tokens,
                cache_tokens: p.kv_capacity_tokens(),
            });
        }
        p.max_model_len_override = Some(tokens);
    }
    Ok(p)
}

/// What `engine` serves differently from `base`, the preset it was made
/// from: one `knob value (preset value)` each, in the order of the `sim { }`
/// block, as `capcard sim` says it at startup. Effective values, not the
/// knobs as given: a knob set to the preset's own value is no difference,
/// and a `tensor-parallel` shows the KV cache and window it grew.
pub fn differences(base: &Preset, engine: &Preset) -> Vec<String> {
    fn secs(s: f64) -> String {
        crate::format::duration_literal(s)
    }
    let mut lines = Vec::new();
    let mut differ = |knob: &str, base: String, engine: String| {
        if base != engine {
            lines.push(format!("{knob} {engine} (preset {base})"));
        }
    };
    differ(
        "max-num-seqs",
        base.max_num_seqs.to_string(),
        engine.max_num_seqs.to_string(),
    );
    differ(
        "max-batched-tokens",
        base.max_num_batched_tokens.to_string(),
        engine.max_num_batched_tokens.to_string(),
    );
    differ(
        "kv-cache-tokens",
        base.kv_capacity_tokens().to_string(),
        engine.kv_capacity_tokens().to_string(),
    );
    differ(
        "gpu-memory-utilization",
        base.gpu_memory_utilization.to_string(),
        engine.gpu_memory_utilization.to_string(),
    );
    differ(
        "prefix-caching",
        base.prefix_caching.to_string(),
        engine.prefix_caching.to_string(),
    );
    differ(
        "chunked-prefill",
        base.chunked_prefill.to_string(),
        engine.chunked_prefill.to_string(),
    );
    differ(
        "tensor-parallel",
        base.tensor_parallel.to_string(),
        engine.tensor_parallel.to_string(),
    );
    let (b, e) = (&base.efficiency, &engine.efficiency);
    differ(
        "compute-efficiency",
        b.compute.to_string(),
        e.compute.to_string(),
    );
    differ(
        "memory-efficiency",
        b.memory.to_string(),
        e.memory.to_string(),
    );
    differ(
        "step-overhead",
        secs(b.step_overhead_s),
        secs(e.step_overhead_s),
    );
    differ(
        "per-seq-overhead",
        secs(b.per_seq_overhead_s),
        secs(e.per_seq_overhead_s),
    );
    let reasoning = |p: &Preset| {
        p.answers
            .reasoning_tokens
            .as_ref()
            .map_or_else(|| "none".to_string(), crate::dist::Dist::kdl_words)
    };
    differ("reasoning-tokens", reasoning(base), reasoning(engine));
    differ(
        "tokens-per-event",
        base.answers.tokens_per_event.to_string(),
        engine.answers.tokens_per_event.to_string(),
    );
    differ(
        "prompt-tokens-details",
        base.answers.prompt_tokens_details.to_string(),
        engine.answers.prompt_tokens_details.to_string(),
    );
    differ(
        "max-model-len",
        base.max_model_len().to_string(),
        engine.max_model_len().to_string(),
    );
    lines
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sim::presets::find;

    fn h100() -> &'static Preset {
        find("h100-llama3-8b").unwrap()
    }

    #[test]
    fn no_knobs_is_the_preset() {
        for p in crate::sim::presets::all() {
            assert_eq!(&apply(p, &SimServing::default()).unwrap(), p);
            assert!(differences(p, p).is_empty());
        }
    }

    #[test]
    fn differences_are_the_effective_values_that_changed() {
        let p = h100();
        let knobs = SimServing {
            max_num_seqs: Some(p.max_num_seqs),
            tensor_parallel: Some(2),
            prefix_caching: Some(false),
            max_context: Some(4096),
            tokens_per_event: Some(4),
            ..SimServing::default()
        };
        let engine = apply(p, &knobs).unwrap();
        let kv = |p: &Preset| p.kv_capacity_tokens();
        assert_eq!(
            differences(p, &engine),
            [
                // max-num-seqs set to the preset's own value: no change.
                format!("kv-cache-tokens {} (preset {})", kv(&engine), kv(p)),
                "prefix-caching false (preset true)".to_string(),
                "tensor-parallel 2 (preset 1)".to_string(),
                "tokens-per-event 4 (preset 1)".to_string(),
                "max-model-len 4096 (preset 8192)".to_string(),
            ]
        );
    }

    #[test]
    fn tensor_parallel_2_halves_the_weights_per_gpu_and_grows_the_cache() {
        let p = h100();
        let knobs = SimServing {
            tensor_parallel: Some(2),
            ..SimServing::default()
        };
        let tp2 = apply(p, &knobs).unwrap();
        assert_eq!(tp2.tensor_parallel, 2);
        assert_eq!(tp2.weight_bytes_per_gpu(), p.weight_bytes_per_gpu() / 2.0);
        assert_eq!(
            tp2.kv_bytes_per_token_per_gpu(),
            p.kv_bytes_per_token_per_gpu() / 2.0
        );
        // Freed weight memory and halved per-token KV: more than twice the tokens.
        assert!(tp2.kv_capacity_tokens() > 2 * p.kv_capacity_tokens());
    }

    #[test]
    fn max_context_sets_the_window_within_the_model_and_the_cache() {
        let with = |tokens: u32| SimServing {
            max_context: Some(tokens),
            ..SimServing::default()
        };
        assert_eq!(apply(h100(), &with(4096)).unwrap().max_model_len(), 4096);
        assert!(matches!(
            apply(h100(), &with(32_768)),
            Err(KnobError::ContextBeyondModel {
                model_tokens: 8192,
                ..
            })
        ));
        let long = find("h100-llama3.1-8b").unwrap();
        assert_eq!(long.max_model_len(), 131_072);
        assert_eq!(apply(long, &with(32_768)).unwrap().max_model_len(), 32_768);
        // A cache smaller than the window: vLLM would not start.
        let small_cache = SimServing {
            kv_cache_tokens: Some(16_384),
            max_context: Some(32_768),
            ..SimServing::default()
        };
        assert!(matches!(
            apply(long, &small_cache),
            Err(KnobError::ContextBeyondCache { .. })
        ));
    }

    #[test]
    fn kv_cache_tokens_sets_the_capacity_exactly() {
        let knobs = SimServing {
            kv_cache_tokens: Some(20_000),
            ..SimServing::default()
        };
        let p = apply(h100(), &knobs).unwrap();
        assert_eq!(p.kv_capacity_tokens(), 20_000);
        assert_eq!(p.kv_capacity_blocks(), 1_250);
        // vLLM caps the context at what the cache holds.
        assert_eq!(p.max_model_len(), 8192);
        let small = SimServing {
            kv_cache_tokens: Some(4_096),
            ..SimServing::default()
        };
        assert_eq!(apply(h100(), &small).unwrap().max_model_len(), 4_096);
        let none = SimServing {
            kv_cache_tokens: Some(15),
            ..SimServing::default()
        };
        assert_eq!(
            apply(h100(), &none),
            Err(KnobError::KvCacheTooSmall {
                tokens: 15,
                block_size: 16
            })
        );
    }

    #[test]
    fn a_tensor_parallelism_that_does_not_divide_the_heads_is_refused() {
        for tp in [3, 16, 0] {
            let knobs = SimServing {
                tensor_parallel: Some(tp),
                ..SimServing::default()
            };
            let err = apply(h100(), &knobs).unwrap_err();
            if tp == 0 {
                assert!(matches!(err, KnobError::OutOfRange { .. }), "{err}");
            } else {
                assert!(matches!(err, KnobError::TensorParallel { .. }), "{err}");
                assert!(err.to_string().contains("8 KV heads"), "{err}");
            }
        }
    }

    #[test]
    fn weights_that_do_not_fit_are_refused() {
        // 70B in bf16 (141 GB) on one H200 of 141 GB: no room for the cache.
        let p = find("h200-llama3-70b-tp2").unwrap();
        let knobs = SimServing {
            tensor_parallel: Some(1),
            ..SimServing::default()
        };
        let err = apply(p, &knobs).unwrap_err();
        assert!(matches!(err, KnobError::WeightsDoNotFit { .. }), "{err}");
        assert!(err.to_string().contains("raise tensor-parallel"), "{err}");
        // The L4 holds 8B at 0.9 but not at 0.5.
        let l4 = find("l4-llama3-8b").unwrap();
        let low = SimServing {
            gpu_memory_utilization: Some(0.5),
            ..SimServing::default()
        };
        assert!(matches!(
            apply(l4, &low),
            Err(KnobError::WeightsDoNotFit { .. })
        ));
        // An explicit capacity skips the memory model.
        let measured = SimServing {
            kv_cache_tokens: Some(10_000),
            ..low
        };
        assert_eq!(apply(l4, &measured).unwrap().kv_capacity_tokens(), 10_000);
    }

    #[test]
    fn scheduler_and_cost_knobs_are_copied() {
        let knobs = SimServing {
            max_num_seqs: Some(64),
            max_batched_tokens: Some(4096),
            gpu_memory_utilization: Some(0.8),
            prefix_caching: Some(false),
            chunked_prefill: Some(false),
            compute_efficiency: Some(0.5),
            memory_efficiency: Some(0.7),
            step_overhead: Some(Duration::from_micros(1500)),
            per_seq_overhead: Some(Duration::from_micros(20)),
            reasoning_tokens: Some(crate::dist::Dist::fixed(20.0)),
            tokens_per_event: Some(4),
            ..SimServing::default()
        };
        let p = apply(h100(), &knobs).unwrap();
        assert_eq!(
            p.answers.reasoning_tokens,
            Some(crate::dist::Dist::fixed(20.0))
        );
        assert_eq!(p.answers.tokens_per_event, 4);
        assert_eq!(p.max_num_seqs, 64);
        assert_eq!(p.max_num_batched_tokens, 4096);
        assert_eq!(p.gpu_memory_utilization, 0.8);
        assert!(!p.prefix_caching && !p.chunked_prefill);
        assert_eq!(p.efficiency.compute, 0.5);
        assert_eq!(p.efficiency.memory, 0.7);
        assert!((p.efficiency.step_overhead_s - 1.5e-3).abs() < 1e-12);
        assert!((p.efficiency.per_seq_overhead_s - 20e-6).abs() < 1e-12);
        assert!(p.kv_capacity_tokens() < h100().kv_capacity_tokens());
        for (knob, bad) in [
            (
                "compute-efficiency",
                SimServing {
                    compute_efficiency: Some(1.5),
                    ..SimServing::default()
                },
            ),
            (
                "max-num-seqs",
                SimServing {
                    max_num_seqs: Some(0),
                    ..SimServing::default()
                },
            ),
            (
                "tokens-per-event",
                SimServing {
                    tokens_per_event: Some(0),
                    ..SimServing::default()
                },
            ),
        ] {
            let err = apply(h100(), &bad).unwrap_err();
            assert!(err.to_string().contains(knob), "{err}");
        }
    }
}
