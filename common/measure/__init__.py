"""In the measured child process, around the recipe's steps: timing, memory, CPU time, the GPU
monitor, NVTX ranges, the profiler and its trace reading, HTA, fault injection, the environment stamp."""
