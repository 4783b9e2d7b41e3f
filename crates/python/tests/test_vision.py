"""af.ImageClassifier on the real EfficientNet-Lite0 weights and scikit-image's photos: the
PyTorch reference's top-5 and probabilities (tools/fixtures/vision/out/efficientnet_lite/lite0.json,
from tools/fixtures/vision/efficientnet_lite.py), NumPy pixels equal to the same image read from a
file, and errors for bad input."""

import numpy as np
import pytest

import aneforge as af
from conftest import FIXTURES, load_model, model_dir, read_json, write_bmp

MODEL = "ml-illustrated/efficientnet-lite0"


@pytest.fixture(scope="module")
def classifier():
    return load_model(af.ImageClassifier, MODEL)


@pytest.fixture(scope="module")
def photos():
    return model_dir("scikit-image/data")


def test_top5_matches_the_pytorch_reference(classifier, photos):
    reference = read_json(FIXTURES / "vision" / "out" / "efficientnet_lite" / "lite0.json")
    # PNG photos: the JPEG one differs by the decoder (docs/vision.md)
    pngs = [p for p in reference["photos"] if p["photo"].endswith(".png")]
    results = classifier.classify([str(photos / p["photo"]) for p in pngs], top_k=5)
    assert len(results) == len(pngs)
    for want, got in zip(pngs, results):
        assert [p["index"] for p in got] == want["top5"], want["photo"]
        np.testing.assert_allclose([p["probability"] for p in got], want["probs"], atol=1e-4)
    assert results[0][0]["label"] == classifier.labels[pngs[0]["top5"][0]]
    # one image (a path-like object) gives one list
    one = classifier.classify(photos / "coffee.png", top_k=2)
    assert [p["index"] for p in one] == next(p["top5"][:2] for p in pngs if p["photo"] == "coffee.png")


def test_numpy_pixels_equal_the_same_image_from_a_file(classifier, tmp_path):
    rng = np.random.default_rng(7)
    # smooth enough to give a peaked prediction, varied enough that a flipped axis would show
    y, x = np.mgrid[0:180, 0:240]
    rgb = np.stack([(x * 255 // 239), (y * 255 // 179), rng.integers(0, 256, (180, 240))], axis=-1)
    rgb = rgb.astype(np.uint8)
    write_bmp(tmp_path / "img.bmp", rgb)
    from_file = classifier.classify(str(tmp_path / "img.bmp"), top_k=10)
    from_array = classifier.classify(rgb, top_k=10)
    assert from_array == from_file
    # a non-contiguous view is read as the image it shows
    assert classifier.classify(np.ascontiguousarray(rgb[:, ::-1])[:, ::-1], top_k=10) == from_file


def test_bad_input_is_named(classifier, tmp_path):
    with pytest.raises(af.InvalidInputError, match="uint8"):
        classifier.classify(np.zeros((8, 8, 3), dtype=np.float32))
    with pytest.raises(af.InvalidInputError, match=r"\[height, width, 3\]"):
        classifier.classify(np.zeros((8, 8, 4), dtype=np.uint8))
    with pytest.raises(ValueError, match="top_k"):
        classifier.classify(np.zeros((8, 8, 3), dtype=np.uint8), top_k=0)
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(af.InvalidInputError, match="broken.png"):
        classifier.classify(str(bad))
    with pytest.raises(FileNotFoundError, match="missing.png"):
        classifier.classify(str(tmp_path / "missing.png"))
    with pytest.raises(af.ModelNotFoundError):
        af.ImageClassifier(str(tmp_path / "no-such-model"))


def test_preprocess_then_logits_match_transformers():
    """The two halves of classify, as a harness calls them: preprocessing (the directory's
    preprocessor_config.json) and logits of the float32 batch, against transformers' logits of
    the reduced random-weight ViT (tools/fixtures/vision/hf_vit_random.py)."""
    vit = FIXTURES / "vision" / "out" / "hf_vit" / "vit"
    expected = read_json(vit / "expected.json")
    want = np.load(vit / "logits.npy")
    classifier = af.ImageClassifier(str(vit), batch_size=2)
    photos = model_dir("scikit-image/data")
    pixels = classifier.preprocess([str(photos / p) for p in expected["photos"]])
    assert pixels.dtype == np.float32 and pixels.shape == (3, 3, 224, 224)
    logits = classifier.logits(pixels)
    assert logits.dtype == np.float32 and logits.shape == want.shape
    np.testing.assert_allclose(logits, want, rtol=0, atol=1e-5)
    with pytest.raises(af.InvalidInputError, match="float32"):
        classifier.logits(pixels.astype(np.float64))
    with pytest.raises(af.InvalidInputError, match=r"\[n, 3, height, width\]"):
        classifier.logits(pixels[:, :2])


def test_bf16_products_keep_the_vit_logits_close():
    """matmul_precision="bf16" (bf16 products, AMX tiles where the CPU has them) on the reduced
    random-weight ViT: cosine 0.999 or more to transformers' logits with the same top-1."""
    vit = FIXTURES / "vision" / "out" / "hf_vit" / "vit"
    expected = read_json(vit / "expected.json")
    want = np.load(vit / "logits.npy")
    classifier = af.ImageClassifier(str(vit), batch_size=2, matmul_precision="bf16")
    photos = model_dir("scikit-image/data")
    logits = classifier.logits(classifier.preprocess([str(photos / p) for p in expected["photos"]]))
    for got, ref in zip(logits, want):
        assert np.dot(got, ref) / np.linalg.norm(got) / np.linalg.norm(ref) >= 0.999
        assert got.argmax() == ref.argmax()
    with pytest.raises(ValueError, match="bf16"):
        af.ImageClassifier(str(vit), target="h16", matmul_precision="bf16")
