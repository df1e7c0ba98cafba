"""The few-shot, code-generation and evaluation lab (lm-evaluation-harness)."""
