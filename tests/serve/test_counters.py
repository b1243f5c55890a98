"""vLLM's Prometheus counters as forge reads them (``forge_cli/serve/counters.py``): the sample lines of a real
vLLM 0.x ``/metrics`` page (engine and source labels, ``_created`` gauges beside each counter), summed per name."""

from __future__ import annotations

from typing import Any

import pytest

from forge_cli.serve.counters import delta, parse, read_counters

PAGE = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="policy"} 11597.0
vllm:prompt_tokens_created{engine="0",model_name="policy"} 1.796660376540591e+09
vllm:prompt_tokens_by_source_total{engine="0",model_name="policy",source="local_compute"} 4045.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="policy",source="local_cache_hit"} 7552.0
vllm:generation_tokens_total{engine="0",model_name="policy"} 4689.0
vllm:generation_tokens_total{engine="1",model_name="policy"} 11.0
vllm:generation_tokens_created{engine="0",model_name="policy"} 1.79e+09
python_gc_objects_collected_total{generation="0"} 123.0
"""


def test_the_counters_of_a_vllm_page_summed_over_engines() -> None:
    assert parse(PAGE) == {"prompt_tokens": 11597.0, "prefill_tokens_computed": 4045.0, "sampled_tokens": 4700.0}


def test_a_page_without_them_gives_none_not_zeros() -> None:
    assert parse("# nothing\nprocess_cpu_seconds_total 3.5\n") == {}


def test_delta_only_for_counters_both_readings_have_and_a_reset_counts_from_zero() -> None:
    assert delta({"sampled_tokens": 10.0}, {"sampled_tokens": 25.0, "prompt_tokens": 3.0}) == {"sampled_tokens": 15.0}
    assert delta({"sampled_tokens": 50.0}, {"sampled_tokens": 7.0}) == {"sampled_tokens": 7.0}


@pytest.mark.vllm
@pytest.mark.requires("model")
def test_the_policy_server_counts_what_it_sampled(policy_server: Any) -> None:
    import httpx

    before = read_counters(policy_server.url)
    answer = httpx.post(f"{policy_server.url}/v1/completions", timeout=120,
                        json={"model": "policy", "prompt": "Hello", "max_tokens": 5, "min_tokens": 5}).json()
    after = read_counters(policy_server.url)
    assert answer["usage"]["completion_tokens"] == 5
    assert delta(before, after)["sampled_tokens"] == 5


def test_a_server_without_metrics_has_no_counters() -> None:
    assert read_counters("http://127.0.0.1:9") == {}
