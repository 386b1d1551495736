"""Devices held by settings classes and configuration objects.

``class Config: device = "cuda" if ... else "cpu"``, read as ``Config.device`` / ``cfg.device``, is
chosen at import: GPU 0 on every rank. Once the accelerator exists the class attribute, or the
instance holding its own copy, is rebound to ``accelerator.device``; what cannot be rebound is
reported (ACC904). Which attributes are such devices is the analysis's (the devices provider
finds them with the device names; :func:`settings_class_devices` hands them to this rule); this
pass runs on the module the device walk converted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import libcst as cst

from accel_convert.codemods.engine.accelerator_code import accelerator_name
from accel_convert.codemods.engine.facts import ScriptFacts
from accel_convert.codemods.engine.findings import report_at
from accel_convert.codemods.engine.model import Change, Site
from accel_convert.codemods.engine.rule import NO_ACCELERATOR_ACCESS
from accel_convert.codemods.engine.syntax import assigned_in, binds_name
from accel_convert.codemods.model.plan import creation_index
from accel_convert.codemods.model.provider import rule_provider
from accel_convert.codemods.model.state import Analysis
from accel_convert.codemods.rewrites.device.rebinding import creating_function, rebinding
from accel_convert.codemods.rewrites.device.state import DEVICE
from accel_convert.records import record


@record(frozen=True, eq=False, repr=False)
class SettingsDevices:
    """Devices chosen in the body of a settings class (``class Config: device = "cuda" if ...``),
    read as ``Config.device`` or ``cfg.device`` (in ``device_names``)."""

    #: What to rebind to the accelerator's device once it exists (``Config.device``; for a
    #: dataclass, each instance's ``cfg.device`` too) → the class attribute it stands for.
    rebound: Mapping[str, str]
    #: Those that cannot be rebound (instances with a device of their own).
    unreached: frozenset[str]


@rule_provider(needs=("settings_devices", "settings_devices_unreached"))
def settings_class_devices(a: Analysis) -> SettingsDevices:
    """The settings-class devices the model's devices provider found."""
    return SettingsDevices(MappingProxyType(dict(a.settings_devices)), frozenset(a.settings_devices_unreached))


def rebind_settings_devices(
    original: cst.Module, converted: cst.Module, facts: ScriptFacts
) -> tuple[cst.Module, list[Change]]:
    """``class Config: device = "cuda" if ... else "cpu"``, read as ``Config.device`` /
    ``cfg.device``: chosen at import, GPU 0 on every rank. Right after the accelerator is created,
    the class attribute is rebound (``Config.device = accelerator.device``), which every instance
    of a plain class reads too; a dataclass instance (its own copy) is rebound once both it and
    the accelerator exist (``cfg.device = accelerator.device``), where it is built at module level
    or in the statements of the function creating the accelerator. What cannot be rebound is
    reported (ACC904)."""
    wanted = facts.of(settings_class_devices).rebound
    if not wanted and not facts.of(settings_class_devices).unreached:
        return converted, []
    body: list[cst.BaseStatement] = list(converted.body)
    home = facts.creating_function if facts.home_kind == "function" else None
    function = None
    statements = body  # at module level, the rebinds go into the module's body itself
    if home is not None:
        function = creating_function(body, home)
        if function is None:
            return converted, []
        statements = function.statements
    created = creation_index(statements, facts)
    if created is None:
        return converted, []
    module_level = [s for s in original.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
    after: dict[int, list[str]] = {}
    unreached = set(facts.of(settings_class_devices).unreached)
    for target in sorted(wanted):
        position = _where_rebound(target, wanted[target], statements, created, home is not None, module_level)
        if position is None:
            unreached.add(wanted[target])
        else:
            after.setdefault(position, []).append(target)
    accelerator = accelerator_name(facts)
    for position in sorted(after, reverse=True):
        statements[position + 1 : position + 1] = [rebinding(target, accelerator) for target in after[position]]
    if function is not None:
        body[function.position] = function.edited()
    rebound = sorted({target for targets in after.values() for target in targets})
    changes = _rebound_reports(original, rebound, wanted, accelerator, facts)
    changes += _unreached_reports(original, unreached, accelerator, facts)
    return converted.with_changes(body=body), changes


def _where_rebound(
    target: str,
    attribute: str,
    statements: Sequence[cst.BaseStatement],
    created: int,
    in_function: bool,
    module_level: Sequence[cst.BaseStatement],
) -> int | None:
    """After which of ``statements`` ``target`` (``Config.device``, ``cfg.device``: an instance
    of the class owning ``attribute``) is rebound: where the accelerator is created, or later
    where the instance is built; None where it cannot be."""
    holder = target.rsplit(".", 1)[0]
    if holder == attribute.rsplit(".", 1)[0]:
        return created  # the class attribute itself
    built = [i for i, s in enumerate(statements) if binds_name([s], holder)]
    if in_function and binds_name(module_level, holder) and not built:
        return created  # a module-level instance
    if len(built) == 1 and isinstance(statements[built[0]], cst.SimpleStatementLine):
        return max(created, built[0])
    return None


def _rebound_reports(
    original: cst.Module, targets: Iterable[str], wanted: Mapping[str, str], accelerator: str, facts: ScriptFacts
) -> list[Change]:
    changes = []
    for target in targets:
        owner, attribute = wanted[target].split(".", 1)
        site = _class_attribute_site(original, owner, attribute, facts)
        if site is not None:
            message = f"device chosen in class {owner} → {target} = {accelerator}.device once the accelerator exists"
            changes.append(report_at(site, DEVICE, message, fixed=True))
    return changes


def _unreached_reports(
    original: cst.Module, unreached: Iterable[str], accelerator: str, facts: ScriptFacts
) -> list[Change]:
    changes = []
    for name in sorted(unreached):
        owner, attribute = name.split(".", 1)
        site = _class_attribute_site(original, owner, attribute, facts)
        if site is not None:
            message = (
                f"device chosen inside {owner}, which the accelerator does not reach: GPU 0 on every rank "
                f"(its instances may hold their own); set it to {accelerator}.device once the accelerator exists"
            )
            changes.append(report_at(site, NO_ACCELERATOR_ACCESS, message))
    return changes


def _class_attribute_site(module: cst.Module, owner: str, attribute: str, facts: ScriptFacts) -> Site | None:
    """Where class ``owner``'s body assigns ``attribute`` (``device = ...``, ``device: str = ...``)."""
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and statement.name.value == owner:
            for line in statement.body.body:
                if isinstance(line, cst.SimpleStatementLine) and attribute in assigned_in(line):
                    return facts.origins.site(line)
    return None
