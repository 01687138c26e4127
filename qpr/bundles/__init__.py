"""A trained model on disk: the bundle, training and retraining one, the general cold-start bundle."""
