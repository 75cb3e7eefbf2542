"""Models and tokenizers by hub id: ``org/name`` or ``org/name@revision`` wherever a model or
tokenizer folder goes (``--model``, ``--init``, ``--generator``, ``--tokenizer``, ``import``).

A name that is a local path is that path, as before. Otherwise a name of the hub's form is
resolved by ``huggingface_hub.snapshot_download``: its cache (``HF_HOME``,
``HF_HUB_CACHE``), ``HF_HUB_OFFLINE`` (the cache alone), tokens from the environment
(``HF_TOKEN``, ``hf auth login``), downloading only the files electra reads. What comes back
is the snapshot folder (``.../models--ORG--NAME/snapshots/COMMIT``), which the model cards
read the id and revision from (``electra.saved.cards.hub_id``). Every failure is one line
naming the fix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from electra.errors import UserError

# org/name[@revision]: the hub's repository ids (letters, digits, - _ .), a revision a
# branch, tag or commit
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<rev>[\w./-]+))?$")

# What electra reads of a model folder (transformers' weights in either format, the released
# DeBERTa-V3 generator, configs, tokenizers, the card for its license)
FILES = ["*.json", "*.txt", "*.model", "*.safetensors", "pytorch_model.bin",
         "pytorch_model.generator.bin", "README.md"]


def is_hub_id(ref: str | Path) -> bool:
    """Whether ``ref`` is no local path and has the hub's ``org/name[@revision]`` form."""
    text = str(ref)
    return not Path(text).exists() and HUB_ID.match(text) is not None


def no_model(ref: str | Path, flag: str) -> UserError:
    """The refusal of a model reference that names nothing (no folder, and no hub id)."""
    return UserError(f"{flag} {ref}: no such folder; give a pretraining run, one of its "
                     f"models or checkpoints, a fine-tuned model or a transformers folder")


def names_nothing(ref: str | Path | None) -> bool:
    """Whether a model or tokenizer reference is neither a local path, nor a hub id's form,
    nor a store's URL (what the commands check first, before any import)."""
    text = str(ref or "")
    return bool(text) and "://" not in text and not Path(text).exists() and \
        HUB_ID.match(text) is None


def check_repo_id(repo: str, given: str, flag: str) -> None:
    """Refuse, in one line, a repository id the hub's own rules reject (``huggingface_hub``'s
    ``validate_repo_id``: ``--`` or ``..`` inside, a name starting or ending with ``-`` or
    ``.``, over 96 characters)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as err:
        rule = str(err).split(":")[0].rstrip(".")
        raise UserError(f"{flag} {given}: no such local folder, and {repo!r} is no hub id "
                        f"({rule}); check the name") from None


def resolve(ref: str | Path, flag: str) -> str:
    """``ref`` itself where it is a local path (or not of the hub's form: the caller says
    it is missing); else the folder of ``org/name[@revision]`` in the hub's cache,
    downloaded there unless ``HF_HUB_OFFLINE`` is set."""
    text = str(ref)
    found = HUB_ID.match(text)
    if Path(text).exists() or found is None:
        return text
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, rev = found["repo"], found["rev"]
    check_repo_id(repo, text, flag)
    cache = constants.HF_HUB_CACHE
    try:
        return snapshot_download(repo, revision=rev, allow_patterns=FILES)
    except LocalEntryNotFoundError:
        offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE")
        why = ("HF_HUB_OFFLINE is set" if offline else "the hub could not be reached")
        raise UserError(f"{flag} {text}: no such local folder, and {repo}"
                        f"{'@' + rev if rev else ''} is not in the hub's cache ({cache}) "
                        f"while {why}; download it where the hub is reachable (hf download "
                        f"{repo}{' --revision ' + rev if rev else ''}) or give a local "
                        f"folder") from None
    except GatedRepoError:
        raise UserError(f"{flag} {text}: {repo} is gated on the hub; accept its terms on its "
                        f"page and log in (hf auth login, or set HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise UserError(f"{flag} {text}: no such local folder, and no model {repo} on the "
                        f"hub (or it is private: log in with hf auth login, or set "
                        f"HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise UserError(f"{flag} {text}: {repo} has no revision {rev!r} on the hub; give "
                        f"a branch, tag or commit it has") from None
    except (HfHubHTTPError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{flag} {text}: the hub failed ({first[:160]}); try again, or set "
                        f"HF_HUB_OFFLINE=1 to use the cache ({cache})") from None
