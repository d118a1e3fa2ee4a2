"""specchat: a desktop app for local speculative decoding on llama.cpp."""

__version__ = "0.1.0"
