"""The cells of each notebook, one module per notebook; notebooks/build.py writes them."""
