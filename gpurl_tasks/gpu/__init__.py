"""What the image does on the GPU node it will run on, checked in a job there before it is
pinned (issue 52). `result` is the check's one document (schema `gpurl.gpu-check/v1`: its
frozen dataclasses, `parse` that refuses anything off, `to_json`); `fatbin` reads the CUDA
architectures an ELF shared object carries (its `.nv_fatbin` containers, in pure Python, no
cuobjdump) and says whether they run on a GPU of a given SM; `check` is the script the job
runs inside the image on the node (stdlib only, torch when the image has it): driver,
kernels, launches, network and build proof, one `result` document out.

`result` and `fatbin` are pure; the three modules import the stdlib, `errors`, `files` (the
atomic writer of the result) and each other only, because the job has no gpurl installed.
Imports the basics; the tasks that submit the job and read its result import it.
"""
