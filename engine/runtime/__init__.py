"""The torch side: load a model, generate, measure a run, log it; hardware facts."""
