"""BERT pretraining and fine-tuning configs."""
