"""Run one of Accelerate's distributed test scripts case by case, under torchrun, on a target.

    torchrun --nproc_per_node 2 run_cases.py TARGET SCRIPT OUT.json

``TARGET`` is ``accelerate`` (the real package; the launcher sets ``ACCELERATE_USE_CPU=1``) or
``runtime`` (``import accelerate`` resolved to runtime by :mod:`tests.accelerate_suite.shim`).
The script is loaded from the installed package as a module (its ``main`` is not run); then each
case of :mod:`tests.accelerate_suite.cases` runs on every rank, and the ranks post their outcome
to torchrun's store. After a failed case the process group is rebuilt on a fresh store prefix
(a failure can leave the ranks' collectives out of step), so later cases start clean. Every
collective times out after ``SUITE_COLLECTIVE_TIMEOUT`` seconds (default 30): a case whose ranks
wait for each other forever fails instead. A rank that never finishes a case (stuck outside a
collective: a loader worker, a lock) is a hang of the launch: its peers wait for its outcome
without a limit of their own, so the launcher's timeout takes the stack of every process (ranks
and their loader workers; see :func:`tests.launching.stop_group_with_stacks`). Rank 0 rewrites
``OUT.json`` after every case: ``{case: {"passed": bool, "errors": {rank: text}}}``.
"""

from __future__ import annotations

import datetime
import gc
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

# Both the suite's modules and the repository (runtime) must be importable from here.
_REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_REPO)]

import torch.distributed as dist

from tests.accelerate_suite import cases, shim

TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("SUITE_COLLECTIVE_TIMEOUT", "30")))
#: How long a rank waits for its peers' outcome of a case: longer than any launch may take. A wait
#: that ended first would end this rank with an error, and torchrun would then end the stuck peer
#: with SIGTERM, which prints no stack: the hang would be reported without where it was.
PEER_OUTCOME_WAIT = datetime.timedelta(hours=2)


def _join_group(store: dist.Store, generation: int, rank: int, world_size: int) -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(f"suite/group_{generation}", store),
        rank=rank,
        world_size=world_size,
        timeout=TIMEOUT,
    )


def _load_script(script: str):
    path = os.path.join(shim.accelerate_root(), "test_utils", "scripts", f"{script}.py")
    spec = importlib.util.spec_from_file_location(f"accelerate_suite_{script}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _describe(error: BaseException) -> str:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    return "".join(lines[-6:])[-1500:]


def main() -> None:
    target, script, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if target == "runtime":
        shim.install()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=False,
        timeout=datetime.timedelta(seconds=300),
    )
    generation = 0
    _join_group(store, generation, rank, world_size)
    results: dict[str, dict] = {}
    try:
        steps = cases.runners(script, _load_script(script))
    except BaseException as error:  # noqa: BLE001 (reported as every case failing)
        steps = [(name, None) for name in cases.CASES[script]]
        setup_error = f"setup failed: {_describe(error)}"
    else:
        setup_error = ""
    for index, (name, run) in enumerate(steps):
        error = setup_error
        if run is not None:
            try:
                run()
            except BaseException as caught:
                if isinstance(caught, KeyboardInterrupt):
                    raise
                error = _describe(caught)
        key = f"suite/outcome/{index}"
        store.set(f"{key}/{rank}", json.dumps(error))
        keys = [f"{key}/{other}" for other in range(world_size)]
        store.wait(keys, PEER_OUTCOME_WAIT)
        errors = {str(other): json.loads(store.get(k)) for other, k in enumerate(keys)}
        errors = {other: text for other, text in errors.items() if text}
        results[name] = {"passed": not errors, "errors": errors}
        if rank == 0:
            out.write_text(json.dumps(results, indent=1))
        if rank == 0:
            print(f"[{target}:{script}] {name}: {'passed' if not errors else 'FAILED'}", flush=True)
        if errors and run is not None:
            generation += 1
            gc.collect()
            _join_group(store, generation, rank, world_size)
    store.set(f"suite/done/{rank}", "1")
    store.wait([f"suite/done/{other}" for other in range(world_size)], PEER_OUTCOME_WAIT)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown: DDP models of failed cases may still hold old groups,
    # whose destruction at exit can abort the process; the outcomes are written already.
    os._exit(0)


if __name__ == "__main__":
    main()
