"""`aneforge serve` against the official OpenAI Python client and curl.

Starts the server on a free loopback port and checks: greedy chat (plain and streamed) equals
`aneforge generate --chat`'s text; text completions (plain and streamed) agree; embeddings equal
`aneforge embed`'s; bad requests get OpenAI-style 4xx errors (the client raises the matching
exceptions); a client that drops a stream is cancelled and the server keeps serving; curl's
requests; SIGTERM stops the server with status 0. Exits non-zero on any failure.

usage: serve_openai_check.py ANEFORGE_BINARY
"""

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import openai

LLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBED = "sentence-transformers/all-MiniLM-L6-v2"


def f32(values):
    """The values rounded to float32 (JSON carries them as decimals of either width)."""
    return list(struct.unpack(f"{len(values)}f", struct.pack(f"{len(values)}f", *values)))


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what.splitlines()[0][:120]}")


def start(binary):
    proc = subprocess.Popen(
        [binary, "serve", "-m", LLM, "--embed-model", EMBED, "--port", "0", "--ctx", "512",
         "--parallel", "2"],
        stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    for line in proc.stderr:
        sys.stderr.write(line)
        if "on http://" in line:
            url = line.split("on http://", 1)[1].split()[0]
            drain = threading.Thread(
                target=lambda: [sys.stderr.write(rest) for rest in proc.stderr], daemon=True)
            drain.start()
            return proc, f"http://{url}"
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit("FAIL: the server did not start")


def curl(*args):
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args], capture_output=True,
                         text=True, check=True).stdout
    body, code = out.rsplit("\n", 1)
    return int(code), body


def main():
    binary = sys.argv[1]
    question = "What is the capital of France?"
    run = subprocess.run(
        [binary, "generate", "-m", LLM, "--chat", "--temperature", "0", "-n", "24", "--ctx",
         "512", question], capture_output=True, text=True)
    required = os.environ.get("ANEFORGE_REQUIRE_MODELS", "0") not in ("", "0")
    if run.returncode != 0 and not required:
        print(f"SKIPPED: serve_openai_check.py ({run.stderr.strip().splitlines()[0]}; "
              "scripts/fetch-models.sh smollm2 minilm)")
        return
    check(run.returncode == 0, f"aneforge generate --chat: {run.stderr}")
    generated = run.stdout
    want = generated[:-1] if generated.endswith("\n") else generated
    texts = ["a sentence", "To be, or not to be, that is the question"]
    embedded = json.loads(subprocess.run(
        [binary, "embed", "-m", EMBED, "--format", "json", *texts], capture_output=True, text=True,
        check=True).stdout)

    proc, base = start(binary)
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        models = [m.id for m in client.models.list()]
        check(models == [LLM, EMBED], f"models.list: {models}")

        r = client.chat.completions.create(
            model=LLM, messages=[{"role": "user", "content": question}], temperature=0,
            max_tokens=24)
        got = r.choices[0].message.content
        check(got == want, f"greedy chat equals `aneforge generate --chat`: {got!r} vs {want!r}")
        check(r.usage.completion_tokens > 0
              and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
              f"chat usage {r.usage}")

        pieces, finish, usage = [], None, None
        for chunk in client.chat.completions.create(
                model=LLM, messages=[{"role": "user", "content": question}], temperature=0,
                max_tokens=24, stream=True, stream_options={"include_usage": True}):
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        check("".join(pieces) == want, f"streamed chat equals it: {''.join(pieces)!r}")
        check(finish == r.choices[0].finish_reason and usage == r.usage,
              f"streamed finish {finish} and usage {usage}")

        c = client.completions.create(model=LLM, prompt="The three primary colours are",
                                      temperature=0, max_tokens=16)
        streamed = "".join(
            ch.choices[0].text for ch in client.completions.create(
                model=LLM, prompt="The three primary colours are", temperature=0,
                max_tokens=16, stream=True))
        check(c.choices[0].text and streamed == c.choices[0].text,
              f"completion plain and streamed: {c.choices[0].text!r}")
        a = client.completions.create(model=LLM, prompt="Once upon a time", temperature=0.9,
                                      top_p=0.9, seed=11, max_tokens=12)
        b = client.completions.create(model=LLM, prompt="Once upon a time", temperature=0.9,
                                      top_p=0.9, seed=11, max_tokens=12)
        check(a.choices[0].text == b.choices[0].text, "a seed repeats a sampled completion")

        e = client.embeddings.create(model=EMBED, input=texts)  # base64 on the wire
        e_float = client.embeddings.create(model=EMBED, input=texts, encoding_format="float")
        for i, row in enumerate(embedded):
            check(f32(e.data[i].embedding) == f32(row) and f32(e_float.data[i].embedding) == f32(row),
                  f"embedding {i} equals `aneforge embed`'s")

        for call, exc, what in [
            (lambda: client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "hi"}]),
             openai.NotFoundError, "unknown model"),
            (lambda: client.chat.completions.create(
                model=LLM, messages=[{"role": "user", "content": "hi"}], max_tokens=-1),
             openai.BadRequestError, "negative max_tokens"),
            (lambda: client.completions.create(model=LLM, prompt="word " * 2000),
             openai.BadRequestError, "a prompt past the context"),
        ]:
            try:
                call()
                check(False, f"{what} was accepted")
            except exc as err:
                body = err.body if isinstance(err.body, dict) else {}
                body = body.get("error", body)
                check(set(body) >= {"message", "type", "param", "code"} and body["message"],
                      f"{what}: {err.status_code} {body}")

        stream = client.chat.completions.create(
            model=LLM, messages=[{"role": "user", "content": "Write a long story."}],
            temperature=0, max_tokens=300, stream=True)
        next(iter(stream))
        stream.close()
        time.sleep(1)
        code, metrics = curl(f"{base}/metrics")
        line = [l for l in metrics.splitlines()
                if l.startswith("aneforge_generations_cancelled_total ")]
        check(code == 200 and line and float(line[0].split()[1]) >= 1,
              f"a dropped stream is cancelled: {line}")

        code, body = curl(f"{base}/health")
        check(code == 200 and json.loads(body) == {"status": "ok"}, "curl /health")
        code, body = curl("-H", "content-type: application/json", "-d", "{not json",
                          f"{base}/v1/chat/completions")
        check(code == 400 and "error" in json.loads(body), f"curl malformed JSON: {code} {body}")
        code, body = curl("-H", "content-type: application/json", "-d", json.dumps(
            {"model": LLM, "messages": [{"role": "user", "content": question}],
             "temperature": 0, "max_tokens": 24}), f"{base}/v1/chat/completions")
        check(code == 200 and json.loads(body)["choices"][0]["message"]["content"] == want,
              "curl chat")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise SystemExit("FAIL: the server did not stop within 60 s of SIGTERM")
    check(status == 0, f"SIGTERM stops the server with status 0 (got {status})")


if __name__ == "__main__":
    main()
