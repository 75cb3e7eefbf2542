"""What electra reads and writes: files, model folders, transformers folders, tokenizers,
and the ownership of every output."""
