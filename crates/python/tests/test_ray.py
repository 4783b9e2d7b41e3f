"""The Ray Data example (crates/python/examples/ray_embed.py): a corpus embedded by a pool of two
actors on a local Ray cluster gives the single-process embeddings, bit for bit."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import MINILM, ROOT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def test_ray_actor_pool_embeddings_equal_single_process(minilm, tmp_path):
    if os.environ.get("ANEFORGE_REQUIRE_MODELS", "") in ("", "0"):
        pytest.importorskip("ray")
    import ray_embed

    lines = [l for l in (ROOT / "data" / "shakespeare.txt").read_text().splitlines() if l.strip()][:96]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    got = ray_embed.embed_with_ray(str(corpus), MINILM, workers=2, threads=1, batch_size=16)
    want = minilm.encode(lines, batch_size=16)
    assert got.shape == want.shape == (96, 384)
    # each actor batches a different subset, with 1 thread; a row's
    # embedding depends on the row alone (batches never mix sequence buckets), so bit for bit
    np.testing.assert_array_equal(got, want)
