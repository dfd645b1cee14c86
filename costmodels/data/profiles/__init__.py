"""The shipped model profiles, one JSON file each (read with ``costmodels.profile(name)``)."""
