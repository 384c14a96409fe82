"""data_pipeline: build the PaCo pairwise consistency dataset by sub-figure pairing."""
