"""One rank of the data-loading differential run: the same body under Accelerate or our runtime.

    torchrun --nproc_per_node N data_differential.py {accelerate|runtime} OUT_DIR

Runs the whole grid (dataset length x batch size x split x even_batches x drop_last x shuffle,
plus iterable datasets) in one launch, and writes what this rank observed to
``OUT_DIR/rank<r>.json``: per config, ``len(loader)``, the batches of each epoch (two when
shuffling), the
``(end_of_dataloader, remainder)`` flags at each step and the ``gather_for_metrics`` output.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset

# Every residue of length mod (batch size x ranks) up to 5 x 3, tiny datasets (fewer samples than
# one global batch), and two lengths that need several rounds.
LENGTHS = [*range(16), 22, 25]
BATCH_SIZES = range(1, 6)


class Stream(IterableDataset):
    """0..length-1 as an iterable dataset that knows its length."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self):
        return iter(range(self.length))

    def __len__(self) -> int:
        return self.length


def import_framework(framework: str):
    if framework == "accelerate":
        from accelerate import Accelerator, DataLoaderConfiguration
    else:
        from accel_convert.runtime import Accelerator, DataLoaderConfiguration
    return Accelerator, DataLoaderConfiguration


def make_harnesses(framework: str) -> dict[tuple[bool, bool], object]:
    Accelerator, DataLoaderConfiguration = import_framework(framework)
    return {
        (split, even): Accelerator(
            cpu=True,
            dataloader_config=DataLoaderConfiguration(split_batches=split, even_batches=even, dispatch_batches=False),
        )
        for split, even in itertools.product([False, True], repeat=2)
    }


def observe(harness, loader: DataLoader, gather: bool, epochs: int) -> dict:
    """Prepare ``loader`` and record ``epochs`` epochs of what this rank sees."""
    try:
        prepared = harness.prepare(loader)
    except ValueError as error:
        return {"error": type(error).__name__}
    record = {"len": _length(prepared), "epochs": [], "flags": [], "gathered": []}
    state = harness.gradient_state
    for _epoch in range(epochs):
        batches, flags, gathered = [], [], []
        for batch in prepared:
            batches.append(batch.tolist())
            flags.append([state.end_of_dataloader, state.remainder])
            if gather:
                gathered.extend(harness.gather_for_metrics(batch).tolist())
        record["epochs"].append(batches)
        record["flags"].append(flags)
        record["gathered"].append(gathered)
    return record


def _length(loader: DataLoader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def run_grid(harnesses) -> dict[str, dict]:
    cases: dict[str, dict] = {}
    for number, (length, size, split, even, drop_last, shuffle) in enumerate(
        itertools.product(LENGTHS, BATCH_SIZES, [False, True], [False, True], [False, True], [False, True])
    ):
        key = f"map/L{length}/b{size}/split{int(split)}/even{int(even)}/drop{int(drop_last)}/shuffle{int(shuffle)}"
        # The same seed on every rank, as set_seed would. (Seeding the CPU generator directly:
        # torch.manual_seed also visits every device backend, which costs milliseconds each time.)
        torch.set_rng_state(torch.Generator().manual_seed(1000 + number).get_state())
        try:
            loader = DataLoader(list(range(length)), batch_size=size, shuffle=shuffle, drop_last=drop_last)
        except ValueError as error:  # e.g. shuffling an empty dataset
            cases[key] = {"error": type(error).__name__}
            continue
        # gather_for_metrics only with even batches: with uneven ones ranks may run different
        # numbers of steps and a collective would hang. Its truncation depends on the layout, not
        # on the order, so the unshuffled runs cover it (collectives are the grid's main cost).
        # A second epoch only matters when it differs: reshuffled, RNG re-synchronised.
        cases[key] = observe(harnesses[split, even], loader, gather=even and not shuffle, epochs=2 if shuffle else 1)
    for length, size, split, drop_last in itertools.product(LENGTHS, BATCH_SIZES, [False, True], [False, True]):
        key = f"iterable/L{length}/b{size}/split{int(split)}/drop{int(drop_last)}"
        loader = DataLoader(Stream(length), batch_size=size, drop_last=drop_last)
        cases[key] = observe(harnesses[split, True], loader, gather=True, epochs=1)
    return cases


def rng_synchronisation(framework: str) -> dict:
    """Ranks whose global RNGs drifted apart agree again once a loader synchronising "torch" starts."""
    Accelerator, _ = import_framework(framework)
    accelerator = Accelerator(cpu=True, rng_types=["torch", "generator"])
    torch.manual_seed(5)
    loader = accelerator.prepare(DataLoader(list(range(12)), batch_size=2, shuffle=True))
    torch.rand(torch.distributed.get_rank() + 1)  # e.g. dropout on differently sized batches
    draws = []
    for _epoch in range(2):
        for batch in loader:
            draws.append([batch.tolist(), torch.rand(2).tolist()])
    return {"draws": draws}


def generator_synchronisation(framework: str) -> dict:
    """Ranks whose shuffling generators were seeded differently still deal out one permutation."""
    Accelerator, _ = import_framework(framework)
    accelerator = Accelerator(cpu=True)
    generator = torch.Generator().manual_seed(100 + torch.distributed.get_rank())
    loader = accelerator.prepare(DataLoader(list(range(24)), batch_size=2, shuffle=True, generator=generator))
    return {"epochs": [[batch.tolist() for batch in loader] for _epoch in range(2)]}


def skipping(framework: str) -> dict[str, dict]:
    """``skip_first_batches`` on prepared loaders (resuming mid-epoch)."""
    Accelerator, _ = import_framework(framework)
    accelerator = Accelerator(cpu=True)
    cases = {}
    for length, size, skip, shuffle in itertools.product([7, 10, 16], [1, 2, 3], [0, 1, 2], [False, True]):
        torch.manual_seed(length * 100 + size * 10 + skip)
        prepared = accelerator.prepare(DataLoader(list(range(length)), batch_size=size, shuffle=shuffle))
        if skip > len(prepared):  # Accelerate's len() then goes negative and fails
            continue
        skipped = accelerator.skip_first_batches(prepared, skip)
        cases[f"skip/L{length}/b{size}/skip{skip}/shuffle{int(shuffle)}"] = {
            "len": len(skipped),
            "epochs": [[batch.tolist() for batch in skipped]],
        }
    return cases


def main() -> None:
    framework, out_dir = sys.argv[1], Path(sys.argv[2])
    harnesses = make_harnesses(framework)
    cases = run_grid(harnesses)
    cases["rng/torch"] = rng_synchronisation(framework)
    cases["rng/generator"] = generator_synchronisation(framework)
    cases.update(skipping(framework))
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"framework": framework, "world": world, "cases": cases}))
    torch.distributed.barrier()
    gc.collect()  # DDP/loader cycles must not outlive the group (Gloo teardown abort)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
