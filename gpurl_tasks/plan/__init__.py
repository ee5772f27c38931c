"""Plan: from `uv.lock` to the layer plan.

The lock model and install closure (`lock`), whether the lock is stale (`lockcheck`: uv's
answer where it can give one), target tags and markers (`target`), wheel sizes (`sizes`, and
the HTTP `probe` for sizes a lock lacks), the slice files' lines and committed layout
(`slices`), what the lock's git history says changes often (`history`), what a compiled-wheel
glob names (`wheelglobs`), the workspace's sdist build settings and the slices staged with them
(`buildenv`), the pure packer (`planner`) and its variants (`variants`, planned together), the
edge that feeds them from a config (`profile`), the pinned post-installs as the last slice
(`postinstall`), and the plan as data (`model`, `report`), how many layers an image may have
(`layerlimit`), and fitting the plans under that budget (`fitting`, given the count).
Imports only the shared basics and `writer`.
"""
