"""af.import_onnx on a small committed ONNX model (tools/fixtures/onnx/out/small_mlp.onnx, built by
tools/fixtures/onnx/small_mlp.py): the outputs onnxruntime gave on the committed input, tensors
taken and returned by their ONNX names (dotted, so not the program's port names), the symbolic
batch bound by input_shapes, and errors for bad input."""

import numpy as np
import pytest

import aneforge as af
from conftest import FIXTURES

ONNX = FIXTURES / "onnx" / "out"
MODEL = ONNX / "small_mlp.onnx"


@pytest.fixture(scope="module")
def program():
    return af.import_onnx(MODEL, input_shapes={"batch": 3})


def test_outputs_match_onnxruntime(program):
    x = np.load(ONNX / "small_mlp_input.npy")
    out = program.run({"input.1": x})
    assert sorted(out) == ["logits", "probs"]
    for name in ("logits", "probs"):
        want = np.load(ONNX / f"small_mlp_{name}.npy")
        assert out[name].shape == want.shape == (3, 5)
        np.testing.assert_allclose(out[name], want, rtol=0, atol=1e-5 * np.abs(want).max())
    # the ONNX names also reach the port-level API
    program.set_input("input.1", x)
    program.execute()
    np.testing.assert_array_equal(program.read_output("probs"), out["probs"])
    assert program.inputs == {"input.1": ([3, 16], "float32")}
    assert list(program.outputs) == ["logits", "probs"]


def test_whole_input_shape_and_an_fp16_target():
    x = np.load(ONNX / "small_mlp_input.npy")[:2]
    prog = af.import_onnx(str(MODEL), input_shapes={"input.1": [2, 16]}, target="h16")
    got = prog.run({"input.1": x})["probs"]
    want = np.load(ONNX / "small_mlp_probs.npy")[:2]
    # fp16 arithmetic: close to onnxruntime's fp32, but not equal
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-3)
    assert not np.array_equal(got, want)


def test_bad_input_is_named(program, tmp_path):
    with pytest.raises(af.ModelNotFoundError, match="missing.onnx"):
        af.import_onnx(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xff\xff not protobuf")
    with pytest.raises(af.InvalidInputError, match="junk.onnx"):
        af.import_onnx(junk)
    with pytest.raises(af.InvalidInputError, match=r"symbolic \(batch\); bind it with input_shapes"):
        af.import_onnx(MODEL)
    with pytest.raises(af.InvalidInputError, match="input_shapes"):
        af.import_onnx(MODEL, input_shapes={"batch": "three"})
    with pytest.raises(af.InvalidInputError, match=r"\[3, 16\]"):
        program.run({"input.1": np.zeros((2, 16), np.float32)})
    with pytest.raises(af.InvalidInputError, match=r'input "input.1": dtype float64'):
        program.run({"input.1": np.zeros((3, 16), np.float64)})
    with pytest.raises(af.InvalidInputError, match="no input named"):
        program.run({"x": np.zeros((3, 16), np.float32)})
