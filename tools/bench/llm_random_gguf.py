"""A random-weight GGUF of a real architecture at a benchmark size (a few hundred MB), for speed
comparisons where no small published checkpoint of the family exists. The model is the tiny
fixture family of tools/fixtures/llm/tiny_models.py (same tokenizer, vocabulary 384, same
seeded weight distribution) with the layer dimensions below, written by the fixtures' GGUF
writer (tiny_gguf.py) in llama.cpp's layout with every matrix quantized to QTYPE.

Sizes (Q8_0): qwen3_moe ~350 MB (32 experts choosing 4), mixtral ~340 MB (8 choosing 2),
phi3 ~330 MB, gemma2 ~330 MB. The vocabulary is the fixtures' 384 tokens, so the output head is
a negligible share of each decode step (real models spend 5-30 % there).

Usage: python3 tools/bench/llm_random_gguf.py FAMILY OUT.gguf [q8_0|q4_0|f16]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures", "llm"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))

import gguf  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import tiny_gguf  # noqa: E402
import tiny_models  # noqa: E402

# layer dimensions per family: realistic widths, few layers
SIZES = {
    "qwen3_moe": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                      num_key_value_heads=4, head_dim=128, num_experts=32, num_experts_per_tok=4,
                      moe_intermediate_size=384),
    "mixtral": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                    num_key_value_heads=4, intermediate_size=1536, num_local_experts=8),
    "phi3": dict(hidden_size=2048, num_hidden_layers=6, num_attention_heads=32,
                 num_key_value_heads=32, intermediate_size=5632, sliding_window=2047),
    "gemma2": dict(hidden_size=2048, num_hidden_layers=6, num_attention_heads=8,
                   num_key_value_heads=4, head_dim=256, intermediate_size=6144,
                   sliding_window=512, query_pre_attn_scalar=256,
                   layer_types=["sliding_attention", "full_attention"] * 3),
}
QTYPES = {
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "f16": gguf.GGMLQuantizationType.F16,
}


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in SIZES:
        raise SystemExit(__doc__)
    family, out = sys.argv[1], sys.argv[2]
    qtype = QTYPES[sys.argv[3] if len(sys.argv) == 4 else "q8_0"]
    config = tiny_models.configs()[family]
    for k, v in SIZES[family].items():
        setattr(config, k, v)
    torch.manual_seed(0)
    tok = tiny_models.train_tokenizer()
    model = getattr(transformers, tiny_models.CLASSES[family])(config).eval()
    tiny_models.randomize(model, family, 0, torch.float16)
    state = tiny_models.checkpoint_state(model, family, torch.float16)
    del model
    tiny_gguf.write(out + ".tmp", family, config, state, tok, tiny_models.CHATML, qtype, "gpt-2")
    os.replace(out + ".tmp", out)
    print(out, os.path.getsize(out) // (1 << 20), "MiB")


if __name__ == "__main__":
    main()
