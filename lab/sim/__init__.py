"""Stream simulation: datasets, synthetic generators, the online protocol, metrics and plots."""
