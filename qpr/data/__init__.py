"""Questions and clusters: corpora and cluster files, uploads, question->answer logs, distant supervision, the shared domains."""
