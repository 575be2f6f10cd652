#!/usr/bin/env python3
"""Writes chat-log.jsonl: a synthetic request log in the shape production chat
gateways keep (one JSON object per request: time, session, usage, latency,
prefix hash ids), for `capcard profile` to read. Seeded: the same file every
time. No prompt text: real logs often have none either.

The traffic: 20 minutes of chat whose session arrivals come in bursts (a
two-state rate, so the gaps are over-dispersed), 1-12 turns per session,
three system prompts (384, 384 and 768 tokens, used 60/30/10), new user
messages lognormal, answers lognormal, think time lognormal. Hash ids follow
Mooncake's convention (one id per 64-token block, chained: equal ids mean an
equal prefix); only a session's first request lists them, later turns'
reuse being the session's own history (so the profile's cache hit
fraction is that of first requests).

    python3 experiments/data/make-chat-log.py > experiments/data/chat-log.jsonl
"""
import json
import math
import random

rng = random.Random(20261201)
BLOCK = 64
START = 1_772_362_800.0  # 2026-03-01T11:00:00Z
SPAN_S = 20 * 60
SYSTEMS = [(384, 0.6), (384, 0.3), (768, 0.1)]


def rfc3339(t):
    whole = int(t)
    ms = int(round((t - whole) * 1000))
    if ms == 1000:
        whole, ms = whole + 1, 0
    days, rem = divmod(whole, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    # days since epoch -> civil date (Howard Hinnant)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    mo = mp + 3 if mp < 10 else mp - 9
    y += mo <= 2
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{m:02d}:{s:02d}.{ms:03d}Z"


records = []
t = 0.0
session = 0
burst = False
while t < SPAN_S:
    # Two-state rate: 0.2 sessions/s, with bursts at 8/s, half the
    # arrivals in bursts: gaps with a CV near 1.7.
    if rng.random() < 0.02:
        burst = not burst
    t += rng.expovariate(8.0 if burst else 0.2)
    r = rng.random()
    g = 0 if r < SYSTEMS[0][1] else (1 if r < SYSTEMS[0][1] + SYSTEMS[1][1] else 2)
    system_tokens = SYSTEMS[g][0]
    turns = min(12, 1 + int(math.log(1 - rng.random()) / math.log(0.6)))
    at = t
    history = 0
    for k in range(turns):
        message = max(4, round(rng.lognormvariate(math.log(180), 0.9)))
        prompt = (system_tokens + message) if k == 0 else history + message
        output = max(1, min(2048, round(rng.lognormvariate(math.log(220), 0.6))))
        latency_ms = round(250 + 18 * output + rng.uniform(0, 120))
        record = {
            "time": rfc3339(START + at),
            "session_id": f"s{session:05d}",
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "latency_ms": latency_ms,
        }
        if k == 0:
            shared = [1000 * (g + 1) + b for b in range(system_tokens // BLOCK)]
            own = [10_000_000 + session * 1000 + b for b in range(message // BLOCK)]
            record["hash_ids"] = shared + own
            record["block_tokens"] = BLOCK
        records.append((at, record))
        history = prompt + output
        at += latency_ms / 1000 + rng.lognormvariate(math.log(8), 1.0)
    session += 1

records.sort(key=lambda r: r[0])
for _, record in records:
    print(json.dumps(record, separators=(",", ":")))
