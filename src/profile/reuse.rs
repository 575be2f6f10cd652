//! Prefix reuse in recorded traffic (pure): from each request's chained
//! block hashes ([`super::read`]), how long the prefixes shared across
//! sessions are, how many distinct ones there are, and how much of the
//! traffic an unlimited prefix cache could have served.
//!
//! - A block is *shared* when requests of at least two different sessions
//!   sent it. Reuse inside one session is the conversation's own history,
//!   which `conversation` already models, so it does not count here.
//! - A request's shared prefix is its leading run of shared blocks; its
//!   *leaf* is the last of them, which names the prefix it shares.
//! - `tokens` is the median shared prefix of the requests that share one;
//!   `groups` is the effective number of distinct leaves, `exp(entropy)` of
//!   their frequencies: `G` prefixes chosen uniformly give `G`, and a few
//!   rare variants barely count, matching the language's model of `groups`
//!   prefixes chosen uniformly.
//! - `hit_fraction` is the share of prompt tokens in blocks that an earlier
//!   request (in log order) had already sent: the hit rate of an ideal
//!   prefix cache, history reuse included, over the requests whose blocks
//!   the log gives.

use std::collections::HashMap;

/// One request's view for reuse: its session key, its blocks (chained
/// hashes), tokens per block, and its input length.
#[derive(Debug, Clone, Copy)]
pub struct BlockedPrompt<'a> {
    pub session: &'a str,
    pub blocks: &'a [u64],
    pub tokens_per_block: f64,
    pub input_tokens: u32,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PrefixReuse {
    /// Median shared prefix, tokens, of the requests that share one.
    pub shared_tokens: u32,
    /// Effective number of distinct shared prefixes.
    pub groups: u32,
    /// Distinct shared prefixes seen (leaves).
    pub distinct_prefixes: usize,
    /// Share of the judged requests whose prompt starts with a shared prefix.
    pub sharing_fraction: f64,
    /// Share of prompt tokens an unlimited prefix cache would have hit
    /// (over the requests with blocks).
    pub hit_fraction: f64,
    /// Requests with block information.
    pub n: usize,
}

/// `first_turns`: the requests that open a session (the shared prefix of
/// the language is the start of a task's first prompt); `all`: every
/// request, in log order, for the cache hit fraction. `None` when no
/// request has blocks.
pub fn prefix_reuse(first_turns: &[BlockedPrompt], all: &[BlockedPrompt]) -> Option<PrefixReuse> {
    let judged: Vec<&BlockedPrompt> = first_turns
        .iter()
        .filter(|p| !p.blocks.is_empty())
        .collect();
    if judged.is_empty() {
        return None;
    }
    // Block → (a session that sent it, whether another did too).
    let mut seen: HashMap<u64, (&str, bool)> = HashMap::new();
    for prompt in all.iter().chain(first_turns.iter()) {
        for block in prompt.blocks {
            seen.entry(*block)
                .and_modify(|(first, multi)| *multi |= *first != prompt.session)
                .or_insert((prompt.session, false));
        }
    }
    let mut shared_tokens: Vec<u32> = Vec::new();
    let mut leaves: HashMap<u64, usize> = HashMap::new();
    for prompt in &judged {
        let run = prompt
            .blocks
            .iter()
            .take_while(|b| seen.get(b).is_some_and(|(_, multi)| *multi))
            .count();
        if run == 0 {
            continue;
        }
        let tokens = (run as f64 * prompt.tokens_per_block).round();
        shared_tokens.push(tokens.min(f64::from(prompt.input_tokens)) as u32);
        *leaves.entry(prompt.blocks[run - 1]).or_default() += 1;
    }
    let sharing = shared_tokens.len();
    shared_tokens.sort_unstable();
    let median = crate::stats::median_of_sorted(&shared_tokens)
        .copied()
        .unwrap_or(0);
    let entropy: f64 = leaves
        .values()
        .map(|&c| {
            let p = c as f64 / sharing.max(1) as f64;
            -p * p.ln()
        })
        .sum();
    // Hit fraction: tokens in blocks already sent by an earlier request.
    let mut sent: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let (mut hit_tokens, mut total_tokens) = (0.0, 0.0);
    // Prompts without blocks say nothing about reuse, either way.
    for prompt in all.iter().filter(|p| !p.blocks.is_empty()) {
        total_tokens += f64::from(prompt.input_tokens);
        let mut hits = 0usize;
        let mut prefix_alive = true;
        for block in prompt.blocks {
            // Only a leading run of cached blocks is a prefix hit.
            let was_sent = !sent.insert(*block);
            if prefix_alive && was_sent {
                hits += 1;
            } else {
                prefix_alive = false;
            }
        }
        hit_tokens += (hits as f64 * prompt.tokens_per_block).min(f64::from(prompt.input_tokens));
    }
    Some(PrefixReuse {
        shared_tokens: median,
        groups: if sharing == 0 {
            0
        } else {
            entropy.exp().round().max(1.0) as u32
        },
        distinct_prefixes: leaves.len(),
        sharing_fraction: sharing as f64 / judged.len() as f64,
        hit_fraction: if total_tokens > 0.0 {
            hit_tokens / total_tokens
        } else {
            0.0
        },
        n: judged.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks `prefix ++ unique` with chained-looking ids.
    fn blocks(prefix: &[u64], unique_from: u64, unique: usize) -> Vec<u64> {
        let mut b = prefix.to_vec();
        b.extend((0..unique as u64).map(|i| unique_from + i));
        b
    }

    #[test]
    fn groups_and_tokens_of_uniformly_chosen_system_prompts() {
        // 4 system prompts of 3 blocks (16 tokens each), 200 requests, each
        // in its own session, with 2 unique blocks after the prefix.
        let prompts: Vec<(String, Vec<u64>)> = (0..200u64)
            .map(|i| {
                let g = i % 4;
                let prefix = [g * 10 + 1, g * 10 + 2, g * 10 + 3];
                (format!("s{i}"), blocks(&prefix, 1000 + i * 10, 2))
            })
            .collect();
        let view: Vec<BlockedPrompt> = prompts
            .iter()
            .map(|(s, b)| BlockedPrompt {
                session: s,
                blocks: b,
                tokens_per_block: 16.0,
                input_tokens: 90,
            })
            .collect();
        let reuse = prefix_reuse(&view, &view).unwrap();
        assert_eq!(reuse.shared_tokens, 48);
        assert_eq!(reuse.groups, 4);
        assert_eq!(reuse.distinct_prefixes, 4);
        assert_eq!(reuse.sharing_fraction, 1.0);
        // All but the first request of each group hit 48 of 90 tokens.
        let expected = (196.0 * 48.0) / (200.0 * 90.0);
        assert!((reuse.hit_fraction - expected).abs() < 1e-9);
    }

    #[test]
    fn reuse_inside_one_session_is_not_a_shared_prefix() {
        // One session re-sending its history: every later turn extends the
        // previous prompt, but no other session sent those blocks.
        let turns: Vec<Vec<u64>> = (1..=4).map(|k| (1..=k * 2).collect()).collect();
        let view: Vec<BlockedPrompt> = turns
            .iter()
            .map(|b| BlockedPrompt {
                session: "only",
                blocks: b,
                tokens_per_block: 16.0,
                input_tokens: b.len() as u32 * 16,
            })
            .collect();
        let reuse = prefix_reuse(&view[..1], &view).unwrap();
        assert_eq!(reuse.shared_tokens, 0);
        assert_eq!(reuse.groups, 0);
        assert_eq!(reuse.sharing_fraction, 0.0);
        // But a cache would hit the history: (2 + 4 + 6) of (2+4+6+8) blocks.
        assert!((reuse.hit_fraction - 12.0 / 20.0).abs() < 1e-9);
    }

    #[test]
    fn unequal_prefixes_give_an_effective_group_count() {
        // 90 requests on one prompt, 10 on another: exp(H) ≈ 1.38 → 1.
        let mut prompts: Vec<(String, Vec<u64>)> = Vec::new();
        for i in 0..100u64 {
            let g = u64::from(i >= 90);
            prompts.push((format!("s{i}"), blocks(&[g + 1], 100 + i, 1)));
        }
        let view: Vec<BlockedPrompt> = prompts
            .iter()
            .map(|(s, b)| BlockedPrompt {
                session: s,
                blocks: b,
                tokens_per_block: 512.0,
                input_tokens: 700,
            })
            .collect();
        let reuse = prefix_reuse(&view, &view).unwrap();
        assert_eq!(reuse.distinct_prefixes, 2);
        assert_eq!(reuse.groups, 1);
        assert_eq!(reuse.shared_tokens, 512);
    }

    #[test]
    fn no_blocks_no_answer() {
        let view = [BlockedPrompt {
            session: "a",
            blocks: &[],
            tokens_per_block: 16.0,
            input_tokens: 10,
        }];
        assert_eq!(prefix_reuse(&view, &view), None);
    }
}
