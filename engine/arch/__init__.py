"""Model architecture from the real class: exact counts on the meta device; config.json from the hub."""
