"""aneforge: tensor graphs compiled to Apple Neural Engine (MIL) programs, run on the ANE or on
aneforge's own CPU engine; sentence encoders, rerankers and decoder LLMs built on them.

Graphs: ``af.input``, ``af.constant``, operators on ``af.Tensor``, ``af.compile(outputs,
target=...)`` -> ``af.Program`` (``run``, ``set_input``, ``execute``, ``read_output``,
``share_buffer``, zero-copy ``input_view`` / ``output_view``).

Models: ``af.SentenceTransformer``, ``af.CrossEncoder`` (sentence-transformers' signatures) and
``af.LLM`` (``generate``, ``stream``, ``chat``), ``af.ImageClassifier`` (``classify``),
``af.CLIPModel`` (``encode_image``, ``encode_text``, zero-shot ``classify``) and ``af.Whisper``
(``transcribe``); ONNX models through ``af.import_onnx``. Models are found as the CLI finds them: an id
``ORG/NAME`` in the Hugging Face cache (``HF_HOME``), or a directory.

``engine="cpu"|"ane"|"auto"`` and ``target="cpu"|"ane"|"h16"|...`` mean what ``--engine`` and
``--target`` mean on the command line. Errors: ``ModelNotFoundError`` (a FileNotFoundError),
``InvalidInputError`` (a ValueError), ``AneforgeError`` (a RuntimeError).
"""

import queue
import threading
from typing import Iterator, List, Optional

from ._aneforge import (
    AneforgeError,
    CLIPModel,
    CrossEncoder,
    Generation,
    ImageClassifier,
    InvalidInputError,
    ModelNotFoundError,
    Program,
    SentenceTransformer,
    Tensor,
    Whisper,
    __version__,
    compile,
    concat,
    constant,
    import_onnx,
    input,
    num_threads,
    set_num_threads,
    where,
)
from ._aneforge import LLM as _NativeLLM

__all__ = [
    "AneforgeError",
    "CLIPModel",
    "CrossEncoder",
    "Generation",
    "ImageClassifier",
    "InvalidInputError",
    "LLM",
    "ModelNotFoundError",
    "Program",
    "SentenceTransformer",
    "Tensor",
    "Whisper",
    "__version__",
    "compile",
    "concat",
    "constant",
    "import_onnx",
    "input",
    "num_threads",
    "set_num_threads",
    "where",
]

_DONE = object()


class LLM(_NativeLLM):
    """A decoder LLM (Llama, Mistral, Qwen2/3, Qwen3-MoE, Mixtral, Phi-3, Gemma 1/2/3, GPT-2;
    safetensors or GGUF), loaded and compiled as ``aneforge generate -m MODEL`` does. Sampling
    defaults are the CLI's."""

    def generate(self, prompt, **kwargs) -> str:
        """The generated text; keywords as ``generate_details``."""
        return self.generate_details(prompt, **kwargs).text

    def chat(self, messages, **kwargs) -> str:
        """The assistant's reply to ``messages`` (``[{"role": ..., "content": ...}, ...]``)."""
        return self.chat_details(messages, **kwargs).text

    def stream(self, prompt, **kwargs) -> Iterator[str]:
        """Yields text as it is generated (``generate`` runs on a worker thread, the GIL released
        while it computes). Closing the iterator early stops the generation."""
        return self._stream(self.generate_details, prompt, kwargs)

    def stream_chat(self, messages, **kwargs) -> Iterator[str]:
        """``chat``, streamed as ``stream`` streams."""
        return self._stream(self.chat_details, messages, kwargs)

    @staticmethod
    def _stream(run, first, kwargs) -> Iterator[str]:
        if "callback" in kwargs:
            raise InvalidInputError("stream() takes no callback: it yields the text itself")
        chunks: "queue.Queue" = queue.Queue()
        stopped = threading.Event()
        failure: List[BaseException] = []

        def on_text(text: str) -> bool:
            chunks.put(text)
            return not stopped.is_set()

        def work() -> None:
            try:
                run(first, callback=on_text, **kwargs)
            except BaseException as e:  # re-raised in the consuming thread
                failure.append(e)
            finally:
                chunks.put(_DONE)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while True:
                item = chunks.get()
                if item is _DONE:
                    break
                yield item
        finally:
            stopped.set()
            worker.join()
        if failure:
            raise failure[0]
