"""device (ACC102): the accelerator picks the device; moves that prepare makes redundant go
(the hard cases of shared/reference/conversion-cases.md 1 and 16, then one rewrite per row)."""

from __future__ import annotations

import libcst as cst
import pytest

from accel_convert.codemods.engine.devices import (
    constructed,
    construction,
    holds_device,
    names_fixed_gpu,
    peel_moves,
    written_parts,
)
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.model import Options
from tests.codemods.support import check_expectations, convert, in_loop

MOVES = """\
def batchify(data, bsz, device):
    return data.view(bsz, -1).t().contiguous().to(device)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if args.cuda else "cpu")
    DEV = device
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8)), batch_size=2)
    model = nn.Linear(4, 1)
    if args.cuda:
        model.cuda()
    transformer = nn.Linear(4, 4).to(device)
    optimizer = torch.optim.SGD(list(model.parameters()) + list(transformer.parameters()), lr=0.1)
    style = torch.ones(1, 4).to(device)
    for images, labels in loader:
        images = images.to(device=device, dtype=torch.float32)
        labels = labels.to(DEV).float()
        idx = labels.type(torch.long).to(DEV)
        noise = torch.randn(2, 4, 1, 1, device=device)
        fill = torch.full((2,), 0.5, dtype=images.dtype, device=device)
        styled = style.repeat(2, 1).to(device)
        out = model(images.to(device))
        seq = out.double()
        loss = (out - labels).pow(2).mean()
        loss.backward()
        optimizer.step()
        kept = out.cpu()
    transformer.eval().cpu()
    transformer.to(device).train()
"""


FROZEN_HELPER = """\
class Vgg16(nn.Module):
    def __init__(self, requires_grad=False):
        super().__init__()
        self.features = nn.Linear(4, 4)

def main():
    device = torch.device("cuda")
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 4).to(device)
    vgg = Vgg16(requires_grad=False).to(device)
    critic = Vgg16(requires_grad=False).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for (x,) in loader:
        x = x.to(device)
        loss = (vgg.features(model(x)) - critic.features(x)).pow(2).mean()
        loss.backward()
        optimizer.step()
"""


CASES = {
    # Hard case 1: only moves made redundant by prepare go.
    "1 moves": (
        MOVES,
        [
            "device = accelerator.device",
            "DEV = device",
            "return data.view(bsz, -1).t().contiguous().to(device)",
            "images = images.to(dtype=torch.float32)",
            "labels = labels.float()",
            "idx = labels.type(torch.long)",
            "noise = torch.randn(2, 4, 1, 1, device=device)",
            "fill = torch.full((2,), 0.5, dtype=images.dtype, device=device)",
            "styled = style.repeat(2, 1).to(device)",
            "out = model(images)",
            "seq = out.double()",
            "kept = out.cpu()",
            "transformer = nn.Linear(4, 4)",
            "transformer.eval().cpu()",
            "transformer.to(device).train()",
            "-if args.cuda:",
            "-model.cuda()",
        ],
    ),
    # Hard case 16: frozen helper models keep their move, to the accelerator's device.
    "16 frozen helper": (
        FROZEN_HELPER,
        [
            "vgg = Vgg16(requires_grad=False).to(device)",
            "critic = Vgg16(requires_grad=False).to(accelerator.device)",
            "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
            "model = nn.Linear(4, 4)",
            "-x = x.to(device)",
        ],
    ),
}


@pytest.mark.parametrize(("body", "expectations"), CASES.values(), ids=CASES.keys())
def test_hard_cases(body: str, expectations: list[str]) -> None:
    check_expectations(body, expectations)


REWRITES = {
    "dict batch moved by prepare": (
        in_loop("batch = {k: v.to(device) for k, v in batch.items()}\nmodel(**batch)"),
        ["-batch = {k: v.to(device) for k, v in batch.items()}", "model(**batch)"],
    ),
    "tuple batch moved by prepare": (
        in_loop("batch = tuple(t.to(device) for t in batch)\nmodel(batch[0])"),
        ["-batch = tuple(t.to(device) for t in batch)"],
    ),
    "subscripted batch keeps dtype": (
        in_loop("x = batch[0].to(device, torch.float16)\nmodel(x)"),
        ["x = batch[0].to(torch.float16)"],
    ),
    "conditional move of the model": (
        in_loop("model(batch[0])").replace(
            "optimizer = torch", "model = model.cuda() if torch.cuda.is_available() else model\n    optimizer = torch"
        ),
        ["-model = model.cuda() if torch.cuda.is_available() else model", "-model = model"],
    ),
    "non_blocking goes with the device": (
        in_loop("x = batch[0].to(device, non_blocking=True)\nmodel(x)"),
        ["x = batch[0]"],
    ),
    "created tensor .cuda() → accelerator.device": (
        in_loop("mask = torch.ones(3).cuda()\nmodel(batch[0])"),
        ["mask = torch.ones(3).to(accelerator.device)"],
    ),
    "set_device removed": (
        in_loop("model(batch[0])", prelude="").replace(
            'device = torch.device("cuda")', 'torch.cuda.set_device(0)\n    device = torch.device("cuda")'
        ),
        ["-torch.cuda.set_device(0)", '-device = torch.device("cuda")'],
    ),
    "a torch.device naming a GPU, as a keyword and in a move": (
        in_loop(
            'bias = torch.zeros(1, device=torch.device("cuda", 0))\n'
            'scale = torch.ones(1).to(torch.device("cuda:0"))\nmodel(batch[0] * scale + bias)'
        ),
        ["bias = torch.zeros(1, device=accelerator.device)", "scale = torch.ones(1).to(accelerator.device)"],
    ),
    "torch.load onto a fixed GPU loads on this process's": (
        in_loop('model.load_state_dict(torch.load("init.pt", map_location="cuda:0"))\nmodel(batch[0])'),
        ['accelerator.unwrap_model(model).load_state_dict(torch.load("init.pt", map_location=accelerator.device))'],
    ),
    "visible devices pinned in the script removed": (
        "import os\n"
        + in_loop("model(batch[0])", prelude="").replace(
            'device = torch.device("cuda")',
            'os.environ["CUDA_VISIBLE_DEVICES"] = "0"\n    device = torch.device("cuda")',
        ),
        ['-os.environ["CUDA_VISIBLE_DEVICES"] = "0"', '-device = torch.device("cuda")'],
    ),
    "visible devices set by default, under a flag: the emptied if goes": (
        "import os\n"
        + in_loop("model(batch[0])", prelude="").replace(
            'device = torch.device("cuda")',
            'if args.gpu:\n        os.environ.setdefault("CUDA_VISIBLE_DEVICES", args.gpu)\n'
            '    os.environ["OMP_NUM_THREADS"] = "1"\n    device = torch.device("cuda")',
        ),
        [
            "-if args.gpu:",
            '-os.environ.setdefault("CUDA_VISIBLE_DEVICES", args.gpu)',
            'os.environ["OMP_NUM_THREADS"] = "1"',
        ],
    ),
}


@pytest.mark.parametrize(("body", "expectations"), REWRITES.values(), ids=REWRITES.keys())
def test_rewrites(body: str, expectations: list[str]) -> None:
    check_expectations(body, expectations)


def test_batches_of_a_loader_that_is_not_prepared_keep_their_moves() -> None:
    # ``evaluate`` builds its own loader and runs before training starts (a baseline): the plan
    # prepares the loaders of helpers called once training is under way, not this one.
    body = (
        "def evaluate(model, device):\n"
        "    extra = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    for (x,) in extra:\n        x = x.to(device)\n        model(x)\n\n"
        "def main():\n    device = torch.device('cuda')\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)\n"
        "    model = nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    evaluate(model, device)\n"
        "    for (x,) in loader:\n        x = x.to(device)\n        model(x).sum().backward()\n"
    )
    code, lines = convert(body, Options(select=("ACC10",)))  # the ACC10x rules on their own
    assert lines.count("x = x.to(device)") == 1, code  # kept in evaluate, removed in main
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in lines


EMA_TRAINING = """\
import copy

{imports}

def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(device)
    {copy}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        {update}
"""

HAND_WRITTEN_EMA = """\
class ModelEMA:
    def __init__(self, model, decay=0.99):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay
"""


@pytest.mark.parametrize(
    "imports, copy, update",
    [
        ("", "ema = copy.deepcopy(model)", "ema.load_state_dict(model.state_dict())"),
        (
            "from torch.optim.swa_utils import AveragedModel",
            "swa = AveragedModel(model)",
            "swa.update_parameters(model)",
        ),
        ("from timm.utils import ModelEmaV2", "ema = ModelEmaV2(model, decay=0.99)", "ema.update(model)"),
        (HAND_WRITTEN_EMA, "ema = ModelEMA(model)", "ema.decay = 0.99"),
    ],
    ids=["deepcopy", "AveragedModel", "timm-ema", "hand-written-ema-class"],
)
def test_a_model_copied_before_prepare_keeps_its_move_so_the_copy_is_on_the_device(imports, copy, update) -> None:
    # prepare() would move the model after the copy was made: the copy (updated from the model's
    # parameters every step) would stay on the CPU while the model trains on the GPU.
    body = EMA_TRAINING.format(imports=imports, copy=copy, update=update)
    check_expectations(body, ["model = nn.Linear(4, 1).to(device)", "-x, y = x.to(device), y.to(device)"])


def test_a_model_passed_to_an_ordinary_call_still_loses_its_move() -> None:
    body = EMA_TRAINING.format(imports="", copy="n_params = sum(p.numel() for p in model.parameters())", update="")
    check_expectations(body, ["model = nn.Linear(4, 1)", "-model = nn.Linear(4, 1).to(device)"])


def test_a_copy_made_after_prepare_copies_the_unwrapped_model() -> None:
    # prepare() lands after the optimizer, so the copy sees the DDP wrapper: copying it would put
    # DDP's ``module.`` prefix into the EMA's checkpoints.
    body = EMA_TRAINING.format(imports="", copy="", update="").replace(
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    ema = copy.deepcopy(model)\n",
    )
    check_expectations(
        body,
        [
            "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
            "ema = copy.deepcopy(accelerator.unwrap_model(model))",
            "#ACC114",
        ],
    )


GLOBAL_DEVICE = """\
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x) + torch.zeros(1, device=device)


def main():
    \"\"\"Train.\"\"\"
    loader = DataLoader(TensorDataset(torch.ones(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_a_module_level_device_is_rebound_to_this_ranks_device_where_the_accelerator_is_created() -> None:
    # Left alone, the global stays "cuda" (GPU 0) on every rank, and the model's forward would
    # build its tensors on GPU 0 while rank 1's model lives on GPU 1.
    code, lines = convert(GLOBAL_DEVICE)
    main = code[code.index("def main():") :]
    assert main.startswith('def main():\n    """Train."""\n    global device\n')
    assert "    accelerator = Accelerator()\n    device = accelerator.device\n" in main
    assert 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")' in lines  # import time
    check_expectations(GLOBAL_DEVICE, ["global device", "#ACC102"])


def test_a_tensor_put_on_the_module_level_device_at_import_is_reported() -> None:
    """A diffusion schedule built at import, ``alpha_bar = torch.cumprod(alphas, 0).to(device)``,
    and read again at import: the global is rebound only when main() creates the accelerator, so
    the schedule stays on GPU 0 on every rank (silent before; a device mismatch on rank 1's GPU).
    Not read at import, the move goes to main() instead (see the test after the next ones)."""
    body = GLOBAL_DEVICE.replace(
        "\n\nclass Net",
        "\nbetas = torch.linspace(1e-4, 0.02, 10)\nalpha_bar = torch.cumprod(1 - betas, 0).to(device)\n"
        "sqrt_alpha_bar = alpha_bar.sqrt()\n\n\nclass Net",
    )
    _, lines = convert(body)
    assert "#ACC904" in lines
    _, plain = convert(GLOBAL_DEVICE)
    assert "#ACC904" not in plain


def test_a_function_with_its_own_device_gets_no_global() -> None:
    own = GLOBAL_DEVICE.replace('    """Train."""\n', '    """Train."""\n    device = torch.device("cpu")\n')
    code, lines = convert(own)
    assert "global device" not in lines
    # main()'s own CPU device is the one it trains on (the accelerator's), never a CPU kept on
    # purpose; the line hiding the module's device stays, so a second conversion changes nothing.
    assert "model = Net()" in lines
    check_expectations(own, ["device = accelerator.device", "-global device"])


def test_a_model_class_choosing_cuda_for_itself_is_reported() -> None:
    body = """\
class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.proj = nn.Linear(4, 1)

    def forward(self, x):
        return self.proj(x.to(self.device))


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = Embed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""
    code, lines = convert(body)
    assert 'self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")' in lines  # left
    assert "#ACC904" in lines


def test_a_model_of_the_same_name_built_in_an_inference_function_keeps_its_move() -> None:
    body = """\
def train(device):
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()


def inference(device):
    model = nn.Linear(4, 1).to(device)
    return model(torch.ones(1, 4, device=device))


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train(device)
    inference(device)
"""
    code, lines = convert(body)
    # Nothing prepares inference()'s model: without its move it stays on the CPU.
    inference = code[code.index("def inference") :]
    assert "    model = nn.Linear(4, 1).to(device)\n" in inference
    train = code[code.index("def train") : code.index("def inference")]
    assert "    model = nn.Linear(4, 1)\n" in train


GPU_FLAG = """\
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.gpu)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).cuda(args.gpu)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    offset = torch.zeros(1, device=args.gpu)
    scale = torch.ones(1).to(args.gpu)
    mask = torch.ones(1, device="cuda")
    for x, y in loader:
        x, y = x.cuda(args.gpu, non_blocking=True), y.cuda(args.gpu)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x) * scale + offset * mask, y).backward()
        optimizer.step()
"""


def test_the_gpu_index_given_to_set_device_becomes_this_ranks_device() -> None:
    """``torch.cuda.set_device(args.gpu)`` goes, so ``args.gpu`` left as a device elsewhere
    would put those tensors on the same GPU on every rank (and beside the rank's own model)."""
    check_expectations(
        GPU_FLAG,
        [
            "-torch.cuda.set_device(args.gpu)",
            "offset = torch.zeros(1, device=accelerator.device)",
            "scale = torch.ones(1).to(accelerator.device)",
            "mask = torch.ones(1, device=accelerator.device)",
            "model = nn.Linear(4, 1)",
            "-x, y = x.cuda(args.gpu, non_blocking=True), y.cuda(args.gpu)",
        ],
    )


def test_a_fixed_device_keyword_where_no_accelerator_is_reachable_is_reported() -> None:
    body = (
        GPU_FLAG
        + '\n\nclass Noise(nn.Module):\n    def forward(self, x):\n        return x + torch.randn(1, device="cuda")\n'
    )
    code, lines = convert(body)
    assert 'return x + torch.randn(1, device="cuda")' in lines
    assert "#ACC904" in lines


def test_the_gpu_index_passed_on_to_a_call_is_reported_not_guessed() -> None:
    """``Net(args.gpu)``: whether the callee makes a device of it is not visible; shown or
    converted (``print``, ``str``), the index names no device."""
    body = GPU_FLAG.replace("nn.Linear(4, 1).cuda(args.gpu)", "nn.Linear(4, 1).cuda(args.gpu)\n    net = Net(args.gpu)")
    body = body.replace("    offset =", '    print(f"GPU {args.gpu}", str(args.gpu))\n    offset =')
    code, lines = convert(body)
    assert "net = Net(args.gpu)" in lines and lines.count("#ACC924") == 1


def test_an_int_gpu_option_taken_as_a_device_without_set_device_becomes_this_ranks_device() -> None:
    """``--gpu`` declared ``type=int`` and taken by ``.to(...)``/``device=`` is a GPU index though
    the script never gives it to ``torch.cuda.set_device``."""
    check_expectations(
        GPU_FLAG.replace("    torch.cuda.set_device(args.gpu)\n", ""),
        [
            "offset = torch.zeros(1, device=accelerator.device)",
            "scale = torch.ones(1).to(accelerator.device)",
            "model = nn.Linear(4, 1)",
        ],
    )


def test_a_gpu_index_followed_into_a_model_class_is_reported_at_the_move() -> None:
    """``Net(gpu)`` keeping it as ``self.gpu`` and moving its noise there: the model class does not
    reach the accelerator, so the move stays, reported where it is."""
    body = GPU_FLAG.replace("nn.Linear(4, 1).cuda(args.gpu)", "Net(args.gpu)") + (
        "\n\nclass Net(nn.Module):\n"
        "    def __init__(self, gpu):\n"
        "        super().__init__()\n"
        "        self.gpu = gpu\n"
        "        self.fc = nn.Linear(4, 1)\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x + torch.randn(4).to(self.gpu))\n"
    )
    code, lines = convert(body.replace("    torch.cuda.set_device(args.gpu)\n", ""))
    assert "return self.fc(x + torch.randn(4).to(self.gpu))" in lines
    assert "#ACC904" in lines


GPU_CONTEXT = """\
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu-index", type=int, default=0)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_default_device(device)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # the chosen GPU for everything below
    with torch.cuda.device(args.gpu_index):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
"""


def test_gpu_chosen_for_a_block_or_by_default_becomes_each_process_gpu() -> None:
    # ``with torch.cuda.device(0)`` and ``set_default_device("cuda")`` put every rank on GPU 0.
    code, lines = convert(GPU_CONTEXT)
    assert "torch.cuda.device" not in code
    assert "torch.set_default_device(accelerator.device)" in lines
    assert "    # the chosen GPU for everything below\n    for x, y in loader:" in code
    check_expectations(GPU_CONTEXT, ["-with torch.cuda.device(args.gpu_index):"])


TRY_GPU = """\
def try_gpu(i=0):
    if torch.cuda.device_count() >= i + 1:
        return torch.device(f"cuda:{i}")
    return torch.device("cpu")


def train(net, loader, device):
    net.to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=2)
    net = nn.Linear(4, 1)
    train(net, loader, {device})
"""


@pytest.mark.parametrize("device", ["try_gpu()", 'torch.device("cuda" if torch.cuda.is_available() else "cpu")'])
def test_a_device_picked_in_the_arguments_of_a_training_function_is_this_ranks(device: str) -> None:
    """d2l's ``train_ch6(net, ..., try_gpu())``: ``cuda:0`` on every rank, where the function moves
    the prepared model and the batches (it was left as it was)."""
    check_expectations(TRY_GPU.replace("{device}", device), ["train(net, loader, accelerator.device, accelerator)"])


SETTINGS_CLASS = """\
class Config:
    lr = 0.1
    device = "cuda" if torch.cuda.is_available() else "cpu"


def train(model, loader, optimizer):
    for x, y in loader:
        x, y = x.to(Config.device), y.to(Config.device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def main():
    cfg = Config()
    loader = DataLoader(TensorDataset(torch.ones(8, 4), torch.zeros(8, 1)), batch_size=2)
    model = nn.Linear(4, 1).to(cfg.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    train(model, loader, optimizer)
    state = torch.load("net.pt", map_location=cfg.device)


if __name__ == "__main__":
    main()
"""


def test_a_device_chosen_in_a_settings_class_is_rebound_to_this_ranks_device() -> None:
    # Left alone, Config.device stays "cuda" (GPU 0) on every rank: the batches moved there meet
    # rank 1's model on GPU 1 (reported ACC904 before, with nothing rewritten).
    code, lines = convert(SETTINGS_CLASS)
    main = code[code.index("def main():") :]
    assert "    accelerator = Accelerator()\n    Config.device = accelerator.device\n" in main
    assert "#ACC904" not in lines
    assert "x, y = x.to(Config.device), y.to(Config.device)" not in lines  # prepare places the batches
    assert "model = nn.Linear(4, 1)" in lines
    assert 'state = torch.load("net.pt", map_location=cfg.device)' in lines  # now this rank's device
    check_expectations(SETTINGS_CLASS, ["Config.device = accelerator.device", "#ACC102"])


DATACLASS_SETTINGS = (
    SETTINGS_CLASS.replace(
        'class Config:\n    lr = 0.1\n    device = "cuda" if torch.cuda.is_available() else "cpu"\n',
        '@dataclass\nclass Config:\n    lr: float = 0.1\n    device: str = "cuda" if torch.cuda.is_available() else "cpu"\n',
    )
    .replace("Config.device", "cfg.device")
    .replace("def train(model, loader, optimizer):", "def train(model, loader, optimizer, cfg):")
    .replace("train(model, loader, optimizer)", "train(model, loader, optimizer, cfg)")
)


def test_each_instance_of_a_settings_dataclass_is_rebound_once_it_exists() -> None:
    # A dataclass instance copies the default when built: rebinding the class attribute would not
    # reach cfg (silent before: an annotated field was not seen as a device at all).
    assert "@dataclass" in DATACLASS_SETTINGS and "cfg.device" in DATACLASS_SETTINGS.split("def main")[0]
    code, lines = convert(DATACLASS_SETTINGS)
    assert "    cfg = Config()\n    cfg.device = accelerator.device\n" in code
    assert "#ACC904" not in lines
    assert "x, y = x.to(cfg.device), y.to(cfg.device)" not in lines
    check_expectations(DATACLASS_SETTINGS, ["cfg.device = accelerator.device", "#ACC102"])


@pytest.mark.parametrize(
    "variant",
    [
        ("    cfg = Config()\n", '    cfg = Config()\n    cfg.device = "cuda:0"\n'),  # an instance's own
        ("    cfg = Config()\n", "    cfg = Config(lr=0.5)\n"),  # a dataclass built with arguments
        ("@dataclass\n", "@dataclass(frozen=True)\n"),  # no attribute can be set
    ],
)
def test_a_settings_class_whose_instances_hold_their_own_device_is_still_reported(variant: tuple[str, str]) -> None:
    body = (SETTINGS_CLASS if "cuda:0" in variant[1] else DATACLASS_SETTINGS).replace(*variant)
    assert body != SETTINGS_CLASS and body != DATACLASS_SETTINGS
    _, lines = convert(body)
    assert "Config.device = accelerator.device" not in lines
    # The instance's own "cuda:0" is a device selection, rewritten as any (ACC102); the dataclass
    # instance built with arguments is not rebound.
    assert ("cfg.device = accelerator.device" in lines) == ("cuda:0" in variant[1])
    assert "#ACC904" in lines


FEATURIZER = GLOBAL_DEVICE.replace(
    "\n\nclass Net",
    "\nwindow = torch.hann_window(4).to(device)\n\n\nclass Net",
).replace("return self.fc(x) + torch.zeros(1, device=device)", "return self.fc(x * window)")


def test_a_module_level_move_at_import_goes_where_the_accelerator_is_created() -> None:
    """``featurizer = LogMel().to(device)`` at import lands on GPU 0 on every rank; it is built on
    the CPU at import and moved in main() once the device is this rank's (not prepared)."""
    code, lines = convert(FEATURIZER)
    assert "window = torch.hann_window(4)" in lines
    main = code[code.index("def main():") :]
    assert main.startswith('def main():\n    """Train."""\n    global device, window\n')
    assert "    device = accelerator.device\n    window = window.to(device)\n" in main
    assert "#ACC904" not in lines
    assert "prepare(" not in code.split("window")[-1].split("\n")[0]
    check_expectations(FEATURIZER, ["window = window.to(device)", "#ACC102"])


def test_a_module_level_move_read_again_at_import_stays_reported() -> None:
    # Another module-level statement reads it at import, on the device it was moved to there.
    read = FEATURIZER.replace("\n\nclass Net", "\nscale = window.sum()\n\n\nclass Net", 1)
    _, lines = convert(read)
    assert "window = torch.hann_window(4).to(device)" in lines
    assert "window = window.to(device)" not in lines
    assert "#ACC904" in lines


def test_a_module_level_move_whose_name_main_binds_again_gets_no_global() -> None:
    # ``global window`` would turn main()'s own window into the module's.
    local = FEATURIZER.replace('    """Train."""\n', '    """Train."""\n    window = torch.ones(4)\n')
    code, lines = convert(local)
    assert "global device, window" not in code and "global device" in lines
    assert "window = window.to(device)" not in lines
    assert "#ACC904" in lines


DEVICE_STRING = """\
def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in loader:
        {read}
        model(x.to(device)).sum().backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    ("read", "converted"),
    [
        (
            "with torch.autocast(device_type=device, enabled=False):",
            "with torch.autocast(device_type=device.type, enabled=False):",
        ),
        ("with torch.autocast(device, enabled=False):", "with torch.autocast(device.type, enabled=False):"),
        ("dtype = torch.get_autocast_dtype(device)", "dtype = torch.get_autocast_dtype(device.type)"),
        (
            "on = torch.amp.GradScaler(device, enabled=False).is_enabled()",
            "on = torch.amp.GradScaler(device.type, enabled=False).is_enabled()",
        ),
        ("on_gpu = device == 'cuda'", "on_gpu = device.type == 'cuda'"),
        ("on_gpu = 'cuda' != device", "on_gpu = 'cuda' != device.type"),
        ("on_gpu = device in ('cuda', 'mps')", "on_gpu = device.type in ('cuda', 'mps')"),
        ("on_gpu = 'cuda' in device", "on_gpu = 'cuda' in device.type"),
        ("on_gpu = device.startswith('cuda')", "on_gpu = device.type.startswith('cuda')"),
        ("kind = device.split(':')[0]", "kind = device.type.split(':')[0]"),
    ],
    ids=[
        "device-type-keyword",
        "autocast-positional",
        "autocast-dtype",
        "grad-scaler",
        "equals",
        "literal-first",
        "in-a-tuple",
        "substring",
        "startswith",
        "split",
    ],
)
def test_a_device_string_read_as_a_string_reads_the_device_type(read: str, converted: str) -> None:
    # ``accelerator.device`` is a torch.device: ``torch.autocast(device_type=...)`` raises
    # ValueError for it, ``.startswith`` AttributeError, ``in`` TypeError, ``==`` is always False.
    body = DEVICE_STRING.replace("{read}", read + ("\n            pass" if read.endswith(":") else ""))
    check_expectations(body, ["device = accelerator.device", converted, "#ACC102"])


@pytest.mark.parametrize(
    "read",
    [
        "print(f'Using {device} device')",
        "noise = torch.randn(2, device=device)",
        "kind = device.type",
        "same = device == other",
        "model.to(device)",
    ],
    ids=["f-string", "device-keyword", "already-its-type", "compared-with-a-name", "a-move"],
)
def test_other_reads_of_a_device_string_keep_the_torch_device(read: str) -> None:
    body = DEVICE_STRING.replace("{read}", read)
    code, lines = convert(body)
    assert "device.type.type" not in code, code
    for changed in ("device.type ==", "device.type)", "{device.type}", "device=device.type"):
        assert changed not in code, code


@pytest.mark.parametrize(
    ("written", "fixed"),
    [
        ('"cuda"', True),
        ('"cuda:1"', True),
        ('torch.device("cuda", 1)', True),
        ("args.gpu", True),
        ('f"cuda:{local_rank}"', False),
        ('torch.device(f"cuda:{local_rank}")', False),
        ('"cpu"', False),
        ("device", False),
    ],
)
def test_a_fixed_gpu_is_one_answer(written: str, fixed: bool) -> None:
    """``engine/devices.py`` says what is the same GPU on every process; each part of the device
    rule (moves, ``device=`` keywords, ``torch.set_default_device``) asks it."""
    facts = ScriptFacts(imports={"torch": "torch"})
    assert names_fixed_gpu(cst.parse_expression(written), facts, indices={"args.gpu"}) is fixed


@pytest.mark.parametrize(
    ("written", "built", "moved_only"),
    [
        ("Net().to(device).eval()", "Net()", "Net().to(device).eval()"),
        ("Teacher().cuda().requires_grad_(False)", "Teacher()", "Teacher().cuda().requires_grad_(False)"),
        ("model.half().to(device)", "model", "model.half()"),
        ("model", "model", "model"),
    ],
)
def test_what_a_value_was_constructed_from_is_one_answer(written: str, built: str, moved_only: str) -> None:
    """``constructed`` looks through moves, casts and mode switches (every provider and rule that
    asks what was built); ``peel_moves`` through moves alone (a dtype cast is not a move)."""
    value = cst.parse_expression(written)
    code = cst.Module([]).code_for_node
    assert code(constructed(value)) == built
    assert code(peel_moves(value)) == moved_only
    assert (construction(value) is not None) is built.endswith(")")


# -- device names are scoped (the device owner's device_name_scopes) --------------------------------

SCOPED_NAMES = """\
import platform

import torch

device = torch.device("cpu")


def checksum(model):
    return sum(p.to(device).sum() for p in model.parameters())


def describe():
    dev = platform.node()
    return dev


class Meter:
    def __init__(self):
        self.device = torch.device("cpu")

    def add(self, x):
        return x.to(self.device)


class Trainer:
    def __init__(self):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def fit(self, x):
        return x.to(self.device)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = device
    return dev
"""


def test_written_parts_are_the_held_name_and_the_names_it_is_part_of() -> None:
    assert written_parts('config["gpus"][0]') == ['config["gpus"][0]', 'config["gpus"]', "config"]
    assert written_parts("self.args.device") == ["self.args.device", "self.args", "self"]
    assert written_parts("device") == ["device"]


def test_a_device_name_is_the_device_only_in_the_scopes_binding_it_so() -> None:
    from accel_convert.codemods.engine.analysis import analyse

    facts = analyse(cst.parse_module(SCOPED_NAMES))
    # main()'s own device and its alias; the trainer's self.device, in every method of the class.
    assert holds_device("device", facts, ("main",))
    assert holds_device("dev", facts, ("main",))
    assert holds_device("self.device", facts, ("Trainer", "fit"))
    # The module's CPU device, kept on purpose beside main()'s GPU: read in checksum() too.
    assert not holds_device("device", facts, ())
    assert not holds_device("device", facts, ("checksum",))
    # describe()'s dev is the machine's name; the meter's self.device is the CPU on purpose.
    assert not holds_device("dev", facts, ("describe",))
    assert not holds_device("self.device", facts, ("Meter", "add"))


def test_a_cpu_device_is_the_device_where_the_script_chooses_no_gpu() -> None:
    from accel_convert.codemods.engine.analysis import analyse

    facts = analyse(
        cst.parse_module('import torch\n\ndevice = torch.device("cpu")\n\n\ndef f(x):\n    return x.to(device)\n')
    )
    assert holds_device("device", facts, ())
    assert holds_device("device", facts, ("f",))
