#!/bin/bash
# The second call: `make recipe-amp` with the masks shared over the checked stages (issue 44), 3 rounds,
# then the A/A on churn (its second role's dropout reseeded after the probe: the noise the windows are
# judged against on this GPU). Run from the repository's root with the wheels in .whl.
set -u
export PYTHONUNBUFFERED=1 COOKBOOK_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
set -o pipefail
timeout 280 make recipe-amp PYTHON=python3 ARGS='--rounds 3' 2>&1 | tee "$OUT/amp.log"
echo "recipe-amp exit: $?"
tar czf "$OUT/amp_results.tgz" reports/results reports/amp.md reports/amp.png reports/amp_*diff.html 2>/dev/null
timeout 110 make recipe-amp PYTHON=python3 ARGS='--aa --workloads churn --rounds 3' 2>&1 | tee "$OUT/aa.log"
echo "aa exit: $?"
tar czf "$OUT/aa_results.tgz" reports/results/amp/aa 2>/dev/null
ls -la "$OUT"
