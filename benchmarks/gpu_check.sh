#!/usr/bin/env bash
# The NCCL check for a machine with GPUs (issue 25): the reference on 2 ranks with
# --backend nccl inside torchrun (2 GPUs, or 2 processes sharing one where that is all there
# is: the reference maps LOCAL_RANK modulo the devices), then the DIST mutants under NCCL,
# each of which must fail its
# clause. Prints the devices, each step's table and wall time; exits non-zero on any surprise.
# Run from the repository root: bash benchmarks/gpu_check.sh [PYTHON]
set -u
PY=${1:-python}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYEOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices",
      torch.cuda.device_count(), [torch.cuda.get_device_name(i)
                                  for i in range(torch.cuda.device_count())])
print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
PYEOF
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -lt 1 ]; then echo "no GPU visible: nothing to check"; exit 2; fi
if [ "$NGPU" -lt 2 ]; then
  # one device: both local ranks on cuda:0 (the trainer maps LOCAL_RANK modulo the count)
  export CUDA_VISIBLE_DEVICES=0
  echo "one GPU: both ranks share cuda:0"
fi
status=0
run() {  # NAME EXPECTED_STATUS ARGS...
  local name=$1 want=$2; shift 2
  local t0=$SECONDS
  timeout 560 "$PY" -m torch.distributed.run --standalone --nproc-per-node=2 \
      -m trainspec check "$@" --backend nccl --report "$OUT/$name.json" \
      --junit "$OUT/$name.xml" > "$OUT/$name.txt" 2>&1
  local got=$?
  echo "== $name: exit $got (want $want), $((SECONDS - t0)) s"
  grep -E "^[A-Z]+-[0-9]+ |clauses" "$OUT/$name.txt" | grep -v " n/a " | tail -50
  if [ "$got" != "$want" ]; then status=1; tail -40 "$OUT/$name.txt"; fi
}
run reference 0 reference
for m in StopVerdictOnRankZeroOnly BestWeightsOnRankZeroOnly EveryRankWritesCheckpoints \
         NoProcessGroupTimeout PoolsOnRankZeroOnly; do
  run "mutant-$m" 1 --base-trainer "tests.mutants.dist:$m" --clauses DIST
done
exit $status
