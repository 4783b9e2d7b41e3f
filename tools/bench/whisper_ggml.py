#!/usr/bin/env python3
"""Writes a whisper.cpp model file (its legacy `ggml` format, fp16 matrices) from the CTranslate2
Whisper checkpoint that scripts/fetch-models.sh places, so that whisper.cpp runs the very weights
aneforge and faster-whisper run (tools/bench/whisper.sh).

The checkpoint is read and mapped onto transformers' names by tools/fixtures/whisper/reference.py
(`load`); the names are then mapped onto openai-whisper's, which whisper.cpp uses. The mel filter
bank is transformers' WhisperFeatureExtractor's (Slaney-normalised, as openai-whisper's
mel_filters.npz), the vocabulary the byte-level BPE tokens of the checkpoint's tokenizer.json.

File layout (little-endian): the magic 0x67676d6c; 11 int32 hyperparameters (vocabulary size,
audio context, audio width, audio heads, audio layers, text context, text width, text heads, text
layers, mel bins, ftype 1 = fp16); the filter bank (int32 mel bins, int32 FFT bins, then f32
values row by row); the vocabulary (int32 count, then per token an int32 byte length and the
bytes); then per tensor: int32 rank, int32 name length, int32 type (0 f32, 1 f16), the dimensions
innermost first, the name, the data. Matrices are fp16; vectors, the convolution biases (as
[n, 1]) and the positional embeddings f32.

Pinned: as reference.py (torch, transformers, numpy). Usage: whisper_ggml.py MODEL_ID OUT.bin
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "whisper"))

import reference  # noqa: E402
from transformers import WhisperFeatureExtractor  # noqa: E402

LAYER_PARTS = {
    "self_attn.q_proj": "attn.query",
    "self_attn.k_proj": "attn.key",
    "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out",
    "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query",
    "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value",
    "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln",
    "fc1": "mlp.0",
    "fc2": "mlp.2",
    "final_layer_norm": "mlp_ln",
}
TOP = {
    "model.encoder.embed_positions.weight": "encoder.positional_embedding",
    "model.encoder.conv1.weight": "encoder.conv1.weight",
    "model.encoder.conv1.bias": "encoder.conv1.bias",
    "model.encoder.conv2.weight": "encoder.conv2.weight",
    "model.encoder.conv2.bias": "encoder.conv2.bias",
    "model.encoder.layer_norm.weight": "encoder.ln_post.weight",
    "model.encoder.layer_norm.bias": "encoder.ln_post.bias",
    "model.decoder.embed_positions.weight": "decoder.positional_embedding",
    "model.decoder.embed_tokens.weight": "decoder.token_embedding.weight",
    "model.decoder.layer_norm.weight": "decoder.ln.weight",
    "model.decoder.layer_norm.bias": "decoder.ln.bias",
}


def whisper_name(hf):
    if hf in TOP:
        return TOP[hf]
    parts = hf.split(".")  # model.{side}.layers.{n}.{part...}.{weight|bias}
    if parts[0] != "model" or parts[2] != "layers":
        raise KeyError(f"no whisper.cpp name for {hf}")
    side, n, leaf = parts[1], parts[3], parts[-1]
    return f"{side}.blocks.{n}.{LAYER_PARTS['.'.join(parts[4:-1])]}.{leaf}"


def byte_decoder():
    """GPT-2's byte-level BPE alphabet: printable bytes stand for themselves, the others for
    the code points from 256 up, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: whisper_ggml.py MODEL_ID OUT.bin")
    repo, out = sys.argv[1], sys.argv[2]
    _, _, sd, cfg = reference.load(repo)
    snap = os.path.join(reference.snapshot_download(repo, local_files_only=True), "ctranslate2")
    vocab = json.load(open(os.path.join(snap, "tokenizer.json"), encoding="utf-8"))["model"]["vocab"]
    decode = byte_decoder()
    filters = WhisperFeatureExtractor(feature_size=cfg.num_mel_bins).mel_filters.T.astype(np.float32)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<12i", 0x67676D6C, cfg.vocab_size, cfg.max_source_positions, cfg.d_model,
                            cfg.encoder_attention_heads, cfg.encoder_layers, cfg.max_target_positions,
                            cfg.d_model, cfg.decoder_attention_heads, cfg.decoder_layers, cfg.num_mel_bins, 1))
        f.write(struct.pack("<2i", *filters.shape))
        f.write(np.ascontiguousarray(filters).astype("<f4").tobytes())
        tokens = sorted(vocab.items(), key=lambda kv: kv[1])
        f.write(struct.pack("<i", len(tokens)))
        for text, _ in tokens:
            raw = bytes(decode[c] for c in text)
            f.write(struct.pack("<i", len(raw)))
            f.write(raw)
        for hf, tensor in sd.items():
            if hf == "proj_out.weight":
                continue  # tied to the token embedding
            name = whisper_name(hf)
            data = tensor.detach().float().numpy()
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                data = data.reshape(-1, 1)
            f32 = data.ndim < 2 or name.endswith("conv1.bias") or name.endswith("conv2.bias") \
                or name.endswith("positional_embedding")
            data = data.astype("<f4" if f32 else "<f2")
            encoded = name.encode()
            f.write(struct.pack("<3i", data.ndim, len(encoded), 0 if f32 else 1))
            f.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))
            f.write(encoded)
            f.write(np.ascontiguousarray(data).tobytes())
    os.replace(tmp, out)
    print(f"{out}: {len(sd)} tensors, vocabulary {len(tokens)} of {cfg.vocab_size}")


if __name__ == "__main__":
    main()
