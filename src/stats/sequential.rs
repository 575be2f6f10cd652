//! Sequential tests (pure): whether an open run still under way is already
//! decisively beyond a bound on a fraction, so that it can stop early.
//!
//! # The test
//!
//! A count clause (a percentile bound, where `1 − q` of the samples may lie
//! beyond it; an error-rate bound) is a bound `a` on the probability `π`
//! that a sample lies beyond. A run far above its crossing (every search
//! brackets by doubling) shows it within seconds; the rest of its window
//! adds nothing the fit uses, as the fit's kernel gives such a run no
//! weight. So the run is looked at a few times while it runs, and it stops
//! once one look rejects `H₀: π ≤ a` (the run is within the clause).
//!
//! - **One-sided binomial, by its Chernoff bound.** With `n` samples of
//!   which a fraction `f > a` lies beyond, `P(B ≥ f·n) ≤ exp(−n·KL(f ‖ a))`
//!   for `B ~ Binomial(n, a)` ([`ln_tail_bound`]). The bound is never below
//!   the exact tail, so the test is never more eager than the exact one
//!   (MLPerf LoadGen's early stopping is the same one-sided binomial test,
//!   summed exactly, for a pass).
//! - **Correlated samples.** Latencies under load come in bursts: `n` is
//!   replaced by `n / v`, `v` the batch-means variance inflation of the
//!   samples seen so far ([`BatchCounts::variance_inflation`], at
//!   [`INFLATION_CONFIDENCE`], so that an inflation estimated from a few
//!   batches is scaled up as in a batch-means t interval). No look is made
//!   before [`LOOKS_AT_BATCHES`]`[0]` of the window's 20 batches have passed.
//! - **Peeking keeps the level.** Looks are made only at the ends of the
//!   batches in [`LOOKS_AT_BATCHES`], and each look of each clause gets
//!   `α / (looks × clauses)` (Bonferroni): the chance that a run within
//!   every clause is stopped at any look is at most `α`. A look that
//!   finds no new completion is skipped, which only spends less.
//!
//! Only a fail is decided early, never a pass. An open queue starts empty,
//! so a rate beyond capacity looks fine until its backlog builds: an early
//! pass would be optimistic exactly where it matters. A call still in
//! flight at a look is left out of it; it has waited longer than the calls
//! of its batch that completed, so leaving it out can only understate the
//! fraction beyond and delay the stop.

use super::interval::BatchCounts;

/// The ends of the batches (of [`super::interval::BATCHES`]) at which a run
/// is looked at: 15% of its window at the earliest, 70% at the latest.
pub const LOOKS_AT_BATCHES: [usize; 6] = [3, 4, 6, 8, 11, 14];

/// The confidence at which the batch-means inflation of a look is scaled
/// for the few batches it rests on.
pub const INFLATION_CONFIDENCE: f64 = 0.95;

/// Fewest slices with samples a look decides on: the correlation is read
/// from their spread, which one or two slices do not have.
pub const MIN_SLICES: usize = 3;

/// Fewest samples a slice, on average, for a look to decide: with fewer,
/// a burst of calls beyond the bound spans several slices, the slices are
/// not independent, and no batch-means inflation read from them can be
/// trusted (at 2 calls a slice in bursts of 16, runs at the crossing were
/// stopped 11% of the time at α = 1%). A run that slow runs its course.
pub const MIN_SAMPLES_PER_SLICE: f64 = 10.0;

/// `KL(f ‖ a)` between Bernoulli(`f`) and Bernoulli(`a`), in nats;
/// infinite when `a` is 0 or 1 and `f` differs from it.
pub fn bernoulli_kl(f: f64, a: f64) -> f64 {
    let term = |x: f64, y: f64| {
        if x <= 0.0 {
            0.0
        } else if y <= 0.0 {
            f64::INFINITY
        } else {
            x * (x / y).ln()
        }
    };
    term(f, a) + term(1.0 - f, 1.0 - a)
}

/// `ln` of the Chernoff bound on `P(B ≥ f·n)`, `B ~ Binomial(n, a)`: `−n ·
/// KL(f ‖ a)` when `f > a`, else 0 (no evidence against `π ≤ a`). `n` may
/// be an effective, non-integer count.
pub fn ln_tail_bound(n: f64, f: f64, a: f64) -> f64 {
    if n.is_nan() || n <= 0.0 || f <= a {
        return 0.0;
    }
    -n * bernoulli_kl(f, a)
}

/// What one look found of one clause: beyond its bound, decisively.
#[derive(Debug, Clone, PartialEq)]
pub struct Beyond {
    pub samples: u64,
    pub beyond: u64,
    /// The variance inflation the look used.
    pub inflation: f64,
    /// The Chernoff bound on the chance of so many beyond, were the run
    /// within the clause.
    pub p_bound: f64,
}

/// One look at a clause: `Some` when the counts so far reject `π ≤
/// allowed` at level `alpha` (this look's share of the run's error).
/// `finer`, the same samples in slices half a batch wide (early looks rest
/// on a few batches, whose spread can come out near zero by chance), adds
/// a second estimate of the inflation; the larger is used.
pub fn decisively_beyond(
    counts: &BatchCounts,
    finer: Option<&BatchCounts>,
    allowed: f64,
    alpha: f64,
) -> Option<Beyond> {
    let samples = counts.total();
    let beyond = counts.total_hits();
    let slices = counts.samples.iter().filter(|&&n| n > 0).count();
    if beyond == 0
        || slices < MIN_SLICES
        || (samples as f64) < MIN_SAMPLES_PER_SLICE * slices as f64
    {
        return None;
    }
    let inflation = if beyond == samples {
        // Every sample beyond: no spread to read the correlation from, and
        // a burst of a few can be all there is. Each slice counts as one
        // sample (the batch-means assumption: slices are independent).
        samples as f64 / slices.max(1) as f64
    } else {
        counts
            .variance_inflation(INFLATION_CONFIDENCE)
            .max(finer.map_or(1.0, |f| f.variance_inflation(INFLATION_CONFIDENCE)))
    }
    .max(1.0);
    let fraction = beyond as f64 / samples as f64;
    let ln_p = ln_tail_bound(samples as f64 / inflation, fraction, allowed.max(0.0));
    (ln_p <= alpha.ln()).then(|| Beyond {
        samples,
        beyond,
        inflation,
        p_bound: ln_p.exp(),
    })
}

/// Each look's share of a run's error `alpha` over `clauses` clauses.
pub fn alpha_per_look(alpha: f64, clauses: usize) -> f64 {
    alpha / (LOOKS_AT_BATCHES.len() * clauses.max(1)) as f64
}

/// Which look an instant is at: how many of [`LOOKS_AT_BATCHES`] have
/// passed `elapsed` of a window `window` long (both in the same unit).
pub fn looks_passed(elapsed: f64, window: f64) -> usize {
    if window.is_nan() || window <= 0.0 {
        return 0;
    }
    let batches = elapsed / window * super::interval::BATCHES as f64;
    LOOKS_AT_BATCHES
        .iter()
        .take_while(|&&b| batches >= b as f64)
        .count()
}

#[cfg(test)]
mod tests {
    use super::tests_support::stops;
    use super::*;
    use crate::stats::interval::BATCHES;

    #[test]
    fn the_chernoff_bound_is_never_below_the_exact_tail() {
        // Exact P(B ≥ k) for n = 60, a = 0.1, by summing the pmf.
        let (n, a) = (60u64, 0.1f64);
        let mut pmf = vec![0.0; n as usize + 1];
        for (k, p) in pmf.iter_mut().enumerate() {
            let mut ln_c = 0.0;
            for i in 0..k {
                ln_c += ((n - i as u64) as f64 / (i + 1) as f64).ln();
            }
            *p = (ln_c + k as f64 * a.ln() + (n - k as u64) as f64 * (1.0 - a).ln()).exp();
        }
        for k in 7..=n as usize {
            let exact: f64 = pmf[k..].iter().sum();
            let bound = ln_tail_bound(n as f64, k as f64 / n as f64, a).exp();
            assert!(bound >= exact * (1.0 - 1e-9), "k {k}: {bound} < {exact}");
        }
        assert_eq!(ln_tail_bound(60.0, 0.1, 0.1), 0.0);
        assert_eq!(ln_tail_bound(60.0, 0.05, 0.1), 0.0);
        assert_eq!(bernoulli_kl(0.3, 0.3), 0.0);
        assert!(bernoulli_kl(0.1, 0.0).is_infinite());
    }

    #[test]
    fn looks_fall_at_the_ends_of_their_batches() {
        let window = BATCHES as f64;
        assert_eq!(looks_passed(2.9, window), 0);
        assert_eq!(looks_passed(3.0, window), 1);
        assert_eq!(looks_passed(7.0, window), 3);
        assert_eq!(looks_passed(20.0, window), LOOKS_AT_BATCHES.len());
        assert_eq!(looks_passed(5.0, 0.0), 0);
        assert!((alpha_per_look(0.01, 2) - 0.01 / 12.0).abs() < 1e-15);
    }

    #[test]
    fn a_run_at_its_crossing_is_stopped_at_most_alpha_of_the_time() {
        // π exactly at the allowed 10%: every stop is a false one. Over
        // 2,000 seeded runs, independent and in bursts of 8, the stops stay
        // within α = 5% (a generous α, so that the count is not trivially 0).
        for burst in [1, 8] {
            let false_stops = (0..2_000)
                .filter(|&s| stops(s, 0.1, 40, burst, 0.05).is_some())
                .count();
            assert!(
                false_stops <= 100,
                "burst {burst}: {false_stops} of 2000 stopped"
            );
        }
        // A slow server: two calls a slice, in bursts of 16. Runs of calls
        // all beyond are common; each slice counts as one sample then.
        let slow = (0..2_000)
            .filter(|&s| stops(s, 0.1, 2, 16, 0.05).is_some())
            .count();
        assert!(slow <= 100, "slow: {slow} of 2000 stopped");
        // Within the clause (π = 5%), stops are rarer still.
        let stops_below = (0..2_000)
            .filter(|&s| stops(s, 0.05, 40, 8, 0.05).is_some())
            .count();
        assert!(stops_below <= 10, "{stops_below} of 2000 stopped");
    }

    #[test]
    fn a_run_far_beyond_its_crossing_stops_at_the_first_look() {
        // Half the samples beyond a 10% allowance, 20 a batch, α = 1%: the
        // first look (15% of the window) decides in nearly every run.
        let first_look = (0..200)
            .filter(|&s| stops(s, 0.5, 20, 1, 0.01) == Some(LOOKS_AT_BATCHES[0]))
            .count();
        assert!(first_look >= 195, "{first_look} of 200 at the first look");
        // Bursts of 8 halve the evidence: still decided, a look or two on.
        let decided = (0..200)
            .filter(|&s| stops(s, 0.5, 40, 8, 0.01).is_some_and(|b| b <= 8))
            .count();
        assert!(decided >= 190, "{decided} of 200 by 40% of the window");
        // 15% against 10%, 20 a batch: too close to call early, as it
        // should be (the fit wants that run whole).
        let near = (0..200)
            .filter(|&s| stops(s, 0.15, 20, 1, 0.01).is_some())
            .count();
        assert!(near <= 40, "{near} of 200 near the crossing stopped");
    }

    #[test]
    fn no_samples_or_no_hits_decide_nothing() {
        let mut counts = BatchCounts::default();
        assert_eq!(decisively_beyond(&counts, None, 0.1, 0.01), None);
        for b in 0..4 {
            for _ in 0..50 {
                counts.push(b, false);
            }
        }
        assert_eq!(decisively_beyond(&counts, None, 0.1, 0.01), None);
        // Every sample beyond reads no correlation: each slice is one
        // sample. Ten calls of one slice, all beyond a 10% allowance, may
        // be one burst; ten calls in each of five slices may not.
        let mut burst = BatchCounts::default();
        for _ in 0..10 {
            burst.push(3, true);
        }
        assert_eq!(decisively_beyond(&burst, None, 0.1, 0.01 / 6.0), None);
        for b in 4..8 {
            for _ in 0..10 {
                burst.push(b, true);
            }
        }
        let five_slices = decisively_beyond(&burst, None, 0.1, 0.01 / 6.0).expect("decided");
        assert!(
            (five_slices.inflation - 10.0).abs() < 1e-12,
            "{five_slices:?}"
        );
        // Fewer than 10 calls a slice decide nothing, however many beyond.
        let mut slow = BatchCounts::default();
        for b in 0..8 {
            for _ in 0..9 {
                slow.push(b, true);
            }
        }
        assert_eq!(decisively_beyond(&slow, None, 0.1, 0.01), None);
        // A zero allowance (error-rate ≤ 0) is a count: one hit decides.
        counts.push(4, true);
        assert!(decisively_beyond(&counts, None, 0.0, 1e-6).is_some());
    }
}

#[cfg(test)]
mod table {
    use super::tests_support::stops;

    /// `cargo test --release --lib sequential::table -- --ignored
    /// --nocapture`: how often runs are stopped at α = 1%, 4,000 seeds a
    /// row, 10% allowed beyond (docs/measuring.md quotes it).
    #[test]
    #[ignore = "prints the early-stop table of docs/measuring.md"]
    fn early_stop_table() {
        println!(
            "| π (allowed 10%) | mean burst | samples a batch | stopped | by 40% of the window |"
        );
        println!("|---|---|---|---|---|");
        for &(pi, burst, per) in &[
            (0.05, 8, 40),
            (0.1, 1, 40),
            (0.1, 8, 40),
            (0.1, 32, 64),
            (0.1, 64, 200),
            (0.2, 16, 200),
            (0.3, 8, 40),
            (0.5, 8, 40),
            (0.5, 1, 20),
            (0.1, 4, 2),
            (0.1, 16, 2),
            (0.1, 4, 10),
            (0.1, 16, 10),
            (0.1, 64, 10),
            (0.5, 16, 10),
            (0.9, 4, 2),
        ] {
            let n = 4000;
            let runs: Vec<Option<usize>> = (0..n).map(|s| stops(s, pi, per, burst, 0.01)).collect();
            let stopped = runs.iter().flatten().count();
            let early = runs.iter().flatten().filter(|&&b| b <= 8).count();
            println!(
                "| {pi} | {burst} | {per} | {:.2}% | {:.2}% |",
                100.0 * stopped as f64 / n as f64,
                100.0 * early as f64 / n as f64
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::stats::interval::BATCHES;

    /// SplitMix64: a seeded stream of uniforms for the simulations below.
    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A run of `per_batch` samples a batch, beyond with probability `pi`,
    /// in bursts of `burst` equal samples (correlation); looked at as the
    /// runner looks: whether any look stops it, and at which batch.
    pub fn stops(seed: u64, pi: f64, per_batch: u64, burst: u64, alpha: f64) -> Option<usize> {
        // A two-state Markov chain: bursts of mean length `burst`, a
        // fraction `pi` of samples beyond.
        let stay = 1.0 - 1.0 / burst as f64;
        let enter = (pi / (burst as f64 * (1.0 - pi))).min(1.0);
        let mut rng = Rng(seed);
        let mut hit = rng.uniform() < pi;
        let mut counts = BatchCounts::default();
        let mut finer = BatchCounts::default();
        let mut looks = 0;
        for batch in 0..BATCHES {
            for i in 0..per_batch {
                hit = rng.uniform() < if hit { stay } else { enter };
                counts.push(batch, hit);
                finer.push(2 * batch + usize::from(2 * i >= per_batch), hit);
            }
            let passed = looks_passed((batch + 1) as f64, BATCHES as f64);
            if passed > looks {
                looks = passed;
                let finer = (batch < BATCHES / 2).then_some(&finer);
                if decisively_beyond(&counts, finer, 0.1, alpha_per_look(alpha, 1)).is_some() {
                    return Some(batch + 1);
                }
            }
        }
        None
    }
}
