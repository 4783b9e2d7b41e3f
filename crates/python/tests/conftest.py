"""Shared helpers: where the committed fixtures are, and real models as the Rust tests take them
(aneforge_models::testing::model_or_skip): a model must be listed in tools/test-models.txt, and a
missing one skips the test unless ANEFORGE_REQUIRE_MODELS=1, when it fails."""

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import aneforge as af

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tools" / "fixtures"
ENCODERS = FIXTURES / "encoders" / "out"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def listed_models():
    lines = (ROOT / "tools" / "test-models.txt").read_text().splitlines()
    return {l.split()[1] for l in lines if l.strip() and not l.lstrip().startswith("#")}


def load_model(factory, model_id, **kwargs):
    """``factory(model_id, **kwargs)``, or a skip (a failure under ANEFORGE_REQUIRE_MODELS=1)
    when the model is not in the Hugging Face cache."""
    assert model_id in listed_models(), f"{model_id} is not in tools/test-models.txt: CI would not fetch it"
    try:
        return factory(model_id, **kwargs)
    except af.ModelNotFoundError as e:
        if os.environ.get("ANEFORGE_REQUIRE_MODELS", "") not in ("", "0"):
            pytest.fail(f"{model_id} is required (ANEFORGE_REQUIRE_MODELS) but missing: {e}")
        pytest.skip(f"{model_id} is not in the Hugging Face cache (scripts/fetch-models.sh): {e}")


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2, loaded once for every test that takes it (its compiled bucket
    programs are kept between tests)."""
    return load_model(af.SentenceTransformer, MINILM)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_safetensors(path):
    """The tensors of a safetensors file as NumPy arrays (the format: an 8-byte little-endian
    header length, a JSON header of dtype/shape/offsets, then the data)."""
    dtypes = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "F16": np.float16}
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def cosines(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def model_dir(model_id):
    """The snapshot directory of ``model_id`` in the Hugging Face cache, as the loaders find it
    (``$HF_HOME/hub/models--ORG--NAME/snapshots/<refs/main>``), or a skip (a failure under
    ANEFORGE_REQUIRE_MODELS=1) when it is not there."""
    assert model_id in listed_models(), f"{model_id} is not in tools/test-models.txt: CI would not fetch it"
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    repo = home / "hub" / ("models--" + model_id.replace("/", "--"))
    try:
        snapshot = repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
    except OSError as e:
        snapshot = None
        missing = e
    if snapshot is None or not snapshot.is_dir():
        if os.environ.get("ANEFORGE_REQUIRE_MODELS", "") not in ("", "0"):
            pytest.fail(f"{model_id} is required (ANEFORGE_REQUIRE_MODELS) but missing under {repo}")
        pytest.skip(f"{model_id} is not in the Hugging Face cache (scripts/fetch-models.sh): {repo}")
    return snapshot


def write_bmp(path, rgb):
    """A 24-bit bottom-up BMP of a uint8 [H, W, 3] RGB array (rows padded to 4 bytes)."""
    h, w, _ = rgb.shape
    stride = (3 * w + 3) // 4 * 4
    rows = np.zeros((h, stride), dtype=np.uint8)
    rows[:, : 3 * w] = rgb[::-1, :, ::-1].reshape(h, 3 * w)
    header = struct.pack("<2sIHHI", b"BM", 54 + rows.size, 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, rows.size, 2835, 2835, 0, 0)
    path.write_bytes(header + info + rows.tobytes())
