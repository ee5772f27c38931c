#!/usr/bin/env bash
# The GPU check's real-GPU proof (issue 52): run by the device tool from the main checkout's
# .gpuwork/ (this folder, gpurl_tasks/gpu and errors beside it). Writes to $OUT.
set -u
W=$(cd "$(dirname "$0")" && pwd); cd "$W"
export PYTHONUNBUFFERED=1 PYTHONPATH="$W"
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
{
step environment
nvidia-smi; nvcc --version | tail -2; ls -la /dev/infiniband 2>&1
python3 -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
TL=$(python3 -c 'import torch, pathlib; print(pathlib.Path(torch.__file__).parent / "lib")')
CUDART=$(ls "$(dirname "$(dirname "$(command -v nvcc)")")"/lib64/libcudart.so.1[0-9] | head -1)
echo "torch lib $TL; cudart $CUDART"; readelf -SW "$TL/libtorch_cuda.so" | grep -E 'nv_fatbin|relfatbin'

step compile the tiny kernels, one arch each
mkdir -p /tmp/k && cd /tmp/k
for spec in sm80:arch=compute_80,code=sm_80 sm90:arch=compute_90,code=sm_90 \
            ptx80:arch=compute_80,code=compute_80 sm100:arch=compute_100,code=sm_100; do
  name=${spec%%:*}; echo "nvcc -shared -Xcompiler -fPIC -cudart shared -gencode ${spec#*:} -o add_one_$name.so add_one.cu"
  nvcc -shared -Xcompiler -fPIC -cudart shared -gencode "${spec#*:}" -o "add_one_$name.so" "$W/add_one.cu" || echo "FAILED $name"
done
ls -la /tmp/k; tar cf "$OUT/add_one.tar" -C /tmp/k .
cd "$W"

step launch each for real on GPU 0
python3 probe.py launch "$CUDART" /tmp/k/add_one_sm80.so /tmp/k/add_one_sm90.so /tmp/k/add_one_ptx80.so /tmp/k/add_one_sm100.so

step the reader on torch\'s libraries and the tiny kernels, compared with cuobjdump
python3 probe.py survey libtorch_cuda.so,libc10_cuda.so,add_one_sm80.so,add_one_sm90.so,add_one_ptx80.so,add_one_sm100.so \
  "$TL"/*.so* /tmp/k/*.so

step the one-GPU NCCL all-reduce with NCCL_DEBUG=INFO on stdout
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET python3 -c '
import torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29511", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
print("all-reduce sum ok:", bool((x == 1).all())); dist.destroy_process_group()' 2>&1 | grep -E "NET|network|Socket|IB|sum ok|Error|error" | head -30

step check.py on the whole environment: site-packages, configured archs, two asserts
python3 -m gpurl_tasks.gpu.check --out "$OUT/check-env.json" --image-digest "sha256:$(printf gpurl-device-proof | sha256sum | cut -c1-64)" \
  --arch-list "8.0;9.0;10.0" --gpus 1 \
  --assert 'import torch; x = torch.randn(256, 256, device="cuda"); torch.testing.assert_close(x @ torch.eye(256, device="cuda"), x)' \
  --assert 'import torch.nn.functional as F, torch; q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.bfloat16); F.scaled_dot_product_attention(q, q, q)'
echo "exit $?"

step check.py on the tiny kernels only: sm_80 and sm_100 must be findings on 9.0
python3 -m gpurl_tasks.gpu.check --out "$OUT/check-kernels.json" --image-digest "sha256:$(printf gpurl-device-proof | sha256sum | cut -c1-64)" \
  --root /tmp/k --gpus 1 --nccl-mib 16 --assert 'assert False, "a configured assert that fails"'
echo "exit $?"
step done
} 2>&1 | tee "$OUT/device.log"
