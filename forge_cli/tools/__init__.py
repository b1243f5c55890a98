"""Task tools: specs, backends, the per-run tool server (MCP + REST) and skill files for harnesses without MCP."""
