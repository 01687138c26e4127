"""What a person or a script does with the annotations and the model, in one order: export, retrain, compare, confirm or discard, record, remember (the layer between ``ui`` and ``annotations``)."""
