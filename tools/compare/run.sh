#!/usr/bin/env bash
# Compare this checkout's async boundary with an earlier revision, in one process.
#
#   tools/compare/run.sh [REVISION]     (default: d231c91, the code before the signal core)
#   PROBE=sync_probe tools/compare/run.sh [REVISION]   (the synchronous pipelines)
#   PROBE=mux_probe tools/compare/run.sh [REVISION]    (the mux's all-fast case)
#   PROBE=hub_probe tools/compare/run.sh [REVISION]    (the hub's fan-out cases)
#
# Extracts REVISION into a temporary folder, renames its package `weir_base`, builds
# `probe.rs` against both crates in release mode (target folder: target/compare) and
# runs it. Environment: PROBE (probe, sync_probe, mux_probe or hub_probe; default probe), and the
# probe's own (ROUNDS, N, PREFETCH, ...: see its header).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
revision="${1:-d231c91}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base" "$work/probe/src"
git -C "$repo" archive "$revision" | tar -x -C "$work/base"
# The package's own name, the first `name =` line of the manifest.
sed -i '0,/^name = "weir"$/s//name = "weir_base"/' "$work/base/Cargo.toml"
cat > "$work/probe/Cargo.toml" <<TOML
[package]
name = "weir-compare"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
weir = { path = "$repo" }
weir_base = { path = "$work/base" }

[workspace]
TOML
cp "$repo/Cargo.lock" "$work/probe/Cargo.lock"
cp "$repo/tools/compare/${PROBE:-probe}.rs" "$work/probe/src/main.rs"
cp "$repo/tools/compare/common.rs" "$work/probe/src/common.rs"
echo "current: $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet || echo ' (with uncommitted changes)'); base: $revision"
CARGO_TARGET_DIR="$repo/target/compare" cargo run --quiet --release --manifest-path "$work/probe/Cargo.toml"
