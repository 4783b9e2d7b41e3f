"""The PyTorch peer of `aneforge finetune` (full fine-tune, AdamW): transformers' causal-LM loss
on the same model (a GGUF dequantised to fp32), the same packed text, batch, sequence length and
step count, in float32 on `threads` CPU threads. Prints the tokens/s of the steps after the first
and the peak RSS.
Usage: finetune_peer.py MODEL_DIR GGUF_FILE DATA.txt BATCH SEQ STEPS THREADS
"""
import resource
import sys
import time

import torch
import transformers


def main():
    snap, gguf, data, batch, seq, steps, threads = sys.argv[1:8]
    batch, seq, steps, threads = int(batch), int(seq), int(steps), int(threads)
    torch.set_num_threads(threads)
    tok = transformers.AutoTokenizer.from_pretrained(snap, gguf_file=gguf)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        snap, gguf_file=gguf, dtype=torch.float32
    ).train()
    ids = tok(open(data, encoding="utf-8").read()).input_ids
    rows = [ids[i:i + seq] for i in range(0, len(ids) - seq + 1, seq)]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    times = []
    for step in range(steps):
        chunk = [rows[(step * batch + r) % len(rows)] for r in range(batch)]
        x = torch.tensor(chunk)
        t = time.perf_counter()
        opt.zero_grad()
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
        print(f"step {step + 1}: loss {loss.item():.4f}", file=sys.stderr)
    rate = batch * seq * (steps - 1) / sum(times[1:])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"pytorch {torch.__version__}: {rate:.0f} tokens/s, peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
