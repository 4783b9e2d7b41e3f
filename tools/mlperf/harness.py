"""MLPerf Inference ResNet-50 harness on MLPerf's LoadGen, with aneforge as the system under test.

The query sample library (QSL) is a folder of photos, decoded and preprocessed by aneforge's own
ResNet recipe (``ImageClassifier.preprocess``: Pillow-exact bilinear resize to 256, centre crop
224, ImageNet mean/std) when LoadGen asks for them to be loaded, and kept in memory as float32
``[3, 224, 224]`` tensors, so the timed path holds inference alone. The system under test (SUT)
runs ``ImageClassifier.logits`` on a worker thread (the Python package releases the GIL while a
program runs) and answers each sample with its top-1 class index as int32, the response format
of MLPerf's ImageNet accuracy script.

    python harness.py --model resnet50.pth --images DIR --scenario SingleStream \\
        --min-duration 30 --output-dir results/singlestream

Performance mode by default; ``--accuracy`` runs LoadGen's accuracy mode (every sample once,
responses logged to mlperf_log_accuracy.json), which needs a labelled validation set to mean
anything.
"""

import argparse
import pathlib
import queue
import threading

import aneforge
import mlperf_loadgen as lg
import numpy as np

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}


class Dataset:
    """The QSL's samples: photo paths, and the preprocessed tensors LoadGen has asked to load."""

    def __init__(self, classifier: aneforge.ImageClassifier, folder: pathlib.Path):
        self.classifier = classifier
        self.paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.paths:
            raise SystemExit(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        self.loaded = {}

    def load(self, indices):
        for i in indices:
            self.loaded[i] = self.classifier.preprocess(str(self.paths[i]))[0]

    def unload(self, indices):
        for i in indices:
            self.loaded.pop(i, None)


class SystemUnderTest:
    """Runs queries in batches of at most ``batch_size`` samples on one worker thread."""

    def __init__(self, classifier: aneforge.ImageClassifier, dataset: Dataset, batch_size: int):
        self.classifier = classifier
        self.dataset = dataset
        self.batch_size = batch_size
        self.queue = queue.Queue()
        self.worker = threading.Thread(target=self.run, daemon=True)
        self.worker.start()

    def issue(self, samples):
        for start in range(0, len(samples), self.batch_size):
            self.queue.put(samples[start : start + self.batch_size])

    def flush(self):
        pass

    def run(self):
        while True:
            batch = self.queue.get()
            if batch is None:
                return
            pixels = np.stack([self.dataset.loaded[s.index] for s in batch])
            top1 = self.classifier.logits(pixels).argmax(axis=1).astype(np.int32)
            responses = []
            for sample, cls in zip(batch, top1):
                data = np.array([cls], dtype=np.int32)
                address, _ = data.__array_interface__["data"]
                responses.append((lg.QuerySampleResponse(sample.id, address, data.nbytes), data))
            # LoadGen copies the response data (accuracy mode) before this call returns.
            lg.QuerySamplesComplete([r for r, _ in responses])

    def stop(self):
        self.queue.put(None)
        self.worker.join()


def settings_of(args, sample_count: int) -> lg.TestSettings:
    """MLPerf's rules for resnet50 (LoadGen's built-in mlperf.conf), then user.conf, then the
    command line's shortened durations (which make a run unfit for submission)."""
    settings = lg.TestSettings()
    if settings.FromConfig(str(args.user_conf), "resnet50", args.scenario) != 0:
        raise SystemExit(f"{args.user_conf}: LoadGen could not read it")
    settings.scenario = getattr(lg.TestScenario, args.scenario)
    settings.mode = lg.TestMode.AccuracyOnly if args.accuracy else lg.TestMode.PerformanceOnly
    if args.min_duration is not None:
        settings.min_duration_ms = int(args.min_duration * 1000)
    if args.min_query_count is not None:
        settings.min_query_count = args.min_query_count
    # The rules' 1024 performance samples need a 1024-image library; this one holds fewer.
    settings.performance_sample_count_override = min(
        sample_count, settings.performance_sample_count_override or sample_count
    )
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="ResNet-50 checkpoint (.pth, .safetensors)")
    parser.add_argument("--images", required=True, type=pathlib.Path, help="folder of photos")
    parser.add_argument("--scenario", choices=["SingleStream", "Offline"], required=True)
    parser.add_argument("--output-dir", required=True, type=pathlib.Path)
    parser.add_argument("--accuracy", action="store_true", help="LoadGen's accuracy mode")
    parser.add_argument("--user-conf", type=pathlib.Path,
                        default=pathlib.Path(__file__).with_name("user.conf"))
    parser.add_argument("--min-duration", type=float, help="seconds (default: the rules' 600)")
    parser.add_argument("--min-query-count", type=int,
                        help="default: the rules' (SingleStream 1024, Offline 1)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="images per program run (default: 1 SingleStream, 8 Offline)")
    parser.add_argument("--threads", type=int, default=None, help="CPU engine worker threads")
    args = parser.parse_args()

    if args.threads:
        aneforge.set_num_threads(args.threads)
    batch_size = args.batch_size or (1 if args.scenario == "SingleStream" else 8)
    classifier = aneforge.ImageClassifier(args.model, batch_size=batch_size)
    dataset = Dataset(classifier, args.images)
    # Compile the programs before LoadGen's clock starts: the full batch and, for Offline's last
    # short batch, every smaller power of two.
    sizes = [batch_size]
    while sizes[-1] > 1:
        sizes.append(sizes[-1] // 2)
    dataset.load([0])
    for n in sizes:
        classifier.logits(np.stack([dataset.loaded[0]] * n))
    dataset.unload([0])

    sut = SystemUnderTest(classifier, dataset, batch_size)
    lg_sut = lg.ConstructSUT(sut.issue, sut.flush)
    count = len(dataset.paths)
    lg_qsl = lg.ConstructQSL(count, count, dataset.load, dataset.unload)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(args.output_dir)
    log_settings.log_output.copy_summary_to_stdout = True
    log_settings.enable_trace = False
    lg.StartTestWithLogSettings(lg_sut, lg_qsl, settings_of(args, count), log_settings)
    sut.stop()
    lg.DestroyQSL(lg_qsl)
    lg.DestroySUT(lg_sut)


if __name__ == "__main__":
    main()
