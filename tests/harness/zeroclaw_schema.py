"""ZeroClaw's config.toml, as far as forge writes it: a typed model of the serde structs it reads.

Derived from zeroclaw-labs/zeroclaw at tag v0.8.4 (commit a56c345d51dd8ab562e9351e0d4ab83f6a741db9);
paths and line numbers below are at that commit. Field names, TOML types and enum spellings follow the
Rust definitions; every struct forbids keys it does not declare. ZeroClaw itself ignores unknown keys
with a warning (``Config::unknown_keys``, schema.rs:18525) -- a typo there silently falls back to a
default, which is exactly what this model is here to catch. Only the sections forge renders are
modelled: any other top-level table is an error too.

- ``Config`` (crates/zeroclaw-config/src/schema.rs:78): ``schema_version`` (:127; missing means v1 and
  the file is migrated, migration.rs:42 ``detect_version``, ``CURRENT_SCHEMA_VERSION = 3`` at
  migration.rs:9), ``providers`` (:137), ``agents`` (:459), ``risk_profiles`` (:464),
  ``runtime_profiles`` (:469), ``mcp_bundles`` (:484), ``mcp`` (:522).
- ``[providers.models.custom.<alias>]``: ``CustomModelProviderConfig`` (schema.rs:3185) is
  ``#[serde(flatten)] base: ModelProviderConfig`` (schema.rs:771); the ``custom`` slot is registered
  in crates/zeroclaw-config/src/providers.rs:218 and has no default endpoint (``uri`` is required,
  schema.rs:3171 ``CustomEndpoint::OperatorSupplied``). ``WireApi`` is snake_case (schema.rs:735).
  The compat client posts to ``<uri>/chat/completions`` (crates/zeroclaw-providers/src/compatible.rs:837).
- ``[agents.<alias>]``: ``AliasedAgentConfig`` (schema.rs:3540); dotted references are plain strings
  (``define_provider_ref!``, providers.rs:134-139, ``#[serde(transparent)]``). ``workspace`` and
  ``memory``: ``AgentWorkspaceConfig`` / ``AgentMemoryConfig`` (crates/zeroclaw-config/src/multi_agent.rs:58,
  :78), ``MemoryBackendKind`` snake_case (multi_agent.rs:32).
- ``[risk_profiles.<alias>]``: ``RiskProfileConfig`` (schema.rs:11772, ``#[serde(default)]``);
  ``AutonomyLevel`` lowercase ``readonly | supervised | full`` (crates/zeroclaw-config/src/autonomy.rs:19).
- ``[runtime_profiles.<alias>]``: ``RuntimeProfileConfig`` (schema.rs:11895, ``#[serde(default)]``).
- ``[mcp]``: ``McpConfig`` (schema.rs:4989) with ``servers: Vec<McpServerConfig>`` (schema.rs:4943),
  ``McpTransport`` lowercase ``stdio | http | sse`` (schema.rs:4854); ``[mcp_bundles.<alias>]``:
  ``McpBundleConfig`` (schema.rs:12056). An agent gets MCP servers only through its ``mcp_bundles``.

``check_references`` mirrors ``Config::validate()``'s dangling-reference errors for the agent's
``model_provider`` / ``risk_profile`` / ``runtime_profile`` (docs/book/src/providers/configuration.md,
"Picking which provider an agent uses") and its MCP checks (``validate_mcp_config``, schema.rs:9519: a
non-empty unique name, an http(s) ``url`` for http/sse, a timeout of 1..600 s); ``mcp_servers_for_agent``
mirrors ``Config::mcp_servers_for_agent`` / ``mcp_servers_for_bundles`` (schema.rs:4325, :4346).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

# migration.rs:9
CURRENT_SCHEMA_VERSION = 3
U32 = Annotated[StrictInt, Field(ge=0, le=2**32 - 1)]
U64 = Annotated[StrictInt, Field(ge=0, le=2**64 - 1)]
USize = U64


class _Serde(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ModelProviderConfig(_Serde):
    """schema.rs:771 (shared fields of every provider slot, flattened into the slot's struct)."""

    api_key: StrictStr | None = None
    kind: StrictStr | None = None
    uri: StrictStr | None = None
    model: StrictStr | None = None
    fallback: list[StrictStr] = []
    fallback_models: list[StrictStr] = []
    # TEMPERATURE_RANGE 0.0..=2.0 (schema.rs:4530)
    temperature: Annotated[StrictFloat, Field(ge=0.0, le=2.0)] | None = None
    timeout_secs: U64 | None = None
    extra_headers: dict[StrictStr, StrictStr] = {}
    wire_api: Literal["responses", "chat_completions"] | None = None
    requires_openai_auth: StrictBool = False
    max_tokens: U32 | None = None
    merge_system_into_user: StrictBool = False
    provider_extra: object | None = None
    pricing: dict[StrictStr, StrictFloat] = {}
    replay_assistant_reasoning: StrictBool | None = None
    live_pricing: StrictBool = False
    native_tools: StrictBool | None = None
    think: StrictBool | None = None
    vision: StrictBool | None = None
    chat_template_kwargs: object | None = None
    context_window: USize | None = None
    tls_ca_cert_path: StrictStr | None = None


class CustomModelProviderConfig(ModelProviderConfig):
    """schema.rs:3185; the custom slot has no default endpoint, so ``uri`` is required (schema.rs:3171)."""

    uri: StrictStr


class ModelProviders(_Serde):
    """providers.rs:229 (one map per family slot; only ``custom`` is modelled)."""

    custom: dict[StrictStr, CustomModelProviderConfig] = {}


class Providers(_Serde):
    """providers.rs:719 (``tts`` and ``transcription`` are not modelled: forge writes none)."""

    models: ModelProviders = ModelProviders()


class AgentWorkspaceConfig(_Serde):
    """multi_agent.rs:58."""

    path: StrictStr | None = None
    access: dict[StrictStr, Literal["read", "write", "read_write"]] = {}
    unrestricted_filesystem: StrictBool = False
    read_memory_from: list[StrictStr] = []


class AgentMemoryConfig(_Serde):
    """multi_agent.rs:78."""

    backend: Literal["none", "sqlite", "postgres", "qdrant", "markdown", "lucid"] = "sqlite"


class AliasedAgentConfig(_Serde):
    """schema.rs:3540 (channel, TTS, cron, A2A and identity fields are not modelled: forge sets none)."""

    enabled: StrictBool = True
    model_provider: StrictStr = ""
    risk_profile: StrictStr = ""
    runtime_profile: StrictStr = ""
    skill_bundles: list[StrictStr] = []
    knowledge_bundles: list[StrictStr] = []
    mcp_bundles: list[StrictStr] = []
    acp_enable_mcp: StrictBool = False
    delegate_same_risk_profile: StrictBool = True
    workspace: AgentWorkspaceConfig = AgentWorkspaceConfig()
    memory: AgentMemoryConfig = AgentMemoryConfig()


class RiskProfileConfig(_Serde):
    """schema.rs:11772 (``delegation_policy`` and ``approval_route`` are not modelled)."""

    level: Literal["readonly", "supervised", "full"] = "supervised"
    workspace_only: StrictBool = True
    allowed_commands: list[StrictStr] = []
    forbidden_paths: list[StrictStr] = []
    require_approval_for_medium_risk: StrictBool = True
    block_high_risk_commands: StrictBool = True
    shell_env_passthrough: list[StrictStr] = []
    auto_approve: list[StrictStr] = []
    always_ask: list[StrictStr] = []
    allowed_roots: list[StrictStr] = []
    allowed_tools: list[StrictStr] = []
    excluded_tools: list[StrictStr] = []
    sandbox_enabled: StrictBool | None = None
    sandbox_backend: StrictStr | None = None
    firejail_args: list[StrictStr] = []


class RuntimeProfileConfig(_Serde):
    """schema.rs:11895 (the nested thinking/pruning/eval/compression tables are not modelled)."""

    agentic: StrictBool = False
    max_tool_iterations: USize = 0
    max_actions_per_hour: U32 = 20
    max_cost_per_day_cents: U32 = 500
    shell_timeout_secs: U64 = 60
    max_delegation_depth: U32 = 0
    delegation_timeout_secs: U64 | None = None
    agentic_timeout_secs: U64 | None = None
    max_history_messages: USize | None = None
    max_context_tokens: USize | None = None
    compact_context: StrictBool | None = None
    parallel_tools: StrictBool | None = None
    tool_dispatcher: StrictStr | None = None
    tool_call_dedup_exempt: list[StrictStr] = []
    max_system_prompt_chars: USize | None = None
    max_tool_result_chars: USize | None = None
    keep_tool_context_turns: USize | None = None
    memory_recall_limit: USize | None = None
    strict_tool_parsing: StrictBool = False


class McpServerConfig(_Serde):
    """schema.rs:4943."""

    name: StrictStr = ""
    transport: Literal["stdio", "http", "sse"] = "stdio"
    url: StrictStr | None = None
    command: StrictStr = ""
    args: list[StrictStr] = []
    env: dict[StrictStr, StrictStr] = {}
    headers: dict[StrictStr, StrictStr] = {}
    tool_timeout_secs: U64 | None = None
    pinned_resources: list[StrictStr] = []


class McpConfig(_Serde):
    """schema.rs:4989."""

    enabled: StrictBool = True
    deferred_loading: StrictBool = False
    servers: list[McpServerConfig] = []


class McpBundleConfig(_Serde):
    """schema.rs:12056."""

    servers: list[StrictStr] = []
    exclude: list[StrictStr] = []


class ZeroClawConfig(_Serde):
    """schema.rs:78, the sections forge writes."""

    schema_version: Literal[3]
    providers: Providers = Providers()
    agents: dict[StrictStr, AliasedAgentConfig] = {}
    risk_profiles: dict[StrictStr, RiskProfileConfig] = {}
    runtime_profiles: dict[StrictStr, RuntimeProfileConfig] = {}
    mcp: McpConfig = McpConfig()
    mcp_bundles: dict[StrictStr, McpBundleConfig] = {}


def check_references(config: ZeroClawConfig, agent: str) -> list[str]:
    """What ``Config::validate()`` / ``zeroclaw agent -a AGENT`` would refuse, as messages (none: fine)."""
    errors = []
    entry = config.agents.get(agent)
    if entry is None:
        return [f"`zeroclaw agent --agent {agent}` is not configured (no [agents.{agent}] entry)"]  # main.rs:3756
    family, _, alias = entry.model_provider.partition(".")
    if family != "custom" or alias not in config.providers.models.custom:
        errors.append(f"agents.{agent}.model_provider: providers.models.{entry.model_provider} is not configured")
    if entry.risk_profile not in config.risk_profiles:
        errors.append(f"agents.{agent}.risk_profile: risk_profiles.{entry.risk_profile} is not configured")
    if entry.runtime_profile and entry.runtime_profile not in config.runtime_profiles:
        errors.append(f"agents.{agent}.runtime_profile: runtime_profiles.{entry.runtime_profile} is not configured")
    if config.mcp.enabled:
        errors += _mcp_errors(config.mcp)
    servers = {server.name for server in config.mcp.servers}
    for bundle in entry.mcp_bundles:
        if bundle not in config.mcp_bundles:
            errors.append(f"agents.{agent}.mcp_bundles: mcp_bundles.{bundle} is not configured")
        else:
            errors += [f"mcp_bundles.{bundle}: no [[mcp.servers]] named {name}"
                       for name in config.mcp_bundles[bundle].servers if name not in servers]
    return errors


# schema.rs:9517
MCP_MAX_TOOL_TIMEOUT_SECS = 600


def _mcp_errors(mcp: McpConfig) -> list[str]:
    """``validate_mcp_config`` (schema.rs:9519): what makes ZeroClaw refuse the whole config."""
    errors: list[str] = []
    seen: set[str] = set()
    for i, server in enumerate(mcp.servers):
        name = server.name.strip()
        if not name:
            errors.append(f"mcp.servers[{i}].name must not be empty")
        elif name.lower() in seen:
            errors.append(f"mcp.servers contains duplicate name: {name}")
        seen.add(name.lower())
        timeout = server.tool_timeout_secs
        if timeout is not None and not 0 < timeout <= MCP_MAX_TOOL_TIMEOUT_SECS:
            errors.append(f"mcp.servers[{i}].tool_timeout_secs must be in 1..={MCP_MAX_TOOL_TIMEOUT_SECS}")
        url = (server.url or "").strip()
        if server.transport == "stdio":
            if not server.command.strip():
                errors.append(f"mcp.servers[{i}] with transport=stdio requires non-empty command")
        elif not url:
            errors.append(f"mcp.servers[{i}] with transport={server.transport} requires url")
        elif urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            errors.append(f"mcp.servers[{i}].url must use http/https")
    return errors


def mcp_servers_for_agent(config: ZeroClawConfig, agent: str) -> list[McpServerConfig]:
    """The MCP servers ZeroClaw connects for ``agent``: only those its ``mcp_bundles`` grant (exclude wins;
    an unknown bundle or server name grants nothing), in first-seen order (schema.rs:4325, :4346)."""
    entry = config.agents.get(agent)
    bundles = [config.mcp_bundles[b] for b in (entry.mcp_bundles if entry else []) if b in config.mcp_bundles]
    excluded = {name for bundle in bundles for name in bundle.exclude}
    granted = list(dict.fromkeys(n for bundle in bundles for n in bundle.servers if n not in excluded))
    by_name: dict[str, McpServerConfig] = {}
    for server in config.mcp.servers:
        by_name.setdefault(server.name, server)  # `iter().find`: the first server of that name
    return [by_name[name] for name in granted if name in by_name]


# `zeroclaw agent` (src/main.rs:629-663 at v0.8.4, clap derive): options and whether each takes a value;
# plus the global `--config-dir` and `--log-level` (main.rs:470-477)
AGENT_OPTIONS: dict[str, bool] = {
    "-a": True, "--agent": True, "-m": True, "--message": True, "--session-state-file": True,
    "-p": True, "--model-provider": True, "--provider": True, "--model": True, "-t": True,
    "--temperature": True, "--peripheral": True, "--config-dir": True, "--log-level": True,
}


def parse_agent_argv(argv: list[str]) -> dict[str, str]:
    """``zeroclaw agent …`` as clap would parse it (long and short names as given), or ValueError.

    clap (4.x, no ``allow_hyphen_values`` on these args) reads an argument that starts with ``-`` as a flag,
    never as a value: only ``--name=value`` carries such a value."""
    if argv[:1] != ["agent"]:
        raise ValueError(f"not the agent subcommand: {argv[:1]}")
    options: dict[str, str] = {}
    rest = argv[1:]
    while rest:
        flag, rest = rest[0], rest[1:]
        if flag.startswith("--") and "=" in flag:  # --message=TEXT: the value may start with '-'
            flag, value = flag.split("=", 1)
        elif rest and not rest[0].startswith("-"):  # clap takes no value that looks like a flag
            value, rest = rest[0], rest[1:]
        else:
            value = None
        if flag not in AGENT_OPTIONS:
            raise ValueError(f"error: unexpected argument '{flag}' found")
        if value is None:
            raise ValueError(f"error: a value is required for '{flag}' but none was supplied")
        options[flag] = value
    if "-a" not in options and "--agent" not in options:
        raise ValueError("error: the following required arguments were not provided: --agent <AGENT>")
    return options
