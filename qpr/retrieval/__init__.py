"""Answering a query: the FAISS index, dense and BM25 retrievers, the hybrid, score calibration."""
