"""What every part of the device walk reads: the rule's codes, the lines it visits, and the
script's device facts (the GPU index given to ``torch.cuda.set_device``, the file's functions
that pick a device) together with the state of the walk (the assignment being visited, whether
a move was removed from the statement being visited).

The parts (``moves``, ``fixed_gpus``, ``selection``, ``string_reads``, ``emptied_blocks``) are
subclasses of :class:`DeviceWalkState`; ``transformer.py`` puts them together into one walk.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import MODULE, ScriptFacts
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.engine.transformers import RuleTransformer, lines_of

#: The rule's own code (``Device.code``).
DEVICE = "ACC102"
#: The GPU index given to the removed ``torch.cuda.set_device`` passed on to a call.
GPU_INDEX_PASSED_ON = "ACC924"


class DeviceWalkState(RuleTransformer):
    def __init__(
        self,
        facts: ScriptFacts,
        accelerator: str,
        gpu_indices: set[str] | None = None,
        device_functions: frozenset[str] = frozenset(),
        module_functions: frozenset[str] = frozenset(),
    ) -> None:
        #: What the script gives ``torch.cuda.set_device`` (``args.gpu``): a GPU index, the same
        #: one on every rank once the accelerator picks the GPU; a device given as that index
        #: becomes the accelerator's.
        self.set_device_indices = gpu_indices or set()
        #: And the names a call takes as its device that hold a GPU the script fixed, followed
        #: back through parameters, attributes and dictionaries (``self.gpu_id`` given ``0``).
        self.all_gpu_indices = self.set_device_indices | set(facts.gpu_index_names)
        #: The file's functions that pick a device (d2l's ``try_gpu()``: ``cuda:0`` on every rank).
        #: (Those returning an integer, ``def pick_gpu(): return 0``, are not among them: passed on,
        #: the integer may be anything; where it reaches a move the device owner follows it.)
        self.device_functions = device_functions
        #: The file's module-level functions: a device selected in their call's arguments
        #: (``train_ch6(net, ..., try_gpu())``) is where they put the model and the batches.
        self.module_functions = module_functions
        sites = [
            *facts.call_sites.get(".to", ()),
            *facts.call_sites.get(".cuda", ()),
            *facts.call_sites.get("torch.cuda.set_device", ()),
            *facts.call_sites.get("torch.cuda.device", ()),
            *facts.call_sites.get("torch.set_default_device", ()),
            *(site for name in facts.device_names for site in facts.assign_sites.get(name, ())),
        ]
        # Statements comparing the device with a string (``if device == "cuda":``).
        compared = facts.lines_mentioning(facts.device_names)
        # Calls given ``device=`` (a factory ``torch.zeros(3, device="cuda")``, an iterator).
        keywords = facts.lines_mentioning(
            {
                "device",
                "map_location",
                *self.all_gpu_indices,
                *device_functions,
                *facts.gpu_index_functions,
                *(called.rpartition(".")[2] for _, called in facts.gpu_index_method_calls),
            }
        )
        # ``os.environ["CUDA_VISIBLE_DEVICES"] = "0"``.
        environment = facts.lines_mentioning({"environ"})
        super().__init__(facts, lines_of(sites) | compared | keywords | environment)
        self.facts = facts
        self.device_expr = f"{accelerator}.device"
        #: Per call being walked: whether it makes a device (``torch.device(...)``), which the
        #: calls inside it (``"cuda:{}".format(args.gpu)``) only spell.
        self.device_choices: list[bool] = []
        #: Names bound by comprehensions over batch data (``v`` in ``{k: v.to(d) for k, v in batch.items()}``).
        self.comprehension_batches: list[set[str]] = []
        #: Targets of the assignment being visited (``model`` in ``model = Net().to(device)``).
        self.assign_targets: list[set[str]] = []
        self.stripped_here = False
        #: ``elif`` nodes (an ``If`` in another's ``orelse``), by identity.
        self._elifs: set[int] = set()

    @property
    def gpu_indices(self) -> set[str]:
        """The names holding a fixed GPU where the walk stands: each function reads its own
        (``target = "cpu"`` in one function is no GPU for a ``target = 0`` in another)."""
        function = self.scope[0] if self.scope else MODULE
        elsewhere = {name for where, name in self.facts.gpu_index_names_elsewhere if where == function}
        return self.all_gpu_indices - elsewhere if elsewhere else self.all_gpu_indices

    def picks_fixed_gpu(self, value: cst.BaseExpression) -> bool:
        """``pick_gpu()``, ``self.pick_gpu()``: a call of one of the file's functions (or of its
        classes' methods) returning a GPU index on every path, given as a device
        (``model.to(pick_gpu())``): the same GPU on every process."""
        if not isinstance(value, cst.Call):
            return False
        called = dotted(value.func)
        function = self.scope[0] if self.scope else MODULE
        return called in self.facts.gpu_index_functions or (function, called) in self.facts.gpu_index_method_calls
