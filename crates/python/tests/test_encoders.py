"""SentenceTransformer and CrossEncoder against sentence-transformers' outputs committed as
fixtures (tools/fixtures/encoders: tiny random-weight models, and the real all-MiniLM-L6-v2)."""

import numpy as np
import pytest

import aneforge as af
from conftest import ENCODERS, MINILM, cosines, load_model, read_json


def test_tiny_bert_matches_sentence_transformers():
    meta = read_json(ENCODERS / "bert_mean.json")
    want = np.load(ENCODERS / "bert_mean.npy")  # [runs, texts, dim]
    model = af.SentenceTransformer(str(ENCODERS / "bert_mean"))
    assert model.get_sentence_embedding_dimension() == meta["dim"]
    assert model.max_seq_length == meta["max_seq_length"]
    for r, run in enumerate(meta["runs"]):
        got = model.encode(meta["texts"], normalize_embeddings=(run == "normalized"), batch_size=8)
        assert got.dtype == np.float32 and got.shape == want[r].shape
        assert cosines(got, want[r]).min() >= 0.99999, run
        np.testing.assert_allclose(got, want[r], rtol=1e-3, atol=1e-4)


def test_encode_shapes_and_list_output():
    model = af.SentenceTransformer(str(ENCODERS / "bert_mean"))
    one = model.encode("a single text")
    assert one.shape == (model.get_sentence_embedding_dimension(),)
    many = model.encode(["a", "b c"], convert_to_numpy=False)
    assert isinstance(many, list) and len(many) == 2 and many[0].shape == one.shape
    np.testing.assert_allclose(many[0], model.encode(["a"])[0], atol=1e-5)
    assert model.encode([]).shape == (0, one.shape[0])
    # the batch size changes how texts are grouped, not what they embed to: bit for bit, since
    # batches never mix sequence buckets
    texts = [f"text number {i} " * (i % 5 + 1) for i in range(11)]
    np.testing.assert_array_equal(model.encode(texts, batch_size=3), model.encode(texts, batch_size=32))
    np.testing.assert_array_equal(model.encode(texts[1::2], batch_size=2), model.encode(texts, batch_size=4)[1::2])


def test_real_minilm_matches_sentence_transformers(minilm):
    meta = read_json(ENCODERS / "minilm.json")
    want = np.load(ENCODERS / "minilm.npy")
    got = minilm.encode(meta["texts"], batch_size=16)
    assert got.shape == want.shape
    worst = cosines(got, want).min()
    assert worst >= 0.99999, worst
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_real_minilm_with_bf16_products_stays_close():
    meta = read_json(ENCODERS / "minilm.json")
    want = np.load(ENCODERS / "minilm.npy")
    model = load_model(af.SentenceTransformer, MINILM, matmul_precision="bf16")
    worst = cosines(model.encode(meta["texts"], batch_size=16), want).min()
    assert worst >= 0.9999, worst
    with pytest.raises(ValueError, match="bf16"):
        af.SentenceTransformer(MINILM, target="h16", matmul_precision="bf16")


@pytest.mark.parametrize("name", ["ce_bert", "ce_roberta", "ce_xlmr_3labels"])
def test_cross_encoders_match_sentence_transformers(name):
    meta = read_json(ENCODERS / f"{name}.json")
    ce = af.CrossEncoder(str(ENCODERS / name))
    assert ce.num_labels == meta["num_labels"]
    scores = ce.predict(meta["pairs"])
    logits = ce.predict(meta["pairs"], activation=False)
    want_scores = np.asarray(meta["scores"], dtype=np.float64).reshape(scores.shape)
    want_logits = np.asarray(meta["logits"], dtype=np.float64).reshape(logits.shape)
    np.testing.assert_allclose(scores, want_scores, atol=1e-3)
    np.testing.assert_allclose(logits, want_logits, atol=1e-3)
    if meta.get("rank") is None:
        with pytest.raises(af.InvalidInputError, match="single-label"):
            ce.rank(meta["queries"][0], meta["passages"])
        return
    for query, want in zip(meta["queries"], meta["rank"]):
        got = ce.rank(query, meta["passages"], return_documents=True)
        assert [g["corpus_id"] for g in got] == [w["corpus_id"] for w in want], query
        np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-3)
        assert all(g["text"] == meta["passages"][g["corpus_id"]] for g in got)
        assert ce.rank(query, meta["passages"], top_k=3) == [
            {"corpus_id": g["corpus_id"], "score": g["score"]} for g in got[:3]
        ]


def test_missing_models_and_bad_arguments_raise_python_exceptions():
    with pytest.raises(FileNotFoundError, match="not found") as e:
        af.SentenceTransformer("no-such-org/no-such-model")
    assert isinstance(e.value, af.ModelNotFoundError)
    with pytest.raises(af.AneforgeError, match="sequence-classification head"):
        af.CrossEncoder(str(ENCODERS / "bert_mean"))
    with pytest.raises(ValueError, match="batch size"):
        af.SentenceTransformer(str(ENCODERS / "bert_mean")).encode(["x"], batch_size=0)
    with pytest.raises(af.InvalidInputError, match=r"sentences\[1\]: expected a str"):
        af.SentenceTransformer(str(ENCODERS / "bert_mean")).encode(["x", 3])
    ce = af.CrossEncoder(str(ENCODERS / "ce_bert"))
    with pytest.raises(af.InvalidInputError, match=r"pairs\[0\]: expected two texts"):
        ce.predict([["only one"]])
    with pytest.raises(af.InvalidInputError, match="engine"):
        af.SentenceTransformer(str(ENCODERS / "bert_mean"), engine="gpu")
