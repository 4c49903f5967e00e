"""The process's own instruments, histograms and counters, which `GET /metrics` renders with the
gauges it reads from the live state (`catalog.metrics`): one registry, `REGISTRY`.

Rules:
- names carry their base unit (`_seconds`, `_bytes`) and counters end in `_total`;
- label values are bounded by the code that observes them (a route template, never a path; an
  action name, never a principal, scope or id); as a guard, an instrument keeps at most
  `MAX_SERIES` label sets and folds any further one into the value `_other`.
"""

from __future__ import annotations

import abc
import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# OpenTelemetry's advice for http.server.request.duration, used for every short duration
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
MAX_SERIES = 1000
OTHER = "_other"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str  # the sample's own name (a histogram's `_bucket`, `_sum`, `_count`)
    labels: Labels
    value: float


@dataclass(frozen=True)
class Family:
    """One metric as the text format shows it: its name, type, help and samples."""

    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: tuple[Sample, ...]


def gauge(name: str, help: str, value: float, labels: Labels = ()) -> Family:
    return Family(name, "gauge", help, (Sample(name, labels, value),))


def counter(name: str, help: str, value: float, labels: Labels = ()) -> Family:
    return Family(name, "counter", help, (Sample(name, labels, value),))


class _Instrument(abc.ABC):
    """A metric kept in the process, registered at creation; `family()` renders it."""

    kind = ""

    def __init__(self, name: str, help: str, labels: Sequence[str]) -> None:
        self.name = name
        self.help = help
        self.labels = tuple(labels)
        REGISTRY.append(self)

    def _key(self, values: Sequence[str], series: Mapping[tuple[str, ...], object]) -> tuple[str, ...]:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes the labels {self.labels}, given {tuple(values)}")
        key = tuple(values)
        if key not in series and len(series) >= MAX_SERIES:
            return tuple(OTHER for _ in key)
        return key

    @abc.abstractmethod
    def family(self) -> Family:
        """The samples as they stand."""


class Counter(_Instrument):
    kind = "counter"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"a counter's name ends in _total: {name}")
        super().__init__(name, help, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, *values: str, amount: float = 1.0) -> None:
        key = self._key(values, self._values)
        self._values[key] = self._values.get(key, 0.0) + amount

    def family(self) -> Family:
        samples = tuple(
            Sample(self.name, tuple(zip(self.labels, key, strict=True)), value)
            for key, value in sorted(self._values.items())
        )
        if not self.labels and not samples:
            samples = (Sample(self.name, (), 0.0),)
        return Family(self.name, self.kind, self.help, samples)


class Histogram(_Instrument):
    kind = "histogram"

    def __init__(
        self, name: str, help: str, labels: Sequence[str] = (), buckets: Sequence[float] = DURATION_BUCKETS
    ) -> None:
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(buckets))
        # per label set: the count of each bucket (not cumulative; the last is +Inf), the sum
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *values: str) -> None:
        key = self._key(values, self._series)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = ([0] * (len(self.buckets) + 1), [0.0])
        counts, total = series
        counts[bisect.bisect_left(self.buckets, value)] += 1
        total[0] += value

    def family(self) -> Family:
        samples: list[Sample] = []
        keys = sorted(self._series) or ([()] if not self.labels else [])
        for key in keys:
            counts, total = self._series.get(key, ([0] * (len(self.buckets) + 1), [0.0]))
            labels = tuple(zip(self.labels, key, strict=True))
            running = 0
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                running += count
                le = "+Inf" if bound == math.inf else _number(bound)
                samples.append(Sample(f"{self.name}_bucket", (*labels, ("le", le)), running))
            samples.append(Sample(f"{self.name}_sum", labels, total[0]))
            samples.append(Sample(f"{self.name}_count", labels, running))
        return Family(self.name, self.kind, self.help, tuple(samples))


REGISTRY: list[_Instrument] = []


def families() -> list[Family]:
    """Every instrument of the process, as it stands."""
    return [instrument.family() for instrument in REGISTRY]


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_value(value: str) -> str:
    return _help(value).replace('"', '\\"')


def text_format(found: Sequence[Family]) -> str:
    """The Prometheus text format (version 0.0.4) of the families."""
    lines: list[str] = []
    for family in found:
        lines += [f"# HELP {family.name} {_help(family.help)}", f"# TYPE {family.name} {family.kind}"]
        for sample in family.samples:
            labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sample.labels)
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            lines.append(f"{name} {_number(sample.value)}")
    return "\n".join(lines) + "\n"
