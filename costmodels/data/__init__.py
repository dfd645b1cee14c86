"""Data shipped with the cost models: model profiles (layer sizes and estimated times) as JSON files."""
