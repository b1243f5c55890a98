"""The dry-run plan: every harness x env x runtime x trainer composes and plans; goldens for renders."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from forge_cli.config.compose import compose, group_options
from forge_cli.envs.miniwob import package_html as miniwob_pages
from forge_cli.errors import UserError
from forge_cli.harness.adapter import RolloutContext, prepare
from forge_cli.rollout.plan import MASKED_KEY, build_plan
from tests.golden import check_golden
from tests.helpers import EXAMPLE_TASKS, forge

GOLDEN = Path(__file__).parent / "golden"
OPTIONS = group_options()
COMBOS = list(itertools.product(sorted(OPTIONS["harness"]), sorted(OPTIONS["env"]), sorted(OPTIONS["runtime"]),
                                sorted(OPTIONS["trainer"])))


@pytest.fixture(autouse=True)
def _empty_forge_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans must not depend on what this machine has installed."""
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "forge-home"))


@pytest.mark.parametrize(("harness", "env", "runtime", "trainer"), COMBOS, ids=["-".join(c) for c in COMBOS])
def test_every_combination_plans(harness: str, env: str, runtime: str, trainer: str) -> None:
    # auto_context: the harnesses whose own first prompt exceeds the default context are served a longer one
    # kubernetes pods call the in-cluster proxy: forge reaches it at proxy.url (a port-forward)
    remote = ["proxy.url=http://127.0.0.1:8800"] if runtime == "kubernetes" else []
    exp = compose([f"+harness={harness}", f"+env={env}", f"runtime={runtime}", f"trainer={trainer}",
                   "model.auto_context=true", *remote]).experiment
    if env == "miniwob" and runtime != "kubernetes" and miniwob_pages() is not None:
        plan = build_plan(exp)  # the pages of the installed package: tasks to plan, no checkout needed
        assert plan.rollouts and plan.tasks["split"] == "test"
        return
    if env == "osworld" and runtime != "kubernetes":
        plan = build_plan(exp)  # forge's own OSWorld-format tasks: no checkout needed to plan
        assert plan.rollouts and plan.tasks["split"] == "test_all"
        assert all(r.tools and r.tools["desktop"]["image"] == "forge-desktop:bookworm" for r in plan.rollouts)
        return
    if env not in ("builtin", "recovery"):
        # an env with nothing to run (no checkout configured, its adapter not built, or a runtime its tasks cannot
        # run on) says so: exit 2, no plan
        with pytest.raises(UserError) as raised:
            build_plan(exp)
        assert raised.value.exit_code == 2 and "env" in raised.value.message and raised.value.fix
        return
    plan = build_plan(exp)
    assert plan.rollouts
    assert plan.choices == {"harness": harness, "env": env, "runtime": runtime, "model": "smollm2", "algo": "grpo",
                            "trainer": trainer}
    assert plan.tasks["split"] == "test" and plan.num_tasks >= (20 if env == "builtin" else 7)
    assert plan.num_rollouts == plan.num_tasks * exp.rollout.samples_per_task
    for r in plan.rollouts:
        assert r.proxy_base_url.endswith(f"/r/{r.rollout_id}/v1")
        assert r.sandbox["kind"] == runtime
        assert r.command and r.timeouts["rollout_s"] == exp.rollout.timeout_s
        rendered = json.dumps([r.config_files, r.env, r.command, r.sandbox])
        assert "{{" not in rendered, "every template placeholder is filled"
        assert MASKED_KEY in rendered or "****" in rendered, "the key appears only masked"
        if runtime == "kubernetes":
            pod, policy = yaml.safe_load_all(r.sandbox["manifests"])
            assert pod["kind"] == "Pod" and policy["kind"] == "NetworkPolicy"
            assert pod["metadata"]["labels"]["forge.rollout"] == r.rollout_id
        if runtime == "docker":
            assert r.sandbox["docker_run"].startswith("docker run")
            assert (":ro" in r.sandbox["docker_run"]) == (r.bundle["host_path"] is not None)


@pytest.mark.parametrize("harness", sorted(OPTIONS["harness"]))
def test_rendered_harness_config_golden(harness: str) -> None:
    exp = compose([f"+harness={harness}"]).experiment
    ctx = RolloutContext(rollout_id="task-0-abc123", proxy_url="http://127.0.0.1:8800", api_key="fk-test-key",
                         instruction="Create hello.txt", workdir="/work", home="/tmp/forge-home",
                         bundle="/opt/forge/harness")
    inv = prepare(exp.harness, exp.model, ctx)
    parts = [f"# argv\n{json.dumps(inv.argv, indent=1)}", f"# env\n{json.dumps(inv.env, indent=1)}"]
    parts += [f"# file {path}\n{content}" for path, content in inv.files.items()]
    text = "\n".join(parts) + "\n"
    check_golden(GOLDEN / "harness" / f"{harness}.txt", text)
    assert "http://127.0.0.1:8800/r/task-0-abc123" in text


def test_kubernetes_without_the_in_cluster_proxy_is_refused() -> None:
    exp = compose(["runtime=kubernetes"]).experiment
    with pytest.raises(UserError) as raised:
        build_plan(exp)
    assert raised.value.exit_code == 2 and "proxy.url" in raised.value.message
    assert raised.value.fix and "port-forward" in raised.value.fix


def test_kubernetes_manifests_golden() -> None:
    exp = compose(["+harness=codex", "runtime=kubernetes", f"env.path={EXAMPLE_TASKS}",
                   "proxy.url=http://127.0.0.1:8800"]).experiment
    plan = build_plan(exp, run_id="golden-run")
    check_golden(GOLDEN / "kubernetes" / "codex-builtin.yaml", plan.rollouts[0].sandbox["manifests"])


def test_docker_run_golden(tmp_path: Path) -> None:
    exp = compose(["+harness=pi", "runtime=docker", "runtime.resources.memory=4g",
                   f"env.path={EXAMPLE_TASKS}"]).experiment
    plan = build_plan(exp, run_id="golden-run")
    sandbox = plan.rollouts[0].sandbox
    text = (sandbox["docker_run"] + "\n" + sandbox["exec"] + "\n").replace(str(tmp_path), "$TMP")
    check_golden(GOLDEN / "docker" / "pi-builtin.txt", text)


def test_dry_run_cli_json() -> None:
    result = forge("rollout", "--dry-run", "+harness=openclaw", "env.split=train", "model.max_model_len=10240",
                   "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["tasks"]["split"] == "train" and plan["num_tasks"] >= 60
    (first, *_) = plan["rollouts"]
    assert first["verifier"] and first["verifier"] not in first["instruction"]


def test_dry_run_of_an_env_that_cannot_run_exits_2() -> None:
    for env in ("claweval", "qwenclawbench", "harbor"):
        result = forge("rollout", "--dry-run", f"+env={env}")
        assert result.returncode == 2, (env, result.stderr)
        assert "Traceback" not in result.stderr and "fix:" in result.stderr


def test_dry_run_cli_text_default() -> None:
    result = forge("rollout", "--dry-run")
    assert result.returncode == 0, result.stderr
    for needle in ("split 'test'", "proxy base URL: http://127.0.0.1:8800/r/", "command:",
                   "FORGE_API_KEY=****", "timeouts:", "resources:"):
        assert needle in result.stdout


def test_served_context_too_small_for_the_harness_prompt_is_raised_by_default_and_refused_when_meant() -> None:
    """Qwen Code's own first prompt (~18,000 tokens) + 160 answer tokens cannot fit SmolLM2's native 8,192. On the
    defaults the plan serves 18,432 (18,160 rounded up to 1,024s) and says so; a max_model_len the user sets is
    taken as meant: refused with the fix unless model.auto_context=true is given too (false: always refused)."""
    auto = build_plan(compose(["+harness=qwen-code"]).experiment)
    assert any("max_model_len=18432 instead of 8192" in w for w in auto.warnings)
    for meant in (["model.max_model_len=8192"], ["model.auto_context=false"]):
        with pytest.raises(UserError) as raised:
            build_plan(compose(["+harness=qwen-code", *meant]).experiment)
        assert raised.value.exit_code == 2 and "qwen-code" in raised.value.message
        assert "18160" in raised.value.message
        assert raised.value.fix and "model.max_model_len=18432" in raised.value.fix
        assert "auto_context" in raised.value.fix
    both = build_plan(compose(["+harness=qwen-code", "model.max_model_len=8192", "model.auto_context=true"]).experiment)
    assert any("max_model_len=18432 instead of 8192" in w for w in both.warnings)
    served = build_plan(compose(["+harness=qwen-code", "model.max_model_len=18160"]).experiment)
    assert not any("max_model_len" in w for w in served.warnings)
    assert not any("max_model_len" in w for w in build_plan(compose(["+harness=pi"]).experiment).warnings)
    # the harness is configured for the context served (OpenClaw: 9,000 + 160 -> 9,216)
    openclaw = build_plan(compose(["+harness=openclaw"]).experiment)
    assert "contextWindow: 9216" in json.dumps(openclaw.rollouts[0].config_files)


@pytest.mark.parametrize("native_bf16", [True, False])
def test_the_context_note_gives_the_prefill_cost_where_it_was_measured(monkeypatch: pytest.MonkeyPatch,
                                                                       native_bf16: bool) -> None:
    """Measured for the default model on a 2-core CPU with native bf16 (9,000 tokens in 10.3 s); elsewhere the note
    says it is not measured and names the benchmark that measures it, instead of guessing."""
    import forge_cli.serve.server as server

    monkeypatch.setattr(server, "cpu_has_native_bf16", lambda: native_bf16)
    (note,) = [w for w in build_plan(compose(["+harness=openclaw"]).experiment).warnings if "auto_context" in w]
    if native_bf16:
        assert "costs ~10 s per call" in note and "9,000 tokens in 10.3 s" in note
    else:
        assert "not measured yet" in note and "benchmarks/serve.py --prefill 9000" in note
    api = compose(["+harness=openclaw", "model=vllm", "model.path=/x", "model.max_model_len=8192",
                   "model.auto_context=true"]).experiment
    from forge_cli.rollout.plan import fit_context

    _, other = fit_context(api)
    assert other is not None and "with this model is not measured" in other
