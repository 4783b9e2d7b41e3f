"""PyTorch peer for `aneforge bench train`: training steps of the demo configuration.

The same model as aneforge's `train::models::gpt` (pre-norm decoder, causal attention, learned
positions, GELU MLP, untied head), the same batch and optimizer (AdamW lr 3e-4, weight decay 0.1,
gradient clipping at 1.0), fp32 on the CPU with a fixed thread count. Prints `torch <version>`,
`steps_per_s <x>` (wall clock) and `cpu_s_per_step <x>` (process CPU time, all threads).

    python tools/bench/train_peer.py --threads 2 --steps 20 --warmup 3
"""

import argparse
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=76)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--mlp", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d, t, h, v, m = a.d_model, a.context, a.heads, a.vocab, a.mlp
    dh = d // h

    def w(*shape, std=0.02):
        return (torch.randn(*shape) * std).requires_grad_(True)

    def zeros(*shape):
        return torch.zeros(*shape).requires_grad_(True)

    def ones(*shape):
        return torch.ones(*shape).requires_grad_(True)

    p = {"wte": w(v, d), "wpe": w(t, d)}
    for l in range(a.layers):
        p[f"{l}.ln1_g"], p[f"{l}.ln1_b"] = ones(d), zeros(d)
        p[f"{l}.qkv_w"], p[f"{l}.qkv_b"] = w(3 * d, d), zeros(3 * d)
        p[f"{l}.proj_w"], p[f"{l}.proj_b"] = w(d, d), zeros(d)
        p[f"{l}.ln2_g"], p[f"{l}.ln2_b"] = ones(d), zeros(d)
        p[f"{l}.fc_w"], p[f"{l}.fc_b"] = w(m, d), zeros(m)
        p[f"{l}.mproj_w"], p[f"{l}.mproj_b"] = w(d, m), zeros(d)
    p["lnf_g"], p["lnf_b"] = ones(d), zeros(d)
    p["head"] = w(v, d)

    def loss_fn(tokens, targets):
        b = tokens.shape[0]
        x = p["wte"][tokens] + p["wpe"]
        for l in range(a.layers):
            y = F.layer_norm(x, (d,), p[f"{l}.ln1_g"], p[f"{l}.ln1_b"])
            q, k, vv = F.linear(y, p[f"{l}.qkv_w"], p[f"{l}.qkv_b"]).split(d, dim=-1)
            heads = lambda u: u.reshape(b, t, h, dh).transpose(1, 2)
            att = F.scaled_dot_product_attention(heads(q), heads(k), heads(vv), is_causal=True)
            x = x + F.linear(att.transpose(1, 2).reshape(b, t, d), p[f"{l}.proj_w"], p[f"{l}.proj_b"])
            y = F.layer_norm(x, (d,), p[f"{l}.ln2_g"], p[f"{l}.ln2_b"])
            x = x + F.linear(F.gelu(F.linear(y, p[f"{l}.fc_w"], p[f"{l}.fc_b"])), p[f"{l}.mproj_w"], p[f"{l}.mproj_b"])
        x = F.layer_norm(x, (d,), p["lnf_g"], p["lnf_b"])
        logits = F.linear(x, p["head"])
        return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1))

    params = list(p.values())
    opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)

    def step():
        tokens = torch.randint(0, v, (a.batch, t))
        targets = torch.randint(0, v, (a.batch, t))
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    cpu_start = time.process_time()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    secs = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    print(f"torch {torch.__version__}")
    print(f"steps_per_s {a.steps / secs:.6f}")
    print(f"cpu_s_per_step {cpu / a.steps:.6f}")


if __name__ == "__main__":
    main()
