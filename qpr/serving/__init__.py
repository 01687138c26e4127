"""What the app serves: the served model and its locked swap, projects on disk, background training."""
