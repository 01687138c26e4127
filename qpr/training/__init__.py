"""Training an encoder: the sampler, the SDML fit, several processes, distillation for the general encoder."""
