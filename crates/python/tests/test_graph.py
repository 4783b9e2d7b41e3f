"""The graph API against NumPy, the program API (set_input / execute / read_output / views /
share_buffer), zero-copy views, the GIL released during execute, and errors as exceptions."""

import threading
import time

import numpy as np
import pytest

import aneforge as af

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_elementwise_and_matmul_match_numpy():
    x = af.input("x", [4, 8])
    w = rand(8, 3)
    b = rand(3)
    y = ((x @ w) + b).relu() * 2.0 - 1.0
    z = (x.exp() / (1.0 + abs(x))).sum(axis=1, keepdims=True)
    prog = af.compile({"y": y, "z": z})
    xv = rand(4, 8)
    out = prog.run(x=xv)
    np.testing.assert_allclose(out["y"], np.maximum(xv @ w + b, 0) * 2.0 - 1.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        out["z"], (np.exp(xv) / (1.0 + np.abs(xv))).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5
    )
    assert out["y"].dtype == np.float32 and out["y"].shape == (4, 3)


def test_softmax_reshape_transpose_and_reductions_match_numpy():
    x = af.input("x", [2, 3, 4])
    outs = [
        x.softmax(-1),
        x.reshape(6, 4).T,
        x.transpose(2, 0, 1),
        x.mean(axis=(0, 2)),
        x.max(axis=1),
        af.concat([x, -x], axis=1),
        af.where(x > 0.0, x, 0.5),
        (3.0 - x) / 2.0,
        2.0 / (x.abs() + 1.0),
        x.sigmoid() + x.tanh(),
    ]
    prog = af.compile(outs)
    xv = rand(2, 3, 4)
    got = prog.run({"x": xv})
    e = np.exp(xv - xv.max(-1, keepdims=True))
    want = [
        e / e.sum(-1, keepdims=True),
        xv.reshape(6, 4).T,
        xv.transpose(2, 0, 1),
        xv.mean(axis=(0, 2)),
        xv.max(axis=1),
        np.concatenate([xv, -xv], axis=1),
        np.where(xv > 0, xv, 0.5),
        (3.0 - xv) / 2.0,
        2.0 / (np.abs(xv) + 1.0),
        1 / (1 + np.exp(-xv)) + np.tanh(xv),
    ]
    assert isinstance(got, list) and len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")


def test_int32_and_bool_ports_round_trip():
    i = af.input("i", [5], dtype="int32")
    m = af.input("m", [5], dtype="bool")
    prog = af.compile([i * 3, af.where(m, i.astype("float32"), -1.0)])
    iv = np.arange(5, dtype=np.int32)
    mv = np.array([True, False, True, False, True])
    a, b = prog.run(i=iv, m=mv)
    assert a.dtype == np.int32
    np.testing.assert_array_equal(a, iv * 3)
    np.testing.assert_array_equal(b, np.where(mv, iv, -1).astype(np.float32))


def test_an_ane_target_runs_its_fp16_program_on_the_cpu_engine():
    x = af.input("x", [2, 16])
    w = rand(16, 8)
    prog = af.compile(x @ w, target="h16")
    xv = rand(2, 16)
    np.testing.assert_allclose(prog.run(x=xv), xv @ w, rtol=2e-2, atol=2e-2)
    assert "fp16" in prog.mil


def test_views_are_the_port_buffers_themselves():
    x = af.input("x", [3, 4])
    prog = af.compile(x * 2.0 + 1.0)
    inp = prog.input_view("x")
    assert inp.flags.writeable and inp.dtype == np.float32 and inp.shape == (3, 4)
    xv = rand(3, 4)
    inp[...] = xv
    prog.execute()
    out = prog.output_view("output_0")
    assert not out.flags.writeable
    np.testing.assert_allclose(out, xv * 2.0 + 1.0, rtol=1e-6)
    address = out.__array_interface__["data"][0]
    # the same buffer every time, updated in place by the next execute
    again = prog.output_view("output_0")
    assert again.__array_interface__["data"][0] == address
    assert np.shares_memory(out, again)
    assert np.shares_memory(inp, prog.input_view("x"))
    inp[...] = 0.0
    prog.execute()
    np.testing.assert_array_equal(out, np.ones((3, 4), np.float32))
    # read_output is an owned copy, not the buffer
    copy = prog.read_output("output_0")
    assert not np.shares_memory(copy, out)
    # views keep the program alive
    del prog
    np.testing.assert_array_equal(out, np.ones((3, 4), np.float32))


def test_share_buffer_keeps_state_in_the_engine():
    state = af.input("state", [4])
    step = af.input("step", [4])
    prog = af.compile({"next": state + step})
    prog.set_input("state", np.zeros(4, np.float32))
    prog.share_buffer("next", "state")
    s = np.arange(4, dtype=np.float32)
    for _ in range(3):
        prog.set_input("step", s)
        prog.execute()
    np.testing.assert_array_equal(prog.read_output("next"), 3 * s)
    with pytest.raises(af.InvalidInputError, match="before the first execute"):
        prog.share_buffer("next", "state")


def test_bad_inputs_raise_value_errors_that_say_what_was_expected():
    x = af.input("x", [2, 3])
    prog = af.compile(x + 1.0)
    with pytest.raises(af.InvalidInputError, match=r"shape \[3, 2\], expected \[2, 3\]"):
        prog.set_input("x", np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="dtype float64, expected float32"):
        prog.set_input("x", np.zeros((2, 3)))
    with pytest.raises(af.InvalidInputError, match='no input named "y"'):
        prog.set_input("y", np.zeros((2, 3), np.float32))
    with pytest.raises(af.InvalidInputError, match="x"):
        prog.execute()  # never set
    with pytest.raises(af.InvalidInputError):
        x @ af.input("w", [4, 5])  # inner dimensions disagree
    with pytest.raises(af.InvalidInputError, match="dtype"):
        af.input("z", [2], dtype="float64")
    with pytest.raises(af.InvalidInputError, match="engine"):
        af.compile(x, engine="gpu")
    with pytest.raises(af.InvalidInputError, match="h99"):
        af.compile(x, target="h99")


def test_non_contiguous_and_float16_inputs_are_accepted():
    x = af.input("x", [3, 2])
    prog = af.compile(x * 1.0)
    xv = rand(2, 3)
    np.testing.assert_array_equal(prog.run(x=xv.T), xv.T)
    h = xv.T.astype(np.float16)
    np.testing.assert_array_equal(prog.run(x=h), h.astype(np.float32))


def test_execute_releases_the_gil():
    n = 384
    x = af.input("x", [n, n])
    y = x
    for _ in range(12):
        y = (y @ x).tanh()
    prog = af.compile(y)
    prog.set_input("x", (rand(n, n) / np.sqrt(n)).astype(np.float32))
    start = time.perf_counter()
    prog.execute()
    single = time.perf_counter() - start
    gaps = []
    done = threading.Event()

    def work():
        prog.execute()
        done.set()

    worker = threading.Thread(target=work)
    last = time.perf_counter()
    worker.start()
    while not done.is_set():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        time.sleep(0.001)
    worker.join()
    # with the GIL held for the whole execute the loop could not run until it returned; released,
    # it iterates about once a millisecond meanwhile
    assert len(gaps) >= min(10, single / 0.004), (single, len(gaps))
