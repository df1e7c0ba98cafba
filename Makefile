# Shortcuts; the README's two commands are the scripts themselves.
.PHONY: run test lint bench
run:
	bash scripts/run.sh
test:
	bash scripts/test.sh
lint:
	.venv/bin/ruff check .
bench:
	.venv/bin/python bench/decode.py
