"""Retrieval-only sweep of the RAG question set with the reference libraries: chunks cut as
`aneforge rag index` cuts them (whole lines, at most N bytes, trailing lines repeated up to the
overlap), embedded with sentence-transformers, BM25 through SQLite FTS5 (optionally with stop
words removed from the question or the porter stemmer), fused by reciprocal rank (constant 60,
optionally weighting the embedding ranking) as `aneforge rag ask` fuses them. Prints, per
setting, how many of the ten questions of tools/fixtures/rag/out/questions.json have their
passage in the top k chunks of each ranking. With --rescore MODEL, the first N fused chunks
(N from --candidates) are also reordered by MODEL's cosine between question and chunk (a second,
larger embedding model as the reranking stage), and that ranking is reported too; with
--rescore-pool bm25 the candidates are BM25's first N instead of the fused ones.

It answers "which lever would lift retrieval" without rebuilding the index in Rust; the shipped
numbers come from tools/rag_quality.py.

usage: python3 tools/rag_retrieval_sweep.py [--models sentence-transformers/all-MiniLM-L6-v2,...]
           [--chunks 800/200,400/100] [--weights 1,2] [--cache DIR] [--bm25-only]
           [--rescore sentence-transformers/all-mpnet-base-v2 --candidates 10,20
            --rescore-pool fused|bm25]
           (needs sentence-transformers and the models in the HF cache)
"""

import argparse
import hashlib
import json
import pathlib
import re
import sqlite3

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Lucene's English stop set, plus the question words
STOP = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with what which who whom whose how why when where do does "
    "did".split()
)


def chunks(lines, max_chars, overlap):
    out, i, n = [], 0, len(lines)
    while i < n:
        size, j = 0, i
        while j < n and (size + len(lines[j]) + 1 <= max_chars or j == i):
            size += len(lines[j]) + 1
            j += 1
        text = "\n".join(lines[i:j])
        if text.strip():
            out.append(text)
        if j >= n:
            break
        k, kept = j, 0
        while k - 1 > i and kept + len(lines[k - 1]) + 1 <= overlap:
            kept += len(lines[k - 1]) + 1
            k -= 1
        i = k
    return out


def word_index(texts):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE w USING fts5(text)")
    db.executemany("INSERT INTO w(rowid, text) VALUES (?, ?)", enumerate(texts))
    return db


def bm25(db, question, k, stop):
    terms = [t.lower() for t in re.split(r"[^\w]+", question) if t]
    terms = [t for t in terms if not (stop and t in STOP)]
    query = " OR ".join(f'"{t}"' for t in terms)
    rows = db.execute("SELECT rowid FROM w WHERE w MATCH ? ORDER BY bm25(w) LIMIT ?", (query, k))
    return [r[0] for r in rows]


def embed(model, name, texts, cache):
    key = hashlib.sha256((name + "\0" + "\0".join(texts)).encode()).hexdigest()[:16]
    path = pathlib.Path(cache) / f"{key}.npy" if cache else None
    if path and path.exists():
        return np.load(path)
    emb = model.encode(texts, batch_size=32, normalize_embeddings=True)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, emb)
    return emb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="sentence-transformers/all-MiniLM-L6-v2")
    ap.add_argument("--chunks", default="800/200,400/100")
    ap.add_argument("--weights", default="1", help="weights of the embedding ranking in the fusion")
    ap.add_argument("--cache", help="directory for the chunk embeddings")
    ap.add_argument("--bm25-only", action="store_true", help="no embeddings: BM25 at k 3, 5, 10")
    ap.add_argument("--rescore", help="an embedding model that reorders the fused candidates")
    ap.add_argument("--candidates", default="20", help="chunks the --rescore model reorders")
    ap.add_argument("--rescore-pool", choices=("fused", "bm25"), default="fused",
                    help="the ranking whose first chunks the --rescore model reorders")
    args = ap.parse_args()
    lines = (ROOT / "data/shakespeare.txt").read_text(encoding="utf-8").splitlines()
    questions = json.loads((ROOT / "tools/fixtures/rag/out/questions.json").read_text())
    weights = [float(w) for w in args.weights.split(",")]
    if args.bm25_only:
        print("| chunks | BM25 query | top 3 | top 5 | top 10 |\n|---|---|---|---|---|")
        for spec in args.chunks.split(","):
            max_chars, overlap = map(int, spec.split("/"))
            texts = chunks(lines, max_chars, overlap)
            db = word_index(texts)
            for stop in (False, True):
                found = [sum(any(q["passage"] in texts[i] for i in bm25(db, q["question"], k, stop))
                             for q in questions) for k in (3, 5, 10)]
                query = "all words" + (", stop words out" if stop else "")
                print(f"| {max_chars}/{overlap} ({len(texts)}) | {query} | "
                      + " | ".join(f"{n}/10" for n in found) + " |", flush=True)
        return
    from sentence_transformers import SentenceTransformer

    rescore = SentenceTransformer(args.rescore, device="cpu") if args.rescore else None
    pools = [int(n) for n in args.candidates.split(",")] if rescore else []
    print("| model | chunks | BM25 query | vector weight | k | vector | BM25 | fused |"
          + "".join(f" {args.rescore_pool} top {n}, rescored |" for n in pools))
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(pools))
    for name in args.models.split(","):
        model = SentenceTransformer(name, device="cpu")
        short = name.split("/")[-1]
        q_emb = model.encode([q["question"] for q in questions], normalize_embeddings=True)
        q_re = (rescore.encode([q["question"] for q in questions], normalize_embeddings=True)
                if rescore else None)
        for spec in args.chunks.split(","):
            max_chars, overlap = map(int, spec.split("/"))
            texts = chunks(lines, max_chars, overlap)
            emb = embed(model, name, texts, args.cache)
            db = word_index(texts)
            for stop in (False, True):
                for weight in weights:
                    for k in (3, 5):
                        hits = {"vector": 0, "bm25": 0, "fused": 0}
                        hits.update({n: 0 for n in pools})
                        for qi, q in enumerate(questions):
                            vec = list(np.argsort(-(emb @ q_emb[qi]), kind="stable")[:50])
                            words = bm25(db, q["question"], 50, stop)
                            score = {}
                            for w, ranking in ((weight, vec), (1.0, words)):
                                for r, i in enumerate(ranking):
                                    score[i] = score.get(i, 0.0) + w / (60 + r + 1)
                            fused = sorted(score, key=lambda i: (-score[i], i))
                            for kind, ranking in (("vector", vec), ("bm25", words), ("fused", fused)):
                                hits[kind] += any(q["passage"] in texts[i] for i in ranking[:k])
                            for n in pools:
                                pool = (fused if args.rescore_pool == "fused" else words)[:n]
                                emb_re = embed(rescore, args.rescore, [texts[i] for i in pool], None)
                                order = np.argsort(-(emb_re @ q_re[qi]), kind="stable")
                                hits[n] += any(q["passage"] in texts[pool[j]] for j in order[:k])
                        query = "all words" + (", stop words out" if stop else "")
                        print(f"| {short} | {max_chars}/{overlap} ({len(texts)}) | {query} | "
                              f"{weight:g} | {k} | {hits['vector']}/10 | {hits['bm25']}/10 | "
                              f"{hits['fused']}/10 |" + "".join(f" {hits[n]}/10 |" for n in pools),
                              flush=True)


if __name__ == "__main__":
    main()
