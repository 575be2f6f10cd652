//! M/M/c queues, the reference Cr_open is checked against: Erlang C in
//! closed form, and the queue itself simulated in virtual time, seeded.
//! Shared by the Erlang-C reproduction (`erlang_c`) and the coverage of the
//! Cr_open fit (`cr_open_coverage`).

/// Probability that an arrival waits, for `c` servers at offered load `a`
/// (Erlangs, `a < c`).
pub fn erlang_c(c: usize, a: f64) -> f64 {
    if a >= c as f64 {
        return 1.0;
    }
    let (mut term, mut below) = (1.0, 0.0);
    for k in 0..c {
        if k > 0 {
            term *= a / k as f64;
        }
        below += term;
    }
    let top = term * a / c as f64 * c as f64 / (c as f64 - a);
    top / (below + top)
}

/// `P(W > t) = C(c, a)·exp(−(cμ − λ)t)` for M/M/c, `t` in seconds.
pub fn p_wait_exceeds(rate: f64, c: usize, mu: f64, t_s: f64) -> f64 {
    if rate >= c as f64 * mu {
        return 1.0;
    }
    erlang_c(c, rate / mu) * (-(c as f64 * mu - rate) * t_s).exp()
}

/// The largest rate at which `P(W > t) ≤ 1 − q` (bisection; the tail grows
/// with the rate).
pub fn erlang_c_max_rate(c: usize, mu: f64, t_s: f64, q: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, c as f64 * mu);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if p_wait_exceeds(mid, c, mu, t_s) <= 1.0 - q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// SplitMix64, as in `examples/erlang_c`.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn exponential(&mut self, mean: f64) -> f64 {
        let unit = ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -mean * unit.ln()
    }
}

/// One call of a simulated queue: when it arrived, how long it waited for
/// a slot, and how long its service took (ms).
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub arrival_ms: f64,
    pub wait_ms: f64,
    pub service_ms: f64,
}

/// An M/M/`slots` FIFO queue, empty at 0, fed Poisson arrivals at `rate`
/// until `until_ms`; every call served to its end.
pub fn simulate(
    slots: usize,
    service_ms: f64,
    rate: f64,
    until_ms: f64,
    rng: &mut SplitMix64,
) -> Vec<Call> {
    let mean_gap_ms = 1000.0 / rate;
    // When each slot is next free (FIFO: the next in line takes the first).
    let mut free = vec![0.0f64; slots];
    let mut calls = Vec::with_capacity((until_ms / mean_gap_ms * 1.1) as usize + 16);
    let mut t = rng.exponential(mean_gap_ms);
    while t < until_ms {
        let slot = (0..slots)
            .min_by(|&a, &b| free[a].total_cmp(&free[b]))
            .expect("c slots");
        let start = t.max(free[slot]);
        let service = rng.exponential(service_ms);
        free[slot] = start + service;
        calls.push(Call {
            arrival_ms: t,
            wait_ms: start - t,
            service_ms: service,
        });
        t += rng.exponential(mean_gap_ms);
    }
    calls
}

#[test]
fn erlang_c_formula_matches_known_values() {
    // One server: M/M/1 waits with probability ρ.
    assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
    // Two servers at a = 1: C = (1/2·2) / (1 + 1 + 1) = 1/3.
    assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
    // docs/erlang-c.md's number, and W p90 = 110.7 ms at 5 rps (erlang_c_check.py).
    assert!((erlang_c_max_rate(4, 2.5, 0.25, 0.9) - 5.9221).abs() < 1e-4);
    let p90_at_5 = (erlang_c(4, 5.0 / 2.5) / 0.1).ln() / (4.0 * 2.5 - 5.0);
    assert!((p90_at_5 * 1000.0 - 110.7).abs() < 0.05, "{p90_at_5}");
}

#[test]
fn the_simulated_queue_waits_as_erlang_c_says() {
    let mut rng = SplitMix64(3);
    let calls = simulate(4, 100.0, 20.0, 2_000_000.0, &mut rng);
    let measured: Vec<&Call> = calls.iter().filter(|c| c.arrival_ms > 10_000.0).collect();
    let beyond =
        measured.iter().filter(|c| c.wait_ms > 50.0).count() as f64 / measured.len() as f64;
    let expected = p_wait_exceeds(20.0, 4, 10.0, 0.05);
    assert!((beyond - expected).abs() < 0.01, "{beyond} vs {expected}");
}
