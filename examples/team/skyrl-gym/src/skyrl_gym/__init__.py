"""skyrl-gym of the team fixture."""

NAME = "skyrl-gym"
