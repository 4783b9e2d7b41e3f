"""`af.SentenceTransformer.encode` timed as tools/bench/embed_peers.py times its peers (same
sentences, batch, runs; one JSON line in the same shape), for tools/bench/embed_python.sh.

  embed_python.py FILE [THREADS]

Needs the aneforge package in this Python (pip install ./crates/python) and numpy.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embed_peers import BATCH, MODEL, RUNS, read_sentences, report  # noqa: E402


def run(path, threads=2):
    import numpy as np

    import aneforge as af

    af.set_num_threads(threads)
    sentences = read_sentences(path)
    start = time.perf_counter()
    model = af.SentenceTransformer(MODEL, batch_size=BATCH)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    first = model.encode(sentences, batch_size=BATCH)
    first_s = time.perf_counter() - start
    times, cpu_times = [], []
    for _ in range(RUNS):
        start, cpu = time.perf_counter(), time.process_time()
        model.encode(sentences, batch_size=BATCH)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    if os.environ.get("SAVE"):
        np.save(os.environ["SAVE"], first)
    report("aneforge Python package %s" % af.__version__, sentences, load_s, first_s, times, threads, cpu_times)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    run(sys.argv[1], *(int(a) for a in sys.argv[2:]))
