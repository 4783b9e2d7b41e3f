"""Peers for `aneforge bench llm`: prefill and decode speed of SmolLM2-135M-Instruct (the Q4_1 GGUF)
in llama.cpp (llama-cpp-python, same GGUF) and HF transformers (fp32 weights dequantised from the
same GGUF, KV cache), batch 1, the same 128-token prompt and 128 greedy tokens with EOS ignored.

Each peer runs in its own process so its peak resident memory is its own. Prints one JSON line per
peer: {"peer", "threads", "prompt_tokens", "prefill_tok_s", "decode_tokens", "decode_tok_s",
"peak_rss_mb", "version"}.

Environments (kept out of the repository):
  llama.cpp:    python3 -m venv /work/venv-llamacpp && /work/venv-llamacpp/bin/pip install llama-cpp-python
  transformers: /work/venv-ref (tools/fixtures/requirements.txt)
Run: python3 tools/bench/llm_peers.py [--threads 2] [--peers llama.cpp,transformers] [--repeat 3]
"""
import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENVS = {
    "llama.cpp": os.environ.get("LLAMACPP_PYTHON", "/work/venv-llamacpp/bin/python"),
    "transformers": os.environ.get("REF_PYTHON", "/work/venv-ref/bin/python"),
}
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHAKESPEARE = os.environ.get("ANEFORGE_SHAKESPEARE", "/work/shared/data/text/shakespeare.txt")


def gguf_path():
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    found = glob.glob(os.path.join(hub, "models--HuggingFaceTB--SmolLM2-135M-Instruct", "snapshots", "*", FILE))
    if not found:
        sys.exit(f"{FILE} not found under {hub}; run scripts/fetch-models.sh smollm2")
    return found[0]


def prompt_text():
    with open(SHAKESPEARE, encoding="utf-8") as f:
        lines = [l.strip() for l in f][1000:1200]
    return " ".join(lines)


def run_llamacpp(args):
    import time

    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=gguf_path(), n_ctx=512, n_threads=args.threads,
                          n_threads_batch=args.threads, n_batch=args.prompt, verbose=False)
    ids = llm.tokenize(prompt_text().encode(), add_bos=False)[: args.prompt]
    vocab = llm.n_vocab()

    def last_logits():
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    best_p, best_d = 0.0, 0.0
    for _ in range(args.repeat):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t1 = time.perf_counter()
        tok = int(np.argmax(last_logits()))
        t2 = time.perf_counter()
        for _ in range(args.decode):
            llm.eval([tok])
            tok = int(np.argmax(last_logits()))
        t3 = time.perf_counter()
        best_p = max(best_p, len(ids) / (t1 - t0))
        best_d = max(best_d, args.decode / (t3 - t2))
    return {"prompt_tokens": len(ids), "prefill_tok_s": best_p, "decode_tokens": args.decode,
            "decode_tok_s": best_d, "version": llama_cpp.__version__}


def run_transformers(args):
    import time

    import torch
    import transformers

    torch.set_num_threads(args.threads)
    path = os.path.dirname(gguf_path())
    tok = transformers.AutoTokenizer.from_pretrained(path, gguf_file=FILE)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, gguf_file=FILE, dtype=torch.float32).eval()
    ids = tok(prompt_text(), add_special_tokens=False).input_ids[: args.prompt]
    x = torch.tensor([ids])
    best_p, best_d = 0.0, 0.0
    with torch.inference_mode():
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = model(x, use_cache=True)
            t1 = time.perf_counter()
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            t2 = time.perf_counter()
            for _ in range(args.decode):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1:].argmax(-1)
            t3 = time.perf_counter()
            best_p = max(best_p, len(ids) / (t1 - t0))
            best_d = max(best_d, args.decode / (t3 - t2))
    return {"prompt_tokens": len(ids), "prefill_tok_s": best_p, "decode_tokens": args.decode,
            "decode_tok_s": best_d, "version": f"transformers {transformers.__version__}, torch {torch.__version__}"}


def child(args):
    import resource

    result = {"llama.cpp": run_llamacpp, "transformers": run_transformers}[args.child](args)
    result.update({"peer": args.child, "threads": args.threads,
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--peers", default="llama.cpp,transformers")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    for peer in args.peers.split(","):
        python = VENVS[peer]
        if not os.path.exists(python):
            print(json.dumps({"peer": peer, "error": f"{python} not found"}))
            continue
        cmd = [python, os.path.abspath(__file__), "--child", peer, "--threads", str(args.threads),
               "--prompt", str(args.prompt), "--decode", str(args.decode), "--repeat", str(args.repeat)]
        env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(args.threads))
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [l for l in r.stdout.splitlines() if l.startswith("{")]
        print(line[-1] if line else json.dumps({"peer": peer, "error": r.stderr[-2000:]}))


if __name__ == "__main__":
    main()
