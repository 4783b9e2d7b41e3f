"""The RAG quality run: indexes data/shakespeare.txt with `aneforge rag index`, asks the ten
questions of tools/fixtures/rag/out/questions.json (or --questions FILE, e.g. the held-out set
out/questions_heldout.json) with `aneforge rag ask`, and counts the answers whose cited chunks
contain the expected passage (top-1 and any cited chunk). Needs the models of
scripts/fetch-models.sh minilm smollm2 (and the rescoring model when one is given). Prints a
Markdown table for docs/serve.md; exits non-zero when fewer than 8 of 10 cite their passage.

usage: python3 tools/rag_quality.py ANEFORGE_BINARY [--db PATH] [-k 3] [--threads N]
           [--questions FILE] [--candidate-pool fused|bm25] [--candidates N]
           [--rescore-model MODEL] [--retrieve-only]
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
LLM = "HuggingFaceTB/SmolLM2-135M-Instruct"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--db")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--retrieve-only", action="store_true",
                    help="cite the retrieved chunks without running the LLM")
    ap.add_argument("--questions", default=str(ROOT / "tools/fixtures/rag/out/questions.json"))
    ap.add_argument("--candidate-pool", choices=("fused", "bm25"),
                    help="rag ask's --candidate-pool (its default when not given)")
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--rescore-model")
    args = ap.parse_args()
    questions = json.loads(pathlib.Path(args.questions).read_text())
    retrieval = ["--candidates", str(args.candidates)]
    if args.candidate_pool:
        retrieval += ["--candidate-pool", args.candidate_pool]
    if args.rescore_model:
        retrieval += ["--rescore-model", args.rescore_model]
    tmp = tempfile.TemporaryDirectory()
    db = args.db or str(pathlib.Path(tmp.name) / "shakespeare.db")
    started = time.time()
    if not (args.db and pathlib.Path(db).exists()):
        subprocess.run([args.binary, "rag", "index", str(ROOT / "data/shakespeare.txt"), "--db",
                        db, "-t", str(args.threads)], check=True)
    print(f"indexed in {time.time() - started:.1f} s", file=sys.stderr)
    top1 = anyk = 0
    rows = []
    for q in questions:
        t = time.time()
        out = subprocess.run(
            [args.binary, "rag", "ask", q["question"], "--db", db, "-m", LLM, "-k", str(args.k),
             "-n", "64", "-t", str(args.threads), "--format", "json"] + retrieval
            + (["--retrieve-only"] if args.retrieve_only else []),
            check=True, capture_output=True, text=True).stdout
        seconds = time.time() - t
        record = json.loads(out)[0]
        cited = [s["text"] for s in record["sources"]]
        hit1 = q["passage"] in cited[0]
        hitk = any(q["passage"] in c for c in cited)
        top1 += hit1
        anyk += hitk
        where = ", ".join(f"{s['path']}:{s['start_line']}-{s['end_line']}" for s in record["sources"])
        answer = " ".join((record["answer"] or "(not asked)").split())[:90]
        rows.append(f"| {q['question']} | {q['line']} | {'yes' if hit1 else 'no'} | "
                    f"{'yes' if hitk else 'no'} | {where} | {seconds:.1f} | {answer} |")
    print("| question | passage line | top-1 cites it | a cited chunk has it | cited chunks | "
          "seconds | answer (first 90 chars) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\ntop-1: {top1}/{len(questions)}; any of the {args.k} cited: {anyk}/{len(questions)}")
    if anyk < 8:
        raise SystemExit("FAIL: fewer than 8 of 10 answers cite their passage")
    if args.db is None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
