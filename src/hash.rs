//! Stable hashing and seeding: the SplitMix64 mixer that derives every
//! seed, FNV-1a for strings, and the named generator every seeded draw uses.
//!
//! A leaf: it imports nothing of the crate, so the simulator, the workload
//! and the planner derive the same seeds from the same inputs.

/// The generator behind every workload draw: a named algorithm
/// (xoshiro256++), so a seed means the same stream on every platform and
/// rand version, unlike `StdRng`/`SmallRng` which may change algorithm.
pub type SeededRng = rand::rngs::Xoshiro256PlusPlus;

/// A [`SeededRng`] for `seed`.
pub fn seeded_rng(seed: u64) -> SeededRng {
    rand::SeedableRng::seed_from_u64(seed)
}

/// Stable 64-bit mixing for deriving seeds (SplitMix64 finaliser): std's
/// hashers are not guaranteed stable across Rust versions, this is.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The FNV-1a 64 hash of no bytes, where [`fnv1a_step`] starts.
pub const FNV1A_START: u64 = 0xcbf2_9ce4_8422_2325;

/// One byte into an FNV-1a 64 hash: `hash_str(s)` is every byte of `s`
/// folded in from [`FNV1A_START`]. Apart, so that a scan hashes as it goes.
#[inline]
pub fn fnv1a_step(h: u64, byte: u8) -> u64 {
    (h ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// Stable hash of a string (FNV-1a 64), for deriving per-workload seeds.
pub fn hash_str(s: &str) -> u64 {
    s.bytes().fold(FNV1A_START, fnv1a_step)
}
