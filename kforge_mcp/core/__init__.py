"""The bottom floor: the models every layer speaks, errors, settings, options, problems and sources, the home."""
