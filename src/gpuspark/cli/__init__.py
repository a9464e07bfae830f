"""The ``gpuspark`` command: thin typer commands over the library."""
