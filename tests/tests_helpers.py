"""Hand-made typed results for unit tests that need no child process."""
from common.analysis import stats
from common.analysis.results_run import Config, DataSource, Memory, RunResult, Stamp, Timing


def stamp(device="cpu") -> Stamp:
    return Stamp(device_type=device, gpu_name="NVIDIA H100 80GB HBM3" if device == "cuda" else None,
                 gpu_memory_gb=85.0 if device == "cuda" else None, driver=None, cuda="13.0", cudnn=None,
                 tf32_matmul=False, tf32_cudnn=True, cudnn_benchmark=False, float32_matmul_precision="highest",
                 torch="2.11.0", torchvision="0.26.0", python="3.12", cpu="test CPU", cpu_count=2, cpu_set=[0, 1],
                 torch_threads=2, date="2026-11-22T00:00:00+00:00", git_commit="abc")


def run_result(ms=10.0, steps=20, variant="slow", losses=None, batch_size=32, device="cpu", status="ok",
               spread=0.01) -> RunResult:
    step_ms = [ms * (1 + spread * ((i % 5) - 2) / 2) for i in range(steps)]
    r = RunResult(recipe="amp", workload="churn", pair="churn", variant=variant, status=status, device=device,
                  smoke=False, config=Config(batch_size=batch_size, steps=steps, warmup=2, profile_steps=0,
                                             image_size=None, seed=42, data="synthetic"),
                  env=stamp(device), data_source=DataSource(kind="synthetic"), notices=[], total_s=1.0)
    if status == "ok":
        r.timing = Timing(step_ms=step_ms, summary=stats.summarize(step_ms, batch_size), warmup_steps=2, warmup_s=0.1,
                          first_step_s=0.05, timed_wall_s=sum(step_ms) / 1000, cpu_ms_per_step=ms,
                          worker_cpu_ms_per_step=None, host_data_ms_median=0.01, host_data_share=0.001,
                          data_wait_share=0.001)
        r.memory = Memory(kind="cpu_peak_rss", peak_mb=100.0)
        r.losses = list(losses) if losses is not None else [1.0 / (1 + 0.05 * i) for i in range(steps + 4)]
    return r


def headline_of(stdout: str) -> str:
    """A doctor's headline line, less what the suite's other worker can add to it by keeping the cores busy:
    the load said first ("The machine was busy: ...; as measured: ", tests/integration/test_doctor.py) and the
    uneven steps said last ("; but its step times varied by CV ...", tests/unit/test_doctor_units.py)."""
    line = next(line for line in stdout.splitlines() if line.startswith("Headline: "))
    if line.startswith("Headline: The machine was busy: "):
        rest = line.split("; as measured: ", 1)[1]
        line = "Headline: " + rest[0].upper() + rest[1:]
    return line.split("; but its step times varied by CV ", 1)[0]
