"""writer: the slice writer, its records and the composition (stdlib only).

What the cluster job runs in env-base's python3 from the zipapp `invoke build` stages (these
modules' own files, all but `check`) and the local path imports,
so both write the same bytes and compose the same image:

- `blob`: one deterministic layer blob from a staging tree;
- `records`: a slice's cache key, its history entry (made and read back), its one-layer
  record image, the slice index;
- `probe`: what a slice's bytes depend on in the image the writer runs in;
- `composition`: the environment image from env-base and the slice records;
- `ocispec`: the OCI and Docker media types, each spelled once, and the OCI 1.1 artifact that
  carries an attached document (the job's zipapp carries it too; oci/ reads it);
- `staging`: the staging install of one slice (for another machine's wheels, too);
- `compiled`: the prebuilt compiled wheels as one more written layer, keyed by their MANIFEST;
- `check`: what a written layer must hold (its ELF objects' machine, its entry points' Python);
- `retry`: when a registry request is tried again and after how long (gpurl's client, crane);
- `orchestration`: the registry half of a composition, both paths, over a small registry
  interface: cached records trusted only with their blobs, missing slices staged in parallel
  and recorded, every layer checked before the composed manifest;
- `crane`: that interface as the job has it, crane as a subprocess;
- `job`: the job's composition (`compose-env`): each slice staged with uv in env-base;
- `tool`: the command line the job runs.

Imports only the stdlib and itself (the job's copy has nothing else); every layer above may
import it.
"""
