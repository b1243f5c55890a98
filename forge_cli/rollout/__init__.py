"""Running (task x harness x sandbox) to rollout results, and planning such runs."""
