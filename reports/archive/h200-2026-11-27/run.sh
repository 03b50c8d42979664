#!/bin/bash
# The device checks of issues 43 and 44 in one call on a lent GPU, before `make tour` exists:
# dropout's masks per dtype and the churn pair's parity noise (python -m common.measure.dropout),
# then `make recipe-amp` over 3 alternating rounds, each process's phase timeline in its result.
# Run from the repository's root with the wheels in .whl; what comes back is written under $OUT.
set -u
export PYTHONUNBUFFERED=1 COOKBOOK_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
{ date -u +%FT%TZ; git rev-parse HEAD 2>&1; git status --short 2>&1 | head -20
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_capability())'; } \
    > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
timeout 150 python3 -m common.measure.dropout --out "$OUT/dropout.json" 2>&1 | tee "$OUT/dropout.log"
set -o pipefail
timeout 330 make recipe-amp PYTHON=python3 ARGS='--rounds 3' 2>&1 | tee "$OUT/amp.log"
echo "recipe-amp exit: $?"
tar czf "$OUT/amp_results.tgz" reports/results reports/amp.md reports/amp.png reports/amp_*diff.html 2>/dev/null
tar czf "$OUT/amp_traces.tgz" reports/traces 2>/dev/null
ls -la "$OUT"
