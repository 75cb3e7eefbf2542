"""The key-table machinery every body's transformers adapter (its ``hf.py``) uses: a table
is a list of (our key pattern, transformers' key pattern), ``{i}`` a layer index; a config
table is (our ModelConfig field, transformers' key, the default where the file has none)."""

from __future__ import annotations

import re
from typing import Any

import torch

from electra.config import ModelConfig, config_from_dict
from electra.errors import UserError

REQUIRED = object()  # a config.json key without a default


def _compile(table: list[tuple[str, str]], reverse: bool) -> list[tuple[re.Pattern[str], str]]:
    out = []
    for ours, theirs in table:
        src, dst = (theirs, ours) if reverse else (ours, theirs)
        pattern = re.escape(src).replace(re.escape("{i}"), r"(\d+)")
        out.append((re.compile(f"^{pattern}$"), dst.replace("{i}", r"\1")))
    return out


def rename(state: dict[str, torch.Tensor], table: list[tuple[str, str]],
           reverse: bool) -> dict[str, torch.Tensor]:
    """``state`` with every key renamed by ``table`` (ours -> theirs; theirs -> ours when
    ``reverse``); a key no row maps is a KeyError naming it."""
    rules = _compile(table, reverse)
    out = {}
    for key, value in state.items():
        for pattern, repl in rules:
            if pattern.match(key):
                out[pattern.sub(repl, key)] = value
                break
        else:
            raise KeyError(f"no mapping for parameter {key!r}")
    return out


def config_from(hf: dict[str, Any], table: list[tuple[str, str, Any]], where: str,
                what: str, **fixed: Any) -> ModelConfig:
    """Our ModelConfig from a transformers ``config.json`` by ``table``, ``fixed`` beside;
    a required key missing is a UserError naming it."""
    missing = [theirs for _, theirs, default in table if default is REQUIRED
               and theirs not in hf]
    if missing:
        raise UserError(f"{where}: {what} config needs {missing[0]!r}; the file is incomplete")
    values = {ours: hf.get(theirs, default) for ours, theirs, default in table}
    return config_from_dict(ModelConfig, {**values, "pad_token_id": hf.get("pad_token_id", 0)
                                          or 0, **fixed}, where)



def converted(folder: Any, what: str, convert: Any, state: dict[str, torch.Tensor],
              part: str, fresh: Any, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """``convert(state, part, made)``: our weights from a folder's, a discriminator given
    ``fresh(cfg)``'s head where the folder has none (``made()``: built only then); a
    weight no row maps is a UserError naming the folder and ``what`` it is not."""
    try:
        return convert(state, part, lambda: fresh(cfg))
    except KeyError as err:
        raise UserError(f"{folder}: unexpected weight {err}; not {what}") from None


def no_generator(folder: Any, what: str) -> UserError:
    """The refusal of a generator folder that holds none (``what``: the class it is not, and
    the weights it lacks)."""
    return UserError(f"{folder}: not {what}, so no generator; import it as the discriminator "
                     f"alone (a fresh generator is built)")


def rtd_beside(body: str, model_class: str, head: str) -> str:
    """The export note of a body transformers has no replaced-token class for."""
    return (f"transformers has no {body} class for replaced-token detection: discriminator/ "
            f"loads as {model_class}, and its RTD head ({head}) rides beside it for electra "
            f"detect and import")
