"""The engine and everything around it. Never imports Qt."""
