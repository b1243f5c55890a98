"""The step above config that checks an experiment's env against its task source (``forge_cli/envs/resolve.py``):
config alone leaves a source's options to it, every command composes through it, and a stored experiment (a run's
``config.yaml``, read back on --resume and by veRL's workers) gets the same check."""

from __future__ import annotations

import pytest

from forge_cli.config.compose import compose
from forge_cli.envs.resolve import compose_resolved, validate_experiment
from forge_cli.errors import ConfigError
from tests.cli.bad_input_support import assert_error, run_forge

BAD_OPTION = "env: env.options for source 'builtin': no_such_option: Extra inputs are not permitted"


def test_config_alone_leaves_the_source_and_its_options_to_the_resolve_step() -> None:
    assert compose(["+env.options.no_such_option=1"]).experiment.env.options == {"no_such_option": 1}
    assert compose(["env.source=nosuch"]).experiment.env.source == "nosuch"
    with pytest.raises(ConfigError) as err:
        compose_resolved(["+env.options.no_such_option=1"])
    assert err.value.problems == [BAD_OPTION] and err.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^env: unknown task source 'nosuch' \(forge ships: .*builtin"):
        compose_resolved(["env.source=nosuch"])


def test_the_envs_problems_come_with_the_others_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        compose_resolved(["+env.options.no_such_option=1", "rollout.concurrency=0"])
    assert BAD_OPTION in err.value.problems
    assert any(p.startswith("rollout.concurrency: 0 is not allowed") for p in err.value.problems)


def test_eval_judge_is_merged_without_changing_the_composed_dict() -> None:
    composed = compose_resolved(["env=claweval", "eval.judge.model=m"])
    assert composed.experiment.env.options["judge"]["model"] == "m"
    assert composed.data["env"]["options"]["judge"]["model"] is None, "Composed.data is what Hydra composed"
    assert compose(["env=claweval", "eval.judge.model=m"]).experiment.env.options["judge"]["model"] is None


def test_a_stored_experiment_gets_the_same_check() -> None:
    composed = compose_resolved(["env=claweval", "eval.judge.base_url=http://127.0.0.1:9/v1"])
    assert validate_experiment(composed.data) == composed.experiment
    stored = composed.experiment.model_dump(mode="json")
    assert validate_experiment(stored) == composed.experiment
    stored["env"]["options"]["judge"]["retries"] = 0
    with pytest.raises(ConfigError, match=r"^env: env\.options for source 'claweval': judge\.retries"):
        validate_experiment(stored)


def test_a_bad_env_option_is_one_message_and_exit_2_from_the_cli() -> None:
    assert_error(run_forge("config", "show", "+env.options.no_such_option=1"), 2, BAD_OPTION)


def test_wire_api_takes_the_proxys_names_and_reads_the_old_ones() -> None:
    """harness.wire_api is the proxy's name of a wire format; the spellings before the rename still compose (as the
    new names), and a name the proxy does not serve is one problem naming those it does."""
    assert compose_resolved(["harness.wire_api=chat_completions"]).experiment.harness.wire_api == "chat"
    assert compose_resolved(["+harness=claude-code", "harness.wire_api=anthropic_messages"]
                            ).experiment.harness.wire_api == "anthropic"
    with pytest.raises(ConfigError) as caught:
        compose_resolved(["harness.wire_api=telnet"])
    assert "harness.wire_api 'telnet'" in str(caught.value) and "anthropic, chat, gemini, responses" in str(
        caught.value)
