"""The target side: data files and sets, the training problem, losses, networks, the trainer, its convergence
certificate, model cards and the trained-target cache. Everything here knows the training images."""
