"""Embeds a text corpus with Ray Data on a local Ray cluster: `ray.data.read_text(...)`, then
`map_batches` over a pool of actors that each hold one `af.SentenceTransformer`.

    python ray_embed.py CORPUS.txt --model sentence-transformers/all-MiniLM-L6-v2 \
        --workers 2 --output embeddings.npy

Each actor runs the CPU engine with `--threads-per-worker` threads (default 1), so the pool uses
`workers × threads` cores. Rows keep the corpus order (Ray Data's `preserve_order`), so the output
is the matrix a single process gets from `SentenceTransformer.encode(lines)`, bit for bit
(a row's embedding depends on the row alone, not on the batch it shares).
"""

import argparse
import os
import sys

import numpy as np


class Embedder:
    """One model per actor, loaded once; called with batches of rows (`{"text": array}`)."""

    def __init__(self, model: str, threads: int, batch_size: int):
        import aneforge as af

        af.set_num_threads(threads)
        self.model = af.SentenceTransformer(model)
        self.batch_size = batch_size

    def __call__(self, batch):
        texts = [str(t) for t in batch["text"]]
        batch["embedding"] = self.model.encode(texts, batch_size=self.batch_size)
        return batch


def embed_with_ray(path: str, model: str, workers: int, threads: int, batch_size: int) -> np.ndarray:
    import ray

    # one CPU more than the actors hold, for the tasks that read the file
    # the workers import this module (the actor class) from this file's directory
    here = os.path.dirname(os.path.abspath(__file__))
    python_path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(
        num_cpus=workers * threads + 1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": python_path}},
    )
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        # at least two blocks per actor, so the pool shares the work
        ds = ray.data.read_text(path, override_num_blocks=2 * workers)
        ds = ds.map_batches(
            Embedder,
            fn_constructor_args=(model, threads, batch_size),
            batch_size=4 * batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=threads,
        )
        rows = ds.take_all()
        return np.stack([r["embedding"] for r in rows]).astype(np.float32)
    finally:
        ray.shutdown()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="a text file, one text per line")
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--output", "-o", required=True, help="where to write the [lines, dim] .npy")
    args = parser.parse_args(argv)
    emb = embed_with_ray(args.corpus, args.model, args.workers, args.threads_per_worker, args.batch_size)
    tmp = args.output + ".tmp.npy"
    np.save(tmp, emb)
    os.replace(tmp, args.output)
    print(f"{emb.shape[0]} texts embedded to {emb.shape[1]} dimensions -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
