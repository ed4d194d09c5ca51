"""The listening-test designs, one module each (`ab`, `mos`, `cmos`, `smos`, `mushra`), each defining
`DESIGN`, a `record.Design`; found here by looking, so a new design is one new module and nothing
else: the command line's --design choices and flags, the store, queues, rating page, results,
exports and screening all ask the record (docs/campaigns.md, "Adding a design").

Library module (no command line)::

    from webapp.campaign.designs import design_of, get_design, names, plan_of
    names()                       # ["ab", "cmos", "mos", "mushra", "smos"]: the default first
    design = get_design("mos")    # the record; DesignError naming the choices for an unknown name
    design_of(campaign)           # the campaign's record (campaigns made before designs had names: the default)
    plan_of(campaign)             # its TrialPlan, or None until every clip exists

A module of this package that defines no `DESIGN` (`record`) is not a design.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from webapp.campaign.data.conditions import DesignError
from webapp.campaign.data.definition import Campaign
from webapp.campaign.designs.record import Design, Option
from webapp.campaign.trials.plan import TrialPlan

DEFAULT_DESIGN = "ab"  # blind A/B pairs: the default, and the design of campaigns made before designs had names


@functools.cache
def registry() -> dict[str, Design]:
    """{name: record} of every module of this package that defines `DESIGN`, the default first."""
    found: dict[str, Design] = {}
    for module in sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.ispkg):
        design = getattr(importlib.import_module(f"{__name__}.{module}"), "DESIGN", None)
        if design is None:
            continue
        if not isinstance(design, Design):
            raise TypeError(f"{__name__}.{module}.DESIGN is a {type(design).__name__}, not a Design")
        if design.name in found:
            raise TypeError(f"two designs are named {design.name!r}: {__name__}.{module} and another module")
        found[design.name] = design
    return dict(sorted(found.items(), key=lambda item: (item[0] != DEFAULT_DESIGN, item[0])))


def names() -> list[str]:
    return list(registry())


def get_design(name: str | None) -> Design:
    """The design called `name` (None: the default); DesignError naming the choices otherwise."""
    designs = registry()
    if (name or DEFAULT_DESIGN) not in designs:
        raise DesignError(f"--design {name!r}: choose one of {', '.join(designs)}.")
    return designs[name or DEFAULT_DESIGN]


def design_of(campaign: Campaign) -> Design:
    return get_design(campaign.design)


def plan_of(campaign: Campaign) -> TrialPlan | None:
    """The campaign's plan as its design reads it; None until every clip exists."""
    data = campaign.plan_data()
    return None if data is None else design_of(campaign).read_plan(data, campaign)


def all_options() -> list[Option]:
    """Every design's options, each once (designs share an option by sharing its declaration)."""
    out: dict[str, Option] = {}
    for design in registry().values():
        for option in design.options:
            if out.setdefault(option.name, option) != option:
                raise TypeError(f"option {option.name!r} is declared twice, differently (design {design.name!r})")
    return list(out.values())


def users(option: Option) -> list[str]:
    """The designs that read `option`."""
    return [d.name for d in registry().values() if option in d.options]


def option_values(given: dict[str, object] | None = None) -> dict[str, object]:
    """Every option at its default, with `given` on top: what campaign.json's "design_options" holds."""
    return {o.name: (given or {}).get(o.name, o.default) for o in all_options()}


def check_options(design: Design, values: dict[str, object], condition_ids: list[str]) -> None:
    """Every option's own check (whatever the design), then the design's."""
    for option in all_options():
        if option.check is not None:
            option.check(option.flag, values[option.name])
    design.check_options({o.name: values[o.name] for o in design.options}, condition_ids)
