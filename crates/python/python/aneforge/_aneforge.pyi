"""Type stubs of the native module (the classes and functions ``aneforge`` re-exports)."""

from os import PathLike
from typing import Any, Callable, Dict, Iterable, List, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

Engine = Literal["cpu", "ane", "auto"]
MatmulPrecision = Literal["f32", "bf16"]
DTypeName = Literal["float32", "int32", "bool"]
ArrayLike = Union[npt.ArrayLike, "Tensor"]

class AneforgeError(RuntimeError):
    """A failure inside aneforge (reading a model, compiling or running a program)."""

class InvalidInputError(ValueError):
    """Arguments or data aneforge cannot take: wrong shape or dtype, unknown port, bad option."""

class ModelNotFoundError(FileNotFoundError):
    """The model (or a file it needs) is not where aneforge looked."""

class Tensor:
    """A node of a lazy tensor graph."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> DTypeName: ...
    @property
    def ndim(self) -> int: ...
    @property
    def T(self) -> Tensor: ...
    def __add__(self, other: ArrayLike | float) -> Tensor: ...
    def __radd__(self, other: ArrayLike | float) -> Tensor: ...
    def __sub__(self, other: ArrayLike | float) -> Tensor: ...
    def __rsub__(self, other: ArrayLike | float) -> Tensor: ...
    def __mul__(self, other: ArrayLike | float) -> Tensor: ...
    def __rmul__(self, other: ArrayLike | float) -> Tensor: ...
    def __truediv__(self, other: ArrayLike | float) -> Tensor: ...
    def __rtruediv__(self, other: ArrayLike | float) -> Tensor: ...
    def __pow__(self, other: ArrayLike | float) -> Tensor: ...
    def __matmul__(self, other: ArrayLike) -> Tensor: ...
    def __rmatmul__(self, other: ArrayLike) -> Tensor: ...
    def __neg__(self) -> Tensor: ...
    def __abs__(self) -> Tensor: ...
    def matmul(self, other: ArrayLike) -> Tensor: ...
    def maximum(self, other: ArrayLike | float) -> Tensor: ...
    def minimum(self, other: ArrayLike | float) -> Tensor: ...
    def relu(self) -> Tensor: ...
    def gelu(self) -> Tensor: ...
    def silu(self) -> Tensor: ...
    def sigmoid(self) -> Tensor: ...
    def tanh(self) -> Tensor: ...
    def exp(self) -> Tensor: ...
    def log(self) -> Tensor: ...
    def sqrt(self) -> Tensor: ...
    def abs(self) -> Tensor: ...
    def clip(self, min: float, max: float) -> Tensor: ...
    def softmax(self, axis: int = -1) -> Tensor: ...
    def sum(self, axis: Optional[Union[int, Sequence[int]]] = None, keepdims: bool = False) -> Tensor: ...
    def mean(self, axis: Optional[Union[int, Sequence[int]]] = None, keepdims: bool = False) -> Tensor: ...
    def max(self, axis: Optional[Union[int, Sequence[int]]] = None, keepdims: bool = False) -> Tensor: ...
    def min(self, axis: Optional[Union[int, Sequence[int]]] = None, keepdims: bool = False) -> Tensor: ...
    def reshape(self, *shape: Union[int, Sequence[int]]) -> Tensor: ...
    def transpose(self, *axes: Union[int, Sequence[int]]) -> Tensor: ...
    def astype(self, dtype: DTypeName) -> Tensor: ...

def input(name: str, shape: Sequence[int], dtype: DTypeName = "float32") -> Tensor:
    """A program input port named ``name`` (a MIL identifier)."""

def constant(value: npt.ArrayLike) -> Tensor:
    """Data baked into the program: floats become float32, integers int32, bools stay bools."""

def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor: ...
def where(cond: Tensor, on_true: ArrayLike | float, on_false: ArrayLike | float) -> Tensor: ...

class Program:
    """A compiled program loaded into an engine."""

    @property
    def inputs(self) -> Dict[str, Tuple[List[int], DTypeName]]: ...
    @property
    def outputs(self) -> Dict[str, Tuple[List[int], DTypeName]]: ...
    @property
    def mil(self) -> str: ...
    def set_input(self, name: str, value: npt.ArrayLike) -> None:
        """Copies ``value`` (the port's shape; float32/float16, int32 or bool) into input ``name``."""
    def execute(self) -> None:
        """Runs the program once; the GIL is released meanwhile."""
    def read_output(self, name: str) -> np.ndarray: ...
    def output_view(self, name: str) -> np.ndarray:
        """The output buffer itself (read-only, no copy); it changes with the next execute."""
    def input_view(self, name: str) -> np.ndarray:
        """The input buffer itself (writable, no copy); the next execute reads it."""
    def share_buffer(self, output: str, input: str) -> None:
        """Before the first execute: ``input`` reads what ``output`` wrote in the previous execute."""
    def run(self, inputs: Optional[Dict[str, npt.ArrayLike]] = None, **kwargs: npt.ArrayLike) -> Any:
        """Sets inputs, executes, returns the outputs as ``compile`` got them (array, list or dict)."""
    def save(self, path: Union[str, PathLike]) -> None: ...

def compile(
    outputs: Union[Tensor, Sequence[Tensor], Dict[str, Tensor]],
    *,
    target: Optional[str] = None,
    engine: Engine = "cpu",
) -> Program:
    """Compiles ``outputs`` for ``target`` ("cpu", "ane", or an ANE architecture such as "h16")
    and loads the program into ``engine``."""

def import_onnx(
    path: Union[str, PathLike],
    *,
    input_shapes: Optional[Dict[str, Union[int, Sequence[int]]]] = None,
    target: Optional[str] = None,
    engine: Engine = "cpu",
) -> Program:
    """Imports an ONNX model and compiles it as ``aneforge import`` does. ``input_shapes`` binds
    an input's whole shape (``{"input_ids": [1, 128]}``) or a symbolic dimension
    (``{"batch": 4}``). The program's ``run`` takes a dict of inputs by their ONNX names and
    returns a dict of outputs by theirs."""

def set_num_threads(n: int) -> None:
    """Sizes the CPU engine's worker pool (once per process, before the first program runs)."""

def num_threads() -> int: ...

class SentenceTransformer:
    """A sentence embedding model with ``sentence_transformers.SentenceTransformer``'s ``encode``."""

    def __init__(
        self,
        model_name_or_path: str,
        *,
        engine: Engine = "cpu",
        target: Optional[str] = None,
        batch_size: int = 32,
        max_length: Optional[int] = None,
        matmul_precision: MatmulPrecision = "f32",
    ) -> None: ...
    @overload
    def encode(self, sentences: str, batch_size: int = 32, show_progress_bar: bool = False, convert_to_numpy: bool = True, normalize_embeddings: bool = False, prompt_name: Optional[str] = None, prompt: Optional[str] = None) -> np.ndarray: ...
    @overload
    def encode(self, sentences: Sequence[str], batch_size: int = 32, show_progress_bar: bool = False, convert_to_numpy: bool = True, normalize_embeddings: bool = False, prompt_name: Optional[str] = None, prompt: Optional[str] = None) -> Union[np.ndarray, List[np.ndarray]]: ...
    def get_sentence_embedding_dimension(self) -> int: ...
    @property
    def max_seq_length(self) -> int: ...

class CrossEncoder:
    """A reranker with ``sentence_transformers.CrossEncoder``'s ``predict`` and ``rank``."""

    def __init__(
        self,
        model_name_or_path: str,
        *,
        engine: Engine = "cpu",
        target: Optional[str] = None,
        batch_size: int = 32,
        max_length: Optional[int] = None,
        matmul_precision: MatmulPrecision = "f32",
    ) -> None: ...
    def predict(self, sentences: Iterable[Sequence[str]], *, activation: bool = True) -> np.ndarray: ...
    def rank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_k: Optional[int] = None,
        return_documents: bool = False,
        activation: bool = True,
    ) -> List[Dict[str, Any]]: ...
    @property
    def num_labels(self) -> int: ...

class ImageClassifier:
    """An image classifier (EfficientNet-Lite, ResNet, MobileNetV2/V3, HF ViT and DeiT), as
    ``aneforge classify -m MODEL`` loads it: a model id in the Hugging Face cache, a directory, or
    a checkpoint file (.pth, .pt, .safetensors)."""

    def __init__(
        self,
        model: str,
        *,
        engine: Engine = "cpu",
        target: Optional[str] = None,
        batch_size: int = 8,
        matmul_precision: MatmulPrecision = "f32",
    ) -> None: ...
    def classify(
        self,
        images: Union[str, "PathLike[str]", np.ndarray, Sequence[Union[str, "PathLike[str]", np.ndarray]]],
        top_k: int = 5,
    ) -> Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]]:
        """The ``top_k`` classes of each image (``index``, ``label``, ``probability``, ``logit``),
        most probable first. An image is a path (JPEG, PNG, WebP, BMP) or a uint8 ``[H, W, 3]``
        RGB array; one image gives one list, a sequence gives a list per image."""
    def preprocess(
        self,
        images: Union[str, "PathLike[str]", np.ndarray, Sequence[Union[str, "PathLike[str]", np.ndarray]]],
    ) -> np.ndarray:
        """The model's input tensors of the images (its resize, crop and normalisation), float32
        ``[n, 3, H, W]``; all must preprocess to one size."""
    def logits(self, pixel_values: np.ndarray) -> np.ndarray:
        """Logits of preprocessed float32 ``[n, 3, H, W]`` inputs, float32 ``[n, classes]``."""
    @property
    def labels(self) -> List[str]: ...

ImageArg = Union[str, "PathLike[str]", np.ndarray]

class CLIPModel:
    """A CLIP model (Hugging Face ``CLIPModel`` safetensors with its tokenizer and preprocessor
    config), as ``aneforge classify -m MODEL --labels ...`` loads it."""

    def __init__(
        self,
        model: str,
        *,
        engine: Engine = "cpu",
        target: Optional[str] = None,
        batch_size: int = 8,
        matmul_precision: MatmulPrecision = "f32",
    ) -> None: ...
    def encode_image(self, images: Union[ImageArg, Sequence[ImageArg]]) -> npt.NDArray[np.float32]:
        """L2-normalised image embeddings ``[n, dim]`` (``[dim]`` for one image); an image is a
        path or a uint8 ``[H, W, 3]`` RGB array."""
    def encode_text(self, texts: Union[str, Sequence[str]]) -> npt.NDArray[np.float32]:
        """L2-normalised text embeddings ``[n, dim]`` (``[dim]`` for one string)."""
    def classify(
        self,
        images: Union[ImageArg, Sequence[ImageArg]],
        labels: Sequence[str],
        *,
        template: str = "{}",
        top_k: int = 5,
    ) -> Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]]:
        """Zero-shot classification as ``aneforge classify --labels --template``: the ``top_k``
        labels of each image (``index`` into ``labels``, ``label``, ``probability``, ``logit``)."""
    @property
    def logit_scale(self) -> float: ...
    @property
    def dimension(self) -> int: ...

class Whisper:
    """A Whisper model (transformers safetensors or a CTranslate2 ``model.bin``), as
    ``aneforge transcribe -m MODEL`` loads it: a model id in the Hugging Face cache or a
    directory."""

    def __init__(
        self,
        model: str,
        *,
        engine: Engine = "cpu",
        target: Optional[str] = None,
        matmul_precision: MatmulPrecision = "f32",
    ) -> None: ...
    def transcribe(
        self,
        audio: Union[str, PathLike],
        *,
        language: Optional[str] = None,
        task: Literal["transcribe", "translate"] = "transcribe",
        beam_size: int = 1,
        timestamps: bool = False,
        temperature: float = 0.0,
        temperature_increment_on_fallback: float = 0.2,
        compression_ratio_threshold: Optional[float] = 2.4,
        logprob_threshold: Optional[float] = -1.0,
        no_speech_threshold: Optional[float] = 0.6,
        best_of: int = 5,
        seed: int = 0,
        condition_on_previous_text: bool = True,
        initial_prompt: Optional[str] = None,
    ) -> Dict[str, Any]:
        """``{"text", "language", "duration", "segments": [{"start", "end", "text", "tokens"}]}``
        of an audio file (WAV, FLAC, MP3, OGG/Vorbis). Defaults are ``aneforge transcribe``'s
        (openai-whisper's temperature fallback and, over 30 s, conditioning on the previous
        windows' text; ``None`` turns a threshold off)."""

class Generation:
    text: str
    tokens: List[int]
    finish_reason: Literal["length", "eos", "stop", "context_full", "cancelled"]
    prompt_tokens: int
    prefill_tokens: int
    prefill_tokens_per_second: float
    decode_tokens_per_second: float

class LLM:
    """A decoder LLM; sampling defaults are the CLI's (``aneforge generate``)."""

    def __init__(
        self,
        model: str,
        *,
        engine: Engine = "cpu",
        target: Optional[str] = None,
        max_context: int = 2048,
        cache_type: Literal["f32", "f16", "q8_0"] = "f32",
    ) -> None: ...
    def generate_details(
        self,
        prompt: Union[str, Sequence[int]],
        *,
        max_tokens: int = 256,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Sequence[str]] = None,
        ignore_eos: bool = False,
        chat: bool = False,
        system: Optional[str] = None,
        callback: Optional[Callable[[str], Optional[bool]]] = None,
    ) -> Generation: ...
    def chat_details(
        self,
        messages: Sequence[Dict[str, str]],
        *,
        max_tokens: int = 512,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        seed: Optional[int] = None,
        callback: Optional[Callable[[str], Optional[bool]]] = None,
    ) -> Generation: ...
    def apply_chat_template(self, messages: Sequence[Dict[str, str]], *, add_generation_prompt: bool = True) -> str: ...
    def encode(self, text: str, *, special: bool = True) -> List[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def reset(self) -> None: ...
    @property
    def max_context(self) -> int: ...
