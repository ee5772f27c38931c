"""skyrl-train of the team fixture."""

NAME = "skyrl-train"
