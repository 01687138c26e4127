"""The retraining workflow (export, retrain, compare, confirm or discard, record, remember) and what drives it."""
