"""Research protocols that only the benchmarks and ``qpr experiment`` run, never the library:
experiment arms, adversarial transfer, cluster quality, confidence intervals."""
