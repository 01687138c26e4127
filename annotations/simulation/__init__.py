"""The simulated feedback loop: an annotator that knows the true clusters, candidate strategies (the runner: workflows.simulated_loop)."""
