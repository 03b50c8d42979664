"""`make recipe-precision` in smoke mode, and the stamp that says which fp32 a run used."""
from conftest import comparison_of


def test_precision_pairs_pass_parity_and_the_stamps_record_the_settings(smoke_run):
    proc, reports = smoke_run("precision")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for w, entry in comparison_of(reports, "precision")["workloads"].items():
        assert entry["parity"]["ok"], (w, entry["parity"])
        assert (entry["slow"]["env"]["tf32_matmul"], entry["slow"]["env"]["tf32_cudnn"]) == (False, False)
        assert (entry["fast"]["env"]["tf32_matmul"], entry["fast"]["env"]["tf32_cudnn"]) == (True, True)
        assert entry["fast"]["env"]["float32_matmul_precision"] == "high"
