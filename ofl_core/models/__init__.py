"""Model zoo of ofl_core (SPEC §2): classifiers built by name, and DENSE's generator."""

from .base import INPUT_NORMS, Classifier, check_input_norm, normalize_input
from .generator import Generator, init_generator_weights
from .registry import MODEL_NAMES, build_model

__all__ = ["INPUT_NORMS", "MODEL_NAMES", "Classifier", "Generator", "build_model",
           "check_input_norm", "init_generator_weights", "normalize_input"]
