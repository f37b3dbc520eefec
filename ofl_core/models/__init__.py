"""Model zoo of ofl_core (SPEC §2): classifiers built by name, and DENSE's generator."""

from .base import Classifier
from .generator import Generator, init_generator_weights
from .registry import MODEL_NAMES, build_model

__all__ = ["MODEL_NAMES", "Classifier", "Generator", "build_model", "init_generator_weights"]
