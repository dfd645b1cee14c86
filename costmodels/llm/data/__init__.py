"""Published large-model training results, transcribed with their citations (``narayanan2021_table1.json``)."""
