"""Applications built on the library: the demo, RLlib's guide workflow, dataset recipes,
scripted experts, plotting, metric reporting and the training loop the CLI runs."""
