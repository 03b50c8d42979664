"""The workloads' data: the Telco churn table, CIFAR-10, batches kept on the device, and where each
comes from (a given path, the real source, or a synthetic stand-in)."""
