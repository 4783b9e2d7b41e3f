"""Whisper peers for tools/bench/whisper.sh (benchmarks only; never run in CI): transcribes the
clips with one system and prints one JSON object per clip: system, clip, seconds (best of
--repeat timed runs after a warm-up run), text.

Systems: faster-whisper (CTranslate2; int8 or float32, greedy, on the same model.bin the
aneforge loader reads), transformers (fp32 greedy generate on those weights, converted as
tools/fixtures/whisper/reference.py does) and whisper.cpp (its `whisper-cli`, greedy: beam size 1,
best of 1, no temperature fallback, on those weights written in its format by whisper_ggml.py with
fp16 matrices, its default; one process per run, timed by whisper.cpp's own report as total
minus load time). Pinned: faster-whisper==1.2.1 (ctranslate2==4.8.5), transformers==5.24.0,
torch==2.15.0; whisper.cpp is whatever build --whisper-cli names (its commit goes in the docs).

Usage: python3 whisper_peers.py SYSTEM MODEL_ID CLIP... [--threads N] [--repeat R]
    [--whisper-cli PATH]
SYSTEM: faster-whisper-int8 | faster-whisper-fp32 | transformers | whisper.cpp
"""
import argparse
import json
import os
import sys
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def clip_audio(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def ct2_dir(repo):
    from huggingface_hub import snapshot_download

    return os.path.join(snapshot_download(repo, local_files_only=True), "ctranslate2")


def faster_whisper(repo, compute_type, threads):
    from faster_whisper import WhisperModel

    model = WhisperModel(ct2_dir(repo), device="cpu", compute_type=compute_type, cpu_threads=threads)

    def run(audio):
        segments, _ = model.transcribe(audio, beam_size=1, language="en", without_timestamps=True,
                                       condition_on_previous_text=False, temperature=0.0)
        return "".join(s.text for s in segments)

    return run


def transformers_peer(repo, threads):
    import torch

    torch.set_num_threads(threads)
    sys.path.insert(0, os.path.join(HERE, "..", "fixtures", "whisper"))
    from reference import load  # noqa: E402
    from transformers import WhisperFeatureExtractor

    model, tok, _, cfg = load(repo)
    fe = WhisperFeatureExtractor(feature_size=cfg.num_mel_bins)
    kw = {"language": "en", "task": "transcribe"} if model.generation_config.is_multilingual else {}

    def run(audio):
        feat = fe(audio, sampling_rate=16000, return_tensors="pt").input_features
        with torch.no_grad():
            out = model.generate(feat, do_sample=False, num_beams=1, **kw)
        return tok.decode(out[0], skip_special_tokens=True)

    return run


def whisper_cpp(repo, threads, cli, scratch):
    """A function of a clip's path returning (seconds, text), seconds as whisper.cpp reports them
    (total minus model load)."""
    import re
    import subprocess

    model = os.path.join(scratch, "ggml-model.bin")
    subprocess.run([sys.executable, os.path.join(HERE, "whisper_ggml.py"), repo, model], check=True,
                   stdout=subprocess.DEVNULL)

    def run(clip):
        prefix = os.path.join(scratch, "out")
        done = subprocess.run([cli, "-m", model, "-f", clip, "-t", str(threads), "-bs", "1", "-bo", "1",
                               "-nf", "-nt", "-l", "en", "-otxt", "-of", prefix],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"whisper.cpp failed on {clip}: {done.stderr[-2000:]}")
        ms = {k: float(v) for k, v in re.findall(r"(load|total) time =\s*([0-9.]+) ms", done.stderr)}
        with open(prefix + ".txt", encoding="utf-8") as f:
            text = " ".join(line.strip() for line in f)
        return (ms["total"] - ms["load"]) / 1000, text

    return run


def main():
    p = argparse.ArgumentParser()
    p.add_argument("system")
    p.add_argument("model")
    p.add_argument("clips", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--whisper-cli", help="whisper.cpp's whisper-cli (for SYSTEM whisper.cpp)")
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.system == "faster-whisper-int8":
        run = faster_whisper(a.model, "int8", a.threads)
    elif a.system == "faster-whisper-fp32":
        run = faster_whisper(a.model, "float32", a.threads)
    elif a.system == "transformers":
        run = transformers_peer(a.model, a.threads)
    elif a.system == "whisper.cpp":
        import tempfile

        if not a.whisper_cli:
            sys.exit("whisper.cpp needs --whisper-cli PATH")
        with tempfile.TemporaryDirectory() as scratch:
            run = whisper_cpp(a.model, a.threads, a.whisper_cli, scratch)
            for clip in a.clips:
                times, text = [], ""
                for _ in range(a.repeat + 1):  # the first run warms up
                    seconds, text = run(clip)
                    times.append(seconds)
                print(json.dumps({"system": a.system, "clip": os.path.basename(clip), "seconds": min(times[1:]),
                                  "audio_seconds": len(clip_audio(clip)) / 16000, "text": text.strip()}),
                      flush=True)
        return
    else:
        sys.exit(f"unknown system {a.system}")
    for clip in a.clips:
        audio = clip_audio(clip)
        text = run(audio)
        best = float("inf")
        for _ in range(a.repeat):
            t = time.perf_counter()
            text = run(audio)
            best = min(best, time.perf_counter() - t)
        print(json.dumps({"system": a.system, "clip": os.path.basename(clip), "seconds": best,
                          "audio_seconds": len(audio) / 16000, "text": text.strip()}), flush=True)


if __name__ == "__main__":
    main()
