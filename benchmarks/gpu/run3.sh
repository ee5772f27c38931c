#!/usr/bin/env bash
# The third device call (issue 52): the check again on the H200 image's whole environment,
# after fatbin.py learnt cuFFT's own fatbins and kernel-less stub cubins (see README.md).
set -u
W=$(cd "$(dirname "$0")" && pwd); cd "$W"
export PYTHONUNBUFFERED=1 PYTHONPATH="$W"
{
echo "=== check.py on the whole environment ($(date -u +%H:%M:%S))"
python3 -m gpurl_tasks.gpu.check --out "$OUT/check-env.json" --image-digest "sha256:$(printf gpurl-device-proof | sha256sum | cut -c1-64)" \
  --arch-list "8.0;9.0;10.0" --gpus 1 \
  --assert 'import torch; x = torch.randn(4096, device="cuda"); torch.testing.assert_close(torch.fft.irfft(torch.fft.rfft(x), n=4096), x, atol=1e-4, rtol=1e-4)'
echo "exit $?"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); [print(c["name"], c["status"], "-", c.get("reason", ""), c["figures"]) for c in r["checks"]]' "$OUT/check-env.json"
echo "=== done ($(date -u +%H:%M:%S))"
} 2>&1 | tee "$OUT/device3.log"
