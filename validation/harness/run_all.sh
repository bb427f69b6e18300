#!/bin/bash
# meshcast GPU measurement runner. Usage (on the device machine, from the repo root):
#   validation/harness/run_all.sh kernels PREFIX BUDGET_S     # single-GPU suite on GPU 0
#   validation/harness/run_all.sh multi   PREFIX              # collectives + DDP/FSDP train steps, all GPUs
# Files go to $OUT (or ./out when $OUT is unset) as PREFIX_kernels.json, PREFIX_collectives.json,
# PREFIX_train.json, with logs beside them.
set -o pipefail
export PYTHONUNBUFFERED=1
# never let NCCL / PyTorch / NVSHMEM use NVLink multicast on shared hosts
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-out}; mkdir -p "$OUT"
H=$(dirname "$0")
mode=$1; prefix=$2; budget=${3:-330}
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used --format=csv || true
case $mode in
  kernels)
    CUDA_VISIBLE_DEVICES=${GPU:-0} python3 "$H/kernels.py" --out "$OUT/${prefix}_kernels.json" \
      --budget-s "$budget" ${SECTIONS:+--sections $SECTIONS} 2>&1 | tee "$OUT/${prefix}_kernels.log" ;;
  multi)
    n=$(python3 -c 'import torch; print(torch.cuda.device_count())')
    nvidia-smi topo -m || true
    python3 -m torch.distributed.run --nproc_per_node="$n" "$H/collectives.py" \
      --out "$OUT/${prefix}_collectives.json" --budget-s "${COLL_BUDGET:-150}" 2>&1 | tee "$OUT/${prefix}_collectives.log"
    python3 -m torch.distributed.run --nproc_per_node="$n" "$H/train_step.py" --dist \
      --out "$OUT/${prefix}_train.json" --budget-s "${TRAIN_BUDGET:-200}" 2>&1 | tee "$OUT/${prefix}_train.log" ;;
  *) echo "usage: $0 kernels|multi PREFIX [BUDGET_S]"; exit 2 ;;
esac
