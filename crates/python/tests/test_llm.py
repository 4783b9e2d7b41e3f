"""af.LLM on the real SmolLM2-135M-Instruct against transformers' greedy tokens and chat answer
(tools/fixtures/llm/smollm2.py's committed outputs), and against the CLI's text."""

import os
import subprocess

import numpy as np
import pytest

import aneforge as af
from conftest import FIXTURES, ROOT, load_model, read_json, read_safetensors

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"
OUT = FIXTURES / "llm" / "out" / "smollm2"


@pytest.fixture(scope="module")
def llm():
    return load_model(af.LLM, SMOLLM2, max_context=512)


def test_chat_prompt_and_greedy_tokens_match_transformers(llm):
    expected = read_safetensors(OUT / "expected.safetensors")
    answer = read_json(OUT / "answer.json")
    messages = [{"role": "user", "content": QUESTION}]
    text = llm.apply_chat_template(messages)
    assert text == answer["chat_text"]
    assert llm.encode(text, special=False) == expected["chat_ids"].tolist()
    g = llm.generate_details(expected["chat_ids"].tolist(), max_tokens=64, temperature=0, ignore_eos=True)
    assert g.tokens == expected["chat_greedy_ids"].tolist()
    assert g.finish_reason == "length"
    reply = llm.chat_details(messages, temperature=0, max_tokens=64)
    assert reply.text == answer["answer"] and reply.finish_reason == "eos"


def test_streaming_yields_the_same_text(llm):
    answer = read_json(OUT / "answer.json")["answer"]
    chunks = list(llm.stream(QUESTION, chat=True, temperature=0, max_tokens=64))
    assert len(chunks) > 1 and "".join(chunks) == answer
    assert "".join(llm.stream_chat([{"role": "user", "content": QUESTION}], temperature=0)) == answer
    seen = []

    def stop_after_two(text):
        seen.append(text)
        return len(seen) < 2

    g = llm.generate_details(QUESTION, chat=True, temperature=0, callback=stop_after_two)
    assert g.finish_reason == "cancelled" and g.text == "".join(seen)

    def fails(text):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        llm.generate(QUESTION, chat=True, temperature=0, callback=fails)


def cli_binary():
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    for profile in ("debug", "release"):
        path = os.path.join(target, profile, "aneforge")
        if os.path.isfile(path):
            return path
    return None


def test_greedy_text_matches_the_cli(llm):
    cli = cli_binary()
    if cli is None:
        if os.environ.get("ANEFORGE_REQUIRE_MODELS", "") not in ("", "0"):
            pytest.fail("the aneforge binary was not built (cargo build -p aneforge-cli)")
        pytest.skip("the aneforge binary was not built (cargo build -p aneforge-cli)")
    prompt = "Once upon a time"
    run = subprocess.run(
        [cli, "generate", "-m", SMOLLM2, "--temperature", "0", "-n", "24", "-c", "512", prompt],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    ours = llm.generate(prompt, temperature=0, max_tokens=24)
    # the CLI prints the streamed text and a newline
    assert run.stdout == ours + "\n"
    assert len(ours) > 20


def test_fp16_cache_gives_the_chat_answer():
    answer = read_json(OUT / "answer.json")["answer"]
    llm = load_model(af.LLM, SMOLLM2, max_context=512, cache_type="f16")
    assert llm.chat([{"role": "user", "content": QUESTION}], temperature=0, max_tokens=64) == answer
    with pytest.raises(af.InvalidInputError, match="cache_type"):
        af.LLM(SMOLLM2, cache_type="q4_0")


def test_bad_generation_arguments_raise_value_errors(llm):
    with pytest.raises(af.InvalidInputError, match="temperature"):
        llm.generate("x", temperature=-1)
    with pytest.raises(af.InvalidInputError, match="empty prompt"):
        llm.generate([])
    with pytest.raises(af.InvalidInputError, match="do not fit the context"):
        llm.generate(list(range(1, 600)))
    with pytest.raises(af.InvalidInputError, match="system= needs chat=True"):
        llm.generate("x", system="be brief")
    with pytest.raises(af.InvalidInputError, match=r"messages\[0\]"):
        llm.chat([{"role": "user"}])
    with pytest.raises(af.ModelNotFoundError):
        af.LLM("no-such-org/no-such-llm")
