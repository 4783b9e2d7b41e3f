#!/usr/bin/env bash
# The test command (README): formatting, lints, the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
