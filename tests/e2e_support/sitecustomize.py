"""Simulated GPU out-of-memory for end-to-end tests on CPU machines.

Python imports ``sitecustomize`` at start-up when it is on ``sys.path``, so putting this folder
on ``PYTHONPATH`` affects every process of a run, torchrun's workers included, without touching
the script under test. When ``E2E_OOM_MAX_ROWS`` is set, ``BertModel.forward`` raises the error
CUDA raises (``torch.OutOfMemoryError("CUDA out of memory. Tried to allocate ...")``) for any
batch with more rows than that; ``E2E_OOM_RANKS`` (comma-separated, default: all) limits it to
some ranks. The patch is applied when transformers' BERT module is first imported, so processes
that never import transformers (torchrun's agent) pay nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

BERT_MODULE = "transformers.models.bert.modeling_bert"


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _oom_applies_here() -> bool:
    ranks = os.environ.get("E2E_OOM_RANKS", "").strip()
    return not ranks or _rank() in {int(rank) for rank in ranks.split(",")}


def _patch_bert(module) -> None:
    """Wrap ``BertModel.forward`` so that batches above the row limit fail like a full GPU."""
    import torch

    limit = int(os.environ["E2E_OOM_MAX_ROWS"])
    original_forward = module.BertModel.forward

    def forward(self, input_ids=None, *args, **kwargs):
        reference = input_ids if input_ids is not None else kwargs.get("inputs_embeds")
        rows = reference.shape[0]
        if rows > limit and _oom_applies_here():
            # The test reads these lines to prove the batch really had that many rows on this rank.
            print(f"e2e-oom: rank {_rank()} refused a batch of {rows} rows", file=sys.stderr, flush=True)
            mib = rows * reference.shape[1] * self.config.hidden_size * 4 * 64 // 2**20 + 1
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {mib}.00 MiB (simulated on rank {_rank()}: "
                f"{rows} rows > E2E_OOM_MAX_ROWS={limit})"
            )
        return original_forward(self, input_ids, *args, **kwargs)

    module.BertModel.forward = forward


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds transformers' BERT module the normal way, then patches it once it has executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != BERT_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _patch_bert(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("E2E_OOM_MAX_ROWS"):
    sys.meta_path.insert(0, _PatchAfterImport())
