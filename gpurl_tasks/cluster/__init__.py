"""The cluster path: the iris CLI adapter (`iris`) and the release it is checked against
(`iris_release`), the kaniko script (`kaniko`, rendered at submit time from the bash templates
in script/), the gpurl the job runs (`jobapp`, a zipapp whose `__main__` is `jobmain`; its
steps before the first executor run are `jobstart`), the
workspace bundle and its staging (`bundle`), every build prerequisite checked alone (`doctor`),
the guard rails and job composition (`submit`, which runs doctor's checks first), the state
watcher (`watch`), the tasks' functions that wire them to the real world (`jobs`), and
`invoke verify-gpu`'s job: the pushed image on one node's GPUs, its verdict attached (`gpujob`).

Imports the basics, `plan`, `dockerfile`, `attest`, `oci`, `rebuild` (doctor reads the
prebuilt wheels' MANIFEST), `release` and `gpu`; never `local`.
"""
