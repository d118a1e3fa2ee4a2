"""The only package that imports llama_cpp."""
