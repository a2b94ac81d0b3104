"""Model preparation (build time) and the model store (runtime)."""
