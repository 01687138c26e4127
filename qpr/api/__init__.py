"""The public Python API: ``Retriever`` loads a bundle (a folder or a Hub repository) to search, encode, grow and save."""
