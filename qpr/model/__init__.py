"""The encoder and what it is made of: tokenizer and vocabulary with the hashing trick, the CNN, losses, word vectors."""
