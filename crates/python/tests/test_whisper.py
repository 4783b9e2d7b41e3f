"""af.Whisper on the real whisper-tiny.en and the committed speech clips (data/speech):
transformers' greedy transcripts (tools/fixtures/whisper/out/transcripts.json, from
tools/fixtures/whisper/reference.py), timed segments, and errors for bad input."""

import threading
import time

import pytest

import aneforge as af
from conftest import FIXTURES, ROOT, load_model, read_json

MODEL = "openai/whisper-tiny.en"
SPEECH = ROOT / "data" / "speech"


@pytest.fixture(scope="module")
def whisper():
    return load_model(af.Whisper, MODEL)


def test_transcripts_match_transformers_greedy(whisper):
    clips = read_json(FIXTURES / "whisper" / "out" / "transcripts.json")["models"][MODEL]["clips"]
    assert clips
    for clip, want in clips.items():
        got = whisper.transcribe(SPEECH / clip)
        assert got["text"] == want["text"].strip(), clip
        assert got["language"] in (None, "en")
        assert 0 < got["duration"] <= 30
        # without timestamps a short clip is one segment holding the whole text
        assert [s["text"] for s in got["segments"]] == [got["text"]]


def test_timestamps_give_the_reference_timed_tokens(whisper):
    clip, want = next(iter(read_json(FIXTURES / "whisper" / "out" / "transcripts.json")["models"][MODEL]["clips"].items()))
    # transcribed in another thread, while this one asks for the model's repr
    started, result = threading.Event(), []

    def work():
        started.set()
        result.append(whisper.transcribe(str(SPEECH / clip), timestamps=True))

    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    reprs = 0
    while worker.is_alive():
        assert repr(whisper).startswith("Whisper(d_model=384,")
        reprs += 1
        time.sleep(0.005)
    worker.join()
    # a repr that took the model's lock would wait for the whole transcription: one call
    assert reprs >= 5, f"{reprs} reprs during a transcription"
    (got,) = result
    assert got["text"] == want["timestamps_text"].strip()
    segments = got["segments"]
    assert segments and all(0 <= s["start"] < s["end"] <= got["duration"] + 0.02 for s in segments)
    assert " ".join(s["text"] for s in segments) == got["text"]


def test_bad_input_is_named(whisper, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        whisper.transcribe(tmp_path / "missing.wav")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(af.InvalidInputError, match="empty.wav"):
        whisper.transcribe(empty)
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"not audio at all" * 64)
    with pytest.raises(af.InvalidInputError, match="junk.mp3"):
        whisper.transcribe(junk)
    with pytest.raises(ValueError, match="task"):
        whisper.transcribe(SPEECH / next(SPEECH.glob("*.wav")).name, task="summarise")
    with pytest.raises(ValueError, match="beam_size"):
        whisper.transcribe(next(SPEECH.glob("*.wav")), beam_size=0)
    with pytest.raises(af.ModelNotFoundError):
        af.Whisper(str(tmp_path / "no-such-model"))


def test_bf16_products_give_the_reference_transcript_and_need_the_cpu_target():
    clips = read_json(FIXTURES / "whisper" / "out" / "transcripts.json")["models"][MODEL]["clips"]
    clip, want = next(iter(clips.items()))
    fast = load_model(af.Whisper, MODEL, matmul_precision="bf16")
    assert fast.transcribe(SPEECH / clip)["text"] == want["text"].strip()
    with pytest.raises(ValueError, match="bf16"):
        af.Whisper(MODEL, target="h16", matmul_precision="bf16")
    with pytest.raises(ValueError, match="fp8"):
        af.Whisper(MODEL, matmul_precision="fp8")
