"""From saved results to figures, importing no torch: the result schema, statistics, aggregation over
processes and parity, the metrics a report shows, goals, the matmul ceiling for MFU."""
