"""Files -> chunks -> vectors -> a crash-safe local index."""
