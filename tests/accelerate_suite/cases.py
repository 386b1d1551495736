"""The cases of Accelerate's distributed test scripts, one by one (what each script's ``main`` runs).

Each script's ``main`` runs its checks in sequence and stops at the first failure; here every
check is a case of its own, run in ``main``'s order with ``main``'s setup, so one failure does
not hide the others. ``CASES`` maps a script to its case names (no torch needed to read it);
:func:`runners` binds the names to calls into the loaded script module.

Beyond ``main``: the gradient-accumulation cases of ``test_sync.py``, which ``main`` runs on GPUs
only, run here on CPU too (DDP over Gloo behaves the same); ``test_noop_sync`` (one process
only) and ``test_split_between_processes_dataset`` (needs Hugging Face ``datasets``) do not run.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

SCRIPTS = ("test_ops", "test_script", "test_sync", "test_distributed_data_loop")


def _accumulation_cases() -> list[str]:
    names = []
    for split, dispatch, each in itertools.product((False, True), repeat=3):
        suffix = f"split={split},dispatch={dispatch},sync_each_batch={each}"
        names.append(f"gradient_accumulation[{suffix}]")
    for split, dispatch, each in itertools.product((False, True), repeat=3):
        suffix = f"split={split},dispatch={dispatch},sync_each_batch={each}"
        names.append(f"gradient_accumulation_with_opt_and_scheduler[{suffix}]")
    return names


CASES: dict[str, list[str]] = {
    "test_ops": [
        "gather",
        "gather_object",
        "gather_non_contiguous",
        "broadcast",
        "pad_across_processes",
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "op_checker",
        "copy_tensor_to_devices",
    ],
    "test_script": [
        "init_state_check",
        "process_execution_check",
        "split_between_processes_list",
        "split_between_processes_nested_dict",
        "split_between_processes_tensor",
        "split_between_processes_evenly",
        "rng_sync_check",
        "dl_preparation_check",
        "central_dl_preparation_check",
        "custom_sampler_check",
        "check_seedable_sampler",
        "check_seedable_sampler_with_data_seed",
        "check_seedable_sampler_in_batch_sampler_shard",
        "training_check[seedable=False]",
        "training_check[seedable=True]",
        "trigger",
        "reinstantiated_state",
    ],
    "test_sync": [
        "dataloader_break",
        "distributed_sync",
        "distributed_sync_multiple_fwd",
        *_accumulation_cases(),
    ],
    "test_distributed_data_loop": [
        "default_ensures_even_batch_sizes",
        "can_disable_even_batches",
        "can_join_uneven_inputs",
        "join_can_override_even_batches",
        "join_can_override_for_mixed_type_dataloaders",
        "join_raises_warning_for_iterable_when_overriding_even_batches",
        "join_raises_warning_for_non_ddp_distributed",
        "pickle_accelerator",
        "data_loader[shuffle=False]",
        "data_loader[shuffle=True]",
        "data_loader[batch_sampler]",
        "data_loader[sampler_is_batch_sampler]",
        "stateful_dataloader",
        "stateful_dataloader_save_state",
    ],
}


def _flags(name: str) -> dict[str, bool]:
    inside = name[name.index("[") + 1 : -1]
    return {key: value == "True" for key, value in (part.split("=") for part in inside.split(","))}


def runners(script: str, module: Any) -> list[tuple[str, Callable[[], Any]]]:
    """``(case name, call)`` for every case of ``script``, after ``main``'s own setup."""
    m = module
    if script == "test_ops":
        state = m.PartialState()
        return [(name, functools.partial(getattr(m, f"test_{name}"), state)) for name in CASES[script]]
    if script == "test_script":
        m.Accelerator()  # main() creates one first
        calls: dict[str, Callable[[], Any]] = {
            "training_check[seedable=False]": lambda: m.training_check(use_seedable_sampler=False),
            "training_check[seedable=True]": lambda: m.training_check(use_seedable_sampler=True),
            "trigger": m.test_trigger,
            "reinstantiated_state": m.test_reinstantiated_state,
        }
        for name in CASES[script]:
            if name not in calls:
                calls[name] = getattr(m, name) if hasattr(m, name) else getattr(m, f"test_{name}")
        return [(name, calls[name]) for name in CASES[script]]
    if script == "test_sync":
        accelerator = m.Accelerator()
        out: list[tuple[str, Callable[[], Any]]] = [
            ("dataloader_break", m.test_dataloader_break),
            ("distributed_sync", lambda: m.test_distributed_sync(accelerator)),
            ("distributed_sync_multiple_fwd", lambda: m.test_distributed_sync_multiple_fwd(accelerator)),
        ]
        for name in CASES[script][3:]:
            flags = _flags(name)
            function = (
                m.test_gradient_accumulation
                if name.startswith("gradient_accumulation[")
                else m.test_gradient_accumulation_with_opt_and_scheduler
            )
            out.append((name, lambda fn=function, f=flags: fn(f["split"], f["dispatch"], f["sync_each_batch"])))
        return out
    if script == "test_distributed_data_loop":
        return _data_loop_runners(m)
    raise ValueError(f"unknown script {script}")


def _data_loop_runners(m: Any) -> list[tuple[str, Callable[[], Any]]]:
    import torch
    from torch.utils.data import (
        BatchSampler,
        DataLoader,
        RandomSampler,
        default_collate,
    )

    accelerator = m.create_accelerator()
    torch.manual_seed(accelerator.process_index)

    def non_ddp_warning() -> None:
        original = accelerator.state.distributed_type
        accelerator.state.distributed_type = m.DistributedType.FSDP
        try:
            m.test_join_raises_warning_for_non_ddp_distributed(accelerator)
        finally:
            accelerator.state.distributed_type = original

    def loader(kind: str) -> Callable[[], Any]:
        def run() -> None:
            dataset = m.DummyDataset()
            workers = m.NUM_WORKERS
            if kind in ("shuffle=False", "shuffle=True"):
                built = DataLoader(
                    dataset, shuffle=kind == "shuffle=True", batch_size=m.BATCH_SIZE, num_workers=workers
                )
            elif kind == "batch_sampler":
                sampler = BatchSampler(RandomSampler(dataset), batch_size=m.BATCH_SIZE, drop_last=False)
                built = DataLoader(dataset, batch_sampler=sampler, num_workers=workers)
            else:
                sampler = BatchSampler(RandomSampler(dataset), batch_size=m.BATCH_SIZE, drop_last=False)
                built = DataLoader(
                    dataset, sampler=sampler, batch_size=None, collate_fn=default_collate, num_workers=workers
                )
            m.test_data_loader(built, accelerator)

        return run

    calls: dict[str, Callable[[], Any]] = {
        "join_raises_warning_for_non_ddp_distributed": non_ddp_warning,
        "stateful_dataloader": lambda: m.test_stateful_dataloader(accelerator),
        "stateful_dataloader_save_state": lambda: m.test_stateful_dataloader_save_state(accelerator),
    }
    for kind in ("shuffle=False", "shuffle=True", "batch_sampler", "sampler_is_batch_sampler"):
        calls[f"data_loader[{kind}]"] = loader(kind)
    return [(name, calls.get(name) or getattr(m, f"test_{name}")) for name in CASES["test_distributed_data_loop"]]
