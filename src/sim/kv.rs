//! The paged KV cache: a pool of fixed-size blocks with a prefix cache.
//!
//! Shaped after vLLM V1's block pool, because the behaviours capcard must
//! measure (prefix-cache hits, KV exhaustion, preemption) come from it:
//! - a block holds `block_size` tokens; a sequence owns the blocks of its
//!   tokens, allocated as its context grows;
//! - a full block is identified by a chained hash (its parent's hash and its
//!   own token ids), so equal prefixes map to equal hashes and a new request
//!   can reuse computed blocks instead of prefilling them;
//! - freed blocks keep their content and hash and go to the back of an LRU
//!   free queue: they stay reusable until allocation evicts them from the
//!   front, least recently freed first.
//!
//! Hashes are 64-bit SplitMix-style mixes, not cryptographic: a collision
//! would only make the simulator reuse a block it should not, with odds far
//! below anything a benchmark run could observe.

use std::collections::{BTreeMap, HashMap};

use crate::hash::mix;

/// Index of a block in the pool.
pub type BlockId = u32;

/// Hash of the first block of a sequence's chain.
const ROOT_HASH: u64 = 0x5EED_B10C_0000_0001;

/// The chained hash of a full block: depends on every token before it.
pub fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut h = parent.unwrap_or(ROOT_HASH);
    for &t in tokens {
        h = mix(h, u64::from(t));
    }
    mix(h, tokens.len() as u64)
}

/// Hashes of every full block of `tokens`, chained.
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(tokens.len() / block_size.max(1));
    let mut parent = None;
    for chunk in tokens.chunks_exact(block_size.max(1)) {
        let h = block_hash(parent, chunk);
        out.push(h);
        parent = Some(h);
    }
    out
}

#[derive(Debug, Clone, Copy, Default)]
struct Block {
    ref_count: u32,
    /// Set once the block is full and computed (and then cacheable).
    hash: Option<u64>,
    /// Position in the free queue while `ref_count == 0`.
    free_stamp: u64,
}

/// The block pool with its prefix cache.
#[derive(Debug, Clone)]
pub struct BlockPool {
    blocks: Vec<Block>,
    /// Blocks with no owner, oldest-freed first (evicted first).
    free_queue: BTreeMap<u64, BlockId>,
    next_stamp: u64,
    /// Hash → block holding that content.
    cached: HashMap<u64, BlockId>,
}

impl BlockPool {
    pub fn new(num_blocks: u32) -> Self {
        let mut pool = BlockPool {
            blocks: vec![Block::default(); num_blocks as usize],
            free_queue: BTreeMap::new(),
            next_stamp: 0,
            cached: HashMap::new(),
        };
        for id in 0..num_blocks {
            pool.push_free(id);
        }
        pool
    }

    pub fn num_blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks that can be handed out (unowned, cached or not).
    pub fn num_free(&self) -> u32 {
        self.free_queue.len() as u32
    }

    /// Fraction of blocks owned by sequences (vLLM's `kv_cache_usage_perc`:
    /// unowned cached blocks count as free).
    pub fn usage(&self) -> f64 {
        if self.blocks.is_empty() {
            return 0.0;
        }
        1.0 - f64::from(self.num_free()) / self.blocks.len() as f64
    }

    /// The longest run of leading `hashes` whose blocks are cached.
    pub fn lookup(&self, hashes: &[u64]) -> Vec<BlockId> {
        hashes
            .iter()
            .map_while(|h| self.cached.get(h).copied())
            .collect()
    }

    /// How many of `blocks` are currently unowned (would leave the free
    /// queue if taken).
    pub fn count_unowned(&self, blocks: &[BlockId]) -> u32 {
        blocks
            .iter()
            .filter(|&&b| self.blocks[b as usize].ref_count == 0)
            .count() as u32
    }

    /// Takes a reference on cached blocks found by [`lookup`](Self::lookup).
    pub fn share(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            let block = &mut self.blocks[b as usize];
            if block.ref_count == 0 {
                self.free_queue.remove(&block.free_stamp);
            }
            block.ref_count += 1;
        }
    }

    /// Allocates `n` fresh blocks, evicting the least recently freed; `None`
    /// (and nothing changed) when fewer than `n` are free.
    pub fn allocate(&mut self, n: u32) -> Option<Vec<BlockId>> {
        if n > self.num_free() {
            return None;
        }
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (_, id) = self.free_queue.pop_first()?;
            let block = &mut self.blocks[id as usize];
            if let Some(h) = block.hash.take() {
                if self.cached.get(&h) == Some(&id) {
                    self.cached.remove(&h);
                }
            }
            block.ref_count = 1;
            out.push(id);
        }
        Some(out)
    }

    /// Drops a sequence's references. Tail blocks are queued first so they
    /// are evicted before the shared prefix (as vLLM does).
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let block = &mut self.blocks[b as usize];
            debug_assert!(block.ref_count > 0, "releasing an unowned block");
            block.ref_count = block.ref_count.saturating_sub(1);
            if block.ref_count == 0 {
                self.push_free(b);
            }
        }
    }

    /// Registers a full, computed block under `hash`. If another block
    /// already holds that content, this one stays anonymous.
    pub fn register(&mut self, block: BlockId, hash: u64) {
        if self.blocks[block as usize].hash.is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(hash) {
            e.insert(block);
            self.blocks[block as usize].hash = Some(hash);
        }
    }

    fn push_free(&mut self, id: BlockId) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.blocks[id as usize].free_stamp = stamp;
        self.free_queue.insert(stamp, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_hashes_depend_on_the_whole_prefix() {
        let a: Vec<u32> = (0..32).collect();
        let mut b = a.clone();
        b[0] = 99; // first block differs → second block's hash differs too
        let ha = block_hashes(&a, 16);
        let hb = block_hashes(&b, 16);
        assert_eq!(ha.len(), 2);
        assert_ne!(ha[0], hb[0]);
        assert_ne!(ha[1], hb[1]);
        assert_eq!(
            block_hashes(&a[..31], 16).len(),
            1,
            "partial blocks have no hash"
        );
        assert_eq!(block_hashes(&a, 16), ha, "deterministic");
    }

    #[test]
    fn released_blocks_stay_cached_until_evicted_lru() {
        let mut pool = BlockPool::new(4);
        let seq = pool.allocate(2).unwrap();
        pool.register(seq[0], 10);
        pool.register(seq[1], 11);
        assert_eq!(pool.num_free(), 2);
        pool.release(&seq);
        assert_eq!(pool.num_free(), 4);
        assert_eq!(pool.usage(), 0.0);
        // Still cached: a lookup finds both.
        assert_eq!(pool.lookup(&[10, 11, 12]), seq);
        // Allocating 3 takes the 2 never-used blocks, then the oldest-freed
        // cached one, which is the tail (11), released first.
        let other = pool.allocate(3).unwrap();
        assert!(other.contains(&seq[1]));
        assert_eq!(pool.lookup(&[10, 11]), vec![seq[0]]);
        assert_eq!(pool.num_free(), 1);
    }

    #[test]
    fn sharing_takes_blocks_off_the_free_queue() {
        let mut pool = BlockPool::new(2);
        let a = pool.allocate(1).unwrap();
        pool.register(a[0], 7);
        pool.release(&a);
        let hit = pool.lookup(&[7]);
        assert_eq!(pool.count_unowned(&hit), 1);
        pool.share(&hit);
        assert_eq!(pool.num_free(), 1);
        pool.share(&hit); // a second sequence shares it
        pool.release(&hit);
        assert_eq!(pool.num_free(), 1, "still owned once");
        pool.release(&hit);
        assert_eq!(pool.num_free(), 2);
        assert!(pool.allocate(3).is_none());
        assert_eq!(pool.num_free(), 2, "failed allocation changes nothing");
    }

    #[test]
    fn duplicate_content_keeps_the_first_block() {
        let mut pool = BlockPool::new(2);
        let a = pool.allocate(2).unwrap();
        pool.register(a[0], 5);
        pool.register(a[1], 5);
        assert_eq!(pool.lookup(&[5]), vec![a[0]]);
    }
}
