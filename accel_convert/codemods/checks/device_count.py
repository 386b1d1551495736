"""ACC932 device-count-scaling: a size scaled by ``torch.cuda.device_count()`` for DataParallel.

Scripts written for ``nn.DataParallel`` scale the batch (and sometimes the learning rate) by the
number of GPUs, since one process splits each batch across all of them (``batch_size = 32 *
torch.cuda.device_count()``, Hugging Face's ``per_gpu_train_batch_size * max(1, n_gpu)``).
After the conversion every GPU has its own process that loads ``batch_size`` samples: on 8 GPUs
each process would load 256 samples where DataParallel gave each GPU 32 (8 times the memory),
and the global batch grows 64 times. Whether to keep the global batch or the per-GPU batch (and
the learning rate with it) is the script author's decision, so it is reported: a per-GPU size
needs the factor gone (one device per process, as Hugging Face's scripts set ``n_gpu = 1``
under DDP); ``accelerator.num_processes`` counts the processes.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.check_walk import WalkingCheck
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from accel_convert.codemods.engine.rule import Example
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.walk import module_nodes

DEVICE_COUNT = "torch.cuda.device_count"

MESSAGE = (
    "a size scaled by torch.cuda.device_count() (DataParallel split each batch across the GPUs): "
    "each GPU now has its own process loading the whole scaled batch; for the per-GPU size of the "
    "original, drop the factor (one device per process)"
)


class DeviceCountScaling(WalkingCheck):
    code = "ACC932"
    name = "device-count-scaling"
    fixes = {
        "ACC932": (
            "Drop the ``torch.cuda.device_count()`` factor: each process now loads one GPU's batch, so ``batch_size = args.batch_size`` is the original per-GPU size (keep the factor only if you want each process's batch that large)."
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                n_gpu = torch.cuda.device_count()
                batch_size = 32 * max(1, n_gpu)
                loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=batch_size)
                model = nn.Linear(8, 1)
                if n_gpu > 1:
                    model = nn.DataParallel(model)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
            """,
            message=MESSAGE,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                n_gpu = torch.cuda.device_count()
                print(f"{n_gpu} GPUs visible")
                loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=32)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return DEVICE_COUNT in facts.called and bool(facts.loaders)

    def start(self, module: cst.Module, facts: ScriptFacts) -> None:
        self._counts = _names_of_the_count(module, facts)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        """Multiplications by the device count (directly, or through ``max(1, n_gpu)``)."""
        if isinstance(node.operator, cst.Multiply) and (self._is_count(node.left) or self._is_count(node.right)):
            self.walk.report(node, self.code, MESSAGE, False)

    def _is_count(self, operand: cst.BaseExpression) -> bool:
        if isinstance(operand, cst.Call) and self.walk.builtin(operand.func) == "max":
            return any(self._is_count(arg.value) for arg in operand.args)
        if isinstance(operand, cst.Call):
            return self.walk.qualified_name(operand.func) == DEVICE_COUNT
        return dotted(operand) in self._counts


def _names_of_the_count(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Names bound to the device count (``n_gpu = torch.cuda.device_count()``, ``args.n_gpu =
    ...``)."""
    found: set[str] = set()
    for node in module_nodes(module):
        if (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Call)
            and facts.qualified_name(node.value.func) == DEVICE_COUNT
        ):
            found.update(name for target in node.targets if (name := dotted(target.target)) is not None)
    return found
