"""Run only by tests/test_requires.py, in a child pytest with FORGE_TEST_MISSING and CI set (its name keeps the
suite from collecting it): each form of declaring a part, and one part no `make test` installs."""

from __future__ import annotations

import pytest

from tests.requires import requires


def test_function_form() -> None:
    requires("vllm")


@pytest.mark.requires("vllm")
def test_marker_form() -> None:
    pass


@pytest.mark.vllm
def test_vllm_marker() -> None:
    pass


def test_absent_part() -> None:
    requires("kubernetes")
