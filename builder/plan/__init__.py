"""Plan: how much memory, how many CPUs, MAX_JOBS and NVCC_THREADS, and why (pure; imports only the
shared leaves)."""
