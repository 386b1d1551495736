"""The program across modules: where what the other modules of a program say (the seeds, see
:mod:`codemods.engine.program_seeds`) joins this module's own observations. A script converted
alone has no seeds, and these providers leave its facts as they are."""

from __future__ import annotations

from accel_convert.codemods.engine.program_seeds import (
    seed_imported_calls,
    seed_loader_factories,
    seed_parameter_roles,
)
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.state import Analysis


@provider(
    needs=("call_graph", "loop_calls"), provides=("call_sites", "loop_backward"), refines=("call_graph", "loop_calls")
)
def imported_calls(a: Analysis) -> None:
    """Calls of imported program functions join the call graph (and their loops' calls); a loop
    calling one that runs a backward trains."""
    if a.seeds is not None:
        seed_imported_calls(a, a.seeds)


@provider(refines=("train_loaders",))
def imported_loader_factories(a: Analysis) -> None:
    """Names bound to what an imported loader factory returns are loaders."""
    if a.seeds is not None:
        seed_loader_factories(a, a.seeds)


@provider(
    refines=(
        "models",
        "optimizers",
        "train_loaders",
        "schedulers",
        "device_names",
        "cuda_flags",
        "prepared",
        "frozen_models",
    )
)
def parameter_roles(a: Analysis) -> None:
    """Parameters filled by callers in other modules take the role of what they receive."""
    if a.seeds is not None:
        seed_parameter_roles(a, a.seeds)
