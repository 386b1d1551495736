"""What ``accel-launch`` checks before it imports torch: the options (an unknown one, with a "did you
mean" for Accelerate's spellings and for typos; a value torchrun would only refuse with a
traceback), the script, and what the script's text says about how it runs on several processes.

Everything here answers in well under a second: torch's import takes 5 to 9 seconds on a loaded
machine, and a mistyped option deserves its one line at once. torchrun's option names are read
from the text of the installed ``torch/distributed/run.py`` (found without importing torch), so a
newer torch's options are known too; a fixed list stands in where that file cannot be read.

Standard library only.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path


class LaunchError(Exception):
    """A reason to refuse the command in one line (exit 2)."""


#: torchrun's options in torch 2.2 to 2.13 (both spellings), for when torch's file cannot be read.
KNOWN_TORCHRUN_OPTIONS = frozenset(
    f"--{name}"
    for base in (
        "nnodes",
        "nproc-per-node",
        "rdzv-backend",
        "rdzv-endpoint",
        "rdzv-id",
        "rdzv-conf",
        "standalone",
        "max-restarts",
        "monitor-interval",
        "start-method",
        "role",
        "module",
        "no-python",
        "run-path",
        "log-dir",
        "redirects",
        "tee",
        "local-ranks-filter",
        "node-rank",
        "master-addr",
        "master-port",
        "local-addr",
        "logs-specs",
        "numa-binding",
        "signals-to-handle",
        "shutdown-timeout",
        "virtual-local-rank",
        "event-log-handler",
        "duplicate-stdout-filters",
        "duplicate-stderr-filters",
    )
    for name in (base, base.replace("-", "_"))
) | {"-m", "-r", "-t", "-h", "--help"}

#: accel-launch's own options (for "did you mean").
OWN_OPTIONS = (
    "--config-file",
    "--mixed-precision",
    "--cpu?",
    "--env",
    "--version",
    "--fsdp",
    "--print-config",
)

#: What ``accelerate launch`` users type, and what accel-launch calls it.
ACCELERATE_HABITS = {
    "--num_processes": "did you mean --nproc-per-node N (processes on each machine; Accelerate's --num_processes counts "
    "every machine's)?",
    "--multi_gpu": "not needed: accel-launch starts one process per GPU by default (--nproc-per-node N for another count)",
    "--num_machines": "did you mean --nnodes N?",
    "--machine_rank": "did you mean --node-rank R?",
    "--main_process_ip": "did you mean --master-addr HOST?",
    "--main_process_port": "did you mean --master-port PORT?",
    "--use_cpu": "did you mean --cpu?",
    "--config_file": "did you mean --config-file PATH (accel-launch's own TOML settings, written by `accel-launch config`; "
    "Accelerate's YAML file is not read)?",
    "--gpu_ids": "choose the GPUs with CUDA_VISIBLE_DEVICES=0,1 accel-launch ...",
}

#: ``accel-launch WORD`` where WORD is not a file: the command that was meant.
SUBCOMMAND_HABITS = {
    "env": "accel-launch --env",
    "launch": "accel-launch SCRIPT (accel-launch is the launcher: no `launch` word)",
}


def _habit(name: str) -> str | None:
    """What to type instead of an Accelerate option, in either spelling (``--num-processes``)."""
    if not name.startswith("--"):
        return None
    return ACCELERATE_HABITS.get("--" + name[2:].replace("-", "_"))


def torchrun_options() -> frozenset[str]:
    """The option names in the installed torch's ``torch/distributed/run.py``, read as text
    (``find_spec("torch")`` locates the package without importing it), and the fixed list."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return KNOWN_TORCHRUN_OPTIONS
    try:
        text = (Path(spec.origin).parent / "distributed" / "run.py").read_text(encoding="utf-8")
    except OSError:
        return KNOWN_TORCHRUN_OPTIONS
    return KNOWN_TORCHRUN_OPTIONS | frozenset(re.findall(r"\"(--?[A-Za-z][\w-]*)\"", text))


def is_known(name: str, known: frozenset[str]) -> bool:
    """An option torchrun's parser takes: by name, as the unambiguous start of one (argparse
    accepts ``--stand``), or a short option with its value attached (``-r3``)."""
    if name in known:
        return True
    if not name.startswith("--"):
        return name[:2] in known
    return any(option.startswith(name) for option in known if option.startswith("--"))


def option_names(torchrun: Sequence[str], is_switch: Callable[[str], bool]) -> Iterator[tuple[str, str | None]]:
    """Each option of torchrun's part of the command line, with its value (None for a switch)."""
    index = 0
    while index < len(torchrun):
        name, has_value, value = torchrun[index].partition("=")
        if has_value:
            yield name, value
        elif is_switch(name) or index + 1 >= len(torchrun):
            yield name, None
        else:
            index += 1
            yield name, torchrun[index]
        index += 1


def unknown_option_message(name: str, known: frozenset[str]) -> str:
    """``unknown option --num_processes; did you mean --nproc-per-node N ...?``."""
    habit = _habit(name)
    if habit is not None:
        return f"unknown option {name}; {habit}"
    candidates = sorted({option.replace("_", "-") for option in known if option.startswith("--")} | set(OWN_OPTIONS))
    close = difflib.get_close_matches(name.replace("_", "-"), candidates, n=1, cutoff=0.75)
    hint = f"did you mean {close[0]}?" if close else "accel-launch --help lists the options"
    return f"unknown option {name}; {hint}"


def _positive(value: str) -> bool:
    return value.isdigit() and int(value) >= 1


#: Device kinds torchrun resolves ``--nproc-per-node`` from, besides a number.
NPROC_WORDS = ("gpu", "cpu", "auto", "xpu", "npu", "hpu", "mlu", "musa")


def _value_problem(option: str, value: str) -> str | None:
    """Why torchrun would refuse ``value`` for ``option`` (with a traceback, after torch loaded)."""
    if option == "--nproc-per-node" and not (_positive(value) or value in NPROC_WORDS):
        return f"a number of processes (1 or more), or one of {', '.join(NPROC_WORDS[:3])}"
    if option == "--nnodes" and not re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", value):
        return "a number of machines, or MIN:MAX"
    if option in ("--node-rank", "--max-restarts") and not value.isdigit():
        return "a number, 0 or more"
    if option == "--master-port" and not (value.isdigit() and 1 <= int(value) <= 65535):
        return "a TCP port, 1 to 65535"
    return None


def check_torchrun_options(torchrun: Sequence[str], is_switch: Callable[[str], bool]) -> None:
    """One line (LaunchError) for the first unknown option or wrong value, before torch loads."""
    known = torchrun_options()
    for name, value in option_names(torchrun, is_switch):
        if _habit(name) is not None or not is_known(name, known):
            raise LaunchError(unknown_option_message(name, known))
        problem = None if value is None else _value_problem(name.replace("_", "-"), value)
        if problem is not None:
            raise LaunchError(f"{name} {value}: {problem}")


def missing_script_message(script: str) -> str:
    """``nope.py: no such file``, or the command a known word stands for."""
    habit = SUBCOMMAND_HABITS.get(script)
    if habit is not None:
        return f"{script}: no such file; did you mean {habit}?"
    path = Path(script)
    return f"{script}: no such file" if not path.exists() else f"{script}: not a file"


# -- what the script's text says -----------------------------------------------------------------

#: An import of something that makes the processes work together.
_DISTRIBUTED_IMPORT = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+(?:accel_convert\.runtime|accel_convert[ \t]+import[ \t]+runtime|accelerate\b"
    r"|torch\.distributed|torch[ \t]+import[ \t]+(?:[\w, \t(]*\b)?distributed\b)",
    re.MULTILINE,
)
_ACCELERATE_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]+accelerate\b", re.MULTILINE)
#: Reading more than this of a script is not worth it for a hint.
SCRIPT_READ_LIMIT = 4 * 2**20


def read_script_text(script: str) -> str | None:
    """The script's text (its start, for a huge one); None when it cannot be read."""
    try:
        with open(script, encoding="utf-8", errors="replace") as handle:
            return handle.read(SCRIPT_READ_LIMIT)
    except OSError:
        return None


def runs_as_copies(text: str) -> bool:
    """True when nothing in the script makes its processes cooperate: no import of
    accel_convert.runtime, accelerate or torch.distributed (nor ``torch.distributed.`` used by
    its dotted name). Launched N times, it trains N separate copies."""
    return _DISTRIBUTED_IMPORT.search(text) is None and "torch.distributed." not in text


def imports_accelerate(text: str) -> bool:
    """True for a ``--target accelerate`` conversion (it imports Accelerate itself)."""
    return _ACCELERATE_IMPORT.search(text) is not None
