#!/usr/bin/env bash
# The second device call (issue 52): after the first showed /dev/infiniband with only rdma_cm
# and libcufft holding SASS sm_75 only in .nv_fatbin: what libcufft carries, the reader checked
# against cuobjdump on every file with device code in the environment, check.py again.
set -u
W=$(cd "$(dirname "$0")" && pwd); cd "$W"
export PYTHONUNBUFFERED=1 PYTHONPATH="$W"
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
SP=$(python3 -c 'import torch, pathlib; print(pathlib.Path(torch.__file__).parent.parent)')
DIGEST="sha256:$(printf gpurl-device-proof | sha256sum | cut -c1-64)"
{
step what libcufft carries
ls -la /dev/infiniband
python3 probe.py inspect "$SP"/nvidia/cu13/lib/libcufft.so.12 "$SP"/torch/lib/libtorch_cuda.so
for flag in --list-elf --list-ptx; do echo "cuobjdump $flag libcufft.so.12:"; cuobjdump $flag "$SP"/nvidia/cu13/lib/libcufft.so.12 2>&1 | head -5; cuobjdump $flag "$SP"/nvidia/cu13/lib/libcufft.so.12 2>&1 | wc -l; done
ls "$SP"/nvidia/cu13/lib/ | head -40

step the reader against cuobjdump on every file with device code
python3 probe.py all "$SP"

step check.py on the whole environment, torch.fft among the asserts
python3 -m gpurl_tasks.gpu.check --out "$OUT/check-env.json" --image-digest "$DIGEST" \
  --arch-list "8.0;9.0;10.0" --gpus 1 \
  --assert 'import torch; x = torch.randn(256, 256, device="cuda"); torch.testing.assert_close(x @ torch.eye(256, device="cuda"), x)' \
  --assert 'import torch.nn.functional as F, torch; q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.bfloat16); F.scaled_dot_product_attention(q, q, q)' \
  --assert 'import torch; x = torch.randn(4096, device="cuda"); torch.testing.assert_close(torch.fft.irfft(torch.fft.rfft(x), n=4096), x, atol=1e-4, rtol=1e-4)'
echo "exit $?"
step done
} 2>&1 | tee "$OUT/device2.log"
