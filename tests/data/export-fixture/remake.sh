#!/usr/bin/env bash
# Remakes this results folder (the export golden tests' fixture) from
# source.kdl on the tiny simulator in virtual time. The golden files under
# tests/it/snapshots change with it: review them (INSTA_UPDATE=always).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
cargo run --quiet -- run "$here/source.kdl" --virtual --quiet --out "$tmp/out"
rm -rf "$here/runs" "$here/telemetry" && cp -r "$tmp/out/runs" "$tmp/out/telemetry" "$here/"
cp "$tmp/out/experiment.kdl" "$tmp/out/plan.json" "$tmp/out/results.json" "$here/"
rm -rf "$tmp"
