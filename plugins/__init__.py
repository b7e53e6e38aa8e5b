"""reconbench's built-in plugins. Each module is registered through the ``reconbench`` entry-point group in
pyproject.toml, exactly like a third-party plugin package."""
