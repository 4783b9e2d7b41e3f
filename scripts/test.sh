#!/usr/bin/env bash
# The test command (README): formatting, lints, the whole workspace's tests, then the Core ML
# export corpus checked by coremltools itself, and the Python package and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { echo "== $(( $(date +%s) - started )) s: $*"; }
step "fmt and clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Every later step reuses what this build leaves in target/debug: the e5rt simulator's cdylib the
# ANE engine's tests load, the CLI and fuzz binaries, the examples. A `cargo build -p X` would
# instead resolve features for X alone and rebuild most of the workspace.
step "cargo test --workspace"
cargo test --workspace
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir="$(pwd)/$target_dir" ;; esac

# Every file parser fuzzed for a few seconds (crates/fuzz, docs/hardening.md): mutated fixtures,
# each input under a 2 GiB address-space cap and a 5 s watchdog; any panic, abort or hang fails
# the run and leaves its input in target/fuzz/crashes.
step "fuzz"
"$target_dir/debug/aneforge-fuzz" --seconds 5

# The op suite and the state tests a second time, their ANE-target programs run by the ANE engine on
# the simulator (on a Mac, leave ANEFORGE_E5RT_LIB unset to use the real framework).
deps="$target_dir/debug/deps"
sim=""
for candidate in "$deps/libe5rt_sim.so" "$deps/libe5rt_sim.dylib"; do
    if [ -f "$candidate" ]; then sim=$candidate; fi
done
if [ -z "$sim" ]; then
    echo "the e5rt simulator was not built into $deps" >&2
    exit 1
fi
step "op suite on the e5rt simulator"
ANEFORGE_SUITE_ENGINE=ane ANEFORGE_E5RT_LIB="$sim" cargo test --workspace --test op_suite --test state

# The macOS-only code paths (the real-framework test group) must at least type-check for Apple
# Silicon, warnings denied (x86-only kernels must not leave dead code there). The target's
# standard library is fetched once with rustup; without it, say so and skip.
# The CPU engine's kernel and op suites again under each narrower kernel schedule this CPU can be
# held to (ANEFORGE_CPU_KERNELS, crates/cpu/src/simd.rs): the AVX2 and portable code paths run on
# an AVX-512 machine too. A schedule the CPU lacks falls back to the widest it has.
for schedule in avx2 portable; do
    step "CPU engine suites, $schedule kernels"
    ANEFORGE_CPU_KERNELS=$schedule cargo test --quiet -p aneforge-cpu
    ANEFORGE_CPU_KERNELS=$schedule cargo test --quiet --workspace --test op_suite
done

# The CPU engine on aarch64 (the kernels Apple Silicon runs): cross-built with Debian's
# gcc-aarch64-linux-gnu and its suite run under qemu-aarch64 (qemu-user), with the NEON kernels
# and with the portable schedule. QEMU proves correctness,
# not speed. Without those tools this step is skipped, unless ANEFORGE_REQUIRE_CROSS is set (CI).
step "aarch64 CPU engine under QEMU"
arm=aarch64-unknown-linux-gnu
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null \
    && { rustup target list --installed 2>/dev/null | grep -qx "$arm" \
        || rustup target add "$arm" >/dev/null 2>&1; }; then
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
    for schedule in neon portable; do
        ANEFORGE_CPU_KERNELS=$schedule cargo test --quiet --target "$arm" -p aneforge-cpu
    done
elif [ -n "${ANEFORGE_REQUIRE_CROSS:-}" ]; then
    echo "the aarch64 step needs aarch64-linux-gnu-gcc, qemu-aarch64 and rustup's $arm target" >&2
    exit 1
else
    echo "SKIPPED: aarch64 CPU engine suite (no aarch64-linux-gnu-gcc / qemu-aarch64 here)"
fi

step "aarch64-apple-darwin check"
apple=aarch64-apple-darwin
if rustup target list --installed 2>/dev/null | grep -qx "$apple" \
    || rustup target add "$apple" >/dev/null 2>&1; then
    RUSTFLAGS="-D warnings" cargo check --target "$apple" -p aneforge -p e5rt-sim --all-targets
else
    echo "SKIPPED: cargo check --target $apple (rustup could not install the target here)"
fi

# coremltools and the openai client live in a local venv, (re)installed when tools/requirements-ci.txt changes.
venv=.venv-ci
if ! cmp -s tools/requirements-ci.txt "$venv/requirements-ci.txt" 2>/dev/null; then
    echo "installing coremltools into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tools/requirements-ci.txt
    cp tools/requirements-ci.txt "$venv/requirements-ci.txt"
fi
step "coremltools"
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
"$target_dir/debug/examples/coreml_corpus" "$corpus"
"$venv/bin/python" tools/coreml_check.py "$corpus/ok"
"$venv/bin/python" tools/coreml_check.py --expect-fail "$corpus/broken"
# Every program the graph op suite and state tests compile (CPU and ANE targets), every ANE rewrite
# and compression format, through coremltools.
ANEFORGE_DUMP_CORPUS="$corpus/op-suite" cargo test --quiet --workspace --test op_suite --test state \
    --test legalize_cpu --test targets_compress --test w8a8 --test quantized_constants
"$venv/bin/python" tools/coreml_check.py "$corpus/op-suite"

# The Python package (crates/python): maturin builds it in the dev profile into the same venv,
# reusing the dependencies cargo test built above, then its pytest suite runs (the real models as
# the Rust tests take them; pytest's "no tests collected", exit 5, is a failure like any other).
step "python package"
python_started=$(date +%s)
VIRTUAL_ENV="$(pwd)/$venv" "$venv/bin/maturin" develop --quiet --manifest-path crates/python/Cargo.toml
set +e
"$venv/bin/python" -m pytest -q crates/python/tests
pytest_status=$?
set -e
if [ "$pytest_status" -ne 0 ]; then
    echo "python package tests failed (pytest exit $pytest_status; 5 means no tests ran)" >&2
    exit 1
fi
echo "python package: built and tested in $(( $(date +%s) - python_started )) s"

# `aneforge serve` spoken to by the official OpenAI client and curl (the smollm2 and minilm models;
# the script skips without them unless ANEFORGE_REQUIRE_MODELS is set).
step "serve check"
"$venv/bin/python" tools/serve_openai_check.py "$target_dir/debug/aneforge"
step "done"
