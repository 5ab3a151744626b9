#!/usr/bin/env bash
# weir's synchronous pipeline measured from a separate crate (see
# benches/formulations.rs). Target folder: the checkout's target/formulations.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CARGO_TARGET_DIR="$here/../../target/formulations" \
    cargo bench --manifest-path "$here/Cargo.toml" --bench formulations -- "$@"
