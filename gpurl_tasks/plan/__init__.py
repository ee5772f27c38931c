"""Plan: from `uv.lock` to the layer plan.

The lock model and install closure (`lock`), target tags and markers (`target`), wheel sizes
(`sizes`, and the HTTP `probe` for sizes a lock lacks), the packer (`planner`) and the plan as
data (`model`, `report`). Imports only the shared basics.
"""
