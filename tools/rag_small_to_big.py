"""Retrieval-only sweep of small-to-big retrieval with the reference libraries: the document is cut
into parent chunks exactly as `aneforge rag index` cuts them (whole non-blank lines, at most N
bytes, consecutive chunks sharing up to the overlap), each parent is cut into small units (whole
lines, at most U bytes, optionally breaking at blank lines), the units are embedded with
sentence-transformers and indexed for BM25 by SQLite FTS5 (speaker labels kept as they are,
stripped from the word index, or leading every unit of the speech they open, as chunk.rs does),
each search gives the chunks of its best units (each chunk once, at its best unit's rank, as
store.rs does), the two are fused by reciprocal rank (constant 60), and the first k chunks are
cited. Prints, per setting, how many questions have their passage in the first k cited chunks;
the first rows search the chunks themselves (the index before units).

usage: python3 tools/rag_small_to_big.py [--questions FILE,...] [--model M] [--parents 800/200]
           [--units 200,300] [--labels kept,stripped,header] [--candidates 20] [--cache DIR]
           [--bm25-only]
"""

import argparse
import hashlib
import json
import pathlib
import re
import sqlite3

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def split_line(line, max_chars):
    out, rest = [], line
    while len(rest.encode()) > max_chars:
        b = rest.encode()
        cut = max_chars
        while cut > 0 and (b[cut] & 0xC0) == 0x80:
            cut -= 1
        head = b[:cut].decode()
        at = head.rfind(" ")
        at = at if at > 0 else len(head)
        out.append(rest[:at])
        rest = rest[at:].lstrip()
    if rest:
        out.append(rest)
    return out


def pieces_of(text, max_chars):
    """(line number, text) of every non-blank line's pieces, as chunk.rs cuts them."""
    out = []
    for i, line in enumerate(text.split("\n")):
        line = line.rstrip()
        if not line.strip():
            continue
        out.extend((i + 1, p) for p in split_line(line, max_chars))
    return out


def parents(pieces, max_chars, overlap):
    """(start, end) piece ranges of the chunks, as chunk.rs cuts them."""
    out, start, n = [], 0, len(pieces)
    while start < n:
        end, size = start, 0
        while end < n:
            add = len(pieces[end][1].encode()) + (end > start)
            if end > start and size + add > max_chars:
                break
            size += add
            end += 1
        out.append((start, end))
        if end == n:
            break
        nxt, kept = end, 0
        while nxt > start + 1:
            add = len(pieces[nxt - 1][1].encode()) + 1
            if kept + add > overlap:
                break
            kept += add
            nxt -= 1
        start = nxt
    return out


def units(pieces, start, end, max_chars, paragraphs):
    """(start, end) piece ranges of the units of one parent: greedy runs of whole pieces of at most
    max_chars bytes; with paragraphs, a blank line also ends a unit once it holds half of that."""
    out, s = [], start
    while s < end:
        e, size = s, 0
        while e < end:
            add = len(pieces[e][1].encode()) + (e > s)
            if e > s and size + add > max_chars:
                break
            if e > s and paragraphs and pieces[e][0] > pieces[e - 1][0] + 1 and size >= max_chars // 2:
                break
            size += add
            e += 1
        out.append((s, e))
        s = e
    return out


def label_like(text):
    """chunk.rs's is_speaker_label: at most 40 bytes and four words, ending with a period, each
    word letters, digits and apostrophes (then an optional . or ,), capitalised or starting with a
    digit, except `and` and `of` after the first."""
    text = text.strip()
    words = text.split()
    if len(text.encode()) > 40 or not text.endswith(".") or not 1 <= len(words) <= 4:
        return False
    for i, w in enumerate(words):
        core = w.rstrip(".,")
        if not core or not all(c.isalnum() or c == "'" for c in core):
            return False
        if not (core[0].isupper() or core[0].isdigit() or (i > 0 and core in ("and", "of"))):
            return False
    return True


def is_label(pieces, i):
    """A speaker label: the first line of a paragraph, followed by the paragraph's next line."""
    line, text = pieces[i]
    if i + 1 >= len(pieces) or pieces[i + 1][0] != line + 1:
        return False
    if i > 0 and pieces[i - 1][0] >= line - 1:
        return False
    return label_like(text)


def speakers(pieces):
    """For each piece, the index of the label opening its paragraph, or None."""
    out, current = [], None
    for i, (line, _) in enumerate(pieces):
        if i == 0 or line > pieces[i - 1][0] + 1:
            current = i if is_label(pieces, i) else None
        out.append(current)
    return out


def unit_text(pieces, spk, s, e, header):
    """A unit's lines; with header, led by its paragraph's speaker label when it does not start
    with it (chunk.rs)."""
    text = "\n".join(p for _, p in pieces[s:e])
    if header and spk[s] is not None and spk[s] != s:
        text = pieces[spk[s]][1] + "\n" + text
    return text


# Lucene's English stop set and the words that open questions (store.rs's STOP_WORDS)
STOP = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with what which who whom whose how why when where do does "
    "did".split()
)


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


def bm25(db, question, k, stop=False):
    terms = [t.lower() for t in re.split(r"[^\w]+", question) if t]
    if stop and any(t not in STOP for t in terms):
        terms = [t for t in terms if t not in STOP]
    query = " OR ".join(f'"{t}"' for t in terms)
    rows = db.execute("SELECT rowid FROM w WHERE w MATCH ? ORDER BY bm25(w), rowid LIMIT ?",
                      (query, k))
    return [r[0] for r in rows]


def rrf(rankings, weights=None):
    score = {}
    for j, ranking in enumerate(rankings):
        w = weights[j] if weights else 1.0
        for r, i in enumerate(ranking):
            score[i] = score.get(i, 0.0) + w / (60 + r + 1)
    return sorted(score, key=lambda i: (-score[i], i))


def dedupe(ranking, parent_of):
    seen, out = set(), []
    for u in ranking:
        p = parent_of[u]
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", default="tools/fixtures/rag/out/questions.json,"
                    "tools/fixtures/rag/out/questions_heldout.json")
    ap.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    ap.add_argument("--parents", default="800/200")
    ap.add_argument("--units", default="300")
    ap.add_argument("--labels", default="kept,stripped,header",
                    help="speaker labels in the units' text: kept as they are, stripped from the "
                         "word index, or also leading every unit of their paragraph (header)")
    ap.add_argument("--cache")
    ap.add_argument("--candidates", type=int, default=20, help="chunks from each search")
    ap.add_argument("--bm25-only", action="store_true")
    args = ap.parse_args()
    text = (ROOT / "data/shakespeare.txt").read_text(encoding="utf-8")
    sets = [(pathlib.Path(f).stem, json.loads((ROOT / f).read_text()))
            for f in args.questions.split(",")]
    model = None
    if not args.bm25_only:
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer(args.model, device="cpu")
        q_emb = {name: model.encode([q["question"] for q in qs], normalize_embeddings=True)
                 for name, qs in sets}
    short = args.model.split("/")[-1]
    n_c = args.candidates
    pmax, pover = map(int, args.parents.split("/"))
    pieces = pieces_of(text, pmax)
    spk = speakers(pieces)
    par = parents(pieces, pmax, pover)
    ptext = ["\n".join(p for _, p in pieces[s:e]) for s, e in par]
    cols = [f"{name} k={k}" for name, _ in sets for k in (3, 5)]
    print(f"| model | chunks | units | labels | BM25 query | ranking | " + " | ".join(cols) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(cols))

    def row(units_desc, labels, query, kind, found):
        print(f"| {short} | {pmax}/{pover} ({len(par)}) | {units_desc} | {labels} | {query} | "
              f"{kind} | " + " | ".join(found) + " |", flush=True)

    def score(rank_fn):
        found = []
        for name, qs in sets:
            for k in (3, 5):
                hit = sum(any(q["passage"] in ptext[p] for p in rank_fn(name, qi, q)[:k])
                          for qi, q in enumerate(qs))
                found.append(f"{hit}/{len(qs)}")
        return found

    # the chunks themselves searched, as before units (all words in the query)
    pdb = fts(ptext)
    pemb = embed(model, args.model, ptext, args.cache) if model else None
    for stop in (False, True):
        query = "stop words out" if stop else "all words"
        words = lambda name, qi, q, stop=stop: bm25(pdb, q["question"], n_c, stop)
        row("none (chunks)", "kept", query, "BM25", score(words))
        if model:
            vec = lambda name, qi, q: list(np.argsort(-(pemb @ q_emb[name][qi]), kind="stable")[:n_c])
            if not stop:
                row("none (chunks)", "kept", query, "vector", score(vec))
            row("none (chunks)", "kept", query, "fused",
                score(lambda name, qi, q: rrf([vec(name, qi, q), words(name, qi, q)])))
    for umax in [int(u) for u in args.units.split(",")]:
        ranges, parent_of = [], []
        for pi, (s, e) in enumerate(par):
            for r in units(pieces, s, e, umax, True):
                ranges.append(r)
                parent_of.append(pi)
        plain = [unit_text(pieces, spk, s, e, False) for s, e in ranges]
        headed = [unit_text(pieces, spk, s, e, True) for s, e in ranges]
        stripped = ["\n".join(p for i, (_, p) in enumerate(pieces[s:e], s) if not is_label(pieces, i))
                    for s, e in ranges]
        desc = f"{umax} ({len(ranges)})"
        for labels in args.labels.split(","):
            words_texts = {"kept": plain, "stripped": stripped, "header": headed}[labels]
            db = fts(words_texts)
            emb = None
            if model:
                emb = embed(model, args.model, headed if labels == "header" else plain, args.cache)
            for stop in (False, True):
                query = "stop words out" if stop else "all words"

                def words(name, qi, q, db=db, stop=stop):
                    return dedupe(bm25(db, q["question"], 50 * n_c, stop), parent_of)[:n_c]

                row(desc, labels, query, "BM25", score(words))
                if model:
                    def vec(name, qi, q, emb=emb):
                        order = np.argsort(-(emb @ q_emb[name][qi]), kind="stable")[:50 * n_c]
                        return dedupe(list(order), parent_of)[:n_c]

                    if not stop and labels != "stripped":
                        row(desc, labels, "-", "vector", score(vec))
                    row(desc, labels, query, "fused",
                        score(lambda name, qi, q: rrf([vec(name, qi, q), words(name, qi, q)])))


def fts(texts):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE w USING fts5(text)")
    db.executemany("INSERT INTO w(rowid, text) VALUES (?, ?)", enumerate(texts))
    return db


if __name__ == "__main__":
    main()
