"""af.CLIPModel on the committed CLIP fixture (random weights of the real architecture, reduced;
tools/fixtures/vision/out/hf_vit/clip from tools/fixtures/vision/hf_vit_random.py) and
scikit-image's photos: image embeddings, text embeddings and logits_per_image against
transformers' (expected.json and the .npy files beside it), zero-shot classification ranked by
those logits, NumPy pixels equal to the same photo's file, and errors for bad input."""

import numpy as np
import pytest

import aneforge as af
from conftest import FIXTURES, model_dir, read_json, write_bmp

CLIP = FIXTURES / "vision" / "out" / "hf_vit" / "clip"


@pytest.fixture(scope="module")
def clip():
    return af.CLIPModel(str(CLIP), batch_size=2)


@pytest.fixture(scope="module")
def expected():
    return read_json(CLIP / "expected.json")


@pytest.fixture(scope="module")
def photos(expected):
    return [str(model_dir("scikit-image/data") / p) for p in expected["photos"]]


def close(got, want):
    """Within 1e-4 of the largest reference value (the Rust test's bound)."""
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_embeddings_and_logits_match_transformers(clip, expected, photos):
    images = clip.encode_image(photos)
    texts = clip.encode_text(expected["labels"])
    assert images.dtype == texts.dtype == np.float32
    close(images, np.load(CLIP / "image_embeds.npy"))
    close(texts, np.load(CLIP / "text_embeds.npy"))
    assert abs(clip.logit_scale - expected["logit_scale"]) < 1e-4
    close(clip.logit_scale * images @ texts.T, np.load(CLIP / "logits_per_image.npy"))
    assert clip.dimension == images.shape[1]
    # one image or one string gives one vector
    np.testing.assert_array_equal(clip.encode_text(expected["labels"][1]), texts[1])
    assert clip.encode_image(photos[0]).shape == (clip.dimension,)


def test_zero_shot_ranks_labels_by_logits_per_image(clip, expected, photos):
    logits = np.load(CLIP / "logits_per_image.npy")
    labels = expected["labels"]
    got = clip.classify(photos, labels, top_k=len(labels))
    assert len(got) == len(photos)
    for row, preds in zip(logits, got):
        assert [p["index"] for p in preds] == list(np.argsort(-row, kind="stable"))
        assert [p["label"] for p in preds] == [labels[p["index"]] for p in preds]
        probs = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        np.testing.assert_allclose([p["probability"] for p in preds], np.sort(probs)[::-1], atol=1e-4)
    # a template puts each label into the prompt: "a photo of {}" with labels "an astronaut", ...
    # is the same text as the labels themselves
    words = [l.removeprefix("a photo of ") for l in labels]
    templated = clip.classify(photos[0], words, template="a photo of {}", top_k=2)
    plain = clip.classify(photos[0], [f"a photo of {w}" for w in words], top_k=2)
    assert [p["index"] for p in templated] == [p["index"] for p in plain]
    np.testing.assert_allclose([p["logit"] for p in templated], [p["logit"] for p in plain], rtol=1e-6)


def test_numpy_pixels_equal_the_same_image_from_a_file(clip, tmp_path):
    y, x = np.mgrid[0:90, 0:120]
    rgb = np.stack([x * 255 // 119, y * 255 // 89, (x * y) % 256], axis=-1).astype(np.uint8)
    write_bmp(tmp_path / "img.bmp", rgb)
    from_file = clip.encode_image(str(tmp_path / "img.bmp"))
    np.testing.assert_array_equal(clip.encode_image(rgb), from_file)
    np.testing.assert_array_equal(clip.encode_image([rgb, rgb[:, ::-1]])[0], from_file)


def test_bad_input_is_named(clip, photos, tmp_path):
    with pytest.raises(af.InvalidInputError, match="uint8"):
        clip.encode_image(np.zeros((8, 8, 3), dtype=np.float32))
    with pytest.raises(af.InvalidInputError, match=r"\[height, width, 3\]"):
        clip.encode_image(np.zeros((8, 8, 1), dtype=np.uint8))
    with pytest.raises(af.InvalidInputError, match=r"texts\[1\]"):
        clip.encode_text(["a cat", 3])
    with pytest.raises(af.InvalidInputError, match="at least one label"):
        clip.classify(photos[0], [])
    with pytest.raises(af.InvalidInputError, match="template"):
        clip.classify(photos[0], ["a cat"], template="a photo")
    with pytest.raises(FileNotFoundError, match="missing.png"):
        clip.encode_image(str(tmp_path / "missing.png"))
    with pytest.raises(af.ModelNotFoundError):
        af.CLIPModel(str(tmp_path / "no-such-model"))
