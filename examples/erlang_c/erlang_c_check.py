#!/usr/bin/env python3
"""Erlang C for an M/M/c queue: the largest arrival rate at which the waiting
time W (= TTFT on examples/erlang_c, which sends the first token the moment
service starts) meets a percentile bound, and the predicted W quantile at
given rates.

    P(W > t) = C(c, a) * exp(-(c*mu - lam) * t),   a = lam / mu

    python3 examples/erlang_c/erlang_c_check.py                       # c=4, 400 ms, p90 <= 250 ms -> 5.9221 rps
    python3 examples/erlang_c/erlang_c_check.py --c 8 --service-ms 250 --t-ms 100 --quantile 0.99
    python3 examples/erlang_c/erlang_c_check.py --rate 5 --rate 5.5   # predicted W p90 at those rates

Standard library only.
"""

import argparse
import math


def erlang_c(c, a):
    """Probability that an arrival waits (a = offered load in Erlangs, a < c)."""
    if a <= 0:
        return 0.0
    if a >= c:
        return 1.0
    # Sum a^k/k! for k < c, iteratively (no overflow for any sane c).
    term, total = 1.0, 0.0
    for k in range(c):
        if k > 0:
            term *= a / k
        total += term
    last = term * a / c  # a^c / c!
    top = last * c / (c - a)
    return top / (total + top)


def p_wait_exceeds(lam, c, mu, t):
    if lam >= c * mu:
        return 1.0
    return erlang_c(c, lam / mu) * math.exp(-(c * mu - lam) * t)


def wait_quantile(lam, c, mu, q):
    """The q-quantile of W in seconds (0 when P(W > 0) <= 1 - q); inf if unstable."""
    if lam >= c * mu:
        return math.inf
    pc = erlang_c(c, lam / mu)
    tail = 1.0 - q
    if pc <= tail:
        return 0.0
    return math.log(pc / tail) / (c * mu - lam)


def max_rate(c, mu, t, q):
    """Largest lam with P(W > t) <= 1 - q (P is increasing in lam): bisection."""
    lo, hi = 0.0, c * mu
    for _ in range(200):
        mid = (lo + hi) / 2
        if p_wait_exceeds(mid, c, mu, t) <= 1.0 - q:
            lo = mid
        else:
            hi = mid
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--c", type=int, default=4, help="servers (slots), default 4")
    ap.add_argument("--service-ms", type=float, default=400.0, help="mean service time, default 400")
    ap.add_argument("--t-ms", type=float, default=250.0, help="bound on the wait, default 250")
    ap.add_argument("--quantile", type=float, default=0.90, help="percentile as a fraction, default 0.90")
    ap.add_argument("--rate", type=float, action="append", default=[],
                    help="also print the predicted wait quantile at this rate (repeatable)")
    args = ap.parse_args()

    mu = 1000.0 / args.service_ms
    t = args.t_ms / 1000.0
    q = args.quantile
    lam = max_rate(args.c, mu, t, q)
    print(f"M/M/{args.c}, mean service {args.service_ms:g} ms (mu = {mu:g}/s), "
          f"W p{q * 100:g} <= {args.t_ms:g} ms")
    print(f"  largest rate: {lam:.4f} rps  (utilisation {lam / (args.c * mu):.3f}, "
          f"P(wait) = C(c,a) = {erlang_c(args.c, lam / mu):.4f})")
    for r in args.rate:
        w = wait_quantile(r, args.c, mu, q)
        pc = erlang_c(args.c, r / mu) if r < args.c * mu else 1.0
        print(f"  at {r:g} rps: W p{q * 100:g} = {w * 1000:.1f} ms, P(W > 0) = {pc:.4f}, "
              f"P(W > {args.t_ms:g} ms) = {p_wait_exceeds(r, args.c, mu, t):.4f}, "
              f"mean W = {(pc / (args.c * mu - r)) * 1000 if r < args.c * mu else math.inf:.1f} ms")


if __name__ == "__main__":
    main()
