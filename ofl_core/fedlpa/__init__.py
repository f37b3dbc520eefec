"""FedLPA (Liu et al., NeurIPS 2024): one-shot aggregation of the clients' layer-wise posteriors.
Each client uploads its weights with two Kronecker factors of each layer's Fisher
(:mod:`.factors`); the server solves for the global layer weights that best match the clients'
precision-weighted means (:mod:`.server`)."""
