"""Many runtime checks in one ``torchrun --nproc_per_node 2`` launch (launches are the slow part).

Each check returns plain data; every rank prints one line ``RESULT <json>`` that
tests/test_runtime_distributed.py parses and asserts on. Checks run in the same order on every
rank because they call collectives.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import torch
import torch.utils.checkpoint
from torch.utils.data import DataLoader, TensorDataset

from accel_convert.runtime import Accelerator, DistributedDataParallelKwargs, GradScalerKwargs, set_seed
from accel_convert.runtime.ddp import UnusedParametersError

Pair = collections.namedtuple("Pair", ["first", "second"])


def check_state() -> dict:
    accelerator = Accelerator()
    return {
        "num_processes": accelerator.num_processes,
        "process_index": accelerator.process_index,
        "local_process_index": accelerator.local_process_index,
        "device": str(accelerator.device),
        "distributed_type": accelerator.distributed_type.value,
        "backend": accelerator.state.backend,
        "use_distributed": accelerator.use_distributed,
        "is_main_process": accelerator.is_main_process,
        "is_last_process": accelerator.is_last_process,
        "recreated_same_rank": Accelerator().process_index == accelerator.process_index,
    }


def check_collectives(accelerator: Accelerator) -> dict:
    rank = accelerator.process_index
    nested = {"a": torch.tensor([rank]), "b": (torch.full((1, 2), rank), Pair(torch.tensor(rank), torch.ones(1)))}
    gathered = accelerator.gather(nested)
    base = torch.tensor([rank + 1.0, 10.0])
    short = torch.arange(2 + rank)  # rank 0: [0, 1], rank 1: [0, 1, 2]
    received = torch.tensor([rank * 7])
    accelerator.broadcast({"x": received}, from_process=1)
    try:
        accelerator.gather({"a": torch.tensor([1]), "n": 3})
        type_error = None
    except TypeError as error:
        type_error = str(error)
    mixed = accelerator.gather(
        {
            "flags": torch.tensor([rank == 0, True]),
            "half": torch.full((1, 2), rank + 0.5).half(),
            "empty": torch.ones(0, 3),
            "grad": torch.ones(1, requires_grad=True) * rank,
        }
    )
    return {
        "gather_mixed": {key: [str(value.dtype), list(value.shape), value.tolist()] for key, value in mixed.items()},
        "shape_error": _gather_error(accelerator, torch.arange(3 - rank)),
        # One fingerprint covers the whole structure: a difference in its second tensor is caught.
        "nested_shape_error": _gather_error(accelerator, {"same": torch.ones(2), "other": torch.ones(2, 1 + rank)}),
        "dtype_error": _gather_error(accelerator, torch.ones(2, dtype=torch.float32 if rank else torch.int64)),
        "gather_after_errors": accelerator.gather(torch.tensor([rank])).tolist(),
        "gather_a": gathered["a"].tolist(),
        "gather_b0": gathered["b"][0].tolist(),
        "gather_pair_is_namedtuple": type(gathered["b"][1]).__name__,
        "gather_scalar": gathered["b"][1].first.tolist(),
        "gather_object": accelerator.gather_object([f"r{rank}", rank]),
        "reduce": {how: accelerator.reduce(base, how).tolist() for how in ("sum", "mean", "none", "max")},
        "reduce_leaves_input": base.tolist(),
        "pad": accelerator.pad_across_processes(short, pad_index=-1).tolist(),
        "pad_first": accelerator.pad_across_processes(short, pad_index=-1, pad_first=True).tolist(),
        "broadcast": received.tolist(),
        "type_error": type_error,
        "split": _split_checks(accelerator),
    }


def _gather_error(accelerator: Accelerator, data: object) -> str | None:
    try:
        accelerator.gather(data)
    except ValueError as error:
        return str(error)
    return None


def _split_checks(accelerator: Accelerator) -> dict:
    out = {}
    with accelerator.split_between_processes(list(range(5))) as share:
        out["list"] = share
    with accelerator.split_between_processes(list(range(5)), apply_padding=True) as share:
        out["list_padded"] = share
    with accelerator.split_between_processes({"k": torch.arange(4)}) as share:
        out["dict"] = share["k"].tolist()
    return out


def check_gather_for_metrics(accelerator: Accelerator) -> dict:
    """Every (length, batch size, split) case: gathered indices == range(length), each once."""
    failures = []
    cases = 0
    for length in range(1, 12):
        for batch_size in (1, 2, 3, 4):
            for as_objects in (False, True):
                cases += 1
                loader = accelerator.prepare(DataLoader(torch.arange(length), batch_size=batch_size))
                seen: list[int] = []
                for batch in loader:
                    if as_objects:
                        seen += accelerator.gather_for_metrics(batch.tolist())
                    else:
                        seen += accelerator.gather_for_metrics(batch).tolist()
                if seen != list(range(length)):
                    failures.append([length, batch_size, as_objects, seen])
    return {"cases": cases, "failures": failures}


def check_without_padding(accelerator: Accelerator) -> dict:
    """Every (length, batch size, skip_empty) case: the rows every rank iterates in
    ``without_padding`` are range(length), each once; with ``skip_empty=False`` each rank runs
    as many batches as the prepared loader gives it."""
    failures = []
    cases = 0
    for length in range(1, 12):
        for batch_size in (1, 2, 3, 4):
            for skip_empty in (True, False):
                cases += 1
                loader = accelerator.prepare(DataLoader(torch.arange(length), batch_size=batch_size))
                mine: list[int] = []
                batches = 0
                for batch in accelerator.without_padding(loader, skip_empty=skip_empty):
                    mine += batch.tolist()
                    batches += 1
                seen = sorted(accelerator.gather_object(mine))
                if seen != list(range(length)) or (not skip_empty and batches != len(loader)):
                    failures.append([length, batch_size, skip_empty, seen, batches, len(loader)])
    return {"cases": cases, "failures": failures}


def _regression_data(count: int = 32) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(count, 3, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    return TensorDataset(x, y)


def _fresh_model() -> torch.nn.Module:
    set_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _reference_params(global_batch: int, epochs: int = 2) -> list[torch.Tensor]:
    """One process, no runtime at all: plain SGD on the global batches."""
    model = _fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(epochs):
        for x, y in DataLoader(_regression_data(), batch_size=global_batch):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return [param.detach().clone() for param in model.parameters()]


def _max_difference(params: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max(float((a.detach().cpu() - b).abs().max()) for a, b in zip(params, reference))


def check_training_equivalence(batch_size: int = 4, accumulation: int = 1) -> dict:
    """2 ranks x batch B (x accumulation steps) == 1 process with the whole global batch."""
    accelerator = Accelerator(gradient_accumulation_steps=accumulation)
    model = _fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(_regression_data(), batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for _ in range(2):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                syncs.append(accelerator.sync_gradients)
                optimizer.step()
                optimizer.zero_grad()
    global_batch = batch_size * accelerator.num_processes * accumulation
    params = list(accelerator.unwrap_model(model).parameters())
    return {
        "max_diff": _max_difference(params, _reference_params(global_batch)),
        "syncs": syncs,
        "is_ddp": type(model).__name__,
    }


class ReentrantCheckpointed(torch.nn.Module):
    """A block under ``torch.utils.checkpoint`` with ``use_reentrant=True`` (the default when the
    argument is left out): its parameters join the graph only when backward recomputes it."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(3, 4)
        self.block = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.stem(x))
        hidden = torch.utils.checkpoint.checkpoint(self.block, hidden, use_reentrant=True)
        return self.head(torch.tanh(hidden))


def check_reentrant_checkpoint() -> dict:
    """2 ranks x batch 4 with a reentrant checkpoint == 1 process with batch 8 (plain SGD)."""
    accelerator = Accelerator()
    set_seed(5)
    model = ReentrantCheckpointed()
    set_seed(5)
    reference = ReentrantCheckpointed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(_regression_data(), batch_size=4))
    try:
        for x, y in loader:
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    except RuntimeError as error:
        return {"error": str(error).splitlines()[0]}
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for x, y in DataLoader(_regression_data(), batch_size=4 * accelerator.num_processes):
        reference_optimizer.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        reference_optimizer.step()
    expected = [param.detach().clone() for param in reference.parameters()]
    return {
        "error": None,
        "max_diff": _max_difference(list(accelerator.unwrap_model(model).parameters()), expected),
        "find_unused": bool(getattr(model, "find_unused_parameters", False)),
    }


class HeadOnFirstToken(torch.nn.Module):
    """The seed write-up's BERT shape: a pooler that exists but the head never uses."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(3, 4)
        self.pooler = torch.nn.Linear(4, 4)  # unused: the head reads the encoder output directly
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.encoder(x)))


class ChangingGraph(torch.nn.Module):
    """Uses ``extra`` on the first call only: no static graph can describe it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(3, 3)
        self.extra = torch.nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        hidden = self.body(x)
        return (hidden + self.extra(hidden) if self.calls == 1 else hidden).sum(dim=1, keepdim=True)


def check_unused_parameters() -> dict:
    out = {}
    for accumulation in (1, 2):
        accelerator = Accelerator(gradient_accumulation_steps=accumulation)
        set_seed(3)
        model = HeadOnFirstToken()
        pooler_before = model.pooler.weight.detach().clone()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(_regression_data(), batch_size=4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
        inner = accelerator.unwrap_model(model)
        encoder = accelerator.gather(inner.encoder.weight.detach().reshape(1, -1))
        out[f"accumulation_{accumulation}"] = {
            "ranks_agree": bool(torch.equal(encoder[0], encoder[1])),
            "pooler_unchanged": bool(torch.equal(inner.pooler.weight.detach(), pooler_before)),
            "trained": not torch.equal(inner.encoder.weight.detach(), _fresh_encoder_weight()),
        }
    out["explained_error"] = _changing_graph_error()
    return out


class ThreeHeads(torch.nn.Module):
    """InfoGAN's discriminator: one body and three heads, all computed on every call, while the
    adversarial step's loss reads only the first (``validity, _, _ = discriminator(x)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(3, 4)
        self.adversarial = torch.nn.Linear(4, 1)
        self.label = torch.nn.Linear(4, 2)
        self.code = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.body(x))
        return self.adversarial(hidden), self.label(hidden), self.code(hidden)


def check_discarded_outputs() -> dict:
    """Heads computed but left out of the loss: the forward's outputs reach every parameter, the
    loss does not. Two steps per batch, as InfoGAN alternates them."""
    accelerator = Accelerator()
    set_seed(5)
    model = ThreeHeads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_regression_data(), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    error = None
    try:
        for x, y in loader:
            validity, _, _ = model(x)
            accelerator.backward(torch.nn.functional.mse_loss(validity, y))
            optimizer.step()
            optimizer.zero_grad()
            _, label, code = model(x)
            accelerator.backward(label.pow(2).mean() + code.pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
    except UnusedParametersError as raised:
        error = str(raised)
    inner = accelerator.unwrap_model(model)
    weights = torch.cat([parameter.detach().reshape(-1) for parameter in inner.parameters()])
    gathered = accelerator.gather(weights.reshape(1, -1))
    return {
        "error": error,
        "ranks_agree": bool(torch.equal(gathered[0], gathered[1])),
        "find_unused": bool(getattr(model, "find_unused_parameters", False)),
    }


def check_models_no_loss_reaches() -> dict:
    """How long plain-DDP models wait for a loss that reaches them (each wait is a walk of the
    loss's graph and a collective at every backward): a teacher run with gradients on whose
    outputs are detached is asked about at most a bounded number of backwards; a model whose
    loss runs through a reentrant checkpoint (which hides the parameters behind it) is settled
    at its first backward."""
    from accel_convert.runtime import ddp

    accelerator = Accelerator()
    set_seed(5)
    teacher, student, checkpointed = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1), torch.nn.Linear(3, 3)
    block = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD([*student.parameters(), *checkpointed.parameters()], lr=0.1)
    loader = DataLoader(_regression_data(64), batch_size=2)
    teacher, student, checkpointed, optimizer, loader = accelerator.prepare(
        teacher, student, checkpointed, optimizer, loader
    )
    awaited: dict[str, list[bool]] = {"teacher": [], "checkpointed": []}
    for x, _ in loader:
        target = teacher(x).detach()
        accelerator.backward(torch.nn.functional.mse_loss(student(x), target))
        optimizer.step()
        optimizer.zero_grad()
        awaited["teacher"].append(any(reference() is teacher for reference in ddp._awaiting_a_loss))
    for x, _ in loader:
        hidden = torch.utils.checkpoint.checkpoint(block, checkpointed(x), use_reentrant=True)
        accelerator.backward(hidden.pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        awaited["checkpointed"].append(any(reference() is checkpointed for reference in ddp._awaiting_a_loss))
    return {"batches": len(loader), **awaited}


def _fresh_encoder_weight() -> torch.Tensor:
    set_seed(3)
    return HeadOnFirstToken().encoder.weight.detach()


def _changing_graph_error() -> str | None:
    accelerator = Accelerator()
    model = accelerator.prepare(ChangingGraph())
    try:
        for _ in range(3):
            accelerator.backward(model(torch.ones(2, 3)).sum())
    except UnusedParametersError as error:
        return str(error)
    return None


class AllUsed(torch.nn.Module):
    """Every parameter takes part in the loss: the runtime should end up with plain DDP."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(3, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.encoder(x)))


def check_no_sync_communication(accumulation: int = 4) -> dict:
    """Count DDP's all-reduces per micro-step under ``accumulate(k)``, for a model that uses all its
    parameters and one that leaves some unused: only the sync steps may communicate; inside
    no_sync the ranks' gradients stay their own (they differ, the data does)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    out = {}
    for name, build in (("all_used", AllUsed), ("unused", HeadOnFirstToken)):
        accelerator = Accelerator(gradient_accumulation_steps=accumulation)
        set_seed(5)
        model = build()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        # Each rank gets different samples, so local gradients differ unless they were averaged.
        loader = DataLoader(_regression_data(), batch_size=2)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        micro_step = {"index": -1}
        reduced_at: list[int] = []

        # No annotations: DDP checks them, and this module's are strings (postponed evaluation).
        def counting_hook(state, bucket):  # noqa: ANN001, ANN202
            reduced_at.append(micro_step["index"])
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook(None, counting_hook)
        syncs, local_grads_differ = [], []
        for index, (x, y) in enumerate(loader):
            micro_step["index"] = index
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                syncs.append(accelerator.sync_gradients)
                grads = accelerator.gather(accelerator.unwrap_model(model).head.weight.grad.reshape(1, -1))
                local_grads_differ.append(not torch.allclose(grads[0], grads[1]))
                optimizer.step()
                optimizer.zero_grad()
        out[name] = {
            "syncs": syncs,
            "reduced_at": reduced_at,
            "local_grads_differ": local_grads_differ,
            "find_unused": bool(model.find_unused_parameters),
            "static_graph": bool(model.static_graph),
        }
    return out


def check_user_ddp_kwargs() -> dict:
    """A user's explicit find_unused_parameters wins over our static-graph default."""
    handler = DistributedDataParallelKwargs(find_unused_parameters=True)
    accelerator = Accelerator(kwargs_handlers=[handler])
    model = accelerator.prepare(HeadOnFirstToken())
    accelerator.backward(model(torch.ones(2, 3)).sum())
    accelerator.backward(model(torch.ones(2, 3)).sum())
    return {"static_graph": bool(model.static_graph), "find_unused": bool(model.find_unused_parameters)}


def check_mixed_precision() -> dict:
    out = {}
    for precision in ("bf16", "fp16"):
        # A small initial loss scale, so the first fp16 step does not overflow and get skipped.
        accelerator = Accelerator(mixed_precision=precision, kwargs_handlers=[GradScalerKwargs(init_scale=256.0)])
        set_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
        inner_dtypes = []
        model[0].register_forward_hook(lambda module, args, output: inner_dtypes.append(str(output.dtype)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        output = model(torch.ones(2, 3))
        accelerator.backward(output.sum())
        norms = [float(accelerator.clip_grad_norm_(model.parameters(), 1.0)) for _ in range(2)]
        optimizer.step()
        optimizer.zero_grad()
        out[precision] = {
            "inner": inner_dtypes[0],
            "output": str(output.dtype),
            "scaler": accelerator.scaler is not None,
            "clip_norms": norms,
            "skipped_clean_step": accelerator.optimizer_step_was_skipped,
            "nan_step": _nan_step(accelerator, model, optimizer) if precision == "fp16" else None,
        }
    return out


def _nan_step(accelerator: Accelerator, model: torch.nn.Module, optimizer) -> dict:
    """A NaN in one rank's loss: DDP averages it into every rank's gradients, the scaler skips."""
    inner = accelerator.unwrap_model(model)
    before = [param.detach().clone() for param in inner.parameters()]
    poison = float("nan") if accelerator.process_index == 0 else 1.0
    accelerator.backward(model(torch.ones(2, 3)).sum() * poison)
    optimizer.step()
    optimizer.zero_grad()
    unchanged = all(torch.equal(a, b.detach()) for a, b in zip(before, inner.parameters()))
    return {"skipped": accelerator.optimizer_step_was_skipped, "params_unchanged": unchanged}


def check_helpers(accelerator: Accelerator, tmp_dir: str) -> dict:
    import os

    calls = []
    accelerator.on_main_process(lambda: calls.append("main"))()
    accelerator.on_last_process(lambda: calls.append("last"))()
    accelerator.on_process(process_index=1)(lambda: calls.append("p1"))()
    order = []
    with accelerator.main_process_first():
        order.append(os.path.exists(os.path.join(tmp_dir, "first.txt")))
        if accelerator.is_main_process:
            with open(os.path.join(tmp_dir, "first.txt"), "w") as handle:
                handle.write("x")
    target = os.path.join(tmp_dir, "saved.pt")
    accelerator.save({"rank": accelerator.process_index}, target)
    accelerator.wait_for_everyone()
    accelerator.set_trigger() if accelerator.process_index == 1 else None
    triggered = accelerator.check_trigger()
    return {
        "calls": calls,
        "main_ran_first": order,
        "saved": torch.load(target)["rank"],
        "leftover_temp_files": [name for name in os.listdir(tmp_dir) if name.startswith(".tmp")],
        "trigger": [triggered, accelerator.check_trigger()],
    }


def main() -> None:
    tmp_dir = sys.argv[1]
    result = {"state": check_state()}
    accelerator = Accelerator()
    result["collectives"] = check_collectives(accelerator)
    result["gather_for_metrics"] = check_gather_for_metrics(accelerator)
    result["without_padding"] = check_without_padding(accelerator)
    result["helpers"] = check_helpers(accelerator, tmp_dir)
    result["equivalence"] = check_training_equivalence()
    result["equivalence_accumulation"] = check_training_equivalence(batch_size=2, accumulation=2)
    result["mixed_precision"] = check_mixed_precision()
    result["user_ddp_kwargs"] = check_user_ddp_kwargs()
    result["no_sync"] = check_no_sync_communication()
    result["reentrant_checkpoint"] = check_reentrant_checkpoint()
    result["discarded_outputs"] = check_discarded_outputs()
    result["no_loss_reaches"] = check_models_no_loss_reaches()
    result["unused"] = check_unused_parameters()  # last: its error case leaves DDP mid-iteration
    # One file per rank: long lines the ranks print at once can interleave on a shared stdout.
    rank = result["state"]["process_index"]
    Path(tmp_dir, f"result_rank{rank}.json").write_text(json.dumps(result))
    Accelerator().end_training()


if __name__ == "__main__":
    main()
