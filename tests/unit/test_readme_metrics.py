"""README's Metrics list is what ``/metrics`` exports, series by series: each metric's name,
its labels and its type (a dashboard's ``rate()`` needs a counter, ``histogram_quantile`` a
histogram's buckets), so a label added or a type changed fails here until README says so."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from proxy.metrics import Metrics

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
_NAMED = re.compile(
    r"`((?:cascade|gen_ai)_[a-z_]+)(?:\{([a-z_,]+)\})?` \((counter|gauge|histogram)[):]"
)


def _documented() -> dict[str, tuple[frozenset[str], str]]:
    section = README.split("### Metrics")[1].split("\n### ")[0]
    stated: dict[str, tuple[frozenset[str], str]] = {}
    for name, labels, kind in _NAMED.findall(" ".join(section.split())):
        assert name not in stated, f"{name} is listed twice"
        stated[name] = (frozenset(labels.split(",")) if labels else frozenset(), kind)
    return stated


def _exported() -> dict[str, tuple[frozenset[str], str]]:
    metrics = Metrics()
    text = metrics.render().decode()
    types = dict(re.findall(r"^# TYPE ((?:cascade|gen_ai)_\w+) (\w+)$", text, re.M))
    exported = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            name = metric._name + ("_total" if metric._type == "counter" else "")
            exported[name] = (frozenset(metric._labelnames), types[name])
    return exported


def test_each_metric_is_listed_with_its_labels_and_type() -> None:
    exported = _exported()
    assert len(exported) >= 13
    assert _documented() == exported


def test_every_metric_the_list_names_is_exported() -> None:
    """A name the section mentions without a type (a bullet left from a metric renamed or
    dropped) escapes the list's pattern above: each one is a name ``/metrics`` exports, as
    its ``# TYPE`` lines say in a fresh process (a labelled metric with no series yet too)."""
    section = README.split("### Metrics")[1].split("\n### ")[0]
    named = set(re.findall(r"`((?:cascade|gen_ai)_[a-z_]+)", section))
    text = Metrics().render().decode()
    typed = set(re.findall(r"^# TYPE ((?:cascade|gen_ai)_\w+) \w+$", text, re.M))
    assert typed == set(_exported())
    assert named <= typed, named - typed
