"""Training: datasets, recipes, runs and the command line."""
