#!/usr/bin/env python3
"""Writes two small agent traces of the SAME 16 coding tasks, run by two
harnesses and recorded in two formats, for `capcard profile` to compare.
Seeded: the same files every time. No prompt text, only token counts.

The tasks: 16 sessions starting about 10 s apart, 3-6 LLM calls each. Each
step re-sends the session's whole context (the previous prompt, its answer
and the tool result appended); in a few sessions one step fans out into 2-3
parallel calls on the same context. Answers are 16-64 tokens, tool time
0.1-1.5 s, prompts 300-2500 tokens (prompt + answer below 3500).

- harness-a.json: coding-agent traces in the Weka/SemiAnalysis form (a JSON
  array, one trace per task, block_size 16, recorded hash_ids, `api_time`).
  Every prompt starts with the same 400-token system prompt and tool schema,
  so an ideal prefix cache serves most of every prompt. Each trace's
  top-level `t` (seconds) is when its task started: capcard reads it as a
  clock shared by the file's traces (it is not in the published schema).
- harness-b.jsonl: TraceLab rounds of the same tasks, the same calls and
  answers, prompts 12 tokens longer: this harness writes the current time
  on the first line of every prompt and has no shared system prompt, so
  nothing is re-sent as a prefix (`prefix_tokens` 0).

    python3 experiments/data/make-harness-traces.py
"""
import json
import os
import random
from datetime import datetime, timezone

rng = random.Random(20261204)
BLOCK = 16
SYSTEM = 400  # system prompt + tool schema, 25 blocks
STAMP = 12  # harness B's timestamp line
TASKS = 16
START = 1_772_362_800.0  # 2026-03-01T11:00:00Z
MAX_IN = 2500
MAX_TOTAL = 3500
HERE = os.path.dirname(os.path.abspath(__file__))


def iso(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def plan_task(k):
    """One task: its start (s) and its steps, each a list of parallel calls
    (input, output, start s from the task's start, api time s, tool gap s
    after it)."""
    start = k * 10.0 + rng.uniform(0.0, 2.0)
    calls = rng.randint(3, 6)
    fan = rng.randint(2, 3) if k % 3 == 1 and calls >= 4 else 1
    fan_at = rng.randint(1, calls - fan) if fan > 1 else -1
    steps = []
    context = SYSTEM + rng.randint(60, 200)  # + the user's request
    t = 0.0
    made = 0
    while made < calls:
        width = fan if len(steps) == fan_at else 1
        width = min(width, calls - made)
        group = []
        for _ in range(width):
            extra = rng.randint(40, 120) if width > 1 else 0
            inp = min(context + extra, MAX_IN)
            out = rng.randint(16, 64)
            api = round(0.25 + 0.015 * out + 0.0001 * inp, 3)
            group.append({"in": inp, "out": out, "t": round(t, 3), "api": api})
        made += width
        gap = round(rng.uniform(0.1, 1.5), 3)
        last = group[-1]
        for call in group:
            call["gap"] = gap
        t = max(c["t"] + c["api"] for c in group) + gap
        result = rng.randint(80, 350)
        context = min(last["in"] + last["out"] + result, MAX_IN)
        steps.append(group)
    for group in steps:
        for call in group:
            assert 300 <= call["in"] <= MAX_IN and call["in"] + call["out"] < MAX_TOTAL
    return start, steps


class Minter:
    def __init__(self):
        self.next = 1000

    def call(self, context, inp, out):
        """Prompt blocks re-sending `context` (whole blocks), then fresh
        ones; and the context it leaves (prompt + answer)."""
        n = inp // BLOCK
        ids = context[: min(len(context), n)]
        while len(ids) < n:
            ids.append(self.next)
            self.next += 1
        after = list(ids)
        while len(after) < (inp + out) // BLOCK:
            after.append(self.next)
            self.next += 1
        return ids, after


def main():
    tasks = [plan_task(k) for k in range(TASKS)]
    minter = Minter()
    system = list(range(1, SYSTEM // BLOCK + 1))
    a_traces = []
    b_rows = []
    for k, (start, steps) in enumerate(tasks):
        name = f"task-{k:02d}"
        context = list(system)
        requests = []
        for group in steps:
            afters = []
            for call in group:
                ids, after = minter.call(context, call["in"], call["out"])
                afters.append(after)
                requests.append({
                    "t": call["t"], "type": "s", "in": call["in"], "out": call["out"],
                    "hash_ids": ids, "api_time": call["api"],
                })
            context = afters[-1]
        a_traces.append({
            "id": name, "t": round(start, 3), "models": ["harness-a-model"],
            "block_size": BLOCK, "system_tokens": 250, "tool_tokens": 150,
            "requests": requests,
        })
        index = 0
        flat = [(g, c) for g, group in enumerate(steps) for c in group]
        for n, (g, call) in enumerate(flat):
            begin = START + start + call["t"]
            last_of_group = n + 1 == len(flat) or flat[n + 1][0] != g
            tools = []
            if last_of_group and n + 1 < len(flat):
                tools = [{"tool_name": rng.choice(["read_file", "bash", "grep", "edit"]),
                          "tool_wall_latency_ms": round(call["gap"] * 1000.0, 1)}]
            inp = call["in"] + STAMP
            b_rows.append({
                "session_id": name, "round_index": index, "provider": "harness-b",
                "model": "harness-b-model", "input_tokens_total": inp,
                "prefix_tokens": 0, "newly_append_tokens": inp,
                "output_tokens": call["out"], "reasoning_output_tokens": 0,
                "timing_events": [
                    {"event_type": "user_message" if n == 0 else "tool_result",
                     "timestamp": iso(begin)},
                    {"event_type": "tool_call" if tools else "text",
                     "timestamp": iso(begin + call["api"])},
                ],
                "tools": tools,
            })
            index += 1
    with open(os.path.join(HERE, "harness-a.json"), "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(t, separators=(",", ":")) for t in a_traces) + "\n]\n")
    b_rows.sort(key=lambda r: r["timing_events"][0]["timestamp"])
    with open(os.path.join(HERE, "harness-b.jsonl"), "w") as f:
        for row in b_rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
