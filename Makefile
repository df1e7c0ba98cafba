# Shortcuts; the README's two commands are the scripts themselves.
.PHONY: run test lint bench
run:
	bash scripts/run.sh
test:
	bash scripts/test.sh
lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy engine/calc
bench:
	.venv/bin/python bench/decode.py
