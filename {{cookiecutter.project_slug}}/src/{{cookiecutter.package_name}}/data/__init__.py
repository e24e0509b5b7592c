"""The data: sources, splits, batches and the LightningDataModule that joins them."""
