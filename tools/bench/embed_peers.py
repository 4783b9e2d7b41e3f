"""Peers for `aneforge bench embed`: the same sentences through sentence-transformers on PyTorch and
through ONNX Runtime (the transformer exported with torch.onnx.export, all graph optimisations),
each in its own process so peak memory is the system's own. Every command prints one JSON line
shaped like `aneforge bench embed --json`.

  embed_peers.py corpus OUT [N]            N sentences of 5-60 words from the Shakespeare corpus
  embed_peers.py torch FILE [THREADS]      sentence-transformers, PyTorch backend
  embed_peers.py export OUT.onnx           BertModel -> ONNX (opset 17, dynamic batch and length)
  embed_peers.py ort FILE MODEL.onnx [THREADS]
  embed_peers.py check A.npy B.npy         cosine agreement of two embedding files

Environment: MODEL (default sentence-transformers/all-MiniLM-L6-v2), BATCH (32), RUNS (5),
SHAKESPEARE (path of the corpus text). Needs the packages of tools/fixtures/requirements.txt.
"""
import json
import os
import sys
import time

MODEL = os.environ.get("MODEL", "sentence-transformers/all-MiniLM-L6-v2")
BATCH = int(os.environ.get("BATCH", "32"))
RUNS = int(os.environ.get("RUNS", "5"))
SHAKESPEARE = os.environ.get(
    "SHAKESPEARE",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "shakespeare.txt"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")


def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        return f.read().rstrip("\n").split("\n")


def corpus(out, n=256):
    """Sentence i has 5 + (i * 37) % 56 words (5..60), consecutive words of the plays."""
    with open(SHAKESPEARE, encoding="utf-8") as f:
        words = f.read().split()
    sentences, at = [], 1000
    for i in range(n):
        k = 5 + (i * 37) % 56
        sentences.append(" ".join(words[at:at + k]))
        at += k
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")


def report(system, sentences, load_s, first_s, times, threads, cpu_times, extra=None):
    """cpu_times: user + system seconds of the whole process per pass (time.process_time)."""
    times = sorted(times)
    cpu_times = sorted(cpu_times)
    median = times[len(times) // 2]
    out = {"system": system, "sentences": len(sentences), "batch_size": BATCH, "threads": threads,
           "load_s": load_s, "first_pass_s": first_s, "median_s": median, "best_s": times[0],
           "sentences_per_s": len(sentences) / median, "best_sentences_per_s": len(sentences) / times[0],
           "median_cpu_s": cpu_times[len(cpu_times) // 2],
           "peak_rss_mib": peak_rss_mib()}
    out.update(extra or {})
    print(json.dumps(out))


def run_torch(path, threads=2):
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    from sentence_transformers import SentenceTransformer
    sentences = read_sentences(path)
    start = time.perf_counter()
    st = SentenceTransformer(MODEL, device="cpu")
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    first = st.encode(sentences, batch_size=BATCH)
    first_s = time.perf_counter() - start
    times, cpu_times = [], []
    for _ in range(RUNS):
        start, cpu = time.perf_counter(), time.process_time()
        st.encode(sentences, batch_size=BATCH)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    if os.environ.get("SAVE"):
        np.save(os.environ["SAVE"], first.astype(np.float32))
    report("sentence-transformers (PyTorch %s)" % torch.__version__, sentences, load_s, first_s, times,
           threads, cpu_times)


def snapshot_dir():
    from huggingface_hub import snapshot_download
    return snapshot_download(MODEL, local_files_only=True)


def export(out):
    import torch
    from transformers import AutoModel
    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = AutoModel.from_pretrained(snapshot_dir(), attn_implementation="eager").eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    model = Hidden().eval()
    ids = torch.ones(2, 16, dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    axes = {name: {0: "batch", 1: "seq"} for name in ("input_ids", "attention_mask", "token_type_ids")}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    with torch.no_grad():
        torch.onnx.export(model, args, out, input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17,
                          dynamo=False)
    print(json.dumps({"exported": out, "bytes": os.path.getsize(out)}))


def run_ort(path, onnx_path, threads=2):
    """sentence-transformers' pipeline around an ONNX Runtime session: sort by length, batch,
    tokenize (truncate to 256, pad to the batch's longest), run, masked mean pool, L2-normalise."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer
    sentences = read_sentences(path)
    start = time.perf_counter()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(os.path.join(snapshot_dir(), "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    load_s = time.perf_counter() - start

    def encode():
        order = np.argsort([-len(s) for s in sentences], kind="stable")
        out = np.zeros((len(sentences), 384), dtype=np.float32)
        for b in range(0, len(sentences), BATCH):
            idx = order[b:b + BATCH]
            enc = tok.encode_batch([sentences[i] for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            types = np.array([e.type_ids for e in enc], dtype=np.int64)
            hidden = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            out[idx] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return out

    start = time.perf_counter()
    first = encode()
    first_s = time.perf_counter() - start
    times, cpu_times = [], []
    for _ in range(RUNS):
        start, cpu = time.perf_counter(), time.process_time()
        encode()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    if os.environ.get("SAVE"):
        np.save(os.environ["SAVE"], first)
    report("ONNX Runtime %s (ORT_ENABLE_ALL)" % ort.__version__, sentences, load_s, first_s, times, threads,
           cpu_times)


def check(a, b):
    import numpy as np
    x, y = np.load(a), np.load(b)
    cos = (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    print(json.dumps({"files": [a, b], "rows": int(len(x)), "min_cosine": float(cos.min())}))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "corpus":
        corpus(args[0], *(int(a) for a in args[1:]))
    elif cmd == "torch":
        run_torch(args[0], *(int(a) for a in args[1:]))
    elif cmd == "export":
        export(args[0])
    elif cmd == "ort":
        run_ort(args[0], args[1], *(int(a) for a in args[2:]))
    elif cmd == "check":
        check(args[0], args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
