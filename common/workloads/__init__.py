"""The workloads, one module each (common/workloads/<name>.py: its model, its data functions and its
WORKLOAD spec, which common/workload_specs.py reads), and the readers of their data sets (telco,
cifar10, datasource, device_batches)."""
from common.workload_specs import resolve, workload_names, workload_spec

_HOST = {}  # (workload, data arg) -> its host arrays, read once per process


def host_arrays(workload: str, data_arg: str | None):
    """The workload's arrays in host memory and their source record (its spec's load), read once."""
    key = (workload, data_arg)
    if key not in _HOST:
        _HOST[key] = resolve(workload_spec(workload).load)(data_arg)
    return _HOST[key]


def preload(workload: str, data_arg: str | None) -> None:
    """A workload's host arrays read ahead: a pipelined process reads them while it waits at its gate."""
    if workload in workload_names():
        host_arrays(workload, data_arg)
