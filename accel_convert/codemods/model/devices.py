"""Devices: the names that hold the device, settings classes choosing one."""

from __future__ import annotations

import libcst as cst

from accel_convert.codemods.engine.devices import chooses_device
from accel_convert.codemods.engine.syntax import dotted
from accel_convert.codemods.model.provider import provider
from accel_convert.codemods.model.recorder import (
    AssignRecord,
)
from accel_convert.codemods.model.state import Analysis


@provider(
    needs=("parsed_arguments", "parser_options", "existing_accelerator"),
    provides=("settings_devices", "settings_devices_unreached"),
    refines=("device_names",),
)
def settings_class_devices(a: Analysis) -> None:
    """``class Config: device = "cuda" if torch.cuda.is_available() else "cpu"`` (or a
    ``@dataclass`` field ``device: str = ...``): a settings class without bases choosing the
    device in its body. The script reads it as ``Config.device`` or through an instance
    (``cfg = Config()``, ``cfg.device``): those name the device like a variable, and are
    rebound once the accelerator exists (``a.settings_devices``, the device rule's): the class attribute of
    a plain class, which its instances read; each instance of a dataclass (which copies the
    default when built), built once with no arguments. Left out (ACC904 stays): a class whose
    instances may hold a device of their own (``cfg.device = ...``, ``self.device = ...``),
    other decorators, a dataclass instance built several times or given arguments."""
    found, frozen = _devices_chosen_in_settings_classes(a)
    if not found:
        return
    built = _instances_built(a, {owner for owner, _ in found.values()})
    instances = {name: dotted(sites[0].value.func) for name, sites in built.items()}  # type: ignore[attr-defined]
    for name, (owner, is_dataclass) in found.items():
        attribute = name.split(".", 1)[1]
        mine = [instance for instance, of in instances.items() if of == owner]
        readers = {name} | {f"{instance}.{attribute}" for instance in mine}
        overridden = _bound_outside_the_class(a, owner, attribute, readers)
        if is_dataclass:
            # Each instance copies the default: rebind each one, built once and plainly.
            overridden = overridden or not all(_built_once_plainly(built[i]) for i in mine)
        if overridden or name in frozen:
            a.settings_devices_unreached.add(name)
            continue
        rebound = [f"{instance}.{attribute}" for instance in mine] if is_dataclass else []
        a.settings_devices.update({target: name for target in [name, *rebound]})
        a.facts.device_names.update(readers)


def _instances_built(a: Analysis, owners: set[str]) -> dict[str, list[AssignRecord]]:
    """Name → the assignments binding it to an instance of one of ``owners`` (``cfg = Config()``)."""
    built: dict[str, list[AssignRecord]] = {}
    for assign in a.r.assigns:
        if len(assign.targets) == 1 and isinstance(assign.value, cst.Call) and dotted(assign.value.func) in owners:
            built.setdefault(assign.targets[0], []).append(assign)
    return built


def _built_once_plainly(sites: list[AssignRecord]) -> bool:
    """One construction, with no arguments (``cfg = Config()``)."""
    return len(sites) == 1 and not sites[0].value.args  # type: ignore[attr-defined]


def _devices_chosen_in_settings_classes(a: Analysis) -> tuple[dict[str, tuple[str, bool]], set[str]]:
    """``Config.device`` → (``Config``, whether it is a dataclass) for each device a settings class
    chooses in its body; and those of frozen dataclasses (``@dataclass(frozen=True)``)."""
    found: dict[str, tuple[str, bool]] = {}
    frozen: set[str] = set()
    for owner, record in a.r.classes.items():
        node = record.node
        decorators = [dotted(d.decorator) or dotted(getattr(d.decorator, "func", None)) for d in node.decorators]
        if node.bases or node.keywords or decorators not in ([], ["dataclass"], ["dataclasses.dataclass"]):
            continue
        for line in node.body.body:
            attribute = _class_attribute(line)
            if attribute is None:
                continue
            target, value = attribute
            if isinstance(target, cst.Name) and chooses_device(value, a.facts, (owner,)):
                found[f"{owner}.{target.value}"] = (owner, bool(decorators))
                if any(isinstance(d.decorator, cst.Call) and d.decorator.args for d in node.decorators):
                    frozen.add(f"{owner}.{target.value}")  # @dataclass(frozen=True): no rebinding
    return found, frozen


def _class_attribute(
    line: cst.BaseStatement | cst.BaseSmallStatement,
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(target, value) of a class body line binding one attribute: ``device = ...`` or
    ``device: str = ...``; None for anything else."""
    small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return small.targets[0].target, small.value
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        return small.target, small.value
    return None


def _bound_outside_the_class(a: Analysis, owner: str, attribute: str, readers: set[str]) -> bool:
    """Whether code outside the class body binds the device again (``cfg.device = ...``,
    ``Config.device = ...``, or ``self.device = ...`` in a method)."""
    return any(
        target in readers or target == f"self.{attribute}"
        for assign in a.r.assigns
        for target in assign.targets
        if assign.scope != (owner,)
    )
