"""IntactOFL (Zeng et al., ACM MM 2024): the clients' models kept whole as experts, mixed by a
gate that the server trains on synthetic data (:mod:`.server`)."""
