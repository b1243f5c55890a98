"""forge rollouts as veRL 0.9.1 agent-loop outputs.

``convert`` (importable without veRL) turns one built rollout into the plain fields of veRL's ``AgentLoopOutput``s;
``forge_cli.remote.verl.agent_loop.ForgeHarnessAgentLoop`` (imported only inside veRL's environment) runs a forge
rollout and returns them; ``launch`` and ``mapping`` plan and start ``forge train trainer=verl`` (docs/verl.md).
"""
