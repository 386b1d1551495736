"""ACC114 checkpoint: save once, from the unwrapped model; load and call custom methods through it.

After ``prepare`` the model is wrapped (DistributedDataParallel), so its ``state_dict()`` keys carry
a ``module.`` prefix, ``torch.save(model, f)`` pickles the wrapper, every rank writes the same file,
and custom methods (``model.decode(z)``, ``model.init_hidden(bs)``) are not on the wrapper at all.
This pass routes ``torch.save`` through ``accelerator.save`` (writes on the main process only) after a
barrier, and takes state dicts, ``load_state_dict`` and custom attributes from
``accelerator.unwrap_model(model)``. nn.Module's own methods (``train``, ``eval``, ``parameters``,
``zero_grad``, ``to``...) work on the wrapper and are left alone; ``module`` is not one of them: on
the wrapper it is the model itself, so a layer the model's class keeps as ``self.module`` (a
residual block around it) is read from the unwrapped model too. A checkpoint that keeps the whole
model in a dict (``state = {'epoch': epoch, 'model': model}`` ... ``torch.save(state, filename)``,
as SSD and the CIFAR trainers save it) keeps the unwrapped one: pickled with its wrapper, the model
would load only where a process group runs, not in the inference script. In a script that saves, every
``torch.load`` line waits for the other ranks first, so no rank reads a file still being written.
Where no barrier can go before a load (``if os.path.isfile(path): model.load_state_dict(torch.load(path))``
in a ``test()`` run after training, a load in a ``try``, a function without the accelerator), the
ranks wait after each save such a load may read later instead (once, after the last of saves in a
row), with the accelerator of the saving function: otherwise the other ranks look for the file
before the main process wrote it (and test another model, or fail). Which loads may read what a
save wrote is the program model's :mod:`~codemods.model.file_flow`: further down the function, in
a function it calls later, or after the call of the saving function in any of its callers
(MorvanZhou's ``save()`` then ``restore_net()`` at the top level); a load of a path no save can
have written (another literal, another f-string pattern) leaves the save without a barrier. Loading in the function that calls
``prepare`` is only rewritten after the ``prepare`` line: before it the model is not wrapped yet.
A copy of the model made after ``prepare`` (``ema = copy.deepcopy(model)``, ``AveragedModel(model)``)
copies the unwrapped model, so the copy and its checkpoints keep the original's keys. A model
traced after ``prepare`` (``torch.onnx.export``, ``torch.jit.trace``, TensorBoard's
``writer.add_graph(model, images)``) is traced unwrapped: the tracer cannot follow DDP's
process-group calls.

A custom method that computes the loss by running the model (``loss = model.compute_loss(batch)``,
calling ``self(x)`` inside) must not go through ``unwrap_model`` in training: DDP averages
gradients only for what runs inside its forward, so the ranks' copies would drift apart without an
error. With the runtime it becomes ``accelerator.as_forward(model).compute_loss(batch)`` (the method
runs as the wrapper's forward); Accelerate has no such call, so with ``--target accelerate`` it is
reported (ACC921).

A ``torch.save`` or a model's own saving method where the accelerator is not reachable is left
as written and reported (ACC914): every rank runs it, and each writes the file.

A prepared model that the function creating the accelerator returns to code that saves it (``model
= main()`` then ``torch.save(model.state_dict(), path)`` in the ``__main__`` block, which has no
accelerator) is returned as ``accelerator.unwrap_model(model)``, and that save runs on the main
process (``PartialState().is_main_process``) with every rank waiting for it
(:mod:`.returned_model`). A caller that trains the returned model further keeps the wrapper, and its
save stays reported (ACC914).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import (
    accelerator_call,
    callee_words,
    is_accelerator_method,
    name_words,
    unwrap_model,
)
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.positions import skips_statement
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.engine.syntax import as_statement, body_statements, dotted, names_in
from accel_convert.codemods.engine.torch_names import MODEL_EXPORTS
from accel_convert.codemods.engine.transformers import RuleTransformer
from accel_convert.codemods.engine.walk import StatementFilter, walk
from accel_convert.codemods.model.file_flow import file_flow
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.codemods.rewrites.returned_model import handled_lines, unwrapped_returns

# --------------------------------------------------------------------------------------------
# The checkpoint pass
# --------------------------------------------------------------------------------------------

#: nn.Module's own methods and attributes: they work on the DDP wrapper (which forwards them or
#: has its own), so calls to them stay as written. Not ``module``: on the wrapper it is the
#: wrapped model, so the script's own ``block.module`` (a layer its class keeps under that name;
#: DataParallel's was unwrapped by ACC110) is read from the unwrapped model.
MODULE_OWN_ATTRIBUTES = frozenset(
    {
        "train",
        "eval",
        "parameters",
        "named_parameters",
        "zero_grad",
        "to",
        "cuda",
        "cpu",
        "modules",
        "named_modules",
        "children",
        "named_children",
        "apply",
        "buffers",
        "named_buffers",
        "requires_grad_",
        "half",
        "float",
        "double",
        "bfloat16",
        "type",
        "training",
        "forward",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_backward_hook",
        "register_buffer",
        "register_parameter",
        "add_module",
        "get_submodule",
        "get_parameter",
        "get_buffer",
        "share_memory",
        "no_sync",
        "__class__",
    }
)


@rule_provider(needs=("model_copy_calls",))
def model_copiers(a: Analysis) -> frozenset[str]:
    """Local names of calls that copy a model (``copy.deepcopy``, ``deepcopy``, ``AveragedModel``,
    a class of the file deep-copying what it is given): after prepare, they get the unwrapped one."""
    return frozenset(dotted(call.node.func) or "" for call in a.model_copy_calls)


@rule_provider(needs=("models", "loop_backward"))
def training_method_calls(a: Analysis) -> frozenset[str]:
    """``model.compute_loss``-style calls in training loops of a model method that runs the model
    itself (``self(x)``, ``self.forward``, a submodule): DDP averages gradients only for what runs
    inside its forward."""
    running = _methods_running_the_model(a)
    found = set()
    for call in a.r.calls:
        func = call.node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in running:
            continue
        owner = dotted(func.value)
        if owner in a.facts.models and any(loop.has_backward for loop in call.loops):
            found.add(f"{owner}.{func.attr.value}")
    return frozenset(found)


def _methods_running_the_model(a: Analysis) -> set[str]:
    """Methods of the file's classes (other than ``forward`` and dunders) that call the instance
    (``self(x)``, ``self.forward(x)``) or a submodule it holds (``self.encoder(x)``)."""
    held: dict[str, set[str]] = {}
    for assign in a.r.assigns:
        if len(assign.scope) == 2 and assign.scope[0] in a.r.classes and isinstance(assign.value, cst.Call):
            instance = a.r.classes[assign.scope[0]].self_names.get(assign.scope[1])
            prefix = f"{instance}."
            held.setdefault(assign.scope[0], set()).update(
                target[len(prefix) :] for target in assign.targets if instance and target.startswith(prefix)
            )
    found = set()
    for call in a.r.calls:
        if len(call.scope) != 2 or call.scope[0] not in a.r.classes:
            continue
        owner, method = call.scope
        instance = a.r.classes[owner].self_names.get(method)
        if instance is None or method == "forward" or method.startswith("__"):
            continue
        callee = dotted(call.node.func) or ""
        head, _, attribute = callee.partition(".")
        if head == instance and (attribute in ("", "forward") or attribute in held.get(owner, set())):
            found.add(method)
    return found


class CheckpointCodemod(Rule):
    code = "ACC114"
    name = "checkpoint"
    fixes = {
        "ACC914": (
            "Save from where the accelerator is reachable, on the main process only: pass ``accelerator`` to the function, then write ``accelerator.wait_for_everyone()`` and ``accelerator.save(accelerator.unwrap_model(model).state_dict(), path)`` (or guard the ``torch.save`` with ``if accelerator.is_main_process:``)."
        ),
        "ACC921": (
            "Compute the loss from the model's forward: call ``model(...)`` (move the loss computation into ``forward`` or compute it from ``model(x)``'s output), so DDP averages the gradients; or convert with ``--target runtime``, whose wrapper averages them for any method."
        ),
    }
    providers = (model_copiers, training_method_calls, file_flow)
    extra_codes = {
        "ACC914": "checkpoint-unreachable: torch.save or a model's own method where the accelerator is not reachable: runs on every rank",
        "ACC921": (
            "method-outside-forward: a model method that runs the model computes the training loss; "
            "under Accelerate's DDP its gradients are not averaged (call the model, or use the runtime)"
        ),
    }
    examples = (
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class AutoEncoder(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.encoder = nn.Linear(8, 2)
                        self.decoder = nn.Linear(2, 8)

                    def decode(self, z):
                        return self.decoder(z)

                    def forward(self, x):
                        return self.decode(self.encoder(x))


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
                    model = AutoEncoder()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for (data,) in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), data)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.state_dict(), "autoencoder.pt")
                    sample = model.decode(torch.randn(4, 2))


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class AutoEncoder(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.encoder = nn.Linear(8, 2)
                        self.decoder = nn.Linear(2, 8)

                    def decode(self, z):
                        return self.decoder(z)

                    def forward(self, x):
                        return self.decode(self.encoder(x))


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
                    model = AutoEncoder()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for (data,) in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), data)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "autoencoder.pt")
                    sample = accelerator.unwrap_model(model).decode(torch.randn(4, 2))


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import os

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def test(path):
                    model = nn.Linear(8, 1)
                    if os.path.isfile(path):
                        model.load_state_dict(torch.load(path))
                    return model


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    torch.save(model.state_dict(), "model.pt")
                    test("model.pt")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import os

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def test(path, accelerator):
                    model = nn.Linear(8, 1)
                    if os.path.isfile(path):
                        accelerator.unwrap_model(model).load_state_dict(torch.load(path, map_location={"cuda:0": str(accelerator.device)}))
                    return model


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
                    accelerator.wait_for_everyone()
                    test("model.pt", accelerator)


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            # MorvanZhou's save() then restore() at the top level: restore() reads the file save()
            # wrote, on every rank, with no accelerator to wait with; the ranks wait after the save.
            before="""
                import torch
                import torch.nn as nn

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    for step in range(100):
                        optimizer.zero_grad()
                        nn.functional.mse_loss(net(x), y).backward()
                        optimizer.step()
                    torch.save(net.state_dict(), "net_params.pkl")


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("net_params.pkl"))
                    return copy


                save()
                restored = restore()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    accelerator = Accelerator()
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    net, optimizer = accelerator.prepare(net, optimizer)
                    for step in range(100):
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(net(x), y))
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(net).state_dict(), "net_params.pkl")
                    accelerator.wait_for_everyone()


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("net_params.pkl"))
                    return copy


                save()
                restored = restore()
            """,
        ),
        Example(
            # The same, reading another file (a path no save writes): no barrier after the save.
            before="""
                import torch
                import torch.nn as nn

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    for step in range(100):
                        optimizer.zero_grad()
                        nn.functional.mse_loss(net(x), y).backward()
                        optimizer.step()
                    torch.save(net.state_dict(), "net_params.pkl")


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("pretrained.pkl"))
                    return copy


                save()
                restored = restore()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator

                x = torch.linspace(-1, 1, 100).unsqueeze(1)
                y = x.pow(2)


                def save():
                    accelerator = Accelerator()
                    net = nn.Linear(1, 1)
                    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
                    net, optimizer = accelerator.prepare(net, optimizer)
                    for step in range(100):
                        optimizer.zero_grad()
                        accelerator.backward(nn.functional.mse_loss(net(x), y))
                        optimizer.step()
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(net).state_dict(), "net_params.pkl")


                def restore():
                    copy = nn.Linear(1, 1)
                    copy.load_state_dict(torch.load("pretrained.pkl"))
                    return copy


                save()
                restored = restore()
            """,
        ),
        Example(
            # The whole model kept in the checkpoint dict, as SSD's save_checkpoint does.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for epoch in range(2):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            loss.backward()
                            optimizer.step()
                        state = {"epoch": epoch, "model": model, "optimizer": optimizer}
                        torch.save(state, "checkpoint.pth.tar")


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for epoch in range(2):
                        for data, target in loader:
                            optimizer.zero_grad()
                            loss = nn.functional.mse_loss(model(data), target)
                            accelerator.backward(loss)
                            optimizer.step()
                        state = {"epoch": epoch, "model": accelerator.unwrap_model(model), "optimizer": optimizer}
                        accelerator.wait_for_everyone()
                        accelerator.save(state, "checkpoint.pth.tar")


                if __name__ == "__main__":
                    main()
            """,
        ),
        # TensorBoard traces the model it is given: the wrapper's process-group calls cannot be traced.
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.tensorboard import SummaryWriter


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    writer = SummaryWriter("runs/exp")
                    writer.add_graph(model, torch.zeros(1, 8))
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                from torch.utils.tensorboard import SummaryWriter


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    writer = SummaryWriter("runs/exp") if accelerator.is_main_process else None
                    if accelerator.is_main_process:
                        writer.add_graph(accelerator.unwrap_model(model), torch.zeros(1, 8))
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code="ACC914",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def save_checkpoint(state, filename):
                    torch.save(state, filename)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    return model


                if __name__ == "__main__":
                    model = main()
                    save_checkpoint(model.state_dict(), "model.pt")
            """,
            message="torch.save where the accelerator is not reachable: every rank writes this file",
        ),
        Example(
            code="ACC921",
            target="accelerate",
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Regressor(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.net = nn.Linear(8, 1)

                    def forward(self, x):
                        return self.net(x)

                    def compute_loss(self, data, target):
                        return nn.functional.mse_loss(self(data), target)


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = Regressor()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        optimizer.zero_grad()
                        model.compute_loss(data, target).backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message=(
                "model.compute_loss runs the model outside forward(): DDP will not average its gradients; "
                "compute the loss from model(...) or convert with --target runtime"
            ),
        ),
        # nn.Module's own methods (train, eval, parameters) work on the DDP wrapper, and a script
        # that saves and loads nothing: no unwrap_model, no barrier.
        Example(
            leaves_alone=True,
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    print("parameters:", sum(p.numel() for p in model.parameters()))
                    model.train()
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        loss.backward()
                        optimizer.step()
                    model.eval()


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    accelerator = Accelerator()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    accelerator.print("parameters:", sum(p.numel() for p in model.parameters()))
                    model.train()
                    for data, target in loader:
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data), target)
                        accelerator.backward(loss)
                        optimizer.step()
                    model.eval()


                if __name__ == "__main__":
                    main()
            """,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.uses_torch and bool(facts.models or "torch" in facts.imports.values())

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        # Lines reading a model attribute nn.Module does not have (unwrapped), or saving/loading.
        words = (
            callee_words(facts, ("torch.save", "torch.load", *MODEL_EXPORTS))
            | name_words(facts.of(model_copiers))
            | ({"type"} if "type" in facts.called else set())
            | ({"add_graph"} if facts.trackers else set())
            | {
                path
                for path in facts.word_lines
                if path.rpartition(".")[0] in facts.models and path.rpartition(".")[2] not in MODULE_OWN_ATTRIBUTES
            }
        )
        saved = _SavedValues(facts, facts.lines_mentioning(callee_words(facts, ("torch.save",))))
        walk(module, saved)
        words |= saved.found  # ``state = {'model': model, ...}``, saved further down
        rewriter = _CheckpointRewriter(
            facts, module, facts.lines_mentioning(words), options.target == "runtime", saved.found
        )
        new_module, returned = _returned_model_saved_by_caller(module.visit(rewriter), facts, options)
        handed = _classes_given_models(module, facts)
        reported: list[Change] = []
        # Every other class the rewriter does not enter (a callback saving ``trainer.model``):
        # its saves run on every rank of a distributed run too.
        helpers = {line.name.value for line in module.body if isinstance(line, cst.ClassDef)}
        helpers -= facts.training_classes | facts.model_classes | facts.training_bases
        if not (facts.has_accelerator or facts.home_kind == "library"):
            helpers = set()
        if handed or helpers:
            lines = facts.lines_mentioning(callee_words(facts, ("torch.save",)))
            saves = _SavesInHelperClasses(facts, lines, handed, helpers - handed)
            module.visit(saves)
            reported = saves.changes(module)
        saved_elsewhere = facts.program is not None and facts.program.saved_elsewhere
        if (rewriter.saves or saved_elsewhere) and rewriter.loads:
            loads = facts.lines_mentioning(callee_words(facts, ("torch.load",)))
            waits = _WaitBeforeLoads(facts, loads, report=not rewriter.saves)
            new_module = new_module.visit(waits)
            after: list[Change] = []
            if rewriter.saves and waits.unguarded:
                # A load no barrier could go before (under ``if os.path.isfile(path):``, in a
                # ``try``, in a function without the accelerator): the ranks wait after each save
                # that such a load may read later in the run.
                waiting = _WaitAfterSaves(
                    facts, facts.lines_mentioning(callee_words(facts, ("torch.save",))), waits.unguarded
                )
                new_module = new_module.visit(waiting)
                after = waiting.changes(module)
            return new_module, returned([*rewriter.changes(module), *waits.changes(module), *after, *reported])
        return new_module, returned([*rewriter.changes(module), *reported])


def _returned_model_saved_by_caller(
    module: cst.Module, facts: ScriptFacts, options: Options
) -> tuple[cst.Module, Callable[[list[Change]], list[Change]]]:
    """The prepared model the creating function returns, unwrapped there, and its caller's saves
    on the main process (:mod:`.returned_model`); what it makes sound is no longer reported."""
    handled = handled_lines(module, facts)
    converted, made = unwrapped_returns(module, facts, options)

    def with_returned(changes: list[Change]) -> list[Change]:
        kept = [change for change in changes if not (change.code == "ACC914" and change.line in handled)]
        return sorted([*kept, *made], key=lambda change: (change.line, change.column)) if made else changes

    return converted, with_returned


class _SavedValues(StatementFilter):
    """Names whose value a ``torch.save`` writes (``torch.save(state, filename)``), read off the
    statements on ``lines`` (those mentioning it)."""

    def __init__(self, facts: ScriptFacts, lines: set[int]) -> None:
        super().__init__()
        self.facts = facts
        self.lines = sorted(lines)
        self.found: set[str] = set()

    def enters_statement(self, node: cst.CSTNode) -> bool:
        return not skips_statement(node, self.lines, self.facts.origins)

    def visit_Call(self, node: cst.Call) -> None:
        if self.facts.callee_name(node.func) == "torch.save" and node.args and node.args[0].keyword is None:
            name = dotted(node.args[0].value)
            if name is not None and name not in self.facts.models:
                self.found.add(name)


class _CheckpointRewriter(RuleTransformer):
    def __init__(
        self,
        facts: ScriptFacts,
        module: cst.Module,
        lines: set[int],
        runtime: bool = True,
        saved_values: AbstractSet[str] = frozenset(),
    ) -> None:
        super().__init__(facts, lines)
        #: The runtime's ``accelerator.as_forward`` exists (not Accelerate's API).
        self.runtime = runtime
        #: Names ``torch.save`` writes: a dict bound to one of them holds what is saved.
        self.saved_values = saved_values
        self._assigned_targets: set[int] = set()
        self._prepare_pending: list[bool] = [_has_prepare_call(module.body, facts)]
        self._saves_in_line = 0
        #: Whether the script saves and loads: then loads wait for the save (a second, small pass).
        self.saves = False
        self.loads = False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        # Model classes use ``self``; only a trainer class holding ``self.model`` needs a look.
        return self.in_training_class()

    # Function frames: in the function that calls prepare, the model is wrapped only after it.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._prepare_pending.append(_has_prepare_call(body_statements(node), self.facts))

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        self._prepare_pending.pop()
        return super().leave_FunctionDef(original_node, updated_node)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._assigned_targets.add(id(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._assigned_targets.add(id(node.target))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self._saves_in_line = 0
        # ``parser.add_argument("--lr", type=float, default=0.1)``-style lines (most of a script's
        # top) hold nothing this pass rewrites: no need to walk their expressions.
        if all(self._plain_call(small) for small in node.body):
            return False
        if any(isinstance(small, (cst.Import, cst.ImportFrom)) for small in node.body):
            return False  # ``import model.model as module_arch`` names a module, not a model's attribute
        if any(self._binds_saved_dict(small) for small in node.body):
            return True
        # Most lines hold no model attribute and no save/load: a read-only look is far cheaper
        # than the transformer's walk, which rebuilds every node it enters.
        finder = _CheckpointInterest(self.facts)
        walk(node, finder)
        return finder.found

    def _plain_call(self, small: cst.BaseSmallStatement) -> bool:
        """A call of a non-model, non-torch function on literals and bare names only."""
        call = small.value if isinstance(small, cst.Expr) else None
        if not isinstance(call, cst.Call):
            return False
        callee = dotted(call.func)
        if callee is None or callee.split(".")[0] in self.facts.models | {"torch", "self"}:
            return False
        if self.facts.callee_name(call.func) in ("torch.save", "torch.load"):
            return False
        # A model handed to a call may be traced or saved there (``writer.add_graph(model, x)``).
        return all(_is_plain_value(arg.value) and dotted(arg.value) not in self.facts.models for arg in call.args)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if self._prepare_pending[-1] and any(_is_prepare(s, self.facts) for s in original_node.body):
            self._prepare_pending[-1] = False
        if not self._saves_in_line or not self.every_rank_reaches_here() or self._inside_file_written():
            return updated_node
        if self._in_class_handed_the_model():
            return updated_node
        barrier = cst.SimpleStatementLine(
            body=[cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))],
            leading_lines=updated_node.leading_lines,
        )
        return cst.FlattenSentinel([barrier, updated_node.with_changes(leading_lines=())])

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = _one_barrier_before_saves(updated_node.body, self.facts)
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        result = super().leave_Module(original_node, updated_node)
        body = _one_barrier_before_saves(result.body, self.facts)
        return result if body is None else result.with_changes(body=body)

    def _in_class_handed_the_model(self) -> bool:
        """In a library class that the program hands the prepared model (Bjarten's EarlyStopping,
        whose ``save_checkpoint`` runs when this rank's validation loss improved): a barrier there
        could be reached by some ranks only. ``accelerator.save`` needs none (it writes on the
        main process, atomically); a load of the file elsewhere in the program waits first."""
        seeds = self.facts.program
        return seeds is not None and bool(self.scope) and self.scope[0] in seeds.classes_given_models

    def _inside_file_written(self) -> bool:
        """Inside ``with open(path, "wb") as f:``: the side-effects rule moves that whole block to
        the main process, so a barrier in it would be reached by the main process alone."""
        return any(
            isinstance(node, cst.With) and any(self.facts.opens_for_writing(item.item) for item in node.items)
            for node in self._anchors
        )

    def _binds_saved_dict(self, node: cst.BaseSmallStatement) -> bool:
        """``state = {...}``, ``state`` a name ``torch.save`` writes further down."""
        return (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Dict)
            and any(dotted(target.target) in self.saved_values for target in node.targets)
        )

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        """``state = {'model': model, ...}`` saved further down: the model in it unwrapped."""
        if not self._binds_saved_dict(original_node) or not isinstance(updated_node.value, cst.Dict):
            return updated_node
        value = self._models_unwrapped_in(original_node, updated_node.value)
        return updated_node if value is updated_node.value else updated_node.with_changes(value=value)

    def _models_unwrapped_in(self, original: cst.CSTNode, saved: cst.Dict) -> cst.Dict:
        """The prepared models a saved dict holds as values (the whole module, as SSD's and the
        CIFAR trainers' checkpoints keep it), unwrapped: pickled with its DDP wrapper, a model
        loads only where a process group is running (not in an inference script)."""
        if not self.accelerator_reachable():
            return saved
        elements = list(saved.elements)
        for index, element in enumerate(elements):
            if isinstance(element, cst.DictElement) and dotted(element.value) in self.facts.models:
                model = dotted(element.value)
                self.report(original, self.code, f"{model} saved in a dict → accelerator.unwrap_model({model})", True)
                elements[index] = element.with_changes(value=unwrap_model(self.facts, element.value))
        return saved.with_changes(elements=elements) if elements != list(saved.elements) else saved

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if dotted(updated_node.func) in self.facts.of(model_copiers):
            return self._copy_of_unwrapped(original_node, updated_node)
        callee = self.facts.callee_name(updated_node.func)
        if callee in MODEL_EXPORTS:
            return self._export_of_unwrapped(original_node, updated_node, callee)
        graph = _graph_of_tracker(updated_node, self.facts)
        if graph is not None:
            return self._export_of_unwrapped(original_node, updated_node, graph)
        if _type_of_model(updated_node, self.facts):
            return self._type_of_unwrapped(original_node, updated_node)
        self.loads = self.loads or callee == "torch.load"
        self.saves = self.saves or is_accelerator_method(updated_node, self.facts, "save")
        if callee == "torch.load":
            return self._load_on_own_device(original_node, updated_node)
        if callee != "torch.save":
            return updated_node
        if names_in(original_node) & self.facts.per_process_paths:
            return updated_node  # a file of this process alone (a tempfile folder): each rank writes its own
        if not self.accelerator_reachable():
            self.report(
                original_node,
                "ACC914",
                "torch.save where the accelerator is not reachable: every rank writes this file",
                False,
            )
            return updated_node
        args = list(updated_node.args)
        if args and args[0].keyword is None and dotted(args[0].value) in self.facts.models:
            args[0] = args[0].with_changes(value=unwrap_model(self.facts, args[0].value))
        elif args and args[0].keyword is None and isinstance(args[0].value, cst.Dict):
            args[0] = args[0].with_changes(value=self._models_unwrapped_in(original_node, args[0].value))
        self._saves_in_line += 1
        self.saves = True
        self.report(original_node, self.code, "torch.save → accelerator.save (main process only)", True)
        return accelerator_call(self.facts, "save", *args)

    def _load_on_own_device(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``torch.load(path)`` puts each tensor back on the device it was saved from: the main
        process saved from ``cuda:0``, so without a ``map_location`` every process would load the
        whole checkpoint onto GPU 0 (and open a CUDA context there), as the DDP tutorial warns.
        Tensors saved on GPU 0 are mapped to this process's device; tensors saved on the CPU stay
        there, as in the original."""
        has_location = len([arg for arg in call.args if arg.keyword is None]) >= 2 or any(
            arg.keyword is not None and arg.keyword.value == "map_location" for arg in call.args
        )
        if has_location or any(arg.star for arg in call.args) or not self.accelerator_reachable():
            return call
        accelerator = self.instance_accelerator() or cst.Name(self.accelerator)
        device = cst.Call(cst.Name("str"), [cst.Arg(cst.Attribute(accelerator, cst.Name("device")))])
        # In the quotes the script's own path string uses (``torch.load('best.pt')``).
        path = call.args[0].value if call.args else None
        quote = "'" if isinstance(path, cst.SimpleString) and path.quote == "'" else '"'
        location = cst.Dict([cst.DictElement(cst.SimpleString(f"{quote}cuda:0{quote}"), device)])
        self.report(
            original,
            self.code,
            "torch.load: tensors saved from GPU 0 load on this process's device (map_location), not all onto GPU 0",
            True,
        )
        argument = cst.Arg(
            location,
            keyword=cst.Name("map_location"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        return call.with_changes(
            args=[
                *call.args[:-1],
                call.args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                argument,
            ]
            if call.args
            else [argument]
        )

    def _export_of_unwrapped(self, original: cst.Call, call: cst.Call, callee: str) -> cst.Call:
        """``torch.onnx.export(model, ...)`` after prepare exports the unwrapped model: tracing the
        DDP wrapper on the main process alone runs a forward the other ranks never join."""
        args = list(call.args)
        model = dotted(args[0].value) if args and args[0].keyword is None else None
        if model not in self.facts.models or self._prepare_pending[-1] or not self.accelerator_reachable():
            return call
        self.report(
            original, self.code, f"{callee}({model}, ...) → {callee}(accelerator.unwrap_model({model}), ...)", True
        )
        args[0] = args[0].with_changes(value=unwrap_model(self.facts, args[0].value))
        return call.with_changes(args=args)

    def _type_of_unwrapped(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``type(model).__name__`` after prepare names the user's class, not DDP's wrapper
        (pytorch-template records it as the checkpoint's ``arch``)."""
        model = dotted(call.args[0].value) or ""
        if self._prepare_pending[-1] or not self.accelerator_reachable():
            return call
        if not model.isidentifier() and not self.facts.is_prepared(model):
            return call  # a model held in another attribute is not prepared: nothing to unwrap
        self.report(original, self.code, f"type({model}) → type(accelerator.unwrap_model({model}))", True)
        return call.with_changes(args=[call.args[0].with_changes(value=unwrap_model(self.facts, call.args[0].value))])

    def _copy_of_unwrapped(self, original: cst.Call, call: cst.Call) -> cst.Call:
        """``copy.deepcopy(model)`` after prepare → ``copy.deepcopy(accelerator.unwrap_model(model))``:
        a copy of the wrapper would carry DDP's ``module.`` prefix into its state dict."""
        args = list(call.args)
        model = dotted(args[0].value) if args and args[0].keyword is None else None
        if model not in self.facts.models or self._prepare_pending[-1] or not self.accelerator_reachable():
            return call
        self.report(original, self.code, f"copy of {model} → copy of accelerator.unwrap_model({model})", True)
        args[0] = args[0].with_changes(value=unwrap_model(self.facts, args[0].value))
        return call.with_changes(args=args)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        owner = dotted(updated_node.value)
        if owner is None or owner not in self.facts.models or updated_node.attr.value in MODULE_OWN_ATTRIBUTES:
            return updated_node
        if not owner.isidentifier() and not self.facts.is_prepared(owner):
            return updated_node  # a model held in another attribute is not prepared: nothing to unwrap
        if id(original_node) in self._assigned_targets or self._prepare_pending[-1]:
            return updated_node
        attribute = updated_node.attr.value
        if not self.accelerator_reachable():
            self.report(
                original_node,
                "ACC914",
                f"{owner}.{attribute} after prepare needs accelerator.unwrap_model({owner}), "
                "but the accelerator is not reachable here",
                False,
            )
            return updated_node
        if f"{owner}.{attribute}" in self.facts.of(training_method_calls):
            if self.runtime:
                message = f"{owner}.{attribute} runs the model: accelerator.as_forward({owner}).{attribute}, so DDP averages its gradients"
                self.report(original_node, self.code, message, True)
                return updated_node.with_changes(value=accelerator_call(self.facts, "as_forward", updated_node.value))
            self.report(
                original_node,
                "ACC921",
                f"{owner}.{attribute} runs the model outside forward(): DDP will not average its gradients; "
                f"compute the loss from {owner}(...) or convert with --target runtime",
                False,
            )
        self.report(
            original_node,
            self.code,
            f"{owner}.{attribute} → accelerator.unwrap_model({owner}).{attribute}",
            True,
        )
        return updated_node.with_changes(value=unwrap_model(self.facts, updated_node.value))

    @property
    def code(self) -> str:
        return CheckpointCodemod.code


class _CheckpointInterest(cst.CSTVisitor):
    """Whether a statement holds anything :class:`_CheckpointRewriter` reacts to: an attribute of
    a model that is not nn.Module's own, a ``torch.save``/``torch.load`` call or an
    ``accelerator.save``. Local: it reads the one statement the rewrite is about to enter (in
    the tree earlier rules made), to spare the rebuilding walk of statements with nothing to do."""

    def __init__(self, facts: ScriptFacts) -> None:
        super().__init__()
        self.facts = facts
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        # ``model.train()``, ``model.parameters()``: the wrapper has those, nothing to unwrap.
        if node.attr.value not in MODULE_OWN_ATTRIBUTES and dotted(node.value) in self.facts.models:
            self.found = True
        return not self.found

    def visit_Call(self, node: cst.Call) -> bool:
        if (
            self.facts.callee_name(node.func) in ("torch.save", "torch.load", *MODEL_EXPORTS)
            or is_accelerator_method(node, self.facts, "save")
            or dotted(node.func) in self.facts.of(model_copiers)
            or _type_of_model(node, self.facts)
            or _graph_of_tracker(node, self.facts) is not None
        ):
            self.found = True
        return not self.found


def _type_of_model(call: cst.Call, facts: ScriptFacts) -> bool:
    """``type(model)`` (the builtin, one argument) of a model."""
    return (
        facts.callee_name(call.func) == "type"
        and len(call.args) == 1
        and call.args[0].keyword is None
        and not call.args[0].star
        and dotted(call.args[0].value) in facts.models
    )


def _graph_of_tracker(call: cst.Call, facts: ScriptFacts) -> str | None:
    """``writer.add_graph`` for ``writer.add_graph(...)`` of a TensorBoard writer (an experiment
    tracker); None for any other call."""
    if not isinstance(call.func, cst.Attribute) or call.func.attr.value != "add_graph":
        return None
    writer = dotted(call.func.value)
    return f"{writer}.add_graph" if writer in facts.trackers else None


def _classes_given_models(module: cst.Module, facts: ScriptFacts) -> set[str]:
    """Module-level classes, other than training classes, whose instances receive a model that
    is prepared (``early_stopping(val_loss, model)`` with ``early_stopping = EarlyStopping(...)``,
    Bjarten's early stopping): in this file, or, for a module of a program, in another module."""
    seeded = set(facts.program.classes_given_models) if facts.program is not None else set()
    classes = {line.name.value for line in module.body if isinstance(line, cst.ClassDef)}
    # A model class given a model is a composition (``Head(backbone)``), not a helper that saves it.
    classes -= facts.training_classes | facts.model_classes
    if not classes:
        return seeded - facts.training_classes
    finder = _HandedModels(facts, classes)
    walk(module, finder)
    return (seeded | finder.found) - facts.training_classes


class _HandedModels(cst.CSTVisitor):
    """Which of ``classes`` get a model of the file: as a constructor argument, or as an argument
    of a call of an instance (names file-wide, as facts are). Local: reads the module once."""

    def __init__(self, facts: ScriptFacts, classes: set[str]) -> None:
        super().__init__()
        self.facts, self.classes = facts, classes
        self.instances: dict[str, str] = {}
        self.found: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in self.classes:
            for target in node.targets:
                name = dotted(target.target)
                if name is not None:
                    self.instances[name] = value.func.value

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        owner = func.value if isinstance(func, cst.Attribute) else func
        name = dotted(owner)
        cls = (
            func.value if isinstance(func, cst.Name) and func.value in self.classes else self.instances.get(name or "")
        )
        if cls is not None and any(dotted(arg.value) in self.facts.models for arg in node.args if not arg.star):
            self.found.add(cls)


class _SavesInHelperClasses(RuleTransformer):
    """``torch.save`` in the methods of the file's other classes, which no accelerator reaches:
    every rank writes the file. One handed the prepared model (``early_stopping(val_loss,
    model)``) saves it with DDP's ``module.`` keys; another (a callback given the trainer, saving
    ``trainer.model.state_dict()``) may too. Reported (ACC914), not rewritten."""

    def __init__(self, facts: ScriptFacts, lines: set[int], handed: set[str], others: set[str]) -> None:
        super().__init__(facts, lines)
        self.handed = handed
        self.classes = handed | others

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return len(self.scope) == 1 and node.name.value in self.classes

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return bool(self.scope) and self.scope[0] in self.classes

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not (self.scope and self.scope[0] in self.classes):
            return updated_node
        if self.facts.callee_name(original_node.func) != "torch.save":
            return updated_node
        if self.scope[0] in self.handed:
            message = (
                f"torch.save in {self.scope[0]}, which is handed the prepared model: every rank writes this "
                "file, with DDP's 'module.' keys (save accelerator.unwrap_model(model) on the main process)"
            )
        else:
            message = (
                f"torch.save in {self.scope[0]}, where the accelerator is not reachable: every rank writes this "
                "file; save on the main process (and a prepared model's state from accelerator.unwrap_model(model), "
                "without DDP's 'module.' keys)"
            )
        self.report(original_node, "ACC914", message, False)
        return updated_node


#: Argument values that never hold a model attribute or a save/load call.
_PLAIN_VALUES = (cst.SimpleString, cst.Integer, cst.Float, cst.Name)


def _is_plain_value(value: cst.BaseExpression) -> bool:
    """A literal or a bare name. Implicitly joined strings are plain only when no part is an
    f-string: ``f"{model.n_channels} input channels\\n" f"..."`` reads a model attribute."""
    if isinstance(value, cst.ConcatenatedString):
        return _is_plain_value(value.left) and _is_plain_value(value.right)
    return isinstance(value, _PLAIN_VALUES)


class _WaitBeforeLoads(RuleTransformer):
    """In a script that saves, every ``torch.load`` line first waits for the other ranks: the
    main process may just have written the file. ``report``: each wait is reported (the save is
    in another module of the program, so no report of this module announces it)."""

    def __init__(self, facts: ScriptFacts, lines: set[int], report: bool = False) -> None:
        super().__init__(facts, lines)
        self.report_waits = report
        #: The ``torch.load`` lines left without a barrier before them (a block not every rank
        #: runs alike, or where the accelerator is not reachable): (function, original line).
        self.unguarded: list[tuple[str, int]] = []

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if not self.accelerator_reachable() or not self.every_rank_reaches_here():
            self._unguarded(updated_node.body)
            return updated_node
        body = self._wait_before_loads(list(updated_node.body))
        return updated_node if body is None else updated_node.with_changes(body=body)

    def _unguarded(self, statements: Sequence[cst.BaseStatement]) -> None:
        """Note the statement lines of ``statements`` (not of blocks nested in them) that load."""
        for statement in statements:
            if isinstance(statement, cst.SimpleStatementLine) and _contains_call(statement, self.facts, "torch.load"):
                self.unguarded.append((self.function, self.site(_first_small(statement)).line))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        created = self.module_creation_index()
        if created is None:
            self._unguarded(updated_node.body)
            return updated_node
        head, tail = list(updated_node.body[: created + 1]), list(updated_node.body[created + 1 :])
        body = self._wait_before_loads(tail)
        return updated_node if body is None else updated_node.with_changes(body=[*head, *body])

    def _wait_before_loads(self, statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        result: list[cst.BaseStatement] = []
        for statement in statements:
            loads = isinstance(statement, cst.SimpleStatementLine) and _contains_call(
                statement, self.facts, "torch.load"
            )
            opened = self._reading_from_opened_file(statement)
            if opened is not None:
                # ``with open(path, "rb") as f: model = torch.load(f)``: the file is opened before
                # the load, so the ranks wait before the ``with`` (the barrier in it came too late).
                statement, loads = opened, True
            if loads and not (result and _is_barrier(result[-1], self.facts)):
                result.append(
                    cst.SimpleStatementLine(
                        [cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))],
                        leading_lines=as_statement(statement).leading_lines,
                    )
                )
                statement = statement.with_changes(leading_lines=())
                if self.report_waits:
                    self.report(
                        statement,
                        CheckpointCodemod.code,
                        "every rank waits before torch.load: another module of the program saves the checkpoints",
                    )
            result.append(statement)
        return result if len(result) != len(statements) else None

    def _reading_from_opened_file(self, statement: cst.BaseStatement) -> cst.BaseStatement | None:
        """A ``with open(...) as f:`` whose body loads with ``torch.load``, without the barrier
        put in front of that load; None for anything else."""
        if not isinstance(statement, cst.With) or not isinstance(statement.body, cst.IndentedBlock):
            return None
        if not any(isinstance(item.item, cst.Call) and dotted(item.item.func) == "open" for item in statement.items):
            return None
        inner = list(statement.body.body)
        kept: list[cst.BaseStatement] = []
        found = False
        for index, line in enumerate(inner):
            following = inner[index + 1] if index + 1 < len(inner) else None
            if (
                _is_barrier(line, self.facts)
                and following is not None
                and _contains_call(following, self.facts, "torch.load")
            ):
                found = True
                continue
            kept.append(line)
        if not found and not any(_contains_call(line, self.facts, "torch.load") for line in inner):
            return None
        return statement.with_changes(body=statement.body.with_changes(body=kept))


class _WaitAfterSaves(RuleTransformer):
    """In a script that also loads where no barrier can go before the load, every rank waits
    after each ``accelerator.save`` line every rank runs whose file such a load may read later
    (the program model's :func:`~codemods.model.file_flow.file_flow` pairs them): the other ranks
    then find the file the main process wrote (``test()`` reloading the best model under ``if
    os.path.isfile(path):``, MorvanZhou's ``restore_net()`` run after ``save()``)."""

    def __init__(self, facts: ScriptFacts, lines: set[int], loads: Sequence[tuple[str, int]]) -> None:
        super().__init__(facts, lines)
        self.unguarded = {line for _, line in loads}

    def _read_later(self, line: int) -> bool:
        """Whether a load with no barrier before it may read, later in the run, the file the
        save on ``line`` writes."""
        return any(read in self.unguarded for _, read in self.facts.of(file_flow).read_after(line))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if not self.accelerator_reachable() or not self.every_rank_reaches_here():
            return updated_node
        body = self._wait_after_saves(list(updated_node.body))
        return updated_node if body is None else updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        created = self.module_creation_index()
        if created is None:
            return updated_node
        head, tail = list(updated_node.body[: created + 1]), list(updated_node.body[created + 1 :])
        body = self._wait_after_saves(tail)
        return updated_node if body is None else updated_node.with_changes(body=[*head, *body])

    def _wait_after_saves(self, statements: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
        result: list[cst.BaseStatement] = []
        read_later: cst.BaseStatement | None = None  # the last save of this run read later
        for index, statement in enumerate(statements):
            result.append(statement)
            if not _only_saves(statement, self.facts):
                continue
            if self._read_later(self.site(_first_small(statement)).line):
                read_later = statement
            following = statements[index + 1] if index + 1 < len(statements) else None
            # Saves in a row wait once, after the last of them.
            if read_later is None or (following is not None and _only_saves(following, self.facts)):
                continue
            if following is None or not _is_barrier(following, self.facts):
                result.append(cst.SimpleStatementLine([cst.Expr(accelerator_call(self.facts, "wait_for_everyone"))]))
                self.report(
                    read_later,
                    CheckpointCodemod.code,
                    "every rank waits after the save: the file is read later where no barrier can go before the load",
                )
            read_later = None
        return result if len(result) != len(statements) else None


def _first_small(statement: cst.BaseStatement) -> cst.CSTNode:
    """What the positions record for a statement line: its first small statement."""
    return statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and statement.body else statement


def _one_barrier_before_saves(body: Sequence[cst.BaseStatement], facts: ScriptFacts) -> list[cst.BaseStatement] | None:
    """Saves in a row wait once: ``wait_for_everyone(); save(a); wait_for_everyone(); save(b)``
    keeps the first barrier only (nothing runs between the saves for a rank to finish); the
    dropped barrier's leading lines (the save's comments) stay with the save. None: no change."""
    kept: list[cst.BaseStatement] = []
    carried: Sequence[cst.EmptyLine] | None = None
    for index, line in enumerate(body):
        if carried is not None and isinstance(line, cst.SimpleStatementLine):
            line = line.with_changes(leading_lines=[*carried, *line.leading_lines])
        carried = None
        if (
            len(kept) >= 2
            and isinstance(line, cst.SimpleStatementLine)
            and _is_barrier(line, facts)
            and _only_saves(kept[-1], facts)
            and _is_barrier(kept[-2], facts)
            # Between two saves; a barrier after the last save (files read later) stays.
            and index + 1 < len(body)
            and _only_saves(body[index + 1], facts)
        ):
            carried = line.leading_lines
            continue
        kept.append(line)
    return None if len(kept) == len(body) else kept


def _only_saves(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    """A line of ``accelerator.save(...)`` calls only."""
    return isinstance(statement, cst.SimpleStatementLine) and all(
        is_accelerator_method(getattr(s, "value", None), facts, "save") for s in statement.body
    )


def _is_barrier(statement: cst.BaseStatement, facts: ScriptFacts) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        is_accelerator_method(getattr(s, "value", None), facts, "wait_for_everyone") for s in statement.body
    )


def _contains_call(node: cst.CSTNode, facts: ScriptFacts, qualified: str) -> bool:
    finder = _CallFinder(lambda call: facts.callee_name(call.func) == qualified)
    walk(node, finder)
    return finder.found


class _CallFinder(cst.CSTVisitor):
    """Whether a call matching ``predicate`` is in one statement. Local: it reads statements of
    a block this rule is rewriting, in the tree its first rewrite returned."""

    def __init__(self, predicate) -> None:
        self.predicate = predicate
        self.found = False

    def visit_Call(self, node: cst.Call) -> bool:
        if self.predicate(node):
            self.found = True
        return not self.found


def _is_prepare(statement: cst.CSTNode, facts: ScriptFacts) -> bool:
    value = getattr(statement, "value", None)
    return is_accelerator_method(value, facts, "prepare") if value is not None else False


def _has_prepare_call(statements: Sequence[cst.CSTNode], facts: ScriptFacts) -> bool:
    """Whether one of these statements is the ``... = accelerator.prepare(...)`` line (the prepare
    pass puts it at the top level of the body that builds the training objects)."""
    return any(
        isinstance(statement, cst.SimpleStatementLine) and any(_is_prepare(s, facts) for s in statement.body)
        for statement in statements
    )
