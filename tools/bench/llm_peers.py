"""Peers for `aneforge bench llm`: prefill and decode speed of SmolLM2-135M-Instruct (the Q4_1 GGUF)
in llama.cpp (llama-cpp-python, same GGUF) and HF transformers (fp32 weights dequantised from the
same GGUF, KV cache), batch 1, the same 128-token prompt and 128 greedy tokens with EOS ignored.

Each peer runs in its own process so its peak resident memory is its own. Prints one JSON line per
peer: {"peer", "threads", "prompt_tokens", "prefill_tok_s", "decode_tokens", "decode_tok_s",
"peak_rss_mb", "version"} plus the best runs' CPU seconds ("prefill_cpu_s", "decode_cpu_s").

Environments (kept out of the repository; each defaults to this interpreter):
  llama.cpp:    LLAMACPP_PYTHON, a venv with `pip install llama-cpp-python`
  transformers: REF_PYTHON, a venv of tools/fixtures/requirements.txt
Run: python3 tools/bench/llm_peers.py [--threads 2] [--peers llama.cpp,transformers] [--repeat 3]
     [--prompt 128] [--ctx 512] [--cache-type f16|f32|q8_0] [--flash-attn]
"""
import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENVS = {
    "llama.cpp": os.environ.get("LLAMACPP_PYTHON", sys.executable),
    "transformers": os.environ.get("REF_PYTHON", sys.executable),
}
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHAKESPEARE = os.environ.get(
    "ANEFORGE_SHAKESPEARE", os.path.join(HERE, "..", "..", "data", "shakespeare.txt"))


def gguf_path():
    if os.environ.get("ANEFORGE_BENCH_GGUF"):
        return os.environ["ANEFORGE_BENCH_GGUF"]
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    found = glob.glob(os.path.join(hub, "models--HuggingFaceTB--SmolLM2-135M-Instruct", "snapshots", "*", FILE))
    if not found:
        sys.exit(f"{FILE} not found under {hub}; run scripts/fetch-models.sh smollm2")
    return found[0]


def prompt_text(tokens=128):
    """Lines 1000-1200 of the Shakespeare corpus joined by spaces, more lines for prompts of
    more than 800 tokens (`--print-prompt` prints it for `aneforge bench llm --prompt-file`)."""
    with open(SHAKESPEARE, encoding="utf-8") as f:
        lines = [l.strip() for l in f][1000:1000 + max(200, tokens // 4)]
    return " ".join(lines)


def cache_type(name):
    """llama.cpp's ggml type of a KV cache type name."""
    import llama_cpp
    return {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16,
            "q8_0": llama_cpp.GGML_TYPE_Q8_0}[name]


class Best:
    """The fastest (wall time) prefill and decode of the timed runs, with their CPU seconds."""

    def __init__(self):
        self.prefill = self.decode = None

    def add(self, prefill_wall, prefill_cpu, decode_wall, decode_cpu):
        if self.prefill is None or prefill_wall < self.prefill[0]:
            self.prefill = (prefill_wall, prefill_cpu)
        if self.decode is None or decode_wall < self.decode[0]:
            self.decode = (decode_wall, decode_cpu)

    def result(self, prompt_tokens, decode_tokens, version):
        return {"prompt_tokens": prompt_tokens, "prefill_tok_s": prompt_tokens / self.prefill[0],
                "prefill_cpu_s": self.prefill[1], "decode_tokens": decode_tokens,
                "decode_tok_s": decode_tokens / self.decode[0], "decode_wall_s": self.decode[0],
                "decode_cpu_s": self.decode[1], "version": version}


def run_llamacpp(args):
    import time

    import llama_cpp
    import numpy as np

    t_load = time.perf_counter()
    kv = cache_type(args.cache_type)
    llm = llama_cpp.Llama(model_path=gguf_path(), n_ctx=args.ctx, n_threads=args.threads,
                          n_threads_batch=args.threads, n_batch=min(args.prompt, 512),
                          type_k=kv, type_v=kv, flash_attn=args.flash_attn, verbose=False)
    load_s = time.perf_counter() - t_load
    ids = llm.tokenize(prompt_text(args.prompt).encode(), add_bos=False)[: args.prompt]
    vocab = llm.n_vocab()

    def last_logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    best = Best()
    first_run_s = ttft_s = None
    for _ in range(args.repeat + 1):  # the first run warms up
        llm.reset()
        c0, t0 = time.process_time(), time.perf_counter()
        llm.eval(ids)
        c1, t1 = time.process_time(), time.perf_counter()
        tok = int(np.argmax(last_logits()))
        c2, t2 = time.process_time(), time.perf_counter()
        for _ in range(args.decode):
            llm.eval([tok])
            tok = int(np.argmax(last_logits()))
        c3, t3 = time.process_time(), time.perf_counter()
        if first_run_s is None:
            first_run_s = t3 - t0
            ttft_s = load_s + t1 - t0
            continue
        best.add(t1 - t0, c1 - c0, t3 - t2, c3 - c2)
    result = best.result(len(ids), args.decode, llama_cpp.__version__)
    return {**result, "load_s": load_s, "ttft_s": ttft_s, "first_run_s": first_run_s}


def run_transformers(args):
    import time

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    path, file = os.path.split(gguf_path())
    tok = transformers.AutoTokenizer.from_pretrained(path, gguf_file=file)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, gguf_file=file, dtype=torch.float32).eval()
    ids = tok(prompt_text(args.prompt), add_special_tokens=False).input_ids[: args.prompt]
    x = torch.tensor([ids])
    best = Best()
    with torch.inference_mode():
        for _ in range(args.repeat + 1):  # the first run warms up
            c0, t0 = time.process_time(), time.perf_counter()
            out = model(x, use_cache=True)
            c1, t1 = time.process_time(), time.perf_counter()
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            c2, t2 = time.process_time(), time.perf_counter()
            for _ in range(args.decode):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1:].argmax(-1)
            c3, t3 = time.process_time(), time.perf_counter()
            best.add(t1 - t0, c1 - c0, t3 - t2, c3 - c2)
    return best.result(len(ids), args.decode,
                       f"transformers {transformers.__version__}, torch {torch.__version__}")


def child(args):
    import resource

    result = {"llama.cpp": run_llamacpp, "transformers": run_transformers}[args.child](args)
    cache = args.cache_type if args.child == "llama.cpp" else "f32"
    result.update({"peer": args.child, "threads": args.threads, "cache_type": cache,
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--peers", default="llama.cpp,transformers")
    p.add_argument("--gguf", help="the GGUF file (default: the Q4_1 file in the hub cache)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--print-prompt", action="store_true", help="print the prompt text and exit")
    p.add_argument("--ctx", type=int, default=512, help="llama.cpp's context (n_ctx)")
    p.add_argument("--cache-type", default="f16", choices=["f32", "f16", "q8_0"],
                   help="llama.cpp's KV cache type for keys and values (q8_0 implies --flash-attn)")
    p.add_argument("--flash-attn", action="store_true", help="llama.cpp's flash attention")
    args = p.parse_args()
    args.flash_attn = args.flash_attn or args.cache_type == "q8_0"
    if args.print_prompt:
        sys.stdout.write(prompt_text(args.prompt))
        return
    if args.child:
        return child(args)
    for peer in args.peers.split(","):
        python = VENVS[peer]
        if not os.path.exists(python):
            print(json.dumps({"peer": peer, "error": f"{python} not found"}))
            continue
        cmd = [python, os.path.abspath(__file__), "--child", peer, "--threads", str(args.threads),
               "--prompt", str(args.prompt), "--decode", str(args.decode), "--repeat", str(args.repeat),
               "--ctx", str(args.ctx), "--cache-type", args.cache_type]
        if args.flash_attn:
            cmd.append("--flash-attn")
        env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(args.threads))
        if args.gguf:
            env["ANEFORGE_BENCH_GGUF"] = os.path.abspath(args.gguf)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        line = [l for l in r.stdout.splitlines() if l.startswith("{")]
        print(line[-1] if line else json.dumps({"peer": peer, "error": r.stderr[-2000:]}))


if __name__ == "__main__":
    main()
