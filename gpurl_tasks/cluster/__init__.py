"""The cluster path: the iris CLI adapter (`iris`), the generated kaniko script (`kaniko`), the
workspace bundle (`bundle`), the guard rails and job composition (`submit`), the state watcher
(`watch`) and the tasks' functions that wire them to the real world (`jobs`).

Imports the basics, `plan`, `dockerfile` and `oci`; never `local`.
"""
