"""``accel-launch``: torchrun, with defaults for training converted scripts and a saved configuration.

Every torchrun flag (``--nnodes``, ``--node-rank``, ``--rdzv-endpoint``, ``--master-addr``...) is
passed through untouched, so launching, multi-node included, is torchrun's. What accel-launch adds:

- ``--nproc-per-node`` defaults to the number of GPUs (1, with a hint, on a CPU-only machine);
  torchrun's own default is always 1.
- ``accel-launch config`` saves launch settings (processes per machine, machines, master address
  and port, mixed precision...) in a small TOML file the launcher reads, so they are not retyped.
  Precedence, highest first: the command line, environment variables (torchrun's ``PET_*``,
  ``ACCELERATE_*``), the saved file, the defaults.
- ``--mixed-precision`` and ``--cpu``, handed to the workers as Accelerate's launcher hands them
  (``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_USE_CPU``).
- ``--env`` (a report for bug reports) and ``--version``, which work without torch.
- ``--fsdp`` (Accelerate: ``--use_fsdp``) and the ``--fsdp_*`` options (any of them also turns
  FSDP on) train every ``Accelerator()`` of the script with FSDP2 instead of DDP, as Accelerate's
  launcher does: they become ``ACCELERATE_USE_FSDP``/``FSDP_*`` variables that
  :class:`runtime.fsdp.FullyShardedDataParallelPlugin` reads; a bad value stops the launch with
  one line (exit code 2) before any worker starts.

- Under Slurm, Kubeflow's training operator or SkyPilot, the job's shape is read from the
  scheduler's variables (:mod:`runtime.schedulers`), so one command runs on every machine;
  ``--print-config slurm|kubeflow|skypilot`` writes the job file that runs it.
- Clean edges: an unknown option (with a "did you mean" for Accelerate's spellings), a wrong
  value, a missing script are one line and exit code 2, before torch is imported
  (:mod:`runtime.launch_checks`); ``OMP_NUM_THREADS=1`` per process is said in the start line
  instead of torchrun's banner; a worker's failure is one line naming its rank, its error and
  where its output is, instead of the launcher's traceback and torchrun's failure box; a
  script that nothing makes cooperate, started on several processes, is warned about; a script
  that imports Accelerate gets ``ACCELERATE_USE_CPU=1`` on a machine without GPUs.

accel-launch's own options go before the script, with torchrun's: what follows the script is
the script's (an RL script's ``--env CartPole-v1`` stays its own).

torch is imported only to launch (and for the report's torch lines): on a machine without it, a
launch says in one line which extra to install.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import logging
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from accel_convert.runtime.launch_checks import (
    LaunchError,
    check_torchrun_options,
    imports_accelerate,
    missing_script_message,
    read_script_text,
    runs_as_copies,
)
from accel_convert.runtime.schedulers import (
    JOB_WRITERS,
    SCHEDULERS,
    JobShape,
    SchedulerError,
    SchedulerJob,
    read_scheduler,
)

EXIT_OK, EXIT_WORKER_FAILED, EXIT_USAGE, EXIT_NO_TORCH = 0, 1, 2, 3
RUNTIME_EXTRA = "pip install 'accel-convert[runtime]'"
NO_TORCH = f"torch is not installed here; install the runtime extra on this machine: {RUNTIME_EXTRA}"

#: torchrun reads its flags' defaults from ``PET_<FLAG>`` environment variables.
_PET = "PET_"
CONFIG_ENV = "ACCEL_LAUNCH_CONFIG"

#: torchrun's options that take no value (the rest take one): how the script is told apart from
#: a flag's value without importing torch. At launch time torch's own parser adds any newer ones.
TORCHRUN_SWITCHES = frozenset(
    {
        "-h",
        "--help",
        "--standalone",
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)

USAGE = """\
usage: accel-launch [accel-launch options] [torchrun options] SCRIPT [SCRIPT ARGS...]
       accel-launch config [--no-input] [--show] [--config-file PATH] [setting options]
       accel-launch test [launch options]
       accel-launch merge-weights CHECKPOINT_DIR OUTPUT [--unsafe_serialization] [--remove_checkpoint_dir]
       accel-launch --print-config slurm|kubeflow|skypilot [launch options] SCRIPT [SCRIPT ARGS...]
       accel-launch --env | --version | --help"""

HELP = f"""\
{USAGE}

torchrun (torch.distributed.run) for training converted scripts: every torchrun option below
passes through untouched; accel-launch adds defaults, a saved configuration and reports.

Added by accel-launch (before SCRIPT; what follows SCRIPT is the script's own):
  --nproc-per-node N     defaults to the number of GPUs (1 on a CPU-only machine), not torchrun's 1
  --config-file PATH     launch settings to read (default: ${CONFIG_ENV}, else
                         ~/.cache/accel-convert/launch.toml when it exists)
  --mixed-precision {{no,fp16,bf16}}
                         what Accelerator() uses in the workers when the script does not say
  --cpu                  train on CPU processes (Gloo) even where there are GPUs
  --fsdp                 shard the model with FSDP2 instead of DDP (also: --use_fsdp); the
                         --fsdp_<option> VALUE options set its fields (any of them turns it on):
                         version, sharding_strategy, reshard_after_forward, auto_wrap_policy,
                         transformer_layer_cls_to_wrap, min_num_params, offload_params,
                         state_dict_type, activation_checkpointing,
                         activation_checkpointing_offload, cpu_ram_efficient_loading
  --env                  print versions, devices, backends, launch variables and the saved
                         configuration (for bug reports), then exit; works without torch
  --version              print accel-launch's version, then exit
  --print-config {{slurm,kubeflow,skypilot}}
                         write a job file that runs this command on that scheduler (an sbatch
                         script, a PyTorchJob manifest, a SkyPilot task) to stdout, then exit
  config                 save launch settings: accel-launch config --help
  test                   launch a short self-check with these settings (ranks, devices, an
                         all-reduce and a gather, a sharded loader, a DDP step, a checkpoint);
                         ends with one line: "2 processes on 1 node, gloo, cpu: all checks passed"
  merge-weights          merge a sharded FSDP checkpoint into one weights file (one process,
                         no launch): accel-launch merge-weights --help

Under Slurm (srun accel-launch SCRIPT), Kubeflow's training operator or SkyPilot, the machines,
this machine's rank, the rendezvous address and the GPUs per machine come from the scheduler's
variables: the same command runs unchanged on every machine.

Precedence, highest first: the command line, environment variables (PET_*, ACCELERATE_*), a
scheduler's variables, the saved configuration, the defaults.

Exit codes: 0 success; 1: a worker failed (one line names its rank and error); 2: usage error
(bad option, bad configuration file); 3: torch is not installed; 128+N: stopped by signal N
(143: SIGTERM, passed on to every worker)."""


# -- the saved configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One saved launch setting: its key in the file, the question ``config`` asks, and how it
    reaches the launch (a torchrun flag, or an environment variable for the workers)."""

    key: str
    question: str
    default: str
    check: Callable[[str], Any]
    flag: str | None = None
    env: str | None = None
    #: Asked by ``accel-launch config`` (the others are set through their options only).
    asked: bool = True


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be at least 1")
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be 0 or more")
    return number


def _nproc(value: str) -> int | str:
    return value if value in ("gpu", "cpu", "auto") else _positive_int(value)


def _nnodes(value: str) -> str:
    if not re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", value):
        raise ValueError("a number of machines, or MIN:MAX")
    return value


def _port(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 65535:
        raise ValueError("a TCP port, 1 to 65535")
    return number


def _precision(value: str) -> str:
    if value not in ("no", "fp16", "bf16"):
        raise ValueError("one of no, fp16, bf16")
    return value


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("yes", "y", "true", "1", "on"):
        return True
    if lowered in ("no", "n", "false", "0", "off"):
        return False
    raise ValueError("yes or no")


def _text(value: str) -> str:
    if not value or any(character.isspace() for character in value):
        raise ValueError("a value without spaces")
    return value


SETTINGS = (
    Setting("nproc_per_node", "Processes per machine (a number, or gpu/cpu/auto)", "", _nproc, "--nproc-per-node"),
    Setting("nnodes", "Machines (a number, or MIN:MAX for an elastic job)", "1", _nnodes, "--nnodes"),
    Setting("node_rank", "This machine's rank (0 on the master)", "0", _non_negative_int, "--node-rank"),
    Setting("master_addr", "Master address (rank 0's machine)", "127.0.0.1", _text, "--master-addr"),
    Setting("master_port", "Master port", "29500", _port, "--master-port"),
    Setting("mixed_precision", "Mixed precision (no, fp16, bf16)", "no", _precision, env="ACCELERATE_MIXED_PRECISION"),
    Setting(
        "cpu", "Train on CPU processes even where there are GPUs (yes/no)", "no", _boolean, env="ACCELERATE_USE_CPU"
    ),
    Setting("rdzv_backend", "Rendezvous backend", "", _text, "--rdzv-backend", asked=False),
    Setting("rdzv_endpoint", "Rendezvous endpoint (HOST:PORT)", "", _text, "--rdzv-endpoint", asked=False),
    Setting("max_restarts", "Restarts after a worker failure", "", _non_negative_int, "--max-restarts", asked=False),
)
SETTINGS_BY_KEY = {setting.key: setting for setting in SETTINGS}


def default_config_path() -> Path:
    """``$ACCEL_LAUNCH_CONFIG``, else ``launch.toml`` in accel-convert's cache folder."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "accel-convert" / "launch.toml"


def read_config(path: Path) -> dict[str, Any]:
    """The settings saved in ``path``, checked; an unreadable or wrong file is a LaunchError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise LaunchError(f"{path}: cannot read the launch configuration ({error.strerror})") from None
    try:
        raw = parse_toml(text)
    except ValueError as error:
        raise LaunchError(f"{path}: not a valid launch configuration ({error})") from None
    settings: dict[str, Any] = {}
    for key, value in raw.items():
        setting = SETTINGS_BY_KEY.get(key)
        if setting is None:
            raise LaunchError(f"{path}: unknown setting {key!r} (known: {', '.join(SETTINGS_BY_KEY)})")
        shown = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        try:
            settings[key] = setting.check(shown)
        except ValueError as error:
            raise LaunchError(f"{path}: {key} = {value!r}: {error}") from None
    return settings


def parse_toml(text: str) -> dict[str, Any]:
    """The file's top-level ``key = value`` pairs: ``tomllib`` where the standard library has it
    (3.11+), else the subset ``accel-launch config`` writes (numbers, strings, booleans, comments)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return parse_flat_toml(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(str(error)) from None


FLAT_TOML_LINE = re.compile(r"\s*([A-Za-z0-9_-]+)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|true|false|[+-]?\d+(?:\.\d+)?)\s*(#.*)?")


def parse_flat_toml(text: str) -> dict[str, Any]:
    """The flat TOML ``accel-launch config`` writes, read with the standard library alone."""
    import json

    values: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = FLAT_TOML_LINE.fullmatch(line)
        if match is None:
            raise ValueError(f"line {number}: expected key = value")
        values[match.group(1)] = json.loads(match.group(2))
    return values


def config_text(settings: Mapping[str, Any]) -> str:
    """The settings as the small TOML file ``accel-launch config`` writes."""
    import json

    lines = [
        "# accel-launch's saved launch settings, written by `accel-launch config`.",
        "# Options on the command line, then environment variables, override them.",
    ]
    for setting in SETTINGS:
        if setting.key in settings:
            value = settings[setting.key]
            shown = ("true" if value else "false") if isinstance(value, bool) else json.dumps(value)
            lines.append(f"{setting.key} = {shown}")
    return "\n".join(lines) + "\n"


def write_config(path: Path, settings: Mapping[str, Any]) -> None:
    """Write the file whole or not at all (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(config_text(settings))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def config_command(argv: Sequence[str]) -> int:
    """``accel-launch config``: ask for each setting (the saved value, else the default, on Enter),
    or with ``--no-input`` take the options given and keep the rest; write the file."""
    parser = argparse.ArgumentParser(
        prog="accel-launch config",
        description="Save launch settings that accel-launch reads, so torchrun options are not retyped. "
        "Without --no-input, asks for each setting not given as an option (Enter keeps the value shown).",
    )
    parser.add_argument(
        "--config-file", type=Path, help=f"where to write (default: ${CONFIG_ENV}, else {default_config_path()})"
    )
    parser.add_argument(
        "--no-input", action="store_true", help="ask nothing: the options given, the rest as saved or default"
    )
    parser.add_argument("--show", action="store_true", help="print the saved settings and where they are, then exit")
    for setting in SETTINGS:
        parser.add_argument(
            f"--{setting.key.replace('_', '-')}", dest=setting.key, metavar="VALUE", help=setting.question
        )
    options = parser.parse_args(list(argv))
    path = options.config_file or default_config_path()
    saved = read_config(path) if path.is_file() else {}
    if options.show:
        print(f"# {path}" + ("" if saved else " (no saved settings)"))
        if saved:
            print(config_text(saved), end="")
        return EXIT_OK
    settings: dict[str, Any] = dict(saved)
    for setting in SETTINGS:
        given = getattr(options, setting.key)
        if given is not None:
            try:
                settings[setting.key] = setting.check(given)
            except ValueError as error:
                raise LaunchError(f"--{setting.key.replace('_', '-')} {given}: {error}") from None
        elif setting.asked and not options.no_input:
            answer = ask(setting, saved.get(setting.key))
            if answer is not None:
                settings[setting.key] = answer
    write_config(path, settings)
    print(f"accel-launch: launch settings written to {path}")
    return EXIT_OK


def ask(setting: Setting, saved: Any) -> Any:
    """One question on stdin; Enter (or the end of input) keeps the value shown; a wrong answer
    is explained and asked again."""
    if saved is None:
        shown = setting.default
    else:
        shown = ("yes" if saved else "no") if isinstance(saved, bool) else str(saved)
    while True:
        print(f"{setting.question} [{shown or 'not set'}]: ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            print()
        answer = line.strip() or shown
        if not answer:
            return None
        try:
            return setting.check(answer)
        except ValueError as error:
            print(f"  {answer!r}: {error}")
            if not line:
                raise LaunchError(f"{setting.key}: {answer!r} is not valid and the input ended") from None


# -- the command line ----------------------------------------------------------------------------


@dataclass
class CommandLine:
    """The launcher's part of the command line, split from the script's."""

    torchrun: list[str] = field(default_factory=list)  # torchrun's options, ours removed
    script: list[str] = field(default_factory=list)  # the script (or module) and its arguments
    env: bool = False
    version: bool = False
    help: bool = False
    cpu: bool = False
    config_file: Path | None = None
    mixed_precision: str | None = None
    #: What ``--fsdp`` and the ``--fsdp_*`` options ask for, as the workers' environment.
    fsdp: dict[str, str] = field(default_factory=dict)
    #: ``--print-config slurm|kubeflow|skypilot``: write that scheduler's job file, launch nothing.
    print_config: str | None = None


def torchrun_switches() -> frozenset[str]:
    """Options of this torch's torchrun that take no value (newer torches may add some)."""
    from torch.distributed.run import get_args_parser

    found = {option for action in get_args_parser()._actions if action.nargs == 0 for option in action.option_strings}
    return TORCHRUN_SWITCHES | found


def split_command_line(argv: Sequence[str], switches: frozenset[str] = TORCHRUN_SWITCHES) -> CommandLine:
    """Take accel-launch's options out of the part before the script; keep torchrun's in order."""
    line = CommandLine()
    index = 0
    while index < len(argv):
        token = argv[index]
        name, has_value, value = token.partition("=")
        if not token.startswith("-") or token == "-":
            line.script = list(argv[index:])
            break
        if _own_switch(line, token):
            pass
        elif fsdp_option(name) is not None or name in OWN_VALUE_OPTIONS:
            if not has_value:
                index += 1
                if index >= len(argv):
                    raise LaunchError(f"{name} needs a value")
                value = argv[index]
            _own_value(line, name, value)
        else:
            line.torchrun.append(token)
            if not has_value and not is_switch(name, switches) and index + 1 < len(argv):
                index += 1
                line.torchrun.append(argv[index])
        index += 1
    return line


def _own_switch(line: CommandLine, token: str) -> bool:
    """Set what one of accel-launch's own switches asks for; False for any other token."""
    if token in ("--env", "--version"):
        setattr(line, token[2:], True)
    elif token in ("-h", "--help"):
        line.help = True
    elif token == "--cpu":
        line.cpu = True
    elif token in ("--fsdp", "--use_fsdp", "--use-fsdp"):
        line.fsdp["ACCELERATE_USE_FSDP"] = "true"
    else:
        return False
    return True


#: accel-launch's own options that take a value (Accelerate's underscore spelling of
#: ``--mixed_precision`` too: it means the same here).
OWN_VALUE_OPTIONS = ("--config-file", "--mixed-precision", "--mixed_precision", "--print-config")


def _own_value(line: CommandLine, name: str, value: str) -> None:
    option = fsdp_option(name)
    if option is not None:
        line.fsdp["ACCELERATE_USE_FSDP"] = "true"
        line.fsdp[FSDP_OPTIONS[option]] = value
    elif name == "--config-file":
        line.config_file = Path(value)
    elif name == "--print-config":
        if value not in SCHEDULERS:
            raise LaunchError(f"--print-config {value}: one of {', '.join(SCHEDULERS)}")
        line.print_config = value
    else:
        try:
            line.mixed_precision = _precision(value)
        except ValueError as error:
            raise LaunchError(f"--mixed-precision {value}: {error}") from None


#: ``--fsdp_<option>`` -> the variable Accelerate's launcher exports for it.
FSDP_OPTIONS = {
    "version": "FSDP_VERSION",
    "sharding_strategy": "FSDP_SHARDING_STRATEGY",
    "reshard_after_forward": "FSDP_RESHARD_AFTER_FORWARD",
    "auto_wrap_policy": "FSDP_AUTO_WRAP_POLICY",
    "transformer_layer_cls_to_wrap": "FSDP_TRANSFORMER_CLS_TO_WRAP",
    "min_num_params": "FSDP_MIN_NUM_PARAMS",
    "offload_params": "FSDP_OFFLOAD_PARAMS",
    "state_dict_type": "FSDP_STATE_DICT_TYPE",
    "activation_checkpointing": "FSDP_ACTIVATION_CHECKPOINTING",
    "activation_checkpointing_offload": "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
    "cpu_ram_efficient_loading": "FSDP_CPU_RAM_EFFICIENT_LOADING",
}


def fsdp_option(name: str) -> str | None:
    """``reshard_after_forward`` for ``--fsdp_reshard_after_forward`` or
    ``--fsdp-reshard-after-forward``; None for anything else."""
    for prefix in ("--fsdp_", "--fsdp-"):
        if name.startswith(prefix):
            option = name[len(prefix) :].replace("-", "_")
            return option if option in FSDP_OPTIONS else None
    return None


def check_fsdp_environment(variables: dict[str, str]) -> None:
    """Build the plugin the workers will build, here, so a bad value fails once and early."""
    from accel_convert.runtime.fsdp import FullyShardedDataParallelPlugin

    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        FullyShardedDataParallelPlugin()
    except ValueError as error:
        raise LaunchError(str(error)) from None
    finally:
        os.environ.clear()
        os.environ.update(saved)


def is_switch(option: str, switches: frozenset[str]) -> bool:
    """Whether a torchrun option takes no value. ``-r3`` carries its value; an abbreviation
    (argparse takes ``--stand`` for ``--standalone``) is the switch it starts."""
    if option in switches:
        return True
    if not option.startswith("--"):
        return len(option) > 2  # a short option with its value attached
    return any(switch.startswith(option) for switch in switches if switch.startswith("--"))


def torch_importable() -> str | None:
    """None when torch imports; else why not."""
    try:
        import torch  # noqa: F401
    except ImportError as error:
        return str(error) or type(error).__name__
    except OSError as error:  # a broken install: a shared library that does not load
        return f"{type(error).__name__}: {error}"
    return None


def default_nproc_per_node() -> tuple[int, str | None]:
    """One worker per GPU; on a CPU-only machine one worker and a hint about ``--nproc-per-node``."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        return gpus, None
    return 1, ("accel-launch: no GPU found, starting 1 process; pass --nproc-per-node N for N CPU workers (Gloo)")


def _user_chose_nproc(argv: Sequence[str]) -> bool:
    # Only the launcher's own flags count, parsed as torchrun parses them (values and all).
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.set_defaults(nproc_per_node=None)
    args = parser.parse_args(list(argv))
    return args.nproc_per_node is not None or f"{_PET}NPROC_PER_NODE" in os.environ


def build_torchrun_args(argv: Sequence[str]) -> list[str]:
    """torchrun's argument list: the user's, with ``--nproc-per-node`` filled in if missing."""
    argv = list(argv)
    if _user_chose_nproc(argv):
        return argv
    count, hint = default_nproc_per_node()
    if hint:
        print(hint, file=sys.stderr)
    return ["--nproc-per-node", str(count), *argv]


def saved_settings(line: CommandLine) -> tuple[Path | None, dict[str, Any]]:
    """The configuration this launch reads: ``--config-file`` (which must exist), else
    ``$ACCEL_LAUNCH_CONFIG`` (which must exist), else the default file when there is one."""
    if line.config_file is not None or os.environ.get(CONFIG_ENV):
        path = line.config_file or default_config_path()
        if not path.is_file():
            raise LaunchError(f"{path}: no such launch configuration (write one with: accel-launch config)")
        return path, read_config(path)
    path = default_config_path()
    return (path, read_config(path)) if path.is_file() else (None, {})


def apply_settings(
    line: CommandLine, settings: Mapping[str, Any], environ: MutableMapping[str, str], decided: Sequence[str] = ()
) -> list[str]:
    """The torchrun options the saved settings add in front of the user's (argparse keeps the last
    value given, so the command line wins); environment variables already set, and the flags a
    scheduler's variables ``decided``, win over the file too. The workers' variables (mixed
    precision, CPU) are set in ``environ``."""
    added: list[str] = []
    for setting in SETTINGS:
        if setting.key not in settings:
            continue
        value = settings[setting.key]
        if setting.flag is not None and f"{_PET}{setting.key.upper()}" not in environ:
            # Given on the command line too: that value is used, so the file's is not added
            # (nor shown in the "from FILE" line, which says what the file decided).
            if not _given(setting.flag, [*line.torchrun, *decided]):
                added += [setting.flag, str(value)]
        elif setting.env is not None and setting.env not in environ:
            if setting.key == "cpu":
                if value:
                    environ[setting.env] = "1"
            else:
                environ[setting.env] = str(value)
    if line.mixed_precision is not None:
        environ["ACCELERATE_MIXED_PRECISION"] = line.mixed_precision
    if line.cpu:
        environ["ACCELERATE_USE_CPU"] = "1"
    return added


def _given(flag: str, options: Sequence[str]) -> bool:
    """Whether torchrun's options name ``flag`` (``--nproc-per-node 4``, ``--nproc_per_node=4``)."""
    wanted = flag.replace("_", "-")
    return any(option.partition("=")[0].replace("_", "-") == wanted for option in options if option.startswith("--"))


def launch(line: CommandLine) -> None:
    """Check the command line and the script (before torch loads: a mistake is answered at
    once), read the saved settings and the scheduler's variables, hand everything to torchrun."""
    path, settings = saved_settings(line)  # a wrong file is reported before torch loads
    if line.print_config:  # the job runs elsewhere: the script need not be here
        print(job_file(line, settings), end="")
        return
    if line.fsdp:  # the FSDP values are checked by the plugin the workers build (it needs torch)
        if torch_importable() is not None:
            fail(NO_TORCH, EXIT_NO_TORCH)
        check_fsdp_environment(line.fsdp)
    check_script_exists(line)
    script_text = None if runs_other_than_a_file(line) else read_script_text(line.script[0])
    job, from_scheduler = scheduler_flags(line, os.environ)  # a wrong variable: before torch too
    if torch_importable() is not None:
        fail(NO_TORCH, EXIT_NO_TORCH)
    # With torch at hand, its own parser says which options take no value.
    switches = torchrun_switches()
    if switches != TORCHRUN_SWITCHES:
        line = _resplit(line, switches)
    added = apply_settings(line, settings, os.environ, decided=from_scheduler)
    if added:
        print(f"accel-launch: from {path}: {' '.join(added)}", file=sys.stderr)
    os.environ.update(line.fsdp)  # the workers inherit them
    argv = build_torchrun_args([*added, *from_scheduler, *line.torchrun, *line.script])
    run_torchrun(argv, Launch(script=line.script[0], text=script_text, job=job))


def runs_other_than_a_file(line: CommandLine) -> bool:
    """A module (``-m``) or a program (``--no-python``): torchrun's to find, not a file here."""
    return bool({"-m", "--module", "--no-python", "--no_python"} & set(line.torchrun))


def scheduler_flags(line: CommandLine, environ: Mapping[str, str]) -> tuple[SchedulerJob | None, list[str]]:
    """The job's shape as the scheduler's variables give it (Slurm, Kubeflow, SkyPilot), as
    torchrun flags: those the command line gives itself are left out (the command line wins)."""
    try:
        job = read_scheduler(environ)
    except SchedulerError as error:
        raise LaunchError(str(error)) from None
    if job is None:
        return None, []
    nnodes = dict(_flag_values(line.torchrun)).get("--nnodes")
    if nnodes is not None:  # the command line's job shape, not the scheduler's
        job = dataclasses.replace(job, nnodes=nnodes)
    flags: list[str] = []
    for flag, value in job.flags().items():
        # torchrun's own variable for the flag (PET_NNODES...) wins too.
        if not _given(flag, line.torchrun) and f"{_PET}{flag[2:].replace('-', '_').upper()}" not in environ:
            flags += [flag, value]
    return job, flags


def _resplit(line: CommandLine, switches: frozenset[str]) -> CommandLine:
    """torchrun's part and the script's split again (accel-launch's own options were taken
    out already, and are kept: the FSDP ones too)."""
    again = split_command_line([*line.torchrun, *line.script], switches)
    return dataclasses.replace(line, torchrun=again.torchrun, script=again.script)


# -- running torchrun ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What the start line and the warnings need to know about this launch."""

    script: str
    text: str | None  # the script's text; None for a module or a program
    job: SchedulerJob | None = None


def run_torchrun(argv: Sequence[str], what: Launch) -> None:
    """torchrun's ``run`` on ``argv``, with one line instead of a traceback for every way it ends
    badly: a refused option, a worker's failure (which rank, its error, where its output is),
    a signal to the launcher."""
    from torch.distributed import DistError
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    parser = torchrun.get_args_parser()
    parser.error = _refuse  # type: ignore[method-assign]
    args = parser.parse_args(list(argv))
    try:
        processes = torchrun.determine_local_world_size(args.nproc_per_node)
    except ValueError as error:
        raise LaunchError(f"--nproc-per-node {args.nproc_per_node}: {error}") from None
    notes = prepare_workers(processes, what, os.environ)
    print(start_line(processes, args.nnodes, what.job, notes), file=sys.stderr)
    warning = copies_warning(processes, args.nnodes, what)
    if warning:
        print(warning, file=sys.stderr)
    quiet_torchrun_failure_logs()
    # A converted script's failing rank then writes its error where torchrun reads it
    # (runtime.job_failure), for the summary line; runtime.job_failure is not imported here
    # (it imports torch.distributed at once).
    os.environ["ACCEL_LAUNCH_ERROR_SUMMARY"] = "1"
    try:
        torchrun.run(args)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        print(f"accel-launch: {failure_line(rank, failure)}", file=sys.stderr)
        raise SystemExit(EXIT_WORKER_FAILED) from None
    except (DistError, RendezvousError) as error:
        # Another machine that never came, an address that does not answer: torchrun's traceback
        # (some 30 lines of its agent's frames) says no more than its last line.
        print(f"accel-launch: {rendezvous_failure_line(error)}", file=sys.stderr)
        raise SystemExit(EXIT_WORKER_FAILED) from None
    except SignalException as error:
        name = signal.Signals(error.sigval).name
        print(f"accel-launch: stopped by {name}; the workers were sent {name} too", file=sys.stderr)
        raise SystemExit(128 + int(error.sigval)) from None


def rendezvous_failure_line(error: BaseException) -> str:
    """``the machines did not meet: <torch's reason>; ...`` in one line."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (
        f"the machines did not meet: {reason} (is every machine started, with the same --nnodes, and is "
        "--master-addr/--master-port or --rdzv-endpoint reachable from this one?)"
    )


def _refuse(message: str) -> NoReturn:
    raise LaunchError(message)


def prepare_workers(processes: int, launch: Launch, environ: MutableMapping[str, str]) -> list[str]:
    """Variables the workers need that the user did not set, each said in the start line:
    one OpenMP thread per process when there are several (torchrun sets it too, with a
    five-line banner), and Accelerate's CPU flag for a script that imports Accelerate on a
    machine without GPUs (its ``Accelerator`` otherwise runs every process alone)."""
    notes: list[str] = []
    if processes > 1 and "OMP_NUM_THREADS" not in environ:
        environ["OMP_NUM_THREADS"] = "1"
        notes.append("OMP_NUM_THREADS=1 each (set OMP_NUM_THREADS to change)")
    if launch.text is not None and imports_accelerate(launch.text) and "ACCELERATE_USE_CPU" not in environ:
        import torch

        if not torch.cuda.is_available():
            environ["ACCELERATE_USE_CPU"] = "1"
            notes.append("ACCELERATE_USE_CPU=1 for Accelerate (no GPU here)")
    return notes


def start_line(processes: int, nnodes: str, job: SchedulerJob | None, notes: Sequence[str]) -> str:
    """``accel-launch: slurm: node 1 of 2, ...; 2 processes on this machine, OMP_NUM_THREADS=1 each``."""
    where = f"{job.describe()}; " if job is not None else ""
    machines = "" if nnodes.split(":")[-1] == "1" or job is not None else f" (one of {nnodes} machines)"
    count = f"{processes} process{'es' if processes > 1 else ''} on this machine{machines}"
    return f"accel-launch: {where}{', '.join([count, *notes])}"


def copies_warning(processes: int, nnodes: str, launch: Launch) -> str | None:
    """A script that nothing makes cooperate, launched on several processes, trains as that
    many separate copies: said before they start (the launch goes on)."""
    several = processes > 1 or nnodes.split(":")[-1] != "1"
    if not several or launch.text is None or not runs_as_copies(launch.text):
        return None
    return (
        f"accel-launch: warning: {launch.script} imports neither accel_convert.runtime, accelerate nor "
        "torch.distributed: each process runs its own copy of the whole training "
        f"(convert it first: accel-convert {launch.script})"
    )


#: What torchrun logs about a failure that ``failure_line`` says in one line instead.
_FAILURE_LOG_STARTS = ("failed (exitcode", "Closing process", "Sending process", "Received %s death signal")


class _FailureLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_FAILURE_LOG_STARTS)


def quiet_torchrun_failure_logs() -> None:
    """Drop torchrun's log lines about a worker's failure and the others' shutdown (the
    summary line says it); every other torchrun log line stays."""
    for name in (
        "torch.distributed.elastic.multiprocessing.api",
        "torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler",
        "torch.distributed.elastic.agent.server.api",
    ):
        logging.getLogger(name).addFilter(_FailureLogFilter())


def failure_line(rank: int, failure: Any) -> str:
    """``rank 1 failed (exit code 1): ValueError: boom; its output is above``, from torchrun's
    ``ProcessFailure``: the error from the worker's error file when it wrote one (a
    ``@record`` entry point), its output's log file when torchrun redirected it."""
    if failure.exitcode < 0:
        try:
            what = f"was killed by {signal.Signals(-failure.exitcode).name}"
        except ValueError:
            what = f"was killed by signal {-failure.exitcode}"
    else:
        what = f"failed (exit code {failure.exitcode})"
    message = _recorded_error(failure.error_file_data)
    log = Path(failure.error_file).parent / "stderr.log" if failure.error_file else None
    where = f"its output: {log}" if log is not None and log.is_file() else "its output is above"
    return f"rank {rank} {what}{': ' + message if message else ''}; {where}"


def _recorded_error(data: Any) -> str | None:
    """The first line of the error a worker recorded in its error file, if it wrote one."""
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip() or message == "<NONE>":
        return None
    return message.strip().splitlines()[0]


def job_file(line: CommandLine, settings: Mapping[str, Any]) -> str:
    """``--print-config SCHEDULER``: the job file that runs this command on that scheduler.
    Machines and GPUs per machine come from ``--nnodes``/``--nproc-per-node`` (or the saved
    settings), else 2 machines of 8 GPUs; the command each machine runs keeps the other
    options, without the job's shape (each launcher reads it from the scheduler)."""
    shape_flags = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--nproc-per-node")
    given = dict(_flag_values(line.torchrun))
    nnodes = given.get("--nnodes") or str(settings.get("nnodes", "2"))
    gpus = given.get("--nproc-per-node") or str(settings.get("nproc_per_node", "8"))
    options = [*_own_options(line), *_without(line.torchrun, shape_flags)]
    shape = JobShape(
        nnodes=int(nnodes.split(":")[-1]),
        gpus_per_node=int(gpus) if gpus.isdigit() else 8,
        options=options,
        script=line.script,
    )
    return JOB_WRITERS[line.print_config or "slurm"](shape)


def _flag_values(options: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(``--flag``, value) for each flag with a value, names with dashes."""
    for index, option in enumerate(options):
        name, has_value, value = option.partition("=")
        if not name.startswith("--"):
            continue
        if not has_value and index + 1 < len(options) and not is_switch(name, TORCHRUN_SWITCHES):
            value = options[index + 1]
        yield name.replace("_", "-"), value


def _without(options: Sequence[str], names: Sequence[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for option in options:
        name, has_value, _ = option.partition("=")
        if skip:
            skip = False
        elif name.replace("_", "-") in names:
            skip = not has_value
        else:
            kept.append(option)
    return kept


def _own_options(line: CommandLine) -> list[str]:
    """accel-launch's own options of this command line, as they would be typed again."""
    options = ["--config-file", str(line.config_file)] if line.config_file else []
    if line.mixed_precision:
        options += ["--mixed-precision", line.mixed_precision]
    if line.cpu:
        options.append("--cpu")
    fsdp = [
        part
        for option, name in FSDP_OPTIONS.items()
        if name in line.fsdp
        for part in (f"--fsdp_{option}", line.fsdp[name])
    ]
    return options + (fsdp or (["--fsdp"] if line.fsdp else []))


# -- reports -------------------------------------------------------------------------------------


def package_version(name: str) -> str | None:
    """An installed distribution's version, read from its metadata (nothing is imported)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def version_line() -> str:
    return f"accel-launch (accel-convert) {package_version('accel-convert') or 'unknown: not installed'}"


#: Always shown in the report, set or not.
CORE_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)
#: Also shown when set: what changes how a launch rendezvous, communicates or trains.
VARIABLE_PREFIXES = (
    "MASTER_",
    "NCCL_",
    "TORCH_NCCL_",
    "GLOO_",
    "TORCHELASTIC_",
    "PET_",
    "ACCELERATE_",
    "TORCH_DISTRIBUTED_",
)
OTHER_VARIABLES = ("LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MKL_NUM_THREADS", "TORCH_CPP_LOG_LEVEL", CONFIG_ENV)


def launch_variables(environ: Mapping[str, str]) -> list[str]:
    names = set(CORE_VARIABLES) | {
        name for name in environ if name.startswith(VARIABLE_PREFIXES) or name in OTHER_VARIABLES
    }
    return [f"  {name}={environ[name]}" if name in environ else f"  {name}: not set" for name in sorted(names)]


def torch_report() -> list[str]:
    """The torch, device and backend lines (torch is importable here)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    lines = [
        f"torch: {torch.__version__}",
        f"CUDA available: {cuda} (torch built with CUDA {torch.version.cuda})",
        f"cuDNN: {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'not available'}",
    ]
    nccl = "not available"
    if cuda and dist.is_available() and dist.is_nccl_available():
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    lines.append(f"NCCL: {nccl}")
    count = torch.cuda.device_count() if cuda else 0
    lines.append(f"GPU count: {count}")
    for index in range(count):
        properties = torch.cuda.get_device_properties(index)
        lines.append(f"GPU {index}: {properties.name}, {properties.total_memory / 2**30:.1f} GiB")
    lines += [
        f"MPS available: {torch.backends.mps.is_available()}",
        f"Distributed available: {dist.is_available()}",
        f"Backends: gloo={dist.is_gloo_available()} nccl={dist.is_nccl_available()} mpi={dist.is_mpi_available()}",
    ]
    return lines


def memory_gib() -> str:
    try:
        return f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB"
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return "unknown"


def environment_report(environ: Mapping[str, str] | None = None) -> str:
    """Versions, devices, backends, launch variables and saved settings: what a bug report needs."""
    environ = os.environ if environ is None else environ
    lines = [
        version_line(),
        f"Accelerate: {package_version('accelerate') or 'not installed'}",
        f"Python: {platform.python_version()} ({sys.executable})",
        f"Platform: {platform.platform()}",
        f"accel-launch: {shutil.which('accel-launch') or 'not on PATH'}",
        f"numpy: {package_version('numpy') or 'not installed'}",
        f"CPU count: {os.cpu_count()}",
        f"System memory: {memory_gib()}",
    ]
    problem = torch_importable()
    if problem is None:
        lines += torch_report()
    else:
        lines.append(f"torch: not installed ({problem}); {RUNTIME_EXTRA}")
    path = default_config_path()
    if path.is_file():
        try:
            settings = read_config(path)
            shown = ", ".join(f"{key}={value}" for key, value in settings.items()) or "empty"
        except LaunchError as error:
            shown = f"unreadable: {error}"
        lines.append(f"Saved launch settings: {path}: {shown}")
    else:
        lines.append(f"Saved launch settings: none ({path} does not exist)")
    lines.append("Launch variables:")
    lines += launch_variables(environ)
    return "\n".join(lines)


#: torchrun's options, summed up here so that ``--help`` answers at once: printing torch's own
#: parser means importing torch (9 s on a loaded machine). Every option passes through, these
#: and the rest (``torchrun --help``).
TORCHRUN_OPTIONS = """\
torchrun's options (all passed through; `torchrun --help` lists every one):
  --nproc-per-node N       processes on this machine (gpu, cpu, auto or a number)
  --nnodes N | MIN:MAX     machines in the job (MIN:MAX: an elastic job)
  --node-rank R            this machine's rank (0 on the master)
  --master-addr HOST       rank 0's machine
  --master-port PORT       rank 0's port
  --standalone             one machine, a free port found by torchrun
  --rdzv-backend NAME      rendezvous backend (c10d, etcd, static)
  --rdzv-endpoint HOST:PORT
                           where the machines meet (c10d: any of them)
  --rdzv-id ID             the job's name, the same on every machine
  --max-restarts N         restart the workers this many times after a failure
  --monitor-interval S     how often workers are checked (seconds)
  --log-dir DIR            every worker's output into files under DIR
  --redirects, --tee       send workers' stdout/stderr to the log files (0-3)
  -m, --module             SCRIPT is a module (python -m)
  --no-python              SCRIPT is a program, not a Python file
"""


def torch_installed() -> bool:
    """Whether torch can be found, without importing it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def help_text() -> str:
    """Ours, then torchrun's options (without importing torch)."""
    text = f"{HELP}\n\n{TORCHRUN_OPTIONS}"
    if not torch_installed():
        text += f"\ntorch is not installed here; launching needs it: {RUNTIME_EXTRA}"
    return text


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    print(f"accel-launch: error: {message}", file=sys.stderr)
    raise SystemExit(code)


MERGE_DESCRIPTION = (
    "Merge the weights of a sharded FSDP checkpoint (save_state with SHARDED_STATE_DICT) into one file: "
    "OUTPUT/model.safetensors, or OUTPUT/pytorch_model.bin with "
    "--unsafe_serialization. Runs in this process (no launch) and needs memory for the whole model once."
)


def merge_command(argv: Sequence[str]) -> int:
    """``accel-launch merge-weights CHECKPOINT_DIR OUTPUT``: Accelerate's ``accelerate merge-weights``."""
    parser = argparse.ArgumentParser(prog="accel-launch merge-weights", description=MERGE_DESCRIPTION)
    parser.add_argument(
        "checkpoint_directory", help="a save_state folder holding one sharded model, or its pytorch_model_fsdp_<i>/"
    )
    parser.add_argument("output_path", help="the folder to write the merged file into")
    parser.add_argument(
        "--unsafe_serialization",
        "--unsafe-serialization",
        action="store_true",
        help=("write pytorch_model.bin (torch.save) instead of model.safetensors"),
    )
    parser.add_argument(
        "--remove_checkpoint_dir",
        "--remove-checkpoint-dir",
        action="store_true",
        help=("delete CHECKPOINT_DIR once the merged file is written"),
    )
    options = parser.parse_args(list(argv))  # --help ends here, before torch is imported
    if torch_importable() is not None:
        fail(NO_TORCH, EXIT_NO_TORCH)
    from accel_convert.runtime.merge import merge_fsdp_weights

    try:
        written = merge_fsdp_weights(
            options.checkpoint_directory,
            options.output_path,
            safe_serialization=not options.unsafe_serialization,
            remove_checkpoint_dir=options.remove_checkpoint_dir,
        )
    except (ValueError, ImportError) as error:  # runtime.checkpoint's CheckpointError is a ValueError
        raise LaunchError(str(error)) from None
    print(f"accel-launch: merged weights written to {written}")
    return EXIT_OK


TEST_HELP = """\
usage: accel-launch test [launch options]

Launch a short self-check with the saved settings and these launch options, as a training
script would be launched: ranks, one device per process, an all-reduce and a gather, a sharded
loader, a DDP step, save_state/load_state. The main process ends with one line, e.g.
"2 processes on 1 node, gloo, cpu: all checks passed"; a check that fails is one line naming
it (exit code 1).

Launch options are those of a launch (accel-launch --help): --nproc-per-node N, --cpu,
--mixed-precision, --config-file, --nnodes..., e.g.

  accel-launch test --nproc-per-node 2 --cpu"""


def self_check_command_line(options: Sequence[str]) -> list[str]:
    """``accel-launch test [OPTIONS]``: the launch options as for a training script, then the
    runtime's self-check (runtime/self_check.py) in place of the script, launched the same way."""
    if any(not option.startswith("-") for option in options[:1]) or "--" in options:
        raise LaunchError("accel-launch test takes launch options only (accel-launch test --nproc-per-node 2)")
    # As a module: run as a file, its folder would come first on sys.path, and the runtime's
    # logging.py would stand in for the standard library's.
    return [*options, "-m", "accel_convert.runtime.self_check"]


def check_script_exists(line: CommandLine) -> None:
    """A script that is not there is one line here, not every worker's traceback and torchrun's
    failure summary. A module (``-m``) or a program (``--no-python``) is torchrun's to find."""
    if runs_other_than_a_file(line):
        return
    if not Path(line.script[0]).is_file():
        fail(missing_script_message(line.script[0]))


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point: ``accel-launch [options] SCRIPT [ARGS]``, ``accel-launch config``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["config"]:
            raise SystemExit(config_command(argv[1:]))
        if argv[:1] == ["merge-weights"]:
            raise SystemExit(merge_command(argv[1:]))
        if argv[:1] == ["test"]:
            if {"-h", "--help"} & set(argv[1:]):
                print(TEST_HELP)
                raise SystemExit(EXIT_OK)
            argv = self_check_command_line(argv[1:])
        line = split_command_line(argv)
        if line.help:
            print(help_text())
        elif line.version:
            print(version_line())
        elif line.env:
            print(environment_report())
        else:
            # Before "no script": an unknown switch (--multi_gpu train.py) takes the script as its value.
            check_torchrun_options(line.torchrun, lambda name: is_switch(name, TORCHRUN_SWITCHES))
            if not line.script:
                fail("no script to launch (accel-launch --help lists the options)")
            launch(line)
    except LaunchError as error:
        fail(str(error))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:
        # The reader went away (``accel-launch --help | head``): stop quietly, as the shell's
        # own commands do; stdout is pointed at /dev/null so the exit's flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141) from None


if __name__ == "__main__":
    main()
