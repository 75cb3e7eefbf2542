"""The CLI's commands, one module each (``electra.cli`` names them by string and imports
one when it runs): `pretrain`, `finetune` and `evaluate`, `predict`, `detect`. Each reads its
flags, checks them once, and calls the library below it (``electra.train``, the tasks, the
objectives, the model). ``electra.commands.finetuned`` is what a fine-tune leaves (its staging
folder and model folders)."""
