#!/usr/bin/env bash
# The test command (README): formatting, lints, the whole workspace's tests, then the Core ML
# export corpus checked by coremltools itself.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace

# coremltools lives in a local venv, (re)installed when tools/requirements-ci.txt changes.
venv=.venv-ci
if ! cmp -s tools/requirements-ci.txt "$venv/requirements-ci.txt" 2>/dev/null; then
    echo "installing coremltools into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tools/requirements-ci.txt
    cp tools/requirements-ci.txt "$venv/requirements-ci.txt"
fi
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cargo run --quiet -p aneforge-mil --example coreml_corpus -- "$corpus"
"$venv/bin/python" tools/coreml_check.py "$corpus/ok"
"$venv/bin/python" tools/coreml_check.py --expect-fail "$corpus/broken"
