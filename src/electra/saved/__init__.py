"""Saved models: a model folder's parts (``folders``: config, weights, tokenizer; written and
read back, weights fitted by name and shape), one opener for everything ``--model`` takes
(``models.open_model``: a run, one of its models or checkpoints, a fine-tuned model, a
transformers folder), and transformers' format (``hf_format``: the body-agnostic driver
over each body's own ``hf.py``; ``hf``:
`electra export` and `import`). Above the models, tasks and objectives it saves; below the
loops and commands that save and open them."""
