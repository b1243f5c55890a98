"""Prometheus metrics of the proxy: counters, a latency histogram, in-flight gauge (text exposition)."""

from __future__ import annotations

import bisect
from collections import defaultdict

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """Counters by label set, one latency histogram, an in-flight gauge."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], int] = defaultdict(int)  # (format, status)
        self.errors: dict[str, int] = defaultdict(int)  # kind
        self.bytes_in = 0
        self.bytes_out = 0
        self.in_flight = 0
        self.records_sent = 0
        self._hist = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0
        self._count = 0

    def observe(self, seconds: float) -> None:
        """One call's latency."""
        self._hist[bisect.bisect_left(BUCKETS, seconds)] += 1
        self._sum += seconds
        self._count += 1

    def error(self, kind: str) -> None:
        self.errors[kind] += 1

    def render(self, extra: dict[str, float] | None = None) -> str:
        """Prometheus text format."""
        lines = ["# HELP forge_proxy_calls_total Model calls recorded, by wire format and status.",
                 "# TYPE forge_proxy_calls_total counter"]
        for (fmt, status), n in sorted(self.calls.items()):
            lines.append(f'forge_proxy_calls_total{{format="{fmt}",status="{status}"}} {n}')
        lines += ["# HELP forge_proxy_errors_total Requests answered with an error or failed, by kind.",
                  "# TYPE forge_proxy_errors_total counter"]
        lines += [f'forge_proxy_errors_total{{kind="{k}"}} {n}' for k, n in sorted(self.errors.items())]
        lines += ["# TYPE forge_proxy_request_bytes_total counter",
                  f"forge_proxy_request_bytes_total {self.bytes_in}",
                  "# TYPE forge_proxy_response_bytes_total counter",
                  f"forge_proxy_response_bytes_total {self.bytes_out}",
                  "# TYPE forge_proxy_in_flight gauge", f"forge_proxy_in_flight {self.in_flight}",
                  "# TYPE forge_proxy_records_total counter", f"forge_proxy_records_total {self.records_sent}",
                  "# HELP forge_proxy_latency_seconds Call duration at the proxy.",
                  "# TYPE forge_proxy_latency_seconds histogram"]
        cumulative = 0
        for bound, n in zip((*BUCKETS, float("inf")), self._hist, strict=True):
            cumulative += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'forge_proxy_latency_seconds_bucket{{le="{le}"}} {cumulative}')
        lines += [f"forge_proxy_latency_seconds_sum {self._sum}", f"forge_proxy_latency_seconds_count {self._count}"]
        for name, value in (extra or {}).items():
            lines += [f"# TYPE {name} gauge", f"{name} {value}"]
        return "\n".join(lines) + "\n"
