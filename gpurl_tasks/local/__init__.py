"""The local path on this machine: the Docker engine and BuildKit client (`engine`), the base
image (`base_image`), the loopback package index (`pyindex`) and registry (`registry_server`),
`setup`, the BuildKit build and push (`builder`, `build_log`) and the main job (`pipeline`).

All edges (processes, sockets, files). Imports everything below it; never `cluster`.
"""
