"""The churn workload: the seed's MLP on the Telco Customer Churn table (38 features, one probability).

A step's samples are customers (rows). Its data functions hand the recipes the standardized split,
read once per process (host_arrays); the served pairs get weights trained once (churn_weights),
so that their answers differ from customer to customer."""
import torch
import torch.nn as nn

from common.workload_specs import WorkloadSpec
from common.workloads import host_arrays

WORKLOAD = WorkloadSpec(
    title="the churn MLP on Telco",
    order=0,
    noise_floor=True,  # sub-millisecond steps, no augmentation: the steadiest step to measure noise on
    sizes={
        "cuda": {"batch_size": 64, "steps": 300, "warmup": 30, "profile_steps": 5, "min_time": 2.0},
        "cpu": {"batch_size": 64, "steps": 300, "warmup": 20, "profile_steps": 3, "min_time": 2.0},
        "smoke": {"batch_size": 32, "steps": 6, "warmup": 2, "profile_steps": 2, "min_time": 0.0},
    },
    load="common.workloads.telco:load",
    check="common.workloads.telco:read_csv",
    locate="common.workloads.telco:locate",
    dataset="telco",
    data_help="FILE.csv",
    baseline="baselines.churn_mlp",
    answer="churn_probability",
    requests="common.workloads.telco:test_rows",
)


def _split(run):
    """The Telco split (X_train, X_test, y_train, y_test) for run.data; the run's result names its source."""
    *split, source = host_arrays("churn", run.data)
    run.record_data_source(source)
    return split


def train_tensors(run):
    """The standardized training split (features, targets) on run.device."""
    X_train, _, y_train, _ = _split(run)
    return torch.from_numpy(X_train).to(run.device), torch.from_numpy(y_train).to(run.device)


def splits(run):
    """The seed's split as CPU tensors (X_train, X_test, y_train, y_test), standardized."""
    return tuple(torch.from_numpy(a) for a in _split(run))


def requests(run):
    """The standardized test split on run.device: the customers a served model answers."""
    _, X_test, _, _ = _split(run)
    return torch.from_numpy(X_test).to(run.device)


def served(data_arg: str | None):
    """What a served twin loads (common.server): the feature count, ChurnMLP's trained weights, the source."""
    X_train, _, _, _, source = host_arrays("churn", data_arg)
    return X_train.shape[1], _weights(data_arg, ChurnMLP), source


def trained_weights(run, model_factory) -> dict:
    """Weights of model_factory trained on the train split (the same in every process, cached)."""
    _split(run)  # the run's result names its source
    return _weights(run.data, model_factory)


def _weights(data_arg: str | None, model_factory) -> dict:
    from common.workloads import churn_weights

    X_train, _, y_train, _, _ = host_arrays("churn", data_arg)
    return churn_weights.trained(torch.from_numpy(X_train), torch.from_numpy(y_train), model_factory)


HIDDEN_SIZES = (512, 1024, 512, 256, 128)


class ProblematicChurnModel(nn.Module):
    """The seed's deliberately inefficient model, kept as the seed has it: two needless elementwise
    ops before the network and a `.item()` host sync on the output mean in every forward.

    host_sync=False keeps that monitoring statistic on the device instead (`last_mean_activation`,
    a tensor read whenever someone wants it), which is what the sync_removal recipe changes."""

    def __init__(self, input_size, hidden_sizes=HIDDEN_SIZES, host_sync=True):
        super().__init__()
        self.host_sync = host_sync
        self.last_mean_activation = None
        layers = []
        prev_size = input_size
        for hidden_size in hidden_sizes:
            layers.append(nn.Linear(prev_size, hidden_size))
            layers.append(nn.ReLU())
            layers.append(nn.Dropout(0.3))
            prev_size = hidden_size
        layers.append(nn.Linear(prev_size, 1))
        layers.append(nn.Sigmoid())
        self.network = nn.Sequential(*layers)
        self.custom_activation = nn.ReLU()  # unused, as in the seed

    def forward(self, x):
        batch_size = x.size(0)
        x = x + 0.0001  # needless op: a new tensor and a kernel
        x = x * 1.0001  # needless op: another one
        x = self.network(x)
        if batch_size > 1:
            mean_activation = torch.mean(x.detach())
            if self.host_sync:
                mean_activation = mean_activation.item()  # note: this is a sync point (the seed's)
            self.last_mean_activation = mean_activation
        return x


class ChurnMLP(nn.Module):
    """The same layers (and so the same parameters, in the same order) without the extra work."""

    def __init__(self, input_size, hidden_sizes=HIDDEN_SIZES):
        super().__init__()
        layers = []
        prev_size = input_size
        for hidden_size in hidden_sizes:
            layers += [nn.Linear(prev_size, hidden_size), nn.ReLU(), nn.Dropout(0.3)]
            prev_size = hidden_size
        layers += [nn.Linear(prev_size, 1), nn.Sigmoid()]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)
