#!/usr/bin/env bash
# capcard side by side with `vllm bench serve` on a real engine on loopback,
# closed loop, fixed lengths (128 in / 64 out, ignore_eos), the two tools
# interleaved level by level and round by round so that the host's drift
# (±30% over minutes on a shared VM) hits both alike.
#
# Needs a server started from ../shared/peers (start-vllm.sh with
# MAX_NUM_SEQS=4, or start-llamacpp.sh with PARALLEL=4) and its vLLM venv
# for `vllm bench`. The client is pinned to CPU 0, the servers to CPU 1.
#
# Usage: benches/real-engines.sh ENGINE API [LEVELS...]
#   ENGINE: vllm (port 8000) | llamacpp (port 8001); API: completions | chat
#   env: ROUNDS (2), SECONDS_PER_LEVEL (20), OUT (/tmp/capcard-sbs-ENGINE-API)
# Prints a markdown table: per level, each tool's mean over the rounds.
set -euo pipefail
ENGINE="${1:?vllm or llamacpp}"; API="${2:?completions or chat}"; shift 2
LEVELS=("$@"); [ ${#LEVELS[@]} -eq 0 ] && LEVELS=(1 2 4 8)
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="${PEERS:-$HERE/../shared/peers}"
ROUNDS="${ROUNDS:-2}"; SECS="${SECONDS_PER_LEVEL:-20}"
OUT="${OUT:-/tmp/capcard-sbs-$ENGINE-$API}"
CAPCARD="${CAPCARD:-$HERE/target/release/capcard}"
case "$ENGINE" in
  vllm) PORT=8000; [ "$API" = chat ] && export BACKEND=openai-chat ENDPOINT=/v1/chat/completions ;;
  llamacpp) PORT=8001
    if [ "$API" = chat ]; then export BACKEND=openai-chat ENDPOINT=/v1/chat/completions
    else export BACKEND=openai ENDPOINT=/v1/completions; fi ;;
  *) echo "ENGINE is vllm or llamacpp" >&2; exit 1 ;;
esac
rm -rf "$OUT"; mkdir -p "$OUT"
[ -x "$CAPCARD" ] || (cd "$HERE" && cargo build --release)

for round in $(seq 1 "$ROUNDS"); do
  for c in "${LEVELS[@]}"; do
    cat >"$OUT/c$c.kdl" <<EOF
experiment "sbs-$ENGINE-$API" { seed $((round * 100 + c)); }
target "$ENGINE" {
    endpoint "http://127.0.0.1:$PORT/v1"
    api $API
    model "tiny-llama"
    timeout "120s"
}
workload "fixed" {
    input-tokens fixed 128
    output-tokens fixed 64
}
closed {
    concurrency $c
    duration "${SECS}s"
    warmup "3s"
}
EOF
    echo "== round $round, c=$c: capcard" >&2
    taskset -c 0 "$CAPCARD" run --quiet --out "$OUT/capcard-r$round-c$c" "$OUT/c$c.kdl" \
      >"$OUT/capcard-r$round-c$c.log" 2>&1
    echo "== round $round, c=$c: vllm bench serve" >&2
    OUT="$OUT/vllm-r$round" PROMPTS_PER_C="${PROMPTS_PER_C:-10}" SEED=$((round * 1000)) \
      "$PEERS/bench-vllm-sweep.sh" "$PORT" "$c" >/dev/null 2>"$OUT/vllm-r$round-c$c.err" || true
  done
done

python3 - "$OUT" "$ROUNDS" "${LEVELS[@]}" <<'EOF'
import json, os, statistics, sys
out, rounds, levels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def mean(xs): return statistics.mean(xs) if xs else float("nan")
def pct(a, b): return 100 * (a - b) / b if b else float("nan")
print(f"results: {out} ({rounds} rounds, means; per-round values in brackets)")
print("| c | req/s capcard | req/s vllm bench | Δ | out tok/s capcard | out tok/s vllm bench | Δ | TTFT p50 ms capcard | TTFT p50 ms vllm bench | Δ | capcard prompt tokens | capcard errors / reconnects |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in levels:
    cr, ct, cf, vr, vt, vf, prompt, errors, reconnects = [], [], [], [], [], [], set(), 0, 0
    for r in range(1, rounds + 1):
        rj = os.path.join(out, f"capcard-r{r}-c{c}", "results.json")
        if os.path.exists(rj):
            run = json.load(open(rj))["cards"][0]["closed"][0]
            cr.append(run["requests_per_s"]); ct.append(run["output_tokens_per_s"])
            cf.append(run["ttft_ms"]["p50"]); errors += run["errors"]
            reconnects += run.get("reconnects", 0)
            prompt.add(round(run["prompt_tokens_reported_mean"] or 0))
        vj = os.path.join(out, f"vllm-r{r}", f"c{c}.json")
        if os.path.exists(vj):
            v = json.load(open(vj))
            vr.append(v["completed"] / v["duration"]); vt.append(v["output_throughput"])
            vf.append(v["median_ttft_ms"])
    fmt = lambda xs, d: "[" + " ".join(f"{x:.{d}f}" for x in xs) + "]"
    print(f"| {c} | {mean(cr):.2f} {fmt(cr,2)} | {mean(vr):.2f} {fmt(vr,2)} | {pct(mean(cr), mean(vr)):+.1f}% "
          f"| {mean(ct):.1f} | {mean(vt):.1f} | {pct(mean(ct), mean(vt)):+.1f}% "
          f"| {mean(cf):.0f} {fmt(cf,0)} | {mean(vf):.0f} {fmt(vf,0)} | {pct(mean(cf), mean(vf)):+.1f}% "
          f"| {sorted(prompt)} | {errors} / {reconnects} |")
EOF
