"""ACC102 device: the accelerator picks the device; moves that ``prepare`` makes redundant go.

The device variable (``torch.device("cuda" if ... else "cpu")``, ``"cuda:0"``,
``torch.accelerator.current_accelerator()``) becomes ``accelerator.device``, which is this process's
own GPU. ``.to(device)`` / ``.cuda()`` on prepared models and on batches from prepared loaders are
removed (``prepare`` places them); other ``.cuda()`` calls become ``.to(accelerator.device)``;
``.to(dtype)``, ``.float()``, ``.cpu()`` and moves of tensors the script creates itself stay (they now
go to ``accelerator.device``). ``torch.cuda.set_device`` is removed, and so is a
``CUDA_VISIBLE_DEVICES`` the script sets (every process would see the same GPUs; the launch
chooses them). A block left empty goes too:
``if args.cuda: model.cuda()`` disappears as a whole.

A fixed GPU named elsewhere would be the same GPU on every rank: a ``device="cuda"`` keyword
(``torch.zeros(3, device="cuda")``) and the index the script gave ``torch.cuda.set_device``
(``device=args.gpu``, ``.to(args.gpu)``) become ``accelerator.device``; where no accelerator is
reachable they are reported (ACC904). That index passed on to another call (``Net(args.gpu)``,
which may make a device of it) is reported (ACC924): what the callee does with it is not visible.

A GPU the script fixes is followed through values to the calls taking it as their device: an
integer bound to a name (the DDP tutorial's ``device = 0``), an ``int`` option (``--gpu``), a
choice between one and ``"cpu"``, or a device kept in a settings dictionary, handed on through
parameters, attributes and dictionaries (``Trainer(..., gpu_id)``, ``self.gpu_id``,
``cfg["device"]``), also an entry of a settings dictionary read into a local or an attribute
(``gpu = config["gpu"]``, ``self.gpu = cfg["gpu"]``) or handed on as an argument
(``fit(..., config["gpu"])``). Values written right in a call are followed too (``Runner(model,
{"gpu": 0})``, ``train(model, {"device": "cuda:0"})``, ``fit(model, 0)``), and so are containers: an
element of a list or tuple (``gpus = [0, 1]``: ``gpus[0]``; ``args.gpu_ids[0]`` of an ``int``
option), a field of a named tuple or dataclass built with one (``Settings(0, lr)``: ``s.gpu``), a
list inside a dictionary (``{"gpus": [0, 1]}``: ``config["gpus"][0]``), and what a function or a
method of the file returns on every path (``def pick_gpu(): return 0``: ``gpu = pick_gpu()``,
``model.to(pick_gpu())``, ``self.device = self.pick_gpu()``). A name is read where it is bound:
``target = 0`` in one function is no GPU for a ``target = "cpu"`` of another. Its moves are removed where ``prepare`` places what moves,
and otherwise take ``accelerator.device``, like its ``device=`` keywords. A function of the file
returning a device on every path (``device = get_device(args.gpu)``) chooses the device like
``torch.device(...)``. A parameter that is such a GPU from some callers and something else from
others (``"cpu"``), or one of several at an index not followed (``gpus[rank]``), is left, and
reported where it is taken (ACC924).

A device picked as a string (``device = "cuda" if torch.cuda.is_available() else "cpu"``) is a
``torch.device`` once it is ``accelerator.device``. Where the script read it as a string, it reads
``device.type``: as a device type (``torch.autocast(device_type=device)``,
``torch.autocast(device, ...)``, which raise ``ValueError`` for a ``torch.device``), compared with
a device type (``device == "cuda"``, ``device in ("cuda", "mps")``, ``"cuda" in device``: a
``torch.device`` equals no string, and ``in`` raises ``TypeError``; ``str(device) == "cuda"`` too,
since the process's own GPU is ``cuda:1``), or with a method of ``str``
(``device.startswith("cuda")``). Every other read keeps the ``torch.device``: moves and
``device=`` keywords take it, and printing it (``f"Using {device}"``) shows ``cpu`` as before,
``cuda:1`` for the process's own GPU.
"""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Change, Options
from accel_convert.codemods.engine.rule import Example, Rule
from accel_convert.codemods.rewrites.device.fixed_gpus import device_functions, gpu_indices
from accel_convert.codemods.rewrites.device.module_device import legacy_tensors_at_import, rebind_module_device
from accel_convert.codemods.rewrites.device.moves import copied_models, cpu_models
from accel_convert.codemods.rewrites.device.settings_devices import rebind_settings_devices, settings_class_devices
from accel_convert.codemods.rewrites.device.state import DEVICE, GPU_INDEX_PASSED_ON
from accel_convert.codemods.rewrites.device.transformer import DeviceTransformer

# The rule's parts, one module each (each docstring says what it owns): moves.py, fixed_gpus.py,
# selection.py, string_reads.py and emptied_blocks.py, walked together by transformer.py;
# module_device.py and settings_devices.py rebind, on the walked tree, a device chosen at module
# level or in a settings class. "Is this a device / a move" is engine/devices.py's answer.


class Device(Rule):
    code = DEVICE
    name = "device"
    fixes = {
        "ACC924": (
            "Use the accelerator's device where the GPU index was passed: replace ``args.gpu`` (or the fixed ``cuda:0``) with ``accelerator.device`` at the reported call, and drop the index wherever it only chose the GPU."
        ),
    }
    providers = (cpu_models, copied_models, settings_class_devices)
    extra_codes = {
        GPU_INDEX_PASSED_ON: "gpu-index: the GPU index once given to torch.cuda.set_device, passed on "
        "where it may name a device (the same GPU on every process), or a device that is a fixed GPU from "
        "some callers and something else from others",
    }
    examples = (
        Example(
            # On the process's own GPU str(device) is "cuda:1": the comparison reads the type.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                loader = DataLoader(dataset, batch_size=8, pin_memory=str(device) == "cuda")
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    nn.functional.mse_loss(model(data), target).backward()
                    optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                accelerator = Accelerator()
                accelerator.agree_random_state()

                device = accelerator.device
                dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
                loader = DataLoader(dataset, batch_size=8, pin_memory=device.type == "cuda")
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for data, target in loader:
                    optimizer.zero_grad()
                    accelerator.backward(nn.functional.mse_loss(model(data), target))
                    optimizer.step()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def main():
                    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1).to(device)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for data, target in loader:
                        data, target = data.to(device), target.to(device)
                        noise = torch.randn(len(data), 8).cuda()
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data + noise), target)
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


                def main():
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    for data, target in loader:
                        noise = torch.randn(len(data), 8).to(accelerator.device)
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(data + noise), target)
                        accelerator.backward(loss)
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                device = "cuda" if torch.cuda.is_available() else "cpu"
                print(f"Using {device} device")
                use_amp = device == "cuda"
                if device.startswith("cuda"):
                    torch.backends.cudnn.benchmark = True
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for data, target in loader:
                    data, target = data.to(device), target.to(device)
                    optimizer.zero_grad()
                    with torch.autocast(device_type=device, enabled=False):
                        loss = nn.functional.mse_loss(model(data + torch.randn(8, device=device)), target)
                    loss.backward()
                    optimizer.step()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset
                accelerator = Accelerator()
                accelerator.agree_random_state()

                device = accelerator.device
                accelerator.print(f"Using {device} device")
                use_amp = device.type == "cuda"
                if device.type.startswith("cuda"):
                    torch.backends.cudnn.benchmark = True
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for data, target in loader:
                    optimizer.zero_grad()
                    with torch.autocast(device_type=device.type, enabled=False):
                        loss = nn.functional.mse_loss(model(data + torch.randn(8, device=device)), target)
                    accelerator.backward(loss)
                    optimizer.step()
            """,
        ),
        Example(
            code=GPU_INDEX_PASSED_ON,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Denoiser(nn.Module):
                    def __init__(self, gpu):
                        super().__init__()
                        self.gpu = gpu
                        self.linear = nn.Linear(8, 8)

                    def forward(self, x):
                        return self.linear(x + torch.randn(x.shape, device=self.gpu))


                def main():
                    parser = argparse.ArgumentParser()
                    parser.add_argument("--gpu", type=int, default=0)
                    args = parser.parse_args()
                    torch.cuda.set_device(args.gpu)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8)
                    model = Denoiser(args.gpu).cuda()
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for (x,) in loader:
                        x = x.cuda(args.gpu)
                        optimizer.zero_grad()
                        loss = nn.functional.mse_loss(model(x), x)
                        loss.backward()
                        optimizer.step()


                if __name__ == "__main__":
                    main()
            """,
            message="args.gpu, the GPU given to the removed torch.cuda.set_device, is passed on here: used as a "
            "device it is the same GPU on every process (pass accelerator.device instead)",
        ),
        Example(
            # The DDP tutorial's shape: the integer reaches the moves through a constructor and an
            # attribute. Moves prepare makes go; the noise's takes this process's device.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                class Trainer:
                    def __init__(self, model, loader, optimizer, gpu_id):
                        self.gpu_id = gpu_id
                        self.model = model.to(gpu_id)
                        self.loader = loader
                        self.optimizer = optimizer

                    def train(self):
                        for x, y in self.loader:
                            x, y = x.to(self.gpu_id), y.to(self.gpu_id)
                            noise = torch.randn(len(x), 8).to(self.gpu_id)
                            self.optimizer.zero_grad()
                            nn.functional.mse_loss(self.model(x + noise), y).backward()
                            self.optimizer.step()


                def main(device):
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    Trainer(model, loader, optimizer, device).train()


                if __name__ == "__main__":
                    device = 0  # shorthand for cuda:0
                    main(device)
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                class Trainer:
                    def __init__(self, model, loader, optimizer, gpu_id, accelerator):
                        self.accelerator = accelerator
                        self.gpu_id = gpu_id
                        self.model = model
                        self.loader = loader
                        self.optimizer = optimizer

                    def train(self):
                        for x, y in self.loader:
                            noise = torch.randn(len(x), 8).to(self.accelerator.device)
                            self.optimizer.zero_grad()
                            self.accelerator.backward(nn.functional.mse_loss(self.model(x + noise), y))
                            self.optimizer.step()


                def main(device):
                    accelerator = Accelerator()
                    accelerator.agree_random_state()
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                    Trainer(model, loader, optimizer, device, accelerator).train()


                if __name__ == "__main__":
                    device = 0  # shorthand for cuda:0
                    main(device)
            """,
        ),
        Example(
            # The GPU reaches the moves in a dictionary written right in the call, a list and a
            # function's return: the batch moves go, the others take this process's device.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def pick_gpu():
                    return 0


                class Runner:
                    def __init__(self, model, loader, config):
                        self.gpu = config["gpu"]
                        self.model = model.to(self.gpu)
                        self.loader = loader
                        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config["lr"])

                    def train(self, gpus):
                        for x, y in self.loader:
                            x, y = x.cuda(self.gpu), y.cuda(self.gpu)
                            noise = torch.randn(len(x), 8).to(gpus[0])
                            scale = torch.ones(1, 8).to(pick_gpu())
                            self.optimizer.zero_grad()
                            nn.functional.mse_loss(self.model(x * scale + noise), y).backward()
                            self.optimizer.step()


                def main():
                    torch.manual_seed(0)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    Runner(nn.Linear(8, 1), loader, {"gpu": 0, "lr": 0.1}).train([0, 1])


                if __name__ == "__main__":
                    main()
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset


                def pick_gpu():
                    return 0


                class Runner:
                    def __init__(self, model, loader, config, accelerator):
                        self.accelerator = accelerator
                        self.gpu = config["gpu"]
                        self.model = model
                        self.loader = loader
                        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config["lr"])
                        self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)

                    def train(self, gpus):
                        for x, y in self.loader:
                            noise = torch.randn(len(x), 8).to(self.accelerator.device)
                            scale = torch.ones(1, 8).to(self.accelerator.device)
                            self.optimizer.zero_grad()
                            self.accelerator.backward(nn.functional.mse_loss(self.model(x * scale + noise), y))
                            self.optimizer.step()


                def main():
                    accelerator = Accelerator()
                    torch.manual_seed(0)
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    loader = accelerator.prepare(loader)
                    Runner(nn.Linear(8, 1), loader, {"gpu": 0, "lr": 0.1}, accelerator).train([0, 1])


                if __name__ == "__main__":
                    main()
            """,
        ),
        Example(
            code=GPU_INDEX_PASSED_ON,
            # ``where`` is GPU 0 from one caller and the CPU from the other: not rewritten.
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset


                def evaluate(model, inputs, where):
                    with torch.no_grad():
                        print(model(inputs.to(where)).sum().item())


                def main():
                    device = 0
                    cpu = "cpu"
                    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                    model = nn.Linear(8, 1).to(device)
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                    for x, y in loader:
                        x, y = x.to(device), y.to(device)
                        optimizer.zero_grad()
                        nn.functional.mse_loss(model(x), y).backward()
                        optimizer.step()
                    evaluate(model, torch.randn(4, 8), device)
                    evaluate(model.cpu(), torch.randn(4, 8), cpu)


                if __name__ == "__main__":
                    main()
            """,
            message="where is a fixed GPU (the same on every process) from some callers and something else from "
            "others: left as it was (pass accelerator.device where it is the GPU)",
        ),
        Example(
            before="""
                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                for x, y in loader:
                    x = x.to(torch.float32)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    optimizer.step()
                    print(loss.detach().cpu().item())
            """,
            after="""
                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                torch.manual_seed(0)
                accelerator = Accelerator()
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for x, y in loader:
                    x = x.to(torch.float32)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    accelerator.backward(loss)
                    optimizer.step()
                    accelerator.print(loss.detach().cpu().item())
            """,
            leaves_alone=True,
        ),
        Example(
            # The index spells the device ``torch.device(...)`` makes (``"cuda:{}".format(args.gpu)``):
            # that device becomes the accelerator's, so nothing is passed on; and ``--gpu 0``
            # names which GPU, not whether one (no ``cpu=not args.gpu``).
            code=GPU_INDEX_PASSED_ON,
            before="""
                import argparse

                import torch
                import torch.nn as nn
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--gpu", type=int, default=0)
                args = parser.parse_args()
                torch.cuda.set_device(args.gpu)
                device = torch.device("cuda:{}".format(args.gpu))
                torch.manual_seed(0)
                model = nn.Linear(8, 1).to(device)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,
            after="""
                import argparse

                import torch
                import torch.nn as nn
                from accel_convert.runtime import Accelerator
                from torch.utils.data import DataLoader, TensorDataset

                parser = argparse.ArgumentParser()
                parser.add_argument("--gpu", type=int, default=0)
                args = parser.parse_args()
                accelerator = Accelerator()
                device = accelerator.device
                torch.manual_seed(0)
                model = nn.Linear(8, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    accelerator.backward(loss)
                    optimizer.step()
            """,
            leaves_alone=True,
        ),
    )

    def applies(self, facts: ScriptFacts, options: Options) -> bool:
        return facts.has_accelerator and bool(
            facts.device_names or facts.models or facts.batch_names or facts.call_sites.get(".cuda")
        )

    def transform(self, module: cst.Module, facts: ScriptFacts, options: Options) -> tuple[cst.Module, list[Change]]:
        functions = frozenset(s.name.value for s in module.body if isinstance(s, cst.FunctionDef))
        transformer = DeviceTransformer(
            facts,
            facts.existing_accelerator or facts.accelerator_name,
            gpu_indices(module, facts),
            device_functions(module, facts),
            functions,
        )
        converted = module.visit(transformer)
        converted, rebound = rebind_module_device(module, converted, facts)
        converted, settings = rebind_settings_devices(module, converted, facts)
        legacy = legacy_tensors_at_import(module, facts)
        return converted, transformer.changes(module) + rebound + settings + legacy
