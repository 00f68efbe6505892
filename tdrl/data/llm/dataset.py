"""Tokenized text datasets as memory-mapped TensorDicts, and data loaders over them.

Datasets are read with Hugging Face ``datasets`` and tokenized with ``transformers``
tokenizers; both are imported only when a dataset is loaded or tokenized.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

__all__ = [
    "TensorDictTokenizer",
    "TokenizedDatasetLoader",
    "create_infinite_iterator",
    "get_dataloader",
]

_has_transformers = importlib.util.find_spec("transformers") is not None
_has_datasets = importlib.util.find_spec("datasets") is not None

DEFAULT_TOKENIZER = "gpt2"


def _require(module: str, purpose: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{purpose} needs the {module!r} package: pip install {module}") from err


def default_root() -> Path:
    """Where tokenized datasets are cached: ``$XDG_CACHE_HOME/tdrl/llm_data``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "tdrl" / "llm_data"


def _as_tensordict(encoded: dict, batched: bool, device: Any) -> TensorDictBase:
    """Token lists as a TensorDict; rows of different lengths give a lazy stack."""
    if not batched:
        return TensorDict(
            {key: torch.as_tensor(value) for key, value in encoded.items()}, [], device=device
        )
    rows = len(next(iter(encoded.values())))
    lengths = {len(row) for value in encoded.values() for row in value if hasattr(row, "__len__")}
    if len(lengths) <= 1:
        return TensorDict(
            {key: torch.as_tensor(value) for key, value in encoded.items()}, [rows], device=device
        )
    return LazyStackedTensorDict(
        *(
            TensorDict({key: torch.as_tensor(value[i]) for key, value in encoded.items()}, [])
            for i in range(rows)
        )
    ).to(device)


class TensorDictTokenizer:
    """Tokenizes the text of an example (or a batch of examples) into a TensorDict.

    Calling it with a mapping holding text under ``key`` (a string or a list of strings)
    returns the tokenizer's ``input_ids`` and ``attention_mask``, padded and truncated to
    ``max_length`` as asked.

    Args:
        tokenizer: a ``transformers`` tokenizer (anything called as ``tokenizer(texts,
            max_length=..., padding=..., truncation=...)`` returning token lists).
        max_length: the length sequences are padded / truncated to.
        key: the entry holding the text.
        padding: the tokenizer's ``padding`` argument (``"max_length"`` pads every sequence).
        truncation: cut sequences longer than ``max_length``.
        return_tensordict: return a TensorDict (batch size ``[n]`` for ``n`` texts; rows of
            different lengths give a lazy stack); otherwise the tokenizer's output as is.
        device: the device of the returned TensorDict.

    Examples:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> vocab = {"[PAD]": 0, "[UNK]": 1, "hello": 2, "world": 3}
        >>> backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        >>> backend.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]")
        >>> process = TensorDictTokenizer(tokenizer, max_length=4)
        >>> process({"text": ["hello world", "world"]})["input_ids"]
        tensor([[2, 3, 0, 0],
                [3, 0, 0, 0]])
    """

    def __init__(
        self,
        tokenizer: Any,
        max_length: int,
        key: str = "text",
        padding: str | bool = "max_length",
        truncation: bool = True,
        return_tensordict: bool = True,
        device: torch.device | str | None = None,
    ) -> None:
        if int(max_length) < 1:
            raise ValueError(f"max_length must be a positive integer, got {max_length}")
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.key = key
        self.padding = padding
        self.truncation = truncation
        self.return_tensordict = return_tensordict
        self.device = device

    def _text(self, sample: Any) -> Any:
        try:
            return sample[self.key]
        except KeyError as err:
            keys = list(sample.keys()) if hasattr(sample, "keys") else type(sample).__name__
            raise KeyError(
                f"{type(self).__name__}: expected the text under key {self.key!r}, got keys {keys}"
            ) from err

    def __call__(self, sample: Any) -> Any:
        """Tokenize ``sample[key]``."""
        text = self._text(sample)
        encoded = self.tokenizer(
            text, max_length=self.max_length, padding=self.padding, truncation=self.truncation
        )
        if not self.return_tensordict:
            return encoded
        fields = {
            name: encoded[name] for name in ("input_ids", "attention_mask") if name in encoded
        }
        return _as_tensordict(fields, not isinstance(text, str), self.device)


def _cache_name(dataset_name: str, from_disk: bool) -> str:
    if not from_disk:
        return dataset_name.replace("/", "__")
    path = Path(dataset_name).expanduser().resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    return f"{path.name}-{digest}"


class TokenizedDatasetLoader:
    """Loads a text dataset, tokenizes it once and caches a memory-mapped copy.

    The first :meth:`load` reads ``split`` of ``dataset_name`` with ``datasets``
    (``load_from_disk`` when ``from_disk``, else ``load_dataset``), applies
    ``pre_tokenization_hook`` to the whole split, tokenizes it with
    ``tokenizer_fn(tokenizer, max_length)`` (mapped over batches of examples), drops the
    examples whose ``"valid_sample"`` entry is False when the tokenizer writes one, and
    stores the result under ``root_dir``; later calls open that copy
    (``TensorDict.load_memmap``).

    Args:
        split: the split to load (``"train"``, ``"valid"``, ...). For a split whose name
            starts with ``"valid"``, only the first ``valid_size`` examples are kept.
        max_length: the length token sequences are padded / truncated to.
        dataset_name: a ``datasets`` hub name, or with ``from_disk`` a folder written by
            ``DatasetDict.save_to_disk``.
        tokenizer_fn: builds the per-batch tokenizing function from ``(tokenizer,
            max_length)``, e.g. :class:`TensorDictTokenizer`.
        pre_tokenization_hook: called on the loaded split; returns a new ``Dataset``.
        root_dir: the cache folder (default ``~/.cache/tdrl/llm_data``).
        from_disk: read ``dataset_name`` with ``datasets.load_from_disk``.
        valid_size: the number of validation examples kept.
        num_workers: processes tokenizing the dataset (``Dataset.map(num_proc=...)``).
        tokenizer_class: the tokenizer class (default ``transformers.AutoTokenizer``).
        tokenizer_model_name: what ``tokenizer_class.from_pretrained`` loads (default
            ``"gpt2"``): a hub name or a local folder.

    Examples:
        >>> import tempfile
        >>> from datasets import Dataset, DatasetDict
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> vocab = {"[PAD]": 0, "[UNK]": 1, "good": 2, "day": 3}
        >>> backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        >>> backend.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> folder = tempfile.mkdtemp()
        >>> _ = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]").save_pretrained(folder)
        >>> texts = tempfile.mkdtemp()
        >>> DatasetDict({"train": Dataset.from_dict({"text": ["good day", "day"]})}).save_to_disk(texts)
        >>> loader = TokenizedDatasetLoader("train", 3, texts, TensorDictTokenizer,
        ...     from_disk=True, root_dir=tempfile.mkdtemp(), tokenizer_model_name=folder)
        >>> loader.load()["input_ids"]
        MemoryMappedTensor([[2, 3, 0],
                            [3, 0, 0]])
    """

    def __init__(
        self,
        split: str,
        max_length: int,
        dataset_name: str,
        tokenizer_fn: Callable[..., Any],
        pre_tokenization_hook: Callable[[Any], Any] | None = None,
        root_dir: str | os.PathLike | None = None,
        from_disk: bool = False,
        valid_size: int = 2000,
        num_workers: int | None = None,
        tokenizer_class: Any = None,
        tokenizer_model_name: str | None = None,
    ) -> None:
        self.split = split
        self.max_length = int(max_length)
        self.dataset_name = str(dataset_name)
        self.tokenizer_fn = tokenizer_fn
        self.pre_tokenization_hook = pre_tokenization_hook
        self.root_dir = Path(root_dir) if root_dir is not None else default_root()
        self.from_disk = bool(from_disk)
        self.valid_size = int(valid_size)
        self.num_workers = num_workers
        self.tokenizer_class = tokenizer_class
        self.tokenizer_model_name = tokenizer_model_name or DEFAULT_TOKENIZER

    @property
    def cache_path(self) -> Path:
        """The folder of the cached tokenized split."""
        name = _cache_name(self.dataset_name, self.from_disk)
        tokenizer = getattr(self.tokenizer_fn, "__name__", type(self.tokenizer_fn).__name__)
        return self.root_dir / name / self.split / f"{tokenizer}-{self.max_length}"

    def load(self) -> TensorDictBase:
        """The tokenized split: read from the cache, or built and cached first."""
        path = self.cache_path
        if (path / "meta.json").exists():
            return TensorDict.load_memmap(str(path))
        dataset = self._load_dataset()
        data = self._tokenize(dataset)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".partial-{os.getpid()}")
        data.memmap_(str(tmp))
        os.replace(tmp, path)
        return TensorDict.load_memmap(str(path))

    def _load_dataset(self) -> Any:
        """The split as a ``datasets.Dataset`` (hook applied, validation size capped)."""
        datasets = _require("datasets", "TokenizedDatasetLoader")
        if self.from_disk:
            try:
                dataset = datasets.load_from_disk(self.dataset_name)
            except FileNotFoundError as err:
                raise FileNotFoundError(
                    f"no dataset saved with save_to_disk at {self.dataset_name}"
                ) from err
            if isinstance(dataset, datasets.DatasetDict):
                if self.split not in dataset:
                    raise KeyError(
                        f"dataset {self.dataset_name} has no split {self.split!r}; "
                        f"splits: {sorted(dataset)}"
                    )
                dataset = dataset[self.split]
        else:
            dataset = datasets.load_dataset(self.dataset_name, split=self.split)
        if self.split.startswith("valid") and len(dataset) > self.valid_size:
            dataset = dataset.select(range(self.valid_size))
        if self.pre_tokenization_hook is not None:
            dataset = self.pre_tokenization_hook(dataset)
        return dataset

    def _tokenizer(self) -> Any:
        tokenizer_class = self.tokenizer_class
        if tokenizer_class is None:
            tokenizer_class = _require("transformers", "TokenizedDatasetLoader").AutoTokenizer
        tokenizer = tokenizer_class.from_pretrained(self.tokenizer_model_name)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer

    def _tokenize(self, dataset: Any, excluded_features: Sequence[str] | None = None) -> TensorDict:
        """Tokenize a ``datasets.Dataset`` into a TensorDict of its numeric columns."""
        process = self.tokenizer_fn(
            self._tokenizer(), max_length=self.max_length, return_tensordict=False
        )
        columns = list(dataset.column_names)
        tokenized = dataset.map(
            lambda batch: dict(process(batch)),
            batched=True,
            num_proc=self.num_workers,
            remove_columns=columns,
            desc="tokenizing",
        )
        if "valid_sample" in tokenized.column_names:
            tokenized = tokenized.filter(lambda batch: batch["valid_sample"], batched=True)
            tokenized = tokenized.remove_columns(["valid_sample"])
        if excluded_features:
            tokenized = tokenized.remove_columns(list(excluded_features))
        return self.dataset_to_tensordict(tokenized)

    @staticmethod
    def dataset_to_tensordict(
        dataset: Any,
        data_dir: str | os.PathLike | None = None,
        prefix: Any = None,
        features: Sequence[str] | None = None,
        batch_dims: int = 1,
        valid_mask_key: str | None = None,
    ) -> TensorDict:
        """The numeric columns of a ``datasets.Dataset`` as a TensorDict.

        Args:
            dataset: the dataset.
            data_dir: when given, the tensors are memory-mapped in this folder.
            prefix: a key (str or tuple) the columns are written under.
            features: the columns to keep (default: all).
            batch_dims: the number of batch dims of the result.
            valid_mask_key: a boolean column; only the rows where it is True are kept.
        """
        names = list(features) if features is not None else list(dataset.column_names)
        columns = dataset.with_format("numpy")
        entries = {name: torch.as_tensor(np.asarray(columns[name])) for name in names}
        if valid_mask_key is not None:
            mask = entries.pop(valid_mask_key).bool()
            entries = {name: value[mask] for name, value in entries.items()}
        rows = len(next(iter(entries.values()))) if entries else len(dataset)
        data = TensorDict(entries, batch_size=[rows])
        if batch_dims > 1:
            data.batch_size = next(iter(entries.values())).shape[:batch_dims]
        if prefix is not None:
            prefix = prefix if isinstance(prefix, tuple) else (prefix,)
            nested = TensorDict({}, batch_size=data.batch_size)
            nested.set(prefix, data)
            data = nested
        if data_dir is not None:
            data = data.memmap_(str(data_dir))
        return data


def create_infinite_iterator(iterator: Iterable) -> Iterator:
    """Iterate ``iterator`` over and over (it is re-iterated each time it runs out).

    Examples:
        >>> it = create_infinite_iterator([1, 2])
        >>> [next(it) for _ in range(5)]
        [1, 2, 1, 2, 1]
    """
    while True:
        empty = True
        for item in iterator:
            empty = False
            yield item
        if empty:
            raise RuntimeError("create_infinite_iterator: the iterable yields nothing")


class _BatchLoader:
    """Batches of a tensorclass / TensorDict drawn without replacement (last partial dropped)."""

    def __init__(self, data: Any, batch_size: int, device: Any, prefetch: int) -> None:
        if len(data) < batch_size:
            raise ValueError(
                f"the dataset holds {len(data)} examples, fewer than batch_size={batch_size}"
            )
        self.data = data
        self.batch_size = batch_size
        self.device = device
        self.prefetch = int(prefetch)

    def __len__(self) -> int:
        return len(self.data) // self.batch_size

    def _batches(self) -> Iterator:
        order = torch.randperm(len(self.data))
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            index = order[start : start + self.batch_size]
            yield self.data[index].to(self.device)

    def __iter__(self) -> Iterator:
        if not self.prefetch:
            yield from self._batches()
            return
        ready: queue.Queue = queue.Queue(self.prefetch)
        stop = threading.Event()
        finished = object()

        def offer(item: Any) -> bool:
            # wait for room, but give up as soon as the consumer has gone away
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def fill() -> None:
            for batch in self._batches():
                if not offer(batch):
                    return
            offer(finished)

        thread = threading.Thread(target=fill, daemon=True)
        thread.start()
        try:
            while (batch := ready.get()) is not finished:
                yield batch
        finally:
            stop.set()
            thread.join()


def get_dataloader(
    batch_size: int,
    block_size: int,
    tensorclass_type: type,
    device: torch.device | str,
    dataset_name: str | None = None,
    infinite: bool = True,
    prefetch: int = 0,
    split: str = "train",
    root_dir: str | os.PathLike | None = None,
    from_disk: bool = False,
    num_workers: int | None = None,
    **dataset_kwargs: Any,
) -> Iterable:
    """Load a tokenized dataset with ``tensorclass_type.from_dataset`` and batch it.

    Batches are drawn without replacement (an epoch visits every example once; the last
    incomplete batch is dropped) and moved to ``device``.

    Args:
        batch_size: examples per batch.
        block_size: the sequence length (``max_length`` of ``from_dataset``).
        tensorclass_type: a class with a ``from_dataset(split, dataset_name, max_length,
            root_dir, from_disk, num_workers)`` classmethod, such as
            :class:`~tdrl.data.PromptData` or :class:`~tdrl.data.PairwiseDataset`.
        device: where batches go.
        dataset_name: passed to ``from_dataset`` (its default dataset when None).
        infinite: return an endless iterator over epochs instead of a re-iterable loader.
        prefetch: batches prepared ahead in a background thread.
        split, root_dir, from_disk, num_workers: passed to ``from_dataset``.
        **dataset_kwargs: more keyword arguments of ``from_dataset`` (e.g.
            ``tokenizer_model_name``).
    """
    data = tensorclass_type.from_dataset(
        split=split,
        dataset_name=dataset_name,
        max_length=block_size,
        root_dir=root_dir,
        from_disk=from_disk,
        num_workers=num_workers,
        **dataset_kwargs,
    )
    loader = _BatchLoader(data, int(batch_size), torch.device(device), prefetch)
    return create_infinite_iterator(loader) if infinite else loader
