"""Desktops for OSWorld tasks: the ``forge-desktop`` image, one container per rollout, computer-use tools."""
