"""The local path on this machine: the Docker engine and BuildKit client (`engine`), the base
image (`base_image`), the loopback package index (`pyindex`, filled by `download`) and registry
(`registry_server`), `setup`, kaniko and crane built from source for the cluster path's tests
(`from_source`), each slice staged and written in a container (`stage`) and the environment
composed from them (`compose_env`, which reports in `composed`), a variant's slices written
and checked here, another platform's too (`write_slices`), the BuildKit build and push
(`builder`, `build_log`), the SBOM and provenance attached after it (`attest`), and the main
job: its steps (`actions`) in order (`pipeline`).

All edges (processes, sockets, files). Imports everything below it; never `cluster`.
"""
