"""Measuring retrieval: H@1, MRR, ROC AUC, index recall, reranking metrics."""
