"""The encoder systems a bundle can hold, registered by name in ``registry``: the CNN and the LSTM, the other papers' encoders and the transformer backend."""
