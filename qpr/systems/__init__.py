"""The encoder systems a bundle can hold besides the CNN: the other papers' encoders and the transformer backend."""
